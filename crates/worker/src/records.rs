//! What the supervisor started, written down in the work dir, so that an agent restarted
//! after a crash can find its predecessor's processes again.
//!
//! Every process the supervisor starts gets a record `.processes/<pid>.json` holding its
//! workload, what it runs, its process id and its start time (`/proc/<pid>/stat` field 22,
//! which tells a process from a later one that reused its id). The record is removed once the
//! leader has acknowledged the process's end. A process's exit code is written by its wrapper to `exit` in its
//! directory, so it survives the agent.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use muster_core::restarts::Restarts;
use serde::{Deserialize, Serialize};

use crate::supervisor::LaunchSpec;

/// One process the supervisor started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// What it runs for and how; the workload is inside.
    pub spec: LaunchSpec,
    /// Its process id (also its process group id).
    pub pid: u32,
    /// Its start time in clock ticks since boot, as `/proc` gives it.
    pub start_time: u64,
    /// For a supervised driver, how many times it was started again here, so that an agent
    /// that adopts it keeps counting (none in an older agent's record).
    #[serde(default)]
    pub restarts: u32,
    /// How its last failed run ended, with those restarts.
    #[serde(default)]
    pub last_exit_code: Option<i32>,
}

/// The records of one work dir.
#[derive(Clone, Debug)]
pub struct Records {
    dir: PathBuf,
}

impl Records {
    /// The records kept under `work_dir`.
    pub fn new(work_dir: &Path) -> Self {
        Self {
            dir: work_dir.join(".processes"),
        }
    }

    fn path(&self, pid: u32) -> PathBuf {
        self.dir.join(format!("{pid}.json"))
    }

    /// Writes down that `spec` runs as `pid`, after `restarts` here.
    ///
    /// # Errors
    ///
    /// The process's start time cannot be read (it already ended) or the record not written.
    pub fn write(
        &self,
        spec: &LaunchSpec,
        pid: u32,
        restarts: &Restarts<Instant>,
    ) -> io::Result<()> {
        let start_time = start_time(pid)?;
        let record = Record {
            spec: spec.clone(),
            pid,
            start_time,
            restarts: restarts.count,
            last_exit_code: restarts.last_exit_code,
        };
        // Records hold each process's environment, secrets included: the worker's user only.
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o700))?;
        let temporary = self.dir.join(format!("{pid}.tmp"));
        fs::write(&temporary, serde_json::to_vec(&record)?)?;
        fs::rename(temporary, self.path(pid))
    }

    /// Forgets the record of `pid`.
    pub fn remove(&self, pid: u32) {
        let _ = fs::remove_file(self.path(pid));
    }

    /// Every readable record; unreadable ones are removed.
    pub fn all(&self) -> Vec<Record> {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut records = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            match fs::read(&path)
                .ok()
                .and_then(|bytes| serde_json::from_slice::<Record>(&bytes).ok())
            {
                Some(record) => records.push(record),
                None => {
                    tracing::warn!(path = %path.display(), "unreadable process record removed");
                    let _ = fs::remove_file(&path);
                }
            }
        }
        records.sort_by_key(|r| r.pid);
        records
    }
}

/// Whether the process `record` names still runs: the same id, started at the same time, not
/// a zombie.
pub fn still_runs(record: &Record) -> bool {
    stat_fields(record.pid).is_some_and(|fields| {
        fields.first().is_some_and(|state| *state != "Z")
            && fields.get(19).and_then(|t| t.parse().ok()) == Some(record.start_time)
    })
}

/// The start time of process `pid`.
fn start_time(pid: u32) -> io::Result<u64> {
    stat_fields(pid)
        .and_then(|fields| fields.get(19)?.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no process {pid}")))
}

/// The process group of process `pid`.
pub fn process_group(pid: u32) -> Option<u32> {
    stat_fields(pid)?.get(2)?.parse().ok()
}

/// The fields of `/proc/<pid>/stat` after the command name: the state is the first, the
/// process group the third, the start time the twentieth.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// The exit code the wrapper of a process in `directory` wrote, if it did.
pub fn exit_code(directory: &Path) -> Option<i32> {
    fs::read_to_string(directory.join("exit"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use muster_core::resources::Resources;

    use super::Record;

    #[test]
    fn a_record_written_before_resources_were_one_value_still_reads() {
        // An agent upgraded in place must adopt, not kill, what its predecessor started.
        let old = r#"{"spec":{"workload":{"Executor":{"app":"app-20231031224509-0000","executor":3}},
            "command":"/bin/sh","args":["-c","sleep 100"],"env":{},"cores":2,"memory_mb":512,
            "supervise":false},"pid":4242,"start_time":987654}"#;
        let record: Record = serde_json::from_str(old).unwrap();
        assert_eq!(record.spec.resources, Resources::new(2, 512));
        assert_eq!((record.pid, record.start_time), (4242, 987_654));
        let again: Record = serde_json::from_slice(&serde_json::to_vec(&record).unwrap()).unwrap();
        assert_eq!(again, record);
    }
}
