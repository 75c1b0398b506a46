//! The YARN high-priority experiment (the reference's
//! "Experiment") at this machine's scale, on a local cluster of three masters and four
//! two-core workers, with queues `default` (ordinary, threshold 0.8), `food` (ordinary) and
//! `prod` (prior, preempting unless `--no-preempt`).
//!
//! Three scenarios, each repeated: three `pi` jobs submitted to `prod` on an idle cluster;
//! the same three submitted to `prod` while two long jobs (in `default` and `food`) hold
//! every core; and, as the control, the same three submitted to `food` under that load. It
//! prints each scenario's turnaround (from submission to the job's end), the order in which
//! jobs 1 (the long one in `default`), 2 and 3 (two of the `prod` jobs) finish under load, and
//! can draw the cores each queue holds over time (SVG). `muster experiment priority` runs it.
//!
//! With the plug-in's jar, every job is a real Spark application instead of a job file of
//! built-in tasks: `spark-submit --master spark-muster://...` with the plug-in `JAR`, the
//! `SPARK_HOME` and `PYSPARK_PYTHON` of the environment, and `priority_apps.py` (the same
//! shapes: long jobs of sleeping tasks, pi jobs of CPU-bound ones, at Python's speed).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use muster_master::web::view::StatusView;
use muster_proto::v1::StatusRequest;
use serde::Serialize;

use crate::BenchError;
use crate::cluster::{LocalCluster, Shape, stop};

/// How to run it: the fields but the first are `muster experiment priority`'s options of
/// the same names.
pub struct Options {
    /// The `muster` binary: the cluster's members and the jobs run it.
    pub program: PathBuf,
    /// A scaled-down run (about a minute; with `spark` about twelve): one repetition of
    /// short jobs, to check that it runs rather than to measure.
    pub quick: bool,
    /// Draw the cores each queue holds over time, under load with prior jobs, to this SVG.
    pub plot: Option<PathBuf>,
    /// Run without preemption (prior jobs then wait for ordinary executors to end).
    pub no_preempt: bool,
    /// Run Spark applications, with this build of the plug-in, the environment's
    /// `SPARK_HOME` and `PYSPARK_PYTHON`.
    pub spark: Option<PathBuf>,
}

/// What the experiment measured, as `muster experiment priority --json` prints it.
#[derive(Debug, Serialize)]
pub struct PriorityReport {
    /// How many times each scenario ran.
    pub repetitions: usize,
    /// The mean turnaround of the pi jobs in `prod` on an idle cluster.
    pub idle_s: f64,
    /// In `prod` (prior) under full load.
    pub prior_s: f64,
    /// In `food` (ordinary) under full load: the control.
    pub ordinary_s: f64,
    /// The long jobs' mean turnaround beside the prior jobs over that beside the control.
    pub long_slowdown: f64,
    /// The finish order of jobs 1 (the long one in `default`), 2 and 3 (prior) under load.
    pub order: Vec<u32>,
    /// Every turnaround, by scenario: `idle`, `prior`, `ordinary`, and the long jobs'
    /// `long_with_prior` and `long_with_ordinary`.
    pub runs: BTreeMap<&'static str, Vec<f64>>,
    /// Whether prior jobs preempted.
    pub preempt: bool,
    /// Whether the jobs were Spark applications.
    pub spark: bool,
}

impl PriorityReport {
    /// The mean turnaround of `scenario`, in seconds.
    pub fn mean(&self, scenario: &str) -> f64 {
        mean(&self.runs[scenario])
    }
}

fn mean(runs: &[f64]) -> f64 {
    runs.iter().sum::<f64>() / runs.len() as f64
}

/// What the jobs run on.
enum Runner {
    /// `muster job run` of built-in tasks.
    Jobs,
    /// `spark-submit` of `priority_apps.py`.
    Spark {
        spark_home: PathBuf,
        python: String,
        jar: PathBuf,
        /// `priority_apps.py`, written out.
        app: PathBuf,
    },
}

/// JVM settings for the Spark applications' drivers and executors: the client compiler
/// only, and the serial collector.
const FAST_START: &str = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC";

/// The experiment's Spark applications.
const SPARK_APPS: &str = include_str!("priority_apps.py");

