//! Muster's worker agent: the [`agent`] keeps one stream to the leading master and the
//! [`supervisor`] runs what it launches as real child processes.
//!
//! # Layout
//!
//! * [`agent`]: registration, heartbeats, numbered reports kept until acknowledged, the
//!   leader's launches and kills (term-checked), leader discovery and fencing.
//! * [`supervisor`]: starting, watching, restarting and killing processes in their own
//!   process groups, and adopting a crashed predecessor's.
//! * [`isolation`]: the control groups that limit each process to what it was granted.
//! * [`metrics`]: the worker's Prometheus metrics and the `/metrics` endpoint.
//! * [`output`]: reading what a process wrote, a part at a time, for `muster logs`.
//! * [`records`]: what runs, recorded in the work dir so a restarted agent can adopt it.
//! * [`cleanup`]: which directories of ended processes go, by age and size.
//! * [`shuffle`]: Spark's external shuffle service, run for the executors on the host.
//! * [`fence`]: the last contact with a leader, on the clock since boot, for fencing.

pub mod agent;
pub mod cleanup;
pub mod fence;
pub mod isolation;
pub mod metrics;
pub mod output;
pub mod records;
pub mod shuffle;
pub mod supervisor;
