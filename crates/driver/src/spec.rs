//! The job file `muster job run` reads (TOML): the application's resources, how its driver
//! schedules, its pools, and its jobs of stages of tasks. Every field is documented in the
//! book (docs/src/user/jobs.md); an unknown field or a bad value is refused with its path, e.g.
//! `jobs[0].stages[1].run: sleep needs ms`.

use std::path::Path;

use muster_core::limits;
use muster_core::model::resource_amounts;
use muster_core::resources::ResourceAmounts;
use muster_core::tasks::Speculation;
use muster_core::tasks::allocation::AllocationConfig;
use muster_core::tasks::jobs::{JobSpec, StageSpec};
use muster_core::tasks::locality::LocalityWaits;
use muster_core::tasks::pools::{PoolConfig, SchedulingMode};
use muster_core::tasks::scheduler::SchedulerConfig;
use serde::Deserialize;

/// A job file: an application, how its driver schedules, and what it runs.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobFile {
    /// The application's name.
    pub name: String,
    /// Its queue.
    #[serde(default)]
    pub queue: String,
    /// Its priority in its queue: higher is served first (capped at the queue's
    /// `max_priority`; from release 0.4.0).
    #[serde(default)]
    pub priority: i32,
    /// What it asks the masters for.
    #[serde(default)]
    pub resources: ResourceSpec,
    /// How its driver schedules tasks.
    #[serde(default)]
    pub scheduler: SchedulerSpec,
    /// FAIR pools.
    #[serde(default)]
    pub pools: Vec<PoolConfig>,
    /// The jobs, started in file order (or at their `at_ms`).
    pub jobs: Vec<JobEntry>,
}

/// `[resources]`: what the application asks the masters for, as `muster app run` does.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceSpec {
    /// Spark's `cores.max`.
    pub cores_max: Option<u32>,
    /// Cores per executor.
    pub executor_cores: Option<u32>,
    /// Memory per executor, in MB.
    #[serde(default = "default_memory")]
    pub executor_memory_mb: u64,
    /// Custom resources per executor (Spark's `spark.executor.resource.NAME.amount`), as
    /// `{ gpu = 1 }`.
    #[serde(default)]
    pub executor_resources: ResourceAmounts,
    /// Most executors held at once.
    pub executor_limit: Option<u32>,
    /// The executors it needs at once (a gang): while it holds none, the masters grant it
    /// all of them at once or nothing. Needs `executor_cores`.
    pub min_executors: Option<u32>,
    /// Ask for executors as tasks wait and give idle ones back.
    pub dynamic_allocation: Option<DynamicAllocation>,
}

/// `[resources] dynamic_allocation = { min, max, initial, idle_timeout_s, backlog_timeout_s,
/// sustained_backlog_timeout_s }`: Spark's `spark.dynamicAllocation.*`, with its defaults.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DynamicAllocation {
    /// Fewest executors (default 0).
    #[serde(default)]
    pub min: u32,
    /// Most executors.
    pub max: u32,
    /// Executors asked for at start (default `min`).
    pub initial: Option<u32>,
    /// Seconds an executor may run nothing before it is given back (default 60).
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout_s: f64,
    /// Seconds tasks may wait before more executors are asked for (default 1).
    #[serde(default = "default_backlog_timeout")]
    pub backlog_timeout_s: f64,
    /// Seconds between further asks while tasks still wait (default `backlog_timeout_s`).
    pub sustained_backlog_timeout_s: Option<f64>,
}

fn default_idle_timeout() -> f64 {
    60.0
}

fn default_backlog_timeout() -> f64 {
    1.0
}

fn default_memory() -> u64 {
    512
}

impl Default for ResourceSpec {
    fn default() -> Self {
        Self {
            cores_max: None,
            executor_cores: None,
            executor_memory_mb: default_memory(),
            executor_resources: ResourceAmounts::new(),
            executor_limit: None,
            min_executors: None,
            dynamic_allocation: None,
        }
    }
}

