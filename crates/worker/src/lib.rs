//! Muster's worker agent: the [`agent`] keeps one stream to the leading master and the
//! [`supervisor`] runs what it launches as real child processes.

pub mod agent;
pub mod records;
pub mod supervisor;
