//! Queue configuration changes.

use muster_core::model::{QueueConfig, validate_queues};
use serde::{Deserialize, Serialize};

use super::Apply;
use crate::ClusterState;
use crate::response::{ApplyError, Response};
use muster_core::ids::Timestamp;

/// Replaces the queue configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SetQueues {
    /// The new queues; `default` exists even when not listed.
    pub queues: Vec<QueueConfig>,
}

impl Apply for SetQueues {
    /// Refused when malformed, or when it drops a queue that active apps or drivers use.
    fn apply(&self, state: &mut ClusterState, _at: Timestamp) -> Result<Response, ApplyError> {
        validate_queues(&self.queues)?;
        let kept = |name: &muster_core::ids::QueueName| {
            name.0 == muster_core::ids::DEFAULT_QUEUE || self.queues.iter().any(|q| &q.name == name)
        };
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
        state.queues = self.queues.clone();
        Ok(Response::default())
    }
}
