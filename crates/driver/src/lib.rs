//! The application side of Muster: what runs inside an application rather than in the
//! cluster.
//!
//! # Layout
//!
//! * [`app`]: the application's link to the masters (register, re-attach after a failover,
//!   follow executors, ask for more or fewer, finish), shared by `muster app run` and the
//!   driver.
pub mod app;
pub mod driver;
pub mod executor;
pub mod spec;
