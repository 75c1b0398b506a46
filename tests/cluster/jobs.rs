//! `muster job run`: a driver runs jobs of stages on executors that workers start, through a
//! leader failover and through the loss of a worker.

use std::collections::BTreeMap;
use std::process::Stdio;

use serde_json::Value;

use crate::support::{
    DEADLINE, Masters, Process, SLEEPERS, app, app_run, muster, running_executors, start_worker,
    wait_for,
};

/// Writes a job file for application `name` to the masters' directory: one-core, 64 MB
/// executors, then `rest` (more `[resources]` lines, other tables, the jobs).
fn job_file(masters: &Masters, name: &str, rest: &str) -> std::path::PathBuf {
    let path = masters.dir.path().join(format!("{name}.toml"));
    let head =
        format!("name = \"{name}\"\n[resources]\nexecutor_cores = 1\nexecutor_memory_mb = 64\n");
    std::fs::write(&path, head + rest).unwrap();
    path
}

/// `muster job run FILE --json` as a child process.
fn job_run(masters: &Masters, file: &std::path::Path) -> Process {
    Process(
        muster()
            .args(["job", "run", "--json"])
            .arg(file)
            .env("MUSTER_MASTERS", masters.list_from(1))
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(masters.dir.path().join("job-run.log")).unwrap())
            .spawn()
            .expect("muster job run starts"),
    )
}

/// How many attempts of the report ended in `state`.
fn attempts_in(report: &Value, state: &str) -> usize {
    report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["state"] == state)
        .count()
}

/// Waits for the run to end within the deadline; its exit success and JSON report.
fn report(mut run: Process) -> (bool, Value) {
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = run.0.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < DEADLINE * 2, "the job run did not end");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let mut out = String::new();
    std::io::Read::read_to_string(run.0.stdout.as_mut().unwrap(), &mut out).unwrap();
    let json = out.find('{').map(|at| &out[at..]).unwrap_or("null");
    (
        status.success(),
        serde_json::from_str(json).expect("a JSON report"),
    )
}

/// Successful attempts per (job, stage, index).
fn successes(report: &Value) -> BTreeMap<(String, String, u64), usize> {
    let mut successes = BTreeMap::new();
    for task in report["tasks"].as_array().unwrap() {
        if task["state"] == "SUCCEEDED" {
            let key = (
                task["job"].as_str().unwrap().to_owned(),
                task["stage"].as_str().unwrap().to_owned(),
                task["index"].as_u64().unwrap(),
            );
            *successes.entry(key).or_default() += 1;
        }
    }
    successes
}

/// Asserts every task of every stage succeeded exactly once.
fn each_task_once(report: &Value) {
    let successes = successes(report);
    for job in report["jobs"].as_array().unwrap() {
        assert_eq!(job["state"], "SUCCEEDED", "{job}");
        for stage in job["stages"].as_array().unwrap() {
            for index in 0..stage["tasks"].as_u64().unwrap() {
                let key = (
                    job["name"].as_str().unwrap().to_owned(),
                    stage["name"].as_str().unwrap().to_owned(),
                    index,
                );
                assert_eq!(successes.get(&key), Some(&1), "{key:?} succeeded once");
            }
        }
    }
}

