//! A master replica's Raft node: open it on a data directory, bootstrap or join a group, write
//! commands, read the state, and watch who leads.
//!
//! # Group commit
//!
//! openraft 0.9 appends each client write on its own and waits for its fsync before the
//! next, so one entry per request caps a leader at one request per fsync. Every write and
//! proposal therefore goes through one batching task: it keeps at most [`IN_FLIGHT`] entry
//! uncommitted, and while it commits, commands queue up; the next entry carries all of them
//! (up to [`MAX_BATCH`]) as one [`Op::Batch`], which every replica applies command by command
//! as if each had an entry of its own. A command alone is written as itself. Commands reach
//! the log in the order they were proposed.
//!
//! # Backpressure
//!
//! Client writes wait for an entry in a bounded queue ([`RaftSettings::max_queued_writes`]):
//! past the bound a write is refused at once, unqueued, as [`WriteError::Busy`] with how long
//! the writes ahead should take to commit, so that clients slow down instead of the queue,
//! its memory and every write's wait growing without end. The leader session's own
//! proposals (placements, launches, reports) are never refused, and Raft's traffic between
//! replicas does not pass through the queue.
//!
//! # Leadership transfer
//!
//! openraft 0.9 cannot hand the lead to a chosen replica, so [`RaftNode::transfer_leadership`]
//! does what the Raft thesis (§3.10) and etcd do, within openraft's leader lease. The leader
//! waits until the target nearly has the log, holds new writes, waits until the target has
//! every entry, then refuses linearizable reads (each would make it heartbeat), reports no
//! quorum (so its leader session ends), stops heartbeating, and once the followers' leases
//! have run out (an election timeout after the last heartbeat) asks the target to campaign at once
//! (`TimeoutNow`). The target, up to date and the first to campaign, wins; the old leader then
//! follows, and its held writes fail over to the new leader like any write during an
//! election. The target campaigns only for the leader it follows, in its term, and once no
//! AppendEntries has come for an election timeout: a late or stray request moves nothing. If
//! anything fails, heartbeats resume at once, before the followers' own election timeouts run
//! out, and the old leader starts a new session. Membership changes and transfers run one at
//! a time, and a transfer is refused while the membership changes.
//!
//! A command a leader session proposes is withdrawn, unwritten, once that session ends: a
//! session of the same term that follows (after a failed transfer or a short loss of quorum)
//! must not see its predecessor's decisions committed.
//!
//! # Log formats
//!
//! A command whose op needs a newer log format than the cluster's is refused before it is
//! queued ([`WriteError::TooNew`]), so that no master of an older build is sent what it
//! cannot read; the leader raises the format itself once every member reads it (`builds`),
//! and a master joins only if it reads the format in force.
//!
//! `membership` changes the group; `handover` moves the lead.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use muster_core::ids::Term;
use muster_proto::auth::Credential;
use muster_proto::transport::Dialer;
use muster_proto::v1::BuildInfo;
use muster_proto::v1::replication_server::ReplicationServer;
use muster_state::codec::encoded_len;
use muster_state::version::LogFormat;
use muster_state::{ClusterState, Command, Op, Outcome, StateConfig};
use openraft::error::{ForwardToLeader, RaftError};
use openraft::{Config, RaftMetrics, ServerState, SnapshotPolicy, TryAsRef};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};

use crate::builds::{self, Builds, Versions, held_back};
use crate::disk::Disk;
use crate::log_store::LogStore;
use crate::network::{APPEND_BUDGET, Network};
use crate::service::ReplicationService;
use crate::state_machine::{SharedState, StateMachineStore};
use crate::types::{Applied, Node, NodeId, Raft};

mod handover;
mod membership;

