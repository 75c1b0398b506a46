//! Real Apache Spark on Muster: `spark-submit --master spark-muster://...` with the plug-in
//! of `integrations/spark`: PySpark and Java applications whose executors are Spark's own,
//! started by real Muster workers.
//!
//! They need Java 17 and the pinned pyspark (`.ci/run` installs both): the pyspark of the
//! virtual environment at `MUSTER_SPARK_VENV`, by default `~/.cache/muster/pyspark-4.3.0`;
//! a core of them runs again with pyspark 3.5 ([`with_every_spark`]).
//! Without them the tests say so and pass, unless `MUSTER_REQUIRE_SPARK` is set (as in CI),
//! when they fail. Spark applications are run one at a time: each starts several JVMs.

use std::io::{BufRead, BufReader, Lines};
use std::path::{Path, PathBuf};
use std::process::{ChildStdout, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;

use serde_json::Value;

use crate::support::{Dev, Masters, Process, start_worker, wait_for, with_test_cluster_files};

// Shared by every end-to-end test binary; each uses part of it.
#[allow(dead_code)]
#[path = "../support.rs"]
mod support;

mod book;
mod faults;
mod jobs;
mod refusals;
mod shuffle;
mod submissions;

/// Java and the Spark the tests run, and the plug-in built against it.
struct Spark {
    /// `SPARK_HOME`: the pyspark package's directory, which holds the whole Spark.
    home: PathBuf,
    /// The virtual environment's Python, which imports that pyspark.
    python: PathBuf,
    /// `muster-spark.jar`.
    jar: PathBuf,
    /// `muster-spark-examples.jar`, built with it: `SquareSums N` sums the squares of 1..N
    /// by their remainder modulo 10, through a shuffle, and prints `R SUM` lines.
    examples: PathBuf,
}

/// The Spark to test with (4.3), and a lock that runs Spark applications one at a time;
/// `None` (after saying so) when this machine has no Java or no pinned pyspark.
fn spark() -> Option<(&'static Spark, MutexGuard<'static, ()>)> {
    static SPARK: OnceLock<Result<Spark, String>> = OnceLock::new();
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let found = SPARK.get_or_init(|| {
        // Where the build puts the jars by default under XDG_CACHE_HOME, which `muster dev`
        // knows too: see [`spark_cache`].
        find_spark(
            "MUSTER_SPARK_VENV",
            "pyspark-4.3.0",
            &spark_cache().join("muster/spark"),
        )
    });
    let spark = required(found)?;
    Some((
        spark,
        ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner()),
    ))
}

/// Runs `test` with Spark 4.3 and then Spark 3.5 (the pyspark of the virtual environment at
/// `MUSTER_SPARK35_VENV`, by default `~/.cache/muster/pyspark-3.5`), one application at a
/// time: the core of the tests that every Spark the plug-in supports must pass.
fn with_every_spark(test: impl Fn(&Spark)) {
    static SPARK_3_5: OnceLock<Result<Spark, String>> = OnceLock::new();
    let Some((newest, _one_at_a_time)) = spark() else {
        return;
    };
    test(newest);
    let found = SPARK_3_5.get_or_init(|| {
        let out = spark_cache().join("spark-3.5");
        find_spark("MUSTER_SPARK35_VENV", "pyspark-3.5", &out)
    });
    if let Some(older) = required(found) {
        eprintln!("and again with Spark 3.5");
        test(older);
    }
}

/// The Spark `found`, or `None` after saying what is missing; a panic when
/// `MUSTER_REQUIRE_SPARK` is set (as in CI).
fn required(found: &Result<Spark, String>) -> Option<&Spark> {
    match found {
        Ok(spark) => Some(spark),
        Err(missing) if std::env::var_os("MUSTER_REQUIRE_SPARK").is_some() => {
            panic!("MUSTER_REQUIRE_SPARK is set, but {missing}")
        }
        Err(missing) => {
            eprintln!("skipped: {missing} (.ci/run installs Java 17 and pyspark)");
            None
        }
    }
}

