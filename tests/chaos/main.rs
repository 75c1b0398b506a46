//! Chaos: real `muster` processes (three masters peering through fault proxies, three
//! workers), steady submissions and status reads, and a seeded random schedule of faults:
//! SIGKILL and restart, SIGSTOP then SIGCONT, partitions of one master from the others
//! (workers still reach it), one-way cuts of a single link (one master cannot reach
//! another, which still reaches it), and one-way partitions of a whole master (nobody
//! reaches it while it reaches everyone, or the reverse), for masters and worker agents
//! alike.
//!
//! Two applications run through it as gangs (all of their executors at once): one from the
//! start, one that comes halfway, when drivers hold part of the room it needs, and keeps room
//! as it frees through the faults. Halfway too, a burst of submissions at once meets leaders
//! that keep at most two client writes waiting: the rest are refused as busy, and the clients
//! send them again (backpressure).
//!
//! Every second through the run, `/proc` is sampled: no driver or executor ever runs twice at
//! once. At the end, the history of submissions and reads must be linearizable
//! ([`linearizable`]), and an audit over the status and `/proc` holds: every accepted
//! submission exists exactly once, everything RUNNING has its process, no process runs that
//! the log does not have running, every replica holds the same state, and every worker is
//! ALIVE.
//!
//! The same run goes on during an upgrade too: the masters and agents start on a seeded
//! mix of the previous release (built from the repository's history, as the upgrade test
//! does) and this build, and among the faults each old process is upgraded in turn (killed,
//! and started again on this build), every master by 60% of the run, so that the log format
//! is raised while the faults go on. The applications there are not gangs, which the
//! previous release's log cannot hold.
//!
//! `MUSTER_CHAOS_SECS` sets how long faults are injected (60 by default); a failure prints
//! the seed, and `MUSTER_CHAOS_SEED` replays it. `MUSTER_CHAOS_FENCE=1` runs the workers
//! with `--fence`.

// Shared by every end-to-end test binary; each uses part of it.
#[allow(dead_code)]
#[path = "../support.rs"]
mod support;

mod linearizable;
#[path = "../upgrade/release.rs"]
mod release;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use muster_state::version::LogFormat;
use serde_json::Value;

use crate::linearizable::{Kind, Operation};
use crate::support::{
    Process, Proxy, Rng, alive, master_addresses, muster, muster_binary, muster_from,
    replicated_only,
};

struct Cluster {
    dir: tempfile::TempDir,
    addrs: Vec<String>,
    peers: String,
    /// `proxies[(from, to)]`: how master `from` reaches master `to` (0-based).
    proxies: BTreeMap<(usize, usize), Proxy>,
    masters: Vec<Option<Process>>,
    workers: Vec<Option<Process>>,
    /// During an upgrade, the previous release's `muster` and which processes run it.
    upgrade: Option<Upgrade>,
}

/// The processes of an upgrade under way that still run the previous release.
struct Upgrade {
    old: PathBuf,
    /// Whether each master (0-based) runs the previous release.
    old_masters: [bool; MASTERS],
    /// Whether each worker agent runs the previous release.
    old_agents: [bool; WORKERS],
}

impl Upgrade {
    /// A seeded mix of old and new processes, with at least one old master and one old
    /// agent.
    fn mixed(rng: &mut Rng) -> Self {
        let mut old_masters = [0; MASTERS].map(|_| rng.between(0, 1) == 1);
        old_masters[rng.between(0, MASTERS as u64 - 1) as usize] = true;
        let mut old_agents = [0; WORKERS].map(|_| rng.between(0, 1) == 1);
        old_agents[rng.between(0, WORKERS as u64 - 1) as usize] = true;
        Self {
            old: release::previous_muster().to_owned(),
            old_masters,
            old_agents,
        }
    }
}

const MASTERS: usize = 3;
const WORKERS: usize = 3;
/// Submissions sent at once halfway through.
const BURST: usize = 16;

