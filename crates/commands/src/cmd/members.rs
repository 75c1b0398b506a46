//! `muster members`: the master replicas and their roles, `muster members add ID=ADDR` /
//! `remove ID` to change the group (one replica at a time), `transfer-leader ID` to move
//! the lead (before maintenance on the leader's machine), and `caught-up ID` to wait until a
//! restarted replica has applied what the leader had (between two masters of an upgrade),
//! `raise-log-format` to end the soak the masters' `hold_log_format` keeps, and `check`, the
//! pre-flight before an upgrade.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use muster_leader::config::seconds;
use muster_master::web::view::{BuildView, StatusView};
use muster_proto::masters::Masters;
use muster_proto::v1::change_members_request::Change;
use muster_proto::v1::{ChangeMembersRequest, Member, RecoveryState, StatusRequest, WorkerState};
use muster_state::version::LogFormat;

use super::status::{self, ReadArgs};
use super::{MastersArg, runtime};
use crate::error::CliError;
use crate::render;

/// `muster members`.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct MembersArgs {
    #[command(subcommand)]
    action: Option<MembersAction>,
    #[command(flatten)]
    read: ReadArgs,
}

#[derive(Subcommand)]
enum MembersAction {
    /// Add a master replica, already started with `--peers` naming it: it catches up as a
    /// learner, then votes.
    Add {
        #[command(flatten)]
        masters: MastersArg,
        /// The new replica: `ID=HOST:PORT`.
        member: String,
    },
    /// Remove a replica from the group: a voter, or a learner an unfinished `add` left.
    Remove {
        #[command(flatten)]
        masters: MastersArg,
        /// Its id.
        id: u64,
    },
    /// Hand the lead to a voting replica: writes wait for about an election timeout while it
    /// moves, and nothing is lost.
    TransferLeader {
        #[command(flatten)]
        masters: MastersArg,
        /// Its id.
        id: u64,
    },
    /// Raise the cluster's log format now to the oldest every master reads, when the
    /// masters hold it (`hold_log_format`) for a soak after an upgrade: from then on the
    /// previous release can no longer be put back.
    RaiseLogFormat {
        #[command(flatten)]
        masters: MastersArg,
    },
    /// Check that the cluster is ready for an upgrade (or any maintenance): the leader
    /// ALIVE, every master answering and heard from; workers not ALIVE are noted. Prints
    /// one line per check; exit 4 when one fails.
    Check {
        #[command(flatten)]
        masters: MastersArg,
    },
    /// Wait until a replica has applied the log as far as the leader had when asked (a
    /// master restarted during an upgrade, before the next): `caught up: master 2 applied
    /// 1240 of 1240`.
    CaughtUp {
        #[command(flatten)]
        masters: MastersArg,
        /// Its id.
        id: u64,
        /// Give up after this many seconds (exit 4).
        #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
        within: f64,
    },
}

/// Shows the members, or changes them.
///
/// # Errors
///
/// A malformed member, an unknown one, or no master answered.
pub fn run(args: MembersArgs) -> Result<String, CliError> {
    let (masters, change) = match args.action {
        None => return status::part(args.read, "members", render::members),
        Some(MembersAction::Add { masters, member }) => {
            let (id, addr) = member
                .split_once('=')
                .and_then(|(id, addr)| Some((id.parse::<u64>().ok()?, addr)))
                .filter(|(id, addr)| *id > 0 && addr.contains(':'))
                .ok_or_else(|| {
                    CliError::BadInput(format!("`{member}` is not ID=HOST:PORT (ID at least 1)"))
                })?;
            let member = Member {
                id,
                addr: addr.to_owned(),
                ..Member::default()
            };
            (masters, Change::Add(member))
        }
        Some(MembersAction::Remove { masters, id }) => (masters, Change::Remove(id)),
        Some(MembersAction::TransferLeader { masters, id }) => {
            (masters, Change::TransferLeader(id))
        }
        Some(MembersAction::RaiseLogFormat { masters }) => (masters, Change::RaiseLogFormat(true)),
        Some(MembersAction::Check { masters }) => {
            return runtime()?.block_on(check(&masters.parse()?));
        }
        Some(MembersAction::CaughtUp {
            masters,
            id,
            within,
        }) => {
            let within = seconds("--within", within)?;
            return runtime()?.block_on(caught_up(&masters.parse()?, id, within));
        }
    };
    let masters = masters.parse()?;
    let request = ChangeMembersRequest {
        change: Some(change.clone()),
    };
    let reply =
        runtime()?.block_on(masters.call(async |mut c| c.change_members(request.clone()).await))?;
    Ok(match change {
        Change::Add(member) => format!("master {} at {} added: it votes", member.id, member.addr),
        Change::Remove(id) => format!("master {id} removed"),
        Change::TransferLeader(id) => format!("the lead was handed to master {id}"),
        Change::RaiseLogFormat(_) => format!(
            "the cluster's log format raised from {} to {}: masters of older releases can no \
             longer join",
            LogFormat(reply.log_format_from),
            LogFormat(reply.log_format_to)
        ),
    })
}

