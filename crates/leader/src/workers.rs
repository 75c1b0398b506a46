//! The leader's side of a worker: which link is its current one, its registration and what
//! it reports, proposed to the log in order, and the reconciliation of what it runs with what
//! the log expects once its registration is in the log (see the crate's doc).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use muster_core::ids::WorkerId;
use muster_core::model::WorkerState;
use muster_state::commands::{DriverStateChanged, ExecutorStateChanged};
use muster_state::model::{DriverState, ExecutorState};
use muster_state::version::LogFormat;
use muster_state::{ClusterState, Op};

use crate::links::{Agent, Hearing, Peer};
use crate::processes::placed_on;
use crate::protocol::{
    Close, LinkId, ProcessKey, Registration, RunningProcess, ToApp, ToWorker, Update,
};
use crate::{Leader, PendingReport, Purpose};

impl Leader {
    /// The worker at the other end of `link`, heard from at `now`, if `link` is its current
    /// stream and the log does not count it as lost. A superseded link is closed; a worker
    /// this leader no longer keeps, or that the log has as DEAD, is told to register again.
    pub(super) fn current_worker(
        &mut self,
        now: Instant,
        link: LinkId,
        state: &ClusterState,
    ) -> Option<WorkerId> {
        let Some(Peer::Worker(worker)) = self.links.peer(link).cloned() else {
            return None;
        };
        match self.links.heard_on(&worker, link, now) {
            Hearing::Unknown => {
                self.close(link, Close::Reregister);
                None
            }
            Hearing::Superseded => {
                self.close(link, Close::Superseded);
                None
            }
            Hearing::Current { registered } => {
                let dead = registered
                    && state
                        .workers()
                        .get(&worker)
                        .is_some_and(|w| w.state == WorkerState::Dead);
                if dead {
                    self.links.forget_worker(&worker);
                    self.close(link, Close::Reregister);
                    return None;
                }
                Some(worker)
            }
        }
    }

    pub(super) fn worker_attached(
        &mut self,
        now: Instant,
        state: &ClusterState,
        link: LinkId,
        registration: Registration,
    ) {
        let worker = registration.worker.id.clone();
        // An impostor (or a changed worker) must not displace the worker the log has ALIVE:
        // refused before anything of the live one is touched.
        if let Some(conflict) = registration.worker.conflict(state, &registration.addresses) {
            self.close(link, Close::Refused(conflict.to_string()));
            return;
        }
        if let Some(old) = self.links.worker_link(&worker) {
            self.close(old, Close::Superseded);
        }
        self.links.attach_worker(
            link,
            worker.clone(),
            Agent {
                build: registration.build,
                shuffle_service: registration.shuffle_service,
                spark_home: registration.spark_home,
            },
            now,
        );
        // Reports first: what ended during the failover is in the log before reconciliation.
        for report in registration.reports {
            self.report(now, state, link, &worker, Some(report.seq), report.update);
        }
        self.propose(
            registration.worker.op(registration.addresses),
            Purpose::Register {
                link,
                worker,
                running: registration.running,
            },
        );
    }

    /// Writes one process change that `worker` reported on `link` to the log, or settles it
    /// without the log; either way the worker hears that report `seq` is done with.
    pub(super) fn report(
        &mut self,
        now: Instant,
        state: &ClusterState,
        link: LinkId,
        worker: &WorkerId,
        seq: Option<u64>,
        update: Update,
    ) {
        let process = update.process();
        let started = update.started();
        let Some(op) = self.report_op(now, state, link, worker, update) else {
            if let Some(seq) = seq {
                self.send(link, ToWorker::Acknowledged(vec![seq]));
            }
            return;
        };
        let report = PendingReport {
            link,
            worker: worker.clone(),
            seq,
            process,
            started,
        };
        self.propose(op, Purpose::Report(report));
    }

    /// The entry a report needs, if any. A driver's start needs none (placement made it
    /// RUNNING already); a start of a process the log does not place on that worker is
    /// stopped, and only the worker the log places a process on speaks for it, or, for its
    /// end, the worker it was stopped on (which says how it exited).
    pub(super) fn report_op(
        &mut self,
        now: Instant,
        state: &ClusterState,
        link: LinkId,
        worker: &WorkerId,
        update: Update,
    ) -> Option<Op> {
        let process = update.process();
        // A stopped executor's end says how it exited, when it says.
        let says_how = matches!(
            &update,
            Update::Executor {
                exit_code: Some(_),
                ..
            }
        );
        let stopped_there = match &process {
            ProcessKey::Executor(app, id) => says_how && state.awaits_exit_code(app, *id, worker),
            ProcessKey::Driver(_) => false,
        } || state
            .stopping_on(worker)
            .any(|stopped| ProcessKey::from(stopped) == process);
        let speaks_for_it =
            placed_on(state, &process) == Some(worker) || (!update.started() && stopped_there);
        if !speaks_for_it {
            if update.started() {
                self.send(link, process.kill());
            }
            return None;
        }
        match update {
            Update::Driver {
                state: DriverState::Running,
                pid,
                restarts,
                ..
            } => {
                self.processes.running(process.clone(), pid);
                if let Some(restarts) = restarts {
                    self.processes.restarted(now, process, restarts);
                }
                None
            }
            Update::Driver {
                driver,
                state,
                exit_code,
                ..
            } => Some(Op::DriverStateChanged(DriverStateChanged {
                driver,
                state,
                exit_code,
            })),
            Update::Executor {
                app,
                executor,
                state,
                exit_code,
                pid,
            } => {
                if state == ExecutorState::Running {
                    self.processes.running(process, pid);
                }
                Some(Op::ExecutorStateChanged(ExecutorStateChanged {
                    app,
                    executor,
                    state,
                    exit_code,
                }))
            }
        }
    }

