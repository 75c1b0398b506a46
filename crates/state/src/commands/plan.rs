//! Applying one scheduling pass. Like Nomad's plan applier, every launch and each executor of
//! a grant is checked again against the current state and applied only if it still fits;
//! what no longer fits is reported.

use std::collections::{BTreeMap, BTreeSet};

use muster_core::plan::{DriverLaunch, ExecutorGrant, Plan};
use serde::{Deserialize, Serialize};

use super::{Apply, Op};
use crate::ClusterState;
use crate::addresses::Holder;
use crate::model::{AppState, DriverState, Executor, ExecutorState};
use crate::response::{ApplyError, Effects, Outcome, Rejected, Rejection, Response};
use crate::state::take;
use muster_core::ids::{AppId, ExecutorId, Timestamp, WorkerId};
use muster_core::resources::Resources;

/// The launches and grants of one scheduling pass, as `muster-core` produced them, all of
/// its grants of the applications' own executor sizes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ApplyPlan {
    /// Drivers to launch, in order.
    pub drivers: Vec<DriverLaunch>,
    /// Executors to grant, in order.
    pub executors: Vec<Grant>,
}

/// One scheduling pass whose grants include executors of applications' resource profiles
/// (from log format 3).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ApplyPlanWithProfiles {
    /// Drivers to launch, in order.
    pub drivers: Vec<DriverLaunch>,
    /// Executors to grant, in order.
    pub executors: Vec<ProfileGrant>,
}

/// Executors of one size granted to an app on a worker at once, as the log holds them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The app that receives the executors.
    pub app: AppId,
    /// The worker that runs them.
    pub worker: WorkerId,
    /// Each executor's cores, memory and custom resources.
    pub resources: Resources,
    /// How many executors, one or more.
    pub count: u32,
}

/// A grant of executors of an app's resource profile (0: its own size).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileGrant {
    /// The executors.
    pub grant: Grant,
    /// Their profile.
    pub profile: u32,
}

impl From<&ExecutorGrant> for Grant {
    fn from(grant: &ExecutorGrant) -> Self {
        Self {
            app: grant.app.clone(),
            worker: grant.worker.clone(),
            resources: grant.resources.clone(),
            count: grant.count,
        }
    }
}

/// The op that commits `plan`: an [`ApplyPlan`], which every release reads, unless it grants
/// executors of a resource profile (which exist only from log format 3).
pub fn plan_op(plan: &Plan) -> Op {
    let drivers = plan.drivers.clone();
    if plan.executors.iter().all(|grant| grant.profile == 0) {
        return Op::ApplyPlan(ApplyPlan {
            drivers,
            executors: plan.executors.iter().map(Grant::from).collect(),
        });
    }
    Op::ApplyPlanWithProfiles(ApplyPlanWithProfiles {
        drivers,
        executors: plan
            .executors
            .iter()
            .map(|grant| ProfileGrant {
                grant: grant.into(),
                profile: grant.profile,
            })
            .collect(),
    })
}

/// One scheduling pass as builds before grants had a count wrote it: one grant per executor.
/// Entries already in a log still read, and apply as an [`ApplyPlan`] whose grants each hold
/// one executor.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ApplyPlanPerExecutor {
    /// Drivers to launch, in order.
    pub drivers: Vec<DriverLaunch>,
    /// Executors to grant, in order.
    pub executors: Vec<GrantOfOne>,
}

/// One executor granted to an app on a worker, as [`ApplyPlanPerExecutor`] carries it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantOfOne {
    /// The app that receives the executor.
    pub app: AppId,
    /// The worker that runs it.
    pub worker: WorkerId,
    /// Its cores, memory and custom resources.
    pub resources: Resources,
}

impl Apply for ApplyPlanPerExecutor {
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        let executors = self
            .executors
            .iter()
            .map(|grant| Grant {
                app: grant.app.clone(),
                worker: grant.worker.clone(),
                resources: grant.resources.clone(),
                count: 1,
            })
            .collect();
        ApplyPlan {
            drivers: self.drivers.clone(),
            executors,
        }
        .apply(state, at)
    }
}

