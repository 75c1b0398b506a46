//! The entities the state machine keeps: workers, applications with their executors, and
//! drivers, with the states Spark gives them (Spark's `deploy/master/ApplicationState.scala`,
//! `DriverState.scala` and `deploy/ExecutorState.scala`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use muster_core::ids::{
    AppId, DriverId, ExecutorId, QueueName, SmolStr, Timestamp, WorkId, WorkerId,
};
use muster_core::model::{GangRequest, GangStyle, HeldExecutor, HeldExecutors, WorkerState};
use muster_core::resources::{ResourceAmounts, Resources};
use serde::{Deserialize, Serialize};

/// A registered worker and what runs on it according to the log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Worker {
    /// Id chosen by the worker, stable across its restarts.
    pub id: WorkerId,
    /// Host name.
    pub host: SmolStr,
    /// Address the master reaches it at.
    pub address: String,
    /// Its cores, memory and custom resources.
    pub capacity: Resources,
    /// ALIVE, DEAD or DECOMMISSIONED; only ALIVE workers run anything.
    pub state: WorkerState,
    /// What its live executors and drivers hold, within `capacity`.
    pub used: Resources,
    /// Its live executors.
    pub executors: BTreeSet<(AppId, ExecutorId)>,
    /// Its live drivers.
    pub drivers: BTreeSet<DriverId>,
    /// Set when it fences (kills its own work once cut off from every leader for the worker
    /// timeout): how long its kills may take, in ms.
    pub fence_grace_ms: Option<u64>,
    /// When it last registered.
    pub registered_at: Timestamp,
    /// How many of its live executors and drivers are of prior queues: whether a scheduling
    /// pass sees it host prior work. Kept as they start and end; not in snapshots, but
    /// counted anew as one is decoded, and as the queues change.
    #[serde(skip)]
    pub(crate) prior_work: u32,
}

impl Worker {
    /// What is free on it.
    pub fn free(&self) -> Resources {
        self.capacity
            .checked_sub(&self.used)
            .expect("a worker's usage stays within its capacity")
    }
}

/// An application's state (Spark's `ApplicationState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AppState {
    /// Registered, no executor yet.
    Waiting,
    /// Has been granted executors.
    Running,
    /// Ended normally.
    Finished,
    /// Removed after too many executor failures.
    Failed,
    /// Killed by a user.
    Killed,
}

impl fmt::Display for AppState {
    /// Spark's name for it: `WAITING`, `RUNNING`, ...
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Waiting => "WAITING",
            Self::Running => "RUNNING",
            Self::Finished => "FINISHED",
            Self::Failed => "FAILED",
            Self::Killed => "KILLED",
        })
    }
}

impl AppState {
    /// Whether the app has ended.
    pub fn is_finished(self) -> bool {
        !matches!(self, Self::Waiting | Self::Running)
    }
}

/// What an application asks for (Spark's `ApplicationDescription`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AppDescription {
    /// Name, for people.
    pub name: String,
    /// Submitting user.
    pub user: String,
    /// Queue it runs in.
    pub queue: QueueName,
    /// `spark.cores.max`; `None` falls back to the master's default cores.
    pub cores_max: Option<u32>,
    /// `spark.executor.cores`; `None`: one executor per worker absorbing cores.
    pub executor_cores: Option<u32>,
    /// Memory per executor in MB.
    pub executor_memory_mb: u64,
    /// Custom resources per executor.
    pub executor_resources: ResourceAmounts,
    /// The executor's program.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its environment, on top of what the worker sets.
    pub env: BTreeMap<String, String>,
}

impl AppDescription {
    /// Whether its executors are of `resources`' size.
    pub fn fits(&self, resources: &Resources) -> bool {
        executor_of_size(
            resources,
            self.executor_cores,
            self.executor_memory_mb,
            &self.executor_resources,
        )
    }
}

/// Whether an executor holding `resources` is of the size `cores` (`None`: any number),
/// `memory_mb` and `custom` describe.
fn executor_of_size(
    resources: &Resources,
    cores: Option<u32>,
    memory_mb: u64,
    custom: &ResourceAmounts,
) -> bool {
    resources.cores > 0
        && cores.is_none_or(|cores| cores == resources.cores)
        && resources.memory_mb == memory_mb
        && &resources.custom == custom
}

/// Executors of another size than its own an application asks for: one of Spark's resource
/// profiles (stage-level scheduling), which never changes once registered, with the number
/// of its executors the application wants now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Profile {
    /// Cores per executor; `None`: one executor per worker absorbing cores.
    pub executor_cores: Option<u32>,
    /// Memory per executor in MB.
    pub executor_memory_mb: u64,
    /// Custom resources per executor.
    pub executor_resources: ResourceAmounts,
    /// Its executors' environment, on top of the application's.
    pub env: BTreeMap<String, String>,
    /// Cap on the application's executors of this profile.
    pub executor_limit: u32,
}

