//! `muster status` and its parts (`members`, `workers`, `apps`, `drivers`): the cluster as
//! the leader sees it, as tables or as JSON.

use std::fmt::Write as _;

use clap::Args;
use muster_master::view::StatusView;
use muster_proto::v1::StatusRequest;

use super::{MastersArg, runtime};
use crate::error::CliError;
use crate::render;

/// Read commands.
#[derive(Args)]
pub struct ReadArgs {
    #[command(flatten)]
    masters: MastersArg,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Show the first reachable master's own copy of the state, without asking the leader
    /// (it may lag behind).
    #[arg(long)]
    local: bool,
}

/// The status, from the leader or (`local`) the first master that answers.
///
/// # Errors
///
/// No master answered.
pub fn fetch(masters: &MastersArg, local: bool) -> Result<StatusView, CliError> {
    let masters = masters.parse()?;
    let request = StatusRequest { local };
    let reply = runtime()?.block_on(masters.call(async |mut c| c.status(request).await))?;
    Ok(StatusView::of(&reply))
}

/// `muster status`: every part, under a header naming the leader.
///
/// # Errors
///
/// No master answered.
pub fn run(args: ReadArgs) -> Result<String, CliError> {
    let status = fetch(&args.masters, args.local)?;
    if args.json {
        return Ok(status.to_json().to_string());
    }
    let mut out = format!(
        "leader {}  term {}  {}",
        status.leader,
        status.term,
        status.recovery_state.name()
    );
    let sections = [
        ("MEMBERS", render::members(&status)),
        ("WORKERS", render::workers(&status)),
        ("APPLICATIONS", render::apps(&status)),
        ("DRIVERS", render::drivers(&status)),
    ];
    for (title, table) in sections {
        let _ = write!(out, "\n\n{title}\n{}", table.trim_end());
    }
    Ok(out)
}

/// One part of the status: as JSON under `key`, or as its table.
///
/// # Errors
///
/// No master answered.
pub fn part(
    args: ReadArgs,
    key: &str,
    table: fn(&StatusView) -> String,
) -> Result<String, CliError> {
    let status = fetch(&args.masters, args.local)?;
    Ok(shown(&status, args.json, key, table))
}

/// The part of `status` under `key`: as JSON, or as its table.
fn shown(status: &StatusView, json: bool, key: &str, table: fn(&StatusView) -> String) -> String {
    if json {
        return status.to_json()[key].to_string();
    }
    table(status).trim_end().to_owned()
}

/// `muster drivers`.
#[derive(Args)]
pub struct DriversArgs {
    #[command(flatten)]
    read: ReadArgs,
    /// Only these drivers.
    #[arg(value_name = "ID")]
    ids: Vec<String>,
}

/// `muster drivers [ID...]`: the drivers, or only those named.
///
/// # Errors
///
/// No master answered, or one of the ids names no driver the masters know.
pub fn drivers(args: DriversArgs) -> Result<String, CliError> {
    let mut status = fetch(&args.read.masters, args.read.local)?;
    if !args.ids.is_empty() {
        let known = |id: &String| status.drivers.iter().any(|d| &d.id == id);
        if let Some(unknown) = args.ids.iter().find(|id| !known(id)) {
            return Err(CliError::Refused(format!(
                "no driver `{unknown}`: the masters know every active driver and the latest \
                 ended ones (retained_drivers)"
            )));
        }
        status.drivers.retain(|d| args.ids.contains(&d.id));
    }
    Ok(shown(&status, args.read.json, "drivers", render::drivers))
}
