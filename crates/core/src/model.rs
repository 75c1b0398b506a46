//! The input of a scheduling pass: a snapshot of the cluster as the master sees it, and the
//! checks that reject a malformed one before any placement is attempted.
//!
//! Every optional field has the default Spark standalone uses (or the queue design's default),
//! so the smallest valid snapshot is `{}`. Unknown fields are refused, so a misspelt option is
//! an error rather than a silently ignored setting.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use foldhash::fast::FixedState;

use serde::{Deserialize, Serialize};

use crate::ids::{AppId, DriverId, ExecutorId, QueueName, SmolStr, WorkerId};
use crate::resources::{ResourceAmounts, Resources, nonzero_amounts, validate_amounts};

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

/// A queue: YARN CapacityScheduler's capacity plus the priority design's `isPrior` and
/// `psThreshold` (the YARN high-priority scheduler's `LeafQueue`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    /// The queue's name, unique.
    pub name: QueueName,
    /// Work of a prior queue is served before all other work and may use the whole cluster.
    #[serde(default)]
    pub prior: bool,
    /// On a worker hosting prior work, this (normal) queue's allocations must leave the
    /// worker's used cores and memory within `threshold` of its capacity. In (0, 1].
    #[serde(default = "one")]
    pub threshold: f64,
    /// Fraction of its parent's maximum (the ALIVE workers' total cores for a top-level
    /// queue) the executors of this (normal) queue may hold. In (0, 1]; ignored for prior
    /// queues.
    #[serde(default = "one")]
    pub max_capacity: f64,
    /// The guaranteed share of its parent's capacity (YARN's `capacity`), in [0, 1]: either
    /// every queue has one, siblings summing to 1, or none has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<f64>,
    /// The share of the queue's room its running drivers may hold; unset: the masters'
    /// `driver_share`. In (0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_share: Option<f64>,
    /// How long a gang of this queue may wait for all of its minimum, in seconds, before
    /// `gang_style` applies; unset: the masters'. The leader times gangs out, not the pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang_timeout_s: Option<u64>,
    /// What becomes of a gang of this queue that waited `gang_timeout_s`; unset: the
    /// masters'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang_style: Option<GangStyle>,
}

/// What becomes of a gang that waited its timeout for all of its minimum, as YuniKorn's
/// gang scheduling styles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GangStyle {
    /// It is placed as any application from then on, an executor at a time.
    #[default]
    Soft,
    /// It fails, saying why.
    Hard,
}

impl fmt::Display for GangStyle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Soft => "soft",
            Self::Hard => "hard",
        })
    }
}

/// The default threshold and maximum capacity of a queue: all of it.
pub(crate) fn one() -> f64 {
    1.0
}

impl QueueConfig {
    /// A queue with default settings.
    pub fn named(name: &str) -> Self {
        Self {
            name: QueueName::from(name),
            prior: false,
            threshold: 1.0,
            max_capacity: 1.0,
            capacity: None,
            driver_share: None,
            gang_timeout_s: None,
            gang_style: None,
        }
    }
}

/// Why a queue takes no work.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotALeaf {
    /// No such queue.
    #[error("unknown queue `{0}`")]
    Unknown(QueueName),
    /// A parent queue: work goes to the leaves below it.
    #[error("`{queue}` is a parent queue: submit to one of its leaves ({})", leaves.join(", "))]
    Parent {
        /// The queue.
        queue: QueueName,
        /// The leaves below it.
        leaves: Vec<String>,
    },
}

/// Whether `queues` has a queue named `name` (`default` is always there).
fn is_known(queues: &[QueueConfig], name: &QueueName) -> bool {
    name.0 == crate::ids::DEFAULT_QUEUE || queues.iter().any(|q| &q.name == name)
}

/// Refuses new work for the queue named `name` unless it is a leaf of `queues`: known
/// (`default` always is) and without children.
///
/// # Errors
///
/// An unknown queue, or a parent with the leaves below it.
pub fn takes_work(queues: &[QueueConfig], name: &QueueName) -> Result<(), NotALeaf> {
    if !is_known(queues, name) {
        return Err(NotALeaf::Unknown(name.clone()));
    }
    let tree = crate::queues::Queues::new(queues);
    if tree.is_parent(name) {
        return Err(NotALeaf::Parent {
            queue: name.clone(),
            leaves: tree
                .leaves_below(name)
                .iter()
                .map(ToString::to_string)
                .collect(),
        });
    }
    Ok(())
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
        }
    }
}

