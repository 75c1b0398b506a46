//! The bridge to `muster-core`: the snapshot a scheduling pass sees of this state.
//!
//! The state keeps its workers and active apps as passes see them, and each snapshot shares
//! those lists instead of copying every worker and app:
//! * wherever a worker's usage, state, drain or prior work changes,
//!   [`ClusterState::show_worker_to_passes`] shows it anew;
//! * wherever an app registers, ends, or changes its limit or profiles,
//!   [`ClusterState::show_app_to_passes`] or [`ClusterState::hide_app_from_passes`] does,
//!   and its executors change in [`ClusterState::held_by`].
//!
//! `check_invariants` compares both lists with the state.

use std::collections::BTreeMap;

use muster_core::ids::{AppId, QueueName, WorkerId};
use muster_core::model::{
    self as core, DriversHold, GangRequest, HeldExecutors, PassConfig, WorkerState,
};

use crate::ClusterState;
use crate::model::{App, Driver, DriverState, Worker};

impl ClusterState {
    /// Whether a scheduling pass has anything to do: a driver is submitted, or an app has
    /// cores left below its `cores_max` (`default_cores` for one without) for an executor of
    /// one of its sizes. When not, a pass would plan nothing and list nothing as waiting, so
    /// the leader skips it.
    pub fn has_work_to_place(&self, default_cores: Option<u32>) -> bool {
        let app_wants_more = |app: &App| {
            let requested = app
                .desc
                .cores_max
                .or(default_cores)
                .map_or(u64::MAX, u64::from);
            let left = requested.saturating_sub(app.cores_granted);
            // Every executor takes a core or more: most apps, with none left, are decided
            // without looking up their profiles.
            if left == 0 {
                return false;
            }
            let profiles = self
                .profiles
                .get(&app.id)
                .into_iter()
                .flat_map(|p| p.profiles.values());
            let smallest = std::iter::once(app.desc.executor_cores)
                .chain(profiles.map(|profile| profile.executor_cores))
                .map(|cores| u64::from(cores.unwrap_or(1)))
                .min()
                .unwrap_or(1);
            left >= smallest
        };
        self.drivers
            .values()
            .any(|d| d.state == DriverState::Submitted)
            || self.apps.values().any(app_wants_more)
    }

    /// What a scheduling pass needs: workers with their usage and whether they run prior
    /// work, waiting drivers (with their applications' gangs) and active apps in submission
    /// order, what running drivers hold in each queue, the room kept beside running drivers
    /// for their applications, and the queues.
    pub fn scheduling_snapshot(&self, config: PassConfig) -> core::Snapshot {
        let mut waiting: Vec<_> = self
            .drivers
            .values()
            .filter(|d| d.state == DriverState::Submitted)
            .collect();
        waiting.sort_by_key(|d| d.submission);
        let drivers = waiting
            .into_iter()
            .map(|d| core::DriverRequest {
                id: d.id.clone(),
                need: d.desc.resources.clone(),
                queue: d.desc.queue.clone(),
                gang: self.driver_gangs.get(&d.id).map(|g| g.gang.clone()),
                priority: self.driver_priority(&d.id),
                spark: d.desc.env.contains_key(core::SPARK_SUBMISSION_VARIABLE),
            })
            .collect();
        // Kept until the application registers; then, for one that is no gang (a gang's
        // room is kept by its own rule), from drivers until it holds an executor.
        let mut pending: Vec<(&Driver, &GangRequest, bool)> = self
            .driver_gangs
            .iter()
            .filter_map(|(id, g)| {
                let driver = &self.drivers[id];
                let registered = match &g.app {
                    None => false,
                    Some(app) if self.gangs.contains_key(app) => return None,
                    Some(app) => match self.apps.get(app) {
                        Some(app) if app.executors.is_empty() => true,
                        _ => return None,
                    },
                };
                (driver.state == DriverState::Running).then_some((driver, &g.gang, registered))
            })
            .collect();
        pending.sort_by_key(|(d, ..)| d.submission);
        let pending_gangs = pending
            .into_iter()
            .map(|(d, gang, registered)| core::PendingGang {
                queue: d.desc.queue.clone(),
                gang: gang.clone(),
                registered,
            })
            .collect();

        let mut running_drivers = 0;
        let mut drivers_hold: BTreeMap<QueueName, DriversHold> = BTreeMap::new();
        for driver in self.drivers.values() {
            if driver.state == DriverState::Running {
                running_drivers += 1;
                let hold = drivers_hold.entry(driver.desc.queue.clone()).or_default();
                *hold = hold.with(&driver.desc.resources);
            }
        }
        core::Snapshot {
            config,
            queues: self.queues(),
            workers: self.pass_workers.clone(),
            running_drivers,
            drivers_hold,
            drivers,
            pending_gangs,
            apps: self.pass_apps.clone(),
            preemption: None,
        }
    }
}

