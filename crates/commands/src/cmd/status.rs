//! `muster status` and its parts (`members`, `workers`, `apps`, `drivers`): the cluster as
//! the leader sees it, as tables or as JSON.

use std::fmt::Write as _;

use clap::Args;
use muster_master::web::view::StatusView;
use muster_proto::masters::Masters;
use muster_proto::v1::StatusRequest;
use muster_state::version::{LogFormat, held_back};
use tokio::runtime::Runtime;

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
    let request = StatusRequest {
        local,
        ..StatusRequest::default()
    };
    fetch_as(&masters.parse()?, &runtime()?, &request)
}

/// Refuses `what` (a setting or a field of a request) until the cluster's log format is 4:
/// a master of an older release would drop it from a request unread, and the line names the
/// masters that hold the format back.
///
/// # Errors
///
/// The refusal, or no master answered.
pub fn admits_fourth(what: &str, masters: &MastersArg) -> Result<(), CliError> {
    let status = fetch(masters, false)?;
    let effective = LogFormat(status.log_format);
    if effective >= LogFormat::FOURTH {
        return Ok(());
    }
    let members = status.members.iter().map(|m| {
        let build = m.build.as_ref().map(|b| {
            let reads = LogFormat(b.log_format.unwrap_or(LogFormat::FIRST.0));
            (b.version.as_str(), reads)
        });
        (m.id, build)
    });
    let line = held_back(LogFormat::FOURTH, effective, members);
    Err(CliError::Refused(format!("{what} {line}")))
}

/// The status `request` asks for, from `masters`, on `runtime`.
///
/// # Errors
///
/// No master answered.
fn fetch_as(
    masters: &Masters,
    runtime: &Runtime,
    request: &StatusRequest,
) -> Result<StatusView, CliError> {
    let reply = runtime.block_on(masters.call(async |mut c| c.status(request.clone()).await))?;
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
    #[arg(value_name = "ID", conflicts_with_all = ["limit", "from"])]
    ids: Vec<String>,
    /// Only this many drivers, in id order (from the first, or from `--from`), and the
    /// command that shows the next ones: for a cluster with too many to list at once.
    #[arg(long, value_name = "N")]
    limit: Option<u32>,
    /// With `--limit`: from this driver on (the id the previous page named).
    #[arg(long, value_name = "ID", requires = "limit")]
    from: Option<String>,
}

/// `muster drivers [ID...]`: the drivers, or only those named.
///
/// # Errors
///
/// No master answered, or one of the ids names no driver the masters know.
pub fn drivers(args: DriversArgs) -> Result<String, CliError> {
    let page = |from: &str, limit: u32| StatusRequest {
        local: args.read.local,
        ..StatusRequest::drivers_from(from, limit)
    };
    if args.ids.is_empty() && args.limit.is_none() {
        let status = fetch(&args.read.masters, args.read.local)?;
        return Ok(shown(&status, args.read.json, "drivers", render::drivers));
    }
    let (masters, runtime) = (args.read.masters.parse()?, runtime()?);
    if let Some(limit) = args.limit {
        let from = args.from.as_deref().unwrap_or_default();
        let status = fetch_as(&masters, &runtime, &page(from, limit))?;
        return Ok(paged(&status, args.read.json, limit));
    }
    // Each named driver is the first of a page of one from it.
    let mut named: Option<StatusView> = None;
    for id in &args.ids {
        let mut one = fetch_as(&masters, &runtime, &page(id, 1))?;
        one.drivers.retain(|d| d.id == *id);
        if one.drivers.is_empty() {
            return Err(CliError::Refused(format!(
                "no driver `{id}`: the masters know every active driver and the latest ended \
                 ones (retained_drivers)"
            )));
        }
        match &mut named {
            Some(status) => status.drivers.append(&mut one.drivers),
            None => named = Some(one),
        }
    }
    let status = named.expect("at least one id");
    Ok(shown(&status, args.read.json, "drivers", render::drivers))
}

/// A page of `limit` drivers: their table and the command that shows the next page, or as
/// JSON `{"drivers": [...], "next": ID}` (`next` null after the last page).
fn paged(status: &StatusView, json: bool, limit: u32) -> String {
    if json {
        let json = status.to_json();
        return serde_json::json!({
            "drivers": json["drivers"],
            "next": status.drivers_next,
        })
        .to_string();
    }
    let table = render::drivers(status).trim_end().to_owned();
    match &status.drivers_next {
        Some(next) => format!("{table}\nmore: muster drivers --limit {limit} --from {next}"),
        None => table,
    }
}
