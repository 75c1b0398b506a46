//! Upgrades without an outage: a working cluster of the previous release (built from the
//! repository's history, see `release.rs`) upgraded to the build under test one process at a
//! time, with leadership moved to an upgraded master while old ones follow, under a steady
//! stream of submissions. Nothing may be lost, doubled or restarted, and no master may stop on
//! its own.

// Shared by every end-to-end test binary; each uses part of it.
#[allow(dead_code)]
#[path = "../support.rs"]
mod support;

mod release;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use muster_state::SNAPSHOT_FORMAT;
use muster_state::version::LogFormat;
use serde_json::Value;

use support::{
    DEADLINE, Masters, Process, Rng, SLEEPERS, TWO_SLEEPERS, alive, app_run_from, driver,
    muster_binary, muster_from, running_executors, signal, wait_for, wait_for_text,
    worker_command_from,
};

/// What every master of the test cluster is given: enough ended drivers kept that every
/// submission of the test can be found again.
const SETTINGS: &str = r#"{"retained_drivers": 100000}"#;

/// What upgraded masters are given as well: snapshots often, and no log kept behind them, so
/// that a follower that was away is sent a snapshot.
const NEW_SETTINGS: &str =
    r#"{"retained_drivers": 100000, "snapshot_every": 20, "log_kept_after_snapshot": 0}"#;

/// What upgraded masters are given where the operator holds the log format for a soak.
const HELD_SETTINGS: &str = r#"{"retained_drivers": 100000, "snapshot_every": 20,
    "log_kept_after_snapshot": 0, "hold_log_format": true}"#;

/// A three-master cluster with two workers, each process on the previous release or the
/// build under test.
struct Cluster {
    masters: Masters,
    /// The settings files.
    settings: tempfile::TempDir,
    old: PathBuf,
    new: PathBuf,
    /// Whether each master (1-based, at index id - 1) runs the build under test.
    upgraded: [bool; 3],
    /// Whether masters of the build under test hold the log format (`hold_log_format`).
    hold_log_format: bool,
    /// The workers by name, and whether each runs the build under test.
    workers: Vec<(String, Process, bool)>,
    /// The longest time from a master's SIGTERM to its serving again on the other build.
    longest_restart: Duration,
    /// The longest gap in a worker's registration across an agent restart.
    longest_worker_gap: Duration,
    /// Drivers submitted between the steps, by the CLI of either build.
    submitted: Vec<String>,
}

impl Cluster {
    /// A cluster whose masters and workers run this build where `masters` and `workers` say
    /// so, the previous release elsewhere.
    fn start(masters: [bool; 3], workers: [bool; 2]) -> Self {
        let settings = tempfile::tempdir().unwrap();
        std::fs::write(settings.path().join("old.json"), SETTINGS).unwrap();
        std::fs::write(settings.path().join("new.json"), NEW_SETTINGS).unwrap();
        std::fs::write(settings.path().join("held.json"), HELD_SETTINGS).unwrap();
        let mut cluster = Self {
            masters: Masters::stopped(),
            settings,
            old: release::previous_muster().to_owned(),
            new: muster_binary(),
            upgraded: masters,
            hold_log_format: false,
            workers: Vec::new(),
            longest_restart: Duration::ZERO,
            longest_worker_gap: Duration::ZERO,
            submitted: Vec::new(),
        };
        for (id, upgraded) in (1..=3).zip(masters) {
            let master = cluster.spawn(id, upgraded);
            cluster.masters.running[id - 1] = Some(master);
        }
        cluster.masters.leader(0);
        for (name, upgraded) in ["w1", "w2"].into_iter().zip(workers) {
            let worker = cluster.spawn_worker(name, upgraded);
            cluster.workers.push((name.to_owned(), worker, upgraded));
        }
        wait_for(&cluster.masters, "both workers ALIVE", |s| {
            support::alive_workers(s) == 2 && s["recovery_state"] == "ALIVE"
        });
        cluster
    }

    fn settings(&self, upgraded: bool) -> PathBuf {
        let name = match (upgraded, self.hold_log_format) {
            (false, _) => "old.json",
            (true, false) => "new.json",
            (true, true) => "held.json",
        };
        self.settings.path().join(name)
    }

    fn program(&self, upgraded: bool) -> &Path {
        if upgraded { &self.new } else { &self.old }
    }

