//! `muster worker`: the worker agent, until Ctrl-C or SIGTERM. What it runs keeps running for
//! the next agent on its work dir to adopt, unless `--stop-work-on-exit` says otherwise.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use muster_core::ids::WorkerId;
use muster_core::model::resource_amounts;
use muster_core::resources::{
    ResourceAddresses, ResourceAmounts, Resources, validate_addresses, without_default_addresses,
};
use muster_leader::config::seconds;
use muster_worker::agent::{AgentConfig, lock_work_dir, stable_id};
use muster_worker::cleanup::CleanupPolicy;
use muster_worker::isolation::{Cgroups, Limits};
use muster_worker::metrics::{Metrics, serve};
use muster_worker::shuffle::ShuffleServiceConfig;
use tracing::Instrument;

use muster_proto::auth::{CREDENTIAL_VARIABLE, Role};

use super::{
    LogArgs, MastersArg, log_to_stderr, refuse_open, runtime, stop_signal, warn_if_insecure,
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
    /// Custom resources it offers: NAME=AMOUNT (addresses 0 to AMOUNT-1) or
    /// NAME=ADDRESS,ADDRESS,... (a list runs to the next NAME=), e.g. `gpu=0,1,2,3,fpga=1`.
    #[arg(long, default_value = "")]
    resources: String,
    /// A custom resource whose addresses a script finds, as Spark's discovery scripts do:
    /// NAME=PATH, run once at start, printing `{"name": NAME, "addresses": [...]}`.
    /// Repeatable.
    #[arg(long, value_name = "NAME=PATH")]
    resource_discovery: Vec<String>,
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
    /// Stop every driver and executor when the agent stops (Ctrl-C or SIGTERM), as for a
    /// throw-away worker. Without it they keep running and the next agent started on the
    /// same work dir adopts them: restart or upgrade the agent without losing its work. To
    /// take a worker out for good, `muster workers drain` it first.
    #[arg(long, env = "MUSTER_STOP_WORK_ON_EXIT")]
    stop_work_on_exit: bool,
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
    /// Remove the directory of a driver or executor this many seconds after it ended
    /// (standalone's `spark.worker.cleanup.appDataTtl`: seven days).
    #[arg(long, value_name = "SECONDS", default_value_t = 7 * 24 * 3600)]
    cleanup_ttl: u64,
    /// Remove the oldest directories of ended processes early while the work dir holds
    /// more than this many MB.
    #[arg(long, value_name = "MB")]
    work_dir_cap: Option<u64>,
    /// How often to look for directories to remove, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 30 * 60)]
    cleanup_interval: u64,
    /// Run Spark's external shuffle service (from $SPARK_HOME) for the executors on this
    /// host, as a standalone Worker does: applications that set
    /// spark.shuffle.service.enabled=true keep their shuffle output when dynamic allocation
    /// gives executors back. One per host.
    #[arg(long, env = "MUSTER_SHUFFLE_SERVICE")]
    shuffle_service: bool,
    /// The shuffle service's port (Spark's spark.shuffle.service.port); executors here are
    /// told it.
    #[arg(long, value_name = "PORT", default_value_t = 7337)]
    shuffle_service_port: u16,
    /// A file, readable by its owner only, holding the secret of Spark's spark.authenticate:
    /// the shuffle service then serves only applications that set spark.authenticate=true
    /// and this secret as spark.authenticate.secret, as on a standalone cluster.
    #[arg(
        long,
        value_name = "FILE",
        env = "MUSTER_SHUFFLE_SERVICE_SECRET_FILE",
        requires = "shuffle_service"
    )]
    shuffle_service_secret_file: Option<PathBuf>,
}

/// The secret of Spark's `spark.authenticate` in the file at `path`.
///
/// # Errors
///
/// The file cannot be read, group or others may read it, or it holds no text (an empty one
/// is refused with the service's other settings).
fn spark_secret(path: &std::path::Path) -> Result<String, CliError> {
    let bad = |what: String| CliError::BadInput(format!("--shuffle-service-secret-file: {what}"));
    let bytes = muster_proto::auth::read_private(path).map_err(|e| bad(e.to_string()))?;
    String::from_utf8(bytes).map_err(|_| bad(format!("{} holds no text", path.display())))
}