/// The application named `name`, once it runs `count` executors.
/// Waits until a task has left its `ran` mark in an executor directory below `dir`.
fn wait_until_a_task_ran_under(dir: &std::path::Path) {
    fn marked(dir: &std::path::Path) -> bool {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return false;
        };
        entries.flatten().any(|entry| {
            let path = entry.path();
            path.file_name().is_some_and(|name| name == "ran") || (path.is_dir() && marked(&path))
        })
    }
    let deadline = std::time::Instant::now() + crate::support::DEADLINE;
    while !marked(dir) {
        assert!(
            std::time::Instant::now() < deadline,
            "no task ran under {}",
            dir.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn running_app(masters: &Masters, name: &str, count: usize) -> (String, Value) {
    let status = wait_for(masters, "the job's executors running", |s| {
        s["apps"].as_array().unwrap().iter().any(|a| {
            a["name"] == name && running_executors(s, a["id"].as_str().unwrap()).len() >= count
        })
    });
    let id = status["apps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == name)
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    (id, status)
}

#[test]
fn a_job_runs_its_stages_in_order_with_node_local_tasks_and_finishes_its_application() {
    let masters = Masters::start();
    let _w1 = start_worker(&masters, "w1", 2);
    let _w2 = start_worker(&masters, "w2", 2);
    let file = job_file(
        &masters,
        "wordcount",
        r#"
[[jobs]]
name = "count"
  [[jobs.stages]]
  name = "map"
  tasks = 12
  run = { builtin = "sleep", ms = 50 }
  prefer_hosts = [["w1"], ["w2"]]
  [[jobs.stages]]
  name = "reduce"
  tasks = 2
  after = ["map"]
  run = { command = ["/bin/sh", "-c", "test {attempt} = 0"] }
"#,
    );
    let (succeeded, report) = report(job_run(&masters, &file));
    assert!(succeeded, "{report}");
    each_task_once(&report);
    let tasks = report["tasks"].as_array().unwrap();
    let map: Vec<&Value> = tasks.iter().filter(|t| t["stage"] == "map").collect();
    assert!(
        map.iter().all(|t| t["locality"] == "NODE_LOCAL"),
        "every map task ran on the host it prefers: {map:?}"
    );
    let (map_end, reduce_start) = (
        report["jobs"][0]["finished_ms"].as_u64().unwrap(),
        report["jobs"][0]["submitted_ms"].as_u64().unwrap(),
    );
    assert!(reduce_start <= map_end);
    let id = report["app"].as_str().unwrap().to_owned();
    wait_for(&masters, "the application finished", |s| {
        app(s, &id).is_none()
    });
}

#[test]
fn a_job_survives_a_leader_failover() {
    let mut masters = Masters::start();
    let first = masters.leader(0);
    let _w1 = start_worker(&masters, "w1", 2);
    let file = job_file(
        &masters,
        "failover",
        r#"
[[jobs]]
name = "sleepy"
  [[jobs.stages]]
  name = "s"
  tasks = 40
  run = { builtin = "sleep", ms = 200 }
"#,
    );
    let run = job_run(&masters, &file);
    running_app(&masters, "failover", 2);
    masters.running[first as usize - 1]
        .take()
        .expect("the leader runs")
        .crash();
    let (succeeded, report) = report(run);
    assert!(succeeded, "{report}");
    each_task_once(&report);
    assert_ne!(masters.leader(first), first);
}

#[test]
fn a_job_survives_the_loss_of_a_worker_and_its_executors() {
    let masters = Masters::start();
    let _w1 = start_worker(&masters, "w1", 2);
    let w2 = start_worker(&masters, "w2", 2);
    let file = job_file(
        &masters,
        "loss",
        r#"
[[jobs]]
name = "sleepy"
  [[jobs.stages]]
  name = "s"
  tasks = 40
  run = { command = ["/bin/sh", "-c", "touch ran; exec sleep 0.5"] }
"#,
    );
    let run = job_run(&masters, &file);
    let (id, status) = running_app(&masters, "loss", 4);
    // Tasks run in their executor's directory: once one has run on w2, w2's executors have
    // tasks, and losing them loses attempts.
    wait_until_a_task_ran_under(&masters.dir.path().join("w2"));
    // The machine of w2 goes: the worker and every executor it started.
    let lost_worker = crate::support::worker_on(&status, "w2");
    let pids: Vec<u64> = running_executors(&status, &id)
        .iter()
        .filter(|e| e["worker"] == lost_worker)
        .map(|e| e["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    w2.crash();
    // Each process leads its own process group (the worker's wrapper and the executor).
    for pid in pids {
        let group = nix::unistd::Pid::from_raw(pid as i32);
        nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL).unwrap();
    }
    let (succeeded, report) = report(run);
    assert!(succeeded, "{report}");
    each_task_once(&report);
    let lost = attempts_in(&report, "LOST");
    assert!(lost >= 1, "the lost executors' tasks ran again: {report}");
    assert_eq!(
        report["jobs"][0]["stages"][0]["failed_attempts"].as_u64(),
        Some(lost as u64),
        "lost attempts counted as failed attempts of the stage, not as task failures"
    );
}

#[test]
fn dynamic_allocation_asks_for_executors_as_tasks_wait_and_gives_idle_ones_back() {
    let masters = Masters::start();
    let _w1 = start_worker(&masters, "w1", 4);
    let file = job_file(
        &masters,
        "dynamic",
        r#"
dynamic_allocation = { min = 0, max = 3, idle_timeout_s = 1, backlog_timeout_s = 0.2 }
[[jobs]]
name = "first"
  [[jobs.stages]]
  name = "s"
  tasks = 24
  run = { builtin = "sleep", ms = 200 }
[[jobs]]
name = "later"
at_ms = 8000
  [[jobs.stages]]
  name = "s"
  tasks = 1
  run = { builtin = "noop" }
"#,
    );
    let run = job_run(&masters, &file);
    let (id, _) = running_app(&masters, "dynamic", 3);
    let status = wait_for(&masters, "idle executors given back", |s| {
        app(s, &id).is_some_and(|a| {
            a["executors"].as_array().unwrap().is_empty() && a["cores_granted"] == 0
        })
    });
    assert!(app(&status, &id).is_some(), "the application still runs");
    let (succeeded, report) = report(run);
    assert!(succeeded, "{report}");
    each_task_once(&report);
    let executors = |job: &str| -> Vec<u64> {
        report["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["job"] == job)
            .map(|t| t["executor"].as_u64().unwrap())
            .collect()
    };
    let first = executors("first");
    assert_eq!(
        first.iter().max(),
        Some(&2),
        "three executors, no more: {first:?}"
    );
    assert!(
        executors("later").iter().all(|e| *e > 2),
        "the later job ran on a newly asked-for executor"
    );
}

#[test]
fn a_submitted_job_file_runs_in_cluster_mode_and_a_supervised_driver_runs_it_again() {
    let masters = Masters::start();
    let _w1 = start_worker(&masters, "w1", 4);
    let mark = masters.dir.path().join("failed-once");
    let file = job_file(
        &masters,
        "cluster",
        &format!(
            r#"
[scheduler]
max_task_failures = 1
[[jobs]]
name = "once"
  [[jobs.stages]]
  name = "s"
  tasks = 1
  run = {{ command = ["/bin/sh", "-c", "test -e {mark} || {{ touch {mark}; exit 1; }}"] }}
"#,
            mark = mark.display()
        ),
    );
    let output = Masters::client(
        &masters.list_from(1),
        &[
            "submit",
            "--supervise",
            "--memory",
            "64",
            "--job",
            file.to_str().unwrap(),
        ],
    );
    let id = crate::support::stdout(&output);
    // The first run fails its job (exit 1); the supervised driver runs the file again
    // from the start, and that run succeeds.
    let status = wait_for(&masters, "the driver finished", |s| {
        crate::support::driver_state(s, &id) == "FINISHED"
    });
    assert_eq!(
        crate::support::driver(&status, &id).unwrap()["exit_code"],
        0
    );
    assert!(mark.exists());
    let apps: Vec<&Value> = status["apps"].as_array().unwrap().iter().collect();
    assert!(
        apps.is_empty(),
        "both runs finished their applications: {apps:?}"
    );
}

#[test]
fn speculation_runs_a_copy_of_a_straggler_elsewhere_and_kills_the_loser() {
    let masters = Masters::start();
    let _w1 = start_worker(&masters, "w1", 2);
    let _w2 = start_worker(&masters, "w2", 2);
    // Task 0's first attempt hangs; every other attempt ends at once.
    let file = job_file(
        &masters,
        "straggler",
        r#"
[scheduler]
speculation = true
[[jobs]]
name = "j"
  [[jobs.stages]]
  name = "s"
  tasks = 10
  run = { command = ["/bin/sh", "-c", "if [ {partition}{attempt} = 00 ]; then exec sleep 60; fi"] }
"#,
    );
    let start = std::time::Instant::now();
    let (succeeded, report) = report(job_run(&masters, &file));
    assert!(succeeded, "{report}");
    assert!(
        start.elapsed() < std::time::Duration::from_secs(30),
        "the straggler did not hold the job"
    );
    each_task_once(&report);
    let attempts: Vec<&Value> = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["index"] == 0)
        .collect();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0]["state"], "KILLED");
    assert_eq!(attempts[1]["state"], "SUCCEEDED");
    assert_eq!(attempts[1]["speculative"], true);
    assert_ne!(
        attempts[0]["host"], attempts[1]["host"],
        "the copy ran elsewhere"
    );
    assert_eq!(report["jobs"][0]["stages"][0]["failed_attempts"], 0);
}

#[test]
fn a_task_that_kills_its_executor_counts_as_failed_and_fails_its_job_at_the_limit() {
    let masters = Masters::start();
    let _w1 = start_worker(&masters, "w1", 2);
    // Its executor's stream closes before the masters hear from the worker that the
    // process died: the driver waits for their word, and the failure is the task's.
    let file = job_file(
        &masters,
        "crashing",
        r#"
[scheduler]
max_task_failures = 2
[[jobs]]
name = "crash"
  [[jobs.stages]]
  name = "s"
  tasks = 1
  run = { command = ["/bin/sh", "-c", "kill -9 $PPID; sleep 5"] }
"#,
    );
    let (succeeded, report) = report(job_run(&masters, &file));
    assert!(!succeeded, "{report}");
    assert_eq!(report["jobs"][0]["state"], "FAILED", "{report}");
    assert_eq!(attempts_in(&report, "FAILED"), 2, "{report}");
    assert_eq!(
        report["jobs"][0]["stages"][0]["failed_attempts"].as_u64(),
        Some(2),
        "{report}"
    );
    // Each failed attempt says what became of its executor: SIGKILL, exit code 137.
    let tasks = report["tasks"].as_array().unwrap();
    assert!(
        tasks
            .iter()
            .filter(|t| t["state"] == "FAILED")
            .all(|t| t["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("executor ") && r.ends_with(" ended: exit 137"))),
        "{report}"
    );
}

#[test]
fn a_job_whose_executor_is_preempted_runs_its_tasks_again_without_counting_failures() {
    let (masters, _settings) = crate::support::preempting_masters();
    let _w1 = start_worker(&masters, "w1", 4);
    // One failure would fail the job: a preempted attempt must not count as one.
    let file = job_file(
        &masters,
        "ordinary",
        r#"
[scheduler]
max_task_failures = 1
[[jobs]]
name = "long"
  [[jobs.stages]]
  name = "s"
  tasks = 40
  run = { builtin = "sleep", ms = 1000 }
"#,
    );
    let run = job_run(&masters, &file);
    running_app(&masters, "ordinary", 4);
    let prior = [&["--queue", "prod", "--cores-max", "1"][..], SLEEPERS].concat();
    let (_prior, prior_id, _prior_out) = app_run(&masters, &prior);
    wait_for(&masters, "the prior app running", |s| {
        running_executors(s, &prior_id).len() == 1
    });

    let (succeeded, report) = report(run);
    assert!(succeeded, "{report}");
    each_task_once(&report);
    let preempted = attempts_in(&report, "PREEMPTED");
    assert!(preempted >= 1, "the preempted attempt ran again: {report}");
    assert_eq!(
        report["jobs"][0]["stages"][0]["failed_attempts"].as_u64(),
        Some(0),
        "{report}"
    );
}

#[test]
fn custom_resources_asked_for_by_a_job_file_and_a_driver_bound_what_runs() {
    let masters = Masters::start();
    let _w1 = crate::support::start_worker_via(
        &masters,
        "w1",
        4,
        &masters.list_from(1),
        &["--resources", "gpu=1"],
    );
    // A driver that asks for two GPUs waits, saying why.
    let output = Masters::client(
        &masters.list_from(1),
        &["submit", "--resources", "gpu=2", "--", "/bin/true"],
    );
    let driver = crate::support::stdout(&output);
    // Until the worker registers, the driver waits for want of any ALIVE worker.
    let too_large =
        "a driver needs 1 core, 1024 MB, gpu=2: more than any ALIVE worker has in total";
    let status = wait_for(&masters, "the driver's reason to wait", |s| {
        s["drivers"][0]["waiting"] == too_large
    });
    assert_eq!(status["drivers"][0]["id"], driver.as_str());
    // With one GPU on the cluster, a job whose executors need one runs on one executor.
    let file = job_file(
        &masters,
        "gpu",
        r#"executor_resources = { gpu = 1 }
[[jobs]]
name = "train"
  [[jobs.stages]]
  name = "s"
  tasks = 4
  run = { builtin = "sleep", ms = 200 }
"#,
    );
    let (succeeded, report) = report(job_run(&masters, &file));
    assert!(succeeded, "{report}");
    let executors: std::collections::BTreeSet<u64> = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["executor"].as_u64().unwrap())
        .collect();
    assert_eq!(executors.len(), 1, "one GPU, one executor: {report}");
}
