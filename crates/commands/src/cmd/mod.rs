//! One module per subcommand, and what they share: the masters, secret and CA arguments, the
//! refusal to run open without a secret, the async runtime, the stop signal and logging.

pub mod app;
pub mod apps;
pub mod bench;
pub mod dev;
pub mod executor;
pub mod experiment;
pub mod job;
pub mod kill;
pub mod logs;
pub mod master;
pub mod members;
pub mod plan;
pub mod queues;
pub mod rest_token;
pub mod secrets;
pub mod simulate;
pub mod snapshot;
pub mod status;
pub mod submit;
pub mod users;
pub mod worker;
pub mod workers;

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::net::IpAddr;
use std::path::PathBuf;

use clap::Args;
use muster_core::model::resource_amounts;
use muster_core::resources::ResourceAmounts;
use muster_proto::auth::{
    CREDENTIAL_VARIABLE, Credential, Role, SECRET_FILE_VARIABLE, Secret, SecretFile,
};
use muster_proto::transport::{Dialer, TlsFiles};

use crate::error::CliError;
use muster_proto::masters::Masters;

/// Where the masters are and the cluster's secret, for every command that calls them.
#[derive(Args)]
pub struct MastersArg {
    /// The masters, `HOST:PORT,...`; any one that answers will do.
    #[arg(long, env = "MUSTER_MASTERS")]
    pub masters: String,
    #[command(flatten)]
    pub secret: SecretArg,
    #[command(flatten)]
    pub ca: CaArg,
}

impl MastersArg {
    /// The masters named, called with the client credential.
    ///
    /// # Errors
    ///
    /// The list is empty or malformed, or the secret or CA file is refused.
    pub fn parse(&self) -> Result<Masters, CliError> {
        Ok(Masters::parse(
            &self.masters,
            self.secret.credential(Role::Client)?,
            self.ca.dialer()?,
        )?)
    }
}

/// The CA that signed the masters' certificates.
#[derive(Args)]
pub struct CaArg {
    /// The PEM CA certificate that signed the masters' TLS certificates: connect with TLS and
    /// verify them. Without it, connections are plain.
    #[arg(long, env = "MUSTER_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
}

impl CaArg {
    /// How to connect: TLS against the CA when one is given.
    ///
    /// # Errors
    ///
    /// The CA file cannot be read.
    pub fn dialer(&self) -> Result<Dialer, CliError> {
        TlsFiles {
            ca: self.tls_ca.clone(),
            ..TlsFiles::default()
        }
        .dialer()
        .map_err(|e| CliError::BadInput(e.to_string()))
    }
}

/// The cluster's secret.
#[derive(Args)]
pub struct SecretArg {
    /// The cluster's secret: a file of at least 32 bytes readable by its owner only. Every
    /// master, worker and client of a cluster uses the same one; a named user's client gives
    /// their credential file (`muster users add`) instead.
    #[arg(long, env = SECRET_FILE_VARIABLE)]
    pub secret_file: Option<PathBuf>,
}

impl SecretArg {
    /// The secret, if one is given.
    ///
    /// # Errors
    ///
    /// The file cannot be read, is readable by others, or is too short.
    pub fn read(&self) -> Result<Option<Secret>, CliError> {
        read_secret(self.secret_file.as_deref())
    }

    /// The credential of `role`, or none without a secret. Without a secret file, a client
    /// credential handed over in `MUSTER_CREDENTIAL` (a worker gives its drivers one) serves
    /// the client role.
    ///
    /// # Errors
    ///
    /// As [`SecretArg::read`], or a handed-over credential that is not one.
    pub fn credential(&self, role: Role) -> Result<Credential, CliError> {
        if let Some(path) = &self.secret_file {
            let file = SecretFile::read(path).map_err(|e| CliError::BadInput(e.to_string()))?;
            return match file {
                SecretFile::Cluster(secret) => Ok(secret.credential(role)),
                SecretFile::User(credential) if role == Role::Client => Ok(credential),
                SecretFile::User(_) => Err(CliError::BadInput(format!(
                    "{} holds a user's credential, which serves clients only",
                    path.display()
                ))),
            };
        }
        match std::env::var(CREDENTIAL_VARIABLE) {
            Ok(text) if role == Role::Client => Credential::from_text(&text)
                .map_err(|e| CliError::BadInput(format!("{CREDENTIAL_VARIABLE}: {e}"))),
            _ => Ok(Credential::none()),
        }
    }
}

