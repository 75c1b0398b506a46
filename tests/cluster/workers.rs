//! Workers run what the leader places: drivers as real processes that end with their exit
//! code, held to their memory and measured, supervised restarts, a leader killed under load without
//! losing a process, a lost worker's supervised driver relaunched elsewhere, and an agent
//! restarted with SIGTERM whose successor adopts its work.

use std::time::Instant;

use crate::support::{
    Masters, Process, TWO_SLEEPERS, alive, app_run, driver, driver_pid, free_port, limited_worker,
    running_executors, signal, start_worker, start_worker_via, stdout, submit, wait_for,
    wait_for_text, worker_command,
};

#[test]
fn a_driver_over_its_memory_fails_saying_so_and_its_neighbour_runs_on() {
    let masters = Masters::start();
    masters.leader(0);
    let http = format!("127.0.0.1:{}", free_port());
    let Some(_worker) = limited_worker(&masters, "w1", 4, &["--http", &http]) else {
        return;
    };
    // `tail` keeps the last 300 MB it read, far over the 64 MB granted.
    let hog = submit(
        &masters,
        &[
            "--memory",
            "64",
            "--",
            "/bin/sh",
            "-c",
            "head -c 300000000 /dev/zero | tail -c 300000000",
        ],
    );
    let neighbour = submit(&masters, &["--memory", "64", "--", "/bin/sleep", "1000"]);
    let status = wait_for(&masters, "the hog failed and its neighbour runs", |s| {
        driver(s, &hog).is_some_and(|d| d["state"] == "FAILED")
            && driver(s, &neighbour).is_some_and(|d| d["pid"].is_u64())
    });
    let failed = driver(&status, &hog).unwrap();
    assert_eq!(failed["exit_code"], -104, "{failed}");
    assert_eq!(
        failed["exit_reason"],
        "killed for going over its memory limit"
    );
    assert_eq!(driver(&status, &neighbour).unwrap()["state"], "RUNNING");
    let table = stdout(&Masters::client(&masters.list_from(1), &["drivers"]));
    assert!(
        table.contains("exit -104 (killed for going over its memory limit)"),
        "{table}"
    );
    let metrics = metrics_of(&http);
    let line = r#"muster_worker_process_ends_total{kind="driver",code="oom"} 1"#;
    assert!(metrics.lines().any(|l| l == line), "{line} in {metrics}");

    // What a process uses is measured in its group: `tail` holds the 40 MB it read.
    let holder = submit(
        &masters,
        &[
            "--memory",
            "128",
            "--",
            "/bin/sh",
            "-c",
            "head -c 40000000 /dev/zero | tail -c 40000000 | sleep 1000",
        ],
    );
    let status = wait_for(&masters, "the holder's use measured", |s| {
        driver(s, &holder).is_some_and(|d| d["usage"]["memory_mb"].as_u64() >= Some(38))
    });
    let measured = driver(&status, &holder).unwrap();
    assert!(
        measured["usage"]["cpu_seconds"].as_f64() > Some(0.0),
        "{measured}"
    );
    assert!(
        measured["usage"]["memory_mb"].as_u64() < Some(128),
        "within its grant: {measured}"
    );
    let table = stdout(&Masters::client(&masters.list_from(1), &["drivers"]));
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(holder.as_str()) && l.contains(", mem ")),
        "{table}"
    );
    let metrics = metrics_of(&http);
    let gauge = format!(r#"muster_worker_process_memory_bytes{{kind="driver",id="{holder}"}} "#);
    let held: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix(&gauge))
        .unwrap_or_else(|| panic!("{gauge} in {metrics}"))
        .parse()
        .unwrap();
    assert!(held >= 38 * 1024 * 1024, "{held} bytes");
    // Every worker metric the shipped Grafana dashboard plots is one the worker exports.
    for name in crate::support::dashboard_metrics(true) {
        assert!(
            metrics.contains(&format!("# TYPE {name} ")),
            "{name} in {metrics}"
        );
    }
}

