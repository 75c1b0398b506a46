//! The trace: what happens to a simulated cluster and when, one JSON object per line, or, in
//! a file named `*.csv`, one CSV row per entry under a header row of the same keys (an empty
//! cell leaves its key out; cells are taken as written, spaces included, as CSV has it).
//! Each entry has `at_s` (seconds from the start) and a `kind`:
//!
//! * `app`: an application submitted, whose client attaches at once and runs `tasks` tasks
//!   of `task_s` seconds each, one per core of its executors, as Spark runs a stage; a task
//!   on an executor that ends runs again elsewhere. It finishes when every task has run.
//! * `driver`: a driver (cluster mode) submitted, that runs `duration_s` seconds once started;
//!   its first `failures` runs then fail (exit 1), and a supervised one is started again by
//!   its worker after the back-off a real worker waits. A driver with `tasks` runs an
//!   application, as a job's driver does: `duration_s` after it starts it registers the
//!   application (its `cores_max`, `executor_cores`, `executor_memory_mb`, and
//!   `min_executors`, which it was submitted with too), which runs `tasks` tasks of `task_s`
//!   as an `app` does, and the driver ends when it has.
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
    /// The executors it needs at once, a gang (with `executor_cores`); unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_executors: Option<u32>,
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
    /// How many of its runs fail (exit 1 after `duration_s`) before one finishes; an
    /// unsupervised driver's first run that fails ends it, FAILED.
    #[serde(default, skip_serializing_if = "muster_core::model::is_zero")]
    pub failures: u32,
    /// Its application's `spark.cores.max`, when it runs one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores_max: Option<u32>,
    /// Its application's `spark.executor.cores`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor_cores: Option<u32>,
    /// Its application's executor memory in MB (1024).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor_memory_mb: Option<u64>,
    /// The executors its application needs at once, a gang (with `executor_cores`): the
    /// driver is submitted with it and starts only beside room for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_executors: Option<u32>,
    /// How many tasks its application runs; unset: it runs none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<u32>,
    /// How long each of its application's tasks takes on one core, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_s: Option<f64>,
}

impl DriverEntry {
    /// The application it runs, as an `app` entry of its own would ask for it, if it runs
    /// one.
    pub fn app(&self) -> Option<AppEntry> {
        Some(AppEntry {
            at_s: self.at_s,
            name: self.name.clone(),
            queue: self.queue.clone(),
            user: self.user.clone(),
            cores_max: self.cores_max,
            executor_cores: self.executor_cores,
            executor_memory_mb: self.executor_memory_mb.unwrap_or_else(default_memory_mb),
            executor_limit: None,
            min_executors: self.min_executors,
            tasks: self.tasks?,
            task_s: self.task_s?,
        })
    }
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
        let seconds = |s: f64| (0.0..=MAX_SECONDS).contains(&s);
        if !seconds(self.at_s()) {
            return Err((
                "at_s",
                "must be a number of seconds from 0 to a year (31536000)",
            ));
        }
        match self {
            Self::App(app) => {
                if app.tasks == 0 {
                    return Err(("tasks", "must be at least 1"));
                }
                if !(seconds(app.task_s) && app.task_s > 0.0) {
                    return Err((
                        "task_s",
                        "must be a positive number of seconds, at most a year (31536000)",
                    ));
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
                    return Err((
                        "duration_s",
                        "must be a positive number of seconds, at most a year (31536000)",
                    ));
                }
                if driver.tasks.is_some() != driver.task_s.is_some() {
                    return Err(("tasks", "a driver's application needs tasks and task_s"));
                }
                let app_keys = driver.cores_max.is_some()
                    || driver.executor_cores.is_some()
                    || driver.executor_memory_mb.is_some()
                    || driver.min_executors.is_some();
                match driver.app() {
                    None if app_keys => {
                        return Err(("tasks", "a driver's application needs tasks and task_s"));
                    }
                    Some(_) if driver.supervise || driver.failures > 0 => {
                        return Err((
                            "supervise",
                            "a driver that runs an application is neither supervised nor failing",
                        ));
                    }
                    Some(app) => Self::App(app).check()?,
                    None => {}
                }
                if driver.min_executors.is_some() && driver.executor_cores.is_none() {
                    return Err(("min_executors", "a gang needs executor_cores"));
                }
            }
            Self::LoseWorker { down_s, .. } => {
                if down_s.is_some_and(|s| !seconds(s)) {
                    return Err((
                        "down_s",
                        "must be a number of seconds from 0 to a year (31536000)",
                    ));
                }
            }
            Self::Drain { kill_after_s, .. } => {
                if kill_after_s.is_some_and(|s| !seconds(s)) {
                    return Err((
                        "kill_after_s",
                        "must be a number of seconds from 0 to a year (31536000)",
                    ));
                }
            }
            Self::LeaderChange { .. } => {}
        }
        Ok(())
    }
}

