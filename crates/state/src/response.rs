//! What applying a command returns: its outcome, the effects the leader must carry out once
//! the command is committed, or a deterministic error that left the state unchanged.

use muster_core::InputError;
use muster_core::ids::{AppId, DriverId, ExecutorId, QueueName, Term, WorkerId};
use muster_core::model::WorkerState;
use muster_core::resources::Shortfall;
use serde::{Deserialize, Serialize};

use crate::model::{AppState, DriverState, Executor};

/// The result of one applied command.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// What the command produced.
    pub outcome: Outcome,
    /// What the leader must tell workers and apps now that it happened.
    pub effects: Effects,
}

/// What a command produced.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub enum Outcome {
    /// The command changed what it said; nothing more to report.
    #[default]
    Done,
    /// A worker registered; `duplicate` when it was already known (a reconnect).
    WorkerRegistered {
        /// Whether the worker id was already known.
        duplicate: bool,
    },
    /// An application was accepted under this id.
    AppSubmitted {
        /// Its new id.
        id: AppId,
    },
    /// A driver was accepted under this id.
    DriverSubmitted {
        /// Its new id.
        id: DriverId,
    },
    /// A scheduling pass was applied: what launched, and what no longer fitted.
    PlanApplied {
        /// Drivers now RUNNING, with their workers.
        drivers: Vec<(DriverId, WorkerId)>,
        /// Executors now LAUNCHING, with their apps.
        executors: Vec<(AppId, Executor)>,
        /// Grants and launches refused by the re-check.
        rejected: Vec<Rejected>,
    },
    /// Some executors named in a kill request were not live.
    ExecutorsKilled {
        /// Ids that named no live executor of the app.
        unknown: Vec<ExecutorId>,
    },
    /// Executors were stopped for prior work.
    Preempted {
        /// How many.
        victims: usize,
    },
    /// A batch's commands' results, in order.
    Batch(Vec<Result<Response, ApplyError>>),
    /// A user was added: the generation of their credential.
    UserAdded {
        /// Their name.
        name: String,
        /// The generation their credential is derived with.
        generation: u64,
    },
    /// An application's priority was set (from log format 4).
    Prioritized {
        /// The priority it has now: the one asked for, or its queue's maximum if lower.
        priority: i32,
    },
}

/// A part of a plan that the re-check refused: a driver's launch, or a grant's executors
/// from the first that no longer fitted on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejected {
    /// The driver or app the grant was for.
    pub id: String,
    /// The worker it was for.
    pub worker: WorkerId,
    /// Why it was refused.
    pub reason: Rejection,
}

/// Why the re-check refused a driver launch or an executor grant: the state moved on since
/// the pass was decided.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Rejection {
    /// The driver is no longer active.
    #[error("unknown or finished driver")]
    UnknownDriver,
    /// The driver no longer waits for a worker.
    #[error("the driver is already {0}")]
    DriverNotWaiting(DriverState),
    /// The application is no longer active.
    #[error("unknown or finished application")]
    UnknownApp,
    /// The grant's cores, memory or resources are not the application's executor size.
    #[error("the grant does not match the app's executor size")]
    NotTheExecutorSize,
    /// The application already holds its `cores_max`.
    #[error("the app already holds {held} of its {max} cores")]
    CoresMax {
        /// Cores it holds.
        held: u64,
        /// Its `cores_max`.
        max: u32,
    },
    /// The application holds as many executors as its limit allows.
    #[error("the app is at its executor limit of {limit}")]
    ExecutorLimit {
        /// Its executor limit.
        limit: u32,
    },
    /// No such worker.
    #[error("unknown worker")]
    UnknownWorker,
    /// The worker is not ALIVE.
    #[error("the worker is {0}")]
    WorkerNotAlive(WorkerState),
    /// The worker lacks room.
    #[error("the worker has {0}")]
    NoRoom(Shortfall),
    /// The worker is being drained: it takes no new work.
    #[error("the worker is being drained")]
    Draining,
    /// The application is a gang that holds none of its executors, and not all of this
    /// plan's grants to it fit any more: it is granted none of them (from log format 4).
    #[error("not all of the gang's grants fit any more: none is granted")]
    GangNoLongerFits,
}

/// Consequences of a command that reach outside the state machine. The leader acts on them
/// only after the command is committed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Effects {
    /// Executors that ended, in their final state and with their exit code when they exited:
    /// their apps must hear of it, and their workers must stop them when they may still run.
    pub ended_executors: Vec<(AppId, Executor)>,
    /// Drivers that ended, with the worker they ran on and their final state.
    pub ended_drivers: Vec<(DriverId, Option<WorkerId>, DriverState)>,
    /// Supervised drivers resubmitted under a new id: (old id, new id).
    pub relaunched_drivers: Vec<(DriverId, DriverId)>,
    /// Apps that ended, with their final state.
    pub removed_apps: Vec<(AppId, AppState)>,
}

/// Why a command was refused. Always deterministic: every replica refuses the same command
/// the same way, and the state is left unchanged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
pub enum ApplyError {
    /// No such worker.
    #[error("unknown worker `{0}`")]
    UnknownWorker(WorkerId),
    /// No such active app.
    #[error("unknown or finished application `{0}`")]
    UnknownApp(AppId),
    /// No such active driver.
    #[error("unknown or finished driver `{0}`")]
    UnknownDriver(DriverId),
    /// No such live executor.
    #[error("unknown or ended executor {1} of `{0}`")]
    UnknownExecutor(AppId, ExecutorId),
    /// No such queue.
    #[error("unknown queue `{0}`")]
    UnknownQueue(QueueName),
    /// A field is malformed: zero resources, a fraction outside (0, 1], ...
    #[error("{field}: {message}")]
    Invalid {
        /// The field's path.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// The command does not apply to the thing's current state.
    #[error("{0}")]
    Conflict(String),
    /// A leader decided the command in term `decided`, but it reached the log in the later
    /// term `entry`.
    #[error("decided by the leader of term {decided}, but written in term {entry}")]
    StaleTerm {
        /// The term of the session that decided it.
        decided: Term,
        /// The term of the log entry that carries it.
        entry: Term,
    },
    /// A batch applies only as a log entry's command, and holds no batch.
    #[error("a batch of commands applies only as a whole log entry")]
    Batch,
    /// The user who asked may not do this, or their credential was revoked.
    #[error("{0}")]
    Denied(String),
}

impl From<InputError> for ApplyError {
    fn from(error: InputError) -> Self {
        Self::Invalid {
            field: error.field,
            message: error.message,
        }
    }
}
