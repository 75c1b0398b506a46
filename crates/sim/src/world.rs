//! The simulated world around the leader: workers that launch, stop and lose processes and
//! report it, applications whose tasks run on the executors they are given, and the clients
//! that submit them. Pure bookkeeping: [`crate::engine`] decides when things happen.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use muster_core::ids::{DriverId, ExecutorId, WorkerId};
use muster_core::restarts::Backoff;
use muster_core::restarts::Restarts;
use muster_leader::{LinkId, ProcessKey, Report, RunningProcess, Update};
use muster_state::commands::RegisterWorker;

/// A simulated worker agent and its machine.
pub struct Worker {
    /// What it registers as.
    pub registration: RegisterWorker,
    /// Whether its machine runs.
    pub up: bool,
    /// Its stream to the leader, when it has one.
    pub link: Option<LinkId>,
    /// What it runs, launching or started.
    pub processes: BTreeMap<ProcessKey, Process>,
    /// Reports the leader has not acknowledged, by number.
    pub unacked: BTreeMap<u64, Report>,
    /// How many times its machine failed.
    pub failures: u64,
    next_seq: u64,
}

/// A process a worker runs.
#[derive(Clone, Copy, Debug)]
pub struct Process {
    /// Its process id.
    pub pid: u32,
    /// Distinguishes it from an earlier process of the same key on the same worker.
    pub serial: u64,
    /// Whether it was told to stop.
    pub stopping: bool,
    /// The cores and memory (MB) it was placed with, which it holds until it ends.
    pub holds: (u32, u64),
    /// When its current run started (ms).
    pub started_ms: u64,
    /// How many times a supervised driver was started again after a failed run.
    pub restarts: u32,
    /// While a supervised driver waits to start again, when it does (ms).
    pub starts_again_ms: Option<u64>,
    /// The wait before its next restart.
    pub backoff: Backoff,
}

impl Process {
    /// A supervised driver's restarts as its worker tells the leader at `now_ms`, once it
    /// was started again: every failed run of a simulated driver exits 1.
    pub fn reported_restarts(&self, now_ms: u64) -> Option<Restarts<Duration>> {
        (self.restarts > 0).then(|| Restarts {
            count: self.restarts,
            last_exit_code: Some(1),
            starts_again: self
                .starts_again_ms
                .map(|at| Duration::from_millis(at.saturating_sub(now_ms))),
        })
    }
}

impl Worker {
    /// A worker that is up and not connected.
    pub fn new(registration: RegisterWorker) -> Self {
        Self {
            registration,
            up: true,
            link: None,
            processes: BTreeMap::new(),
            unacked: BTreeMap::new(),
            failures: 0,
            next_seq: 1,
        }
    }

    /// Numbers `update` and keeps it until it is acknowledged.
    pub fn report(&mut self, update: Update) -> Report {
        let report = Report {
            seq: self.next_seq,
            update,
        };
        self.next_seq += 1;
        self.unacked.insert(report.seq, report.clone());
        report
    }

    /// Its process of `key` launched as `serial`, unless it was told to stop.
    pub fn live_process(&mut self, key: &ProcessKey, serial: u64) -> Option<&mut Process> {
        self.processes
            .get_mut(key)
            .filter(|p| p.serial == serial && !p.stopping)
    }

    /// What it runs at `now_ms`, as its registration says.
    pub fn running(&self, now_ms: u64) -> BTreeMap<ProcessKey, RunningProcess> {
        self.processes
            .iter()
            .map(|(key, process)| {
                let running = RunningProcess {
                    pid: process.pid,
                    restarts: process.reported_restarts(now_ms),
                };
                (key.clone(), running)
            })
            .collect()
    }

    /// Its machine failed: everything it ran is gone, unreported.
    pub fn fail(&mut self) -> Vec<ProcessKey> {
        self.up = false;
        self.failures += 1;
        self.link = None;
        self.unacked.clear();
        std::mem::take(&mut self.processes).into_keys().collect()
    }
}