/// The latest time and the longest duration a trace may give, in seconds: a year, far more
/// than any simulation runs, and far less than its clock of milliseconds holds.
const MAX_SECONDS: f64 = 31_536_000.0;

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

/// The entries of trace `text`, read from `path`, in time order: CSV when `path` ends in
/// `.csv`, JSON Lines otherwise. Blank lines are skipped.
///
/// # Errors
///
/// A line is not an entry (naming the line and the field), or there is none.
pub fn parse(text: &str, path: &str) -> Result<Vec<Entry>, TraceError> {
    let mut entries = if path.ends_with(".csv") {
        csv_rows(text, path)?
    } else {
        json_lines(text, path)?
    };
    if entries.is_empty() {
        return Err(error_at(path, 0)(
            "no entries: a trace needs at least one (an app, a driver, ...)".to_owned(),
        ));
    }
    entries.sort_by(|a, b| a.at_s().total_cmp(&b.at_s()));
    Ok(entries)
}

/// Each non-blank line of `text` as an entry.
fn json_lines(text: &str, path: &str) -> Result<Vec<Entry>, TraceError> {
    let mut entries = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let error = error_at(path, i + 1);
        entries.push(entry(
            &mut serde_json::Deserializer::from_str(line),
            &error,
        )?);
    }
    Ok(entries)
}

/// The columns a CSV trace may have: every key of every kind of entry.
const CSV_COLUMNS: [(&str, CsvCell); 20] = [
    ("kind", CsvCell::Text),
    ("at_s", CsvCell::Number),
    ("name", CsvCell::Text),
    ("queue", CsvCell::Text),
    ("user", CsvCell::Text),
    ("cores_max", CsvCell::Number),
    ("executor_cores", CsvCell::Number),
    ("executor_memory_mb", CsvCell::Number),
    ("executor_limit", CsvCell::Number),
    ("min_executors", CsvCell::Number),
    ("tasks", CsvCell::Number),
    ("task_s", CsvCell::Number),
    ("cores", CsvCell::Number),
    ("memory_mb", CsvCell::Number),
    ("duration_s", CsvCell::Number),
    ("supervise", CsvCell::Bool),
    ("failures", CsvCell::Number),
    ("worker", CsvCell::Text),
    ("down_s", CsvCell::Number),
    ("kill_after_s", CsvCell::Number),
];

/// What a CSV column holds.
#[derive(Clone, Copy)]
enum CsvCell {
    Text,
    Number,
    Bool,
}

/// Each row of CSV `text` under its header row as an entry: the object of the row's
/// non-empty cells, read as its JSON line would be.
fn csv_rows(text: &str, path: &str) -> Result<Vec<Entry>, TraceError> {
    let mut reader = csv::ReaderBuilder::new().from_reader(text.as_bytes());
    let line_of = |position: Option<&csv::Position>| position.map_or(0, |p| p.line() as usize);
    let header = reader
        .headers()
        .map_err(|e| error_at(path, line_of(e.position()))(e.to_string()))?
        .clone();
    let header_error = error_at(path, line_of(header.position()));
    let mut columns: Vec<(&str, CsvCell)> = Vec::new();
    for name in &header {
        let Some(&(name, cell)) = CSV_COLUMNS.iter().find(|(known, _)| *known == name) else {
            let known: Vec<&str> = CSV_COLUMNS.iter().map(|(known, _)| *known).collect();
            return Err(header_error(format!(
                "unknown column `{name}`, expected some of {}",
                known.join(", ")
            )));
        };
        if columns.iter().any(|(seen, _)| *seen == name) {
            return Err(header_error(format!("column `{name}` appears twice")));
        }
        columns.push((name, cell));
    }
    let mut entries = Vec::new();
    for row in reader.records() {
        let row = row.map_err(|e| {
            let error = error_at(path, line_of(e.position()));
            match e.kind() {
                csv::ErrorKind::UnequalLengths { len, .. } => error(format!(
                    "{len} cells, where the header has {}",
                    columns.len()
                )),
                _ => error(e.to_string()),
            }
        })?;
        let error = error_at(path, line_of(row.position()));
        let mut object = serde_json::Map::new();
        for (&(name, cell), text) in columns.iter().zip(&row) {
            if text.is_empty() {
                continue;
            }
            let value = match cell {
                CsvCell::Text => serde_json::Value::from(text),
                CsvCell::Number => text
                    .parse::<serde_json::Number>()
                    .map(serde_json::Value::Number)
                    .map_err(|_| error(format!("{name}: `{text}` is not a number")))?,
                CsvCell::Bool => match text {
                    "true" => true.into(),
                    "false" => false.into(),
                    _ => return Err(error(format!("{name}: `{text}` is not true or false"))),
                },
            };
            object.insert(name.to_owned(), value);
        }
        entries.push(entry(serde_json::Value::Object(object), &error)?);
    }
    Ok(entries)
}

