//! The invariants every replica's state keeps after every apply. Tests call
//! [`ClusterState::check_invariants`] after each command; a violation is a bug in `apply`.

use std::collections::{BTreeMap, BTreeSet};

use muster_core::ids::{WorkId, WorkerId};
use muster_core::model::{WorkerState, validate_queues};
use muster_core::resources::Resources;

use crate::ClusterState;
use crate::commands::MAX_PROFILES;
use crate::model::DriverState;
use crate::state::ENDED_EXECUTORS_KEPT;

/// An invariant of [`ClusterState`] that does not hold: which, and the thing that breaks it.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvariantViolation(String);

/// Adds `resources` to what `worker` is found to hold.
fn add<'a>(
    usage: &mut BTreeMap<&'a WorkerId, Resources>,
    worker: &'a WorkerId,
    resources: &Resources,
) -> Result<(), InvariantViolation> {
    let used = usage.entry(worker).or_default();
    *used = used
        .checked_add(resources)
        .ok_or_else(|| InvariantViolation(format!("usage overflows on worker {worker}")))?;
    Ok(())
}

pub(crate) fn violated(message: String) -> Result<(), InvariantViolation> {
    Err(InvariantViolation(message))
}

impl ClusterState {
    /// Checks every invariant listed on [`ClusterState`].
    ///
    /// # Errors
    ///
    /// The first violation found, naming the invariant and the thing that breaks it.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        // Queue settings are checked when set; a snapshot must hold them checked too.
        if let Err(error) = validate_queues(&self.queues()) {
            return violated(format!("bad queue settings: {error}"));
        }
        let mut usage: BTreeMap<_, Resources> = BTreeMap::new();
        let mut placed_executors: BTreeMap<_, BTreeSet<_>> = BTreeMap::new();
        let mut placed_drivers: BTreeMap<_, BTreeSet<_>> = BTreeMap::new();

        for app in self.apps.values() {
            if app.state.is_finished() {
                return violated(format!("active app {} is {:?}", app.id, app.state));
            }
            let granted: u64 = app
                .executors
                .values()
                .map(|e| u64::from(e.resources.cores))
                .sum();
            if granted != app.cores_granted {
                return violated(format!(
                    "app {} has {} cores granted but its executors hold {granted}",
                    app.id, app.cores_granted
                ));
            }
            for (id, executor) in &app.executors {
                if executor.state.is_finished()
                    || executor.id != *id
                    || id.0 >= app.next_executor_id
                {
                    return violated(format!(
                        "app {} keeps a bad executor {id}: {executor:?}",
                        app.id
                    ));
                }
                add(&mut usage, &executor.worker, &executor.resources)?;
                placed_executors
                    .entry(&executor.worker)
                    .or_default()
                    .insert((app.id.clone(), *id));
            }
        }
        for driver in self.drivers.values() {
            match (driver.state, &driver.worker) {
                (DriverState::Submitted, None) => {}
                (DriverState::Running, Some(worker)) => {
                    add(&mut usage, worker, &driver.desc.resources)?;
                    placed_drivers
                        .entry(worker)
                        .or_default()
                        .insert(driver.id.clone());
                }
                (state, worker) => {
                    return violated(format!(
                        "active driver {} is {state:?} on {worker:?}",
                        driver.id
                    ));
                }
            }
        }

