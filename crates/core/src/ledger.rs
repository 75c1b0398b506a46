//! Per-worker accounting during one pass: what each worker has free, what it offers to a
//! request of a given queue, and the effect of each placement on it.
//!
//! Invariant: a worker's used cores, memory and resources never exceed its capacity, because
//! [`Ledger::take`] is only called for a need that [`Ledger::fits`] admitted.

use crate::model::{ResourceAmounts, Worker, WorkerState};
use crate::queues::Admission;

/// What one driver or executor needs, borrowed from the request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Need<'a> {
    pub(crate) cores: u32,
    pub(crate) memory_mb: u64,
    pub(crate) resources: &'a ResourceAmounts,
}

impl Need<'_> {
    pub(crate) fn to_shape(self) -> crate::plan::Shape {
        crate::plan::Shape {
            cores: self.cores,
            memory_mb: self.memory_mb,
            resources: self.resources.clone(),
        }
    }
}

/// The cores and memory a worker offers to a request, after its queue's threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Offer {
    pub(crate) cores: u32,
    pub(crate) memory_mb: u64,
}

#[derive(Clone, Debug)]
struct Usage {
    cores: u32,
    memory_mb: u64,
    resources: ResourceAmounts,
    hosts_prior: bool,
}

/// The workers of a pass and their usage as the pass places work.
pub(crate) struct Ledger<'a> {
    workers: &'a [Worker],
    usage: Vec<Usage>,
    /// `rank[w]` is worker `w`'s position in worker-id order: comparing ranks compares ids.
    rank: Vec<u32>,
    /// Indexes of ALIVE workers, in worker-id order.
    alive_by_id: Vec<usize>,
}

impl<'a> Ledger<'a> {
    pub(crate) fn new(workers: &'a [Worker]) -> Self {
        let usage = workers
            .iter()
            .map(|w| Usage {
                cores: w.cores_used,
                memory_mb: w.memory_used_mb,
                resources: w.resources_used.clone(),
                hosts_prior: w.hosts_prior,
            })
            .collect();
        let mut by_id: Vec<usize> = (0..workers.len()).collect();
        by_id.sort_by(|&a, &b| workers[a].id.cmp(&workers[b].id));
        let mut rank = vec![0; workers.len()];
        for (position, &w) in by_id.iter().enumerate() {
            rank[w] = u32::try_from(position).expect("fewer than 2^32 workers");
        }
        let alive_by_id = by_id
            .into_iter()
            .filter(|&w| workers[w].state == WorkerState::Alive)
            .collect();
        Self {
            workers,
            usage,
            rank,
            alive_by_id,
        }
    }

    pub(crate) fn worker(&self, w: usize) -> &'a Worker {
        &self.workers[w]
    }

    pub(crate) fn len(&self) -> usize {
        self.workers.len()
    }

    pub(crate) fn rank(&self, w: usize) -> u32 {
        self.rank[w]
    }

    /// ALIVE workers in worker-id order.
    pub(crate) fn alive_by_id(&self) -> &[usize] {
        &self.alive_by_id
    }

    pub(crate) fn alive_total_cores(&self) -> u64 {
        self.alive_by_id
            .iter()
            .map(|&w| u64::from(self.workers[w].cores))
            .sum()
    }

    pub(crate) fn hosts_prior(&self, w: usize) -> bool {
        self.usage[w].hosts_prior
    }

    /// What worker `w` offers a request admitted as `admission`: its free cores and memory,
    /// capped on prior-hosting workers for normal queues at `floor(threshold * capacity) - used`.
    pub(crate) fn offer(&self, w: usize, admission: Admission) -> Offer {
        let worker = &self.workers[w];
        let used = &self.usage[w];
        let free = Offer {
            cores: worker.cores - used.cores,
            memory_mb: worker.memory_mb - used.memory_mb,
        };
        match admission {
            Admission::Normal { threshold } if used.hosts_prior => {
                let cores_cap = share(threshold, worker.cores.into());
                let memory_cap = share(threshold, worker.memory_mb);
                Offer {
                    // The cap is at most the capacity, so it fits the capacity's type.
                    cores: free
                        .cores
                        .min(cores_cap.saturating_sub(used.cores.into()) as u32),
                    memory_mb: free
                        .memory_mb
                        .min(memory_cap.saturating_sub(used.memory_mb)),
                }
            }
            _ => free,
        }
    }

    /// Free amount of custom resource `name` on worker `w`.
    pub(crate) fn resource_free(&self, w: usize, name: &str) -> u32 {
        let capacity = self.workers[w].resources.get(name).copied().unwrap_or(0);
        capacity - self.usage[w].resources.get(name).copied().unwrap_or(0)
    }

    /// Whether `count + 1` needs' worth of custom resources are free on worker `w`.
    pub(crate) fn resources_fit(&self, w: usize, need: &ResourceAmounts, count: u32) -> bool {
        need.iter().all(|(name, &amount)| {
            u64::from(self.resource_free(w, name)) >= u64::from(amount) * (u64::from(count) + 1)
        })
    }

    /// Whether one `need` fits on worker `w` as offered to `admission`.
    pub(crate) fn fits(&self, w: usize, need: Need<'_>, admission: Admission) -> bool {
        self.admits(w, self.offer(w, admission), need)
    }

    /// Whether any ALIVE worker admits one `need` as offered to `admission`.
    pub(crate) fn any_fits(&self, need: Need<'_>, admission: Admission) -> bool {
        self.alive_by_id
            .iter()
            .any(|&w| self.fits(w, need, admission))
    }

    /// Whether one `need` fits in `offer` and worker `w`'s free resources (Spark's
    /// `canLaunchDriver` and `canLaunchExecutor`).
    pub(crate) fn admits(&self, w: usize, offer: Offer, need: Need<'_>) -> bool {
        offer.cores >= need.cores
            && offer.memory_mb >= need.memory_mb
            && self.resources_fit(w, need.resources, 0)
    }

    /// Whether one `need` would fit on worker `w` were it empty: can it ever hold it?
    pub(crate) fn could_ever_fit(&self, w: usize, need: Need<'_>) -> bool {
        let worker = &self.workers[w];
        worker.cores >= need.cores
            && worker.memory_mb >= need.memory_mb
            && need
                .resources
                .iter()
                .all(|(name, &amount)| worker.resources.get(name).copied().unwrap_or(0) >= amount)
    }

    /// Records one placement of `need` on worker `w`; `prior` marks the worker as hosting
    /// prior work from now on.
    ///
    /// # Panics
    ///
    /// If the need exceeds the worker's free resources: placement must check before taking.
    pub(crate) fn take(&mut self, w: usize, need: Need<'_>, prior: bool) {
        let worker = &self.workers[w];
        let used = &mut self.usage[w];
        used.cores += need.cores;
        used.memory_mb += need.memory_mb;
        assert!(
            used.cores <= worker.cores && used.memory_mb <= worker.memory_mb,
            "worker {} over-allocated",
            worker.id
        );
        for (name, &amount) in need.resources {
            let taken = used.resources.entry(name.clone()).or_insert(0);
            *taken += amount;
            assert!(
                *taken <= worker.resources.get(name).copied().unwrap_or(0),
                "worker {} over-allocated in {name}",
                worker.id
            );
        }
        used.hosts_prior |= prior;
    }
}

/// `floor(fraction * capacity)`, the share of a capacity a threshold or max capacity allows.
pub(crate) fn share(fraction: f64, capacity: u64) -> u64 {
    (fraction * capacity as f64).floor() as u64
}
