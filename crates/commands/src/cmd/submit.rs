//! `muster submit`: a driver in cluster deploy mode; prints its id. With `--job FILE` the
//! driver is `muster job run` on that job file, carried in the driver's environment, so
//! the worker that runs it needs no copy of the file.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use muster_core::resources::Resources;
use muster_driver::spec::JobFile;
use muster_master::web::view::{StatusView, WorkerView};
use muster_proto::v1::{DriverState, Gang, StatusRequest, SubmitDriverRequest, WorkerState};

use super::job::JOB_SPEC_VARIABLE;
use super::{
    MastersArg, WorkArgs, parse_environment, parse_resources, program, runtime, this_program,
};
use crate::error::CliError;
use crate::output;
use muster_proto::masters::{Masters, request_id};

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
    /// Custom resources for the driver: NAME=AMOUNT,... (Spark's
    /// `spark.driver.resource.NAME.amount`).
    #[arg(long, default_value = "")]
    resources: String,
    /// Restart the driver when it fails, and relaunch it elsewhere when its worker is lost.
    #[arg(long)]
    supervise: bool,
    /// The driver's priority in its queue: higher starts first among the queue's waiting
    /// drivers (capped at the queue's max_priority). With --job, the job file's `priority`
    /// is the driver's and its application's.
    #[arg(
        long,
        conflicts_with = "job",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    priority: i32,
    /// Follow the driver to its end, printing its state on standard error as it changes, and
    /// exit with its exit code.
    #[arg(long)]
    wait: bool,
    /// Run this job file's jobs: the driver is `muster job run` (its executors reach it at
    /// `MUSTER_DRIVER_HOST` on its worker, `127.0.0.1` by default).
    #[arg(long, conflicts_with = "command")]
    job: Option<PathBuf>,
    /// A variable of the driver's environment: NAME=VALUE, or NAME for this command's own
    /// value of it. May be given more than once.
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    env: Vec<String>,
    /// The program and its arguments, after `--`.
    #[arg(last = true, required_unless_present = "job")]
    command: Vec<String>,
}

/// Submits the driver and returns its id.
///
/// # Errors
///
/// The masters refused it, or none answered.
pub fn run(args: SubmitArgs) -> Result<String, CliError> {
    let masters = args.masters.parse()?;
    let (command, program_args, env, name, gang, priority) = match &args.job {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| CliError::BadInput(format!("cannot read {}: {e}", path.display())))?;
            let file = JobFile::parse(&text).map_err(|(field, message)| {
                CliError::BadInput(format!("{}: {field}: {message}", path.display()))
            })?;
            let program = this_program()?;
            let mut env = BTreeMap::from([(JOB_SPEC_VARIABLE.to_owned(), text)]);
            if let Ok(host) = std::env::var("MUSTER_DRIVER_HOST") {
                env.insert("MUSTER_DRIVER_HOST".to_owned(), host);
            }
            // The driver starts beside room for its gang, or for its first executor (one
            // core, for executors that take every core a worker gives).
            let resources = &file.resources;
            let gang = Some(Gang {
                min_executors: resources.min_executors.unwrap_or(1),
                executor_cores: resources.executor_cores.unwrap_or(1),
                executor_memory_mb: resources.executor_memory_mb,
                executor_resources: resources.executor_resources.clone().into_iter().collect(),
            });
            let name = args.work.name.clone().unwrap_or(file.name);
            let job_args = vec!["job".to_owned(), "run".to_owned()];
            let priority = file.priority;
            (
                program.display().to_string(),
                job_args,
                env,
                name,
                gang,
                priority,
            )
        }
        None => {
            let (program, program_args) = program(&args.command)?;
            (
                program.clone(),
                program_args.to_vec(),
                BTreeMap::new(),
                args.work.name_or_program(program),
                None,
                args.priority,
            )
        }
    };
    let mut env = env;
    env.extend(parse_environment(&args.env)?);
    let resources = Resources::new(args.cores, args.memory)
        .with_custom(parse_resources("--resources", &args.resources)?);
    if priority != 0 {
        // A master of an older release would forward the request without it.
        super::status::admits_fourth("a driver's priority", &args.masters)?;
    }
    let request = SubmitDriverRequest {
        request_id: request_id(),
        name,
        queue: args.work.queue,
        resources: Some((&resources).into()),
        command,
        args: program_args,
        env: env.into_iter().collect(),
        supervise: args.supervise,
        gang,
        priority,
    };
    let runtime = runtime()?;
    let reply =
        runtime.block_on(masters.call(async |mut c| c.submit_driver(request.clone()).await))?;
    // Accepted, since workers may come that hold it; said at once if none of today's can
    // (asked briefly: the submission is done, and the warning is worth no wait).
    let workers = runtime.block_on(async {
        let status = masters.call(async |mut c| c.status(StatusRequest::without_drivers()).await);
        tokio::time::timeout(WORKERS_PATIENCE, status).await
    });
    if let Ok(Ok(status)) = workers
        && let Some(warning) = larger_than_any_worker(&resources, &StatusView::of(&status).workers)
    {
        eprintln!("warning: {warning}");
    }
    if !args.wait {
        return Ok(reply.driver_id);
    }
    output::line(&reply.driver_id);
    runtime.block_on(follow(&masters, &reply.driver_id))?;
    Ok(String::new())
}

