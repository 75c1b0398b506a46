//! The leader's logic for one term, as a deterministic state machine: no tokio, no clock, no
//! I/O.
//!
//! A [`Leader`] moves only when [`Leader::step`] hands it an [`Event`] (a worker registered,
//! a report, a heartbeat, an application attached, a proposal committed, ...), when
//! [`Leader::tick`] tells it the time, or when [`Leader::pass`] asks for the scheduling pass
//! that events made wanted. All read the replicated [`ClusterState`] as this replica has
//! applied it, and all return [`Action`]s: propose an op to the log, send a message to a
//! worker or an application, close a link. The master's session (`muster-master`) owns the
//! streams and the Raft handle, feeds events in and carries actions out; everything it would
//! otherwise decide by the order in which `.await`s finish is decided here, in one place, and
//! tested by scripts (`crates/leader/tests/leader/scripts`, one or more per part below).
//!
//! # Parts
//!
//! Each part owns its state and answers with decisions; [`Leader`] turns them into proposals
//! and messages, and owns only what they share (the links, the proposals in flight, the
//! actions):
//!
//! | part | owns | scripts |
//! |---|---|---|
//! | `recovery` | RECOVERING → COMPLETING_RECOVERY → ALIVE, whom it awaits | `recovery*`, `exit-during-failover` |
//! | `links` | each stream's peer, each peer's current stream, last heard | `links`, `impostors`, `races` |
//! | `liveness` | losses to silence, vanished clients, drains | `frozen-worker`, `fence`, `drain` |
//! | `processes` | launches in flight, pids, usage | `launches`, `usage` |
//! | `passes` | when a pass runs, what it left waiting | `proposals` |
//! | `preemption` | room waits, kept room, preemptions and grants | `preemption*` |
//!
//! # Reconciliation
//!
//! A registration first writes the worker's unacknowledged process reports to the log, then
//! the registration itself, and only then compares what the worker runs with what the log
//! expects: what the log does not know is killed; a driver or an executor still LAUNCHING
//! that the worker lacks never started (its end would be in the reports) and is launched
//! again; a RUNNING executor the worker lacks is LOST.
//!
//! # Links
//!
//! Every stream is a [`LinkId`]. Each worker and application has at most one current link; a
//! newer one supersedes it. Heartbeats are answered, so a worker or client can tell a frozen
//! leader from a quiet one. Anything heard from a worker the log has as DEAD is refused with
//! [`Close::Reregister`], and its re-registration kills what the log no longer assigns it. A
//! leader that itself stood still (a pause longer than a few ticks) gives every worker a
//! fresh timeout instead of blaming them.
//!
//! # Proposals
//!
//! Proposals commit in the order they are proposed (the session submits them in order), so a
//! registration's reports are in the log before the registration. Every committed response's
//! [`Effects`] are carried out here: kills for what ended (except the process whose own report
//! ended it), executor events and ends for applications.

pub mod config;
mod gangs;
mod links;
mod liveness;
mod passes;
mod preemption;
mod processes;
mod protocol;
mod recovery;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use muster_core::access::QueueSpec;
use muster_core::agent::{Build, ShuffleServiceStatus};
use muster_core::ids::{AppId, DriverId, ExecutorId, RequestId, Term, WorkId, WorkerId};
use muster_core::model::{PassConfig, RecoveryState, WorkerState};
use muster_core::plan::{Plan, Reserved, WaitReason};
use muster_core::resources::{Resources, Usage};
use muster_core::restarts::Restarts;
use muster_state::commands::{
    AppFinished, By, DecommissionWorker, DriverStateChanged, ExecutorStateChanged, KillExecutors,
    QueueSettings, SetExecutorLimit, SetProfileLimit, WorkerLost, plan_op, set_queues_op,
};
use muster_state::model::{AppState, DriverState, Executor, ExecutorState, Owner, Profile};
use muster_state::version::LogFormat;
use muster_state::{ApplyError, ClusterState, Effects, Op, Outcome, Response};