/// A driver waiting for a worker (Spark's cluster deploy mode).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(from = "DriverRequestFields", into = "DriverRequestFields")]
pub struct DriverRequest {
    /// Unique driver id.
    pub id: DriverId,
    /// What the driver needs from a worker: cores (Spark's default: 1), memory in MB
    /// (Spark's default: 1024) and custom resources.
    pub need: Resources,
    /// The queue the driver was submitted to.
    pub queue: QueueName,
    /// The room the application it will start needs first, if the driver says: all of its
    /// gang's minimum, or one executor (a minimum of 1). The driver starts only when it and
    /// that room fit at once.
    pub gang: Option<GangRequest>,
}

/// The executors an application needs at once: a gang's minimum and their size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GangRequest {
    /// How many.
    pub min_executors: u32,
    /// Each one's cores.
    pub executor_cores: u32,
    /// Each one's memory in MB.
    #[serde(default = "default_memory_mb")]
    pub executor_memory_mb: u64,
    /// Each one's custom resources.
    #[serde(default, deserialize_with = "nonzero_amounts")]
    pub executor_resources: ResourceAmounts,
}

impl GangRequest {
    /// What one of its executors needs.
    pub fn executor(&self) -> Resources {
        Resources::new(self.executor_cores, self.executor_memory_mb)
            .with_custom(self.executor_resources.clone())
    }

    /// Checks it: at least one executor of at least one core and one MB.
    ///
    /// # Errors
    ///
    /// The first offending field, under `field`.
    pub fn validate(&self, field: impl fmt::Display) -> Result<(), InputError> {
        positive(format_args!("{field}.min_executors"), self.min_executors)?;
        positive(format_args!("{field}.executor_cores"), self.executor_cores)?;
        positive(
            format_args!("{field}.executor_memory_mb"),
            self.executor_memory_mb,
        )?;
        resource_amounts(
            format_args!("{field}.executor_resources"),
            &self.executor_resources,
        )
    }
}

/// Room kept beside a running driver for its application: the room it needs first (its
/// gang's minimum, or one executor). Until the application registers, the room is kept at
/// the start of every pass, so that nothing else takes it; once it has registered, and until
/// it holds an executor, it is kept while drivers are placed, so that no other driver takes
/// it first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingGang {
    /// The driver's queue.
    #[serde(default)]
    pub queue: QueueName,
    /// The room its application needs first.
    pub gang: GangRequest,
    /// Whether its application has registered.
    #[serde(default)]
    pub registered: bool,
}

/// A [`DriverRequest`] as a snapshot file writes it: `cores`, `memory_mb` and `resources`
/// (custom, absent when none).
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DriverRequestFields {
    id: DriverId,
    #[serde(default = "default_driver_cores")]
    cores: u32,
    #[serde(default = "default_memory_mb")]
    memory_mb: u64,
    #[serde(default, deserialize_with = "nonzero_amounts")]
    resources: ResourceAmounts,
    #[serde(default)]
    queue: QueueName,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gang: Option<GangRequest>,
}

impl From<DriverRequestFields> for DriverRequest {
    fn from(fields: DriverRequestFields) -> Self {
        Self {
            id: fields.id,
            need: Resources::new(fields.cores, fields.memory_mb).with_custom(fields.resources),
            queue: fields.queue,
            gang: fields.gang,
        }
    }
}

impl From<DriverRequest> for DriverRequestFields {
    fn from(driver: DriverRequest) -> Self {
        Self {
            id: driver.id,
            cores: driver.need.cores,
            memory_mb: driver.need.memory_mb,
            resources: driver.need.custom,
            queue: driver.queue,
            gang: driver.gang,
        }
    }
}

fn default_driver_cores() -> u32 {
    1
}

fn default_memory_mb() -> u64 {
    1024
}