/// The Spark of the pyspark in the virtual environment that `venv_variable` names (by
/// default `~/.cache/muster/DEFAULT_VENV`), with the plug-in and examples built for it into
/// `out`.
fn find_spark(venv_variable: &str, default_venv: &str, out: &Path) -> Result<Spark, String> {
    let venv = std::env::var_os(venv_variable).map_or_else(
        || {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/muster")
                .join(default_venv)
        },
        PathBuf::from,
    );
    let python = venv.join("bin/python");
    let home = Command::new(&python)
        .args([
            "-c",
            "import os, pyspark; print(os.path.dirname(pyspark.__file__))",
        ])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| PathBuf::from(String::from_utf8_lossy(&output.stdout).trim()))
        .ok_or_else(|| format!("no pyspark in {}", venv.display()))?;
    let java = Command::new("java").arg("-version").output();
    if !java.is_ok_and(|output| output.status.success()) {
        return Err("no java on the PATH".to_owned());
    }
    let build = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../integrations/spark/build"
    ))
    .arg(out)
    .env("SPARK_HOME", &home)
    .output()
    .map_err(|e| format!("cannot run integrations/spark/build: {e}"))?;
    assert!(
        build.status.success(),
        "integrations/spark/build failed: {}",
        String::from_utf8_lossy(&build.stderr)
    );
    let jar = PathBuf::from(String::from_utf8_lossy(&build.stdout).trim());
    let examples = jar.with_file_name("muster-spark-examples.jar");
    Ok(Spark {
        home,
        python,
        jar,
        examples,
    })
}

/// The directory the tests' `XDG_CACHE_HOME` is, under which the build put the jars.
fn spark_cache() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("cache")
}

