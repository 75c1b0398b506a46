//! `muster bench`: load against a running cluster, so that anyone can measure again what the
//! book's "Benchmarks" page reports, and the benchmarks' plots for that page. The harnesses
//! are [`muster_bench::load`] and [`muster_bench::workers`], the plots
//! [`muster_bench::plots`]; this module parses their options and renders what they measured.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use muster_bench::load::{self, Load, LoadReport};
use muster_bench::plots;
use muster_bench::workers::{self, WorkersReport};
use muster_leader::config::seconds;
use muster_proto::auth::Role;

use super::{MastersArg, runtime};
use crate::error::CliError;

/// `muster bench`.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// Driver submissions and kills through the client API: writes per second and latency.
    Submit(SubmitBenchArgs),
    /// Puts of 256-byte values into etcd, measured the same way, for comparison.
    Etcd(EtcdBenchArgs),
    /// Simulated workers: registration, heartbeats, the leader's CPU and memory, failover.
    Workers(WorkersBenchArgs),
    /// Draw the plots of the results the `placement` and `failover` benchmarks wrote into
    /// `MUSTER_BENCH_DATA`.
    Plot(PlotArgs),
}

/// `muster bench plot`.
#[derive(Args)]
pub struct PlotArgs {
    /// The directory the benchmarks wrote their results into (`MUSTER_BENCH_DATA`).
    data: PathBuf,
    /// Where to write the plots (`placement.svg`, `failover.svg`).
    #[arg(long, default_value = ".")]
    out: PathBuf,
}

/// How much load, and how to print what it measured.
#[derive(Args)]
pub struct LoadArgs {
    /// Concurrent clients.
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Connections the clients share, each carrying clients in turn as HTTP/2 streams;
    /// default: one per client.
    #[arg(long)]
    connections: Option<usize>,
    /// Writes in all, shared evenly among the clients.
    #[arg(long, default_value_t = 20_000)]
    requests: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// `muster bench submit`.
#[derive(Args)]
pub struct SubmitBenchArgs {
    #[command(flatten)]
    masters: MastersArg,
    #[command(flatten)]
    load: LoadArgs,
}

/// `muster bench etcd`.
#[derive(Args)]
pub struct EtcdBenchArgs {
    /// etcd's client URLs' `HOST:PORT`s, comma-separated.
    #[arg(long)]
    endpoints: String,
    #[command(flatten)]
    load: LoadArgs,
}

/// `muster bench workers`: thousands of simulated worker agents in this one process, each a
/// real stream to the leader.
#[derive(Args)]
pub struct WorkersBenchArgs {
    #[command(flatten)]
    masters: MastersArg,
    /// Simulated workers.
    #[arg(long, default_value_t = 10_000)]
    count: usize,
    /// How long to measure steady heartbeats, in seconds.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Then submit this many one-core drivers at once and measure until every one is placed:
    /// the plan that places it is committed and its launch has reached its worker.
    #[arg(long, default_value_t = 0)]
    drivers: usize,
    /// Concurrent clients submitting the drivers, each with its own connection.
    #[arg(long, default_value_t = 256)]
    clients: usize,
    /// Each driver ends (FINISHED) this many seconds after its launch, so that more drivers
    /// than the workers' cores can be placed, as in a C1M-style run; unset, they run until
    /// the benchmark ends.
    #[arg(long, value_name = "SECONDS")]
    driver_s: Option<f64>,
    /// Then SIGKILL the leader (it must run on this machine) and measure until every worker
    /// is registered with the new leader and ALIVE in its log.
    #[arg(long)]
    kill_leader: bool,
    /// SIGKILL the leader (it must run on this machine) this many seconds after the first
    /// submission, while the drivers are placed: the clients and workers follow the next.
    #[arg(
        long,
        value_name = "SECONDS",
        conflicts_with = "kill_leader",
        requires = "drivers"
    )]
    kill_leader_while_placing: Option<f64>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

impl LoadArgs {
    fn load(&self) -> Load {
        Load {
            clients: self.clients,
            connections: self.connections,
            requests: self.requests,
        }
    }
}

