//! `muster simulate`: a trace run through Muster's own scheduling code in virtual time
//! ([`muster_sim`]); this module parses its options, shows progress and renders reports.
//! `muster simulate generate` writes the built-in workloads.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use muster_core::model::OrderingPolicy;
use muster_sim::cluster::Cluster;
use muster_sim::generate::{self, Bursts, Mix, Paper, Scenario, Teams, Workload};
use muster_sim::report::{Distribution, Group, Report};
use muster_sim::trace::{self, Entry};
use muster_sim::{Options, simulate};

use crate::error::CliError;

/// `muster simulate`.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SimulateArgs {
    #[command(subcommand)]
    generate: Option<SimulateCommand>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum SimulateCommand {
    /// Write a built-in workload: DIR/cluster.json and DIR/trace.jsonl.
    Generate(GenerateArgs),
}

/// `muster simulate TRACE`.
#[derive(Args)]
struct RunArgs {
    /// The trace: one JSON object per line, or CSV if its name ends in `.csv` (the book,
    /// "muster simulate").
    trace: Option<PathBuf>,
    /// The cluster file: workers, queues, master settings, timings.
    #[arg(long, required_unless_present = "compare")]
    cluster: Option<PathBuf>,
    /// Run the trace on two cluster files (two queue settings, say) and print them side by
    /// side.
    #[arg(long, num_args = 2, value_names = ["A", "B"], conflicts_with = "cluster")]
    compare: Option<Vec<PathBuf>>,
    /// Seeds the spread of process start times.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Stop after this many simulated seconds even if work remains (a day after the trace's
    /// last entry).
    #[arg(long)]
    until_s: Option<f64>,
    /// Sample what the cluster holds this often, in simulated seconds.
    #[arg(long, default_value_t = 1.0)]
    sample_s: f64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Draw the cores each queue holds over time to this SVG.
    #[arg(long, value_name = "SVG")]
    plot: Option<PathBuf>,
    /// Write every app and driver (submitted, started, ended, outcome), in the order they
    /// ended, to this file as JSON lines.
    #[arg(long, value_name = "FILE")]
    work: Option<PathBuf>,
}

#[derive(Args)]
struct GenerateArgs {
    /// Which workload.
    workload: Builtin,
    /// Where to write cluster.json and trace.jsonl.
    #[arg(long)]
    out: PathBuf,
    /// Workers (paper: a multiple of 4).
    #[arg(long, default_value_t = 4)]
    workers: u32,
    /// paper: where the pi jobs go.
    #[arg(long, value_enum, default_value_t = ScenarioArg::Prior)]
    scenario: ScenarioArg,
    /// paper: without preemption.
    #[arg(long)]
    no_preempt: bool,
    /// paper: rounds of each long job's 500 ms tasks.
    #[arg(long, default_value_t = 160)]
    long_rounds: u32,
    /// paper: seconds per pi task (a quarter of a pi job's measured time on an idle
    /// cluster).
    #[arg(long, default_value_t = 18.2)]
    pi_task_s: f64,
    /// mix: applications over the run.
    #[arg(long, default_value_t = 100_000)]
    apps: u32,
    /// mix, teams: simulated hours the applications arrive over; bursts: hours, each
    /// starting with a burst (whole hours).
    #[arg(long, default_value_t = 24.0)]
    hours: f64,
    /// mix, bursts, teams: seeds every draw.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// teams: how the shared queue orders its applications.
    #[arg(long, value_enum, default_value_t = OrderingArg::Drf)]
    ordering: OrderingArg,
}

#[derive(Clone, Copy, ValueEnum)]
enum OrderingArg {
    Fifo,
    Fair,
    Drf,
}

/// A built-in workload.
#[derive(Clone, Copy, ValueEnum)]
enum Builtin {
    /// The priority experiment at `--workers` workers.
    Paper,
    /// A synthetic production mix.
    Mix,
    /// A day of a workflow scheduler's bursts of job drivers, gangs among them.
    Bursts,
    /// Two teams sharing one queue: large batch applications and small interactive ones.
    Teams,
}

#[derive(Clone, Copy, ValueEnum)]
enum ScenarioArg {
    Idle,
    Prior,
    Ordinary,
}

