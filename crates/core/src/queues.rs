//! The queues of a pass as a tree, after YARN's CapacityScheduler, whose leaves carry the
//! high-priority design's `LeafQueue.isPrior` and `psthreshold`.
//!
//! A queue's name is its path below the implicit root: `analytics.etl` is a child of
//! `analytics`. Leaves take work; a parent only groups its children. A queue's `max_capacity`
//! (and `capacity`, when the queues have them) is a share of its parent's, so its absolute
//! share of the cluster is the product along its path.
//!
//! What a person writes is checked strictly ([`check_paths`]: every parent listed, `root`
//! implicit, ...). What replicas read is read leniently, because builds before trees took
//! any name: a queue's parent is the longest listed prefix of its path, so a lone
//! `team.etl` is a top-level queue, and work in a parent is served like a leaf's.
//!
//! Queues with capacities are *guaranteed*: normal work is served first up to each queue's
//! guaranteed share, then up to its maximum, and in each round the queue furthest below its
//! guarantee goes first (YARN orders a parent's children by used capacity the same way).
//! Queues without capacities keep the order work was submitted in.

use std::collections::{BTreeMap, BTreeSet};

use crate::access::QueueSpec;
use crate::ids::QueueName;
use crate::model::{InputError, QueueConfig};

/// How a request is admitted on a worker that hosts prior work.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Admission {
    /// A prior queue's request: sees every free core and MB.
    Prior,
    /// A normal queue's request: on prior-hosting workers it may fill cores and memory only
    /// up to `floor(threshold * capacity)`.
    Normal {
        /// The queue's threshold, in (0, 1].
        threshold: f64,
    },
}

/// Which share of the cluster bounds a queue's executor cores in a round of the pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bound {
    /// Its guaranteed share: the product of the `capacity` along its path.
    Guaranteed,
    /// Its maximum: the product of the `max_capacity` along its path.
    Max,
}

/// The queues of a snapshot, `default` included even when not listed.
pub(crate) struct Queues {
    by_name: BTreeMap<QueueName, QueueConfig>,
    /// Each queue followed by its ancestors, nearest first.
    paths: BTreeMap<QueueName, Vec<QueueName>>,
    /// The children of each parent queue, by name; the root's under `None`.
    children: BTreeMap<Option<QueueName>, Vec<QueueName>>,
}

/// The path prefix of the queue named `name` one segment up, `None` for a top-level name.
fn parent(name: &str) -> Option<&str> {
    name.rsplit_once('.').map(|(parent, _)| parent)
}

/// The parent of `name` among `listed` names: its longest listed path prefix.
fn listed_parent<'n>(listed: &BTreeSet<&'n str>, name: &str) -> Option<&'n str> {
    std::iter::successors(parent(name), |up| parent(up)).find_map(|up| listed.get(up).copied())
}

/// The queues with `configs` plus `default` when it is not listed: with no guarantee when
/// other queues have capacities, so that it may use only what they leave idle.
pub fn with_default(configs: &[QueueConfig]) -> Vec<QueueConfig> {
    let mut queues = configs.to_vec();
    if !queues.iter().any(|q| q.name.0 == crate::ids::DEFAULT_QUEUE) {
        let guaranteed = queues.iter().any(|q| q.capacity.is_some());
        queues.push(QueueConfig {
            capacity: guaranteed.then_some(0.0),
            ..QueueConfig::named(crate::ids::DEFAULT_QUEUE)
        });
    }
    queues
}

impl Queues {
    /// The tree of `configs`, read leniently (see the module doc).
    pub(crate) fn new(configs: &[QueueConfig]) -> Self {
        let by_name: BTreeMap<_, _> = with_default(configs)
            .into_iter()
            .map(|q| (q.name.clone(), q))
            .collect();
        let listed: BTreeSet<&str> = by_name.keys().map(|q| q.0.as_str()).collect();
        let mut paths = BTreeMap::new();
        let mut children: BTreeMap<Option<QueueName>, Vec<QueueName>> = BTreeMap::new();
        for name in by_name.keys() {
            let mut path = vec![name.clone()];
            while let Some(up) = listed_parent(&listed, &path[path.len() - 1].0) {
                path.push(QueueName::from(up));
            }
            let up = path.get(1).cloned();
            children.entry(up).or_default().push(name.clone());
            paths.insert(name.clone(), path);
        }
        Self {
            by_name,
            paths,
            children,
        }
    }