/// Timings and snapshot policy of a replica.
#[derive(Clone, Debug)]
pub struct RaftSettings {
    /// Leader heartbeat period, also the deadline of each AppendEntries RPC (ms).
    pub heartbeat_ms: u64,
    /// Election timeout range (ms): a follower that hears no leader for this long campaigns.
    pub election_timeout_ms: (u64, u64),
    /// Build a snapshot every this many applied entries.
    pub snapshot_every: u64,
    /// Entries kept in the log behind a snapshot, for followers a little behind.
    pub keep_after_snapshot: u64,
    /// sled's page cache, in bytes.
    pub cache_bytes: u64,
    /// Where to reach a peer's replication service instead of its membership address (a
    /// proxy, another network path); peers not listed are reached at their membership
    /// address.
    pub peer_routes: BTreeMap<NodeId, String>,
    /// What this replica's Raft calls to its peers carry: the peer credential of the
    /// cluster's secret, or none without one.
    pub peer_credential: Credential,
    /// How this replica connects to its peers: plain, or TLS against the cluster's CA.
    pub peer_dialer: Dialer,
    /// The build this replica runs, which it tells its peers.
    pub build: BuildInfo,
    /// The most client writes waiting for an entry at once; past it a write is refused as
    /// [`WriteError::Busy`] (backpressure). The leader's own proposals are never refused.
    pub max_queued_writes: usize,
    /// Keep the cluster's log format where it is when every member reads a newer one, until
    /// [`RaftNode::raise_log_format`] is asked (a soak after an upgrade, while the previous
    /// release may still be put back).
    pub hold_log_format: bool,
}

impl Default for RaftSettings {
    /// Tuned for gRPC between replicas with an fsync per append on modest disks. openraft
    /// campaigns after the leader's lease (the longest election timeout) and a random
    /// election timeout: 0.7 to 0.9 s after a leader dies.
    fn default() -> Self {
        Self {
            heartbeat_ms: 100,
            election_timeout_ms: (250, 450),
            snapshot_every: 10_000,
            keep_after_snapshot: 1_000,
            cache_bytes: 64 * 1024 * 1024,
            peer_routes: BTreeMap::new(),
            peer_credential: Credential::none(),
            peer_dialer: Dialer::plain(),
            build: this_build(String::new()),
            max_queued_writes: 2048,
            hold_log_format: false,
        }
    }
}

/// This build, made from `commit`: its release and the newest log format it reads.
pub fn this_build(commit: String) -> BuildInfo {
    BuildInfo {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        commit,
        log_format: LogFormat::NEWEST.0,
    }
}

impl RaftSettings {
    fn config(&self) -> Result<Config, NodeError> {
        Config {
            cluster_name: "muster".into(),
            heartbeat_interval: self.heartbeat_ms,
            election_timeout_min: self.election_timeout_ms.0,
            election_timeout_max: self.election_timeout_ms.1,
            install_snapshot_timeout: 10_000,
            max_payload_entries: 64,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(self.snapshot_every),
            max_in_snapshot_log_to_keep: self.keep_after_snapshot,
            ..Config::default()
        }
        .validate()
        .map_err(|e| NodeError::Config(Box::new(e)))
    }
}

/// Who leads, as this replica sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Leadership {
    /// The current term.
    pub term: Term,
    /// The leader's id and address, once a leader is known.
    pub leader: Option<(NodeId, String)>,
    /// Whether this replica is that leader.
    pub is_leader: bool,
}

/// Why a node could not start, stop or join its group: nothing to retry, the operator must
/// look.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The settings are inconsistent.
    #[error("invalid Raft settings: {0}")]
    Config(Box<openraft::ConfigError>),
    /// The data directory could not be opened.
    #[error("cannot open the Raft data in {path}: {source}")]
    Storage {
        /// The data directory.
        path: PathBuf,
        /// What failed.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Raft refused or failed.
    #[error("Raft failed: {0}")]
    Raft(Box<dyn std::error::Error + Send + Sync>),
}

