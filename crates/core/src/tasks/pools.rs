//! The order in which task sets get offers: Spark's pools with the FIFO and FAIR scheduling
//! algorithms (`scheduler/SchedulingAlgorithm.scala`).

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

/// `spark.scheduler.mode`, and a pool's `schedulingMode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum SchedulingMode {
    /// Jobs in submission order: the lower job id first, then the lower stage id.
    #[default]
    Fifo,
    /// Shares: needy (below their minimum share) first, then the fewest running tasks per
    /// unit of weight.
    Fair,
}

/// A pool of the FAIR scheduler (a `fairscheduler.xml` entry).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    /// Its name; jobs name it.
    pub name: String,
    /// How its own task sets are ordered.
    #[serde(default)]
    pub mode: SchedulingMode,
    /// Its share relative to other pools, at least 1.
    #[serde(default = "one")]
    pub weight: u32,
    /// Running tasks it is owed before shares count.
    #[serde(default)]
    pub min_share: u32,
}

fn one() -> u32 {
    1
}

/// The pool jobs use when they name none, and the settings of a pool a job names that is not
/// configured (Spark's defaults: FIFO, weight 1, min share 0).
pub const DEFAULT_POOL: &str = "default";

impl PoolConfig {
    /// A pool with Spark's default settings.
    pub fn named(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            mode: SchedulingMode::Fifo,
            weight: 1,
            min_share: 0,
        }
    }
}

/// What the algorithms compare: a pool, or a task set (weight 1, min share 0, priority its
/// job id).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Schedulable<'a> {
    pub(crate) name: &'a str,
    pub(crate) priority: u32,
    pub(crate) stage: u32,
    pub(crate) running: u32,
    pub(crate) weight: u32,
    pub(crate) min_share: u32,
}

impl SchedulingMode {
    /// Which of `a` and `b` goes first.
    pub(crate) fn compare(self, a: &Schedulable<'_>, b: &Schedulable<'_>) -> Ordering {
        match self {
            Self::Fifo => fifo(a, b),
            Self::Fair => fair(a, b),
        }
    }
}

/// Spark's `FIFOSchedulingAlgorithm`.
fn fifo(a: &Schedulable<'_>, b: &Schedulable<'_>) -> Ordering {
    a.priority.cmp(&b.priority).then(a.stage.cmp(&b.stage))
}

/// Spark's `FairSchedulingAlgorithm`, exactly.
fn fair(a: &Schedulable<'_>, b: &Schedulable<'_>) -> Ordering {
    let needy = |s: &Schedulable<'_>| s.running < s.min_share;
    let min_share_ratio =
        |s: &Schedulable<'_>| f64::from(s.running) / f64::from(s.min_share.max(1));
    let weight_ratio = |s: &Schedulable<'_>| f64::from(s.running) / f64::from(s.weight);
    match (needy(a), needy(b)) {
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (both_needy, _) => {
            let ratio = if both_needy {
                min_share_ratio
            } else {
                weight_ratio
            };
            ratio(a)
                .total_cmp(&ratio(b))
                .then_with(|| a.name.cmp(b.name))
        }
    }
}
