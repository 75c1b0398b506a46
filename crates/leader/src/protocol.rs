//! What the leader and its session say to each other: the events it reacts to, the actions it
//! takes, and the messages those carry to workers and applications.

use std::collections::BTreeMap;
use std::time::Duration;

use muster_core::agent::{Build, ShuffleServiceStatus};
use muster_core::ids::{AppId, DriverId, ExecutorId, RequestId, WorkerId};
use muster_core::resources::{ResourceAddresses, Usage};
use muster_core::restarts::Restarts;
use muster_state::commands::RegisterWorker;
use muster_state::model::{AppState, DriverState, Executor, ExecutorState, Owner, Profile};
use muster_state::{ApplyError, Effects, Op, Response, Stopped};

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

impl From<&Stopped> for ProcessKey {
    fn from(stopped: &Stopped) -> Self {
        match stopped {
            Stopped::Executor(app, executor) => Self::Executor(app.clone(), *executor),
            Stopped::Driver(driver) => Self::Driver(driver.clone()),
        }
    }
}

impl ProcessKey {
    /// The message that starts it on its worker.
    pub fn launch(self) -> ToWorker {
        match self {
            Self::Executor(app, executor) => ToWorker::LaunchExecutor(app, executor),
            Self::Driver(driver) => ToWorker::LaunchDriver(driver),
        }
    }

    /// The message that stops it on its worker, within the worker's own kill grace.
    pub fn kill(&self) -> ToWorker {
        match self {
            Self::Executor(app, executor) => ToWorker::KillExecutor(app.clone(), *executor, None),
            Self::Driver(driver) => ToWorker::KillDriver(driver.clone()),
        }
    }
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
    /// A driver started (RUNNING, with its pid) or ended; or, supervised, it failed and
    /// waits to start again (RUNNING without a pid).
    Driver {
        /// The driver.
        driver: DriverId,
        /// RUNNING, FINISHED, FAILED, KILLED or ERROR.
        state: DriverState,
        /// The exit code, when it exited.
        exit_code: Option<i32>,
        /// Its process id, when it runs.
        pid: u32,
        /// Its restarts on its worker, when it was started again.
        restarts: Option<Restarts<Duration>>,
    },
}

/// A process a registering worker runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunningProcess {
    /// Its process id.
    pub pid: u32,
    /// A supervised driver's restarts, when it was started again.
    pub restarts: Option<Restarts<Duration>>,
}

impl Update {
    /// The process it is about.
    pub fn process(&self) -> ProcessKey {
        match self {
            Self::Executor { app, executor, .. } => ProcessKey::Executor(app.clone(), *executor),
            Self::Driver { driver, .. } => ProcessKey::Driver(driver.clone()),
        }
    }

    /// Whether it says the process started.
    pub fn started(&self) -> bool {
        matches!(
            self,
            Self::Driver {
                state: DriverState::Running,
                ..
            } | Self::Executor {
                state: ExecutorState::Running,
                ..
            }
        )
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
    /// What it runs now.
    pub running: BTreeMap<ProcessKey, RunningProcess>,
    /// Reports no leader has acknowledged, oldest first.
    pub reports: Vec<Report>,
    /// The build its agent runs, if it said (agents of release 0.1.0 do not).
    pub build: Option<Build>,
    /// Its shuffle service, when it runs one.
    pub shuffle_service: Option<ShuffleServiceStatus>,
    /// The Spark its drivers run Spark submissions with, if it said (agents of release
    /// 0.3.0 and before do not); empty when it has none.
    pub spark_home: Option<String>,
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
    /// Stage-level scheduling: the executors of resource profile `id` it wants, and their
    /// size.
    SetProfileLimit(u32, Profile),
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
        /// Its shuffle service, when it runs one.
        shuffle_service: Option<ShuffleServiceStatus>,
        /// The applications whose data it keeps.
        apps_with_data: Vec<AppId>,
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
        /// The cluster-mode driver that runs it, as the client said.
        driver: Option<DriverId>,
        /// The named user it attached as: its requests are theirs, and stop when their
        /// credential is revoked.
        user: Option<Owner>,
        /// The executors its client has not seen end (on a re-attach).
        believed_live: Vec<ExecutorId>,
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
    /// A client's drain of a worker was committed.
    WorkerDrained {
        /// The worker.
        worker: WorkerId,
        /// How long what runs there may take; `None`: as long as it takes.
        kill_after: Option<Duration>,
    },
}

/// A message for a worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToWorker {
    /// Its registration is in the log and reconciled.
    Registered,
    /// The answer to a heartbeat.
    HeartbeatAck,
    /// These applications, whose data the worker keeps, have ended: it may remove it.
    AppsEnded(Vec<AppId>),
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
    /// This executor's worker is drained: it is killed after this long, if at all.
    Draining(ExecutorId, Option<Duration>),
    /// The masters refused the application's request for executors of this resource
    /// profile, for this reason.
    ProfileRefused(u32, String),
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
    /// The credential the stream was opened with no longer holds.
    Denied(String),
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
