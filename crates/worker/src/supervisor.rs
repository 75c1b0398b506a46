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

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use muster_core::ids::{AppId, DriverId, ExecutorId};
use muster_core::limits::names_a_directory;
use muster_core::resources::{ResourceAddresses, Resources, Usage};
use muster_core::restarts::{self, Backoff, Restarts};
use muster_proto::auth::{CREDENTIAL_VARIABLE, SECRET_FILE_VARIABLE};
use muster_proto::exit;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use crate::cleanup::{self, CleanupPolicy, Ended};
use crate::isolation::{Cgroups, IsolationError, ProcessGroup};
use crate::output::Stream;
use crate::records::{Record, Records, exit_code, process_group, still_runs};

/// Joins the process's control groups (the `cgroup.procs` files in
/// [`CGROUPS_VARIABLE`], if any), runs the program and writes its exit code next to it, for
/// a later agent to read. The wrapper outlives a SIGTERM to the group (a handler, unlike an
/// ignored signal, is not inherited), so it waits for the program and the grace period
/// applies to the program.
///
/// With a fence file (fencing on), the wrapper also watches it: the file holds the worker
/// timeout in ms, and the contact file beside it ([`crate::fence`]) when an agent on this
/// work dir last heard from a leader, in seconds since this boot (the file's age where the
/// contact does not count: of another boot, or older than the file's time). Once that is longer ago than the timeout and 2 s more
/// (the agent gone and nobody adopting its work; an agent still there fences first, at the
/// timeout), the wrapper kills its whole process group. A leader relaunches a fencing
/// worker's work only after the timeout, the kill grace and a 5 s margin.
const WRAPPER: &str = r#"trap : TERM INT; set -f
for procs in $MUSTER_CGROUP_PROCS; do
  echo $$ > "$procs" || { echo "muster: cannot join the control group $procs" >&2; exit 125; }
done
unset MUSTER_CGROUP_PROCS
fence=$MUSTER_FENCE_FILE; unset MUSTER_FENCE_FILE; watch=
if [ -n "$fence" ]; then
  (while sleep 1; do
    timeout=$(cat "$fence" 2>/dev/null) && [ -n "$timeout" ] || continue
    if [ ! "$fence" -nt "$fence.contact" ] &&
      read -r boot contact 2>/dev/null < "$fence.contact" &&
      [ "$boot" = "$(cat /proc/sys/kernel/random/boot_id)" ]; then
      read -r now _ < /proc/uptime; now=${now%.*}
    else
      contact=$(stat -c %Y "$fence" 2>/dev/null) || continue; now=$(date +%s)
    fi
    [ $(( now - contact )) -gt $(( timeout / 1000 + 2 )) ] && kill -KILL 0
  done) &
  watch=$!
fi
"$@"; code=$?; echo "$code" > exit; [ -z "$watch" ] || kill "$watch"; exit "$code""#;
/// The environment variable that gives the wrapper the fence file to watch, if any.
const FENCE_VARIABLE: &str = "MUSTER_FENCE_FILE";
/// The file in a process's directory that says the kernel killed its last run for going over
/// its memory limit, for a later agent to read.
const OUT_OF_MEMORY_MARKER: &str = "oom";
/// The environment variable that tells the wrapper which control groups to join.
const CGROUPS_VARIABLE: &str = "MUSTER_CGROUP_PROCS";
/// The environment variable naming the work dir a process was started for.
const WORK_DIR_VARIABLE: &str = "MUSTER_WORK_DIR";
/// How often an adopted process, which is not a child, is checked.
const ADOPTED_POLL: Duration = Duration::from_millis(200);

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

/// Checks that `program` names an executable file, directly or through `PATH`, as starting
/// it would: the wrapper would otherwise start and only then fail.
fn executable(program: &str) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |path: &std::path::Path| {
        fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let found = if program.contains('/') {
        runnable(std::path::Path::new(program))
    } else {
        std::env::var_os("PATH").is_some_and(|path| {
            std::env::split_paths(&path).any(|dir| runnable(&dir.join(program)))
        })
    };
    if found {
        Ok(())
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("no executable program `{program}`"),
        ))
    }
}

