//! Real child processes under the supervisor: environment, output files, exit codes, kills
//! that reach a whole process group, supervised restarts with back-off, adoption by a
//! restarted agent, and the control groups that hold each process to its grant.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use muster_core::ids::{ExecutorId, WorkerId};
use muster_core::resources::Resources;
use muster_worker::cleanup::CleanupPolicy;
use muster_worker::isolation::{Cgroups, Limits};
use muster_worker::supervisor::{
    LaunchError, LaunchSpec, ProcessEvent, ProcessState, Supervisor, SupervisorConfig, Workload,
};
use tokio::sync::mpsc::UnboundedReceiver;

const DEADLINE: Duration = Duration::from_secs(20);

fn supervisor(dir: &Path) -> (Supervisor, UnboundedReceiver<ProcessEvent>) {
    isolated_supervisor(dir, None)
}

/// A supervisor over `dir` whose processes run in `isolation`'s control groups, if any.
fn isolated_supervisor(
    dir: &Path,
    isolation: Option<Cgroups>,
) -> (Supervisor, UnboundedReceiver<ProcessEvent>) {
    let config = SupervisorConfig {
        kill_grace: Duration::from_millis(300),
        restart_backoff: Duration::from_millis(50),
        successful_run: Duration::from_secs(5),
        isolation,
        ..SupervisorConfig::new(dir.to_owned(), "m1:7077,m2:7077".into())
    };
    Supervisor::new(config)
}

fn executor(app: &str, id: u32) -> Workload {
    Workload::Executor {
        app: app.into(),
        executor: ExecutorId(id),
    }
}

fn driver(id: &str) -> Workload {
    Workload::Driver { driver: id.into() }
}

/// A script that ignores SIGTERM, once it has written `ready` in its directory.
const IGNORES_SIGTERM: &str = "trap '' TERM; echo ready > ready; while true; do sleep 0.05; done";

fn shell(workload: Workload, script: &str, supervise: bool) -> LaunchSpec {
    LaunchSpec {
        workload,
        command: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
        env: BTreeMap::from([("EXTRA".to_string(), "yes".to_string())]),
        resources: Resources::new(2, 512),
        supervise,
        credential: None,
        addresses: Default::default(),
    }
}

async fn next(events: &mut UnboundedReceiver<ProcessEvent>) -> ProcessEvent {
    tokio::time::timeout(DEADLINE, events.recv())
        .await
        .expect("an event in time")
        .expect("supervisor alive")
}

/// Waits until `path` exists and is not empty.
async fn wait_for_file(path: &Path) -> String {
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && !text.is_empty()
        {
            return text;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{} never written",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether process `pid` still runs (a zombie does not count).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

#[tokio::test]
async fn an_executor_runs_with_its_environment_and_reports_its_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let (supervisor, mut events) = supervisor(dir.path());
    let script = "echo $MUSTER_APP_ID $MUSTER_EXECUTOR_ID $MUSTER_CORES $MUSTER_MEMORY_MB $MUSTER_MASTERS $EXTRA; echo oops >&2; exit 7";
    let pid = supervisor
        .launch(shell(executor("app-1", 3), script, false))
        .unwrap();
    assert_eq!(
        next(&mut events).await.state,
        ProcessState::Running {
            pid,
            restarts: None
        }
    );
    assert_eq!(
        next(&mut events).await,
        ProcessEvent {
            workload: executor("app-1", 3),
            state: ProcessState::Exited { code: 7 }
        }
    );
    let work = dir.path().join("app-1").join("3");
    assert_eq!(
        std::fs::read_to_string(work.join("stdout")).unwrap(),
        "app-1 3 2 512 m1:7077,m2:7077 yes\n"
    );
    assert_eq!(
        std::fs::read_to_string(work.join("stderr")).unwrap(),
        "oops\n"
    );
    assert!(supervisor.running().is_empty());
}

#[tokio::test]
async fn an_applications_executors_share_its_data_until_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let (supervisor, mut events) = supervisor(dir.path());
    // Each executor leaves a file in the application's directory.
    let script = "echo $MUSTER_EXECUTOR_ID > \"$MUSTER_LOCAL_DIR/$MUSTER_EXECUTOR_ID\"";
    for id in [1, 2] {
        supervisor
            .launch(shell(executor("app-1", id), script, false))
            .unwrap();
        next(&mut events).await;
        assert_eq!(
            next(&mut events).await.state,
            ProcessState::Exited { code: 0 }
        );
    }
    let data = dir.path().join("local").join("app-1");
    assert!(data.join("1").is_file() && data.join("2").is_file());
    assert_eq!(supervisor.apps_with_data(), ["app-1".into()]);

    // Not while one of its executors runs here: its end is not in yet.
    supervisor
        .launch(shell(executor("app-1", 3), IGNORES_SIGTERM, false))
        .unwrap();
    next(&mut events).await;
    assert!(!supervisor.remove_app_data(&"app-1".into()));
    assert!(data.join("1").is_file());
    supervisor.kill(&executor("app-1", 3), None);
    assert!(matches!(
        next(&mut events).await.state,
        ProcessState::Killed { .. }
    ));
    assert!(supervisor.remove_app_data(&"app-1".into()));
    assert!(!data.exists());
    assert!(supervisor.apps_with_data().is_empty());
    // What is gone already is no error.
    assert!(supervisor.remove_app_data(&"app-1".into()));
}

