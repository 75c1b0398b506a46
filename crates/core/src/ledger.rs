//! Per-worker accounting during one pass: what each worker has free, what it offers to a
//! request of a given queue, and the effect of each placement on it.
//!
//! Invariant: a worker's used cores, memory and resources never exceed its capacity, because
//! [`Ledger::take`] is only called for what the placement found room for: a driver or an
//! executor [`Ledger::fits`] admitted, or as many executors as the worker's offer holds.

use std::cell::RefCell;
use std::collections::HashMap;

use foldhash::fast::FixedState;

use crate::ids::WorkerId;
use crate::model::{GangRequest, Worker, WorkerState};
use crate::queues::Admission;
use crate::resources::Resources;

/// The cores and memory a worker offers to a request, after its queue's threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Offer {
    pub(crate) cores: u32,
    pub(crate) memory_mb: u64,
}

/// The workers of a pass and their usage as the pass places work.
pub(crate) struct Ledger<'a> {
    workers: &'a [Worker],
    free: Vec<Resources>,
    hosts_prior: Vec<bool>,
    /// `rank[w]` is worker `w`'s position in worker-id order: comparing ranks compares ids.
    rank: Vec<u32>,
    /// Indexes of ALIVE workers, in worker-id order.
    alive_by_id: Vec<usize>,
    /// Bumped by every change of what is free.
    generation: u64,
    /// How many executors of a size fit in all, counted when fewer than a gang needed fit,
    /// by the size and the admission it was offered under, with the generation it was
    /// counted at: the waiting gangs of one size count the workers once while nothing
    /// changes.
    counted: RefCell<HashMap<SizeOffered, Counted, FixedState>>,
}

/// An executor size and the admission it is offered under (prior, or a normal queue's
/// threshold's bits).
type SizeOffered = (Resources, Option<u64>);

/// The ledger's generation when counted, and how many executors of a size fit in all.
type Counted = (u64, u64);

fn admission_key(admission: Admission) -> Option<u64> {
    match admission {
        Admission::Prior => None,
        Admission::Normal { threshold } => Some(threshold.to_bits()),
    }
}