    /// Compares what a registered worker runs with what the log expects on it.
    pub(super) fn reconcile(
        &mut self,
        now: Instant,
        state: &ClusterState,
        link: LinkId,
        worker: &WorkerId,
        running: &BTreeMap<ProcessKey, RunningProcess>,
    ) {
        if !self.links.registered(worker, link) {
            // Gone, or a newer stream registered since; that one reconciles.
            return;
        }
        self.recovery.worker_back(worker);
        // What the log has on the worker, from the worker's own index of it: a registration
        // storm after a failover costs what runs on each worker, not the whole state each.
        let mut expected: BTreeMap<ProcessKey, Option<ExecutorState>> = BTreeMap::new();
        if let Some(on) = state.workers().get(worker) {
            for (app, id) in &on.executors {
                let executor = state.apps().get(app).and_then(|a| a.executors.get(id));
                if let Some(executor) = executor.filter(|e| &e.worker == worker) {
                    expected.insert(ProcessKey::Executor(app.clone(), *id), Some(executor.state));
                }
            }
            for driver in &on.drivers {
                if state
                    .drivers()
                    .get(driver)
                    .is_some_and(|d| d.worker.as_ref() == Some(worker))
                {
                    expected.insert(ProcessKey::Driver(driver.clone()), None);
                }
            }
        }
        for (process, runs) in running {
            match expected.get(process) {
                None => self.send(link, process.kill()),
                Some(executor_state) => {
                    self.processes.running(process.clone(), runs.pid);
                    // The worker's word is the whole story: one that says of no restarts
                    // (an agent that never started it again) leaves none of an earlier one.
                    match runs.restarts {
                        Some(restarts) => self.processes.restarted(now, process.clone(), restarts),
                        None => self.processes.not_restarted(process),
                    }
                    if let (ProcessKey::Executor(app, executor), Some(ExecutorState::Launching)) =
                        (process, executor_state)
                    {
                        let update = Update::Executor {
                            app: app.clone(),
                            executor: *executor,
                            state: ExecutorState::Running,
                            exit_code: None,
                            pid: runs.pid,
                        };
                        self.report(now, state, link, worker, None, update);
                    }
                }
            }
        }
        // A process stopped here that no longer runs ended while nobody heard: what it kept
        // is free. One that still runs is killed above, and its end reported.
        let ended_unheard: Vec<ProcessKey> = state
            .stopping_on(worker)
            .map(ProcessKey::from)
            .filter(|process| !running.contains_key(process))
            .collect();
        for process in ended_unheard {
            self.ended_unheard(link, worker, process, ExecutorState::Killed);
        }
        for (process, executor_state) in expected {
            if running.contains_key(&process) {
                continue;
            }
            match (&process, executor_state) {
                // Never started here (the worker's reports are in the log already, so it did
                // not end either): start it now.
                (ProcessKey::Executor(..), Some(ExecutorState::Launching))
                | (ProcessKey::Driver(_), _) => self.launch(now, worker, process),
                (ProcessKey::Executor(..), _) => {
                    self.ended_unheard(link, worker, process, ExecutorState::Lost);
                }
            }
        }
        self.send(link, ToWorker::Registered);
        self.passes.want();
    }

    /// Proposes the end of `process`, which `worker` (registered on `link`) no longer runs
    /// and whose end it did not report: an executor in `executor_state`, a driver KILLED.
    pub(super) fn ended_unheard(
        &mut self,
        link: LinkId,
        worker: &WorkerId,
        process: ProcessKey,
        executor_state: ExecutorState,
    ) {
        let op = match &process {
            ProcessKey::Executor(app, executor) => Op::ExecutorStateChanged(ExecutorStateChanged {
                app: app.clone(),
                executor: *executor,
                state: executor_state,
                exit_code: None,
            }),
            ProcessKey::Driver(driver) => Op::DriverStateChanged(DriverStateChanged {
                driver: driver.clone(),
                state: DriverState::Killed,
                exit_code: None,
            }),
        };
        let report = PendingReport {
            link,
            worker: worker.clone(),
            seq: None,
            process,
            started: false,
        };
        self.propose(op, Purpose::Report(report));
    }

    /// Tells the application of each executor on drained `worker` that it is killed after
    /// `kill_after`, so that it moves its data off in time (from log format 3: an older
    /// client would not know the message).
    pub(super) fn worker_drained(
        &mut self,
        state: &ClusterState,
        worker: &WorkerId,
        kill_after: Option<Duration>,
    ) {
        if state.log_format() < LogFormat::THIRD {
            return;
        }
        for app in state.apps().values() {
            for executor in app.executors.values().filter(|e| &e.worker == worker) {
                self.tell_app(&app.id, ToApp::Draining(executor.id, kill_after));
            }
        }
    }
}