    /// The queue's settings. Validation guarantees every named queue exists.
    pub(crate) fn get(&self, name: &QueueName) -> &QueueConfig {
        &self.by_name[name]
    }

    /// The queue and its ancestors, nearest first.
    pub(crate) fn path(&self, name: &QueueName) -> &[QueueName] {
        &self.paths[name]
    }

    /// What is held below each queue, parents included, given what each leaf holds (an
    /// unknown leaf counts nowhere).
    pub(crate) fn sum_below<'a>(
        &self,
        held: impl IntoIterator<Item = (&'a QueueName, u64)>,
    ) -> BTreeMap<&QueueName, u64> {
        let mut below = BTreeMap::new();
        for (leaf, amount) in held {
            for queue in self.paths.get(leaf).into_iter().flatten() {
                *below.entry(queue).or_insert(0) += amount;
            }
        }
        below
    }

    /// Whether queue `name` has children, and so takes no new work.
    pub(crate) fn is_parent(&self, name: &QueueName) -> bool {
        self.children.contains_key(&Some(name.clone()))
    }

    /// The leaves below queue `name`, in name order.
    pub(crate) fn leaves_below(&self, name: &QueueName) -> Vec<&QueueName> {
        self.paths
            .iter()
            .filter(|(q, path)| path[1..].contains(name) && !self.is_parent(q))
            .map(|(q, _)| q)
            .collect()
    }

    /// Whether the queues have guaranteed shares.
    pub(crate) fn guaranteed(&self) -> bool {
        self.by_name.values().any(|q| q.capacity.is_some())
    }

    /// The queue's absolute share of the cluster under `bound`.
    pub(crate) fn share(&self, name: &QueueName, bound: Bound) -> f64 {
        self.path(name)
            .iter()
            .map(|q| {
                let queue = self.get(q);
                match bound {
                    Bound::Guaranteed => queue.capacity.unwrap_or(1.0),
                    Bound::Max => queue.max_capacity,
                }
            })
            .product()
    }

    /// The leaf of `pending` to serve next: from the root down, the child furthest below its
    /// guarantee (the lowest ratio of its `used` cores to its guaranteed ones, a queue
    /// guaranteed nothing last, ties by name) among those with pending work below them.
    pub(crate) fn furthest_below<'q>(
        &'q self,
        pending: &BTreeSet<&QueueName>,
        used: impl Fn(&QueueName) -> u64,
        total_cores: u64,
    ) -> Option<&'q QueueName> {
        let mut level = self.children.get(&None)?;
        loop {
            let below = |q: &QueueName| pending.iter().any(|p| self.path(p).contains(q));
            let ratio = |q: &QueueName| {
                // In whole cores, as the room a round gives it is.
                let guaranteed =
                    crate::ledger::share(self.share(q, Bound::Guaranteed), total_cores);
                if guaranteed > 0 {
                    used(q) as f64 / guaranteed as f64
                } else {
                    f64::INFINITY
                }
            };
            let next = level
                .iter()
                .filter(|q| below(q))
                .min_by(|a, b| ratio(a).total_cmp(&ratio(b)).then_with(|| a.cmp(b)))?;
            if pending.contains(next) {
                return Some(next);
            }
            level = &self.children[&Some(next.clone())];
        }
    }

    pub(crate) fn admission(&self, name: &QueueName) -> Admission {
        let queue = self.get(name);
        if queue.prior {
            Admission::Prior
        } else {
            Admission::Normal {
                threshold: queue.threshold,
            }
        }
    }

    /// The distinct thresholds below 1 of normal queues, ascending: the only admissions whose
    /// view of a worker differs from its plain free resources.
    pub(crate) fn limiting_thresholds(&self) -> Vec<f64> {
        let mut thresholds: Vec<f64> = self
            .by_name
            .values()
            .filter(|q| !q.prior && q.threshold < 1.0)
            .map(|q| q.threshold)
            .collect();
        thresholds.sort_by(f64::total_cmp);
        thresholds.dedup();
        thresholds
    }
}

