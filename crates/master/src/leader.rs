//! The leader's logic for one term, as a deterministic state machine: no tokio, no clock, no
//! I/O.
//!
//! A [`Leader`] moves only when [`Leader::step`] hands it an [`Event`] (a worker registered,
//! a report, a heartbeat, an application attached, a proposal committed, ...), when
//! [`Leader::tick`] tells it the time, or when [`Leader::pass`] asks for the scheduling pass
//! that events made wanted (separate from the events, so that a burst of them is followed by
//! one pass, not one each). All read the replicated [`ClusterState`] as this replica has
//! applied it, and all return [`Action`]s: propose an op to the log, send a message to a
//! worker or an application, close a link. The session in `session.rs` owns the
//! streams and the Raft handle, feeds events in and carries actions out; everything it would
//! otherwise decide by the order in which `.await`s finish is decided here, in one place, and
//! tested by scripts (`crates/master/tests/leader/scripts`).
//!
//! # Recovery (Spark's `RecoveryState`)
//!
//! A new leader starts RECOVERING. Once a linearizable read confirms that its state holds
//! everything committed before its term ([`Event::StateRead`]), it waits for every worker the
//! log has ALIVE to register and every active application to re-attach. A registration first
//! writes the worker's unacknowledged process reports to the log, then the registration
//! itself, and only then compares what the worker runs with what the log expects
//! (reconciliation): what the log does not know is killed; a driver or an executor still
//! LAUNCHING that the worker lacks never started (its end would be in the reports) and is
//! launched again; a RUNNING executor the worker lacks is LOST. When everything has come
//! back, or after `recovery_timeout`, the leader goes COMPLETING_RECOVERY (what never came
//! back is removed through the log) and then ALIVE. Only an ALIVE leader schedules.
//!
//! # Links and liveness
//!
//! Every stream is a [`LinkId`]. Each worker and application has at most one current link; a
//! newer one supersedes it. Heartbeats are answered, so a worker or client can tell a frozen
//! leader from a quiet one. A worker silent for `worker_timeout` is lost through the log;
//! anything later heard from a worker the log has as DEAD is refused with
//! [`Close::Reregister`], and its re-registration kills what the log no longer assigns it. A
//! worker that fences (kills its own work when cut off) is lost only once its kills are done
//! ([`FENCE_MARGIN`]), so its work never runs twice. A leader that itself stood still (a
//! pause longer than a few ticks) gives every worker a fresh timeout instead of blaming them.
//!
//! # Preemption
//!
//! With a [`PreemptionPolicy`], each pass notes since when the work of its prior queues has
//! waited for room. When a pass has nothing to place and some of that work has waited past
//! the delay (and has no room kept for it already), the leader proposes the
//! [`muster_core::preempt`] choice as one `Preempt` command: the victims end KILLED (their
//! workers are told to kill them) and the room they free is kept for the prior work. With
//! `capacities`, applications of ordinary queues waiting for room are noted too, and when no
//! prior work preempts, those below their queue's guarantee preempt executors of queues
//! above theirs the same way, as one `PreemptForGuarantees` command. Once
//! the grace has passed by this leader's clock (a new leader gives room it finds kept a
//! whole grace), a `GrantReservations` command gives the room to that work, and that work
//! waits a whole delay again before it may preempt again. One preemption and one grant are
//! in flight at a time; a refused preemption (the state moved on) is chosen again by a later
//! pass.
//!
//! # Proposals
//!
//! Proposals commit in the order they are proposed (the session submits them in order), so a
//! registration's reports are in the log before the registration. Every committed response's
//! [`Effects`] are carried out here: kills for what ended (except the process whose own report
//! ended it), executor events and ends for applications. Launches that no RUNNING report
//! confirms within `launch_timeout` are sent again, and given up through the log after
//! [`LAUNCH_ATTEMPTS`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use muster_core::access::QueueSpec;
use muster_core::ids::{
    AppId, DriverId, ExecutorId, QueueName, RequestId, Term, WorkId, WorkerId, millis,
};
use muster_core::model::{PassConfig, Snapshot, WorkerState};
use muster_core::plan::{Plan, WaitReason};
use muster_core::preempt::Preempting;
use muster_core::resources::{ResourceAddresses, Usage};
use muster_state::commands::{
    AppFinished, ApplyPlan, DecommissionWorker, DriverStateChanged, ExecutorStateChanged,
    GrantReservations, KillExecutors, Preempt, QueueSettings, RegisterWorker, SetExecutorLimit,
    WorkerLost, set_queues_op,
};
use muster_state::model::{AppState, DriverState, Executor, ExecutorState};
use muster_state::{ApplyError, ClusterState, Effects, Op, Outcome, Response};

/// How long room kept under an earlier leader is kept by a leader without a preemption
/// policy: the workers' default kill grace.
const DEFAULT_KEEP: Duration = Duration::from_secs(10);

/// How many times a launch is sent before it is given up as lost.
pub const LAUNCH_ATTEMPTS: u32 = 3;

/// What a fencing worker's loss waits for beyond the worker timeout and its kill grace: the
/// worker's last contact may trail the leader's last hearing by a heartbeat answer, and it
/// checks its fence every heartbeat or reconnection attempt.
pub const FENCE_MARGIN: Duration = Duration::from_secs(5);

/// Timings and scheduling settings of the leader.
#[derive(Clone, Debug)]
pub struct SessionConfig {
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
}

/// When prior work may preempt ordinary executors ([`muster_core::preempt`]).
#[derive(Clone, Debug, PartialEq)]
pub struct PreemptionPolicy {
    /// Prior queues whose waiting work preempts.
    pub queues: BTreeSet<QueueName>,
    /// How long work must have waited for room before it preempts.
    pub delay: Duration,
    /// How long the room it frees is kept for it: at least the workers' kill grace, so the
    /// victims' processes are gone before anything else is placed there.
    pub grace: Duration,
    /// The most of the ALIVE cores one round may stop.
    pub max_fraction: f64,
    /// Whether applications of ordinary queues below their guaranteed capacity preempt
    /// executors of queues above theirs, when no prior work preempts.
    pub capacities: bool,
}

impl Default for SessionConfig {
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
        }
    }
}

/// Spark's `RecoveryState` for the leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryState {
    /// Waiting for known workers and applications to come back.
    Recovering,
    /// Removing what never came back.
    CompletingRecovery,
    /// Scheduling.
    Alive,
}

impl From<RecoveryState> for muster_proto::v1::RecoveryState {
    fn from(state: RecoveryState) -> Self {
        match state {
            RecoveryState::Recovering => Self::Recovering,
            RecoveryState::CompletingRecovery => Self::CompletingRecovery,
            RecoveryState::Alive => Self::Alive,
        }
    }
}

/// One stream between the leader and a worker or an application, numbered by the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LinkId(pub u64);

/// One proposal to the log, numbered by the leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProposalId(pub u64);

