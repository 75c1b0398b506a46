//! Muster's worker agent. Today: the [`supervisor`], which runs executors and drivers as real
//! child processes, reports what happens to them, and kills them on request. The stream to
//! the leader that drives it comes with the master.

pub mod supervisor;
