//! Executors and drivers as child processes of the worker, as Spark's `ExecutorRunner` and
//! `DriverRunner` run them.
//!
//! Each launch gets its own directory under the work dir (`<app>/<executor>/` or `<driver>/`)
//! holding its `stdout` and `stderr`, and its own process group, so that a kill reaches every
//! process it started: SIGTERM to the group, then SIGKILL once the grace period is over. An
//! application's executors here also share `local/<app>/` (in `MUSTER_LOCAL_DIR`), for what
//! outlives one executor (shuffle files a shuffle service serves); it goes when the leader
//! says the application ended ([`Supervisor::remove_app_data`]). A
//! supervised driver that exits with a non-zero code is started again after a back-off that
//! doubles from [`SupervisorConfig::restart_backoff`] and starts over once a run lasted
//! [`SupervisorConfig::successful_run`] ([`muster_core::restarts`], Spark's
//! `DriverRunner.runCommandWithRetry`).
//!
//! Each process runs under a small `/bin/sh` wrapper that writes the program's exit code to
//! `exit` in its directory, and is written down in the work dir ([`crate::records`]). A
//! supervisor started after its predecessor crashed [adopts](Supervisor::adopt) the
//! processes still running, reports the ones that ended meanwhile with their exit codes, and
//! kills any other process started for its work dir (each carries `MUSTER_WORK_DIR`): nothing
//! it started is left as an orphan.
//!
//! Everything that happens to a process is reported as a [`ProcessEvent`] on one channel, in
//! the order it happened for that process.
//!
//! The [`Supervisor`] keeps what runs; `launcher` starts a process (its wrapper, directory,
//! output and environment), `monitor` watches one until it is gone (restarts, kills, adopted
//! processes polled), and `adoption` takes over a predecessor's work.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use muster_core::ids::{AppId, DriverId, ExecutorId};
use muster_core::limits::names_a_directory;
use muster_core::resources::{ResourceAddresses, Resources, Usage};
use muster_core::restarts::{self, Restarts};
use muster_proto::auth::CREDENTIAL_VARIABLE;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use crate::cleanup::{self, CleanupPolicy, Ended};
use crate::isolation::{Cgroups, IsolationError, ProcessGroup};
use crate::output::Stream;
use crate::records::{Record, Records, still_runs};

mod adoption;
mod launcher;
mod monitor;

use launcher::{Launcher, executable};
use monitor::{Monitor, process_span};

/// What a process runs for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Workload {
    /// An executor of an app.
    Executor {
        /// The app.
        app: AppId,
        /// The executor's id within the app.
        executor: ExecutorId,
    },
    /// A driver.
    Driver {
        /// The driver.
        driver: DriverId,
    },
    /// Spark's external shuffle service, which the worker runs for itself (see
    /// [`crate::shuffle`]), not for a leader.
    ShuffleService,
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Executor { app, executor } => write!(f, "executor {executor} of {app}"),
            Self::Driver { driver } => write!(f, "driver {driver}"),
            Self::ShuffleService => write!(f, "the shuffle service"),
        }
    }
}

impl Workload {
    /// The name of its control group, unique among the worker's processes.
    fn group_name(&self) -> String {
        match self {
            Self::Executor { app, executor } => format!("{app}-{executor}"),
            Self::Driver { driver } => driver.to_string(),
            Self::ShuffleService => SHUFFLE_SERVICE_DIRECTORY.to_owned(),
        }
    }

    /// Whether a leader assigned it (a driver or an executor): its process is reported,
    /// held to its grant and fenced; the worker's own service is none of that.
    pub fn is_assigned(&self) -> bool {
        !matches!(self, Self::ShuffleService)
    }
}

/// The work dir's directory of the shuffle service.
pub const SHUFFLE_SERVICE_DIRECTORY: &str = "shuffle-service";

/// The work dir's directory of applications' data, one directory per application.
pub const LOCAL_DIRECTORY: &str = "local";

/// The variable that gives an executor the directory its application's executors on this
/// worker share.
pub const LOCAL_DIR_VARIABLE: &str = "MUSTER_LOCAL_DIR";