#[tokio::test]
async fn a_driver_gets_its_id_and_an_unsupervised_failure_is_not_restarted() {
    let dir = tempfile::tempdir().unwrap();
    let (supervisor, mut events) = supervisor(dir.path());
    supervisor
        .launch(shell(
            driver("driver-1"),
            "echo $MUSTER_DRIVER_ID; exit 3",
            false,
        ))
        .unwrap();
    assert!(matches!(
        next(&mut events).await.state,
        ProcessState::Running { .. }
    ));
    assert_eq!(
        next(&mut events).await.state,
        ProcessState::Exited { code: 3 }
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("driver-1").join("stdout")).unwrap(),
        "driver-1\n"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), events.recv())
            .await
            .is_err(),
        "no restart"
    );
}

#[tokio::test]
async fn a_kill_reaches_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let (supervisor, mut events) = supervisor(dir.path());
    let workload = executor("app-1", 0);
    let pid = supervisor
        .launch(shell(
            workload.clone(),
            "sleep 1000 & echo $! > child.pid; wait",
            false,
        ))
        .unwrap();
    assert_eq!(
        next(&mut events).await.state,
        ProcessState::Running {
            pid,
            restarts: None
        }
    );
    let child: u32 = wait_for_file(&dir.path().join("app-1/0/child.pid"))
        .await
        .trim()
        .parse()
        .unwrap();
    assert!(alive(child));
    assert_eq!(supervisor.running(), [(workload.clone(), pid)]);

    assert!(supervisor.kill(&workload, None));
    // Its end says how it exited, as a process that ends by itself does.
    let killed = next(&mut events).await;
    assert_eq!(killed.workload, workload);
    assert!(
        matches!(killed.state, ProcessState::Killed { code: Some(_) }),
        "{killed:?}"
    );
    // Signals are delivered at once but acted on when the process next runs.
    let start = Instant::now();
    while alive(pid) || alive(child) {
        assert!(
            start.elapsed() < DEADLINE,
            "the shell and its child are gone"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!supervisor.kill(&workload, None), "nothing left to kill");
}

#[tokio::test]
async fn a_process_that_ignores_sigterm_is_killed_after_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let (supervisor, mut events) = supervisor(dir.path());
    let workload = driver("stubborn");
    let pid = supervisor
        .launch(shell(workload.clone(), IGNORES_SIGTERM, false))
        .unwrap();
    next(&mut events).await;
    wait_for_file(&dir.path().join("stubborn/ready")).await;
    let start = Instant::now();
    supervisor.kill(&workload, None);
    assert!(matches!(
        next(&mut events).await.state,
        ProcessState::Killed { .. }
    ));
    assert!(
        start.elapsed() >= Duration::from_millis(300),
        "SIGKILL waits for the grace period"
    );
    assert!(!alive(pid));
}

