//! Muster's replicated state machine: the allocation log's commands and the state every
//! master replica builds by applying them in order.
//!
//! # What it holds
//!
//! [`ClusterState`] keeps what Spark's Master keeps in memory and in its persistence engine
//! (workers, applications, drivers, the id counters, bounded lists of completed apps and
//! drivers) plus what Spark never persisted: every executor allocation, executor limits and
//! queue configuration. A committed plan is the truth about allocations; what processes really
//! run is reconciled against worker reports by the leader, through more commands.
//!
//! # How it changes
//!
//! Only through [`ClusterState::apply`] with a [`Command`]: an [`Op`] stamped by the leader
//! with its wall-clock time and, for client writes, a request id. Apply is deterministic (no
//! clock, no randomness, no I/O), so every replica that applies the same log holds the same
//! state. An op either applies entirely or is refused with an [`ApplyError`] that changes
//! nothing; a scheduling pass ([`commands::ApplyPlan`]) is re-checked part by part against
//! free resources and reports what no longer fits. Every response carries the [`Effects`] the
//! leader must carry out once the command is committed (kills, executor events).
//!
//! The lifecycle rules are Spark's (`removeWorker`, `removeApplication` and `removeDriver` in
//! its `deploy/master/Master.scala`): a lost worker's executors become LOST and their cores
//! return to their apps' demand; its supervised drivers are resubmitted under new ids; executor
//! failures count toward `max_executor_retries`; RUNNING resets the count.
//!
//! # Layout
//!
//! * [`commands`]: the ops, one type each.
//! * [`model`]: workers, apps, executors, drivers and their states.
//! * `response`: what applying returns: [`Response`], [`Effects`], [`ApplyError`] and the plan
//!   re-check's [`Rejection`]s.
//! * `state`: [`ClusterState`] and the bookkeeping ops share.
//! * `addresses`: which units of custom resources (which GPUs) each process holds.
//! * `stopping`: what a process stopped at the masters' word keeps until its end is reported.
//! * `invariants`: [`ClusterState::check_invariants`].
//! * `snapshot`: versioned snapshot encoding.
//! * [`version`]: log formats, and when the cluster's effective one is raised.
//! * `scheduling`: the [`muster_core::Snapshot`] a scheduling pass sees.

mod addresses;
pub mod codec;
pub mod commands;
mod invariants;
pub mod model;
mod response;
mod scheduling;
mod snapshot;
mod state;
mod stopping;
pub mod version;

pub use commands::{Command, Op};
pub use invariants::InvariantViolation;
pub use response::{ApplyError, Effects, Outcome, Rejected, Rejection, Response};
pub use snapshot::{SNAPSHOT_FORMAT, SnapshotError};
pub use state::{ClusterState, DriverCounts, ENDED_EXECUTORS_KEPT, StateConfig};
pub use stopping::Stopped;
