//! `muster members`: the master replicas and their roles, `muster members add ID=ADDR` /
//! `remove ID` to change the group (one replica at a time), `transfer-leader ID` to move
//! the lead (before maintenance on the leader's machine), and `caught-up ID` to wait until a
//! restarted replica has applied what the leader had (between two masters of an upgrade).

use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use muster_master::config::seconds;
use muster_proto::masters::Masters;
use muster_proto::v1::change_members_request::Change;
use muster_proto::v1::{ChangeMembersRequest, Member, StatusRequest};

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
    let done = match &change {
        Change::Add(member) => format!("master {} at {} added: it votes", member.id, member.addr),
        Change::Remove(id) => format!("master {id} removed"),
        Change::TransferLeader(id) => format!("the lead was handed to master {id}"),
    };
    let request = ChangeMembersRequest {
        change: Some(change),
    };
    runtime()?.block_on(masters.call(async |mut c| c.change_members(request.clone()).await))?;
    Ok(done)
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
    let local = StatusRequest {
        local: true,
        ..StatusRequest::without_drivers()
    };
    let start = Instant::now();
    let mut applied = None;
    loop {
        if let Ok(mut client) = masters.connect(&addr).await
            && let Ok(status) = client.status(local.clone()).await
        {
            applied = Some(status.into_inner().applied_index);
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

/// How often `caught-up` asks the replica.
const CAUGHT_UP_POLL: Duration = Duration::from_millis(500);