/// How far siblings' capacities may stray from summing to 1 (decimal fractions such as 0.1
/// do not add up exactly in binary).
const SUM_TOLERANCE: f64 = 1e-9;

/// Checks the names of queues a person wrote: paths of non-empty segments below the
/// implicit root, every parent listed, `default` a leaf, and no parent with a setting that
/// belongs to leaves (`prior`, `threshold`, access lists: only a leaf's work is checked
/// against them). Replicas read older configurations without it.
///
/// # Errors
///
/// The first offending field, as `queues[i].field`.
pub fn check_paths(queues: &[QueueSpec]) -> Result<(), InputError> {
    let refuse = |field: String, message: String| Err(InputError { field, message });
    let listed: BTreeSet<&str> = queues.iter().map(|q| q.name.0.as_str()).collect();
    for (i, queue) in queues.iter().enumerate() {
        let name = queue.name.0.as_str();
        if name.split('.').any(str::is_empty) {
            return refuse(
                format!("queues[{i}].name"),
                format!(
                    "`{name}` is not a queue path: segments separated by `.` must not be empty"
                ),
            );
        }
        if name == "root" || name.starts_with("root.") {
            return refuse(
                format!("queues[{i}].name"),
                "`root` is the implicit top of the tree: name queues by their path below it"
                    .to_owned(),
            );
        }
        if let Some(up) = parent(name) {
            if up == crate::ids::DEFAULT_QUEUE {
                return refuse(
                    format!("queues[{i}].name"),
                    format!("`{name}`: `default` takes work and cannot have children"),
                );
            }
            if !listed.contains(up) {
                return refuse(
                    format!("queues[{i}].name"),
                    format!("parent queue `{up}` of `{name}` is not listed"),
                );
            }
        }
        if !listed.iter().any(|&q| parent(q) == Some(name)) {
            continue;
        }
        let leaf_settings = [
            ("prior", queue.prior),
            ("threshold", queue.threshold < 1.0),
            ("submit", queue.submit.is_some()),
            ("administer", !queue.administer.is_empty()),
            ("max_per_user", queue.max_per_user.is_some()),
            ("driver_share", queue.driver_share.is_some()),
            ("gang_timeout_s", queue.gang_timeout_s.is_some()),
            ("gang_style", queue.gang_style.is_some()),
        ];
        if let Some((setting, _)) = leaf_settings.iter().find(|(_, set)| *set) {
            return refuse(
                format!("queues[{i}].{setting}"),
                format!("`{name}` is a parent queue: `{setting}` belongs to its leaves"),
            );
        }
    }
    Ok(())
}