/// Why a write or a linearizable read did not happen here: ask the leader, or try again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// This replica does not lead; the leader's id and address when known.
    #[error("{}", match .0 {
        Some((id, addr)) => format!("not the leader; master {id} at {addr} leads"),
        None => "not the leader, and no leader is known".to_owned(),
    })]
    NotLeader(Option<(NodeId, String)>),
    /// No quorum answered in time, or the node is shutting down.
    #[error("Raft unavailable: {0}")]
    Unavailable(String),
    /// The command is of a log format the cluster has not been raised to: some master runs
    /// a build that cannot read it. Says which.
    #[error("{0}")]
    TooNew(String),
    /// The command is of a log format no master is known not to read, but the cluster has
    /// not been raised to it yet (a new cluster raises it within seconds of hearing every
    /// member's build): worth sending again.
    #[error("{0}")]
    NotRaisedYet(String),
    /// The leader has as many client writes waiting for an entry as it takes: this one was
    /// not queued, so sending it again (after `retry_after`) applies it once.
    #[error(
        "the leader is busy: {queued} client writes wait to be committed; send this one \
         again in {} ms",
        retry_after.as_millis()
    )]
    Busy {
        /// Client writes waiting.
        queued: usize,
        /// How long the leader expects to take to commit them.
        retry_after: Duration,
    },
}

fn not_leader<E>(error: RaftError<NodeId, E>) -> WriteError
where
    E: TryAsRef<ForwardToLeader<NodeId, Node>> + fmt::Debug + fmt::Display,
{
    match error.forward_to_leader::<Node>() {
        Some(forward) => WriteError::NotLeader(
            forward
                .leader_id
                .zip(forward.leader_node.as_ref().map(|n| n.addr.clone())),
        ),
        None => WriteError::Unavailable(error.to_string()),
    }
}

/// How long a read waits for the leader's log, as it was when the read began, to be applied.
const READ_CATCH_UP: Duration = Duration::from_secs(2);

/// The most entries of batched commands uncommitted at once. One: while it commits, the
/// next batch gathers. Two, four and eight were measured too (`muster bench submit`, 64
/// clients): each made smaller batches and fewer writes per second.
pub const IN_FLIGHT: usize = 1;

/// The most commands in one entry (and at most [`APPEND_BUDGET`] bytes of them): a batch
/// must fit an AppendEntries message within its deadline.
pub const MAX_BATCH: usize = 256;

/// The least and the most a busy leader asks a client to wait before writing again.
const MIN_RETRY_AFTER: Duration = Duration::from_millis(20);
const MAX_RETRY_AFTER: Duration = Duration::from_secs(2);

/// A command waiting for an entry, and who waits for its result.
struct Proposal {
    command: Command,
    result: oneshot::Sender<Result<Applied, WriteError>>,
    /// Turns true when whoever proposed it no longer wants it written (a leader session
    /// that ended); `None` for a client's write.
    withdrawn: Option<watch::Receiver<bool>>,
    /// A client write's place among the queued ones, given back once it is in an entry.
    _queued: Option<OwnedSemaphorePermit>,
}

impl Proposal {
    fn withdrawn(&self) -> bool {
        self.withdrawn.as_ref().is_some_and(|w| *w.borrow())
    }
}

/// Proposes the leader's own `command` by `proposals`, outside the bound on client writes
/// and the log format check (a raise of the format itself).
fn propose_own(
    proposals: &mpsc::UnboundedSender<Proposal>,
    command: Command,
) -> impl Future<Output = Result<Applied, WriteError>> + use<> {
    let (result, applied) = oneshot::channel();
    let _ = proposals.send(Proposal {
        command,
        result,
        withdrawn: None,
        _queued: None,
    });
    async move {
        applied
            .await
            .unwrap_or_else(|_| Err(WriteError::Unavailable("Raft stopped".into())))
    }
}