#[tokio::test]
async fn a_kill_with_a_shorter_grace_sends_sigkill_after_that_grace() {
    let dir = tempfile::tempdir().unwrap();
    let config = SupervisorConfig {
        kill_grace: DEADLINE * 10,
        ..SupervisorConfig::new(dir.path().to_owned(), "m1:7077".into())
    };
    let (supervisor, mut events) = Supervisor::new(config);
    let workload = executor("app-1", 0);
    let pid = supervisor
        .launch(shell(workload.clone(), IGNORES_SIGTERM, false))
        .unwrap();
    next(&mut events).await;
    wait_for_file(&dir.path().join("app-1/0/ready")).await;
    // The worker's own grace outlasts the deadline: only the shorter one ends it in time.
    assert!(supervisor.kill(&workload, Some(Duration::from_millis(100))));
    assert!(matches!(
        next(&mut events).await.state,
        ProcessState::Killed { .. }
    ));
    assert!(!alive(pid));
}

#[tokio::test]
async fn a_failing_supervised_driver_restarts_with_doubling_back_off() {
    let dir = tempfile::tempdir().unwrap();
    let (supervisor, mut events) = supervisor(dir.path());
    let workload = driver("flaky");
    supervisor
        .launch(shell(workload.clone(), "echo run >> runs; exit 1", true))
        .unwrap();
    let mut waits = Vec::new();
    while waits.len() < 3 {
        match next(&mut events).await.state {
            // Each run says the restarts before it, however far the driver got since.
            ProcessState::Running { restarts, .. } => {
                assert_eq!(
                    restarts.map(|r| (r.count, r.last_exit_code, r.starts_again)),
                    (!waits.is_empty()).then_some((waits.len() as u32, Some(1), None))
                );
            }
            ProcessState::Restarting {
                attempt,
                after,
                last_exit_code,
            } => {
                assert_eq!(
                    (attempt as usize, last_exit_code),
                    (waits.len() + 1, Some(1))
                );
                waits.push(after);
                // What the agent tells the leader: this restart or a later one, and the exit.
                let restarts = supervisor.restarts(&workload).expect("restarted");
                assert!(restarts.count >= attempt, "{restarts:?}");
                assert_eq!(restarts.last_exit_code, Some(1));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        waits,
        [
            Duration::from_millis(50),
            Duration::from_millis(100),
            Duration::from_millis(200)
        ]
    );
    supervisor.kill(&workload, None);
    loop {
        if matches!(next(&mut events).await.state, ProcessState::Killed { .. }) {
            break;
        }
    }
    let runs = std::fs::read_to_string(dir.path().join("flaky/runs")).unwrap();
    assert!(
        runs.lines().count() >= 3,
        "it ran again after each failure: {runs:?}"
    );
}

#[tokio::test]
async fn a_supervised_driver_that_succeeds_is_not_restarted() {
    let dir = tempfile::tempdir().unwrap();
    let (supervisor, mut events) = supervisor(dir.path());
    supervisor
        .launch(shell(driver("ok"), "exit 0", true))
        .unwrap();
    next(&mut events).await;
    assert_eq!(
        next(&mut events).await.state,
        ProcessState::Exited { code: 0 }
    );
}

#[tokio::test]
async fn bad_launches_are_refused_and_start_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (supervisor, _events) = supervisor(dir.path());
    let missing = LaunchSpec {
        command: "/nonexistent/program".into(),
        ..shell(driver("d"), "", false)
    };
    assert!(matches!(
        supervisor.launch(missing),
        Err(LaunchError::Io(_))
    ));
    assert!(matches!(
        supervisor.launch(shell(driver("../escape"), "true", false)),
        Err(LaunchError::UnsafeId(_))
    ));
    assert!(matches!(
        supervisor.launch(shell(executor("", 0), "true", false)),
        Err(LaunchError::UnsafeId(_))
    ));
    supervisor
        .launch(shell(driver("twice"), "sleep 1000", false))
        .unwrap();
    assert!(matches!(
        supervisor.launch(shell(driver("twice"), "sleep 1000", false)),
        Err(LaunchError::AlreadyRunning(_))
    ));
    assert_eq!(supervisor.running().len(), 1);
    supervisor.shutdown().await;
}

#[tokio::test]
async fn shutdown_stops_every_child() {
    let dir = tempfile::tempdir().unwrap();
    let (supervisor, mut events) = supervisor(dir.path());
    let pids: Vec<u32> = (0..3)
        .map(|i| {
            supervisor
                .launch(shell(executor("app", i), "sleep 1000", false))
                .unwrap()
        })
        .collect();
    for _ in 0..3 {
        next(&mut events).await;
    }
    supervisor.shutdown().await;
    assert!(supervisor.running().is_empty());
    assert!(pids.iter().all(|&pid| !alive(pid)));
    let killed = (0..3).map(|_| events.try_recv().expect("a Killed event per child").state);
    assert!(
        killed
            .into_iter()
            .all(|state| matches!(state, ProcessState::Killed { .. }))
    );
}

/// A supervisor whose agent crashes: its runtime is dropped, its processes run on.
fn crashed_supervisor(dir: &Path, isolation: Option<Cgroups>, specs: Vec<LaunchSpec>) -> Vec<u32> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (supervisor, _events) = isolated_supervisor(dir, isolation);
        specs
            .into_iter()
            .map(|spec| supervisor.launch(spec).unwrap())
            .collect()
    })
}

