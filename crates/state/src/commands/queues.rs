//! Queue configuration changes, and the shape in which the log and snapshots keep queues.
//!
//! Five ops set the queues, each the form of the builds that introduced it, so that every
//! entry already in a log still reads and applies as it did: [`SetQueues`] (settings only),
//! [`ReplaceQueues`] (with access lists), [`ConfigureQueues`] (with capacities, and queue
//! names checked as paths of a tree) and, from log format 4, [`ConfigureQueuesWithAdmission`]
//! (with each queue's admission settings: its driver share and gangs) and
//! [`ConfigureQueuesWithOrdering`] (with each leaf's ordering). [`set_queues_op`] writes the
//! oldest that says what is asked, which replicas of older builds then also apply; a tree
//! without capacities is checked as one where it is written (the master's API and its queue
//! files).

use std::collections::{BTreeMap, BTreeSet};

use muster_core::access::{QueueAccess, QueueSpec};
use muster_core::ids::{QueueName, SmolStr, Timestamp};
use muster_core::model::{
    GangStyle, NotALeaf, OrderingPolicy, QueueConfig, takes_work, validate_queues,
};
use muster_core::queues::check_paths;
use serde::{Deserialize, Serialize};

use super::Apply;
use crate::ClusterState;
use crate::response::{ApplyError, Response};

/// A queue's settings as the log and snapshots keep them: a [`QueueConfig`] without its
/// capacity, which is kept apart (the state's `capacities`) so that data written before
/// capacities existed still reads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueSettings {
    /// See [`QueueConfig::name`].
    pub name: QueueName,
    /// See [`QueueConfig::prior`].
    pub prior: bool,
    /// See [`QueueConfig::threshold`].
    pub threshold: f64,
    /// See [`QueueConfig::max_capacity`].
    pub max_capacity: f64,
}

impl QueueSettings {
    /// The queue's configuration, with its capacity, admission settings and ordering from
    /// those kept apart.
    pub fn config(
        &self,
        capacities: &BTreeMap<QueueName, f64>,
        admission: &BTreeMap<QueueName, QueueAdmission>,
        orderings: &BTreeMap<QueueName, QueueOrdering>,
    ) -> QueueConfig {
        let ordering = orderings.get(&self.name).cloned().unwrap_or_default();
        QueueConfig {
            name: self.name.clone(),
            prior: self.prior,
            threshold: self.threshold,
            max_capacity: self.max_capacity,
            capacity: capacities.get(&self.name).copied(),
            driver_share: admission.get(&self.name).and_then(|a| a.driver_share),
            gang_timeout_s: admission.get(&self.name).and_then(|a| a.gang_timeout_s),
            gang_style: admission.get(&self.name).and_then(|a| a.gang_style),
            ordering: ordering.ordering,
            user_weights: ordering.user_weights,
            max_priority: ordering.max_priority,
            user_limit: ordering.user_limit,
        }
    }
}

/// How a queue admits work, where it sets anything: kept apart from its other settings (the
/// state's `admission`), as capacities are, from log format 4.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueAdmission {
    /// See [`QueueConfig::driver_share`].
    pub driver_share: Option<f64>,
    /// See [`QueueConfig::gang_timeout_s`].
    pub gang_timeout_s: Option<u64>,
    /// See [`QueueConfig::gang_style`].
    pub gang_style: Option<GangStyle>,
}

impl QueueAdmission {
    fn of(spec: &QueueSpec) -> Self {
        Self {
            driver_share: spec.driver_share,
            gang_timeout_s: spec.gang_timeout_s,
            gang_style: spec.gang_style,
        }
    }
}

/// How a leaf orders its applications, where it sets anything: kept apart from its other
/// settings (the state's `orderings`), from log format 4.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueOrdering {
    /// See [`QueueConfig::ordering`].
    pub ordering: OrderingPolicy,
    /// See [`QueueConfig::user_weights`].
    pub user_weights: BTreeMap<SmolStr, f64>,
    /// See [`QueueConfig::max_priority`].
    pub max_priority: Option<i32>,
    /// See [`QueueConfig::user_limit`].
    pub user_limit: Option<f64>,
}

impl QueueOrdering {
    fn of(spec: &QueueSpec) -> Self {
        Self {
            ordering: spec.ordering,
            user_weights: spec.user_weights.clone(),
            max_priority: spec.max_priority,
            user_limit: spec.user_limit,
        }
    }
}

impl From<&QueueSpec> for QueueSettings {
    fn from(spec: &QueueSpec) -> Self {
        Self {
            name: spec.name.clone(),
            prior: spec.prior,
            threshold: spec.threshold,
            max_capacity: spec.max_capacity,
        }
    }
}