/// The secret in the file at `path`, if one is given.
///
/// # Errors
///
/// The file cannot be read, is readable by others, or is too short.
pub fn read_secret(path: Option<&std::path::Path>) -> Result<Option<Secret>, CliError> {
    path.map(Secret::read)
        .transpose()
        .map_err(|e| CliError::BadInput(e.to_string()))
}

/// Whether `addr` (`HOST:PORT`) is on this machine only.
fn is_loopback(addr: &str) -> bool {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Refuses to run a master or worker open to other machines by accident, unless `insecure`:
/// without a secret anyone there could run commands on every worker, and without TLS the
/// credentials cross the network in the clear for anyone on the path to replay.
///
/// # Errors
///
/// A non-loopback address among `addrs`, no `--insecure`, and no secret or no TLS.
pub fn refuse_open(
    secret: Option<&Secret>,
    tls: bool,
    insecure: bool,
    addrs: &[&str],
) -> Result<(), CliError> {
    let Some(open) = addrs.iter().find(|addr| !is_loopback(addr)) else {
        return Ok(());
    };
    if insecure {
        return Ok(());
    }
    if secret.is_none() {
        return Err(CliError::BadInput(format!(
            "no secret (--secret-file or MUSTER_SECRET_FILE), and {open} is reachable from \
             other machines: anyone there could run commands on every worker. Give the \
             cluster's secret, use loopback addresses only, or pass --insecure"
        )));
    }
    if !tls {
        return Err(CliError::BadInput(format!(
            "no TLS (--tls-cert, --tls-key and --tls-ca; or MUSTER_TLS_*), and {open} is \
             reachable from other machines: the cluster's credentials would cross the network \
             in the clear. Give the TLS files, use loopback addresses only, or pass --insecure"
        )));
    }
    Ok(())
}

/// With `insecure`, warns now and every minute that nothing is checked.
pub fn warn_if_insecure(insecure: bool, secret: Option<&Secret>) {
    if !insecure || secret.is_some() {
        return;
    }
    tokio::spawn(async {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(60));
        loop {
            every.tick().await;
            tracing::warn!(
                "--insecure: no secret, so anyone who reaches this cluster may run commands on its workers"
            );
        }
    });
}

/// What names a driver or an application, and the queue it runs in.
#[derive(Args)]
pub struct WorkArgs {
    /// A name for people; by default the program's file name.
    #[arg(long)]
    pub name: Option<String>,
    /// The queue to run in.
    #[arg(long, default_value = "default")]
    pub queue: String,
}

impl WorkArgs {
    /// The name given, else the file name of `program`.
    pub fn name_or_program(&self, program: &str) -> String {
        self.name.clone().unwrap_or_else(|| {
            let path = std::path::Path::new(program);
            path.file_name().map_or_else(
                || program.to_owned(),
                |name| name.to_string_lossy().into_owned(),
            )
        })
    }
}

/// A multi-threaded runtime for one command.
///
/// # Errors
///
/// The runtime cannot start.
pub fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Failed(format!("cannot start: {e}")))
}

/// The `muster` binary this process runs, for the processes it starts.
///
/// # Errors
///
/// The operating system cannot say.
pub fn this_program() -> Result<PathBuf, CliError> {
    std::env::current_exe().map_err(|e| CliError::Failed(format!("cannot find this program: {e}")))
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn stop_signal() {
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate_signal() => {}
    }
}

/// Resolves on SIGTERM.
pub async fn terminate_signal() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    terminate.recv().await;
}

