//! `muster queues`: shows the queues, or replaces them with a queue file's.

use std::path::PathBuf;

use clap::Args;
use muster_master::config::read_queues;
use muster_proto::v1::{Queue, SetQueuesRequest};

use super::{MastersArg, runtime, status};
use crate::error::CliError;
use crate::render;
use muster_proto::masters::request_id;

/// `muster queues`.
#[derive(Args)]
pub struct QueuesArgs {
    #[command(flatten)]
    masters: MastersArg,
    /// Replace the queues with those in this JSON file: `[{"name": "prod", "prior": true}, ...]`;
    /// a tree names children by path (`team.etl`) and may give each queue a `capacity`, and
    /// each leaf a `driver_share`, `gang_timeout_s`, `gang_style` (`soft` or `hard`),
    /// `ordering` (`fifo`, `fair` or `drf`) and `user_weights` (`{"alice": 2}`).
    #[arg(long)]
    set: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Shows the queues, or sets them and names them.
///
/// # Errors
///
/// A malformed queue file (nothing is sent), a refusal, or no master answered.
pub fn run(args: QueuesArgs) -> Result<String, CliError> {
    let Some(path) = args.set else {
        let status = status::fetch(&args.masters, false)?;
        if args.json {
            return Ok(status.to_json()["queues"].to_string());
        }
        if let Some(warning) = &status.preemption_warning {
            eprintln!("warning: preemption can never stop an executor: {warning}");
        }
        return Ok(render::queues(&status).trim_end().to_owned());
    };
    let queues = read_queues(&path)?;
    let names: Vec<String> = queues
        .iter()
        .map(|q| {
            let prior = if q.prior { " (prior)" } else { "" };
            format!("{}{prior}", q.name)
        })
        .collect();
    let needs_fourth = queues.iter().find_map(|q| {
        [
            ("driver_share", q.driver_share.is_some()),
            ("gang_timeout_s", q.gang_timeout_s.is_some()),
            ("gang_style", q.gang_style.is_some()),
            ("ordering", !q.ordering.is_fifo()),
            ("user_weights", !q.user_weights.is_empty()),
            ("max_priority", q.max_priority.is_some()),
            ("user_limit", q.user_limit.is_some()),
        ]
        .into_iter()
        .find_map(|(setting, set)| set.then_some(setting))
    });
    if let Some(setting) = needs_fourth {
        // A master of an older release would drop it from the request unread.
        status::admits_fourth(&format!("a queue's {setting}"), &args.masters)?;
    }
    let masters = args.masters.parse()?;
    let request = SetQueuesRequest {
        request_id: request_id(),
        queues: queues.iter().map(Queue::from).collect(),
    };
    runtime()?.block_on(masters.call(async |mut c| c.set_queues(request.clone()).await))?;
    Ok(format!("queues set: {}", names.join(", ")))
}
