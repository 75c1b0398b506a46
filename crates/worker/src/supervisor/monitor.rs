//! Watching one workload's process until it is gone: its end reported, a supervised driver
//! started again after its back-off (the restart policy), a kill carried out with its grace,
//! and an adopted process, which is not a child, polled.

use std::collections::BTreeMap;
use std::fs;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use muster_core::restarts::{Backoff, Restarts};
use muster_proto::exit;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::Child;
use tokio::sync::{mpsc, oneshot};

use crate::isolation::ProcessGroup;
use crate::records::{Record, Records, exit_code, still_runs};

use super::launcher::{Launcher, OUT_OF_MEMORY_MARKER};
use super::{ProcessEvent, ProcessState, Running, SupervisorConfig, Workload};

/// How often an adopted process, which is not a child, is checked.
const ADOPTED_POLL: Duration = Duration::from_millis(200);

/// Watches one workload's process until it is over.
pub(super) struct Monitor {
    pub(super) launcher: Launcher,
    pub(super) config: SupervisorConfig,
    pub(super) records: Records,
    pub(super) events: mpsc::UnboundedSender<ProcessEvent>,
    pub(super) running: Arc<Mutex<BTreeMap<Workload, Running>>>,
    pub(super) pid: Arc<Mutex<u32>>,
    pub(super) restarts: Arc<Mutex<Restarts<Instant>>>,
    /// The control group of the current run, when processes are limited.
    pub(super) group: Option<ProcessGroup>,
    pub(super) kill_requested: oneshot::Receiver<Duration>,
    /// Dropped when the monitor is done: [`Supervisor::shutdown`] waits for that.
    pub(super) _finished: oneshot::Sender<()>,
}

/// The span a process's monitor logs in: its driver, or its app and executor.
pub(super) fn process_span(workload: &Workload) -> tracing::Span {
    match workload {
        Workload::Driver { driver } => tracing::info_span!("driver", driver = %driver),
        Workload::Executor { app, executor } => {
            tracing::info_span!("executor", app = %app, executor = %executor)
        }
        Workload::ShuffleService => tracing::info_span!("shuffle_service"),
    }
}

impl Monitor {
    pub(super) fn report(&self, state: ProcessState) {
        match &state {
            ProcessState::Running { pid, .. } => tracing::info!(pid, "running"),
            ProcessState::Restarting {
                attempt,
                after,
                last_exit_code,
            } => {
                tracing::info!(attempt, ?after, ?last_exit_code, "restarting");
            }
            ended => tracing::info!(state = ?ended, "ended"),
        }
        // The receiver may be gone while the worker stops; nothing is left to tell then.
        let _ = self.events.send(ProcessEvent {
            workload: self.launcher.spec.workload.clone(),
            state,
        });
    }

    pub(super) fn current_pid(&self) -> u32 {
        *self.pid.lock().expect("pid lock")
    }

    /// Removes the control group of the run that ended with `code`, killing what is left in
    /// it; whether the kernel killed the run for going over its memory limit. A run that
    /// exited 0 did not fail, whatever the kernel killed on its way.
    pub(super) async fn release_group(&mut self, code: Option<i32>) -> bool {
        let Some(group) = self.group.take() else {
            return false;
        };
        let out_of_memory = code != Some(0) && group.out_of_memory();
        if out_of_memory {
            // For an agent that takes over before the leader has this end.
            let _ = fs::write(self.launcher.directory.join(OUT_OF_MEMORY_MARKER), b"");
        }
        // Removal waits briefly for killed processes to be gone.
        let _ = tokio::task::spawn_blocking(move || group.remove()).await;
        out_of_memory
    }

    /// A new back-off, for a process's first failure.
    pub(super) fn backoff(&self) -> Backoff {
        Backoff::new(self.config.restart_backoff, self.config.successful_run)
    }

    /// Watches `child` until it ends, starting a failed supervised driver again after
    /// `backoff`.
    pub(super) async fn run(mut self, mut child: Child, mut backoff: Backoff) {
        loop {
            let pid = child.id().expect("a running child has an id");
            *self.pid.lock().expect("pid lock") = pid;
            let restarts = *self.restarts.lock().expect("restarts lock");
            let restarts = (restarts.count > 0).then_some(Restarts {
                starts_again: None,
                ..restarts
            });
            self.report(ProcessState::Running { pid, restarts });
            let started = Instant::now();
            let status = tokio::select! {
                status = child.wait() => status,
                grace = &mut self.kill_requested => {
                    let grace = grace.unwrap_or(self.config.kill_grace);
                    let code = self.stop(&mut child, pid, grace).await;
                    self.release_group(None).await;
                    return self.finish(ProcessState::Killed { code });
                }
            };
            let code = status.map_or(-1, exit_code_of);
            // Nothing the program started outlives it (its group id stays taken while the
            // group has members).
            let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
            let out_of_memory = self.release_group(Some(code)).await;
            if !self.launcher.spec.supervise || code == 0 {
                return self.finish(if out_of_memory {
                    ProcessState::OutOfMemory
                } else {
                    ProcessState::Exited { code }
                });
            }
            let wait = backoff.after_failure(started.elapsed());
            let last_exit_code = if out_of_memory {
                exit::OVER_MEMORY_LIMIT
            } else {
                code
            };
            match self.restart(wait, Some(last_exit_code)).await {
                Some(next) => child = next,
                None => return,
            }
        }
    }

