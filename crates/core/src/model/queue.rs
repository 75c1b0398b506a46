//! Queues as a pass reads them: each queue's capacity, limits and style, and the checks of a
//! queue configuration.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::validate::{InputError, fraction, positive, refuse, unique};
use crate::ids::{QueueName, SmolStr};

/// A queue: YARN CapacityScheduler's capacity plus the priority design's `isPrior` and
/// `psThreshold` (the YARN high-priority scheduler's `LeafQueue`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    /// The queue's name, unique.
    pub name: QueueName,
    /// Work of a prior queue is served before all other work and may use the whole cluster.
    #[serde(default)]
    pub prior: bool,
    /// On a worker hosting prior work, this (normal) queue's allocations must leave the
    /// worker's used cores and memory within `threshold` of its capacity. In (0, 1].
    #[serde(default = "one")]
    pub threshold: f64,
    /// Fraction of its parent's maximum (the ALIVE workers' total cores for a top-level
    /// queue) the executors of this (normal) queue may hold. In (0, 1]; ignored for prior
    /// queues.
    #[serde(default = "one")]
    pub max_capacity: f64,
    /// The guaranteed share of its parent's capacity (YARN's `capacity`), in [0, 1]: either
    /// every queue has one, siblings summing to 1, or none has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<f64>,
    /// The share of the queue's room its running drivers may hold; unset: the masters'
    /// `driver_share`. In (0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_share: Option<f64>,
    /// How long a gang of this queue may wait for all of its minimum, in seconds, before
    /// `gang_style` applies; unset: the masters'. The leader times gangs out, not the pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang_timeout_s: Option<u64>,
    /// What becomes of a gang of this queue that waited `gang_timeout_s`; unset: the
    /// masters'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang_style: Option<GangStyle>,
    /// The order a leaf serves its applications in; `fifo` (Spark's) by default.
    #[serde(default, skip_serializing_if = "OrderingPolicy::is_fifo")]
    pub ordering: OrderingPolicy,
    /// Each user's weight under `drf` ordering, 1 for a user not listed: a user of weight 2
    /// is served as if their dominant share were half what it is. Each above 0.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub user_weights: BTreeMap<SmolStr, f64>,
    /// The highest priority an application of this leaf has (YARN's
    /// `max-application-priority`), whatever it asks for; unset: 0, as YARN's default, so
    /// that priorities above 0 take effect only where the operator allows them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_priority: Option<i32>,
    /// The most of this leaf's maximum, in cores, one user's applications may hold while
    /// another user's could take more (the CapacityScheduler's user limit): those are served
    /// first, and what they leave goes to anyone. In (0, 1]; unset: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_limit: Option<f64>,
}

/// The order in which a leaf queue serves its applications.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OrderingPolicy {
    /// In submission order, each application taking all it can before the next (Spark's).
    #[default]
    Fifo,
    /// An executor at a time to the application holding the smallest dominant share of the
    /// cluster (its largest share of cores, memory or any custom resource), as the
    /// CapacityScheduler's fair ordering policy.
    Fair,
    /// An executor at a time to an application of the user holding the smallest dominant
    /// share of the cluster, divided by their weight: dominant resource fairness (YARN's
    /// `drf` policy, Mesos' DRF sorter).
    Drf,
}

impl OrderingPolicy {
    /// Whether this is Spark's order, the default.
    pub fn is_fifo(&self) -> bool {
        *self == Self::Fifo
    }
}

impl fmt::Display for OrderingPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Fifo => "fifo",
            Self::Fair => "fair",
            Self::Drf => "drf",
        })
    }
}

/// What becomes of a gang that waited its timeout for all of its minimum, as YuniKorn's
/// gang scheduling styles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GangStyle {
    /// It is placed as any application from then on, an executor at a time.
    #[default]
    Soft,
    /// It fails, saying why.
    Hard,
}

impl fmt::Display for GangStyle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Soft => "soft",
            Self::Hard => "hard",
        })
    }
}

/// The default threshold and maximum capacity of a queue: all of it.
pub(crate) fn one() -> f64 {
    1.0
}

impl QueueConfig {
    /// A queue with default settings.
    pub fn named(name: &str) -> Self {
        Self {
            name: QueueName::from(name),
            prior: false,
            threshold: 1.0,
            max_capacity: 1.0,
            capacity: None,
            driver_share: None,
            gang_timeout_s: None,
            gang_style: None,
            ordering: OrderingPolicy::Fifo,
            user_weights: BTreeMap::new(),
            max_priority: None,
            user_limit: None,
        }
    }
}

/// Why a queue takes no work.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotALeaf {
    /// No such queue.
    #[error("unknown queue `{0}`")]
    Unknown(QueueName),
    /// A parent queue: work goes to the leaves below it.
    #[error("`{queue}` is a parent queue: submit to one of its leaves ({})", leaves.join(", "))]
    Parent {
        /// The queue.
        queue: QueueName,
        /// The leaves below it.
        leaves: Vec<String>,
    },
}

/// Whether `queues` has a queue named `name` (`default` is always there).
pub(super) fn is_known(queues: &[QueueConfig], name: &QueueName) -> bool {
    name.0 == crate::ids::DEFAULT_QUEUE || queues.iter().any(|q| &q.name == name)
}

/// Refuses new work for the queue named `name` unless it is a leaf of `queues`: known
/// (`default` always is) and without children.
///
/// # Errors
///
/// An unknown queue, or a parent with the leaves below it.
pub fn takes_work(queues: &[QueueConfig], name: &QueueName) -> Result<(), NotALeaf> {
    if !is_known(queues, name) {
        return Err(NotALeaf::Unknown(name.clone()));
    }
    let tree = crate::queues::Queues::new(queues);
    if tree.is_parent(name) {
        return Err(NotALeaf::Parent {
            queue: name.clone(),
            leaves: tree
                .leaves_below(name)
                .iter()
                .map(ToString::to_string)
                .collect(),
        });
    }
    Ok(())
}

/// Checks a queue configuration: names unique and not empty, fractions in (0, 1], and the
/// capacities (see the `queues` module; the names themselves are checked apart, by
/// [`crate::queues::check_paths`], where a person wrote them).
///
/// # Errors
///
/// The first offending field, as `queues[i].field`.
pub fn validate_queues(queues: &[QueueConfig]) -> Result<(), InputError> {
    unique("queue", queues.iter().map(|q| &q.name), |i| {
        format!("queues[{i}].name")
    })?;
    for (i, queue) in queues.iter().enumerate() {
        crate::limits::name(format_args!("queues[{i}].name"), &queue.name.0)?;
        fraction(format_args!("queues[{i}].threshold"), queue.threshold)?;
        fraction(format_args!("queues[{i}].max_capacity"), queue.max_capacity)?;
        if let Some(share) = queue.driver_share {
            fraction(format_args!("queues[{i}].driver_share"), share)?;
        }
        if let Some(timeout) = queue.gang_timeout_s {
            positive(format_args!("queues[{i}].gang_timeout_s"), timeout)?;
        }
        if let Some(limit) = queue.user_limit {
            fraction(format_args!("queues[{i}].user_limit"), limit)?;
        }
        for (user, &weight) in &queue.user_weights {
            if !(weight.is_finite() && weight > 0.0) {
                return refuse(
                    format_args!("queues[{i}].user_weights.{user}"),
                    format!("must be above 0, got {weight}"),
                );
            }
        }
    }
    crate::queues::check_capacities(queues)
}