/// One master replica's Raft node.
pub struct RaftNode {
    id: NodeId,
    raft: Raft,
    network: Network,
    /// Into the group-commit task.
    proposals: mpsc::UnboundedSender<Proposal>,
    /// The group-commit task's room for entries in flight; a transfer takes all of it to
    /// hold new writes.
    in_flight: Arc<Semaphore>,
    /// Room for client writes waiting for an entry ([`RaftSettings::max_queued_writes`]).
    queued_writes: Arc<Semaphore>,
    max_queued_writes: usize,
    /// How long the last entry took to commit, in microseconds: what a busy leader's retry
    /// hint is made of.
    last_commit_us: Arc<AtomicU64>,
    /// Set while this replica hands the lead over: reads are refused, and it counts as
    /// without a quorum (its leader session ends).
    transferring: AtomicBool,
    /// Membership changes, transfers and raises of the log format, one at a time.
    changes: Arc<tokio::sync::Mutex<()>>,
    heartbeat_ms: u64,
    /// Held so the database outlives the stores openraft drops when it stops: a node that
    /// is forgotten (after a storage failure) never closes it.
    _disk: Disk,
    state: SharedState,
    leadership: watch::Receiver<Leadership>,
    election_timeout_min_ms: u64,
    election_timeout_max_ms: u64,
    /// This replica's build and its members', as it last learned them while leading.
    versions: Versions,
    /// Whether it holds the cluster's log format where it is.
    hold_log_format: bool,
    /// Set when a leader sent entries this build cannot read.
    unreadable: watch::Sender<Option<String>>,
}

impl RaftNode {
    /// Opens the replica `id` on `data_dir` (created if missing) and starts Raft. A fresh
    /// directory starts an empty state; an existing one recovers from its latest snapshot
    /// and log. Must be called inside a tokio runtime.
    ///
    /// # Errors
    ///
    /// Invalid settings, or the data directory cannot be opened (for instance because another
    /// process holds it).
    pub async fn open(
        id: NodeId,
        data_dir: &Path,
        settings: &RaftSettings,
        state_config: StateConfig,
    ) -> Result<Self, NodeError> {
        let config = Arc::new(settings.config()?);
        let storage = |source: Box<dyn std::error::Error + Send + Sync>| NodeError::Storage {
            path: data_dir.to_owned(),
            source,
        };
        let disk = Disk::open(&data_dir.join("raft"), settings.cache_bytes)
            .map_err(|e| storage(e.into()))?;
        let log = LogStore::open(&disk, &data_dir.join("raft-mark")).map_err(storage)?;
        let state_machine = StateMachineStore::open(&disk, ClusterState::new(state_config))
            .map_err(|e| storage(e.into()))?;
        let state = state_machine.shared_state();
        let network = Network::new(
            settings.peer_routes.clone(),
            settings.peer_credential.clone(),
            settings.peer_dialer.clone(),
        );
        let raft = Raft::new(id, config, network.clone(), log, state_machine)
            .await
            .map_err(|e| NodeError::Raft(e.into()))?;
        let leadership = watch_leadership(id, &raft);
        let (proposals, queued) = mpsc::unbounded_channel();
        let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
        let last_commit_us = Arc::new(AtomicU64::new(0));
        tokio::spawn(commit_in_batches(
            raft.clone(),
            Arc::clone(&in_flight),
            Arc::clone(&last_commit_us),
            queued,
        ));
        let changes = Arc::new(tokio::sync::Mutex::new(()));
        let versions = Versions {
            raft: raft.clone(),
            network: network.clone(),
            own: settings.build.clone(),
            builds: Builds::default(),
            state: Arc::clone(&state),
        };
        let raising = proposals.clone();
        tokio::spawn(builds::learn(
            versions.clone(),
            Arc::clone(&changes),
            settings.hold_log_format,
            move |command| propose_own(&raising, command),
        ));
        Ok(Self {
            id,
            raft,
            network,
            proposals,
            in_flight,
            queued_writes: Arc::new(Semaphore::new(settings.max_queued_writes)),
            max_queued_writes: settings.max_queued_writes,
            last_commit_us,
            transferring: AtomicBool::new(false),
            changes,
            heartbeat_ms: settings.heartbeat_ms,
            _disk: disk,
            state,
            leadership,
            election_timeout_min_ms: settings.election_timeout_ms.0,
            election_timeout_max_ms: settings.election_timeout_ms.1,
            versions,
            hold_log_format: settings.hold_log_format,
            unreadable: watch::channel(None).0,
        })
    }

