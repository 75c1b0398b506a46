//! The Raft log on sled.
//!
//! Layout: tree `raft_log` maps each entry's index, as 8 big-endian bytes (so sled's byte order
//! is index order), to the bincode entry; tree `raft_meta` holds `vote`, `committed` and
//! `last_purged`. Every write that openraft must find after a crash (appended entries, the
//! vote, truncation) is flushed to disk before it is acknowledged: the append callback fires
//! only after [`Disk::flush`] returned. All writes run one at a time on openraft's log task, so
//! they reach the disk in the order they were made. Entries are written one key at a time
//! rather than in a `sled::Batch`: batches take a process-wide lock in sled 0.34 that was seen
//! to deadlock with sled's own flusher, and a half-written append is harmless since openraft
//! only counts entries the callback confirmed.
//!
//! Beside sled, a [`crate::mark`] records the vote's term and the last index acknowledged; a
//! log found behind it on open is refused.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{LogId, OptionalSend, RaftLogReader, StorageIOError, Vote};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::disk::Disk;
use crate::mark::{Mark, MarkFile};
use crate::types::{Entry, NodeId, StorageError, TypeConfig};
use muster_state::codec::{decode, encode};

const VOTE: &[u8] = b"vote";
const COMMITTED: &[u8] = b"committed";
const LAST_PURGED: &[u8] = b"last_purged";

/// The log of one replica. Cloning gives another handle on the same trees (the log reader).
#[derive(Clone)]
pub struct LogStore {
    disk: Disk,
    meta: sled::Tree,
    log: sled::Tree,
    mark: Arc<Mutex<MarkFile>>,
}

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