/// The op that sets `queues`: the oldest form that holds them (see the module doc).
pub fn set_queues_op(queues: Vec<QueueSpec>) -> super::Op {
    let capacities: BTreeMap<QueueName, f64> = queues
        .iter()
        .filter_map(|q| Some((q.name.clone(), q.capacity?)))
        .collect();
    let admission: BTreeMap<QueueName, QueueAdmission> = queues
        .iter()
        .map(|q| (q.name.clone(), QueueAdmission::of(q)))
        .filter(|(_, admission)| *admission != QueueAdmission::default())
        .collect();
    let orderings: BTreeMap<QueueName, QueueOrdering> = queues
        .iter()
        .map(|q| (q.name.clone(), QueueOrdering::of(q)))
        .filter(|(_, ordering)| *ordering != QueueOrdering::default())
        .collect();
    let queues: Vec<(QueueSettings, QueueAccess)> = queues
        .iter()
        .map(|spec| (QueueSettings::from(spec), spec.split().1))
        .collect();
    if !orderings.is_empty() {
        super::Op::ConfigureQueuesWithOrdering(ConfigureQueuesWithOrdering {
            queues,
            capacities,
            admission,
            orderings,
        })
    } else if !admission.is_empty() {
        super::Op::ConfigureQueuesWithAdmission(ConfigureQueuesWithAdmission {
            queues,
            capacities,
            admission,
        })
    } else if !capacities.is_empty() {
        super::Op::ConfigureQueues(ConfigureQueues { queues, capacities })
    } else if queues.iter().all(|(_, a)| *a == QueueAccess::default()) {
        super::Op::SetQueues(SetQueues {
            queues: queues.into_iter().map(|(settings, _)| settings).collect(),
        })
    } else {
        super::Op::ReplaceQueues(ReplaceQueues { queues })
    }
}

/// Replaces the queue configuration: settings, access lists and capacities, validated as a
/// whole.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfigureQueues {
    /// The new queues, each with its access lists; `default` exists even when not listed.
    pub queues: Vec<(QueueSettings, QueueAccess)>,
    /// The capacity of each queue, when they have them: all or none.
    pub capacities: BTreeMap<QueueName, f64>,
}

impl Apply for ConfigureQueues {
    /// Applied as [`ConfigureQueuesWithOrdering`] with no queue's admission or ordering set.
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        ConfigureQueuesWithOrdering::plain(self.queues.clone(), self.capacities.clone())
            .apply(state, at)
    }
}

/// Replaces the queue configuration: settings, access lists, capacities and admission
/// settings, validated as a whole (from log format 4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfigureQueuesWithAdmission {
    /// The new queues, each with its access lists; `default` exists even when not listed.
    pub queues: Vec<(QueueSettings, QueueAccess)>,
    /// The capacity of each queue, when they have them: all or none.
    pub capacities: BTreeMap<QueueName, f64>,
    /// The admission settings of the queues that set any.
    pub admission: BTreeMap<QueueName, QueueAdmission>,
}

impl Apply for ConfigureQueuesWithAdmission {
    /// Applied as [`ConfigureQueuesWithOrdering`] with no queue's ordering set.
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        ConfigureQueuesWithOrdering {
            queues: self.queues.clone(),
            capacities: self.capacities.clone(),
            admission: self.admission.clone(),
            orderings: BTreeMap::new(),
        }
        .apply(state, at)
    }
}

/// Replaces the queue configuration: settings, access lists, capacities, admission settings
/// and orderings, validated as a whole (from log format 4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfigureQueuesWithOrdering {
    /// The new queues, each with its access lists; `default` exists even when not listed.
    pub queues: Vec<(QueueSettings, QueueAccess)>,
    /// The capacity of each queue, when they have them: all or none.
    pub capacities: BTreeMap<QueueName, f64>,
    /// The admission settings of the queues that set any.
    pub admission: BTreeMap<QueueName, QueueAdmission>,
    /// The orderings of the queues that set one other than `fifo`, user weights, a maximum
    /// priority or a user limit.
    pub orderings: BTreeMap<QueueName, QueueOrdering>,
}

impl Apply for ConfigureQueuesWithOrdering {
    /// Refused when malformed (a tree whose capacities do not sum, a parent that is not
    /// listed, ...), when an access list names an unknown user, or when a queue that active
    /// apps or drivers use would be dropped or become a parent.
    fn apply(&self, state: &mut ClusterState, _at: Timestamp) -> Result<Response, ApplyError> {
        let configs = self.configs()?;
        validate_queues(&configs)?;
        let specs: Vec<QueueSpec> = configs
            .iter()
            .zip(&self.queues)
            .map(|(config, (_, access))| QueueSpec::from((config.clone(), access.clone())))
            .collect();
        check_paths(&specs)?;
        for queue in active_queues(state) {
            if let Err(NotALeaf::Parent { .. }) = takes_work(&configs, queue) {
                return Err(ApplyError::Conflict(format!(
                    "queue `{queue}` has active applications or drivers, so it cannot \
                     become a parent queue"
                )));
            }
        }
        replace(state, self)
    }
}

