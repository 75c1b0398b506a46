//! Applying one scheduling pass. Like Nomad's plan applier, every launch and grant is checked
//! again against the current state and applied only if it still fits; the rest is reported.

use muster_core::plan::{DriverLaunch, ExecutorGrant};
use serde::{Deserialize, Serialize};

use super::Apply;
use crate::ClusterState;
use crate::model::{AppState, DriverState, Executor, ExecutorState};
use crate::response::{ApplyError, Effects, Outcome, Rejected, Response};
use crate::state::take;
use muster_core::ids::{ExecutorId, Timestamp};

/// The launches and grants of one scheduling pass, as `muster-core` produced them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ApplyPlan {
    /// Drivers to launch, in order.
    pub drivers: Vec<DriverLaunch>,
    /// Executors to grant, in order.
    pub executors: Vec<ExecutorGrant>,
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
            match grant_executor(state, grant) {
                Ok(executor) => executors.push((grant.app.clone(), executor)),
                Err(reason) => rejected.push(Rejected {
                    id: grant.app.to_string(),
                    worker: grant.worker.clone(),
                    reason,
                }),
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

fn launch_driver(state: &mut ClusterState, launch: &DriverLaunch) -> Result<(), String> {
    let driver = state
        .drivers
        .get(&launch.driver)
        .ok_or_else(|| format!("unknown or finished driver `{}`", launch.driver))?;
    if driver.state != DriverState::Submitted {
        return Err(format!(
            "driver `{}` is already {:?}",
            launch.driver, driver.state
        ));
    }
    let desc = &driver.desc;
    state.room_on(&launch.worker, desc.cores, desc.memory_mb, &desc.resources)?;
    let (cores, memory_mb, resources) = (desc.cores, desc.memory_mb, desc.resources.clone());
    let worker = state
        .workers
        .get_mut(&launch.worker)
        .expect("room_on checked it");
    take(worker, cores, memory_mb, &resources);
    worker.drivers.insert(launch.driver.clone());
    let driver = state
        .drivers
        .get_mut(&launch.driver)
        .expect("checked above");
    driver.state = DriverState::Running;
    driver.worker = Some(launch.worker.clone());
    Ok(())
}

fn grant_executor(state: &mut ClusterState, grant: &ExecutorGrant) -> Result<Executor, String> {
    let app = state
        .apps
        .get(&grant.app)
        .ok_or_else(|| format!("unknown or finished application `{}`", grant.app))?;
    let desc = &app.desc;
    if grant.cores == 0
        || desc
            .executor_cores
            .is_some_and(|cores| cores != grant.cores)
    {
        return Err(format!(
            "{} cores do not match the app's executor cores",
            grant.cores
        ));
    }
    if grant.memory_mb != desc.executor_memory_mb || grant.resources != desc.executor_resources {
        return Err("the grant does not match the app's executor memory and resources".to_owned());
    }
    if desc
        .cores_max
        .is_some_and(|max| app.cores_granted + u64::from(grant.cores) > u64::from(max))
    {
        return Err(format!(
            "the app already holds {} of its {} cores",
            app.cores_granted,
            desc.cores_max.unwrap_or(0)
        ));
    }
    if app
        .executor_limit
        .is_some_and(|limit| app.executors.len() >= limit as usize)
    {
        return Err(format!(
            "the app is at its executor limit of {}",
            app.executor_limit.unwrap_or(0)
        ));
    }
    state.room_on(
        &grant.worker,
        grant.cores,
        grant.memory_mb,
        &grant.resources,
    )?;

    let app = state.apps.get_mut(&grant.app).expect("checked above");
    let id = ExecutorId(app.next_executor_id);
    app.next_executor_id += 1;
    let executor = Executor {
        id,
        worker: grant.worker.clone(),
        cores: grant.cores,
        memory_mb: grant.memory_mb,
        resources: grant.resources.clone(),
        state: ExecutorState::Launching,
        exit_code: None,
    };
    app.executors.insert(id, executor.clone());
    app.cores_granted += u64::from(grant.cores);
    app.state = AppState::Running;
    let worker = state
        .workers
        .get_mut(&grant.worker)
        .expect("room_on checked it");
    take(worker, grant.cores, grant.memory_mb, &grant.resources);
    worker.executors.insert((grant.app.clone(), id));
    Ok(executor)
}