/// What to start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchSpec {
    /// What the process runs for.
    pub workload: Workload,
    /// The program.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment, on top of the `MUSTER_*` variables.
    pub env: BTreeMap<String, String>,
    /// What it was granted; cores and memory are passed as `MUSTER_CORES` and
    /// `MUSTER_MEMORY_MB`. Flat in a process record, as records written before resources
    /// were one value are.
    #[serde(flatten)]
    pub resources: Resources,
    /// Restart it when it exits with a non-zero code (drivers only).
    pub supervise: bool,
    /// The client credential a driver calls the masters with, when it is not the worker's
    /// own (a named user's driver).
    #[serde(default)]
    pub credential: Option<String>,
    /// The addresses of the custom resources it holds (which GPUs are its own): passed as
    /// `MUSTER_RESOURCE_<NAME>` (`gpu=0,2` as `MUSTER_RESOURCE_GPU=0,2`), a GPU's also as
    /// `CUDA_VISIBLE_DEVICES`, and all of them in a Spark resources file whose path is in
    /// `MUSTER_RESOURCES_FILE` (what Spark's executor takes as `--resourcesFile`).
    #[serde(default)]
    pub addresses: ResourceAddresses,
}

/// The variable that names the resources file of a process holding resource addresses.
pub const RESOURCES_FILE_VARIABLE: &str = "MUSTER_RESOURCES_FILE";

/// The file in a process's directory that lists the addresses it holds.
const RESOURCES_FILE: &str = "resources.json";

impl LaunchSpec {
    /// The variables that tell the process its addresses: `MUSTER_RESOURCE_<NAME>` for each
    /// resource (the name upper-cased, other characters than letters and digits as `_`), and
    /// `CUDA_VISIBLE_DEVICES` for `gpu`.
    fn address_environment(&self) -> Vec<(String, String)> {
        let mut environment = Vec::new();
        for (name, list) in &self.addresses {
            let variable: String = name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() {
                        c.to_ascii_uppercase()
                    } else {
                        '_'
                    }
                })
                .collect();
            environment.push((format!("MUSTER_RESOURCE_{variable}"), list.join(",")));
            if name == "gpu" {
                environment.push(("CUDA_VISIBLE_DEVICES".to_owned(), list.join(",")));
            }
        }
        environment
    }

    /// The addresses as Spark's resources file lists them (`ResourceAllocation`s of
    /// `spark.executor` or `spark.driver`).
    fn resources_file(&self) -> String {
        let component = match self.workload {
            Workload::Driver { .. } => "spark.driver",
            Workload::Executor { .. } | Workload::ShuffleService => "spark.executor",
        };
        let allocations: Vec<serde_json::Value> = self
            .addresses
            .iter()
            .map(|(name, list)| {
                serde_json::json!({
                    "id": {"componentName": component, "resourceName": name},
                    "addresses": list,
                })
            })
            .collect();
        serde_json::Value::from(allocations).to_string()
    }
}

