//! Three `muster master` processes: a leader is elected, any master takes client commands,
//! the leader is killed and another takes over without losing what was accepted, a restarted
//! master rejoins, and bad input changes nothing.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{
    DEADLINE, Masters, driver_ids, driver_state, free_port, lone_master_command, master_command,
    muster, stderr, stdout, wait_for,
};

#[test]
fn masters_elect_a_leader_survive_its_loss_and_keep_what_was_accepted() {
    let mut masters = Masters::start();
    let first = masters.leader(0);
    let follower = (1..=3).find(|&id| id != first as usize).unwrap();

    // A follower takes the submission and forwards it to the leader.
    let submitted = stdout(&Masters::client(
        &masters.addrs[follower - 1],
        &["submit", "--name", "first", "--", "/bin/true"],
    ));
    assert!(submitted.starts_with("driver-"), "{submitted}");
    let status = masters.status(&masters.list_from(follower));
    assert_eq!(driver_ids(&status), [submitted.as_str()]);
    assert_eq!(status["drivers"][0]["state"], "SUBMITTED");
    let roles: Vec<&str> = status["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles.iter().filter(|&&r| r == "leader").count(), 1);
    assert_eq!(roles.len(), 3);

    // Kill the leader outright.
    let killed_at = Instant::now();
    masters.running[first as usize - 1]
        .take()
        .expect("the leader runs")
        .crash();
    let second = masters.leader(first);
    println!(
        "new leader {second} answered {:?} after the kill",
        killed_at.elapsed()
    );
    let status = masters.status(&masters.list_from(second as usize));
    assert_eq!(
        driver_ids(&status),
        [submitted.as_str()],
        "nothing accepted was lost"
    );

    // The cluster keeps taking writes, through any master that is up.
    let next = stdout(&Masters::client(
        &masters.list_from(first as usize),
        &["submit", "--", "/bin/true"],
    ));
    stdout(&Masters::client(
        &masters.list_from(1),
        &["kill", &submitted],
    ));
    let status = masters.status(&masters.list_from(1));
    assert_eq!(driver_ids(&status), [next.as_str()]);
    assert_eq!(driver_state(&status, &submitted), "KILLED");
    assert_eq!(status["recovery_state"], "ALIVE");

    // The killed master restarts from its data and rejoins; on its own it still answers.
    masters.running[first as usize - 1] = Some(masters.spawn(first as usize));
    let alone = masters.addrs[first as usize - 1].clone();
    let start = Instant::now();
    loop {
        let output = Masters::client(&alone, &["status", "--json"]);
        if output.status.success() {
            let status: Value = serde_json::from_slice(&output.stdout).unwrap();
            if driver_ids(&status) == [next.as_str()] && status["leader"] == second {
                break;
            }
        }
        assert!(
            start.elapsed() < DEADLINE,
            "restarted master did not rejoin"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // The logs are quiet: a peer that went and came back is one warning and one line, however
    // many reads the leader confirmed meanwhile, and nothing else warns.
    let log =
        std::fs::read_to_string(masters.dir.path().join(format!("master-{second}.log"))).unwrap();
    let about_the_first = |message: &str| {
        log.lines()
            .filter(|l| l.contains(message) && l.contains(&format!("peer={first} ")))
            .count()
    };
    assert_eq!(
        (
            about_the_first("peer unreachable"),
            about_the_first("peer reachable again")
        ),
        (1, 1),
        "{log}"
    );
    for id in 1..=3 {
        let log =
            std::fs::read_to_string(masters.dir.path().join(format!("master-{id}.log"))).unwrap();
        let loud: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
            .filter(|l| !l.contains("peer unreachable"))
            .collect();
        assert!(loud.is_empty(), "master {id}: {loud:#?}");
    }
}

#[test]
fn a_leader_killed_amid_concurrent_submissions_keeps_each_accepted_one_once() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    let mut masters = Masters::start();
    let first = masters.leader(0);
    let list = masters.list_from(1);
    let stop = Arc::new(AtomicBool::new(false));
    let accepted_count = Arc::new(AtomicUsize::new(0));
    // Concurrent submitters: their writes share log entries (group commit), so the kill
    // lands among batches. A submission cut off by the kill is retried with its request id.
    let submitters: Vec<_> = (0..6)
        .map(|t| {
            let (list, stop, count) =
                (list.clone(), Arc::clone(&stop), Arc::clone(&accepted_count));
            std::thread::spawn(move || {
                let mut accepted = Vec::new();
                for i in 0.. {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let name = format!("t{t}-{i}");
                    let output =
                        Masters::client(&list, &["submit", "--name", &name, "--", "/bin/true"]);
                    if output.status.success() {
                        let id = String::from_utf8(output.stdout).unwrap().trim().to_owned();
                        accepted.push((name, id));
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                }
                accepted
            })
        })
        .collect();
    let wait_for_count = |at_least: usize| {
        let start = Instant::now();
        while accepted_count.load(Ordering::SeqCst) < at_least {
            assert!(start.elapsed() < DEADLINE, "submissions stalled");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_for_count(30);
    masters.running[first as usize - 1]
        .take()
        .expect("the leader runs")
        .crash();
    let killed_at = accepted_count.load(Ordering::SeqCst);
    let second = masters.leader(first);
    wait_for_count(killed_at + 30);
    stop.store(true, Ordering::SeqCst);
    let accepted: Vec<(String, String)> = submitters
        .into_iter()
        .flat_map(|s| s.join().unwrap())
        .collect();

    let status = masters.status(&masters.list_from(second as usize));
    let drivers = status["drivers"].as_array().unwrap();
    for (name, id) in &accepted {
        let named: Vec<&Value> = drivers
            .iter()
            .filter(|d| d["name"] == name.as_str())
            .collect();
        assert_eq!(named.len(), 1, "{name} applied once: {named:?}");
        assert_eq!(
            named[0]["id"],
            id.as_str(),
            "{name} under the id it was accepted with"
        );
    }
}

#[test]
fn bad_input_is_refused_with_one_line_and_changes_nothing() {
    let masters = Masters::start();
    masters.leader(0);
    let all = masters.list_from(1);
    let before = masters.status(&all);

    // Bad input exits 2, a refusal 3 (the book, "Bad input and exit codes").
    let zero = Masters::client(&all, &["submit", "--cores", "0", "--", "/bin/true"]);
    assert_eq!(stderr(&zero), "error: cores: must be at least 1");
    assert_eq!(zero.status.code(), Some(2));
    let queue = Masters::client(&all, &["submit", "--queue", "nightly", "--", "/bin/true"]);
    assert_eq!(stderr(&queue), "error: unknown queue `nightly`");
    assert_eq!(queue.status.code(), Some(2));
    let unknown = Masters::client(&all, &["kill", "driver-19700101000000-0042"]);
    assert_eq!(
        stderr(&unknown),
        "error: unknown or finished driver `driver-19700101000000-0042`"
    );
    assert_eq!(unknown.status.code(), Some(3));
    let dir = tempfile::tempdir().unwrap();
    let bad_queues = dir.path().join("queues.json");
    std::fs::write(&bad_queues, r#"[{"name": "prod", "threshold": 1.5}]"#).unwrap();
    let set = Masters::client(&all, &["queues", "--set", bad_queues.to_str().unwrap()]);
    assert_eq!(
        stderr(&set),
        format!(
            "error: {}: queues[0].threshold: must be in (0, 1], got 1.5",
            bad_queues.display()
        )
    );
    assert_eq!(set.status.code(), Some(2));

    let after = masters.status(&all);
    assert_eq!(
        (&before["drivers"], &before["queues"]),
        (&after["drivers"], &after["queues"])
    );
}

#[test]
fn queues_are_set_through_any_master() {
    let masters = Masters::start();
    masters.leader(0);
    let dir = tempfile::tempdir().unwrap();
    crate::support::set_queues(
        &masters.list_from(2),
        dir.path(),
        r#"[{"name": "prod", "prior": true}, {"name": "default", "threshold": 0.8}]"#,
    );
    let queues: Value = serde_json::from_str(&stdout(&Masters::client(
        &masters.list_from(3),
        &["queues", "--json"],
    )))
    .unwrap();
    assert_eq!(queues[0]["name"], "prod");
    assert_eq!(queues[0]["prior"], true);
    assert_eq!(queues[1]["threshold"], 0.8);
    // A driver may now name the new queue.
    stdout(&Masters::client(
        &masters.list_from(1),
        &["submit", "--queue", "prod", "--", "/bin/true"],
    ));
}

#[test]
fn no_reachable_master_is_one_clear_error() {
    let unused = format!("127.0.0.1:{}", free_port());
    let asked = std::time::Instant::now();
    let output = Masters::client(&unused, &["status"]);
    let waited = asked.elapsed();
    let message = stderr(&output);
    assert!(
        message.starts_with("error: no master reachable (tried "),
        "{message}"
    );
    // One reason per master tried, its address said once.
    assert_eq!(message.matches(&unused).count(), 1, "{message}");
    assert!(message.contains("no master listens there"), "{message}");
    assert_eq!(output.status.code(), Some(4));
    // Where nothing listens there is no election to wait out: it gives up after its short
    // patience (2 s), not the 10 s it gives masters that answer without a leader.
    assert!(waited.as_secs() < 6, "gave up after {waited:?}");

    // A host name that does not resolve, and a server that is no master (the status pages'
    // port of a master), are said as such just as soon.
    let dir = tempfile::tempdir().unwrap();
    let (_master, grpc, http) = lone_master_serving_http(dir.path());
    crate::support::wait_for_at(&grpc, "the lone master leading", |s| s["leader"] == 1);
    for (masters, reason) in [
        (
            "no-such-host.invalid:7077".to_owned(),
            "no-such-host.invalid:7077: no such host: the name does not resolve".to_owned(),
        ),
        (
            http.clone(),
            format!(
                "{http}: not a Muster master: a TLS server answered that does not speak gRPC; \
                 give a master's gRPC address (its --listen), not its status pages' (--http)"
            ),
        ),
    ] {
        let asked = std::time::Instant::now();
        let output = Masters::client(&masters, &["status"]);
        let waited = asked.elapsed();
        let message = stderr(&output);
        assert!(message.contains(&reason), "{message}");
        assert_eq!(output.status.code(), Some(4), "{message}");
        assert!(waited.as_secs() < 6, "gave up after {waited:?}: {message}");
    }
    // Beside a master that answers, the other is passed over.
    let output = Masters::client(&format!("{http},{grpc}"), &["status"]);
    assert!(output.status.success(), "{output:?}");

    // An address that is not one is bad input, not an unreachable master.
    let output = Masters::client("no such host:1", &["status"]);
    assert_eq!(
        stderr(&output),
        "error: --masters: `no such host:1` is not HOST:PORT"
    );
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn masters_apply_their_configured_queues_and_refuse_a_bad_config() {
    let dir = tempfile::tempdir().unwrap();
    let queues = dir.path().join("queues.json");
    std::fs::write(
        &queues,
        r#"[{"name": "prod", "prior": true}, {"name": "default", "threshold": 0.8}]"#,
    )
    .unwrap();
    let config = dir.path().join("master.json");
    std::fs::write(
        &config,
        r#"{"worker_timeout_s": 5, "scheduling": {"spread_out_apps": false},
            "preemption": {"queues": ["prod"]}}"#,
    )
    .unwrap();
    let masters = Masters::start_with(&[
        "--queues",
        queues.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ]);
    masters.leader(0);
    let start = Instant::now();
    loop {
        let status = masters.status(&masters.list_from(1));
        if status["queues"].as_array().unwrap().len() == 2 {
            assert_eq!(status["queues"][0]["name"], "prod");
            assert_eq!(status["queues"][0]["prior"], true);
            assert_eq!(status["queues"][1]["threshold"], 0.8);
            break;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the configured queues were not applied"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // Queues that would leave the masters' preemption with nothing to preempt for are
    // refused, and change nothing.
    let without_prod = dir.path().join("without-prod.json");
    std::fs::write(&without_prod, r#"[{"name": "prod"}, {"name": "default"}]"#).unwrap();
    let refused = Masters::client(
        &masters.list_from(1),
        &["queues", "--set", without_prod.to_str().unwrap()],
    );
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert_eq!(
        stderr(&refused),
        "error: queues: the masters' preemption settings need them: `prod` is not a prior \
         queue: it would never preempt"
    );
    assert_eq!(
        masters.status(&masters.list_from(1))["queues"][0]["prior"],
        true
    );

    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"worker_timeout": 5}"#).unwrap();
    let misspelt = dir.path().join("misspelt.json");
    std::fs::write(&misspelt, r#"{"preemption": {"queues": ["Prod"]}}"#).unwrap();
    for (config, expected) in [
        (&bad, "unknown field `worker_timeout`"),
        (
            &misspelt,
            "--config: preemption.queues: no queue `Prod` among the queues: it would never \
             preempt",
        ),
    ] {
        let port = free_port();
        let output =
            lone_master_command(&format!("127.0.0.1:{port}"), &dir.path().join("bad-master"))
                .arg("--config")
                .arg(config)
                .arg("--queues")
                .arg(&queues)
                .output()
                .unwrap();
        let message = stderr(&output);
        assert!(
            message.starts_with("error: ") && message.contains(expected),
            "{message}"
        );
        assert_eq!(message.lines().count(), 1, "{message}");
    }
}

/// A master alone with its data in `dir`, serving its status over HTTP too: it, and its
/// gRPC and HTTP addresses.
fn lone_master_serving_http(dir: &std::path::Path) -> (crate::support::Process, String, String) {
    let (grpc, http) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let master = crate::support::Process(
        lone_master_command(&grpc, dir)
            .args(["--http", &http])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    (master, grpc, http)
}

#[test]
fn a_master_serves_the_status_over_https() {
    let dir = tempfile::tempdir().unwrap();
    let (_master, grpc, http) = lone_master_serving_http(dir.path());
    let start = Instant::now();
    let status: Value = loop {
        if let Some(body) = crate::support::https_get(&http, "/json")
            && let Ok(status) = serde_json::from_str::<Value>(&body)
            && status["recovery_state"] == "ALIVE"
        {
            break status;
        }
        assert!(start.elapsed() < DEADLINE, "no status over HTTP");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status["leader"], 1);
    assert_eq!(
        status,
        masters_status(&grpc),
        "the same JSON as muster status --json"
    );
    // `--masters` may come before the command too.
    let before = crate::support::muster()
        .args(["--masters", &grpc, "status", "--json"])
        .env_remove("MUSTER_MASTERS")
        .output()
        .unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&before.stdout).unwrap(),
        status,
        "{before:?}"
    );
    let page = crate::support::https_get(&http, "/").expect("the page");
    assert!(
        page.contains("<h1>Muster</h1>") && page.contains(&grpc),
        "{page}"
    );
    // The queues' charts fill as the master samples what they hold.
    assert!(page.contains("Held per queue, the last hour"), "{page}");

    // Prometheus metrics: this replica's Raft, its leader, the cluster as it applied it.
    let metrics = crate::support::https_get(&http, "/metrics").expect("the metrics");
    for line in [
        "muster_raft_is_leader 1",
        "muster_raft_leader 1",
        "muster_raft_apply_lag 0",
        r#"muster_recovery_state{state="alive"} 1"#,
        r#"muster_workers{state="alive"} 0"#,
        r#"muster_queue_prior{queue="default"} 0"#,
        r#"muster_launches_total{kind="driver"} 0"#,
        "# TYPE muster_pass_seconds histogram",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in {metrics}");
    }
    let term: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("muster_raft_term "))
        .and_then(|v| v.parse().ok())
        .expect("a term");
    assert!(term >= 1, "{metrics}");

    // Whatever a user names things, the page shows it as text.
    stdout(&Masters::client(
        &grpc,
        &[
            "submit",
            "--name",
            "<script>alert('x')</script>",
            "--",
            "/bin/true",
        ],
    ));
    let page = crate::support::https_get(&http, "/").expect("the page");
    assert!(!page.contains("<script>"), "{page}");
    assert!(
        page.contains("&lt;script&gt;alert('x')&lt;/script&gt;"),
        "{page}"
    );
    // The summary, a refresh, and a page for the driver, linked from the overview.
    assert!(
        page.contains("drivers 0 running, 1 waiting, 0 ended"),
        "{page}"
    );
    assert!(page.contains(r#"http-equiv="refresh""#), "{page}");
    let id = driver_ids(&masters_status(&grpc))[0].to_owned();
    assert!(page.contains(&format!(r#"href="driver/{id}""#)), "{page}");
    let driver_page =
        crate::support::https_get(&http, &format!("/driver/{id}")).expect("the driver's page");
    assert!(
        driver_page.contains(&format!("Driver {id}")),
        "{driver_page}"
    );
    assert!(driver_page.contains("SUBMITTED"), "{driver_page}");
    assert!(!driver_page.contains("<script>"), "{driver_page}");
    assert!(
        crate::support::https_get(&http, "/app/app-none").is_none(),
        "no such application: not found"
    );
    assert!(
        crate::support::https_get(&http, "/worker/worker-none").is_none(),
        "no such worker: not found"
    );

    // The driver waits for a worker, and the metrics say so once the leader has passed.
    let start = Instant::now();
    loop {
        let metrics = crate::support::https_get(&http, "/metrics").expect("the metrics");
        if metrics
            .lines()
            .any(|l| l == r#"muster_drivers{state="submitted"} 1"#)
            && metrics
                .lines()
                .any(|l| l == r#"muster_waiting{reason="no_alive_worker"} 1"#)
        {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "no waiting driver in {metrics}");
        std::thread::sleep(Duration::from_millis(100));
    }

    // Every call counts by method and code, a refused credential's too.
    let other = tempfile::tempdir().unwrap();
    crate::support::stdout(
        &crate::support::muster()
            .args([
                "secrets",
                other.path().to_str().unwrap(),
                "--host",
                "localhost",
            ])
            .output()
            .unwrap(),
    );
    let intruder = crate::support::muster()
        .args(["status", "--masters", &grpc])
        .env("MUSTER_SECRET_FILE", other.path().join("secret"))
        .output()
        .unwrap();
    assert_eq!(intruder.status.code(), Some(3), "{intruder:?}");
    let metrics = crate::support::https_get(&http, "/metrics").expect("the metrics");
    for line in [
        r#"muster_grpc_calls_total{method="Cluster/SubmitDriver",code="Ok"} 1"#,
        r#"muster_grpc_calls_total{method="Cluster/Status",code="Unauthenticated"} 1"#,
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in {metrics}");
    }

    // Drivers a page at a time, in id order: over HTTP and with the CLI, each page naming
    // where the next starts, with the counts of all.
    for _ in 0..2 {
        stdout(&Masters::client(&grpc, &["submit", "--", "/bin/true"]));
    }
    let ids = driver_ids(&masters_status(&grpc))
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    assert_eq!(ids.len(), 3);
    let page: Value = serde_json::from_str(
        &crate::support::https_get(&http, "/json?drivers_limit=2").expect("a page"),
    )
    .unwrap();
    assert_eq!(page["drivers"].as_array().unwrap().len(), 2, "{page}");
    assert_eq!(page["drivers"][0]["id"], ids[0], "{page}");
    assert_eq!(page["drivers_next"], ids[2], "{page}");
    assert_eq!(page["driver_counts"]["waiting"], 3, "{page}");
    // With no queue file, the queue every submission goes to is shown all the same.
    assert_eq!(
        (
            page["queues"].as_array().map(Vec::len),
            &page["queues"][0]["name"]
        ),
        (Some(1), &serde_json::json!("default")),
        "{page}"
    );
    let queues = stdout(&Masters::client(&grpc, &["queues"]));
    assert!(
        queues
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("default ")),
        "{queues}"
    );
    let first = stdout(&Masters::client(&grpc, &["drivers", "--limit", "2"]));
    let more = format!("more: muster drivers --limit 2 --from {}", ids[2]);
    assert!(first.contains(&ids[1]) && first.ends_with(&more), "{first}");
    let last = stdout(&Masters::client(
        &grpc,
        &["drivers", "--limit", "2", "--from", &ids[2], "--json"],
    ));
    let last: Value = serde_json::from_str(&last).unwrap();
    assert_eq!(last["drivers"][0]["id"], ids[2], "{last}");
    assert_eq!(last["next"], Value::Null, "{last}");
    let named = stdout(&Masters::client(&grpc, &["drivers", &ids[1]]));
    assert!(
        named.contains(&ids[1]) && !named.contains(&ids[0]),
        "{named}"
    );
}

fn masters_status(grpc: &str) -> Value {
    serde_json::from_str(&stdout(&Masters::client(grpc, &["status", "--json"]))).unwrap()
}

/// Starts `command` and returns its standard error's lines as they come.
fn stderr_lines(
    mut command: std::process::Command,
) -> (crate::support::Process, std::sync::mpsc::Receiver<String>) {
    use std::io::{BufRead, BufReader};

    let mut child = command
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    (crate::support::Process(child), received)
}

/// The first JSON log line from `lines` with this message; every line must be JSON.
fn json_line(lines: &std::sync::mpsc::Receiver<String>, message: &str) -> Value {
    let start = Instant::now();
    loop {
        let left = DEADLINE.saturating_sub(start.elapsed());
        let line = lines
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no `{message}` logged within the deadline"));
        let entry: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: not JSON: {line}"));
        assert!(entry["level"].is_string(), "{line}");
        if entry["fields"]["message"] == message {
            return entry;
        }
    }
}

#[test]
fn masters_and_workers_log_json_lines_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let grpc = format!("127.0.0.1:{}", free_port());
    let mut master = lone_master_command(&grpc, &dir.path().join("master"));
    master.args(["--log-format", "json"]);
    let (_master, master_lines) = stderr_lines(master);
    let serving = json_line(&master_lines, "master serving");
    assert_eq!(serving["fields"]["listen"], grpc.as_str(), "{serving}");

    // A worker's lines carry its id in their span.
    let mut worker = crate::support::muster();
    worker
        .args(["worker", "--masters", &grpc, "--log-format", "json"])
        .args(["--cores", "1", "--memory", "512"])
        .arg("--work-dir")
        .arg(dir.path().join("worker"));
    let (_worker, worker_lines) = stderr_lines(worker);
    let attached = json_line(&worker_lines, "attached to the leader");
    let id = attached["span"]["worker"].as_str().unwrap_or_default();
    assert!(id.starts_with("worker-"), "{attached}");

    // A client call's lines carry its method; a driver's process lines carry its id.
    let driver = stdout(&Masters::client(
        &grpc,
        &["submit", "--memory", "256", "--", "/bin/true"],
    ));
    let submitted = json_line(&master_lines, "driver submitted");
    assert_eq!(
        submitted["span"]["method"], "Cluster/SubmitDriver",
        "{submitted}"
    );
    assert_eq!(
        submitted["fields"]["driver"],
        driver.as_str(),
        "{submitted}"
    );
    let running = json_line(&worker_lines, "running");
    assert_eq!(running["span"]["driver"], driver.as_str(), "{running}");
    assert_eq!(running["spans"][0]["worker"], id, "{running}");
}

#[test]
fn a_saved_snapshot_restores_the_same_state_into_a_new_cluster() {
    let saved = tempfile::tempdir().unwrap();
    let file = saved.path().join("muster.snapshot");
    let file = file.to_str().unwrap();
    let project = |status: &Value| {
        let drivers: Vec<(Value, Value, Value)> = status["drivers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| (d["id"].clone(), d["name"].clone(), d["state"].clone()))
            .collect();
        (drivers, status["queues"].clone())
    };
    let before = {
        let masters = Masters::start();
        masters.leader(0);
        crate::support::set_queues(
            &masters.list_from(1),
            masters.dir.path(),
            r#"[{"name": "prod", "prior": true}]"#,
        );
        stdout(&Masters::client(
            &masters.list_from(1),
            &["submit", "--name", "kept", "--", "/bin/true"],
        ));
        let status = masters.status(&masters.list_from(1));
        let saved = stdout(&Masters::client(
            &masters.list_from(2),
            &["snapshot", "save", file],
        ));
        assert!(saved.contains("bytes written"), "{saved}");
        // The saved state is a plan input too: the waiting driver is placed nowhere (no
        // worker), and `--input` shows what the pass reads.
        let plan: Value =
            serde_json::from_str(&stdout(&muster().args(["plan", file]).output().unwrap()))
                .unwrap();
        assert_eq!(plan["drivers"].as_array().map(Vec::len), Some(0), "{plan}");
        let input: Value = serde_json::from_str(&stdout(
            &muster().args(["plan", "--input", file]).output().unwrap(),
        ))
        .unwrap();
        assert_eq!(
            input["drivers"].as_array().map(Vec::len),
            Some(1),
            "{input}"
        );
        assert_eq!(input["queues"][0]["name"], "prod", "{input}");
        status
        // Every master and its data dir go with `masters`.
    };
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(file).unwrap().permissions().mode();
    assert_eq!(
        mode & 0o077,
        0,
        "the snapshot is readable by its owner only"
    );

    // A new cluster, every master given the file: the first to lead restores it.
    let masters = Masters::start_with(&["--restore", file]);
    let after = wait_for(&masters, "the state restored", |s| {
        s["drivers"].as_array().is_some_and(|d| !d.is_empty())
    });
    assert_eq!(project(&after), project(&before));

    // Bytes that are no snapshot never start a master.
    let garbage = saved.path().join("garbage");
    std::fs::write(&garbage, b"not a snapshot").unwrap();
    let refused = lone_master_command("127.0.0.1:1", &saved.path().join("unused"))
        .args(["--restore", garbage.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(stderr(&refused).contains("--restore"), "{refused:?}");
}

#[test]
fn a_master_joins_the_group_and_leaves_it_again() {
    let masters = Masters::start();
    masters.leader(0);
    let kept = stdout(&Masters::client(
        &masters.list_from(1),
        &["submit", "--name", "kept", "--", "/bin/true"],
    ));
    let addr = format!("127.0.0.1:{}", free_port());
    let fourth = crate::support::Process(
        master_command(
            4,
            &addr,
            &format!("{},4={addr}", masters.peers[0]),
            &masters.dir.path().join("master-4"),
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(masters.dir.path().join("master-4.log")).unwrap())
        .spawn()
        .unwrap(),
    );
    let added = stdout(&Masters::client(
        &masters.list_from(1),
        &["members", "add", &format!("4={addr}")],
    ));
    assert_eq!(added, format!("master 4 at {addr} added: it votes"));
    let roles = |status: &Value| -> Vec<(u64, String)> {
        status["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["id"].as_u64().unwrap(),
                    m["role"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let status = masters.status(&masters.list_from(1));
    let joined = roles(&status);
    assert_eq!(joined.len(), 4, "{status}");
    assert!(joined.contains(&(4, "follower".to_owned())), "{status}");

    // A check that can be typed, and that ends once the new member has applied what the
    // leader had.
    let caught_up = stdout(&Masters::client(
        &masters.list_from(1),
        &["members", "caught-up", "4"],
    ));
    let counts: Vec<u64> = caught_up
        .strip_prefix("caught up: master 4 applied ")
        .and_then(|rest| rest.split_once(" of "))
        .map(|(applied, of)| vec![applied.parse().unwrap(), of.parse().unwrap()])
        .unwrap_or_else(|| panic!("{caught_up}"));
    assert!(counts[0] >= counts[1] && counts[1] > 0, "{caught_up}");
    // The new member holds the state: its own copy has the driver.
    let start = Instant::now();
    loop {
        let local = Masters::client(&addr, &["status", "--local", "--json"]);
        if local.status.success()
            && serde_json::from_slice::<Value>(&local.stdout)
                .is_ok_and(|s| driver_ids(&s).contains(&kept.as_str()))
        {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "the new member never caught up");
        std::thread::sleep(Duration::from_millis(100));
    }

    // The pre-flight passes with every member answering, and fails naming one that does
    // not.
    let ready = stdout(&Masters::client(
        &masters.list_from(1),
        &["members", "check"],
    ));
    assert!(
        ready.ends_with("\nready") && ready.contains("master 4 at ") && !ready.contains("FAIL"),
        "{ready}"
    );
    drop(fourth);
    let not_ready = Masters::client(&masters.list_from(1), &["members", "check"]);
    assert_eq!(not_ready.status.code(), Some(4), "{not_ready:?}");
    let report = String::from_utf8_lossy(&not_ready.stdout);
    assert!(
        report.contains(&format!("FAIL  master 4 at {addr} does not answer")),
        "{report}"
    );
    assert_eq!(stderr(&not_ready), "error: not ready: 1 check(s) failed");

    let removed = stdout(&Masters::client(
        &masters.list_from(1),
        &["members", "remove", "4"],
    ));
    assert_eq!(removed, "master 4 removed");
    let status = masters.status(&masters.list_from(1));
    assert_eq!(roles(&status).len(), 3, "{status}");

    // Bad input is refused and changes nothing.
    let malformed = Masters::client(&masters.list_from(1), &["members", "add", "four"]);
    assert_eq!(malformed.status.code(), Some(2), "{malformed:?}");
    let unknown = Masters::client(&masters.list_from(1), &["members", "remove", "9"]);
    assert_eq!(unknown.status.code(), Some(3), "{unknown:?}");
    let gone = Masters::client(&masters.list_from(1), &["members", "caught-up", "4"]);
    assert_eq!(stderr(&gone), "error: master 4 is not a member");
    assert_eq!(gone.status.code(), Some(3));
    assert_eq!(roles(&masters.status(&masters.list_from(1))).len(), 3);
}

#[test]
fn the_lead_moves_to_the_master_named_and_what_runs_keeps_running() {
    let mut masters = Masters::start();
    let leader = masters.leader(0);
    let _worker = crate::support::start_worker(&masters, "w1", 4);
    let long = crate::support::submit(&masters, &["--", "/bin/sleep", "600"]);
    let pid = crate::support::driver_pid(&masters, &long);
    let target = (1..=3u64).find(|&id| id != leader).unwrap();

    // Clients keep submitting while the lead moves: each submission is accepted once.
    let list = masters.list_from(1);
    let submitters: Vec<_> = (0..3)
        .map(|_| {
            let list = list.clone();
            std::thread::spawn(move || {
                (0..12)
                    .map(|_| {
                        stdout(&Masters::client(
                            &list,
                            &["submit", "--memory", "1", "--", "/bin/true"],
                        ))
                    })
                    .collect::<Vec<String>>()
            })
        })
        .collect();
    let moved = Masters::client(&list, &["members", "transfer-leader", &target.to_string()]);
    assert_eq!(
        stdout(&moved),
        format!("the lead was handed to master {target}")
    );
    assert_eq!(masters.leader(leader), target);
    let submitted: Vec<String> = submitters
        .into_iter()
        .flat_map(|s| s.join().unwrap())
        .collect();
    let unique: std::collections::BTreeSet<&String> = submitted.iter().collect();
    assert_eq!(unique.len(), 36, "{submitted:?}");
    let status = masters.status(&masters.list_from(1));
    let known: Vec<&str> = status["drivers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["id"].as_str())
        .collect();
    for id in &submitted {
        assert!(
            known.contains(&id.as_str()),
            "{id} was accepted and is kept"
        );
    }
    let status = masters.status(&masters.list_from(1));
    assert_eq!(status["leader"], target);
    let roles: Vec<(u64, &str)> = status["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["id"].as_u64().unwrap(), m["role"].as_str().unwrap()))
        .filter(|(_, role)| *role == "leader")
        .collect();
    assert_eq!(roles, [(target, "leader")]);

    // The new leader recovers with the driver where it was, and takes new work.
    let status = wait_for(&masters, "the new leader ALIVE with the driver", |s| {
        s["recovery_state"] == "ALIVE"
            && crate::support::driver(s, &long).is_some_and(|d| d["pid"] == pid)
    });
    assert_eq!(crate::support::alive_workers(&status), 1);
    let next = crate::support::submit(&masters, &["--", "/bin/true"]);
    wait_for(&masters, "the next driver finished", |s| {
        driver_state(s, &next) == "FINISHED"
    });

    // Only a voting member can take the lead.
    let refused = Masters::client(&masters.list_from(1), &["members", "transfer-leader", "9"]);
    assert_eq!(refused.status.code(), Some(3), "{refused:?}");
    assert!(stderr(&refused).contains("not a voting member"));

    // A member that is down cannot: the transfer is refused with the reason (exit 3, not
    // the unreachable masters' 4 after retrying), and the lead stays.
    let down = (1..=3u64).find(|&id| id != target).unwrap();
    masters.running[down as usize - 1].take().unwrap().crash();
    let refused = Masters::client(
        &masters.list_from(target as usize),
        &["members", "transfer-leader", &down.to_string()],
    );
    assert_eq!(refused.status.code(), Some(3), "{refused:?}");
    assert!(
        stderr(&refused).contains(&format!("master {down}")),
        "{refused:?}"
    );
    assert_eq!(masters.leader(0), target);
    // The leader shows the crashed member as silent, and only it.
    let status = wait_for(&masters, "the crashed member silent", |s| {
        s["members"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == down && m["silent"] == true)
    });
    let silent: Vec<u64> = status["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["silent"] == true)
        .map(|m| m["id"].as_u64().unwrap())
        .collect();
    assert_eq!(silent, [down]);
    // Then a transfer to it is refused at once, saying why.
    let refused = Masters::client(
        &masters.list_from(target as usize),
        &["members", "transfer-leader", &down.to_string()],
    );
    assert_eq!(refused.status.code(), Some(3), "{refused:?}");
    assert!(
        stderr(&refused).contains(&format!("master {down} has not answered this leader")),
        "{refused:?}"
    );
}

#[test]
fn a_master_whose_raft_files_were_damaged_refuses_to_start_and_nothing_is_lost() {
    let mut masters = Masters::start();
    let leader = masters.leader(0);
    let all = masters.list_from(1);
    let submit = || stdout(&Masters::client(&all, &["submit", "--", "/bin/true"]));
    let first = submit();
    // The mark follows a growing log at most once a second: the next append records it.
    std::thread::sleep(Duration::from_millis(1100));
    let second = submit();
    let follower = (leader % 3 + 1) as usize;
    wait_for(&masters, "both drivers on every master", |s| {
        driver_ids(s).len() == 2
    });
    masters.running[follower - 1]
        .take()
        .expect("the follower runs")
        .crash();
    // Half its log file is gone, as a damaged disk or a bad copy leaves it.
    let db = masters
        .dir
        .path()
        .join(format!("master-{follower}/raft/db"));
    let length = std::fs::metadata(&db).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&db)
        .unwrap()
        .set_len(length / 2)
        .unwrap();
    let mut restarted = masters.spawn(follower);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = restarted.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "the damaged master kept running"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    let log =
        std::fs::read_to_string(masters.dir.path().join(format!("master-{follower}.log"))).unwrap();
    assert!(
        log.contains("holds less than this replica made durable"),
        "{log}"
    );
    let status = masters.status(&all);
    assert_eq!(driver_ids(&status), vec![first, second], "nothing was lost");
}

#[test]
fn a_client_that_connects_and_sends_nothing_holds_up_no_other() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let (_master, _, http) = lone_master_serving_http(dir.path());
    let start = Instant::now();
    while crate::support::https_get(&http, "/json").is_none() {
        assert!(start.elapsed() < DEADLINE, "no status over HTTPS at {http}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // A connection that never starts its TLS handshake is given 5 s; meanwhile others are
    // answered, so the idle one is still open when they have been.
    let mut idle = std::net::TcpStream::connect(&http).unwrap();
    for _ in 0..3 {
        assert!(crate::support::https_get(&http, "/json").is_some());
    }
    idle.set_nonblocking(true).unwrap();
    let still_open =
        matches!(idle.read(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    assert!(
        still_open,
        "the idle connection was dropped before the others were answered"
    );
}

#[test]
fn the_grafana_dashboard_plots_what_a_leading_master_exports() {
    let mut masters = Masters::start();
    let first = masters.leader(0);
    // A follower started again serving HTTP, then handed the lead.
    let serving = (1..=3).find(|&id| id != first as usize).unwrap();
    masters.running[serving - 1].take().unwrap().crash();
    let http = format!("127.0.0.1:{}", free_port());
    masters.running[serving - 1] = Some(masters.spawn_from(
        serving,
        &crate::support::muster_binary(),
        &["--http", &http],
    ));
    let list = masters.list_from(1);
    let start = Instant::now();
    while !Masters::client(&list, &["members", "transfer-leader", &serving.to_string()])
        .status
        .success()
    {
        assert!(start.elapsed() < DEADLINE, "the lead did not move");
        std::thread::sleep(Duration::from_millis(200));
    }
    // A peer down, a named user's driver waiting for a worker: every family has a sample.
    let other = (1..=3).find(|&id| id != serving).unwrap();
    masters.running[other - 1].take().unwrap().crash();
    let dir = tempfile::tempdir().unwrap();
    let alice = dir.path().join("alice");
    stdout(&Masters::client(
        &list,
        &["users", "add", "alice", "--out", alice.to_str().unwrap()],
    ));
    stdout(
        &muster()
            .env("MUSTER_MASTERS", &list)
            .env("MUSTER_SECRET_FILE", &alice)
            .args(["submit", "--", "/bin/true"])
            .output()
            .unwrap(),
    );
    let wanted = crate::support::dashboard_metrics(false);
    let start = Instant::now();
    loop {
        let metrics = crate::support::https_get(&http, "/metrics").unwrap_or_default();
        let missing: Vec<&String> = wanted
            .iter()
            .filter(|name| !metrics.contains(&format!("# TYPE {name} ")))
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the dashboard plots {missing:?}, which the leader does not export: {metrics}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