#[test]
fn a_restarted_supervisor_adopts_what_runs_reports_what_ended_and_kills_strays() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let pids = crashed_supervisor(
        work,
        None,
        vec![
            shell(executor("app-1", 0), "exec sleep 1000", false),
            shell(
                driver("d-later"),
                "while [ ! -e go ]; do sleep 0.05; done; exit 3",
                false,
            ),
            shell(
                driver("d-gone"),
                "while [ ! -e go ]; do sleep 0.05; done; exit 7",
                false,
            ),
        ],
    );
    // While no agent runs: d-gone ends, and something nobody recorded starts in the work dir.
    std::fs::write(work.join("d-gone/go"), "").unwrap();
    let start = Instant::now();
    while alive(pids[2]) {
        assert!(start.elapsed() < DEADLINE, "d-gone never ended");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::create_dir_all(work.join("app-2/0")).unwrap();
    let mut stray = std::process::Command::new("sleep")
        .arg("1000")
        .current_dir(work.join("app-2/0"))
        .env("MUSTER_WORK_DIR", std::fs::canonicalize(work).unwrap())
        .spawn()
        .unwrap();
    // A process that merely sits in the work dir (an operator's shell) is left alone.
    let mut visitor = std::process::Command::new("sleep")
        .arg("1000")
        .current_dir(work.join("app-2/0"))
        .spawn()
        .unwrap();

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (supervisor, mut events) = supervisor(work);
        supervisor.adopt();
        let mut running = supervisor.running();
        running.sort();
        let mut expected = vec![
            (executor("app-1", 0), pids[0]),
            (driver("d-later"), pids[1]),
        ];
        expected.sort();
        assert_eq!(running, expected, "the same processes, adopted");
        assert_eq!(
            next(&mut events).await,
            ProcessEvent {
                workload: driver("d-gone"),
                state: ProcessState::Exited { code: 7 }
            },
            "what ended while no agent ran is reported with its exit code"
        );
        assert!(
            stray.wait().unwrap().code().is_none(),
            "the stray was killed by a signal"
        );
        assert!(visitor.try_wait().unwrap().is_none(), "the visitor runs on");
        visitor.kill().unwrap();

        // An adopted process's end is seen, with its exit code.
        std::fs::write(work.join("d-later/go"), "").unwrap();
        assert_eq!(
            next(&mut events).await,
            ProcessEvent {
                workload: driver("d-later"),
                state: ProcessState::Exited { code: 3 }
            }
        );
        // An adopted process can be killed.
        assert!(supervisor.kill(&executor("app-1", 0), None));
        assert!(matches!(
            next(&mut events).await.state,
            ProcessState::Killed { .. }
        ));
        assert!(!alive(pids[0]));
        assert!(supervisor.running().is_empty());
        // The leader acknowledged two of the three ends.
        supervisor.forget(&driver("d-gone"));
        supervisor.forget(&driver("d-later"));
    });
    drop(runtime);

    // The next agent reports again only the end no leader acknowledged.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (supervisor, mut events) = supervisor(work);
        supervisor.adopt();
        let event = next(&mut events).await;
        assert_eq!(event.workload, executor("app-1", 0));
        assert!(
            matches!(event.state, ProcessState::Killed { .. }),
            "its end was asked for"
        );
        assert!(
            tokio::time::timeout(Duration::from_millis(200), events.recv())
                .await
                .is_err(),
            "nothing else to report"
        );
    });
}