impl Cluster {
    fn start(upgrade: Option<Upgrade>) -> Self {
        let (addrs, peers) = master_addresses(MASTERS);
        let mut proxies = BTreeMap::new();
        for from in 0..MASTERS {
            for to in (0..MASTERS).filter(|&to| to != from) {
                proxies.insert((from, to), Proxy::start(addrs[to].clone()));
            }
        }
        let keep = std::env::var_os("MUSTER_TEST_KEEP").is_some();
        let dir = tempfile::Builder::new()
            .prefix("muster-chaos")
            .disable_cleanup(keep)
            .tempdir()
            .unwrap();
        // Every ended driver stays in the status, for the audit to find. Two client writes
        // waiting at most: a burst of submissions meets busy leaders.
        std::fs::write(
            dir.path().join("master.json"),
            r#"{"retained_drivers": 1000000, "retained_apps": 1000000, "max_queued_writes": 2}"#,
        )
        .unwrap();
        // The previous release knows no limit on waiting client writes.
        std::fs::write(
            dir.path().join("master-previous.json"),
            r#"{"retained_drivers": 1000000, "retained_apps": 1000000}"#,
        )
        .unwrap();
        let mut cluster = Self {
            dir,
            addrs,
            peers,
            proxies,
            masters: Vec::new(),
            workers: Vec::new(),
            upgrade,
        };
        for master in 0..MASTERS {
            let process = cluster.spawn_master(master);
            cluster.masters.push(Some(process));
        }
        for worker in 0..WORKERS {
            let process = cluster.spawn_worker(worker);
            cluster.workers.push(Some(process));
        }
        cluster
    }

    fn all(&self) -> String {
        self.addrs.join(",")
    }

    fn log(&self, name: &str) -> std::fs::File {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{name}.log")))
            .unwrap()
    }

    fn spawn_master(&self, master: usize) -> Process {
        let routes = (0..MASTERS)
            .filter(|&to| to != master)
            .map(|to| format!("{}=127.0.0.1:{}", to + 1, self.proxies[&(master, to)].port))
            .collect::<Vec<_>>()
            .join(",");
        let old = self.old_program(|u| u.old_masters[master]);
        let settings = match old {
            Some(_) => "master-previous.json",
            None => "master.json",
        };
        Process(
            muster_from(old.unwrap_or(&muster_binary()))
                .args(["master", "--id", &(master + 1).to_string()])
                .args(["--listen", &self.addrs[master], "--peers", &self.peers])
                .args(["--peer-routes", &routes, "--worker-timeout", "6"])
                .arg("--config")
                .arg(self.dir.path().join(settings))
                .arg("--data-dir")
                .arg(self.dir.path().join(format!("master-{}", master + 1)))
                .stdout(Stdio::null())
                .stderr(self.log(&format!("master-{}", master + 1)))
                .spawn()
                .expect("muster master starts"),
        )
    }

    /// The previous release's `muster`, if the process `runs_it` picks runs it.
    fn old_program(&self, runs_it: impl Fn(&Upgrade) -> bool) -> Option<&Path> {
        self.upgrade
            .as_ref()
            .filter(|upgrade| runs_it(upgrade))
            .map(|upgrade| upgrade.old.as_path())
    }

    /// A master or agent still on the previous release, the seeded pick among them; a
    /// master first once `masters_due`.
    fn old_process(&self, rng: &mut Rng, masters_due: bool) -> Option<Upgrading> {
        let upgrade = self.upgrade.as_ref()?;
        let masters = (0..MASTERS)
            .filter(|&m| upgrade.old_masters[m])
            .map(Upgrading::Master);
        let agents = (0..WORKERS)
            .filter(|&w| upgrade.old_agents[w])
            .map(Upgrading::Agent);
        let old: Vec<Upgrading> = if masters_due && masters.clone().next().is_some() {
            masters.collect()
        } else {
            masters.chain(agents).collect()
        };
        (!old.is_empty()).then(|| old[rng.between(0, old.len() as u64 - 1) as usize])
    }