/// Waits until master `id` has applied the log up to the leader's applied index when asked,
/// for at most `within`, asking it every half second for its own copy's index.
///
/// # Errors
///
/// No leader answered, `id` is no member, or it did not catch up in time (unavailable).
async fn caught_up(masters: &Masters, id: u64, within: Duration) -> Result<String, CliError> {
    let leader = masters
        .call(async |mut c| c.status(StatusRequest::without_drivers()).await)
        .await?;
    let target = leader.applied_index;
    let addr = leader
        .members
        .iter()
        .find(|m| m.id == id)
        .map(|m| m.addr.clone())
        .ok_or_else(|| CliError::Refused(format!("master {id} is not a member")))?;
    let start = Instant::now();
    let mut applied = None;
    loop {
        if let Ok(index) = applied_by(masters, &addr).await {
            applied = Some(index);
        }
        if let Some(applied) = applied.filter(|&applied| applied >= target) {
            return Ok(format!(
                "caught up: master {id} applied {applied} of {target}"
            ));
        }
        if start.elapsed() >= within {
            let applied = applied.map_or("nothing it answered".to_owned(), |a| a.to_string());
            return Err(CliError::Unavailable(format!(
                "not caught up within {within:?}: master {id} at {addr} applied {applied} of \
                 {target}"
            )));
        }
        tokio::time::sleep(CAUGHT_UP_POLL).await;
    }
}

/// Asks the leader for the status and every member for its own, and judges them
/// ([`preflight`]).
///
/// # Errors
///
/// No leader answered, or a check failed (unavailable; every line is printed first).
async fn check(masters: &Masters) -> Result<String, CliError> {
    let leader = masters
        .call(async |mut c| c.status(StatusRequest::without_drivers()).await)
        .await?;
    let leader = StatusView::of(&leader);
    let mut answers = BTreeMap::new();
    for member in &leader.members {
        answers.insert(member.id, applied_by(masters, &member.addr).await);
    }
    let checks = preflight(&leader, &answers);
    let report = checks
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    let failed = checks
        .iter()
        .filter(|c| c.verdict == Verdict::Failed)
        .count();
    if failed > 0 {
        crate::output::line(report);
        return Err(CliError::Unavailable(format!(
            "not ready: {failed} check(s) failed"
        )));
    }
    Ok(format!("{report}\nready"))
}

/// What a pre-flight check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Passed,
    /// Worth knowing, but no reason to wait.
    Noted,
    Failed,
}

/// One line of a pre-flight check.
#[derive(Debug, PartialEq, Eq)]
struct Check {
    verdict: Verdict,
    what: String,
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let verdict = match self.verdict {
            Verdict::Passed => "ok",
            Verdict::Noted => "note",
            Verdict::Failed => "FAIL",
        };
        write!(f, "{verdict:<5} {}", self.what)
    }
}

/// Judges the cluster before maintenance from the leader's status and what each member
/// answered of its own (its applied index, or why it did not answer): the leader ALIVE,
/// every member answering and heard from by the leader. Workers that are not ALIVE are
/// noted, not failed: the log keeps a lost worker as DEAD for good, and its work moved.
fn preflight(leader: &StatusView, answers: &BTreeMap<u64, Result<u64, String>>) -> Vec<Check> {
    let check = |ok: bool, what: String| Check {
        verdict: if ok { Verdict::Passed } else { Verdict::Failed },
        what,
    };
    let note = |what: String| Check {
        verdict: Verdict::Noted,
        what,
    };
    let state = leader.recovery_state.name();
    let mut checks = vec![check(
        leader.recovery_state == RecoveryState::Alive,
        format!(
            "master {} leads in term {}, {state}",
            leader.leader, leader.term
        ),
    )];
    for member in &leader.members {
        let build = BuildView::line(member.build.as_ref());
        checks.push(match answers.get(&member.id) {
            Some(Ok(applied)) if !member.silent => check(
                true,
                format!(
                    "master {} at {} answers: {build}, applied {applied} of {}",
                    member.id, member.addr, leader.applied_index
                ),
            ),
            Some(Ok(_)) => check(
                false,
                format!(
                    "master {} at {} answers clients but the leader has not heard from it \
                     for an election timeout",
                    member.id, member.addr
                ),
            ),
            Some(Err(why)) => check(
                false,
                format!(
                    "master {} at {} does not answer: {why}",
                    member.id, member.addr
                ),
            ),
            None => check(false, format!("master {} was not asked", member.id)),
        });
    }
    let alive = leader
        .workers
        .iter()
        .filter(|w| w.state == WorkerState::Alive)
        .count();
    checks.push(check(
        true,
        format!("{alive} of {} workers ALIVE", leader.workers.len()),
    ));
    for worker in &leader.workers {
        if worker.state != WorkerState::Alive {
            checks.push(note(format!(
                "worker {} on {} is {}: its work moved; it registers again if it comes back",
                worker.id,
                worker.host,
                worker.state.name()
            )));
        } else if worker.draining {
            checks.push(note(format!(
                "worker {} on {} is draining",
                worker.id, worker.host
            )));
        }
    }
    let mut format = format!(
        "cluster log format {} (release {})",
        leader.log_format, leader.log_format_release
    );
    if let Some(held) = leader.held_log_format() {
        format = format!("{format}, {held}");
    }
    checks.push(note(format));
    checks
}