/// Everything needed to start one workload's process, again on every restart.
struct Launcher {
    spec: LaunchSpec,
    directory: PathBuf,
    /// The worker's `MUSTER_*` variables.
    environment: Vec<(&'static str, String)>,
    /// The directory its application's executors here share, for an executor.
    data_directory: Option<PathBuf>,
    /// The work dir, canonical, passed as `MUSTER_WORK_DIR`.
    work_dir: String,
    /// Limits each run of the process to its grant, in a fresh control group.
    isolation: Option<Cgroups>,
    /// The fence file the wrapper watches, with fencing on.
    fence_file: Option<PathBuf>,
}

impl Launcher {
    /// Starts the process, in a control group of its own when processes are limited.
    fn spawn(&self) -> Result<(Child, Option<ProcessGroup>), LaunchError> {
        let spec = &self.spec;
        let stdout = File::options()
            .create(true)
            .append(true)
            .open(self.directory.join(Stream::Stdout.file_name()))?;
        let stderr = File::options()
            .create(true)
            .append(true)
            .open(self.directory.join(Stream::Stderr.file_name()))?;
        for marker in ["exit", "killed", OUT_OF_MEMORY_MARKER] {
            let _ = fs::remove_file(self.directory.join(marker));
        }
        let mut command_environment = spec.address_environment();
        if !spec.addresses.is_empty() {
            let file = self.directory.join(RESOURCES_FILE);
            fs::write(&file, spec.resources_file())?;
            command_environment.push((
                RESOURCES_FILE_VARIABLE.to_owned(),
                file.display().to_string(),
            ));
        }
        if let Some(data) = &self.data_directory {
            fs::create_dir_all(data)?;
            command_environment.push((LOCAL_DIR_VARIABLE.to_owned(), data.display().to_string()));
        }
        let group = match &self.isolation {
            Some(cgroups) => Some(cgroups.create(&spec.workload.group_name(), &spec.resources)?),
            None => None,
        };
        let procs_files = group.as_ref().map(ProcessGroup::procs_files);
        let joins = procs_files
            .unwrap_or_default()
            .iter()
            .map(|file| file.display().to_string())
            .collect::<Vec<_>>()
            .join(" ");
        let mut command = Command::new("/bin/sh");
        command
            .arg("-c")
            .arg(WRAPPER)
            .arg(&spec.command)
            .arg(&spec.command)
            .args(&spec.args)
            .current_dir(&self.directory)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0)
            // The worker's own secret is not its processes': a driver calls the masters with
            // the credential it is given.
            .env_remove(SECRET_FILE_VARIABLE)
            .env("MUSTER_CORES", spec.resources.cores.to_string())
            .env("MUSTER_MEMORY_MB", spec.resources.memory_mb.to_string())
            .envs(self.environment.iter().map(|(name, value)| (name, value)))
            .env(WORK_DIR_VARIABLE, &self.work_dir)
            .envs(&spec.env)
            // What it holds is the worker's to say, whatever its own environment asks.
            .envs(command_environment)
            .env(CGROUPS_VARIABLE, joins)
            .env(
                FENCE_VARIABLE,
                self.fence_file.as_deref().unwrap_or(Path::new("")),
            );
        match &spec.workload {
            Workload::Executor { app, executor } => {
                command
                    .env("MUSTER_APP_ID", &*app.0)
                    .env("MUSTER_EXECUTOR_ID", executor.to_string());
            }
            Workload::Driver { driver } => {
                command.env("MUSTER_DRIVER_ID", &driver.0);
            }
            Workload::ShuffleService => {}
        }
        match command.spawn() {
            Ok(child) => Ok((child, group)),
            Err(error) => {
                if let Some(group) = group {
                    group.remove();
                }
                Err(error.into())
            }
        }
    }

    /// The control group a predecessor's run of the process is in, when processes are
    /// limited.
    fn existing_group(&self) -> Option<ProcessGroup> {
        let name = self.spec.workload.group_name();
        self.isolation
            .as_ref()
            .map(|cgroups| cgroups.existing(&name))
    }
}

/// Watches one workload's process until it is over.
struct Monitor {
    launcher: Launcher,
    config: SupervisorConfig,
    records: Records,
    events: mpsc::UnboundedSender<ProcessEvent>,
    running: Arc<Mutex<BTreeMap<Workload, Running>>>,
    pid: Arc<Mutex<u32>>,
    restarts: Arc<Mutex<Restarts<Instant>>>,
    /// The control group of the current run, when processes are limited.
    group: Option<ProcessGroup>,
    kill_requested: oneshot::Receiver<Duration>,
    /// Dropped when the monitor is done: [`Supervisor::shutdown`] waits for that.
    _finished: oneshot::Sender<()>,
}

/// The span a process's monitor logs in: its driver, or its app and executor.
fn process_span(workload: &Workload) -> tracing::Span {
    match workload {
        Workload::Driver { driver } => tracing::info_span!("driver", driver = %driver),
        Workload::Executor { app, executor } => {
            tracing::info_span!("executor", app = %app, executor = %executor)
        }
        Workload::ShuffleService => tracing::info_span!("shuffle_service"),
    }
}

impl Monitor {
    fn report(&self, state: ProcessState) {
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

    fn current_pid(&self) -> u32 {
        *self.pid.lock().expect("pid lock")
    }

    /// Removes the control group of the run that ended with `code`, killing what is left in
    /// it; whether the kernel killed the run for going over its memory limit. A run that
    /// exited 0 did not fail, whatever the kernel killed on its way.
    async fn release_group(&mut self, code: Option<i32>) -> bool {
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
    fn backoff(&self) -> Backoff {
        Backoff::new(self.config.restart_backoff, self.config.successful_run)
    }

    /// Watches `child` until it ends, starting a failed supervised driver again after
    /// `backoff`.
    async fn run(mut self, mut child: Child, mut backoff: Backoff) {
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
    async fn restart(&mut self, backoff: Duration, last_exit_code: Option<i32>) -> Option<Child> {
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
    async fn run_adopted(mut self, record: Record) {
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
    async fn stop_adopted(&self, record: &Record, grace: Duration) {
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
    async fn stop(&self, child: &mut Child, pid: u32, grace: Duration) -> Option<i32> {
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
    fn finish(&self, state: ProcessState) {
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
fn exit_code_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .unwrap_or(-1)
}
