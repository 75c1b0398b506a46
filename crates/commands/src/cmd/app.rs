//! `muster app run`: registers an application whose executors run a command, stays attached
//! printing executor events, and finishes the application on Ctrl-C. After a master failover
//! it re-attaches to the new leader; the application keeps its executors
//! ([`muster_driver::app`]).
//!
//! While attached it reads dynamic-allocation commands on standard input, one per line:
//! `limit N` (cap the executor count; lowering it kills nothing), `limit none`,
//! `release ID ...` (give executors back; set a limit first or they are replaced), and
//! `profile {"id": N, "executor_limit": N, "executor_memory_mb": MB, ...}` (executors of
//! another size, one of Spark's resource profiles: also `executor_cores`,
//! `executor_resources` as `{"gpu": 1}` and `env`; a profile's size never changes).
//!
//! With `--json` it is the link a program drives an application through (the Spark plug-in
//! does): every event is one JSON object per line, and the end of standard input (or SIGTERM,
//! but not Ctrl-C, which is the program's) finishes the application, so that an owner that
//! dies takes its application with it.

use std::collections::BTreeMap;

use clap::Args;
use muster_core::ids::millis;
use muster_driver::app::AppUpdate;
use muster_proto::exit;
use muster_proto::v1::app_message::Body as Message;
use muster_proto::v1::{
    FinishApp, RegisterApp, ReleaseExecutors, SetExecutorLimit, SetProfileLimit,
};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;

use super::{
    MastersArg, WorkArgs, parse_environment, parse_resources, program, runtime, stop_signal,
    terminate_signal,
};
use crate::error::CliError;
use crate::output;
use muster_proto::masters::{Masters, request_id};