/// Runs `muster simulate`.
///
/// # Errors
///
/// A malformed cluster file or trace (exit 2), or a file that cannot be written.
pub fn run(args: SimulateArgs) -> Result<String, CliError> {
    match args.generate {
        Some(SimulateCommand::Generate(args)) => generate(&args),
        None => run_trace(&args.run),
    }
}

fn run_trace(args: &RunArgs) -> Result<String, CliError> {
    let path = args
        .trace
        .as_deref()
        .ok_or_else(|| CliError::BadInput("name a trace: muster simulate TRACE".into()))?;
    let trace = trace::read(path).map_err(|e| CliError::BadInput(e.to_string()))?;
    if !(args.sample_s.is_finite() && args.sample_s >= 0.001) {
        return Err(CliError::BadInput(
            "--sample-s: at least 0.001 seconds".into(),
        ));
    }
    let options = Options {
        seed: args.seed,
        until_ms: args.until_s.map(muster_sim::seconds_to_ms),
        sample_ms: muster_sim::seconds_to_ms(args.sample_s),
        check_invariants: false,
    };
    if let Some([a, b]) = args.compare.as_deref() {
        let a_report = run_one(&read_cluster(a)?, &trace, &options, args, None)?;
        let b_report = run_one(&read_cluster(b)?, &trace, &options, args, None)?;
        if args.json {
            let both = serde_json::json!({ a.display().to_string(): a_report, b.display().to_string(): b_report });
            return Ok(serde_json::to_string_pretty(&both).expect("reports print"));
        }
        return Ok(compare(a, &a_report, b, &b_report));
    }
    let cluster_path = args.cluster.as_deref().expect("clap requires --cluster");
    let report = run_one(
        &read_cluster(cluster_path)?,
        &trace,
        &options,
        args,
        args.plot.as_deref(),
    )?;
    if args.json {
        return Ok(serde_json::to_string_pretty(&report).expect("a report prints"));
    }
    Ok(render(&report))
}

fn read_cluster(path: &Path) -> Result<Cluster, CliError> {
    Cluster::read(path).map_err(|e| CliError::BadInput(e.to_string()))
}

/// Runs `trace` on `cluster`, with a progress bar on a terminal; writes `--work` and the
/// plot.
fn run_one(
    cluster: &Cluster,
    trace: &[Entry],
    options: &Options,
    args: &RunArgs,
    plot: Option<&Path>,
) -> Result<Report, CliError> {
    if let Some(worker) = cluster.unknown_worker(trace) {
        return Err(CliError::BadInput(format!(
            "the trace names worker `{worker}`, which the cluster file does not have"
        )));
    }
    if let Some(queue) = cluster.unknown_queue(trace) {
        return Err(CliError::BadInput(format!(
            "the trace submits to queue `{queue}`, which the cluster file does not have"
        )));
    }
    if let Some(message) = cluster.preemption_stops_nothing(trace) {
        return Err(CliError::BadInput(format!(
            "master.preemption.max_fraction: {message}"
        )));
    }
    let last_s = trace.last().map_or(0.0, Entry::at_s);
    let bar = ProgressBar::new(last_s.ceil() as u64).with_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} simulated seconds submitted",
        )
        .expect("a valid template"),
    );
    let started = Instant::now();
    let recorder = simulate(cluster, trace, options.clone(), &mut |now_ms| {
        bar.set_position(now_ms / 1000);
    });
    bar.finish_and_clear();
    let mut report = recorder.report();
    report.measured.wall_s = (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
    if let Some(path) = &args.work {
        let lines: String = recorder
            .order
            .iter()
            .chain(recorder.unfinished().iter())
            .filter_map(|&i| recorder.work[i].as_ref())
            .map(|work| serde_json::to_string(work).expect("a record prints") + "\n")
            .collect();
        write(path, &lines)?;
    }
    if let Some(path) = plot {
        let title = format!(
            "cores held per queue, {} workers, {} cores",
            cluster.workers.len(),
            cluster.cores()
        );
        muster_sim::plot::cores_by_queue(path, &title, &recorder.samples, cluster.cores())
            .map_err(CliError::Failed)?;
    }
    Ok(report)
}

fn write(path: &Path, text: &str) -> Result<(), CliError> {
    std::fs::write(path, text)
        .map_err(|e| CliError::Failed(format!("cannot write {}: {e}", path.display())))
}

