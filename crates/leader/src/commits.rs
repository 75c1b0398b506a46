//! What the leader does once its proposals are settled: each committed response's effects
//! carried out (kills, launches, events and ends for applications), and a proposal that did
//! not commit settled by its purpose.

use std::time::{Duration, Instant};

use muster_state::model::ExecutorState;
use muster_state::{ApplyError, ClusterState, Effects, Outcome, Response};

use crate::processes::placed_on;
use crate::protocol::{Action, Close, ProcessKey, ToApp, ToWorker};
use crate::{Leader, PendingReport, Purpose};

impl Leader {
    /// A proposal was committed (and applied to `state`) with `result`.
    pub(super) fn committed(
        &mut self,
        now: Instant,
        state: &ClusterState,
        purpose: Purpose,
        result: Result<Response, ApplyError>,
    ) {
        match (purpose, result) {
            (Purpose::Report(report), result) => {
                self.report_committed(state, &report, result.ok());
            }
            (
                Purpose::Register {
                    link,
                    worker,
                    running,
                },
                Ok(_),
            ) => {
                self.reconcile(now, state, link, &worker, &running);
            }
            (Purpose::Register { link, worker, .. }, Err(refused)) => {
                self.close(link, Close::Refused(refused.to_string()));
                self.links.forget_worker(&worker);
            }
            (Purpose::Lost { worker, link }, result) => {
                self.liveness.loss_settled(&worker);
                if let Ok(response) = result {
                    self.carry_out(&response.effects, None, None);
                }
                if self.links.worker_link(&worker) == link {
                    // Still the stream it was lost on: it must register again.
                    self.links.forget_worker(&worker);
                    if let Some(link) = link {
                        self.close(link, Close::Reregister);
                    }
                } else {
                    // It registered again meanwhile; that registration, now after the loss in
                    // the log, reconciles it.
                    self.links.unregistered(&worker);
                }
            }
            (Purpose::Completing, result) => {
                if let Ok(response) = result {
                    self.carry_out(&response.effects, None, None);
                }
                if self.recovery.settled_one() {
                    self.become_alive();
                }
            }
            (Purpose::Plan, result) => {
                self.passes.settled(result.is_ok());
                self.launch_placed(now, result.ok());
            }
            (Purpose::Grant, result) => {
                self.preemptor.grant_settled();
                self.passes.want();
                self.launch_placed(now, result.ok());
            }
            (Purpose::Preempt { owners }, Ok(response)) => {
                // Their drivers hear why before the processes are stopped.
                let grace = self.preemptor.preempted(now, owners);
                for (app, executor) in &response.effects.ended_executors {
                    self.tell_app(app, ToApp::Preempted(executor.id, grace));
                }
                self.carry_out(&response.effects, None, Some(grace));
                self.passes.want();
            }
            (Purpose::Preempt { .. }, Err(refused)) => {
                // The state moved on since the choice; the next pass chooses again.
                tracing::info!(%refused, "preemption refused");
                self.preemptor.preempt_settled();
                self.passes.want();
            }
            (Purpose::Drained { worker }, result) => {
                self.liveness.decommission_settled(&worker);
                if let Ok(response) = result {
                    self.carry_out(&response.effects, None, None);
                    self.passes.want();
                }
            }
            (Purpose::AppRequest { link, .. }, Err(ApplyError::Denied(denied))) => {
                // Its client hears why, and counts as gone unless it attaches again.
                self.links.closed(link, now);
                self.actions.push(Action::Close {
                    link,
                    reason: Close::Denied(denied),
                });
            }
            // A refused resource profile: no executor of it comes, and the application
            // hears why rather than wait for ever. A request decided in an older term was
            // not refused for itself: its client asks again on its next stream.
            (
                Purpose::AppRequest {
                    link,
                    profile: Some(id),
                },
                Err(refused),
            ) if !matches!(refused, ApplyError::StaleTerm { .. }) => {
                tracing::warn!(%refused, profile = id, "an application's resource profile refused");
                self.actions.push(Action::ToApp {
                    link,
                    message: ToApp::ProfileRefused(id, refused.to_string()),
                });
            }
            (Purpose::GangTimeout, result) => {
                self.gang_waits.settled();
                if let Ok(response) = result {
                    self.carry_out(&response.effects, None, None);
                    self.passes.want();
                }
            }
            (Purpose::Vanished { .. } | Purpose::AppRequest { .. } | Purpose::Other, result) => {
                if let Ok(response) = result {
                    self.carry_out(&response.effects, None, None);
                    self.passes.want();
                }
            }
        }
    }

