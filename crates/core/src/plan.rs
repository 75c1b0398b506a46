//! The output of a scheduling pass: driver launches, executor grants in the order they were
//! made, and the reason each app or driver still waits.

use std::fmt;

use serde::{Deserialize, Serialize, Serializer};

use crate::ids::{AppId, DriverId, QueueName, WorkId, WorkerId};
use crate::resources::Resources;

/// One scheduling pass's decisions. The master commits it as one log entry; nothing in it
/// has happened until then.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Plan {
    /// Drivers to launch, in the order they were placed.
    pub drivers: Vec<DriverLaunch>,
    /// Executors to launch, in the order they were granted; the executors of one size that
    /// an app got on a worker at once share an entry.
    pub executors: Vec<ExecutorGrant>,
    /// Drivers, then apps, that still wait after this pass, each with the reason.
    pub waiting: Vec<Waiting>,
    /// Room the pass kept for a gang that waits for all of its minimum to fit, nobody else
    /// taking it: what it will be granted once the rest frees. Passes keep it again, from
    /// the state, as long as the gang waits; nothing of it is in the log.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reserved: Vec<Reserved>,
}

/// Room kept on a worker for a waiting gang.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reserved {
    /// The gang's application.
    pub app: AppId,
    /// The worker.
    pub worker: WorkerId,
    /// All that is kept there: whole executors of the gang's size.
    pub resources: Resources,
}

/// A driver placed on a worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverLaunch {
    /// The driver.
    pub driver: DriverId,
    /// The worker that runs it.
    pub worker: WorkerId,
}

/// Executors of one size granted to an app on a worker at once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorGrant {
    /// The app that receives the executors.
    pub app: AppId,
    /// The worker that runs them.
    pub worker: WorkerId,
    /// Each executor's cores, memory and custom resources.
    pub resources: Resources,
    /// How many executors, one or more.
    pub count: u32,
    /// The app's resource profile they are of; 0 for the app's own size.
    #[serde(default, skip_serializing_if = "is_own_size")]
    pub profile: u32,
}

pub(crate) fn is_own_size(profile: &u32) -> bool {
    *profile == 0
}

/// An app or driver left waiting. An app waits while it could use another executor of its
/// shape (its `cores_max` is not reached); a driver waits until it is placed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Waiting {
    /// The app or driver.
    pub id: WorkId,
    /// Why it waits, phrased for the person who submitted it.
    #[serde(serialize_with = "display")]
    pub reason: WaitReason,
}

fn display<S: Serializer>(value: &impl fmt::Display, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}

/// What a wait reason is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A driver.
    Driver,
    /// One executor of an app.
    Executor,
}

impl fmt::Display for Kind {
    /// The kind with its indefinite article: "a driver", "an executor".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Driver => "a driver",
            Self::Executor => "an executor",
        })
    }
}

/// The resource a queue's driver share binds on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShareBound {
    /// Cores.
    Cores,
    /// Memory, in MB.
    Memory,
}

impl fmt::Display for ShareBound {
    /// The unit amounts of it are counted in: `cores`, `MB`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Cores => "cores",
            Self::Memory => "MB",
        })
    }
}

/// Why something waits, most actionable cause first.
#[derive(Clone, Debug, PartialEq)]
pub enum WaitReason {
    /// `max_drivers` drivers already run.
    MaxDrivers {
        /// The configured cap.
        max: u32,
    },
    /// The driver's queue runs drivers and they hold all the room its driver share allows.
    DriverShare {
        /// The queue.
        queue: QueueName,
        /// The resource the share binds on.
        bound: ShareBound,
        /// What the queue's running drivers hold of it, those launched in this pass
        /// included: cores, or memory in MB.
        held: u64,
        /// What they may hold: the share of the queue's room, rounded down.
        allowed: u64,
        /// The queue's driver share.
        share: f64,
    },
    /// No worker is ALIVE.
    NoAliveWorker,
    /// A Spark submission's driver, and no ALIVE worker has Spark.
    NoSparkWorker,
    /// Even an empty ALIVE worker could not hold one unit of the demand.
    LargerThanAnyWorker {
        /// What waits.
        kind: Kind,
        /// What one of it needs.
        need: Resources,
    },
    /// The app is a gang that holds no executor yet, and not all of its minimum fit at once.
    Gang {
        /// The executors it must be granted at once.
        minimum: u64,
        /// How many of them fit now.
        fit: u64,
    },
    /// The app is a gang that waits for all of its minimum to fit, and the room of some of
    /// it is kept for it meanwhile (see [`Plan::reserved`]).
    GangReserved {
        /// The executors it must be granted at once.
        minimum: u64,
        /// How many of them the kept room holds.
        reserved: u64,
    },
    /// The driver's application is a gang, and the driver and all of the gang's minimum do
    /// not fit at once.
    DriverGang {
        /// The executors the gang needs at once.
        minimum: u64,
        /// How many of them fit beside the driver now.
        fit: u64,
    },
    /// The driver and its application's first executor do not fit at once: a cluster-mode
    /// driver starts only beside room for it, so that drivers never hold the room their
    /// executors need.
    FirstExecutor,
    /// The app holds as many executors as its limit allows.
    ExecutorLimit {
        /// The app's executor limit.
        limit: u32,
        /// Executors the app holds, those granted in this pass included.
        held: u64,
    },
    /// The app's (normal) queue, or one of its parents, holds all the cores its
    /// `max_capacity` allows.
    QueueAtCapacity {
        /// The queue.
        queue: QueueName,
        /// Executor cores the queue holds.
        used: u64,
        /// Its maximum in cores: the product of `max_capacity` along its path times the
        /// total ALIVE cores, rounded down.
        capacity: u64,
    },
    /// Room exists only on workers that run prior work, beyond the queue's threshold.
    HeldByThreshold {
        /// What waits.
        kind: Kind,
        /// What one of it needs.
        need: Resources,
        /// The normal queue.
        queue: QueueName,
        /// Its threshold.
        threshold: f64,
    },
    /// No ALIVE worker has the room now.
    NoRoom {
        /// What waits.
        kind: Kind,
        /// What one of it needs.
        need: Resources,
    },
    /// No ALIVE worker has room for the app's next executor now, and apps of a higher
    /// priority in its queue hold executors (granted in this pass or before).
    BehindPriority {
        /// The highest priority of them.
        priority: i32,
        /// What one of its executors needs.
        need: Resources,
    },
    /// No ALIVE worker has room for the app's next executor now, its user holds at least
    /// the most its queue lets one user hold while others' apps could take more, and another
    /// user below that has apps waiting there: theirs are served first.
    AtUserLimit {
        /// The user.
        user: String,
        /// The queue.
        queue: QueueName,
        /// The cores its apps of the queue hold.
        held: u64,
        /// The cores one user may hold there.
        limit: u64,
        /// What one of its executors needs.
        need: Resources,
    },
}