    /// Kills `process` and starts it again on this build, as an upgrade that does not wait
    /// for anything does.
    fn upgrade(&mut self, process: Upgrading, rng: &mut Rng) {
        let upgrade = self.upgrade.as_mut().expect("an upgrade under way");
        match process {
            Upgrading::Master(m) => {
                upgrade.old_masters[m] = false;
                self.masters[m].take().unwrap().crash();
                std::thread::sleep(Duration::from_millis(rng.between(500, 3000)));
                self.masters[m] = Some(self.spawn_master(m));
            }
            Upgrading::Agent(w) => {
                upgrade.old_agents[w] = false;
                self.workers[w].take().unwrap().crash();
                std::thread::sleep(Duration::from_millis(rng.between(500, 3000)));
                self.workers[w] = Some(self.spawn_worker(w));
            }
        }
    }

    fn work_dir(&self, worker: usize) -> PathBuf {
        self.dir.path().join(format!("w{}", worker + 1))
    }

    fn spawn_worker(&self, worker: usize) -> Process {
        let name = format!("w{}", worker + 1);
        let old = self.old_program(|u| u.old_agents[worker]);
        let mut command = muster_from(old.unwrap_or(&muster_binary()));
        command.args([
            "worker", "--cores", "4", "--memory", "8192", "--host", &name,
        ]);
        if std::env::var_os("MUSTER_CHAOS_FENCE").is_some_and(|v| v == "1") {
            command.arg("--fence");
        }
        Process(
            command
                .arg("--work-dir")
                .arg(self.work_dir(worker))
                .env("MUSTER_MASTERS", self.all())
                .stdout(Stdio::null())
                .stderr(self.log(&name))
                .spawn()
                .expect("muster worker starts"),
        )
    }

    /// Blocks, for `hold`, every link `from -> to` between masters that `cut` picks.
    fn cut_links(&self, cut: impl Fn(usize, usize) -> bool, hold: Duration) {
        let links: Vec<&Proxy> = self
            .proxies
            .iter()
            .filter(|((from, to), _)| cut(*from, *to))
            .map(|(_, proxy)| proxy)
            .collect();
        links.iter().for_each(|proxy| proxy.block());
        std::thread::sleep(hold);
        links.iter().for_each(|proxy| proxy.heal());
    }

    fn status(&self, masters: &str, local: bool) -> Option<Value> {
        let mut command = muster();
        command
            .args(["status", "--json"])
            .env("MUSTER_MASTERS", masters);
        if local {
            command.arg("--local");
        }
        let output = command.output().ok()?;
        output
            .status
            .success()
            .then(|| serde_json::from_slice(&output.stdout).ok())
            .flatten()
    }
}

/// One fault, applied and then healed.
#[derive(Debug)]
enum Fault {
    KillMaster(usize),
    FreezeMaster(usize, Duration),
    PartitionMaster(usize, Duration),
    /// Master `.0` cannot reach master `.1`; `.1` still reaches `.0`.
    CutLink(usize, usize, Duration),
    /// No master reaches master `.0`, which still reaches them all.
    CutInto(usize, Duration),
    /// Master `.0` reaches no master; they all still reach it.
    CutOutOf(usize, Duration),
    KillAgent(usize),
    FreezeAgent(usize, Duration),
    /// A process of the previous release killed and started again on this build.
    Upgrade(Upgrading),
}

/// A process being upgraded.
#[derive(Clone, Copy, Debug)]
enum Upgrading {
    Master(usize),
    Agent(usize),
}