impl Profile {
    /// Whether its executors are of `resources`' size.
    pub fn fits(&self, resources: &Resources) -> bool {
        executor_of_size(
            resources,
            self.executor_cores,
            self.executor_memory_mb,
            &self.executor_resources,
        )
    }
}

/// An application's resource profiles beyond its own executor size, and which of its live
/// executors are of one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppProfiles {
    /// Its profiles by id (Spark's `ResourceProfile.id`, 1 or more).
    pub profiles: BTreeMap<u32, Profile>,
    /// The profile of each of its live executors that is of one.
    pub executors: BTreeMap<ExecutorId, u32>,
}

impl AppProfiles {
    /// How many of its live executors are of profile `id`.
    pub fn held(&self, id: u32) -> usize {
        self.executors.values().filter(|&&of| of == id).count()
    }
}

/// An application and its live executors.
///
/// Invariant: `cores_granted` is the sum of the cores of `executors`, all of them live.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct App {
    /// `app-yyyyMMddHHmmss-NNNN`.
    pub id: AppId,
    /// What it asks for.
    pub desc: AppDescription,
    /// Its state.
    pub state: AppState,
    /// Cap on its executor count (dynamic allocation's target); `None` is unlimited.
    pub executor_limit: Option<u32>,
    /// Executor failures since an executor last reached RUNNING.
    pub retry_count: u32,
    /// Position in submission order across apps and drivers.
    pub submission: u64,
    /// When it was submitted.
    pub submitted_at: Timestamp,
    /// When it ended.
    pub ended_at: Option<Timestamp>,
    /// The id its next executor gets.
    pub next_executor_id: u32,
    /// Live executors (LAUNCHING or RUNNING) by id.
    pub executors: BTreeMap<ExecutorId, Executor>,
    /// Cores of its live executors.
    pub cores_granted: u64,
}

impl App {
    /// Adds live executor `executor`: newer than any it has.
    pub(crate) fn add_executor(&mut self, executor: Executor) {
        debug_assert!(
            self.executors
                .last_key_value()
                .is_none_or(|(&id, _)| id < executor.id)
        );
        self.cores_granted += u64::from(executor.resources.cores);
        self.executors.insert(executor.id, executor);
    }

    /// Removes live executor `id`, if it has it.
    pub(crate) fn remove_executor(&mut self, id: ExecutorId) -> Option<Executor> {
        let executor = self.executors.remove(&id)?;
        self.cores_granted -= u64::from(executor.resources.cores);
        Some(executor)
    }

    /// Its live executors as a scheduling pass sees them, in id order, each of its profile
    /// in `profiles`.
    pub(crate) fn held_executors(&self, profiles: Option<&AppProfiles>) -> HeldExecutors {
        let profile_of = |id| {
            profiles
                .and_then(|p| p.executors.get(&id).copied())
                .unwrap_or(0)
        };
        self.executors
            .values()
            .map(|e| e.held(profile_of(e.id)))
            .collect()
    }
}

/// An executor's state (Spark's `ExecutorState`, without DECOMMISSIONED: decommissioning a
/// worker here ends its executors).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExecutorState {
    /// Granted, the worker is starting it.
    Launching,
    /// Its process runs.
    Running,
    /// Killed on request.
    Killed,
    /// Its process failed.
    Failed,
    /// Its worker was lost.
    Lost,
    /// Its process exited.
    Exited,
}

impl fmt::Display for ExecutorState {
    /// Spark's name for it: `LAUNCHING`, `RUNNING`, ...
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Launching => "LAUNCHING",
            Self::Running => "RUNNING",
            Self::Killed => "KILLED",
            Self::Failed => "FAILED",
            Self::Lost => "LOST",
            Self::Exited => "EXITED",
        })
    }
}

impl ExecutorState {
    /// Whether the executor has ended (Spark's `ExecutorState.isFinished`).
    pub fn is_finished(self) -> bool {
        !matches!(self, Self::Launching | Self::Running)
    }
}

/// One executor of an app on a worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Executor {
    /// Its id within the app.
    pub id: ExecutorId,
    /// The worker that runs it.
    pub worker: WorkerId,
    /// Its cores, memory and custom resources.
    pub resources: Resources,
    /// Its state.
    pub state: ExecutorState,
    /// Its exit code, once it exited.
    pub exit_code: Option<i32>,
}

impl Executor {
    /// It as a scheduling pass sees it, of resource profile `profile`.
    pub(crate) fn held(&self, profile: u32) -> HeldExecutor {
        HeldExecutor {
            id: Some(self.id),
            worker: self.worker.clone(),
            resources: self.resources.clone(),
            profile,
        }
    }
}

