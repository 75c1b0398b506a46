//! Limits on what each driver and executor may use, enforced by the kernel's control groups
//! (cgroup v2, or the v1 controllers) as YARN's and Nomad's agents enforce them.
//!
//! The worker owns one parent group, named after its id so that an agent restarted on the
//! same work dir (which keeps the id) finds it again, and puts every process it starts in a
//! group of its own below it: memory limited to the grant (plus [`Limits::memory_overhead`]), CPU weighted by
//! the granted cores (and capped at them under [`Limits::cpu_quota`]), processes bounded by
//! [`Limits::max_processes`]. The process's wrapper joins its group before the program
//! starts, so nothing the program forks escapes it. When the process is over, its group
//! tells whether the kernel killed it for going over its memory limit, and is removed.
//!
//! Where the machine offers no usable control groups (controllers missing, no permission, a
//! limit that does not take), [`Cgroups::open`] says why and the worker may run without
//! limits.

use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cgroups_rs::cgroup_builder::CgroupBuilder;
use cgroups_rs::cpu::CpuController;
use cgroups_rs::cpuacct::CpuAcctController;
use cgroups_rs::hierarchies::{self, V1};
use cgroups_rs::memory::MemController;
use cgroups_rs::{Cgroup, Controller, Controllers, MaxValue};
use muster_core::ids::{RequestId, WorkerId};
use muster_core::resources::{Resources, Usage};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The controllers every process's group uses.
const CONTROLLERS: [Controllers; 3] = [Controllers::Mem, Controllers::Cpu, Controllers::Pids];

/// A v1 controller a group also joins where it is mounted and the worker can make its groups
/// there, to count the CPU time of its processes ([`ProcessGroup::usage`]); v2 counts it in
/// the `cpu` controller.
const ACCOUNTING: Controllers = Controllers::CpuAcct;

/// How long the removal of a group waits for its killed processes to be gone.
const REMOVAL_PATIENCE: Duration = Duration::from_secs(5);

/// The group [`Cgroups::open`] tries its limits on: no process's (those are named after
/// driver and executor ids).
const PROBE: &str = "probe";

/// The CFS period a hard CPU quota is expressed in, in microseconds.
const CPU_PERIOD_US: u64 = 100_000;

/// How much of its grant a process may use.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    /// The memory limit is the granted memory times `1 + memory_overhead`.
    pub memory_overhead: f64,
    /// Cap CPU time at the granted cores (a CFS quota) rather than only weighting it.
    pub cpu_quota: bool,
    /// The most processes (and threads) one driver or executor may run at once.
    pub max_processes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_overhead: 0.0,
            cpu_quota: false,
            max_processes: 4096,
        }
    }
}

impl Limits {
    /// The memory limit of a grant of `memory_mb`, in bytes.
    fn memory_bytes(&self, memory_mb: u64) -> i64 {
        let bytes = memory_mb as f64 * 1024.0 * 1024.0 * (1.0 + self.memory_overhead);
        bytes.min(i64::MAX as f64) as i64
    }
}

