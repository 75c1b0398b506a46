//! Queue lookup for a pass: which queues are prior, and how a request of a queue is admitted
//! on workers that run prior work (the threshold rule of the YARN high-priority scheduler,
//! whose `LeafQueue.isPrior` and `psthreshold` it follows).

use std::collections::BTreeMap;

use crate::ids::QueueName;
use crate::model::QueueConfig;

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

/// The queues of a snapshot, `default` included even when not listed.
pub(crate) struct Queues {
    by_name: BTreeMap<QueueName, QueueConfig>,
}

impl Queues {
    pub(crate) fn new(configs: &[QueueConfig]) -> Self {
        let mut by_name: BTreeMap<_, _> = configs
            .iter()
            .map(|q| (q.name.clone(), q.clone()))
            .collect();
        by_name
            .entry(QueueName::default())
            .or_insert_with(|| QueueConfig::named(crate::ids::DEFAULT_QUEUE));
        Self { by_name }
    }

    /// The queue's settings. Validation guarantees every named queue exists.
    pub(crate) fn get(&self, name: &QueueName) -> &QueueConfig {
        &self.by_name[name]
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
