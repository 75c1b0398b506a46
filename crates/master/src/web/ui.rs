//! The status pages (Spark's master UI), rendered with `maud` from the status view that
//! `/json` serves as JSON: an overview (a summary, each queue's use against its limits, workers,
//! applications, drivers and masters), and a page for each application (its executors, and
//! the ended ones kept), each driver and each worker (its resources and what runs there).
//! Every page refreshes itself every few seconds.

use std::fmt::Display;

use maud::{DOCTYPE, Markup, html};
use muster_core::ids::Timestamp;
use muster_proto::v1::WorkerState;

use crate::web::view::{
    AppView, BuildView, DriverView, EndedAppView, ExecutorView, QueueRow, ShuffleServiceView,
    StatusView, WorkerView, duration,
};

/// How often a page reloads itself, in seconds.
const REFRESH_S: u32 = 5;

const STYLE: &str = "body{font-family:sans-serif;margin:1em 2em}\
    td,th{padding:2px 10px;text-align:left}th{background:#eee}\
    .summary span{margin-right:1.5em}.bar{position:relative;width:300px;height:14px;\
    background:#eee;display:inline-block;vertical-align:middle}\
    .used{position:absolute;height:100%;background:#4a7}\
    .mark{position:absolute;top:-3px;height:20px;width:2px;background:#c33}\
    .mark.guaranteed{background:#393}";

/// What a memory column holds.
const GRANTED_MEMORY: &str =
    "the memory each process is granted and limited to: for Spark, heap and overhead";

/// Who submitted a piece of work: a named user, or the cluster's own credential.
fn user(named: Option<&str>) -> Markup {
    html! {
        @match named {
            Some(name) => (name),
            None => i title="submitted with the cluster's own credential" { "cluster" },
        }
    }
}