        for worker in self.draining.keys() {
            let alive = self
                .workers
                .get(worker)
                .is_some_and(|w| w.state == WorkerState::Alive);
            if !alive {
                return violated(format!("{worker} is draining but not ALIVE"));
            }
        }
        for reservation in &self.reservations {
            let alive = self
                .workers
                .get(&reservation.worker)
                .is_some_and(|w| w.state == WorkerState::Alive);
            if !alive {
                return violated(format!(
                    "room kept for {} on {}, which is not ALIVE",
                    reservation.owner, reservation.worker
                ));
            }
            add(&mut usage, &reservation.worker, &reservation.resources)?;
        }
        let profiles = &self.reservation_profiles;
        if !profiles.is_empty()
            && (profiles.len() != self.reservations.len() || profiles.iter().all(|&p| p == 0))
        {
            return violated(format!(
                "{} kept rooms with the profiles {profiles:?}",
                self.reservations.len()
            ));
        }
        for (worker, kept) in self.kept_by_stopping() {
            add(&mut usage, worker, &kept)?;
        }
        for worker in usage.keys().chain(placed_drivers.keys()) {
            if !self.workers.contains_key(*worker) {
                return violated(format!("work placed on unknown worker {worker}"));
            }
        }
        let prior_work = self.prior_work_by_worker();
        for worker in self.workers.values() {
            let used = usage.remove(&worker.id).unwrap_or_default();
            if used != worker.used {
                return violated(format!(
                    "worker {} records {} used but runs {used}",
                    worker.id, worker.used
                ));
            }
            if let Err(shortfall) = worker.capacity.fits(&used) {
                return violated(format!(
                    "worker {} is over-allocated: {shortfall}",
                    worker.id
                ));
            }
            let prior = prior_work.get(&worker.id).copied().unwrap_or(0);
            if worker.prior_work != prior {
                return violated(format!(
                    "worker {} counts {} prior executors and drivers but runs {prior}",
                    worker.id, worker.prior_work
                ));
            }
            let executors = placed_executors.remove(&worker.id).unwrap_or_default();
            let drivers = placed_drivers.remove(&worker.id).unwrap_or_default();
            if executors != worker.executors || drivers != worker.drivers {
                return violated(format!(
                    "worker {}'s executor and driver sets disagree with the apps and drivers",
                    worker.id
                ));
            }
            if worker.state != WorkerState::Alive && (!executors.is_empty() || !drivers.is_empty())
            {
                return violated(format!(
                    "worker {} is {:?} but runs work",
                    worker.id, worker.state
                ));
            }
        }
        if self.pass_workers != self.workers_as_passes_see() {
            return violated("the workers passes see are not the workers as they are".to_owned());
        }
        if self.pass_apps != self.apps_as_passes_see() {
            return violated("the apps passes see are not the apps as they are".to_owned());
        }

