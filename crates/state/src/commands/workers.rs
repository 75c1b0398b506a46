//! Worker membership: registration, loss and decommissioning (`removeWorker` and
//! `decommissionWorkers` in Spark's `deploy/master/Master.scala`).

use std::collections::BTreeSet;

use muster_core::ids::{Timestamp, WorkerId};
use muster_core::limits;
use muster_core::model::WorkerState;
use muster_core::resources::{
    ListedAddresses, ResourceAddresses, Resources, validate_addresses, without_default_addresses,
};
use serde::{Deserialize, Serialize};

use super::{Apply, Op};
use crate::ClusterState;
use crate::model::{Drain, DriverState, ExecutorState, Worker};
use crate::response::{ApplyError, Effects, Outcome, Response};

/// A worker registers, or re-registers after losing its master.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RegisterWorker {
    /// Its stable id.
    pub id: WorkerId,
    /// Its host name.
    pub host: String,
    /// Where the master reaches it.
    pub address: String,
    /// Its cores, memory and custom resources.
    pub resources: Resources,
    /// Set when the worker fences: it kills its own work once it has been cut off from every
    /// leader for the worker timeout. The value is how long its kills may take (SIGTERM to
    /// SIGKILL), in ms.
    pub fence_grace_ms: Option<u64>,
}

impl RegisterWorker {
    /// Checks what the worker says about itself, as `apply` does, without a state: a
    /// non-empty id and positive capacities.
    ///
    /// # Errors
    ///
    /// [`ApplyError::Invalid`] naming the field.
    pub fn validate(&self) -> Result<(), ApplyError> {
        if self.id.0.is_empty() {
            return Err(ApplyError::Invalid {
                field: "id".into(),
                message: "must not be empty".into(),
            });
        }
        limits::name("id", &self.id.0)?;
        limits::name("host", &self.host)?;
        limits::name("address", &self.address)?;
        Ok(self.resources.validate("")?)
    }
}

impl RegisterWorker {
    /// Checks the addresses the worker gives for its custom resources, as `apply` does.
    ///
    /// # Errors
    ///
    /// [`ApplyError::Invalid`] naming the list.
    pub fn validate_addresses(&self, addresses: &ResourceAddresses) -> Result<(), ApplyError> {
        Ok(validate_addresses(
            "addresses",
            &self.resources.custom,
            addresses,
        )?)
    }

    /// Why `state` refuses this registration, with `addresses`, as another worker's: the id
    /// is ALIVE on another host or with another capacity or other addresses (it is another
    /// worker, or this one changed, and must wait until the old one is counted lost).
    pub fn conflict(
        &self,
        state: &ClusterState,
        addresses: &ResourceAddresses,
    ) -> Option<ApplyError> {
        let worker = state.workers.get(&self.id)?;
        let addresses = without_default_addresses(addresses.clone());
        (worker.state == WorkerState::Alive
            && (worker.host != self.host
                || worker.capacity != self.resources
                || state.worker_addresses(&self.id) != &addresses))
            .then(|| {
                let at = |addresses| match addresses {
                    a if a == &ResourceAddresses::new() => String::new(),
                    a => format!(" ({})", ListedAddresses(a)),
                };
                ApplyError::Conflict(format!(
                    "worker `{}` is ALIVE on host `{}` with {}{}; this one is on `{}` with {}{}",
                    self.id,
                    worker.host,
                    worker.capacity,
                    at(state.worker_addresses(&self.id)),
                    self.host,
                    self.resources,
                    at(&addresses),
                ))
            })
    }

    /// The op that registers this worker with `addresses`: [`Op::RegisterWorker`] when they
    /// are the default numbering, as every build wrote a registration before addresses.
    pub fn op(self, addresses: ResourceAddresses) -> Op {
        let addresses = without_default_addresses(addresses);
        if addresses.is_empty() {
            Op::RegisterWorker(self)
        } else {
            Op::RegisterWorkerWithAddresses(RegisterWorkerWithAddresses {
                worker: self,
                addresses,
            })
        }
    }

    /// A known ALIVE or DECOMMISSIONED worker is a reconnect (`duplicate`) and keeps its
    /// state; a DEAD one comes back ALIVE with the capacity and addresses it reports, nothing
    /// running. An ALIVE worker's id from another host or with another capacity or other
    /// addresses is refused: it is another worker, or this one changed, and must wait until
    /// the old one is counted lost.
    fn register(
        &self,
        state: &mut ClusterState,
        at: Timestamp,
        addresses: &ResourceAddresses,
    ) -> Result<Response, ApplyError> {
        self.validate()?;
        self.validate_addresses(addresses)?;
        if let Some(conflict) = self.conflict(state, addresses) {
            return Err(conflict);
        }
        // A new worker, or a lost one back, takes the capacity and addresses it reports.
        let mut fresh = true;
        let duplicate = match state.workers.get_mut(&self.id) {
            Some(worker) => {
                fresh = worker.state == WorkerState::Dead;
                if fresh {
                    worker.state = WorkerState::Alive;
                    worker.capacity = self.resources.clone();
                }
                worker.host = self.host.as_str().into();
                worker.address = self.address.clone();
                worker.fence_grace_ms = self.fence_grace_ms;
                worker.registered_at = at;
                true
            }
            None => {
                state.workers.insert(
                    self.id.clone(),
                    Worker {
                        id: self.id.clone(),
                        host: self.host.as_str().into(),
                        address: self.address.clone(),
                        capacity: self.resources.clone(),
                        state: WorkerState::Alive,
                        used: Resources::default(),
                        executors: BTreeSet::new(),
                        drivers: BTreeSet::new(),
                        fence_grace_ms: self.fence_grace_ms,
                        registered_at: at,
                        prior_work: 0,
                    },
                );
                false
            }
        };
        state.show_worker_to_passes(&self.id);
        if fresh {
            state.set_worker_addresses(&self.id, without_default_addresses(addresses.clone()));
        }
        Ok(Response {
            outcome: Outcome::WorkerRegistered { duplicate },
            effects: Effects::default(),
        })
    }
}

