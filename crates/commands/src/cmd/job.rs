//! `muster job run FILE`: this process becomes the application's driver and runs the job
//! file's jobs on its executors ([`muster_driver::driver`]), then prints a summary (or the
//! `--json` report) and exits 0 when every job succeeded, 1 otherwise. Ctrl-C finishes the
//! application and exits.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;
use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};
use muster_driver::driver::{
    AttemptState, DriverConfig, DriverError, JobOutcome, Progress, Report,
};
use muster_driver::spec::JobFile;
use tokio::sync::watch;

use super::{MastersArg, runtime, stop_signal, this_program};
use crate::error::CliError;
use crate::output;
use muster_proto::masters::request_id;

/// The environment variable carrying a job file's text to a driver in cluster mode.
pub const JOB_SPEC_VARIABLE: &str = "MUSTER_JOB_SPEC";

/// `muster job run`.
#[derive(Args)]
pub struct JobRunArgs {
    #[command(flatten)]
    masters: MastersArg,
    /// The job file (TOML; fields in the book's "Jobs" page). Without it, the job file's text in
    /// `MUSTER_JOB_SPEC`, as `muster submit --job` hands it to the driver.
    file: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// The address executors reach this driver at.
    #[arg(long, env = "MUSTER_DRIVER_HOST", default_value = "127.0.0.1")]
    driver_host: String,
}

/// Runs the job file to its end.
///
/// # Errors
///
/// A bad job file or flags (exit 2), a refused application (3), unreachable masters (4), or
/// a job that failed (1).
pub fn run(args: JobRunArgs) -> Result<String, CliError> {
    let file = match &args.file {
        Some(path) => JobFile::read(path).map_err(|e| CliError::BadInput(e.to_string()))?,
        None => {
            let text = std::env::var(JOB_SPEC_VARIABLE).map_err(|_| {
                CliError::BadInput(format!(
                    "give a job file, or its text in {JOB_SPEC_VARIABLE}"
                ))
            })?;
            JobFile::parse(&text).map_err(|(field, message)| {
                CliError::BadInput(format!("{JOB_SPEC_VARIABLE}: {field}: {message}"))
            })?
        }
    };
    let masters = args.masters.parse()?;
    let executor_program = this_program()?.display().to_string();
    let (progress, watched) = watch::channel(Progress::default());
    let config = DriverConfig {
        file,
        masters,
        host: args.driver_host,
        executor_program,
        request_id: request_id(),
        progress,
    };
    let report = runtime()?.block_on(async {
        let display = std::io::stderr()
            .is_terminal()
            .then(|| tokio::spawn(show(watched)));
        let report = muster_driver::driver::run(config, stop_signal()).await;
        if let Some(display) = display {
            let _ = display.await;
        }
        report
    });
    let report = match report {
        Ok(report) => report,
        Err(DriverError::Ended { state, report }) => {
            return Err(CliError::Failed(format!(
                "the application ended ({state}) before its jobs did\n{}",
                summary(&report)
            )));
        }
        Err(DriverError::Link(error)) => return Err(error.into()),
        Err(error) => return Err(CliError::Failed(error.to_string())),
    };
    let output = if args.json {
        serde_json::to_string_pretty(&report).expect("a report serializes")
    } else {
        summary(&report)
    };
    if report
        .jobs
        .iter()
        .all(|job| job.state == JobOutcome::Succeeded)
    {
        Ok(output)
    } else {
        output::line(output);
        Err(CliError::Failed("a job failed".to_owned()))
    }
}

/// A progress bar on standard error while the run lasts: tasks done of the submitted jobs'.
async fn show(mut progress: watch::Receiver<Progress>) {
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} tasks  {msg}",
        )
        .expect("a valid template"),
    );
    while progress.changed().await.is_ok() {
        let now = *progress.borrow_and_update();
        bar.set_length(now.tasks as u64);
        bar.set_position(now.tasks_done as u64);
        bar.set_message(format!(
            "jobs {}/{}, {} running on {} executors",
            now.jobs_ended, now.jobs, now.running, now.executors
        ));
    }
    // The run is over: its sender is gone.
    bar.finish_and_clear();
}

/// One line per job: state, duration, tasks by locality, failed attempts.
fn summary(report: &Report) -> String {
    let mut out = format!("application {}\n", report.app);
    let _ = writeln!(
        out,
        "{:<20} {:<10} {:>10} {:>6} {:>8}  LOCALITY",
        "JOB", "STATE", "DURATION", "TASKS", "FAILED"
    );
    for job in &report.jobs {
        let duration = job.finished_ms.map_or_else(
            || "-".to_owned(),
            |end| format!("{:.1}s", (end - job.submitted_ms) as f64 / 1000.0),
        );
        let tasks: u32 = job.stages.iter().map(|s| s.tasks).sum();
        let failed: u32 = job.stages.iter().map(|s| s.failed_attempts).sum();
        let mut localities = std::collections::BTreeMap::<&str, usize>::new();
        for task in report
            .tasks
            .iter()
            .filter(|t| t.job == job.name && t.state == AttemptState::Succeeded)
        {
            *localities.entry(task.locality.as_str()).or_default() += 1;
        }
        let localities: Vec<String> = localities.iter().map(|(l, n)| format!("{l}={n}")).collect();
        let _ = writeln!(
            out,
            "{:<20} {:<10} {:>10} {:>6} {:>8}  {}",
            job.name,
            job.state.name(),
            duration,
            tasks,
            failed,
            localities.join(" ")
        );
        if let Some(error) = &job.error {
            let _ = writeln!(out, "  {error}");
        }
    }
    out.trim_end().to_owned()
}