    fn spawn(&self, id: usize, upgraded: bool) -> Process {
        let settings = self.settings(upgraded);
        let settings = settings.to_str().unwrap();
        self.masters
            .spawn_from(id, self.program(upgraded), &["--config", settings])
    }

    fn spawn_worker(&self, name: &str, upgraded: bool) -> Process {
        let list = self.masters.list_from(1);
        let gpu = ["--resources", "gpu=1"];
        let mut command =
            worker_command_from(self.program(upgraded), &self.masters, name, 8, &list, &gpu);
        // Work must outlive its agent here: that is what is tested.
        command.env_remove("MUSTER_STOP_WORK_ON_EXIT");
        Process(command.spawn().expect("muster worker starts"))
    }

    /// Every list of masters a client may be given, the leader's first.
    fn list(&self) -> String {
        self.masters.list_from(1)
    }

    fn leader(&self) -> u64 {
        self.masters.leader(0)
    }

    /// `muster status --local --json` from master `id` alone, if it answers.
    fn local_status(&self, id: usize) -> Option<Value> {
        let output = muster_from(&self.new)
            .args(["status", "--local", "--json"])
            .env("MUSTER_MASTERS", &self.masters.addrs[id - 1])
            .output()
            .ok()?;
        output
            .status
            .success()
            .then(|| serde_json::from_slice(&output.stdout).ok())
            .flatten()
    }

    /// No master and no worker stopped on its own.
    fn assert_all_running(&mut self, step: &str) {
        for (i, master) in self.masters.running.iter_mut().enumerate() {
            let master = master.as_mut().expect("every master runs between steps");
            let exited = master.0.try_wait().unwrap();
            assert!(
                exited.is_none(),
                "{step}: master {} exited: {exited:?}",
                i + 1
            );
        }
        for (name, worker, _) in &mut self.workers {
            let exited = worker.0.try_wait().unwrap();
            assert!(exited.is_none(), "{step}: worker {name} exited: {exited:?}");
        }
    }

    /// Restarts master `id` on a build (SIGTERM, same data dir) and waits until it serves
    /// with the leader's log applied.
    fn restart(&mut self, id: usize, upgraded: bool) {
        let stopping = Instant::now();
        self.stop(id);
        self.rejoin(id, upgraded, stopping);
    }

    /// Stops master `id` as an operator does (SIGTERM).
    fn stop(&mut self, id: usize) {
        drop(self.masters.running[id - 1].take());
    }

