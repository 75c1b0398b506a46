//! Disaster recovery: a new cluster takes the state a snapshot of another one saved
//! (`muster snapshot save`), as one command in its log, so every replica applies the same.

use muster_core::ids::Timestamp;
use serde::{Deserialize, Serialize};

use super::Apply;
use crate::ClusterState;
use crate::response::{ApplyError, Response};

/// Replace the (new, empty) state with the one `snapshot` holds.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restore {
    /// The snapshot's bytes, as `ClusterState::encode_snapshot` wrote them.
    pub snapshot: Vec<u8>,
}

impl std::fmt::Debug for Restore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Restore({} bytes)", self.snapshot.len())
    }
}

impl Apply for Restore {
    /// Only a cluster that has run nothing yet (no application or driver was ever submitted)
    /// is restored; what it has (workers that registered, queues) and the rest of the state
    /// become the snapshot's, and its settings stay its own.
    fn apply(&self, state: &mut ClusterState, _at: Timestamp) -> Result<Response, ApplyError> {
        let fresh = state.next_app_number == 0
            && state.next_driver_number == 0
            && state.apps.is_empty()
            && state.drivers.is_empty()
            && state.completed_apps.is_empty()
            && state.completed_drivers.is_empty();
        if !fresh {
            return Err(ApplyError::Conflict(
                "this cluster already holds work: a snapshot restores only into a new cluster"
                    .to_owned(),
            ));
        }
        let mut restored =
            ClusterState::decode_snapshot(&self.snapshot).map_err(|e| ApplyError::Invalid {
                field: "snapshot".to_owned(),
                message: e.to_string(),
            })?;
        restored.config = state.config.clone();
        // A log format in force stays, whatever the snapshot was taken at.
        restored.raised_format = restored.raised_format.max(state.raised_format);
        *state = restored;
        Ok(Response::default())
    }
}
