//! `muster worker`: the worker agent, until Ctrl-C or SIGTERM; its processes stop with it.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, ValueEnum};
use muster_core::ids::WorkerId;
use muster_core::resources::Resources;
use muster_master::config::seconds;
use muster_worker::agent::{AgentConfig, lock_work_dir, stable_id};
use muster_worker::isolation::{Cgroups, Limits};
use muster_worker::metrics::{Metrics, serve};
use tracing::Instrument;

use muster_proto::auth::{CREDENTIAL_VARIABLE, Role};

use super::{
    LogArgs, MastersArg, log_to_stderr, parse_resources, refuse_open, runtime, stop_signal,
    warn_if_insecure,
};
use crate::error::CliError;

/// `muster worker`.
#[derive(Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    log: LogArgs,
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
    /// The host name to report; by default this machine's. Applications' tasks that prefer
    /// a host name it.
    #[arg(long)]
    host: Option<String>,
    /// The rack this worker is in, for RACK_LOCAL tasks.
    #[arg(long, default_value = "")]
    rack: String,
    /// Seconds without an answer from the leader before the worker looks for a new one
    /// (keep it below the masters' recovery timeout).
    #[arg(long, default_value_t = 2.0)]
    leader_timeout: f64,
    /// Kill everything this worker runs once it has been cut off from every master for the
    /// masters' worker timeout: its work then never overlaps with its relaunch elsewhere, at
    /// the price of losing it in a master outage.
    #[arg(long)]
    fence: bool,
    /// Run without a secret against masters other machines reach. Warns every minute.
    #[arg(long)]
    insecure: bool,
    /// How drivers and executors are held to what they were granted: in control groups
    /// (`cgroups`: refuse to start without them), not at all (`none`), or in control
    /// groups where this machine offers them, with one warning where it does not (`auto`).
    #[arg(long, value_enum, default_value_t = Isolation::Auto)]
    isolation: Isolation,
    /// A process may use its granted memory times 1 + this ratio before the kernel kills it.
    #[arg(long, default_value_t = 0.0)]
    memory_overhead: f64,
    /// Cap each process's CPU time at its granted cores, rather than only sharing the CPUs
    /// in proportion to them.
    #[arg(long)]
    cpu_quota: bool,
    /// The most processes and threads one driver or executor may run at once.
    #[arg(long, default_value_t = Limits::default().max_processes)]
    max_processes: u64,
    /// Serve this worker's Prometheus metrics at `/metrics` on HOST:PORT (plain HTTP: bind
    /// it where only your Prometheus reaches).
    #[arg(long, value_name = "HOST:PORT")]
    http: Option<String>,
}

/// How a worker holds its processes to their grants (`--isolation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Isolation {
    /// Control groups where the machine offers them, else none, with a warning.
    Auto,
    /// Control groups, or no start.
    Cgroups,
    /// No limits.
    None,
}

impl WorkerArgs {
    /// The control groups the processes of worker `id` run in, if any.
    fn isolation(&self, id: &WorkerId) -> Result<Option<Cgroups>, CliError> {
        if !(self.memory_overhead.is_finite() && self.memory_overhead >= 0.0) {
            return Err(CliError::BadInput(format!(
                "--memory-overhead must be a ratio of 0 or more, not {}",
                self.memory_overhead
            )));
        }
        if self.max_processes == 0 {
            return Err(CliError::BadInput(
                "--max-processes must be at least 1".to_owned(),
            ));
        }
        let limits = Limits {
            memory_overhead: self.memory_overhead,
            cpu_quota: self.cpu_quota,
            max_processes: self.max_processes,
        };
        let opened = match self.isolation {
            Isolation::None => return Ok(None),
            Isolation::Auto | Isolation::Cgroups => Cgroups::open(id, limits),
        };
        match opened {
            Ok(cgroups) => Ok(Some(cgroups)),
            Err(error) if self.isolation == Isolation::Cgroups => {
                Err(CliError::Failed(format!("--isolation cgroups: {error}")))
            }
            Err(error) => {
                tracing::warn!(
                    "drivers and executors run without limits on memory, CPU and processes: \
                     {error} (--isolation none runs so without this warning)"
                );
                Ok(None)
            }
        }
    }
}

