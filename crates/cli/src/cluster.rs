//! The commands that run or talk to masters.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::PathBuf;

use clap::Args;
use muster_core::model::{PassConfig, QueueConfig};
use muster_core::resources::Resources;
use muster_master::{MasterConfig, SessionConfig};
use muster_proto::v1::{
    KillRequest, Queue, SetQueuesRequest, StatusReply, StatusRequest, SubmitDriverRequest,
};
use muster_raft::RaftSettings;
use muster_state::StateConfig;
use muster_worker::agent::AgentConfig;
use serde::Deserialize;

use crate::client::{Masters, request_id};

/// Where the masters are, for every client command.
#[derive(Args)]
pub struct MastersArg {
    /// The masters, `HOST:PORT,...`; any one that answers will do.
    #[arg(long, env = "MUSTER_MASTERS")]
    pub masters: String,
}

/// `muster master`.
#[derive(Args)]
pub struct MasterArgs {
    /// This replica's id, one of the ids in --peers.
    #[arg(long)]
    id: u64,
    /// Where to listen, HOST:PORT; one port serves clients, workers and the other masters.
    #[arg(long)]
    listen: String,
    /// Every master of the group: ID=HOST:PORT,...
    #[arg(long)]
    peers: String,
    /// Where this replica keeps its Raft log and snapshots.
    #[arg(long)]
    data_dir: PathBuf,
    /// Seconds without a heartbeat before a worker is lost (default 15, or the config file's).
    #[arg(long)]
    worker_timeout: Option<f64>,
    /// Seconds a new leader waits for known workers and applications to come back (default 15).
    #[arg(long)]
    recovery_timeout: Option<f64>,
    /// Queues to apply when this master leads: a JSON list such as
    /// `[{"name": "prod", "prior": true}, {"name": "default", "threshold": 0.8}]`.
    #[arg(long)]
    queues: Option<PathBuf>,
    /// Master settings as a JSON object (see `MasterFile`); flags given too take precedence.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Serve the cluster status over HTTP here: `/json`, and a page at `/`.
    #[arg(long)]
    http: Option<String>,
    /// Reach these masters' replication at another address than the one in --peers (a
    /// proxy, another network path): ID=HOST:PORT,... The membership keeps --peers.
    #[arg(long, default_value = "")]
    peer_routes: String,
}

/// What `muster master --config FILE` may set. Every field is optional. The scheduling and
/// retry settings must be the same on every master.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct MasterFile {
    /// Seconds without a heartbeat before a worker is lost.
    worker_timeout_s: Option<f64>,
    /// Seconds a new leader waits for known workers and applications.
    recovery_timeout_s: Option<f64>,
    /// Seconds an application's client may be gone before its application is finished.
    app_grace_s: Option<f64>,
    /// Seconds within which workers heartbeat at the least (a leader that stood still for
    /// three of these blames no worker for the silence).
    heartbeat_interval_s: Option<f64>,
    /// Scheduling settings, as in a `muster plan` snapshot's `config` (the seed is ignored).
    scheduling: Option<PassConfig>,
    /// Spark's `spark.deploy.maxExecutorRetries`; negative disables.
    max_executor_retries: Option<i32>,
    /// Ended applications kept for status (`spark.deploy.retainedApplications`, 200).
    retained_apps: Option<usize>,
    /// Ended drivers kept for status (`spark.deploy.retainedDrivers`, 200).
    retained_drivers: Option<usize>,
}

/// Reads and parses a JSON file, naming the file and the field on failure.
fn read_json<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> Result<T, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut json = serde_json::Deserializer::from_str(&text);
    serde_path_to_error::deserialize(&mut json)
        .map_err(|e| format!("{}: {}: {}", path.display(), e.path(), e.inner()))
}

/// `muster worker`.
#[derive(Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    masters: MastersArg,
    /// Cores this worker offers.
    #[arg(long)]
    cores: u32,
    /// Memory this worker offers, in MB.
    #[arg(long)]
    memory: u64,
    /// Custom resources it offers: NAME=AMOUNT,...
    #[arg(long, default_value = "")]
    resources: String,
    /// Where drivers and executors get their directories (and the worker keeps its id).
    #[arg(long)]
    work_dir: PathBuf,
    /// The worker's id; by default a stable id kept in the work dir.
    #[arg(long)]
    id: Option<String>,
    /// The host name to report; by default this machine's.
    #[arg(long)]
    host: Option<String>,
    /// Seconds without an answer from the leader before the worker looks for a new one
    /// (keep it below the masters' recovery timeout).
    #[arg(long, default_value_t = 2.0)]
    leader_timeout: f64,
    /// Kill everything this worker runs once it has been cut off from every master for the
    /// masters' worker timeout: its work then never overlaps with its relaunch elsewhere, at
    /// the price of losing it in a master outage.
    #[arg(long)]
    fence: bool,
}

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