/// `[scheduler]`: Spark's `spark.scheduler.*`, `spark.locality.wait*` and
/// `spark.task.maxFailures`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerSpec {
    /// FIFO (default) or FAIR.
    #[serde(default)]
    pub mode: SchedulingMode,
    /// `spark.locality.wait`, 3000 by default.
    #[serde(default = "default_wait")]
    pub locality_wait_ms: u64,
    /// `spark.locality.wait.process`.
    pub process_wait_ms: Option<u64>,
    /// `spark.locality.wait.node`.
    pub node_wait_ms: Option<u64>,
    /// `spark.locality.wait.rack`.
    pub rack_wait_ms: Option<u64>,
    /// `spark.task.maxFailures`, 4 by default.
    #[serde(default = "default_failures")]
    pub max_task_failures: u32,
    /// `spark.speculation`: run a copy of a task that is much slower than the others.
    #[serde(default)]
    pub speculation: bool,
    /// `spark.speculation.quantile` (default 0.75): the share of a stage's tasks that must
    /// have succeeded before any copy.
    #[serde(default = "default_quantile")]
    pub speculation_quantile: f64,
    /// `spark.speculation.multiplier` (default 1.5): how many times the median duration is
    /// slow.
    #[serde(default = "default_multiplier")]
    pub speculation_multiplier: f64,
    /// `spark.speculation.minTaskRuntime` (default 100): never slow before this.
    #[serde(default = "default_min_runtime")]
    pub speculation_min_runtime_ms: u64,
    /// Seeds the shuffle of offers (default 0), so runs can be replayed.
    #[serde(default)]
    pub seed: u64,
}

fn default_wait() -> u64 {
    LocalityWaits::SPARK_DEFAULT_MS
}

fn default_failures() -> u32 {
    4
}

fn default_quantile() -> f64 {
    0.75
}

fn default_multiplier() -> f64 {
    1.5
}

fn default_min_runtime() -> u64 {
    100
}

impl Default for SchedulerSpec {
    fn default() -> Self {
        Self {
            mode: SchedulingMode::Fifo,
            locality_wait_ms: default_wait(),
            process_wait_ms: None,
            node_wait_ms: None,
            rack_wait_ms: None,
            max_task_failures: default_failures(),
            speculation: false,
            speculation_quantile: default_quantile(),
            speculation_multiplier: default_multiplier(),
            speculation_min_runtime_ms: default_min_runtime(),
            seed: 0,
        }
    }
}

/// `[[jobs]]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobEntry {
    /// Its name.
    pub name: String,
    /// Its FAIR pool; `default` when unset.
    #[serde(default)]
    pub pool: String,
    /// When to submit it, in milliseconds from the driver's start; unset: at once.
    #[serde(default)]
    pub at_ms: u64,
    /// Its stages.
    pub stages: Vec<StageEntry>,
}

/// `[[jobs.stages]]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageEntry {
    /// Its name, unique in the job.
    pub name: String,
    /// How many tasks.
    pub tasks: u32,
    /// Stages of the job that must succeed first.
    #[serde(default)]
    pub after: Vec<String>,
    /// What every task runs.
    pub run: Run,
    /// Task `i` prefers the hosts `prefer_hosts[i % len]`.
    #[serde(default)]
    pub prefer_hosts: Vec<Vec<String>>,
}

/// What a task runs: `{ builtin = "sleep", ms = 50 }`, `{ builtin = "pi", samples = N }`,
/// `{ builtin = "noop" }`, or `{ command = ["/bin/sh", "-c", "... {task} {attempt}"] }`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Run {
    /// A task run inside the executor.
    pub builtin: Option<Builtin>,
    /// `sleep`: how long.
    pub ms: Option<u64>,
    /// `pi`: how many samples.
    pub samples: Option<u64>,
    /// A program and its arguments, run as a child of the executor with `{task}`,
    /// `{partition}` and `{attempt}` substituted.
    pub command: Option<Vec<String>>,
}

/// The tasks an executor runs itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Builtin {
    /// Sleeps `ms`.
    Sleep,
    /// Estimates pi from `samples` random points.
    Pi,
    /// Does nothing.
    Noop,
}

/// A stage's work, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Work {
    /// Sleep this many milliseconds.
    Sleep(u64),
    /// Estimate pi from this many samples.
    Pi(u64),
    /// Nothing.
    Noop,
    /// Run this program with these arguments.
    Command(Vec<String>),
}

/// A job file that cannot be used, naming the field.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A field is malformed or out of range.
    #[error("{path}: {field}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// The field's path.
        field: String,
        /// What is wrong.
        message: String,
    },
}