/// An active application and what it asks for (Spark's `ApplicationDescription`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppRequest {
    /// Unique application id.
    pub id: AppId,
    /// The queue the application was submitted to.
    #[serde(default)]
    pub queue: QueueName,
    /// Total cores the app may hold (`spark.cores.max`); `None` falls back to
    /// `config.default_cores`.
    #[serde(default)]
    pub cores_max: Option<u32>,
    /// Cores per executor (`spark.executor.cores`); `None` means one executor per worker per
    /// pass that absorbs all cores it is given.
    #[serde(default)]
    pub executor_cores: Option<u32>,
    /// Memory per executor in MB (Spark's default: 1024).
    #[serde(default = "default_memory_mb")]
    pub executor_memory_mb: u64,
    /// Custom resources per executor.
    #[serde(default, deserialize_with = "nonzero_amounts")]
    pub executor_resources: ResourceAmounts,
    /// Cap on the app's executor count, held ones included (dynamic allocation's target).
    #[serde(default)]
    pub executor_limit: Option<u32>,
    /// The executors of its own size it needs to make progress: while it holds none, a pass
    /// grants it these all at once or nothing (a gang). Fewer when its `cores_max` or
    /// executor limit allows no more. Only with `executor_cores`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_executors: Option<u32>,
    /// Executors the app already holds.
    #[serde(default)]
    pub executors: HeldExecutors,
    /// Executor sizes beyond its own, in id order: Spark's resource profiles (stage-level
    /// scheduling), each placed as Spark's Master places a profile's executors, under the
    /// app's `cores_max` and queue, and its own limit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profiles: Vec<ProfileRequest>,
}

/// Executors of another size than its own an app asks for: a resource profile of Spark's
/// stage-level scheduling (Spark's `ExecutorResourceDescription` of a profile).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileRequest {
    /// Its id, 1 or more (Spark's `ResourceProfile.id`); the app's own size is profile 0.
    pub id: u32,
    /// Cores per executor; `None`, as an app's unset `executor_cores`, one executor per
    /// worker absorbing cores.
    #[serde(default)]
    pub executor_cores: Option<u32>,
    /// Memory per executor in MB.
    #[serde(default = "default_memory_mb")]
    pub executor_memory_mb: u64,
    /// Custom resources per executor.
    #[serde(default, deserialize_with = "nonzero_amounts")]
    pub executor_resources: ResourceAmounts,
    /// Cap on the app's executors of this profile, held ones included (Spark asks for a
    /// number of executors of each profile).
    pub executor_limit: u32,
}

impl AppRequest {
    /// An app in the `default` queue with Spark's defaults: no core cap, no executor size
    /// (one absorbing executor per worker), 1024 MB executors, no limit, nothing held.
    pub fn new(id: &str) -> Self {
        Self {
            id: id.into(),
            queue: QueueName::default(),
            cores_max: None,
            executor_cores: None,
            executor_memory_mb: default_memory_mb(),
            executor_resources: ResourceAmounts::new(),
            executor_limit: None,
            min_executors: None,
            executors: HeldExecutors::default(),
            profiles: Vec::new(),
        }
    }
}

/// The executors an app holds, with their cores summed. A [`Shared`] list, so that a master
/// builds each pass's snapshot without copying them: a change (a preemption's trial) copies
/// only the app's own. Reads and writes as a plain list.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HeldExecutors {
    executors: Shared<HeldExecutor>,
    cores: u64,
}

impl HeldExecutors {
    /// The cores they hold.
    pub fn cores(&self) -> u64 {
        self.cores
    }

    /// Adds `executor` at the end.
    pub fn push(&mut self, executor: HeldExecutor) {
        self.cores += u64::from(executor.resources.cores);
        self.executors.make_mut().push(executor);
    }

    /// Changes the list with `edit`, and sums its cores again.
    pub fn update<R>(&mut self, edit: impl FnOnce(&mut Vec<HeldExecutor>) -> R) -> R {
        let result = edit(self.executors.make_mut());
        self.cores = cores_of(&self.executors);
        result
    }
}

fn cores_of(executors: &[HeldExecutor]) -> u64 {
    executors.iter().map(|e| u64::from(e.resources.cores)).sum()
}

impl std::ops::Deref for HeldExecutors {
    type Target = [HeldExecutor];

    fn deref(&self) -> &[HeldExecutor] {
        &self.executors
    }
}

impl From<Vec<HeldExecutor>> for HeldExecutors {
    fn from(executors: Vec<HeldExecutor>) -> Self {
        Self {
            cores: cores_of(&executors),
            executors: executors.into(),
        }
    }
}