/// Why the worker cannot use control groups.
#[derive(Debug, thiserror::Error)]
pub enum IsolationError {
    /// A controller the limits need is not mounted or not enabled.
    #[error("no {0} controller (cgroup v1 or v2) is available")]
    MissingController(&'static str),
    /// A group could not be created or limited (most often: no permission).
    #[error("cannot set up the control group `{group}`: {cause}")]
    Setup {
        /// The group, relative to the hierarchy's root.
        group: String,
        /// What failed.
        cause: String,
    },
    /// A group's path has white space, which the processes' wrapper cannot name.
    #[error("the control group path `{0}` contains white space")]
    UnusablePath(String),
}

/// The control groups of one worker: its parent group and how it limits each process.
#[derive(Clone, Debug)]
pub struct Cgroups {
    /// The parent group, relative to each hierarchy's root.
    parent: String,
    limits: Limits,
    /// Groups join [`ACCOUNTING`] too (v1, where the worker could make its parent there).
    cpu_accounting: bool,
}

impl Cgroups {
    /// Opens (creating if need be) the parent group of worker `worker`, and checks on a
    /// group of its own that every controller reaches below it and that a limit takes.
    ///
    /// # Errors
    ///
    /// The machine has no usable control groups.
    pub fn open(worker: &WorkerId, limits: Limits) -> Result<Self, IsolationError> {
        let name = RequestId::of_content("worker", worker.to_string().as_bytes());
        let hierarchy = hierarchies::auto();
        let mut cgroups = Self {
            parent: format!("muster/{}", name.0),
            limits,
            cpu_accounting: !hierarchy.v2() && V1::new().get_mount_point(ACCOUNTING).is_some(),
        };
        cgroups.check_controllers()?;
        let parent = cgroups.build(&cgroups.parent).build(hierarchy);
        parent.map_err(|e| setup_error(&cgroups.parent, &e))?;
        // v1 only warns when a directory cannot be made: a process could not join it.
        if cgroups.cpu_accounting {
            let made = cgroups
                .load(&cgroups.parent)
                .controller_of::<CpuAcctController>()
                .is_some_and(|cpuacct| cpuacct.path().is_dir());
            if !made {
                tracing::warn!(
                    "no control groups in the cpuacct hierarchy: processes' CPU time is not counted"
                );
                cgroups.cpu_accounting = false;
            }
        }
        cgroups.create(PROBE, &Resources::new(1, 64))?.remove();
        Ok(cgroups)
    }

    fn check_controllers(&self) -> Result<(), IsolationError> {
        let hierarchy = hierarchies::auto();
        let available: Vec<Controllers> = if hierarchy.v2() {
            let root = hierarchy.root().join("cgroup.controllers");
            let listed = fs::read_to_string(root).unwrap_or_default();
            CONTROLLERS
                .into_iter()
                .filter(|c| listed.split_whitespace().any(|name| name == c.to_string()))
                .collect()
        } else {
            let v1 = V1::new();
            CONTROLLERS
                .into_iter()
                .filter(|c| v1.get_mount_point(c.clone()).is_some())
                .collect()
        };
        match CONTROLLERS.into_iter().find(|c| !available.contains(c)) {
            Some(Controllers::Mem) => Err(IsolationError::MissingController("memory")),
            Some(Controllers::Cpu) => Err(IsolationError::MissingController("cpu")),
            Some(_) => Err(IsolationError::MissingController("pids")),
            None => Ok(()),
        }
    }

    /// A builder of group `name` with the controllers every group uses.
    fn build(&self, name: &str) -> CgroupBuilder {
        CgroupBuilder::new(name).set_specified_controllers(self.controller_names())
    }

    /// The group of the process `name` (unique among this worker's processes), as it is
    /// now: for a process a predecessor started.
    pub fn existing(&self, name: &str) -> ProcessGroup {
        let path = self.child(name);
        let cgroup = self.load(&path);
        ProcessGroup {
            cgroup: cgroup.exists().then_some(cgroup),
            path,
        }
    }

    /// A fresh group for the process `name` (unique among this worker's processes), limited
    /// to `granted`. A group left by an earlier process of that name is emptied first.
    ///
    /// # Errors
    ///
    /// The group could not be created or limited.
    pub fn create(&self, name: &str, granted: &Resources) -> Result<ProcessGroup, IsolationError> {
        let path = self.child(name);
        self.existing(name).remove();
        if self.existing(name).cgroup.is_some() {
            return Err(setup_error(
                &path,
                &"processes of an earlier run there outlived SIGKILL",
            ));
        }
        let memory = self.limits.memory_bytes(granted.memory_mb);
        let cores = u64::from(granted.cores.max(1));
        let hierarchy = hierarchies::auto();
        // Shares in v1 (1024 a core), a weight in v2 (100 a core, at most 10,000).
        let weight = if hierarchy.v2() {
            (cores * 100).min(10_000)
        } else {
            cores * 1024
        };
        let mut cpu = self.build(&path).cpu().shares(weight);
        if self.limits.cpu_quota {
            let quota = i64::try_from(cores * CPU_PERIOD_US).unwrap_or(i64::MAX);
            cpu = cpu.period(CPU_PERIOD_US).quota(quota);
        }
        let cgroup = cpu
            .done()
            .memory()
            .memory_hard_limit(memory)
            .done()
            .pid()
            .maximum_number_of_processes(MaxValue::Value(
                i64::try_from(self.limits.max_processes).unwrap_or(i64::MAX),
            ))
            .done()
            .build(hierarchy)
            .map_err(|e| {
                self.existing(name).remove();
                setup_error(&path, &e)
            })?;
        let group = ProcessGroup {
            cgroup: Some(cgroup),
            path,
        };
        if let Err(error) = group.limit_memory(memory) {
            group.remove();
            return Err(error);
        }
        let procs = group.procs_files();
        if let Some(path) = procs
            .iter()
            .find(|p| p.to_string_lossy().contains(char::is_whitespace))
        {
            group.remove();
            return Err(IsolationError::UnusablePath(path.display().to_string()));
        }
        Ok(group)
    }

