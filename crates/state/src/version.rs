//! Log formats: which ops and snapshot fields the allocation log may hold, so that a cluster
//! can run two releases side by side while it is upgraded one master at a time.
//!
//! Every [`Op`] has the format that introduced it ([`Op::introduced_in`]), and so has every
//! snapshot field after the first release's. A build reads every format up to
//! [`LogFormat::NEWEST`]. The cluster's effective format ([`ClusterState::log_format`]) lives
//! in the log: it starts at [`LogFormat::FIRST`] and is raised by a [`RaiseLogFormat`] entry,
//! which the leader writes only once every member reads the newer format
//! ([`format_to_raise_to`]); it is never lowered. Until then the leader writes no op of a
//! newer format (the older equivalent, or a refusal that names the master holding it back),
//! and snapshots keep the oldest encoding that holds the state, so that a master put back on
//! the previous release reads everything the others wrote. A replica that meets an entry or a
//! raise beyond what it reads stops rather than guess.
//!
//! This is how etcd's cluster version and Nomad's `ServersMeetMinimumVersion` gate new Raft
//! message types, and how CockroachDB's version gates finalize an upgrade.

use std::fmt;

use muster_core::ids::Timestamp;
use serde::{Deserialize, Serialize};

use crate::ClusterState;
use crate::commands::{Apply, Op};
use crate::response::{ApplyError, Response};

/// A version of what the log may hold. Each release that adds an op or a snapshot field
/// raises it by one; a release that adds neither keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LogFormat(pub u32);

impl LogFormat {
    /// Release 0.1.0's log: every op up to counted plan grants.
    pub const FIRST: Self = Self(1);
    /// Release 0.2.0's log: the effective format itself ([`RaiseLogFormat`]).
    pub const RAISABLE: Self = Self(2);
    /// Release 0.3.0's log: an application's own requests (its executor limit, releases,
    /// finishing) made as its named user's, so that a revoked credential stops them
    /// ([`Op::By`] holding one); the custom resources of a process the masters stop kept
    /// its until its worker reports its end (snapshot format 9); and applications' resource
    /// profiles ([`Op::SetProfileLimit`], [`Op::ApplyPlanWithProfiles`], snapshot format 11).
    pub const THIRD: Self = Self(3);
    /// Release 0.4.0's log: each queue's admission settings, its driver share
    /// ([`Op::ConfigureQueuesWithAdmission`]), applications' and drivers' gangs
    /// ([`Op::SubmitGang`], [`Op::SubmitGangDriver`], [`Op::EndGangWait`]), and room kept
    /// beside a cluster-mode driver for its application's first executor until the
    /// application registers ([`Op::SubmitDriverApp`]), room kept for resource profiles
    /// ([`Op::PreemptForProfiles`]), each leaf's ordering ([`Op::ConfigureQueuesWithOrdering`])
    /// applications' priorities ([`Op::SetAppPriority`], [`Op::SubmitWithSettings`]) and
    /// preemption inside queues ([`Op::PreemptWithinQueue`]); snapshot formats 12 to 14.
    pub const FOURTH: Self = Self(4);
    /// The newest format this build reads and, once the cluster is raised to it, writes.
    pub const NEWEST: Self = Self::FOURTH;

    /// The release that introduced this format, if this build knows it.
    pub fn release(self) -> Option<&'static str> {
        match self.0 {
            1 => Some("0.1.0"),
            2 => Some("0.2.0"),
            3 => Some("0.3.0"),
            4 => Some("0.4.0"),
            _ => None,
        }
    }

    /// Which builds read this format, for a line that says what to run: `release 0.2.0 or
    /// newer`.
    pub fn readers(self) -> String {
        match self.release() {
            Some(release) => format!("release {release} or newer"),
            None => format!(
                "a release newer than {}",
                LogFormat::NEWEST
                    .release()
                    .expect("this build knows its own release")
            ),
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.release() {
            Some(release) => write!(f, "log format {} (release {release})", self.0),
            None => write!(f, "log format {}", self.0),
        }
    }
}

impl Op {
    /// The log format a replica needs to read this op: the one that introduced it, or what it
    /// carries if newer. A batch, or a named user's request, is as new as the newest op it
    /// holds, and a named user's application request is of the format that made those
    /// theirs; a raise needs the format it raises to (a replica that cannot read that must
    /// not take it), and a restore the format of the snapshot it carries.
    pub fn introduced_in(&self) -> LogFormat {
        match self {
            Op::RaiseLogFormat(raise) => raise.to.max(LogFormat::RAISABLE),
            Op::Batch(commands) => commands
                .iter()
                .map(|command| command.op.introduced_in())
                .max()
                .unwrap_or(LogFormat::FIRST),
            Op::By(by) if by.op.is_app_request() => LogFormat::THIRD,
            Op::By(by) => by.op.introduced_in(),
            Op::Restore(restore) => crate::snapshot::log_format_of(&restore.snapshot),
            Op::SetProfileLimit(_) | Op::ApplyPlanWithProfiles(_) => LogFormat::THIRD,
            Op::ConfigureQueuesWithAdmission(_)
            | Op::SubmitGang(_)
            | Op::SubmitGangDriver(_)
            | Op::EndGangWait(_)
            | Op::SubmitDriverApp(_)
            | Op::PreemptForProfiles(_)
            | Op::ConfigureQueuesWithOrdering(_)
            | Op::SetAppPriority(_)
            | Op::SubmitWithSettings(_)
            | Op::PreemptWithinQueue(_) => LogFormat::FOURTH,
            Op::RegisterWorker(_)
            | Op::WorkerLost(_)
            | Op::DecommissionWorker(_)
            | Op::SubmitApp(_)
            | Op::SubmitDriver(_)
            | Op::KillApp(_)
            | Op::KillDriver(_)
            | Op::SetExecutorLimit(_)
            | Op::KillExecutors(_)
            | Op::ApplyPlanPerExecutor(_)
            | Op::ExecutorStateChanged(_)
            | Op::DriverStateChanged(_)
            | Op::AppFinished(_)
            | Op::SetQueues(_)
            | Op::Preempt(_)
            | Op::GrantReservations(_)
            | Op::DrainWorker(_)
            | Op::AddUser(_)
            | Op::RevokeUser(_)
            | Op::ReplaceQueues(_)
            | Op::ConfigureQueues(_)
            | Op::PreemptForGuarantees(_)
            | Op::RegisterWorkerWithAddresses(_)
            | Op::ApplyPlan(_) => LogFormat::FIRST,
        }
    }
}

