//! Muster's scheduling policy: given a snapshot of the cluster, decide one scheduling pass of
//! the master. Pure and deterministic: no I/O, no clock, no global randomness, so the same
//! snapshot gives the same [`Plan`] on every replica, and tests can explore it exhaustively.
//!
//! # What a pass decides
//!
//! It reproduces Spark 4's `Master.schedule()` (apache/spark,
//! `core/src/main/scala/org/apache/spark/deploy/master/Master.scala`):
//!
//! 1. **Drivers first**: round-robin over the ALIVE workers in id order from a starting worker
//!    drawn with the snapshot's seed (`spread_out_drivers`), or the first worker by id that
//!    fits; at most `max_drivers` running.
//! 2. **Then executors**, app by app in submission order (queue capacities aside, below): `cores_max` / `default_cores`,
//!    `executor_cores` (unset: one executor per worker that absorbs cores), executor memory and
//!    custom resources, the executor limit, spreadOut or consolidate, and the worker selection
//!    policy. Cores are granted in units of `executor_cores` (SPARK-8881).
//!
//! On top sit **queues**, after the YARN high-priority design on YARN's CapacityScheduler:
//! a tree of dotted paths (`team.etl`) whose leaves take work. Work of `prior` leaves is
//! served first and may use the whole cluster; a normal queue's executors, with those of
//! every queue below it, hold at most its maximum (the product of `max_capacity` along its
//! path, times the ALIVE cores); and on a worker that hosts prior work, a normal queue's
//! allocation must keep the worker's used cores and memory within `floor(threshold *
//! capacity)`. When queues have a `capacity` (a guaranteed share of their parent), normal
//! apps are served in two rounds, every queue up to its guarantee and then up to its
//! maximum, the queue furthest below its guarantee first; without capacities they go in
//! submission order, as in Spark. Either way a queue's own apps keep Spark's FIFO order.
//!
//! Whatever still waits after the pass gets a [`WaitReason`] a person can act on.
//!
//! # Layout
//!
//! * [`access`]: user names and who may submit to and administer each queue.
//! * [`ids`]: every identifier (workers, apps, drivers, executors, queues, requests, terms)
//!   and the leader's timestamps, for the whole workspace.
//! * [`model`]: the input [`Snapshot`] and its validation.
//! * [`limits`]: the largest names, programs and amounts accepted from anyone.
//! * [`resources`]: cores, memory and custom resources as one value, and the fit check
//!   every crate shares.
//! * [`plan`]: the output [`Plan`].
//! * [`preempt`]: which ordinary executors to stop for prior work that waited for room.
//! * [`restarts`]: the back-off between a supervised driver's runs on its worker.
//! * [`rng`]: the seeded generator behind every random choice that must repeat.
//! * [`tasks`]: scheduling inside one application (jobs, stages, tasks), as a Spark driver
//!   does.
//! * `pass`: one pass, drivers then executors app by app, over a `ledger`.
//! * `drivers`: driver placement.
//! * [`queues`]: the queue tree, its shares and which queue is furthest below its
//!   guarantee, which queues are prior, how a queue's request is admitted on workers that
//!   run prior work, and the tree as status views show it.
//! * `wait`: why something found no worker, the most actionable cause first.
//! * `ledger`: per-worker usage during the pass, and what a worker offers to a queue.
//! * `executors`: executor placement behind one trait, with a literal port of Spark's loop
//!   ([`spark_reference`]) and the indexed placer that [`schedule`] uses. Property tests hold
//!   the two equal.
//!
//! # Left out on purpose
//!
//! Anything time-based (timeouts, heartbeats, how
//! long work has waited before it may preempt) belongs to the callers; a pass sees one
//! moment.

pub mod access;
pub mod agent;
mod drivers;
mod executors;
pub mod ids;
mod ledger;
pub mod limits;
pub mod model;
mod ordering;
mod pass;
pub mod plan;
pub mod preempt;
pub mod queues;
pub mod resources;
pub mod restarts;
pub mod rng;
pub mod tasks;
mod wait;

pub use model::{InputError, Snapshot};
pub use plan::{Plan, WaitReason};

/// Decides one scheduling pass over `snapshot`.
///
/// # Errors
///
/// The snapshot's first malformed field ([`Snapshot::validate`]); nothing is decided then.
pub fn schedule(snapshot: &Snapshot) -> Result<Plan, InputError> {
    snapshot.validate()?;
    Ok(pass::run::<executors::indexed::IndexedPlacer>(snapshot))
}

/// [`schedule`] over a snapshot that its maker guarantees valid, as the replicated state's
/// are (its property tests check theirs with [`schedule`]). The checks, a seventh of a pass
/// at 10,000 workers, run in debug builds only.
///
/// # Panics
///
/// In a debug build, on a snapshot [`Snapshot::validate`] refuses.
pub fn schedule_valid(snapshot: &Snapshot) -> Plan {
    #[cfg(debug_assertions)]
    if let Err(error) = snapshot.validate() {
        panic!("an invalid scheduling snapshot: {error}");
    }
    pass::run::<executors::indexed::IndexedPlacer>(snapshot)
}

/// The same pass with a literal port of Spark's executor loop: the reference that tests and
/// benchmarks compare [`schedule`] against. Slow on large demands; never use it to schedule.
pub mod spark_reference {
    use super::{InputError, Plan, Snapshot, executors, pass};

    /// [`super::schedule`] with Spark's one-unit-at-a-time loop.
    ///
    /// # Errors
    ///
    /// As [`super::schedule`].
    pub fn schedule(snapshot: &Snapshot) -> Result<Plan, InputError> {
        snapshot.validate()?;
        Ok(pass::run::<executors::spark::SparkLoop>(snapshot))
    }
}