    /// Reports a restart after a run that ended with `last_exit_code`, waits `backoff` and
    /// starts the program again; `None` when it was killed meanwhile or could not start
    /// (reported). The ended run's record stays until the next run's replaces it: an agent
    /// that crashes during the back-off leaves its successor a failed run to start again.
    pub(super) async fn restart(
        &mut self,
        backoff: Duration,
        last_exit_code: Option<i32>,
    ) -> Option<Child> {
        let ended = self.current_pid();
        let attempt = {
            let mut restarts = self.restarts.lock().expect("restarts lock");
            *restarts = Restarts {
                count: restarts.count + 1,
                last_exit_code,
                starts_again: Some(Instant::now() + backoff),
            };
            restarts.count
        };
        // No process while it waits: none is listed for it, not the one that ended.
        *self.pid.lock().expect("pid lock") = 0;
        self.report(ProcessState::Restarting {
            attempt,
            after: backoff,
            last_exit_code,
        });
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            _ = &mut self.kill_requested => {
                // Between two runs: no process to end. The marker tells a later agent,
                // which finds the ended run's record, that this end was asked for.
                let _ = fs::write(self.launcher.directory.join("killed"), b"");
                self.finish(ProcessState::Killed { code: None });
                return None;
            }
        }
        match self.launcher.spawn() {
            Ok((child, group)) => {
                self.group = group;
                let pid = child.id().expect("a just-spawned child has an id");
                let restarts = {
                    let mut restarts = self.restarts.lock().expect("restarts lock");
                    restarts.starts_again = None;
                    *restarts
                };
                if let Err(error) = self.records.write(&self.launcher.spec, pid, &restarts) {
                    tracing::warn!(%error, "cannot record a restarted process");
                }
                self.records.remove(ended);
                Some(child)
            }
            Err(e) => {
                self.finish(ProcessState::Failed {
                    reason: e.to_string(),
                });
                None
            }
        }
    }

    /// Watches a process a predecessor started: it is not a child, so it is polled, and its
    /// exit code comes from its wrapper.
    pub(super) async fn run_adopted(mut self, record: Record) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(ADOPTED_POLL) => {
                    if !still_runs(&record) {
                        break;
                    }
                }
                grace = &mut self.kill_requested => {
                    self.stop_adopted(&record, grace.unwrap_or(self.config.kill_grace)).await;
                    self.release_group(None).await;
                    let code = exit_code(&self.launcher.directory);
                    return self.finish(ProcessState::Killed { code });
                }
            }
        }
        let code = exit_code(&self.launcher.directory);
        let out_of_memory = self.release_group(code).await;
        if self.launcher.spec.supervise && (out_of_memory || code.is_some_and(|code| code != 0)) {
            // How long the run took is not known: it began before this agent.
            let mut backoff = self.backoff();
            let wait = backoff.after_failure(Duration::ZERO);
            let last_exit_code = if out_of_memory {
                Some(exit::OVER_MEMORY_LIMIT)
            } else {
                code
            };
            if let Some(child) = self.restart(wait, last_exit_code).await {
                self.run(child, backoff).await;
            }
            return;
        }
        match code {
            _ if out_of_memory => self.finish(ProcessState::OutOfMemory),
            Some(code) => self.finish(ProcessState::Exited { code }),
            None => self.finish(ProcessState::Failed {
                reason: "ended without an exit code".into(),
            }),
        }
    }

    /// SIGTERM to an adopted process group, SIGKILL after `grace`.
    pub(super) async fn stop_adopted(&self, record: &Record, grace: Duration) {
        let _ = fs::write(self.launcher.directory.join("killed"), b"");
        let group = Pid::from_raw(record.pid as i32);
        let _ = killpg(group, Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        while still_runs(record) && Instant::now() < deadline {
            tokio::time::sleep(ADOPTED_POLL / 4).await;
        }
        let _ = killpg(group, Signal::SIGKILL);
    }

    /// SIGTERM to the process group, SIGKILL after `grace`, then reap the child: its exit
    /// code. A `killed` marker tells a later agent that this end was asked for.
    pub(super) async fn stop(&self, child: &mut Child, pid: u32, grace: Duration) -> Option<i32> {
        let _ = fs::write(self.launcher.directory.join("killed"), b"");
        let group = Pid::from_raw(pid as i32);
        let _ = killpg(group, Signal::SIGTERM);
        let status = match tokio::time::timeout(grace, child.wait()).await {
            Ok(status) => {
                // The leader exited; make sure nothing it started outlives it.
                let _ = killpg(group, Signal::SIGKILL);
                status
            }
            Err(_) => {
                let _ = killpg(group, Signal::SIGKILL);
                child.wait().await
            }
        };
        status.ok().map(exit_code_of)
    }

    /// Forgets the workload and reports its end in one step under the lock, so that anyone
    /// who lists what runs and then reads the events sees the process in one or the other.
    ///
    /// The record stays until the leader has the end ([`Supervisor::forget`]): an agent that
    /// crashes before then reports it again.
    pub(super) fn finish(&self, state: ProcessState) {
        let mut running = self.running.lock().expect("running lock");
        let workload = &self.launcher.spec.workload;
        if running
            .get(workload)
            .is_some_and(|r| Arc::ptr_eq(&r.pid, &self.pid))
        {
            running.remove(workload);
        }
        self.report(state);
    }
}
/// The exit code of `status`: 128 + the signal's number when a signal ended it.
pub(super) fn exit_code_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .unwrap_or(-1)
}
