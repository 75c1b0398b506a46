//! Starting a workload's process: the `/bin/sh` wrapper that records its exit code, joins
//! its control groups and, with fencing on, watches the fence file; the process's directory,
//! output files and environment; and the check that its program can run at all.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use muster_proto::auth::SECRET_FILE_VARIABLE;
use tokio::process::{Child, Command};

use crate::isolation::{Cgroups, ProcessGroup};
use crate::output::Stream;

use super::{
    LOCAL_DIR_VARIABLE, LaunchError, LaunchSpec, RESOURCES_FILE, RESOURCES_FILE_VARIABLE, Workload,
};

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
pub(super) const WRAPPER: &str = r#"trap : TERM INT; set -f
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
pub(super) const FENCE_VARIABLE: &str = "MUSTER_FENCE_FILE";
/// The file in a process's directory that says the kernel killed its last run for going over
/// its memory limit, for a later agent to read.
pub(super) const OUT_OF_MEMORY_MARKER: &str = "oom";
/// The environment variable that tells the wrapper which control groups to join.
pub(super) const CGROUPS_VARIABLE: &str = "MUSTER_CGROUP_PROCS";
/// The environment variable naming the work dir a process was started for.
pub(super) const WORK_DIR_VARIABLE: &str = "MUSTER_WORK_DIR";

/// Checks that `program` names an executable file, directly or through `PATH`, as starting
/// it would: the wrapper would otherwise start and only then fail.
pub(super) fn executable(program: &str) -> std::io::Result<()> {
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
pub(super) struct Launcher {
    pub(super) spec: LaunchSpec,
    pub(super) directory: PathBuf,
    /// The worker's `MUSTER_*` variables.
    pub(super) environment: Vec<(&'static str, String)>,
    /// The directory its application's executors here share, for an executor.
    pub(super) data_directory: Option<PathBuf>,
    /// The work dir, canonical, passed as `MUSTER_WORK_DIR`.
    pub(super) work_dir: String,
    /// Limits each run of the process to its grant, in a fresh control group.
    pub(super) isolation: Option<Cgroups>,
    /// The fence file the wrapper watches, with fencing on.
    pub(super) fence_file: Option<PathBuf>,
}

impl Launcher {
    /// Starts the process, in a control group of its own when processes are limited.
    pub(super) fn spawn(&self) -> Result<(Child, Option<ProcessGroup>), LaunchError> {
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
    pub(super) fn existing_group(&self) -> Option<ProcessGroup> {
        let name = self.spec.workload.group_name();
        self.isolation
            .as_ref()
            .map(|cgroups| cgroups.existing(&name))
    }
}
