//! Snapshot encoding round trips and refuses what it cannot read.

use muster_state::{ClusterState, SNAPSHOT_FORMAT, SnapshotError};

use crate::support::{Cluster, app_desc, driver_desc};

fn busy_cluster() -> Cluster {
    let mut c = Cluster::new();
    c.worker("w1", 8, 8192);
    c.worker("w2", 4, 4096);
    c.submit_app(app_desc(Some(6), Some(2), 1024));
    c.submit_driver(driver_desc(1, 512, true));
    c.schedule();
    c
}

#[test]
fn a_snapshot_restores_the_same_state() {
    let c = busy_cluster();
    let bytes = c.state.encode_snapshot();
    assert_eq!(bytes[0], SNAPSHOT_FORMAT);
    let restored = ClusterState::decode_snapshot(&bytes).unwrap();
    assert_eq!(restored, c.state);
    assert_eq!(
        restored.encode_snapshot(),
        bytes,
        "encoding is deterministic"
    );
}

#[test]
fn unreadable_snapshots_are_clear_errors() {
    let bytes = busy_cluster().state.encode_snapshot();
    assert_eq!(
        ClusterState::decode_snapshot(&[]),
        Err(SnapshotError::Empty)
    );

    let mut newer = bytes.clone();
    newer[0] = SNAPSHOT_FORMAT + 1;
    let error = ClusterState::decode_snapshot(&newer).unwrap_err();
    assert_eq!(
        error,
        SnapshotError::NewerFormat {
            found: SNAPSHOT_FORMAT + 1
        }
    );
    assert!(error.to_string().contains("newer than this build's format"));

    let truncated = &bytes[..bytes.len() / 2];
    assert!(matches!(
        ClusterState::decode_snapshot(truncated),
        Err(SnapshotError::Corrupt(_))
    ));

    let mut trailing = bytes.clone();
    trailing.push(0);
    assert!(matches!(
        ClusterState::decode_snapshot(&trailing),
        Err(SnapshotError::Corrupt(_))
    ));

    assert_eq!(
        ClusterState::decode_snapshot(&[0]),
        Err(SnapshotError::UnsupportedFormat { found: 0 })
    );
}