/// A process a worker runs for the log: an executor or a driver.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProcessKey {
    /// An executor.
    Executor(AppId, ExecutorId),
    /// A driver.
    Driver(DriverId),
}

/// A change of one process that a worker reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Update {
    /// An executor started (RUNNING, with its pid) or ended.
    Executor {
        /// Its app.
        app: AppId,
        /// Its id.
        executor: ExecutorId,
        /// RUNNING, EXITED, FAILED or KILLED.
        state: ExecutorState,
        /// The exit code, when it exited.
        exit_code: Option<i32>,
        /// Its process id, when it runs.
        pid: u32,
    },
    /// A driver started (RUNNING, with its pid) or ended.
    Driver {
        /// The driver.
        driver: DriverId,
        /// RUNNING, FINISHED, FAILED, KILLED or ERROR.
        state: DriverState,
        /// The exit code, when it exited.
        exit_code: Option<i32>,
        /// Its process id, when it runs.
        pid: u32,
    },
}

impl Update {
    /// The process it is about.
    pub fn process(&self) -> ProcessKey {
        match self {
            Self::Executor { app, executor, .. } => ProcessKey::Executor(app.clone(), *executor),
            Self::Driver { driver, .. } => ProcessKey::Driver(driver.clone()),
        }
    }
}

/// A numbered report: the worker keeps it until the leader acknowledges `seq`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The worker's number for it.
    pub seq: u64,
    /// What happened.
    pub update: Update,
}

/// Everything a worker says when it registers.
#[derive(Clone, Debug, PartialEq)]
pub struct Registration {
    /// Its identity and capacity, as the log records them.
    pub worker: RegisterWorker,
    /// The addresses of its custom resources, where it named them.
    pub addresses: ResourceAddresses,
    /// What it runs now, with process ids.
    pub running: BTreeMap<ProcessKey, u32>,
    /// Reports no leader has acknowledged, oldest first.
    pub reports: Vec<Report>,
}

/// What an application's client asks on its stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppRequest {
    /// "I am here."
    Heartbeat,
    /// The application is done.
    Finish,
    /// Dynamic allocation: a new executor limit (`None`: unlimited).
    SetLimit(Option<u32>),
    /// Dynamic allocation: executors given back.
    Release(Vec<ExecutorId>),
}

/// Something that happened, for the leader to react to.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A linearizable read succeeded: the state holds everything committed before this term.
    StateRead,
    /// A worker opened `link` and registered.
    WorkerAttached {
        /// The new stream.
        link: LinkId,
        /// What it said.
        registration: Registration,
    },
    /// A worker heartbeat on `link`.
    WorkerHeartbeat {
        /// The stream.
        link: LinkId,
        /// What its processes use, where it measures them.
        usage: Vec<(ProcessKey, Usage)>,
    },
    /// A worker reported a process change on `link`.
    WorkerReport {
        /// The stream.
        link: LinkId,
        /// The report.
        report: Report,
    },
    /// An application's client attached on `link` (its registration is in the log).
    AppAttached {
        /// The new stream.
        link: LinkId,
        /// The application.
        app: AppId,
        /// Its web UI, as the client gave it; empty if none.
        ui_address: String,
    },
    /// An application's client asked something on `link`.
    AppRequest {
        /// The stream.
        link: LinkId,
        /// What it asked.
        request: AppRequest,
    },
    /// A worker's or application's stream ended.
    LinkClosed {
        /// The stream.
        link: LinkId,
    },
    /// A proposal was committed and applied with this result.
    Committed {
        /// The proposal.
        proposal: ProposalId,
        /// What applying it gave.
        result: Result<Response, ApplyError>,
    },
    /// A proposal could not be committed (leadership lost, Raft unavailable).
    NotCommitted {
        /// The proposal.
        proposal: ProposalId,
    },
    /// A client's write through the API was committed with these effects.
    ClientCommitted {
        /// What the leader must carry out.
        effects: Effects,
    },
}

/// A message for a worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToWorker {
    /// Its registration is in the log and reconciled.
    Registered,
    /// The answer to a heartbeat.
    HeartbeatAck,
    /// These reports are in the log.
    Acknowledged(Vec<u64>),
    /// Start this executor (its grant is in the log).
    LaunchExecutor(AppId, ExecutorId),
    /// Start this driver (its placement is in the log).
    LaunchDriver(DriverId),
    /// Stop this executor: SIGTERM, and SIGKILL after this grace if it is shorter than the
    /// worker's own kill grace.
    KillExecutor(AppId, ExecutorId, Option<Duration>),
    /// Stop this driver.
    KillDriver(DriverId),
}

/// A message for an application's client.
#[derive(Clone, Debug, PartialEq)]
pub enum ToApp {
    /// Attached under this id.
    Registered(AppId),
    /// An executor as the log has it now.
    Executor(Executor),
    /// This executor is stopped for prior work, its process killed within this grace; its
    /// end follows as an [`ToApp::Executor`].
    Preempted(ExecutorId, Duration),
    /// The application ended in this state.
    Ended(AppState),
    /// The answer to a heartbeat.
    HeartbeatAck,
}

/// Why the leader closes a link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Close {
    /// The log counts the worker as lost: it must register again (and lose what the log no
    /// longer assigns it).
    Reregister,
    /// A newer link of the same worker or application replaced it.
    Superseded,
    /// The registration was refused.
    Refused(String),
}

/// What the session must do.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Write `op` to the log, stamped with the leader's term (and `request_id` if any); the
    /// result comes back as [`Event::Committed`] or [`Event::NotCommitted`].
    Propose {
        /// Its number.
        proposal: ProposalId,
        /// What to write.
        op: Op,
        /// Makes it idempotent across leaders.
        request_id: Option<RequestId>,
    },
    /// Send a message on a worker's link.
    ToWorker {
        /// The stream.
        link: LinkId,
        /// The message.
        message: ToWorker,
    },
    /// Send an event on an application's link.
    ToApp {
        /// The stream.
        link: LinkId,
        /// The event.
        message: ToApp,
    },
    /// Close a link.
    Close {
        /// The stream.
        link: LinkId,
        /// Why.
        reason: Close,
    },
}

/// Who is at the other end of a link.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Peer {
    Worker(WorkerId),
    App(AppId),
}

/// A worker as this leader knows it.
#[derive(Clone, Debug)]
struct WorkerSession {
    /// Its current stream, if open.
    link: Option<LinkId>,
    /// When it was last heard from.
    heard: Instant,
    /// Whether its registration is committed and reconciled in this term.
    registered: bool,
}

/// An application's client as this leader knows it.
#[derive(Clone, Debug)]
struct AppSession {
    /// Its current stream, if open.
    link: Option<LinkId>,
    /// Since when it has had no stream.
    detached_at: Option<Instant>,
    /// Its web UI, as its client last gave it; empty if none.
    ui_address: String,
}

/// A launch sent and not yet confirmed by a RUNNING report.
#[derive(Clone, Debug)]
struct Launch {
    worker: WorkerId,
    sent: Instant,
    attempts: u32,
}

