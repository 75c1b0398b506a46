//! Faults an HA scheduler exists for, with real `muster` processes: a frozen leader, a worker
//! agent frozen past its timeout, a crashed agent, a fencing worker cut off from the masters
//! or stopped for good,
//! a driver that exits while the leader is being replaced, a one-way partition of masters
//! that reach each other through proxies, an application's client cut off while its
//! executor ends.
//! Each ends with every piece of work running exactly once.

// Shared by every end-to-end test binary; each uses part of it.
#[allow(dead_code)]
#[path = "../support.rs"]
mod support;

use std::io::BufReader;
use std::process::{ChildStdout, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{
    DEADLINE, Masters, Process, Proxy, TWO_SLEEPERS, alive, app, app_run, driver, driver_pid,
    running_executors, start_worker, start_worker_via, submit, wait_for, wait_for_text,
    worker_command,
};

/// The leader's id, once one is ALIVE with `workers` ALIVE workers, asking every master but
/// `skip` (1-based; 0 skips none).
fn alive_leader(masters: &Masters, skip: usize, workers: usize) -> (u64, Value) {
    let ask: String = (1..=3)
        .filter(|&id| id != skip)
        .map(|id| masters.addrs[id - 1].clone())
        .collect::<Vec<_>>()
        .join(",");
    let start = Instant::now();
    loop {
        let output = Masters::client(&ask, &["status", "--json"]);
        if output.status.success() {
            let status: Value = serde_json::from_slice(&output.stdout).unwrap();
            let leader = status["leader"].as_u64().unwrap_or(0);
            let alive = status["workers"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|w| w["state"] == "ALIVE")
                .count();
            if leader != 0
                && leader != skip as u64
                && status["recovery_state"] == "ALIVE"
                && alive == workers
            {
                return (leader, status);
            }
        }
        assert!(
            start.elapsed() < support::DEADLINE,
            "no ALIVE leader with {workers} workers within {:?}",
            support::DEADLINE
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Process ids of every live driver and executor, as status shows them.
fn pids(status: &Value) -> Vec<u64> {
    let drivers = status["drivers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["state"] == "RUNNING")
        .filter_map(|d| d["pid"].as_u64());
    let executors = status["apps"].as_array().unwrap().iter().flat_map(|a| {
        a["executors"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["pid"].as_u64())
            .collect::<Vec<_>>()
    });
    let mut pids: Vec<u64> = drivers.chain(executors).collect();
    pids.sort_unstable();
    pids
}

/// A supervised driver and an attached two-executor application, all running.
struct Work {
    driver: String,
    app: String,
    /// The application's client and its output, attached while this lives.
    client: (Process, BufReader<ChildStdout>),
    /// Every process id, sorted.
    pids: Vec<u64>,
}

fn start_work(masters: &Masters) -> Work {
    let driver = submit(masters, &["--supervise", "--", "/bin/sleep", "1000"]);
    let (client, app, events) = app_run(masters, TWO_SLEEPERS);
    let status = wait_for(masters, "the driver and two executors running", |s| {
        self::driver(s, &driver).is_some_and(|d| d["pid"].is_u64())
            && running_executors(s, &app).len() == 2
    });
    Work {
        pids: pids(&status),
        driver,
        app,
        client: (client, events),
    }
}

#[test]
fn a_frozen_leader_is_replaced_within_seconds_and_nothing_runs_twice() {
    let mut masters = Masters::start();
    let old = masters.leader(0) as usize;
    let _w1 = start_worker(&masters, "w1", 2);
    let _w2 = start_worker(&masters, "w2", 2);
    let work = start_work(&masters);
    let (driver_id, app_id, before_pids) = (&work.driver, &work.app, work.pids.clone());
    assert_eq!(before_pids.len(), 3);

    // The leader stops answering anyone, its sockets still open.
    let frozen = masters.running[old - 1].take().expect("the leader runs");
    frozen.freeze();
    let frozen_at = Instant::now();
    let (new, after) = alive_leader(&masters, old, 2);
    let took = frozen_at.elapsed();
    assert_ne!(new as usize, old);
    assert!(
        took < Duration::from_secs(10),
        "a frozen leader cost {took:?}, more than a leader timeout and an election"
    );
    assert_eq!(
        pids(&after),
        before_pids,
        "the same processes, nothing lost"
    );
    assert_eq!(
        driver(&after, driver_id).unwrap()["state"],
        "RUNNING",
        "the supervised driver was neither lost nor relaunched"
    );
    assert!(
        app(&after, app_id).is_some(),
        "the application is still active"
    );

    // The old leader wakes up deposed: it must not kill or duplicate anything.
    frozen.thaw();
    masters.running[old - 1] = Some(frozen);
    let resumed = &masters.addrs[old - 1];
    let start = Instant::now();
    loop {
        let output = Masters::client(resumed, &["status", "--json"]);
        if output.status.success() {
            let status: Value = serde_json::from_slice(&output.stdout).unwrap();
            if status["leader"].as_u64() == Some(new) {
                break;
            }
        }
        assert!(
            start.elapsed() < support::DEADLINE,
            "the old leader never followed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (_, settled) = alive_leader(&masters, 0, 2);
    assert_eq!(pids(&settled), before_pids);
    for pid in before_pids {
        assert!(alive(pid), "process {pid} was killed");
    }
}

#[test]
fn a_worker_frozen_past_its_timeout_comes_back_without_a_second_copy() {
    let masters = Masters::start_with(&["--worker-timeout", "2"]);
    masters.leader(0);
    let w1 = start_worker(&masters, "w1", 2);
    let driver_id = submit(&masters, &["--supervise", "--", "/bin/sleep", "1000"]);
    let original = driver_pid(&masters, &driver_id);
    let _w2 = start_worker(&masters, "w2", 2);
    wait_for(&masters, "two workers", |s| {
        s["workers"].as_array().unwrap().len() == 2
    });

    // Only the agent freezes; the driver it started runs on.
    w1.freeze();
    let relaunched = wait_for(&masters, "the driver relaunched on w2", |s| {
        driver(s, &driver_id).is_some_and(|d| d["state"] == "RELAUNCHING")
            && s["drivers"]
                .as_array()
                .unwrap()
                .iter()
                .any(|d| d["state"] == "RUNNING" && d["pid"].is_u64())
    });
    let copy = relaunched["drivers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["state"] == "RUNNING")
        .unwrap()["pid"]
        .as_u64()
        .unwrap();
    assert!(
        alive(original),
        "the frozen worker's driver runs on meanwhile"
    );

    // The agent resumes: it must register again and stop the copy the log no longer has.
    w1.thaw();
    let healed = Instant::now();
    while alive(original) {
        assert!(
            healed.elapsed() < Duration::from_secs(5),
            "two copies of the driver 5 s after the worker came back"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = wait_for(&masters, "w1 ALIVE again", |s| {
        s["workers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|w| w["state"] == "ALIVE")
    });
    assert!(alive(copy), "the relaunched driver keeps running");
    let running: Vec<_> = status["drivers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["state"] == "RUNNING")
        .collect();
    assert_eq!(running.len(), 1, "exactly one copy: {running:?}");
}

#[test]
fn a_driver_that_exits_during_a_failover_ends_finished_with_its_exit_code() {
    let mut masters = Masters::start();
    let old = masters.leader(0) as usize;
    let _worker = start_worker(&masters, "w1", 2);
    let release = masters.dir.path().join("release");
    let script = format!(
        "while [ ! -e {} ]; do sleep 0.05; done; exit 0",
        release.display()
    );
    let driver_id = submit(&masters, &["--", "/bin/sh", "-c", &script]);
    driver_pid(&masters, &driver_id);

    // The leader dies and the driver exits before anyone leads again.
    masters.running[old - 1]
        .take()
        .expect("the leader runs")
        .crash();
    std::fs::write(&release, b"").unwrap();

    let (_, status) = alive_leader(&masters, old, 1);
    let status = if driver(&status, &driver_id).is_some_and(|d| d["state"] == "RUNNING") {
        wait_for(&masters, "the driver's end", |s| {
            driver(s, &driver_id).is_some_and(|d| d["state"] != "RUNNING")
        })
    } else {
        status
    };
    let ended = driver(&status, &driver_id).unwrap();
    assert_eq!(ended["state"], "FINISHED", "{ended}");
    assert_eq!(ended["exit_code"], 0, "{ended}");
}

#[test]
fn a_crashed_agent_restarted_on_its_work_dir_adopts_its_processes() {
    let masters = Masters::start();
    masters.leader(0);
    let agent = start_worker(&masters, "w1", 4);
    let work = start_work(&masters);
    let (driver_id, app_id, before_pids) = (&work.driver, &work.app, work.pids.clone());

    // Only the agent dies; what it started runs on. A new agent takes the same work dir.
    agent.crash();
    for pid in &before_pids {
        assert!(alive(*pid), "process {pid} outlives its agent");
    }
    let _agent = start_worker(&masters, "w1", 4);
    let after = wait_for(&masters, "the processes reported by the new agent", |s| {
        s["workers"].as_array().unwrap().len() == 1
            && s["workers"][0]["state"] == "ALIVE"
            && running_executors(s, app_id).len() == 2
            && pids(s) == before_pids
    });
    assert_eq!(driver(&after, driver_id).unwrap()["state"], "RUNNING");
    for pid in &before_pids {
        assert!(alive(*pid), "process {pid} was adopted, not replaced");
    }
    // Nothing was started twice: exactly the original processes run in the work dir.
    let work_dir = masters.dir.path().join("w1");
    assert_eq!(
        sleepers_under(&work_dir),
        3,
        "one driver and two executors, no copies"
    );
}

/// How many `sleep` processes run with a working directory inside `dir`.
fn sleepers_under(dir: &std::path::Path) -> usize {
    let dir = std::fs::canonicalize(dir).unwrap();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|entry| {
            let cwd = std::fs::read_link(entry.path().join("cwd"));
            let comm = std::fs::read_to_string(entry.path().join("comm"));
            cwd.is_ok_and(|cwd| cwd.starts_with(&dir))
                && comm.is_ok_and(|comm| comm.trim() == "sleep")
        })
        .count()
}

#[test]
fn a_fencing_worker_cut_off_from_the_masters_stops_its_work_before_it_is_relaunched() {
    let masters = Masters::start_with(&["--worker-timeout", "3"]);
    let leader = masters.leader(0) as usize;
    // w1 reaches the leader only through a proxy, which the test cuts. Only the leader's:
    // a follower would answer with the leader's own address, and w1 would go around it.
    let proxies = [Proxy::start(masters.addrs[leader - 1].clone())];
    let via = format!("127.0.0.1:{}", proxies[0].port);
    let _w1 = start_worker_via(&masters, "w1", 2, &via, &["--fence"]);
    let driver_id = submit(&masters, &["--supervise", "--", "/bin/sleep", "1000"]);
    let original = driver_pid(&masters, &driver_id);
    let _w2 = start_worker(&masters, "w2", 2);
    wait_for(&masters, "two workers", |s| {
        s["workers"].as_array().unwrap().len() == 2
    });

    // w1 is cut off; its agent and its driver run on.
    proxies.iter().for_each(Proxy::block);
    let start = Instant::now();
    let mut original_ended = None;
    let relaunched = loop {
        if original_ended.is_none() && !alive(original) {
            original_ended = Some(start.elapsed());
        }
        let output = Masters::client(&masters.list_from(1), &["status", "--json"]);
        if output.status.success() {
            let status: Value = serde_json::from_slice(&output.stdout).unwrap();
            let copy = status["drivers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|d| d["state"] == "RUNNING" && d["id"] != driver_id.as_str())
                .and_then(|d| d["pid"].as_u64());
            if let Some(copy) = copy {
                assert!(
                    !alive(original),
                    "the relaunched driver runs while the fenced original still runs"
                );
                break copy;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "never relaunched"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let ended = original_ended.expect("the original ended before its relaunch");
    assert!(
        ended >= Duration::from_secs(2),
        "fenced only after the worker timeout, not at once ({ended:?})"
    );

    // The partition heals: w1 registers again and runs nothing; one copy in all.
    proxies.iter().for_each(Proxy::heal);
    let status = wait_for(&masters, "w1 back", |s| {
        s["workers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|w| w["state"] == "ALIVE")
    });
    assert!(alive(relaunched));
    let running = status["drivers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["state"] == "RUNNING")
        .count();
    assert_eq!(running, 1);
}

#[test]
fn a_fencing_workers_processes_outlive_their_stopped_agent_only_until_the_worker_timeout() {
    let masters = Masters::start_with(&["--worker-timeout", "3"]);
    masters.leader(0);
    let mut command = worker_command(&masters, "w1", 2, &masters.list_from(1), &["--fence"]);
    command.env_remove("MUSTER_STOP_WORK_ON_EXIT");
    let agent = Process(command.spawn().expect("muster worker starts"));
    let driver_id = submit(&masters, &["--supervise", "--", "/bin/sleep", "1000"]);
    let original = driver_pid(&masters, &driver_id);
    let _w2 = start_worker(&masters, "w2", 2);
    wait_for(&masters, "two workers", |s| {
        s["workers"].as_array().unwrap().len() == 2
    });

    // The agent stops and nobody takes its work dir over: its driver runs on, but only for
    // the worker timeout, and is gone before the leader relaunches it elsewhere.
    drop(agent);
    let stopped = Instant::now();
    assert!(alive(original), "the driver outlives its agent");
    let mut original_ended = None;
    loop {
        if original_ended.is_none() && !alive(original) {
            original_ended = Some(stopped.elapsed());
        }
        let status = masters.status(&masters.list_from(1));
        let copy = status["drivers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["state"] == "RUNNING" && d["id"] != driver_id.as_str());
        if copy {
            assert!(
                original_ended.is_some(),
                "relaunched while the original runs"
            );
            break;
        }
        assert!(stopped.elapsed() < DEADLINE, "never relaunched");
        std::thread::sleep(Duration::from_millis(50));
    }
    let ended = original_ended.expect("the original ended");
    assert!(
        ended >= Duration::from_secs(4) && ended <= Duration::from_secs(9),
        "the driver ends 2 s after the worker timeout, give or take the wrapper's second: \
         {ended:?}"
    );
}

/// A tmpfs of `mb` MiB mounted at a new directory, unmounted when dropped; `None` (after
/// saying so) where this process may not mount one, unless `MUSTER_REQUIRE_TMPFS` is set
/// (CI sets it where it may mount), which fails instead.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(mb: u32) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mb}m"), "tmpfs"])
            .arg(dir.path())
            .output();
        match mounted {
            Ok(output) if output.status.success() => Some(Self { dir }),
            other if std::env::var_os("MUSTER_REQUIRE_TMPFS").is_some() => {
                panic!("cannot mount a small tmpfs, which this machine should allow: {other:?}")
            }
            other => {
                eprintln!("skipped: cannot mount a small tmpfs here (it needs root): {other:?}");
                None
            }
        }
    }

    /// Fills the disk with a file until fewer than `left` bytes are free.
    fn fill(&self, left: u64) {
        use std::io::Write;
        let path = self.dir.path().join("filler");
        let mut filler = std::fs::File::create(&path).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        let mut written = 0u64;
        while filler.write_all(&chunk).is_ok() {
            written += chunk.len() as u64;
        }
        filler.set_len(written.saturating_sub(left)).unwrap();
    }

    fn free(&self) {
        std::fs::remove_file(self.dir.path().join("filler")).unwrap();
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// A library that makes `fsync` and `fdatasync` fail with EIO while the file `flag` names
/// exists, as a failing drive does: loaded into a process with `LD_PRELOAD`, built with the
/// C compiler that links Rust's programs.
struct FailingSync {
    dir: tempfile::TempDir,
}

const FAILING_SYNC_C: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

static int failing(void) {
    const char *flag = getenv("MUSTER_TEST_SYNC_FAILS_WHILE");
    return flag != NULL && access(flag, F_OK) == 0;
}

int fsync(int fd) {
    if (failing()) { errno = EIO; return -1; }
    return ((int (*)(int))dlsym(RTLD_NEXT, "fsync"))(fd);
}

int fdatasync(int fd) {
    if (failing()) { errno = EIO; return -1; }
    return ((int (*)(int))dlsym(RTLD_NEXT, "fdatasync"))(fd);
}
"#;

impl FailingSync {
    fn build() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("failing_sync.c"), FAILING_SYNC_C).unwrap();
        let built = std::process::Command::new("cc")
            .args([
                "-shared",
                "-fPIC",
                "-o",
                "failing_sync.so",
                "failing_sync.c",
                "-ldl",
            ])
            .current_dir(dir.path())
            .output()
            .expect("cc, the C compiler that links Rust's programs, runs");
        assert!(built.status.success(), "{built:?}");
        Self { dir }
    }

    fn library(&self) -> std::path::PathBuf {
        self.dir.path().join("failing_sync.so")
    }

    fn flag(&self) -> std::path::PathBuf {
        self.dir.path().join("failing")
    }

    fn fail(&self) {
        std::fs::write(self.flag(), b"").unwrap();
    }

    fn mend(&self) {
        std::fs::remove_file(self.flag()).unwrap();
    }
}

/// What breaks master 1's writes in [`a_master_that_cannot_write_stops_saying_why`].
struct Breakage<'a> {
    /// Master 1's data dir.
    data_dir: std::path::PathBuf,
    /// Master 1's environment.
    env: Vec<(&'static str, std::ffi::OsString)>,
    /// Breaks its writes, and mends them.
    break_writes: &'a dyn Fn(),
    mend_writes: &'a dyn Fn(),
    /// What its last line says of the cause.
    cause: &'a str,
}

/// Three masters, master 1's writes broken by `breakage` while clients submit: master 1
/// stops, its last line saying why; the other two go on with everything acknowledged; once
/// mended, master 1 starts again on its log and catches up.
fn a_master_that_cannot_write_stops_saying_why(breakage: &Breakage) {
    let (addrs, peers) = crate::support::master_addresses(3);
    let dir = tempfile::tempdir().unwrap();
    let data = |id: usize| match id {
        1 => breakage.data_dir.clone(),
        _ => dir.path().join(format!("master-{id}")),
    };
    let spawn = |id: usize, log: &str| {
        let log = std::fs::File::create(dir.path().join(log)).unwrap();
        let mut command =
            crate::support::master_command(id as u64, &addrs[id - 1], &peers, &data(id));
        if id == 1 {
            command.envs(breakage.env.iter().cloned());
        }
        Process(
            command
                .stdout(std::process::Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap(),
        )
    };
    let mut first = spawn(1, "master-1.log");
    let _others = [spawn(2, "master-2.log"), spawn(3, "master-3.log")];
    let all = addrs.join(",");
    crate::support::wait_for_at(&all, "a leader", |s| s["recovery_state"] == "ALIVE");

    // Big submissions until master 1 cannot write its log any more.
    (breakage.break_writes)();
    let big = "x".repeat(30_000);
    let mut acknowledged = Vec::new();
    let start = Instant::now();
    let exit = loop {
        if let Some(exit) = first.0.try_wait().unwrap() {
            break exit;
        }
        assert!(
            start.elapsed() < 3 * crate::support::DEADLINE,
            "master 1 never stopped"
        );
        let output = Masters::client(&all, &["submit", "--cores", "99", "--", "/bin/echo", &big]);
        if output.status.success() {
            acknowledged.push(String::from_utf8_lossy(&output.stdout).trim().to_owned());
        }
    };
    assert_eq!(exit.code(), Some(1), "{exit:?}");
    let log = std::fs::read_to_string(dir.path().join("master-1.log")).unwrap();
    let said = log.lines().last().unwrap_or_default();
    assert!(
        said.starts_with("error: the Raft log stopped") && said.contains(breakage.cause),
        "{said}"
    );

    // The other two go on, with everything acknowledged.
    let others = [addrs[1].clone(), addrs[2].clone()].join(",");
    let status = crate::support::wait_for_at(&others, "the other two leading", |s| {
        s["recovery_state"] == "ALIVE"
    });
    for id in &acknowledged {
        assert!(driver(&status, id).is_some(), "{id} lost: {status}");
    }

    // Mended, master 1 starts again on its log and catches up.
    (breakage.mend_writes)();
    let _first = spawn(1, "master-1-again.log");
    let start = Instant::now();
    loop {
        let output = Masters::client(&addrs[0], &["status", "--json", "--local"]);
        let caught_up = output.status.success()
            && serde_json::from_slice::<Value>(&output.stdout)
                .is_ok_and(|local| acknowledged.iter().all(|id| driver(&local, id).is_some()));
        if caught_up {
            break;
        }
        assert!(
            start.elapsed() < crate::support::DEADLINE,
            "master 1 did not catch up"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(!acknowledged.is_empty());
}

#[test]
fn a_master_whose_disk_fills_stops_saying_why_loses_nothing_and_catches_up_once_freed() {
    let Some(disk) = SmallDisk::mount(16) else {
        return;
    };
    a_master_that_cannot_write_stops_saying_why(&Breakage {
        data_dir: disk.dir.path().join("master-1"),
        env: Vec::new(),
        break_writes: &|| disk.fill(512 * 1024),
        mend_writes: &|| disk.free(),
        cause: "No space left on device",
    });
}

#[test]
fn a_master_whose_flushes_fail_stops_saying_why_loses_nothing_and_catches_up_once_mended() {
    let sync = FailingSync::build();
    let data = tempfile::tempdir().unwrap();
    a_master_that_cannot_write_stops_saying_why(&Breakage {
        data_dir: data.path().join("master-1"),
        env: vec![
            ("LD_PRELOAD", sync.library().into()),
            ("MUSTER_TEST_SYNC_FAILS_WHILE", sync.flag().into()),
        ],
        break_writes: &|| sync.fail(),
        mend_writes: &|| sync.mend(),
        cause: "Input/output error",
    });
}

/// How many connections a cut link may be tried on per second: a few elections and client
/// calls, and replication that backs off a tenth of a second after each failure (about 11 a
/// second in all). Without the back-off, replication alone tried one some 775 times a
/// second in a debug build.
const CUT_LINK_ATTEMPTS_PER_SECOND: f64 = 40.0;

/// How long the partition below lasts: long enough for a retry storm to show.
const PARTITION: Duration = Duration::from_secs(10);

#[test]
fn a_one_way_partition_of_masters_behind_proxies_loses_no_attached_application() {
    let (masters, proxies) = Masters::start_behind_proxies();
    // The cut below is of master 1's proxies, so master 1 must lead when it comes.
    let first = masters.leader(0);
    if first != 1 {
        let moved = Masters::client(&masters.list_from(1), &["members", "transfer-leader", "1"]);
        assert!(moved.status.success(), "{moved:?}");
        assert_eq!(masters.leader(first), 1);
    }
    let _worker = start_worker(&masters, "w1", 4);
    let mut work = start_work(&masters);

    // Every proxy master 1's list names is cut, and its list is the membership: master 1
    // reaches nobody while masters 2 and 3 still reach it directly, and 2 and 3 (who reach
    // each other through master 1's proxies) no longer reach each other. Leader hints
    // name the cut proxies too.
    let cut = [&proxies[&(1, 2)], &proxies[&(1, 3)]];
    for proxy in cut {
        proxy.block();
    }
    let cut_at = Instant::now();
    let (_, status) = alive_leader(&masters, 1, 1);
    assert_eq!(pids(&status), work.pids, "the same processes, nothing lost");
    assert_eq!(driver(&status, &work.driver).unwrap()["state"], "RUNNING");
    // Work is still accepted, through whichever master is asked first.
    let during = submit(&masters, &["--", "/bin/sleep", "1000"]);
    let during_pid = driver_pid(&masters, &during);
    while cut_at.elapsed() < PARTITION {
        assert!(
            work.client.0.0.try_wait().unwrap().is_none(),
            "the application's client gave up during the partition"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let lasted = cut_at.elapsed().as_secs_f64();
    for proxy in cut {
        let per_second = proxy.turned_away() as f64 / lasted;
        assert!(
            per_second < CUT_LINK_ATTEMPTS_PER_SECOND,
            "a cut link was tried {per_second:.0} times a second"
        );
    }

    for proxy in cut {
        proxy.heal();
    }
    let (_, healed) = alive_leader(&masters, 0, 1);
    let mut expected = work.pids.clone();
    expected.push(during_pid);
    expected.sort_unstable();
    assert_eq!(pids(&healed), expected, "every process once, nothing lost");
    assert!(
        app(&healed, &work.app).is_some(),
        "the application is still active"
    );
    assert!(work.client.0.0.try_wait().unwrap().is_none());
    for pid in expected {
        assert!(alive(pid), "process {pid} was killed");
    }
}

#[test]
fn an_application_cut_off_hears_when_back_of_the_executor_that_ended_meanwhile() {
    let masters = Masters::start();
    let leader = masters.leader(0) as usize;
    let _worker = start_worker(&masters, "w1", 2);
    // The client reaches the leader only through a proxy, which the test cuts.
    let proxy = Proxy::start(masters.addrs[leader - 1].clone());
    let events = masters.dir.path().join("app-run.jsonl");
    let mut client = crate::support::muster();
    client
        .args(["app", "run", "--json"])
        .args(TWO_SLEEPERS)
        .env("MUSTER_MASTERS", format!("127.0.0.1:{}", proxy.port))
        .stdin(Stdio::piped())
        .stdout(std::fs::File::create(&events).unwrap())
        .stderr(std::fs::File::create(masters.dir.path().join("app-run.log")).unwrap());
    let mut client = Process(client.spawn().expect("muster app run starts"));
    // The first event the client printed that `matches`, waiting for it.
    let told = |what: &str, matches: &dyn Fn(&Value) -> bool| {
        let text = wait_for_text(&events, what, |text| json_lines(text).any(|e| matches(&e)));
        json_lines(&text).find(|e| matches(e)).unwrap()
    };
    let registered = told("the registration", &|e| e["event"] == "registered");
    let id = registered["app_id"].as_str().unwrap().to_owned();
    let status = wait_for(&masters, "two executors running", |s| {
        running_executors(s, &id).len() == 2
    });
    let first = &running_executors(&status, &id)[0];
    let (executor, pid) = (first["id"].clone(), first["pid"].as_u64().unwrap());

    // Cut off, the client hears nothing of the executor killed meanwhile.
    proxy.block();
    told("the client reconnecting", &|e| e["event"] == "reconnecting");
    crate::support::signal(pid as u32, nix::sys::signal::Signal::SIGKILL);
    wait_for(&masters, "the executor's end in the log", |s| {
        running_executors(s, &id)
            .iter()
            .all(|e| e["id"] != executor)
    });
    let ended = |e: &Value| {
        e["event"] == "executor"
            && e["executor_id"] == executor
            && e["state"] != "LAUNCHING"
            && e["state"] != "RUNNING"
    };
    let seen = std::fs::read_to_string(&events).unwrap();
    assert!(
        !json_lines(&seen).any(|e| ended(&e)),
        "told nothing while cut off"
    );

    // Back, it is told how the executor ended.
    proxy.heal();
    let end = told("the executor's end told", &ended);
    // As the leader saw it end: killed by a signal, on its worker.
    assert_eq!(
        (&end["state"], &end["exit_code"]),
        (&json!("EXITED"), &json!(137)),
        "{end}"
    );
    assert_eq!(end["worker"], status["workers"][0]["id"], "{end}");
    assert!(client.0.try_wait().unwrap().is_none(), "still attached");
}

/// The JSON events in `text`, a line each.
fn json_lines(text: &str) -> impl Iterator<Item = Value> + '_ {
    text.lines()
        .filter_map(|line| serde_json::from_str(line).ok())
}
