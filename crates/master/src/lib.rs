//! A master replica: its Raft node and the gRPC services it serves on one port.
//!
//! Every replica serves replication (to its peers) and the client API (to the CLI). A client
//! may call any replica: a follower forwards writes and linearizable reads to the leader, so
//! a client needs only one reachable master. Writes are stamped with the leader's clock and
//! carry the client's request id, so a retry after a failover is applied once.
//!
//! Every service sits behind a guard that checks the caller's role credential before the
//! request is read (`muster_proto::auth`: peers for replication, workers for their streams,
//! clients for the rest), and with a certificate the port serves TLS only.
//!
//! On a fresh data directory the replica with the smallest id in `peers` bootstraps the group;
//! on restart everything comes from disk.
//!
//! # Layout
//!
//! Three rooms, by what they serve:
//!
//! * `session`: the async shell that runs one leader per term (`muster_leader`, the leader as
//!   a pure state machine), proposes its commands and carries out its actions on the streams.
//! * [`grpc`]: the gRPC side: the worker and application streams, the client API (forwarded
//!   by followers to the leader), the callers' credentials, and [`grpc::wire`], which turns
//!   each message into a leader event or a log op.
//! * [`web`]: the HTTP side: the status as JSON and pages, the metrics at `/metrics`, sign-in,
//!   and Spark's REST submission gateway.
//!
//! [`config`] reads the settings file and queue files.

pub mod config;
pub mod grpc;
mod session;
pub mod web;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use muster_core::ids::RequestId;
use muster_leader::LeaderConfig;
use muster_proto::auth::{Credential, Role, Secret, Tokens, Verifier};
use muster_proto::transport::{TlsError, TlsFiles};
use muster_raft::{NodeError, NodeId, RaftNode, RaftSettings};
use muster_state::commands::Restore;
use muster_state::{Command, Op, StateConfig};
use tokio::net::TcpListener;
use tonic::service::interceptor::InterceptedService;

use crate::web::metrics::Metrics;

pub use grpc::apps::AppLinkService;
pub use grpc::client::ClusterService;
pub use grpc::workers::WorkerLinkService;
pub use web::spark_rest::SparkRest;
pub use web::submission::{Submissions, resource_pattern};

/// How to run one master replica.
#[derive(Clone, Debug)]
pub struct MasterConfig {
    /// This replica's id, a key of `peers`.
    pub id: NodeId,
    /// Where to listen, `host:port`.
    pub listen: String,
    /// Every replica of the group, this one included: id to `host:port`.
    pub peers: BTreeMap<NodeId, String>,
    /// The replica's data.
    pub data_dir: PathBuf,
    /// Raft timings.
    pub raft: RaftSettings,
    /// State machine settings, the same on every replica.
    pub state: StateConfig,
    /// The leader's timings and scheduling settings.
    pub leader: LeaderConfig,
    /// Where to serve the HTTP status endpoint, `host:port`, if at all.
    pub http: Option<String>,
    /// Where people reach those pages (`https://host:port`), for the links to them that
    /// executors are given: the pages of their output.
    pub pages: Option<String>,
    /// Spark's history server, which completed applications' pages link.
    pub history_server: Option<String>,
    /// Where to serve Spark's REST submission protocol, and how, if at all.
    pub spark_rest: Option<SparkRest>,
    /// The cluster's secret: every call must carry the credential of a role the called
    /// service serves. `None` checks nothing (loopback or `--insecure` only).
    pub secret: Option<Secret>,
    /// A second secret whose client credential is accepted too, and nothing else.
    pub client_secret: Option<Secret>,
    /// TLS: with a certificate and key the master serves TLS only, and with the CA it
    /// verifies the masters it calls.
    pub tls: TlsFiles,
    /// A saved snapshot (`muster snapshot save`) to give this new cluster once this master
    /// leads.
    pub restore: Option<Vec<u8>>,
}