/// How processes are run.
#[derive(Clone, Debug)]
pub struct SupervisorConfig {
    /// Parent of every process's directory.
    pub work_dir: PathBuf,
    /// The masters' addresses, passed as `MUSTER_MASTERS`.
    pub masters: String,
    /// The worker's host name, passed as `MUSTER_HOST`.
    pub host: String,
    /// The worker's rack label, passed as `MUSTER_RACK` (empty: none).
    pub rack: String,
    /// What drivers get on top, so that they can call the masters as clients: the client
    /// credential (`MUSTER_CREDENTIAL`), the CA (`MUSTER_TLS_CA`) and the `muster` binary
    /// (`MUSTER_BIN`).
    pub driver_environment: Vec<(&'static str, String)>,
    /// What executors get on top: the port of the worker's shuffle service.
    pub executor_environment: Vec<(&'static str, String)>,
    /// Time between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// First wait before restarting a failed supervised driver.
    pub restart_backoff: Duration,
    /// A run longer than this resets the back-off.
    pub successful_run: Duration,
    /// The control groups that limit each process to its grant; `None` runs them unlimited.
    pub isolation: Option<Cgroups>,
    /// With fencing on, the agent's fence file, which each process's wrapper watches (see
    /// [`WRAPPER`]) so that nothing outlives its agent unadopted past the worker timeout.
    pub fence_file: Option<PathBuf>,
}

impl SupervisorConfig {
    /// What the process of `spec` learns about its worker: `MUSTER_MASTERS`, `MUSTER_HOST`,
    /// with a label `MUSTER_RACK`; for a driver how to call the masters, with its own
    /// credential if it has one; for an executor the executors' extra environment.
    fn environment(&self, spec: &LaunchSpec) -> Vec<(&'static str, String)> {
        let mut environment = vec![
            ("MUSTER_MASTERS", self.masters.clone()),
            ("MUSTER_HOST", self.host.clone()),
        ];
        if !self.rack.is_empty() {
            environment.push(("MUSTER_RACK", self.rack.clone()));
        }
        match spec.workload {
            Workload::Driver { .. } => {
                environment.extend(self.driver_environment.iter().cloned());
                if let Some(credential) = &spec.credential {
                    environment.retain(|(name, _)| *name != CREDENTIAL_VARIABLE);
                    environment.push((CREDENTIAL_VARIABLE, credential.clone()));
                }
            }
            Workload::Executor { .. } => {
                environment.extend(self.executor_environment.iter().cloned());
            }
            Workload::ShuffleService => {}
        }
        environment
    }

    /// Spark's timings: 10 s grace, back-off from 1 s, reset after a 5 s run.
    pub fn new(work_dir: PathBuf, masters: String) -> Self {
        Self {
            work_dir,
            masters,
            host: String::new(),
            rack: String::new(),
            driver_environment: Vec::new(),
            executor_environment: Vec::new(),
            kill_grace: Duration::from_secs(10),
            restart_backoff: restarts::FIRST_BACKOFF,
            successful_run: restarts::SUCCESSFUL_RUN,
            isolation: None,
            fence_file: None,
        }
    }
}

/// What happened to a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProcessState {
    /// It started with this process id.
    Running {
        /// Its process id, also its process group id.
        pid: u32,
        /// A supervised driver started again: its restarts as they were when this run
        /// started, whatever happened since.
        restarts: Option<Restarts<Instant>>,
    },
    /// It exited by itself with this code (128 + the signal number when a signal ended it).
    Exited {
        /// The exit code.
        code: i32,
    },
    /// It was killed on request, and ended with this code (128 + the signal's number when the
    /// signal ended it), when known.
    Killed {
        /// Its exit code.
        code: Option<i32>,
    },
    /// The kernel killed it for going over its memory limit.
    OutOfMemory,
    /// A supervised driver failed and starts again after `after`.
    Restarting {
        /// Which restart this is, from 1.
        attempt: u32,
        /// The back-off before it.
        after: Duration,
        /// The exit code of the run that failed, when it had one (the over-memory code when
        /// the kernel killed it).
        last_exit_code: Option<i32>,
    },
    /// A restart could not start the program; the workload is over.
    Failed {
        /// Why.
        reason: String,
    },
}

/// One thing that happened to one workload's process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessEvent {
    /// The workload.
    pub workload: Workload,
    /// What happened.
    pub state: ProcessState,
}

