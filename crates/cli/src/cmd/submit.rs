//! `muster submit`: a driver in cluster deploy mode; prints its id.

use clap::Args;
use muster_core::resources::Resources;
use muster_proto::v1::SubmitDriverRequest;

use super::{MastersArg, WorkArgs, program, runtime};
use crate::client::request_id;
use crate::error::CliError;

/// `muster submit`.
#[derive(Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    masters: MastersArg,
    #[command(flatten)]
    work: WorkArgs,
    /// Cores for the driver.
    #[arg(long, default_value_t = 1)]
    cores: u32,
    /// Memory for the driver, in MB.
    #[arg(long, default_value_t = 1024)]
    memory: u64,
    /// Restart the driver when it fails, and relaunch it elsewhere when its worker is lost.
    #[arg(long)]
    supervise: bool,
    /// The program and its arguments, after `--`.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// Submits the driver and returns its id.
///
/// # Errors
///
/// The masters refused it, or none answered.
pub fn run(args: SubmitArgs) -> Result<String, CliError> {
    let masters = args.masters.parse()?;
    let (program, program_args) = program(&args.command)?;
    let request = SubmitDriverRequest {
        request_id: request_id(),
        name: args.work.name,
        queue: args.work.queue,
        resources: Some((&Resources::new(args.cores, args.memory)).into()),
        command: program.clone(),
        args: program_args.to_vec(),
        env: Default::default(),
        supervise: args.supervise,
    };
    let reply =
        runtime()?.block_on(masters.call(async |mut c| c.submit_driver(request.clone()).await))?;
    Ok(reply.driver_id)
}
