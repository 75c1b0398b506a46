//! Snapshot encoding of the whole state: one format-version byte, then the state in bincode 2.
//! A replica refuses a snapshot from a newer format or a corrupt one rather than guess.

use crate::ClusterState;

/// The newest format this build writes and reads. Format 3 added the kept room
/// (reservations) at the end of the state, and format 4 the draining workers after it. A
/// state without them is still written in the older format, which replicas of the previous
/// builds read, and an older format reads as a state without them.
pub const SNAPSHOT_FORMAT: u8 = 4;

/// The format of a state without draining workers.
const FORMAT_WITHOUT_DRAINS: u8 = 3;

/// The format of a state without draining workers or kept room.
const FORMAT_WITHOUT_RESERVATIONS: u8 = 2;

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

/// The most bytes a snapshot may claim while it decodes: a corrupted length must be an
/// error, not an attempt to allocate it.
const DECODE_LIMIT: usize = 1 << 30;

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

impl ClusterState {
    /// The whole state as snapshot bytes.
    pub fn encode_snapshot(&self) -> Vec<u8> {
        let mut bytes = vec![SNAPSHOT_FORMAT];
        bincode::serde::encode_into_std_write(self, &mut bytes, config())
            .expect("writing to a Vec cannot fail");
        // An empty list or map is one zero byte at the end: older formats leave it out.
        if self.draining.is_empty() {
            bytes[0] = FORMAT_WITHOUT_DRAINS;
            bytes.pop();
            if self.reservations.is_empty() {
                bytes[0] = FORMAT_WITHOUT_RESERVATIONS;
                bytes.pop();
            }
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
        let upgraded;
        let body = match format {
            SNAPSHOT_FORMAT => body,
            // Older formats lack the trailing fields: each empty one is one zero byte.
            FORMAT_WITHOUT_DRAINS => {
                upgraded = [body, &[0]].concat();
                &upgraded[..]
            }
            FORMAT_WITHOUT_RESERVATIONS => {
                upgraded = [body, &[0, 0]].concat();
                &upgraded[..]
            }
            found if found > SNAPSHOT_FORMAT => return Err(SnapshotError::NewerFormat { found }),
            found => return Err(SnapshotError::UnsupportedFormat { found }),
        };
        let limited = config().with_limit::<DECODE_LIMIT>();
        let (state, read) = bincode::serde::decode_from_slice::<Self, _>(body, limited)
            .map_err(|error| SnapshotError::Corrupt(error.to_string()))?;
        if read != body.len() {
            return Err(SnapshotError::Corrupt(format!(
                "{} bytes after the state",
                body.len() - read
            )));
        }
        state
            .check_invariants()
            .map_err(|broken| SnapshotError::Corrupt(format!("inconsistent state: {broken}")))?;
        Ok(state)
    }
}