/// Makes the error of line `line` of `path`.
fn error_at(path: &str, line: usize) -> impl Fn(String) -> TraceError + '_ {
    move |message| TraceError {
        path: path.to_owned(),
        line,
        message,
    }
}

/// The entry `json` holds, checked, or an error naming its field. An application's or a
/// driver's keys are read as their own struct's, not through the enum, which would read
/// them without their names (serde buffers an internally tagged enum's content).
fn entry<'de>(
    json: impl serde::Deserializer<'de>,
    error: &impl Fn(String) -> TraceError,
) -> Result<Entry, TraceError> {
    fn named<'de, T: Deserialize<'de>>(
        json: impl serde::Deserializer<'de>,
        error: &impl Fn(String) -> TraceError,
    ) -> Result<T, TraceError> {
        serde_path_to_error::deserialize(json).map_err(|e| {
            let field = e.path().to_string();
            let message = e.inner().to_string();
            // An unknown key's path is that key, which the message names already.
            if field == "." || message.starts_with("unknown field") {
                error(message)
            } else {
                error(format!("{field}: {message}"))
            }
        })
    }
    let mut value: serde_json::Value = named(json, error)?;
    let kind = value
        .get("kind")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned);
    let entry = match (kind.as_deref(), value.as_object_mut()) {
        (Some(kind @ ("app" | "driver")), Some(object)) => {
            object.remove("kind");
            let fields = serde_json::Value::Object(std::mem::take(object));
            if kind == "app" {
                Entry::App(named(fields, error)?)
            } else {
                Entry::Driver(named(fields, error)?)
            }
        }
        _ => named(value, error)?,
    };
    entry
        .check()
        .map_err(|(field, message)| error(format!("{field}: {message}")))?;
    Ok(entry)
}