    /// Empties and removes every group below the parent that `keep` does not name: what a
    /// predecessor left behind.
    pub fn remove_others(&self, keep: &[String]) {
        for name in self.groups().iter().filter(|name| !keep.contains(name)) {
            tracing::info!(group = %self.child(name), "removing a control group nobody accounts for");
            self.existing(name).remove();
        }
    }

    /// The names of the groups below the parent, sorted.
    pub fn groups(&self) -> Vec<String> {
        let parent = self.load(&self.parent);
        let mut names: Vec<String> = Vec::new();
        for subsystem in parent.subsystems() {
            let Ok(entries) = fs::read_dir(subsystem.to_controller().path()) else {
                continue;
            };
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    names.push(entry.file_name().to_string_lossy().into_owned());
                }
            }
        }
        names.sort_unstable();
        names.dedup();
        names
    }

    /// Removes the parent group once no group is left below it: for a worker that stops.
    pub fn close(&self) {
        if !self.groups().is_empty() {
            return;
        }
        if let Err(error) = self.load(&self.parent).delete() {
            tracing::warn!(group = %self.parent, %error, "cannot remove the worker's control group");
        }
    }

    /// Group `path` as it is, without creating it.
    fn load(&self, path: &str) -> Cgroup {
        Cgroup::load_with_specified_controllers(hierarchies::auto(), path, self.controller_names())
    }

    fn child(&self, name: &str) -> String {
        format!("{}/{name}", self.parent)
    }

    /// The names of the controllers a group joins, as the crate takes them: [`CONTROLLERS`],
    /// and [`ACCOUNTING`] where CPU time is counted there.
    fn controller_names(&self) -> Vec<String> {
        let accounting = self.cpu_accounting.then_some(&ACCOUNTING);
        CONTROLLERS
            .iter()
            .chain(accounting)
            .map(ToString::to_string)
            .collect()
    }
}

/// Why group `group` could not be set up.
fn setup_error(group: &str, cause: &impl std::fmt::Display) -> IsolationError {
    IsolationError::Setup {
        group: group.to_owned(),
        cause: cause.to_string(),
    }
}

/// The control group of one process.
#[derive(Debug)]
pub struct ProcessGroup {
    /// `None` when there is none (a predecessor's group that is gone).
    cgroup: Option<Cgroup>,
    /// Relative to each hierarchy's root.
    path: String,
}

impl ProcessGroup {
    /// Keeps swap from being a way around the memory limit (no swap in v2, memory and swap
    /// together in v1 where swap is accounted for), and checks that the limit took: the
    /// crate does not say when a write fails.
    fn limit_memory(&self, bytes: i64) -> Result<(), IsolationError> {
        let not_limited = |cause: &str| setup_error(&self.path, &cause);
        let cgroup = self
            .cgroup
            .as_ref()
            .ok_or_else(|| not_limited("it is gone"))?;
        let memory = cgroup
            .controller_of::<MemController>()
            .ok_or_else(|| not_limited("no memory controller"))?;
        let (limit_file, swap) = if cgroup.v2() {
            ("memory.max", 0)
        } else {
            ("memory.limit_in_bytes", bytes)
        };
        // v1 without swap accounting has no file to write: there is no swap to account.
        let _ = memory.set_memswap_limit(swap);
        let limit = fs::read_to_string(memory.path().join(limit_file))
            .ok()
            .and_then(|text| text.trim().parse::<i64>().ok());
        // The kernel rounds a v1 limit down to whole pages.
        match limit {
            Some(limit) if limit <= bytes && limit > bytes - 64 * 1024 => Ok(()),
            _ => Err(not_limited(&format!(
                "its memory limit reads {limit:?}, not {bytes} bytes"
            ))),
        }
    }

