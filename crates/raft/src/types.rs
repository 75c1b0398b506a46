//! openraft's type configuration for the allocation log.

use std::io::Cursor;

use muster_state::{ApplyError, Command, Response};

/// A replica's id in the Raft group.
pub type NodeId = u64;

/// A replica's address: `host:port` of its gRPC server.
pub type Node = openraft::BasicNode;

/// What applying one log entry returns: the command's response or its deterministic refusal.
/// Blank and membership entries return an empty response.
pub type Applied = Result<Response, ApplyError>;

openraft::declare_raft_types!(
    /// The allocation log: entries are [`Command`]s, applying one gives an [`Applied`].
    pub TypeConfig:
        D = Command,
        R = Applied,
        NodeId = NodeId,
        Node = Node,
        SnapshotData = Cursor<Vec<u8>>,
);

/// The Raft handle of a master replica.
pub type Raft = openraft::Raft<TypeConfig>;

/// Storage failures, as openraft reports them.
pub type StorageError = openraft::StorageError<NodeId>;

/// A log entry.
pub type Entry = openraft::Entry<TypeConfig>;

#[cfg(test)]
mod tests {
    use openraft::raft::{AppendEntriesRequest, VoteRequest};
    use proptest::prelude::*;

    use super::{Entry, TypeConfig};
    use muster_state::codec::decode;

    proptest! {
        /// Whatever arrives as a log entry or a Raft message decodes to a value or an error:
        /// never a panic, never an allocation a length field asks for.
        #[test]
        fn hostile_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1024)) {
            let _ = decode::<Entry>(&bytes);
            let _ = decode::<AppendEntriesRequest<TypeConfig>>(&bytes);
            let _ = decode::<VoteRequest<u64>>(&bytes);
        }
    }
}