/// The custom resources a worker offers and their addresses, from `--resources` and the
/// discovery scripts of `--resource-discovery`.
fn offered_resources(
    list: &str,
    discovery: &[String],
) -> Result<(ResourceAmounts, ResourceAddresses), CliError> {
    let bad = |flag: &str, what: String| CliError::BadInput(format!("{flag}: {what}"));
    // `NAME=` starts a resource; a word without `=` is one more address of the one before.
    let mut offered: Vec<(String, Vec<String>)> = Vec::new();
    for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        if let Some((name, first)) = word.split_once('=') {
            offered.push((name.trim().to_owned(), vec![first.trim().to_owned()]));
        } else if let Some((_, addresses)) = offered.last_mut() {
            addresses.push(word.to_owned());
        } else {
            return Err(bad("--resources", format!("`{word}` is not NAME=AMOUNT")));
        }
    }
    let (mut amounts, mut addresses) = (ResourceAmounts::new(), ResourceAddresses::new());
    for (name, list) in offered {
        if amounts.contains_key(&name) {
            return Err(bad("--resources", format!("`{name}` is given twice")));
        }
        // One number is an amount; anything else lists addresses.
        match list.as_slice() {
            [amount] if amount.parse::<u32>().is_ok() => {
                amounts.insert(name, amount.parse().expect("checked"));
            }
            _ => {
                amounts.insert(name.clone(), u32::try_from(list.len()).unwrap_or(u32::MAX));
                addresses.insert(name, list);
            }
        }
    }
    for entry in discovery {
        let (name, script) = entry.split_once('=').ok_or_else(|| {
            bad(
                "--resource-discovery",
                format!("`{entry}` is not NAME=PATH"),
            )
        })?;
        if amounts.contains_key(name) {
            return Err(bad(
                "--resource-discovery",
                format!("`{name}` is given by --resources too"),
            ));
        }
        let list = discover(name, script)
            .map_err(|what| bad("--resource-discovery", format!("{name}: {what}")))?;
        amounts.insert(
            name.to_owned(),
            u32::try_from(list.len()).unwrap_or(u32::MAX),
        );
        addresses.insert(name.to_owned(), list);
    }
    resource_amounts("--resources", &amounts).map_err(|e| CliError::BadInput(e.to_string()))?;
    validate_addresses("--resources", &amounts, &addresses)
        .map_err(|e| CliError::BadInput(e.to_string()))?;
    Ok((amounts, without_default_addresses(addresses)))
}