pub use gangs::GangTimeout;
use gangs::GangWaits;
use links::{Agent, AppClient, Hearing, Links, Peer};
pub use liveness::FENCE_MARGIN;
use liveness::Liveness;
use passes::Passes;
pub use preemption::PreemptionPolicy;
use preemption::Preemptor;
pub use processes::LAUNCH_ATTEMPTS;
use processes::{Processes, Unconfirmed, placed_on};
pub use protocol::{
    Action, AppRequest, Close, Event, LinkId, ProcessKey, ProposalId, Registration, Report,
    RunningProcess, ToApp, ToWorker, Update,
};
use recovery::Recovery;

/// Timings and scheduling settings of the leader.
#[derive(Clone, Debug)]
pub struct LeaderConfig {
    /// How long a new leader waits for known workers and applications to come back.
    pub recovery_timeout: Duration,
    /// How long an application whose client vanished may take to re-attach before it is
    /// finished for it.
    pub app_grace: Duration,
    /// How often workers are expected to heartbeat at the least; a leader that itself stood
    /// still for three of these gives every worker a fresh timeout.
    pub heartbeat_interval: Duration,
    /// A worker silent this long is lost.
    pub worker_timeout: Duration,
    /// How long a launch may go unconfirmed before it is sent again.
    pub launch_timeout: Duration,
    /// Scheduling runs at least this often while ALIVE.
    pub schedule_tick: Duration,
    /// The scheduling pass's settings; each pass draws its own seed.
    pub pass: PassConfig,
    /// Queues from this master's configuration, applied through the log once per distinct
    /// content when its leader completes recovery; `muster queues --set` changes them later.
    pub queues: Option<Vec<QueueSpec>>,
    /// When prior work may stop ordinary executors to fit, if ever.
    pub preemption: Option<PreemptionPolicy>,
    /// How long gangs may wait for all of their minimum, and what becomes of them then,
    /// where their queues set nothing.
    pub gang_timeout: GangTimeout,
}

impl Default for LeaderConfig {
    fn default() -> Self {
        Self {
            recovery_timeout: Duration::from_secs(15),
            app_grace: Duration::from_secs(10),
            heartbeat_interval: Duration::from_secs(1),
            worker_timeout: Duration::from_secs(15),
            launch_timeout: Duration::from_secs(10),
            schedule_tick: Duration::from_secs(1),
            pass: PassConfig::default(),
            queues: None,
            preemption: None,
            gang_timeout: GangTimeout::default(),
        }
    }
}

/// Why a proposal was made: what to do once it is settled.
#[derive(Clone, Debug)]
enum Purpose {
    /// A worker's report, acknowledged once in the log.
    Report(PendingReport),
    /// A worker's registration; reconciled against `running` once in the log.
    Register {
        link: LinkId,
        worker: WorkerId,
        running: BTreeMap<ProcessKey, RunningProcess>,
    },
    /// A worker lost to silence, on the link it had then.
    Lost {
        worker: WorkerId,
        link: Option<LinkId>,
    },
    /// Part of completing recovery.
    Completing,
    /// A scheduling pass.
    Plan,
    /// Executors stopped for prior work, and room kept for `owners`.
    Preempt { owners: Vec<WorkId> },
    /// Kept room granted to its owners after its grace.
    Grant,
    /// A gang's wait ended by its timeout.
    GangTimeout,
    /// An application finished for a client that did not come back.
    Vanished { app: AppId },
    /// A drained worker decommissioned.
    Drained { worker: WorkerId },
    /// An application's own request on `link`; a denial closes the stream, and a refused
    /// request for executors of resource profile `profile` is told to the application.
    AppRequest { link: LinkId, profile: Option<u32> },
    /// Anything else: carry out its effects.
    Other,
}

/// An application's client attached ([`Event::AppAttached`]).
struct Attached {
    app: AppId,
    ui_address: String,
    driver: Option<DriverId>,
    user: Option<Owner>,
    believed_live: Vec<ExecutorId>,
}

/// The end of executor `id` as told to a client that missed it when this leader does not
/// know how it ended (it ended before this leader's term): lost, its worker unknown.
fn ended_unseen(id: ExecutorId) -> Executor {
    Executor {
        id,
        worker: WorkerId::from(""),
        resources: Resources::default(),
        state: ExecutorState::Lost,
        exit_code: None,
    }
}

