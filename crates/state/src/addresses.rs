//! Resource addresses: which units of its worker's custom resources (which GPUs) each running
//! driver and live executor holds. Amounts are the placement's business; addresses are handed
//! out here when a plan's launch or grant applies, the lowest free ones in the order the
//! worker gave them, so every replica hands out the same, a new leader keeps them, and no
//! address is ever held twice (an invariant). Spark's Master does the same with each worker's
//! `WorkerResourceInfo` when it launches an executor or a driver.
//!
//! A process the masters stop keeps its addresses until its worker reports its end
//! ([`crate::stopping`]).

use std::collections::{BTreeMap, BTreeSet};

use muster_core::ids::{AppId, DriverId, ExecutorId, WorkerId};
use muster_core::limits::MAX_CUSTOM_AMOUNT;
use muster_core::resources::{ResourceAddresses, ResourceAmounts, addresses_of, has_address};
use serde::{Deserialize, Serialize};

use crate::ClusterState;
use crate::invariants::{InvariantViolation, violated};
use crate::model::Worker;

/// The addresses workers gave and those their processes hold. Only processes that hold
/// custom resources have an entry.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct AddressBook {
    /// The addresses each worker gave, where they are not the default numbering.
    workers: BTreeMap<WorkerId, ResourceAddresses>,
    /// What each live executor holds.
    executors: BTreeMap<(AppId, ExecutorId), ResourceAddresses>,
    /// What each running driver holds.
    drivers: BTreeMap<DriverId, ResourceAddresses>,
}

impl AddressBook {
    /// Whether nothing is recorded (a snapshot without it reads as one of format 6).
    pub(crate) fn is_empty(&self) -> bool {
        self.workers.is_empty() && self.executors.is_empty() && self.drivers.is_empty()
    }
}

