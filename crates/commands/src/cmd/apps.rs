//! `muster apps`: the applications table, and `muster apps priority ID N` (an application's
//! priority in its queue, as YARN's `-updatePriority`).

use clap::{Args, Subcommand};
use muster_proto::masters::request_id;
use muster_proto::v1::SetPriorityRequest;

use super::status::{self, ReadArgs};
use super::{MastersArg, runtime};
use crate::error::CliError;
use crate::render;

/// `muster apps`.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct AppsArgs {
    #[command(subcommand)]
    action: Option<AppsAction>,
    #[command(flatten)]
    read: ReadArgs,
}

#[derive(Subcommand)]
enum AppsAction {
    /// Set an application's priority in its queue: higher is served first (its owner or the
    /// queue's administrators; capped at the queue's max_priority).
    Priority {
        #[command(flatten)]
        masters: MastersArg,
        /// The application's id.
        id: String,
        /// Its new priority (0 is the default).
        #[arg(allow_negative_numbers = true)]
        priority: i32,
    },
}

/// Shows the applications, or sets one's priority and says what it is now.
///
/// # Errors
///
/// No such active application, a caller who may not steer it, a cluster not at log format
/// 4 yet, or no master answered.
pub fn run(args: AppsArgs) -> Result<String, CliError> {
    let Some(AppsAction::Priority {
        masters,
        id,
        priority,
    }) = args.action
    else {
        return status::part(args.read, "apps", render::apps);
    };
    let masters = masters.parse()?;
    let request = SetPriorityRequest {
        request_id: request_id(),
        app_id: id,
        priority,
    };
    let reply =
        runtime()?.block_on(masters.call(async |mut c| c.set_priority(request.clone()).await))?;
    let capped = if reply.priority < priority {
        " (its queue's max_priority)"
    } else {
        ""
    };
    Ok(format!(
        "{}: priority {}{capped}",
        request.app_id, reply.priority
    ))
}
