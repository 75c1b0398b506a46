//! [`ClusterState`]: everything the master replicas agree on, and the bookkeeping every
//! command shares (taking and releasing worker resources, ending executors, apps and drivers).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use muster_core::access::{QueueAccess, QueueSpec};
use muster_core::ids::{
    AppId, DriverId, ExecutorId, QueueName, RequestId, Timestamp, WorkId, WorkerId,
};
use muster_core::model::{self as core, NotALeaf, QueueConfig, Shared, WorkerState};
use muster_core::resources::Resources;
use serde::{Deserialize, Serialize};

use crate::addresses::{AddressBook, Holder};
use crate::commands::{QueueAdmission, QueueOrdering, QueueSettings};
use crate::model::{
    App, AppProfiles, AppState, Drain, Driver, DriverDescription, DriverGang, DriverState,
    Executor, ExecutorState, Owner, Profile, Reservation, TimedOutGang, User, Worker,
};
use crate::response::{ApplyError, Effects, Rejection, Response};
use crate::stopping::{Stopped, Stopping, StoppingRoom};
use crate::version::LogFormat;

/// Settings every replica must share, fixed when the cluster is created.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateConfig {
    /// Executor failures (with no executor left running) after which an app is removed as
    /// FAILED; negative disables the rule (`spark.deploy.maxExecutorRetries`, default 10).
    pub max_executor_retries: i32,
    /// Completed apps kept for people to look at (`spark.deploy.retainedApplications`).
    pub retained_apps: usize,
    /// Completed drivers kept (`spark.deploy.retainedDrivers`).
    pub retained_drivers: usize,
    /// Request ids remembered for deduplication.
    pub retained_requests: usize,
}

impl Default for StateConfig {
    fn default() -> Self {
        Self {
            max_executor_retries: 10,
            retained_apps: 200,
            retained_drivers: 200,
            retained_requests: 10_000,
        }
    }
}

