//! A cluster of real replicas: each serves its replication service on a loopback port and
//! keeps its data in its own directory under one temporary directory.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use muster_raft::{NodeId, RaftNode, RaftSettings, WriteError};
use muster_state::commands::SubmitApp;
use muster_state::model::AppDescription;
use muster_state::{Command, Op, Outcome, RequestId, StateConfig, Timestamp};
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::sync::{Mutex, MutexGuard, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;

/// Held for the length of one cluster test.
pub struct Serial {
    _lock: MutexGuard<'static, ()>,
    finished: Arc<AtomicBool>,
}

impl Drop for Serial {
    fn drop(&mut self) {
        self.finished.store(true, Ordering::SeqCst);
    }
}

/// Cluster tests run one at a time: on two cores, parallel clusters starve each other's
/// heartbeats into spurious elections. A watchdog ends the process if a test outlives
/// [`TEST_LIMIT`], so a stuck test fails instead of hanging the run.
pub async fn serial() -> Serial {
    static SERIAL: Mutex<()> = Mutex::const_new(());
    let lock = SERIAL.lock().await;
    let finished = Arc::new(AtomicBool::new(false));
    let watched = Arc::clone(&finished);
    std::thread::spawn(move || {
        std::thread::sleep(TEST_LIMIT);
        if !watched.load(Ordering::SeqCst) {
            eprintln!("a cluster test ran longer than {TEST_LIMIT:?}; aborting");
            std::process::abort();
        }
    });
    Serial {
        _lock: lock,
        finished,
    }
}

/// The longest a cluster test may run.
const TEST_LIMIT: Duration = Duration::from_secs(240);

/// The `n`-th app submission, with its own request id.
pub fn submit_app(n: u64) -> Command {
    Command {
        at: Timestamp(1_700_000_000_000 + n),
        request_id: Some(RequestId(format!("submit-{n}"))),
        op: Op::SubmitApp(SubmitApp {
            desc: AppDescription {
                name: format!("app {n}"),
                user: "test".into(),
                queue: Default::default(),
                cores_max: Some(2),
                executor_cores: Some(1),
                executor_memory_mb: 512,
                executor_resources: Default::default(),
                command: "/bin/true".into(),
                args: Vec::new(),
                env: Default::default(),
            },
            executor_limit: None,
        }),
    }
}

struct Replica {
    node: Arc<RaftNode>,
    stop_server: oneshot::Sender<()>,
    server: JoinHandle<()>,
}

pub struct TestCluster {
    _dir: TempDir,
    settings: RaftSettings,
    addrs: BTreeMap<NodeId, String>,
    running: BTreeMap<NodeId, Replica>,
}

impl TestCluster {
    /// Starts replicas `1..=n` and bootstraps them as one group.
    pub async fn start(n: u64, settings: RaftSettings) -> Self {
        let mut cluster = Self {
            _dir: tempfile::tempdir().expect("temporary directory"),
            settings,
            addrs: BTreeMap::new(),
            running: BTreeMap::new(),
        };
        for id in 1..=n {
            cluster.spawn_replica(id).await;
        }
        let members = cluster.members();
        for id in 1..=n {
            cluster
                .node(id)
                .bootstrap(&members)
                .await
                .expect("bootstrap");
        }
        cluster
    }

    fn data_dir(&self, id: NodeId) -> PathBuf {
        self._dir.path().join(format!("replica-{id}"))
    }

    /// Opens replica `id` on its directory and serves it, on its old address if it had one.
    /// Returns the address.
    pub async fn spawn_replica(&mut self, id: NodeId) -> String {
        let listener = match self.addrs.get(&id) {
            Some(addr) => TcpListener::bind(addr)
                .await
                .expect("rebind the replica's address"),
            None => TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind a loopback port"),
        };
        let addr = listener.local_addr().expect("bound address").to_string();
        let node = RaftNode::open(
            id,
            &self.data_dir(id),
            &self.settings,
            StateConfig::default(),
        )
        .await
        .expect("open replica");
        let node = Arc::new(node);
        let (stop_server, stopped) = oneshot::channel();
        let service = node.replication_service();
        let server = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                    let _ = stopped.await;
                })
                .await
                .expect("replication server");
        });
        self.addrs.insert(id, addr.clone());
        self.running.insert(
            id,
            Replica {
                node,
                stop_server,
                server,
            },
        );
        addr
    }

    pub fn members(&self) -> BTreeMap<NodeId, String> {
        self.addrs.clone()
    }

    pub fn ids(&self) -> Vec<NodeId> {
        self.running.keys().copied().collect()
    }

    pub fn addr(&self, id: NodeId) -> String {
        self.addrs[&id].clone()
    }

    pub fn node(&self, id: NodeId) -> &RaftNode {
        &self.running[&id].node
    }

    /// Stops replica `id` as a crash would leave it: Raft and its server stop, its data stays.
    pub async fn stop(&mut self, id: NodeId) {
        let replica = self.running.remove(&id).expect("a running replica");
        replica.node.shutdown().await.expect("raft shuts down");
        let _ = replica.stop_server.send(());
        replica.server.await.expect("server task");
        assert_eq!(
            Arc::strong_count(&replica.node),
            1,
            "no one else holds the node"
        );
    }

    /// Stops every running replica. Call it at the end of each test: stores dropped by a
    /// runtime that is shutting down can block in sled's final flush.
    pub async fn shutdown(mut self) {
        for id in self.ids() {
            self.stop(id).await;
        }
    }

    /// Restarts a stopped replica from its data directory.
    pub async fn restart(&mut self, id: NodeId) {
        self.spawn_replica(id).await;
    }

    /// Waits until one running replica leads and every running replica knows it.
    pub async fn leader(&self, deadline: Duration) -> NodeId {
        let start = Instant::now();
        loop {
            let views: Vec<_> = self
                .running
                .values()
                .map(|r| r.node.leadership().borrow().clone())
                .collect();
            let leaders: BTreeSet<_> = views
                .iter()
                .filter(|l| l.is_leader)
                .map(|l| l.leader.clone())
                .collect();
            if let [Some((leader, _))] = leaders.into_iter().collect::<Vec<_>>().as_slice()
                && views
                    .iter()
                    .all(|l| l.leader.as_ref().map(|(id, _)| id) == Some(leader))
            {
                return *leader;
            }
            assert!(
                start.elapsed() < deadline,
                "no leader within {deadline:?}: {views:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Writes one command through whoever leads, following leader hints and retrying (with the
    /// same request id) until it is applied.
    pub async fn write(&self, command: Command) -> Outcome {
        let start = Instant::now();
        let mut target = self.leader(Duration::from_secs(30)).await;
        loop {
            match self.running.get(&target).map(|r| Arc::clone(&r.node)) {
                // A write can stay pending across a leader change: give up on it after a while
                // and retry under the same request id.
                Some(node) => {
                    match tokio::time::timeout(Duration::from_secs(5), node.write(command.clone()))
                        .await
                    {
                        Ok(Ok(applied)) => return applied.expect("the command applies").outcome,
                        Ok(Err(WriteError::NotLeader(Some((leader, _))))) => target = leader,
                        Ok(Err(_)) | Err(_) => target = self.leader(Duration::from_secs(30)).await,
                    }
                }
                None => target = self.leader(Duration::from_secs(30)).await,
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "write not applied within a minute"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Writes the commands `make(n)` for every `n` in `numbers` from `writers` concurrent
    /// tasks, and returns their outcomes in order.
    pub async fn write_many(
        &self,
        numbers: Range<u64>,
        writers: u64,
        make: fn(u64) -> Command,
    ) -> Vec<Outcome> {
        let cluster: &Self = self;
        let first = numbers.start;
        let mut outcomes = vec![Outcome::Done; (numbers.end - first) as usize];
        let tasks = (0..writers).map(|writer| {
            let numbers = numbers.clone();
            async move {
                let mut done = Vec::new();
                for n in numbers.skip(writer as usize).step_by(writers as usize) {
                    done.push((n, cluster.write(make(n)).await));
                }
                done
            }
        });
        for done in futures_join_all(tasks).await {
            for (n, outcome) in done {
                outcomes[(n - first) as usize] = outcome;
            }
        }
        outcomes
    }

    /// The voters of the group as `id` sees it.
    pub fn voters(&self, id: NodeId) -> BTreeSet<NodeId> {
        self.node(id)
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .collect()
    }

    /// Waits until replica `id` has purged its log up to at least `index`; returns the index.
    pub async fn wait_for_purge(&self, id: NodeId, index: u64, deadline: Duration) -> u64 {
        let metrics = self
            .node(id)
            .raft()
            .wait(Some(deadline))
            .metrics(|m| m.purged.is_some_and(|p| p.index >= index), "log purged")
            .await
            .expect("the leader purges its log behind snapshots");
        metrics.purged.expect("purged").index
    }

    /// Waits until every running replica has applied the same last entry, then checks that
    /// their states encode to the same bytes.
    pub async fn assert_replicas_agree(&self, deadline: Duration) {
        let start = Instant::now();
        loop {
            let applied: BTreeSet<_> = self
                .running
                .values()
                .map(|r| r.node.metrics().borrow().last_applied)
                .collect();
            let last_log: BTreeSet<_> = self
                .running
                .values()
                .map(|r| r.node.metrics().borrow().last_log_index)
                .collect();
            if applied.len() == 1
                && last_log.len() == 1
                && applied.iter().next().unwrap().map(|id| id.index)
                    == *last_log.iter().next().unwrap()
            {
                break;
            }
            assert!(
                start.elapsed() < deadline,
                "replicas did not converge: applied {applied:?}, logs {last_log:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let digests: BTreeSet<Vec<u8>> = self
            .running
            .values()
            .map(|r| r.node.local_state().read().unwrap().encode_snapshot())
            .collect();
        assert_eq!(
            digests.len(),
            1,
            "replicas applied the same log but hold different states"
        );
    }
}

/// Runs futures concurrently on this task and collects their outputs in order.
async fn futures_join_all<F: Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let handles: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut outputs = Vec::with_capacity(handles.len());
    let mut pending: Vec<_> = handles.into_iter().map(Some).collect();
    let mut results: Vec<Option<F::Output>> = (0..pending.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all_done = true;
        for (slot, result) in pending.iter_mut().zip(results.iter_mut()) {
            if let Some(future) = slot {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(output) => {
                        *result = Some(output);
                        *slot = None;
                    }
                    std::task::Poll::Pending => all_done = false,
                }
            }
        }
        if all_done {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    outputs.extend(
        results
            .into_iter()
            .map(|r| r.expect("every future finished")),
    );
    outputs
}