/// How long `muster submit` asks for the workers after a submission, to warn of a driver
/// none of them could hold.
const WORKERS_PATIENCE: Duration = Duration::from_secs(2);

/// Why a driver needing `need` waits for ever among `workers`, when it does: some are ALIVE
/// and none of them could hold it even empty.
fn larger_than_any_worker(need: &Resources, workers: &[WorkerView]) -> Option<String> {
    let alive: Vec<&WorkerView> = workers
        .iter()
        .filter(|w| w.state == WorkerState::Alive)
        .collect();
    let capacity = |w: &WorkerView| {
        Resources::new(w.cores, w.memory_mb).with_custom(w.resources.clone().into_iter().collect())
    };
    let largest = alive.iter().max_by_key(|w| (w.cores, w.memory_mb))?;
    if alive.iter().any(|w| capacity(w).fits(need).is_ok()) {
        return None;
    }
    let cores = if largest.cores == 1 { "core" } else { "cores" };
    Some(format!(
        "no ALIVE worker could ever hold this driver (the largest has {} {cores} and {} MB): it \
         waits until one that can registers",
        largest.cores, largest.memory_mb
    ))
}

/// Prints driver `id`'s state whenever it changes until it ends; an end other than FINISHED
/// is an error carrying the code to exit with.
async fn follow(masters: &Masters, id: &str) -> Result<(), CliError> {
    let mut shown = String::new();
    loop {
        let status = masters
            .call(async |mut c| c.status(StatusRequest::drivers_from(id, 1)).await)
            .await?;
        let driver = status
            .drivers
            .iter()
            .find(|d| d.id == id)
            .ok_or_else(|| CliError::Failed(format!("driver {id} is no longer known")))?;
        let state = driver.state();
        let line = match state {
            DriverState::Running => format!("{id} RUNNING on {}", driver.worker),
            // Why it waits: no room, a queue at capacity, a threshold, ...
            DriverState::Submitted if !driver.waiting.is_empty() => {
                format!("{id} SUBMITTED, waiting: {}", driver.waiting)
            }
            other => format!(
                "{id} {}",
                other.as_str_name().trim_start_matches("DRIVER_STATE_")
            ),
        };
        if line != shown {
            eprintln!("{line}");
            shown = line;
        }
        let ended = |code: Option<i32>, message: String| CliError::DriverEnded {
            message,
            code: code
                .and_then(|c| u8::try_from(c).ok())
                .filter(|&c| c != 0)
                .unwrap_or(1),
        };
        match state {
            DriverState::Finished => return Ok(()),
            DriverState::Failed => {
                let code = driver
                    .exit_code
                    .map_or_else(|| "unknown".to_owned(), |c| c.to_string());
                return Err(ended(
                    driver.exit_code,
                    format!("driver {id} failed with exit code {code}"),
                ));
            }
            DriverState::Killed => return Err(ended(Some(143), format!("driver {id} was killed"))),
            DriverState::Error | DriverState::Relaunching => {
                return Err(ended(None, format!("{shown}: see `muster drivers`")));
            }
            DriverState::Submitted | DriverState::Running | DriverState::Unspecified => {}
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