    /// This replica's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The gRPC service peers replicate through; serve it on this replica's address.
    pub fn replication_service(&self) -> ReplicationServer<ReplicationService> {
        ReplicationService::server(
            self.raft.clone(),
            Duration::from_millis(self.election_timeout_min_ms),
            self.versions.own.clone(),
            self.unreadable.clone(),
        )
    }

    /// Commits `command` and returns what applying it gave.
    ///
    /// # Errors
    ///
    /// [`WriteError::NotLeader`] with the leader to retry at, [`WriteError::Busy`] when
    /// [`RaftSettings::max_queued_writes`] client writes wait already (this one was not
    /// queued), or [`WriteError::Unavailable`]. A write that fails after a leader change may
    /// still have been committed: retry it with the same request id.
    pub async fn write(&self, command: Command) -> Result<Applied, WriteError> {
        let Ok(queued) = Arc::clone(&self.queued_writes).try_acquire_owned() else {
            return Err(self.busy());
        };
        self.submit(command, None, Some(queued))?.await
    }

    /// The refusal of a client write past the bound, with how long the queued writes should
    /// take to commit: as many entries as they fill, each as long as the last one took.
    fn busy(&self) -> WriteError {
        let queued = self.max_queued_writes - self.queued_writes.available_permits();
        let entries = u32::try_from(queued / MAX_BATCH + 1).unwrap_or(u32::MAX);
        let entry = Duration::from_micros(self.last_commit_us.load(Ordering::Relaxed));
        WriteError::Busy {
            queued,
            retry_after: (entry * entries).clamp(MIN_RETRY_AFTER, MAX_RETRY_AFTER),
        }
    }

    /// Submits `command` to the log and returns at once with a future of its result, so that
    /// commands proposed one after another reach the log in that order. Once `withdrawn`
    /// turns true (the proposing leader session ended), a command not written yet never is:
    /// a session of the same term that follows must not see its predecessor's decisions
    /// committed.
    ///
    /// # Errors
    ///
    /// Raft has stopped. The future resolves to [`WriteError::NotLeader`] when the entry was
    /// not committed by this leader, and to [`WriteError::Unavailable`] when it was withdrawn.
    pub fn propose(
        &self,
        command: Command,
        withdrawn: watch::Receiver<bool>,
    ) -> Result<impl Future<Output = Result<Applied, WriteError>> + Send + 'static, WriteError>
    {
        self.submit(command, Some(withdrawn), None)
    }

    /// Whether the cluster's log format admits writing entries of format `needs`: refused,
    /// naming the members that hold it back, while it does not.
    ///
    /// # Errors
    ///
    /// [`WriteError::TooNew`] while a member runs a build that cannot read `needs`,
    /// [`WriteError::NotRaisedYet`] while every member could but the format is not raised
    /// yet.
    pub fn admits(&self, needs: LogFormat) -> Result<(), WriteError> {
        if needs <= LogFormat::FIRST {
            return Ok(());
        }
        let effective = self.state.read().expect("state lock").log_format();
        if needs <= effective {
            return Ok(());
        }
        let members = builds::members(&self.raft.metrics().borrow());
        let builds = self.versions.builds.lock().expect("builds lock");
        let line = held_back(needs, effective, &members, &builds);
        // A member known to run an older build holds it back until upgraded; a member not
        // heard from yet only until it is.
        let held_back_by_a_build = members
            .iter()
            .any(|(id, _)| builds.get(id).is_some_and(|b| builds::reads(b) < needs));
        Err(if held_back_by_a_build {
            WriteError::TooNew(line)
        } else {
            WriteError::NotRaisedYet(line)
        })
    }

    fn submit(
        &self,
        command: Command,
        withdrawn: Option<watch::Receiver<bool>>,
        queued: Option<OwnedSemaphorePermit>,
    ) -> Result<impl Future<Output = Result<Applied, WriteError>> + Send + 'static, WriteError>
    {
        self.admits(command.op.introduced_in())?;
        let (result, receiver) = oneshot::channel();
        self.proposals
            .send(Proposal {
                command,
                result,
                withdrawn,
                _queued: queued,
            })
            .map_err(|_| WriteError::Unavailable("Raft stopped".into()))?;
        Ok(async move {
            receiver
                .await
                .unwrap_or_else(|_| Err(WriteError::Unavailable("Raft stopped".into())))
        })
    }