/// `entries` as a trace file: one line each.
pub fn write(entries: &[Entry]) -> String {
    entries
        .iter()
        .map(|entry| serde_json::to_string(entry).expect("an entry prints") + "\n")
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_csv_trace_reads_as_the_same_trace_in_json_lines() {
        let csv = "\
kind,at_s,name,queue,cores_max,executor_cores,tasks,task_s,duration_s,supervise,worker,down_s
app,1.5,\"etl, nightly\",etl,8,2,40,30,,,,
driver,0,report,,,,,,600,true,,

lose_worker,90,,,,,,,,,w-0002,
lose_worker,95,,,,,,,,,w-0003,120
leader_change,100,,,,,,,,,,
";
        let json = r#"{"kind": "app", "at_s": 1.5, "name": "etl, nightly", "queue": "etl", "cores_max": 8, "executor_cores": 2, "tasks": 40, "task_s": 30}
{"kind": "driver", "at_s": 0, "name": "report", "duration_s": 600, "supervise": true}
{"kind": "lose_worker", "at_s": 90, "worker": "w-0002"}
{"kind": "lose_worker", "at_s": 95, "worker": "w-0003", "down_s": 120}
{"kind": "leader_change", "at_s": 100}
"#;
        let from_csv = parse(csv, "trace.csv").unwrap();
        assert_eq!(from_csv.len(), 5);
        assert_eq!(from_csv, parse(json, "trace.jsonl").unwrap());
    }

    /// A key added to an entry must be added to [`CSV_COLUMNS`] too: each kind of entry with
    /// every key set, written back, has only keys that are columns.
    #[test]
    fn every_key_of_every_kind_of_entry_is_a_csv_column() {
        let every_field = [
            r#"{"kind": "app", "at_s": 0, "name": "a", "queue": "q", "user": "u", "cores_max": 1,
                "executor_cores": 1, "executor_memory_mb": 1, "executor_limit": 1, "tasks": 1,
                "task_s": 1}"#,
            r#"{"kind": "driver", "at_s": 0, "name": "d", "queue": "q", "user": "u", "cores": 1,
                "memory_mb": 1, "duration_s": 1, "supervise": true, "failures": 1}"#,
            r#"{"kind": "driver", "at_s": 0, "duration_s": 1, "cores_max": 2, "executor_cores": 1,
                "executor_memory_mb": 1, "min_executors": 2, "tasks": 1, "task_s": 1}"#,
            r#"{"kind": "lose_worker", "at_s": 0, "worker": "w", "down_s": 1}"#,
            r#"{"kind": "drain", "at_s": 0, "worker": "w", "kill_after_s": 1}"#,
            r#"{"kind": "leader_change", "at_s": 0}"#,
        ];
        for text in every_field {
            let entry: Entry = serde_json::from_str(text).unwrap();
            let written = serde_json::to_value(&entry).unwrap();
            let keys = written.as_object().unwrap().keys();
            for key in keys {
                assert!(
                    CSV_COLUMNS.iter().any(|(column, _)| column == key),
                    "`{key}` is no CSV column"
                );
            }
        }
    }

    #[test]
    fn a_malformed_csv_trace_is_refused_naming_the_line_and_column() {
        let header = "kind,at_s,tasks,task_s,duration_s,supervise\n";
        for (rows, message) in [
            ("app,0,x,1,,\n", "trace.csv:2: tasks: `x` is not a number"),
            (
                "app,0,1,1,,\ndriver,3,,,60,yes\n",
                "trace.csv:3: supervise: `yes` is not true or false",
            ),
            (
                "driver,0,4,,60,\n",
                "trace.csv:2: tasks: a driver's application needs tasks and task_s",
            ),
            ("app,0,0,1,,\n", "trace.csv:2: tasks: must be at least 1"),
            (
                "app,0,1,1\n",
                "trace.csv:2: 4 cells, where the header has 6",
            ),
        ] {
            let error = parse(&format!("{header}{rows}"), "trace.csv").unwrap_err();
            assert!(
                error.to_string().starts_with(message),
                "{rows}: {error} is not {message}"
            );
        }
        let error = parse("kind,at_s,task\napp,0,1\n", "trace.csv").unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("trace.csv:1: unknown column `task`, expected some of kind, at_s"),
            "{error}"
        );
        let error = parse("kind,at_s,at_s\nleader_change,0,1\n", "trace.csv").unwrap_err();
        assert_eq!(
            error.to_string(),
            "trace.csv:1: column `at_s` appears twice"
        );
    }

    #[test]
    fn a_malformed_json_line_is_refused_naming_the_line_and_field() {
        for (line, message) in [
            (
                r#"{"kind":"app","at_s":0,"tasks":-4,"task_s":3}"#,
                "trace.jsonl:1: tasks: invalid value: integer `-4`, expected u32",
            ),
            (
                r#"{"kind":"app","at_s":0,"tasks":"ten","task_s":3}"#,
                "trace.jsonl:1: tasks: invalid type: string \"ten\", expected u32",
            ),
            (
                r#"{"kind":"app","at_s":0,"cores_max":-1,"tasks":1,"task_s":3}"#,
                "trace.jsonl:1: cores_max: invalid value: integer `-1`, expected u32",
            ),
            (
                r#"{"kind":"driver","at_s":0,"duration_s":5,"supervise":"yes"}"#,
                "trace.jsonl:1: supervise: invalid type: string \"yes\", expected a boolean",
            ),
            (
                r#"{"kind":"app","at_s":0,"task":1,"task_s":3}"#,
                "trace.jsonl:1: unknown field `task`",
            ),
            (
                r#"{"kind":"job","at_s":0}"#,
                "trace.jsonl:1: kind: unknown variant `job`, expected one of",
            ),
        ] {
            let error = parse(line, "trace.jsonl").unwrap_err().to_string();
            assert!(
                error.starts_with(message),
                "{line}: {error} is not {message}"
            );
            assert!(!error.contains("at line"), "{error}");
        }
        for empty in ["", "\n  \n"] {
            let error = parse(empty, "trace.jsonl").unwrap_err().to_string();
            assert!(error.contains("no entries"), "{error}");
        }
        let error = parse("kind,at_s\n", "trace.csv").unwrap_err().to_string();
        assert!(error.contains("no entries"), "{error}");
    }
    #[test]
    fn times_beyond_a_year_are_refused() {
        for (line, message) in [
            (
                r#"{"kind":"app","at_s":0,"tasks":1,"task_s":1e17}"#,
                "trace.jsonl:1: task_s: must be a positive number of seconds, at most a year",
            ),
            (
                r#"{"kind":"app","at_s":1e18,"tasks":1,"task_s":1}"#,
                "trace.jsonl:1: at_s: must be a number of seconds from 0 to a year",
            ),
            (
                r#"{"kind":"driver","at_s":0,"duration_s":1e12}"#,
                "trace.jsonl:1: duration_s: must be a positive number of seconds, at most a year",
            ),
        ] {
            let error = parse(line, "trace.jsonl").unwrap_err().to_string();
            assert!(
                error.starts_with(message),
                "{line}: {error} is not {message}"
            );
        }
        let year = r#"{"kind":"app","at_s":31536000,"tasks":1,"task_s":31536000}"#;
        assert!(parse(year, "trace.jsonl").is_ok());
    }
}
