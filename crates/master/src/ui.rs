//! The status pages (Spark's master UI), rendered with `maud` from the status JSON that
//! `/json` serves: an overview (a summary, each queue's use against its limits, workers,
//! applications, drivers and masters), and a page for one application (its executors) and
//! for one driver. Every page refreshes itself every few seconds.

use maud::{DOCTYPE, Markup, html};
use serde_json::Value;

/// How often a page reloads itself, in seconds.
const REFRESH_S: u32 = 5;

const STYLE: &str = "body{font-family:sans-serif;margin:1em 2em}\
    td,th{padding:2px 10px;text-align:left}th{background:#eee}\
    .summary span{margin-right:1.5em}.bar{position:relative;width:300px;height:14px;\
    background:#eee;display:inline-block;vertical-align:middle}\
    .used{position:absolute;height:100%;background:#4a7}\
    .mark{position:absolute;top:-3px;height:20px;width:2px;background:#c33}\
    .mark.guaranteed{background:#393}";

/// A page with `title` and `body`, refreshing itself.
fn page(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html {
            head {
                meta charset="utf-8";
                meta http-equiv="refresh" content=(REFRESH_S);
                title { (title) }
                style { (maud::PreEscaped(STYLE)) }
            }
            body { (body) }
        }
    }
}

