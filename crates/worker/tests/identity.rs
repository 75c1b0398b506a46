//! A worker's id: made once from its host name, then kept in its work dir.

use muster_worker::agent::stable_id;

#[test]
fn a_worker_keeps_its_id_across_restarts_and_names_its_host_once() {
    let dir = tempfile::tempdir().unwrap();
    let first = stable_id(dir.path(), "worker-1").unwrap();
    assert!(first.as_ref().starts_with("worker-1-"), "{first}");
    // A restart, even under another host name, keeps the id.
    assert_eq!(stable_id(dir.path(), "elsewhere").unwrap(), first);

    let other = tempfile::tempdir().unwrap();
    let named = stable_id(other.path(), "node7").unwrap();
    assert!(named.as_ref().starts_with("worker-node7-"), "{named}");
}