/// A process that may hold addresses.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Holder<'a> {
    Executor(&'a AppId, ExecutorId),
    Driver(&'a DriverId),
}

pub(crate) const NONE: &ResourceAddresses = &ResourceAddresses::new();

impl ClusterState {
    /// The addresses worker `id` gave for its custom resources; a resource not listed has
    /// the addresses `0` to its amount less one.
    pub fn worker_addresses(&self, id: &WorkerId) -> &ResourceAddresses {
        self.addresses.workers.get(id).unwrap_or(NONE)
    }

    /// The addresses live executor `id` of `app` holds (empty when it holds no custom
    /// resource).
    pub fn executor_addresses(&self, app: &AppId, id: ExecutorId) -> &ResourceAddresses {
        self.addresses
            .executors
            .get(&(app.clone(), id))
            .unwrap_or(NONE)
    }

    /// The addresses running driver `id` holds (empty when it holds no custom resource).
    pub fn driver_addresses(&self, id: &DriverId) -> &ResourceAddresses {
        self.addresses.drivers.get(id).unwrap_or(NONE)
    }

    /// Records the addresses worker `id` registers with (without the default lists).
    pub(crate) fn set_worker_addresses(&mut self, id: &WorkerId, given: ResourceAddresses) {
        if given.is_empty() {
            self.addresses.workers.remove(id);
        } else {
            self.addresses.workers.insert(id.clone(), given);
        }
    }

    /// Hands `holder`, just placed on `worker` with `need`, the lowest free addresses of
    /// each custom resource there. The amounts fit (the plan re-check saw to it), so there
    /// are enough.
    pub(crate) fn hold_addresses(
        &mut self,
        worker: &WorkerId,
        holder: Holder<'_>,
        need: &ResourceAmounts,
    ) {
        // Every caller placed the holder on a known worker, for amounts within the limits; a
        // corrupt snapshot's unknown worker or huge amount is left to the invariants to refuse.
        let Some(worker) = self.workers.get(worker).filter(|_| !need.is_empty()) else {
            return;
        };
        if need.values().any(|&amount| amount > MAX_CUSTOM_AMOUNT) {
            return;
        }
        let given = self.worker_addresses(&worker.id);
        let held = self.held_on(worker);
        let picked: ResourceAddresses = need
            .iter()
            .map(|(name, &amount)| {
                let free = addresses_of(name, worker.capacity.custom(name), given)
                    .filter(|address| !held.contains(&(name.as_str(), address.as_ref())))
                    .take(amount as usize)
                    .map(String::from)
                    .collect();
                (name.clone(), free)
            })
            .collect();
        match holder {
            Holder::Executor(app, id) => {
                self.addresses.executors.insert((app.clone(), id), picked);
            }
            Holder::Driver(id) => {
                self.addresses.drivers.insert(id.clone(), picked);
            }
        }
    }

    /// Frees what `holder`, which ended, held.
    pub(crate) fn free_addresses(&mut self, holder: Holder<'_>) {
        match holder {
            Holder::Executor(app, id) => self.addresses.executors.remove(&(app.clone(), id)),
            Holder::Driver(id) => self.addresses.drivers.remove(id),
        };
    }

    /// Hands addresses to live processes that hold custom resources but no addresses: those
    /// of a snapshot written before addresses were kept.
    pub(crate) fn hold_missing_addresses(&mut self) {
        let executors: Vec<(WorkerId, AppId, ExecutorId, ResourceAmounts)> = self
            .apps
            .values()
            .flat_map(|app| {
                app.executors.values().map(|executor| {
                    let need = executor.resources.custom.clone();
                    (executor.worker.clone(), app.id.clone(), executor.id, need)
                })
            })
            .filter(|(_, app, id, _)| !self.addresses.executors.contains_key(&(app.clone(), *id)))
            .collect();
        for (worker, app, id, need) in executors {
            self.hold_addresses(&worker, Holder::Executor(&app, id), &need);
        }
        let drivers: Vec<(WorkerId, DriverId, ResourceAmounts)> = self
            .drivers
            .values()
            .filter(|driver| !self.addresses.drivers.contains_key(&driver.id))
            .filter_map(|driver| {
                let need = driver.desc.resources.custom.clone();
                Some((driver.worker.clone()?, driver.id.clone(), need))
            })
            .collect();
        for (worker, id, need) in drivers {
            self.hold_addresses(&worker, Holder::Driver(&id), &need);
        }
    }

    /// Every (resource, address) held on `worker`, by its live processes and those stopped
    /// there that have not ended.
    fn held_on<'a>(&'a self, worker: &'a Worker) -> BTreeSet<(&'a str, &'a str)> {
        let executors = worker
            .executors
            .iter()
            .filter_map(|key| self.addresses.executors.get(key));
        let drivers = worker
            .drivers
            .iter()
            .filter_map(|id| self.addresses.drivers.get(id));
        let stopping = self
            .stopping
            .values()
            .filter(|stopping| stopping.worker == worker.id)
            .map(|stopping| &stopping.addresses);
        executors
            .chain(drivers)
            .chain(stopping)
            .flat_map(|held| {
                held.iter()
                    .flat_map(|(name, list)| list.iter().map(move |a| (name.as_str(), a.as_str())))
            })
            .collect()
    }

    /// The address invariants: every live process holds exactly as many addresses of each
    /// custom resource as it was granted, each one its worker has, none held twice on a
    /// worker, and no ended process keeps any.
    pub(crate) fn check_addresses(&self) -> Result<(), InvariantViolation> {
        for (app, id) in self.addresses.executors.keys() {
            if !self
                .apps
                .get(app)
                .is_some_and(|a| a.executors.contains_key(id))
            {
                return violated(format!("ended executor {app}/{id} holds addresses"));
            }
        }
        for id in self.addresses.drivers.keys() {
            if self.drivers.get(id).is_none_or(|d| d.worker.is_none()) {
                return violated(format!("driver {id}, which does not run, holds addresses"));
            }
        }
        for worker in self.addresses.workers.keys() {
            if !self.workers.contains_key(worker) {
                return violated(format!("unknown worker {worker} has addresses"));
            }
        }
        for worker in self.workers.values() {
            let given = self.worker_addresses(&worker.id);
            let mut held = BTreeSet::new();
            // What each process on it was granted; a snapshot's ids need not be the keys
            // they are filed under, so nothing is looked up by index.
            let none = ResourceAmounts::new();
            let executors = worker.executors.iter().map(|(app, id)| {
                let need = self
                    .apps
                    .get(app)
                    .and_then(|a| a.executors.get(id))
                    .map_or(&none, |e| &e.resources.custom);
                let holder = format!("executor {app}/{id}");
                (holder, need, self.executor_addresses(app, *id))
            });
            let drivers = worker.drivers.iter().map(|id| {
                let need = self
                    .drivers
                    .get(id)
                    .map_or(&none, |d| &d.desc.resources.custom);
                (format!("driver {id}"), need, self.driver_addresses(id))
            });
            let stopping = self
                .stopping
                .iter()
                .filter(|(_, stopping)| stopping.worker == worker.id)
                .map(|(process, stopping)| {
                    let holder = format!("stopped {process:?}");
                    (holder, &stopping.resources, &stopping.addresses)
                });
            for (holder, need, addresses) in executors.chain(drivers).chain(stopping) {
                let holds: ResourceAmounts = addresses
                    .iter()
                    .map(|(name, list)| (name.clone(), list.len() as u32))
                    .filter(|(_, amount)| *amount > 0)
                    .collect();
                if &holds != need {
                    return violated(format!(
                        "{holder} holds addresses {addresses:?} for {need:?}"
                    ));
                }
                for (name, list) in addresses {
                    for address in list {
                        if !has_address(name, worker.capacity.custom(name), given, address) {
                            return violated(format!(
                                "{holder} holds {name} `{address}`, which {} does not have",
                                worker.id
                            ));
                        }
                        if !held.insert((name, address)) {
                            return violated(format!(
                                "{name} `{address}` of {} is held twice",
                                worker.id
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use muster_core::ids::{QueueName, Timestamp};
    use muster_core::resources::Resources;

    use super::*;
    use crate::commands::{ApplyPlan, Grant, RegisterWorker, SubmitApp};
    use crate::model::AppDescription;
    use crate::{Command, Op, Outcome, StateConfig};

    fn apply(state: &mut ClusterState, op: Op) -> Outcome {
        let command = Command {
            at: Timestamp(1),
            request_id: None,
            term: None,
            op,
        };
        state.apply(&command).expect("applies").outcome
    }

    /// A worker with two GPUs and an app whose one executor holds one.
    fn one_gpu_executor() -> (ClusterState, AppId) {
        let gpu = |amount| BTreeMap::from([("gpu".to_owned(), amount)]);
        let mut state = ClusterState::new(StateConfig::default());
        let worker = RegisterWorker {
            id: "w1".into(),
            host: "h1".into(),
            address: "h1:1".into(),
            resources: Resources::new(4, 4096).with_custom(gpu(2)),
            fence_grace_ms: None,
        };
        apply(&mut state, worker.op(ResourceAddresses::new()));
        let desc = AppDescription {
            name: "gpus".into(),
            user: "alice".into(),
            queue: QueueName::default(),
            cores_max: None,
            executor_cores: Some(1),
            executor_memory_mb: 512,
            executor_resources: gpu(1),
            command: "/bin/executor".into(),
            args: Vec::new(),
            env: BTreeMap::new(),
        };
        let Outcome::AppSubmitted { id } = apply(
            &mut state,
            Op::SubmitApp(SubmitApp {
                desc,
                executor_limit: None,
            }),
        ) else {
            panic!("not submitted");
        };
        let grant = Grant {
            app: id.clone(),
            worker: "w1".into(),
            resources: Resources::new(1, 512).with_custom(gpu(1)),
            count: 1,
        };
        apply(
            &mut state,
            Op::ApplyPlan(ApplyPlan {
                drivers: Vec::new(),
                executors: vec![grant],
            }),
        );
        (state, id)
    }

    #[test]
    fn a_snapshot_written_before_addresses_hands_them_out_as_it_loads() {
        let (mut state, app) = one_gpu_executor();
        let held = state.executor_addresses(&app, ExecutorId(0)).clone();
        assert_eq!(
            held,
            ResourceAddresses::from([("gpu".into(), vec!["0".into()])])
        );
        // What a build before addresses wrote: the same state, no address book.
        state.addresses = AddressBook::default();
        let bytes = state.encode_snapshot();
        assert!(
            bytes[0] < 7,
            "a state without addresses is written in an older format"
        );
        assert!(
            state.check_invariants().is_err(),
            "a GPU executor without addresses"
        );
        let loaded = ClusterState::decode_snapshot(&bytes).expect("format 6 loads");
        assert_eq!(loaded.executor_addresses(&app, ExecutorId(0)), &held);
        assert_eq!(loaded.encode_snapshot()[0], 7, "the addresses' format");
    }
}