/// A worker's custom resources, each as used of its amount, with the addresses it named.
fn custom_resources(w: &WorkerView) -> String {
    w.resources
        .iter()
        .map(|(name, amount)| {
            let used = w.resources_used.get(name).copied().unwrap_or(0);
            match w.addresses.get(name) {
                Some(addresses) => format!("{name} {used} / {amount} ({})", addresses.join(", ")),
                None => format!("{name} {used} / {amount}"),
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The URLs to give Spark and the CLI: the masters (the plug-in's `spark-muster://` URL, and
/// `MUSTER_MASTERS`), and this master's Spark REST gateway, when it serves one.
fn submit_urls(status: &StatusView, spark_rest: Option<&str>) -> Markup {
    let masters = status
        .members
        .iter()
        .map(|m| m.addr.as_str())
        .collect::<Vec<_>>()
        .join(",");
    html! {
        p {
            "Submit with " code { "spark-submit --master spark-muster://" (masters) } " (the plug-in, client mode) or "
            code { "MUSTER_MASTERS=" (masters) " muster submit" } "."
            @if let Some(rest) = spark_rest {
                " Cluster mode through this master's Spark REST gateway: "
                code { "spark-submit --master spark://" (rest) "/TOKEN --deploy-mode cluster" }
                ", with the token " code { "muster rest-token" } " prints."
            }
        }
    }
}

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

/// An optional value as table text: nothing when unset.
fn or_blank<T: Display>(value: Option<T>) -> String {
    value.map(|v| v.to_string()).unwrap_or_default()
}

/// The overview of the cluster, with `charts` of what the queues held below their table.
/// How many drivers the overview lists at once; the rest are a link away.
pub(crate) const DRIVERS_PER_PAGE: u32 = 500;

pub(crate) fn overview(
    status: &StatusView,
    charts: Markup,
    now_ms: u64,
    spark_rest: Option<&str>,
) -> Markup {
    let workers = &status.workers;
    let alive: Vec<&WorkerView> = workers
        .iter()
        .filter(|w| w.state == WorkerState::Alive)
        .collect();
    let cores: u64 = alive.iter().map(|w| u64::from(w.cores)).sum();
    let cores_used: u64 = alive.iter().map(|w| u64::from(w.cores_used)).sum();
    let memory: u64 = alive.iter().map(|w| w.memory_mb).sum();
    let memory_used: u64 = alive.iter().map(|w| w.memory_used_mb).sum();
    let counts = status.driver_counts;
    let all_drivers = counts.waiting + counts.running + counts.ended;
    page(
        "Muster",
        html! {
            h1 { "Muster" }
            p.summary {
                span { "leader " (status.leader) }
                span { "term " (status.term) }
                span { (status.recovery_state.name()) }
                span { "workers " (alive.len()) " ALIVE of " (workers.len()) }
                span { "cores " (cores_used) " / " (cores) }
                span { "memory " (memory_used) " / " (memory) " MB" }
                span { "applications " (status.apps.len()) " running, " (status.completed_apps.len()) " completed" }
                span { "drivers " (counts.running) " running, " (counts.waiting) " waiting, " (counts.ended) " ended" }
            }
            (submit_urls(status, spark_rest))
            (queues(&status.queues, cores))
            @if let Some(warning) = &status.preemption_warning {
                p { strong { "Preemption can never stop an executor: " } (warning) "." }
            }
            (charts)
            h2 { "Workers" }
            table {
                tr {
                    th { "id" } th { "host" } th { "state" } th { "cores" } th { "memory (MB)" }
                    th { "resources" }
                }
                @for w in workers {
                    tr {
                        td { a href={ "worker/" (w.id) } { (w.id) } }
                        td { (w.host) }
                        td { @if w.draining { "DRAINING" } @else { (w.state.name()) } }
                        td { (w.cores_used) " / " (w.cores) }
                        td { (w.memory_used_mb) " / " (w.memory_mb) }
                        td { (custom_resources(w)) }
                    }
                }
            }
            h2 { "Applications" }
            table {
                tr {
                    th { "id" } th { "name" } th { "user" } th { "queue" } th { "state" } th { "cores" }
                    th { "executors" } th title=(GRANTED_MEMORY) { "memory per executor (MB)" }
                    th { "submitted" } th { "running for" } th { "waiting" }
                }
                @for a in &status.apps {
                    tr {
                        td { a href={ "app/" (a.id) } { (a.id) } }
                        td { (name_linked_to_ui(a)) }
                        td { (user(a.user.as_deref())) }
                        td { (a.queue) }
                        td { (a.state.name()) }
                        td { (a.cores_granted) }
                        td { (a.executors.len()) }
                        td { (or_blank((a.executor_memory_mb > 0).then_some(a.executor_memory_mb))) }
                        td { (Timestamp(a.submitted_at_ms).utc()) }
                        td { (duration(now_ms.saturating_sub(a.submitted_at_ms))) }
                        td { (or_blank(a.waiting.as_ref())) }
                    }
                }
            }
            @if !status.completed_apps.is_empty() {
                h2 { "Completed applications" }
                table {
                    tr {
                        th { "id" } th { "name" } th { "user" } th { "queue" } th { "state" }
                        th { "submitted" } th { "from submission to end" }
                    }
                    @for a in status.completed_apps.iter().rev() {
                        tr {
                            td { a href={ "app/" (a.id) } { (a.id) } }
                            td { (a.name) }
                            td { (user(a.user.as_deref())) }
                            td { (a.queue) }
                            td { (a.state.name()) }
                            td { (Timestamp(a.submitted_at_ms).utc()) }
                            td { (or_blank(a.ended_at_ms.map(|ended| duration(ended.saturating_sub(a.submitted_at_ms))))) }
                        }
                    }
                }
            }
            h2 { "Drivers" }
            (drivers_table(&status.drivers))
            @if status.drivers.len() < all_drivers as usize {
                p {
                    (status.drivers.len()) " of " (all_drivers) " drivers, in id order: "
                    a href="?" { "the first" }
                    @if let Some(next) = &status.drivers_next {
                        ", " a href={ "?drivers_from=" (next) } { "the next " (DRIVERS_PER_PAGE) " →" }
                    }
                }
            }
            h2 { "Masters" }
            p {
                "Cluster log format " (status.log_format) " (release "
                (status.log_format_release) "): masters of older releases can no longer join."
                @if let Some(held) = status.held_log_format() {
                    " It is " (held) "."
                }
            }
            table {
                tr { th { "id" } th { "address" } th { "role" } th { "build" } }
                @for m in &status.members {
                    tr {
                        td { (m.id) }
                        td { (m.addr) }
                        td { (m.role.name()) @if m.silent { " (silent: not heard from)" } }
                        td { (BuildView::line(m.build.as_ref())) }
                    }
                }
            }
            @if !status.kept.is_empty() {
                h2 { "Room kept (for prior work that preempted, or a waiting gang)" }
                table {
                    tr { th { "for" } th { "worker" } th { "cores" } th { "memory (MB)" } }
                    @for k in &status.kept {
                        tr {
                            td { (k.owner) }
                            td { (k.worker) }
                            td { (k.cores) }
                            td { (k.memory_mb) }
                        }
                    }
                }
            }
        },
    )
}

/// The queue tree, each queue's executor cores (those below it, for a parent) against the
/// ALIVE cores, with its guarantee and maximum marked: a prior leaf's work is served first;
/// a normal queue gets up to its guarantee, borrows up to its maximum, and uses at most
/// `threshold` of a worker that runs prior work.
fn queues(queues: &[QueueRow], cores: u64) -> Markup {
    let percent = |part: f64| format!("{:.1}%", (part * 100.0).clamp(0.0, 100.0));
    let settings = |q: &QueueRow| {
        let mut parts = Vec::new();
        if q.prior {
            parts.push("prior".to_owned());
        }
        if let Some(capacity) = q.capacity {
            parts.push(format!("capacity {capacity:?}"));
        }
        if !q.prior {
            parts.push(format!("max {:?}", q.max_capacity));
            if q.leaf {
                parts.push(format!("threshold {:?}", q.threshold));
            }
        }
        if let Some(share) = q.driver_share {
            parts.push(format!("driver share {share:?}"));
        }
        if !q.ordering.is_fifo() {
            parts.push(format!("ordering {}", q.ordering));
        }
        for (user, weight) in &q.user_weights {
            parts.push(format!("{user} weighs {weight:?}"));
        }
        if let Some(limit) = q.user_limit {
            parts.push(format!("user limit {limit:?}"));
        }
        parts.join(", ")
    };
    html! {
        h2 { "Queues" }
        table {
            tr { th { "queue" } th { "settings" } th { "who may submit" } th { "executor cores" } th { "of the cluster" } }
            @for q in queues {
                @let share = if cores == 0 { 0.0 } else { q.cores_used as f64 / cores as f64 };
                tr {
                    td style={ "padding-left:" (q.depth as f64 * 1.5 + 0.3) "em" } { (q.name) }
                    td { (settings(q)) }
                    td { @if q.leaf { (q.submitters()) } @else { "(its leaves)" } }
                    td { (q.cores_used) " / " (cores) }
                    td {
                        span.bar title={ (percent(share)) " of the ALIVE cores" } {
                            span.used style={ "width:" (percent(share)) } {}
                            @if let Some(guaranteed) = q.guaranteed_share {
                                span.mark.guaranteed title="guaranteed" style={ "left:" (percent(guaranteed)) } {}
                            }
                            @if !q.prior {
                                span.mark title="max capacity" style={ "left:" (percent(q.max_share)) } {}
                            }
                        }
                    }
                }
            }
        }
    }
}

fn drivers_table(drivers: &[DriverView]) -> Markup {
    html! {
        table {
            tr {
                th { "id" } th { "name" } th { "user" } th { "queue" } th { "submitted" }
                th { "cores" } th title=(GRANTED_MEMORY) { "memory granted (MB)" } th { "state" } th { "worker" }
                th { "exit code" } th { "waiting or restarts" }
            }
            @for d in drivers {
                tr {
                    td { a href={ "driver/" (d.id) } { (d.id) } }
                    td { (d.name) }
                    td { (user(d.user.as_deref())) }
                    td { (d.queue) }
                    td { (Timestamp(d.submitted_at_ms).utc()) }
                    td { (d.cores) }
                    td { (d.memory_mb) }
                    td { (d.state.name()) }
                    td { (or_blank(d.worker.as_ref())) }
                    td { (or_blank(d.exit_code)) }
                    td { (or_blank(d.waiting.clone().or_else(|| d.restarts.map(|r| r.describe())))) }
                }
            }
        }
    }
}

/// An application's name, linked to its own UI when it gave one (as Spark's master page does).
fn name_linked_to_ui(app: &AppView) -> Markup {
    match &app.ui_address {
        Some(ui) => html! { a href=(ui) { (app.name) } },
        None => html! { (app.name) },
    }
}

/// The page of application `id`, active or completed, if the status has it; an active one
/// with a kill button whose form carries `form_key`, a completed one linking its page on
/// Spark's `history_server`, where there is one.
pub(crate) fn app(
    status: &StatusView,
    id: &str,
    form_key: Option<&str>,
    history_server: Option<&str>,
) -> Option<Markup> {
    match status.apps.iter().find(|a| a.id == id) {
        Some(app) => Some(active_app(app, form_key)),
        None => status
            .completed_apps
            .iter()
            .find(|a| a.id == id)
            .map(|app| completed_app(app, history_server)),
    }
}

/// An application's ended executors: where each ran, how it ended, and how to read its
/// output.
fn ended_executors(app: &str, executors: &[ExecutorView]) -> Markup {
    html! {
        h2 { "Ended executors" }
        @if executors.is_empty() {
            p { "None kept." }
        } @else {
            table {
                tr {
                    th { "id" } th { "worker" } th { "state" } th { "exit code" } th { "cores" }
                    th title=(GRANTED_MEMORY) { "memory granted (MB)" } th { "output" }
                }
                @for e in executors {
                    tr {
                        td { (e.id) }
                        td { (e.worker) }
                        td { (e.state.name()) }
                        td { (or_blank(e.exit_code)) }
                        td { (e.cores) }
                        td { (e.memory_mb) }
                        td { (output_links(&format!("{app}/{}", e.id))) " or " code { "muster logs " (app) "/" (e.id) } }
                    }
                }
            }
        }
    }
}

/// The page of a completed application.
fn completed_app(app: &EndedAppView, history_server: Option<&str>) -> Markup {
    let id = &app.id;
    let took = app
        .ended_at_ms
        .map(|ended| duration(ended.saturating_sub(app.submitted_at_ms)));
    let heading = AppHeading {
        id,
        name: &app.name,
        user: app.user.as_deref(),
        queue: &app.queue,
        state: app.state.name(),
        submitted_at_ms: app.submitted_at_ms,
    };
    page(
        id,
        html! {
            (heading.render(html! { span { "from submission to end " (or_blank(took)) } }))
            @if let Some(history) = history_server.filter(|_| app.logs_events) {
                @let url = format!("{}/history/{id}/jobs/", history.trim_end_matches('/'));
                p { "Its jobs, stages and tasks, from the events it logged: "
                    a href=(url) { "Spark's history server" } }
            }
            (ended_executors(id, &app.ended_executors))
        },
    )
}

/// The top of an application's page.
struct AppHeading<'a> {
    id: &'a str,
    name: &'a str,
    user: Option<&'a str>,
    queue: &'a str,
    state: &'a str,
    submitted_at_ms: u64,
}

impl AppHeading<'_> {
    /// The heading, with `more` at the end of its summary.
    fn render(&self, more: Markup) -> Markup {
        html! {
            p { a href="../" { "Muster" } }
            h1 { "Application " (self.id) }
            p.summary {
                span { "name " (self.name) }
                span { "user " (or_blank(self.user)) }
                span { "queue " (self.queue) }
                span { (self.state) }
                span { "submitted " (Timestamp(self.submitted_at_ms).utc()) }
                (more)
            }
        }
    }
}

/// The page of an active application.
fn active_app(app: &AppView, form_key: Option<&str>) -> Markup {
    let id = &app.id;
    let heading = AppHeading {
        id,
        name: &app.name,
        user: app.user.as_deref(),
        queue: &app.queue,
        state: app.state.name(),
        submitted_at_ms: app.submitted_at_ms,
    };
    page(
        id,
        html! {
            (heading.render(html! { span { "cores " (app.cores_granted) } }))
            p { (kill_button(id, &format!("/app/{id}"), form_key)) }
            @if app.priority != 0 {
                p { "Priority in its queue: " (app.priority) }
            }
            @if let Some(driver) = &app.driver {
                p { "Its driver: " a href={ "../driver/" (driver) } { (driver) } }
            }
            @if let Some(ui) = &app.ui_address {
                p { "Its own UI: " a href=(ui) { (ui) } }
            }
            @if let Some(waiting) = &app.waiting { p { "Waiting: " (waiting) } }
            h2 { "Executors" }
            table {
                tr {
                    th { "id" } th { "worker" } th { "state" } th { "cores" } th title=(GRANTED_MEMORY) { "memory granted (MB)" }
                    th { "memory used (MB)" } th { "CPU (s)" } th { "pid" } th { "output" }
                }
                @for e in &app.executors {
                    tr {
                        td { (e.id) }
                        td { (e.worker) }
                        td { (e.state.name()) }
                        td { (e.cores) }
                        td { (e.memory_mb) }
                        td { (or_blank(e.usage.map(|u| u.memory_mb))) }
                        td { (or_blank(e.usage.and_then(|u| u.cpu_seconds))) }
                        td { (or_blank(e.pid)) }
                        td { (output_links(&format!("{id}/{}", e.id))) " or " code { "muster logs " (id) "/" (e.id) } }
                    }
                }
            }
            (ended_executors(id, &app.ended_executors))
        },
    )
}

/// The page of worker `id`, if the status has it: its resources and what runs there.
pub(crate) fn worker(status: &StatusView, id: &str) -> Option<Markup> {
    let w = status.workers.iter().find(|w| w.id == id)?;
    let executors: Vec<(&AppView, &ExecutorView)> = status
        .apps
        .iter()
        .flat_map(|a| a.executors.iter().map(move |e| (a, e)))
        .filter(|(_, e)| e.worker == id)
        .collect();
    let (drivers, ended_drivers): (Vec<&DriverView>, Vec<&DriverView>) = status
        .drivers
        .iter()
        .filter(|d| d.worker.as_deref() == Some(id))
        .partition(|d| d.ended_at_ms.is_none());
    // Ended executors the masters keep, of running applications and completed ones.
    let ended_executors: Vec<(&str, &ExecutorView)> = status
        .apps
        .iter()
        .map(|a| (a.id.as_str(), &a.ended_executors))
        .chain(
            status
                .completed_apps
                .iter()
                .map(|a| (a.id.as_str(), &a.ended_executors)),
        )
        .flat_map(|(app, ended)| ended.iter().map(move |e| (app, e)))
        .filter(|(_, e)| e.worker == id)
        .collect();
    let custom = |name: &String, total: &u32| {
        let used = w.resources_used.get(name).copied().unwrap_or(0);
        let addresses = w
            .addresses
            .get(name)
            .map(|a| a.join(", "))
            .unwrap_or_default();
        html! { tr { td { (name) } td { (used) " / " (total) } td { (addresses) } } }
    };
    Some(page(
        id,
        html! {
            p { a href="../" { "Muster" } }
            h1 { "Worker " (id) }
            p.summary {
                span { "host " (w.host) }
                span { @if w.draining { "DRAINING" } @else { (w.state.name()) } }
                span { "cores " (w.cores_used) " / " (w.cores) }
                span { "memory (MB) " (w.memory_used_mb) " / " (w.memory_mb) }
                @if let Some(build) = &w.build { span { "build " (build.version) } }
                @if w.shuffle_service.is_some() {
                    span { "shuffle service " (ShuffleServiceView::line(w.shuffle_service.as_ref())) }
                }
            }
            @if !w.resources.is_empty() {
                h2 { "Custom resources" }
                table {
                    tr { th { "name" } th { "used" } th { "addresses" } }
                    @for (name, total) in &w.resources { (custom(name, total)) }
                }
            }
            h2 { "Executors" }
            table {
                tr {
                    th { "application" } th { "id" } th { "state" } th { "cores" }
                    th title=(GRANTED_MEMORY) { "memory granted (MB)" } th { "memory used (MB)" } th { "CPU (s)" } th { "pid" }
                    th { "output" }
                }
                @for (a, e) in &executors {
                    tr {
                        td { a href={ "../app/" (a.id) } { (a.id) } }
                        td { (e.id) }
                        td { (e.state.name()) }
                        td { (e.cores) }
                        td { (e.memory_mb) }
                        td { (or_blank(e.usage.map(|u| u.memory_mb))) }
                        td { (or_blank(e.usage.and_then(|u| u.cpu_seconds))) }
                        td { (or_blank(e.pid)) }
                        td { (output_links(&format!("{}/{}", a.id, e.id))) " or " code { "muster logs " (a.id) "/" (e.id) } }
                    }
                }
            }
            h2 { "Drivers" }
            table {
                tr {
                    th { "id" } th { "name" } th { "state" } th { "cores" } th title=(GRANTED_MEMORY) { "memory granted (MB)" }
                    th { "memory used (MB)" } th { "pid" }
                }
                @for d in &drivers {
                    tr {
                        td { a href={ "../driver/" (d.id) } { (d.id) } }
                        td { (d.name) }
                        td { (d.state.name()) }
                        td { (d.cores) }
                        td { (d.memory_mb) }
                        td { (or_blank(d.usage.map(|u| u.memory_mb))) }
                        td { (or_blank(d.pid)) }
                    }
                }
            }
            @if !ended_executors.is_empty() || !ended_drivers.is_empty() {
                h2 { "Finished here (as many as the masters keep)" }
                table {
                    tr { th { "executor or driver" } th { "state" } th { "exit code" } th { "cores" } th { "output" } }
                    @for (app, e) in &ended_executors {
                        tr {
                            td { a href={ "../app/" (app) } { (app) } " executor " (e.id) }
                            td { (e.state.name()) }
                            td { (or_blank(e.exit_code)) }
                            td { (e.cores) }
                            td { (output_links(&format!("{app}/{}", e.id))) }
                        }
                    }
                    @for d in &ended_drivers {
                        tr {
                            td { a href={ "../driver/" (d.id) } { (d.id) } }
                            td { (d.state.name()) }
                            td { (or_blank(d.exit_code)) }
                            td { (d.cores) }
                            td { (output_links(&d.id)) }
                        }
                    }
                }
            }
        },
    ))
}

/// The sign-in form, which brings the reader back to `then` (a path of these pages): with
/// why the last try was refused, if it was.
pub(crate) fn sign_in(then: &str, refused: Option<&str>) -> Markup {
    page(
        "sign in",
        html! {
            p { a href="/" { "Muster" } }
            h1 { "Sign in" }
            p { "Reading what a process wrote, and killing work from these pages, needs a token, as "
                code { "muster logs" } " and " code { "muster kill" } " need a credential: "
                code { "muster rest-token" } " prints the cluster's, and "
                code { "muster rest-token --secret-file USER.credential" } " a named user's, who may "
                "read and kill only their own work. This master keeps it for an hour and gives this "
                "browser only a session cookie." }
            @if let Some(refused) = refused {
                p { "Refused: " (refused) }
            }
            form method="post" action="/sign-in" {
                input type="hidden" name="then" value=(then);
                input type="password" name="token" placeholder="token" size="60" autocomplete="off";
                " "
                input type="submit" value="Sign in";
            }
            p { a href=(then) { "Back" } }
        },
    )
}

/// A button that kills `id` (an application or a driver) and comes back to `then`, for a
/// viewer whose forms carry `form_key`; a link to sign in first for one who has none.
fn kill_button(id: &str, then: &str, form_key: Option<&str>) -> Markup {
    html! {
        @if let Some(form_key) = form_key {
            form method="post" action="/kill" style="display:inline" {
                input type="hidden" name="id" value=(id);
                input type="hidden" name="form_key" value=(form_key);
                input type="hidden" name="then" value=(then);
                input type="submit" value="kill" onclick="return confirm('Kill it?')";
            }
        } @else {
            a href={ "/sign-in?then=" (then) } { "sign in to kill" }
        }
    }
}

/// A stretch of what a process wrote to one stream.
pub(crate) struct Output {
    /// Its first byte's offset.
    pub(crate) from: u64,
    /// The offset after its last byte.
    pub(crate) to: u64,
    /// How much the process has written to the stream.
    pub(crate) size: u64,
    /// The bytes, as text.
    pub(crate) text: String,
}

/// The page of what process `id` (a driver, or an executor as `APP/N`) wrote to `stream`:
/// the way back to its page, which bytes it shows of how many, links to those before and
/// after and to the other stream, and the text, or a notice that there is none.
pub(crate) fn output(id: &str, stream: &str, output: &Output) -> Markup {
    let owner = match id.split_once('/') {
        Some((app, _)) => format!("/app/{app}"),
        None => format!("/driver/{id}"),
    };
    let other = if stream == "stdout" {
        "stderr"
    } else {
        "stdout"
    };
    let chunk = output.to - output.from;
    let here = format!("/logs/{id}?stream={stream}");
    html! {
        (DOCTYPE)
        html {
            head {
                meta charset="utf-8";
                title { (stream) " of " (id) }
                style { (maud::PreEscaped(STYLE)) }
            }
            body {
                p { a href=(owner) { "← " (id) } " · " a href={ "/logs/" (id) "?stream=" (other) } { (other) } }
                h1 { "The " (stream) " of " (id) }
                @if output.size == 0 {
                    p { "Empty: it has written nothing to " (stream) " yet." }
                } @else {
                    p {
                        "Bytes " (output.from) " to " (output.to) " of " (output.size) ". "
                        @if output.from > 0 {
                            a href={ (here) "&from=" (output.from.saturating_sub(chunk.max(1))) } { "← earlier" } " "
                        }
                        @if output.to < output.size {
                            a href={ (here) "&from=" (output.to) } { "later →" } " "
                            a href=(here) { "the end" }
                        } @else {
                            a href=(here) { "reload for more" }
                        }
                    }
                    pre { (output.text) }
                }
            }
        }
    }
}

/// Links to the pages of what process `id` (a driver, or an executor as `APP/N`) wrote, from
/// a page one level below the top.
fn output_links(id: &str) -> Markup {
    html! {
        a href={ "../logs/" (id) } { "stdout" } " " a href={ "../logs/" (id) "?stream=stderr" } { "stderr" }
    }
}

/// The page of driver `id`, if the status has it; an active one with a kill button whose
/// form carries `form_key`.
pub(crate) fn driver(status: &StatusView, id: &str, form_key: Option<&str>) -> Option<Markup> {
    let d = status.drivers.iter().find(|d| d.id == id)?;
    let resources = d
        .resources
        .iter()
        .map(|(name, amount)| format!("{name}: {amount}"))
        .collect::<Vec<_>>()
        .join(", ");
    let took = d
        .ended_at_ms
        .map(|ended| duration(ended.saturating_sub(d.submitted_at_ms)));
    let text = |value: String| html! { (value) };
    let worker = html! {
        @if let Some(worker) = &d.worker { a href={ "../worker/" (worker) } { (worker) } }
    };
    let app = html! {
        @for a in status.apps.iter().filter(|a| a.driver.as_deref() == Some(id)) {
            a href={ "../app/" (a.id) } { (a.id) } " "
        }
    };
    let rows = [
        ("name", text(d.name.clone())),
        ("runs", text(or_blank(d.program.as_ref()))),
        ("user", user(d.user.as_deref())),
        ("queue", text(d.queue.clone())),
        ("cores", text(d.cores.to_string())),
        ("memory granted (MB)", text(d.memory_mb.to_string())),
        ("resources", text(resources)),
        ("submitted", text(Timestamp(d.submitted_at_ms).utc())),
        (
            "ended",
            text(or_blank(d.ended_at_ms.map(|at| Timestamp(at).utc()))),
        ),
        ("from submission to end", text(or_blank(took))),
        ("state", text(d.state.name().to_owned())),
        ("restarts", text(or_blank(d.restarts.map(|r| r.describe())))),
        ("worker", worker),
        ("application", app),
        ("pid", text(or_blank(d.pid))),
        ("exit code", text(or_blank(d.exit_code))),
        ("exit reason", text(or_blank(d.exit_reason))),
        ("waiting", text(or_blank(d.waiting.as_ref()))),
        (
            "memory used (MB)",
            text(or_blank(d.usage.map(|u| u.memory_mb))),
        ),
        (
            "CPU (s)",
            text(or_blank(d.usage.and_then(|u| u.cpu_seconds))),
        ),
    ];
    Some(page(
        id,
        html! {
            p { a href="../" { "Muster" } }
            h1 { "Driver " (id) }
            @if d.ended_at_ms.is_none() {
                p { (kill_button(id, &format!("/driver/{id}"), form_key)) }
            }
            @if let Some(successor) = &d.relaunched_as {
                p { "Its worker was lost: it was relaunched as " a href=(successor) { (successor) } "." }
            }
            table {
                @for (field, value) in rows {
                    tr { th { (field) } td { (value) } }
                }
            }
            p { "Its output: " (output_links(id)) ", or " code { "muster logs " (id) } " (" code { "--stderr" } ", "
                code { "--follow" } ")." }
        },
    ))
}

#[cfg(test)]
mod tests {
    use muster_proto::v1::{
        AccessList, AppState, AppStatus, DriverState, DriverStatus, ExecutorState, ExecutorStatus,
        Member, MemberRole, ProcessUsage, Queue, RecoveryState, Resources, Restarts, StatusReply,
        WorkerStatus,
    };

    use super::*;

    fn resources(cores: u32, memory_mb: u64) -> Option<Resources> {
        Some(Resources {
            cores,
            memory_mb,
            ..Resources::default()
        })
    }

    fn status() -> StatusView {
        let worker = |id: &str, cores_used, memory_used_mb, draining| WorkerStatus {
            id: id.into(),
            host: id.replace('w', "h"),
            state: WorkerState::Alive.into(),
            capacity: resources(8, 8192),
            used: resources(cores_used, memory_used_mb),
            draining,
            ..WorkerStatus::default()
        };
        let executor = |id, state: ExecutorState, pid| ExecutorStatus {
            id,
            worker: "w1".into(),
            resources: resources(2, 512),
            state: state.into(),
            pid,
            ..ExecutorStatus::default()
        };
        let queue = |name: &str, prior, threshold, capacity| Queue {
            name: name.into(),
            prior,
            threshold,
            max_capacity: 1.0,
            capacity: Some(capacity),
            ..Queue::default()
        };
        StatusView::of(&StatusReply {
            leader: 2,
            term: 7,
            recovery_state: RecoveryState::Alive.into(),
            members: vec![
                Member {
                    id: 2,
                    addr: "m2:7077".into(),
                    role: MemberRole::Leader.into(),
                    silent: false,
                    build: None,
                },
                Member {
                    id: 3,
                    addr: "m3:7077".into(),
                    role: MemberRole::Follower.into(),
                    silent: true,
                    build: None,
                },
            ],
            workers: vec![worker("w1", 6, 2048, false), worker("w2", 0, 0, true)],
            apps: vec![AppStatus {
                id: "app-1".into(),
                name: "etl".into(),
                user: "alice".into(),
                queue: "team.batch".into(),
                state: AppState::Running.into(),
                cores_granted: 4,
                ui_address: "http://h0:4040".into(),
                submitted_at_ms: 1_709_210_096_789,
                executor_memory_mb: 512 + 384,
                driver_id: "driver-1".into(),
                priority: 3,
                executors: vec![
                    ExecutorStatus {
                        usage: Some(ProcessUsage {
                            memory_bytes: 300 << 20,
                            cpu_ms: Some(12_500),
                            ..ProcessUsage::default()
                        }),
                        ..executor(0, ExecutorState::Running, 41)
                    },
                    executor(1, ExecutorState::Launching, 0),
                ],
                ..AppStatus::default()
            }],
            completed_apps: vec![AppStatus {
                id: "app-0".into(),
                name: "old".into(),
                user: "bob".into(),
                queue: "default".into(),
                state: AppState::Finished.into(),
                submitted_at_ms: 1_709_210_096_789,
                ended_at_ms: 1_709_210_138_789,
                ended_executors: vec![ExecutorStatus {
                    exit_code: Some(0),
                    ..executor(3, ExecutorState::Exited, 0)
                }],
                logs_events: true,
                ..AppStatus::default()
            }],
            drivers: vec![DriverStatus {
                id: "driver-1".into(),
                name: "d".into(),
                program: "Spark: com.example.Etl".into(),
                queue: "default".into(),
                state: DriverState::Finished.into(),
                worker: "w1".into(),
                pid: 40,
                exit_code: Some(0),
                resources: resources(1, 1024),
                submitted_at_ms: 1_709_210_096_789,
                ended_at_ms: 1_709_210_186_789,
                restarts: Some(Restarts {
                    count: 3,
                    last_exit_code: Some(1),
                    starts_again_in_ms: 0,
                }),
                ..DriverStatus::default()
            }],
            queues: vec![
                queue("team", false, 1.0, 0.5),
                queue("team.batch", false, 0.8, 1.0),
                Queue {
                    submit: Some(AccessList {
                        users: vec!["alice".into(), "bob".into()],
                    }),
                    ..queue("prod", true, 1.0, 0.5)
                },
            ],
            ..StatusReply::default()
        })
    }

    #[test]
    fn the_overview_sums_up_the_cluster_and_each_queue() {
        // Ninety seconds after the running application was submitted.
        let now = 1_709_210_096_789 + 90_000;
        let page = overview(&status(), html! {}, now, Some("m2:6066")).into_string();
        for part in [
            "<code>spark-submit --master spark-muster://m2:7077,m3:7077</code>",
            "<code>MUSTER_MASTERS=m2:7077,m3:7077 muster submit</code>",
            "<code>spark-submit --master spark://m2:6066/TOKEN --deploy-mode cluster</code>",
            "<td>896</td><td>2024-02-29 12:34:56</td><td>1.5 min</td>",
            "workers 2 ALIVE of 2",
            "cores 6 / 16",
            "drivers 0 running, 0 waiting, 1 ended",
            "applications 1 running, 1 completed",
            "<td>follower (silent: not heard from)</td>",
            r#"<td><a href="app/app-0">app-0</a></td><td>old</td><td>bob</td><td>default</td><td>FINISHED</td><td>2024-02-29 12:34:56</td><td>42 s</td>"#,
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
        assert!(!page.contains("Preemption can never"), "{page}");

        let mut warned = status();
        warned.preemption_warning = Some("no queue `prod` among the queues".to_owned());
        let page = overview(&warned, html! {}, now, None).into_string();
        assert!(
            page.contains(
                "<p><strong>Preemption can never stop an executor: </strong>no queue `prod` \
                 among the queues.</p>"
            ),
            "{page}"
        );
    }

    #[test]
    fn an_application_page_lists_its_executors_and_a_driver_page_its_end() {
        let page = app(&status(), "app-1", Some("key"), None)
            .unwrap()
            .into_string();
        assert!(page.contains("<td>41</td>"), "{page}");
        assert!(page.contains("<p>Priority in its queue: 3</p>"), "{page}");
        assert!(
            page.contains(r#"Its driver: <a href="../driver/driver-1">driver-1</a>"#),
            "{page}"
        );
        assert!(
            page.contains(r#"<input type="hidden" name="form_key" value="key">"#),
            "a kill button carrying the anti-forgery value: {page}"
        );
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
        let page = driver(&status(), "driver-1", None).unwrap().into_string();
        for part in [
            "<th>exit code</th><td>0</td>",
            "<th>cores</th><td>1</td></tr><tr><th>memory granted (MB)</th><td>1024</td>",
            "<th>submitted</th><td>2024-02-29 12:34:56</td>",
            "<th>from submission to end</th><td>1.5 min</td>",
            "<th>restarts</th><td>restarted 3 times, last failed with exit 1</td>",
            "<th>runs</th><td>Spark: com.example.Etl</td>",
            r#"<th>worker</th><td><a href="../worker/w1">w1</a></td>"#,
            r#"<th>application</th><td><a href="../app/app-1">app-1</a> </td>"#,
            r#"<th>user</th><td><i title="submitted with the cluster's own credential">cluster</i></td>"#,
        ] {
            assert!(page.contains(part), "{part} in {page}");
        }
        let overview = overview(&status(), html! {}, 0, None).into_string();
        assert!(
            overview
                .contains("<td>2024-02-29 12:34:56</td><td>1</td><td>1024</td><td>FINISHED</td>"),
            "{overview}"
        );
        // A completed application's page: where its executors ran and how they ended.
        let page = app(&status(), "app-0", None, Some("http://hs:18080/"))
            .unwrap()
            .into_string();
        for part in [
            "from submission to end 42 s",
            "<td>3</td><td>w1</td><td>EXITED</td><td>0</td><td>2</td><td>512</td>",
            "<code>muster logs app-0/3</code>",
            r#"<a href="http://hs:18080/history/app-0/jobs/">Spark's history server</a>"#,
        ] {
            assert!(page.contains(part), "{part} in {page}");
        }
        // One that logged no events has nothing there.
        let mut without_events = status();
        without_events.completed_apps[0].logs_events = false;
        let page = app(&without_events, "app-0", None, Some("http://hs:18080/"))
            .unwrap()
            .into_string();
        assert!(!page.contains("history server"), "{page}");
        assert!(app(&status(), "app-9", None, None).is_none());
        assert!(driver(&status(), "driver-9", None).is_none());
    }

    #[test]
    fn a_workers_page_shows_its_resources_and_what_runs_there() {
        let page = worker(&status(), "w1").unwrap().into_string();
        for part in [
            "<span>cores 6 / 8</span>",
            r#"<td><a href="../app/app-1">app-1</a></td><td>0</td><td>RUNNING</td><td>2</td><td>512</td><td>300</td><td>12.5</td><td>41</td>"#,
            "<code>muster logs app-1/1</code>",
        ] {
            assert!(page.contains(part), "{part} in {page}");
        }
        // What ended there is listed apart from what runs: the ended driver, and the
        // completed application's ended executor, with their exit codes and output.
        let (running, finished) = page.split_once("Finished here").unwrap();
        assert!(!running.contains("driver-1"), "{page}");
        for part in [
            r#"<td><a href="../app/app-0">app-0</a> executor 3</td><td>EXITED</td><td>0</td>"#,
            r#"<td><a href="../driver/driver-1">driver-1</a></td><td>FINISHED</td><td>0</td>"#,
        ] {
            assert!(finished.contains(part), "{part} in {page}");
        }
        let overview = overview(&status(), html! {}, 0, None).into_string();
        assert!(
            overview.contains(r#"<a href="worker/w1">w1</a>"#),
            "{overview}"
        );
        assert!(worker(&status(), "w9").is_none());
    }

    #[test]
    fn an_output_page_says_where_it_is_and_leads_on_or_says_it_is_empty() {
        let middle = Output {
            from: 100,
            to: 200,
            size: 300,
            text: "<b>not markup</b>".to_owned(),
        };
        let page = output("app-1/2", "stderr", &middle).into_string();
        for part in [
            r#"<a href="/app/app-1">← app-1/2</a>"#,
            r#"<a href="/logs/app-1/2?stream=stdout">stdout</a>"#,
            "Bytes 100 to 200 of 300.",
            r#"<a href="/logs/app-1/2?stream=stderr&amp;from=0">← earlier</a>"#,
            r#"<a href="/logs/app-1/2?stream=stderr&amp;from=200">later →</a>"#,
            "<pre>&lt;b&gt;not markup&lt;/b&gt;</pre>",
        ] {
            assert!(page.contains(part), "{part} in {page}");
        }
        let empty = Output {
            from: 0,
            to: 0,
            size: 0,
            text: String::new(),
        };
        let page = output("driver-1", "stdout", &empty).into_string();
        assert!(
            page.contains(r#"<a href="/driver/driver-1">← driver-1</a>"#)
                && page.contains("Empty: it has written nothing to stdout yet.")
                && !page.contains("<pre>"),
            "{page}"
        );
    }

    #[test]
    fn a_relaunched_drivers_page_links_the_driver_that_replaced_it() {
        let status = StatusView::of(&StatusReply {
            drivers: vec![DriverStatus {
                id: "driver-1".into(),
                state: DriverState::Relaunching.into(),
                relaunched_as: "driver-2".into(),
                ..DriverStatus::default()
            }],
            ..StatusReply::default()
        });
        let page = driver(&status, "driver-1", None).unwrap().into_string();
        assert!(
            page.contains(r#"relaunched as <a href="driver-2">driver-2</a>"#),
            "{page}"
        );
    }

    #[test]
    fn an_overview_of_a_page_of_the_drivers_counts_them_all_and_links_the_next() {
        let listed = |id: &str| DriverStatus {
            id: id.into(),
            state: DriverState::Running.into(),
            ..DriverStatus::default()
        };
        let status = StatusView::of(&StatusReply {
            drivers: vec![listed("driver-1"), listed("driver-2")],
            driver_counts: Some(muster_proto::v1::DriverCounts {
                waiting: 2,
                running: 2,
                ended: 1,
            }),
            drivers_next: "driver-3".into(),
            ..StatusReply::default()
        });
        let page = overview(&status, html! {}, 0, None).into_string();
        for part in [
            "drivers 2 running, 2 waiting, 1 ended",
            "2 of 5 drivers, in id order: ",
            r#"<a href="?drivers_from=driver-3">the next 500 →</a>"#,
        ] {
            assert!(page.contains(part), "{part} in {page}");
        }
        // A reply with every driver and no counts (a master of 0.3.0) is counted here.
        let all = StatusView::of(&StatusReply {
            drivers: vec![listed("driver-1")],
            ..StatusReply::default()
        });
        let page = overview(&all, html! {}, 0, None).into_string();
        assert!(
            page.contains("drivers 1 running, 0 waiting, 0 ended"),
            "{page}"
        );
        assert!(!page.contains("in id order"), "{page}");
    }
}
