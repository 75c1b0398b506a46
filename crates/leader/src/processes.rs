//! The processes workers run for the log, as this leader has heard of them: launches sent and
//! not yet confirmed by a RUNNING report (sent again after the launch timeout, given up
//! after [`LAUNCH_ATTEMPTS`]), the process id of each that runs, what each uses, and the
//! restarts of supervised drivers that failed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use muster_core::ids::{AppId, ExecutorId, WorkerId};
use muster_core::resources::Usage;
use muster_state::ClusterState;
use muster_state::model::ExecutorState;

use muster_core::restarts::Restarts;

use super::protocol::ProcessKey;

/// How many times a launch is sent before it is given up as lost.
pub const LAUNCH_ATTEMPTS: u32 = 3;

/// A launch sent and not yet confirmed by a RUNNING report.
#[derive(Clone, Debug)]
struct Launch {
    worker: WorkerId,
    sent: Instant,
    attempts: u32,
}

/// What to do about a launch nobody confirmed within the launch timeout.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Unconfirmed {
    /// Send it to its worker again.
    SendAgain(WorkerId, ProcessKey),
    /// The executor never started: it is lost.
    GiveUp(AppId, ExecutorId),
}

/// Launches in flight, and the processes known to run.
#[derive(Debug, Default)]
pub(super) struct Processes {
    launches: BTreeMap<ProcessKey, Launch>,
    pids: BTreeMap<ProcessKey, u32>,
    /// What each worker's running processes use, as its last heartbeat measured it.
    usage: BTreeMap<WorkerId, BTreeMap<ProcessKey, Usage>>,
    restarts: BTreeMap<ProcessKey, Restarts<Instant>>,
}

impl Processes {
    /// The restarts a worker reported for `process`, a supervised driver.
    pub(super) fn restarts(&self, process: &ProcessKey) -> Option<Restarts<Instant>> {
        self.restarts.get(process).copied()
    }

    /// `process` was started again on its worker, as reported at `now`; while it waits to
    /// start again, no process of it runs.
    pub(super) fn restarted(
        &mut self,
        now: Instant,
        process: ProcessKey,
        restarts: Restarts<Duration>,
    ) {
        if restarts.starts_again.is_some() {
            self.pids.remove(&process);
        }
        self.restarts.insert(process, restarts.heard_at(now));
    }
    /// `process` was not started again on its worker, as its registration says.
    pub(super) fn not_restarted(&mut self, process: &ProcessKey) {
        self.restarts.remove(process);
    }

    /// The process id a worker reported for `process`.
    pub(super) fn pid(&self, process: &ProcessKey) -> Option<u32> {
        self.pids.get(process).copied()
    }

    /// What `process` on `worker` uses, as the worker last measured it, while it runs.
    pub(super) fn usage(&self, worker: &WorkerId, process: &ProcessKey) -> Option<Usage> {
        if !self.pids.contains_key(process) {
            return None;
        }
        self.usage.get(worker)?.get(process).copied()
    }

    /// `worker`'s heartbeat measured `usage`: it replaces what the one before measured, for
    /// the processes this leader knows run there.
    pub(super) fn measured(
        &mut self,
        state: &ClusterState,
        worker: WorkerId,
        usage: Vec<(ProcessKey, Usage)>,
    ) {
        let measured: BTreeMap<ProcessKey, Usage> = usage
            .into_iter()
            .filter(|(process, _)| {
                self.pids.contains_key(process) && placed_on(state, process) == Some(&worker)
            })
            .collect();
        if measured.is_empty() {
            self.usage.remove(&worker);
        } else {
            self.usage.insert(worker, measured);
        }
    }

    /// `process` is sent to `worker` at `now` (again, if it was before).
    pub(super) fn launching(&mut self, now: Instant, worker: &WorkerId, process: ProcessKey) {
        let attempts = self.launches.get(&process).map_or(0, |l| l.attempts) + 1;
        let launch = Launch {
            worker: worker.clone(),
            sent: now,
            attempts,
        };
        self.launches.insert(process, launch);
    }

    /// `process` runs as `pid` (0 when its worker did not say).
    pub(super) fn running(&mut self, process: ProcessKey, pid: u32) {
        self.launches.remove(&process);
        if pid != 0 {
            self.pids.insert(process, pid);
        }
    }

    /// `process` ended.
    pub(super) fn ended(&mut self, process: &ProcessKey) {
        self.pids.remove(process);
        self.launches.remove(process);
        self.restarts.remove(process);
    }

    /// Launches unconfirmed for `timeout` at `now`, and what to do about each. A launch the
    /// log no longer expects is dropped, and so is a driver's after its last attempt: it
    /// keeps its place until its worker reports or is lost.
    pub(super) fn unconfirmed(
        &mut self,
        now: Instant,
        state: &ClusterState,
        timeout: Duration,
    ) -> Vec<Unconfirmed> {
        let due: Vec<(ProcessKey, WorkerId, u32)> = self
            .launches
            .iter()
            .filter(|(_, l)| now.saturating_duration_since(l.sent) >= timeout)
            .map(|(p, l)| (p.clone(), l.worker.clone(), l.attempts))
            .collect();
        let mut decided = Vec::new();
        for (process, worker, attempts) in due {
            let still_expected = match &process {
                ProcessKey::Executor(app, executor) => state
                    .apps()
                    .get(app)
                    .and_then(|a| a.executors.get(executor))
                    .is_some_and(|e| e.state == ExecutorState::Launching),
                ProcessKey::Driver(driver) => state
                    .drivers()
                    .get(driver)
                    .is_some_and(|d| d.worker.as_ref() == Some(&worker)),
            };
            if still_expected && attempts < LAUNCH_ATTEMPTS {
                decided.push(Unconfirmed::SendAgain(worker, process));
                continue;
            }
            self.launches.remove(&process);
            if let (true, ProcessKey::Executor(app, executor)) = (still_expected, process) {
                decided.push(Unconfirmed::GiveUp(app, executor));
            }
        }
        decided
    }
}

/// The worker the log has `process` running on, if any.
pub(super) fn placed_on<'s>(state: &'s ClusterState, process: &ProcessKey) -> Option<&'s WorkerId> {
    match process {
        ProcessKey::Executor(app, id) => Some(&state.apps().get(app)?.executors.get(id)?.worker),
        ProcessKey::Driver(id) => state.drivers().get(id)?.worker.as_ref(),
    }
}