impl Fault {
    /// The next fault: during an upgrade, one in three upgrades an old process, and once
    /// `masters_due` every fault upgrades an old master until none is left.
    fn pick(rng: &mut Rng, longest: u64, cluster: &Cluster, masters_due: bool) -> Self {
        let old_master_left = cluster
            .upgrade
            .as_ref()
            .is_some_and(|u| u.old_masters.contains(&true));
        let upgrading = cluster.upgrade.is_some()
            && ((masters_due && old_master_left) || rng.between(0, 2) == 0);
        if let Some(process) = upgrading
            .then(|| cluster.old_process(rng, masters_due))
            .flatten()
        {
            return Self::Upgrade(process);
        }
        let hold = Duration::from_secs(rng.between(2, longest));
        match rng.between(0, 7) {
            0 => Self::KillMaster(rng.between(0, 2) as usize),
            1 => Self::FreezeMaster(rng.between(0, 2) as usize, hold),
            2 => Self::PartitionMaster(rng.between(0, 2) as usize, hold),
            3 => {
                let from = rng.between(0, 2) as usize;
                let to = (from + rng.between(1, 2) as usize) % MASTERS;
                Self::CutLink(from, to, hold)
            }
            4 => Self::CutInto(rng.between(0, 2) as usize, hold),
            5 => Self::CutOutOf(rng.between(0, 2) as usize, hold),
            6 => Self::KillAgent(rng.between(0, 2) as usize),
            _ => Self::FreezeAgent(rng.between(0, 2) as usize, hold),
        }
    }

    fn inject(&self, cluster: &mut Cluster, rng: &mut Rng) {
        match *self {
            Self::KillMaster(m) => {
                cluster.masters[m].take().unwrap().crash();
                std::thread::sleep(Duration::from_millis(rng.between(500, 3000)));
                cluster.masters[m] = Some(cluster.spawn_master(m));
            }
            Self::FreezeMaster(m, hold) => {
                let master = cluster.masters[m].as_ref().unwrap();
                master.freeze();
                std::thread::sleep(hold);
                master.thaw();
            }
            Self::PartitionMaster(m, hold) => {
                cluster.cut_links(|from, to| from == m || to == m, hold);
            }
            Self::CutLink(from, to, hold) => {
                cluster.cut_links(|f, t| (f, t) == (from, to), hold);
            }
            Self::CutInto(m, hold) => cluster.cut_links(|_, to| to == m, hold),
            Self::CutOutOf(m, hold) => cluster.cut_links(|from, _| from == m, hold),
            Self::KillAgent(w) => {
                cluster.workers[w].take().unwrap().crash();
                std::thread::sleep(Duration::from_millis(rng.between(500, 3000)));
                cluster.workers[w] = Some(cluster.spawn_worker(w));
            }
            Self::FreezeAgent(w, hold) => {
                let worker = cluster.workers[w].as_ref().unwrap();
                worker.freeze();
                std::thread::sleep(hold);
                worker.thaw();
            }
            Self::Upgrade(process) => cluster.upgrade(process, rng),
        }
    }
}

/// The client operations of a run, as their clients saw them, timed from one start.
#[derive(Clone)]
struct History {
    start: Instant,
    operations: Arc<Mutex<Vec<Operation>>>,
}

impl History {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            operations: Arc::default(),
        }
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn record(&self, invoked: u64, returned: Option<u64>, kind: Kind) {
        self.operations.lock().unwrap().push(Operation {
            invoked,
            returned,
            kind,
        });
    }
}

/// Submits drivers steadily until told to stop: long supervised ones (at most `LONG`) and
/// short ones that finish, each under a name of its own. Returns the ids the masters
/// accepted; `history` gets every submission.
fn submit_steadily(masters: &str, stop: &AtomicBool, history: &History) -> Vec<String> {
    const LONG: usize = 4;
    let mut accepted = Vec::new();
    let mut long = 0;
    let mut turn = 0;
    while !stop.load(Ordering::SeqCst) {
        turn += 1;
        let supervised = turn % 2 == 0 && long < LONG;
        if let Some(id) = submit(masters, &format!("chaos-{turn}"), supervised, history) {
            if supervised {
                long += 1;
            }
            accepted.push(id);
        }
        std::thread::sleep(Duration::from_millis(1500));
    }
    accepted
}