/// Why a launch was refused.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The workload already runs here.
    #[error("{0} is already running")]
    AlreadyRunning(Workload),
    /// The workload's process is being killed and is not gone yet.
    #[error("{0} is still being stopped")]
    Stopping(Workload),
    /// An id cannot name a directory (empty, `.`, `..` or containing `/`).
    #[error("id `{0}` cannot name a directory")]
    UnsafeId(String),
    /// The process or its directory could not be created.
    #[error("cannot start the process: {0}")]
    Io(#[from] std::io::Error),
    /// Its control group could not be set up.
    #[error("cannot limit the process: {0}")]
    Isolation(#[from] IsolationError),
}

/// A running workload: its current process id and the way to ask its monitor to kill it.
struct Running {
    /// What it was started as.
    spec: LaunchSpec,
    pid: Arc<Mutex<u32>>,
    restarts: Arc<Mutex<Restarts<Instant>>>,
    /// Taken once a kill is asked: the process is stopping.
    kill: Option<oneshot::Sender<Duration>>,
    done: oneshot::Receiver<()>,
}

/// Starts, watches and kills the worker's child processes.
pub struct Supervisor {
    config: SupervisorConfig,
    records: Records,
    events: mpsc::UnboundedSender<ProcessEvent>,
    running: Arc<Mutex<BTreeMap<Workload, Running>>>,
}

/// The work dir's list of directories [`Supervisor::clean_up`] removed, relative to it, one a
/// line.
pub const CLEANED_UP_FILE: &str = "cleaned-up";

/// How many removed directories [`CLEANED_UP_FILE`] remembers.
const CLEANED_UP_KEPT: usize = 10_000;

/// The directories of drivers (`driver-*`) and executors (`app-*/N`) in `work_dir`. An
/// application's data is not among them: a shuffle service may serve it long after its
/// executors here ended, so only the leader's word that the application ended removes it.
fn process_directories(work_dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut directories = Vec::new();
    for entry in fs::read_dir(work_dir)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if !is_dir {
            continue;
        }
        if name.starts_with("driver-") {
            directories.push(entry.path());
        } else if name.starts_with("app-") {
            let executors = fs::read_dir(entry.path())?.flatten();
            directories.extend(
                executors
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
    Ok(directories)
}

/// The directories of applications' data (`local/app-*`) in `work_dir`; nothing else there
/// (the shuffle service reads `local/` too) is taken for one.
fn app_data_directories(work_dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(work_dir.join(LOCAL_DIRECTORY)) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| e.file_name().to_string_lossy().starts_with("app-"))
        .map(|e| e.path())
        .collect()
}

/// What `directory` holds, in bytes, and when anything in it was last written; symbolic
/// links are not followed.
fn size_and_last_write(directory: &Path) -> (u64, SystemTime) {
    let mut bytes = 0;
    let mut last = fs::symlink_metadata(directory)
        .and_then(|m| m.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let mut pending = vec![directory.to_path_buf()];
    while let Some(next) = pending.pop() {
        let Ok(entries) = fs::read_dir(&next) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(metadata) = entry.path().symlink_metadata() else {
                continue;
            };
            if let Ok(modified) = metadata.modified() {
                last = last.max(modified);
            }
            if metadata.is_dir() {
                pending.push(entry.path());
            } else {
                bytes += metadata.len();
            }
        }
    }
    (bytes, last)
}

fn safe_component(id: &str) -> Result<&str, LaunchError> {
    if names_a_directory(id) {
        Ok(id)
    } else {
        Err(LaunchError::UnsafeId(id.to_owned()))
    }
}

impl Supervisor {
    /// A supervisor and the channel its events arrive on.
    pub fn new(config: SupervisorConfig) -> (Self, mpsc::UnboundedReceiver<ProcessEvent>) {
        let (events, receiver) = mpsc::unbounded_channel();
        (
            Self {
                records: Records::new(&config.work_dir),
                config,
                events,
                running: Arc::default(),
            },
            receiver,
        )
    }

    fn directory(&self, workload: &Workload) -> Result<PathBuf, LaunchError> {
        Ok(match workload {
            Workload::Executor { app, executor } => self
                .config
                .work_dir
                .join(safe_component(&app.0)?)
                .join(executor.to_string()),
            Workload::Driver { driver } => self.config.work_dir.join(safe_component(&driver.0)?),
            Workload::ShuffleService => self.config.work_dir.join(SHUFFLE_SERVICE_DIRECTORY),
        })
    }

    /// The directory application `app`'s executors here share, absolute: a process runs in
    /// its own directory.
    fn data_directory(&self, app: &AppId) -> Result<PathBuf, LaunchError> {
        Ok(self
            .canonical_work_dir()
            .join(LOCAL_DIRECTORY)
            .join(safe_component(&app.0)?))
    }

    /// The applications whose data this worker keeps.
    pub fn apps_with_data(&self) -> Vec<AppId> {
        app_data_directories(&self.config.work_dir)
            .iter()
            .filter_map(|d| Some(d.file_name()?.to_str()?.into()))
            .collect()
    }

    /// Removes the data of `app`, which has ended, unless one of its executors still runs
    /// here (its end is not in yet): the next heartbeat asks again. Returns whether it went.
    pub fn remove_app_data(&self, app: &AppId) -> bool {
        let runs_here = self
            .running()
            .iter()
            .any(|(w, _)| matches!(w, Workload::Executor { app: a, .. } if a == app));
        let Some(directory) = self.data_directory(app).ok().filter(|_| !runs_here) else {
            return false;
        };
        match fs::remove_dir_all(&directory) {
            Ok(()) => true,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => true,
            Err(error) => {
                tracing::warn!(%app, %error, "cannot remove an ended application's data");
                false
            }
        }
    }

    /// Where `workload`'s process writes `stream`, whether it runs now, ran before or never.
    ///
    /// # Errors
    ///
    /// An id cannot name a directory.
    pub fn output_file(&self, workload: &Workload, stream: Stream) -> Result<PathBuf, LaunchError> {
        Ok(self.directory(workload)?.join(stream.file_name()))
    }

    /// Starts `spec`'s process and returns its process id; a [`ProcessState::Running`] event
    /// follows, and every later change of the process.
    ///
    /// # Errors
    ///
    /// The workload already runs, an id cannot name a directory, or the program or its
    /// directory could not be created. Nothing runs then.
    pub fn launch(&self, spec: LaunchSpec) -> Result<u32, LaunchError> {
        self.launch_after(spec, Restarts::default())
    }

    /// [`Supervisor::launch`], for a supervised driver already started `restarts` times
    /// here (by this agent or a predecessor): it goes on counting.
    fn launch_after(
        &self,
        spec: LaunchSpec,
        restarts: Restarts<Instant>,
    ) -> Result<u32, LaunchError> {
        let mut running = self.running.lock().expect("running lock");
        match running.get(&spec.workload) {
            Some(entry) if entry.kill.is_none() => {
                return Err(LaunchError::Stopping(spec.workload));
            }
            Some(_) => return Err(LaunchError::AlreadyRunning(spec.workload)),
            None => {}
        }
        let directory = self.directory(&spec.workload)?;
        executable(&spec.command).map_err(LaunchError::Io)?;
        fs::create_dir_all(&directory).map_err(LaunchError::Io)?;
        let launcher = self.launcher(spec, directory);
        let (child, group) = launcher.spawn()?;
        let pid = child.id().expect("a just-spawned child has an id");
        self.record(&launcher.spec, pid, &restarts);
        let monitor = self.monitor(&mut running, launcher, pid, group, restarts);
        let span = process_span(&monitor.launcher.spec.workload);
        let backoff = monitor.backoff();
        tokio::spawn(async move { monitor.run(child, backoff).await }.instrument(span));
        Ok(pid)
    }

    fn record(&self, spec: &LaunchSpec, pid: u32, restarts: &Restarts<Instant>) {
        if let Err(error) = self.records.write(spec, pid, restarts) {
            tracing::warn!(workload = %spec.workload, %error, "cannot record a process");
        }
    }

    /// Lists a running workload, started `restarts` times before, and returns the monitor
    /// that will watch it.
    fn monitor(
        &self,
        running: &mut BTreeMap<Workload, Running>,
        launcher: Launcher,
        pid: u32,
        group: Option<ProcessGroup>,
        restarts: Restarts<Instant>,
    ) -> Monitor {
        let (kill, kill_requested) = oneshot::channel();
        let (finished, done) = oneshot::channel();
        let pid_cell = Arc::new(Mutex::new(pid));
        let restarts = Arc::new(Mutex::new(restarts));
        running.insert(
            launcher.spec.workload.clone(),
            Running {
                spec: launcher.spec.clone(),
                pid: Arc::clone(&pid_cell),
                restarts: Arc::clone(&restarts),
                kill: Some(kill),
                done,
            },
        );
        Monitor {
            launcher,
            config: self.config.clone(),
            records: self.records.clone(),
            events: self.events.clone(),
            running: Arc::clone(&self.running),
            pid: pid_cell,
            restarts,
            group,
            kill_requested,
            _finished: finished,
        }
    }

    /// What starts `spec`'s process in `directory`, again on every restart.
    fn launcher(&self, spec: LaunchSpec, directory: PathBuf) -> Launcher {
        // Its id names a directory: `directory` was found for it.
        let data_directory = match &spec.workload {
            Workload::Executor { app, .. } => self.data_directory(app).ok(),
            Workload::Driver { .. } | Workload::ShuffleService => None,
        };
        let assigned = spec.workload.is_assigned();
        Launcher {
            environment: self.config.environment(&spec),
            spec,
            directory,
            data_directory,
            work_dir: self.work_dir_marker(),
            isolation: self.config.isolation.clone().filter(|_| assigned),
            fence_file: self.config.fence_file.clone().filter(|_| assigned),
        }
    }

    /// The work dir as every process started for it sees it in its environment.
    fn work_dir_marker(&self) -> String {
        self.canonical_work_dir().display().to_string()
    }

    /// The work dir, as an absolute path without links.
    pub fn canonical_work_dir(&self) -> PathBuf {
        fs::canonicalize(&self.config.work_dir).unwrap_or_else(|_| self.config.work_dir.clone())
    }

    fn report_end(&self, record: &Record, state: ProcessState) {
        let _ = self.events.send(ProcessEvent {
            workload: record.spec.workload.clone(),
            state,
        });
    }

    /// Removes the directories of ended processes that `policy` says go at `now` (see
    /// [`crate::cleanup`]), never one of a process that runs, waits to start again, or whose
    /// end the leader may not have yet, and notes each in [`CLEANED_UP_FILE`]: the
    /// directories removed.
    ///
    /// # Errors
    ///
    /// The work dir cannot be read.
    pub fn clean_up(
        &self,
        now: SystemTime,
        policy: &CleanupPolicy,
    ) -> std::io::Result<Vec<PathBuf>> {
        let busy: BTreeSet<PathBuf> = self
            .running()
            .into_iter()
            .map(|(workload, _)| workload)
            .chain(self.records.all().into_iter().map(|r| r.spec.workload))
            .filter_map(|workload| self.directory(&workload).ok())
            .collect();
        let mut ended = Vec::new();
        let mut live_bytes = 0;
        for directory in process_directories(&self.config.work_dir)? {
            let (bytes, last_write) = size_and_last_write(&directory);
            if busy.contains(&directory) {
                live_bytes += bytes;
                continue;
            }
            // The wrapper writes `exit` as the process ends.
            let at = fs::metadata(directory.join("exit"))
                .and_then(|m| m.modified())
                .unwrap_or(last_write);
            ended.push(Ended {
                path: directory,
                at,
                bytes,
            });
        }
        let removed: Vec<PathBuf> = cleanup::to_remove(&ended, live_bytes, now, policy)
            .into_iter()
            .filter(|directory| fs::remove_dir_all(directory).is_ok())
            .collect();
        for directory in &removed {
            // An application's directory goes with its last executor's.
            if let Some(app) = directory.parent().filter(|p| *p != self.config.work_dir) {
                let _ = fs::remove_dir(app);
            }
        }
        if !removed.is_empty() {
            self.note_cleaned_up(&removed);
        }
        Ok(removed)
    }

    /// Adds `removed` to [`CLEANED_UP_FILE`], keeping its latest [`CLEANED_UP_KEPT`] lines.
    fn note_cleaned_up(&self, removed: &[PathBuf]) {
        let path = self.config.work_dir.join(CLEANED_UP_FILE);
        let mut lines: Vec<String> = fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        lines.extend(removed.iter().filter_map(|directory| {
            let relative = directory.strip_prefix(&self.config.work_dir).ok()?;
            Some(relative.display().to_string())
        }));
        let keep = lines.len().saturating_sub(CLEANED_UP_KEPT);
        let _ = fs::write(&path, lines[keep..].join("\n") + "\n");
    }

    /// Whether `workload`'s directory was removed by [`Supervisor::clean_up`] (among the
    /// latest [`CLEANED_UP_KEPT`]).
    pub fn cleaned_up(&self, workload: &Workload) -> bool {
        let Ok(directory) = self.directory(workload) else {
            return false;
        };
        let Ok(relative) = directory.strip_prefix(&self.config.work_dir) else {
            return false;
        };
        let relative = relative.display().to_string();
        fs::read_to_string(self.config.work_dir.join(CLEANED_UP_FILE))
            .is_ok_and(|noted| noted.lines().any(|line| line == relative))
    }

    /// Forgets the records of `workload`'s ended processes, once the leader has their end.
    pub fn forget(&self, workload: &Workload) {
        for record in self.records.all() {
            if &record.spec.workload == workload && !still_runs(&record) {
                self.records.remove(record.pid);
            }
        }
    }

    /// Asks `workload`'s process to stop: SIGTERM to its group, SIGKILL after `grace` or
    /// the configured kill grace, whichever is shorter. Returns whether it was running and
    /// not already stopping; a [`ProcessState::Killed`] event follows once it is gone, and
    /// [`Supervisor::running`] lists it until then.
    pub fn kill(&self, workload: &Workload, grace: Option<Duration>) -> bool {
        let grace = grace.map_or(self.config.kill_grace, |g| g.min(self.config.kill_grace));
        let mut running = self.running.lock().expect("running lock");
        // The workload stays listed until its process is gone: a registration meanwhile still
        // reports it, and no second copy can be launched beside it.
        let kill = running.get_mut(workload).and_then(|r| r.kill.take());
        kill.map(|kill| kill.send(grace)).is_some()
    }

    /// The process id of `workload`, while it runs: 0 while a supervised driver waits to
    /// start again.
    pub fn pid(&self, workload: &Workload) -> Option<u32> {
        let running = self.running.lock().expect("running lock");
        running
            .get(workload)
            .map(|r| *r.pid.lock().expect("pid lock"))
    }

    /// What `workload` was started as, while it runs (by a predecessor, if adopted).
    pub fn launched(&self, workload: &Workload) -> Option<LaunchSpec> {
        let running = self.running.lock().expect("running lock");
        running.get(workload).map(|r| r.spec.clone())
    }

    /// The restarts of `workload`, a supervised driver started again here since this agent
    /// watches it; `None` for one never started again.
    pub fn restarts(&self, workload: &Workload) -> Option<Restarts<Instant>> {
        let running = self.running.lock().expect("running lock");
        let restarts = *running
            .get(workload)?
            .restarts
            .lock()
            .expect("restarts lock");
        (restarts.count > 0).then_some(restarts)
    }

    /// The workloads running now, with their process ids (0 for a supervised driver that
    /// waits to start again).
    pub fn running(&self) -> Vec<(Workload, u32)> {
        let running = self.running.lock().expect("running lock");
        running
            .iter()
            .map(|(w, r)| (w.clone(), *r.pid.lock().expect("pid lock")))
            .collect()
    }

    /// What each process running now uses, where processes run in control groups.
    pub fn usage(&self) -> Vec<(Workload, Usage)> {
        let Some(cgroups) = &self.config.isolation else {
            return Vec::new();
        };
        self.running()
            .into_iter()
            .filter(|(workload, _)| workload.is_assigned())
            .filter_map(|(workload, _)| {
                let usage = cgroups.existing(&workload.group_name()).usage()?;
                Some((workload, usage))
            })
            .collect()
    }

    /// Kills every process and waits until all are gone; their control groups go with them.
    pub async fn shutdown(&self) {
        let all = std::mem::take(&mut *self.running.lock().expect("running lock"));
        let mut stopping = Vec::new();
        for running in all.into_values() {
            if let Some(kill) = running.kill {
                let _ = kill.send(self.config.kill_grace);
            }
            stopping.push(running.done);
        }
        for done in stopping {
            let _ = done.await;
        }
        if let Some(cgroups) = &self.config.isolation {
            cgroups.close();
        }
    }
}
