//! The bridge to `muster-core`: the snapshot a scheduling pass sees of this state.

use muster_core::model::{self as core, PassConfig, WorkerState};

use crate::ClusterState;
use crate::model::{App, DriverState};

impl ClusterState {
    /// Whether a scheduling pass has anything to do: a driver is submitted, or an app has
    /// cores left below its `cores_max` (`default_cores` for one without) for an executor of
    /// one of its sizes. When not, a pass would plan nothing and list nothing as waiting, so
    /// the leader need not build its snapshot, which costs a copy of every worker.
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
        let workers = self
            .workers
            .values()
            .map(|w| core::Worker {
                id: w.id.clone(),
                host: w.host.clone(),
                capacity: w.capacity.clone(),
                used: w.used.clone(),
                // A draining worker is offered nothing, as a decommissioned one; what it
                // holds still counts.
                state: if self.draining.contains_key(&w.id) {
                    WorkerState::Decommissioned
                } else {
                    w.state
                },
                hosts_prior: w.prior_work > 0,
            })
            .collect();

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
            workers,
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