/// Runs a worker until Ctrl-C or SIGTERM.
///
/// # Errors
///
/// Bad flags, or the work dir is taken or unusable.
pub fn run(args: WorkerArgs) -> Result<String, CliError> {
    log_to_stderr(args.log.log_format);
    if args.cores == 0 || args.memory == 0 {
        return Err(CliError::BadInput(
            "--cores and --memory must be at least 1".to_owned(),
        ));
    }
    let custom = parse_resources("--resources", &args.resources)?;
    let capacity = Resources::new(args.cores, args.memory).with_custom(custom);
    let host = match &args.host {
        Some(host) => host.clone(),
        None => nix::unistd::gethostname()
            .map_err(|e| CliError::Failed(format!("cannot read the host name: {e}")))?
            .to_string_lossy()
            .into_owned(),
    };
    let _lock = lock_work_dir(&args.work_dir)
        .map_err(|e| CliError::BadInput(format!("--work-dir: {e}")))?;
    let id = match &args.id {
        Some(id) => id.as_str().into(),
        None => stable_id(&args.work_dir, &host)
            .map_err(|e| CliError::Failed(format!("{}: {e}", args.work_dir.display())))?,
    };
    let isolation = args.isolation(&id)?;
    let leader_timeout = seconds("--leader-timeout", args.leader_timeout)?;
    let masters = args.masters.parse()?.addrs().to_vec();
    let secret = args.masters.secret.read()?;
    let addrs: Vec<&str> = masters.iter().map(String::as_str).collect();
    let tls = args.masters.ca.tls_ca.is_some();
    refuse_open(secret.as_ref(), tls, args.insecure, &addrs)?;
    // Drivers call the masters as clients: a client credential, never the secret itself.
    let mut driver_environment = Vec::new();
    if let Some(credential) = args.masters.secret.credential(Role::Client)?.to_text() {
        driver_environment.push((CREDENTIAL_VARIABLE, credential));
    }
    if let Some(ca) = &args.masters.ca.tls_ca {
        let ca =
            std::path::absolute(ca).map_err(|e| CliError::BadInput(format!("--tls-ca: {e}")))?;
        driver_environment.push(("MUSTER_TLS_CA", ca.display().to_string()));
    }
    // This very `muster`, for drivers that call the masters through it (the Spark plug-in).
    if let Ok(program) = std::env::current_exe() {
        driver_environment.push(("MUSTER_BIN", program.display().to_string()));
    }
    let config = AgentConfig {
        credential: args.masters.secret.credential(Role::Worker)?,
        dialer: args.masters.ca.dialer()?,
        masters,
        id,
        host,
        rack: args.rack,
        driver_environment,
        capacity,
        work_dir: args.work_dir,
        heartbeat_interval: leader_timeout / 4,
        leader_timeout,
        kill_grace: std::time::Duration::from_secs(10),
        isolation,
        fence: args.fence,
    };
    // Everything the worker logs carries its id.
    let span = tracing::info_span!("worker", worker = %config.id);
    let metrics = Arc::new(Metrics::new());
    runtime()?.block_on(
        async {
            warn_if_insecure(args.insecure, secret.as_ref());
            if let Some(http) = &args.http {
                let listener = tokio::net::TcpListener::bind(http)
                    .await
                    .map_err(|e| CliError::Failed(format!("--http {http}: {e}")))?;
                let metrics = Arc::clone(&metrics);
                tokio::spawn(async move {
                    if let Err(error) = serve(listener, metrics, std::future::pending()).await {
                        tracing::error!(%error, "the metrics endpoint failed");
                    }
                });
            }
            muster_worker::agent::run(config, metrics, stop_signal()).await;
            Ok::<_, CliError>(())
        }
        .instrument(span),
    )?;
    Ok(String::new())
}