impl Apply for ApplyPlan {
    /// Never refused as a whole: each part that no longer fits is reported in `rejected`.
    fn apply(&self, state: &mut ClusterState, _at: Timestamp) -> Result<Response, ApplyError> {
        let grants = self.executors.iter().map(|grant| (grant, Some(0)));
        Ok(apply_plan(state, &self.drivers, grants))
    }
}

impl Apply for ApplyPlanWithProfiles {
    /// Never refused as a whole, as an [`ApplyPlan`].
    fn apply(&self, state: &mut ClusterState, _at: Timestamp) -> Result<Response, ApplyError> {
        let grants = self.executors.iter().map(|g| (&g.grant, Some(g.profile)));
        Ok(apply_plan(state, &self.drivers, grants))
    }
}

/// Launches `drivers` and grants `grants`, each of the profile it names or, for `None`, of
/// the first of its app's sizes it fits ([`grant_executor`]); what no longer fits is
/// reported in `rejected`.
pub(crate) fn apply_plan<'g>(
    state: &mut ClusterState,
    drivers: &[DriverLaunch],
    grants: impl Iterator<Item = (&'g Grant, Option<u32>)>,
) -> Response {
    let grants: Vec<(&Grant, Option<u32>)> = grants.collect();
    let broken_gangs = gangs_that_no_longer_fit(state, drivers, &grants);
    let mut launched = Vec::new();
    let mut executors = Vec::new();
    let mut rejected = Vec::new();
    for launch in drivers {
        match launch_driver(state, launch) {
            Ok(()) => launched.push((launch.driver.clone(), launch.worker.clone())),
            Err(reason) => rejected.push(Rejected {
                id: launch.driver.to_string(),
                worker: launch.worker.clone(),
                reason,
            }),
        }
    }
    for (grant, profile) in grants {
        if broken_gangs.contains(&grant.app) {
            rejected.push(Rejected {
                id: grant.app.to_string(),
                worker: grant.worker.clone(),
                reason: Rejection::GangNoLongerFits,
            });
            continue;
        }
        for _ in 0..grant.count {
            match grant_executor(state, grant, profile) {
                Ok(executor) => executors.push((grant.app.clone(), executor)),
                // Its further executors, of the same size for the same app on the
                // same worker, would be refused for the same reason.
                Err(reason) => {
                    rejected.push(Rejected {
                        id: grant.app.to_string(),
                        worker: grant.worker.clone(),
                        reason,
                    });
                    break;
                }
            }
        }
    }
    Response {
        outcome: Outcome::PlanApplied {
            drivers: launched,
            executors,
            rejected,
        },
        effects: Effects::default(),
    }
}

/// The gangs among `grants`' applications that hold none of their own executors and some of
/// whose grants would not fit any more, the plan's launches and grants before them taken:
/// the state moved since the pass, and a gang is granted all of its minimum or nothing.
fn gangs_that_no_longer_fit(
    state: &ClusterState,
    drivers: &[DriverLaunch],
    grants: &[(&Grant, Option<u32>)],
) -> BTreeSet<AppId> {
    let starting = |app: &AppId| state.waiting_gang(app).is_some();
    if !grants.iter().any(|(grant, _)| starting(&grant.app)) {
        return BTreeSet::new();
    }
    // What each worker has free as the plan is taken in order; none on one that takes
    // no work.
    let mut free: BTreeMap<WorkerId, Option<Resources>> = BTreeMap::new();
    let mut take = |worker: &WorkerId, need: &Resources| -> bool {
        let room = free.entry(worker.clone()).or_insert_with(|| {
            state
                .room_on(worker, &Resources::default())
                .ok()
                .map(|()| state.workers[worker].free())
        });
        room.as_mut()
            .is_some_and(|room| room.subtract(need).is_ok())
    };
    for launch in drivers {
        if let Some(driver) = state.drivers.get(&launch.driver) {
            take(&launch.worker, &driver.desc.resources);
        }
    }
    let mut broken = BTreeSet::new();
    for (grant, _) in grants {
        let fits = (0..grant.count).all(|_| take(&grant.worker, &grant.resources));
        if !fits && starting(&grant.app) {
            broken.insert(grant.app.clone());
        }
    }
    broken
}

