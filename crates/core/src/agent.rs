//! What a worker's agent says of itself beside its processes: the build of Muster it runs and
//! how its shuffle service is. The leader keeps the latest of each per worker and shows them;
//! nothing is decided on them.

/// A build of Muster, as a process says it runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Build {
    /// Its release: a semantic version such as `0.2.0`.
    pub version: String,
    /// The commit it was built from; empty when built outside a git checkout.
    pub commit: String,
    /// The newest log format it reads (masters only; 0 from a worker).
    pub log_format: u32,
}

/// A worker's shuffle service (Spark's external shuffle service) as its agent last saw it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShuffleServiceStatus {
    /// Its port.
    pub port: u16,
    /// It accepts connections on its port.
    pub ready: bool,
    /// Times it was started again after it failed, since the agent started.
    pub restarts: u32,
}