fn generate(args: &GenerateArgs) -> Result<String, CliError> {
    let workload: Workload = match args.workload {
        Builtin::Paper => {
            if args.workers == 0 || !args.workers.is_multiple_of(4) {
                return Err(CliError::BadInput(
                    "--workers: the paper's experiment takes a multiple of 4".into(),
                ));
            }
            generate::paper(&Paper {
                workers: args.workers,
                scenario: match args.scenario {
                    ScenarioArg::Idle => Scenario::Idle,
                    ScenarioArg::Prior => Scenario::Prior,
                    ScenarioArg::Ordinary => Scenario::Ordinary,
                },
                preempt: !args.no_preempt,
                long_rounds: args.long_rounds,
                pi_task_s: args.pi_task_s,
            })
        }
        Builtin::Mix => {
            if args.workers == 0
                || args.apps == 0
                || !(args.hours.is_finite() && args.hours >= 0.001)
            {
                return Err(CliError::BadInput(
                    "--workers, --apps and --hours must be positive".into(),
                ));
            }
            generate::mix(&Mix {
                workers: args.workers,
                apps: args.apps,
                hours: args.hours,
                seed: args.seed,
            })
        }
        Builtin::Bursts => {
            let whole = args.hours.fract() == 0.0 && (1.0..=8760.0).contains(&args.hours);
            if args.workers == 0 || !whole {
                return Err(CliError::BadInput(
                    "--workers must be positive and --hours a whole number of hours, up to a year"
                        .into(),
                ));
            }
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let hours = args.hours as u32;
            generate::bursts(&Bursts {
                workers: args.workers,
                hours,
                seed: args.seed,
            })
        }
        Builtin::Teams => {
            if args.workers == 0 || !(args.hours.is_finite() && args.hours >= 0.001) {
                return Err(CliError::BadInput(
                    "--workers and --hours must be positive".into(),
                ));
            }
            generate::teams(&Teams {
                workers: args.workers,
                hours: args.hours,
                ordering: match args.ordering {
                    OrderingArg::Fifo => OrderingPolicy::Fifo,
                    OrderingArg::Fair => OrderingPolicy::Fair,
                    OrderingArg::Drf => OrderingPolicy::Drf,
                },
                seed: args.seed,
            })
        }
    };
    std::fs::create_dir_all(&args.out)
        .map_err(|e| CliError::Failed(format!("cannot create {}: {e}", args.out.display())))?;
    let cluster = args.out.join("cluster.json");
    let trace = args.out.join("trace.jsonl");
    write(
        &cluster,
        &(serde_json::to_string_pretty(&workload.cluster).expect("JSON prints") + "\n"),
    )?;
    write(&trace, &trace::write(&workload.trace))?;
    Ok(format!(
        "wrote {} and {} ({} entries)\nrun: muster simulate {} --cluster {}",
        cluster.display(),
        trace.display(),
        workload.trace.len(),
        trace.display(),
        cluster.display()
    ))
}

/// A report as tables.
fn render(report: &Report) -> String {
    let s = &report.simulated;
    let mut out = format!(
        "simulated {:.1} s on {} workers ({} cores): {} apps and drivers, {} ended, {} unfinished\n",
        s.span_s, s.workers, s.cores, s.submitted, s.ended, s.unfinished
    );
    for (title, groups) in [("queue", &s.queues), ("user", &s.users)] {
        if groups.len() > 1 || title == "queue" {
            out += &groups_table(title, groups);
        }
    }
    if let Some(jain) = s.fairness.jain_index {
        out += &format!(
            "fairness: Jain's index {jain:.2} of the users' dominant shares (mean: {})\n",
            s.fairness.means()
        );
    }
    out += &format!(
        "preemption: {} executors stopped, {} tasks ran again, {:.1} core-s lost\n",
        s.preemption.executors, s.preemption.tasks_rerun, s.preemption.core_s_lost
    );
    if s.other_losses.tasks_rerun > 0 || s.workers_lost > 0 || s.leader_changes > 0 {
        out += &format!(
            "faults: {} workers lost, {} leader changes; {} tasks ran again, {:.1} core-s lost; {} processes ran twice\n",
            s.workers_lost,
            s.leader_changes,
            s.other_losses.tasks_rerun,
            s.other_losses.core_s_lost,
            s.ran_twice
        );
    }
    if !s.waiting.is_empty() {
        let reasons: Vec<String> = s
            .waiting
            .iter()
            .map(|(reason, w)| format!("{reason} {:.2} (most {})", w.mean, w.most))
            .collect();
        out += &format!("waiting, mean over samples: {}\n", reasons.join(", "));
    }
    out += &format!(
        "utilisation {:.1}%; log {} entries, {} bytes ({:.0} entries and {:.0} bytes a simulated hour); snapshot {} bytes\n",
        s.utilisation * 100.0,
        s.log.entries,
        s.log.bytes,
        s.log.entries_per_hour,
        s.log.bytes_per_hour,
        s.snapshot_bytes
    );
    let m = &report.measured;
    out += &format!(
        "this machine: {} passes, each p50 {:.3} ms, p99 {:.3} ms, worst {:.3} ms; {:.1} s in all",
        s.passes, m.pass_ms.p50, m.pass_ms.p99, m.pass_ms.max, m.wall_s
    );
    out
}