/// `muster app run`.
#[derive(Args)]
pub struct AppRunArgs {
    #[command(flatten)]
    masters: MastersArg,
    #[command(flatten)]
    work: WorkArgs,
    /// Most cores the application may hold (Spark's cores.max).
    #[arg(long)]
    cores_max: Option<u32>,
    /// Cores per executor; unset, one executor per worker takes all the cores it is given.
    #[arg(long)]
    executor_cores: Option<u32>,
    /// Memory per executor, in MB.
    #[arg(long, default_value_t = 1024)]
    executor_memory: u64,
    /// Custom resources per executor: NAME=AMOUNT,...
    #[arg(long, default_value = "")]
    executor_resources: String,
    /// Most executors the application may hold.
    #[arg(long)]
    executor_limit: Option<u32>,
    /// The executors the application needs at once (a gang): while it holds none, the
    /// masters grant it all of them at once or nothing. Needs --executor-cores.
    #[arg(long)]
    min_executors: Option<u32>,
    /// Its priority in its queue: higher is served first (capped at the queue's
    /// max_priority).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i32,
    /// A variable of the executors' environment: NAME=VALUE, or NAME for this command's own
    /// value of it. May be given more than once.
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    env: Vec<String>,
    /// The application logs Spark events (`spark.eventLog.enabled`): once it has ended, its
    /// page links the masters' --history-server.
    #[arg(long)]
    logs_events: bool,
    /// The application's own web UI (http:// or https://), shown with it by `muster apps`
    /// and the status page.
    #[arg(long, value_name = "URL", default_value = "")]
    ui_address: String,
    /// Print events as JSON lines, and finish the application when standard input ends.
    #[arg(long)]
    json: bool,
    /// The executor program and its arguments, after `--`.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// Runs the application until it ends.
pub fn run(args: AppRunArgs) -> Result<String, CliError> {
    let masters = args.masters.parse()?;
    let (program, program_args) = program(&args.command)?;
    if args.priority != 0 {
        // A leader of an older release would register the application without it.
        super::status::admits_fourth("an application's priority", &args.masters)?;
    }
    let register = RegisterApp {
        request_id: request_id(),
        app_id: String::new(),
        name: args.work.name_or_program(program),
        user: std::env::var("USER").unwrap_or_default(),
        queue: args.work.queue,
        cores_max: args.cores_max,
        executor_cores: args.executor_cores,
        executor_memory_mb: args.executor_memory,
        executor_resources: parse_resources("--executor-resources", &args.executor_resources)?
            .into_iter()
            .collect(),
        command: program.clone(),
        args: program_args.to_vec(),
        env: parse_environment(&args.env)?.into_iter().collect(),
        executor_limit: args.executor_limit,
        app_token: String::new(),
        ui_address: args.ui_address,
        live_executor_ids: Vec::new(),
        min_executors: args.min_executors,
        driver_id: std::env::var("MUSTER_DRIVER_ID").unwrap_or_default(),
        priority: args.priority,
        logs_events: args.logs_events,
    };
    let format = if args.json {
        Format::Json
    } else {
        Format::Text
    };
    runtime()?.block_on(follow(masters, register, format))
}

/// A `profile` command's JSON: the executors of one of the application's resource profiles
/// it wants, and their size.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileCommand {
    id: u32,
    executor_limit: u32,
    #[serde(default)]
    executor_cores: Option<u32>,
    executor_memory_mb: u64,
    #[serde(default)]
    executor_resources: BTreeMap<String, u32>,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

/// Parses one standard-input command.
fn parse_command(line: &str) -> Result<Message, CliError> {
    if let Some(json) = line.trim_start().strip_prefix("profile ") {
        let profile: ProfileCommand =
            serde_json::from_str(json).map_err(|e| CliError::BadInput(format!("profile: {e}")))?;
        if profile.id == 0 {
            return Err(CliError::BadInput(
                "profile: ids start at 1; `limit N` sets the application's own size's".to_owned(),
            ));
        }
        return Ok(Message::SetProfileLimit(SetProfileLimit {
            profile_id: profile.id,
            executor_limit: profile.executor_limit,
            executor_cores: profile.executor_cores,
            executor_memory_mb: profile.executor_memory_mb,
            executor_resources: profile.executor_resources.into_iter().collect(),
            env: profile.env.into_iter().collect(),
        }));
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    let body = match words.as_slice() {
        ["limit", "none"] => Message::SetLimit(SetExecutorLimit {
            executor_limit: None,
        }),
        ["limit", n] => {
            let limit = n
                .parse()
                .map_err(|_| CliError::BadInput(format!("`{n}` is not an executor count")))?;
            Message::SetLimit(SetExecutorLimit {
                executor_limit: Some(limit),
            })
        }
        ["release", ids @ ..] if !ids.is_empty() => {
            let executor_ids = ids
                .iter()
                .map(|id| {
                    id.parse()
                        .map_err(|_| CliError::BadInput(format!("`{id}` is not an executor id")))
                })
                .collect::<Result<_, _>>()?;
            Message::Release(ReleaseExecutors { executor_ids })
        }
        _ => {
            return Err(CliError::BadInput(
                "use `limit N`, `limit none`, `release ID ...` or `profile {JSON}`".to_owned(),
            ));
        }
    };
    Ok(body)
}

/// Reads commands from standard input on a thread of its own, for as long as it is open;
/// with `finish_at_end`, its end finishes the application.
fn read_commands(commands: mpsc::Sender<Message>, finish_at_end: bool) {
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if line.trim().is_empty() {
                continue;
            }
            match parse_command(&line) {
                Ok(command) => {
                    if commands.blocking_send(command).is_err() {
                        return;
                    }
                }
                Err(error) => eprintln!("error: {error}"),
            }
        }
        if finish_at_end {
            let _ = commands.blocking_send(Message::Finish(FinishApp {}));
        }
    });
}

/// How updates are printed.
#[derive(Clone, Copy)]
enum Format {
    /// Lines for people.
    Text,
    /// One JSON object per line, for a program.
    Json,
}