/// A driver's state (Spark's `DriverState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DriverState {
    /// Waiting for a worker.
    Submitted,
    /// Placed on a worker.
    Running,
    /// Exited with status 0.
    Finished,
    /// Ended to be relaunched under a new id after its worker was lost.
    Relaunching,
    /// Killed on request.
    Killed,
    /// Exited with a non-zero status.
    Failed,
    /// Its worker was lost and it was not supervised.
    Error,
}

impl fmt::Display for DriverState {
    /// Spark's name for it: `SUBMITTED`, `RUNNING`, ...
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Submitted => "SUBMITTED",
            Self::Running => "RUNNING",
            Self::Finished => "FINISHED",
            Self::Relaunching => "RELAUNCHING",
            Self::Killed => "KILLED",
            Self::Failed => "FAILED",
            Self::Error => "ERROR",
        })
    }
}

impl DriverState {
    /// Whether the driver has ended.
    pub fn is_finished(self) -> bool {
        !matches!(self, Self::Submitted | Self::Running)
    }
}

/// What a driver asks for (Spark's `DriverDescription`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DriverDescription {
    /// Name, for people.
    pub name: String,
    /// Queue it runs in.
    pub queue: QueueName,
    /// Its cores, memory and custom resources.
    pub resources: Resources,
    /// The program.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its environment.
    pub env: BTreeMap<String, String>,
    /// Restart it when it fails, and relaunch it elsewhere when its worker is lost.
    pub supervise: bool,
}

/// Room kept on a worker for prior work that preempted executors there, until the
/// executors' processes are surely gone (their kill grace has passed): nobody else may take
/// it meanwhile, and a new leader keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// The prior application or driver it is for.
    pub owner: WorkId,
    /// The worker.
    pub worker: WorkerId,
    /// How much.
    pub resources: Resources,
    /// When its grace ends by the clock of the leader that kept it, for people: the leader
    /// grants it by its own clock.
    pub until: Timestamp,
}

/// A worker being drained (Spark's decommission): it gets no new work, what runs on it
/// finishes, and then it leaves (DECOMMISSIONED); after `kill_after_ms`, whatever still runs
/// is killed and it leaves too.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drain {
    /// When the drain was asked for, by the leader's clock, for people.
    pub since: Timestamp,
    /// How long what runs may take before it is killed; `None`: as long as it takes. The
    /// leader counts it by its own clock, from when it first saw the drain.
    pub kill_after_ms: Option<u64>,
}

/// A driver.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Driver {
    /// `driver-yyyyMMddHHmmss-NNNN`.
    pub id: DriverId,
    /// What it asks for.
    pub desc: DriverDescription,
    /// Its state.
    pub state: DriverState,
    /// The worker it runs on, while RUNNING.
    pub worker: Option<WorkerId>,
    /// Position in submission order across apps and drivers.
    pub submission: u64,
    /// When it was submitted.
    pub submitted_at: Timestamp,
    /// When it ended.
    pub ended_at: Option<Timestamp>,
    /// Its exit code, once it exited.
    pub exit_code: Option<i32>,
}

/// A named user (`muster users add`): their credential is derived from the cluster secret,
/// their name and `generation`, so it needs no stored secret. A revocation voids it; adding
/// them again moves `generation` on, so that no credential issued before is valid again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// May do anything the cluster's own client credential may.
    pub admin: bool,
    /// The generation of the credential that is valid now.
    pub generation: u64,
    /// Revoked: no credential of theirs is valid until they are added again.
    pub revoked: bool,
}

/// The named user who submitted a driver, with the generation of the credential they used:
/// the driver calls the masters with that credential, which stops working when it is
/// revoked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// Their name.
    pub user: String,
    /// The generation of their credential then.
    pub generation: u64,
}

/// A gang that waited its timeout for all of its minimum, and what became of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimedOutGang {
    /// The executors it needed at once.
    pub minimum: u32,
    /// How long it waited, by the leader's clock, in milliseconds.
    pub waited_ms: u64,
    /// Soft: placed as any application since; hard: failed.
    pub style: GangStyle,
}

impl fmt::Display for TimedOutGang {
    /// Why it is no longer a gang, for people.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (minimum, waited_s) = (self.minimum, self.waited_ms / 1000);
        write!(
            f,
            "its gang of {minimum} executors did not fit within {waited_s} s: "
        )?;
        f.write_str(match self.style {
            GangStyle::Soft => "placed as any application since (gang_style soft)",
            GangStyle::Hard => "failed (gang_style hard)",
        })
    }
}

/// The room a driver's application needs first: its gang's minimum, or one executor (a
/// minimum of 1). The driver starts only when it and that room fit at once; until the
/// application registers, the room is kept, and until one executor of an application that
/// is no gang is placed, it is kept from other drivers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DriverGang {
    /// The executors the application needs at once.
    pub gang: GangRequest,
    /// The application, once it has registered naming this driver.
    pub app: Option<AppId>,
}