impl FromIterator<HeldExecutor> for HeldExecutors {
    fn from_iter<I: IntoIterator<Item = HeldExecutor>>(executors: I) -> Self {
        Vec::from_iter(executors).into()
    }
}

impl Serialize for HeldExecutors {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.executors.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for HeldExecutors {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::deserialize(deserializer).map(Self::from)
    }
}

/// An executor an app already holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(from = "HeldExecutorFields", into = "HeldExecutorFields")]
pub struct HeldExecutor {
    /// Its id in the app, when known (preemption names its victims by it; without it, the
    /// executor's position in the list).
    pub id: Option<ExecutorId>,
    /// The worker it runs on.
    pub worker: WorkerId,
    /// What it holds there: cores, memory and custom resources.
    pub resources: Resources,
    /// The app's resource profile it is of; 0, the app's own size, for most.
    pub profile: u32,
}

/// A [`HeldExecutor`] as a snapshot file writes it: its amounts as a driver request's are,
/// `cores`, `memory_mb` and `resources` (custom, absent when none), and its `profile` when
/// it is not the app's own size.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HeldExecutorFields {
    #[serde(default)]
    id: Option<ExecutorId>,
    worker: WorkerId,
    cores: u32,
    memory_mb: u64,
    #[serde(
        default,
        deserialize_with = "nonzero_amounts",
        skip_serializing_if = "ResourceAmounts::is_empty"
    )]
    resources: ResourceAmounts,
    #[serde(default, skip_serializing_if = "is_zero")]
    profile: u32,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

impl From<HeldExecutorFields> for HeldExecutor {
    fn from(fields: HeldExecutorFields) -> Self {
        Self {
            id: fields.id,
            worker: fields.worker,
            resources: Resources::new(fields.cores, fields.memory_mb).with_custom(fields.resources),
            profile: fields.profile,
        }
    }
}

impl From<HeldExecutor> for HeldExecutorFields {
    fn from(executor: HeldExecutor) -> Self {
        Self {
            id: executor.id,
            worker: executor.worker,
            cores: executor.resources.cores,
            memory_mb: executor.resources.memory_mb,
            resources: executor.resources.custom,
            profile: executor.profile,
        }
    }
}

/// Why a snapshot was refused: the offending field's path and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InputError {
    /// Path of the field, e.g. `apps[2].queue`.
    pub field: String,
    /// What is wrong, e.g. ``unknown queue `batch` ``.
    pub message: String,
}

/// Field names are written only when something is refused: validation runs on every pass.
fn refuse<T>(field: impl fmt::Display, message: impl Into<String>) -> Result<T, InputError> {
    Err(InputError {
        field: field.to_string(),
        message: message.into(),
    })
}

/// Refuses a zero `value` for `field`.
///
/// # Errors
///
/// `field: must be at least 1`.
pub fn positive<N: PartialEq + Default>(
    field: impl fmt::Display,
    value: N,
) -> Result<(), InputError> {
    if value == N::default() {
        refuse(field, "must be at least 1")
    } else {
        Ok(())
    }
}

fn fraction(field: impl fmt::Display, value: f64) -> Result<(), InputError> {
    if value.is_finite() && value > 0.0 && value <= 1.0 {
        Ok(())
    } else {
        refuse(field, format!("must be in (0, 1], got {value}"))
    }
}

/// Checks custom resource amounts: names not empty, amounts at least 1.
///
/// # Errors
///
/// The first offending amount, as `field.name`.
pub fn resource_amounts(
    field: impl fmt::Display,
    amounts: &ResourceAmounts,
) -> Result<(), InputError> {
    for (name, &amount) in amounts {
        if name.is_empty() {
            return refuse(field, "resource names must not be empty");
        }
        positive(format_args!("{field}.{name}"), amount)?;
    }
    Ok(())
}

