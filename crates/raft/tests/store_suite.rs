//! openraft's storage test suite against the sled log and state machine.

// The suite's own signature returns openraft's large `StorageError`.
#![allow(clippy::result_large_err)]

use muster_raft::{Disk, LogStore, NodeId, StateMachineStore, TypeConfig};
use muster_state::ClusterState;
use openraft::StorageError;
use openraft::testing::{StoreBuilder, Suite};
use tempfile::TempDir;

struct SledBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for SledBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<NodeId>> {
        let dir = tempfile::tempdir().expect("temporary directory");
        let disk = Disk::open(dir.path(), 1 << 24).expect("sled opens in a fresh directory");
        let log = LogStore::open(&disk, &dir.path().join("raft-mark")).expect("log trees open");
        let state_machine = StateMachineStore::open(&disk, ClusterState::default())?;
        Ok((dir, log, state_machine))
    }
}

// A plain test: the suite starts a runtime per case.
#[test]
fn sled_store_passes_the_openraft_suite() -> Result<(), StorageError<NodeId>> {
    Suite::test_all(SledBuilder)
}

#[tokio::test]
async fn a_snapshot_built_before_a_newer_one_was_installed_does_not_replace_it() {
    use openraft::storage::RaftStateMachine;
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftSnapshotBuilder};

    let open = |dir: &TempDir| {
        let disk = Disk::open(dir.path(), 1 << 24).unwrap();
        StateMachineStore::open(&disk, ClusterState::default()).unwrap()
    };
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = open(&dir_a);
    let mut b = open(&dir_b);
    // b applies five entries and snapshots them: the newer snapshot.
    let entries = (1..=5).map(|index| Entry::<TypeConfig> {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Blank,
    });
    b.apply(entries).await.unwrap();
    let newer = b
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();

    // a starts building from its empty state, a newer snapshot is installed meanwhile, then
    // the old build finishes.
    let mut stale = a.get_snapshot_builder().await;
    a.install_snapshot(&newer.meta, newer.snapshot)
        .await
        .unwrap();
    stale.build_snapshot().await.unwrap();

    let current = a.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(
        current.meta, newer.meta,
        "the installed snapshot stays current"
    );
}