/// Checks the capacities of `queues` (each queue's own settings checked already): either no
/// queue has one or every one does, in [0, 1] and no larger than its `max_capacity`, with
/// the children of each parent summing to 1.
///
/// # Errors
///
/// The first offending field, as `queues[i].capacity`, or `queues` for a parent's children.
pub(crate) fn check_capacities(queues: &[QueueConfig]) -> Result<(), InputError> {
    let refuse = |field: String, message: String| Err(InputError { field, message });
    let Some(first) = queues.iter().position(|q| q.capacity.is_some()) else {
        return Ok(());
    };
    for (i, queue) in queues.iter().enumerate() {
        let Some(capacity) = queue.capacity else {
            return refuse(
                format!("queues[{i}].capacity"),
                format!(
                    "missing: `{}` has a capacity, so every queue needs one",
                    queues[first].name
                ),
            );
        };
        if !(capacity.is_finite() && (0.0..=1.0).contains(&capacity)) {
            return refuse(
                format!("queues[{i}].capacity"),
                format!("must be in [0, 1], got {capacity}"),
            );
        }
        if capacity > queue.max_capacity {
            return refuse(
                format!("queues[{i}].capacity"),
                format!("{capacity} exceeds its max_capacity {}", queue.max_capacity),
            );
        }
    }
    let tree = Queues::new(queues);
    for (up, children) in &tree.children {
        let sum: f64 = children
            .iter()
            .map(|q| tree.get(q).capacity.unwrap_or(0.0))
            .sum();
        if (sum - 1.0).abs() > SUM_TOLERANCE {
            let whose = up.as_ref().map_or("the top-level queues".to_owned(), |q| {
                format!("the children of `{q}`")
            });
            let each: Vec<String> = children
                .iter()
                .map(|q| format!("{q} {}", tree.get(q).capacity.unwrap_or(0.0)))
                .collect();
            return refuse(
                "queues".to_owned(),
                format!(
                    "the capacities of {whose} sum to {}, not 1: {}",
                    // Rounded, so that 0.6 + 0.3 reads 0.9.
                    (sum * 1e9).round() / 1e9,
                    each.join(", ")
                ),
            );
        }
    }
    Ok(())
}

/// One queue of a tree as status pages and metrics show it.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueView {
    /// The queue.
    pub name: QueueName,
    /// How many parents it has: 0 for a top-level queue.
    pub depth: usize,
    /// Whether it takes work (has no children).
    pub leaf: bool,
    /// The fraction of the ALIVE cores guaranteed to it, when the queues have capacities.
    pub guaranteed_share: Option<f64>,
    /// The fraction of the ALIVE cores its work may hold (all of them for a prior leaf).
    pub max_share: f64,
    /// Cores held below it (by itself, for a leaf), of what the caller counted for each
    /// leaf.
    pub cores_used: u64,
    /// Memory held below it, in MB, likewise.
    pub memory_used_mb: u64,
}

/// The listed queues of a valid configuration, in their order, each with its place in the
/// tree and what is held below it, given the `(cores, memory_mb)` each leaf's executors
/// hold.
pub fn views(
    configs: &[QueueConfig],
    used_by_leaf: &BTreeMap<QueueName, (u64, u64)>,
) -> Vec<QueueView> {
    let queues = Queues::new(configs);
    let cores = queues.sum_below(used_by_leaf.iter().map(|(leaf, &(cores, _))| (leaf, cores)));
    let memory = queues.sum_below(
        used_by_leaf
            .iter()
            .map(|(leaf, &(_, memory))| (leaf, memory)),
    );
    configs
        .iter()
        .map(|q| {
            let cores_used = cores.get(&q.name).copied().unwrap_or(0);
            let memory_used_mb = memory.get(&q.name).copied().unwrap_or(0);
            QueueView {
                name: q.name.clone(),
                depth: queues.path(&q.name).len() - 1,
                leaf: !queues.is_parent(&q.name),
                guaranteed_share: queues
                    .guaranteed()
                    .then(|| queues.share(&q.name, Bound::Guaranteed)),
                // Prior work may use the whole cluster.
                max_share: if q.prior {
                    1.0
                } else {
                    queues.share(&q.name, Bound::Max)
                },
                cores_used,
                memory_used_mb,
            }
        })
        .collect()
}

/// Items of prior queues first, then the rest, each group in its original order.
pub(crate) fn prior_first<'a, T>(
    items: &'a [T],
    queues: &Queues,
    queue_of: impl Fn(&T) -> &QueueName,
) -> Vec<&'a T> {
    let (mut prior, normal): (Vec<&T>, Vec<&T>) = items
        .iter()
        .partition(|item| queues.get(queue_of(item)).prior);
    prior.extend(normal);
    prior
}
