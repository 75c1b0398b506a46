//! `muster app run`: registers an application whose executors run a command, stays attached
//! printing executor events, and finishes the application on Ctrl-C. After a master failover
//! it re-attaches to the new leader; the application keeps its executors.
//!
//! While attached it reads dynamic-allocation commands on standard input, one per line:
//! `limit N` (cap the executor count; lowering it kills nothing), `limit none`, and
//! `release ID ...` (give executors back; set a limit first or they are replaced).

use std::time::{Duration, Instant};

use clap::Args;
use muster_proto::discovery::{LeaderFinder, leader_hint};
use muster_proto::v1::app_event::Body as Event;
use muster_proto::v1::app_link_client::AppLinkClient;
use muster_proto::v1::app_message::Body as Message;
use muster_proto::v1::{
    AppHeartbeat, AppMessage, FinishApp, RegisterApp, ReleaseExecutors, SetExecutorLimit,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

use super::{MastersArg, WorkArgs, program, runtime, stop_signal};
use crate::client::{Masters, request_id};
use crate::error::CliError;

/// How long the masters may stay unreachable before the command gives up.
const PATIENCE: Duration = Duration::from_secs(60);
/// How long the leader may leave heartbeats unanswered before the client looks for a new
/// one (below the masters' recovery timeout, so a frozen leader costs little).
const LEADER_TIMEOUT: Duration = Duration::from_secs(2);

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
    /// Most executors the application may hold.
    #[arg(long)]
    executor_limit: Option<u32>,
    /// The executor program and its arguments, after `--`.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// Why one attachment ended.
enum Detached {
    /// The application ended in this state.
    Ended(String),
    /// Try this master next.
    LeaderAt(String),
    /// Try the next master.
    Retry(String),
    /// The stream to the leader broke: find the leader again.
    Broken(String),
}

/// Runs the application until it ends.
pub fn run(args: AppRunArgs) -> Result<String, CliError> {
    let masters = args.masters.parse()?;
    let (program, program_args) = program(&args.command)?;
    let register = RegisterApp {
        request_id: request_id(),
        app_id: String::new(),
        name: args.work.name,
        user: std::env::var("USER").unwrap_or_default(),
        queue: args.work.queue,
        cores_max: args.cores_max,
        executor_cores: args.executor_cores,
        executor_memory_mb: args.executor_memory,
        executor_resources: Default::default(),
        command: program.clone(),
        args: program_args.to_vec(),
        env: Default::default(),
        executor_limit: args.executor_limit,
        app_token: String::new(),
    };
    runtime()?.block_on(follow(masters, register))
}

/// Parses one standard-input command.
fn parse_command(line: &str) -> Result<AppMessage, CliError> {
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
                "use `limit N`, `limit none` or `release ID ...`".to_owned(),
            ));
        }
    };
    Ok(AppMessage { body: Some(body) })
}

/// Reads commands from standard input on a thread of its own, for as long as it is open.
fn read_commands() -> mpsc::UnboundedReceiver<AppMessage> {
    let (commands, received) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { return };
            if line.trim().is_empty() {
                continue;
            }
            match parse_command(&line) {
                Ok(command) => {
                    if commands.send(command).is_err() {
                        return;
                    }
                }
                Err(error) => eprintln!("error: {error}"),
            }
        }
    });
    received
}

async fn follow(masters: Masters, mut register: RegisterApp) -> Result<String, CliError> {
    let mut stop = std::pin::pin!(stop_signal());
    let mut commands = read_commands();
    let mut finishing = false;
    let mut finder = LeaderFinder::new(masters.addrs().to_vec());
    let mut unreachable_since = Instant::now();
    loop {
        let addr = finder.next_master();
        let attached = attach(
            &addr,
            &masters,
            &mut register,
            &mut stop,
            &mut finishing,
            &mut commands,
        )
        .await;
        match attached {
            Ok(Detached::Ended(state)) => {
                return Ok(format!("application {} {state}", register.app_id));
            }
            Ok(Detached::LeaderAt(leader)) => {
                if unreachable_since.elapsed() > PATIENCE {
                    return Err(CliError::Unavailable(format!(
                        "no leader reachable for {PATIENCE:?}"
                    )));
                }
                tokio::time::sleep(finder.hinted(&leader)).await;
            }
            Ok(Detached::Retry(reason)) => {
                if unreachable_since.elapsed() > PATIENCE {
                    return Err(CliError::Unavailable(format!(
                        "no leader reachable for {PATIENCE:?}: {reason}"
                    )));
                }
                tokio::time::sleep(finder.failed()).await;
            }
            // The patience counts from when the last good stream broke.
            Ok(Detached::Broken(reason)) => {
                eprintln!("lost the leader ({reason}); reconnecting");
                unreachable_since = Instant::now();
                finder.found();
                finder.silent(&addr);
            }
            Err(error) => return Err(error),
        }
    }
}