#[test]
fn a_driver_runs_on_a_worker_and_ends_with_its_exit_code() {
    let masters = Masters::start();
    masters.leader(0);
    let http = format!("127.0.0.1:{}", free_port());
    let _worker = start_worker_via(&masters, "w1", 4, &masters.list_from(1), &["--http", &http]);
    let failing = submit(&masters, &["--", "/bin/sh", "-c", "exit 3"]);
    let finishing = submit(&masters, &["--", "/bin/sh", "-c", "echo done"]);
    let status = wait_for(&masters, "both drivers ended", |s| {
        ["FAILED", "FINISHED"]
            .iter()
            .zip([&failing, &finishing])
            .all(|(state, id)| driver(s, id).is_some_and(|d| d["state"] == *state))
    });
    assert_eq!(driver(&status, &failing).unwrap()["exit_code"], 3);
    assert_eq!(driver(&status, &finishing).unwrap()["exit_code"], 0);
    let output = std::fs::read_to_string(
        masters
            .dir
            .path()
            .join("w1")
            .join(&finishing)
            .join("stdout"),
    )
    .unwrap();
    assert_eq!(output, "done\n");
    assert_eq!(
        status["workers"][0]["cores_used"], 0,
        "ended drivers free their cores"
    );
    // The worker's metrics count both launches and how each ended.
    let metrics = metrics_of(&http);
    for line in [
        r#"muster_worker_launches_total{kind="driver"} 2"#,
        r#"muster_worker_process_ends_total{kind="driver",code="3"} 1"#,
        r#"muster_worker_process_ends_total{kind="driver",code="0"} 1"#,
        r#"muster_worker_processes{kind="driver"} 0"#,
        "muster_worker_leader_connected 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in {metrics}");
    }

    // A demand no worker could ever hold is accepted, and status says why it waits.
    let huge = submit(&masters, &["--cores", "64", "--", "/bin/true"]);
    let status = wait_for(&masters, "a reason to wait", |s| {
        driver(s, &huge).is_some_and(|d| d["waiting"].is_string())
    });
    assert_eq!(
        driver(&status, &huge).unwrap()["waiting"],
        "a driver needs 64 cores, 1024 MB: more than any ALIVE worker has in total"
    );
}

