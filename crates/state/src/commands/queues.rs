//! Queue configuration changes.

use std::collections::BTreeSet;

use muster_core::access::{QueueAccess, QueueSpec};
use muster_core::ids::{DEFAULT_QUEUE, QueueName, Timestamp};
use muster_core::model::{QueueConfig, validate_queues};
use serde::{Deserialize, Serialize};

use super::Apply;
use crate::ClusterState;
use crate::response::{ApplyError, Response};

/// The op that sets `queues`: [`SetQueues`] when none has access lists, which replicas of
/// builds before them read too, else [`ReplaceQueues`].
pub fn set_queues_op(queues: Vec<QueueSpec>) -> super::Op {
    let (configs, access): (Vec<QueueConfig>, Vec<QueueAccess>) =
        queues.iter().map(QueueSpec::split).unzip();
    if access.iter().all(|a| *a == QueueAccess::default()) {
        super::Op::SetQueues(SetQueues { queues: configs })
    } else {
        super::Op::ReplaceQueues(ReplaceQueues { queues })
    }
}

/// Replaces the queue configuration and the queues' access lists.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplaceQueues {
    /// The new queues; `default` exists even when not listed.
    pub queues: Vec<QueueSpec>,
}

impl Apply for ReplaceQueues {
    /// Refused when malformed, when an access list names an unknown user, or when it drops
    /// a queue that active apps or drivers use.
    fn apply(&self, state: &mut ClusterState, _at: Timestamp) -> Result<Response, ApplyError> {
        let (configs, access): (Vec<QueueConfig>, Vec<QueueAccess>) =
            self.queues.iter().map(QueueSpec::split).unzip();
        validate_queues(&configs)?;
        let users: BTreeSet<&str> = state.users.keys().map(String::as_str).collect();
        for (i, access) in access.iter().enumerate() {
            access.validate(&format!("queues[{i}]"), &users)?;
        }
        let kept =
            |name: &QueueName| name.0 == DEFAULT_QUEUE || configs.iter().any(|q| &q.name == name);
        let in_use = state
            .apps
            .values()
            .map(|a| &a.desc.queue)
            .chain(state.drivers.values().map(|d| &d.desc.queue))
            .find(|queue| !kept(queue));
        if let Some(queue) = in_use {
            return Err(ApplyError::Conflict(format!(
                "queue `{queue}` still has active applications or drivers"
            )));
        }
        state.access = configs
            .iter()
            .zip(access)
            .filter(|(_, access)| *access != QueueAccess::default())
            .map(|(config, access)| (config.name.clone(), access))
            .collect();
        state.queues = configs;
        Ok(Response::default())
    }
}

/// Replaces the queue configuration with queues of the default access: the form builds
/// before access lists write and read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SetQueues {
    /// The new queues; `default` exists even when not listed.
    pub queues: Vec<QueueConfig>,
}

impl Apply for SetQueues {
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        let queues = self
            .queues
            .iter()
            .map(|config| QueueSpec::from((config.clone(), QueueAccess::default())))
            .collect();
        ReplaceQueues { queues }.apply(state, at)
    }
}