/// Submits `count` short drivers at once, each from a client of its own. Returns the ids the
/// masters accepted; `history` gets every submission.
fn submit_burst(masters: &str, count: usize, history: &History) -> Vec<String> {
    let clients: Vec<_> = (0..count)
        .map(|n| {
            let (masters, history) = (masters.to_owned(), history.clone());
            std::thread::spawn(move || submit(&masters, &format!("burst-{n}"), false, &history))
        })
        .collect();
    clients
        .into_iter()
        .filter_map(|client| client.join().unwrap())
        .collect()
}

/// Submits a one-core driver named `name` (`supervised`: one that runs on, or else one that
/// ends within a second), recording it in `history`; its id if the masters accepted it.
fn submit(masters: &str, name: &str, supervised: bool, history: &History) -> Option<String> {
    let mut command = muster();
    command
        .args(["submit", "--name", name])
        .args(["--cores", "1", "--memory", "256"])
        .env("MUSTER_MASTERS", masters);
    if supervised {
        command.args(["--supervise", "--", "/bin/sleep", "1000"]);
    } else {
        command.args(["--", "/bin/sleep", "1"]);
    }
    let invoked = history.now();
    match command.output() {
        Ok(output) if output.status.success() => {
            let id = String::from_utf8_lossy(&output.stdout).trim().to_owned();
            history.record(invoked, Some(history.now()), Kind::Submit(Some(id.clone())));
            Some(id)
        }
        // It may have taken effect or not, under an id nobody was told.
        _ => {
            history.record(invoked, None, Kind::Submit(None));
            None
        }
    }
}

/// Reads the status steadily until told to stop, recording in `history` the submitted
/// drivers each read showed (a supervised driver relaunched under a new id keeps its name:
/// the first id of a name is the submission's). Notes in `newest_format_at` when (in
/// `history`'s time, plus one) a read first showed the newest log format.
fn read_steadily(
    masters: &str,
    stop: &AtomicBool,
    history: &History,
    newest_format_at: &AtomicU64,
) {
    while !stop.load(Ordering::SeqCst) {
        let invoked = history.now();
        let output = muster()
            .args(["status", "--json"])
            .env("MUSTER_MASTERS", masters)
            .output();
        let returned = history.now();
        let status: Option<Value> = output
            .ok()
            .filter(|output| output.status.success())
            .and_then(|output| serde_json::from_slice(&output.stdout).ok());
        if let Some(status) = status {
            if status["log_format"] == LogFormat::NEWEST.0 {
                let _ = newest_format_at.compare_exchange(
                    0,
                    returned + 1,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                );
            }
            let mut first_of_name: BTreeMap<&str, &str> = BTreeMap::new();
            for driver in status["drivers"].as_array().unwrap() {
                let (name, id) = (
                    driver["name"].as_str().unwrap(),
                    driver["id"].as_str().unwrap(),
                );
                let first = first_of_name.entry(name).or_insert(id);
                *first = (*first).min(id);
            }
            let ids = first_of_name.values().map(|id| id.to_string()).collect();
            history.record(invoked, Some(returned), Kind::Read(ids));
        }
        std::thread::sleep(Duration::from_millis(700));
    }
}

/// Samples `/proc` every second until told to stop: what ran twice at once, if anything.
fn watch_for_copies(dirs: &[PathBuf], stop: &AtomicBool) -> Vec<String> {
    let mut copies = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        for (work, pids) in live_work(dirs) {
            if pids.len() > 1 {
                copies.push(format!("{work} ran as {pids:?} at once"));
            }
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    copies
}

/// Group leaders (the wrappers the workers start) running with a working directory inside
/// one of `dirs`.
fn live_processes(dirs: &[PathBuf]) -> BTreeSet<u64> {
    live_work(dirs).into_values().flatten().collect()
}

/// The group leaders running with a working directory inside one of `dirs`, by the work
/// they run: that directory's path below its work dir (`DRIVER_ID`, `APP_ID/EXECUTOR_ID`).
fn live_work(dirs: &[PathBuf]) -> BTreeMap<String, Vec<u64>> {
    let dirs: Vec<PathBuf> = dirs
        .iter()
        .filter_map(|d| std::fs::canonicalize(d).ok())
        .collect();
    let mut work: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        let Ok(cwd) = std::fs::read_link(entry.path().join("cwd")) else {
            continue;
        };
        let Some(below) = dirs.iter().find_map(|d| {
            cwd.strip_prefix(d)
                .ok()
                .filter(|p| !p.as_os_str().is_empty())
        }) else {
            continue;
        };
        let group = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|stat| {
                let (_, rest) = stat.rsplit_once(')')?;
                rest.split_whitespace().nth(2)?.parse::<u64>().ok()
            });
        if group == Some(pid) && alive(pid) {
            work.entry(below.display().to_string())
                .or_default()
                .push(pid);
        }
    }
    work
}