impl JobFile {
    /// Reads and checks the job file at `path`.
    ///
    /// # Errors
    ///
    /// The file cannot be read, is not TOML, has an unknown field, or a value is out of
    /// range ([`JobFile::parse`]).
    pub fn read(path: &Path) -> Result<Self, SpecError> {
        let text = std::fs::read_to_string(path).map_err(|source| SpecError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text).map_err(|(field, message)| SpecError::Invalid {
            path: path.display().to_string(),
            field,
            message,
        })
    }

    /// Parses and checks a job file's text; an error is the field's path and what is wrong.
    ///
    /// # Errors
    ///
    /// As [`JobFile::read`].
    pub fn parse(text: &str) -> Result<Self, (String, String)> {
        let deserializer = toml::de::Deserializer::parse(text)
            .map_err(|e| (".".to_owned(), e.message().to_owned()))?;
        let file: Self = serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let field = e.path().to_string();
            (field, e.into_inner().message().to_owned())
        })?;
        file.validate()?;
        Ok(file)
    }

    fn validate(&self) -> Result<(), (String, String)> {
        let invalid = |field: String, message: String| (field, message);
        limits::name("name", &self.name).map_err(|e| invalid("name".into(), e.to_string()))?;
        if self.jobs.is_empty() {
            return Err(invalid(
                "jobs".into(),
                "a job file needs at least one job".into(),
            ));
        }
        resource_amounts(
            "resources.executor_resources",
            &self.resources.executor_resources,
        )
        .map_err(|e| invalid(e.field, e.message))?;
        if self.scheduler.max_task_failures == 0 {
            return Err(invalid(
                "scheduler.max_task_failures".into(),
                "must be at least 1".into(),
            ));
        }
        if let Some(minimum) = self.resources.min_executors {
            let message = match self.resources.executor_cores {
                _ if minimum == 0 => Some("must be at least 1"),
                None => Some("a gang needs executor_cores"),
                Some(_) => None,
            };
            if let Some(message) = message {
                return Err(invalid("resources.min_executors".into(), message.into()));
            }
        }
        if let Some(dynamic) = &self.resources.dynamic_allocation {
            let field = |name: &str| format!("resources.dynamic_allocation.{name}");
            if dynamic.max == 0 || dynamic.min > dynamic.max {
                return Err(invalid(
                    field("max"),
                    "must be at least 1 and at least min".into(),
                ));
            }
            if dynamic.initial.is_some_and(|i| i > dynamic.max) {
                return Err(invalid(field("initial"), "must be at most max".into()));
            }
            if self.resources.executor_limit.is_some() {
                return Err(invalid(
                    "resources.executor_limit".into(),
                    "dynamic allocation sets the limit itself".into(),
                ));
            }
            let seconds = [
                ("idle_timeout_s", Some(dynamic.idle_timeout_s)),
                ("backlog_timeout_s", Some(dynamic.backlog_timeout_s)),
                (
                    "sustained_backlog_timeout_s",
                    dynamic.sustained_backlog_timeout_s,
                ),
            ];
            for (name, value) in seconds {
                if value.is_some_and(|v| !(v.is_finite() && v > 0.0 && v < 1e9)) {
                    return Err(invalid(
                        field(name),
                        "must be a positive number of seconds".into(),
                    ));
                }
            }
        }
        let quantile = self.scheduler.speculation_quantile;
        if !(quantile > 0.0 && quantile <= 1.0) {
            return Err(invalid(
                "scheduler.speculation_quantile".into(),
                format!("must be in (0, 1], got {quantile}"),
            ));
        }
        let multiplier = self.scheduler.speculation_multiplier;
        if !(multiplier.is_finite() && multiplier >= 1.0) {
            return Err(invalid(
                "scheduler.speculation_multiplier".into(),
                format!("must be at least 1, got {multiplier}"),
            ));
        }
        for (i, pool) in self.pools.iter().enumerate() {
            if pool.weight == 0 {
                return Err(invalid(
                    format!("pools[{i}].weight"),
                    "must be at least 1".into(),
                ));
            }
            if self.pools[..i].iter().any(|p| p.name == pool.name) {
                return Err(invalid(
                    format!("pools[{i}].name"),
                    format!("`{}` names two pools", pool.name),
                ));
            }
        }
        for (j, job) in self.jobs.iter().enumerate() {
            job.spec()
                .validate()
                .map_err(|e| invalid(format!("jobs[{j}].{}", e.field), e.message))?;
            for (s, stage) in job.stages.iter().enumerate() {
                stage
                    .run
                    .work()
                    .map_err(|e| invalid(format!("jobs[{j}].stages[{s}].run"), e.to_string()))?;
            }
        }
        Ok(())
    }

    /// The driver's scheduler settings.
    pub fn scheduler_config(&self) -> SchedulerConfig {
        let spec = &self.scheduler;
        let wait = spec.locality_wait_ms;
        SchedulerConfig {
            mode: spec.mode,
            pools: self.pools.clone(),
            waits: LocalityWaits {
                process_ms: spec.process_wait_ms.unwrap_or(wait),
                node_ms: spec.node_wait_ms.unwrap_or(wait),
                rack_ms: spec.rack_wait_ms.unwrap_or(wait),
            },
            max_task_failures: spec.max_task_failures,
            seed: spec.seed,
            speculation: spec.speculation.then_some(Speculation {
                quantile: spec.speculation_quantile,
                multiplier: spec.speculation_multiplier,
                min_runtime_ms: spec.speculation_min_runtime_ms,
            }),
        }
    }
}