/// One attachment to `addr`; `register.app_id` is set once the application is registered.
///
/// # Errors
///
/// The masters refused the application.
async fn attach(
    addr: &str,
    masters: &Masters,
    register: &mut RegisterApp,
    stop: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
    finishing: &mut bool,
    commands: &mut mpsc::UnboundedReceiver<AppMessage>,
) -> Result<Detached, CliError> {
    let retry = |e: String| Ok(Detached::Retry(e));
    let endpoint = match masters.dialer().endpoint(addr) {
        Ok(endpoint) => endpoint
            .connect_timeout(LEADER_TIMEOUT)
            .http2_keep_alive_interval(LEADER_TIMEOUT / 2)
            .keep_alive_timeout(LEADER_TIMEOUT),
        Err(e) => return retry(e.to_string()),
    };
    let (up, outbound) = mpsc::channel(16);
    let _ = up
        .send(AppMessage {
            body: Some(Message::Register(register.clone())),
        })
        .await;
    if *finishing {
        let _ = up
            .send(AppMessage {
                body: Some(Message::Finish(FinishApp {})),
            })
            .await;
    }
    // A frozen master accepts connections and never answers: bound the whole attempt.
    let attach = async {
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| format!("{addr}: {e}"))?;
        let mut request = tonic::Request::new(ReceiverStream::new(outbound));
        masters.credential().attach(request.metadata_mut());
        Ok::<_, String>(AppLinkClient::new(channel).run(request).await)
    };
    let attached = match tokio::time::timeout(LEADER_TIMEOUT, attach).await {
        Err(_) => return retry(format!("{addr}: no answer to the registration")),
        Ok(Err(error)) => return retry(error),
        Ok(Ok(attached)) => attached,
    };
    let mut events = match attached {
        Ok(response) => response.into_inner(),
        Err(status) if status.code() == Code::Unavailable => {
            return match leader_hint(&status, addr) {
                Some(leader) => Ok(Detached::LeaderAt(leader.to_owned())),
                None => retry(status.message().to_owned()),
            };
        }
        Err(status) => return Err(status.into()),
    };
    let mut heartbeats = tokio::time::interval(LEADER_TIMEOUT / 4);
    let mut heard = Instant::now();
    loop {
        tokio::select! {
            _ = heartbeats.tick() => {
                if heard.elapsed() > LEADER_TIMEOUT {
                    return Ok(Detached::Broken(format!("the leader was silent for {LEADER_TIMEOUT:?}")));
                }
                let _ = up.send(AppMessage { body: Some(Message::Heartbeat(AppHeartbeat {})) }).await;
            }
            event = events.message() => match event {
                Ok(Some(event)) => match event.body.inspect(|_| heard = Instant::now()) {
                    // The first registration names the app and proves it is ours: re-attach
                    // under this id, with this token, from now on.
                    Some(Event::Registered(registered)) if register.app_id.is_empty() => {
                        println!("{}", registered.app_id);
                        register.app_id = registered.app_id;
                        register.app_token = registered.app_token;
                    }
                    Some(Event::Executor(e)) => {
                        let exit = e.exit_code.map(|c| format!(" exit {c}")).unwrap_or_default();
                        let resources = muster_proto::convert::resources(e.resources.clone());
                        println!("executor {} on {}: {resources}, {}{exit}", e.executor_id, e.worker, e.state().name());
                    }
                    Some(Event::Ended(ended)) => return Ok(Detached::Ended(ended.state().name().to_owned())),
                    Some(Event::Registered(_) | Event::HeartbeatAck(_)) | None => {}
                },
                Ok(None) => return Ok(Detached::Broken("the master closed the stream".into())),
                Err(status) => return Ok(Detached::Broken(status.message().to_owned())),
            },
            Some(command) = commands.recv() => {
                if up.send(command).await.is_err() {
                    eprintln!("error: not sent, the stream to the master broke; try again");
                }
            }
            () = stop.as_mut(), if !*finishing => {
                *finishing = true;
                let _ = up.send(AppMessage { body: Some(Message::Finish(FinishApp {})) }).await;
            }
        }
    }
}