/// A simulated application: its client, and the tasks it runs on its executors.
pub struct App {
    /// Its trace entry.
    pub entry: usize,
    /// Its client's stream, when attached.
    pub link: Option<LinkId>,
    /// How long a task takes, in ms.
    pub task_ms: u64,
    /// Tasks not running and not done.
    pub tasks_left: u32,
    /// The executors it runs tasks on.
    pub executors: BTreeMap<ExecutorId, Slots>,
    /// Every task has run; its client asked to finish.
    pub done: bool,
    /// The driver that registered it, in cluster mode: its worker, id and run (serial),
    /// which ends once the application has.
    pub driver: Option<(WorkerId, DriverId, u64)>,
}

/// The tasks one executor runs.
#[derive(Debug)]
pub struct Slots {
    /// Distinguishes its task ends from those of an earlier executor.
    pub serial: u64,
    /// How many tasks it runs at once: its cores.
    pub cores: u32,
    /// When each running task started, oldest first (tasks of an app take equally long).
    pub running: VecDeque<u64>,
    /// It was stopped for prior work.
    pub preempted: bool,
}

impl Slots {
    /// Starts one of the `waiting` tasks at `now` if a core is free: whether it did.
    fn start(&mut self, waiting: &mut u32, now: u64) -> bool {
        if *waiting == 0 || self.running.len() >= self.cores as usize {
            return false;
        }
        self.running.push_back(now);
        *waiting -= 1;
        true
    }
}

/// Work lost when an executor ended under its tasks.
#[derive(Debug, Default, Clone, Copy)]
pub struct Lost {
    /// Tasks that must run again.
    pub tasks: u32,
    /// Core time they had run, in ms.
    pub core_ms: u64,
}

impl App {
    /// Removes executor `id`; its running tasks wait to run again.
    pub fn remove(&mut self, id: ExecutorId, now: u64) -> (Lost, bool) {
        let Some(slots) = self.executors.remove(&id) else {
            return (Lost::default(), false);
        };
        let lost = Lost {
            tasks: u32::try_from(slots.running.len()).expect("a few tasks"),
            core_ms: slots.running.iter().map(|start| now - start).sum(),
        };
        self.tasks_left += lost.tasks;
        (lost, slots.preempted)
    }

    /// Starts tasks on free cores at `now`: the executors and serials they run on, one per
    /// task.
    pub fn fill(&mut self, now: u64) -> Vec<(ExecutorId, u64)> {
        let mut started = Vec::new();
        for (id, slots) in &mut self.executors {
            while slots.start(&mut self.tasks_left, now) {
                started.push((*id, slots.serial));
            }
        }
        started
    }

    /// A task on executor `id` (of `serial`) ended; whether it was still running there.
    pub fn task_done(&mut self, id: ExecutorId, serial: u64) -> bool {
        match self.executors.get_mut(&id) {
            Some(slots) if slots.serial == serial => slots.running.pop_front().is_some(),
            _ => false,
        }
    }

    /// Starts a waiting task at `now` on the core a task of executor `id` just freed: its
    /// serial, if a task waited. The same as [`App::fill`] then: every other core is busy
    /// while tasks wait, as each fill leaves them.
    pub fn refill(&mut self, id: ExecutorId, now: u64) -> Option<u64> {
        let slots = self.executors.get_mut(&id)?;
        slots
            .start(&mut self.tasks_left, now)
            .then_some(slots.serial)
    }

    /// Whether every task has run.
    pub fn all_run(&self) -> bool {
        self.tasks_left == 0 && self.executors.values().all(|s| s.running.is_empty())
    }
}

/// Which trace entry a simulated process runs: drivers carry it in their command line.
pub fn driver_entry(args: &[String]) -> Option<usize> {
    args.first()?.parse().ok()
}