/// What the audit checks, as one list of problems (empty: all good).
fn audit(cluster: &Cluster, accepted: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(status) = cluster.status(&cluster.all(), false) else {
        return vec!["no status".into()];
    };
    if status["recovery_state"] != "ALIVE" {
        problems.push(format!("leader is {}", status["recovery_state"]));
    }
    let workers = status["workers"].as_array().unwrap();
    let alive_workers = workers.iter().filter(|w| w["state"] == "ALIVE").count();
    if alive_workers != WORKERS || workers.len() != WORKERS {
        problems.push(format!(
            "{alive_workers} of {} workers ALIVE",
            workers.len()
        ));
    }
    let drivers = status["drivers"].as_array().unwrap();
    // The masters retain every ended driver (see `Cluster::start`), so none may be missing.
    for id in accepted {
        let copies = drivers.iter().filter(|d| d["id"] == id.as_str()).count();
        if copies != 1 {
            problems.push(format!("accepted driver {id} appears {copies} times"));
        }
    }
    let mut expected = BTreeSet::new();
    for d in drivers.iter().filter(|d| d["state"] == "RUNNING") {
        match d["pid"].as_u64() {
            Some(pid) if alive(pid) => {
                expected.insert(pid);
            }
            _ => problems.push(format!("RUNNING driver {} has no live process", d["id"])),
        }
    }
    for app in status["apps"].as_array().unwrap() {
        for e in app["executors"].as_array().unwrap() {
            match e["pid"].as_u64() {
                Some(pid) if e["state"] == "RUNNING" && alive(pid) => {
                    expected.insert(pid);
                }
                _ => problems.push(format!(
                    "executor {}/{} is {} without a live process",
                    app["id"], e["id"], e["state"]
                )),
            }
        }
    }
    let dirs: Vec<PathBuf> = (0..WORKERS).map(|w| cluster.work_dir(w)).collect();
    let live = live_processes(&dirs);
    for pid in live.difference(&expected) {
        problems.push(format!(
            "process {pid} runs but the log has nothing running as it"
        ));
    }
    // Every replica has applied the same state.
    let views: Vec<Option<Value>> = cluster
        .addrs
        .iter()
        .map(|addr| {
            let status = cluster.status(addr, true)?;
            let mut view =
                serde_json::json!([status["workers"], status["apps"], status["drivers"]]);
            replicated_only(&mut view);
            Some(view)
        })
        .collect();
    if views.iter().any(|v| v != &views[0]) {
        problems.push("the replicas' states differ".into());
    }
    problems
}

