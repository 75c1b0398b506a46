//! The trace: what happens to a simulated cluster and when, one JSON object per line, each
//! with `at_s` (seconds from the start) and a `kind`:
//!
//! * `app`: an application submitted, whose client attaches at once and runs `tasks` tasks
//!   of `task_s` seconds each, one per core of its executors, as Spark runs a stage; a task
//!   on an executor that ends runs again elsewhere. It finishes when every task has run.
//! * `driver`: a driver (cluster mode) submitted, that runs `duration_s` seconds once started.
//! * `lose_worker`: a worker's machine fails, and what ran on it with it; it comes back
//!   empty after `down_s`, if given.
//! * `drain`: `muster workers drain WORKER [--kill-after kill_after_s]`.
//! * `leader_change`: the leader fails; another is elected, and everyone reconnects to it.

use std::path::Path;

use muster_core::ids::QueueName;
use serde::{Deserialize, Serialize};

/// One line of a trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Entry {
    /// An application submitted.
    App(AppEntry),
    /// A driver submitted.
    Driver(DriverEntry),
    /// A worker lost with what it ran.
    LoseWorker {
        /// When, in seconds from the start.
        at_s: f64,
        /// Its id.
        worker: String,
        /// When it registers again, empty; never if unset.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        down_s: Option<f64>,
    },
    /// A worker drained.
    Drain {
        /// When, in seconds from the start.
        at_s: f64,
        /// Its id.
        worker: String,
        /// How long what runs there may take; unset: as long as it takes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kill_after_s: Option<f64>,
    },
    /// The leader fails.
    LeaderChange {
        /// When, in seconds from the start.
        at_s: f64,
    },
}

/// An application of a trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppEntry {
    /// When it is submitted, in seconds from the start.
    pub at_s: f64,
    /// Its name (reports group by queue and user; `--apps` lists names).
    #[serde(default)]
    pub name: String,
    /// Its queue.
    #[serde(default)]
    pub queue: QueueName,
    /// Its user.
    #[serde(default)]
    pub user: String,
    /// `spark.cores.max`; unset: no cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores_max: Option<u32>,
    /// `spark.executor.cores`; unset: one executor per worker absorbing its cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor_cores: Option<u32>,
    /// `spark.executor.memory` in MB.
    #[serde(default = "default_memory_mb")]
    pub executor_memory_mb: u64,
    /// The most executors at once; unset: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor_limit: Option<u32>,
    /// How many tasks it runs.
    pub tasks: u32,
    /// How long each task takes on one core, in seconds.
    pub task_s: f64,
}

/// A driver of a trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriverEntry {
    /// When it is submitted, in seconds from the start.
    pub at_s: f64,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Its queue.
    #[serde(default)]
    pub queue: QueueName,
    /// Its user.
    #[serde(default)]
    pub user: String,
    /// Its cores.
    #[serde(default = "one")]
    pub cores: u32,
    /// Its memory in MB.
    #[serde(default = "default_memory_mb")]
    pub memory_mb: u64,
    /// How long it runs once started, in seconds.
    pub duration_s: f64,
    /// Whether it is supervised.
    #[serde(default)]
    pub supervise: bool,
}

fn default_memory_mb() -> u64 {
    1024
}

fn one() -> u32 {
    1
}

impl Entry {
    /// When it happens, in seconds from the start.
    pub fn at_s(&self) -> f64 {
        match self {
            Self::App(app) => app.at_s,
            Self::Driver(driver) => driver.at_s,
            Self::LoseWorker { at_s, .. }
            | Self::Drain { at_s, .. }
            | Self::LeaderChange { at_s } => *at_s,
        }
    }

    /// What is out of range in it, if anything: `(field, message)`.
    fn check(&self) -> Result<(), (&'static str, &'static str)> {
        let seconds = |s: f64| s.is_finite() && s >= 0.0;
        if !seconds(self.at_s()) {
            return Err(("at_s", "must be a number of seconds, 0 or more"));
        }
        match self {
            Self::App(app) => {
                if app.tasks == 0 {
                    return Err(("tasks", "must be at least 1"));
                }
                if !(seconds(app.task_s) && app.task_s > 0.0) {
                    return Err(("task_s", "must be a positive number of seconds"));
                }
                if app.cores_max == Some(0) || app.executor_cores == Some(0) {
                    return Err(("cores_max", "cores must be at least 1"));
                }
                if app.executor_memory_mb == 0 {
                    return Err(("executor_memory_mb", "must be at least 1"));
                }
            }
            Self::Driver(driver) => {
                if driver.cores == 0 || driver.memory_mb == 0 {
                    return Err(("cores", "cores and memory_mb must be at least 1"));
                }
                if !(seconds(driver.duration_s) && driver.duration_s > 0.0) {
                    return Err(("duration_s", "must be a positive number of seconds"));
                }
            }
            Self::LoseWorker { down_s, .. } => {
                if down_s.is_some_and(|s| !seconds(s)) {
                    return Err(("down_s", "must be a number of seconds, 0 or more"));
                }
            }
            Self::Drain { kill_after_s, .. } => {
                if kill_after_s.is_some_and(|s| !seconds(s)) {
                    return Err(("kill_after_s", "must be a number of seconds, 0 or more"));
                }
            }
            Self::LeaderChange { .. } => {}
        }
        Ok(())
    }
}

/// Why a trace was refused.
#[derive(Debug, thiserror::Error)]
#[error("{path}:{line}: {message}")]
pub struct TraceError {
    /// The file.
    pub path: String,
    /// The line, from 1.
    pub line: usize,
    /// What is wrong there.
    pub message: String,
}

/// A trace's entries in time order (lines of the same time in file order).
///
/// # Errors
///
/// The file cannot be read, or a line is not an entry (naming the line and the field).
pub fn read(path: &Path) -> Result<Vec<Entry>, TraceError> {
    let text = std::fs::read_to_string(path).map_err(|e| TraceError {
        path: path.display().to_string(),
        line: 0,
        message: format!("cannot read: {e}"),
    })?;
    parse(&text, &path.display().to_string())
}

/// The entries of trace `text`, read from `path`, in time order. Blank lines are skipped.
///
/// # Errors
///
/// A line is not an entry (naming the line and the field).
pub fn parse(text: &str, path: &str) -> Result<Vec<Entry>, TraceError> {
    let mut entries = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let error = |message: String| TraceError {
            path: path.to_owned(),
            line: i + 1,
            message,
        };
        let mut json = serde_json::Deserializer::from_str(line);
        let entry: Entry = serde_path_to_error::deserialize(&mut json).map_err(|e| {
            let field = e.path().to_string();
            match field.as_str() {
                "." => error(e.inner().to_string()),
                _ => error(format!("{field}: {}", e.inner())),
            }
        })?;
        entry
            .check()
            .map_err(|(field, message)| error(format!("{field}: {message}")))?;
        entries.push(entry);
    }
    entries.sort_by(|a, b| a.at_s().total_cmp(&b.at_s()));
    Ok(entries)
}

/// `entries` as a trace file: one line each.
pub fn write(entries: &[Entry]) -> String {
    entries
        .iter()
        .map(|entry| serde_json::to_string(entry).expect("an entry prints") + "\n")
        .collect()
}