    /// Launches what a committed plan (or grant of kept room) placed, and tells each
    /// application of its new executors.
    pub(super) fn launch_placed(&mut self, now: Instant, response: Option<Response>) {
        let Some(Response {
            outcome: Outcome::PlanApplied {
                drivers, executors, ..
            },
            ..
        }) = response
        else {
            return;
        };
        for (driver, worker) in &drivers {
            self.launch(now, worker, ProcessKey::Driver(driver.clone()));
        }
        for (app, executor) in executors {
            let key = ProcessKey::Executor(app.clone(), executor.id);
            self.launch(now, &executor.worker, key);
            self.tell_app(&app, ToApp::Executor(executor));
        }
    }

    /// A worker's report was committed (`response`) or refused (`None`: the process had
    /// already ended in the log); either way it is settled.
    pub(super) fn report_committed(
        &mut self,
        state: &ClusterState,
        report: &PendingReport,
        response: Option<Response>,
    ) {
        let PendingReport {
            link,
            ref worker,
            seq,
            ref process,
            started,
        } = *report;
        if let Some(response) = response {
            self.carry_out(&response.effects, Some(process), None);
            if !started {
                // An end frees what it held, a stopped process's custom resources too.
                self.passes.want();
            }
            if let ProcessKey::Executor(app, executor) = process
                && let Some(executor) = state
                    .apps()
                    .get(app)
                    .and_then(|a| a.executors.get(executor))
                    .filter(|e| e.state == ExecutorState::Running)
            {
                // A start has no effects; its app hears of it here.
                self.tell_app(app, ToApp::Executor(executor.clone()));
            }
        } else if started && placed_on(state, process) != Some(worker) {
            // It runs, but the log no longer has it there: stop it.
            self.send(link, process.kill());
        }
        if let Some(seq) = seq
            && self.links.is_open(link)
        {
            self.send(link, ToWorker::Acknowledged(vec![seq]));
        }
    }

    /// A proposal could not be committed: what it was for is decided again later.
    pub(super) fn not_committed(&mut self, purpose: Purpose) {
        match purpose {
            // Planned again on a later tick.
            Purpose::Plan => self.passes.settled(false),
            // Decided again on a later pass, if still needed.
            Purpose::Preempt { .. } => self.preemptor.preempt_settled(),
            Purpose::Grant => self.preemptor.grant_settled(),
            // Timed again from the next pass.
            Purpose::GangTimeout => self.gang_waits.settled(),
            // Decided again on a later tick.
            Purpose::Lost { worker, .. } => self.liveness.loss_settled(&worker),
            Purpose::Vanished { app } => self.liveness.finish_settled(&app),
            Purpose::Drained { worker } => self.liveness.decommission_settled(&worker),
            Purpose::Completing => {
                if self.recovery.settled_one() {
                    self.become_alive();
                }
            }
            // The worker must say it again: it registers again with every report that is
            // not acknowledged.
            Purpose::Register { link, .. } | Purpose::Report(PendingReport { link, .. }) => {
                if self.links.is_open(link) {
                    self.close(link, Close::Reregister);
                }
            }
            // An application asks again on its next stream what it asked on this one.
            Purpose::AppRequest { .. } | Purpose::Other => {}
        }
    }

    /// Carries out what a committed command asks of workers and applications. `reported` is
    /// the process whose own report caused it: its worker needs no kill for it. Executors
    /// stopped get SIGKILL after `kill_grace` (or their worker's own kill grace).
    pub(super) fn carry_out(
        &mut self,
        effects: &Effects,
        reported: Option<&ProcessKey>,
        kill_grace: Option<Duration>,
    ) {
        for (app, executor) in &effects.ended_executors {
            let process = ProcessKey::Executor(app.clone(), executor.id);
            self.processes.ended(&process);
            self.tell_app(app, ToApp::Executor(executor.clone()));
            self.links.executor_ended(app, executor.clone());
            if reported != Some(&process) {
                let kill = ToWorker::KillExecutor(app.clone(), executor.id, kill_grace);
                self.tell_worker(&executor.worker, kill);
            }
        }
        for (driver, worker, _) in &effects.ended_drivers {
            let process = ProcessKey::Driver(driver.clone());
            self.processes.ended(&process);
            if let Some(worker) = worker
                && reported != Some(&process)
            {
                self.tell_worker(worker, process.kill());
            }
        }
        for (app, state) in &effects.removed_apps {
            self.liveness.finish_settled(app);
            self.recovery.app_back(app);
            if let Some(link) = self.links.app_ended(app) {
                self.actions.push(Action::ToApp {
                    link,
                    message: ToApp::Ended(*state),
                });
            }
        }
        if !effects.ended_executors.is_empty() || !effects.ended_drivers.is_empty() {
            self.passes.want();
        }
    }
}
