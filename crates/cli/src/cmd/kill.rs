//! `muster kill`: ends an application or a driver.

use clap::Args;
use muster_proto::v1::KillRequest;

use super::{MastersArg, runtime};
use crate::error::CliError;
use muster_proto::masters::request_id;

/// `muster kill`.
#[derive(Args)]
pub struct KillArgs {
    #[command(flatten)]
    masters: MastersArg,
    /// An application or driver id.
    id: String,
}

/// Kills it, and says so.
///
/// # Errors
///
/// No such active application or driver, or no master answered.
pub fn run(args: KillArgs) -> Result<String, CliError> {
    let masters = args.masters.parse()?;
    let request = KillRequest {
        request_id: request_id(),
        id: args.id,
    };
    runtime()?.block_on(masters.call(async |mut c| c.kill(request.clone()).await))?;
    Ok(format!("{} killed", request.id))
}
