//! Locality levels and how long a task set waits at each before it settles for a wider one
//! (Spark's `TaskLocality` and `getLocalityWait` in `scheduler/TaskSetManager.scala`).

use std::fmt;

use serde::{Deserialize, Serialize};

/// How close a task runs to its preferred data, most local first. The order is Spark's:
/// `PROCESS_LOCAL < NODE_LOCAL < NO_PREF < RACK_LOCAL < ANY`, and a level is allowed under a
/// constraint when it is at most the constraint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Locality {
    /// On the executor the task prefers (or a task with no preference, which Spark reports
    /// so).
    ProcessLocal,
    /// On a host the task prefers.
    NodeLocal,
    /// The task prefers nothing.
    NoPref,
    /// On a host in the rack of a host the task prefers.
    RackLocal,
    /// Anywhere.
    Any,
}

impl Locality {
    /// Spark's name, as the job report prints it.
    pub fn name(self) -> &'static str {
        match self {
            Self::ProcessLocal => "PROCESS_LOCAL",
            Self::NodeLocal => "NODE_LOCAL",
            Self::NoPref => "NO_PREF",
            Self::RackLocal => "RACK_LOCAL",
            Self::Any => "ANY",
        }
    }
}

impl fmt::Display for Locality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `spark.locality.wait` and its per-level overrides, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalityWaits {
    /// `spark.locality.wait.process`.
    pub process_ms: u64,
    /// `spark.locality.wait.node`.
    pub node_ms: u64,
    /// `spark.locality.wait.rack`.
    pub rack_ms: u64,
}

impl LocalityWaits {
    /// Spark's default: every level waits `spark.locality.wait`, 3 s.
    pub const SPARK_DEFAULT_MS: u64 = 3000;

    /// Every level waits `ms`.
    pub fn uniform(ms: u64) -> Self {
        Self {
            process_ms: ms,
            node_ms: ms,
            rack_ms: ms,
        }
    }

    /// How long a task set waits at `level` before it may go wider; NO_PREF and ANY do not
    /// wait.
    pub fn at(&self, level: Locality) -> u64 {
        match level {
            Locality::ProcessLocal => self.process_ms,
            Locality::NodeLocal => self.node_ms,
            Locality::RackLocal => self.rack_ms,
            Locality::NoPref | Locality::Any => 0,
        }
    }
}

impl Default for LocalityWaits {
    fn default() -> Self {
        Self::uniform(Self::SPARK_DEFAULT_MS)
    }
}
