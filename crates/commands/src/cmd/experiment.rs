//! `muster experiment priority`: the YARN high-priority experiment on a local cluster of its
//! own ([`muster_bench::experiment`]); this module parses its options and renders its report.

use std::path::PathBuf;

use clap::Args;
use muster_bench::experiment::{self, PriorityReport};

use super::this_program;
use crate::error::CliError;

/// `muster experiment priority`.
#[derive(Args)]
pub struct PriorityArgs {
    /// A scaled-down run (about a minute; with `--spark` about twelve): one repetition of
    /// short jobs, to check that it runs rather than to measure.
    #[arg(long)]
    quick: bool,
    /// Print the results as JSON: `{"idle_s", "prior_s", "ordinary_s", "order"}`.
    #[arg(long)]
    json: bool,
    /// Draw the cores each queue holds over time, under load with prior jobs, to this SVG.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Run without preemption (prior jobs then wait for ordinary executors to end).
    #[arg(long)]
    no_preempt: bool,
    /// Run Spark applications, with this build of the plug-in (`integrations/spark/build`
    /// prints it), the environment's `SPARK_HOME` and `PYSPARK_PYTHON`.
    #[arg(long, value_name = "JAR")]
    spark: Option<PathBuf>,
}

/// Runs the experiment and renders its report.
///
/// # Errors
///
/// The cluster or a job could not run.
pub fn run(args: PriorityArgs) -> Result<String, CliError> {
    let report = experiment::run(&experiment::Options {
        program: this_program()?,
        quick: args.quick,
        plot: args.plot,
        no_preempt: args.no_preempt,
        spark: args.spark,
    })?;
    if args.json {
        return Ok(serde_json::to_string_pretty(&report).expect("JSON prints"));
    }
    Ok(render(&report))
}

fn render(report: &PriorityReport) -> String {
    let mut out = format!(
        "three pi {}, turnaround from submission ({} repetitions, preemption {}):\n",
        if report.spark {
            "Spark applications"
        } else {
            "jobs"
        },
        report.repetitions,
        if report.preempt { "on" } else { "off" }
    );
    for (name, label) in [
        ("idle", "idle cluster, prod"),
        ("prior", "full load, prod (prior)"),
        ("ordinary", "full load, food (ordinary)"),
    ] {
        let each: Vec<String> = report.runs[name]
            .iter()
            .map(|r| format!("{r:.1}"))
            .collect();
        out += &format!(
            "  {label:<28} mean {:>6.1} s   runs {}\n",
            report.mean(name),
            each.join(" ")
        );
    }
    out += &format!(
        "  prior / idle {:.2}, prior / ordinary {:.2}\n",
        report.prior_s / report.idle_s,
        report.prior_s / report.ordinary_s
    );
    out += &format!(
        "the long ordinary jobs: {:.1} s beside the prior jobs, {:.1} s beside the control: slowdown {:.2}\n",
        report.mean("long_with_prior"),
        report.mean("long_with_ordinary"),
        report.long_slowdown
    );
    out += &format!(
        "finish order of jobs 1 (default), 2 and 3 (prod) under load: {}",
        report
            .order
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    out
}