impl ClusterState {
    /// Worker `worker` as a scheduling pass sees it.
    fn worker_as_passes_see(&self, worker: &Worker) -> core::Worker {
        core::Worker {
            id: worker.id.clone(),
            host: worker.host.clone(),
            capacity: worker.capacity.clone(),
            used: worker.used.clone(),
            // A draining worker is offered nothing, as a decommissioned one; what it holds
            // still counts.
            state: if self.draining.contains_key(&worker.id) {
                WorkerState::Decommissioned
            } else {
                worker.state
            },
            hosts_prior: worker.prior_work > 0,
            // What its agent said of its Spark is the leader's to add.
            without_spark: false,
        }
    }

    /// Every worker as scheduling passes see it, in id order.
    pub(crate) fn workers_as_passes_see(&self) -> core::Shared<core::Worker> {
        self.workers
            .values()
            .map(|worker| self.worker_as_passes_see(worker))
            .collect()
    }

    /// Shows passes worker `id` as it is now, after its usage, state, drain or prior work
    /// changed. Workers are never forgotten, so a worker unknown to passes is a new one.
    pub(crate) fn show_worker_to_passes(&mut self, id: &WorkerId) {
        let seen = self.worker_as_passes_see(&self.workers[id]);
        match self.pass_workers.binary_search_by(|w| w.id.cmp(id)) {
            Ok(i) if self.pass_workers[i] == seen => {}
            Ok(i) => self.pass_workers.make_mut()[i] = seen,
            Err(i) => self.pass_workers.make_mut().insert(i, seen),
        }
    }

    /// Active app `app` as a scheduling pass sees it.
    fn app_as_passes_see(&self, app: &App) -> core::AppRequest {
        let profiles = self.profiles.get(&app.id);
        core::AppRequest {
            id: app.id.clone(),
            queue: app.desc.queue.clone(),
            cores_max: app.desc.cores_max,
            executor_cores: app.desc.executor_cores,
            executor_memory_mb: app.desc.executor_memory_mb,
            executor_resources: app.desc.executor_resources.clone(),
            executor_limit: app.executor_limit,
            min_executors: self.gangs.get(&app.id).copied(),
            executors: app.held_executors(profiles),
            profiles: profiles
                .into_iter()
                .flat_map(|p| &p.profiles)
                .map(|(&id, profile)| core::ProfileRequest {
                    id,
                    executor_cores: profile.executor_cores,
                    executor_memory_mb: profile.executor_memory_mb,
                    executor_resources: profile.executor_resources.clone(),
                    executor_limit: profile.executor_limit,
                })
                .collect(),
            user: self.user_of(app).map(Into::into),
            priority: self.app_priority(&app.id),
        }
    }

    /// Every active app as scheduling passes see it, in submission order.
    pub(crate) fn apps_as_passes_see(&self) -> core::Shared<core::AppRequest> {
        let mut apps: Vec<&App> = self.apps.values().collect();
        apps.sort_by_key(|a| a.submission);
        apps.into_iter()
            .map(|app| self.app_as_passes_see(app))
            .collect()
    }

    /// Where active app `id` is, or belongs, among the apps passes see.
    fn pass_app_position(&self, id: &AppId) -> Result<usize, usize> {
        let submission = self.apps[id].submission;
        self.pass_apps
            .binary_search_by_key(&submission, |a| self.apps[&a.id].submission)
    }

    /// Shows passes active app `id` as it is now: registered, or with another limit or
    /// profiles.
    pub(crate) fn show_app_to_passes(&mut self, id: &AppId) {
        let seen = self.app_as_passes_see(&self.apps[id]);
        match self.pass_app_position(id) {
            Ok(i) => self.pass_apps.make_mut()[i] = seen,
            Err(i) => self.pass_apps.make_mut().insert(i, seen),
        }
    }

    /// No longer shows passes app `id`, which ends: while it is still active.
    pub(crate) fn hide_app_from_passes(&mut self, id: &AppId) {
        let i = self.shown_app(id);
        self.pass_apps.make_mut().remove(i);
    }

    /// The executors active app `id` holds as passes see them, to change as its executors
    /// start and end.
    pub(crate) fn held_by(&mut self, id: &AppId) -> &mut HeldExecutors {
        let i = self.shown_app(id);
        &mut self.pass_apps.make_mut()[i].executors
    }

    /// Where active app `id`, shown to passes, is among the apps they see.
    fn shown_app(&self, id: &AppId) -> usize {
        self.pass_app_position(id)
            .expect("passes see every active app")
    }
}