fn unique<'a, T: Eq + Hash + AsRef<str> + fmt::Display + 'a>(
    what: &str,
    ids: impl Iterator<Item = &'a T>,
    field: impl Fn(usize) -> String,
) -> Result<HashSet<&'a T, FixedState>, InputError> {
    let mut seen = HashSet::with_capacity_and_hasher(ids.size_hint().0, FixedState::default());
    for (i, id) in ids.enumerate() {
        if id.as_ref().is_empty() {
            return refuse(field(i), format!("{what} must not be empty"));
        }
        if !seen.insert(id) {
            return refuse(field(i), format!("duplicate {what} `{id}`"));
        }
    }
    Ok(seen)
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

    /// Checks everything a pass relies on.
    ///
    /// # Errors
    ///
    /// The first offending field: a zero capacity or demand, usage above capacity, a fraction
    /// outside (0, 1], a duplicate id, or a reference to an unknown queue or worker.
    pub fn validate(&self) -> Result<(), InputError> {
        if let Some(cores) = self.config.default_cores {
            positive("config.default_cores", cores)?;
        }
        if let Some(max) = self.config.max_drivers {
            positive("config.max_drivers", max)?;
        }
        fraction("config.driver_share", self.config.driver_share)?;

        validate_queues(&self.queues)?;
        // Work already in a parent queue (set up by a build before queue trees) is served
        // like a leaf's: only a new submission must name a leaf.
        let known_queue = |field: fmt::Arguments<'_>, queue: &QueueName| {
            if is_known(&self.queues, queue) {
                Ok(())
            } else {
                refuse(field, NotALeaf::Unknown(queue.clone()).to_string())
            }
        };

        let workers = unique("worker id", self.workers.iter().map(|w| &w.id), |i| {
            format!("workers[{i}].id")
        })?;
        for (i, worker) in self.workers.iter().enumerate() {
            worker.validate(i)?;
        }

        unique("driver id", self.drivers.iter().map(|d| &d.id), |i| {
            format!("drivers[{i}].id")
        })?;
        for (i, driver) in self.drivers.iter().enumerate() {
            driver.need.validate(format_args!("drivers[{i}]."))?;
            known_queue(format_args!("drivers[{i}].queue"), &driver.queue)?;
            if let Some(gang) = &driver.gang {
                gang.validate(format_args!("drivers[{i}].gang"))?;
            }
        }
        for (i, pending) in self.pending_gangs.iter().enumerate() {
            known_queue(format_args!("pending_gangs[{i}].queue"), &pending.queue)?;
            pending
                .gang
                .validate(format_args!("pending_gangs[{i}].gang"))?;
        }
        for queue in self.drivers_hold.keys() {
            known_queue(format_args!("drivers_hold.{queue}"), queue)?;
        }

        unique("app id", self.apps.iter().map(|a| &a.id), |i| {
            format!("apps[{i}].id")
        })?;
        for (i, app) in self.apps.iter().enumerate() {
            known_queue(format_args!("apps[{i}].queue"), &app.queue)?;
            if let Some(cores) = app.cores_max {
                positive(format_args!("apps[{i}].cores_max"), cores)?;
            }
            if let Some(cores) = app.executor_cores {
                positive(format_args!("apps[{i}].executor_cores"), cores)?;
            }
            if let Some(minimum) = app.min_executors {
                positive(format_args!("apps[{i}].min_executors"), minimum)?;
                if app.executor_cores.is_none() {
                    return refuse(
                        format_args!("apps[{i}].min_executors"),
                        "a gang needs executor_cores: without it an app has one executor a \
                         worker, which takes all the cores it is given",
                    );
                }
            }
            positive(
                format_args!("apps[{i}].executor_memory_mb"),
                app.executor_memory_mb,
            )?;
            resource_amounts(
                format_args!("apps[{i}].executor_resources"),
                &app.executor_resources,
            )?;
            let mut profiles = HashSet::new();
            for (j, profile) in app.profiles.iter().enumerate() {
                let field = format!("apps[{i}].profiles[{j}]");
                positive(format_args!("{field}.id"), profile.id)?;
                if !profiles.insert(profile.id) {
                    return refuse(
                        format_args!("{field}.id"),
                        format!("duplicate profile {}", profile.id),
                    );
                }
                if let Some(cores) = profile.executor_cores {
                    positive(format_args!("{field}.executor_cores"), cores)?;
                }
                positive(
                    format_args!("{field}.executor_memory_mb"),
                    profile.executor_memory_mb,
                )?;
                resource_amounts(
                    format_args!("{field}.executor_resources"),
                    &profile.executor_resources,
                )?;
            }
            for (j, executor) in app.executors.iter().enumerate() {
                if executor.profile != 0 && !profiles.contains(&executor.profile) {
                    return refuse(
                        format_args!("apps[{i}].executors[{j}].profile"),
                        format!("the app has no profile {}", executor.profile),
                    );
                }
                if !workers.contains(&executor.worker) {
                    return refuse(
                        format_args!("apps[{i}].executors[{j}].worker"),
                        format!("unknown worker `{}`", executor.worker),
                    );
                }
                executor
                    .resources
                    .validate(format_args!("apps[{i}].executors[{j}]."))?;
            }
        }
        Ok(())
    }
}

