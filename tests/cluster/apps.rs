//! Applications through `muster app run`: executors are real processes placed exactly where
//! `muster plan` places them for the same cluster, Ctrl-C finishes the application, and a
//! leader failover leaves its executors running.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::process::Stdio;

use serde_json::{Value, json};

use crate::support::{
    DEADLINE, Masters, Process, SLEEPERS, TWO_SLEEPERS, alive, app, app_run, limited_worker,
    muster, running_executors, start_worker, wait_for,
};

fn interrupt(process: &Process) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(process.0.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
}

/// Executors per worker id.
fn per_worker(executors: &[Value]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for e in executors {
        *counts
            .entry(e["worker"].as_str().unwrap().to_owned())
            .or_insert(0) += 1;
    }
    counts
}

#[test]
fn executors_land_where_muster_plan_says_and_ctrl_c_finishes_the_app() {
    let masters = Masters::start();
    masters.leader(0);
    let _workers = [
        start_worker(&masters, "w1", 4),
        start_worker(&masters, "w2", 2),
    ];
    let cluster = wait_for(&masters, "both workers", |s| {
        s["workers"].as_array().unwrap().len() == 2
    });

    // What the placement core says for this cluster and this application.
    let snapshot = json!({
        "workers": cluster["workers"].as_array().unwrap().iter().map(|w| json!({
            "id": w["id"], "cores": w["cores"], "memory_mb": w["memory_mb"],
        })).collect::<Vec<_>>(),
        "apps": [{"id": "app", "cores_max": 5, "executor_cores": 1, "executor_memory_mb": 256}],
    });
    let mut plan = muster()
        .args(["plan", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    plan.stdin
        .take()
        .unwrap()
        .write_all(snapshot.to_string().as_bytes())
        .unwrap();
    let plan: Value = serde_json::from_slice(&plan.wait_with_output().unwrap().stdout).unwrap();
    let mut planned = BTreeMap::new();
    for grant in plan["executors"].as_array().unwrap() {
        *planned
            .entry(grant["worker"].as_str().unwrap().to_owned())
            .or_insert(0) += grant["count"].as_u64().unwrap() as usize;
    }

    let (run, id, mut out) = app_run(&masters, &[&["--cores-max", "5"][..], SLEEPERS].concat());
    assert!(id.starts_with("app-"), "{id}");
    let status = wait_for(&masters, "five executors running", |s| {
        running_executors(s, &id).len() == 5
    });
    let executors = running_executors(&status, &id);
    assert_eq!(
        per_worker(&executors),
        planned,
        "the leader placed what muster plan plans"
    );
    assert_eq!(app(&status, &id).unwrap()["cores_granted"], 5);

    interrupt(&run);
    let mut rest = String::new();
    for line in (&mut out).lines() {
        rest.push_str(&line.unwrap());
        rest.push('\n');
    }
    assert!(
        rest.ends_with(&format!("application {id} FINISHED\n")),
        "{rest}"
    );
    assert!(
        rest.matches("KILLED").count() == 5,
        "every executor was reported killed: {rest}"
    );
    let status = wait_for(&masters, "the app gone", |s| app(s, &id).is_none());
    let completed = &status["completed_apps"];
    assert_eq!(
        [
            &completed[0]["id"],
            &completed[0]["name"],
            &completed[0]["state"]
        ],
        [&json!(id), &json!("sleep"), &json!("FINISHED")],
        "it is listed as completed, named after its program: {completed}"
    );
    let listed = crate::support::stdout(&Masters::client(&masters.list_from(1), &["apps"]));
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with(&id) && l.contains(" FINISHED ")),
        "`muster apps` lists it too: {listed}"
    );
    let ended = completed[0]["ended_executors"].as_array().unwrap();
    assert_eq!(
        (ended.len(), ended.iter().all(|e| e["state"] == "KILLED")),
        (5, true),
        "where its executors ran is kept: {completed}"
    );
    // And how each exited, once its worker reported the end of its process.
    wait_for(&masters, "the stopped executors' exit codes", |s| {
        let completed = &s["completed_apps"][0];
        completed["id"] == json!(id)
            && completed["ended_executors"]
                .as_array()
                .unwrap()
                .iter()
                .all(|e| e["state"] == "KILLED" && e["exit_code"].is_i64())
    });
    // Their room is free once their worker reported their processes' end.
    wait_for(&masters, "every core free", |s| {
        s["workers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|w| w["cores_used"] == 0)
    });
    let pids: Vec<u64> = executors
        .iter()
        .map(|e| e["pid"].as_u64().unwrap())
        .collect();
    let start = std::time::Instant::now();
    while pids.iter().any(|&pid| alive(pid)) {
        assert!(
            start.elapsed() < crate::support::DEADLINE,
            "executor processes outlived the app"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn an_application_keeps_its_executors_across_a_leader_failover() {
    let mut masters = Masters::start();
    let first = masters.leader(0);
    let _worker = start_worker(&masters, "w1", 4);
    let (run, id, _out) = app_run(&masters, TWO_SLEEPERS);
    let before = wait_for(&masters, "two executors running", |s| {
        running_executors(s, &id).len() == 2
    });
    let pids: Vec<u64> = running_executors(&before, &id)
        .iter()
        .map(|e| e["pid"].as_u64().unwrap())
        .collect();

    masters.running[first as usize - 1]
        .take()
        .expect("the leader runs")
        .crash();
    let after = wait_for(&masters, "a new leader ALIVE", |s| {
        s["leader"] != first && s["recovery_state"] == "ALIVE"
    });
    let still: Vec<u64> = running_executors(&after, &id)
        .iter()
        .map(|e| e["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(
        still, pids,
        "the same executor processes, nothing relaunched"
    );
    assert!(pids.iter().all(|&pid| alive(pid)));
    assert_eq!(
        app(&after, &id).unwrap()["state"],
        "RUNNING",
        "the client re-attached in time"
    );

    interrupt(&run);
    wait_for(&masters, "the app finished", |s| app(s, &id).is_none());
}

#[test]
fn a_prior_application_goes_first_and_the_threshold_holds_on_its_worker() {
    let masters = Masters::start();
    masters.leader(0);
    crate::support::set_queues(
        &masters.list_from(1),
        masters.dir.path(),
        r#"[{"name": "prod", "prior": true}, {"name": "default", "threshold": 0.5}]"#,
    );
    let _worker = start_worker(&masters, "w1", 4);
    wait_for(&masters, "the worker", |s| {
        s["workers"].as_array().unwrap().len() == 1
    });

    // Normal work fills the worker.
    let (filler, filler_id, _filler_out) = app_run(&masters, SLEEPERS);
    wait_for(&masters, "the worker full", |s| {
        running_executors(s, &filler_id).len() == 4
    });

    // A normal app, then a prior one, both wait.
    let two =
        |queue: &'static str| [&["--queue", queue, "--cores-max", "2"][..], SLEEPERS].concat();
    let (_normal, normal_id, _normal_out) = app_run(&masters, &two("default"));
    let (_prior, prior_id, _prior_out) = app_run(&masters, &two("prod"));
    wait_for(&masters, "both waiting", |s| {
        [&normal_id, &prior_id]
            .iter()
            .all(|id| app(s, id).is_some_and(|a| a["waiting"].is_string()))
    });

    // Resources free: the prior app is placed first, and the normal app may not fill the
    // worker that now runs prior work beyond its threshold (2 of 4 cores).
    interrupt(&filler);
    let status = wait_for(&masters, "the prior app placed", |s| {
        running_executors(s, &prior_id).len() == 2
    });
    assert!(
        running_executors(&status, &normal_id).is_empty(),
        "{status}"
    );
    let status = wait_for(&masters, "the normal app's reason", |s| {
        app(s, &normal_id).is_some_and(|a| {
            a["waiting"]
                .as_str()
                .is_some_and(|w| w.contains("threshold 0.5"))
        })
    });
    assert_eq!(status["workers"][0]["cores_used"], 2);
}

#[test]
fn a_lost_workers_executors_are_lost_and_replaced_elsewhere() {
    let masters = Masters::start_with(&["--worker-timeout", "2"]);
    masters.leader(0);
    let first = start_worker(&masters, "w1", 2);
    let (_run, id, _out) = app_run(&masters, TWO_SLEEPERS);
    let before = wait_for(&masters, "two executors on w1", |s| {
        running_executors(s, &id).len() == 2
    });
    let old: Vec<(u64, u64)> = running_executors(&before, &id)
        .iter()
        .map(|e| (e["id"].as_u64().unwrap(), e["pid"].as_u64().unwrap()))
        .collect();
    let _second = start_worker(&masters, "w2", 2);

    // The machine goes away: the worker and everything it runs.
    first.crash();
    for (_, pid) in &old {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(*pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }

    let after = wait_for(&masters, "two new executors", |s| {
        let running = running_executors(s, &id);
        running.len() == 2
            && running
                .iter()
                .all(|e| old.iter().all(|(old_id, _)| e["id"] != *old_id))
    });
    let w2 = crate::support::worker_on(&after, "w2");
    assert!(
        running_executors(&after, &id)
            .iter()
            .all(|e| e["worker"] == w2),
        "replaced on the worker that is left"
    );
    assert_eq!(app(&after, &id).unwrap()["cores_granted"], 2);
}

#[test]
fn an_application_whose_client_vanishes_is_finished_after_the_grace_period() {
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), r#"{"app_grace_s": 1}"#).unwrap();
    let masters = Masters::start_with(&["--config", config.path().to_str().unwrap()]);
    masters.leader(0);
    let _worker = start_worker(&masters, "w1", 4);
    let (run, id, _out) = app_run(&masters, TWO_SLEEPERS);
    let before = wait_for(&masters, "two executors running", |s| {
        running_executors(s, &id).len() == 2
    });
    let pids: Vec<u64> = running_executors(&before, &id)
        .iter()
        .map(|e| e["pid"].as_u64().unwrap())
        .collect();

    // The client dies without finishing: after the grace period the app is finished for it.
    run.crash();
    wait_for(&masters, "the app finished", |s| app(s, &id).is_none());
    let start = std::time::Instant::now();
    while pids.iter().any(|&pid| alive(pid)) {
        assert!(
            start.elapsed() < crate::support::DEADLINE,
            "executor processes outlived the app"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn an_attached_application_sets_its_limit_and_releases_executors() {
    let masters = Masters::start();
    masters.leader(0);
    let _worker = start_worker(&masters, "w1", 4);
    let (mut run, id, _out) = app_run(&masters, SLEEPERS);
    let ids = |s: &Value| crate::support::running_executor_ids(s, &id);
    wait_for(&masters, "four executors", |s| ids(s) == [0, 1, 2, 3]);
    let mut stdin = run.0.stdin.take().unwrap();

    // Lowering the limit kills nothing; releasing under it is not replaced.
    writeln!(stdin, "limit 2").unwrap();
    writeln!(stdin, "release 0 1").unwrap();
    wait_for(&masters, "two released", |s| ids(s) == [2, 3]);
    // Their cores are free once the worker reported their processes' end.
    wait_for(&masters, "the released executors' cores free", |s| {
        s["workers"][0]["cores_used"] == 2
    });
    // A scheduling pass after the release saw the app at its limit and granted nothing.
    let capped = wait_for(&masters, "a pass with the app at its limit", |s| {
        app(s, &id)
            .is_some_and(|a| a["waiting"] == "executor limit reached: holds 2 executors, limit 2")
    });
    assert_eq!(
        ids(&capped),
        [2, 3],
        "released executors stay released under the limit"
    );

    // Lifting the limit lets the scheduler grant new executors, under new ids.
    writeln!(stdin, "limit none").unwrap();
    wait_for(&masters, "two new executors", |s| ids(s) == [2, 3, 4, 5]);
}

#[test]
fn a_prior_application_preempts_an_ordinary_one_and_its_room_is_kept_for_it() {
    let (masters, _settings) = crate::support::preempting_masters();
    let _worker = start_worker(&masters, "w1", 4);
    let (filler, filler_id, filler_out) = app_run(&masters, SLEEPERS);
    let before = wait_for(&masters, "the worker full", |s| {
        running_executors(s, &filler_id).len() == 4
    });
    let youngest = running_executors(&before, &filler_id)
        .iter()
        .map(|e| e["id"].as_u64().unwrap())
        .max()
        .unwrap();

    // The prior app waits for room, then takes the youngest ordinary executor's core.
    let prior = [&["--queue", "prod", "--cores-max", "1"][..], SLEEPERS].concat();
    let (_prior, prior_id, _prior_out) = app_run(&masters, &prior);
    // For the grace (2 s) the freed core is kept, and status says for whom.
    let kept = wait_for(&masters, "the room kept", |s| {
        s["kept"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k["owner"] == prior_id)
    });
    assert_eq!(kept["kept"][0]["cores"], 1, "{kept}");
    let after = wait_for(&masters, "the prior app running", |s| {
        running_executors(s, &prior_id).len() == 1
    });
    let left: Vec<u64> = running_executors(&after, &filler_id)
        .iter()
        .map(|e| e["id"].as_u64().unwrap())
        .collect();
    assert_eq!(left.len(), 3, "one ordinary executor stopped: {after}");
    assert!(!left.contains(&youngest), "the youngest one: {after}");
    assert_eq!(after["workers"][0]["cores_used"], 4);

    // The ordinary app was told why, with the grace, before its executor's end.
    interrupt(&filler);
    let told: Vec<String> = filler_out.lines().map(Result::unwrap).collect();
    let notice = format!("executor {youngest} preempted for prior work: killed within 2.0 s");
    let notice_at = told.iter().position(|line| *line == notice);
    let end_at = told.iter().position(|line| {
        line.starts_with(&format!("executor {youngest} on ")) && line.ends_with("KILLED")
    });
    assert!(
        notice_at.is_some() && notice_at < end_at,
        "the notice, then the end: {told:#?}"
    );
}

#[test]
fn a_prior_application_that_needs_a_gpu_preempts_the_executor_holding_it() {
    let (masters, _settings) = crate::support::preempting_masters();
    // Cores to spare, and one GPU.
    let _worker = crate::support::start_worker_via(
        &masters,
        "w1",
        4,
        &masters.list_from(1),
        &["--resources", "gpu=1"],
    );
    let gpu = ["--executor-resources", "gpu=1"];
    let (_filler, filler_id, _filler_out) = app_run(&masters, &[&gpu[..], SLEEPERS].concat());
    let before = wait_for(&masters, "the GPU held", |s| {
        running_executors(s, &filler_id).len() == 1
    });
    assert_eq!(before["workers"][0]["resources_used"]["gpu"], 1, "{before}");

    let prior = [&["--queue", "prod", "--cores-max", "1"][..], &gpu, SLEEPERS].concat();
    let (_prior, prior_id, _prior_out) = app_run(&masters, &prior);
    let after = wait_for(&masters, "the prior app running on the GPU", |s| {
        running_executors(s, &prior_id).len() == 1
    });
    let executor = &running_executors(&after, &prior_id)[0];
    assert_eq!(executor["resources"], json!({"gpu": 1}), "{after}");
    assert_eq!(running_executors(&after, &filler_id).len(), 0, "{after}");
    let filler = app(&after, &filler_id).unwrap();
    assert!(
        filler["waiting"]
            .as_str()
            .is_some_and(|w| w.contains("gpu")),
        "{after}"
    );
}

#[test]
fn room_kept_for_prior_work_survives_a_leader_failover_and_nothing_is_preempted_twice() {
    let (mut masters, _settings) = crate::support::preempting_masters();
    let _worker = start_worker(&masters, "w1", 4);
    let (_filler, filler_id, _filler_out) = app_run(&masters, SLEEPERS);
    let before = wait_for(&masters, "the worker full", |s| {
        running_executors(s, &filler_id).len() == 4
    });
    let mut held: Vec<u64> = running_executors(&before, &filler_id)
        .iter()
        .map(|e| e["id"].as_u64().unwrap())
        .collect();
    held.sort_unstable();
    let prior = [&["--queue", "prod", "--cores-max", "1"][..], SLEEPERS].concat();
    let (_prior, prior_id, _prior_out) = app_run(&masters, &prior);
    wait_for(&masters, "the room kept", |s| {
        s["kept"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k["owner"] == prior_id)
    });

    // The leader dies between the preemption and the grant of the room it kept.
    let leader = masters.leader(0);
    masters.running[leader as usize - 1]
        .take()
        .expect("the leader runs")
        .crash();
    masters.leader(leader);

    // The new leader keeps the room and gives it to the prior app; the ordinary app lost
    // its youngest executor only.
    let after = wait_for(&masters, "the prior app running", |s| {
        running_executors(s, &prior_id).len() == 1 && s["kept"].as_array().unwrap().is_empty()
    });
    let left: Vec<u64> = running_executors(&after, &filler_id)
        .iter()
        .map(|e| e["id"].as_u64().unwrap())
        .collect();
    assert_eq!(
        left,
        held[..3],
        "only the youngest executor was stopped: {after}"
    );
    assert_eq!(after["workers"][0]["cores_used"], 4, "{after}");
}

#[test]
fn app_run_json_is_a_link_a_program_drives_and_its_input_ending_finishes_the_app() {
    let masters = Masters::start();
    let _worker = start_worker(&masters, "w1", 2);
    wait_for(&masters, "the worker", |s| {
        s["workers"][0]["state"] == "ALIVE"
    });
    // An address that is not a web address is refused, and nothing is registered.
    let refused = muster()
        .args([
            "app",
            "run",
            "--ui-address",
            "javascript:alert(1)",
            "--",
            "true",
        ])
        .env("MUSTER_MASTERS", masters.list_from(1))
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("ui_address:"), "{said}");
    let status = masters.status(&masters.list_from(1));
    assert_eq!(status["apps"], json!([]), "{status}");

    let mut child = muster()
        .args([
            "app",
            "run",
            "--json",
            "--name=-linked",
            "--executor-cores",
            "1",
            "--ui-address=http://127.0.0.1:4040",
        ])
        .args([
            "--executor-memory",
            "64",
            "--env",
            "GREETING=hi",
            "--env",
            "FROM_HERE",
        ])
        .args([
            "--",
            "/bin/sh",
            "-c",
            "echo \"$GREETING $FROM_HERE\"; exec sleep 600",
        ])
        .env("MUSTER_MASTERS", masters.list_from(1))
        .env("FROM_HERE", "there")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut commands = child.stdin.take().unwrap();
    let mut events = std::io::BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map(|line| serde_json::from_str::<Value>(&line.unwrap()).unwrap());
    let link = Process(child);
    let registered = events.next().unwrap();
    assert_eq!(registered["event"], "registered", "{registered}");
    let id = registered["app_id"].as_str().unwrap().to_owned();
    let running = |events: &mut dyn Iterator<Item = Value>, state: &str, count: usize| {
        let mut seen = Vec::new();
        for event in events {
            assert_ne!(event["event"], "ended", "{event}");
            if event["event"] == "executor" && event["state"] == state {
                seen.push(event);
                if seen.len() == count {
                    return seen;
                }
            }
        }
        panic!("the link ended before {count} executors were {state}")
    };
    let started = running(&mut events, "RUNNING", 2);
    assert_eq!(started[0]["cores"], 1, "{}", started[0]);
    assert_eq!(started[0]["memory_mb"], 64, "{}", started[0]);

    // Ctrl-C is the driving program's, not the link's: the application goes on.
    interrupt(&link);
    writeln!(commands, "limit 1").unwrap();
    writeln!(commands, "release {}", started[0]["executor_id"]).unwrap();
    let released = running(&mut events, "KILLED", 1);
    assert_eq!(released[0]["executor_id"], started[0]["executor_id"]);
    let status = masters.status(&masters.list_from(1));
    assert_eq!(
        running_executors(&status, &id).len(),
        1,
        "the application goes on: {status}"
    );
    assert_eq!(status["apps"][0]["ui_address"], "http://127.0.0.1:4040");
    let listed = crate::support::stdout(&Masters::client(&masters.list_from(1), &["apps"]));
    assert!(
        listed.contains("\n  ui: http://127.0.0.1:4040\n"),
        "{listed}"
    );
    let other = format!("{id}/{}", started[1]["executor_id"]);
    let printed =
        crate::support::stdout(&Masters::client(&masters.list_from(1), &["logs", &other]));
    assert_eq!(printed, "hi there");

    // The end of its input finishes the application.
    drop(commands);
    let ended = events.find(|e| e["event"] == "ended").expect("an end");
    assert_eq!(
        ended,
        json!({"event": "ended", "app_id": id, "state": "FINISHED"})
    );
    let mut child = link;
    assert!(child.0.wait().unwrap().success());
    let status = wait_for(&masters, "no executor left", |s| {
        running_executors(s, &id).is_empty()
    });
    assert!(app(&status, &id).is_none(), "{status}");
}

#[test]
fn an_executor_over_its_memory_is_killed_saying_so_and_its_neighbour_runs_on() {
    let masters = Masters::start();
    masters.leader(0);
    let Some(_worker) = limited_worker(&masters, "w1", 2, &[]) else {
        return;
    };
    // Executor 0 reads 300 MB into `tail`, far over the 64 MB granted; the others sleep.
    let hog = r#"if [ "$MUSTER_EXECUTOR_ID" = 0 ]; then head -c 300000000 /dev/zero | tail -c 300000000; else exec sleep 1000; fi"#;
    let (run, id, out) = app_run(
        &masters,
        &[
            "--cores-max",
            "2",
            "--executor-cores",
            "1",
            "--executor-memory",
            "64",
            "--",
            "/bin/sh",
            "-c",
            hog,
        ],
    );
    // What `muster app run` prints, line by line, read on a thread of its own.
    let (lines, printed) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in out.lines() {
            if lines.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    let deadline = std::time::Instant::now() + DEADLINE;
    let mut seen = Vec::new();
    let killed = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = printed
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("executor 0's end not printed: {seen:?}"));
        if line.starts_with("executor 0 ") && line.contains("FAILED") {
            break line;
        }
        seen.push(line);
    };
    assert!(
        killed.ends_with("exit -104 (killed for going over its memory limit)"),
        "{killed}"
    );
    // Its neighbour on the same worker runs on, and the application has its two cores again.
    let status = wait_for(&masters, "two executors running", |s| {
        running_executors(s, &id).len() == 2
    });
    let ids: Vec<u64> = running_executors(&status, &id)
        .iter()
        .map(|e| e["id"].as_u64().unwrap())
        .collect();
    assert!(ids.contains(&1) && !ids.contains(&0), "{ids:?}");
    interrupt(&run);
}

#[test]
fn a_refused_resource_profile_is_told_to_the_application() {
    let masters = Masters::start();
    masters.leader(0);
    let _worker = start_worker(&masters, "w1", 4);
    let (run, id, _out) = app_run(&masters, &[&["--executor-limit", "0"], SLEEPERS].concat());
    let mut stdin = run.0.stdin.as_ref().unwrap();
    let profile = |memory: u32| {
        format!(
            r#"profile {{"id": 1, "executor_limit": 1, "executor_cores": 1, "executor_memory_mb": {memory}}}"#
        )
    };
    writeln!(stdin, "{}", profile(128)).unwrap();
    wait_for(&masters, "the profile's executor", |s| {
        let running = running_executors(s, &id);
        running.len() == 1 && running[0]["resource_profile"] == 1
    });
    // The same profile with another size: the masters refuse it, and the application hears
    // why instead of waiting for ever.
    writeln!(stdin, "{}", profile(256)).unwrap();
    let said = crate::support::wait_for_text(
        &masters.dir.path().join("app-run.log"),
        "the refusal",
        |log| log.contains("resource profile 1 refused:"),
    );
    assert!(said.contains("has another size"), "{said}");
    let status = masters.status(&masters.list_from(1));
    let running = running_executors(&status, &id);
    assert_eq!(
        (running.len(), &running[0]["memory_mb"]),
        (1, &json!(128)),
        "the first size still runs: {status}"
    );
}
