//! The allocation log the master replicas agree on: openraft 0.9 with its log and snapshots
//! in sled, and replication over gRPC.
//!
//! # Layout
//!
//! * `types`: the type configuration. Entries are `muster_state::Command`s; applying one
//!   gives the command's `Response` or its deterministic refusal.
//! * [`Disk`]: the replica's sled database, whose flushes also sync what sled leaves in the
//!   drive's cache.
//! * [`LogStore`]: the log in sled. Appends, the vote and truncations are flushed to disk
//!   before openraft is told they happened. `mark` keeps what was made durable beside sled,
//!   so that a damaged log is refused at open ([`MarkError`]) instead of served.
//! * [`StateMachineStore`]: the `ClusterState` in memory; snapshots of it are taken every
//!   [`RaftSettings::snapshot_every`] entries and kept in sled, and the log behind them is
//!   purged. A restarted replica loads its latest snapshot and re-applies only the committed
//!   entries after it; a replica too far behind receives the leader's snapshot.
//! * `network` and `service`: openraft's three RPCs over gRPC (`proto/muster/v1/raft.proto`),
//!   carrying openraft's own messages encoded with bincode by `muster_state::codec`, which
//!   also encodes what the log and the snapshots hold on disk.
//! * `builds`: which build each member runs, as the leader learns it, and the raise of the
//!   cluster's log format once every member reads a newer one.
//! * [`RaftNode`]: what the master uses: open, bootstrap, membership, `write`, linearizable
//!   `read`, and a watch of who leads. Its writes share entries (group commit): commands
//!   that arrive while an entry commits go into the next one as a `Batch`.
//! * [`local::LocalCluster`]: a group of replicas in one process on loopback, for tests and
//!   benchmarks.
//!
//! # Caveats
//!
//! A write that fails across a leader change may still commit; callers retry with the same
//! request id, which the state machine deduplicates. Never wipe a replica's data and rejoin
//! it under the same id: remove it from the group and add it back under a new id.

// openraft fixes its large `StorageError` as the error of every storage method; boxing it in
// our helpers would only move the allocation.
#![allow(clippy::result_large_err)]

mod builds;
mod disk;
pub mod local;
mod log_store;
mod mark;
mod network;
mod node;
mod service;
mod state_machine;
mod types;

pub use builds::{BUILD_POLL, first_release, reads};
pub use disk::Disk;
pub use log_store::LogStore;
pub use mark::MarkError;
pub use network::{MAX_MESSAGE_BYTES, Network};
pub use node::{Leadership, NodeError, RaftNode, RaftSettings, WriteError, this_build};
pub use service::ReplicationService;
pub use state_machine::{SharedState, StateMachineStore};
pub use types::{Applied, Entry, Node, NodeId, Raft, TypeConfig};

/// The leader's wall-clock time, stamped on every command it writes: the only clock the
/// replicated state ever sees.
pub fn now() -> muster_core::ids::Timestamp {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    muster_core::ids::Timestamp(u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX))
}