/// `muster submit`.
#[derive(Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    masters: MastersArg,
    /// A name for people.
    #[arg(long, default_value = "")]
    name: String,
    /// The queue to run in.
    #[arg(long, default_value = "default")]
    queue: String,
    /// Cores for the driver.
    #[arg(long, default_value_t = 1)]
    cores: u32,
    /// Memory for the driver, in MB.
    #[arg(long, default_value_t = 1024)]
    memory: u64,
    /// Restart the driver when it fails, and relaunch it elsewhere when its worker is lost.
    #[arg(long)]
    supervise: bool,
    /// The program and its arguments, after `--`.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// `muster kill`.
#[derive(Args)]
pub struct KillArgs {
    #[command(flatten)]
    masters: MastersArg,
    /// An application or driver id.
    id: String,
}

/// `muster queues`.
#[derive(Args)]
pub struct QueuesArgs {
    #[command(flatten)]
    masters: MastersArg,
    /// Replace the queues with those in this JSON file: `[{"name": "prod", "prior": true}, ...]`.
    #[arg(long)]
    set: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start: {e}"))
}

/// `ID=HOST:PORT,...` as given to `flag`.
fn parse_peers(flag: &str, list: &str) -> Result<BTreeMap<u64, String>, String> {
    list.split(',')
        .filter(|peer| !peer.trim().is_empty())
        .map(|peer| {
            let (id, addr) = peer
                .split_once('=')
                .ok_or_else(|| format!("{flag}: `{peer}` is not ID=HOST:PORT"))?;
            let id = id
                .trim()
                .parse()
                .map_err(|_| format!("{flag}: `{id}` is not a master id"))?;
            Ok((id, addr.trim().to_owned()))
        })
        .collect()
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn stop_signal() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}

fn log_to_stderr() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,openraft=warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

fn seconds(flag: &str, value: f64) -> Result<std::time::Duration, String> {
    std::time::Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{flag}: {value} is not a positive number of seconds"))
}

/// Runs a master replica until Ctrl-C or SIGTERM.
pub fn master(args: MasterArgs) -> Result<String, String> {
    log_to_stderr();
    let file: MasterFile = match &args.config {
        Some(path) => read_json(path)?,
        None => MasterFile::default(),
    };
    let queues = match &args.queues {
        Some(path) => {
            let queues: Vec<QueueConfig> = read_json(path)?;
            muster_core::model::validate_queues(&queues)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            Some(queues)
        }
        None => None,
    };
    let defaults = SessionConfig::default();
    let duration = |flag: &str, value: Option<f64>, default: std::time::Duration| {
        value.map_or(Ok(default), |v| seconds(flag, v))
    };
    let session = SessionConfig {
        worker_timeout: duration(
            "worker timeout",
            args.worker_timeout.or(file.worker_timeout_s),
            defaults.worker_timeout,
        )?,
        recovery_timeout: duration(
            "recovery timeout",
            args.recovery_timeout.or(file.recovery_timeout_s),
            defaults.recovery_timeout,
        )?,
        app_grace: duration("app grace", file.app_grace_s, defaults.app_grace)?,
        heartbeat_interval: duration(
            "heartbeat interval",
            file.heartbeat_interval_s,
            defaults.heartbeat_interval,
        )?,
        pass: file.scheduling.unwrap_or_default(),
        queues,
        ..defaults
    };
    let defaults = StateConfig::default();
    let state = StateConfig {
        max_executor_retries: file
            .max_executor_retries
            .unwrap_or(defaults.max_executor_retries),
        retained_apps: file.retained_apps.unwrap_or(defaults.retained_apps),
        retained_drivers: file.retained_drivers.unwrap_or(defaults.retained_drivers),
        ..defaults
    };
    let config = MasterConfig {
        id: args.id,
        listen: args.listen,
        peers: parse_peers("--peers", &args.peers)?,
        data_dir: args.data_dir,
        raft: RaftSettings {
            peer_routes: parse_peers("--peer-routes", &args.peer_routes)?,
            ..RaftSettings::default()
        },
        state,
        session,
        http: args.http,
    };
    runtime()?
        .block_on(muster_master::run(config, stop_signal()))
        .map_err(|e| e.to_string())?;
    Ok(String::new())
}