/// The id spark-submit's `log` says its cluster-mode submission was created as.
fn submission_id(log: &str) -> String {
    log.split("Submission successfully created as ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("not submitted: {log}"))
        .trim_end_matches('.')
        .to_owned()
}

/// Driver `id` as `muster drivers --json` shows it in a second terminal of `dev`, once
/// FINISHED; until then it is SUBMITTED or RUNNING.
fn finished_driver(dev: &Dev, id: &str) -> Value {
    let start = std::time::Instant::now();
    loop {
        let output = dev
            .second_terminal(
                Command::new(env!("CARGO_BIN_EXE_muster")).args(["drivers", "--json", id]),
            )
            .output()
            .unwrap();
        let shown: Value = serde_json::from_str(&crate::support::stdout(&output)).unwrap();
        let state = shown[0]["state"].as_str().unwrap_or_default();
        assert!(
            ["SUBMITTED", "RUNNING", "FINISHED"].contains(&state),
            "{shown}"
        );
        if state == "FINISHED" {
            return shown[0].clone();
        }
        assert!(
            start.elapsed() < 3 * crate::support::DEADLINE,
            "not finished: {shown}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// `muster dev` started with `spark`'s `SPARK_HOME`, its data under `dir`.
fn muster_dev(spark: &Spark, dir: &Path) -> Dev {
    let data = dir.join("data");
    let cache = spark_cache();
    Dev::start(
        &["--data-dir", data.to_str().unwrap()],
        &[
            ("SPARK_HOME", spark.home.as_os_str()),
            ("XDG_CACHE_HOME", cache.as_os_str()),
        ],
    )
}

/// One of the test applications in `tests/spark/apps`.
fn app(name: &str) -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/spark/apps/").to_owned() + name
}

/// JVM settings that start the tests' short-lived drivers and executors with less CPU: the
/// client compiler only, and the serial collector.
const FAST_START: &str = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC";

impl Spark {
    /// `spark-submit` in client mode against `masters` (a comma-separated list), with the
    /// plug-in, the test clusters' secret and CA (through `muster`'s environment), and
    /// `args` (options, then the application and its arguments).
    fn submit(&self, masters: &str, args: &[&str]) -> Command {
        let mut command = Command::new(self.home.join("bin/spark-submit"));
        with_test_cluster_files(&mut command)
            .env("SPARK_HOME", &self.home)
            .env("PYSPARK_PYTHON", &self.python)
            .args(["--master", &format!("spark-muster://{masters}")])
            .arg("--jars")
            .arg(&self.jar)
            .args([
                "--conf",
                &format!("spark.muster.bin={}", env!("CARGO_BIN_EXE_muster")),
            ])
            .args(["--conf", "spark.ui.enabled=false"])
            .args(["--driver-java-options", FAST_START])
            .arg(format!(
                "--conf=spark.executor.extraJavaOptions={FAST_START}"
            ))
            .args(args);
        command
    }

    /// Runs `spark-submit` to its end.
    fn run(&self, masters: &str, args: &[&str]) -> Output {
        self.submit(masters, args)
            .stdin(Stdio::null())
            .output()
            .expect("spark-submit runs")
    }
}

/// Three masters and `workers` two-core workers, with every worker ALIVE.
fn cluster(workers: usize) -> (Masters, Vec<Process>) {
    let masters = Masters::start();
    let started = (1..=workers)
        .map(|i| start_worker(&masters, &format!("worker-{i}"), 2))
        .collect();
    wait_for(&masters, "the workers", |s| {
        support::alive_workers(s) == workers && s["recovery_state"] == "ALIVE"
    });
    (masters, started)
}

/// What `SquareSums N` sums: the squares of 1..=N by their remainder modulo 10.
fn square_sums(n: u64) -> std::collections::BTreeMap<u64, u64> {
    let mut sums = std::collections::BTreeMap::new();
    for i in 1..=n {
        *sums.entry(i % 10).or_default() += i * i;
    }
    sums
}

/// What a finished `spark-submit` printed on standard output; it must have succeeded.
fn succeeded(output: &Output) -> String {
    assert!(
        output.status.success(),
        "spark-submit failed ({}): {}\nand printed: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The executors an application ran on the workers of `masters`: the directories its
/// executors had in the workers' work dirs, for those that reached their driver.
fn executors_that_registered(masters: &Masters, app_id: &str) -> Vec<PathBuf> {
    executors_started(masters, app_id)
        .into_iter()
        .filter(|executor| {
            std::fs::read_to_string(executor.join("stderr"))
                .unwrap_or_default()
                .contains("Successfully registered with driver")
        })
        .collect()
}

/// The work directories of the executors workers started for `app_id`, registered or not.
fn executors_started(masters: &Masters, app_id: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for worker in std::fs::read_dir(masters.dir.path()).unwrap().flatten() {
        let Ok(executors) = std::fs::read_dir(worker.path().join(app_id)) else {
            continue;
        };
        found.extend(
            executors
                .flatten()
                .map(|executor| executor.path())
                .filter(|path| path.is_dir()),
        );
    }
    found
}

/// The Muster application id a Spark run's log names.
fn app_id_of(output: &Output) -> String {
    let log = String::from_utf8_lossy(&output.stderr);
    let at = log
        .find("registered with Muster at ")
        .unwrap_or_else(|| panic!("no registration in the log: {log}"));
    log[at..]
        .split_whitespace()
        .find(|word| word.starts_with("app-"))
        .expect("an app id")
        .to_owned()
}

/// The status JSON of the masters at `list`.
fn status(list: &str) -> Value {
    let output = Masters::client(list, &["status", "--json"]);
    serde_json::from_slice(&output.stdout).unwrap_or(Value::Null)
}

/// A running spark-submit, once it has printed a given line.
struct SubmitRun {
    process: Process,
    lines: Lines<BufReader<ChildStdout>>,
    /// Its standard error, read as it comes (Spark logs a lot there).
    log: JoinHandle<String>,
}

impl SubmitRun {
    /// `spark-submit` of `args`, once it has printed the line `ready`.
    fn start(spark: &Spark, masters: &str, args: &[&str], ready: &str) -> Self {
        let mut child = spark
            .submit(masters, args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let process = Process(child);
        if !lines
            .by_ref()
            .map_while(Result::ok)
            .any(|line| line == ready)
        {
            panic!(
                "the application never printed `{ready}`: {}",
                log.join().unwrap()
            );
        }
        Self {
            process,
            lines,
            log,
        }
    }

    /// Waits for spark-submit to end and returns its output.
    fn wait(mut self) -> Output {
        let printed: Vec<String> = self.lines.by_ref().map_while(Result::ok).collect();
        Output {
            status: self.process.0.wait().unwrap(),
            stdout: printed.join("\n").into_bytes(),
            stderr: self.log.join().unwrap().into_bytes(),
        }
    }
}

/// RUNNING executors in a status.
fn running(status: &Value) -> usize {
    status["apps"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|a| a["executors"].as_array().unwrap())
        .filter(|e| e["state"] == "RUNNING")
        .count()
}