impl ResourceSpec {
    /// The dynamic-allocation manager's settings, if it is on.
    pub fn allocation(&self) -> Option<AllocationConfig> {
        let dynamic = self.dynamic_allocation?;
        let ms = |seconds: f64| (seconds * 1000.0) as u64;
        Some(AllocationConfig {
            min: dynamic.min,
            max: dynamic.max,
            initial: dynamic.initial.unwrap_or(dynamic.min),
            tasks_per_executor: self.executor_cores.unwrap_or(1),
            backlog_timeout_ms: ms(dynamic.backlog_timeout_s),
            sustained_backlog_timeout_ms: ms(dynamic
                .sustained_backlog_timeout_s
                .unwrap_or(dynamic.backlog_timeout_s)),
            idle_timeout_ms: ms(dynamic.idle_timeout_s),
        })
    }
}

impl JobEntry {
    /// The job as the scheduler takes it.
    pub fn spec(&self) -> JobSpec {
        JobSpec {
            name: self.name.clone(),
            pool: self.pool.clone(),
            stages: self
                .stages
                .iter()
                .map(|stage| StageSpec {
                    name: stage.name.clone(),
                    tasks: stage.tasks,
                    after: stage.after.clone(),
                    prefer_hosts: stage.prefer_hosts.clone(),
                })
                .collect(),
        }
    }
}

impl Run {
    /// The work, checked: exactly one of `builtin` and `command`, with what it needs.
    ///
    /// # Errors
    ///
    /// What is missing or extra, for people.
    pub fn work(&self) -> Result<Work, WorkError> {
        let work = match (self.builtin, &self.command) {
            (Some(_), Some(_)) => return Err(WorkError::Both),
            (None, None) => return Err(WorkError::Neither),
            (Some(Builtin::Sleep), None) => {
                Work::Sleep(self.ms.ok_or(WorkError::Needs("sleep", "ms"))?)
            }
            (Some(Builtin::Pi), None) => {
                Work::Pi(self.samples.ok_or(WorkError::Needs("pi", "samples"))?)
            }
            (Some(Builtin::Noop), None) => Work::Noop,
            (None, Some(argv)) if argv.is_empty() => return Err(WorkError::NoProgram),
            (None, Some(argv)) => {
                limits::program(&argv[0], &argv[1..], &Default::default())?;
                Work::Command(argv.clone())
            }
        };
        let extra = match work {
            Work::Sleep(_) => self.samples.is_some(),
            Work::Pi(_) => self.ms.is_some(),
            Work::Noop | Work::Command(_) => self.ms.is_some() || self.samples.is_some(),
        };
        if extra {
            return Err(WorkError::Extra);
        }
        Ok(work)
    }
}

/// Why a stage's `run` is not work a task can do.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum WorkError {
    /// Both a builtin and a command.
    #[error("give `builtin` or `command`, not both")]
    Both,
    /// Neither.
    #[error("give `builtin` or `command`")]
    Neither,
    /// A builtin without the setting it needs.
    #[error("{0} needs {1}")]
    Needs(&'static str, &'static str),
    /// A command without a program.
    #[error("a command needs at least a program")]
    NoProgram,
    /// A command beyond the size limit.
    #[error(transparent)]
    TooLong(#[from] muster_core::model::InputError),
    /// A setting of another builtin.
    #[error("`ms` is for sleep and `samples` for pi only")]
    Extra,
}