fn parse_resources(list: &str) -> Result<BTreeMap<String, u32>, String> {
    list.split(',')
        .filter(|r| !r.trim().is_empty())
        .map(|resource| {
            let (name, amount) = resource
                .split_once('=')
                .ok_or_else(|| format!("--resources: `{resource}` is not NAME=AMOUNT"))?;
            let amount = amount
                .trim()
                .parse()
                .map_err(|_| format!("--resources: `{amount}` is not an amount"))?;
            Ok((name.trim().to_owned(), amount))
        })
        .collect()
}

/// Runs a worker until Ctrl-C or SIGTERM; its processes stop with it.
pub fn worker(args: WorkerArgs) -> Result<String, String> {
    log_to_stderr();
    if args.cores == 0 || args.memory == 0 {
        return Err("--cores and --memory must be at least 1".to_owned());
    }
    let host = match args.host {
        Some(host) => host,
        None => nix::unistd::gethostname()
            .map_err(|e| e.to_string())?
            .to_string_lossy()
            .into_owned(),
    };
    let _lock = muster_worker::agent::lock_work_dir(&args.work_dir)
        .map_err(|e| format!("--work-dir: {e}"))?;
    let id = match args.id {
        Some(id) => id.as_str().into(),
        None => muster_worker::agent::stable_id(&args.work_dir, &host)
            .map_err(|e| format!("{}: {e}", args.work_dir.display()))?,
    };
    let leader_timeout = seconds("--leader-timeout", args.leader_timeout)?;
    let config = AgentConfig {
        masters: Masters::parse(&args.masters.masters)?.addrs().to_vec(),
        id,
        host,
        capacity: Resources::new(args.cores, args.memory)
            .with_custom(parse_resources(&args.resources)?),
        work_dir: args.work_dir,
        heartbeat_interval: leader_timeout / 4,
        leader_timeout,
        kill_grace: std::time::Duration::from_secs(10),
        fence: args.fence,
    };
    runtime()?.block_on(muster_worker::agent::run(config, stop_signal()));
    Ok(String::new())
}

fn fetch_status(masters: &MastersArg, local: bool) -> Result<StatusReply, String> {
    let masters = Masters::parse(&masters.masters)?;
    let request = StatusRequest { local };
    runtime()?.block_on(masters.call(async |mut c| c.status(request).await))
}

/// `muster status`.
pub fn status(args: ReadArgs) -> Result<String, String> {
    let status = fetch_status(&args.masters, args.local)?;
    if args.json {
        return Ok(muster_master::status_json(&status).to_string());
    }
    let header = format!(
        "leader {}  term {}  {}",
        status.leader,
        status.term,
        status.recovery_state().name()
    );
    let sections = [
        ("MEMBERS", members_table(&status)),
        ("WORKERS", workers_table(&status)),
        ("APPLICATIONS", apps_table(&status)),
        ("DRIVERS", drivers_table(&status)),
    ];
    let mut out = header;
    for (title, table) in sections {
        let _ = write!(out, "\n\n{title}\n{}", table.trim_end());
    }
    Ok(out.trim_end().to_owned())
}

/// One part of the status: as JSON under `key`, or as its table.
fn section(args: ReadArgs, key: &str, table: fn(&StatusReply) -> String) -> Result<String, String> {
    let status = fetch_status(&args.masters, args.local)?;
    if args.json {
        return Ok(muster_master::status_json(&status)[key].to_string());
    }
    Ok(table(&status).trim_end().to_owned())
}

/// `muster workers`.
pub fn workers(args: ReadArgs) -> Result<String, String> {
    section(args, "workers", workers_table)
}

/// `muster apps`.
pub fn apps(args: ReadArgs) -> Result<String, String> {
    section(args, "apps", apps_table)
}

/// `muster drivers`.
pub fn drivers(args: ReadArgs) -> Result<String, String> {
    section(args, "drivers", drivers_table)
}

/// `muster members`.
pub fn members(args: ReadArgs) -> Result<String, String> {
    section(args, "members", members_table)
}