/// The control groups of a worker on `dir` (named after it), where this machine offers
/// them. Where it does not, `None`, and the test checks nothing more, unless
/// `MUSTER_REQUIRE_CGROUPS` is set (as `.ci/run` sets it where the machine has them): then
/// it fails.
fn cgroups(dir: &Path, limits: Limits) -> Option<Cgroups> {
    let worker = WorkerId::from(dir.file_name().unwrap().to_str().unwrap());
    match Cgroups::open(&worker, limits) {
        Ok(cgroups) => Some(cgroups),
        Err(error) => {
            assert!(
                std::env::var_os("MUSTER_REQUIRE_CGROUPS").is_none(),
                "MUSTER_REQUIRE_CGROUPS is set, but: {error}"
            );
            eprintln!("no control groups here ({error}): the test is skipped");
            None
        }
    }
}

/// `spec` granted `cores` and `memory_mb`.
fn granted(mut spec: LaunchSpec, cores: u32, memory_mb: u64) -> LaunchSpec {
    spec.resources = Resources::new(cores, memory_mb);
    spec
}

/// The memory control group process `pid` is in, as `/proc` shows it (v1's `memory` line,
/// or v2's one line).
fn memory_group(pid: u32) -> String {
    let groups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let line = groups
        .lines()
        .find(|line| {
            line.split(':')
                .nth(1)
                .is_some_and(|c| c.split(',').any(|c| c == "memory"))
        })
        .or_else(|| groups.lines().find(|line| line.starts_with("0::")))
        .unwrap_or_else(|| panic!("no memory group in {groups}"));
    line.rsplit(':').next().unwrap().to_owned()
}

/// The end of `workload` among the next events, skipping others.
async fn end_of(events: &mut UnboundedReceiver<ProcessEvent>, workload: &Workload) -> ProcessState {
    loop {
        let event = next(events).await;
        if &event.workload == workload && !matches!(event.state, ProcessState::Running { .. }) {
            return event.state;
        }
    }
}

#[tokio::test]
async fn a_process_over_its_memory_limit_is_killed_and_reported_so_its_neighbour_runs_on() {
    let dir = tempfile::tempdir().unwrap();
    let Some(cgroups) = cgroups(dir.path(), Limits::default()) else {
        return;
    };
    let (supervisor, mut events) = isolated_supervisor(dir.path(), Some(cgroups.clone()));
    let neighbour = executor("app-1", 2);
    let neighbour_pid = supervisor
        .launch(granted(
            shell(neighbour.clone(), "exec sleep 1000", false),
            1,
            64,
        ))
        .unwrap();
    // `tail` keeps the last 300 MB it read: far over a grant of 64 MB.
    let hog = executor("app-1", 1);
    let script = "head -c 300000000 /dev/zero | tail -c 300000000 > /dev/null";
    supervisor
        .launch(granted(shell(hog.clone(), script, false), 1, 64))
        .unwrap();

    assert_eq!(end_of(&mut events, &hog).await, ProcessState::OutOfMemory);
    assert!(alive(neighbour_pid), "the neighbour runs on");
    assert!(
        memory_group(neighbour_pid).ends_with("/app-1-2"),
        "the neighbour is in its own group: {}",
        memory_group(neighbour_pid)
    );
    assert_eq!(cgroups.groups(), ["app-1-2"], "the hog's group is gone");

    // A process that ends by itself under its limit is not told apart.
    let small = executor("app-1", 3);
    supervisor
        .launch(granted(
            shell(
                small.clone(),
                "head -c 1000000 /dev/zero | tail -c 1000000 > /dev/null; exit 4",
                false,
            ),
            1,
            64,
        ))
        .unwrap();
    assert_eq!(
        end_of(&mut events, &small).await,
        ProcessState::Exited { code: 4 }
    );

    assert!(supervisor.kill(&neighbour, None));
    assert!(matches!(
        end_of(&mut events, &neighbour).await,
        ProcessState::Killed { .. }
    ));
    assert!(
        cgroups.groups().is_empty(),
        "every group is removed with its process"
    );
    supervisor.shutdown().await;
}