    /// Whether a quorum of replicas acknowledged this leader within the longest election
    /// timeout (check-quorum). `true` when not leading or not yet known; `false` while this
    /// replica hands the lead over.
    pub fn has_quorum(&self) -> bool {
        if self.transferring.load(Ordering::SeqCst) {
            return false;
        }
        let silence = self.raft.metrics().borrow().millis_since_quorum_ack;
        silence.is_none_or(|millis| millis <= self.election_timeout_max_ms)
    }

    /// Reads the state after confirming with a quorum that this replica still leads and has
    /// applied its whole log as it was when the call began.
    ///
    /// openraft's reads wait only for the committed index the leader knows. A leader that
    /// restarts stays leader in its term, with the committed index it last saved (not
    /// flushed: that would cost a second flush per write), and commits no entry of its own
    /// first: back with a follower that missed its last writes, it commits only what that
    /// follower has, and a read would miss writes it acknowledged before the crash. Its log
    /// holds every write it acknowledged, so waiting until the log as the read began is
    /// applied makes the read see them all; a read concurrent with writes waits for their
    /// commit at most.
    ///
    /// # Errors
    ///
    /// As [`RaftNode::write`], and [`WriteError::Unavailable`] when the log is not applied
    /// within `READ_CATCH_UP`.
    pub async fn read<T>(&self, read: impl FnOnce(&ClusterState) -> T) -> Result<T, WriteError> {
        if self.transferring.load(Ordering::SeqCst) {
            return Err(WriteError::Unavailable(
                "the lead is moving to another master: retry".into(),
            ));
        }
        let logged = self.raft.metrics().borrow().last_log_index;
        self.raft.ensure_linearizable().await.map_err(not_leader)?;
        if logged.is_some() {
            self.raft
                .wait(Some(READ_CATCH_UP))
                .applied_index_at_least(logged, "a read waits for the log it began with")
                .await
                .map_err(|error| {
                    WriteError::Unavailable(format!("the log is not applied yet: {error}"))
                })?;
        }
        Ok(read(&self.state.read().expect("state lock")))
    }

