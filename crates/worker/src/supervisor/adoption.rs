//! Taking over what a predecessor agent started in the work dir: processes that still run are
//! watched as if started here, those that ended meanwhile reported with the exit code their
//! wrapper wrote, and any other process started for the work dir killed.

use std::fs;
use std::path::PathBuf;

use muster_core::restarts::Restarts;
use muster_proto::exit;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tracing::Instrument;

use crate::records::{Record, exit_code, process_group, still_runs};

use super::launcher::{OUT_OF_MEMORY_MARKER, WORK_DIR_VARIABLE};
use super::monitor::process_span;
use super::{ProcessState, Supervisor};

impl Supervisor {
    /// Takes over what a predecessor (stopped, or crashed) started in this work dir:
    /// processes that still run are watched as if started here (and listed by
    /// [`Supervisor::running`]); those that ended and whose end the leader may not have are
    /// reported with the exit code their wrapper wrote (a supervised driver that failed is
    /// started again); any other process found running in the work dir is killed, and any
    /// control group no adopted process is in is emptied and removed. Call it once, before
    /// the first launch.
    pub fn adopt(&self) {
        let mut adopted = Vec::new();
        let mut adopted_groups = Vec::new();
        let mut ended: Vec<(Record, PathBuf, Option<i32>, bool)> = Vec::new();
        // One record of each workload, a running one's before an ended one's and the newest
        // first: a supervised driver's ended run may still have its record beside the next
        // run's (an agent that crashed between writing the one and removing the other).
        let mut records: Vec<(bool, Record)> = self
            .records
            .all()
            .into_iter()
            .map(|record| (still_runs(&record), record))
            .collect();
        records.sort_by(|(a_runs, a), (b_runs, b)| {
            (b_runs, b.start_time).cmp(&(a_runs, a.start_time))
        });
        let mut seen = std::collections::BTreeSet::new();
        for (runs, record) in records {
            if !seen.insert(record.spec.workload.clone()) {
                self.records.remove(record.pid);
                continue;
            }
            let Ok(directory) = self.directory(&record.spec.workload) else {
                self.records.remove(record.pid);
                continue;
            };
            let launcher = self.launcher(record.spec.clone(), directory);
            if runs {
                tracing::info!(workload = %record.spec.workload, pid = record.pid, "adopted");
                adopted.push(record.pid);
                adopted_groups.push(record.spec.workload.group_name());
                let group = launcher.existing_group();
                let mut running = self.running.lock().expect("running lock");
                let restarts = Restarts {
                    count: record.restarts,
                    last_exit_code: record.last_exit_code,
                    starts_again: None,
                };
                let monitor = self.monitor(&mut running, launcher, record.pid, group, restarts);
                let span = process_span(&record.spec.workload);
                tokio::spawn(async move { monitor.run_adopted(record).await }.instrument(span));
            } else {
                let code = exit_code(&launcher.directory);
                let out_of_memory = code != Some(0)
                    && (launcher.directory.join(OUT_OF_MEMORY_MARKER).exists()
                        || launcher
                            .existing_group()
                            .is_some_and(|group| group.out_of_memory()));
                ended.push((record, launcher.directory, code, out_of_memory));
            }
        }
        // Before anything starts again here, so that nothing new is taken for a stray.
        self.kill_strays(&adopted);
        if let Some(cgroups) = &self.config.isolation {
            cgroups.remove_others(&adopted_groups);
        }
        for (record, directory, code, out_of_memory) in ended {
            let killed = directory.join("killed").exists();
            tracing::info!(workload = %record.spec.workload, ?code, killed, "ended while the agent was down");
            let failed = out_of_memory || code.is_some_and(|code| code != 0);
            if record.spec.supervise && !killed && failed {
                self.records.remove(record.pid);
                // One more restart, counted on from the predecessor's.
                let restarts = Restarts {
                    count: record.restarts + 1,
                    last_exit_code: if out_of_memory {
                        Some(exit::OVER_MEMORY_LIMIT)
                    } else {
                        code
                    },
                    starts_again: None,
                };
                if let Err(error) = self.launch_after(record.spec.clone(), restarts) {
                    let reason = error.to_string();
                    self.report_end(&record, ProcessState::Failed { reason });
                }
                continue;
            }
            let state = match code {
                _ if killed => ProcessState::Killed { code },
                _ if out_of_memory => ProcessState::OutOfMemory,
                Some(code) => ProcessState::Exited { code },
                None => ProcessState::Failed {
                    reason: "ended while the worker agent was down; exit code unknown".into(),
                },
            };
            self.report_end(&record, state);
        }
    }

    /// Kills every process started for this work dir (its environment says so) that belongs
    /// to no adopted process group: what a predecessor started and could not record.
    fn kill_strays(&self, adopted: &[u32]) {
        let marker = format!("{WORK_DIR_VARIABLE}={}", self.work_dir_marker());
        let Ok(entries) = fs::read_dir("/proc") else {
            return;
        };
        let me = std::process::id();
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let started_here = fs::read(entry.path().join("environ")).is_ok_and(|environ| {
                environ
                    .split(|byte| *byte == 0)
                    .any(|variable| variable == marker.as_bytes())
            });
            if pid == me || !started_here {
                continue;
            }
            if process_group(pid).is_some_and(|group| adopted.contains(&group)) {
                continue;
            }
            tracing::warn!(pid, "killing a process nobody accounts for");
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
        }
    }
}
