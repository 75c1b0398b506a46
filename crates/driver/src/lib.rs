//! The application side of Muster: what runs inside an application rather than in the
//! cluster. The decisions (which task runs where, when) are `muster_core::tasks`'; this
//! crate carries them out between real processes.
//!
//! # Layout
//!
//! * [`app`]: the application's link to the masters (register, re-attach after a failover,
//!   follow executors, ask for more or fewer, finish), shared by `muster app run` and the
//!   driver.
//! * [`spec`]: the job file `muster job run` reads.
//! * [`driver`]: the driver: serves its executors' task streams and runs the job file's
//!   jobs on them, with the task scheduler; what it does is decided by
//!   [`driver::machine`], a state machine with time passed in that scripts drive
//!   (`tests/driver/scripts`).
//! * [`executor`]: `muster executor`, started by workers: runs the tasks its driver sends.

pub mod app;
pub mod driver;
pub mod executor;
pub mod spec;