impl<'a> Ledger<'a> {
    /// The ledger of validated workers (usage within capacity).
    pub(crate) fn new(workers: &'a [Worker]) -> Self {
        let free = workers
            .iter()
            .map(|w| {
                w.capacity
                    .checked_sub(&w.used)
                    .expect("validation keeps usage within capacity")
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
            free,
            hosts_prior: workers.iter().map(|w| w.hosts_prior).collect(),
            rank,
            alive_by_id,
            generation: 0,
            counted: RefCell::default(),
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
            .map(|&w| u64::from(self.workers[w].capacity.cores))
            .sum()
    }

    pub(crate) fn alive_total_memory_mb(&self) -> u64 {
        self.alive_by_id
            .iter()
            .map(|&w| self.workers[w].capacity.memory_mb)
            .sum()
    }

    pub(crate) fn hosts_prior(&self, w: usize) -> bool {
        self.hosts_prior[w]
    }

    /// What worker `w` offers a request admitted as `admission`: its free cores and memory,
    /// capped on prior-hosting workers for normal queues at `floor(threshold * capacity) - used`.
    pub(crate) fn offer(&self, w: usize, admission: Admission) -> Offer {
        let (capacity, free) = (&self.workers[w].capacity, &self.free[w]);
        let offer = Offer {
            cores: free.cores,
            memory_mb: free.memory_mb,
        };
        match admission {
            Admission::Normal { threshold } if self.hosts_prior[w] => {
                let used_cores = u64::from(capacity.cores - free.cores);
                let used_memory = capacity.memory_mb - free.memory_mb;
                let cores_cap = share(threshold, capacity.cores.into());
                let memory_cap = share(threshold, capacity.memory_mb);
                Offer {
                    // The cap is at most the capacity, so it fits the capacity's type.
                    cores: offer.cores.min(cores_cap.saturating_sub(used_cores) as u32),
                    memory_mb: offer.memory_mb.min(memory_cap.saturating_sub(used_memory)),
                }
            }
            _ => offer,
        }
    }

    /// Whether the memory in use on worker `w` is within what `admission` may see used there
    /// (a normal queue's threshold on a prior-hosting worker): an executor there may grow
    /// by cores and still be listed as admissible where it grew.
    pub(crate) fn memory_within_threshold(&self, w: usize, admission: Admission) -> bool {
        match admission {
            Admission::Normal { threshold } if self.hosts_prior[w] => {
                let capacity = &self.workers[w].capacity;
                let used = capacity.memory_mb - self.free[w].memory_mb;
                used <= share(threshold, capacity.memory_mb)
            }
            _ => true,
        }
    }

    /// Free amount of custom resource `name` on worker `w`.
    pub(crate) fn resource_free(&self, w: usize, name: &str) -> u32 {
        self.free[w].custom(name)
    }

    /// Whether `count + 1` needs' worth of custom resources are free on worker `w`.
    pub(crate) fn resources_fit(&self, w: usize, need: &Resources, count: u32) -> bool {
        need.custom.iter().all(|(name, &amount)| {
            u64::from(self.resource_free(w, name)) >= u64::from(amount) * (u64::from(count) + 1)
        })
    }

    /// Whether one `need` fits on worker `w` as offered to `admission`.
    pub(crate) fn fits(&self, w: usize, need: &Resources, admission: Admission) -> bool {
        self.admits(w, self.offer(w, admission), need)
    }

    /// Whether any ALIVE worker admits one `need` as offered to `admission`.
    pub(crate) fn any_fits(&self, need: &Resources, admission: Admission) -> bool {
        self.alive_by_id
            .iter()
            .any(|&w| self.fits(w, need, admission))
    }

    /// Whether one `need` fits in worker `w`'s free resources and in `offer`, which a
    /// threshold may hold below them (Spark's `canLaunchDriver` and `canLaunchExecutor`).
    pub(crate) fn admits(&self, w: usize, offer: Offer, need: &Resources) -> bool {
        offer.cores >= need.cores
            && offer.memory_mb >= need.memory_mb
            && self.free[w].fits(need).is_ok()
    }

    /// How many executors of `need` fit on worker `w` as offered to `admission`: as many as
    /// its cores, memory and custom resources hold.
    pub(crate) fn executors_fitting(
        &self,
        w: usize,
        need: &Resources,
        admission: Admission,
    ) -> u64 {
        count_fitting(
            self.offer(w, admission),
            |name| self.resource_free(w, name),
            need,
        )
    }

    /// Whether one `need` would fit on worker `w` were it empty: can it ever hold it?
    pub(crate) fn could_ever_fit(&self, w: usize, need: &Resources) -> bool {
        self.workers[w].capacity.fits(need).is_ok()
    }

    /// Records the placement of `need` (one driver's, or one or more executors') on worker
    /// `w`; `prior` marks the worker as hosting prior work from now on.
    ///
    /// # Panics
    ///
    /// If the need exceeds the worker's free resources: placement must check before taking.
    pub(crate) fn take(&mut self, w: usize, need: &Resources, prior: bool) {
        if let Err(shortfall) = self.free[w].subtract(need) {
            panic!("worker {} over-allocated: {shortfall}", self.workers[w].id);
        }
        self.hosts_prior[w] |= prior;
        self.generation += 1;
    }
}

impl Ledger<'_> {
    /// Undoes a [`Ledger::take`] of `need` on worker `w`, which hosted prior work before it
    /// as `hosted_prior` says.
    pub(crate) fn give_back(&mut self, w: usize, need: &Resources, hosted_prior: bool) {
        self.free[w] = self.free[w]
            .checked_add(need)
            .expect("giving back what was taken");
        self.hosts_prior[w] = hosted_prior;
        self.generation += 1;
    }

    /// How many of `gang`'s executors fit now, counted up to its minimum, as offered to
    /// `admission`.
    pub(crate) fn gang_fit(&self, gang: &GangRequest, admission: Admission) -> u64 {
        let executor = gang.executor();
        let minimum = u64::from(gang.min_executors);
        let key = (executor, admission_key(admission));
        if let Some(&(generation, all)) = self.counted.borrow().get(&key)
            && generation == self.generation
        {
            return all.min(minimum);
        }
        let mut fit = 0;
        for &w in &self.alive_by_id {
            if fit >= minimum {
                return minimum;
            }
            fit += self.executors_fitting(w, &key.0, admission);
        }
        // Every worker counted: all that fit.
        self.counted
            .borrow_mut()
            .insert(key, (self.generation, fit));
        fit.min(minimum)
    }

    /// How many of `gang`'s executors would fit, counted up to its minimum, once the
    /// executors that run now have ended: on each ALIVE worker, in its free room and the room
    /// `held` says executors hold there (thresholds aside).
    pub(crate) fn gang_fit_once_executors_end<'h>(
        &self,
        gang: &GangRequest,
        held: impl Fn(&WorkerId) -> Option<&'h Resources>,
    ) -> u64 {
        let need = gang.executor();
        let minimum = u64::from(gang.min_executors);
        let mut fit = 0;
        for &w in &self.alive_by_id {
            let room = match held(&self.workers[w].id) {
                Some(held) => self.free[w]
                    .checked_add(held)
                    .expect("held within capacity"),
                None => self.free[w].clone(),
            };
            let offer = Offer {
                cores: room.cores,
                memory_mb: room.memory_mb,
            };
            fit += count_fitting(offer, |name| room.custom(name), &need);
            if fit >= minimum {
                return minimum;
            }
        }
        fit
    }