/// Why a proposal was made: what to do once it commits.
#[derive(Clone, Debug)]
enum Purpose {
    /// A report by `worker` on `link`, acknowledged once in the log; `started` when it
    /// said the process runs.
    Report {
        link: LinkId,
        worker: WorkerId,
        seq: Option<u64>,
        process: ProcessKey,
        started: bool,
    },
    /// A worker's registration; reconciled against `running` once in the log.
    Register {
        link: LinkId,
        worker: WorkerId,
        running: BTreeMap<ProcessKey, u32>,
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
    /// An application finished for a client that did not come back.
    Vanished { app: AppId },
    /// A drained worker decommissioned.
    Drained { worker: WorkerId },
    /// Anything else: carry out its effects.
    Other,
}

/// The leader of one term.
pub struct Leader {
    term: Term,
    config: SessionConfig,
    recovery: RecoveryState,
    /// When recovery gives up waiting, once the state has been read.
    recovery_deadline: Option<Instant>,
    links: BTreeMap<LinkId, Peer>,
    workers: BTreeMap<WorkerId, WorkerSession>,
    apps: BTreeMap<AppId, AppSession>,
    /// Workers the log had ALIVE that have not registered in this term.
    awaited_workers: BTreeSet<WorkerId>,
    /// Applications active at the start of the term whose clients have not re-attached.
    awaited_apps: BTreeSet<AppId>,
    /// Completing-recovery proposals not committed yet.
    completing: usize,
    /// Workers whose loss is proposed and not committed yet.
    losing: BTreeSet<WorkerId>,
    /// When liveness was first checked in ALIVE.
    alive_at: Option<Instant>,
    /// Applications being finished for a vanished client.
    finishing: BTreeSet<AppId>,
    /// When this leader first saw each drain: its kill-after counts from then.
    drains_seen: BTreeMap<WorkerId, Instant>,
    /// Draining workers whose decommissioning is proposed and not committed yet.
    decommissioning: BTreeSet<WorkerId>,
    pids: BTreeMap<ProcessKey, u32>,
    /// What each worker's running processes use, as its last heartbeat measured it.
    usage: BTreeMap<WorkerId, BTreeMap<ProcessKey, Usage>>,
    launches: BTreeMap<ProcessKey, Launch>,
    /// Why each app or driver waits, as of the last scheduling pass.
    waiting: BTreeMap<WorkId, String>,
    /// How many wait, by [`muster_core::plan::WaitReason::code`], as of the last pass.
    waiting_reasons: BTreeMap<&'static str, usize>,
    /// Since when each app or driver of a preempting queue has waited for room, without a
    /// break, as the passes saw it.
    room_waits: BTreeMap<WorkId, Instant>,
    /// A preemption is proposed and not committed yet.
    preempt_in_flight: bool,
    /// When the room kept in the log for each owner goes to it: a grace after the
    /// preemption that kept it committed (or after this leader first saw it), by this
    /// leader's clock.
    kept: BTreeMap<WorkId, Instant>,
    /// A grant of kept room is proposed and not committed yet.
    grant_in_flight: bool,
    proposals: BTreeMap<ProposalId, Purpose>,
    next_proposal: u64,
    pass_wanted: bool,
    pass_in_flight: bool,
    last_pass: Option<Instant>,
    passes: u64,
    last_tick: Instant,
    actions: Vec<Action>,
}

impl Leader {
    /// The leader of `term`, starting to recover at `now`.
    pub fn new(term: Term, config: SessionConfig, now: Instant) -> Self {
        Self {
            term,
            config,
            recovery: RecoveryState::Recovering,
            recovery_deadline: None,
            links: BTreeMap::new(),
            workers: BTreeMap::new(),
            apps: BTreeMap::new(),
            awaited_workers: BTreeSet::new(),
            awaited_apps: BTreeSet::new(),
            completing: 0,
            losing: BTreeSet::new(),
            alive_at: None,
            finishing: BTreeSet::new(),
            drains_seen: BTreeMap::new(),
            decommissioning: BTreeSet::new(),
            pids: BTreeMap::new(),
            usage: BTreeMap::new(),
            launches: BTreeMap::new(),
            waiting: BTreeMap::new(),
            waiting_reasons: BTreeMap::new(),
            room_waits: BTreeMap::new(),
            preempt_in_flight: false,
            kept: BTreeMap::new(),
            grant_in_flight: false,
            proposals: BTreeMap::new(),
            next_proposal: 0,
            pass_wanted: false,
            pass_in_flight: false,
            last_pass: None,
            passes: 0,
            last_tick: now,
            actions: Vec::new(),
        }
    }

    /// Where recovery stands.
    pub fn recovery_state(&self) -> RecoveryState {
        self.recovery
    }

    /// The process id a worker reported for `key`.
    pub fn pid(&self, key: &ProcessKey) -> Option<u32> {
        self.pids.get(key).copied()
    }

    /// What the process `key` on `worker` uses, as the worker last measured it, while it
    /// runs.
    pub fn usage(&self, worker: &WorkerId, key: &ProcessKey) -> Option<Usage> {
        if !self.pids.contains_key(key) {
            return None;
        }
        self.usage.get(worker)?.get(key).copied()
    }

    /// The stream worker `worker` is on now, if it has one.
    pub fn worker_link(&self, worker: &WorkerId) -> Option<LinkId> {
        self.workers.get(worker)?.link
    }

    /// Why app or driver `id` waits, as of the last scheduling pass.
    pub fn waiting(&self, id: &WorkId) -> Option<&str> {
        self.waiting.get(id).map(String::as_str)
    }

    /// The web UI app `app`'s client gave when it attached to this leader; empty if none.
    pub fn ui_address(&self, app: &AppId) -> &str {
        self.apps.get(app).map_or("", |s| s.ui_address.as_str())
    }

    /// How many scheduling passes this leader has run.
    pub fn passes(&self) -> u64 {
        self.passes
    }

    /// How many apps and drivers wait, by reason, as of the last scheduling pass.
    pub fn waiting_by_reason(&self) -> &BTreeMap<&'static str, usize> {
        &self.waiting_reasons
    }