/// Checks a queue configuration: names unique and not empty, fractions in (0, 1], and the
/// capacities (see the `queues` module; the names themselves are checked apart, by
/// [`crate::queues::check_paths`], where a person wrote them).
///
/// # Errors
///
/// The first offending field, as `queues[i].field`.
pub fn validate_queues(queues: &[QueueConfig]) -> Result<(), InputError> {
    unique("queue", queues.iter().map(|q| &q.name), |i| {
        format!("queues[{i}].name")
    })?;
    for (i, queue) in queues.iter().enumerate() {
        crate::limits::name(format_args!("queues[{i}].name"), &queue.name.0)?;
        fraction(format_args!("queues[{i}].threshold"), queue.threshold)?;
        fraction(format_args!("queues[{i}].max_capacity"), queue.max_capacity)?;
        if let Some(share) = queue.driver_share {
            fraction(format_args!("queues[{i}].driver_share"), share)?;
        }
        if let Some(timeout) = queue.gang_timeout_s {
            positive(format_args!("queues[{i}].gang_timeout_s"), timeout)?;
        }
    }
    crate::queues::check_capacities(queues)
}

impl Worker {
    /// Checks worker `i` of a snapshot.
    fn validate(&self, i: usize) -> Result<(), InputError> {
        let field = format_args!("workers[{i}]");
        let (capacity, used) = (&self.capacity, &self.used);
        validate_amounts(
            format_args!("{field}."),
            capacity.cores,
            capacity.memory_mb,
            &capacity.custom,
        )?;
        if used.cores > capacity.cores {
            return refuse(
                format_args!("{field}.cores_used"),
                format!(
                    "{} exceeds the worker's {} cores",
                    used.cores, capacity.cores
                ),
            );
        }
        if used.memory_mb > capacity.memory_mb {
            return refuse(
                format_args!("{field}.memory_used_mb"),
                format!(
                    "{} exceeds the worker's {} MB",
                    used.memory_mb, capacity.memory_mb
                ),
            );
        }
        for (name, &used) in &used.custom {
            let capacity = capacity.custom.get(name).copied().unwrap_or(0);
            if used > capacity {
                return refuse(
                    format_args!("{field}.resources_used.{name}"),
                    format!("{used} exceeds the worker's {capacity}"),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{HeldExecutor, HeldExecutors};
    use crate::resources::Resources;

    fn executor(id: u32, cores: u32) -> HeldExecutor {
        HeldExecutor {
            id: Some(crate::ids::ExecutorId(id)),
            worker: "w1".into(),
            resources: Resources::new(cores, 1024),
            profile: 0,
        }
    }

    #[test]
    fn held_executors_keep_their_cores_summed_through_every_change() {
        let mut held: HeldExecutors = [executor(0, 2), executor(1, 3)].into_iter().collect();
        assert_eq!(held.cores(), 5);
        let shared = held.clone();
        held.push(executor(2, 4));
        assert_eq!((held.cores(), held.len()), (9, 3));
        held.update(|executors| executors.retain(|e| e.resources.cores != 3));
        assert_eq!((held.cores(), held.len()), (6, 2));
        // A copy taken before is not changed by the changes after.
        assert_eq!((shared.cores(), shared.len()), (5, 2));
    }

    #[test]
    fn held_executors_read_and_write_as_a_plain_list() {
        let held: HeldExecutors = [executor(0, 2), executor(1, 3)].into_iter().collect();
        let json = serde_json::to_value(&held).unwrap();
        assert!(json.is_array());
        let read: HeldExecutors = serde_json::from_value(json).unwrap();
        assert_eq!(read, held);
        assert_eq!(read.cores(), 5);
    }
}
