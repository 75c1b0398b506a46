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
//! The leader's own methods are split by what they answer: `workers` (a worker's link,
//! registration, reports and reconciliation), `apps` (an application's attachment and
//! requests) and `commits` (what a settled proposal leads to); `config` parses and checks the
//! master's settings and queue files into a [`LeaderConfig`].
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

mod apps;
mod commits;
pub mod config;
mod gangs;
mod links;
mod liveness;
mod passes;
mod preemption;
mod processes;
mod protocol;
mod recovery;
mod workers;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use muster_core::access::QueueSpec;
use muster_core::agent::{Build, ShuffleServiceStatus};
use muster_core::ids::{AppId, DriverId, RequestId, Term, WorkId, WorkerId};
use muster_core::model::{OrderingPolicy, PassConfig, RecoveryState};
use muster_core::plan::{Plan, Reserved, WaitReason};
use muster_core::resources::Usage;
use muster_core::restarts::Restarts;
use muster_state::commands::{
    AppFinished, DecommissionWorker, ExecutorStateChanged, QueueSettings, WorkerLost, plan_op,
    set_queues_op,
};
use muster_state::model::{AppState, ExecutorState, Profile};
use muster_state::{ClusterState, Op};

use apps::Attached;
pub use gangs::GangTimeout;
use gangs::GangWaits;
use links::Links;
pub use liveness::FENCE_MARGIN;
use liveness::Liveness;
use passes::Passes;
pub use preemption::PreemptionPolicy;
use preemption::Preemptor;
pub use processes::LAUNCH_ATTEMPTS;
use processes::{Processes, Unconfirmed};
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

    /// Why the masters' preemption settings can never stop an executor in `state`, if they
    /// cannot.
    pub fn preemption_warning(&self, state: &ClusterState) -> Option<String> {
        self.config.preemption.as_ref()?.cannot_preempt_in(state)
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

    /// The op that applies the configured `queues`: without their admission settings and
    /// orderings while a master of an older release could not read them, which are then kept
    /// until all can.
    fn configured_queues_op(&mut self, queues: Vec<QueueSpec>, state: &ClusterState) -> Op {
        let op = set_queues_op(queues.clone());
        if op.introduced_in() <= state.log_format() {
            return op;
        }
        tracing::info!(
            "the queues' driver shares, gang settings and orderings wait for every master to \
             run release 0.4.0: the masters' settings and fifo apply to every queue until then"
        );
        let without: Vec<QueueSpec> = queues
            .iter()
            .map(|queue| QueueSpec {
                driver_share: None,
                gang_timeout_s: None,
                gang_style: None,
                ordering: OrderingPolicy::Fifo,
                user_weights: BTreeMap::new(),
                max_priority: None,
                user_limit: None,
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

    /// Sends a launch (again) and waits for its RUNNING report.
    fn launch(&mut self, now: Instant, worker: &WorkerId, process: ProcessKey) {
        self.processes.launching(now, worker, process.clone());
        self.tell_worker(worker, process.launch());
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
        self.preemptor.note_settings(state);
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
        let mut snapshot = state.scheduling_snapshot(pass);
        self.mark_workers_without_spark(&mut snapshot);
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

    /// Marks the workers whose agents said they have no Spark, where a Spark submission's
    /// driver waits: the replicated state does not know what agents say of themselves. (A
    /// worker whose agent did not say, an older one, counts as having Spark.)
    fn mark_workers_without_spark(&self, snapshot: &mut muster_core::model::Snapshot) {
        if !snapshot.drivers.iter().any(|d| d.spark) {
            return;
        }
        let without = |id: &WorkerId| self.links.spark_home(id) == Some("");
        if !snapshot.workers.iter().any(|w| without(&w.id)) {
            return;
        }
        for worker in snapshot.workers.make_mut() {
            worker.without_spark = without(&worker.id);
        }
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