    /// Reacts to `event` at `now`, reading `state` as this replica has applied it.
    pub fn step(&mut self, now: Instant, state: &ClusterState, event: Event) -> Vec<Action> {
        match event {
            // The state is complete: decide whom to wait for.
            Event::StateRead => self.start_recovery(now, state),
            Event::WorkerAttached { link, registration } => {
                self.worker_attached(now, state, link, registration);
            }
            Event::WorkerHeartbeat { link, usage } => {
                if let Some(worker) = self.current_worker(now, link, state) {
                    self.send(link, ToWorker::HeartbeatAck);
                    // Only for processes this leader knows run there: each heartbeat
                    // replaces what the one before measured.
                    let measured = usage
                        .into_iter()
                        .filter(|(process, _)| {
                            self.pids.contains_key(process)
                                && placed_on(state, process) == Some(&worker)
                        })
                        .collect();
                    self.usage.insert(worker, measured);
                }
            }
            Event::WorkerReport { link, report } => {
                if let Some(worker) = self.current_worker(now, link, state) {
                    self.report(state, link, &worker, Some(report.seq), report.update);
                }
            }
            Event::AppAttached {
                link,
                app,
                ui_address,
            } => self.app_attached(link, app, ui_address, state),
            Event::AppRequest { link, request } => self.app_request(link, request),
            Event::LinkClosed { link } => self.link_closed(now, link),
            Event::Committed { proposal, result } => {
                self.committed(now, state, proposal, result);
            }
            Event::NotCommitted { proposal } => match self.proposals.remove(&proposal) {
                // Planned again on a later tick.
                Some(Purpose::Plan) => self.pass_in_flight = false,
                // Decided again on a later pass, if still needed.
                Some(Purpose::Preempt { .. }) => self.preempt_in_flight = false,
                Some(Purpose::Grant) => self.grant_in_flight = false,
                // Decided again on a later tick.
                Some(Purpose::Lost { worker, .. }) => {
                    self.losing.remove(&worker);
                }
                Some(Purpose::Vanished { app }) => {
                    self.finishing.remove(&app);
                }
                Some(Purpose::Drained { worker }) => {
                    self.decommissioning.remove(&worker);
                }
                Some(Purpose::Completing) => self.completed_one(),
                // The worker must say it again: it registers again with every report that
                // is not acknowledged.
                Some(Purpose::Register { link, .. } | Purpose::Report { link, .. }) => {
                    if self.links.contains_key(&link) {
                        self.close(link, Close::Reregister);
                    }
                }
                Some(Purpose::Other) | None => {}
            },
            Event::ClientCommitted { effects } => {
                self.carry_out(&effects, None, None);
                self.pass_wanted = true;
            }
        }
        self.maybe_advance_recovery(state);
        std::mem::take(&mut self.actions)
    }