/// A JSON value as table text: strings as they are, null as nothing.
fn text(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn number(value: &Value) -> u64 {
    value.as_u64().unwrap_or(0)
}

fn list(value: &Value) -> &[Value] {
    value.as_array().map_or(&[], Vec::as_slice)
}

/// The overview of the cluster.
pub(crate) fn overview(status: &Value) -> Markup {
    let workers = list(&status["workers"]);
    let alive: Vec<&Value> = workers.iter().filter(|w| w["state"] == "ALIVE").collect();
    let sum = |field: &str| alive.iter().map(|w| number(&w[field])).sum::<u64>();
    let (cores, cores_used) = (sum("cores"), sum("cores_used"));
    let (memory, memory_used) = (sum("memory_mb"), sum("memory_used_mb"));
    let apps = list(&status["apps"]);
    let completed_apps = list(&status["completed_apps"]);
    let drivers = list(&status["drivers"]);
    let running_drivers = drivers.iter().filter(|d| d["state"] == "RUNNING").count();
    let ended_drivers = drivers
        .iter()
        .filter(|d| !matches!(d["state"].as_str(), Some("SUBMITTED" | "RUNNING")))
        .count();
    page(
        "Muster",
        html! {
            h1 { "Muster" }
            p.summary {
                span { "leader " (text(&status["leader"])) }
                span { "term " (text(&status["term"])) }
                span { (text(&status["recovery_state"])) }
                span { "workers " (alive.len()) " ALIVE of " (workers.len()) }
                span { "cores " (cores_used) " / " (cores) }
                span { "memory " (memory_used) " / " (memory) " MB" }
                span { "applications " (apps.len()) " running, " (completed_apps.len()) " completed" }
                span { "drivers " (running_drivers) " running, " (ended_drivers) " ended" }
            }
            (queues(status, cores))
            h2 { "Workers" }
            table {
                tr { th { "id" } th { "host" } th { "state" } th { "cores" } th { "memory (MB)" } }
                @for w in workers {
                    tr {
                        td { (text(&w["id"])) }
                        td { (text(&w["host"])) }
                        td { @if w["draining"] == true { "DRAINING" } @else { (text(&w["state"])) } }
                        td { (text(&w["cores_used"])) " / " (text(&w["cores"])) }
                        td { (text(&w["memory_used_mb"])) " / " (text(&w["memory_mb"])) }
                    }
                }
            }
            h2 { "Applications" }
            table {
                tr { th { "id" } th { "name" } th { "user" } th { "queue" } th { "state" } th { "cores" } th { "executors" } th { "waiting" } }
                @for a in apps {
                    tr {
                        td { a href={ "app/" (text(&a["id"])) } { (text(&a["id"])) } }
                        td { (name_linked_to_ui(a)) }
                        td { (text(&a["user"])) }
                        td { (text(&a["queue"])) }
                        td { (text(&a["state"])) }
                        td { (text(&a["cores_granted"])) }
                        td { (list(&a["executors"]).len()) }
                        td { (text(&a["waiting"])) }
                    }
                }
            }
            @if !completed_apps.is_empty() {
                h2 { "Completed applications" }
                table {
                    tr { th { "id" } th { "name" } th { "user" } th { "queue" } th { "state" } }
                    @for a in completed_apps.iter().rev() {
                        tr {
                            td { (text(&a["id"])) }
                            td { (text(&a["name"])) }
                            td { (text(&a["user"])) }
                            td { (text(&a["queue"])) }
                            td { (text(&a["state"])) }
                        }
                    }
                }
            }
            h2 { "Drivers" }
            (drivers_table(drivers))
            h2 { "Masters" }
            table {
                tr { th { "id" } th { "address" } th { "role" } }
                @for m in list(&status["members"]) {
                    tr {
                        td { (text(&m["id"])) }
                        td { (text(&m["addr"])) }
                        td { (text(&m["role"])) @if m["silent"] == true { " (silent: not heard from)" } }
                    }
                }
            }
            @if !list(&status["kept"]).is_empty() {
                h2 { "Room kept for prior work (preemption)" }
                table {
                    tr { th { "for" } th { "worker" } th { "cores" } th { "memory (MB)" } }
                    @for k in list(&status["kept"]) {
                        tr {
                            td { (text(&k["owner"])) }
                            td { (text(&k["worker"])) }
                            td { (text(&k["cores"])) }
                            td { (text(&k["memory_mb"])) }
                        }
                    }
                }
            }
        },
    )
}

/// Who may submit to queue `q`, besides the admins.
fn submitters(q: &Value) -> String {
    match q["submit"].as_array() {
        Some(users) if users.iter().any(|u| u == "*") => "everyone".to_owned(),
        Some(users) if users.is_empty() => "admins".to_owned(),
        Some(users) => users.iter().map(text).collect::<Vec<_>>().join(", "),
        None if q["prior"] == true => "admins".to_owned(),
        None => "everyone".to_owned(),
    }
}

/// The queue tree, each queue's executor cores (those below it, for a parent) against the
/// ALIVE cores, with its guarantee and maximum marked: a prior leaf's work is served first;
/// a normal queue gets up to its guarantee, borrows up to its maximum, and uses at most
/// `threshold` of a worker that runs prior work.
fn queues(status: &Value, cores: u64) -> Markup {
    let percent = |part: f64| format!("{:.1}%", (part * 100.0).clamp(0.0, 100.0));
    let settings = |q: &Value| {
        let mut parts = Vec::new();
        if q["prior"] == true {
            parts.push("prior".to_owned());
        }
        if !q["capacity"].is_null() {
            parts.push(format!("capacity {}", text(&q["capacity"])));
        }
        if q["prior"] != true {
            parts.push(format!("max {}", text(&q["max_capacity"])));
            if q["leaf"] != false {
                parts.push(format!("threshold {}", text(&q["threshold"])));
            }
        }
        parts.join(", ")
    };
    html! {
        h2 { "Queues" }
        table {
            tr { th { "queue" } th { "settings" } th { "who may submit" } th { "executor cores" } th { "of the cluster" } }
            @for q in list(&status["queues"]) {
                @let held = number(&q["cores_used"]);
                @let share = if cores == 0 { 0.0 } else { held as f64 / cores as f64 };
                tr {
                    td style={ "padding-left:" (number(&q["depth"]) as f64 * 1.5 + 0.3) "em" } { (text(&q["name"])) }
                    td { (settings(q)) }
                    td { @if q["leaf"] == false { "(its leaves)" } @else { (submitters(q)) } }
                    td { (held) " / " (cores) }
                    td {
                        span.bar title={ (percent(share)) " of the ALIVE cores" } {
                            span.used style={ "width:" (percent(share)) } {}
                            @if let Some(guaranteed) = q["guaranteed_share"].as_f64() {
                                span.mark.guaranteed title="guaranteed" style={ "left:" (percent(guaranteed)) } {}
                            }
                            @if q["prior"] != true {
                                @if let Some(max) = q["max_share"].as_f64() {
                                    span.mark title="max capacity" style={ "left:" (percent(max)) } {}
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn drivers_table(drivers: &[Value]) -> Markup {
    html! {
        table {
            tr { th { "id" } th { "name" } th { "user" } th { "queue" } th { "state" } th { "worker" } th { "exit code" } th { "waiting" } }
            @for d in drivers {
                tr {
                    td { a href={ "driver/" (text(&d["id"])) } { (text(&d["id"])) } }
                    td { (text(&d["name"])) }
                    td { (text(&d["user"])) }
                    td { (text(&d["queue"])) }
                    td { (text(&d["state"])) }
                    td { (text(&d["worker"])) }
                    td { (text(&d["exit_code"])) }
                    td { (text(&d["waiting"])) }
                }
            }
        }
    }
}

/// An application's name, linked to its own UI when it gave one (as Spark's master page does).
fn name_linked_to_ui(app: &Value) -> Markup {
    match app["ui_address"].as_str() {
        Some(ui) => html! { a href=(ui) { (text(&app["name"])) } },
        None => html! { (text(&app["name"])) },
    }
}

/// The page of application `id`, if the status has it.
pub(crate) fn app(status: &Value, id: &str) -> Option<Markup> {
    let app = list(&status["apps"]).iter().find(|a| a["id"] == id)?;
    Some(page(
        id,
        html! {
            p { a href="../" { "Muster" } }
            h1 { "Application " (id) }
            p.summary {
                span { "name " (text(&app["name"])) }
                span { "user " (text(&app["user"])) }
                span { "queue " (text(&app["queue"])) }
                span { (text(&app["state"])) }
                span { "cores " (text(&app["cores_granted"])) }
            }
            @if let Some(ui) = app["ui_address"].as_str() {
                p { "Its own UI: " a href=(ui) { (ui) } }
            }
            @if !app["waiting"].is_null() { p { "Waiting: " (text(&app["waiting"])) } }
            h2 { "Executors" }
            table {
                tr {
                    th { "id" } th { "worker" } th { "state" } th { "cores" } th { "memory (MB)" }
                    th { "memory used (MB)" } th { "CPU (s)" } th { "pid" } th { "output" }
                }
                @for e in list(&app["executors"]) {
                    tr {
                        td { (text(&e["id"])) }
                        td { (text(&e["worker"])) }
                        td { (text(&e["state"])) }
                        td { (text(&e["cores"])) }
                        td { (text(&e["memory_mb"])) }
                        td { (text(&e["usage"]["memory_mb"])) }
                        td { (text(&e["usage"]["cpu_seconds"])) }
                        td { (text(&e["pid"])) }
                        td { code { "muster logs " (id) "/" (text(&e["id"])) } }
                    }
                }
            }
        },
    ))
}

/// The page of driver `id`, if the status has it.
pub(crate) fn driver(status: &Value, id: &str) -> Option<Markup> {
    let driver = list(&status["drivers"]).iter().find(|d| d["id"] == id)?;
    Some(page(
        id,
        html! {
            p { a href="../" { "Muster" } }
            h1 { "Driver " (id) }
            table {
                @for field in ["name", "user", "queue", "state", "worker", "pid", "exit_code", "waiting"] {
                    tr { th { (field) } td { (text(&driver[field])) } }
                }
                tr { th { "memory used (MB)" } td { (text(&driver["usage"]["memory_mb"])) } }
                tr { th { "CPU (s)" } td { (text(&driver["usage"]["cpu_seconds"])) } }
            }
            p { "Its output: " code { "muster logs " (id) } " (" code { "--stderr" } ", "
                code { "--follow" } ")." }
        },
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{app, driver, overview};

    fn status() -> serde_json::Value {
        json!({
            "leader": 2, "term": 7, "recovery_state": "ALIVE",
            "members": [{"id": 2, "addr": "m2:7077", "role": "leader", "silent": false},
                        {"id": 3, "addr": "m3:7077", "role": "follower", "silent": true}],
            "workers": [
                {"id": "w1", "host": "h1", "state": "ALIVE", "draining": false,
                 "cores": 8, "cores_used": 6, "memory_mb": 8192, "memory_used_mb": 2048},
                {"id": "w2", "host": "h2", "state": "ALIVE", "draining": true,
                 "cores": 8, "cores_used": 0, "memory_mb": 8192, "memory_used_mb": 0},
            ],
            "apps": [{"id": "app-1", "name": "etl", "user": "alice", "queue": "team.batch", "state": "RUNNING",
                      "cores_granted": 4, "waiting": null,
                      "ui_address": "http://h0:4040", "executors": [
                {"id": 0, "worker": "w1", "cores": 2, "memory_mb": 512, "state": "RUNNING", "pid": 41,
                 "usage": {"memory_mb": 300, "cpu_seconds": 12.5}},
                {"id": 1, "worker": "w1", "cores": 2, "memory_mb": 512, "state": "LAUNCHING", "pid": null},
            ]}],
            "completed_apps": [{"id": "app-0", "name": "old", "user": "bob", "queue": "default", "state": "FINISHED"}],
            "drivers": [{"id": "driver-1", "name": "d", "user": null, "queue": "default", "state": "FINISHED",
                         "worker": "w1", "pid": 40, "exit_code": 0, "waiting": null}],
            "queues": [
                {"name": "team", "prior": false, "threshold": 1.0, "max_capacity": 1.0,
                 "capacity": 0.5, "submit": null, "administer": [],
                 "depth": 0, "leaf": false, "guaranteed_share": 0.5, "max_share": 1.0, "cores_used": 4},
                {"name": "team.batch", "prior": false, "threshold": 0.8, "max_capacity": 1.0,
                 "capacity": 1.0, "submit": null, "administer": [],
                 "depth": 1, "leaf": true, "guaranteed_share": 0.5, "max_share": 1.0, "cores_used": 4},
                {"name": "prod", "prior": true, "threshold": 1.0, "max_capacity": 1.0,
                 "capacity": 0.5, "submit": ["alice", "bob"], "administer": [],
                 "depth": 0, "leaf": true, "guaranteed_share": 0.5, "max_share": 1.0, "cores_used": 0},
            ],
            "kept": [],
        })
    }

    #[test]
    fn the_overview_sums_up_the_cluster_and_each_queue() {
        let page = overview(&status()).into_string();
        for part in [
            "workers 2 ALIVE of 2",
            "cores 6 / 16",
            "drivers 0 running, 1 ended",
            "applications 1 running, 1 completed",
            "<td>follower (silent: not heard from)</td>",
            "<td>app-0</td><td>old</td><td>bob</td><td>default</td><td>FINISHED</td>",
            "DRAINING",
            "<td>4 / 16</td>",
            "width:25.0%",
            "left:50.0%",
            r#"href="app/app-1""#,
            r#"<td><a href="http://h0:4040">etl</a></td><td>alice</td>"#,
            r#"<td style="padding-left:0.3em">team</td><td>capacity 0.5, max 1.0</td><td>(its leaves)</td><td>4 / 16</td>"#,
            r#"<td style="padding-left:1.8em">team.batch</td><td>capacity 1.0, max 1.0, threshold 0.8</td><td>everyone</td>"#,
            r#"<td style="padding-left:0.3em">prod</td><td>prior, capacity 0.5</td><td>alice, bob</td>"#,
            r#"class="mark guaranteed" title="guaranteed" style="left:50.0%""#,
        ] {
            assert!(page.contains(part), "{part} in {page}");
        }
    }

    #[test]
    fn an_application_page_lists_its_executors_and_a_driver_page_its_end() {
        let page = app(&status(), "app-1").unwrap().into_string();
        assert!(page.contains("<td>41</td>"), "{page}");
        assert!(
            page.contains("<td>512</td><td>300</td><td>12.5</td>"),
            "memory granted, then used, and CPU time: {page}"
        );
        assert_eq!(page.matches("<td>w1</td>").count(), 2, "{page}");
        assert!(page.contains("LAUNCHING"), "{page}");
        assert!(page.contains("<code>muster logs app-1/1</code>"), "{page}");
        assert!(
            page.contains(r#"Its own UI: <a href="http://h0:4040">http://h0:4040</a>"#),
            "{page}"
        );
        let page = driver(&status(), "driver-1").unwrap().into_string();
        assert!(page.contains("<th>exit_code</th><td>0</td>"), "{page}");
        assert!(app(&status(), "app-9").is_none());
        assert!(driver(&status(), "driver-9").is_none());
    }
}
