//! `muster master`: one master replica, until Ctrl-C or SIGTERM.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;
use muster_leader::config::MasterFile;
use muster_master::config::{raft_settings, read_json, read_queues};
use muster_master::{MasterConfig, SparkRest, Submissions, resource_pattern};
use muster_raft::RaftSettings;

use muster_proto::transport::TlsFiles;

use super::{
    CaArg, LogArgs, SecretArg, log_to_stderr, read_secret, refuse_open, runtime, stop_signal,
    warn_if_insecure,
};
use crate::error::CliError;

/// `muster master`.
#[derive(Args)]
pub struct MasterArgs {
    #[command(flatten)]
    log: LogArgs,
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
    /// Master settings: a JSON object with any of `worker_timeout_s`, `recovery_timeout_s`,
    /// `app_grace_s`, `heartbeat_interval_s`, `max_executor_retries`, `retained_apps`,
    /// `retained_drivers`, `scheduling` (spread_out_apps, spread_out_drivers,
    /// worker_selection, default_cores, max_drivers, driver_share), `preemption` (queues,
    /// delay_s, grace_s, max_fraction, capacities, within_queues), `snapshot_every`,
    /// `log_kept_after_snapshot`, `max_queued_writes` and `hold_log_format`; the book's "Files"
    /// reference says what each means. Flags given too take precedence.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Give this new cluster the state of a snapshot `muster snapshot save` wrote, once this
    /// master leads (give it to every master of the new cluster: the first to lead restores
    /// it). A cluster that already holds work refuses it.
    #[arg(long, value_name = "FILE")]
    restore: Option<PathBuf>,
    /// Serve the cluster status over HTTP here: `/json`, and a page at `/`.
    #[arg(long)]
    http: Option<String>,
    /// Where people reach those pages, for the links to them that executors are given
    /// (Spark's UI links each executor's output there); by default `http://` or, with TLS,
    /// `https://` and --http, with --listen's host when --http binds every address.
    #[arg(long, value_name = "URL", requires = "http")]
    pages_url: Option<String>,
    /// Spark's history server (`http://HOST:18080`): a completed application's page links
    /// its page there, for applications that log events (`spark.eventLog.enabled`).
    #[arg(long, value_name = "URL", requires = "http")]
    history_server: Option<String>,
    /// Serve Spark's REST submission protocol here (HOST:PORT; Spark's port is 6066):
    /// `spark-submit --deploy-mode cluster --master spark://HOST:PORT/TOKEN` runs its
    /// application as a Muster driver; TOKEN is what `muster rest-token` prints.
    #[arg(long, value_name = "HOST:PORT")]
    spark_rest: Option<String>,
    /// The Spark plug-in jar (`muster-spark.jar`) as the workers find it, for the drivers
    /// of --spark-rest submissions; unset, it must lie in the workers' $SPARK_HOME/jars.
    #[arg(long, value_name = "PATH", requires = "spark_rest")]
    spark_plugin: Option<String>,
    /// Take only --spark-rest submissions whose application resource matches this
    /// regular expression as a whole (`file:/apps/.*\.jar`); repeat for more. Unset: any.
    #[arg(long, value_name = "REGEX", requires = "spark_rest")]
    spark_rest_allow: Vec<String>,
    /// Reach these masters' replication at another address than the one in --peers (a
    /// proxy, another network path): ID=HOST:PORT,... The membership keeps --peers.
    #[arg(long, default_value = "")]
    peer_routes: String,
    #[command(flatten)]
    secret: SecretArg,
    /// A second secret whose client credential this master accepts too: hand it to people
    /// who submit work, without giving them worker or master rights. They use it as their
    /// --secret-file.
    #[arg(long, env = "MUSTER_CLIENT_SECRET_FILE")]
    client_secret_file: Option<PathBuf>,
    /// The PEM certificate this master serves TLS with (its names must cover the addresses
    /// in --peers); needs --tls-key and --tls-ca.
    #[arg(long, env = "MUSTER_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, env = "MUSTER_TLS_KEY")]
    tls_key: Option<PathBuf>,
    #[command(flatten)]
    ca: CaArg,
    /// Run without a secret on addresses other machines reach: anyone there could run
    /// commands on every worker. Warns every minute.
    #[arg(long)]
    insecure: bool,
}

/// `ID=HOST:PORT,...` as given to `flag`.
fn parse_peers(flag: &str, list: &str) -> Result<BTreeMap<u64, String>, CliError> {
    list.split(',')
        .filter(|peer| !peer.trim().is_empty())
        .map(|peer| {
            let bad = |what: String| CliError::BadInput(format!("{flag}: {what}"));
            let (id, addr) = peer
                .split_once('=')
                .ok_or_else(|| bad(format!("`{peer}` is not ID=HOST:PORT")))?;
            let id = id
                .trim()
                .parse()
                .map_err(|_| bad(format!("`{id}` is not a master id")))?;
            Ok((id, addr.trim().to_owned()))
        })
        .collect()
}