    /// Whether events since the last pass want another: [`Leader::pass`] runs it.
    pub fn wants_pass(&self) -> bool {
        self.pass_wanted && self.recovery == RecoveryState::Alive
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
            for worker in self.workers.values_mut() {
                worker.heard = now;
            }
            for app in self.apps.values_mut() {
                if app.detached_at.is_some() {
                    app.detached_at = Some(now);
                }
            }
        }
        if self.recovery == RecoveryState::Recovering
            && self
                .recovery_deadline
                .is_some_and(|deadline| now >= deadline)
        {
            self.complete_recovery(state);
        }
        if self.recovery == RecoveryState::Alive {
            self.check_liveness(now, state);
            self.finish_vanished_apps(now, state);
            self.retry_launches(now, state);
            self.finish_drains(now, state);
        }
        self.maybe_advance_recovery(state);
        self.maybe_schedule(now, state);
        std::mem::take(&mut self.actions)
    }

    fn start_recovery(&mut self, now: Instant, state: &ClusterState) {
        if self.recovery_deadline.is_some() {
            return;
        }
        self.recovery_deadline = Some(now + self.config.recovery_timeout);
        self.awaited_workers = state
            .workers()
            .values()
            .filter(|w| w.state == WorkerState::Alive)
            .filter(|w| !self.workers.get(&w.id).is_some_and(|s| s.registered))
            .map(|w| w.id.clone())
            .collect();
        self.awaited_apps = state
            .apps()
            .keys()
            .filter(|app| self.apps.get(*app).is_none_or(|s| s.link.is_none()))
            .cloned()
            .collect();
    }

    fn maybe_advance_recovery(&mut self, state: &ClusterState) {
        if self.recovery == RecoveryState::Recovering
            && self.recovery_deadline.is_some()
            && self.awaited_workers.is_empty()
            && self.awaited_apps.is_empty()
        {
            self.complete_recovery(state);
        }
    }

    /// COMPLETING_RECOVERY: removes what never came back, applies configured queues, and
    /// becomes ALIVE once all of it is committed.
    fn complete_recovery(&mut self, state: &ClusterState) {
        self.recovery = RecoveryState::CompletingRecovery;
        for worker in std::mem::take(&mut self.awaited_workers) {
            // A worker whose registration is in flight is back, and a worker that fences may
            // still be killing its work: liveness watches both from here.
            let registering = self.workers.get(&worker).is_some_and(|s| s.link.is_some());
            let lost_now = state
                .workers()
                .get(&worker)
                .is_some_and(|w| w.state == WorkerState::Alive && w.fence_grace_ms.is_none());
            if !registering && lost_now {
                let reason = "did not reconnect after the master failover".to_owned();
                self.propose(
                    Op::WorkerLost(WorkerLost { id: worker, reason }),
                    Purpose::Completing,
                );
                self.completing += 1;
            }
        }
        for app in std::mem::take(&mut self.awaited_apps) {
            let attached = self.apps.get(&app).is_some_and(|s| s.link.is_some());
            if state.apps().contains_key(&app) && !attached {
                let op = Op::AppFinished(AppFinished {
                    id: app,
                    state: AppState::Finished,
                });
                self.propose(op, Purpose::Completing);
                self.completing += 1;
            }
        }
        if let Some(queues) = self.config.queues.clone() {
            let op = set_queues_op(queues);
            let request_id = configured_queues_request(&op);
            self.propose_with(op, Some(request_id), Purpose::Completing);
            self.completing += 1;
        }
        if self.completing == 0 {
            self.become_alive();
        }
    }

    fn completed_one(&mut self) {
        self.completing = self.completing.saturating_sub(1);
        if self.completing == 0 && self.recovery == RecoveryState::CompletingRecovery {
            self.become_alive();
        }
    }

    fn become_alive(&mut self) {
        tracing::info!(term = %self.term, "leader ALIVE");
        self.recovery = RecoveryState::Alive;
        self.pass_wanted = true;
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
        let Some(Peer::Worker(worker)) = self.links.get(&link).cloned() else {
            return None;
        };
        let Some(session) = self.workers.get_mut(&worker) else {
            self.close(link, Close::Reregister);
            return None;
        };
        if session.link != Some(link) {
            self.close(link, Close::Superseded);
            return None;
        }
        let dead = state
            .workers()
            .get(&worker)
            .is_some_and(|w| w.state == WorkerState::Dead);
        if session.registered && dead {
            self.workers.remove(&worker);
            self.close(link, Close::Reregister);
            return None;
        }
        session.heard = now;
        Some(worker)
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
        if let Some(old) = self.workers.get(&worker).and_then(|s| s.link) {
            self.close(old, Close::Superseded);
        }
        self.links.insert(link, Peer::Worker(worker.clone()));
        self.workers.insert(
            worker.clone(),
            WorkerSession {
                link: Some(link),
                heard: now,
                registered: false,
            },
        );
        // Reports first: what ended during the failover is in the log before reconciliation.
        for report in registration.reports {
            self.report(state, link, &worker, Some(report.seq), report.update);
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

    /// Writes one process change that `worker` reported to the log. A driver's start needs
    /// no entry (placement made it RUNNING already); a start of a driver the log does not
    /// place on that worker is stopped.
    fn report(
        &mut self,
        state: &ClusterState,
        link: LinkId,
        worker: &WorkerId,
        seq: Option<u64>,
        update: Update,
    ) {
        let process = update.process();
        let started = matches!(
            update,
            Update::Driver {
                state: DriverState::Running,
                ..
            } | Update::Executor {
                state: ExecutorState::Running,
                ..
            }
        );
        let op = match update {
            Update::Driver {
                driver,
                state: DriverState::Running,
                pid,
                ..
            } => {
                let placed_here = state
                    .drivers()
                    .get(&driver)
                    .is_some_and(|d| d.worker.as_ref() == Some(worker));
                if placed_here {
                    self.confirm_running(ProcessKey::Driver(driver), pid);
                } else {
                    self.send(link, ToWorker::KillDriver(driver));
                }
                if let Some(seq) = seq {
                    self.send(link, ToWorker::Acknowledged(vec![seq]));
                }
                return;
            }
            // Only the worker the log places a process on speaks for it; anything else is
            // settled without touching the log.
            Update::Driver { ref driver, .. }
                if state
                    .drivers()
                    .get(driver)
                    .is_none_or(|d| d.worker.as_ref() != Some(worker)) =>
            {
                if let Some(seq) = seq {
                    self.send(link, ToWorker::Acknowledged(vec![seq]));
                }
                return;
            }
            Update::Executor {
                ref app, executor, ..
            } if state
                .apps()
                .get(app)
                .and_then(|a| a.executors.get(&executor))
                .is_none_or(|e| &e.worker != worker) =>
            {
                if started {
                    self.send(link, ToWorker::KillExecutor(app.clone(), executor, None));
                }
                if let Some(seq) = seq {
                    self.send(link, ToWorker::Acknowledged(vec![seq]));
                }
                return;
            }
            Update::Driver {
                driver,
                state,
                exit_code,
                ..
            } => Op::DriverStateChanged(DriverStateChanged {
                driver,
                state,
                exit_code,
            }),
            Update::Executor {
                app,
                executor,
                state,
                exit_code,
                pid,
            } => {
                if state == ExecutorState::Running {
                    self.confirm_running(ProcessKey::Executor(app.clone(), executor), pid);
                }
                Op::ExecutorStateChanged(ExecutorStateChanged {
                    app,
                    executor,
                    state,
                    exit_code,
                })
            }
        };
        let purpose = Purpose::Report {
            link,
            worker: worker.clone(),
            seq,
            process,
            started,
        };
        self.propose(op, purpose);
    }

    fn confirm_running(&mut self, process: ProcessKey, pid: u32) {
        self.launches.remove(&process);
        if pid != 0 {
            self.pids.insert(process, pid);
        }
    }

    fn app_attached(&mut self, link: LinkId, app: AppId, ui_address: String, state: &ClusterState) {
        if let Some(old) = self.apps.get(&app).and_then(|s| s.link) {
            self.close(old, Close::Superseded);
        }
        self.links.insert(link, Peer::App(app.clone()));
        self.apps.insert(
            app.clone(),
            AppSession {
                link: Some(link),
                detached_at: None,
                ui_address,
            },
        );
        self.awaited_apps.remove(&app);
        self.actions.push(Action::ToApp {
            link,
            message: ToApp::Registered(app.clone()),
        });
        // The executors it holds, so a re-attached client starts from the truth.
        if let Some(held) = state.apps().get(&app) {
            for executor in held.executors.values() {
                self.actions.push(Action::ToApp {
                    link,
                    message: ToApp::Executor(executor.clone()),
                });
            }
        }
        self.pass_wanted = true;
    }

    fn app_request(&mut self, link: LinkId, request: AppRequest) {
        let Some(Peer::App(app)) = self.links.get(&link).cloned() else {
            return;
        };
        if self.apps.get(&app).and_then(|s| s.link) != Some(link) {
            self.close(link, Close::Superseded);
            return;
        }
        let op = match request {
            AppRequest::Heartbeat => {
                self.actions.push(Action::ToApp {
                    link,
                    message: ToApp::HeartbeatAck,
                });
                return;
            }
            AppRequest::Finish => Op::AppFinished(AppFinished {
                id: app,
                state: AppState::Finished,
            }),
            AppRequest::SetLimit(limit) => Op::SetExecutorLimit(SetExecutorLimit { app, limit }),
            AppRequest::Release(executors) => Op::KillExecutors(KillExecutors { app, executors }),
        };
        self.propose(op, Purpose::Other);
    }

    fn link_closed(&mut self, now: Instant, link: LinkId) {
        match self.links.remove(&link) {
            Some(Peer::Worker(worker)) => {
                if let Some(session) = self.workers.get_mut(&worker)
                    && session.link == Some(link)
                {
                    // Not lost yet: it has its timeout to come back.
                    session.link = None;
                }
            }
            Some(Peer::App(app)) => {
                if let Some(session) = self.apps.get_mut(&app)
                    && session.link == Some(link)
                {
                    session.link = None;
                    session.detached_at = Some(now);
                }
            }
            None => {}
        }
    }

    fn committed(
        &mut self,
        now: Instant,
        state: &ClusterState,
        proposal: ProposalId,
        result: Result<Response, ApplyError>,
    ) {
        let Some(purpose) = self.proposals.remove(&proposal) else {
            return;
        };
        let response = result.as_ref().ok();
        match purpose {
            Purpose::Report {
                link,
                worker,
                seq,
                process,
                started,
            } => {
                if let Some(response) = response {
                    self.carry_out(&response.effects, Some(&process), None);
                    if let ProcessKey::Executor(app, executor) = &process
                        && let Some(executor) = state
                            .apps()
                            .get(app)
                            .and_then(|a| a.executors.get(executor))
                            .filter(|e| e.state == ExecutorState::Running)
                    {
                        // A start has no effects; its app hears of it here.
                        self.tell_app(app, ToApp::Executor(executor.clone()));
                    }
                } else if started && !assigned(state, &process, &worker) {
                    // It runs, but the log no longer has it there: stop it.
                    self.send(link, kill(&process));
                }
                // A refused report (the process had already ended in the log) is settled too.
                if let Some(seq) = seq
                    && self.links.contains_key(&link)
                {
                    self.send(link, ToWorker::Acknowledged(vec![seq]));
                }
            }
            Purpose::Register {
                link,
                worker,
                running,
            } => match result {
                Ok(_) => self.reconcile(now, state, link, &worker, &running),
                Err(refused) => {
                    self.close(link, Close::Refused(refused.to_string()));
                    self.links.remove(&link);
                    self.workers.remove(&worker);
                }
            },
            Purpose::Lost { worker, link } => {
                self.losing.remove(&worker);
                if let Some(response) = response {
                    self.carry_out(&response.effects, None, None);
                }
                let current = self.workers.get(&worker).and_then(|s| s.link);
                if current == link {
                    // Still the stream it was lost on: it must register again.
                    self.workers.remove(&worker);
                    if let Some(link) = link {
                        self.close(link, Close::Reregister);
                    }
                } else if let Some(session) = self.workers.get_mut(&worker) {
                    // It registered again meanwhile; that registration, now after the loss in
                    // the log, reconciles it.
                    session.registered = false;
                }
            }
            Purpose::Completing => {
                if let Some(response) = response {
                    self.carry_out(&response.effects, None, None);
                }
                self.completed_one();
            }
            Purpose::Plan | Purpose::Grant => {
                if matches!(purpose, Purpose::Plan) {
                    self.pass_in_flight = false;
                } else {
                    self.grant_in_flight = false;
                    self.pass_wanted = true;
                }
                if let Some(Response {
                    outcome:
                        Outcome::PlanApplied {
                            drivers, executors, ..
                        },
                    ..
                }) = response
                {
                    for (driver, worker) in drivers {
                        self.launch(now, worker, ProcessKey::Driver(driver.clone()));
                    }
                    for (app, executor) in executors {
                        let key = ProcessKey::Executor(app.clone(), executor.id);
                        self.launch(now, &executor.worker, key);
                        self.tell_app(app, ToApp::Executor(executor.clone()));
                    }
                }
            }
            Purpose::Preempt { owners } => {
                self.preempt_in_flight = false;
                match &result {
                    Ok(response) => {
                        // Their drivers hear why before the processes are stopped.
                        let grace = self.keep_for();
                        for (app, executor) in &response.effects.ended_executors {
                            self.tell_app(app, ToApp::Preempted(executor.id, grace));
                        }
                        self.carry_out(&response.effects, None, Some(grace));
                        let until = now + grace;
                        for owner in owners {
                            self.kept.insert(owner, until);
                        }
                    }
                    // The state moved on since the choice; the next pass chooses again.
                    Err(refused) => tracing::info!(%refused, "preemption refused"),
                }
                self.pass_wanted = true;
            }
            Purpose::Drained { worker } => {
                self.decommissioning.remove(&worker);
                if let Some(response) = response {
                    self.carry_out(&response.effects, None, None);
                    self.pass_wanted = true;
                }
            }
            Purpose::Vanished { .. } | Purpose::Other => {
                if let Some(response) = response {
                    self.carry_out(&response.effects, None, None);
                    self.pass_wanted = true;
                }
            }
        }
    }

    /// Compares what a registered worker runs with what the log expects on it.
    fn reconcile(
        &mut self,
        now: Instant,
        state: &ClusterState,
        link: LinkId,
        worker: &WorkerId,
        running: &BTreeMap<ProcessKey, u32>,
    ) {
        let Some(session) = self.workers.get_mut(worker) else {
            return;
        };
        if session.link != Some(link) {
            // A newer stream registered since; it reconciles.
            return;
        }
        session.registered = true;
        self.awaited_workers.remove(worker);
        let mut expected: BTreeMap<ProcessKey, Option<ExecutorState>> = BTreeMap::new();
        for app in state.apps().values() {
            for executor in app.executors.values().filter(|e| &e.worker == worker) {
                expected.insert(
                    ProcessKey::Executor(app.id.clone(), executor.id),
                    Some(executor.state),
                );
            }
        }
        for driver in state.drivers().values() {
            if driver.worker.as_ref() == Some(worker) {
                expected.insert(ProcessKey::Driver(driver.id.clone()), None);
            }
        }
        for (process, pid) in running {
            match expected.get(process) {
                None => self.send(link, kill(process)),
                Some(executor_state) => {
                    self.confirm_running(process.clone(), *pid);
                    if let (ProcessKey::Executor(app, executor), Some(ExecutorState::Launching)) =
                        (process, executor_state)
                    {
                        let update = Update::Executor {
                            app: app.clone(),
                            executor: *executor,
                            state: ExecutorState::Running,
                            exit_code: None,
                            pid: *pid,
                        };
                        self.report(state, link, worker, None, update);
                    }
                }
            }
        }
        for (process, executor_state) in expected {
            if running.contains_key(&process) {
                continue;
            }
            let op = match (&process, executor_state) {
                // Never started here (the worker's reports are in the log already, so it did
                // not end either): start it now.
                (ProcessKey::Executor(..), Some(ExecutorState::Launching))
                | (ProcessKey::Driver(_), _) => {
                    self.launch(now, worker, process.clone());
                    continue;
                }
                (ProcessKey::Executor(app, executor), _) => {
                    Op::ExecutorStateChanged(ExecutorStateChanged {
                        app: app.clone(),
                        executor: *executor,
                        state: ExecutorState::Lost,
                        exit_code: None,
                    })
                }
            };
            self.propose(
                op,
                Purpose::Report {
                    link,
                    worker: worker.clone(),
                    seq: None,
                    process,
                    started: false,
                },
            );
        }
        self.send(link, ToWorker::Registered);
        self.pass_wanted = true;
    }

    /// Sends a launch (again) and waits for its RUNNING report.
    fn launch(&mut self, now: Instant, worker: &WorkerId, process: ProcessKey) {
        let attempts = self.launches.get(&process).map_or(0, |l| l.attempts) + 1;
        self.launches.insert(
            process.clone(),
            Launch {
                worker: worker.clone(),
                sent: now,
                attempts,
            },
        );
        let message = match process {
            ProcessKey::Executor(app, executor) => ToWorker::LaunchExecutor(app, executor),
            ProcessKey::Driver(driver) => ToWorker::LaunchDriver(driver),
        };
        if let Some(link) = self.workers.get(worker).and_then(|s| s.link) {
            self.send(link, message);
        }
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
            self.pids.remove(&process);
            self.launches.remove(&process);
            self.tell_app(app, ToApp::Executor(executor.clone()));
            if reported != Some(&process) {
                let kill = ToWorker::KillExecutor(app.clone(), executor.id, kill_grace);
                self.tell_worker(&executor.worker, kill);
            }
        }
        for (driver, worker, _) in &effects.ended_drivers {
            let process = ProcessKey::Driver(driver.clone());
            self.pids.remove(&process);
            self.launches.remove(&process);
            if let Some(worker) = worker
                && reported != Some(&process)
            {
                self.tell_worker(worker, ToWorker::KillDriver(driver.clone()));
            }
        }
        for (app, state) in &effects.removed_apps {
            self.finishing.remove(app);
            self.awaited_apps.remove(app);
            if let Some(link) = self.apps.remove(app).and_then(|s| s.link) {
                self.links.remove(&link);
                self.actions.push(Action::ToApp {
                    link,
                    message: ToApp::Ended(*state),
                });
            }
        }
        if !effects.ended_executors.is_empty() || !effects.ended_drivers.is_empty() {
            self.pass_wanted = true;
        }
    }

    /// How long `worker` may be silent before it is lost: the worker timeout, and for a
    /// worker that fences, its kill grace and [`FENCE_MARGIN`] more, so that its own kills
    /// are done before anything of it is relaunched elsewhere.
    fn loss_timeout(&self, worker: &muster_state::model::Worker) -> Duration {
        let fence = worker.fence_grace_ms.map_or(Duration::ZERO, |grace| {
            Duration::from_millis(grace) + FENCE_MARGIN
        });
        self.config.worker_timeout + fence
    }

    /// Every worker the log has ALIVE must be heard from within its loss timeout.
    fn check_liveness(&mut self, now: Instant, state: &ClusterState) {
        // A worker this leader has never heard from is counted from the first check.
        let alive_at = *self.alive_at.get_or_insert(now);
        let silent: Vec<(WorkerId, Duration)> = state
            .workers()
            .values()
            .filter(|w| w.state == WorkerState::Alive && !self.losing.contains(&w.id))
            .filter_map(|w| {
                let timeout = self.loss_timeout(w);
                let heard = self.workers.get(&w.id).map_or(alive_at, |s| s.heard);
                (now.saturating_duration_since(heard) > timeout).then(|| (w.id.clone(), timeout))
            })
            .collect();
        for (worker, timeout) in silent {
            self.losing.insert(worker.clone());
            let reason = format!("no heartbeat for {timeout:?}");
            self.propose(
                Op::WorkerLost(WorkerLost {
                    id: worker.clone(),
                    reason,
                }),
                Purpose::Lost {
                    link: self.workers.get(&worker).and_then(|s| s.link),
                    worker,
                },
            );
        }
    }

    fn finish_vanished_apps(&mut self, now: Instant, state: &ClusterState) {
        let grace = self.config.app_grace;
        let vanished: Vec<AppId> = self
            .apps
            .iter()
            .filter(|(app, s)| {
                s.link.is_none()
                    && s.detached_at
                        .is_some_and(|at| now.saturating_duration_since(at) >= grace)
                    && !self.finishing.contains(*app)
                    && state.apps().contains_key(*app)
            })
            .map(|(app, _)| app.clone())
            .collect();
        for app in vanished {
            self.finishing.insert(app.clone());
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
        let due: Vec<(ProcessKey, Launch)> = self
            .launches
            .iter()
            .filter(|(_, l)| now.saturating_duration_since(l.sent) >= timeout)
            .map(|(p, l)| (p.clone(), l.clone()))
            .collect();
        for (process, launch) in due {
            let still_expected = match &process {
                ProcessKey::Executor(app, executor) => state
                    .apps()
                    .get(app)
                    .and_then(|a| a.executors.get(executor))
                    .is_some_and(|e| e.state == ExecutorState::Launching),
                ProcessKey::Driver(driver) => state
                    .drivers()
                    .get(driver)
                    .is_some_and(|d| d.worker.as_ref() == Some(&launch.worker)),
            };
            if !still_expected {
                self.launches.remove(&process);
            } else if launch.attempts < LAUNCH_ATTEMPTS {
                self.launch(now, &launch.worker, process);
            } else if let ProcessKey::Executor(app, executor) = &process {
                self.launches.remove(&process);
                let op = Op::ExecutorStateChanged(ExecutorStateChanged {
                    app: app.clone(),
                    executor: *executor,
                    state: ExecutorState::Lost,
                    exit_code: None,
                });
                self.propose(op, Purpose::Other);
            } else {
                // A driver keeps its place until its worker reports or is lost.
                self.launches.remove(&process);
            }
        }
    }

    /// Runs a scheduling pass when one is wanted or due, and none is in flight.
    fn maybe_schedule(&mut self, now: Instant, state: &ClusterState) {
        if self.recovery != RecoveryState::Alive {
            return;
        }
        self.maybe_grant(now, state);
        if self.pass_in_flight {
            return;
        }
        let due = self
            .last_pass
            .is_none_or(|last| now.saturating_duration_since(last) >= self.config.schedule_tick);
        if !(self.pass_wanted || due) {
            return;
        }
        self.pass_wanted = false;
        self.last_pass = Some(now);
        self.schedule(now, state);
    }

    /// One pass: plan from the state and propose the plan; with nothing to place, maybe a
    /// preemption.
    fn schedule(&mut self, now: Instant, state: &ClusterState) {
        assert_eq!(
            self.recovery,
            RecoveryState::Alive,
            "schedule() runs only in ALIVE"
        );
        self.passes += 1;
        // Each pass draws its drivers' starting worker afresh, from the term and the pass
        // number; the plan carries the outcome, so replicas never need the seed.
        let pass = PassConfig {
            seed: self.term.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ self.passes,
            ..self.config.pass.clone()
        };
        let snapshot = state.scheduling_snapshot(pass);
        let plan = match muster_core::schedule(&snapshot) {
            Ok(plan) => plan,
            Err(error) => panic!("the state gave an invalid scheduling snapshot: {error}"),
        };
        self.waiting = plan
            .waiting
            .iter()
            .map(|w| (w.id.clone(), w.reason.to_string()))
            .collect();
        self.waiting_reasons.clear();
        for waiting in &plan.waiting {
            *self
                .waiting_reasons
                .entry(waiting.reason.code())
                .or_default() += 1;
        }
        self.note_room_waits(now, &snapshot, &plan);
        if plan.drivers.is_empty() && plan.executors.is_empty() {
            // Nothing else can move: the only way prior work that waits gets room.
            self.maybe_preempt(now, state, &snapshot);
            return;
        }
        self.pass_in_flight = true;
        let op = Op::ApplyPlan(ApplyPlan {
            drivers: plan.drivers,
            executors: plan.executors,
        });
        self.propose(op, Purpose::Plan);
    }

    /// Decommissions each draining worker once nothing runs on it, or once its kill-after
    /// (as the log has it now) has passed by this leader's clock, counted from when this
    /// leader first saw the drain; decommissioning kills what still runs. A worker being
    /// lost is left to its loss.
    fn finish_drains(&mut self, now: Instant, state: &ClusterState) {
        let draining = state.draining();
        self.drains_seen.retain(|w, _| draining.contains_key(w));
        for (id, drain) in draining {
            if self.decommissioning.contains(id) || self.losing.contains(id) {
                continue;
            }
            let seen = *self.drains_seen.entry(id.clone()).or_insert(now);
            let due = drain
                .kill_after_ms
                .is_some_and(|ms| now >= seen + Duration::from_millis(ms));
            let empty = state
                .workers()
                .get(id)
                .is_none_or(|w| w.executors.is_empty() && w.drivers.is_empty());
            if empty || due {
                self.decommissioning.insert(id.clone());
                let op = Op::DecommissionWorker(DecommissionWorker { id: id.clone() });
                self.propose(op, Purpose::Drained { worker: id.clone() });
            }
        }
    }

    /// How long preempted room is kept: the policy's grace, or without a policy (room kept
    /// under an earlier leader's) the workers' default kill grace.
    fn keep_for(&self) -> Duration {
        self.config
            .preemption
            .as_ref()
            .map_or(DEFAULT_KEEP, |policy| policy.grace)
    }

    /// Grants the room kept in the log to its owners once their grace has passed by this
    /// leader's clock; a leader that finds room kept gives it a whole grace first. An owner
    /// granted its room waits a whole delay again before it may preempt again.
    fn maybe_grant(&mut self, now: Instant, state: &ClusterState) {
        let owners: BTreeSet<&WorkId> = state.reservations().iter().map(|r| &r.owner).collect();
        self.kept.retain(|owner, _| owners.contains(owner));
        let keep = self.keep_for();
        for owner in owners {
            self.kept.entry(owner.clone()).or_insert(now + keep);
        }
        if self.grant_in_flight {
            return;
        }
        let due: Vec<WorkId> = self
            .kept
            .iter()
            .filter(|(_, until)| now >= **until)
            .map(|(owner, _)| owner.clone())
            .collect();
        if due.is_empty() {
            return;
        }
        for owner in &due {
            self.room_waits.remove(owner);
        }
        self.grant_in_flight = true;
        let op = Op::GrantReservations(GrantReservations { owners: due });
        self.propose(op, Purpose::Grant);
    }

    /// Notes since when the work of preempting queues has waited for room.
    fn note_room_waits(&mut self, now: Instant, snapshot: &Snapshot, plan: &Plan) {
        let Some(policy) = &self.config.preemption else {
            return;
        };
        let queues: BTreeMap<WorkId, &QueueName> = snapshot
            .apps
            .iter()
            .map(|a| (WorkId::App(a.id.clone()), &a.queue))
            .chain(
                snapshot
                    .drivers
                    .iter()
                    .map(|d| (WorkId::Driver(d.id.clone()), &d.queue)),
            )
            .collect();
        let for_room: BTreeSet<&WorkId> = plan
            .waiting
            .iter()
            .filter(|w| {
                matches!(
                    w.reason,
                    WaitReason::NoRoom { .. } | WaitReason::HeldByThreshold { .. }
                )
            })
            // A preempting queue that is not prior (any more) preempts nothing; with
            // capacities, any ordinary queue's application may preempt for its guarantee.
            .filter(|w| {
                queues.get(&w.id).is_some_and(|&q| {
                    let prior = snapshot.queues.iter().any(|c| &c.name == q && c.prior);
                    let ordinary_app = !prior && matches!(w.id, WorkId::App(_));
                    (prior && policy.queues.contains(q)) || (policy.capacities && ordinary_app)
                })
            })
            .map(|w| &w.id)
            .collect();
        self.room_waits.retain(|id, _| for_room.contains(id));
        for id in for_room {
            self.room_waits.entry(id.clone()).or_insert(now);
        }
    }

    /// Proposes the preemption `muster_core::preempt` chooses for the work that has waited
    /// for room past the delay and has no room kept for it yet: one at a time.
    fn maybe_preempt(&mut self, now: Instant, state: &ClusterState, snapshot: &Snapshot) {
        let Some(policy) = &self.config.preemption else {
            return;
        };
        if self.preempt_in_flight {
            return;
        }
        let kept: BTreeSet<&WorkId> = state.reservations().iter().map(|r| &r.owner).collect();
        let eligible: BTreeSet<WorkId> = self
            .room_waits
            .iter()
            .filter(|(id, since)| {
                now.saturating_duration_since(**since) >= policy.delay && !kept.contains(id)
            })
            .map(|(id, _)| id.clone())
            .collect();
        if eligible.is_empty() {
            return;
        }
        // Prior work first; then, with capacities, ordinary work below its guarantee, of
        // queues without room kept for them already.
        let waits_for_guarantee: BTreeSet<WorkId> = eligible
            .iter()
            .filter(|id| match id {
                WorkId::App(app) => state
                    .apps()
                    .get(app)
                    .is_some_and(|a| !state.room_kept_for_queue(&a.desc.queue)),
                WorkId::Driver(_) => false,
            })
            .cloned()
            .collect();
        let choose = |preempting| {
            let eligible = match preempting {
                Preempting::Prior => &eligible,
                Preempting::BelowGuarantee => &waits_for_guarantee,
            };
            muster_core::preempt::choose(snapshot, eligible, policy.max_fraction, preempting)
                .unwrap_or_else(|error| {
                    panic!("the state gave an invalid scheduling snapshot: {error}")
                })
                .map(|chosen| (chosen, preempting))
        };
        let chosen = choose(Preempting::Prior).or_else(|| {
            policy
                .capacities
                .then(|| choose(Preempting::BelowGuarantee))
                .flatten()
        });
        let Some((chosen, preempting)) = chosen else {
            return;
        };
        let preempt = Preempt::chosen(chosen, millis(policy.grace));
        let owners = preempt
            .reservations
            .iter()
            .map(|r| r.owner.clone())
            .collect();
        let op = match preempting {
            Preempting::Prior => Op::Preempt(preempt),
            Preempting::BelowGuarantee => Op::PreemptForGuarantees(preempt),
        };
        self.preempt_in_flight = true;
        self.propose(op, Purpose::Preempt { owners });
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
        if let Some(link) = self.workers.get(worker).and_then(|s| s.link) {
            self.send(link, message);
        }
    }

    fn tell_app(&mut self, app: &AppId, message: ToApp) {
        if let Some(link) = self.apps.get(app).and_then(|s| s.link) {
            self.actions.push(Action::ToApp { link, message });
        }
    }

    fn close(&mut self, link: LinkId, reason: Close) {
        self.links.remove(&link);
        self.actions.push(Action::Close { link, reason });
    }
}

/// Whether the log has `process` live on `worker`.
fn assigned(state: &ClusterState, process: &ProcessKey, worker: &WorkerId) -> bool {
    match process {
        ProcessKey::Executor(app, executor) => state
            .apps()
            .get(app)
            .and_then(|a| a.executors.get(executor))
            .is_some_and(|e| &e.worker == worker),
        ProcessKey::Driver(driver) => state
            .drivers()
            .get(driver)
            .is_some_and(|d| d.worker.as_ref() == Some(worker)),
    }
}

/// The kill for a process the log does not know.
/// The worker the log has `process` running on, if any.
fn placed_on<'s>(state: &'s ClusterState, process: &ProcessKey) -> Option<&'s WorkerId> {
    match process {
        ProcessKey::Executor(app, id) => Some(&state.apps().get(app)?.executors.get(id)?.worker),
        ProcessKey::Driver(id) => state.drivers().get(id)?.worker.as_ref(),
    }
}

fn kill(process: &ProcessKey) -> ToWorker {
    match process {
        ProcessKey::Executor(app, executor) => ToWorker::KillExecutor(app.clone(), *executor, None),
        ProcessKey::Driver(driver) => ToWorker::KillDriver(driver.clone()),
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