impl WaitReason {
    /// Whether it waits for room that stopping executors could free: none is free now where
    /// its queue may take it, or not all of a gang's minimum is.
    pub fn is_for_room(&self) -> bool {
        matches!(
            self,
            Self::NoRoom { .. }
                | Self::BehindPriority { .. }
                | Self::AtUserLimit { .. }
                | Self::HeldByThreshold { .. }
                | Self::Gang { .. }
                | Self::GangReserved { .. }
                | Self::DriverGang { .. }
                | Self::FirstExecutor
        )
    }

    /// The reason's kind, as a metric label: `no_room`, `held_by_threshold`, ...
    pub fn code(&self) -> &'static str {
        match self {
            Self::MaxDrivers { .. } => "max_drivers",
            Self::DriverShare { .. } => "driver_share",
            Self::NoAliveWorker => "no_alive_worker",
            Self::NoSparkWorker => "no_spark_worker",
            Self::LargerThanAnyWorker { .. } => "larger_than_any_worker",
            Self::Gang { .. } => "gang",
            Self::GangReserved { .. } => "gang_reserved",
            Self::DriverGang { .. } => "driver_gang",
            Self::FirstExecutor => "first_executor",
            Self::ExecutorLimit { .. } => "executor_limit",
            Self::QueueAtCapacity { .. } => "queue_at_capacity",
            Self::HeldByThreshold { .. } => "held_by_threshold",
            Self::NoRoom { .. } => "no_room",
            Self::BehindPriority { .. } => "behind_priority",
            Self::AtUserLimit { .. } => "at_user_limit",
        }
    }
}

impl fmt::Display for WaitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MaxDrivers { max } => {
                write!(f, "max_drivers reached: {max} drivers already running")
            }
            Self::DriverShare {
                queue,
                bound,
                held,
                allowed,
                share,
            } => write!(
                f,
                "drivers of queue `{queue}` hold {held} of {allowed} {bound} allowed \
                 (driver share {share})"
            ),
            Self::NoAliveWorker => f.write_str("no ALIVE worker"),
            Self::NoSparkWorker => f.write_str(
                "no ALIVE worker has Spark (a SPARK_HOME) to run a Spark submission's driver",
            ),
            Self::LargerThanAnyWorker { kind, need } => {
                write!(
                    f,
                    "{kind} needs {need}: more than any ALIVE worker has in total"
                )
            }
            Self::Gang { minimum, fit } => write!(
                f,
                "a gang of {minimum} executors starts when all fit at once: {fit} fit now"
            ),
            Self::GangReserved { minimum, reserved } => write!(
                f,
                "a gang of {minimum} executors starts when all fit at once: room for \
                 {reserved} is kept for it as it frees"
            ),
            Self::DriverGang { minimum, fit } => write!(
                f,
                "its application's gang of {minimum} executors and the driver start when \
                 all fit at once: {fit} fit beside it now"
            ),
            Self::FirstExecutor => write!(
                f,
                "the driver starts where its application's first executor fits beside it: \
                 none does now"
            ),
            Self::ExecutorLimit { limit, held } => {
                write!(
                    f,
                    "executor limit reached: holds {held} executors, limit {limit}"
                )
            }
            Self::QueueAtCapacity {
                queue,
                used,
                capacity,
            } => write!(
                f,
                "queue `{queue}` at max capacity: its executors hold {used} of {capacity} cores"
            ),
            Self::HeldByThreshold {
                kind,
                need,
                queue,
                threshold,
            } => write!(
                f,
                "no ALIVE worker has {need} free for {kind}: workers with room run prior work \
                 and queue `{queue}` may fill them only up to threshold {threshold}"
            ),
            Self::NoRoom { kind, need } => {
                write!(f, "no ALIVE worker has {need} free for {kind}")
            }
            Self::BehindPriority { priority, need } => write!(
                f,
                "no ALIVE worker has {need} free for an executor: it waits behind \
                 priority {priority} work of its queue"
            ),
            Self::AtUserLimit {
                user,
                queue,
                held,
                limit,
                need,
            } => write!(
                f,
                "no ALIVE worker has {need} free for an executor: user `{user}` holds {held} \
                 cores of queue `{queue}`, at least its user limit of {limit}, and other users' \
                 work is served first"
            ),
        }
    }
}
