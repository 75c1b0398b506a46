//! The input of a scheduling pass: a snapshot of the cluster as the master sees it, and the
//! checks that reject a malformed one before any placement is attempted.
//!
//! Every optional field has the default Spark standalone uses (or the queue design's default),
//! so the smallest valid snapshot is `{}`. Unknown fields are refused, so a misspelt option is
//! an error rather than a silently ignored setting.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::ids::{QueueName, SmolStr, WorkerId};
use crate::resources::{ResourceAmounts, Resources, nonzero_amounts};

mod queue;
mod validate;
mod work;

pub(crate) use queue::one;
pub use queue::{GangStyle, NotALeaf, OrderingPolicy, QueueConfig, takes_work, validate_queues};
pub use validate::{InputError, positive, resource_amounts};
pub use work::{
    AppRequest, DriverRequest, GangRequest, HeldExecutor, HeldExecutors, PendingGang,
    ProfileRequest, SPARK_SUBMISSION_VARIABLE, is_zero,
};

/// Everything one scheduling pass looks at.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshot {
    /// Master-wide scheduling settings.
    #[serde(default)]
    pub config: PassConfig,
    /// Queue settings; `default` exists (with default settings) even when not listed.
    #[serde(default)]
    pub queues: Vec<QueueConfig>,
    /// All known workers, in any order; only ALIVE ones receive work.
    #[serde(default)]
    pub workers: Shared<Worker>,
    /// Drivers already running, counted against `config.max_drivers`.
    #[serde(default)]
    pub running_drivers: u32,
    /// What running drivers hold, by leaf queue, counted against each queue's driver
    /// share; a queue not listed runs none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub drivers_hold: BTreeMap<QueueName, DriversHold>,
    /// Drivers waiting to be placed, in submission order.
    #[serde(default)]
    pub drivers: Vec<DriverRequest>,
    /// The gangs of running drivers whose applications have not started, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_gangs: Vec<PendingGang>,
    /// Active applications, in submission order.
    #[serde(default)]
    pub apps: Shared<AppRequest>,
    /// For `muster plan` only: show which executors prior queues would preempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<crate::preempt::PreemptionSettings>,
}

/// Master-wide settings (Spark's `spark.deploy.*`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PassConfig {
    /// Spread an app's executors over as many workers as possible (`spark.deploy.spreadOutApps`).
    pub spread_out_apps: bool,
    /// Place drivers round-robin from a random start (`spark.deploy.spreadOutDrivers`).
    pub spread_out_drivers: bool,
    /// Order in which workers are offered to an app (`spark.deploy.workerSelectionPolicy`).
    pub worker_selection: WorkerSelection,
    /// Cores for apps that set no `cores_max`; unset: unlimited (`spark.deploy.defaultCores`).
    pub default_cores: Option<u32>,
    /// Cap on running drivers; unset: unlimited (`spark.deploy.maxDrivers`).
    pub max_drivers: Option<u32>,
    /// The share of each queue's room (its maximum, in cores and in memory) its running
    /// drivers may hold, for queues that set none (YARN's
    /// `maximum-am-resource-percent`). In (0, 1]; 1 lets drivers hold everything, as
    /// Spark does. A queue that runs no driver may always start one.
    pub driver_share: f64,
    /// Seed of the pass's random choices (the drivers' starting worker).
    pub seed: u64,
}

impl Default for PassConfig {
    fn default() -> Self {
        Self {
            spread_out_apps: true,
            spread_out_drivers: true,
            worker_selection: WorkerSelection::CoresFreeDesc,
            default_cores: None,
            max_drivers: None,
            driver_share: DEFAULT_DRIVER_SHARE,
            seed: 0,
        }
    }
}

/// The driver share of a cluster that sets none: half of each queue's room. Drivers then
/// never hold more than executors may, so a burst of drivers leaves their applications room
/// to start; YARN's CapacityScheduler's 0.1, meant for large clusters, would run one driver
/// at a time on a small one (its FairScheduler's `maxAMShare` is 0.5).
pub const DEFAULT_DRIVER_SHARE: f64 = 0.5;

/// The cores and memory a queue's running drivers hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriversHold {
    /// Cores.
    #[serde(default)]
    pub cores: u64,
    /// Memory in MB.
    #[serde(default)]
    pub memory_mb: u64,
}

impl DriversHold {
    /// What they hold with `need` added.
    pub fn with(self, need: &Resources) -> Self {
        Self {
            cores: self.cores + u64::from(need.cores),
            memory_mb: self.memory_mb + need.memory_mb,
        }
    }
}

/// Spark 4's worker selection policies (SPARK-46881). Ties are broken by worker id; the `Desc`
/// policies reverse the whole (free, id) order, tie-break included.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum WorkerSelection {
    /// Fewest free cores first.
    CoresFreeAsc,
    /// Most free cores first (the default).
    CoresFreeDesc,
    /// Least free memory first.
    MemoryFreeAsc,
    /// Most free memory first.
    MemoryFreeDesc,
    /// By worker id.
    WorkerId,
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