fn groups_table(title: &str, groups: &std::collections::BTreeMap<String, Group>) -> String {
    let mut out = format!(
        "{title:<12} {:>9} {:>9}  {:>26}  {:>26}  {:>12}\n",
        "submitted", "finished", "wait s p50/p95/p99", "turnaround s p50/p95/p99", "goodput c-s"
    );
    for (name, g) in groups {
        out += &format!(
            "{:<12} {:>9} {:>9}  {:>26}  {:>26}  {:>12.0}\n",
            if name.is_empty() { "-" } else { name },
            g.submitted,
            g.finished,
            percentiles(&g.wait_s),
            percentiles(&g.turnaround_s),
            g.goodput_core_s
        );
    }
    out
}

fn percentiles(d: &Distribution) -> String {
    format!("{:.1}/{:.1}/{:.1}", d.p50, d.p95, d.p99)
}

/// Two reports of one trace side by side.
fn compare(a: &Path, ra: &Report, b: &Path, rb: &Report) -> String {
    let (sa, sb) = (&ra.simulated, &rb.simulated);
    let mut out = format!(
        "{:<34} {:>20} {:>20}\n",
        "",
        a.file_name()
            .map_or(a.display().to_string(), |n| n.to_string_lossy().into()),
        b.file_name()
            .map_or(b.display().to_string(), |n| n.to_string_lossy().into())
    );
    let mut row = |label: String, x: String, y: String| {
        out += &format!("{label:<34} {x:>20} {y:>20}\n");
    };
    let queues: std::collections::BTreeSet<&String> =
        sa.queues.keys().chain(sb.queues.keys()).collect();
    for queue in queues {
        let (qa, qb) = (sa.queues.get(queue), sb.queues.get(queue));
        let cell = |g: Option<&Group>, f: &dyn Fn(&Group) -> String| g.map_or("-".into(), f);
        row(
            format!("{queue}: turnaround p50/p95 s"),
            cell(qa, &|g| {
                format!("{:.1}/{:.1}", g.turnaround_s.p50, g.turnaround_s.p95)
            }),
            cell(qb, &|g| {
                format!("{:.1}/{:.1}", g.turnaround_s.p50, g.turnaround_s.p95)
            }),
        );
        row(
            format!("{queue}: wait p50/p95 s"),
            cell(qa, &|g| format!("{:.1}/{:.1}", g.wait_s.p50, g.wait_s.p95)),
            cell(qb, &|g| format!("{:.1}/{:.1}", g.wait_s.p50, g.wait_s.p95)),
        );
    }
    row(
        "executors preempted".into(),
        sa.preemption.executors.to_string(),
        sb.preemption.executors.to_string(),
    );
    row(
        "core-s lost to preemption".into(),
        format!("{:.1}", sa.preemption.core_s_lost),
        format!("{:.1}", sb.preemption.core_s_lost),
    );
    row(
        "utilisation".into(),
        format!("{:.1}%", sa.utilisation * 100.0),
        format!("{:.1}%", sb.utilisation * 100.0),
    );
    row(
        "span s".into(),
        format!("{:.1}", sa.span_s),
        format!("{:.1}", sb.span_s),
    );
    row(
        "unfinished".into(),
        sa.unfinished.to_string(),
        sb.unfinished.to_string(),
    );
    out.trim_end().to_owned()
}