/// Follows the application, printing its id and executor events, until it ends; the stop
/// signal, or a reader of standard output that has gone, finishes it.
async fn follow(
    masters: Masters,
    register: RegisterApp,
    format: Format,
) -> Result<String, CliError> {
    let (requests, received) = mpsc::channel(16);
    read_commands(requests.clone(), matches!(format, Format::Json));
    let (updates, mut printed) = mpsc::unbounded_channel();
    let link = muster_driver::app::run(masters, register, received, updates);
    let mut link = std::pin::pin!(link);
    // A program's link ends with its input or on SIGTERM; Ctrl-C is meant for the program
    // (it cancels a job in spark-shell), so it is caught and left alone.
    let _interrupts = match format {
        Format::Text => None,
        Format::Json => Some(
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                .map_err(|e| CliError::Failed(format!("cannot handle SIGINT: {e}")))?,
        ),
    };
    let mut stop = std::pin::pin!(async move {
        match format {
            Format::Text => stop_signal().await,
            Format::Json => terminate_signal().await,
        }
    });
    let mut app_id = String::new();
    let mut finishing = false;
    loop {
        let finish = tokio::select! {
            ended = &mut link => {
                while let Ok(update) = printed.try_recv() {
                    print_update(update, &mut app_id, format);
                }
                let state = ended?;
                return Ok(match format {
                    Format::Text => format!("application {app_id} {state}"),
                    Format::Json => json!({"event": "ended", "app_id": app_id, "state": state}).to_string(),
                });
            }
            Some(update) = printed.recv() => !print_update(update, &mut app_id, format),
            () = &mut stop, if !finishing => true,
        };
        if finish && !finishing {
            finishing = true;
            // Sent from a task of its own: the link must keep running to take it.
            let requests = requests.clone();
            tokio::spawn(async move { requests.send(Message::Finish(FinishApp {})).await });
        }
    }
}

/// Prints one update; `false` once nobody reads standard output.
fn print_update(update: AppUpdate, app_id: &mut String, format: Format) -> bool {
    if let AppUpdate::Registered(id) = &update {
        app_id.clone_from(id);
    }
    match format {
        Format::Text => print_text(update),
        Format::Json => output::line(update_json(update)),
    }
}

fn print_text(update: AppUpdate) -> bool {
    match update {
        AppUpdate::Registered(id) => output::line(id),
        AppUpdate::Executor(e) => {
            let exit = e
                .exit_code
                .map(|c| format!(" {}", exit::describe(c)))
                .unwrap_or_default();
            let resources = muster_proto::convert::resources(e.resources.clone());
            output::line(format_args!(
                "executor {} on {}: {resources}, {}{exit}",
                e.executor_id,
                e.worker,
                e.state().name()
            ))
        }
        AppUpdate::Preempted { executor_id, grace } => output::line(format_args!(
            "executor {executor_id} preempted for prior work: killed within {:.1} s",
            grace.as_secs_f64()
        )),
        AppUpdate::Draining {
            executor_id,
            kill_after,
        } => output::line(format_args!(
            "executor {executor_id}'s worker is drained: {}",
            kill_after.map_or("it may finish".to_owned(), |after| format!(
                "killed within {:.1} s",
                after.as_secs_f64()
            ))
        )),
        AppUpdate::ProfileRefused { profile_id, reason } => {
            eprintln!("resource profile {profile_id} refused: {reason}");
            true
        }
        AppUpdate::Reconnecting(reason) => {
            eprintln!("lost the leader ({reason}); reconnecting");
            true
        }
    }
}

/// An update as the JSON line `--json` prints.
fn update_json(update: AppUpdate) -> serde_json::Value {
    match update {
        AppUpdate::Registered(id) => json!({"event": "registered", "app_id": id}),
        AppUpdate::Executor(e) => {
            let resources = muster_proto::convert::resources(e.resources.clone());
            json!({
                "event": "executor",
                "executor_id": e.executor_id,
                "worker": e.worker,
                "state": e.state().name(),
                "exit_code": e.exit_code,
                "exit_reason": e.exit_code.and_then(exit::reason),
                "cores": resources.cores,
                "memory_mb": resources.memory_mb,
                "resources": resources.custom,
            })
        }
        AppUpdate::Preempted { executor_id, grace } => json!({
            "event": "preempted",
            "executor_id": executor_id,
            "grace_ms": millis(grace),
        }),
        AppUpdate::Draining {
            executor_id,
            kill_after,
        } => json!({
            "event": "draining",
            "executor_id": executor_id,
            "kill_after_ms": kill_after.map(millis),
        }),
        AppUpdate::ProfileRefused { profile_id, reason } => json!({
            "event": "profile_refused",
            "profile_id": profile_id,
            "reason": reason,
        }),
        AppUpdate::Reconnecting(reason) => json!({"event": "reconnecting", "reason": reason}),
    }
}