/// The replicated cluster state: what Spark's Master keeps in memory and in its persistence
/// engine, plus the executor allocations Spark never persisted.
///
/// Invariants ([`ClusterState::check_invariants`]):
/// * queue settings are valid;
/// * active apps are WAITING or RUNNING, active drivers SUBMITTED (on no worker) or RUNNING
///   (on one), and an app's live executors are LAUNCHING or RUNNING under ids below its next;
/// * a worker's used cores, memory and resources equal the sum over its live executors,
///   running drivers, the room kept on it and the custom resources its stopped processes
///   keep until they end, and never exceed its capacity;
/// * a worker's executor and driver sets agree with the apps and drivers placed on it;
/// * no live executor, driver, kept room or drain is on a worker that is not ALIVE, and no
///   work is on an unknown worker;
/// * an app's granted cores equal the sum over its live executors;
/// * every live executor and running driver holds as many addresses of each custom resource
///   as it was granted, addresses its worker has, and no address is held twice, a stopped
///   process that has not ended included (it is on an ALIVE worker, and no longer live);
/// * a driver that names its relaunched successor is retained, ended RELAUNCHING, and the
///   successor is known;
/// * a gang's minimum is kept only of an active app, and a driver's gang only of an active
///   driver;
/// * ended executors are kept only of known applications, ended, at most
///   [`ENDED_EXECUTORS_KEPT`] of each;
/// * ids are never reused.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterState {
    pub(crate) config: StateConfig,
    /// Every worker ever registered and not forgotten, by id.
    pub(crate) workers: BTreeMap<WorkerId, Worker>,
    /// Active (WAITING or RUNNING) apps by id.
    pub(crate) apps: BTreeMap<AppId, App>,
    /// Active (SUBMITTED or RUNNING) drivers by id.
    pub(crate) drivers: BTreeMap<DriverId, Driver>,
    /// Queue configuration, capacities apart; `default` exists even when not listed.
    pub(crate) queues: Vec<QueueSettings>,
    /// Number in the next app id.
    pub(crate) next_app_number: u64,
    /// Number in the next driver id.
    pub(crate) next_driver_number: u64,
    /// Next position in submission order (apps and drivers share it).
    pub(crate) next_submission: u64,
    /// Ended apps, oldest first, at most `config.retained_apps`.
    pub(crate) completed_apps: VecDeque<App>,
    /// Ended drivers, oldest first, at most `config.retained_drivers`.
    pub(crate) completed_drivers: VecDeque<Driver>,
    /// Results of the last client requests, for deduplication.
    pub(crate) requests: RequestLog,
    /// Room kept for prior work that preempted, counted in its workers' `used` until a
    /// `GrantReservations` after its grace gives it to its owner. After the fields of format
    /// 2, so that a snapshot of format 2 reads as one with no reservations.
    pub(crate) reservations: Vec<Reservation>,
    /// ALIVE workers being drained. After the fields of format 3, so that a snapshot of
    /// format 3 reads as one with no drains.
    pub(crate) draining: BTreeMap<WorkerId, Drain>,
    /// Named users, by name. This and the next two fields came with format 5: a snapshot of
    /// format 4 reads as one without named users.
    pub(crate) users: BTreeMap<String, User>,
    /// The access lists of the queues that have them; the others have the defaults.
    pub(crate) access: BTreeMap<QueueName, QueueAccess>,
    /// The named user who submitted each active or retained driver (the cluster's own
    /// credential is nobody's); a relaunched driver keeps its owner.
    pub(crate) driver_users: BTreeMap<DriverId, Owner>,
    /// The named user who registered each active or retained application. An application's
    /// `desc.user` is the name its client gave; only this says a named user owns it.
    pub(crate) app_users: BTreeMap<AppId, String>,
    /// The queues' capacities, when they have them (all or none). Came with format 6: a
    /// snapshot of format 5 reads as one with queues without capacities.
    pub(crate) capacities: BTreeMap<QueueName, f64>,
    /// The addresses workers gave for their custom resources, and those each live process
    /// holds. Came with format 7: a snapshot of format 6 reads as one without, and its
    /// processes that hold custom resources are handed addresses as it loads.
    pub(crate) addresses: AddressBook,
    /// The log format the cluster was raised to; `None` while it is at the first,
    /// [`LogFormat::FIRST`]. Came with format 8: a snapshot of format 7 reads as one of a
    /// cluster never raised.
    pub(crate) raised_format: Option<LogFormat>,
    /// The processes stopped at the masters' word whose end their workers have not reported,
    /// with the custom resources and addresses they keep until then. Came with format 9:
    /// kept only from log format 3, so a snapshot of format 8 reads as one with none.
    pub(crate) stopping: BTreeMap<Stopped, Stopping>,
    /// The driver each relaunched driver was submitted again as, by the old one's id, while
    /// the old one is retained. Came with format 10: kept only from log format 3, so a
    /// snapshot of format 9 reads as one with none.
    pub(crate) relaunched: BTreeMap<DriverId, DriverId>,
    /// The latest [`ENDED_EXECUTORS_KEPT`] ended executors of each active or retained
    /// application, oldest first: where each ran and how it ended. Came with format 10 as
    /// well, and kept only from log format 3.
    pub(crate) ended_executors: BTreeMap<AppId, VecDeque<Executor>>,
    /// The resource profiles of the active applications that asked for any (Spark's
    /// stage-level scheduling), and their executors of them. Came with format 11, written
    /// only from log format 3: a snapshot of format 10 reads as one without.
    pub(crate) profiles: BTreeMap<AppId, AppProfiles>,
    /// The admission settings of the queues that set any (their driver shares). Came with
    /// format 12, written only from log format 4: a snapshot of format 11 reads as one
    /// without.
    pub(crate) admission: BTreeMap<QueueName, QueueAdmission>,
    /// The minimum of each active application that is a gang: the executors of its own
    /// size it needs at once. Came with format 12 as well, written only from log format 4.
    pub(crate) gangs: BTreeMap<AppId, u32>,
    /// The gang of each active driver whose application is one, and whether that
    /// application has registered yet. Came with format 12 as well, written only from log
    /// format 4.
    pub(crate) driver_gangs: BTreeMap<DriverId, DriverGang>,
    /// The gangs that waited their timeout for all of their minimum, of active and retained
    /// applications. Came with format 12 as well, written only from log format 4.
    pub(crate) timed_out_gangs: BTreeMap<WorkId, TimedOutGang>,
    /// The processes stopped at the masters' word whose end their workers have not reported,
    /// with the cores and memory they keep until then. Came with format 13: kept only from
    /// log format 4, so a snapshot of format 12 reads as one with none.
    pub(crate) stopping_room: BTreeMap<Stopped, StoppingRoom>,
    /// The resource profile each of `reservations` (by position) is kept for, when any is
    /// kept for one: empty while all are for the first of their owners' sizes they fit.
    /// Came with format 13 as well, written only from log format 4.
    pub(crate) reservation_profiles: Vec<u32>,
    /// The orderings of the leaves that set one other than `fifo`, user weights, a maximum
    /// priority or a user limit. Came with format 14, written only from log format 4: a
    /// snapshot of format 13 reads as one without.
    pub(crate) orderings: BTreeMap<QueueName, QueueOrdering>,
    /// The priority each active application asked for, where other than 0 (its queue's
    /// `max_priority` caps what it has). Came with format 14 as well, written only from log
    /// format 4.
    pub(crate) priorities: BTreeMap<AppId, i32>,
    /// The priority each driver that has not ended asked for, where other than 0, capped as
    /// an application's is. Came with format 14 as well, written only from log format 4.
    pub(crate) driver_priorities: BTreeMap<DriverId, i32>,
    /// The applications, active or completed and kept, that log Spark events. Came with
    /// format 14 as well, written only from log format 4.
    pub(crate) event_logs: BTreeSet<AppId>,
    /// The workers as scheduling passes see them, in id order, and the active apps, in
    /// submission order: each pass's snapshot shares them rather than copying every worker
    /// and app. Kept as they change (see `scheduling.rs`); not in snapshots, but built anew
    /// as one is decoded, and as the queues change.
    #[serde(skip)]
    pub(crate) pass_workers: Shared<core::Worker>,
    #[serde(skip)]
    pub(crate) pass_apps: Shared<core::AppRequest>,
}

