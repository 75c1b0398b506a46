//! What a peer sends and the log holds on disk: a Raft message or entry, or an error.
#![no_main]

use muster_raft::codec::decode;
use muster_raft::{Entry, NodeId, TypeConfig};
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = decode::<Entry>(data);
    let _ = decode::<AppendEntriesRequest<TypeConfig>>(data);
    let _ = decode::<VoteRequest<NodeId>>(data);
    let _ = decode::<InstallSnapshotRequest<TypeConfig>>(data);
});