    /// The `cgroup.procs` files a process writes its id to, to join the group.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        let Some(cgroup) = &self.cgroup else {
            return Vec::new();
        };
        if cgroup.v2() {
            let root = hierarchies::auto().root();
            return vec![root.join(&self.path).join("cgroup.procs")];
        }
        cgroup
            .subsystems()
            .iter()
            .map(|s| s.to_controller().path().join("cgroup.procs"))
            .collect()
    }

    /// Whether the kernel killed a process of the group for going over the group's memory
    /// limit: the OOM killer killed in the group (which alone could be the whole machine's
    /// OOM killer), and the group's use reached its limit.
    pub fn out_of_memory(&self) -> bool {
        let Some(cgroup) = &self.cgroup else {
            return false;
        };
        let Some(memory) = cgroup.controller_of::<MemController>() else {
            return false;
        };
        if cgroup.v2() {
            // `memory.events`: `oom N` (the limit was hit), `oom_kill N`, among others.
            let events = fs::read_to_string(memory.path().join("memory.events"));
            let counter = |events: &str, name: &str| {
                events.lines().find_map(|line| {
                    let (key, value) = line.split_once(' ')?;
                    (key == name).then(|| value.trim().parse::<u64>().ok())?
                })
            };
            return events.is_ok_and(|events| {
                counter(&events, "oom").is_some_and(|n| n > 0)
                    && counter(&events, "oom_kill").is_some_and(|n| n > 0)
            });
        }
        // v1 counts no hit of the limit reliably (`failcnt` stays 0 here), but its peak
        // reaches the limit.
        let stat = memory.memory_stat();
        stat.oom_control.oom_kill > 0
            && stat.max_usage_in_bytes >= stat.limit_in_bytes.saturating_sub(64 * 1024) as u64
    }

    /// What the group's processes use: the memory they hold now and the CPU time they have
    /// taken (`None` for a group that is gone; no CPU time where v1 groups are not in
    /// `cpuacct`).
    pub fn usage(&self) -> Option<Usage> {
        let cgroup = self.cgroup.as_ref()?;
        let read = |path: PathBuf| fs::read_to_string(path).ok();
        let memory = cgroup.controller_of::<MemController>()?;
        let memory_file = if cgroup.v2() {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        };
        let memory_bytes = read(memory.path().join(memory_file))?.trim().parse().ok()?;
        let cpu_ms = if cgroup.v2() {
            // `cpu.stat`: `usage_usec N` among others.
            let stat = cgroup
                .controller_of::<CpuController>()
                .and_then(|cpu| read(cpu.path().join("cpu.stat")));
            stat.and_then(|stat| {
                stat.lines()
                    .find_map(|line| line.strip_prefix("usage_usec ")?.trim().parse::<u64>().ok())
            })
            .map(|usec| usec / 1000)
        } else {
            let usage = cgroup
                .controller_of::<CpuAcctController>()
                .and_then(|cpuacct| read(cpuacct.path().join("cpuacct.usage")));
            usage
                .and_then(|ns| ns.trim().parse::<u64>().ok())
                .map(|ns| ns / 1_000_000)
        };
        Some(Usage {
            memory_bytes,
            cpu_ms,
        })
    }

    /// Kills whatever still runs in the group, waits until it is gone (a process held back
    /// by its CPU quota may take a period or two to die) and removes the group. Blocks.
    pub fn remove(self) {
        let Some(cgroup) = self.cgroup else { return };
        let deadline = Instant::now() + REMOVAL_PATIENCE;
        loop {
            let procs = cgroup.procs();
            if procs.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                tracing::warn!(group = %self.path, left = procs.len(), "processes outlived SIGKILL");
                break;
            }
            for pid in procs {
                if let Ok(pid) = i32::try_from(pid.pid) {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Err(error) = cgroup.delete() {
            tracing::warn!(group = %self.path, %error, "cannot remove a control group");
        }
    }
}
