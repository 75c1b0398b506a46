//! Which build each member runs, as the leader learns it, and the raise of the cluster's log
//! format once every member reads a newer one (see `muster_state::version`).
//!
//! While this replica leads, it asks every member for its build ([`Network::build`]) every
//! [`BUILD_POLL`]. A member of release 0.1.0 has no such call and counts as that release; a
//! member that does not answer counts as unknown, and nothing is raised while one is unknown.
//! Once every member reads a newer format than the cluster's, the leader writes a
//! `RaiseLogFormat` entry, unless it holds the format (`hold_log_format`, for a soak while
//! the previous release may still be put back): then only when asked
//! ([`Versions::raise_now`]). Before any later entry of a newer format is written, the node's
//! write path checks it against the effective format and refuses it with a line that names
//! the members holding it back.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use muster_core::ids::Term;
use muster_proto::v1::BuildInfo;
use muster_state::version::{LogFormat, RaiseLogFormat, format_to_raise_to};
use muster_state::{Command, Op};
use openraft::{RaftMetrics, ServerState};

use crate::WriteError;
use crate::network::Network;
use crate::state_machine::SharedState;
use crate::types::{Applied, Node, NodeId, Raft};

/// How often a leader asks its members for their builds.
pub const BUILD_POLL: Duration = Duration::from_secs(2);

/// How long a member may take to say its build.
const BUILD_CALL: Duration = Duration::from_secs(1);

/// Each member's build, as this replica last learned it while leading.
pub(crate) type Builds = Arc<Mutex<BTreeMap<NodeId, BuildInfo>>>;

/// What a master of release 0.1.0 runs: it has no call to say so.
pub fn first_release() -> BuildInfo {
    BuildInfo {
        version: "0.1.0".to_owned(),
        commit: String::new(),
        log_format: LogFormat::FIRST.0,
    }
}

/// The newest log format `build` reads.
pub fn reads(build: &BuildInfo) -> LogFormat {
    LogFormat(build.log_format.max(LogFormat::FIRST.0))
}

/// Why `needs` may not be written yet: the `members` whose builds do not read it.
pub(crate) fn held_back(
    needs: LogFormat,
    effective: LogFormat,
    members: &[(NodeId, String)],
    builds: &BTreeMap<NodeId, BuildInfo>,
) -> String {
    let runs = members.iter().map(|(id, _)| {
        let build = builds
            .get(id)
            .map(|build| (build.version.as_str(), reads(build)));
        (*id, build)
    });
    muster_state::version::held_back(needs, effective, runs)
}

/// The members of the group and their addresses, as `metrics` has them.
pub(crate) fn members(metrics: &RaftMetrics<NodeId, Node>) -> Vec<(NodeId, String)> {
    metrics
        .membership_config
        .membership()
        .nodes()
        .map(|(&id, node)| (id, node.addr.clone()))
        .collect()
}

/// What learning the members' builds and raising the cluster's log format work with.
#[derive(Clone)]
pub(crate) struct Versions {
    pub(crate) raft: Raft,
    pub(crate) network: Network,
    /// The build this replica runs.
    pub(crate) own: BuildInfo,
    /// Each member's build, as this replica last learned it while leading.
    pub(crate) builds: Builds,
    pub(crate) state: SharedState,
}

/// What a poll of the members' builds learned while this replica led in `term`.
struct Poll {
    term: u64,
    /// The members asked, with their addresses.
    asked: Vec<(NodeId, String)>,
    /// The builds of those that answered.
    learned: BTreeMap<NodeId, BuildInfo>,
}

impl Poll {
    /// Asks every member for its build, this replica answering with its own; remembers
    /// what it learned.
    async fn ask(metrics: &RaftMetrics<NodeId, Node>, versions: &Versions) -> Self {
        let (me, term, asked) = (metrics.id, metrics.current_term, members(metrics));
        let mut learned = BTreeMap::new();
        for (id, addr) in &asked {
            let build = if *id == me {
                Some(versions.own.clone())
            } else {
                versions.network.build(*id, addr, BUILD_CALL).await.ok()
            };
            if let Some(build) = build {
                learned.insert(*id, build);
            }
        }
        versions
            .builds
            .lock()
            .expect("builds lock")
            .clone_from(&learned);
        Self {
            term,
            asked,
            learned,
        }
    }

    /// The format the cluster may be raised to from `effective`: the oldest every member
    /// reads, if newer and every member answered.
    fn raise_to(&self, effective: LogFormat) -> Option<LogFormat> {
        let formats = self
            .asked
            .iter()
            .map(|(id, _)| self.learned.get(id).map(reads));
        format_to_raise_to(effective, formats)
    }

    /// Whether `raft` still leads the term and the members that were asked: only then may
    /// the raise be written, so that no member joins between the poll and the raise's
    /// commit without its build being asked first.
    fn still_current(&self, raft: &Raft) -> bool {
        let metrics = raft.metrics();
        let m = metrics.borrow();
        m.state == ServerState::Leader && m.current_term == self.term && members(&m) == self.asked
    }