    /// Takes the room of as many of `gang`'s executors as fit, up to its minimum, worker by
    /// worker in id order, as offered to `admission`; what it took, to give back with
    /// [`Ledger::give_back_kept`] if the room is kept only for a while. Kept room is not
    /// prior work running: it marks no worker as hosting any.
    pub(crate) fn keep_for_gang(&mut self, gang: &GangRequest, admission: Admission) -> Vec<Kept> {
        let executor = gang.executor();
        let mut left = u64::from(gang.min_executors);
        let mut kept = Vec::new();
        for i in 0..self.alive_by_id.len() {
            let w = self.alive_by_id[i];
            if left == 0 {
                break;
            }
            let here = self.executors_fitting(w, &executor, admission).min(left);
            if here > 0 {
                let count = u32::try_from(here).expect("at most a gang's u32 minimum");
                let need = executor.clone().times(count);
                self.take(w, &need, false);
                kept.push(Kept { w, need });
                left -= here;
            }
        }
        kept
    }

    /// Gives back the room [`Ledger::keep_for_gang`] took.
    pub(crate) fn give_back_kept(&mut self, kept: Vec<Kept>) {
        for kept in kept {
            let hosts_prior = self.hosts_prior[kept.w];
            self.give_back(kept.w, &kept.need, hosts_prior);
        }
    }
}

/// Room a gang's executors took on one worker.
pub(crate) struct Kept {
    /// The worker.
    pub(crate) w: usize,
    /// All they took there.
    pub(crate) need: Resources,
}

/// How many of `need` fit in `offer`'s cores and memory and in the custom resources
/// `custom_free` says are free.
fn count_fitting(offer: Offer, custom_free: impl Fn(&str) -> u32, need: &Resources) -> u64 {
    let by_custom = need
        .custom
        .iter()
        .map(|(name, &amount)| u64::from(custom_free(name)) / u64::from(amount));
    std::iter::once(u64::from(offer.cores / need.cores))
        .chain(std::iter::once(offer.memory_mb / need.memory_mb))
        .chain(by_custom)
        .min()
        .unwrap_or(0)
}

/// `floor(fraction * capacity)`, the share of a capacity a threshold or max capacity allows.
/// The cast truncates, which for the non-negative products of validated fractions is the
/// floor, without the call to `floor` that the passes would make for every offer.
pub(crate) fn share(fraction: f64, capacity: u64) -> u64 {
    (fraction * capacity as f64) as u64
}