fn members_table(status: &StatusReply) -> String {
    status
        .members
        .iter()
        .map(|m| format!("{:<4} {:<22} {}\n", m.id, m.addr, m.role().name()))
        .collect()
}

fn workers_table(status: &StatusReply) -> String {
    status
        .workers
        .iter()
        .map(|w| {
            let (capacity, used) = (
                w.capacity.clone().unwrap_or_default(),
                w.used.clone().unwrap_or_default(),
            );
            format!(
                "{:<34} {:<12} {:<14} cores {}/{}  memory {}/{} MB\n",
                w.id,
                w.host,
                w.state().name(),
                used.cores,
                capacity.cores,
                used.memory_mb,
                capacity.memory_mb
            )
        })
        .collect()
}

fn apps_table(status: &StatusReply) -> String {
    let mut out = String::new();
    for a in &status.apps {
        let _ = writeln!(
            out,
            "{:<28} {:<16} {:<10} {:<8} cores {}",
            a.id,
            a.name,
            a.queue,
            a.state().name(),
            a.cores_granted
        );
        if !a.waiting.is_empty() {
            let _ = writeln!(out, "  waiting: {}", a.waiting);
        }
        for e in &a.executors {
            let _ = writeln!(
                out,
                "  executor {:<4} {:<34} {:<10} cores {} pid {}",
                e.id,
                e.worker,
                e.state().name(),
                e.resources.as_ref().map_or(0, |r| r.cores),
                e.pid
            );
        }
    }
    out
}

fn drivers_table(status: &StatusReply) -> String {
    status
        .drivers
        .iter()
        .map(|d| {
            let exit = d.exit_code.map(|c| format!("exit {c}")).unwrap_or_default();
            let pid = if d.pid == 0 {
                String::new()
            } else {
                format!("pid {}", d.pid)
            };
            let waiting = if d.waiting.is_empty() {
                String::new()
            } else {
                format!("\n  waiting: {}", d.waiting)
            };
            format!(
                "{:<28} {:<16} {:<10} {:<11} {:<34} {pid}{exit}{waiting}\n",
                d.id,
                d.name,
                d.queue,
                d.state().name(),
                d.worker
            )
        })
        .collect()
}

/// `muster submit`.
pub fn submit(args: SubmitArgs) -> Result<String, String> {
    let masters = Masters::parse(&args.masters.masters)?;
    let (program, program_args) = args
        .command
        .split_first()
        .ok_or("no command given after `--`")?;
    let request = SubmitDriverRequest {
        request_id: request_id(),
        name: args.name,
        queue: args.queue,
        resources: Some((&Resources::new(args.cores, args.memory)).into()),
        command: program.clone(),
        args: program_args.to_vec(),
        env: Default::default(),
        supervise: args.supervise,
    };
    let reply =
        runtime()?.block_on(masters.call(async |mut c| c.submit_driver(request.clone()).await))?;
    Ok(reply.driver_id)
}

/// `muster kill`.
pub fn kill(args: KillArgs) -> Result<String, String> {
    let masters = Masters::parse(&args.masters.masters)?;
    let request = KillRequest {
        request_id: request_id(),
        id: args.id,
    };
    runtime()?.block_on(masters.call(async |mut c| c.kill(request.clone()).await))?;
    Ok(String::new())
}

/// `muster queues`.
pub fn queues(args: QueuesArgs) -> Result<String, String> {
    let Some(path) = args.set else {
        let status = fetch_status(&args.masters, false)?;
        if args.json {
            return Ok(muster_master::status_json(&status)["queues"].to_string());
        }
        return Ok(status
            .queues
            .iter()
            .map(|q| {
                format!(
                    "{:<16} prior {:<5} threshold {} max_capacity {}",
                    q.name, q.prior, q.threshold, q.max_capacity
                )
            })
            .collect::<Vec<_>>()
            .join("\n"));
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let configs: Vec<QueueConfig> = serde_json::from_str(&text)
        .map_err(|e| format!("{}: not a list of queues: {e}", path.display()))?;
    muster_core::model::validate_queues(&configs).map_err(|e| e.to_string())?;
    let queues = configs.iter().map(Queue::from).collect();
    let masters = Masters::parse(&args.masters.masters)?;
    let request = SetQueuesRequest {
        request_id: request_id(),
        queues,
    };
    runtime()?.block_on(masters.call(async |mut c| c.set_queues(request.clone()).await))?;
    Ok(String::new())
}