        self.check_addresses()?;
        self.check_stopping()?;
        self.check_relaunches()?;
        self.check_ended_executors()?;
        self.check_profiles()?;
        if let Some(id) = self.gangs.keys().find(|id| !self.apps.contains_key(*id)) {
            return violated(format!("a gang's minimum kept of {id}, not an active app"));
        }
        if let Some(id) = self
            .priorities
            .keys()
            .find(|id| !self.apps.contains_key(*id))
        {
            return violated(format!("a priority kept of {id}, not an active app"));
        }
        if let Some(id) = self
            .driver_priorities
            .keys()
            .find(|id| !self.drivers.contains_key(*id))
        {
            return violated(format!("a priority kept of {id}, not an active driver"));
        }
        if let Some(id) = self.event_logs.iter().find(|id| {
            !self.apps.contains_key(*id) && !self.completed_apps.iter().any(|a| &a.id == *id)
        }) {
            return violated(format!("events said to be logged by {id}, an app not kept"));
        }
        if let Some(id) = self
            .driver_gangs
            .keys()
            .find(|id| !self.drivers.contains_key(*id))
        {
            return violated(format!("a gang kept of driver {id}, not an active driver"));
        }
        if let Some(id) = self.timed_out_gangs.keys().find(|id| match id {
            WorkId::App(id) => {
                !self.apps.contains_key(id) && !self.completed_apps.iter().any(|a| &a.id == id)
            }
            WorkId::Driver(id) => {
                !self.drivers.contains_key(id)
                    && !self.completed_drivers.iter().any(|d| &d.id == id)
            }
        }) {
            return violated(format!("a timed-out gang kept of {id}, not known"));
        }
        self.check_ids_unique()
    }

    /// Resource profiles are kept only of active applications, at most [`MAX_PROFILES`]
    /// with ids of 1 or more, and each executor said to be of one is a live executor of its
    /// app, of a profile it has, and of that profile's size.
    fn check_profiles(&self) -> Result<(), InvariantViolation> {
        for (id, profiles) in &self.profiles {
            let Some(app) = self.apps.get(id) else {
                return violated(format!("resource profiles kept of {id}, not an active app"));
            };
            if profiles.profiles.len() > MAX_PROFILES || profiles.profiles.contains_key(&0) {
                return violated(format!("{id}: too many resource profiles, or a profile 0"));
            }
            for (executor, profile) in &profiles.executors {
                let of_its_size = app.executors.get(executor).is_some_and(|e| {
                    profiles
                        .profiles
                        .get(profile)
                        .is_some_and(|p| p.fits(&e.resources))
                });
                if !of_its_size {
                    return violated(format!(
                        "{id}: executor {executor} of profile {profile} is not live, or the \
                         profile is unknown or of another size"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Ended executors are kept only of active or retained applications, ended, and no more
    /// than [`ENDED_EXECUTORS_KEPT`] of each.
    fn check_ended_executors(&self) -> Result<(), InvariantViolation> {
        for (app, ended) in &self.ended_executors {
            if self.known_app(app).is_none()
                || ended.len() > ENDED_EXECUTORS_KEPT
                || ended.iter().any(|e| !e.state.is_finished())
            {
                return violated(format!(
                    "ended executors kept of {app}: not a known app, too many, or not ended"
                ));
            }
        }
        Ok(())
    }

    /// A relaunched driver names its successor only while it is retained, ended
    /// RELAUNCHING, and the successor is known (it ends after it, so it is retained longer).
    fn check_relaunches(&self) -> Result<(), InvariantViolation> {
        for (old, new) in &self.relaunched {
            let ended_relaunching = self
                .completed_drivers
                .iter()
                .any(|d| &d.id == old && d.state == DriverState::Relaunching);
            if !ended_relaunching || self.known_driver(new).is_none() {
                return violated(format!(
                    "driver {old} names {new} as relaunched, but is not a retained RELAUNCHING \
                     driver or {new} is unknown"
                ));
            }
        }
        Ok(())
    }

    /// Ids and places in submission order are never reused: every app and driver id, active
    /// or completed, is unique and was numbered below the counter, and so is every active
    /// app's and driver's place.
    fn check_ids_unique(&self) -> Result<(), InvariantViolation> {
        let numbered = |id: &str, next: u64| {
            id.rsplit('-')
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|n| n < next)
        };
        let mut apps = BTreeSet::new();
        for id in self
            .apps
            .keys()
            .chain(self.completed_apps.iter().map(|a| &a.id))
        {
            if !apps.insert(id) || !numbered(&id.0, self.next_app_number) {
                return violated(format!("app id {id} reused or beyond the counter"));
            }
        }
        let mut drivers = BTreeSet::new();
        for id in self
            .drivers
            .keys()
            .chain(self.completed_drivers.iter().map(|d| &d.id))
        {
            if !drivers.insert(id) || !numbered(&id.0, self.next_driver_number) {
                return violated(format!("driver id {id} reused or beyond the counter"));
            }
        }
        // The apps passes see are found by their place in submission order.
        let mut taken = BTreeSet::new();
        let mut place = |submission: u64| {
            if taken.insert(submission) && submission < self.next_submission {
                Ok(())
            } else {
                violated(format!(
                    "place {submission} in submission order is taken or beyond the counter"
                ))
            }
        };
        for app in self.apps.values() {
            place(app.submission)?;
        }
        for driver in self.drivers.values() {
            place(driver.submission)?;
        }
        Ok(())
    }
}