/// A report by `worker` on `link` (its number `seq`, if the worker numbered it), proposed
/// to the log; `started` when it said `process` runs.
#[derive(Clone, Debug)]
struct PendingReport {
    link: LinkId,
    worker: WorkerId,
    seq: Option<u64>,
    process: ProcessKey,
    started: bool,
}

/// The leader of one term.
pub struct Leader {
    term: Term,
    config: LeaderConfig,
    recovery: Recovery,
    links: Links,
    liveness: Liveness,
    processes: Processes,
    passes: Passes,
    preemptor: Preemptor,
    gang_waits: GangWaits,
    proposals: BTreeMap<ProposalId, Purpose>,
    next_proposal: u64,
    /// When the leader was last ticked: a longer gap than a few heartbeats means it stood
    /// still.
    last_tick: Instant,
    /// Resource profiles applications asked for before every master read log format 3,
    /// proposed once the cluster is raised to it (its client asks again only when it next
    /// attaches).
    deferred_profiles: BTreeMap<AppId, BTreeMap<u32, Profile>>,
    /// The configured queues, admission settings included, applied without those before
    /// every master read log format 4 and proposed whole once the cluster is raised to it.
    deferred_queues: Option<Vec<QueueSpec>>,
    /// What the current step, tick or pass decided, in order.
    actions: Vec<Action>,
}

impl Leader {
    /// The leader of `term`, starting to recover at `now`.
    pub fn new(term: Term, config: LeaderConfig, now: Instant) -> Self {
        Self {
            term,
            recovery: Recovery::new(),
            links: Links::default(),
            liveness: Liveness::default(),
            processes: Processes::default(),
            passes: Passes::default(),
            preemptor: Preemptor::new(config.preemption.clone()),
            gang_waits: GangWaits::default(),
            config,
            proposals: BTreeMap::new(),
            next_proposal: 0,
            last_tick: now,
            deferred_profiles: BTreeMap::new(),
            deferred_queues: None,
            actions: Vec::new(),
        }
    }

    /// Where recovery stands.
    pub fn recovery_state(&self) -> RecoveryState {
        self.recovery.state()
    }

    /// The process id a worker reported for `key`.
    pub fn pid(&self, key: &ProcessKey) -> Option<u32> {
        self.processes.pid(key)
    }

    /// The restarts a worker reported for `key`, a supervised driver started again.
    pub fn restarts(&self, key: &ProcessKey) -> Option<Restarts<Instant>> {
        self.processes.restarts(key)
    }

    /// What the process `key` on `worker` uses, as the worker last measured it, while it
    /// runs.
    pub fn usage(&self, worker: &WorkerId, key: &ProcessKey) -> Option<Usage> {
        self.processes.usage(worker, key)
    }

    /// The stream worker `worker` is on now, if it has one.
    pub fn worker_link(&self, worker: &WorkerId) -> Option<LinkId> {
        self.links.worker_link(worker)
    }

    /// Why app or driver `id` waits, as of the last scheduling pass.
    pub fn waiting(&self, id: &WorkId) -> Option<&WaitReason> {
        self.passes.waiting(id)
    }

    /// The last scheduling pass took `took`, as the shell measured it: the next starts no
    /// sooner than [`passes::PACE`] times that after it.
    pub fn pass_took(&mut self, took: Duration) {
        self.passes.took(took);
    }

    /// The build `worker`'s agent said it runs when it registered with this leader.
    pub fn worker_build(&self, worker: &WorkerId) -> Option<&Build> {
        self.links.worker_build(worker)
    }

    /// `worker`'s shuffle service as it last said, when it runs one.
    pub fn shuffle_service(&self, worker: &WorkerId) -> Option<&ShuffleServiceStatus> {
        self.links.shuffle_service(worker)
    }

    /// The Spark `worker`'s drivers run Spark submissions with, as its agent said when it
    /// registered with this leader (empty: none); `None` when it did not say.
    pub fn spark_home(&self, worker: &WorkerId) -> Option<&str> {
        self.links.spark_home(worker)
    }

    /// The web UI app `app`'s client gave when it attached to this leader; empty if none.
    pub fn ui_address(&self, app: &AppId) -> &str {
        self.links.ui_address(app)
    }

    /// The cluster-mode driver that runs `app`, as its client said when it attached to this
    /// leader.
    pub fn app_driver(&self, app: &AppId) -> Option<&DriverId> {
        self.links.app_driver(app)
    }

