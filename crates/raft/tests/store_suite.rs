//! openraft's storage test suite against the sled log and state machine.

// The suite's own signature returns openraft's large `StorageError`.
#![allow(clippy::result_large_err)]

use muster_raft::{LogStore, NodeId, StateMachineStore, TypeConfig};
use muster_state::ClusterState;
use openraft::StorageError;
use openraft::testing::{StoreBuilder, Suite};
use tempfile::TempDir;

struct SledBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for SledBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<NodeId>> {
        let dir = tempfile::tempdir().expect("temporary directory");
        let db = sled::Config::new()
            .path(dir.path())
            .open()
            .expect("sled opens in a fresh directory");
        let log = LogStore::open(&db).expect("log trees open");
        let state_machine = StateMachineStore::open(&db, ClusterState::default())?;
        Ok((dir, log, state_machine))
    }
}

// A plain test: the suite starts a runtime per case.
#[test]
fn sled_store_passes_the_openraft_suite() -> Result<(), StorageError<NodeId>> {
    Suite::test_all(SledBuilder)
}
