//! Executor placement for one app: Spark's `startExecutorsOnWorkers()` and
//! `scheduleExecutorsOnWorkers()` (`deploy/master/Master.scala`), behind one trait with two implementations:
//!
//! * [`spark::SparkLoop`], a literal port of Spark's loop, kept as the reference that tests and
//!   benchmarks compare against. It costs O(cores granted x workers) per app.
//! * [`indexed::IndexedPlacer`], the one the master uses: the same decisions from workers kept
//!   sorted across the pass and a closed form of the loop's rounds, costing roughly
//!   O((workers visited + grants) x log workers) per app.

pub(crate) mod indexed;
pub(crate) mod spark;

use crate::ledger::{Ledger, Offer};
use crate::model::WorkerSelection;
use crate::queues::{Admission, Queues};
use crate::resources::Resources;

/// One app's executor demand in this pass, queue caps already applied.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ExecutorRequest<'a> {
    /// `executor_cores`; `None` means one executor per worker that absorbs its cores.
    pub(crate) cores_per_executor: Option<u32>,
    /// One executor's minimum: `executor_cores` (or 1) cores, its memory and resources.
    pub(crate) need: &'a Resources,
    /// Cores the app may still receive: `cores_max` left, capped by its queue's capacity left.
    pub(crate) cores_left: u64,
    /// Executors the app may still receive under its executor limit.
    pub(crate) executors_left: u64,
    /// How workers running prior work admit this app.
    pub(crate) admission: Admission,
    /// Spark's `spreadOutApps`.
    pub(crate) spread_out: bool,
}

/// Decides how many cores an app gets on which workers.
pub(crate) trait ExecutorPlacer {
    /// Prepares a placer for the ALIVE workers of `ledger`, ordered by `policy`.
    fn new(ledger: &Ledger<'_>, queues: &Queues, policy: WorkerSelection) -> Self;

    /// Cores assigned per worker, in the order Spark grants them, zero entries left out.
    fn assign(&mut self, ledger: &Ledger<'_>, request: &ExecutorRequest<'_>) -> Vec<(usize, u32)>;

    /// Whether any ALIVE worker admits one `need` as offered to `admission` now.
    fn has_room(&mut self, ledger: &Ledger<'_>, need: &Resources, admission: Admission) -> bool;

    /// Tells the placer that the usage of workers `changed` changed in `ledger` (an app's
    /// grants, told at once).
    fn workers_changed(&mut self, ledger: &Ledger<'_>, changed: &[usize]);
}

/// The free amount a policy sorts workers by.
fn selection_key(policy: WorkerSelection, offer: Offer) -> u64 {
    match policy {
        WorkerSelection::CoresFreeAsc | WorkerSelection::CoresFreeDesc => offer.cores.into(),
        WorkerSelection::MemoryFreeAsc | WorkerSelection::MemoryFreeDesc => offer.memory_mb,
        WorkerSelection::WorkerId => 0,
    }
}

/// Whether a policy walks the (free, id) order backwards, tie-break included (Spark 4).
fn descending(policy: WorkerSelection) -> bool {
    matches!(
        policy,
        WorkerSelection::CoresFreeDesc | WorkerSelection::MemoryFreeDesc
    )
}