fn wait_until_sound(cluster: &Cluster, accepted: &[String], seed: u64, within: Duration) {
    let start = Instant::now();
    loop {
        let problems = audit(cluster, accepted);
        if problems.is_empty() {
            return;
        }
        if start.elapsed() > within {
            panic!(
                "chaos audit failed (replay with MUSTER_CHAOS_SEED={seed}; logs with \
                 MUSTER_TEST_KEEP=1):\n  {}",
                problems.join("\n  ")
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// One chaos run at a time: each keeps both cores busy.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[test]
fn faults_of_every_kind_leave_every_piece_of_work_running_exactly_once() {
    let _serial = serial();
    chaos(false);
}

#[test]
fn faults_of_every_kind_during_an_upgrade_leave_every_piece_of_work_running_exactly_once() {
    let _serial = serial();
    chaos(true);
}

/// The chaos run, `during_an_upgrade` or not.
fn chaos(during_an_upgrade: bool) {
    let secs: u64 = std::env::var("MUSTER_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let seed = crate::support::seed("MUSTER_CHAOS_SEED");
    let mut rng = Rng(seed);
    let upgrade = during_an_upgrade.then(|| Upgrade::mixed(&mut rng));
    if let Some(upgrade) = &upgrade {
        eprintln!(
            "chaos: {secs} s of faults during an upgrade; on the previous release: masters \
             {:?}, agents {:?}",
            upgrade.old_masters, upgrade.old_agents
        );
    } else {
        eprintln!("chaos: {secs} s of faults");
    }
    let mut cluster = Cluster::start(upgrade);
    if std::env::var_os("MUSTER_TEST_KEEP").is_some() {
        eprintln!("chaos: data in {}", cluster.dir.path().display());
    }
    // An attached application, a gang of three executors, all through the run; another, a
    // gang of five, comes halfway through, when drivers hold part of the room it needs.
    // During an upgrade, neither is a gang: the previous release's log cannot hold one.
    let gang = |cluster: &Cluster, name: &str, executors: &str| {
        let mut command = muster();
        command.args(["app", "run", "--name", name, "--cores-max", executors]);
        if !during_an_upgrade {
            command.args(["--min-executors", executors]);
        }
        Process(
            command
                .args(["--executor-cores", "1"])
                .args(["--executor-memory", "256", "--", "/bin/sleep", "1000"])
                .env("MUSTER_MASTERS", cluster.all())
                .stdout(Stdio::null())
                .stderr(cluster.log(name))
                .spawn()
                .expect("muster app run starts"),
        )
    };
    let mut app = gang(&cluster, "first-gang", "3");
    let mut late_gang = None;
    let mut burst = None;
    let stop = Arc::new(AtomicBool::new(false));
    let history = History::new();
    let submitter = {
        let (masters, stop, history) = (cluster.all(), Arc::clone(&stop), history.clone());
        std::thread::spawn(move || submit_steadily(&masters, &stop, &history))
    };
    let newest_format_at = Arc::new(AtomicU64::new(0));
    let reader = {
        let (masters, stop, history) = (cluster.all(), Arc::clone(&stop), history.clone());
        let newest_format_at = Arc::clone(&newest_format_at);
        std::thread::spawn(move || read_steadily(&masters, &stop, &history, &newest_format_at))
    };
    let watcher = {
        let dirs: Vec<PathBuf> = (0..WORKERS).map(|w| cluster.work_dir(w)).collect();
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || watch_for_copies(&dirs, &stop))
    };
    // Faults, one at a time, until the time is up; during an upgrade, every master is
    // upgraded from 40% of the time on, and the faults go on until the log format is seen
    // raised (a minute more at most).
    let longest = (secs / 6).clamp(3, 20);
    let started = Instant::now();
    let until = started + Duration::from_secs(secs);
    let masters_due = started + Duration::from_secs(secs * 2 / 5);
    let raise_awaited = || {
        during_an_upgrade
            && newest_format_at.load(Ordering::SeqCst) == 0
            && Instant::now() < until + Duration::from_secs(60)
    };
    let mut injected: BTreeMap<&str, usize> = BTreeMap::new();
    while Instant::now() < until || raise_awaited() {
        std::thread::sleep(Duration::from_millis(rng.between(1000, 4000)));
        if late_gang.is_none()
            && until.saturating_duration_since(Instant::now()).as_secs() < secs / 2
        {
            late_gang = Some(gang(&cluster, "late-gang", "5"));
            let (masters, history) = (cluster.all(), history.clone());
            burst = Some(std::thread::spawn(move || {
                submit_burst(&masters, BURST, &history)
            }));
        }
        let fault = Fault::pick(&mut rng, longest, &cluster, Instant::now() >= masters_due);
        eprintln!("chaos: {fault:?}");
        fault.inject(&mut cluster, &mut rng);
        let kind = match fault {
            Fault::KillMaster(_) => "master killed",
            Fault::FreezeMaster(..) => "master frozen",
            Fault::PartitionMaster(..) => "master partitioned",
            Fault::CutLink(..) => "link cut one way",
            Fault::CutInto(..) => "master unreachable one way",
            Fault::CutOutOf(..) => "master reaching nobody",
            Fault::KillAgent(_) => "agent killed",
            Fault::FreezeAgent(..) => "agent frozen",
            Fault::Upgrade(Upgrading::Master(_)) => "master upgraded",
            Fault::Upgrade(Upgrading::Agent(_)) => "agent upgraded",
        };
        *injected.entry(kind).or_default() += 1;
    }
    let faults_ended = history.now();
    stop.store(true, Ordering::SeqCst);
    // A run too short to reach halfway between two faults still has them come.
    let mut late_gang = late_gang.unwrap_or_else(|| gang(&cluster, "late-gang", "5"));
    let mut accepted = submitter.join().unwrap();
    accepted.extend(match burst {
        Some(burst) => burst.join().unwrap(),
        None => submit_burst(&cluster.all(), BURST, &history),
    });
    reader.join().unwrap();
    let copies = watcher.join().unwrap();
    let operations = history.operations.lock().unwrap().clone();
    let reads = operations
        .iter()
        .filter(|op| matches!(op.kind, Kind::Read(_)))
        .count();
    let links: u64 = cluster.proxies.values().map(Proxy::opened).sum();
    eprintln!(
        "chaos: faults injected {injected:?}; {} drivers accepted, {} submissions and {reads} reads recorded; {links} connections between masters",
        accepted.len(),
        operations.len() - reads
    );
    assert!(!accepted.is_empty(), "no submission was ever accepted");
    if let Some(upgrade) = &cluster.upgrade {
        let raised_at = newest_format_at.load(Ordering::SeqCst);
        assert!(
            raised_at != 0 && raised_at - 1 <= faults_ended,
            "the log format was not raised during the faults (replay with \
             MUSTER_CHAOS_SEED={seed}); on the previous release still: masters {:?}",
            upgrade.old_masters
        );
        eprintln!(
            "chaos: the log format was raised by {:.1} s, the faults ended at {:.1} s",
            (raised_at - 1) as f64 / 1e9,
            faults_ended as f64 / 1e9
        );
    }
    assert!(
        copies.is_empty(),
        "work ran twice at once (replay with MUSTER_CHAOS_SEED={seed}):\n  {}",
        copies.join("\n  ")
    );
    if let Err(problem) = linearizable::check(&operations) {
        panic!("the client history (replay with MUSTER_CHAOS_SEED={seed}): {problem}");
    }
    wait_until_sound(&cluster, &accepted, seed, Duration::from_secs(60));
    // Both gangs hold all they asked for (an executor lost with its worker is replaced).
    let start = Instant::now();
    loop {
        let status = cluster.status(&cluster.all(), false);
        let held = |name: &str| {
            let apps = status
                .as_ref()
                .map(|s| s["apps"].clone())
                .unwrap_or_default();
            apps.as_array()
                .and_then(|apps| apps.iter().find(|a| a["name"] == name).cloned())
                .map(|a| a["executors"].as_array().map_or(0, Vec::len))
        };
        if held("first-gang") == Some(3) && held("late-gang") == Some(5) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the gangs hold {:?} and {:?} executors (replay with MUSTER_CHAOS_SEED={seed})",
            held("first-gang"),
            held("late-gang")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    for (client, name) in [(&mut app, "first-gang"), (&mut late_gang, "late-gang")] {
        assert!(
            client.0.try_wait().unwrap().is_none(),
            "the client of {name} gave up"
        );
    }
}
