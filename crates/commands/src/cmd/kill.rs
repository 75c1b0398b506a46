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
    /// Application or driver ids.
    #[arg(required = true, value_name = "ID")]
    ids: Vec<String>,
}

/// Kills each in turn, and says so; one that cannot be killed does not stop the others.
///
/// # Errors
///
/// One of them is no active application or driver, or no master answered: the error says
/// which were killed and why the others were not, with the first failure's exit code (a
/// single id: its error as it is).
pub fn run(args: KillArgs) -> Result<String, CliError> {
    let masters = args.masters.parse()?;
    let runtime = runtime()?;
    let mut killed = Vec::new();
    let mut failed: Vec<(String, CliError)> = Vec::new();
    for id in args.ids {
        let request = KillRequest {
            request_id: request_id(),
            id,
        };
        match runtime.block_on(masters.call(async |mut c| c.kill(request.clone()).await)) {
            Ok(_) => killed.push(format!("{} killed", request.id)),
            Err(status) => failed.push((request.id, status.into())),
        }
    }
    match (killed.len(), failed.len()) {
        (_, 0) => return Ok(killed.join("\n")),
        (0, 1) => return Err(failed.remove(0).1),
        _ => {}
    }
    let reasons: Vec<String> = failed
        .iter()
        .map(|(id, error)| format!("{id} not killed: {error}"))
        .collect();
    let message = killed
        .into_iter()
        .chain(reasons)
        .collect::<Vec<_>>()
        .join("\n");
    Err(failed[0].1.with_message(message))
}