/// Why `needs` may not be written yet, given each member's id and the build it runs (its
/// release and the newest format it reads; `None` for one that has not said): the members
/// whose builds do not read it, in a line for the person who asked.
pub fn held_back<'b>(
    needs: LogFormat,
    effective: LogFormat,
    members: impl IntoIterator<Item = (u64, Option<(&'b str, LogFormat)>)>,
) -> String {
    let behind: Vec<String> = members
        .into_iter()
        .filter_map(|(id, build)| match build {
            Some((_, reads)) if reads >= needs => None,
            Some((version, _)) => Some(format!("master {id} runs {version}")),
            None => Some(format!("master {id} has not said which build it runs")),
        })
        .collect();
    let why = if behind.is_empty() {
        "the cluster's log format has not been raised yet: try again in a few seconds".to_owned()
    } else {
        behind.join(", ")
    };
    format!(
        "needs every master at {} ({needs}; the cluster is at {effective}): {why}",
        needs.readers()
    )
}

/// The format the cluster can be raised to, if any: the oldest format its members read, when
/// that is newer than `effective`. `members` holds what each member reads, `None` for a member
/// whose build is not known yet (unreachable): nothing is raised until every member is known.
pub fn format_to_raise_to(
    effective: LogFormat,
    members: impl IntoIterator<Item = Option<LogFormat>>,
) -> Option<LogFormat> {
    let oldest = members
        .into_iter()
        .try_fold(LogFormat::NEWEST, |oldest, member| {
            Some(oldest.min(member?))
        })?;
    (oldest > effective).then_some(oldest)
}

/// Raise the cluster's effective log format: from this entry on, the log may hold the ops
/// and snapshot fields of `to`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaiseLogFormat {
    /// The new effective format.
    pub to: LogFormat,
}

impl Apply for RaiseLogFormat {
    /// Refuses to lower the format or keep it: a format once in force stays.
    fn apply(&self, state: &mut ClusterState, _at: Timestamp) -> Result<Response, ApplyError> {
        let effective = state.log_format();
        if self.to <= effective {
            return Err(ApplyError::Conflict(format!(
                "the cluster is at {effective} already: a log format is never lowered"
            )));
        }
        state.raised_format = Some(self.to);
        Ok(Response::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F1: Option<LogFormat> = Some(LogFormat::FIRST);
    const F2: Option<LogFormat> = Some(LogFormat::RAISABLE);

    #[test]
    fn raised_once_every_member_reads_the_newer_format() {
        let first = LogFormat::FIRST;
        assert_eq!(format_to_raise_to(first, [F2, F2, F2]), F2);
        assert_eq!(format_to_raise_to(first, [F2, F1, F2]), None, "one old");
        assert_eq!(
            format_to_raise_to(first, [F2, None, F2]),
            None,
            "one unknown"
        );
        assert_eq!(format_to_raise_to(LogFormat::RAISABLE, [F2, F2]), None);
    }

    #[test]
    fn never_past_what_this_build_reads() {
        let later = Some(LogFormat(LogFormat::NEWEST.0 + 1));
        assert_eq!(
            format_to_raise_to(LogFormat::FIRST, [later, later]),
            Some(LogFormat::NEWEST)
        );
    }

    #[test]
    fn what_an_op_carries_can_make_it_newer() {
        let raise = |to| Op::RaiseLogFormat(RaiseLogFormat { to });
        assert_eq!(
            raise(LogFormat::RAISABLE).introduced_in(),
            LogFormat::RAISABLE
        );
        assert_eq!(raise(LogFormat(9)).introduced_in(), LogFormat(9));
        let by = Op::By(crate::commands::By {
            user: "alice".into(),
            generation: 1,
            op: Box::new(raise(LogFormat::RAISABLE)),
        });
        assert_eq!(by.introduced_in(), LogFormat::RAISABLE);
        let restore = |format| {
            Op::Restore(crate::commands::Restore {
                snapshot: vec![format, 0],
            })
        };
        assert_eq!(restore(7).introduced_in(), LogFormat::FIRST);
        assert_eq!(restore(8).introduced_in(), LogFormat::RAISABLE);
    }

    #[test]
    fn a_batch_is_as_new_as_its_newest_op() {
        let command = |op| crate::Command {
            at: Timestamp(0),
            request_id: None,
            term: None,
            op,
        };
        let raise = Op::RaiseLogFormat(RaiseLogFormat {
            to: LogFormat::RAISABLE,
        });
        let old = Op::KillDriver(crate::commands::KillDriver {
            id: muster_core::ids::DriverId::from("driver-1"),
        });
        assert_eq!(old.introduced_in(), LogFormat::FIRST);
        let batch = Op::Batch(vec![command(old.clone()), command(raise)]);
        assert_eq!(batch.introduced_in(), LogFormat::RAISABLE);
        assert_eq!(
            Op::Batch(vec![command(old)]).introduced_in(),
            LogFormat::FIRST
        );
    }
}