impl Runner {
    fn new(jar: Option<PathBuf>, dir: &Path) -> Result<Self, BenchError> {
        let Some(jar) = jar else {
            return Ok(Self::Jobs);
        };
        let from_environment = |name: &str| {
            std::env::var(name).map_err(|_| {
                BenchError::BadInput(format!(
                    "--spark needs {name} set (the book's \"Spark on Muster\" shows how)"
                ))
            })
        };
        let spark_home = PathBuf::from(from_environment("SPARK_HOME")?);
        if !spark_home.join("bin/spark-submit").is_file() {
            return Err(BenchError::BadInput(format!(
                "SPARK_HOME {} has no bin/spark-submit",
                spark_home.display()
            )));
        }
        if !jar.is_file() {
            return Err(BenchError::BadInput(format!(
                "--spark {}: no such file",
                jar.display()
            )));
        }
        let app = dir.join("priority_apps.py");
        std::fs::write(&app, SPARK_APPS)?;
        Ok(Self::Spark {
            spark_home,
            python: from_environment("PYSPARK_PYTHON")?,
            jar: std::path::absolute(jar)?,
            app,
        })
    }
}

/// A job's process, stopped if it still runs when dropped: an experiment that fails leaves
/// no job behind.
struct JobProcess {
    name: String,
    process: Child,
}

impl Drop for JobProcess {
    fn drop(&mut self) {
        stop(&mut self.process, &self.name);
    }
}

/// One job of the experiment: its name and queue, the cores it may hold, and its tasks.
struct Job<'a> {
    name: &'a str,
    queue: &'a str,
    cores_max: u32,
    tasks: u32,
    work: Work,
}

/// What each task of a job does.
#[derive(Clone, Copy)]
enum Work {
    /// Sleeps this many milliseconds.
    SleepMs(u64),
    /// Estimates pi from this many samples.
    Pi(u64),
}

/// How big the experiment is.
struct Scale {
    repetitions: usize,
    /// Sleep tasks of 500 ms per core of each long job.
    long_rounds: u32,
    /// Samples per pi task.
    pi_samples: u64,
}

impl Scale {
    /// With Spark, the long jobs last minutes, to outlast the start of the pi applications
    /// (JVMs and Python on every executor), and Python's pi takes about 500 times as long a
    /// sample as the built-in task.
    fn new(quick: bool, spark: bool) -> Self {
        let (repetitions, long_rounds, pi_samples) = match (quick, spark) {
            (true, false) => (1, 40, 20_000_000),
            (false, false) => (3, 160, 2_400_000_000),
            (true, true) => (1, 360, 400_000),
            (false, true) => (3, 360, 4_000_000),
        };
        Self {
            repetitions,
            long_rounds,
            pi_samples,
        }
    }
}

/// One scenario's turnarounds, in seconds.
type Runs = Vec<f64>;

/// Runs the experiment on a cluster of its own, which it stops at the end.
///
/// # Errors
///
/// The cluster or a job could not run.
pub fn run(options: &Options) -> Result<PriorityReport, BenchError> {
    let scale = Scale::new(options.quick, options.spark.is_some());
    let runtime = tokio::runtime::Runtime::new()?;
    let dir = tempfile::Builder::new()
        .prefix("muster-experiment-")
        .tempdir()?;
    let runner = Runner::new(options.spark.clone(), dir.path())?;
    let config = dir.path().join("master.json");
    let preemption = if options.no_preempt {
        "{}"
    } else {
        r#"{"preemption": {"queues": ["prod"], "delay_s": 1, "grace_s": 1, "max_fraction": 0.25}}"#
    };
    std::fs::write(&config, preemption)?;
    let queues = dir.path().join("queues.json");
    std::fs::write(
        &queues,
        r#"[{"name": "prod", "prior": true}, {"name": "default", "threshold": 0.8}, {"name": "food"}]"#,
    )?;
    let shape = Shape {
        program: options.program.clone(),
        masters: 3,
        workers: 4,
        cores: 2,
        memory: 4096,
        data_dir: Some(dir.path().join("cluster")),
        master_args: vec![
            "--config".into(),
            config.display().to_string(),
            "--queues".into(),
            queues.display().to_string(),
        ],
        spark_rest: false,
        shuffle_service: false,
    };
    let cluster = LocalCluster::start(shape, &runtime)?;
    let experiment = Experiment {
        cluster: &cluster,
        runtime: &runtime,
        scale: &scale,
        runner: &runner,
    };
    experiment.wait_for(|s| s.workers.len() == 4 && s.queues.len() == 3)?;

    let mut runs: BTreeMap<&str, Runs> = BTreeMap::new();
    let mut order = Vec::new();
    let mut samples = Vec::new();
    for repetition in 0..scale.repetitions {
        let (idle, _, _) = experiment.pi_jobs("prod", false, &mut Vec::new())?;
        runs.entry("idle").or_default().extend(idle);
        let mut sampled = Vec::new();
        let (prior, long, finished) = experiment.pi_jobs("prod", true, &mut sampled)?;
        runs.entry("prior").or_default().extend(prior);
        runs.entry("long_with_prior").or_default().extend(long);
        if repetition == 0 {
            order = finished;
            samples = sampled;
        }
        let (ordinary, long, _) = experiment.pi_jobs("food", true, &mut Vec::new())?;
        runs.entry("ordinary").or_default().extend(ordinary);
        runs.entry("long_with_ordinary").or_default().extend(long);
    }
    if let Some(path) = &options.plot {
        plot(path, &samples)?;
    }
    let mean = |scenario: &str| mean(&runs[scenario]);
    Ok(PriorityReport {
        repetitions: scale.repetitions,
        idle_s: mean("idle"),
        prior_s: mean("prior"),
        ordinary_s: mean("ordinary"),
        long_slowdown: mean("long_with_prior") / mean("long_with_ordinary"),
        order,
        runs,
        preempt: !options.no_preempt,
        spark: matches!(runner, Runner::Spark { .. }),
    })
}

