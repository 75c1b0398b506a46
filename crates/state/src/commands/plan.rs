//! Applying one scheduling pass. Like Nomad's plan applier, every launch and each executor of
//! a grant is checked again against the current state and applied only if it still fits;
//! what no longer fits is reported.

use muster_core::plan::{DriverLaunch, ExecutorGrant};
use serde::{Deserialize, Serialize};

use super::Apply;
use crate::ClusterState;
use crate::addresses::Holder;
use crate::model::{AppState, DriverState, Executor, ExecutorState};
use crate::response::{ApplyError, Effects, Outcome, Rejected, Rejection, Response};
use crate::state::take;
use muster_core::ids::{AppId, ExecutorId, Timestamp, WorkerId};
use muster_core::resources::Resources;

/// The launches and grants of one scheduling pass, as `muster-core` produced them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ApplyPlan {
    /// Drivers to launch, in order.
    pub drivers: Vec<DriverLaunch>,
    /// Executors to grant, in order.
    pub executors: Vec<ExecutorGrant>,
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
            .map(|grant| ExecutorGrant {
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
        let mut drivers = Vec::new();
        let mut executors = Vec::new();
        let mut rejected = Vec::new();
        for launch in &self.drivers {
            match launch_driver(state, launch) {
                Ok(()) => drivers.push((launch.driver.clone(), launch.worker.clone())),
                Err(reason) => rejected.push(Rejected {
                    id: launch.driver.to_string(),
                    worker: launch.worker.clone(),
                    reason,
                }),
            }
        }
        for grant in &self.executors {
            for _ in 0..grant.count {
                match grant_executor(state, grant) {
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
        Ok(Response {
            outcome: Outcome::PlanApplied {
                drivers,
                executors,
                rejected,
            },
            effects: Effects::default(),
        })
    }
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
    state.room_on(&launch.worker, &need)?;
    let worker = state
        .workers
        .get_mut(&launch.worker)
        .expect("room_on checked it");
    take(worker, &need);
    worker.drivers.insert(launch.driver.clone());
    let driver = state
        .drivers
        .get_mut(&launch.driver)
        .expect("checked above");
    driver.state = DriverState::Running;
    driver.worker = Some(launch.worker.clone());
    state.hold_addresses(&launch.worker, Holder::Driver(&launch.driver), &need.custom);
    Ok(())
}

fn grant_executor(state: &mut ClusterState, grant: &ExecutorGrant) -> Result<Executor, Rejection> {
    let app = state.apps.get(&grant.app).ok_or(Rejection::UnknownApp)?;
    let (desc, need) = (&app.desc, &grant.resources);
    if need.cores == 0
        || desc.executor_cores.is_some_and(|cores| cores != need.cores)
        || need.memory_mb != desc.executor_memory_mb
        || need.custom != desc.executor_resources
    {
        return Err(Rejection::NotTheExecutorSize);
    }
    if let Some(max) = desc.cores_max
        && app.cores_granted + u64::from(need.cores) > u64::from(max)
    {
        return Err(Rejection::CoresMax {
            held: app.cores_granted,
            max,
        });
    }
    if let Some(limit) = app.executor_limit
        && app.executors.len() >= limit as usize
    {
        return Err(Rejection::ExecutorLimit { limit });
    }
    state.room_on(&grant.worker, need)?;

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
    app.executors.insert(id, executor.clone());
    app.cores_granted += u64::from(need.cores);
    app.state = AppState::Running;
    let worker = state
        .workers
        .get_mut(&grant.worker)
        .expect("room_on checked it");
    take(worker, need);
    worker.executors.insert((grant.app.clone(), id));
    state.hold_addresses(
        &grant.worker,
        Holder::Executor(&grant.app, id),
        &need.custom,
    );
    Ok(executor)
}
