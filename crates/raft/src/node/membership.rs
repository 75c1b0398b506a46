//! The group's membership: bootstrapping it, adding learners and voters (a master that reads
//! an older log format than the one in force is refused), and removing members, one change
//! at a time.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use muster_state::ClusterState;
use muster_state::version::LogFormat;
use openraft::ChangeMembers;
use openraft::error::{InitializeError, RaftError};

use crate::builds::reads;
use crate::types::{Node, NodeId};

use super::{NodeError, RaftNode, WriteError, not_leader};

/// How long a master that joins may take to say which build it runs.
const JOIN_CALL: Duration = Duration::from_secs(2);

impl RaftNode {
    /// Makes `members` (ids and addresses) the first voters of a new group. Does nothing when
    /// this replica already belongs to a group, so it is safe on every start.
    ///
    /// # Errors
    ///
    /// Raft refused for another reason (for instance this replica is not among `members`).
    pub async fn bootstrap(&self, members: &BTreeMap<NodeId, String>) -> Result<(), NodeError> {
        if self
            .raft
            .is_initialized()
            .await
            .map_err(|e| NodeError::Raft(e.into()))?
        {
            return Ok(());
        }
        let nodes: BTreeMap<NodeId, Node> = members
            .iter()
            .map(|(&id, addr)| (id, Node::new(addr.clone())))
            .collect();
        match self.raft.initialize(nodes).await {
            Ok(()) | Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
            Err(e) => Err(NodeError::Raft(e.into())),
        }
    }

    /// Adds replica `id` at `addr` as a learner and waits until it has caught up.
    ///
    /// # Errors
    ///
    /// This replica does not lead, or Raft is unavailable.
    pub async fn add_learner(&self, id: NodeId, addr: &str) -> Result<(), WriteError> {
        let _one_change = self.changes.lock().await;
        // Every raise committed so far applied: none is under way while this change is.
        let effective = self.read(ClusterState::log_format).await?;
        if effective > LogFormat::FIRST {
            self.refuse_older(id, addr, effective).await?;
        }
        self.raft
            .add_learner(id, Node::new(addr.to_owned()), true)
            .await
            .map(|_| ())
            .map_err(not_leader)
    }

    /// Refuses master `id` at `addr` unless its build reads the cluster's `effective` log
    /// format.
    pub(super) async fn refuse_older(
        &self,
        id: NodeId,
        addr: &str,
        effective: LogFormat,
    ) -> Result<(), WriteError> {
        let joining = self
            .network
            .build(id, addr, JOIN_CALL)
            .await
            .map_err(|e| WriteError::Unavailable(format!("master {id} at {addr}: {e}")))?;
        if reads(&joining) < effective {
            return Err(WriteError::TooNew(format!(
                "master {id} runs release {}, which cannot read this cluster's {effective}: run \
                 {} on it",
                joining.version,
                effective.readers()
            )));
        }
        Ok(())
    }

    /// Makes `voters` the voting members (each must be a member or learner already); removed
    /// voters leave the group.
    ///
    /// # Errors
    ///
    /// This replica does not lead, a change is already in progress, or Raft is unavailable.
    pub async fn change_membership(&self, voters: BTreeSet<NodeId>) -> Result<(), WriteError> {
        let _one_change = self.changes.lock().await;
        self.raft
            .change_membership(ChangeMembers::ReplaceAllVoters(voters), false)
            .await
            .map(|_| ())
            .map_err(not_leader)
    }

    /// Makes `id`, a learner already, a voter, leaving the other voters as they are.
    ///
    /// # Errors
    ///
    /// This replica does not lead, a change is already in progress, or Raft is unavailable.
    pub async fn add_voter(&self, id: NodeId) -> Result<(), WriteError> {
        let _one_change = self.changes.lock().await;
        self.raft
            .change_membership(ChangeMembers::AddVoterIds([id].into()), false)
            .await
            .map(|_| ())
            .map_err(not_leader)
    }

    /// Takes member `id` (a voter or a learner) out of the group, leaving the others as they
    /// are: it no longer votes nor is replicated to.
    ///
    /// # Errors
    ///
    /// This replica does not lead, a change is already in progress, or Raft is unavailable.
    pub async fn remove_member(&self, id: NodeId) -> Result<(), WriteError> {
        let _one_change = self.changes.lock().await;
        let votes = self
            .raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .any(|v| v == id);
        let change = if votes {
            ChangeMembers::RemoveVoters([id].into())
        } else {
            ChangeMembers::RemoveNodes([id].into())
        };
        self.raft
            .change_membership(change, false)
            .await
            .map(|_| ())
            .map_err(not_leader)
    }
}