struct Experiment<'a> {
    cluster: &'a LocalCluster,
    runtime: &'a tokio::runtime::Runtime,
    scale: &'a Scale,
    runner: &'a Runner,
}

impl Experiment<'_> {
    fn status(&self) -> Result<StatusView, BenchError> {
        let reply = self.runtime.block_on(
            self.cluster
                .masters
                .call(async |mut c| c.status(StatusRequest::default()).await),
        )?;
        Ok(StatusView::of(&reply))
    }

    /// Waits until `done` holds for the status, at most a minute.
    fn wait_for(&self, done: impl Fn(&StatusView) -> bool) -> Result<(), BenchError> {
        let start = Instant::now();
        while !done(&self.status()?) {
            if start.elapsed() > Duration::from_secs(60) {
                return Err(BenchError::Failed(
                    "the cluster did not get there in a minute".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// Whether a pi application not in `seen` is registered now; it joins `seen`.
    fn new_pi(&self, seen: &mut std::collections::BTreeSet<String>) -> Result<bool, BenchError> {
        let status = self.status()?;
        let new = status
            .apps
            .into_iter()
            .filter(|a| a.name == "pi")
            .find(|a| !seen.contains(&a.id));
        Ok(new.is_some_and(|a| seen.insert(a.id)))
    }

    /// `job` as a child reaching this cluster: `muster job run` of a job file, or
    /// `spark-submit`; its output goes to `NAME-NUMBER.log` in the cluster's directory.
    fn start(&self, number: u32, job: &Job<'_>) -> Result<JobProcess, BenchError> {
        let cluster = self.cluster;
        let log = cluster.dir.join(format!("{}-{number}.log", job.name));
        let mut command = match self.runner {
            Runner::Jobs => {
                let run = match job.work {
                    Work::SleepMs(ms) => format!("{{ builtin = \"sleep\", ms = {ms} }}"),
                    Work::Pi(samples) => format!("{{ builtin = \"pi\", samples = {samples} }}"),
                };
                let spec = format!(
                    "name = \"{}\"\nqueue = \"{}\"\n[resources]\ncores_max = {}\nexecutor_cores = 1\nexecutor_memory_mb = 256\n\
                     [[jobs]]\nname = \"{}\"\n[[jobs.stages]]\nname = \"tasks\"\ntasks = {}\nrun = {run}\n",
                    job.name, job.queue, job.cores_max, job.name, job.tasks
                );
                let path = cluster.dir.join(format!("{}-{number}.toml", job.name));
                std::fs::write(&path, spec)?;
                let mut command = Command::new(&cluster.program);
                command.args(["job", "run"]).arg(&path);
                command
            }
            Runner::Spark {
                spark_home,
                python,
                jar,
                app,
            } => {
                let (mode, amount) = match job.work {
                    Work::SleepMs(ms) => ("sleep", ms),
                    Work::Pi(samples) => ("pi", samples),
                };
                let mut command = Command::new(spark_home.join("bin/spark-submit"));
                command
                    .env("SPARK_HOME", spark_home)
                    .env("PYSPARK_PYTHON", python)
                    .env("MUSTER_BIN", &cluster.program)
                    .arg(format!("--master=spark-muster://{}", cluster.masters_list))
                    .arg("--jars")
                    .arg(jar)
                    .arg(format!("--name={}", job.name))
                    .arg(format!("--conf=spark.muster.queue={}", job.queue))
                    .arg("--conf=spark.ui.enabled=false")
                    // JVMs that start with less CPU: this machine runs every one of them.
                    .arg(format!("--driver-java-options={FAST_START}"))
                    .arg(format!(
                        "--conf=spark.executor.extraJavaOptions={FAST_START}"
                    ))
                    .arg(format!("--total-executor-cores={}", job.cores_max))
                    .args(["--executor-cores=1", "--executor-memory=512m"])
                    .arg(app)
                    .args([mode, &job.tasks.to_string(), &amount.to_string()]);
                command
            }
        };
        command
            .env("MUSTER_MASTERS", &cluster.masters_list)
            .env("MUSTER_SECRET_FILE", &cluster.secret_path)
            .env("MUSTER_TLS_CA", &cluster.ca)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log)?)
            .spawn()
            .map(|process| JobProcess {
                name: format!("{}-{number}", job.name),
                process,
            })
            .map_err(|e| BenchError::Failed(format!("cannot start {}: {e}", job.name)))
    }

    /// Three pi jobs in `queue`, under the load of two long jobs or not. Returns their
    /// turnarounds, the long jobs' turnarounds, and the finish order of the long job in
    /// `default` (1) and the first two pi jobs (2, 3). Under load, `samples` gets the cores
    /// each queue holds.
    fn pi_jobs(
        &self,
        queue: &str,
        loaded: bool,
        samples: &mut Vec<(f64, BTreeMap<String, u64>)>,
    ) -> Result<(Runs, Runs, Vec<u32>), BenchError> {
        let rounds = self.scale.long_rounds;
        let mut jobs: Vec<(u32, Instant, JobProcess)> = Vec::new();
        if loaded {
            for (number, (name, long_queue)) in
                [(1, ("long-default", "default")), (4, ("long-food", "food"))]
            {
                let long = Job {
                    name,
                    queue: long_queue,
                    cores_max: 4,
                    tasks: 4 * rounds,
                    work: Work::SleepMs(500),
                };
                jobs.push((number, Instant::now(), self.start(number, &long)?));
            }
            // Full load: both long jobs hold all 8 cores.
            self.wait_for(|s| s.workers.iter().map(|w| w.cores_used).sum::<u32>() == 8)?;
        }
        let pi = Job {
            name: "pi",
            queue,
            cores_max: 2,
            tasks: 8,
            work: Work::Pi(self.scale.pi_samples),
        };
        // Submitted in order, as in the paper: each pi job once the one before is
        // registered, so the masters see jobs 2 and 3 in that order.
        let mut registered = std::collections::BTreeSet::new();
        for number in [2, 3, 5] {
            let mut child = self.start(number, &pi)?;
            let began = Instant::now();
            while !self.new_pi(&mut registered)? && child.process.try_wait()?.is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
            jobs.push((number, began, child));
        }
        let start = Instant::now();
        let mut turnarounds = Vec::new();
        let mut long = Vec::new();
        let mut finished = Vec::new();
        while !jobs.is_empty() {
            if loaded {
                let status = self.status()?;
                let mut held: BTreeMap<String, u64> = BTreeMap::new();
                for app in status.apps {
                    *held.entry(app.queue).or_default() += app.cores_granted;
                }
                samples.push((start.elapsed().as_secs_f64(), held));
            }
            let mut i = 0;
            while i < jobs.len() {
                if let Some(exit) = jobs[i].2.process.try_wait()? {
                    let (number, began, _) = jobs.remove(i);
                    if !exit.success() {
                        return Err(BenchError::Failed(format!("job {number} failed ({exit})")));
                    }
                    if [2, 3, 5].contains(&number) {
                        turnarounds.push(began.elapsed().as_secs_f64());
                    } else {
                        long.push(began.elapsed().as_secs_f64());
                    }
                    if [1, 2, 3].contains(&number) {
                        finished.push(number);
                    }
                } else {
                    i += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        // The next scenario starts on an idle cluster.
        self.wait_for(|s| s.apps.is_empty())?;
        Ok((turnarounds, long, finished))
    }
}

/// The cores each queue holds over time, as an SVG line chart.
fn plot(path: &Path, samples: &[(f64, BTreeMap<String, u64>)]) -> Result<(), BenchError> {
    use plotters::prelude::*;
    let failed = |e: &dyn std::fmt::Display| {
        BenchError::Failed(format!("cannot draw {}: {e}", path.display()))
    };
    let end = samples.last().map_or(1.0, |(t, _)| *t).max(1.0);
    let root = SVGBackend::new(path, (800, 400)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| failed(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "cores held per queue, prior jobs under full load",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(40)
        .build_cartesian_2d(0.0..end, 0u64..9u64)
        .map_err(|e| failed(&e))?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("cores")
        .draw()
        .map_err(|e| failed(&e))?;
    for (queue, color) in [("default", &BLUE), ("food", &GREEN), ("prod", &RED)] {
        let line = samples
            .iter()
            .map(|(t, held)| (*t, held.get(queue).copied().unwrap_or(0)));
        chart
            .draw_series(LineSeries::new(line, color))
            .map_err(|e| failed(&e))?
            .label(queue)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .draw()
        .map_err(|e| failed(&e))?;
    root.present().map_err(|e| failed(&e))?;
    Ok(())
}