/// Runs a master replica until Ctrl-C or SIGTERM.
///
/// # Errors
///
/// Bad flags or files; the master failed to start or stopped with an error.
pub fn run(args: MasterArgs) -> Result<String, CliError> {
    log_to_stderr(args.log.log_format);
    let file: MasterFile = match &args.config {
        Some(path) => read_json(path)?,
        None => MasterFile::default(),
    };
    let queues = args.queues.as_deref().map(read_queues).transpose()?;
    let secret = args.secret.read()?;
    let mut addrs = vec![args.listen.as_str()];
    addrs.extend(args.http.as_deref());
    addrs.extend(args.spark_rest.as_deref());
    let tls = args.tls_cert.is_some();
    refuse_open(secret.as_ref(), tls, args.insecure, &addrs)?;
    let insecure = args.insecure;
    let pages = match (args.pages_url, &args.http) {
        (Some(url), _) => Some(url),
        (None, Some(http)) => Some(pages_url(http, &args.listen, tls)),
        (None, None) => None,
    };
    if let Some(url) = &args.history_server
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(CliError::BadInput(format!(
            "--history-server: `{url}` is not an http:// or https:// URL"
        )));
    }
    let config = MasterConfig {
        id: args.id,
        listen: args.listen,
        peers: parse_peers("--peers", &args.peers)?,
        data_dir: args.data_dir,
        raft: raft_settings(
            &file,
            RaftSettings {
                peer_routes: parse_peers("--peer-routes", &args.peer_routes)?,
                build: crate::build::master(),
                ..RaftSettings::default()
            },
        )?,
        state: file.state(),
        leader: file.leader(args.worker_timeout, args.recovery_timeout, queues)?,
        pages,
        history_server: args.history_server,
        http: args.http,
        spark_rest: args
            .spark_rest
            .map(|listen| {
                let allowed_resources = args
                    .spark_rest_allow
                    .iter()
                    .map(|text| {
                        resource_pattern(text).map_err(|e| {
                            CliError::BadInput(format!("--spark-rest-allow {text}: {e}"))
                        })
                    })
                    .collect::<Result<_, _>>()?;
                Ok::<_, CliError>(SparkRest {
                    listen,
                    submissions: Submissions {
                        plugin: args.spark_plugin,
                        allowed_resources,
                    },
                })
            })
            .transpose()?,
        secret,
        client_secret: read_secret(args.client_secret_file.as_deref())?,
        tls: TlsFiles {
            cert: args.tls_cert,
            key: args.tls_key,
            ca: args.ca.tls_ca,
        },
        restore: args.restore.as_deref().map(read_snapshot).transpose()?,
    };
    let runtime = runtime()?;
    let ran = runtime.block_on(async {
        warn_if_insecure(insecure, config.secret.as_ref());
        muster_master::run(config, stop_signal()).await
    });
    if let Err(stopped @ muster_master::MasterError::RaftStopped(_)) = ran {
        // Its storage failed: closing the log would flush to it, which blocks for good
        // (what was acknowledged is on disk already). The process ends here instead.
        let error = CliError::from(stopped);
        eprintln!("error: {error}");
        std::process::exit(error.exit_code().into());
    }
    ran?;
    Ok(String::new())
}

/// A saved snapshot's bytes, checked to decode before any cluster is given them.
fn read_snapshot(path: &std::path::Path) -> Result<Vec<u8>, CliError> {
    let bytes = std::fs::read(path).map_err(|e| {
        CliError::BadInput(format!("--restore: cannot read {}: {e}", path.display()))
    })?;
    muster_state::ClusterState::decode_snapshot(&bytes)
        .map_err(|e| CliError::BadInput(format!("--restore: {}: {e}", path.display())))?;
    Ok(bytes)
}

/// Where people reach pages served at `http` (`HOST:PORT`): that host, or `listen`'s when
/// it binds every address, by `https` with TLS.
fn pages_url(http: &str, listen: &str, tls: bool) -> String {
    let scheme = if tls { "https" } else { "http" };
    format!(
        "{scheme}://{}",
        muster_master::web::listener::reachable(http, listen)
    )
}

#[cfg(test)]
mod tests {
    use super::pages_url;

    #[test]
    fn pages_are_linked_by_a_host_people_reach() {
        let listen = "m1.example:7077";
        assert_eq!(
            pages_url("m1.example:8080", listen, false),
            "http://m1.example:8080"
        );
        assert_eq!(
            pages_url("0.0.0.0:8080", listen, true),
            "https://m1.example:8080"
        );
        assert_eq!(
            pages_url("[::]:8080", listen, false),
            "http://m1.example:8080"
        );
    }
}