    /// Starts master `id`, stopped since `since`, on a build, and waits until it serves with
    /// the log the leader had applied when it started.
    fn rejoin(&mut self, id: usize, upgraded: bool, since: Instant) {
        let leader_index = self.masters.status(&self.list())["applied_index"]
            .as_u64()
            .unwrap();
        let stopping = since;
        let master = self.spawn(id, upgraded);
        self.masters.running[id - 1] = Some(master);
        self.upgraded[id - 1] = upgraded;
        loop {
            let caught_up = self.local_status(id).is_some_and(|s| {
                s["leader"].as_u64().unwrap_or(0) != 0
                    && s["applied_index"].as_u64().unwrap_or(0) >= leader_index
            });
            if caught_up {
                break;
            }
            assert!(
                stopping.elapsed() < DEADLINE,
                "master {id} did not serve again on the other build"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.longest_restart = self.longest_restart.max(stopping.elapsed());
    }

    /// Moves the lead to master `id` (nothing to do if it leads).
    fn transfer(&self, id: usize) {
        let moved = Masters::client(
            &self.list(),
            &["members", "transfer-leader", &id.to_string()],
        );
        assert!(moved.status.success(), "{moved:?}");
        wait_for(&self.masters, "the lead moved", |s| {
            s["leader"] == id as u64 && s["recovery_state"] == "ALIVE"
        });
    }

    /// `writes` writes of one entry each (drivers submitted and killed at once, named
    /// `bench`): masters of this build snapshot every 20 and compact their logs meanwhile.
    fn compact(&self, writes: u32) {
        let load = muster_from(&self.new)
            .args(["bench", "submit", "--clients", "1", "--requests"])
            .arg(writes.to_string())
            .env("MUSTER_MASTERS", self.list())
            .output()
            .unwrap();
        assert!(load.status.success(), "{load:?}");
    }

    /// Waits until the leader, every master on this build, has said it holds the cluster's
    /// log format below what they all read, and checks that it is still there.
    fn wait_held(&self) {
        let leader = self.leader() as usize;
        wait_for_text(
            &self.masters.dir.path().join(format!("master-{leader}.log")),
            "the leader holding the log format",
            |log| log.contains("the cluster's log format is held (hold_log_format)"),
        );
        let status = support::wait_for_at(
            &self.masters.addrs[leader - 1],
            "the leader's status",
            |s| s["leader"] == leader as u64,
        );
        assert!(
            status["log_format"].as_u64() < Some(LogFormat::NEWEST.0.into())
                && status["log_format_held"] == true,
            "{status}"
        );
        let members = Masters::client(&self.list(), &["members"]);
        let members = support::stdout(&members);
        assert!(
            members.contains(&format!(
                "log format held (hold_log_format) although every master reads {}",
                LogFormat::NEWEST
            )),
            "{members}"
        );
    }

    /// Waits until the leader has raised the cluster's log format, every master on this
    /// build.
    fn wait_raised(&self) -> Value {
        let leader = self.leader() as usize;
        let raised = support::wait_for_at(
            &self.masters.addrs[leader - 1],
            "the cluster's log format raised",
            |s| s["log_format"] == LogFormat::NEWEST.0 && s["leader"] == leader as u64,
        );
        assert!(
            raised["members"]
                .as_array()
                .unwrap()
                .iter()
                .all(|m| m["build"]["version"] == env!("CARGO_PKG_VERSION")),
            "{raised}"
        );
        raised
    }

    /// Puts master `id` back on the previous release, which must refuse to start on the
    /// raised log, then starts it on this build again.
    fn refuse_previous_release(&mut self, id: usize) {
        self.stop(id);
        let mut refused = self.masters.spawn_from(id, &self.old, &[]);
        let exited = refused.exited("the previous release on a raised log");
        assert!(!exited.success(), "{exited}");
        let log = std::fs::read_to_string(self.masters.dir.path().join(format!("master-{id}.log")))
            .unwrap();
        // It meets the raise as it opens or reads its log, or in a snapshot that covers it,
        // or a snapshot of a format it does not read (one holding a stopped process).
        let refusal = log
            .lines()
            .rev()
            .find(|line| line.starts_with("error: "))
            .unwrap_or_else(|| panic!("the previous release says why it refuses: {log}"));
        let raised = format!("raised to log format {}", LogFormat::NEWEST.0);
        // A snapshot is written in the oldest format that holds its state, up to this one's.
        let newer = (9..=SNAPSHOT_FORMAT)
            .any(|format| refusal.contains(&format!("snapshot format {format} is newer")));
        assert!(
            (refusal.contains(&raised) && refusal.contains("run a release newer than")) || newer,
            "{refusal}"
        );
        self.rejoin(id, true, Instant::now());
    }

    /// Stops `writer` and checks the end state: every submission FINISHED exactly once with
    /// nothing else submitted but `others` drivers (and `bench`'s), and every replica holding
    /// the same state at the same applied index. The leader's status, and the longest
    /// submission.
    fn audit(&self, writer: Writer, others: usize) -> (Value, Duration) {
        let (written, longest_write) = writer.finish();
        let all: Vec<String> = self.submitted.iter().chain(&written).cloned().collect();
        let done = wait_for(&self.masters, "every submission FINISHED", |s| {
            all.iter()
                .all(|id| driver(s, id).is_some_and(|d| d["state"] == "FINISHED"))
        });
        let drivers = done["drivers"].as_array().unwrap();
        let ours = drivers.iter().filter(|d| d["name"] != "bench").count();
        assert_eq!(
            ours,
            all.len() + others,
            "every submission applied once, nothing relaunched: {done}"
        );
        self.assert_replicas_agree();
        assert!(
            longest_write < Duration::from_secs(5),
            "no write stalled past an election and a retry: {longest_write:?}"
        );
        (done, longest_write)
    }

    /// Every master holds the same state at the same applied index.
    fn assert_replicas_agree(&self) {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let views: Vec<Option<(u64, Value)>> = (1..=3)
                .map(|id| {
                    let status = self.local_status(id)?;
                    let mut view = serde_json::json!([
                        status["workers"],
                        status["apps"],
                        status["drivers"],
                        status["completed_apps"],
                        status["queues"],
                        status["users"],
                        status["log_format"]
                    ]);
                    support::replicated_only(&mut view);
                    Some((status["applied_index"].as_u64()?, view))
                })
                .collect();
            let same_index = views.iter().all(|v| {
                v.as_ref().map(|(index, _)| index) == views[0].as_ref().map(|(index, _)| index)
            });
            if views[0].is_some() && same_index {
                assert!(
                    views.iter().all(|v| v == &views[0]),
                    "the replicas' states differ at the same applied index"
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the replicas never reached one index"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Submits a driver of this build that holds a GPU and runs `script`; its id, once it
    /// runs.
    fn submit_gpu_driver(&self, script: &str) -> String {
        let output = muster_from(&self.new)
            .args(["submit", "--memory", "64", "--resources", "gpu=1", "--"])
            .args(["/bin/sh", "-c", script])
            .env("MUSTER_MASTERS", self.list())
            .output()
            .unwrap();
        let id = support::stdout(&output);
        wait_for(&self.masters, "the GPU driver running", |s| {
            driver(s, &id).is_some_and(|d| d["state"] == "RUNNING" && d["pid"].is_u64())
        });
        id
    }

    /// Submits a short driver with the CLI of `upgraded`'s build.
    fn submit(&mut self, upgraded: bool) {
        let output = muster_from(self.program(upgraded))
            .args(["submit", "--memory", "64", "--", "/bin/true"])
            .env("MUSTER_MASTERS", self.list())
            .output()
            .unwrap();
        let id = support::stdout(&output);
        assert!(id.starts_with("driver-"), "{id}");
        self.submitted.push(id);
    }

    /// Submits a job driver with this build's CLI to the leader itself (a master of the
    /// previous release would forward it without the size of its executors): its job file
    /// says its executors' size, so from log format 4 it starts beside room for its first
    /// executor.
    fn submit_job(&mut self) {
        let file = self.settings.path().join("job.toml");
        let job = r#"name = "job"
[resources]
cores_max = 1
executor_cores = 1
executor_memory_mb = 64
[[jobs]]
name = "tasks"
  [[jobs.stages]]
  name = "s"
  tasks = 2
  run = { builtin = "sleep", ms = 10 }
"#;
        std::fs::write(&file, job).unwrap();
        let output = muster_from(&self.new)
            .args(["submit", "--memory", "64", "--job", file.to_str().unwrap()])
            .env(
                "MUSTER_MASTERS",
                &self.masters.addrs[self.leader() as usize - 1],
            )
            .output()
            .unwrap();
        let id = support::stdout(&output);
        assert!(id.starts_with("driver-"), "{output:?}");
        self.submitted.push(id);
    }

    /// Restarts worker `index` on the build under test: by SIGKILL when it runs the previous
    /// release (the next agent adopts a crashed one's work across builds), by SIGTERM when it
    /// runs this one. Waits until the next agent has registered.
    fn restart_worker(&mut self, index: usize) {
        let (name, worker, upgraded) = self.workers.remove(index);
        let stopping = Instant::now();
        if upgraded {
            signal(worker.pid(), nix::sys::signal::Signal::SIGTERM);
            let mut worker = worker;
            let exited = worker.exited(&format!("worker {name} after SIGTERM"));
            assert!(exited.success(), "worker {name} stops cleanly: {exited}");
        } else {
            worker.crash();
        }
        let next = self.spawn_worker(&name, true);
        wait_for_text(
            &self.masters.dir.path().join(format!("{name}.log")),
            "the next agent registered",
            |log| log.contains("registered with the leader"),
        );
        self.longest_worker_gap = self.longest_worker_gap.max(stopping.elapsed());
        self.workers.insert(index, (name, next, true));
    }
}

/// Submissions made all along by a client of the build under test, each timed.
struct Writer {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<(Vec<String>, Duration)>,
}

impl Writer {
    fn start(cluster: &Cluster) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let (program, list) = (cluster.new.clone(), cluster.list());
        let thread = std::thread::spawn(move || {
            let (mut ids, mut longest) = (Vec::new(), Duration::ZERO);
            while !stopped.load(Ordering::SeqCst) {
                let start = Instant::now();
                let output = muster_from(&program)
                    .args(["submit", "--memory", "64", "--", "/bin/true"])
                    .env("MUSTER_MASTERS", &list)
                    .output()
                    .unwrap();
                longest = longest.max(start.elapsed());
                let id = support::stdout(&output);
                assert!(id.starts_with("driver-"), "{id}");
                ids.push(id);
                std::thread::sleep(Duration::from_millis(200));
            }
            (ids, longest)
        });
        Self { stop, thread }
    }

    /// Stops it: what it submitted, and the longest a submission took.
    fn finish(self) -> (Vec<String>, Duration) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().expect("the writer never failed")
    }
}

/// Held for the length of one upgrade test: two clusters at once on two cores would starve
/// each other's heartbeats.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn executor_pids(status: &Value, app: &str) -> Vec<(u64, u64)> {
    running_executors(status, app)
        .iter()
        .map(|e| (e["id"].as_u64().unwrap(), e["pid"].as_u64().unwrap()))
        .collect()
}

#[test]
fn a_working_cluster_is_upgraded_one_process_at_a_time_without_losing_anything() {
    let _serial = serial();
    let mut cluster = Cluster::start([false; 3], [false; 2]);
    // As the upgrade page says: upgraded masters hold the log format until it is raised.
    cluster.hold_log_format = true;
    let old = cluster.old.clone();

    // Work of the previous release: a supervised driver and an attached application.
    let long = {
        let output = muster_from(&old)
            .args([
                "submit",
                "--supervise",
                "--name",
                "long",
                "--",
                "/bin/sleep",
                "1000",
            ])
            .env("MUSTER_MASTERS", cluster.list())
            .output()
            .unwrap();
        support::stdout(&output)
    };
    let (mut attached, sleepers, _sleeper_events) =
        app_run_from(&old, &cluster.masters, None, TWO_SLEEPERS);
    // And a named user's application, which steers itself through its stream before and
    // after the raise.
    let alice = cluster.settings.path().join("alice.credential");
    let added = muster_from(&old)
        .args(["users", "add", "alice", "--out", alice.to_str().unwrap()])
        .env("MUSTER_MASTERS", cluster.list())
        .output()
        .unwrap();
    assert!(added.status.success(), "{added:?}");
    let (mut steered, hers, _her_events) =
        app_run_from(&old, &cluster.masters, Some(&alice), TWO_SLEEPERS);
    let executor_ids = |s: &Value| support::running_executor_ids(s, &hers);
    let before = wait_for(&cluster.masters, "the old cluster's work running", |s| {
        driver(s, &long).is_some_and(|d| d["state"] == "RUNNING" && d["pid"].is_u64())
            && running_executors(s, &sleepers).len() == 2
            && executor_ids(s) == [0, 1]
    });
    let long_pid = driver(&before, &long).unwrap()["pid"].as_u64().unwrap();
    let sleeper_pids = executor_pids(&before, &sleepers);
    let writer = Writer::start(&cluster);

    let first_leader = cluster.leader() as usize;
    let followers: Vec<usize> = (1..=3).filter(|&id| id != first_leader).collect();
    let (a, b) = (followers[0], followers[1]);

    // A follower upgraded, rolled back to the previous release, and upgraded again.
    cluster.restart(a, true);
    cluster.submit(false);
    cluster.restart(a, false);
    cluster.submit(true);
    cluster.restart(a, true);
    cluster.submit(false);
    cluster.assert_all_running("a follower upgraded, rolled back and upgraded");

    // The lead moves to the upgraded master while two of the previous release follow.
    let moved = Masters::client(
        &cluster.list(),
        &["members", "transfer-leader", &a.to_string()],
    );
    assert!(moved.status.success(), "{moved:?}");
    // Asked of the new leader itself.
    let status = support::wait_for_at(
        &cluster.masters.addrs[a - 1],
        "the upgraded master leading, knowing builds",
        |s| {
            s["leader"] == a as u64
                && s["recovery_state"] == "ALIVE"
                && s["members"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|m| m["build"].is_object())
        },
    );
    assert!(
        status["log_format"].as_u64() < Some(LogFormat::NEWEST.0.into()),
        "masters of the previous release follow: {status}"
    );
    let builds: Vec<&Value> = status["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["build"]["version"])
        .collect();
    let previous = release::previous().version;
    assert_eq!(
        builds.iter().filter(|v| **v == previous.as_str()).count(),
        2,
        "the leader learned the followers' builds: {status}"
    );

    // An application placed now gets a plan of counted grants, which the old followers read.
    let (_four, four, _four_events) = app_run_from(
        &cluster.new,
        &cluster.masters,
        None,
        &[&["--cores-max", "4"], SLEEPERS].concat(),
    );
    let placed = wait_for(
        &cluster.masters,
        "four executors placed by the new leader",
        |s| running_executors(s, &four).len() == 4,
    );
    let four_pids = executor_pids(&placed, &four);
    // A resource profile asked for now is served: the old followers read it.
    let (staged_client, staged, _staged_events) = app_run_from(
        &cluster.new,
        &cluster.masters,
        None,
        &[&["--executor-limit", "0"], SLEEPERS].concat(),
    );
    let mut stage = staged_client.0.stdin.as_ref().unwrap();
    let profile =
        r#"{"id": 1, "executor_limit": 1, "executor_cores": 1, "executor_memory_mb": 128}"#;
    writeln!(stage, "profile {profile}").unwrap();
    wait_for(
        &cluster.masters,
        "the profile's executor under old followers",
        |s| {
            let running = running_executors(s, &staged);
            running.len() == 1
                && running[0]["resource_profile"] == 1
                && running[0]["memory_mb"] == 128
        },
    );
    // A queue's own driver share and ordering wait for the raise: the old followers could
    // not read them. Asked for now, they are refused, naming the masters that hold it back.
    let shares = cluster.settings.path().join("shares.json");
    std::fs::write(
        &shares,
        r#"[{"name": "default", "driver_share": 0.25, "ordering": "drf", "max_priority": 5}]"#,
    )
    .unwrap();
    let set_shares = ["queues", "--set", shares.to_str().unwrap()];
    let refused = Masters::client(&cluster.list(), &set_shares);
    assert!(!refused.status.success(), "{refused:?}");
    let line = support::stderr(&refused);
    assert!(
        line.contains(&format!(
            "needs every master at {}",
            LogFormat::NEWEST.readers()
        )) && line.contains(&format!("runs {previous}")),
        "{line}"
    );
    // So do a gang and an application's priority, registered through the new leader.
    for asked in [
        &["--min-executors", "1", "--cores-max", "1"][..],
        &["--priority", "1"],
    ] {
        let mut client = Process(
            muster_from(&cluster.new)
                .args(["app", "run"])
                .args(asked)
                .args(SLEEPERS)
                .env("MUSTER_MASTERS", cluster.list())
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap(),
        );
        assert!(!client.exited("the refused registration's client").success());
        let mut refusal = String::new();
        std::io::Read::read_to_string(&mut client.0.stderr.take().unwrap(), &mut refusal).unwrap();
        assert!(
            refusal.contains("needs every master at")
                && refusal.contains(&format!("runs {previous}")),
            "{asked:?}: {refusal}"
        );
    }
    // And a driver's priority.
    let prioritized_driver = ["submit", "--priority", "1", "--cores", "1000", "--"];
    let refused = muster_from(&cluster.new)
        .args(prioritized_driver)
        .arg("/bin/true")
        .env("MUSTER_MASTERS", cluster.list())
        .output()
        .unwrap();
    let refusal = support::stderr(&refused);
    assert!(
        !refused.status.success()
            && refusal.contains("needs every master at")
            && refusal.contains(&format!("runs {previous}")),
        "{refused:?}"
    );
    // A job driver is submitted without room for its first executor, which the old
    // followers could not read, and runs to its end (the audit checks it).
    cluster.submit_job();
    cluster.submit(false);
    cluster.assert_all_running("an application placed by the upgraded leader");

    // A page of the drivers from the upgraded leader; a master of the previous release knows
    // no pages, answers every driver from its own copy, and this client shows them whole.
    let page = |addr: &str, local: bool| -> Value {
        let output = muster_from(&cluster.new)
            .args(["drivers", "--limit", "1", "--json"])
            .args(local.then_some("--local"))
            .env("MUSTER_MASTERS", addr)
            .output()
            .unwrap();
        serde_json::from_str(&support::stdout(&output)).unwrap()
    };
    let first = page(&cluster.masters.addrs[a - 1], false);
    assert_eq!(first["drivers"].as_array().unwrap().len(), 1, "{first}");
    assert!(first["next"].is_string(), "{first}");
    let whole = page(&cluster.masters.addrs[b - 1], true);
    assert!(whole["drivers"].as_array().unwrap().len() > 1, "{whole}");
    assert_eq!(whole["next"], Value::Null, "{whole}");

    // Her application's requests, written as the previous release reads them.
    let mut steer = steered.0.stdin.take().unwrap();
    writeln!(steer, "limit 1").unwrap();
    writeln!(steer, "release 0").unwrap();
    wait_for(&cluster.masters, "her application given one back", |s| {
        executor_ids(s) == [1]
    });

    // An old follower away while the new leader snapshots and compacts its log: it is sent
    // the snapshot when it comes back.
    cluster.stop(b);
    // Thirty snapshots, the log behind them purged.
    cluster.compact(600);
    cluster.rejoin(b, false, Instant::now());
    let sent = format!("snapshot sent to a follower behind the log peer={b} ");
    wait_for_text(
        &cluster.masters.dir.path().join(format!("master-{a}.log")),
        "the new leader's snapshot sent to the old follower",
        |log| log.contains(&sent),
    );
    cluster.submit(true);

    // The rest of the masters upgraded, the old leader last. They hold the log format for a
    // soak: meanwhile a master may still be put back on the previous release.
    cluster.restart(b, true);
    cluster.submit(false);
    cluster.restart(first_leader, true);
    cluster.submit(true);
    cluster.wait_held();
    cluster.restart(first_leader, false);
    cluster.submit(true);
    cluster.restart(first_leader, true);
    cluster.wait_held();
    let raised = Masters::client(&cluster.list(), &["members", "raise-log-format"]);
    let raised = support::stdout(&raised);
    assert!(
        raised.contains(&format!("to {}", LogFormat::NEWEST)),
        "{raised}"
    );
    cluster.wait_raised();
    cluster.assert_all_running("every master upgraded");

    // Raised, a queue's driver share and ordering are set, and every master has them.
    let set = Masters::client(&cluster.list(), &set_shares);
    assert!(set.status.success(), "{set:?}");
    for id in 1..=3 {
        support::wait_for_at(
            &cluster.masters.addrs[id - 1],
            "the default queue's driver share and ordering",
            |s| {
                s["queues"].as_array().unwrap().iter().any(|q| {
                    q["name"] == "default" && q["driver_share"] == 0.25 && q["ordering"] == "drf"
                })
            },
        );
    }

    // Raised, a gang of priority 1 registers, and every master has its minimum and priority.
    let (_gang, gang, _gang_events) = app_run_from(
        &cluster.new,
        &cluster.masters,
        None,
        &[
            &[
                "--min-executors",
                "1",
                "--cores-max",
                "1",
                "--priority",
                "1",
            ],
            SLEEPERS,
        ]
        .concat(),
    );
    for id in 1..=3 {
        support::wait_for_at(
            &cluster.masters.addrs[id - 1],
            "the gang's minimum and priority",
            |s| {
                support::app(s, &gang)
                    .is_some_and(|a| a["min_executors"] == 1 && a["priority"] == 1)
            },
        );
    }

    // Raised, a driver of priority 1 is submitted (larger than any worker, it waits), and
    // every master has its priority.
    let waiting = support::stdout(
        &muster_from(&cluster.new)
            .args(prioritized_driver)
            .arg("/bin/true")
            .env("MUSTER_MASTERS", cluster.list())
            .output()
            .unwrap(),
    );
    for id in 1..=3 {
        support::wait_for_at(
            &cluster.masters.addrs[id - 1],
            "the driver's priority",
            |s| support::driver(s, &waiting).is_some_and(|d| d["priority"] == 1),
        );
    }
    let killed = Masters::client(&cluster.list(), &["kill", &waiting]);
    assert!(killed.status.success(), "{killed:?}");

    // Raised, a job driver starts beside room for its first executor, which its
    // application takes when it registers, on every master (the audit checks it ran and
    // that the replicas agree).
    cluster.submit_job();

    // Raised, she still steers her application.
    writeln!(steer, "limit 2").unwrap();
    let steered_to_two = wait_for(&cluster.masters, "her application at two again", |s| {
        executor_ids(s) == [1, 2]
    });
    let her_pids = executor_pids(&steered_to_two, &hers);

    // A GPU driver killed while it ignores SIGTERM keeps its GPU through its kill grace. A
    // snapshot taken meanwhile holds it and the raised format, and a master restarted on
    // that snapshot serves.
    let stubborn = cluster.submit_gpu_driver("trap '' TERM; while :; do sleep 1; done");
    let killed = Masters::client(&cluster.list(), &["kill", &stubborn]);
    assert!(killed.status.success(), "{killed:?}");
    let gpus_used = |s: &Value| -> u64 {
        s["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["resources_used"]["gpu"].as_u64().unwrap_or(0))
            .sum()
    };
    assert_eq!(gpus_used(&cluster.masters.status(&cluster.list())), 1);
    cluster.compact(40);
    cluster.restart(b, true);
    wait_for(
        &cluster.masters,
        "the GPU free once the driver ended",
        |s| gpus_used(s) == 0,
    );

    // The previous release can no longer join: it refuses to start on a raised log.
    cluster.refuse_previous_release(first_leader);
    cluster.submit(true);

    // Workers: those of the previous release by SIGKILL (an agent's crash, adopted across
    // builds), then each of this build restarted by SIGTERM.
    for index in 0..2 {
        cluster.restart_worker(index);
        cluster.submit(true);
    }
    for index in 0..2 {
        cluster.restart_worker(index);
        cluster.submit(false);
    }
    cluster.assert_all_running("every worker upgraded and restarted");

    // Besides the submissions: the long driver, the stubborn GPU one and the waiting one of
    // priority 1.
    let (done, longest_write) = cluster.audit(writer, 3);
    let d = driver(&done, &long).unwrap();
    assert_eq!(
        (d["state"].as_str(), d["pid"].as_u64()),
        (Some("RUNNING"), Some(long_pid)),
        "the long driver kept its process"
    );
    assert!(alive(long_pid));
    assert_eq!(executor_pids(&done, &sleepers), sleeper_pids);
    assert_eq!(executor_pids(&done, &four), four_pids);
    assert_eq!(executor_pids(&done, &hers), her_pids);
    for (app, client) in [(&sleepers, &mut attached), (&hers, &mut steered)] {
        assert!(
            client.0.try_wait().unwrap().is_none(),
            "the attached application {app} of the previous release is still attached"
        );
    }
    println!(
        "upgrade: the longest submission took {longest_write:?}; a master served again \
         within {:?} of its SIGTERM; a worker registered again within {:?} of its stop",
        cluster.longest_restart, cluster.longest_worker_gap
    );
}

/// Masters of this build where `layout` says so and of the previous release elsewhere, a
/// worker of each, upgraded in a seeded random order (`MUSTER_UPGRADE_SEED` replays one):
/// each step upgrades an old master, moves the lead to any master, or restarts a master on
/// the build it runs, and is followed by a snapshot and log compaction and a submission.
fn upgrade_in_a_random_order(layout: [bool; 3]) {
    let _serial = serial();
    let seed = support::seed("MUSTER_UPGRADE_SEED");
    let mut rng = Rng(seed);
    let mut cluster = Cluster::start(layout, [false, true]);
    let writer = Writer::start(&cluster);
    let mut steps = Vec::new();
    while cluster.upgraded.contains(&false) {
        let id = rng.between(1, 3) as usize;
        // Half the steps upgrade a master, so that a run takes about twice as many steps as
        // there are masters to upgrade.
        let step = match rng.between(0, 3) {
            0 | 1 => {
                let old: Vec<usize> = (1..=3).filter(|&id| !cluster.upgraded[id - 1]).collect();
                let id = old[rng.between(0, old.len() as u64 - 1) as usize];
                cluster.restart(id, true);
                format!("upgrade {id}")
            }
            2 => {
                cluster.transfer(id);
                format!("lead to {id}")
            }
            _ => {
                cluster.restart(id, cluster.upgraded[id - 1]);
                format!("restart {id}")
            }
        };
        steps.push(step);
        cluster.compact(300);
        cluster.submit(rng.next().is_multiple_of(2));
        cluster.assert_all_running(&format!("seed {seed}, after {steps:?}"));
    }
    cluster.wait_raised();
    cluster.refuse_previous_release(rng.between(1, 3) as usize);
    cluster.submit(true);
    for index in 0..2 {
        cluster.restart_worker(index);
        cluster.submit(false);
    }
    cluster.assert_all_running(&format!("seed {seed}, after {steps:?} and the workers"));
    let (_, longest_write) = cluster.audit(writer, 0);
    println!("upgrade from {layout:?} by {steps:?}: the longest submission took {longest_write:?}");
}

#[test]
fn a_cluster_with_a_minority_upgraded_is_upgraded_in_a_random_order() {
    upgrade_in_a_random_order([true, false, false]);
}

#[test]
fn a_cluster_with_a_quorum_upgraded_is_upgraded_in_a_random_order() {
    upgrade_in_a_random_order([false, true, true]);
}

#[test]
fn a_cluster_all_on_the_previous_release_is_upgraded_in_a_random_order() {
    upgrade_in_a_random_order([false; 3]);
}
