//! The master's settings file (`muster master --config FILE`) and queue files read from disk,
//! and the Raft settings the settings file holds; what they say is parsed and checked by
//! `muster_leader::config`, one way for the master, `muster queues` and `muster simulate`.

use std::path::{Path, PathBuf};

use muster_core::access::QueueSpec;
use muster_leader::config::{ConfigError, MasterFile, parse_json, parse_queues};
use muster_raft::RaftSettings;
use serde::de::DeserializeOwned;

/// Reads and parses the JSON file at `path`.
///
/// # Errors
///
/// The file cannot be read, or its JSON does not match `T` (naming the field).
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    parse_json(&read_text(path)?, path)
}

/// Reads a queue file: a JSON list such as
/// `[{"name": "prod", "prior": true}, {"name": "default", "threshold": 0.8}]`, or a tree
/// with capacities such as `[{"name": "team", "capacity": 1}, {"name": "team.etl",
/// "capacity": 1}]`.
///
/// # Errors
///
/// As [`read_json`], or a queue setting out of range (a duplicate name, a fraction outside
/// (0, 1]), or a malformed tree (a parent not listed, capacities that do not sum to 1).
pub fn read_queues(path: &Path) -> Result<Vec<QueueSpec>, ConfigError> {
    parse_queues(&read_text(path)?, path)
}

fn read_text(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })
}

/// `raft` with the snapshot policy and write bound the settings file `file` sets.
///
/// # Errors
///
/// `snapshot_every` or `max_queued_writes` is zero.
pub fn raft_settings(file: &MasterFile, raft: RaftSettings) -> Result<RaftSettings, ConfigError> {
    let zero = |field: &str| ConfigError::Invalid {
        path: PathBuf::from("--config"),
        field: field.to_owned(),
        message: "must be at least 1".to_owned(),
    };
    if file.snapshot_every == Some(0) {
        return Err(zero("snapshot_every"));
    }
    if file.max_queued_writes == Some(0) {
        return Err(zero("max_queued_writes"));
    }
    Ok(RaftSettings {
        max_queued_writes: file.max_queued_writes.unwrap_or(raft.max_queued_writes),
        hold_log_format: file.hold_log_format || raft.hold_log_format,
        snapshot_every: file.snapshot_every.unwrap_or(raft.snapshot_every),
        keep_after_snapshot: file
            .log_kept_after_snapshot
            .unwrap_or(raft.keep_after_snapshot),
        ..raft
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    #[test]
    fn the_snapshot_policy_is_set_by_the_file_and_never_to_zero() {
        let settings = file(r#"{"snapshot_every": 20, "log_kept_after_snapshot": 0}"#);
        let master: MasterFile = read_json(settings.path()).unwrap();
        let raft = raft_settings(&master, RaftSettings::default()).unwrap();
        assert_eq!((raft.snapshot_every, raft.keep_after_snapshot), (20, 0));
        let defaults = RaftSettings::default();
        let unset = raft_settings(&MasterFile::default(), RaftSettings::default()).unwrap();
        assert_eq!(unset.snapshot_every, defaults.snapshot_every);
        let zero: MasterFile = read_json(file(r#"{"snapshot_every": 0}"#).path()).unwrap();
        assert_eq!(
            raft_settings(&zero, defaults).unwrap_err().to_string(),
            "--config: snapshot_every: must be at least 1"
        );
    }

    #[test]
    fn the_write_bound_is_set_by_the_file_and_never_to_zero() {
        let master: MasterFile = read_json(file(r#"{"max_queued_writes": 8}"#).path()).unwrap();
        assert_eq!(
            raft_settings(&master, RaftSettings::default())
                .unwrap()
                .max_queued_writes,
            8
        );
        let zero: MasterFile = read_json(file(r#"{"max_queued_writes": 0}"#).path()).unwrap();
        assert_eq!(
            raft_settings(&zero, RaftSettings::default())
                .unwrap_err()
                .to_string(),
            "--config: max_queued_writes: must be at least 1"
        );
    }

    #[test]
    fn a_file_that_cannot_be_read_is_named() {
        let error = read_json::<MasterFile>(Path::new("/nonexistent/settings.json"))
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("cannot read /nonexistent/settings.json"),
            "{error}"
        );
        let queues = file(r#"[{"name": "batch", "threshold": 2}]"#);
        let error = read_queues(queues.path()).unwrap_err().to_string();
        assert!(
            error.starts_with(&queues.path().display().to_string()),
            "{error}"
        );
    }
}
