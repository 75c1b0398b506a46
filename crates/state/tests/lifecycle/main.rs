//! Scenario tests of every command and lifecycle rule, and property tests over random command
//! sequences. Every apply goes through [`support::Cluster`], which checks the invariants after
//! each command and that a refused command changed nothing.

mod apps;
mod dedup;
mod drivers;
mod plan;
mod properties;
mod queues;
mod snapshot;
mod support;
mod workers;