impl LogStore {
    /// Opens (or creates) the log on `disk`, checked against its durability mark at `mark`.
    ///
    /// # Errors
    ///
    /// sled could not open its trees or read them, the mark cannot be read or written, or
    /// the log holds less than the mark ([`crate::MarkError::Lost`]).
    pub fn open(
        disk: &Disk,
        mark: &Path,
    ) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let meta = disk.tree("raft_meta")?;
        let log = disk.tree("raft_log")?;
        let read = |key: &[u8]| -> Result<Option<sled::IVec>, sled::Error> { meta.get(key) };
        let vote: Option<Vote<NodeId>> = read(VOTE)?.map(|b| decode(&b)).transpose()?;
        let purged: Option<LogId<NodeId>> = read(LAST_PURGED)?.map(|b| decode(&b)).transpose()?;
        let last: Option<Entry> = log.last()?.map(|(_, b)| decode(&b)).transpose()?;
        let found = Mark {
            term: vote.map_or(0, |v| v.leader_id().term),
            index: last.map(|e| e.log_id.index).or(purged.map(|p| p.index)),
        };
        let mark = MarkFile::open(mark, found)?;
        Ok(Self {
            disk: disk.clone(),
            meta,
            log,
            mark: Arc::new(Mutex::new(mark)),
        })
    }

    /// Moves the mark to `change` of the last one: at once, or (`at_once` false, for a
    /// growing log) at most once a second.
    fn mark(&self, change: impl FnOnce(Mark) -> Mark, at_once: bool) -> Result<(), StorageError> {
        let mut file = self.mark.lock().expect("mark lock");
        let mark = change(file.current());
        let written = if at_once {
            file.write(mark)
        } else {
            file.follow(mark)
        };
        written.map_err(|e| StorageIOError::write(&e).into())
    }

    fn read_meta<T: DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, StorageError> {
        let Some(bytes) = self.meta.get(key).map_err(|e| StorageIOError::read(&e))? else {
            return Ok(None);
        };
        decode(&bytes)
            .map(Some)
            .map_err(|e| StorageIOError::read(&e).into())
    }

    fn write_meta<T: Serialize>(&self, key: &[u8], value: &T) -> Result<(), StorageError> {
        self.meta
            .insert(key, encode(value))
            .map_err(|e| StorageIOError::write(&e))?;
        Ok(())
    }

    async fn flush(&self) -> Result<(), std::io::Error> {
        self.disk.flush().await
    }

    /// Removes the entries whose keys fall in `range`, lowest first, or highest first when
    /// `from_the_end`. One key at a time: sled's batches take a process-wide write lock that
    /// can deadlock against its background flusher. sled makes writes durable in order, so a
    /// crash in the middle leaves a prefix of the removals done: removing from the end of the
    /// log (truncation) or from its start (purge) never leaves a hole.
    fn remove_range(
        &self,
        range: impl RangeBounds<[u8; 8]>,
        from_the_end: bool,
    ) -> Result<(), StorageError> {
        let keys = self
            .log
            .range(range)
            .keys()
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| StorageIOError::write_logs(&e))?;
        let ordered: Box<dyn Iterator<Item = _>> = if from_the_end {
            Box::new(keys.into_iter().rev())
        } else {
            Box::new(keys.into_iter())
        };
        for key in ordered {
            self.log
                .remove(key)
                .map_err(|e| StorageIOError::write_logs(&e))?;
        }
        Ok(())
    }

    fn last_log_id(&self) -> Result<Option<LogId<NodeId>>, StorageError> {
        let Some((_, bytes)) = self.log.last().map_err(|e| StorageIOError::read_logs(&e))? else {
            return Ok(None);
        };
        let entry: Entry = decode(&bytes).map_err(|e| StorageIOError::read_logs(&e))?;
        Ok(Some(entry.log_id))
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let start = match range.start_bound() {
            Bound::Included(&i) => Bound::Included(index_key(i)),
            Bound::Excluded(&i) => Bound::Excluded(index_key(i)),
            Bound::Unbounded => Bound::Unbounded,
        };
        let end = match range.end_bound() {
            Bound::Included(&i) => Bound::Included(index_key(i)),
            Bound::Excluded(&i) => Bound::Excluded(index_key(i)),
            Bound::Unbounded => Bound::Unbounded,
        };
        self.log
            .range::<[u8; 8], _>((start, end))
            .map(|item| {
                let (_, bytes) = item.map_err(|e| StorageIOError::read_logs(&e))?;
                decode::<Entry>(&bytes).map_err(|e| StorageIOError::read_logs(&e).into())
            })
            .collect()
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged_log_id = self.read_meta(LAST_PURGED)?;
        let last_log_id = self.last_log_id()?.or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        self.write_meta(VOTE, vote)?;
        self.flush()
            .await
            .map_err(|e| StorageIOError::write_vote(&e))?;
        let term = vote.leader_id().term;
        self.mark(|mark| Mark { term, ..mark }, true)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        self.read_meta(VOTE)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError> {
        // Losing the committed index only means re-applying less at start-up; no flush needed.
        self.write_meta(COMMITTED, &committed)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError> {
        Ok(self
            .read_meta::<Option<LogId<NodeId>>>(COMMITTED)?
            .flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut last = None;
        for entry in entries {
            self.log
                .insert(index_key(entry.log_id.index), encode(&entry))
                .map_err(|e| StorageIOError::write_logs(&e))?;
            last = Some(entry.log_id.index);
        }
        // Acknowledge only what is on disk.
        let flushed = self.flush().await;
        let failed = flushed
            .as_ref()
            .err()
            .map(|e| StorageIOError::write_logs(e).into());
        let durable = flushed.is_ok();
        callback.log_io_completed(flushed);
        if let Some(error) = failed {
            return Err(error);
        }
        match last {
            Some(index) if durable => self.mark(
                |mark| Mark {
                    index: mark.index.max(Some(index)),
                    ..mark
                },
                false,
            ),
            _ => Ok(()),
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError> {
        // The mark goes back first: a crash between the two leaves it behind the log, which
        // is safe, never ahead.
        let kept = log_id.index.checked_sub(1);
        self.mark(
            |mark| Mark {
                index: mark.index.min(kept),
                ..mark
            },
            true,
        )?;
        self.remove_range(index_key(log_id.index).., true)?;
        self.flush()
            .await
            .map_err(|e| StorageIOError::write_logs(&e))?;
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError> {
        // Record the purge point first, so a crash mid-purge never leaves a hole unrecorded.
        self.write_meta(LAST_PURGED, &log_id)?;
        self.flush()
            .await
            .map_err(|e| StorageIOError::write_logs(&e))?;
        self.remove_range(..=index_key(log_id.index), false)
    }
}