    /// How many scheduling passes this leader has run.
    pub fn passes(&self) -> u64 {
        self.passes.count()
    }

    /// The room the last scheduling pass kept for a waiting gang.
    pub fn reserved(&self) -> &[Reserved] {
        self.passes.reserved()
    }

    /// How long the apps and drivers that plans committed since last asked placed for the
    /// first time had waited.
    pub fn take_placement_waits(&mut self) -> Vec<(WorkId, Duration)> {
        self.passes.take_placement_waits()
    }

    /// How many apps and drivers wait, by reason, as of the last scheduling pass.
    pub fn waiting_by_reason(&self) -> &BTreeMap<&'static str, usize> {
        self.passes.waiting_reasons()
    }

    /// Reacts to `event` at `now`, reading `state` as this replica has applied it.
    pub fn step(&mut self, now: Instant, state: &ClusterState, event: Event) -> Vec<Action> {
        match event {
            // The state is complete: decide whom to wait for.
            Event::StateRead => {
                let links = &self.links;
                self.recovery.start(
                    now + self.config.recovery_timeout,
                    state,
                    |worker| links.is_registered(worker),
                    |app| links.app_link(app).is_some(),
                );
            }
            Event::WorkerAttached { link, registration } => {
                self.worker_attached(now, state, link, registration);
            }
            Event::WorkerHeartbeat {
                link,
                usage,
                shuffle_service,
                apps_with_data,
            } => {
                if let Some(worker) = self.current_worker(now, link, state) {
                    self.send(link, ToWorker::HeartbeatAck);
                    self.links.set_shuffle_service(&worker, shuffle_service);
                    self.processes.measured(state, worker, usage);
                    // Only a recovered leader's state has every application that runs: one
                    // that is still catching up could take a new one for ended.
                    let ended: Vec<AppId> = apps_with_data
                        .into_iter()
                        .filter(|app| self.recovery.is_alive() && !state.apps().contains_key(app))
                        .collect();
                    if !ended.is_empty() {
                        self.send(link, ToWorker::AppsEnded(ended));
                    }
                }
            }
            Event::WorkerReport { link, report } => {
                if let Some(worker) = self.current_worker(now, link, state) {
                    self.report(now, state, link, &worker, Some(report.seq), report.update);
                }
            }
            Event::AppAttached {
                link,
                app,
                ui_address,
                driver,
                user,
                believed_live,
            } => {
                let attached = Attached {
                    app,
                    ui_address,
                    driver,
                    user,
                    believed_live,
                };
                self.app_attached(link, attached, state);
            }
            Event::AppRequest { link, request } => self.app_request(link, request, state),
            Event::LinkClosed { link } => self.links.closed(link, now),
            Event::Committed { proposal, result } => {
                if let Some(purpose) = self.proposals.remove(&proposal) {
                    self.committed(now, state, purpose, result);
                }
            }
            Event::NotCommitted { proposal } => {
                if let Some(purpose) = self.proposals.remove(&proposal) {
                    self.not_committed(purpose);
                }
            }
            Event::ClientCommitted { effects } => {
                self.carry_out(&effects, None, None);
                self.passes.want();
            }
            Event::WorkerDrained { worker, kill_after } => {
                self.worker_drained(state, &worker, kill_after);
            }
        }
        if self.recovery.all_back() {
            self.complete_recovery(state);
        }
        std::mem::take(&mut self.actions)
    }

    /// Whether events since the last pass want another: [`Leader::pass`] runs it.
    pub fn wants_pass(&self) -> bool {
        self.passes.wanted() && self.recovery.is_alive()
    }

    /// Runs the scheduling pass that is wanted (or due), unless one is in flight, and grants
    /// kept room whose grace has passed.
    pub fn pass(&mut self, now: Instant, state: &ClusterState) -> Vec<Action> {
        self.maybe_schedule(now, state);
        std::mem::take(&mut self.actions)
    }

    /// Lets time pass: recovery deadline, liveness, vanished clients, unconfirmed launches,
    /// periodic scheduling.
    pub fn tick(&mut self, now: Instant, state: &ClusterState) -> Vec<Action> {
        let paused = now.saturating_duration_since(self.last_tick);
        self.last_tick = now;
        if paused > self.config.heartbeat_interval * 3 {
            // This leader stood still (a pause, a stalled machine): nobody else is to blame
            // for the silence, so everyone gets a fresh timeout.
            self.links.stood_still(now);
        }
        if self.recovery.timed_out(now) {
            self.complete_recovery(state);
        }
        if self.recovery.is_alive() {
            self.lose_silent_workers(now, state);
            self.finish_vanished_apps(now, state);
            self.retry_launches(now, state);
            self.decommission_drained(now, state);
            self.propose_deferred_profiles(state);
            self.propose_deferred_queues(state);
        }
        if self.recovery.all_back() {
            self.complete_recovery(state);
        }
        self.maybe_schedule(now, state);
        std::mem::take(&mut self.actions)
    }

    /// COMPLETING_RECOVERY: removes what never came back, applies configured queues, and
    /// becomes ALIVE once all of it is settled.
    fn complete_recovery(&mut self, state: &ClusterState) {
        let links = &self.links;
        let never_back = self.recovery.complete(
            state,
            |worker| links.worker_link(worker).is_some(),
            |app| links.app_link(app).is_some(),
        );
        let mut completing = Vec::new();
        for id in never_back.workers {
            let reason = "did not reconnect after the master failover".to_owned();
            completing.push((Op::WorkerLost(WorkerLost { id, reason }), None));
        }
        for id in never_back.apps {
            let state = AppState::Finished;
            completing.push((Op::AppFinished(AppFinished { id, state }), None));
        }
        if let Some(queues) = self.config.queues.clone() {
            let op = self.configured_queues_op(queues, state);
            let request_id = configured_queues_request(&op);
            completing.push((op, Some(request_id)));
        }
        let alive = self.recovery.completing(completing.len());
        for (op, request_id) in completing {
            self.propose_with(op, request_id, Purpose::Completing);
        }
        if alive {
            self.become_alive();
        }
    }

    /// The op that applies the configured `queues`: without their admission settings while a
    /// master of an older release could not read them, which are then kept until all can.
    fn configured_queues_op(&mut self, queues: Vec<QueueSpec>, state: &ClusterState) -> Op {
        let op = set_queues_op(queues.clone());
        if op.introduced_in() <= state.log_format() {
            return op;
        }
        tracing::info!(
            "the queues' driver shares wait for every master to run release 0.4.0: the \
             masters' driver_share applies to every queue until then"
        );
        let without: Vec<QueueSpec> = queues
            .iter()
            .map(|queue| QueueSpec {
                driver_share: None,
                gang_timeout_s: None,
                gang_style: None,
                ..queue.clone()
            })
            .collect();
        self.deferred_queues = Some(queues);
        set_queues_op(without)
    }

    /// Proposes the configured queues deferred until every master read their admission
    /// settings, once all do.
    fn propose_deferred_queues(&mut self, state: &ClusterState) {
        let Some(queues) = &self.deferred_queues else {
            return;
        };
        let op = set_queues_op(queues.clone());
        if op.introduced_in() > state.log_format() {
            return;
        }
        self.deferred_queues = None;
        let request_id = configured_queues_request(&op);
        self.propose_with(op, Some(request_id), Purpose::Other);
    }

    fn become_alive(&mut self) {
        tracing::info!(term = %self.term, "leader ALIVE");
        self.passes.want();
    }

    /// The worker at the other end of `link`, heard from at `now`, if `link` is its current
    /// stream and the log does not count it as lost. A superseded link is closed; a worker
    /// this leader no longer keeps, or that the log has as DEAD, is told to register again.
    fn current_worker(
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

    fn worker_attached(
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
    fn report(
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
    fn report_op(
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

    fn app_attached(&mut self, link: LinkId, attached: Attached, state: &ClusterState) {
        let Attached {
            app,
            ui_address,
            driver,
            user,
            believed_live,
        } = attached;
        if let Some(old) = self.links.app_link(&app) {
            self.close(old, Close::Superseded);
        }
        self.links
            .attach_app(link, app.clone(), AppClient { ui_address, driver }, user);
        self.recovery.app_back(&app);
        self.actions.push(Action::ToApp {
            link,
            message: ToApp::Registered(app.clone()),
        });
        // So that a re-attached client starts from the truth: the executors it holds, and
        // the end of each it has not seen end, as this leader saw it or else as lost.
        if let Some(held) = state.apps().get(&app) {
            let ended = believed_live
                .into_iter()
                .filter(|id| !held.executors.contains_key(id))
                .map(|id| {
                    self.links
                        .end_of(&app, id)
                        .cloned()
                        .unwrap_or_else(|| ended_unseen(id))
                });
            let told: Vec<Executor> = held.executors.values().cloned().chain(ended).collect();
            for executor in told {
                self.actions.push(Action::ToApp {
                    link,
                    message: ToApp::Executor(executor),
                });
            }
        }
        self.passes.want();
    }

    /// An application's request on `link`, proposed ([`Leader::propose_app_request`]).
    fn app_request(&mut self, link: LinkId, request: AppRequest, state: &ClusterState) {
        let Some(Peer::App(app)) = self.links.peer(link).cloned() else {
            return;
        };
        if self.links.app_link(&app) != Some(link) {
            self.close(link, Close::Superseded);
            return;
        }
        let profile = match &request {
            AppRequest::SetProfileLimit(id, _) => Some(*id),
            _ => None,
        };
        let op = match request {
            AppRequest::Heartbeat => {
                self.actions.push(Action::ToApp {
                    link,
                    message: ToApp::HeartbeatAck,
                });
                return;
            }
            AppRequest::Finish => Op::AppFinished(AppFinished {
                id: app.clone(),
                state: AppState::Finished,
            }),
            AppRequest::SetLimit(limit) => Op::SetExecutorLimit(SetExecutorLimit {
                app: app.clone(),
                limit,
            }),
            // A master of an older release could not read it: kept until they all do.
            AppRequest::SetProfileLimit(id, profile) if state.log_format() < LogFormat::THIRD => {
                tracing::info!(%app, "resource profiles wait for every master to run release 0.3.0");
                self.deferred_profiles
                    .entry(app)
                    .or_default()
                    .insert(id, profile);
                return;
            }
            AppRequest::SetProfileLimit(id, profile) => {
                // Newer than what was kept for it, if anything was.
                if let Some(kept) = self.deferred_profiles.get_mut(&app) {
                    kept.remove(&id);
                }
                Op::SetProfileLimit(SetProfileLimit {
                    app: app.clone(),
                    id,
                    profile,
                })
            }
            AppRequest::Release(executors) => Op::KillExecutors(KillExecutors {
                app: app.clone(),
                executors,
            }),
        };
        self.propose_app_request(&app, link, profile, op, state);
    }

    /// Proposes application `app`'s request `op`, made on `link` (for executors of
    /// `profile`, if it names one), as its named user's once every master reads that (the
    /// state then refuses it when their credential was revoked).
    fn propose_app_request(
        &mut self,
        app: &AppId,
        link: LinkId,
        profile: Option<u32>,
        op: Op,
        state: &ClusterState,
    ) {
        let op = match self.links.app_user(app) {
            Some(owner) if state.log_format() >= LogFormat::THIRD => Op::By(By {
                user: owner.user.clone(),
                generation: owner.generation,
                op: Box::new(op),
            }),
            _ => op,
        };
        self.propose(op, Purpose::AppRequest { link, profile });
    }

    /// Proposes the resource profiles deferred until the cluster read log format 3, once it
    /// does, for the applications still attached.
    fn propose_deferred_profiles(&mut self, state: &ClusterState) {
        if state.log_format() < LogFormat::THIRD {
            return;
        }
        for (app, profiles) in std::mem::take(&mut self.deferred_profiles) {
            let Some(link) = self.links.app_link(&app) else {
                continue;
            };
            for (id, profile) in profiles {
                let op = Op::SetProfileLimit(SetProfileLimit {
                    app: app.clone(),
                    id,
                    profile,
                });
                self.propose_app_request(&app, link, Some(id), op, state);
            }
        }
    }

    /// A proposal was committed (and applied to `state`) with `result`.
    fn committed(
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
    fn launch_placed(&mut self, now: Instant, response: Option<Response>) {
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
    fn report_committed(
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
    fn not_committed(&mut self, purpose: Purpose) {
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

    /// Compares what a registered worker runs with what the log expects on it.
    fn reconcile(
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
    fn ended_unheard(
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

    /// Sends a launch (again) and waits for its RUNNING report.
    fn launch(&mut self, now: Instant, worker: &WorkerId, process: ProcessKey) {
        self.processes.launching(now, worker, process.clone());
        self.tell_worker(worker, process.launch());
    }

    /// Carries out what a committed command asks of workers and applications. `reported` is
    /// the process whose own report caused it: its worker needs no kill for it. Executors
    /// stopped get SIGKILL after `kill_grace` (or their worker's own kill grace).
    fn carry_out(
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

    /// Every worker the log has ALIVE must be heard from within its loss timeout.
    fn lose_silent_workers(&mut self, now: Instant, state: &ClusterState) {
        let worker_timeout = self.config.worker_timeout;
        let silent = self
            .liveness
            .silent_workers(now, state, &self.links, worker_timeout);
        for (worker, timeout) in silent {
            let reason = format!("no heartbeat for {timeout:?}");
            let purpose = Purpose::Lost {
                link: self.links.worker_link(&worker),
                worker: worker.clone(),
            };
            self.propose(Op::WorkerLost(WorkerLost { id: worker, reason }), purpose);
        }
    }

    fn finish_vanished_apps(&mut self, now: Instant, state: &ClusterState) {
        let grace = self.config.app_grace;
        for app in self.liveness.vanished_apps(now, state, &self.links, grace) {
            let op = Op::AppFinished(AppFinished {
                id: app.clone(),
                state: AppState::Finished,
            });
            self.propose(op, Purpose::Vanished { app });
        }
    }

    /// Sends unconfirmed launches again; gives up an executor's after [`LAUNCH_ATTEMPTS`].
    fn retry_launches(&mut self, now: Instant, state: &ClusterState) {
        let timeout = self.config.launch_timeout;
        for unconfirmed in self.processes.unconfirmed(now, state, timeout) {
            match unconfirmed {
                Unconfirmed::SendAgain(worker, process) => self.launch(now, &worker, process),
                Unconfirmed::GiveUp(app, executor) => {
                    let op = Op::ExecutorStateChanged(ExecutorStateChanged {
                        app,
                        executor,
                        state: ExecutorState::Lost,
                        exit_code: None,
                    });
                    self.propose(op, Purpose::Other);
                }
            }
        }
    }

    /// Decommissions each draining worker that is empty or whose kill-after has passed;
    /// decommissioning kills what still runs.
    fn decommission_drained(&mut self, now: Instant, state: &ClusterState) {
        for id in self.liveness.drained_workers(now, state) {
            let op = Op::DecommissionWorker(DecommissionWorker { id: id.clone() });
            self.propose(op, Purpose::Drained { worker: id });
        }
    }

    /// Grants kept room whose grace has passed, then runs a scheduling pass when one is
    /// wanted or due and none is in flight.
    fn maybe_schedule(&mut self, now: Instant, state: &ClusterState) {
        if !self.recovery.is_alive() {
            return;
        }
        if let Some(grant) = self.preemptor.grant(now, state) {
            self.propose(grant, Purpose::Grant);
        }
        if let Some(end) = self.gang_waits.due(now, state, self.config.gang_timeout) {
            self.propose(end, Purpose::GangTimeout);
        }
        if !self.passes.due(now, self.config.schedule_tick) {
            return;
        }
        if !state.has_work_to_place(self.config.pass.default_cores) {
            self.passes.nothing_to_place(now);
            self.preemptor.nothing_waits();
            self.gang_waits.note(now, &Plan::default());
            return;
        }
        let pass = PassConfig {
            seed: self.passes.start(now, self.term),
            ..self.config.pass.clone()
        };
        let snapshot = state.scheduling_snapshot(pass);
        let mut plan = muster_core::schedule_valid(&snapshot);
        self.passes.placing(now, &snapshot, &plan);
        self.gang_waits.note(now, &plan);
        self.preemptor.note_room_waits(now, &snapshot, &plan);
        self.passes.waited(&mut plan);
        if plan.drivers.is_empty() && plan.executors.is_empty() {
            // Nothing else can move: the only way prior work that waits gets room.
            if let Some((op, owners)) = self.preemptor.choose(now, state, &snapshot) {
                self.propose(op, Purpose::Preempt { owners });
            }
            return;
        }
        self.passes.planned();
        self.propose(plan_op(&plan), Purpose::Plan);
    }

    fn propose(&mut self, op: Op, purpose: Purpose) {
        self.propose_with(op, None, purpose);
    }

    fn propose_with(&mut self, op: Op, request_id: Option<RequestId>, purpose: Purpose) {
        let proposal = ProposalId(self.next_proposal);
        self.next_proposal += 1;
        self.proposals.insert(proposal, purpose);
        self.actions.push(Action::Propose {
            proposal,
            op,
            request_id,
        });
    }

    fn send(&mut self, link: LinkId, message: ToWorker) {
        self.actions.push(Action::ToWorker { link, message });
    }

    fn tell_worker(&mut self, worker: &WorkerId, message: ToWorker) {
        if let Some(link) = self.links.worker_link(worker) {
            self.send(link, message);
        }
    }

    /// Tells the application of each executor on drained `worker` that it is killed after
    /// `kill_after`, so that it moves its data off in time (from log format 3: an older
    /// client would not know the message).
    fn worker_drained(
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

    fn tell_app(&mut self, app: &AppId, message: ToApp) {
        if let Some(link) = self.links.app_link(app) {
            self.actions.push(Action::ToApp { link, message });
        }
    }

    fn close(&mut self, link: LinkId, reason: Close) {
        self.links.forget(link);
        self.actions.push(Action::Close { link, reason });
    }
}

/// A request id derived from the configured queues' content (`op` sets them), so that the
/// same configuration is applied once however many leaders carry it. Queues without
/// capacities give the id builds before them derived, from the queues printed as those
/// builds printed them.
fn configured_queues_request(op: &Op) -> RequestId {
    let settings = |q: &QueueSettings| {
        format!(
            "name: {:?}, prior: {:?}, threshold: {:?}, max_capacity: {:?}",
            q.name, q.prior, q.threshold, q.max_capacity
        )
    };
    let content = match op {
        Op::SetQueues(set) => {
            let queues: Vec<String> = set
                .queues
                .iter()
                .map(|q| format!("QueueConfig {{ {} }}", settings(q)))
                .collect();
            format!("[{}]", queues.join(", "))
        }
        Op::ReplaceQueues(replace) => {
            let queues: Vec<String> = replace
                .queues
                .iter()
                .map(|(q, access)| {
                    format!(
                        "QueueSpec {{ {}, submit: {:?}, administer: {:?}, max_per_user: {:?} }}",
                        settings(q),
                        access.submit,
                        access.administer,
                        access.max_per_user
                    )
                })
                .collect();
            format!(
                "ReplaceQueues(ReplaceQueues {{ queues: [{}] }})",
                queues.join(", ")
            )
        }
        other => format!("{other:?}"),
    };
    RequestId::of_content("configured-queues", content.as_bytes())
}

#[cfg(test)]
mod tests {
    use muster_core::access::QueueSpec;

    use super::*;

    #[test]
    fn configured_queues_without_capacities_keep_the_earlier_request_id() {
        let op = set_queues_op(vec![QueueSpec {
            prior: true,
            ..QueueSpec::named("prod")
        }]);
        let earlier = r#"[QueueConfig { name: QueueName("prod"), prior: true, threshold: 1.0, max_capacity: 1.0 }]"#;
        assert_eq!(
            configured_queues_request(&op),
            RequestId::of_content("configured-queues", earlier.as_bytes())
        );
        let op = set_queues_op(vec![QueueSpec {
            prior: true,
            submit: Some(vec!["alice".to_owned()]),
            ..QueueSpec::named("prod")
        }]);
        let earlier = r#"ReplaceQueues(ReplaceQueues { queues: [QueueSpec { name: QueueName("prod"), prior: true, threshold: 1.0, max_capacity: 1.0, submit: Some(["alice"]), administer: [], max_per_user: None }] })"#;
        assert_eq!(
            configured_queues_request(&op),
            RequestId::of_content("configured-queues", earlier.as_bytes())
        );
    }
}
