//! Harnesses that measure Muster with real processes, so that anyone can measure again what
//! the book reports. `muster bench`, `muster experiment` and `muster dev` are these with
//! arguments and rendering; a test or a benchmark can call them directly (those that start
//! processes take the `muster` binary to run).
//!
//! # Layout
//!
//! * [`cluster`]: a local cluster of masters and workers as child processes (`muster dev`).
//! * [`load`]: committed writes from concurrent clients, against Muster or etcd.
//! * [`workers`]: thousands of simulated worker agents against the leader.
//! * [`experiment`]: the high-priority queue experiment on a local cluster.
//! * [`plots`]: the benchmarks' results, drawn for the book.

pub mod cluster;
pub mod experiment;
pub mod load;
pub mod plots;
pub mod workers;

use tonic::Status;

/// Why a harness could not measure.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Its options, or something they name, are malformed.
    #[error("{0}")]
    BadInput(String),
    /// What it was asked to do does not apply now.
    #[error("{0}")]
    Refused(String),
    /// What it measures could not be reached.
    #[error("{0}")]
    Unavailable(String),
    /// A call to the masters was answered with an error, or no master answered.
    #[error("{}", .0.message())]
    Call(#[from] Status),
    /// A process, a file or a phase of the measurement failed.
    #[error("{0}")]
    Failed(String),
}

impl From<std::io::Error> for BenchError {
    fn from(error: std::io::Error) -> Self {
        Self::Failed(error.to_string())
    }
}
