//! A literal port of Spark 4's `startExecutorsOnWorkers()` / `scheduleExecutorsOnWorkers()`
//! (`deploy/master/Master.scala`), kept as the reference the fast placer is
//! proven against. Do not optimise it: its value is that it reads like the Scala.
//!
//! The only addition is the queue view: a worker's free cores and memory are what it offers
//! to the app's queue ([`Ledger::offer`]), which on workers without prior work is simply
//! what is free.

use super::{ExecutorPlacer, ExecutorRequest, descending, selection_key};
use crate::ledger::{Ledger, Offer};
use crate::model::WorkerSelection;
use crate::queues::Admission;
use crate::queues::Queues;
use crate::resources::Resources;

/// Spark's loop, one core unit per iteration.
pub(crate) struct SparkLoop {
    policy: WorkerSelection,
}

impl ExecutorPlacer for SparkLoop {
    fn new(_ledger: &Ledger<'_>, _queues: &Queues, policy: WorkerSelection) -> Self {
        Self { policy }
    }

    fn assign(&mut self, ledger: &Ledger<'_>, request: &ExecutorRequest<'_>) -> Vec<(usize, u32)> {
        // startExecutorsOnWorkers: ALIVE workers that can launch one executor, in policy order.
        let mut usable: Vec<(usize, Offer)> = ledger
            .alive_by_id()
            .iter()
            .map(|&w| (w, ledger.offer(w, request.admission)))
            .filter(|&(w, offer)| ledger.admits(w, offer, request.need))
            .collect();
        usable.sort_by_key(|&(w, offer)| (selection_key(self.policy, offer), ledger.rank(w)));
        if descending(self.policy) {
            usable.reverse();
        }
        let assigned = schedule_executors_on_workers(ledger, request, &usable);
        usable
            .iter()
            .zip(assigned)
            .filter(|&(_, cores)| cores > 0)
            .map(|(&(w, _), cores)| (w, cores))
            .collect()
    }

    fn has_room(&mut self, ledger: &Ledger<'_>, need: &Resources, admission: Admission) -> bool {
        ledger.any_fits(need, admission)
    }

    fn workers_changed(&mut self, _ledger: &Ledger<'_>, _changed: &[usize]) {}
}

/// `scheduleExecutorsOnWorkers`: cores assigned to each usable worker.
fn schedule_executors_on_workers(
    ledger: &Ledger<'_>,
    request: &ExecutorRequest<'_>,
    usable: &[(usize, Offer)],
) -> Vec<u32> {
    let min_cores_per_executor = request.need.cores;
    let one_executor_per_worker = request.cores_per_executor.is_none();
    let memory_per_executor = request.need.memory_mb;
    let n = usable.len();
    let mut assigned_cores = vec![0u32; n];
    let mut assigned_executors = vec![0u32; n];
    let free_cores: u64 = usable.iter().map(|(_, offer)| u64::from(offer.cores)).sum();
    let mut cores_to_assign = request.cores_left.min(free_cores);

    let can_launch_executor_for_app =
        |pos: usize, assigned_cores: &[u32], assigned_executors: &[u32], cores_to_assign: u64| {
            let (w, offer) = usable[pos];
            let keep_scheduling = cores_to_assign >= u64::from(min_cores_per_executor);
            let enough_cores = offer.cores - assigned_cores[pos] >= min_cores_per_executor;
            let num = assigned_executors[pos];
            let launching_new_executor = !one_executor_per_worker || num == 0;
            if launching_new_executor {
                let enough_memory = offer.memory_mb >= (u64::from(num) + 1) * memory_per_executor;
                let enough_resources = ledger.resources_fit(w, request.need, num);
                let under_limit = assigned_executors
                    .iter()
                    .map(|&e| u64::from(e))
                    .sum::<u64>()
                    < request.executors_left;
                keep_scheduling && enough_cores && enough_memory && enough_resources && under_limit
            } else {
                // Adding cores to an existing executor re-checks neither memory nor limits.
                keep_scheduling && enough_cores
            }
        };

    let mut free_workers: Vec<usize> = (0..n)
        .filter(|&pos| {
            can_launch_executor_for_app(pos, &assigned_cores, &assigned_executors, cores_to_assign)
        })
        .collect();
    while !free_workers.is_empty() {
        for &pos in &free_workers {
            let mut keep_scheduling = true;
            while keep_scheduling
                && can_launch_executor_for_app(
                    pos,
                    &assigned_cores,
                    &assigned_executors,
                    cores_to_assign,
                )
            {
                cores_to_assign -= u64::from(min_cores_per_executor);
                assigned_cores[pos] += min_cores_per_executor;
                if one_executor_per_worker {
                    assigned_executors[pos] = 1;
                } else {
                    assigned_executors[pos] += 1;
                }
                // Spreading out: move on to the next worker after one unit.
                if request.spread_out {
                    keep_scheduling = false;
                }
            }
        }
        free_workers.retain(|&pos| {
            can_launch_executor_for_app(pos, &assigned_cores, &assigned_executors, cores_to_assign)
        });
    }
    assigned_cores
}