impl Apply for RegisterWorker {
    /// A registration whose addresses are the default numbering.
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        self.register(state, at, &ResourceAddresses::new())
    }
}

/// A worker registers, or re-registers, with the addresses of its custom resources
/// (`--resources gpu=a,b`, or a discovery script).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RegisterWorkerWithAddresses {
    /// The registration.
    pub worker: RegisterWorker,
    /// The addresses of its custom resources, where they are not `0` to the amount less one.
    pub addresses: ResourceAddresses,
}

impl Apply for RegisterWorkerWithAddresses {
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        self.worker.register(state, at, &self.addresses)
    }
}

/// A worker is lost: it stopped heartbeating, or did not come back after a failover.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerLost {
    /// The worker.
    pub id: WorkerId,
    /// Why, for people.
    pub reason: String,
}

impl Apply for WorkerLost {
    /// Spark's `removeWorker`: the worker becomes DEAD (DECOMMISSIONED if it was being
    /// drained), its executors LOST (their cores return to their apps' demand), its
    /// supervised drivers are resubmitted under new ids and the others end in ERROR. Only an
    /// ALIVE worker can be lost.
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        let worker = state.worker_mut(&self.id)?;
        if worker.state != WorkerState::Alive {
            return Err(ApplyError::Conflict(format!(
                "worker `{}` is already {}",
                self.id, worker.state
            )));
        }
        worker.state = WorkerState::Dead;
        // A draining worker that is lost has left as its drain meant it to: it does not
        // come back for new work when it registers again.
        if state.draining.remove(&self.id).is_some() {
            state.worker_mut(&self.id)?.state = WorkerState::Decommissioned;
        }
        state.show_worker_to_passes(&self.id);
        let mut effects = Effects::default();
        state.evacuate_worker(
            &self.id,
            ExecutorState::Lost,
            DriverState::Error,
            at,
            &mut effects,
        );
        Ok(Response {
            outcome: Outcome::Done,
            effects,
        })
    }
}

/// A worker is taken out of service.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecommissionWorker {
    /// The worker.
    pub id: WorkerId,
}

impl Apply for DecommissionWorker {
    /// The worker becomes DECOMMISSIONED and receives no more work. Unlike Spark, which lets
    /// executors linger on it, everything on it ends now: executors are KILLED (this counts
    /// as no failure), supervised drivers are resubmitted under new ids, others are KILLED.
    /// Decommissioning a decommissioned worker changes nothing.
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        let worker = state.worker_mut(&self.id)?;
        match worker.state {
            WorkerState::Decommissioned => return Ok(Response::default()),
            WorkerState::Dead => {
                return Err(ApplyError::Conflict(format!(
                    "worker `{}` is DEAD",
                    self.id
                )));
            }
            WorkerState::Alive => worker.state = WorkerState::Decommissioned,
        }
        state.draining.remove(&self.id);
        state.show_worker_to_passes(&self.id);
        let mut effects = Effects::default();
        state.evacuate_worker(
            &self.id,
            ExecutorState::Killed,
            DriverState::Killed,
            at,
            &mut effects,
        );
        Ok(Response {
            outcome: Outcome::Done,
            effects,
        })
    }
}

/// A worker is drained (Spark's decommission, gently): it takes no new work from now on, and
/// the leader decommissions it once nothing runs on it, or after `kill_after_ms` whatever
/// still runs. Draining a draining worker again changes only its `kill_after_ms`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainWorker {
    /// The worker.
    pub id: WorkerId,
    /// How long what runs on it may take before it is killed; `None`: as long as it takes.
    pub kill_after_ms: Option<u64>,
}

impl Apply for DrainWorker {
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        let worker = state.worker_mut(&self.id)?;
        if worker.state != WorkerState::Alive {
            return Err(ApplyError::Conflict(format!(
                "worker `{}` is {}: only an ALIVE worker can be drained",
                self.id, worker.state
            )));
        }
        let since = state.draining.get(&self.id).map_or(at, |drain| drain.since);
        state.draining.insert(
            self.id.clone(),
            Drain {
                since,
                kill_after_ms: self.kill_after_ms,
            },
        );
        state.show_worker_to_passes(&self.id);
        Ok(Response::default())
    }
}
