//! The cluster file: the workers a simulation starts with, the queue tree, the masters'
//! settings (exactly a `muster master --config` file's), and how long what the simulation
//! does not run takes (a commit, a process start, a stop, an election).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use muster_core::access::QueueSpec;
use muster_core::resources::{ResourceAmounts, Resources};
use muster_leader::LeaderConfig;
use muster_leader::config::{ConfigError, MasterFile, check_queues, parse_json};
use muster_state::StateConfig;
use muster_state::commands::RegisterWorker;
use serde::Deserialize;

use crate::trace::Entry;

/// A cluster file as written: the workers, the queues, the masters' settings and the timings.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    /// Groups of identical workers.
    pub workers: Vec<WorkerGroup>,
    /// The queue tree, as a `muster master --queues` file has it; unset: `default` alone.
    #[serde(default)]
    pub queues: Option<Vec<QueueSpec>>,
    /// The masters' settings, as a `muster master --config` file has them.
    #[serde(default)]
    pub master: MasterFile,
    /// How long what is not simulated takes.
    #[serde(default)]
    pub timings: Timings,
}

/// `count` workers of one size, named `PREFIX-0001` and on.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerGroup {
    /// How many.
    pub count: u32,
    /// Cores of each.
    pub cores: u32,
    /// Memory of each, in MB.
    pub memory_mb: u64,
    /// Custom resources of each, such as `{"gpu": 2}`.
    #[serde(default)]
    pub resources: ResourceAmounts,
    /// The start of their ids (`worker`).
    #[serde(default = "default_prefix")]
    pub prefix: String,
}

fn default_prefix() -> String {
    "worker".into()
}

/// How long what the simulation does not run takes, in milliseconds.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timings {
    /// A proposal to its commit (a Raft round with a flush on disk).
    pub commit_ms: u64,
    /// A launch to its process's start being reported.
    pub launch_ms: u64,
    /// A kill to its process's end being reported.
    pub stop_ms: u64,
    /// A leader lost to its successor elected and its state read.
    pub election_ms: u64,
    /// A stream broken to its worker or application attached to the new leader.
    pub reconnect_ms: u64,
    /// How often the leader is ticked (its session ticks every 100 ms).
    pub tick_ms: u64,
    /// How often workers heartbeat; unset: the masters' heartbeat interval.
    pub heartbeat_ms: Option<u64>,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            commit_ms: 5,
            launch_ms: 300,
            stop_ms: 100,
            election_ms: 1000,
            reconnect_ms: 500,
            tick_ms: 100,
            heartbeat_ms: None,
        }
    }
}

/// A cluster file read and checked: what a simulation runs with.
#[derive(Debug)]
pub struct Cluster {
    /// The workers, in id order.
    pub workers: Vec<RegisterWorker>,
    /// The leader's settings, queues included.
    pub leader: LeaderConfig,
    /// The replicated state's settings.
    pub state: StateConfig,
    /// How long what is not simulated takes.
    pub timings: Timings,
}