/// A worker's `/metrics` over plain HTTP.
fn metrics_of(http: &str) -> String {
    let response = crate::support::plain_http_get(http, "/metrics");
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

#[test]
fn submit_wait_follows_the_driver_and_exits_with_its_code() {
    let masters = Masters::start();
    masters.leader(0);
    let _worker = start_worker(&masters, "w1", 4);
    let wait = |script: &str| {
        Masters::client(
            &masters.list_from(1),
            &["submit", "--wait", "--", "/bin/sh", "-c", script],
        )
    };
    let failing = wait("sleep 0.5; exit 3");
    assert_eq!(failing.status.code(), Some(3), "{failing:?}");
    let id = String::from_utf8(failing.stdout).unwrap();
    let progress = String::from_utf8(failing.stderr).unwrap();
    assert!(id.trim().starts_with("driver-"), "{id}");
    assert!(
        progress.contains(&format!("{} RUNNING on ", id.trim())),
        "the progress names its worker: {progress}"
    );
    assert!(progress.contains("failed with exit code 3"), "{progress}");

    let finishing = wait("exit 0");
    assert_eq!(finishing.status.code(), Some(0), "{finishing:?}");
}

#[test]
fn a_drained_worker_takes_no_new_work_and_leaves_once_its_work_ends() {
    let masters = Masters::start();
    masters.leader(0);
    let _worker = start_worker(&masters, "w1", 2);
    let first = submit(&masters, &["--", "/bin/sh", "-c", "sleep 2"]);
    let status = wait_for(&masters, "the first driver running", |s| {
        driver(s, &first).is_some_and(|d| d["state"] == "RUNNING")
    });
    let w1 = crate::support::worker_on(&status, "w1");
    let w1 = w1.as_str().unwrap();
    crate::support::stdout(&Masters::client(
        &masters.list_from(1),
        &["workers", "drain", w1],
    ));

    // The drained worker keeps its driver and takes no new one: the second waits.
    let second = submit(&masters, &["--", "/bin/true"]);
    let status = wait_for(&masters, "w1 draining, the second driver waiting", |s| {
        s["workers"][0]["draining"] == true
            && driver(s, &second).is_some_and(|d| d["waiting"].is_string())
    });
    assert_eq!(driver(&status, &first).unwrap()["state"], "RUNNING");
    let table = crate::support::stdout(&Masters::client(&masters.list_from(1), &["workers"]));
    assert!(table.contains("DRAINING"), "{table}");

    // Once the first driver ends, the worker leaves; the second never ran there.
    let status = wait_for(&masters, "w1 decommissioned", |s| {
        s["workers"][0]["state"] == "DECOMMISSIONED"
    });
    assert_eq!(driver(&status, &first).unwrap()["state"], "FINISHED");
    assert_eq!(driver(&status, &second).unwrap()["state"], "SUBMITTED");

    // Only an ALIVE worker can be drained.
    let refused = Masters::client(&masters.list_from(1), &["workers", "drain", w1]);
    assert_eq!(refused.status.code(), Some(3), "{refused:?}");
    assert!(
        crate::support::stderr(&refused).contains("only an ALIVE worker can be drained"),
        "{refused:?}"
    );
}

#[test]
fn a_failing_supervised_driver_is_restarted_on_its_worker() {
    let masters = Masters::start();
    masters.leader(0);
    let _worker = start_worker(&masters, "w1", 4);
    let id = submit(
        &masters,
        &[
            "--supervise",
            "--",
            "/bin/sh",
            "-c",
            "echo run >> runs; exit 1",
        ],
    );
    let runs = masters.dir.path().join("w1").join(&id).join("runs");
    let start = Instant::now();
    while std::fs::read_to_string(&runs).map_or(0, |r| r.lines().count()) < 3 {
        assert!(
            start.elapsed() < crate::support::DEADLINE,
            "the driver was not restarted"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // Restarts stay on the worker, and show: how many, and how the last run failed.
    let status = wait_for(&masters, "the restarts reported", |s| {
        driver(s, &id).is_some_and(|d| d["restarts"]["count"].as_u64() >= Some(2))
    });
    let shown = driver(&status, &id).unwrap();
    assert_eq!(
        (&shown["state"], &shown["restarts"]["last_exit_code"]),
        (&serde_json::json!("RUNNING"), &serde_json::json!(1)),
        "{shown}"
    );
    let table = stdout(&Masters::client(&masters.list_from(1), &["drivers", &id]));
    assert!(
        table.contains("restarted ") && table.contains("last failed with exit 1"),
        "{table}"
    );
}

#[test]
fn killing_the_leader_keeps_every_process_and_work_is_placed_again() {
    let mut masters = Masters::start();
    let first = masters.leader(0);
    let _workers = [
        start_worker(&masters, "w1", 2),
        start_worker(&masters, "w2", 2),
    ];
    let long = submit(
        &masters,
        &["--supervise", "--name", "long", "--", "/bin/sleep", "1000"],
    );
    let pid = driver_pid(&masters, &long);

    let killed = Instant::now();
    masters.running[first as usize - 1]
        .take()
        .expect("the leader runs")
        .crash();
    let after = wait_for(&masters, "a new leader ALIVE with both workers back", |s| {
        s["leader"] != first
            && s["recovery_state"] == "ALIVE"
            && s["workers"]
                .as_array()
                .unwrap()
                .iter()
                .all(|w| w["state"] == "ALIVE")
    });
    let alive_after = killed.elapsed();
    let d = driver(&after, &long).unwrap();
    assert_eq!(
        (d["state"].as_str(), d["pid"].as_u64()),
        (Some("RUNNING"), Some(pid)),
        "the same process runs on"
    );
    assert!(alive(pid));
    assert_eq!(
        after["drivers"].as_array().unwrap().len(),
        1,
        "nothing was duplicated"
    );

    let next = submit(&masters, &["--", "/bin/sleep", "1000"]);
    wait_for(&masters, "new work placed", |s| {
        driver(s, &next).is_some_and(|d| d["state"] == "RUNNING")
    });
    println!(
        "leader killed: ALIVE again after {alive_after:?}, new work placed after {:?}",
        killed.elapsed()
    );
}

#[test]
fn a_lost_workers_supervised_driver_relaunches_elsewhere_under_a_new_id() {
    let masters = Masters::start_with(&["--worker-timeout", "2"]);
    masters.leader(0);
    let first = start_worker(&masters, "w1", 2);
    let id = submit(&masters, &["--supervise", "--", "/bin/sleep", "1000"]);
    let pid = driver_pid(&masters, &id);
    let _second = start_worker(&masters, "w2", 2);

    // The machine goes away: the worker and everything it runs.
    first.crash();
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );

    let status = wait_for(&masters, "the driver relaunched", |s| {
        driver(s, &id).is_some_and(|d| d["state"] == "RELAUNCHING")
            && s["drivers"]
                .as_array()
                .unwrap()
                .iter()
                .any(|d| d["state"] == "RUNNING" && d["id"] != id.as_str())
    });
    let relaunched = status["drivers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["state"] == "RUNNING")
        .unwrap();
    // The old id names its successor.
    assert_eq!(
        driver(&status, &id).unwrap()["relaunched_as"],
        relaunched["id"],
        "{status}"
    );
    let table = stdout(&Masters::client(&masters.list_from(1), &["drivers", &id]));
    assert!(
        table.contains(&format!(
            "relaunched as {}",
            relaunched["id"].as_str().unwrap()
        )),
        "{table}"
    );
    let host = status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["id"] == relaunched["worker"])
        .unwrap();
    assert_eq!(host["host"], "w2");
    let lost = status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["host"] == "w1")
        .unwrap();
    assert_eq!(lost["state"], "DEAD");
}

#[test]
fn all_masters_restarted_recover_from_disk_and_the_worker_reconnects() {
    let mut masters = Masters::start();
    masters.leader(0);
    let _worker = start_worker(&masters, "w1", 4);
    let long = submit(&masters, &["--supervise", "--", "/bin/sleep", "1000"]);
    let pid = driver_pid(&masters, &long);

    for master in &mut masters.running {
        master.take().expect("every master runs").crash();
    }
    for id in 1..=3 {
        masters.running[id - 1] = Some(masters.spawn(id));
    }
    let after = wait_for(&masters, "ALIVE again with the worker back", |s| {
        s["recovery_state"] == "ALIVE"
            && s["workers"]
                .as_array()
                .unwrap()
                .iter()
                .all(|w| w["state"] == "ALIVE")
    });
    let d = driver(&after, &long).unwrap();
    assert_eq!(
        (d["state"].as_str(), d["pid"].as_u64()),
        (Some("RUNNING"), Some(pid)),
        "state and process survived"
    );
    assert!(alive(pid));
    let next = submit(&masters, &["--", "/bin/sleep", "1000"]);
    wait_for(&masters, "new work placed", |s| {
        driver(s, &next).is_some_and(|d| d["state"] == "RUNNING")
    });
}

#[test]
fn gpus_are_handed_out_by_address_kept_through_a_failover_and_freed_when_their_process_ends() {
    let mut masters = Masters::start();
    let first = masters.leader(0);
    let gpus = ["--resources", "gpu=GPU-a,GPU-b"];
    let agent = start_worker_via(&masters, "w1", 4, &masters.list_from(1), &gpus);
    // Each driver prints what it was told it holds, then runs on.
    let tells = r#"echo "$CUDA_VISIBLE_DEVICES $MUSTER_RESOURCE_GPU"; cat "$MUSTER_RESOURCES_FILE"; echo; exec sleep 1000"#;
    let submit_gpu = || {
        submit(
            &masters,
            &["--resources", "gpu=1", "--", "/bin/sh", "-c", tells],
        )
    };
    let (one, two) = (submit_gpu(), submit_gpu());
    let holds = |status: &serde_json::Value, id: &str| -> Vec<String> {
        let addresses = &driver(status, id).unwrap()["addresses"]["gpu"];
        serde_json::from_value(addresses.clone()).unwrap_or_default()
    };
    let status = wait_for(&masters, "both drivers running with a GPU", |s| {
        [&one, &two]
            .iter()
            .all(|id| driver(s, id).is_some_and(|d| d["state"] == "RUNNING"))
    });
    let held = [holds(&status, &one), holds(&status, &two)];
    let mut all: Vec<&str> = held.iter().flatten().map(String::as_str).collect();
    all.sort_unstable();
    assert_eq!(all, ["GPU-a", "GPU-b"], "one GPU each: {held:?}");
    assert_eq!(
        status["workers"][0]["addresses"]["gpu"],
        serde_json::json!(["GPU-a", "GPU-b"])
    );
    for (id, held) in [&one, &two].iter().zip(&held) {
        let out = masters.dir.path().join("w1").join(id).join("stdout");
        let told = wait_for_output(&out, 2);
        let gpu = &held[0];
        assert_eq!(told[0], format!("{gpu} {gpu}"), "{id}'s environment");
        let file: serde_json::Value = serde_json::from_str(&told[1]).unwrap();
        assert_eq!(
            file,
            serde_json::json!([{"id": {"componentName": "spark.driver", "resourceName": "gpu"},
                                "addresses": [gpu]}]),
            "{id}'s resources file"
        );
    }
    // A third waits for a GPU.
    let three = submit_gpu();
    wait_for(&masters, "the third driver waiting for a GPU", |s| {
        driver(s, &three).is_some_and(|d| d["waiting"].is_string())
    });

    // The leader is killed and the agent restarted: the same processes hold the same GPUs.
    let pids = [driver_pid(&masters, &one), driver_pid(&masters, &two)];
    masters.running[first as usize - 1]
        .take()
        .expect("the leader runs")
        .crash();
    agent.crash();
    let _agent = start_worker_via(&masters, "w1", 4, &masters.list_from(1), &gpus);
    let after = wait_for(&masters, "a new leader ALIVE with the worker back", |s| {
        s["leader"] != first
            && s["recovery_state"] == "ALIVE"
            && s["workers"][0]["state"] == "ALIVE"
    });
    assert_eq!([holds(&after, &one), holds(&after, &two)], held);
    assert_eq!(
        [driver_pid(&masters, &one), driver_pid(&masters, &two)],
        pids
    );
    assert!(
        driver(&after, &three).unwrap()["addresses"]
            .as_object()
            .unwrap()
            .is_empty()
    );

    // A driver that ends frees its GPU, and the waiting one gets it.
    let output = Masters::client(&masters.list_from(1), &["kill", &one]);
    assert!(
        output.status.success(),
        "{}",
        crate::support::stderr(&output)
    );
    let freed = wait_for(&masters, "the third driver running", |s| {
        driver(s, &three).is_some_and(|d| d["state"] == "RUNNING")
    });
    assert_eq!(holds(&freed, &three), held[0]);
    assert!(
        driver(&freed, &one).unwrap()["addresses"]
            .as_object()
            .unwrap()
            .is_empty()
    );
}

#[test]
fn a_killed_process_keeps_its_gpu_until_it_has_ended() {
    let masters = Masters::start();
    masters.leader(0);
    // Kept until its end is reported once every master reads that.
    wait_for(&masters, "log format 3 or newer", |s| {
        s["log_format"].as_u64() >= Some(3)
    });
    let _agent = start_worker_via(
        &masters,
        "w1",
        4,
        &masters.list_from(1),
        &["--resources", "gpu=1"],
    );
    // The first driver, and everything it starts, ignores SIGTERM: it holds its GPU until
    // the worker's SIGKILL at the end of its kill grace.
    let stubborn = "trap '' TERM; while :; do sleep 1; done";
    let gpu = ["--resources", "gpu=1", "--", "/bin/sh", "-c"];
    let first = submit(&masters, &[&gpu[..], &[stubborn]].concat());
    let pid = driver_pid(&masters, &first);
    let second = submit(&masters, &[&gpu[..], &["exec sleep 1000"]].concat());
    wait_for(&masters, "the second driver waiting for the GPU", |s| {
        driver(s, &second).is_some_and(|d| d["waiting"].is_string())
    });

    let killed = Instant::now();
    let output = Masters::client(&masters.list_from(1), &["kill", &first]);
    assert!(output.status.success(), "{output:?}");
    let running =
        |s: &serde_json::Value| driver(s, &second).is_some_and(|d| d["state"] == "RUNNING");
    loop {
        let status = masters.status(&masters.list_from(1));
        if running(&status) {
            assert!(
                !alive(pid),
                "the GPU went to the second driver while the first ran"
            );
            break;
        }
        assert!(
            killed.elapsed() < crate::support::DEADLINE,
            "the second driver never got the GPU: {status}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // It waited out the first one's kill grace (10 s), which ignored SIGTERM.
    let waited = killed.elapsed();
    assert!(
        waited.as_secs() >= 9,
        "the GPU was handed on after {waited:?}"
    );
}

/// The first `lines` lines of the output file `path`, once they are there.
fn wait_for_output(path: &std::path::Path, lines: usize) -> Vec<String> {
    let deadline = Instant::now() + crate::support::DEADLINE;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let got: Vec<String> = text.lines().map(str::to_owned).collect();
        if got.len() >= lines {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{} has {text:?}, not {lines} lines",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The processes whose parent is `parent`.
fn children_of(parent: u64) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| {
            let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // The parent is the second field after the parenthesised command name.
            let ppid: u64 = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            (ppid == parent).then_some(pid)
        })
        .collect()
}

/// The process ids of `app`'s RUNNING executors, by executor id.
fn executor_pids(status: &serde_json::Value, app: &str) -> Vec<(u64, u64)> {
    running_executors(status, app)
        .iter()
        .map(|e| (e["id"].as_u64().unwrap(), e["pid"].as_u64().unwrap()))
        .collect()
}

#[test]
fn a_worker_agent_stopped_with_sigterm_leaves_its_work_running_for_the_next_to_adopt() {
    let masters = Masters::start();
    let agent = |masters: &Masters| {
        let mut command = worker_command(masters, "w1", 4, &masters.list_from(1), &[]);
        command.env_remove("MUSTER_STOP_WORK_ON_EXIT");
        Process(command.spawn().expect("muster worker starts"))
    };
    let mut first = agent(&masters);
    let long = submit(
        &masters,
        &["--supervise", "--name", "long", "--", "/bin/sleep", "1000"],
    );
    let (_app_run, app_id, _out) = app_run(&masters, TWO_SLEEPERS);
    let before = wait_for(&masters, "the driver and both executors running", |s| {
        driver(s, &long).is_some_and(|d| d["state"] == "RUNNING" && d["pid"].is_u64())
            && running_executors(s, &app_id).len() == 2
    });
    let driver_pid = driver(&before, &long).unwrap()["pid"].as_u64().unwrap();
    let executors = executor_pids(&before, &app_id);

    // What a service manager does to restart the agent (the shipped unit kills only the
    // agent's own process).
    signal(first.pid(), nix::sys::signal::Signal::SIGTERM);
    let stopping = Instant::now();
    let exited = first.exited("the agent after SIGTERM");
    assert!(exited.success(), "the agent stops cleanly: {exited}");
    assert!(alive(driver_pid), "the driver outlives its agent");
    assert!(executors.iter().all(|&(_, pid)| alive(pid)));

    let _second = agent(&masters);
    wait_for_text(
        &masters.dir.path().join("w1.log"),
        "the next agent adopting all three",
        |log| log.matches("adopted").count() == 3 && log.contains("registered with the leader"),
    );
    println!(
        "agent restarted with SIGTERM: registered again with its work adopted after {:?}",
        stopping.elapsed()
    );
    let after = wait_for(&masters, "the same work on the worker", |s| {
        s["workers"][0]["state"] == "ALIVE"
            && driver(s, &long).is_some_and(|d| d["pid"].as_u64() == Some(driver_pid))
            && executor_pids(s, &app_id) == executors
    });
    assert_eq!(after["workers"].as_array().unwrap().len(), 1);
    assert_eq!(
        after["drivers"].as_array().unwrap().len(),
        1,
        "the driver was neither relaunched nor doubled"
    );
    let app = crate::support::app(&after, &app_id).unwrap();
    assert_eq!(
        app["executors"].as_array().unwrap().len(),
        2,
        "no executor was lost or added: {app}"
    );
    // The new agent watches what it adopted: the supervised driver's program, killed, is
    // started again (its wrapper, the process the status names, writes its exit code).
    for program in children_of(driver_pid) {
        signal(program, nix::sys::signal::Signal::SIGKILL);
    }
    wait_for(
        &masters,
        "the adopted driver restarted by its new agent",
        |s| {
            driver(s, &long).is_some_and(|d| {
                d["state"] == "RUNNING" && d["pid"].as_u64().is_some_and(|pid| pid != driver_pid)
            })
        },
    );
}

#[test]
fn a_drained_workers_executors_apps_hear_of_it_before_anything_is_killed() {
    let masters = Masters::start();
    masters.leader(0);
    let _worker = start_worker(&masters, "w1", 2);
    let (_run, id, mut out) = app_run(
        &masters,
        &[
            "--cores-max",
            "2",
            "--executor-cores",
            "1",
            "--executor-memory",
            "64",
            "--",
            "/bin/sleep",
            "600",
        ],
    );
    let status = wait_for(&masters, "two executors running", |s| {
        running_executors(s, &id).len() == 2
    });
    let w1 = crate::support::worker_on(&status, "w1");
    stdout(&Masters::client(
        &masters.list_from(1),
        &[
            "workers",
            "drain",
            w1.as_str().unwrap(),
            "--kill-after",
            "30",
        ],
    ));
    let mut told = std::collections::BTreeSet::new();
    let mut line = String::new();
    while told.len() < 2 {
        line.clear();
        assert!(
            std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0,
            "app run ended before it heard of the drain"
        );
        if let Some(rest) = line.strip_prefix("executor ")
            && let Some((executor, said)) = rest.split_once("'s worker is drained: ")
        {
            assert_eq!(said.trim(), "killed within 30.0 s", "{line}");
            told.insert(executor.to_owned());
        }
    }
    // Nothing was killed meanwhile.
    let status = masters.status(&masters.list_from(1));
    assert_eq!(running_executors(&status, &id).len(), 2, "{status}");
}