/// Runs the discovery script `script` of resource `name` and reads the addresses it prints
/// (Spark's `ResourceInformation` JSON).
fn discover(name: &str, script: &str) -> Result<Vec<String>, String> {
    #[derive(serde::Deserialize)]
    struct Found {
        name: String,
        addresses: Vec<String>,
    }
    let output = std::process::Command::new(script)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run `{script}`: {e}"))?;
    if !output.status.success() {
        return Err(format!("`{script}` failed: {}", output.status));
    }
    let found: Found = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("`{script}` printed no {{\"name\", \"addresses\"}} object: {e}"))?;
    if found.name != name {
        return Err(format!("`{script}` found `{}`, not `{name}`", found.name));
    }
    if found.addresses.is_empty() {
        return Err(format!("`{script}` found no address"));
    }
    Ok(found.addresses)
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
    let (custom, addresses) = offered_resources(&args.resources, &args.resource_discovery)?;
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
    let shuffle_service = match (args.shuffle_service, std::env::var_os("SPARK_HOME")) {
        (false, _) => None,
        (true, None) => {
            return Err(CliError::BadInput(
                "--shuffle-service runs Spark's own service: set SPARK_HOME to a Spark".into(),
            ));
        }
        (true, Some(home)) => {
            let secret = args
                .shuffle_service_secret_file
                .as_deref()
                .map(spark_secret)
                .transpose()?;
            // Read once: a restarted agent compares what it would start with what runs.
            let options = std::env::var("SPARK_SHUFFLE_OPTS").unwrap_or_default();
            let config = ShuffleServiceConfig::new(
                std::path::Path::new(&home),
                args.shuffle_service_port,
                options,
                secret,
            );
            Some(config.map_err(|e| CliError::BadInput(format!("--shuffle-service: {e}")))?)
        }
    };
    // The Spark its drivers find, said to the leader: Spark submissions run its
    // spark-submit.
    let spark_home = std::env::var_os("SPARK_HOME")
        .map(PathBuf::from)
        .filter(|home| {
            let found = home.join("bin").join("spark-submit").is_file();
            if !found {
                tracing::warn!(
                    spark_home = %home.display(),
                    "SPARK_HOME holds no bin/spark-submit: Spark submissions cannot run here"
                );
            }
            found
        });
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
        spark_home,
        credential: args.masters.secret.credential(Role::Worker)?,
        dialer: args.masters.ca.dialer()?,
        masters,
        id,
        host,
        rack: args.rack,
        driver_environment,
        capacity,
        addresses,
        work_dir: args.work_dir,
        heartbeat_interval: leader_timeout / 4,
        leader_timeout,
        kill_grace: std::time::Duration::from_secs(10),
        isolation,
        fence: args.fence,
        build: crate::build::worker(),
        stop_work_on_exit: args.stop_work_on_exit,
        cleanup: CleanupPolicy {
            ttl: Duration::from_secs(args.cleanup_ttl),
            cap_bytes: args.work_dir_cap.map(|mb| mb.saturating_mul(1024 * 1024)),
            every: Duration::from_secs(args.cleanup_interval.max(1)),
        },
        shuffle_service,
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn offered(list: &str) -> Result<(ResourceAmounts, ResourceAddresses), String> {
        offered_resources(list, &[]).map_err(|e| e.to_string())
    }

    #[test]
    fn resources_are_amounts_or_lists_of_addresses() {
        let (amounts, addresses) = offered("gpu=GPU-a,GPU-b,fpga=1").unwrap();
        assert_eq!(amounts, [("fpga".into(), 1), ("gpu".into(), 2)].into());
        assert_eq!(
            addresses,
            [("gpu".into(), vec!["GPU-a".into(), "GPU-b".into()])].into()
        );
        // Addresses 0 to 3 are what an amount of 4 has anyway.
        assert_eq!(offered("gpu=0,1,2,3").unwrap(), offered("gpu=4").unwrap());
        assert_eq!(offered("gpu=4").unwrap().1, ResourceAddresses::new());
        assert_eq!(offered("").unwrap(), Default::default());
    }

    #[test]
    fn bad_resources_say_what_is_wrong() {
        assert!(
            offered("0,1")
                .unwrap_err()
                .contains("`0` is not NAME=AMOUNT")
        );
        assert!(
            offered("gpu=a,a")
                .unwrap_err()
                .contains("address `a` given twice")
        );
        assert!(
            offered("gpu=1,gpu=2")
                .unwrap_err()
                .contains("`gpu` is given twice")
        );
        assert!(offered("gpu=0").unwrap_err().contains("gpu"));
    }

    #[test]
    fn a_discovery_script_finds_the_addresses() {
        let dir = tempfile::tempdir().unwrap();
        let script = |name: &str, output: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, format!("#!/bin/sh\necho '{output}'\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            format!("gpu={}", path.display())
        };
        let found = script("found", r#"{"name": "gpu", "addresses": ["3", "7"]}"#);
        let (amounts, addresses) =
            offered_resources("fpga=1", std::slice::from_ref(&found)).unwrap();
        assert_eq!(amounts["gpu"], 2);
        assert_eq!(addresses["gpu"], ["3", "7"]);
        let error =
            |list: &str, entry: String| offered_resources(list, &[entry]).unwrap_err().to_string();
        assert!(error("gpu=1", found).contains("given by --resources too"));
        let other = script("other", r#"{"name": "fpga", "addresses": ["0"]}"#);
        assert!(error("", other).contains("found `fpga`, not `gpu`"));
        let garbage = script("garbage", "gpu 0 1");
        assert!(error("", garbage).contains("printed no"));
        assert!(error("", "gpu=/nonexistent".into()).contains("cannot run"));
    }
}
