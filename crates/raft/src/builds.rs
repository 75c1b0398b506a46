//! Which build each member runs, as the leader learns it, and the raise of the cluster's log
//! format once every member reads a newer one (see `muster_state::version`).
//!
//! While this replica leads, it asks every member for its build ([`Network::build`]) every
//! [`BUILD_POLL`]. A member of release 0.1.0 has no such call and counts as that release; a
//! member that does not answer counts as unknown, and nothing is raised while one is unknown.
//! Once every member reads a newer format than the cluster's, the leader writes a
//! `RaiseLogFormat` entry. Before any later entry of a newer format is written, the node's
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

/// Learns the members' builds while this replica leads, and raises the cluster's log format
/// when they all read a newer one, by `raise` (a write that skips the format check, whose
/// result it waits for).
///
/// The raise is decided under `changes`, the lock membership changes hold, and only if the
/// members are still those that were asked, so that no member joins between the poll and
/// the raise's commit without its build being asked first. It carries the leader's term: a
/// deposed leader's raise that reaches the log later is refused.
pub(crate) async fn learn<R>(
    raft: Raft,
    network: Network,
    own: BuildInfo,
    builds: Builds,
    state: SharedState,
    changes: Arc<tokio::sync::Mutex<()>>,
    raise: impl Fn(Command) -> R,
) where
    R: Future<Output = Result<Applied, WriteError>>,
{
    let mut metrics = raft.metrics();
    loop {
        if metrics.borrow().state != ServerState::Leader {
            builds.lock().expect("builds lock").clear();
            if metrics
                .wait_for(|m| m.state == ServerState::Leader)
                .await
                .is_err()
            {
                return;
            }
        }
        let (me, term, asked) = {
            let m = metrics.borrow();
            (m.id, m.current_term, members(&m))
        };
        let mut learned = BTreeMap::new();
        for (id, addr) in &asked {
            let build = if *id == me {
                Some(own.clone())
            } else {
                network.build(*id, addr, BUILD_CALL).await.ok()
            };
            if let Some(build) = build {
                learned.insert(*id, build);
            }
        }
        let formats: Vec<Option<LogFormat>> = asked
            .iter()
            .map(|(id, _)| learned.get(id).map(reads))
            .collect();
        *builds.lock().expect("builds lock") = learned;
        let effective = state.read().expect("state lock").log_format();
        if let Some(to) = format_to_raise_to(effective, formats) {
            let _one_change = changes.lock().await;
            let unchanged = {
                let m = metrics.borrow();
                m.state == ServerState::Leader && m.current_term == term && members(&m) == asked
            };
            if unchanged {
                tracing::info!(from = %effective, %to, "every master reads a newer log format: raising the cluster's");
                let raised = raise(Command {
                    at: crate::now(),
                    request_id: None,
                    term: Some(Term(term)),
                    op: Op::RaiseLogFormat(RaiseLogFormat { to }),
                });
                let _ = tokio::time::timeout(BUILD_POLL, raised).await;
            }
        }
        tokio::time::sleep(BUILD_POLL).await;
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
