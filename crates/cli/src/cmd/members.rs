//! `muster members`: the master replicas and their roles, `muster members add ID=ADDR` /
//! `remove ID` to change the group (one replica at a time), and `transfer-leader ID` to move
//! the lead (before maintenance on the leader's machine).

use clap::{Args, Subcommand};
use muster_proto::v1::change_members_request::Change;
use muster_proto::v1::{ChangeMembersRequest, Member};

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
