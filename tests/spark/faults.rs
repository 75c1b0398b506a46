//! Spark applications through faults: the leading master killed, a worker lost with its
//! executors, executors preempted for prior work. `spark.task.maxFailures=1` makes any task
//! failure Spark counts fail the job.

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use crate::support::{DEADLINE, Process, wait_for};
use crate::{
    Spark, SubmitRun, app, app_id_of, cluster, running, spark, status, succeeded, with_every_spark,
};

/// `sleepy.py` as a running spark-submit, once its first task has run.
struct SleepyRun {
    run: SubmitRun,
    tasks: u32,
}

impl SleepyRun {
    /// `sleepy.py TASKS 1 IDLE [HOLD]` with `settings` before it: its tasks sleep 1 s, and then
    /// wait for as long as the file `hold` exists.
    fn start(
        spark: &Spark,
        masters: &str,
        settings: &[&str],
        tasks: u32,
        idle_s: u32,
        hold: Option<&Path>,
    ) -> Self {
        let mut args: Vec<String> = [
            "--conf",
            "spark.task.maxFailures=1",
            "--executor-memory",
            "512m",
        ]
        .map(str::to_owned)
        .to_vec();
        args.extend(settings.iter().map(|s| s.to_string()));
        args.extend([
            app("sleepy.py"),
            tasks.to_string(),
            "1".to_owned(),
            idle_s.to_string(),
        ]);
        args.extend(hold.map(|path| path.to_str().unwrap().to_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Self {
            run: SubmitRun::start(spark, masters, &args, "started"),
            tasks,
        }
    }

    /// Waits for spark-submit to end and returns its output.
    fn wait(self) -> Output {
        self.run.wait()
    }

    /// Waits for spark-submit to end and returns its output; the job's sum must be right.
    fn finish(self) -> Output {
        let tasks = self.tasks;
        let output = self.wait();
        let printed = succeeded(&output);
        let sum = (0..u64::from(tasks)).sum::<u64>();
        assert!(printed.contains(&format!("sum {sum}")), "{printed}");
        output
    }
}

/// The process ids of the RUNNING executors of the only active application.
fn executor_pids(masters: &str) -> Vec<u64> {
    let status = status(masters);
    let apps = status["apps"].as_array().cloned().unwrap_or_default();
    let mut pids: Vec<u64> = apps
        .iter()
        .flat_map(|a| a["executors"].as_array().cloned().unwrap_or_default())
        .filter(|e| e["state"] == "RUNNING")
        .filter_map(|e| e["pid"].as_u64())
        .collect();
    pids.sort_unstable();
    pids
}

/// Spark's log lines of lost tasks, whether or not they count towards
/// `spark.task.maxFailures`.
pub(crate) fn failed_tasks(output: &Output) -> Vec<String> {
    log_lines(output, "Lost task")
}

/// Spark's log lines of tasks run again because their executor was lost through no fault
/// of theirs, which do not count as failures.
fn rerun_tasks(output: &Output) -> Vec<String> {
    log_lines(output, "Not counting this failure")
}

fn log_lines(output: &Output, containing: &str) -> Vec<String> {
    String::from_utf8_lossy(&output.stderr)
        .lines()
        .filter(|line| line.contains(containing))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_job_survives_the_leader_killed_with_its_executors_and_no_task_failed() {
    with_every_spark(|spark| {
        let (mut masters, _workers) = cluster(2);
        let list = masters.list_from(1);
        let settings = [
            "--total-executor-cores",
            "4",
            "--executor-cores",
            "1",
            "--conf",
            "spark.ui.enabled=true",
            "--conf",
            "spark.ui.port=0",
        ];
        // Its tasks run until the failover has been checked.
        let hold = masters.dir.path().join("hold");
        std::fs::write(&hold, "").unwrap();
        let run = SleepyRun::start(spark, &list, &settings, 24, 0, Some(&hold));
        let before = executor_pids(&list);
        assert_eq!(before.len(), 4, "{}", status(&list));
        // The application's Spark UI, as Muster shows it.
        let ui = status(&list)["apps"][0]["ui_address"]
            .as_str()
            .expect("the Spark UI's address")
            .to_owned();
        let page = crate::support::plain_http_get(
            ui.strip_prefix("http://").expect("an http:// address"),
            "/jobs/",
        );
        assert!(
            page.starts_with("HTTP/1.1 200") && page.contains("sleepy"),
            "{page}"
        );

        let leader = masters.leader(0);
        masters.running[leader as usize - 1].take().unwrap().crash();
        let killed = Instant::now();
        let new_leader = masters.leader(leader);
        wait_for(&masters, "a new leader ALIVE", |s| {
            s["recovery_state"] == "ALIVE"
        });
        eprintln!(
            "master {new_leader} ALIVE {:?} after the kill",
            killed.elapsed()
        );
        assert_eq!(executor_pids(&list), before, "the same executor processes");
        // The new leader learns the UI's address from the re-attached link.
        wait_for(&masters, "the Spark UI's address again", |s| {
            s["apps"][0]["ui_address"] == ui.as_str()
        });
        std::fs::remove_file(&hold).unwrap();

        let output = run.finish();
        assert_eq!(failed_tasks(&output), Vec::<String>::new());
        assert_eq!(rerun_tasks(&output), Vec::<String>::new());
    });
}

#[test]
fn a_lost_worker_has_its_tasks_run_again_elsewhere_and_the_result_is_right() {
    let Some((spark, _one_at_a_time)) = spark() else {
        return;
    };
    let (masters, mut workers) = cluster(2);
    let list = masters.list_from(1);
    // One two-core executor per worker, and one attempt a task: Spark notices the executor's
    // connection drop before Muster says its worker is lost, and waits for Muster's word
    // rather than count the running tasks' losses as failures.
    let settings = [
        "--executor-cores",
        "2",
        "--conf",
        "spark.task.maxFailures=1",
    ];
    let run = SleepyRun::start(spark, &list, &settings, 16, 0, None);
    let status = status(&list);
    let executor = status["apps"][0]["executors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["state"] == "RUNNING")
        .cloned()
        .expect("a running executor");
    let host = status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .position(|w| w["id"] == executor["worker"])
        .unwrap();
    // Once it runs tasks of the long job (stage 1), its machine goes: the worker's agent, and
    // the executor's process group with it.
    let log = masters
        .dir
        .path()
        .join(status["workers"][host]["host"].as_str().unwrap())
        .join(status["apps"][0]["id"].as_str().unwrap())
        .join(executor["id"].to_string())
        .join("stderr");
    let start = Instant::now();
    while !std::fs::read_to_string(&log).is_ok_and(|log| log.contains("in stage 1.0")) {
        assert!(
            start.elapsed() < DEADLINE,
            "no task of the long job on {}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    workers.remove(host).crash();
    let group = nix::unistd::Pid::from_raw(executor["pid"].as_u64().unwrap() as i32);
    nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL).unwrap();
    // With one attempt a task, a counted failure would have failed the job.
    let output = run.finish();
    let lost = failed_tasks(&output);
    assert!(
        !rerun_tasks(&output).is_empty(),
        "the lost executor's tasks ran again: {lost:?}"
    );
    assert!(
        lost.iter()
            .all(|line| line.contains("exited unrelated to the running tasks")),
        "only tasks lost with the executor, not counted: {lost:?}"
    );
}

#[test]
fn a_prior_spark_application_takes_executors_from_an_ordinary_one_and_both_finish() {
    let Some((spark, _one_at_a_time)) = spark() else {
        return;
    };
    let (masters, _settings) = crate::support::preempting_masters();
    let _workers: Vec<Process> = (1..=2)
        .map(|i| crate::support::start_worker(&masters, &format!("worker-{i}"), 2))
        .collect();
    wait_for(&masters, "the workers", |s| {
        crate::support::alive_workers(s) == 2
    });
    let list = masters.list_from(1);
    // The ordinary application fills the cluster with one-core executors, whose tasks run
    // until the prior one has finished.
    let hold = masters.dir.path().join("hold");
    std::fs::write(&hold, "").unwrap();
    let ordinary = SleepyRun::start(spark, &list, &["--executor-cores", "1"], 8, 0, Some(&hold));
    wait_for(
        &masters,
        "the ordinary application holding every core",
        |s| running(s) == 4,
    );
    let prior = spark.run(
        &list,
        &[
            "--conf",
            "spark.muster.queue=prod",
            "--conf",
            "spark.task.maxFailures=1",
            "--total-executor-cores",
            "1",
            "--executor-cores",
            "1",
            "--executor-memory",
            "512m",
            &app("pi.py"),
            "4",
        ],
    );
    succeeded(&prior);
    assert_eq!(
        crate::executors_that_registered(&masters, &app_id_of(&prior)).len(),
        1
    );
    // The ordinary one lost an executor to preemption; none of its tasks counted as failed
    // (one would have failed its job).
    std::fs::remove_file(&hold).unwrap();
    let output = ordinary.finish();
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(log.contains("Muster preempts executor"), "{log}");
    assert_eq!(failed_tasks(&output), Vec::<String>::new());
}

#[test]
fn dynamic_allocation_grows_with_a_backlog_and_gives_idle_executors_back() {
    with_every_spark(|spark| {
        let (masters, _workers) = cluster(2);
        let list = masters.list_from(1);
        let settings = [
            "--executor-cores",
            "1",
            "--conf",
            "spark.dynamicAllocation.enabled=true",
            "--conf",
            "spark.dynamicAllocation.shuffleTracking.enabled=true",
            "--conf",
            "spark.dynamicAllocation.schedulerBacklogTimeout=1s",
            "--conf",
            "spark.dynamicAllocation.executorIdleTimeout=2s",
            "--conf",
            "spark.dynamicAllocation.maxExecutors=3",
        ];
        // 12 s idle after the job, for the executors to be given back while the driver runs.
        let run = SleepyRun::start(spark, &list, &settings, 24, 12, None);
        let grown = wait_for(&masters, "executors added for the backlog", |s| {
            running(s) == 3
        });
        let app_id = grown["apps"][0]["id"].clone();
        wait_for(&masters, "idle executors given back", |s| {
            s["apps"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a["id"] == app_id)
                && running(s) == 0
        });
        let output = run.finish();
        assert_eq!(failed_tasks(&output), Vec::<String>::new());
        // Never more than maxExecutors, and none added once the backlog was gone.
        let app_id = app_id.as_str().unwrap();
        assert_eq!(crate::executors_that_registered(&masters, app_id).len(), 3);
    });
}

#[test]
fn a_driver_that_dies_ends_its_application_and_a_link_that_dies_stops_its_driver() {
    let Some((spark, _one_at_a_time)) = spark() else {
        return;
    };
    let (masters, _workers) = cluster(2);
    let list = masters.list_from(1);

    // The driver's JVM is killed: its link's input closes and the application finishes, its
    // executors with it.
    let run = SleepyRun::start(spark, &list, &["--executor-cores", "1"], 60, 0, None);
    let app_id = status(&list)["apps"][0]["id"].as_str().unwrap().to_owned();
    crate::support::signal(run.run.process.pid(), nix::sys::signal::Signal::SIGKILL);
    let ended = wait_for(&masters, "the application finished", |s| {
        s["completed_apps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["id"] == app_id.as_str() && a["state"] == "FINISHED")
    });
    assert_eq!(running(&ended), 0, "{ended}");
    drop(run);

    // The link is killed: Spark stops the application, naming why.
    let run = SleepyRun::start(spark, &list, &["--executor-cores", "1"], 60, 0, None);
    let links = crate::support::processes_with_args(&["app", "run", "--json"]);
    assert_eq!(links.len(), 1, "one link: {links:?}");
    crate::support::signal(links[0] as u32, nix::sys::signal::Signal::SIGKILL);
    let Output { status, stderr, .. } = run.wait();
    assert!(!status.success());
    let log = String::from_utf8_lossy(&stderr);
    assert!(
        log.contains("the link to the Muster masters ended"),
        "{log}"
    );
}

#[test]
fn a_drained_workers_cached_blocks_move_to_another_executor_before_it_goes() {
    let Some((spark, _one_at_a_time)) = spark() else {
        return;
    };
    let (masters, _workers) = cluster(2);
    let list = masters.list_from(1);
    let go = masters.dir.path().join("go");
    let run = SubmitRun::start(
        spark,
        &list,
        &[
            "--total-executor-cores",
            "2",
            "--executor-cores",
            "1",
            "--executor-memory",
            "512m",
            "--conf",
            "spark.decommission.enabled=true",
            "--conf",
            "spark.storage.decommission.enabled=true",
            "--conf",
            "spark.storage.decommission.rddBlocks.enabled=true",
            &app("drained.py"),
            "100000",
            go.to_str().unwrap(),
        ],
        "cached",
    );
    // One executor on each worker holds cached partitions; drain the first worker.
    let status = status(&list);
    let drained = status["apps"][0]["executors"][0]["worker"]
        .as_str()
        .unwrap()
        .to_owned();
    crate::support::stdout(&crate::support::Masters::client(
        &list,
        &["workers", "drain", &drained, "--kill-after", "60"],
    ));
    // Its executor moves its blocks and leaves; then the worker is decommissioned.
    wait_for(&masters, "the drained worker decommissioned", |s| {
        s["workers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["id"] == drained.as_str() && w["state"] == "DECOMMISSIONED")
    });
    std::fs::write(&go, "").unwrap();
    let output = run.wait();
    let printed = succeeded(&output);
    assert!(
        printed.lines().any(|l| l == "computed 4"),
        "the cache was rebuilt: {printed}"
    );
}