#[tokio::test]
async fn under_the_cpu_quota_a_busy_process_gets_no_more_than_its_granted_core() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        cpu_quota: true,
        ..Limits::default()
    };
    let Some(cgroups) = cgroups(dir.path(), limits) else {
        return;
    };
    if std::thread::available_parallelism().map_or(1, usize::from) < 2 {
        eprintln!("one core only: a quota of one core would hold nothing back; skipped");
        return;
    }
    let (supervisor, mut events) = isolated_supervisor(dir.path(), Some(cgroups));
    // Three busy loops, where the machine has more cores than the one granted.
    let script = "for i in 1 2 3; do (while :; do :; done) & done; wait";
    let pid = supervisor
        .launch(granted(shell(executor("app-1", 1), script, false), 1, 64))
        .unwrap();
    assert_eq!(
        next(&mut events).await.state,
        ProcessState::Running {
            pid,
            restarts: None
        }
    );
    let (started, before) = (Instant::now(), cpu_seconds(pid));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let used = (cpu_seconds(pid) - before) / started.elapsed().as_secs_f64();
    assert!(used < 1.3, "a process granted 1 core used {used:.2} cores");
    assert!(
        used > 0.1,
        "the busy loops hardly ran ({used:.2} cores): nothing was measured"
    );
    supervisor.shutdown().await;
}

/// The CPU time every process of process group `group` has used, in seconds.
fn cpu_seconds(group: u32) -> f64 {
    let mut ticks = 0;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // After the command's closing parenthesis: state, ppid, pgrp, ..., utime (12th),
        // stime (13th).
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .collect();
        if fields.get(2).and_then(|g| g.parse::<u32>().ok()) == Some(group) {
            ticks += fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        }
    }
    // USER_HZ is 100 on Linux.
    ticks as f64 / 100.0
}

#[test]
fn a_restarted_supervisor_keeps_the_groups_of_what_it_adopts_and_removes_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let Some(cgroups) = cgroups(work, Limits::default()) else {
        return;
    };
    let kept = executor("app-1", 0);
    let pids = crashed_supervisor(
        work,
        Some(cgroups.clone()),
        vec![granted(
            shell(kept.clone(), "exec sleep 1000", false),
            1,
            64,
        )],
    );
    // A group nobody accounts for, with a process in it, as a predecessor could leave one.
    let stray = cgroups.create("app-9-9", &Resources::new(1, 64)).unwrap();
    let mut stray_process = std::process::Command::new("sleep")
        .arg("1000")
        .spawn()
        .unwrap();
    for procs in stray.procs_files() {
        std::fs::write(procs, stray_process.id().to_string()).unwrap();
    }
    assert_eq!(cgroups.groups(), ["app-1-0", "app-9-9"]);

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (supervisor, mut events) = isolated_supervisor(work, Some(cgroups.clone()));
        supervisor.adopt();
        assert_eq!(supervisor.running(), [(kept.clone(), pids[0])]);
        assert_eq!(cgroups.groups(), ["app-1-0"], "the stray group is removed");
        assert!(
            stray_process.wait().unwrap().code().is_none(),
            "its process was killed"
        );
        assert!(memory_group(pids[0]).ends_with("/app-1-0"));

        assert!(supervisor.kill(&kept, None));
        assert!(matches!(
            end_of(&mut events, &kept).await,
            ProcessState::Killed { .. }
        ));
        assert!(cgroups.groups().is_empty());
        supervisor.shutdown().await;
    });
}