impl Cluster {
    /// The first worker `trace` loses or drains that this cluster does not have.
    pub fn unknown_worker<'t>(&self, trace: &'t [Entry]) -> Option<&'t str> {
        let ids: BTreeSet<&str> = self.workers.iter().map(|w| &*w.id.0).collect();
        trace.iter().find_map(|entry| match entry {
            Entry::LoseWorker { worker, .. } | Entry::Drain { worker, .. }
                if !ids.contains(worker.as_str()) =>
            {
                Some(worker.as_str())
            }
            _ => None,
        })
    }

    /// The first queue an application or a driver of `trace` is submitted to that this
    /// cluster does not have (`default` it always has), as the masters would refuse it.
    pub fn unknown_queue<'t>(&self, trace: &'t [Entry]) -> Option<&'t str> {
        let listed: BTreeSet<&str> = self
            .leader
            .queues
            .iter()
            .flatten()
            .map(|q| &*q.name.0)
            .chain([muster_core::ids::DEFAULT_QUEUE])
            .collect();
        trace.iter().find_map(|entry| {
            let queue = match entry {
                Entry::App(app) => &app.queue,
                Entry::Driver(driver) => &driver.queue,
                _ => return None,
            };
            (!listed.contains(&*queue.0)).then_some(&*queue.0)
        })
    }

    /// Why the masters' preemption could never stop an executor of `trace`'s applications
    /// of ordinary queues, if it could not: each holds more cores than `max_fraction` of the
    /// cluster's. An application without executor cores may get executors of one core.
    pub fn preemption_stops_nothing(&self, trace: &[Entry]) -> Option<String> {
        let policy = self.leader.preemption.as_ref()?;
        let prior = |queue: &muster_core::ids::QueueName| {
            self.leader
                .queues
                .iter()
                .flatten()
                .any(|q| &q.name == queue && q.prior)
        };
        let cores = self
            .workers
            .iter()
            .map(|w| u64::from(w.resources.cores))
            .sum();
        let executors = trace.iter().filter_map(|entry| match entry {
            Entry::App(app) if !prior(&app.queue) => Some(app.executor_cores.unwrap_or(1)),
            _ => None,
        });
        policy.stops_nothing_on(cores, executors)
    }

    /// Reads the cluster file at `path`.
    ///
    /// # Errors
    ///
    /// The file cannot be read, or a field is missing, misspelt or out of range (named).
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses `text`, read from `path`, as a cluster file.
    ///
    /// # Errors
    ///
    /// As [`Cluster::read`].
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let file: ClusterFile = parse_json(text, path)?;
        let invalid = |field: String, message: &str| ConfigError::Invalid {
            path: path.to_owned(),
            field,
            message: message.to_owned(),
        };
        if file.workers.is_empty() {
            return Err(invalid("workers".into(), "at least one group of workers"));
        }
        let mut workers = Vec::new();
        for (i, group) in file.workers.iter().enumerate() {
            if group.count == 0 || group.cores == 0 || group.memory_mb == 0 {
                return Err(invalid(
                    format!("workers[{i}]"),
                    "count, cores and memory_mb must be at least 1",
                ));
            }
            let width = group.count.to_string().len().max(4);
            for n in 1..=group.count {
                workers.push(RegisterWorker {
                    id: format!("{}-{n:0width$}", group.prefix).as_str().into(),
                    host: format!("{}-{n:0width$}", group.prefix),
                    address: String::new(),
                    resources: Resources {
                        custom: group.resources.clone(),
                        ..Resources::new(group.cores, group.memory_mb)
                    },
                    fence_grace_ms: None,
                });
            }
        }
        workers.sort_by(|a, b| a.id.cmp(&b.id));
        if workers.windows(2).any(|w| w[0].id == w[1].id) {
            return Err(invalid(
                "workers".into(),
                "two groups name the same workers",
            ));
        }
        if let Some(queues) = &file.queues {
            check_queues(queues, path)?;
        }
        let timings = file.timings;
        if timings.tick_ms == 0 || timings.heartbeat_ms == Some(0) {
            return Err(invalid(
                "timings".into(),
                "tick_ms and heartbeat_ms must be at least 1",
            ));
        }
        // The masters' settings, named as the file nests them.
        let leader = file
            .master
            .leader(None, None, file.queues)
            .map_err(|error| match error {
                ConfigError::Invalid { field, message, .. } => {
                    invalid(format!("master.{field}"), &message)
                }
                other => other,
            })?;
        if let Some(policy) = &leader.preemption {
            // Without queues the cluster has only `default`, which is not prior.
            if leader.queues.is_none()
                && let Some(message) = policy.never_preempts_under([])
            {
                return Err(invalid("master.preemption.queues".into(), &message));
            }
            let cores: u64 = workers.iter().map(|w| u64::from(w.resources.cores)).sum();
            if let Some(message) = policy.stops_nothing_on(cores, []) {
                return Err(invalid("master.preemption.max_fraction".into(), &message));
            }
        }
        Ok(Self {
            workers,
            state: file.master.state(),
            leader,
            timings,
        })
    }

    /// How often workers heartbeat.
    pub fn heartbeat(&self) -> Duration {
        self.timings
            .heartbeat_ms
            .map_or(self.leader.heartbeat_interval, Duration::from_millis)
    }

    /// Cores of every worker together.
    pub fn cores(&self) -> u64 {
        self.workers
            .iter()
            .map(|w| u64::from(w.resources.cores))
            .sum()
    }
}
