//! Real child processes under the supervisor: environment, output files, exit codes, kills
//! that reach a whole process group, and supervised restarts with back-off.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use muster_core::ids::ExecutorId;
use muster_core::resources::Resources;
use muster_worker::supervisor::{
    LaunchError, LaunchSpec, ProcessEvent, ProcessState, Supervisor, SupervisorConfig, Workload,
};
use tokio::sync::mpsc::UnboundedReceiver;

const DEADLINE: Duration = Duration::from_secs(20);

fn supervisor(dir: &Path) -> (Supervisor, UnboundedReceiver<ProcessEvent>) {
    let config = SupervisorConfig {
        kill_grace: Duration::from_millis(300),
        restart_backoff: Duration::from_millis(50),
        successful_run: Duration::from_secs(5),
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
    assert_eq!(next(&mut events).await.state, ProcessState::Running { pid });
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
    assert_eq!(next(&mut events).await.state, ProcessState::Running { pid });
    let child: u32 = wait_for_file(&dir.path().join("app-1/0/child.pid"))
        .await
        .trim()
        .parse()
        .unwrap();
    assert!(alive(child));
    assert_eq!(supervisor.running(), [(workload.clone(), pid)]);

    assert!(supervisor.kill(&workload, None));
    assert_eq!(
        next(&mut events).await,
        ProcessEvent {
            workload: workload.clone(),
            state: ProcessState::Killed
        }
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
    assert_eq!(next(&mut events).await.state, ProcessState::Killed);
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
    assert_eq!(next(&mut events).await.state, ProcessState::Killed);
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
            ProcessState::Running { .. } => {}
            ProcessState::Restarting { attempt, after } => {
                assert_eq!(attempt as usize, waits.len() + 1);
                waits.push(after);
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
        if next(&mut events).await.state == ProcessState::Killed {
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
            .all(|state| state == ProcessState::Killed)
    );
}

/// A supervisor whose agent crashes: its runtime is dropped, its processes run on.
fn crashed_supervisor(dir: &Path, specs: Vec<LaunchSpec>) -> Vec<u32> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (supervisor, _events) = supervisor(dir);
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
        assert_eq!(next(&mut events).await.state, ProcessState::Killed);
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
        assert_eq!(event.state, ProcessState::Killed, "its end was asked for");
        assert!(
            tokio::time::timeout(Duration::from_millis(200), events.recv())
                .await
                .is_err(),
            "nothing else to report"
        );
    });
}
