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
//! `MUSTER_CHAOS_SECS` sets how long faults are injected (60 by default); a failure prints
//! the seed, and `MUSTER_CHAOS_SEED` replays it. `MUSTER_CHAOS_FENCE=1` runs the workers
//! with `--fence`.

// Shared by every end-to-end test binary; each uses part of it.
#[allow(dead_code)]
#[path = "../support.rs"]
mod support;

mod linearizable;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::linearizable::{Kind, Operation};
use crate::support::{Process, Proxy, Rng, alive, master_addresses, muster, replicated_only};

struct Cluster {
    dir: tempfile::TempDir,
    addrs: Vec<String>,
    peers: String,
    /// `proxies[(from, to)]`: how master `from` reaches master `to` (0-based).
    proxies: BTreeMap<(usize, usize), Proxy>,
    masters: Vec<Option<Process>>,
    workers: Vec<Option<Process>>,
}

const MASTERS: usize = 3;
const WORKERS: usize = 3;
/// Submissions sent at once halfway through.
const BURST: usize = 16;

impl Cluster {
    fn start() -> Self {
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
        let mut cluster = Self {
            dir,
            addrs,
            peers,
            proxies,
            masters: Vec::new(),
            workers: Vec::new(),
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
        Process(
            muster()
                .args(["master", "--id", &(master + 1).to_string()])
                .args(["--listen", &self.addrs[master], "--peers", &self.peers])
                .args(["--peer-routes", &routes, "--worker-timeout", "6"])
                .arg("--config")
                .arg(self.dir.path().join("master.json"))
                .arg("--data-dir")
                .arg(self.dir.path().join(format!("master-{}", master + 1)))
                .stdout(Stdio::null())
                .stderr(self.log(&format!("master-{}", master + 1)))
                .spawn()
                .expect("muster master starts"),
        )
    }

    fn work_dir(&self, worker: usize) -> PathBuf {
        self.dir.path().join(format!("w{}", worker + 1))
    }

    fn spawn_worker(&self, worker: usize) -> Process {
        let name = format!("w{}", worker + 1);
        let mut command = muster();
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
}

impl Fault {
    fn pick(rng: &mut Rng, longest: u64) -> Self {
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
/// the first id of a name is the submission's).
fn read_steadily(masters: &str, stop: &AtomicBool, history: &History) {
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

#[test]
fn faults_of_every_kind_leave_every_piece_of_work_running_exactly_once() {
    let secs: u64 = std::env::var("MUSTER_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let seed = crate::support::seed("MUSTER_CHAOS_SEED");
    eprintln!("chaos: {secs} s of faults");
    let mut rng = Rng(seed);
    let mut cluster = Cluster::start();
    if std::env::var_os("MUSTER_TEST_KEEP").is_some() {
        eprintln!("chaos: data in {}", cluster.dir.path().display());
    }
    // An attached application, a gang of three executors, all through the run; another, a
    // gang of five, comes halfway through, when drivers hold part of the room it needs.
    let gang = |cluster: &Cluster, name: &str, executors: &str| {
        Process(
            muster()
                .args(["app", "run", "--name", name, "--cores-max", executors])
                .args(["--min-executors", executors, "--executor-cores", "1"])
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
    let reader = {
        let (masters, stop, history) = (cluster.all(), Arc::clone(&stop), history.clone());
        std::thread::spawn(move || read_steadily(&masters, &stop, &history))
    };
    let watcher = {
        let dirs: Vec<PathBuf> = (0..WORKERS).map(|w| cluster.work_dir(w)).collect();
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || watch_for_copies(&dirs, &stop))
    };
    // Faults, one at a time, until the time is up.
    let longest = (secs / 6).clamp(3, 20);
    let until = Instant::now() + Duration::from_secs(secs);
    let mut injected: BTreeMap<&str, usize> = BTreeMap::new();
    while Instant::now() < until {
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
        let fault = Fault::pick(&mut rng, longest);
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
        };
        *injected.entry(kind).or_default() += 1;
    }
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
