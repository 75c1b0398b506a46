//! Lifecycle scripts of every command and rule (`scripts`), request deduplication and the
//! term check, snapshot encoding, queue configuration, passes written by an earlier build,
//! and property tests over random command sequences. Every apply goes through
//! [`support::Cluster`], which checks the invariants after each command and that a refused
//! command changed nothing.

mod dedup;
mod ended;
mod pages;
mod plans;
mod profiles;
mod properties;
mod queues;
mod releases;
mod scripts;
mod snapshot;
mod snapshot_bytes;
mod stopping;
mod support;
mod users;
