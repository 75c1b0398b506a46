//! One scheduling pass: drivers first, then executors for each app, over a [`Ledger`] that
//! tracks what the pass has placed so far (Spark's `Master.schedule()`, in
//! `deploy/master/Master.scala`).

use std::collections::BTreeMap;

use crate::drivers::place_drivers;
use crate::executors::{ExecutorPlacer, ExecutorRequest};
use crate::ids::{QueueName, WorkId};
use crate::ledger::{Ledger, share};
use crate::model::{AppRequest, Snapshot};
use crate::plan::{ExecutorGrant, Kind, Plan, WaitReason, Waiting};
use crate::queues::{Admission, Queues, prior_first};
use crate::resources::Resources;
use crate::wait::why_nothing_fits;

/// Runs one pass over a validated snapshot with executor placer `P`.
pub(crate) fn run<P: ExecutorPlacer>(snapshot: &Snapshot) -> Plan {
    let queues = Queues::new(&snapshot.queues);
    let mut ledger = Ledger::new(&snapshot.workers);
    let mut plan = Plan::default();
    place_drivers(snapshot, &queues, &mut ledger, &mut plan);
    let mut placer = P::new(&ledger, &queues, snapshot.config.worker_selection);
    let mut apps = AppPass::new(snapshot, &ledger);
    for app in prior_first(&snapshot.apps, &queues, |a| &a.queue) {
        apps.place(app, &queues, &mut ledger, &mut placer, &mut plan);
    }
    plan
}

/// State carried from one app to the next: queue usage and the cluster's size.
struct AppPass<'s> {
    snapshot: &'s Snapshot,
    /// Executor cores each queue holds, held and granted in this pass.
    queue_used: BTreeMap<&'s QueueName, u64>,
    /// Total cores of ALIVE workers, the base of `max_capacity`.
    total_cores: u64,
}

impl<'s> AppPass<'s> {
    fn new(snapshot: &'s Snapshot, ledger: &Ledger<'_>) -> Self {
        let mut queue_used = BTreeMap::new();
        for app in &snapshot.apps {
            *queue_used.entry(&app.queue).or_insert(0) += app.held_cores();
        }
        Self {
            snapshot,
            queue_used,
            total_cores: ledger.alive_total_cores(),
        }
    }

    /// Grants `app` what the placer assigns, then records why it still waits, if it does.
    fn place<P: ExecutorPlacer>(
        &mut self,
        app: &'s AppRequest,
        queues: &Queues,
        ledger: &mut Ledger<'_>,
        placer: &mut P,
        plan: &mut Plan,
    ) {
        let queue = queues.get(&app.queue);
        let cpe = app.executor_cores.unwrap_or(1);
        let requested = app
            .cores_max
            .or(self.snapshot.config.default_cores)
            .map_or(u64::MAX, u64::from);
        let own_left = requested.saturating_sub(app.held_cores());
        let queue_used = self.queue_used.get(&app.queue).copied().unwrap_or(0);
        let queue_capacity = (!queue.prior).then(|| share(queue.max_capacity, self.total_cores));
        let queue_left =
            queue_capacity.map_or(u64::MAX, |capacity| capacity.saturating_sub(queue_used));
        let held_executors = app.executors.len() as u64;
        let executors_left = app.executor_limit.map_or(u64::MAX, |limit| {
            u64::from(limit).saturating_sub(held_executors)
        });
        let admission = queues.admission(&app.queue);
        let need = &Resources::new(cpe, app.executor_memory_mb)
            .with_custom(app.executor_resources.clone());
        let request = ExecutorRequest {
            cores_per_executor: app.executor_cores,
            need,
            cores_left: own_left.min(queue_left),
            executors_left,
            admission,
            spread_out: self.snapshot.config.spread_out_apps,
        };

        let (mut granted_cores, mut granted_executors) = (0u64, 0u64);
        if request.cores_left >= u64::from(cpe) {
            let assigned = placer.assign(ledger, &request);
            for &(w, cores) in &assigned {
                // allocateWorkerResourceToExecutors: `cores / cpe` executors, or one with all.
                let (count, cores_each) = app
                    .executor_cores
                    .map_or((1, cores), |cpe| (cores / cpe, cpe));
                let executor = Resources {
                    cores: cores_each,
                    ..need.clone()
                };
                for _ in 0..count {
                    ledger.take(w, &executor, admission == Admission::Prior);
                    plan.executors.push(ExecutorGrant {
                        app: app.id.clone(),
                        worker: ledger.worker(w).id.clone(),
                        resources: executor.clone(),
                    });
                }
                granted_cores += u64::from(cores);
                granted_executors += u64::from(count);
            }
            let changed: Vec<usize> = assigned.iter().map(|&(w, _)| w).collect();
            placer.workers_changed(ledger, &changed);
        }
        *self.queue_used.entry(&app.queue).or_insert(0) += granted_cores;

        if own_left - granted_cores < u64::from(cpe) {
            return;
        }
        // A queue allowed the whole cluster is never the reason: the cluster is.
        let at_capacity = queue_capacity
            .filter(|_| queue.max_capacity < 1.0 && queue_left - granted_cores < u64::from(cpe));
        let reason = if executors_left == granted_executors {
            WaitReason::ExecutorLimit {
                limit: app.executor_limit.expect("only a set limit runs out"),
                held: held_executors + granted_executors,
            }
        } else {
            // A cause no capacity change would cure outranks the queue's capacity.
            match (
                why_nothing_fits(ledger, Kind::Executor, need, &app.queue, queues, |a| {
                    placer.has_room(ledger, need, a)
                }),
                at_capacity,
            ) {
                (
                    permanent
                    @ (WaitReason::NoAliveWorker | WaitReason::LargerThanAnyWorker { .. }),
                    _,
                ) => permanent,
                (_, Some(capacity)) => WaitReason::QueueAtCapacity {
                    queue: app.queue.clone(),
                    used: queue_used + granted_cores,
                    capacity,
                },
                (reason, None) => reason,
            }
        };
        plan.waiting.push(Waiting {
            id: WorkId::App(app.id.clone()),
            reason,
        });
    }
}