/// How a long-running process writes its log.
#[derive(Clone, Copy, Debug, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Lines for people.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// `--log-format` of masters and workers.
#[derive(Args)]
pub struct LogArgs {
    /// Write the log (on standard error) as text or as one JSON object per line.
    #[arg(long, env = "MUSTER_LOG_FORMAT", value_enum, default_value_t)]
    pub log_format: LogFormat,
}

/// Logs to standard error in `format`, `info` by default (`RUST_LOG` overrides).
///
/// openraft logs every failed call to a peer: each replication attempt, twice, each vote
/// request and each heartbeat that confirms the lead for a read. The network logs a peer
/// going away and coming back instead (`muster_raft::network`), so these are left out. Its
/// core's warnings say only that it ignored a message outdated by an election or a
/// membership change, which happens at every start.
pub fn log_to_stderr(format: LogFormat) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;

    let levels = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        "info,openraft=warn,openraft::core::raft_core=error,openraft::replication=off,\
         openraft::engine::handler::replication_handler=off"
            .into()
    });
    let logged =
        tracing_subscriber::registry()
            .with(levels)
            .with(tracing_subscriber::filter::filter_fn(|event| {
                !is_failed_peer_call(event)
            }));
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logged
            .with(lines.with_ansi(std::io::stderr().is_terminal()))
            .init(),
        LogFormat::Json => logged.with(lines.json()).init(),
    }
}

/// Whether `event` is openraft's error for one failed call to a peer (a vote, or a read's
/// heartbeat): raised by its core, naming the peer (`target`) and the `error`.
fn is_failed_peer_call(event: &tracing::Metadata<'_>) -> bool {
    event.target() == "openraft::core::raft_core"
        && *event.level() == tracing::Level::ERROR
        && event.fields().field("target").is_some()
        && event.fields().field("error").is_some()
}

/// Custom resources given to `flag` as `NAME=AMOUNT,...` (an empty list is none).
///
/// # Errors
///
/// An entry that is not `NAME=AMOUNT`, an empty name or an amount of zero.
pub fn parse_resources(flag: &str, list: &str) -> Result<ResourceAmounts, CliError> {
    let bad = |what: String| CliError::BadInput(format!("{flag}: {what}"));
    let amounts = list
        .split(',')
        .filter(|r| !r.trim().is_empty())
        .map(|resource| {
            let (name, amount) = resource
                .split_once('=')
                .ok_or_else(|| bad(format!("`{resource}` is not NAME=AMOUNT")))?;
            let amount = amount
                .trim()
                .parse()
                .map_err(|_| bad(format!("`{amount}` is not an amount")))?;
            Ok((name.trim().to_owned(), amount))
        })
        .collect::<Result<ResourceAmounts, CliError>>()?;
    resource_amounts(flag, &amounts).map_err(|e| CliError::BadInput(e.to_string()))?;
    Ok(amounts)
}

/// A process's environment from `--env` entries: `NAME=VALUE`, or `NAME` for this command's
/// own value of it.
///
/// # Errors
///
/// An empty name, or a NAME without a value here.
pub fn parse_environment(entries: &[String]) -> Result<BTreeMap<String, String>, CliError> {
    entries
        .iter()
        .map(|entry| {
            let (name, value) = match entry.split_once('=') {
                Some((name, value)) => (name, value.to_owned()),
                None => {
                    let value = std::env::var(entry).map_err(|_| {
                        CliError::BadInput(format!(
                            "--env {entry}: no value given, and none in this environment"
                        ))
                    })?;
                    (entry.as_str(), value)
                }
            };
            if name.is_empty() {
                return Err(CliError::BadInput(format!("--env {entry}: no name")));
            }
            Ok((name.to_owned(), value))
        })
        .collect()
}

/// The program and its arguments given after `--`.
///
/// # Errors
///
/// Nothing was given.
pub fn program(command: &[String]) -> Result<(&String, &[String]), CliError> {
    command
        .split_first()
        .ok_or_else(|| CliError::BadInput("no command given after `--`".to_owned()))
}
