//! The work a pass places: drivers waiting for a worker, applications with their demands and
//! resource profiles, gangs, and the executors an application already holds.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{InputError, Shared, positive, resource_amounts};
use crate::ids::{AppId, DriverId, ExecutorId, QueueName, SmolStr, WorkerId};
use crate::resources::{ResourceAmounts, Resources, nonzero_amounts};

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
    /// Its priority in its queue: higher starts first among the queue's waiting drivers,
    /// equal keeps submission order.
    pub priority: i32,
    /// A Spark submission's driver (through the REST gateway): it runs the `spark-submit` of
    /// its worker's Spark, so it is placed only on a worker that has one.
    pub spark: bool,
}

/// The environment variable that marks a driver as a Spark submission's
/// ([`DriverRequest::spark`]), as the REST gateway submits it.
pub const SPARK_SUBMISSION_VARIABLE: &str = "MUSTER_SPARK_SUBMISSION";

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
    #[serde(default, skip_serializing_if = "is_zero_priority")]
    priority: i32,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    spark: bool,
}

impl From<DriverRequestFields> for DriverRequest {
    fn from(fields: DriverRequestFields) -> Self {
        Self {
            id: fields.id,
            need: Resources::new(fields.cores, fields.memory_mb).with_custom(fields.resources),
            queue: fields.queue,
            gang: fields.gang,
            priority: fields.priority,
            spark: fields.spark,
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
            priority: driver.priority,
            spark: driver.spark,
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
    /// Who submitted it: `drf` ordering shares a queue among users. Unset: the cluster's
    /// own credential, one user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<SmolStr>,
    /// Its priority in its queue: higher is served first, equal keeps the queue's order.
    #[serde(default, skip_serializing_if = "is_zero_priority")]
    pub priority: i32,
}

fn is_zero_priority(priority: &i32) -> bool {
    *priority == 0
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
            user: None,
            priority: 0,
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

/// Whether a count is zero, and so left out of what serde writes.
pub fn is_zero(count: &u32) -> bool {
    *count == 0
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