#[tokio::test]
async fn cleanup_removes_what_ended_processes_left_once_the_leader_has_their_end() {
    let dir = tempfile::tempdir().unwrap();
    let (supervisor, mut events) = supervisor(dir.path());
    let (done, long) = (executor("app-1", 0), driver("driver-long"));
    supervisor
        .launch(shell(done.clone(), "echo out", false))
        .unwrap();
    supervisor
        .launch(shell(long.clone(), "echo running; sleep 30", false))
        .unwrap();
    loop {
        let event = next(&mut events).await;
        if event.workload == done && matches!(event.state, ProcessState::Exited { .. }) {
            break;
        }
    }
    let now_and_always = CleanupPolicy {
        ttl: Duration::ZERO,
        ..CleanupPolicy::default()
    };
    // Its end is not the leader's yet: its directory stays.
    let later = std::time::SystemTime::now() + Duration::from_secs(1);
    assert_eq!(
        supervisor.clean_up(later, &now_and_always).unwrap(),
        Vec::<std::path::PathBuf>::new()
    );
    supervisor.forget(&done);
    let removed = supervisor.clean_up(later, &now_and_always).unwrap();
    assert_eq!(removed, [dir.path().join("app-1/0")]);
    // The application's data stays: only the leader's word that it ended removes it.
    assert!(dir.path().join("local/app-1").is_dir());
    assert!(
        !dir.path().join("app-1").exists(),
        "the app's directory went with it"
    );
    assert!(supervisor.cleaned_up(&done) && !supervisor.cleaned_up(&long));
    // What runs stays, whatever its age.
    assert!(dir.path().join("driver-long/stdout").exists());
    // Kept for a day, nothing goes now.
    let a_day = CleanupPolicy {
        ttl: Duration::from_secs(24 * 3600),
        ..CleanupPolicy::default()
    };
    assert!(supervisor.clean_up(later, &a_day).unwrap().is_empty());
    supervisor.shutdown().await;
}

#[tokio::test]
async fn a_wrapper_fences_by_the_clock_since_boot_whatever_the_wall_clock_says() {
    let dir = tempfile::tempdir().unwrap();
    let fence = dir.path().join(".fence");
    // A worker timeout of 1 s: a wrapper fences once the last contact is more than 3 s old.
    std::fs::write(&fence, "1000").unwrap();
    // As the agent notes one: the contact file, then the fence file's time.
    let contact = |at: std::time::SystemTime| {
        muster_worker::fence::note_contact(&fence, at).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&fence)
            .unwrap()
            .set_modified(at)
            .unwrap();
    };
    contact(std::time::SystemTime::now());
    let config = SupervisorConfig {
        kill_grace: Duration::from_millis(300),
        fence_file: Some(fence.clone()),
        ..SupervisorConfig::new(dir.path().to_owned(), "m1:7077".into())
    };
    let (supervisor, mut events) = Supervisor::new(config);
    let workload = executor("app-1", 0);
    let pid = supervisor
        .launch(shell(workload.clone(), "exec sleep 1000", false))
        .unwrap();
    assert_eq!(
        next(&mut events).await.state,
        ProcessState::Running {
            pid,
            restarts: None
        }
    );

    // The wall clock steps an hour back: the agent's contacts are noted an hour in the past
    // by the wall clock, but on the clock since boot they keep coming, and the work runs on
    // past the timeout and its 2 s.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        contact(std::time::SystemTime::now() - Duration::from_secs(3600));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(alive(pid), "fenced by a step of the wall clock");
    }

    // The contacts stop: it is fenced after the timeout and 2 s, give or take the
    // wrapper's second and the whole seconds the contact is kept in.
    let stopped = Instant::now();
    let ended = next(&mut events).await;
    assert!(
        !matches!(ended.state, ProcessState::Running { .. }),
        "{ended:?}"
    );
    let after = stopped.elapsed();
    assert!(
        after >= Duration::from_secs(2) && after <= Duration::from_secs(8),
        "fenced {after:?} after the last contact"
    );
}