/// Runs a benchmark and renders what it measured.
///
/// # Errors
///
/// Bad arguments, nothing to connect to, or a write that failed.
pub fn run(command: BenchCommand) -> Result<String, CliError> {
    match command {
        BenchCommand::Submit(args) => {
            let masters = args.masters.parse()?;
            let load = args.load.load();
            let report = runtime()?.block_on(load::submit(&masters, &load))?;
            Ok(render_load(&report, args.load.json))
        }
        BenchCommand::Etcd(args) => {
            let load = args.load.load();
            let report = runtime()?.block_on(load::etcd(&args.endpoints, &load))?;
            Ok(render_load(&report, args.load.json))
        }
        BenchCommand::Workers(args) => {
            let masters = args.masters.parse()?;
            let credential = args.masters.secret.credential(Role::Worker)?;
            let options = workers::Options {
                count: args.count,
                seconds: args.seconds,
                drivers: args.drivers,
                clients: args.clients,
                driver_run: args
                    .driver_s
                    .map(|s| seconds("--driver-s", s))
                    .transpose()?,
                kill_leader: args.kill_leader,
                kill_leader_while_placing: args
                    .kill_leader_while_placing
                    .map(|s| seconds("--kill-leader-while-placing", s))
                    .transpose()?,
            };
            let report = runtime()?.block_on(workers::run(&masters, credential, &options))?;
            Ok(render_workers(&report, args.json))
        }
        BenchCommand::Plot(args) => {
            let drawn = plots::draw(&args.data, &args.out)?;
            Ok(drawn
                .iter()
                .map(|path| format!("wrote {}", path.display()))
                .collect::<Vec<_>>()
                .join("\n"))
        }
    }
}

fn render_load(report: &LoadReport, json: bool) -> String {
    if json {
        return serde_json::to_string(report).expect("JSON prints");
    }
    format!(
        "{:<8} {:>8} {:>12} {:>8} {:>9} {:>10} {:>8} {:>8} {:>8}\n\
         {:<8} {:>8} {:>12} {:>8} {:>9.2} {:>10.0} {:>8.2} {:>8.2} {:>8.2}",
        "system",
        "clients",
        "connections",
        "writes",
        "seconds",
        "writes/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        report.system,
        report.clients,
        report.connections,
        report.writes,
        report.seconds,
        report.writes_per_s,
        report.p50_ms,
        report.p99_ms,
        report.max_ms,
    )
}

fn render_workers(report: &WorkersReport, json: bool) -> String {
    if json {
        return serde_json::to_string(report).expect("JSON prints");
    }
    let or_dash = |value: Option<f64>, unit: &str| {
        value.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}{unit}"))
    };
    let count_or_dash =
        |value: Option<u64>| value.map_or_else(|| "-".to_owned(), |v| v.to_string());
    format!(
        "workers                 {}\n\
         all registered in       {:.2} s\n\
         heartbeats answered     {:.0} /s\n\
         heartbeat answer p50    {:.2} ms\n\
         heartbeat answer p99    {:.2} ms\n\
         leader CPU              {}\n\
         leader memory (RSS)     {}\n\
         drivers placed          {} ({}; all submitted in {})\n\
         submission p50 / p99    {} / {}\n\
         busy refusals           {}\n\
         submissions sent again  {}\n\
         leader changes          {}\n\
         duplicate launches      {}\n\
         leader while placing    {}, {}\n\
         snapshot at the end     {} (saved in {})\n\
         all ALIVE after a kill  {}",
        report.workers,
        report.registration_s,
        report.heartbeats_per_s,
        report.heartbeat_p50_ms,
        report.heartbeat_p99_ms,
        or_dash(report.leader_cores, " cores"),
        or_dash(report.leader_rss_mb, " MB"),
        report.drivers,
        or_dash(report.placements_per_s, " /s"),
        or_dash(report.submitted_s, " s"),
        or_dash(report.submission_p50_ms, " ms"),
        or_dash(report.submission_p99_ms, " ms"),
        count_or_dash(report.busy_refusals),
        count_or_dash(report.submission_retries),
        count_or_dash(report.leader_changes),
        count_or_dash(report.duplicate_launches),
        or_dash(report.placement_leader_cores, " cores"),
        or_dash(report.placement_leader_rss_mb, " MB"),
        or_dash(report.snapshot_mb, " MB"),
        or_dash(report.snapshot_s, " s"),
        or_dash(report.failover_s, " s"),
    )
}