    /// Writes the raise to `to` by `raise`, in the poll's term: a deposed leader's raise
    /// that reaches the log later is refused. Waits at most a poll for it to apply.
    async fn raise<R>(&self, to: LogFormat, raise: impl Fn(Command) -> R) -> Result<(), WriteError>
    where
        R: Future<Output = Result<Applied, WriteError>>,
    {
        let raised = raise(Command {
            at: crate::now(),
            request_id: None,
            term: Some(Term(self.term)),
            op: Op::RaiseLogFormat(RaiseLogFormat { to }),
        });
        match tokio::time::timeout(BUILD_POLL, raised).await {
            Ok(applied) => applied.map(|_| ()),
            Err(_) => Err(WriteError::Unavailable(
                "the raise was not committed within two seconds".into(),
            )),
        }
    }
}

/// Learns the members' builds while this replica leads, and raises the cluster's log format
/// when they all read a newer one, by `raise` (a write that skips the format check, whose
/// result it waits for), unless `hold` keeps it where it is until [`raise_now`] is asked.
///
/// The raise is decided under `changes`, the lock membership changes hold.
pub(crate) async fn learn<R>(
    versions: Versions,
    changes: Arc<tokio::sync::Mutex<()>>,
    hold: bool,
    raise: impl Fn(Command) -> R,
) where
    R: Future<Output = Result<Applied, WriteError>>,
{
    let mut metrics = versions.raft.metrics();
    // The format this leader said it holds the cluster below, said once.
    let mut held_below = None;
    loop {
        if metrics.borrow().state != ServerState::Leader {
            versions.builds.lock().expect("builds lock").clear();
            held_below = None;
            if metrics
                .wait_for(|m| m.state == ServerState::Leader)
                .await
                .is_err()
            {
                return;
            }
        }
        let now = metrics.borrow().clone();
        let poll = Poll::ask(&now, &versions).await;
        let effective = versions.state.read().expect("state lock").log_format();
        match poll.raise_to(effective) {
            Some(to) if hold && held_below != Some(to) => {
                tracing::info!(
                    at = %effective, every_master_reads = %to,
                    "the cluster's log format is held (hold_log_format): \
                     `muster members raise-log-format` raises it"
                );
                held_below = Some(to);
            }
            Some(_) if hold => {}
            Some(to) => {
                let _one_change = changes.lock().await;
                if poll.still_current(&versions.raft) {
                    tracing::info!(from = %effective, %to, "every master reads a newer log format: raising the cluster's");
                    let _ = poll.raise(to, &raise).await;
                }
            }
            None => {}
        }
        tokio::time::sleep(BUILD_POLL).await;
    }
}

impl Versions {
    /// Raises the cluster's log format now, hold or not, to the oldest every member reads,
    /// by `raise`; the caller holds the lock membership changes take. The format it was
    /// raised from and to, or why there is nothing to raise.
    ///
    /// # Errors
    ///
    /// [`WriteError::NotLeader`] when this replica does not lead, or the raise's write
    /// failed.
    pub(crate) async fn raise_now<R>(
        &self,
        raise: impl Fn(Command) -> R,
    ) -> Result<Result<(LogFormat, LogFormat), String>, WriteError>
    where
        R: Future<Output = Result<Applied, WriteError>>,
    {
        let metrics = self.raft.metrics().borrow().clone();
        if metrics.state != ServerState::Leader {
            let leader = metrics.current_leader.and_then(|id| {
                let node = metrics.membership_config.membership().get_node(&id)?;
                Some((id, node.addr.clone()))
            });
            return Err(WriteError::NotLeader(leader));
        }
        let poll = Poll::ask(&metrics, self).await;
        let effective = self.state.read().expect("state lock").log_format();
        let Some(to) = poll.raise_to(effective) else {
            // This build reads a newer one: some member does not, or did not say.
            return Ok(Err(if reads(&self.own) > effective {
                held_back(
                    LogFormat(effective.0 + 1),
                    effective,
                    &poll.asked,
                    &poll.learned,
                )
            } else {
                format!("the cluster is at {effective} already, the newest this build writes")
            }));
        };
        if !poll.still_current(&self.raft) {
            return Err(WriteError::Unavailable(
                "the lead or the members changed while their builds were asked".into(),
            ));
        }
        tracing::info!(from = %effective, %to, "raising the cluster's log format, as asked");
        poll.raise(to, raise).await?;
        Ok(Ok((effective, to)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(version: &str, format: u32) -> BuildInfo {
        BuildInfo {
            version: version.to_owned(),
            commit: String::new(),
            log_format: format,
        }
    }

    #[test]
    fn a_refusal_names_the_masters_that_hold_the_format_back() {
        let builds = BTreeMap::from([(1, build("0.2.0", 2)), (3, first_release())]);
        let members = [1, 2, 3].map(|id| (id, format!("m{id}:7077")));
        let line = held_back(LogFormat(2), LogFormat(1), &members, &builds);
        assert_eq!(
            line,
            "needs every master at release 0.2.0 or newer (log format 2 (release 0.2.0); the \
             cluster is at log format 1 (release 0.1.0)): master 2 has not said which build it \
             runs, master 3 runs 0.1.0"
        );
    }

    #[test]
    fn a_build_that_leaves_its_format_out_reads_the_first() {
        assert_eq!(reads(&build("0.1.0", 0)), LogFormat::FIRST);
        assert_eq!(reads(&build("0.2.0", 2)), LogFormat(2));
    }
}