#[test]
fn a_restarted_supervisor_keeps_counting_the_restarts_of_a_driver_it_adopts() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let flaky = driver("d-flaky");
    // Each run waits for `go`, takes it, and fails.
    let script = "while [ ! -e go ]; do sleep 0.05; done; rm go; exit 5";
    let go = work.join("d-flaky/go");
    let restarted = |events: &mut UnboundedReceiver<ProcessEvent>, attempt: u32| {
        let start = Instant::now();
        loop {
            match events.try_recv() {
                Ok(ProcessEvent {
                    state: ProcessState::Restarting { attempt: seen, .. },
                    ..
                }) if seen == attempt => return,
                Ok(_) => {}
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
            assert!(start.elapsed() < DEADLINE, "no restart {attempt}");
        }
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (supervisor, mut events) = supervisor(work);
        supervisor
            .launch(shell(flaky.clone(), script, true))
            .unwrap();
        for attempt in 1..=2 {
            std::fs::write(&go, "").unwrap();
            tokio::task::block_in_place(|| restarted(&mut events, attempt));
        }
        // Its third run is under way when the agent crashes.
        while !matches!(next(&mut events).await.state, ProcessState::Running { .. }) {}
    });
    drop(runtime);

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (supervisor, mut events) = supervisor(work);
        supervisor.adopt();
        let kept = supervisor.restarts(&flaky).expect("its restarts, adopted");
        assert_eq!((kept.count, kept.last_exit_code), (2, Some(5)));
        // Its next failure is the third restart, not the first.
        std::fs::write(&go, "").unwrap();
        tokio::task::block_in_place(|| restarted(&mut events, 3));
        supervisor.shutdown().await;
    });
}

/// A supervisor over `work` whose supervised driver `workload`, running `script`, failed its
/// first run and waits out a minute's back-off; with its events after that restart.
async fn failed_once(
    work: &Path,
    workload: &Workload,
    script: &str,
) -> (Supervisor, UnboundedReceiver<ProcessEvent>) {
    let config = SupervisorConfig {
        restart_backoff: Duration::from_secs(60),
        ..SupervisorConfig::new(work.to_owned(), "m1:7077".into())
    };
    let (supervisor, mut events) = Supervisor::new(config);
    supervisor
        .launch(shell(workload.clone(), script, true))
        .unwrap();
    while !matches!(
        next(&mut events).await.state,
        ProcessState::Restarting { attempt: 1, .. }
    ) {}
    (supervisor, events)
}

#[test]
fn a_driver_whose_agent_crashes_while_it_waits_to_start_again_is_started_by_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let flaky = driver("d-flaky");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        // Its second run lasts.
        let script = "[ -e ran ] && exec sleep 1000; touch ran; exit 5";
        let (supervisor, _events) = failed_once(work, &flaky, script).await;
        // While it waits, no process is listed for it, not the one that ended.
        assert_eq!(supervisor.running(), [(flaky.clone(), 0)]);
    });
    drop(runtime);

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (supervisor, mut events) = supervisor(work);
        supervisor.adopt();
        let state = next(&mut events).await.state;
        assert!(matches!(state, ProcessState::Running { .. }), "{state:?}");
        let restarts = supervisor.restarts(&flaky).expect("counted on");
        assert_eq!((restarts.count, restarts.last_exit_code), (1, Some(5)));
        supervisor.shutdown().await;
    });
}

#[test]
fn a_driver_killed_while_it_waits_to_start_again_is_not_started_by_the_next_agent() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let flaky = driver("d-flaky");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (supervisor, mut events) = failed_once(work, &flaky, "exit 5").await;
        assert!(supervisor.kill(&flaky, None));
        let state = next(&mut events).await.state;
        assert_eq!(state, ProcessState::Killed { code: None });
    });
    // The agent crashes before the leader acknowledged that end.
    drop(runtime);

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (supervisor, mut events) = supervisor(work);
        supervisor.adopt();
        let state = next(&mut events).await.state;
        assert!(matches!(state, ProcessState::Killed { .. }), "{state:?}");
        assert!(supervisor.running().is_empty());
    });
}

#[test]
fn an_ended_runs_record_left_beside_the_next_runs_does_not_end_the_driver_it_adopts() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let flaky = driver("d-flaky");
    let spec = shell(flaky.clone(), "exec sleep 1000", true);
    // An earlier run whose record an agent that crashed did not remove.
    let mut earlier = std::process::Command::new("sleep")
        .arg("0.2")
        .spawn()
        .unwrap();
    muster_worker::records::Records::new(work)
        .write(&spec, earlier.id(), &Default::default())
        .unwrap();
    earlier.wait().unwrap();
    let pid = crashed_supervisor(work, None, vec![spec])[0];

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (supervisor, mut events) = supervisor(work);
        supervisor.adopt();
        assert_eq!(supervisor.running(), [(flaky.clone(), pid)]);
        assert!(events.try_recv().is_err(), "no end reported");
        supervisor.shutdown().await;
    });
}
