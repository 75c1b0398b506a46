//! The state machine: the [`ClusterState`] in memory, applied from committed entries, with
//! snapshots kept in sled.
//!
//! The state itself is not written on every apply. Instead the latest snapshot is stored in
//! tree `snapshots` (its metadata and the encoded state), and the log store remembers the
//! committed index: a restarted replica loads its latest snapshot and openraft re-applies the
//! committed entries after it. A snapshot's bytes are taken in
//! [`RaftStateMachine::get_snapshot_builder`], which openraft runs in order with `apply`, so a
//! snapshot is always a consistent cut even though it is written out concurrently.

use std::io::Cursor;
use std::sync::{Arc, RwLock};

use muster_core::ids::Term;
use muster_state::version::LogFormat;
use muster_state::{ClusterState, Response};
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    AnyError, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, SnapshotMeta, StorageIOError,
    StoredMembership,
};

use crate::disk::Disk;
use crate::types::{Applied, Entry, Node, NodeId, StorageError, TypeConfig};
use muster_state::codec::{decode, decode_head, encode};

const CURRENT: &[u8] = b"current";

type Meta = SnapshotMeta<NodeId, Node>;

/// The cluster state, shared between the state machine (which writes it) and readers.
pub type SharedState = Arc<RwLock<ClusterState>>;

/// A replica's state machine.
pub struct StateMachineStore {
    state: SharedState,
    last_applied: Option<LogId<NodeId>>,
    last_membership: StoredMembership<NodeId, Node>,
    snapshots: Snapshots,
    /// Snapshots built by this replica since it started, for unique snapshot ids.
    built: u64,
}

impl StateMachineStore {
    /// Opens the state machine on `disk`, starting from the latest stored snapshot if any.
    ///
    /// # Errors
    ///
    /// sled failed, or the stored snapshot does not decode.
    pub fn open(disk: &Disk, initial: ClusterState) -> Result<Self, StorageError> {
        let snapshots = Snapshots {
            tree: disk
                .tree("snapshots")
                .map_err(|e| StorageIOError::read_snapshot(None, &e))?,
            disk: disk.clone(),
        };
        let mut store = Self {
            state: Arc::new(RwLock::new(initial)),
            last_applied: None,
            last_membership: StoredMembership::default(),
            snapshots,
            built: 0,
        };
        if let Some((meta, data)) = store.stored_snapshot()? {
            let state = decode_state(&meta, &data)?;
            store.restore(&meta, state);
        }
        Ok(store)
    }

    /// A handle on the state for readers.
    pub fn shared_state(&self) -> SharedState {
        Arc::clone(&self.state)
    }

    fn stored_snapshot(&self) -> Result<Option<(Meta, Vec<u8>)>, StorageError> {
        let Some(bytes) = self
            .snapshots
            .tree
            .get(CURRENT)
            .map_err(|e| StorageIOError::read_snapshot(None, &e))?
        else {
            return Ok(None);
        };
        decode(&bytes)
            .map(Some)
            .map_err(|e| StorageIOError::read_snapshot(None, &e).into())
    }

    /// Replaces the state with a snapshot's.
    fn restore(&mut self, meta: &Meta, state: ClusterState) {
        *self.state.write().expect("state lock") = state;
        self.last_applied = meta.last_log_id;
        self.last_membership = meta.last_membership.clone();
    }
}

/// Stops the replica once the cluster's log format is past what this build reads: what
/// follows in the log may not decode.
fn beyond_this_build(state: &ClusterState) -> Result<(), StorageError> {
    let effective = state.log_format();
    if effective <= LogFormat::NEWEST {
        return Ok(());
    }
    let line = format!(
        "the cluster's log format was raised to {effective}, and this master's build reads up \
         to {}: run {} on this master",
        LogFormat::NEWEST,
        effective.readers()
    );
    Err(StorageIOError::write_state_machine(AnyError::error(line)).into())
}

/// The state a snapshot holds, if this build reads it and the log format it is at.
fn decode_state(meta: &Meta, data: &[u8]) -> Result<ClusterState, StorageError> {
    let state = ClusterState::decode_snapshot(data)
        .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
    beyond_this_build(&state)?;
    Ok(state)
}

/// Where snapshots are kept: the current one in tree `snapshots`, on the replica's disk.
#[derive(Clone)]
struct Snapshots {
    tree: sled::Tree,
    disk: Disk,
}

impl Snapshots {
    /// Writes a snapshot as the current one, durably, unless the current one is newer: a
    /// build that started before a newer snapshot was installed must not replace it.
    ///
    /// A snapshot of a large state is megabytes: it is written on a blocking thread, not on
    /// those that answer the leader's peers, and the current one's position is read from its
    /// head alone.
    async fn store(&self, meta: &Meta, data: &[u8]) -> Result<(), StorageError> {
        let bytes = encode(&(meta, data));
        let (tree, last) = (self.tree.clone(), meta.last_log_id);
        let written = tokio::task::spawn_blocking(move || {
            tree.update_and_fetch(CURRENT, |current| {
                let newer = current
                    .and_then(|current| decode_head::<Meta>(current).ok())
                    .is_some_and(|current| current.last_log_id > last);
                match current {
                    Some(current) if newer => Some(current.to_vec()),
                    _ => Some(bytes.clone()),
                }
            })
        })
        .await
        .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        written.map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        self.disk
            .flush()
            .await
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        Ok(())
    }
}

/// A consistent cut of the state, written out as a snapshot.
pub struct SnapshotBuilder {
    data: Vec<u8>,
    last_applied: Option<LogId<NodeId>>,
    last_membership: StoredMembership<NodeId, Node>,
    snapshots: Snapshots,
    id: String,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let meta = Meta {
            last_log_id: self.last_applied,
            last_membership: self.last_membership.clone(),
            snapshot_id: self.id.clone(),
        };
        self.snapshots.store(&meta, &self.data).await?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(self.data.clone())),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, Node>), StorageError> {
        Ok((self.last_applied, self.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut state = self.state.write().expect("state lock");
        let mut results = Vec::new();
        for entry in entries {
            self.last_applied = Some(entry.log_id);
            results.push(match entry.payload {
                EntryPayload::Blank => Ok(Response::default()),
                EntryPayload::Normal(command) => {
                    let applied = state.apply_in_term(Term(entry.log_id.leader_id.term), &command);
                    beyond_this_build(&state)?;
                    applied
                }
                EntryPayload::Membership(membership) => {
                    self.last_membership = StoredMembership::new(Some(entry.log_id), membership);
                    Ok(Response::default())
                }
            });
        }
        Ok(results)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.built += 1;
        let at = self.last_applied.map_or_else(
            || "0-0".to_owned(),
            |id| format!("{}-{}", id.leader_id.term, id.index),
        );
        SnapshotBuilder {
            data: self.state.read().expect("state lock").encode_snapshot(),
            last_applied: self.last_applied,
            last_membership: self.last_membership.clone(),
            snapshots: self.snapshots.clone(),
            id: format!("{at}-{}", self.built),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &Meta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let state = decode_state(meta, &data)?;
        self.snapshots.store(meta, &data).await?;
        self.restore(meta, state);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        Ok(self.stored_snapshot()?.map(|(meta, data)| Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}
