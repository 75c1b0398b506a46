//! Snapshot encoding of the whole state: one format-version byte, then the state in bincode 2.
//! A replica refuses a snapshot from a newer format or a corrupt one rather than guess.

use crate::version::LogFormat;
use crate::{ClusterState, codec};

/// The newest format this build writes and reads. Format 3 added the kept room
/// (reservations) at the end of the state, format 4 the draining workers after it, format 5
/// the named users, the queues' access lists and the drivers' and applications' users,
/// format 6 the queues' capacities, format 7 the resource addresses, format 8 the raised
/// log format, format 9 the stopped processes that keep their custom resources, format 10
/// the relaunched drivers' successors and the ended executors, format 11 the applications'
/// resource profiles, format 12 the queues' admission settings and the applications'
/// and drivers' gangs, format 13 the cores and memory stopped processes keep until their
/// end is reported and the resource profiles room is kept for, and format 14 the leaves'
/// orderings, the applications' and drivers' priorities and the applications that log
/// events. A state without a format's fields is still
/// written in the older format, which
/// replicas of the previous builds read, and an older format reads as a state without them:
/// until the cluster's log format is raised, its snapshots are of format 7 at the most,
/// which release 0.1.0 reads; until it is raised to 3, of format 8 at the most, which 0.2.0
/// reads; and until it is raised to 4, of format 11 at the most, which 0.3.0 reads.
pub const SNAPSHOT_FORMAT: u8 = 14;

/// The log format a replica needs to take snapshot `bytes`: format 8 holds the raised log
/// format, which the first log format's replicas cannot read, formats 9 to 11 what only the
/// third's keep, and formats 12 to 14 what only the fourth's keep; and a state raised to a format
/// needs its readers, whatever the snapshot format it was written in.
pub(crate) fn log_format_of(bytes: &[u8]) -> LogFormat {
    let written = match bytes.first() {
        Some(&format) if format >= 12 => LogFormat::FOURTH,
        Some(&format) if format >= 9 => LogFormat::THIRD,
        Some(8) => LogFormat::RAISABLE,
        _ => return LogFormat::FIRST,
    };
    let raised = ClusterState::decode_snapshot(bytes).map_or(written, |state| state.log_format());
    written.max(raised)
}

/// The oldest format this build reads.
const OLDEST_FORMAT: u8 = 2;

/// How many fields each format adds at the end of the state, from format 3 on.
const FIELDS_ADDED: [usize; 12] = [1, 1, 4, 1, 3, 1, 1, 2, 1, 4, 2, 4];

/// Why a snapshot could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// No bytes at all.
    #[error("snapshot is empty")]
    Empty,
    /// Written by a newer build.
    #[error(
        "snapshot format {found} is newer than this build's format {SNAPSHOT_FORMAT}: upgrade this replica"
    )]
    NewerFormat {
        /// The snapshot's format.
        found: u8,
    },
    /// An older format this build no longer reads.
    #[error("snapshot format {found} is no longer supported")]
    UnsupportedFormat {
        /// The snapshot's format.
        found: u8,
    },
    /// The bytes do not decode to a state.
    #[error("snapshot is corrupt: {0}")]
    Corrupt(String),
}

impl ClusterState {
    /// The whole state as snapshot bytes.
    pub fn encode_snapshot(&self) -> Vec<u8> {
        let mut bytes = vec![SNAPSHOT_FORMAT];
        codec::encode_into(self, &mut bytes);
        // An empty list or map is one zero byte at the end: older formats leave it out.
        let added_empty = [
            self.reservations.is_empty(),
            self.draining.is_empty(),
            self.users.is_empty()
                && self.access.is_empty()
                && self.driver_users.is_empty()
                && self.app_users.is_empty(),
            self.capacities.is_empty(),
            self.addresses.is_empty(),
            self.raised_format.is_none(),
            self.stopping.is_empty(),
            self.relaunched.is_empty() && self.ended_executors.is_empty(),
            self.profiles.is_empty(),
            self.admission.is_empty()
                && self.gangs.is_empty()
                && self.driver_gangs.is_empty()
                && self.timed_out_gangs.is_empty(),
            self.stopping_room.is_empty() && self.reservation_profiles.is_empty(),
            self.orderings.is_empty()
                && self.priorities.is_empty()
                && self.driver_priorities.is_empty()
                && self.event_logs.is_empty(),
        ];
        for (empty, fields) in added_empty.into_iter().zip(FIELDS_ADDED).rev() {
            if !empty {
                break;
            }
            bytes[0] -= 1;
            bytes.truncate(bytes.len() - fields);
        }
        bytes
    }

    /// Restores a state from [`ClusterState::encode_snapshot`]'s bytes.
    ///
    /// # Errors
    ///
    /// Empty input, a format this build does not read, bytes that do not decode exactly, or a
    /// state that breaks an invariant (a corrupted snapshot must not become a replica's
    /// state).
    pub fn decode_snapshot(bytes: &[u8]) -> Result<Self, SnapshotError> {
        let (&format, body) = bytes.split_first().ok_or(SnapshotError::Empty)?;
        if format > SNAPSHOT_FORMAT {
            return Err(SnapshotError::NewerFormat { found: format });
        }
        if format < OLDEST_FORMAT {
            return Err(SnapshotError::UnsupportedFormat { found: format });
        }
        // Older formats lack the trailing fields: each empty one is one zero byte.
        let missing: usize = FIELDS_ADDED[usize::from(format - OLDEST_FORMAT)..]
            .iter()
            .sum();
        let body = [body, &vec![0; missing]].concat();
        let body = &body[..];
        // Bounded by the codec's limit: a corrupted length is an error, not an allocation.
        let (mut state, read) = codec::decode_counted::<Self>(body)
            .map_err(|error| SnapshotError::Corrupt(error.to_string()))?;
        if read != body.len() {
            return Err(SnapshotError::Corrupt(format!(
                "{} bytes after the state",
                body.len() - read
            )));
        }
        if format < 7 {
            state.hold_missing_addresses();
        }
        state.derive_pass_views();
        state
            .check_invariants()
            .map_err(|broken| SnapshotError::Corrupt(format!("inconsistent state: {broken}")))?;
        Ok(state)
    }
}