/// Why a master could not run: the operator must fix something and start it again.
#[derive(Debug, thiserror::Error)]
pub enum MasterError {
    /// `peers` does not list this master.
    #[error("--peers does not list this master's id {0}")]
    NotAPeer(NodeId),
    /// `peers` gives this master another address than the one it listens on.
    #[error("--peers gives master {id} the address {peer_addr}, but it listens on {listen}")]
    AddressMismatch {
        /// This master's id.
        id: NodeId,
        /// Its address in `peers`.
        peer_addr: String,
        /// Where it listens.
        listen: String,
    },
    /// An address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// A client-only secret without the cluster's secret.
    #[error("--client-secret-file needs --secret-file too")]
    ClientSecretAlone,
    /// The TLS files are incomplete or unreadable.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The Raft node failed to open, bootstrap or stop.
    #[error(transparent)]
    Node(#[from] NodeError),
    /// The gRPC server failed.
    #[error("server failed: {0}")]
    Server(#[from] tonic::transport::Error),
    /// The gRPC server's task failed.
    #[error("server task failed: {0}")]
    ServerTask(#[from] tokio::task::JoinError),
    /// Raft stopped on its own (its storage failed): nothing more can be written here, and the
    /// log cannot be closed without blocking on that storage, so the process must end.
    #[error(
        "the Raft log stopped: {0}. What this master acknowledged is on disk; fix the cause \
         (a full disk, a failing one) and start it again, and it catches up"
    )]
    RaftStopped(String),
}

impl MasterConfig {
    fn validate(&self) -> Result<(), MasterError> {
        match self.peers.get(&self.id) {
            None => Err(MasterError::NotAPeer(self.id)),
            Some(addr) if addr != &self.listen => Err(MasterError::AddressMismatch {
                id: self.id,
                peer_addr: addr.clone(),
                listen: self.listen.clone(),
            }),
            Some(_) => Ok(()),
        }
    }
}

/// Runs a master replica until `shutdown` resolves, then stops Raft cleanly.
///
/// # Errors
///
/// [`MasterError::RaftStopped`] when Raft stopped on its own: then the log is left open (see
/// there), and the process must end without dropping what it still holds.
///
/// The configuration is inconsistent, the address cannot be bound, the data cannot be
/// opened, or bootstrapping failed.
pub async fn run(
    config: MasterConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), MasterError> {
    config.validate()?;
    let bind = async |addr: &str| {
        TcpListener::bind(addr)
            .await
            .map_err(|source| MasterError::Bind {
                addr: addr.to_owned(),
                source,
            })
    };
    let listener = bind(&config.listen).await?;
    let verifier = match (&config.secret, &config.client_secret) {
        (Some(secret), Some(clients)) => secret.verifier_with_clients(clients),
        (Some(secret), None) => secret.verifier(),
        (None, Some(_)) => return Err(MasterError::ClientSecretAlone),
        (None, None) => Verifier::open(),
    };
    let credential = |role| {
        config
            .secret
            .as_ref()
            .map_or_else(Credential::none, |secret| secret.credential(role))
    };
    let served_tls = config.tls.server()?;
    let dialer = config.tls.dialer()?;
    let raft = RaftSettings {
        peer_credential: credential(Role::Peer),
        peer_dialer: dialer.clone(),
        ..config.raft.clone()
    };
    let node = RaftNode::open(config.id, &config.data_dir, &raft, config.state.clone()).await?;
    let node = Arc::new(node);
    let smallest = config.peers.keys().next().copied();
    if smallest == Some(config.id) {
        node.bootstrap(&config.peers).await?;
    }
    let tokens = config
        .secret
        .as_ref()
        .map_or_else(Tokens::open, Secret::tokens);
    let metrics = Arc::new(Metrics::new());
    metrics.built_from(&config.raft.build);
    let sessions = session::Sessions::start(
        Arc::clone(&node),
        config.leader.clone(),
        tokens.clone(),
        config.pages.clone(),
        Arc::clone(&metrics),
    );
    if let Some(snapshot) = config.restore.clone() {
        tokio::spawn(restore(Arc::clone(&node), Arc::clone(&sessions), snapshot));
    }
    // What the HTTP endpoints call: this master's own client API, on one lazy connection,
    // for the callers their tokens name.
    let own_api = grpc::call::own_api(&config.listen, &dialer)?;
    let mut clients = vec![credential(Role::Client)];
    clients.extend(
        config
            .client_secret
            .iter()
            .map(|s| s.credential(Role::Client)),
    );
    let callers = grpc::callers::Callers::new(clients, tokens.clone());
    let (stop_http, http_stopped) = tokio::sync::oneshot::channel::<()>();
    if let Some(http) = &config.http {
        let listener = bind(http).await?;
        let stopped = async {
            let _ = http_stopped.await;
        };
        tokio::spawn(web::http::serve(
            listener,
            config.tls.https()?,
            web::http::Pages {
                grpc: own_api.clone(),
                credential: credential(Role::Client),
                callers: callers.clone(),
                spark_rest: config
                    .spark_rest
                    .as_ref()
                    .map(|rest| web::listener::reachable(&rest.listen, &config.listen)),
                history_server: config.history_server.clone(),
            },
            web::http::Replica {
                node: Arc::clone(&node),
                sessions: Arc::clone(&sessions),
                metrics: Arc::clone(&metrics),
            },
            stopped,
        ));
    }
    let (stop_spark_rest, spark_rest_stopped) = tokio::sync::oneshot::channel::<()>();
    if let Some(spark_rest) = &config.spark_rest {
        let listener = bind(&spark_rest.listen).await?;
        let gateway = web::spark_rest::Gateway::new(
            own_api.clone(),
            callers.clone(),
            spark_rest.submissions.clone(),
        );
        let stopped = async {
            let _ = spark_rest_stopped.await;
        };
        tokio::spawn(web::spark_rest::serve(
            listener,
            config.tls.https()?,
            gateway,
            stopped,
        ));
    }
    tracing::info!(id = config.id, listen = %config.listen, "master serving");
    let (stop_server, server_stopped) = tokio::sync::oneshot::channel::<()>();
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = served_tls {
        builder = builder.tls_config(tls)?;
    }
    let builder = builder.layer(grpc::rpc::CountCalls::new(metrics));
    let mut server = tokio::spawn(
        builder
            // A peer that vanished without closing its connection (a crashed host, a cut
            // network) is noticed in seconds, and its streams end.
            .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
            .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
            .add_service(InterceptedService::new(
                node.replication_service(),
                verifier.guard("Replication", &[Role::Peer]),
            ))
            .add_service(InterceptedService::new(
                ClusterService::server(
                    Arc::clone(&node),
                    Arc::clone(&sessions),
                    dialer,
                    tokens.clone(),
                ),
                verifier.guard("Cluster", &[Role::Client]),
            ))
            .add_service(InterceptedService::new(
                WorkerLinkService::server(Arc::clone(&node), Arc::clone(&sessions)),
                verifier.guard("WorkerLink", &[Role::Worker]),
            ))
            .add_service(InterceptedService::new(
                AppLinkService::server(Arc::clone(&node), Arc::clone(&sessions), tokens),
                verifier.guard("AppLink", &[Role::Client]),
            ))
            .serve_with_incoming_shutdown(muster_proto::transport::incoming(listener), async {
                let _ = server_stopped.await;
            }),
    );
    let mut failed = None;
    let served = tokio::select! {
        () = shutdown => None,
        served = &mut server => Some(served),
        reason = node.stopped() => {
            failed = Some(reason);
            None
        }
    };
    // Close the worker streams first: a graceful server stop waits for open streams.
    sessions.stop();
    let served = match served {
        Some(served) => served,
        None => {
            let _ = stop_server.send(());
            match tokio::time::timeout(SERVER_GRACE, &mut server).await {
                Ok(served) => served,
                Err(_) => {
                    server.abort();
                    Ok(Ok(()))
                }
            }
        }
    };
    let _ = stop_http.send(());
    let _ = stop_spark_rest.send(());
    if let Some(reason) = failed {
        tracing::error!(id = config.id, %reason, "Raft stopped: this master stops");
        // Not closed: closing flushes the log to the storage that failed, which blocks for
        // good. What was acknowledged is on disk; the caller ends the process.
        std::mem::forget(node);
        return Err(MasterError::RaftStopped(reason));
    }
    node.shutdown().await?;
    tracing::info!(id = config.id, "master stopped");
    Ok(served??)
}

/// How often a master pings an idle HTTP/2 connection.
const KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);
/// How long a ping may go unanswered before the connection is closed.
const KEEPALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a stopping master waits for open calls to finish.
const SERVER_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Gives a new cluster the state of a saved snapshot: once this master leads, it writes one
/// `Restore` command. Its request id comes from the bytes, so that of masters all given the
/// same file, the first to lead restores it and the others' writes return the same result;
/// a cluster that already holds work refuses it. Once restored, the leader's session starts
/// again, so that it recovers from the restored state (awaits its workers and applications).
async fn restore(node: Arc<RaftNode>, sessions: Arc<session::Sessions>, snapshot: Vec<u8>) {
    let request_id = RequestId::of_content("restore", &snapshot);
    let mut leadership = node.leadership();
    loop {
        while !leadership.borrow_and_update().is_leader {
            if leadership.changed().await.is_err() {
                return;
            }
        }
        let command = Command {
            at: muster_raft::now(),
            request_id: Some(request_id.clone()),
            term: None,
            op: Op::Restore(Restore {
                snapshot: snapshot.clone(),
            }),
        };
        match node.write(command).await {
            Ok(Ok(_)) => {
                tracing::info!("the saved snapshot is restored: recovering from it");
                sessions.stop();
                return;
            }
            Ok(Err(refused)) => {
                tracing::error!(%refused, "the saved snapshot was not restored");
                return;
            }
            Err(error) => {
                tracing::warn!(%error, "restoring the saved snapshot: trying again");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }
    }
}