    /// The members this replica, as leader, has not heard from for the longest election
    /// timeout (down, frozen or cut off); none when it does not lead.
    pub fn silent_members(&self) -> BTreeSet<NodeId> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        if metrics.state != ServerState::Leader {
            return BTreeSet::new();
        }
        let patience = Duration::from_millis(self.election_timeout_max_ms);
        metrics
            .membership_config
            .membership()
            .nodes()
            .map(|(&id, _)| id)
            .filter(|&id| id != self.id && !self.network.heard_within(id, patience))
            .collect()
    }

    /// Calls to each peer that failed since this replica started (refused, reset, timed out,
    /// or refused by the peer).
    pub fn peer_failed_attempts(&self) -> BTreeMap<NodeId, u64> {
        self.network.failed_attempts()
    }

    /// The state as this replica has applied it so far, which may lag the leader's.
    pub fn local_state(&self) -> SharedState {
        Arc::clone(&self.state)
    }

    /// Who leads, updated as it changes. Leader-only work should be keyed to the term.
    pub fn leadership(&self) -> watch::Receiver<Leadership> {
        self.leadership.clone()
    }

    /// openraft's metrics, for waiting on log and membership progress.
    pub fn metrics(&self) -> watch::Receiver<RaftMetrics<NodeId, Node>> {
        self.raft.metrics()
    }

    /// Resolves once Raft has stopped for good on its own: its storage failed (a full disk,
    /// an I/O error) or it panicked. What stopped it, as text. openraft stops at the first
    /// storage error rather than go on from a state it cannot trust; what it acknowledged
    /// before is on disk, and a restart once the cause is fixed goes on from there.
    ///
    /// It also resolves when a leader sends entries of a log format this build does not read:
    /// the replica stops once, with a line that says which release to run, rather than
    /// refuse them on every retry.
    pub async fn stopped(&self) -> String {
        let mut metrics = self.raft.metrics();
        let mut unreadable = self.unreadable.subscribe();
        loop {
            if let Err(fatal) = &metrics.borrow_and_update().running_state {
                return fatal.to_string();
            }
            if let Some(line) = unreadable.borrow_and_update().clone() {
                return line;
            }
            tokio::select! {
                changed = metrics.changed() => if changed.is_err() {
                    return "Raft's core ended".to_owned();
                },
                _ = unreadable.changed() => {}
            }
        }
    }

    /// Raises the cluster's log format to the oldest every member reads, now, whether this
    /// replica holds it ([`RaftSettings::hold_log_format`]) or not: the format it was
    /// raised from and to, or why there is nothing to raise (a member that reads no newer
    /// one, or has not said which it reads).
    ///
    /// # Errors
    ///
    /// [`WriteError::NotLeader`] when this replica does not lead, or the raise was not
    /// committed.
    pub async fn raise_log_format(
        &self,
    ) -> Result<Result<(LogFormat, LogFormat), String>, WriteError> {
        let _one_change = self.changes.lock().await;
        self.versions
            .raise_now(|command| propose_own(&self.proposals, command))
            .await
    }

    /// Whether this replica holds the cluster's log format where it is while it leads
    /// ([`RaftSettings::hold_log_format`]).
    pub fn holds_log_format(&self) -> bool {
        self.hold_log_format
    }

    /// Each member's build, as this replica last learned it while leading: empty on a
    /// follower, and without the members that did not answer.
    pub fn member_builds(&self) -> BTreeMap<NodeId, BuildInfo> {
        self.versions.builds.lock().expect("builds lock").clone()
    }

    /// The underlying Raft handle.
    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// Stops Raft; the data directory can be reopened once this returns and the node is dropped.
    ///
    /// # Errors
    ///
    /// Raft's tasks did not stop cleanly.
    pub async fn shutdown(&self) -> Result<(), NodeError> {
        self.raft
            .shutdown()
            .await
            .map_err(|e| NodeError::Raft(e.into()))
    }
}

/// The group-commit task (see the module doc): writes what `queued` brings in entries of as
/// many commands as queued up while at most [`IN_FLIGHT`] entry was committing, within
/// [`MAX_BATCH`] commands and the bytes one AppendEntries carries (a larger command goes
/// alone).
async fn commit_in_batches(
    raft: Raft,
    in_flight: Arc<Semaphore>,
    last_commit_us: Arc<AtomicU64>,
    mut queued: mpsc::UnboundedReceiver<Proposal>,
) {
    // A command that did not fit the last batch: it opens the next one.
    let mut carried: Option<Proposal> = None;
    loop {
        let first = match carried.take() {
            Some(proposal) => proposal,
            None => match queued.recv().await {
                Some(proposal) => proposal,
                None => return,
            },
        };
        let Ok(slot) = Arc::clone(&in_flight).acquire_owned().await else {
            return;
        };
        // Checked once the slot is ours: a transfer holds it while the session that proposed
        // ends.
        if first.withdrawn() {
            withdraw(first);
            continue;
        }
        let mut bytes = encoded_len(&first.command);
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            let Ok(proposal) = queued.try_recv() else {
                break;
            };
            if proposal.withdrawn() {
                withdraw(proposal);
                continue;
            }
            let size = encoded_len(&proposal.command);
            if bytes + size > APPEND_BUDGET {
                carried = Some(proposal);
                break;
            }
            bytes += size;
            batch.push(proposal);
        }
        let (mut commands, waiters): (Vec<Command>, Vec<_>) =
            batch.into_iter().map(|p| (p.command, p.result)).unzip();
        let entry = if commands.len() == 1 {
            commands.pop().expect("one command")
        } else {
            Command {
                at: commands.last().expect("commands").at,
                request_id: None,
                term: None,
                op: Op::Batch(commands),
            }
        };
        // As the leader: in this term. An entry this leader appended may never be answered
        // if it loses the lead (a snapshot can cover it on its return), so a change of term
        // or of leader frees the slot and answers its waiters too.
        let mut metrics = raft.metrics();
        let led_in = {
            let m = metrics.borrow_and_update();
            (m.state == ServerState::Leader).then_some(m.current_term)
        };
        let written = Instant::now();
        match raft.client_write_ff(entry).await {
            Ok(committed) => {
                let last_commit_us = Arc::clone(&last_commit_us);
                tokio::spawn(async move {
                    let result = tokio::select! {
                        biased;
                        reply = committed => match reply {
                            Ok(Ok(response)) => Ok(response.data),
                            Ok(Err(error)) => Err(not_leader(RaftError::APIError(error))),
                            Err(_) => Err(WriteError::Unavailable("Raft stopped".into())),
                        },
                        () = lead_lost(&mut metrics, led_in) => Err(WriteError::Unavailable(
                            "the leader changed before the write was answered; it may have \
                             been committed: retry it with the same request id"
                                .into(),
                        )),
                    };
                    drop(slot);
                    let took = u64::try_from(written.elapsed().as_micros()).unwrap_or(u64::MAX);
                    last_commit_us.store(took, Ordering::Relaxed);
                    answer(waiters, result);
                });
            }
            Err(fatal) => answer(waiters, Err(WriteError::Unavailable(fatal.to_string()))),
        }
    }
}