impl RecoveryState {
    /// Its name as Spark's master shows it: `COMPLETING_RECOVERY`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Recovering => "RECOVERING",
            Self::CompletingRecovery => "COMPLETING_RECOVERY",
            Self::Alive => "ALIVE",
        }
    }
}

/// A worker's liveness as the master sees it (Spark's `WorkerState`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum WorkerState {
    /// Registered and heartbeating: the only state that receives work.
    #[default]
    Alive,
    /// Timed out or lost.
    Dead,
    /// Draining: keeps what it runs, receives nothing new.
    Decommissioned,
}

impl fmt::Display for WorkerState {
    /// Spark's name for it: `ALIVE`, `DEAD`, `DECOMMISSIONED`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Alive => "ALIVE",
            Self::Dead => "DEAD",
            Self::Decommissioned => "DECOMMISSIONED",
        })
    }
}

/// One worker: its capacity and what is already in use on it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(from = "WorkerFields", into = "WorkerFields")]
pub struct Worker {
    /// Unique worker id.
    pub id: WorkerId,
    /// Host name, for people.
    pub host: SmolStr,
    /// Its capacity: at least 1 core and 1 MB; a custom amount of 0 means none.
    pub capacity: Resources,
    /// What everything running on it uses (the apps' listed executors included); every
    /// custom resource named must be in its capacity.
    pub used: Resources,
    /// Liveness; only ALIVE workers receive work.
    pub state: WorkerState,
    /// Whether the worker already runs a driver or executor of a prior queue.
    pub hosts_prior: bool,
    /// Its agent said it has no Spark (no `SPARK_HOME`): no Spark submission's driver is
    /// placed on it, since that driver runs the `spark-submit` of its worker's Spark.
    pub without_spark: bool,
}

/// A list a snapshot shares: its workers, its applications, an application's held executors.
/// A master keeps each as passes see it and builds each pass's snapshot without copying it:
/// a change copies the list only while a snapshot still holds it. Reads and writes as a
/// plain list.
#[derive(Clone, Debug, PartialEq)]
pub struct Shared<T>(Arc<Vec<T>>);

impl<T: Clone> Shared<T> {
    /// The list to change, copied first if another snapshot shares it.
    pub fn make_mut(&mut self) -> &mut Vec<T> {
        Arc::make_mut(&mut self.0)
    }
}

impl<T> Default for Shared<T> {
    fn default() -> Self {
        Self(Arc::default())
    }
}

impl<T> std::ops::Deref for Shared<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<'a, T> IntoIterator for &'a Shared<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<T> From<Vec<T>> for Shared<T> {
    fn from(items: Vec<T>) -> Self {
        Self(Arc::new(items))
    }
}

impl<T> FromIterator<T> for Shared<T> {
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> Self {
        Vec::from_iter(items).into()
    }
}

impl<T: Serialize> Serialize for Shared<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Shared<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::deserialize(deserializer).map(Self::from)
    }
}

/// A [`Worker`] as a snapshot file writes it: its capacity as `cores`, `memory_mb` and
/// `resources`, what is in use as `cores_used`, `memory_used_mb` and `resources_used`.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkerFields {
    id: WorkerId,
    #[serde(default)]
    host: SmolStr,
    cores: u32,
    memory_mb: u64,
    #[serde(default)]
    cores_used: u32,
    #[serde(default)]
    memory_used_mb: u64,
    #[serde(default, deserialize_with = "nonzero_amounts")]
    resources: ResourceAmounts,
    #[serde(default, deserialize_with = "nonzero_amounts")]
    resources_used: ResourceAmounts,
    #[serde(default)]
    state: WorkerState,
    #[serde(default)]
    hosts_prior: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    without_spark: bool,
}

impl From<WorkerFields> for Worker {
    fn from(fields: WorkerFields) -> Self {
        Self {
            id: fields.id,
            host: fields.host,
            capacity: Resources::new(fields.cores, fields.memory_mb).with_custom(fields.resources),
            used: Resources::new(fields.cores_used, fields.memory_used_mb)
                .with_custom(fields.resources_used),
            state: fields.state,
            hosts_prior: fields.hosts_prior,
            without_spark: fields.without_spark,
        }
    }
}

impl From<Worker> for WorkerFields {
    fn from(worker: Worker) -> Self {
        Self {
            id: worker.id,
            host: worker.host,
            cores: worker.capacity.cores,
            memory_mb: worker.capacity.memory_mb,
            cores_used: worker.used.cores,
            memory_used_mb: worker.used.memory_mb,
            resources: worker.capacity.custom,
            resources_used: worker.used.custom,
            state: worker.state,
            hosts_prior: worker.hosts_prior,
            without_spark: worker.without_spark,
        }
    }
}

impl Snapshot {
    /// The cores of the ALIVE workers: the cluster every queue's share is of.
    pub fn alive_cores(&self) -> u64 {
        self.workers
            .iter()
            .filter(|w| w.state == WorkerState::Alive)
            .map(|w| u64::from(w.capacity.cores))
            .sum()
    }
}
