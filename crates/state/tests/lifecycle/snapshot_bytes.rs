//! Snapshot bytes as a replica could read them from a damaged disk or a hostile peer, shared
//! by the property test in `snapshot.rs` and the fuzz target `snapshot` (`fuzz/`).

use muster_state::ClusterState;

/// Decodes `bytes`: an error, or a state that keeps every invariant and writes itself back
/// to bytes that decode to the same state.
pub fn decode_hostile(bytes: &[u8]) {
    let Ok(state) = ClusterState::decode_snapshot(bytes) else {
        return;
    };
    assert!(state.check_invariants().is_ok(), "an inconsistent replica");
    let again = ClusterState::decode_snapshot(&state.encode_snapshot());
    assert_eq!(
        again.as_ref(),
        Ok(&state),
        "a snapshot that does not round trip"
    );
}