impl ConfigureQueuesWithOrdering {
    /// The configuration of the ops of earlier formats: no queue's admission or ordering
    /// set.
    fn plain(
        queues: Vec<(QueueSettings, QueueAccess)>,
        capacities: BTreeMap<QueueName, f64>,
    ) -> Self {
        Self {
            queues,
            capacities,
            admission: BTreeMap::new(),
            orderings: BTreeMap::new(),
        }
    }

    /// The queues' configurations, capacities, admission settings and orderings included.
    fn configs(&self) -> Result<Vec<QueueConfig>, ApplyError> {
        let listed = |name: &&QueueName| self.queues.iter().any(|(q, _)| &q.name == *name);
        let unknown = [
            ("capacities", self.capacities.keys().find(|q| !listed(q))),
            ("admission", self.admission.keys().find(|q| !listed(q))),
            ("orderings", self.orderings.keys().find(|q| !listed(q))),
        ];
        if let Some((field, Some(name))) = unknown.into_iter().find(|(_, name)| name.is_some()) {
            return Err(ApplyError::Invalid {
                field: field.to_owned(),
                message: format!("unknown queue `{name}`"),
            });
        }
        Ok(self
            .queues
            .iter()
            .map(|(q, _)| q.config(&self.capacities, &self.admission, &self.orderings))
            .collect())
    }
}

/// The queues active apps and drivers are in.
fn active_queues(state: &ClusterState) -> impl Iterator<Item = &QueueName> {
    state
        .apps
        .values()
        .map(|a| &a.desc.queue)
        .chain(state.drivers.values().map(|d| &d.desc.queue))
}

/// Replaces the queues, their access lists, capacities, admission settings and orderings, as
/// every queue op does after its own checks. Refused when a setting is malformed, an access
/// list names an unknown user, or a queue that active apps or drivers use would be dropped.
fn replace(
    state: &mut ClusterState,
    configure: &ConfigureQueuesWithOrdering,
) -> Result<Response, ApplyError> {
    let configs = configure.configs()?;
    validate_queues(&configs)?;
    let users: BTreeSet<&str> = state.users.keys().map(String::as_str).collect();
    for (i, (_, access)) in configure.queues.iter().enumerate() {
        access.validate(&format!("queues[{i}]"), &users)?;
    }
    if let Some(queue) = active_queues(state)
        .find(|&queue| matches!(takes_work(&configs, queue), Err(NotALeaf::Unknown(_))))
    {
        return Err(ApplyError::Conflict(format!(
            "queue `{queue}` still has active applications or drivers"
        )));
    }
    state.access = configure
        .queues
        .iter()
        .filter(|(_, access)| *access != QueueAccess::default())
        .map(|(q, access)| (q.name.clone(), access.clone()))
        .collect();
    state.queues = configure.queues.iter().map(|(q, _)| q.clone()).collect();
    state.capacities = configure.capacities.clone();
    state.admission = configure.admission.clone();
    state.orderings = configure.orderings.clone();
    // The apps' priorities as the new maxima cap them.
    state.derive_pass_views();
    Ok(Response::default())
}

/// Replaces the queue configuration and the queues' access lists, without capacities: the
/// form builds before capacities write and read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplaceQueues {
    /// The new queues, each with its access lists; `default` exists even when not listed.
    pub queues: Vec<(QueueSettings, QueueAccess)>,
}

impl Apply for ReplaceQueues {
    fn apply(&self, state: &mut ClusterState, _at: Timestamp) -> Result<Response, ApplyError> {
        let configure = ConfigureQueuesWithOrdering::plain(self.queues.clone(), BTreeMap::new());
        replace(state, &configure)
    }
}

/// Replaces the queue configuration with queues of the default access: the form builds
/// before access lists write and read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SetQueues {
    /// The new queues; `default` exists even when not listed.
    pub queues: Vec<QueueSettings>,
}

impl Apply for SetQueues {
    fn apply(&self, state: &mut ClusterState, _at: Timestamp) -> Result<Response, ApplyError> {
        let queues = self
            .queues
            .iter()
            .map(|q| (q.clone(), QueueAccess::default()))
            .collect();
        let configure = ConfigureQueuesWithOrdering::plain(queues, BTreeMap::new());
        replace(state, &configure)
    }
}