fn launch_driver(state: &mut ClusterState, launch: &DriverLaunch) -> Result<(), Rejection> {
    let driver = state
        .drivers
        .get(&launch.driver)
        .ok_or(Rejection::UnknownDriver)?;
    if driver.state != DriverState::Submitted {
        return Err(Rejection::DriverNotWaiting(driver.state));
    }
    let need = driver.desc.resources.clone();
    let prior = state.is_prior(&driver.desc.queue);
    state.room_on(&launch.worker, &need)?;
    let worker = state
        .workers
        .get_mut(&launch.worker)
        .expect("room_on checked it");
    take(worker, &need);
    worker.drivers.insert(launch.driver.clone());
    worker.prior_work += u32::from(prior);
    state.show_worker_to_passes(&launch.worker);
    let driver = state
        .drivers
        .get_mut(&launch.driver)
        .expect("checked above");
    driver.state = DriverState::Running;
    driver.worker = Some(launch.worker.clone());
    state.hold_addresses(&launch.worker, Holder::Driver(&launch.driver), &need.custom);
    Ok(())
}

/// Grants one executor of `grant` as `profile` of its app, or, for `None` (room kept by a
/// preemption, which knows only the size), as the first of the app's sizes, its own and
/// then its profiles by id, that it fits and whose limit is not reached.
fn grant_executor(
    state: &mut ClusterState,
    grant: &Grant,
    profile: Option<u32>,
) -> Result<Executor, Rejection> {
    let app = state.apps.get(&grant.app).ok_or(Rejection::UnknownApp)?;
    let need = &grant.resources;
    let profiles = state.profiles.get(&grant.app);
    // The app's sizes `need` fits, with their limits and how many executors of each it holds.
    let of_profiles = profiles.map_or(0, |p| p.executors.len());
    let own = app
        .desc
        .fits(need)
        .then(|| (0, app.executor_limit, app.executors.len() - of_profiles));
    let sizes = own.into_iter().chain(profiles.into_iter().flat_map(|p| {
        p.profiles
            .iter()
            .filter(|(_, profile)| profile.fits(need))
            .map(|(&id, profile)| (id, Some(profile.executor_limit), p.held(id)))
    }));
    let fitting: Vec<(u32, Option<u32>, usize)> = match profile {
        Some(id) => sizes.filter(|&(size, ..)| size == id).collect(),
        None => sizes.collect(),
    };
    let &(profile, limit, held) = fitting
        .iter()
        .find(|&&(_, limit, held)| limit.is_none_or(|limit| held < limit as usize))
        .or(fitting.first())
        .ok_or(Rejection::NotTheExecutorSize)?;
    if let Some(max) = app.desc.cores_max
        && app.cores_granted + u64::from(need.cores) > u64::from(max)
    {
        return Err(Rejection::CoresMax {
            held: app.cores_granted,
            max,
        });
    }
    if let Some(limit) = limit
        && held >= limit as usize
    {
        return Err(Rejection::ExecutorLimit { limit });
    }
    state.room_on(&grant.worker, need)?;

    let prior = state.is_prior(&app.desc.queue);
    let app = state.apps.get_mut(&grant.app).expect("checked above");
    let id = ExecutorId(app.next_executor_id);
    app.next_executor_id += 1;
    let executor = Executor {
        id,
        worker: grant.worker.clone(),
        resources: need.clone(),
        state: ExecutorState::Launching,
        exit_code: None,
    };
    app.add_executor(executor.clone());
    app.state = AppState::Running;
    if profile != 0 {
        let profiles = state
            .profiles
            .get_mut(&grant.app)
            .expect("a profile it fits");
        profiles.executors.insert(id, profile);
    }
    let worker = state
        .workers
        .get_mut(&grant.worker)
        .expect("room_on checked it");
    take(worker, need);
    worker.executors.insert((grant.app.clone(), id));
    worker.prior_work += u32::from(prior);
    state.show_worker_to_passes(&grant.worker);
    state.held_by(&grant.app).push(executor.held(profile));
    state.hold_addresses(
        &grant.worker,
        Holder::Executor(&grant.app, id),
        &need.custom,
    );
    Ok(executor)
}