#[cfg(test)]
mod tests {
    use super::JobFile;

    const EXAMPLE: &str = r#"
name = "etl"
queue = "default"
[resources]
cores_max = 8
executor_cores = 1
executor_memory_mb = 512
executor_resources = { gpu = 1 }
dynamic_allocation = { min = 0, max = 16, idle_timeout_s = 60, backlog_timeout_s = 1 }
[scheduler]
mode = "FAIR"
locality_wait_ms = 3000
node_wait_ms = 1000
max_task_failures = 4
[[pools]]
name = "interactive"
mode = "FIFO"
weight = 2
min_share = 2
[[jobs]]
name = "count"
pool = "interactive"
  [[jobs.stages]]
  name = "map"
  tasks = 200
  run = { builtin = "sleep", ms = 50 }
  prefer_hosts = [["host1"], ["host2"]]
  [[jobs.stages]]
  name = "reduce"
  tasks = 8
  after = ["map"]
  run = { command = ["/bin/sh", "-c", "echo {task} {attempt}"] }
"#;

    #[test]
    fn the_readme_example_reads() {
        let file = JobFile::parse(EXAMPLE).expect("the example is valid");
        let config = file.scheduler_config();
        assert_eq!(config.waits.node_ms, 1000);
        assert_eq!(config.waits.process_ms, 3000);
        assert_eq!(file.pools[0].weight, 2);
        assert_eq!(file.jobs[0].stages[1].after, ["map"]);
        assert_eq!(file.resources.executor_resources["gpu"], 1);
        let allocation = file
            .resources
            .allocation()
            .expect("dynamic allocation is on");
        assert_eq!((allocation.max, allocation.backlog_timeout_ms), (16, 1000));
    }

    #[test]
    fn bad_files_name_the_field() {
        let cases = [
            (
                "max_task_failures = 4",
                "retries = 3",
                "scheduler.retries",
                "unknown field `retries`",
            ),
            (
                "max_task_failures = 4",
                "speculation_quantile = 1.5",
                "scheduler.speculation_quantile",
                "(0, 1]",
            ),
            (
                "mode = \"FAIR\"",
                "mode = \"ROUND\"",
                "scheduler.mode",
                "unknown variant `ROUND`",
            ),
            (
                "max_task_failures = 4",
                "max_task_failures = 0",
                "scheduler.max_task_failures",
                "at least 1",
            ),
            ("weight = 2", "weight = 0", "pools[0].weight", "at least 1"),
            (
                "{ gpu = 1 }",
                "{ gpu = 0 }",
                "resources.executor_resources.gpu",
                "at least 1",
            ),
            (
                "tasks = 8",
                "tasks = -1",
                "jobs[0].stages[1].tasks",
                "invalid value",
            ),
        ];
        for (from, to, field, message) in cases {
            let text = EXAMPLE.replace(from, to);
            let (at, why) = JobFile::parse(&text).expect_err(to);
            assert_eq!(at, field, "{to}: {why}");
            assert!(why.contains(message), "{to}: {why}");
        }
        let runs = [
            ("{ builtin = \"sleep\" }", "sleep needs ms"),
            (
                "{ builtin = \"pi\", samples = 5, ms = 1 }",
                "`ms` is for sleep",
            ),
            ("{ command = [] }", "at least a program"),
            ("{ builtin = \"noop\", command = [\"x\"] }", "not both"),
            ("{ builtin = \"bake\" }", "unknown variant `bake`"),
        ];
        for (run, message) in runs {
            let text = EXAMPLE.replace("{ builtin = \"sleep\", ms = 50 }", run);
            let (at, why) = JobFile::parse(&text).expect_err(run);
            assert!(at.starts_with("jobs[0].stages[0].run"), "{run}: {at}");
            assert!(why.contains(message), "{run}: {why}");
        }
        let (at, why) = JobFile::parse(&EXAMPLE.replace("after = [\"map\"]", "after = [\"mop\"]"))
            .expect_err("unknown stage");
        assert_eq!(
            (at.as_str(), why.as_str()),
            ("jobs[0].stages[1].after", "no stage `mop` in this job")
        );
    }
}
