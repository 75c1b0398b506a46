//! `muster workers`: the workers table, and `muster workers drain ID` (Spark's decommission:
//! no new work, what runs finishes, then the worker leaves).

use clap::{Args, Subcommand};
use muster_proto::v1::DrainWorkerRequest;

use super::status::{self, ReadArgs};
use super::{MastersArg, runtime};
use crate::error::CliError;
use crate::render;
use muster_proto::masters::request_id;

/// `muster workers`.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct WorkersArgs {
    #[command(subcommand)]
    action: Option<WorkersAction>,
    #[command(flatten)]
    read: ReadArgs,
}

#[derive(Subcommand)]
enum WorkersAction {
    /// Drain a worker: it gets no new work, and once nothing runs on it it is
    /// DECOMMISSIONED.
    Drain {
        #[command(flatten)]
        masters: MastersArg,
        /// The worker's id.
        id: String,
        /// Kill what still runs after this many seconds (by default it may take as long as it
        /// takes).
        #[arg(long, value_name = "SECONDS")]
        kill_after: Option<f64>,
    },
}

/// Shows the workers, or drains one and says so.
///
/// # Errors
///
/// No such ALIVE worker, a bad `--kill-after`, or no master answered.
pub fn run(args: WorkersArgs) -> Result<String, CliError> {
    let Some(WorkersAction::Drain {
        masters,
        id,
        kill_after,
    }) = args.action
    else {
        return status::part(args.read, "workers", render::workers);
    };
    let kill_after_ms = match kill_after {
        Some(s) if !(s.is_finite() && s >= 0.0) => {
            return Err(CliError::BadInput(format!(
                "--kill-after: {s} is not a number of seconds"
            )));
        }
        Some(s) => Some((s * 1000.0).round() as u64),
        None => None,
    };
    let masters = masters.parse()?;
    let request = DrainWorkerRequest {
        request_id: request_id(),
        worker_id: id,
        kill_after_ms,
    };
    runtime()?.block_on(masters.call(async |mut c| c.drain_worker(request.clone()).await))?;
    let then = match kill_after {
        Some(s) => format!("; what still runs after {s} s is killed"),
        None => String::new(),
    };
    Ok(format!(
        "{} draining: no new work, DECOMMISSIONED once nothing runs on it{then}",
        request.worker_id
    ))
}
