//! The bridge to `muster-core`: the snapshot a scheduling pass sees of this state, and the
//! workers as passes see them, which the state keeps as they change.

use muster_core::ids::WorkerId;
use muster_core::model::{self as core, PassConfig, WorkerState};

use crate::ClusterState;
use crate::model::{App, DriverState, Worker};

impl ClusterState {
    /// Whether a scheduling pass has anything to do: a driver is submitted, or an app has
    /// cores left below its `cores_max` (`default_cores` for one without) for an executor of
    /// one of its sizes. When not, a pass would plan nothing and list nothing as waiting, so
    /// the leader need not build its snapshot, which costs a copy of every active app.
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
    /// work, waiting drivers and active apps in submission order, and the queues.
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
            })
            .collect();

        let mut apps: Vec<_> = self.apps.values().collect();
        apps.sort_by_key(|a| a.submission);
        let apps = apps
            .into_iter()
            .map(|a| {
                let profiles = self.profiles.get(&a.id);
                core::AppRequest {
                    id: a.id.clone(),
                    queue: a.desc.queue.clone(),
                    cores_max: a.desc.cores_max,
                    executor_cores: a.desc.executor_cores,
                    executor_memory_mb: a.desc.executor_memory_mb,
                    executor_resources: a.desc.executor_resources.clone(),
                    executor_limit: a.executor_limit,
                    executors: a.held.clone(),
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
                }
            })
            .collect();

        core::Snapshot {
            config,
            queues: self.queues(),
            workers: self.pass_workers.clone(),
            running_drivers: self
                .drivers
                .values()
                .filter(|d| d.state == DriverState::Running)
                .count() as u32,
            drivers,
            apps,
            preemption: None,
        }
    }
}

impl ClusterState {
    /// Worker `worker` as a scheduling pass sees it.
    fn seen_by_passes(&self, worker: &Worker) -> core::Worker {
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
        }
    }

    /// Every worker as scheduling passes see it, in id order.
    pub(crate) fn workers_as_passes_see(&self) -> core::WorkerList {
        self.workers
            .values()
            .map(|worker| self.seen_by_passes(worker))
            .collect()
    }

    /// Shows passes worker `id` as it is now, after its usage, state, drain or prior work
    /// changed. Workers are never forgotten, so a worker unknown to passes is a new one.
    pub(crate) fn show_to_passes(&mut self, id: &WorkerId) {
        let seen = self.seen_by_passes(&self.workers[id]);
        match self.pass_workers.binary_search_by(|w| w.id.cmp(id)) {
            Ok(i) if self.pass_workers[i] == seen => {}
            Ok(i) => self.pass_workers.make_mut()[i] = seen,
            Err(i) => self.pass_workers.make_mut().insert(i, seen),
        }
    }
}
