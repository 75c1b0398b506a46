//! A group of replicas inside one process, each serving replication on its own loopback port
//! with its data in its own directory: for tests and benchmarks of the real storage and
//! transport without separate processes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use muster_state::{Command, StateConfig};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::node::{NodeError, RaftNode, RaftSettings, WriteError};
use crate::types::{Applied, NodeId};

/// Why a local group did not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// A replica's address could not be bound.
    #[error("bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// Why not.
        source: std::io::Error,
    },
    /// A replica's data could not be opened, the group bootstrapped or a replica stopped.
    #[error(transparent)]
    Node(#[from] NodeError),
    /// The replica asked for is not running.
    #[error("replica {0} is not running")]
    NotRunning(NodeId),
    /// A replica's server did not stop cleanly.
    #[error("the server of replica {id}: {cause}")]
    Server {
        /// The replica.
        id: NodeId,
        /// What went wrong.
        cause: String,
    },
    /// No running replica led, known by all the others, in time.
    #[error("no agreed leader within {deadline:?}: {views}")]
    NoLeader {
        /// How long it waited.
        deadline: Duration,
        /// What each replica knew of the leadership.
        views: String,
    },
    /// A write was not applied in time.
    #[error("not applied within {0:?}")]
    NotApplied(Duration),
}

struct Replica {
    node: Arc<RaftNode>,
    stop_server: oneshot::Sender<()>,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
}

/// Replicas `1..=n` of one group, on loopback.
pub struct LocalCluster {
    dir: PathBuf,
    settings: RaftSettings,
    addrs: BTreeMap<NodeId, String>,
    running: BTreeMap<NodeId, Replica>,
}

impl LocalCluster {
    /// Starts replicas `1..=n` with their data under `dir` and bootstraps them as one group.
    ///
    /// # Errors
    ///
    /// A replica could not bind, open its data or bootstrap.
    pub async fn start(n: u64, settings: RaftSettings, dir: &Path) -> Result<Self, LocalError> {
        let mut cluster = Self {
            dir: dir.to_owned(),
            settings,
            addrs: BTreeMap::new(),
            running: BTreeMap::new(),
        };
        for id in 1..=n {
            cluster.spawn_replica(id).await?;
        }
        let members = cluster.members();
        for id in 1..=n {
            cluster.node(id).bootstrap(&members).await?;
        }
        Ok(cluster)
    }

    /// Opens replica `id` on its directory and serves it, on its old address if it had one.
    /// Returns its address.
    ///
    /// # Errors
    ///
    /// The address could not be bound or the data opened.
    pub async fn spawn_replica(&mut self, id: NodeId) -> Result<String, LocalError> {
        let bind = self.addrs.get(&id).map_or("127.0.0.1:0", String::as_str);
        let not_bound = |source| LocalError::Bind {
            addr: bind.to_owned(),
            source,
        };
        let listener = TcpListener::bind(bind).await.map_err(not_bound)?;
        let addr = listener.local_addr().map_err(not_bound)?.to_string();
        let data_dir = self.dir.join(format!("replica-{id}"));
        let node = RaftNode::open(id, &data_dir, &self.settings, StateConfig::default()).await?;
        let node = Arc::new(node);
        let (stop_server, stopped) = oneshot::channel::<()>();
        let service = node.replication_service();
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(muster_proto::transport::incoming(listener), async {
                    let _ = stopped.await;
                }),
        );
        self.addrs.insert(id, addr.clone());
        self.running.insert(
            id,
            Replica {
                node,
                stop_server,
                server,
            },
        );
        Ok(addr)
    }

    /// Every replica ever started, with its address.
    pub fn members(&self) -> BTreeMap<NodeId, String> {
        self.addrs.clone()
    }

    /// The running replicas.
    pub fn ids(&self) -> Vec<NodeId> {
        self.running.keys().copied().collect()
    }

    /// Replica `id`'s address.
    ///
    /// # Panics
    ///
    /// If replica `id` was never started.
    pub fn addr(&self, id: NodeId) -> String {
        self.addrs[&id].clone()
    }

    /// Running replica `id`.
    ///
    /// # Panics
    ///
    /// If replica `id` is not running.
    pub fn node(&self, id: NodeId) -> &RaftNode {
        &self.running[&id].node
    }

    /// Stops replica `id` as a crash would leave it: Raft and its server stop, its data stays.
    ///
    /// # Errors
    ///
    /// It was not running, or did not stop cleanly.
    pub async fn stop(&mut self, id: NodeId) -> Result<(), LocalError> {
        let replica = self.running.remove(&id).ok_or(LocalError::NotRunning(id))?;
        replica.node.shutdown().await?;
        let _ = replica.stop_server.send(());
        let server = |cause: String| LocalError::Server { id, cause };
        replica
            .server
            .await
            .map_err(|e| server(e.to_string()))?
            .map_err(|e| server(e.to_string()))
    }

    /// Stops every running replica. Stop a cluster before its runtime ends: sled stores
    /// dropped by a runtime that is shutting down can block in their last flush.
    ///
    /// # Errors
    ///
    /// A replica did not stop cleanly.
    pub async fn shutdown(mut self) -> Result<(), LocalError> {
        for id in self.ids() {
            self.stop(id).await?;
        }
        Ok(())
    }

    /// Waits until one running replica leads and every running replica knows it.
    ///
    /// # Errors
    ///
    /// No agreed leader within `deadline`.
    pub async fn leader(&self, deadline: Duration) -> Result<NodeId, LocalError> {
        let start = Instant::now();
        loop {
            let views: Vec<_> = self
                .running
                .values()
                .map(|r| r.node.leadership().borrow().clone())
                .collect();
            let leader = views
                .iter()
                .find(|l| l.is_leader)
                .and_then(|l| l.leader.as_ref().map(|(id, _)| *id));
            if let Some(leader) = leader
                && views
                    .iter()
                    .all(|l| l.leader.as_ref().map(|(id, _)| *id) == Some(leader))
            {
                return Ok(leader);
            }
            if start.elapsed() > deadline {
                return Err(LocalError::NoLeader {
                    deadline,
                    views: format!("{views:?}"),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Commits `command` through whoever leads, following leader hints and retrying under the
    /// same request id until it is applied or `deadline` passes.
    ///
    /// # Errors
    ///
    /// Not applied within `deadline`.
    pub async fn write(&self, command: Command, deadline: Duration) -> Result<Applied, LocalError> {
        let start = Instant::now();
        let mut target = self.leader(deadline).await?;
        while start.elapsed() < deadline {
            if let Some(node) = self.running.get(&target).map(|r| Arc::clone(&r.node)) {
                // A write can stay pending across a leader change: give up on it after a
                // while and retry.
                match tokio::time::timeout(Duration::from_secs(5), node.write(command.clone()))
                    .await
                {
                    Ok(Ok(applied)) => return Ok(applied),
                    Ok(Err(WriteError::NotLeader(Some((leader, _))))) => {
                        target = leader;
                        continue;
                    }
                    Ok(Err(_)) | Err(_) => {}
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            target = self
                .leader(deadline.saturating_sub(start.elapsed()))
                .await?;
        }
        Err(LocalError::NotApplied(deadline))
    }
}