/// The drivers a state holds, by where they are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverCounts {
    /// Waiting to start (SUBMITTED).
    pub waiting: usize,
    /// Started and not ended (RUNNING).
    pub running: usize,
    /// Ended, and retained.
    pub ended: usize,
}

/// How many ended executors of one application the state keeps.
pub const ENDED_EXECUTORS_KEPT: usize = 128;

/// The results of recent client requests, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct RequestLog {
    order: VecDeque<RequestId>,
    results: BTreeMap<RequestId, Result<Response, ApplyError>>,
}

impl RequestLog {
    pub(crate) fn get(&self, id: &RequestId) -> Option<&Result<Response, ApplyError>> {
        self.results.get(id)
    }

    pub(crate) fn insert(
        &mut self,
        id: RequestId,
        result: Result<Response, ApplyError>,
        keep: usize,
    ) {
        self.order.push_back(id.clone());
        self.results.insert(id, result);
        while self.order.len() > keep {
            let oldest = self.order.pop_front().expect("longer than keep");
            self.results.remove(&oldest);
        }
    }
}

impl ClusterState {
    /// An empty cluster with these settings.
    pub fn new(config: StateConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    /// The shared settings.
    pub fn config(&self) -> &StateConfig {
        &self.config
    }

    /// The cluster's effective log format: what its log and snapshots may hold.
    pub fn log_format(&self) -> LogFormat {
        self.raised_format.unwrap_or(LogFormat::FIRST)
    }

    /// Room kept for prior work that preempted.
    pub fn reservations(&self) -> &[Reservation] {
        &self.reservations
    }

    /// ALIVE workers being drained.
    pub fn draining(&self) -> &BTreeMap<WorkerId, Drain> {
        &self.draining
    }

    /// Keeps `reservation`, already taken on its worker, for resource profile `profile` of
    /// its owner (0: the first of its owner's sizes it fits).
    pub(crate) fn keep_room(&mut self, reservation: Reservation, profile: u32) {
        if profile != 0 || !self.reservation_profiles.is_empty() {
            self.reservation_profiles.resize(self.reservations.len(), 0);
            self.reservation_profiles.push(profile);
        }
        self.reservations.push(reservation);
    }

    /// Takes out the kept room `ends` picks and returns it to its workers: each with the
    /// profile it was kept for.
    pub(crate) fn release_kept_room(
        &mut self,
        ends: impl Fn(&Reservation) -> bool,
    ) -> Vec<(Reservation, u32)> {
        let profiles = std::mem::take(&mut self.reservation_profiles)
            .into_iter()
            .chain(std::iter::repeat(0));
        let (ended, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.reservations)
            .into_iter()
            .zip(profiles)
            .partition(|(reservation, _)| ends(reservation));
        let (reservations, profiles): (Vec<_>, Vec<_>) = kept.into_iter().unzip();
        self.reservations = reservations;
        if profiles.iter().any(|&profile| profile != 0) {
            self.reservation_profiles = profiles;
        }
        for (reservation, _) in &ended {
            if let Some(worker) = self.workers.get_mut(&reservation.worker) {
                release(worker, &reservation.resources);
                self.show_worker_to_passes(&reservation.worker);
            }
        }
        ended
    }

    /// Every known worker, by id.
    pub fn workers(&self) -> &BTreeMap<WorkerId, Worker> {
        &self.workers
    }

    /// Active apps, by id.
    pub fn apps(&self) -> &BTreeMap<AppId, App> {
        &self.apps
    }

    /// Active drivers, by id.
    pub fn drivers(&self) -> &BTreeMap<DriverId, Driver> {
        &self.drivers
    }

    /// The room active driver `id`'s application needs first, if the driver said.
    pub fn driver_gang(&self, id: &DriverId) -> Option<&DriverGang> {
        self.driver_gangs.get(id)
    }

    /// Whether room is kept beside driver `id` until its application registers.
    pub fn keeps_room_for_app_of(&self, id: &DriverId) -> bool {
        self.driver_gangs
            .get(id)
            .is_some_and(|gang| gang.app.is_none())
    }

    /// Driver `id` registered application `app`: the room kept beside the driver is the
    /// application's now.
    pub(crate) fn driver_registered_its_app(&mut self, id: &DriverId, app: &AppId) {
        if let Some(gang) = self.driver_gangs.get_mut(id) {
            gang.app = Some(app.clone());
        }
    }

    /// The executors of its own size active application `id` needs at once, if it is a gang.
    pub fn gang(&self, id: &AppId) -> Option<u32> {
        self.gangs.get(id).copied()
    }

    /// The minimum of active application `id`, if it is a gang that holds none of its
    /// own size's executors yet: one that waits to be granted all of it at once.
    pub(crate) fn waiting_gang(&self, id: &AppId) -> Option<u32> {
        let minimum = self.gang(id)?;
        // Every executor a profile lists is a live one of the app's (the invariants).
        let of_profiles = self.profiles.get(id).map_or(0, |p| p.executors.len());
        (self.apps.get(id)?.executors.len() == of_profiles).then_some(minimum)
    }

    /// How active or retained application or driver `id` waited its gang's timeout, if it
    /// did.
    pub fn timed_out_gang(&self, id: &WorkId) -> Option<&TimedOutGang> {
        self.timed_out_gangs.get(id)
    }

    /// The applications and drivers, active or retained, whose gangs waited their timeout.
    pub fn timed_out_gangs(&self) -> &BTreeMap<WorkId, TimedOutGang> {
        &self.timed_out_gangs
    }

    /// The queue configuration as set (without the implicit `default`).
    pub fn queues(&self) -> Vec<QueueConfig> {
        self.queues
            .iter()
            .map(|q| q.config(&self.capacities, &self.admission, &self.orderings))
            .collect()
    }

    /// Ended apps, oldest first.
    pub fn completed_apps(&self) -> &VecDeque<App> {
        &self.completed_apps
    }

    /// Ended drivers, oldest first.
    pub fn completed_drivers(&self) -> &VecDeque<Driver> {
        &self.completed_drivers
    }

    /// Up to `limit` drivers, active or retained, in id order from `from` on; and the id the
    /// next page starts from, if any is left.
    pub fn drivers_page(&self, from: &DriverId, limit: usize) -> (Vec<&Driver>, Option<DriverId>) {
        let mut ended: Vec<&Driver> = self
            .completed_drivers
            .iter()
            .filter(|d| d.id >= *from)
            .collect();
        ended.sort_by(|a, b| a.id.cmp(&b.id));
        let mut active = self
            .drivers
            .range(from.clone()..)
            .map(|(_, d)| d)
            .peekable();
        let mut ended = ended.into_iter().peekable();
        let mut next = move || match (active.peek(), ended.peek()) {
            (Some(a), Some(e)) if e.id < a.id => ended.next(),
            (Some(_), _) => active.next(),
            (None, _) => ended.next(),
        };
        let page: Vec<&Driver> = std::iter::from_fn(&mut next).take(limit).collect();
        (page, next().map(|d| d.id.clone()))
    }

    /// How many drivers wait to start, run, and have ended (retained).
    pub fn driver_counts(&self) -> DriverCounts {
        let waiting = self
            .drivers
            .values()
            .filter(|d| d.state == DriverState::Submitted)
            .count();
        DriverCounts {
            waiting,
            running: self.drivers.len() - waiting,
            ended: self.completed_drivers.len(),
        }
    }

    /// The ended executors kept of application `id`, oldest first (from log format 3).
    pub fn ended_executors(&self, id: &AppId) -> impl Iterator<Item = &Executor> {
        self.ended_executors.get(id).into_iter().flatten()
    }

    /// Whether the end of executor `id` of `app` on `worker` is still to be heard: the
    /// masters ended it KILLED, its process then running on through its kill grace, and its
    /// kept record has no exit code yet (from log format 4: before, it is never recorded).
    pub fn awaits_exit_code(&self, app: &AppId, id: ExecutorId, worker: &WorkerId) -> bool {
        self.log_format() >= LogFormat::FOURTH
            && self
                .ended_executors(app)
                .any(|e| e.id == id && &e.worker == worker && awaits_code(e))
    }

    /// Records how executor `id` of `app`, ended at the masters' word, exited, as its worker
    /// reported (from log format 4): whether it was one still to be heard. An end that says
    /// no code records nothing.
    pub(crate) fn record_exit_code(
        &mut self,
        app: &AppId,
        id: ExecutorId,
        exit_code: Option<i32>,
    ) -> bool {
        if self.log_format() < LogFormat::FOURTH || exit_code.is_none() {
            return false;
        }
        let Some(ended) = self.ended_executors.get_mut(app) else {
            return false;
        };
        match ended.iter_mut().rev().find(|e| e.id == id) {
            Some(executor) if awaits_code(executor) => {
                executor.exit_code = exit_code;
                true
            }
            _ => false,
        }
    }

    /// The resource profiles of active application `id` (from log format 3).
    pub fn app_profiles(&self, id: &AppId) -> Option<&AppProfiles> {
        self.profiles.get(id)
    }

    /// The resource profile live executor `executor` of `app` is of, with its id, unless it
    /// is of the application's own size.
    pub fn executor_profile(&self, app: &AppId, executor: ExecutorId) -> Option<(u32, &Profile)> {
        let profiles = self.profiles.get(app)?;
        let id = *profiles.executors.get(&executor)?;
        Some((id, &profiles.profiles[&id]))
    }

    /// The driver that driver `id`, relaunched, was submitted again as (from log format 3).
    pub fn relaunched_as(&self, id: &DriverId) -> Option<&DriverId> {
        self.relaunched.get(id)
    }

    /// Driver `id`, active or among the ended ones kept.
    pub fn known_driver(&self, id: &DriverId) -> Option<&Driver> {
        self.drivers
            .get(id)
            .or_else(|| self.completed_drivers.iter().find(|d| &d.id == id))
    }

    /// Application `id`, active or among the ended ones kept.
    pub fn known_app(&self, id: &AppId) -> Option<&App> {
        self.apps
            .get(id)
            .or_else(|| self.completed_apps.iter().find(|a| &a.id == id))
    }

    /// Named users, by name.
    pub fn users(&self) -> &BTreeMap<String, User> {
        &self.users
    }

    /// The queue configuration as set, with each queue's access lists.
    pub fn queue_specs(&self) -> Vec<QueueSpec> {
        self.specs(self.queues())
    }

    /// The queues in force: those set, and `default` after them when they do not list it,
    /// as every pass has it ([`muster_core::queues::with_default`]).
    pub fn queues_in_force(&self) -> Vec<QueueSpec> {
        self.specs(muster_core::queues::with_default(&self.queues()))
    }

    fn specs(&self, configs: Vec<QueueConfig>) -> Vec<QueueSpec> {
        configs
            .into_iter()
            .map(|config| {
                let access = self.access(&config.name).clone();
                QueueSpec::from((config, access))
            })
            .collect()
    }

    /// Who may use queue `name`.
    pub fn access(&self, name: &QueueName) -> &QueueAccess {
        static UNLISTED: QueueAccess = QueueAccess::DEFAULT;
        self.access.get(name).unwrap_or(&UNLISTED)
    }

    /// The named user who submitted driver `id`, if one did.
    pub fn driver_owner(&self, id: &DriverId) -> Option<&Owner> {
        self.driver_users.get(id)
    }

    /// Application `id`'s priority in its queue: the one it asked for (0 unless it did),
    /// at most its queue's `max_priority`, which is 0 where the queue sets none.
    pub fn app_priority(&self, id: &AppId) -> i32 {
        let queue = self.apps.get(id).map(|app| &app.desc.queue);
        self.capped_priority(self.priorities.get(id), queue)
    }

    /// Whether application `id` (active, or completed and kept) logs Spark events.
    pub fn logs_events(&self, id: &AppId) -> bool {
        self.event_logs.contains(id)
    }

    /// Driver `id`'s priority in its queue, capped as an application's is
    /// ([`ClusterState::app_priority`]).
    pub fn driver_priority(&self, id: &DriverId) -> i32 {
        let queue = self.drivers.get(id).map(|driver| &driver.desc.queue);
        self.capped_priority(self.driver_priorities.get(id), queue)
    }

    /// The priority `asked` (0 if none) as `queue`'s `max_priority` caps it: at 0 where the
    /// queue sets none.
    fn capped_priority(&self, asked: Option<&i32>, queue: Option<&QueueName>) -> i32 {
        let Some(&asked) = asked else {
            return 0;
        };
        let cap = queue
            .and_then(|queue| self.orderings.get(queue))
            .and_then(|ordering| ordering.max_priority)
            .unwrap_or(0);
        asked.min(cap)
    }

    /// The user application `app` counts for where queues share among users: the named user
    /// who registered it, else the user it says it runs as (none if it says none).
    pub fn user_of<'s>(&'s self, app: &'s App) -> Option<&'s str> {
        self.app_user(&app.id)
            .or((!app.desc.user.is_empty()).then_some(app.desc.user.as_str()))
    }

    /// The named user who registered application `id`, if one did.
    pub fn app_user(&self, id: &AppId) -> Option<&str> {
        self.app_users.get(id).map(String::as_str)
    }

    /// How many of `user`'s applications, and drivers still waiting for a worker, are in
    /// `queue`: what its cap per user counts (a running driver counts through the
    /// application it registers).
    pub fn active_of(&self, user: &str, queue: &QueueName) -> usize {
        let apps = self
            .apps
            .values()
            .filter(|a| &a.desc.queue == queue && self.app_user(&a.id) == Some(user))
            .count();
        let drivers = self
            .drivers
            .values()
            .filter(|d| d.state == DriverState::Submitted && &d.desc.queue == queue)
            .filter(|d| self.driver_owner(&d.id).is_some_and(|o| o.user == user))
            .count();
        apps + drivers
    }

    pub(crate) fn worker_mut(&mut self, id: &WorkerId) -> Result<&mut Worker, ApplyError> {
        self.workers
            .get_mut(id)
            .ok_or_else(|| ApplyError::UnknownWorker(id.clone()))
    }

    pub(crate) fn app_mut(&mut self, id: &AppId) -> Result<&mut App, ApplyError> {
        self.apps
            .get_mut(id)
            .ok_or_else(|| ApplyError::UnknownApp(id.clone()))
    }

    /// Refuses work for queue `name` unless it is a leaf: known, and not a parent.
    pub(crate) fn takes_work(&self, name: &QueueName) -> Result<(), ApplyError> {
        muster_core::model::takes_work(&self.queues(), name).map_err(|error| match error {
            NotALeaf::Unknown(queue) => ApplyError::UnknownQueue(queue),
            parent @ NotALeaf::Parent { .. } => ApplyError::Invalid {
                field: "queue".to_owned(),
                message: parent.to_string(),
            },
        })
    }

    /// Whether room is kept for an application of queue `name`.
    pub fn room_kept_for_queue(&self, name: &QueueName) -> bool {
        self.reservations.iter().any(|r| match &r.owner {
            WorkId::App(app) => self.apps.get(app).is_some_and(|a| &a.desc.queue == name),
            WorkId::Driver(_) => false,
        })
    }

    /// What the ALIVE workers have in all: the base of the users' shares.
    pub fn alive_capacity(&self) -> Resources {
        self.workers
            .values()
            .filter(|w| w.state == WorkerState::Alive)
            .fold(Resources::default(), |sum, w| {
                sum.saturating_add(&w.capacity)
            })
    }

    /// Whether queue `name` is a prior queue.
    pub fn is_prior(&self, name: &QueueName) -> bool {
        self.queues.iter().any(|q| &q.name == name && q.prior)
    }

    /// How many live executors and drivers of prior queues each worker runs, as its
    /// `prior_work` should say.
    pub(crate) fn prior_work_by_worker(&self) -> BTreeMap<WorkerId, u32> {
        let executors = self
            .apps
            .values()
            .filter(|a| self.is_prior(&a.desc.queue))
            .flat_map(|a| a.executors.values().map(|e| &e.worker));
        let drivers = self
            .drivers
            .values()
            .filter(|d| self.is_prior(&d.desc.queue))
            .filter_map(|d| d.worker.as_ref());
        let mut counts = BTreeMap::new();
        for worker in executors.chain(drivers) {
            *counts.entry(worker.clone()).or_default() += 1;
        }
        counts
    }

    /// Counts each worker's `prior_work` anew, and builds the workers and apps passes see:
    /// after the queues change, or a snapshot, which keeps none of them, is decoded.
    pub(crate) fn derive_pass_views(&mut self) {
        let mut counts = self.prior_work_by_worker();
        for worker in self.workers.values_mut() {
            worker.prior_work = counts.remove(&worker.id).unwrap_or(0);
        }
        self.pass_workers = self.workers_as_passes_see();
        self.pass_apps = self.apps_as_passes_see();
    }

    pub(crate) fn take_submission(&mut self) -> u64 {
        self.next_submission += 1;
        self.next_submission - 1
    }

    /// `app-yyyyMMddHHmmss-NNNN` from the command's time and the replicated counter.
    pub(crate) fn new_app_id(&mut self, at: Timestamp) -> AppId {
        let id = format!("app-{}-{:04}", at.compact_utc(), self.next_app_number);
        self.next_app_number += 1;
        AppId::from(id)
    }

    /// `driver-yyyyMMddHHmmss-NNNN` from the command's time and the replicated counter.
    pub(crate) fn new_driver_id(&mut self, at: Timestamp) -> DriverId {
        let id = format!("driver-{}-{:04}", at.compact_utc(), self.next_driver_number);
        self.next_driver_number += 1;
        DriverId(id)
    }

    /// Submits `desc` again under a new id for driver `old`, which ended RELAUNCHING; the
    /// new driver keeps `old`'s user, and from log format 3, `old` names it.
    pub(crate) fn relaunch_driver(
        &mut self,
        old: &DriverId,
        desc: DriverDescription,
        at: Timestamp,
    ) -> DriverId {
        let id = self.add_driver(desc, at);
        if let Some(user) = self.driver_users.get(old).cloned() {
            self.driver_users.insert(id.clone(), user);
        }
        if let Some(gang) = self.driver_gangs.remove(old) {
            let gang = DriverGang { app: None, ..gang };
            self.driver_gangs.insert(id.clone(), gang);
        }
        if let Some(priority) = self.driver_priorities.remove(old) {
            self.driver_priorities.insert(id.clone(), priority);
        }
        if self.log_format() >= LogFormat::THIRD {
            self.relaunched.insert(old.clone(), id.clone());
        }
        id
    }

    pub(crate) fn add_driver(&mut self, desc: DriverDescription, at: Timestamp) -> DriverId {
        let id = self.new_driver_id(at);
        let submission = self.take_submission();
        self.drivers.insert(
            id.clone(),
            Driver {
                id: id.clone(),
                desc,
                state: DriverState::Submitted,
                worker: None,
                submission,
                submitted_at: at,
                ended_at: None,
                exit_code: None,
            },
        );
        id
    }

    /// Ends live executor `id` of `app` in `state` with `exit_code`: it leaves its app and
    /// frees its worker.
    ///
    /// # Panics
    ///
    /// If the executor is not live: callers check first.
    pub(crate) fn end_executor(
        &mut self,
        app: &AppId,
        id: ExecutorId,
        state: ExecutorState,
        exit_code: Option<i32>,
        effects: &mut Effects,
    ) {
        debug_assert!(state.is_finished());
        let prior = self.is_prior(&self.apps[app].desc.queue);
        let app_info = self
            .apps
            .get_mut(app)
            .expect("ending an executor of an active app");
        let mut executor = app_info
            .remove_executor(id)
            .expect("ending a live executor");
        self.held_by(app).update(|held| {
            let at = held
                .binary_search_by_key(&Some(id), |e| e.id)
                .expect("passes see every live executor");
            held.remove(at);
        });
        if let Some(profiles) = self.profiles.get_mut(app) {
            profiles.executors.remove(&id);
        }
        let worker = self
            .workers
            .get_mut(&executor.worker)
            .expect("executors run on known workers");
        release(worker, &executor.resources);
        worker.executors.remove(&(app.clone(), id));
        worker.prior_work -= u32::from(prior);
        self.show_worker_to_passes(&executor.worker);
        self.free_addresses(Holder::Executor(app, id));
        executor.state = state;
        executor.exit_code = exit_code;
        if self.log_format() >= LogFormat::THIRD {
            let exactly = self.log_format() >= LogFormat::FOURTH;
            let ended = self.ended_executors.entry(app.clone()).or_default();
            if exactly {
                // Exactly the documented number (from log format 4).
                while ended.len() >= ENDED_EXECUTORS_KEPT {
                    ended.pop_front();
                }
                ended.push_back(executor.clone());
            } else {
                retain_last(ended, executor.clone(), ENDED_EXECUTORS_KEPT);
            }
        }
        effects.ended_executors.push((app.clone(), executor));
    }

    /// Ends live executor `id` of `app` as KILLED at the masters' word: its process may run
    /// on for its kill grace, so what it holds stays its until its end is reported
    /// ([`ClusterState::keep_until_ended`]).
    pub(crate) fn stop_executor(&mut self, app: &AppId, id: ExecutorId, effects: &mut Effects) {
        let addresses = self.executor_addresses(app, id).clone();
        self.end_executor(app, id, ExecutorState::Killed, None, effects);
        let (_, executor) = effects.ended_executors.last().expect("just ended");
        let (worker, resources) = (executor.worker.clone(), executor.resources.clone());
        let process = Stopped::Executor(app.clone(), id);
        self.keep_until_ended(process, &worker, &resources, addresses);
    }

    /// Ends active driver `id` as KILLED at the masters' word, keeping what a running one
    /// holds until its end is reported, as [`ClusterState::stop_executor`].
    pub(crate) fn stop_driver(&mut self, id: &DriverId, at: Timestamp, effects: &mut Effects) {
        let addresses = self.driver_addresses(id).clone();
        let driver = &self.drivers[id];
        let (worker, resources) = (driver.worker.clone(), driver.desc.resources.clone());
        self.end_driver(id, DriverState::Killed, None, at, effects);
        if let Some(worker) = worker {
            let process = Stopped::Driver(id.clone());
            self.keep_until_ended(process, &worker, &resources, addresses);
        }
    }

    /// Removes active app `id` in `state` (Spark's `removeApplication`): its live executors
    /// are KILLED and it joins the completed apps.
    pub(crate) fn remove_app(
        &mut self,
        id: &AppId,
        state: AppState,
        at: Timestamp,
        effects: &mut Effects,
    ) {
        let executors: Vec<ExecutorId> = self.apps[id].executors.keys().copied().collect();
        for executor in executors {
            self.stop_executor(id, executor, effects);
        }
        self.hide_app_from_passes(id);
        let mut app = self.apps.remove(id).expect("removing an active app");
        self.profiles.remove(id);
        self.gangs.remove(id);
        self.priorities.remove(id);
        app.state = state;
        app.ended_at = Some(at);
        let forgotten = retain_last(&mut self.completed_apps, app, self.config.retained_apps);
        for app in forgotten {
            self.app_users.remove(&app.id);
            self.event_logs.remove(&app.id);
            self.ended_executors.remove(&app.id);
            self.timed_out_gangs.remove(&WorkId::App(app.id));
        }
        effects.removed_apps.push((id.clone(), state));
    }

    /// Ends active driver `id` in `state`, freeing its worker.
    pub(crate) fn end_driver(
        &mut self,
        id: &DriverId,
        state: DriverState,
        exit_code: Option<i32>,
        at: Timestamp,
        effects: &mut Effects,
    ) {
        let mut driver = self.drivers.remove(id).expect("ending an active driver");
        // A relaunched driver's gang and priority go to its successor (`relaunch_driver`).
        if state != DriverState::Relaunching {
            self.driver_gangs.remove(id);
            self.driver_priorities.remove(id);
        }
        let prior = self.is_prior(&driver.desc.queue);
        if let Some(worker_id) = &driver.worker {
            let worker = self
                .workers
                .get_mut(worker_id)
                .expect("drivers run on known workers");
            release(worker, &driver.desc.resources);
            worker.drivers.remove(id);
            worker.prior_work -= u32::from(prior);
            self.show_worker_to_passes(worker_id);
            self.free_addresses(Holder::Driver(id));
        }
        effects
            .ended_drivers
            .push((id.clone(), driver.worker.clone(), state));
        driver.state = state;
        driver.exit_code = exit_code;
        driver.ended_at = Some(at);
        let forgotten = retain_last(
            &mut self.completed_drivers,
            driver,
            self.config.retained_drivers,
        );
        for driver in forgotten {
            self.driver_users.remove(&driver.id);
            self.relaunched.remove(&driver.id);
            self.timed_out_gangs.remove(&WorkId::Driver(driver.id));
        }
    }

    /// Ends everything on worker `id` because it stops running work (lost or decommissioned):
    /// executors end in `executor_state`, supervised drivers are resubmitted under a new id
    /// (SPARK-19900), the others end in `unsupervised_state`.
    pub(crate) fn evacuate_worker(
        &mut self,
        id: &WorkerId,
        executor_state: ExecutorState,
        unsupervised_state: DriverState,
        at: Timestamp,
        effects: &mut Effects,
    ) {
        self.release_kept_room(|r| &r.worker == id);
        self.forget_stopping_on(id);
        let worker = &self.workers[id];
        let executors: Vec<(AppId, ExecutorId)> = worker.executors.iter().cloned().collect();
        let drivers: Vec<DriverId> = worker.drivers.iter().cloned().collect();
        for (app, executor) in executors {
            self.end_executor(&app, executor, executor_state, None, effects);
        }
        for driver in drivers {
            if self.drivers[&driver].desc.supervise {
                let desc = self.drivers[&driver].desc.clone();
                self.end_driver(&driver, DriverState::Relaunching, None, at, effects);
                let relaunched = self.relaunch_driver(&driver, desc, at);
                effects.relaunched_drivers.push((driver, relaunched));
            } else {
                self.end_driver(&driver, unsupervised_state, None, at, effects);
            }
        }
    }

    /// Whether worker `id` is ALIVE with room for `need`: the plan re-check.
    pub(crate) fn room_on(&self, id: &WorkerId, need: &Resources) -> Result<(), Rejection> {
        let worker = self.workers.get(id).ok_or(Rejection::UnknownWorker)?;
        if worker.state != WorkerState::Alive {
            return Err(Rejection::WorkerNotAlive(worker.state));
        }
        if self.draining.contains_key(id) {
            return Err(Rejection::Draining);
        }
        worker.free().fits(need).map_err(Rejection::NoRoom)
    }
}

/// Adds a placement's resources to a worker's usage.
pub(crate) fn take(worker: &mut Worker, resources: &Resources) {
    worker.used = worker
        .used
        .checked_add(resources)
        .expect("placements are checked against free resources");
}

/// Whether `executor`, ended, was stopped by the masters and has not said how it exited.
fn awaits_code(executor: &Executor) -> bool {
    executor.state == ExecutorState::Killed && executor.exit_code.is_none()
}

/// Returns a placement's resources to its worker.
pub(crate) fn release(worker: &mut Worker, resources: &Resources) {
    worker
        .used
        .subtract(resources)
        .expect("released resources were taken");
}

/// Appends `item`, first forgetting the oldest tenth when `keep` are already there (Spark's
/// `trimCompletedApps` rule); returns what was forgotten.
fn retain_last<T>(items: &mut VecDeque<T>, item: T, keep: usize) -> Vec<T> {
    let mut forgotten = Vec::new();
    if items.len() >= keep {
        let drop = (keep / 10).max(1).min(items.len());
        forgotten.extend(items.drain(..drop));
    }
    items.push_back(item);
    forgotten
}