/// Answers a withdrawn proposal without writing it.
fn withdraw(proposal: Proposal) {
    let _ = proposal.result.send(Err(WriteError::Unavailable(
        "withdrawn: the leader session that proposed it ended".into(),
    )));
}

/// Resolves once this replica no longer leads in `term`; never when it did not lead.
async fn lead_lost(metrics: &mut watch::Receiver<RaftMetrics<NodeId, Node>>, term: Option<u64>) {
    let Some(term) = term else {
        return std::future::pending().await;
    };
    loop {
        {
            let m = metrics.borrow_and_update();
            if m.state != ServerState::Leader || m.current_term != term {
                return;
            }
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// Gives each waiter its command's result: the entry's own, or its part of a batch's.
fn answer(
    waiters: Vec<oneshot::Sender<Result<Applied, WriteError>>>,
    result: Result<Applied, WriteError>,
) {
    if let [_] = waiters[..] {
        let waiter = waiters.into_iter().next().expect("one waiter");
        let _ = waiter.send(result);
        return;
    }
    match result {
        Ok(Ok(response)) => {
            let Outcome::Batch(results) = response.outcome else {
                unreachable!("a batch entry applies to a batch outcome")
            };
            for (waiter, result) in waiters.into_iter().zip(results) {
                let _ = waiter.send(Ok(result));
            }
        }
        other => {
            for waiter in waiters {
                let _ = waiter.send(other.clone());
            }
        }
    }
}

/// Follows openraft's server metrics and publishes [`Leadership`] whenever it changes.
fn watch_leadership(id: NodeId, raft: &Raft) -> watch::Receiver<Leadership> {
    let mut metrics = raft.server_metrics();
    let (sender, receiver) = watch::channel(Leadership::default());
    tokio::spawn(async move {
        loop {
            // Copy out and drop the borrow at once: openraft blocks while it is held.
            let leadership = {
                let m = metrics.borrow_and_update();
                let leader = m.current_leader.and_then(|leader| {
                    let node = m.membership_config.membership().get_node(&leader)?;
                    Some((leader, node.addr.clone()))
                });
                Leadership {
                    term: Term(m.vote.leader_id().term),
                    is_leader: m.state == ServerState::Leader && m.current_leader == Some(id),
                    leader,
                }
            };
            sender.send_if_modified(|current| {
                let changed = *current != leadership;
                *current = leadership;
                changed
            });
            if metrics.changed().await.is_err() {
                break;
            }
        }
    });
    receiver
}
