//! Test helpers over [`LocalCluster`]: a temporary directory per cluster, one cluster test at a
//! time, and waits with deadlines.

use std::collections::BTreeSet;
use std::ops::Range;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use muster_core::ids::{RequestId, Timestamp};
use muster_raft::local::LocalCluster;
use muster_raft::{NodeId, RaftSettings};
use muster_state::commands::SubmitApp;
use muster_state::model::AppDescription;
use muster_state::{Command, Op, Outcome};
use tempfile::TempDir;
use tokio::sync::{Mutex, MutexGuard};

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
        term: None,
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

/// A local cluster under test, in its own temporary directory.
pub struct TestCluster {
    cluster: LocalCluster,
    _dir: TempDir,
}

impl Deref for TestCluster {
    type Target = LocalCluster;

    fn deref(&self) -> &LocalCluster {
        &self.cluster
    }
}

impl DerefMut for TestCluster {
    fn deref_mut(&mut self) -> &mut LocalCluster {
        &mut self.cluster
    }
}

impl TestCluster {
    pub async fn start(n: u64, settings: RaftSettings) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let cluster = LocalCluster::start(n, settings, dir.path())
            .await
            .expect("cluster starts");
        Self { cluster, _dir: dir }
    }

    pub async fn leader(&self, deadline: Duration) -> NodeId {
        self.cluster.leader(deadline).await.expect("a leader")
    }

    /// A running replica other than `leader`.
    pub fn follower_of(&self, leader: NodeId) -> NodeId {
        self.ids()
            .into_iter()
            .find(|&id| id != leader)
            .expect("a follower")
    }

    pub async fn stop(&mut self, id: NodeId) {
        self.cluster.stop(id).await.expect("replica stops");
    }

    /// Forgets the committed index replica `id` saved, as a crash before sled wrote it out
    /// would; the replica must be stopped.
    pub fn lose_saved_committed_index(&self, id: NodeId) {
        let raft = self._dir.path().join(format!("replica-{id}")).join("raft");
        let db = sled::open(&raft).expect("the stopped replica's sled database opens");
        let meta = db.open_tree("raft_meta").expect("its meta tree");
        meta.remove("committed")
            .expect("the committed index is removed");
        db.flush().expect("sled flushes");
    }

    pub async fn restart(&mut self, id: NodeId) {
        self.cluster
            .spawn_replica(id)
            .await
            .expect("replica restarts");
    }

    pub async fn spawn_replica(&mut self, id: NodeId) -> String {
        self.cluster
            .spawn_replica(id)
            .await
            .expect("replica starts")
    }

    pub async fn shutdown(self) {
        self.cluster.shutdown().await.expect("cluster stops");
    }

    /// Commits `command` and returns what applying it gave, refusals included.
    pub async fn cluster_write(&self, command: Command) -> muster_raft::Applied {
        self.cluster
            .write(command, Duration::from_secs(60))
            .await
            .expect("write committed")
    }

    pub async fn write(&self, command: Command) -> Outcome {
        let applied = self
            .cluster
            .write(command, Duration::from_secs(60))
            .await
            .expect("write applied");
        applied.expect("the command applies").outcome
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
    /// How many applications replica `id` holds.
    pub fn apps(&self, id: NodeId) -> usize {
        self.node(id).local_state().read().unwrap().apps().len()
    }

    /// Waits until replica `id` holds at least `count` applications.
    pub async fn wait_for_apps(&self, id: NodeId, count: usize, deadline: Duration) {
        let start = std::time::Instant::now();
        while self.apps(id) < count {
            assert!(
                start.elapsed() < deadline,
                "replica {id} holds {} of {count} applications",
                self.apps(id)
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

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
            let metrics: Vec<_> = self
                .ids()
                .into_iter()
                .map(|id| self.node(id).metrics().borrow().clone())
                .collect();
            let applied: BTreeSet<_> = metrics.iter().map(|m| m.last_applied).collect();
            let last_log: BTreeSet<_> = metrics.iter().map(|m| m.last_log_index).collect();
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
            .ids()
            .into_iter()
            .map(|id| {
                self.node(id)
                    .local_state()
                    .read()
                    .unwrap()
                    .encode_snapshot()
            })
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
