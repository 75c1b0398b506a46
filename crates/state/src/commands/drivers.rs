//! Driver lifecycle: submit, kill, and the end a worker reports (`removeDriver` in Spark's
//! `deploy/master/Master.scala`).

use muster_core::ids::{DriverId, Timestamp};
use muster_core::limits;
use muster_core::model::GangRequest;
use serde::{Deserialize, Serialize};

use super::{Apply, program};
use crate::ClusterState;
use crate::model::{DriverDescription, DriverGang, DriverState};
use crate::response::{ApplyError, Effects, Outcome, Response};
use crate::stopping::Stopped;

/// A driver is submitted (Spark's cluster deploy mode).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubmitDriver {
    /// What it asks for.
    pub desc: DriverDescription,
}

impl Apply for SubmitDriver {
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        let desc = &self.desc;
        state.takes_work(&desc.queue)?;
        desc.resources.validate("")?;
        limits::name("name", &desc.name)?;
        program(&desc.command, &desc.args, &desc.env)?;
        let id = state.add_driver(desc.clone(), at);
        Ok(Response {
            outcome: Outcome::DriverSubmitted { id },
            effects: Effects::default(),
        })
    }
}

/// A driver that says the room its application needs first is submitted: it starts only
/// when it and that room fit at once, all of a gang's minimum or one executor (from log
/// format 4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubmitGangDriver {
    /// The driver.
    pub driver: SubmitDriver,
    /// The room its application needs first: its gang, or one executor (a minimum of 1).
    pub gang: GangRequest,
}

impl Apply for SubmitGangDriver {
    /// Refused as [`SubmitDriver`] is, and for a gang of no executor, or of executors of no
    /// core or memory.
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        self.gang.validate("gang")?;
        let response = self.driver.apply(state, at)?;
        let Outcome::DriverSubmitted { id } = &response.outcome else {
            unreachable!("a submitted driver answers with its id");
        };
        let gang = DriverGang {
            gang: self.gang.clone(),
            app: None,
        };
        state.driver_gangs.insert(id.clone(), gang);
        Ok(response)
    }
}

/// A user kills a driver.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KillDriver {
    /// The driver.
    pub id: DriverId,
}

impl Apply for KillDriver {
    /// The driver ends KILLED at once and frees its worker's cores and memory; the leader
    /// then stops its process, whose custom resources stay taken until its worker reports
    /// its end ([`ClusterState::stop_driver`]).
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        if !state.drivers.contains_key(&self.id) {
            return Err(ApplyError::UnknownDriver(self.id.clone()));
        }
        let mut effects = Effects::default();
        state.stop_driver(&self.id, at, &mut effects);
        Ok(Response {
            outcome: Outcome::Done,
            effects,
        })
    }
}

/// A worker reports that a running driver ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DriverStateChanged {
    /// The driver.
    pub driver: DriverId,
    /// FINISHED, FAILED, KILLED or ERROR; or RELAUNCHING when the worker gave the driver up
    /// (it fenced itself off from a lost leader): as when its worker is lost, a supervised
    /// driver is relaunched under a new id and another ends in ERROR.
    pub state: DriverState,
    /// Its exit code, when it exited.
    pub exit_code: Option<i32>,
}

impl Apply for DriverStateChanged {
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        let final_states = [
            DriverState::Finished,
            DriverState::Failed,
            DriverState::Killed,
            DriverState::Error,
            DriverState::Relaunching,
        ];
        if !final_states.contains(&self.state) {
            return Err(ApplyError::Invalid {
                field: "state".into(),
                message: format!("{} is not a state a worker reports", self.state),
            });
        }
        // The end of a driver the masters stopped frees what it kept.
        if state.stopped_process_ended(&Stopped::Driver(self.driver.clone())) {
            return Ok(Response::default());
        }
        let driver = state
            .drivers
            .get(&self.driver)
            .ok_or_else(|| ApplyError::UnknownDriver(self.driver.clone()))?;
        if driver.state != DriverState::Running {
            return Err(ApplyError::Conflict(format!(
                "driver `{}` is not running",
                self.driver
            )));
        }
        let mut effects = Effects::default();
        match self.state {
            DriverState::Relaunching if driver.desc.supervise => {
                let desc = driver.desc.clone();
                state.end_driver(
                    &self.driver,
                    DriverState::Relaunching,
                    None,
                    at,
                    &mut effects,
                );
                let relaunched = state.relaunch_driver(&self.driver, desc, at);
                effects
                    .relaunched_drivers
                    .push((self.driver.clone(), relaunched));
            }
            DriverState::Relaunching => {
                state.end_driver(&self.driver, DriverState::Error, None, at, &mut effects);
            }
            ended => state.end_driver(&self.driver, ended, self.exit_code, at, &mut effects),
        }
        Ok(Response {
            outcome: Outcome::Done,
            effects,
        })
    }
}
