//! Handing the lead to a chosen replica (see the module doc of `node`): the target nearly
//! caught up, writes held, the target fully caught up, the followers' leases run out, and the
//! target asked to campaign at once; heartbeats resume however it ends.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use openraft::{RaftMetrics, ServerState};

use crate::network::TimeoutNow;
use crate::types::{Node, NodeId};

use super::{IN_FLIGHT, RaftNode, WriteError};

/// How long each step of a transfer may take: the target nearly catching up, the writes
/// under way finishing, the target catching up, and the target taking over. With the lease
/// wait, a transfer ends within the 3 s a follower gives a call it forwards.
const HANDOVER_STEP: Duration = Duration::from_millis(500);

/// How many entries the target may lag before writes are held.
const NEARLY: u64 = 2;

/// How long past the followers' leases a transfer asks its target to campaign.
const LEASE_MARGIN: Duration = Duration::from_millis(50);

/// How long the target may take to answer that it campaigns.
const CAMPAIGN_CALL: Duration = Duration::from_millis(150);

/// A transfer under way on the leader: reads are refused until it ends, and heartbeats
/// resume when it does, however it ends.
struct Handover<'n> {
    node: &'n RaftNode,
}

impl<'n> Handover<'n> {
    fn start(node: &'n RaftNode) -> Self {
        node.transferring.store(true, Ordering::SeqCst);
        Self { node }
    }
}

impl Drop for Handover<'_> {
    fn drop(&mut self) {
        self.node.raft.runtime_config().heartbeat(true);
        // Heard at once: a handover that failed must renew the followers' leases before
        // their election timeouts run out.
        let raft = self.node.raft.clone();
        tokio::spawn(async move { raft.trigger().heartbeat().await });
        self.node.transferring.store(false, Ordering::SeqCst);
    }
}

impl RaftNode {
    /// Hands the lead to voter `target` (see the module doc); returns once `target` leads.
    /// Writes made meanwhile wait, then go to the new leader like any write during an
    /// election; reads are refused until it is over. Handing it to this replica does nothing.
    ///
    /// # Errors
    ///
    /// [`WriteError::NotLeader`] when this replica does not lead (or another replica took
    /// over instead), [`WriteError::Unavailable`] when `target` is not a voter, did not catch
    /// up or did not take over in time (the lead then stays or returns where it was).
    pub async fn transfer_leadership(&self, target: NodeId) -> Result<(), WriteError> {
        let _one_change = self.changes.lock().await;
        let Some((term, addr)) = self.handover_to(target)? else {
            return Ok(());
        };
        if self.silent_members().contains(&target) {
            return Err(WriteError::Unavailable(format!(
                "master {target} has not answered this leader for an election timeout: it is \
                 down or cut off, so the lead stays here"
            )));
        }
        // Most of the log reaches the target before writes are held, so that they are held
        // only for the last entries.
        let lag = |m: &RaftMetrics<NodeId, Node>| {
            let matched = m
                .replication
                .as_ref()
                .and_then(|r| r.get(&target).copied().flatten())
                .map_or(0, |log| log.index + 1);
            m.last_log_index
                .map_or(0, |last| last + 1)
                .saturating_sub(matched)
        };
        let mut metrics = self.raft.metrics();
        let _ = tokio::time::timeout(HANDOVER_STEP, metrics.wait_for(|m| lag(m) <= NEARLY)).await;
        let held = tokio::time::timeout(
            HANDOVER_STEP,
            Arc::clone(&self.in_flight)
                .acquire_many_owned(u32::try_from(IN_FLIGHT).expect("a small number")),
        );
        let Ok(Ok(_held)) = held.await else {
            return Err(WriteError::Unavailable(
                "the writes under way did not finish in time".into(),
            ));
        };
        // Still the leader of the same term and group, now that nothing is written.
        if self.handover_to(target)?.map(|(t, _)| t) != Some(term) {
            return Err(WriteError::NotLeader(
                self.leadership.borrow().leader.clone(),
            ));
        }
        let caught_up = metrics.wait_for(|m| lag(m) == 0);
        if !matches!(
            tokio::time::timeout(HANDOVER_STEP, caught_up).await,
            Ok(Ok(_))
        ) {
            return Err(WriteError::Unavailable(format!(
                "master {target} did not catch up with the log in time"
            )));
        }
        let _transfer = Handover::start(self);
        self.raft.runtime_config().heartbeat(false);
        // Every follower's lease on this leader must run out, or none votes for the target:
        // an election timeout after the last heartbeat, which may still be on its way.
        let quiet = Duration::from_millis(self.election_timeout_max_ms + self.heartbeat_ms);
        tokio::time::sleep(quiet + LEASE_MARGIN).await;
        if lag(&self.raft.metrics().borrow()) != 0 {
            return Err(WriteError::Unavailable(format!(
                "the log grew while the lead was moving to master {target}"
            )));
        }
        let asked = TimeoutNow {
            leader: self.id,
            term,
        };
        // Answered at once or not at all: past the followers' own election timeouts, one
        // of them would campaign, and any could win.
        let campaigns = self
            .network
            .timeout_now(target, &addr, &asked, CAMPAIGN_CALL);
        match campaigns.await {
            Ok(true) => {}
            Ok(false) => {
                return Err(WriteError::Unavailable(format!(
                    "master {target} did not campaign: it no longer follows this leader quietly"
                )));
            }
            Err(error) => {
                return Err(WriteError::Unavailable(format!("master {target}: {error}")));
            }
        }
        let mut leadership = self.leadership.clone();
        let settled = tokio::time::timeout(
            HANDOVER_STEP,
            leadership.wait_for(|l| l.term.0 > term && l.leader.is_some()),
        )
        .await
        .ok()
        .and_then(Result::ok)
        .map(|settled| settled.leader.clone());
        match settled {
            Some(Some((id, _))) if id == target => Ok(()),
            Some(leader) => Err(WriteError::NotLeader(leader)),
            None => Err(WriteError::Unavailable(format!(
                "master {target} did not take over in time"
            ))),
        }
    }

    /// The term and the target's address for a handover to `target`, or `None` when this
    /// replica is the target.
    ///
    /// # Errors
    ///
    /// This replica does not lead, `target` is not a voter, or the membership is changing.
    pub(super) fn handover_to(&self, target: NodeId) -> Result<Option<(u64, String)>, WriteError> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        if metrics.state != ServerState::Leader {
            return Err(WriteError::NotLeader(
                self.leadership.borrow().leader.clone(),
            ));
        }
        if target == self.id {
            return Ok(None);
        }
        let stored = &metrics.membership_config;
        let changing = stored.membership().get_joint_config().len() > 1
            || stored.log_id().map(|l| l.index) > metrics.last_applied.map(|l| l.index);
        if changing {
            return Err(WriteError::Unavailable(
                "the membership is changing: try again once it is done".into(),
            ));
        }
        let membership = stored.membership();
        let addr = membership
            .get_node(&target)
            .filter(|_| membership.voter_ids().any(|v| v == target))
            .map(|node| node.addr.clone())
            .ok_or_else(|| WriteError::Unavailable(format!("{target} is not a voter")))?;
        Ok(Some((metrics.current_term, addr)))
    }
}
