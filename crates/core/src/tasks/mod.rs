//! Scheduling inside one application, as a Spark driver does it: jobs are DAGs of stages, a
//! stage's tasks form a task set, and free executor cores are offered to task sets in the order
//! of their pools (FIFO, or FAIR with weights and minimum shares), each taking tasks as local
//! to their preferred hosts as delay scheduling allows (Spark's
//! `scheduler/TaskSchedulerImpl.scala` and `TaskSetManager.scala`).
//!
//! Pure like the rest of this crate: time is passed in, the shuffle of offers is seeded, and
//! the driver runtime only carries out the [`scheduler::Launch`]es and reports the ends.
//!
//! # Layout
//!
//! * [`jobs`]: jobs and their stage DAGs ([`jobs::JobScheduler`], the driver's entry point).
//! * [`scheduler`]: offers and pools ([`scheduler::TaskScheduler`], Spark's
//!   `TaskSchedulerImpl.resourceOffers`).
//! * `task_set`: one stage's pending tasks, delay scheduling and retries (Spark's
//!   `TaskSetManager`).
//! * [`pools`]: the FIFO and FAIR orders.
//! * [`locality`]: locality levels and their waits.
//! * [`executors`]: the driver's live executors.
//! * [`allocation`]: dynamic allocation: the executor target and idle executors to give back.
//!
//! # Left out
//!
//! Exclusion on failure, barrier stages and shuffle-output loss: a stage's tasks are
//! independent, and a finished task's result is never lost with its executor.

pub mod allocation;
pub mod executors;
pub mod jobs;
pub mod locality;
pub mod pools;
pub mod scheduler;
mod task_set;

use std::fmt;

use serde::{Deserialize, Serialize};

pub use task_set::{Speculation, TaskLocation};

/// A job's id in its application, in submission order; FIFO runs lower ids first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct JobId(pub u32);

/// A stage's id in its application, unique across jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct StageId(pub u32);

/// A task attempt's id in its application (Spark's `taskId`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TaskId(pub u64);

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