/// The index of the last log entry the master at `addr` applied, as it answers for its own
/// copy, or why it did not answer within [`LOCAL_ANSWER`] (a frozen master takes
/// connections and never answers).
async fn applied_by(masters: &Masters, addr: &str) -> Result<u64, String> {
    let local = StatusRequest {
        local: true,
        ..StatusRequest::without_drivers()
    };
    let asked = async {
        let mut client = masters.connect(addr).await?;
        Ok::<_, tonic::Status>(client.status(local).await?.into_inner().applied_index)
    };
    match tokio::time::timeout(LOCAL_ANSWER, asked).await {
        Ok(answer) => answer.map_err(|status| status.message().to_owned()),
        Err(_) => Err(format!("no answer within {LOCAL_ANSWER:?}")),
    }
}

/// How long one master may take to say what it applied.
const LOCAL_ANSWER: Duration = Duration::from_secs(3);

/// How often `caught-up` asks the replica.
const CAUGHT_UP_POLL: Duration = Duration::from_millis(500);

#[cfg(test)]
mod tests {
    use muster_proto::v1::{BuildInfo, MemberRole, StatusReply, WorkerStatus};

    use super::*;

    fn member(id: u64, silent: bool) -> Member {
        Member {
            id,
            addr: format!("m{id}:7077"),
            role: MemberRole::Follower.into(),
            silent,
            build: Some(BuildInfo {
                version: "0.4.0".to_owned(),
                commit: String::new(),
                log_format: 4,
            }),
        }
    }

    fn worker(id: &str, state: WorkerState) -> WorkerStatus {
        WorkerStatus {
            id: id.to_owned(),
            host: "h".to_owned(),
            state: state.into(),
            ..WorkerStatus::default()
        }
    }

    fn verdicts(checks: &[Check]) -> Vec<(Verdict, &str)> {
        checks
            .iter()
            .map(|c| (c.verdict, c.what.as_str()))
            .collect()
    }

    #[test]
    fn a_healthy_cluster_passes_and_a_dead_worker_is_only_noted() {
        let status = StatusView::of(&StatusReply {
            leader: 1,
            term: 3,
            applied_index: 90,
            log_format: 4,
            recovery_state: RecoveryState::Alive.into(),
            members: vec![member(1, false), member(2, false)],
            workers: vec![
                worker("w1", WorkerState::Alive),
                worker("w2", WorkerState::Dead),
            ],
            ..StatusReply::default()
        });
        let answers = BTreeMap::from([(1, Ok(90)), (2, Ok(88))]);
        let checks = preflight(&status, &answers);
        assert_eq!(
            verdicts(&checks),
            [
                (Verdict::Passed, "master 1 leads in term 3, ALIVE"),
                (
                    Verdict::Passed,
                    "master 1 at m1:7077 answers: 0.4.0, applied 90 of 90"
                ),
                (
                    Verdict::Passed,
                    "master 2 at m2:7077 answers: 0.4.0, applied 88 of 90"
                ),
                (Verdict::Passed, "1 of 2 workers ALIVE"),
                (
                    Verdict::Noted,
                    "worker w2 on h is DEAD: its work moved; it registers again if it comes back"
                ),
                (Verdict::Noted, "cluster log format 4 (release 0.4.0)"),
            ]
        );
    }

    #[test]
    fn a_recovering_leader_a_silent_member_and_one_that_does_not_answer_fail() {
        let status = StatusView::of(&StatusReply {
            leader: 1,
            term: 3,
            log_format: 3,
            recovery_state: RecoveryState::Recovering.into(),
            members: vec![member(1, false), member(2, true), member(3, false)],
            ..StatusReply::default()
        });
        let answers = BTreeMap::from([
            (1, Ok(5)),
            (2, Ok(5)),
            (3, Err("connection refused".to_owned())),
        ]);
        let failed: Vec<String> = preflight(&status, &answers)
            .into_iter()
            .filter(|c| c.verdict == Verdict::Failed)
            .map(|c| c.what)
            .collect();
        assert_eq!(
            failed,
            [
                "master 1 leads in term 3, RECOVERING",
                "master 2 at m2:7077 answers clients but the leader has not heard from it for \
                 an election timeout",
                "master 3 at m3:7077 does not answer: connection refused",
            ]
        );
    }
}
