//! `muster experiment priority`: the YARN high-priority experiment (the reference's
//! "Experiment") at this machine's scale, on a local cluster of three masters and four
//! two-core workers, with queues `default` (ordinary, threshold 0.8), `food` (ordinary) and
//! `prod` (prior, preempting unless `--no-preempt`).
//!
//! Three scenarios, each repeated: three `pi` jobs submitted to `prod` on an idle cluster;
//! the same three submitted to `prod` while two long jobs (in `default` and `food`) hold
//! every core; and, as the control, the same three submitted to `food` under that load. It
//! prints each scenario's turnaround (from submission to the job's end), the order in which
//! jobs 1 (the long one in `default`), 2 and 3 (two of the `prod` jobs) finish under load, and
//! with `--plot FILE` draws the cores each queue holds over time (SVG).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Args;
use muster_proto::v1::StatusRequest;
use serde_json::json;

use super::dev::{LocalCluster, Shape};
use super::runtime;
use crate::error::CliError;

/// `muster experiment priority`.
#[derive(Args)]
pub struct PriorityArgs {
    /// A scaled-down run (about a minute): one repetition of short jobs, to check that it
    /// runs rather than to measure.
    #[arg(long)]
    quick: bool,
    /// Print the results as JSON: `{"idle_s", "prior_s", "ordinary_s", "order"}`.
    #[arg(long)]
    json: bool,
    /// Draw the cores each queue holds over time, under load with prior jobs, to this SVG.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Run without preemption (prior jobs then wait for ordinary executors to end).
    #[arg(long)]
    no_preempt: bool,
}

/// How big the experiment is.
struct Scale {
    repetitions: usize,
    /// Sleep tasks of 500 ms per core of each long job.
    long_rounds: u32,
    /// Samples per pi task.
    pi_samples: u64,
}

/// One scenario's turnarounds, in seconds.
type Runs = Vec<f64>;

/// Runs the experiment and returns its report.
///
/// # Errors
///
/// The cluster or a job could not run.
pub fn run(args: PriorityArgs) -> Result<String, CliError> {
    let scale = if args.quick {
        Scale {
            repetitions: 1,
            long_rounds: 40,
            pi_samples: 20_000_000,
        }
    } else {
        Scale {
            repetitions: 3,
            long_rounds: 160,
            pi_samples: 2_400_000_000,
        }
    };
    let runtime = runtime()?;
    let dir = tempfile::Builder::new()
        .prefix("muster-experiment-")
        .tempdir()?;
    let config = dir.path().join("master.json");
    let preemption = if args.no_preempt {
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
    };
    let cluster = LocalCluster::start(shape, &runtime)?;
    let experiment = Experiment {
        cluster: &cluster,
        runtime: &runtime,
        scale: &scale,
    };
    experiment.wait_for(|s| {
        s["workers"].as_array().is_some_and(|w| w.len() == 4)
            && s["queues"].as_array().is_some_and(|q| q.len() == 3)
    })?;

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
    if let Some(path) = &args.plot {
        plot(path, &samples)?;
    }
    let mean = |name: &str| {
        let runs = &runs[name];
        runs.iter().sum::<f64>() / runs.len() as f64
    };
    if args.json {
        let report = json!({
            "idle_s": mean("idle"),
            "prior_s": mean("prior"),
            "ordinary_s": mean("ordinary"),
            "long_slowdown": mean("long_with_prior") / mean("long_with_ordinary"),
            "order": order,
            "runs": runs,
            "preempt": !args.no_preempt,
        });
        return Ok(serde_json::to_string_pretty(&report).expect("JSON prints"));
    }
    let mut out = format!(
        "three pi jobs, turnaround from submission ({} repetitions, preemption {}):\n",
        scale.repetitions,
        if args.no_preempt { "off" } else { "on" }
    );
    for (name, label) in [
        ("idle", "idle cluster, prod"),
        ("prior", "full load, prod (prior)"),
        ("ordinary", "full load, food (ordinary)"),
    ] {
        let each: Vec<String> = runs[name].iter().map(|r| format!("{r:.1}")).collect();
        out += &format!(
            "  {label:<28} mean {:>6.1} s   runs {}\n",
            mean(name),
            each.join(" ")
        );
    }
    out += &format!(
        "  prior / idle {:.2}, prior / ordinary {:.2}\n",
        mean("prior") / mean("idle"),
        mean("prior") / mean("ordinary")
    );
    out += &format!(
        "the long ordinary jobs: {:.1} s beside the prior jobs, {:.1} s beside the control: slowdown {:.2}\n",
        mean("long_with_prior"),
        mean("long_with_ordinary"),
        mean("long_with_prior") / mean("long_with_ordinary")
    );
    out += &format!(
        "finish order of jobs 1 (default), 2 and 3 (prod) under load: {}",
        order
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(out)
}

struct Experiment<'a> {
    cluster: &'a LocalCluster,
    runtime: &'a tokio::runtime::Runtime,
    scale: &'a Scale,
}

impl Experiment<'_> {
    fn status(&self) -> Result<serde_json::Value, CliError> {
        let reply = self.runtime.block_on(
            self.cluster
                .masters
                .call(async |mut c| c.status(StatusRequest { local: false }).await),
        )?;
        Ok(muster_master::status_json(&reply))
    }

    /// Waits until `done` holds for the status, at most a minute.
    fn wait_for(&self, done: impl Fn(&serde_json::Value) -> bool) -> Result<(), CliError> {
        let start = Instant::now();
        while !done(&self.status()?) {
            if start.elapsed() > Duration::from_secs(60) {
                return Err(CliError::Failed(
                    "the cluster did not get there in a minute".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// Whether a pi application not in `seen` is registered now; it joins `seen`.
    fn new_pi(&self, seen: &mut std::collections::BTreeSet<String>) -> Result<bool, CliError> {
        let status = self.status()?;
        let new = status["apps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["name"] == "pi")
            .filter_map(|a| a["id"].as_str())
            .find(|id| !seen.contains(*id))
            .map(str::to_owned);
        Ok(new.is_some_and(|id| seen.insert(id)))
    }

    /// `muster job run FILE` as a child, reaching this cluster.
    fn job(&self, name: &str, spec: &str) -> Result<Child, CliError> {
        let path = self.cluster.dir.join(format!("{name}.toml"));
        std::fs::write(&path, spec)?;
        let exe = std::env::current_exe()?;
        Command::new(exe)
            .args(["job", "run"])
            .arg(&path)
            .env("MUSTER_MASTERS", &self.cluster.masters_list)
            .env("MUSTER_SECRET_FILE", &self.cluster.secret_path)
            .env("MUSTER_TLS_CA", &self.cluster.ca)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(
                self.cluster.dir.join(format!("{name}.log")),
            )?)
            .spawn()
            .map_err(|e| CliError::Failed(format!("cannot start {name}: {e}")))
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
    ) -> Result<(Runs, Runs, Vec<u32>), CliError> {
        let rounds = self.scale.long_rounds;
        let mut jobs: Vec<(u32, Instant, Child)> = Vec::new();
        if loaded {
            for (number, long_queue) in [(1, "default"), (4, "food")] {
                let spec = format!(
                    "name = \"long-{long_queue}\"\nqueue = \"{long_queue}\"\n[resources]\ncores_max = 4\nexecutor_cores = 1\nexecutor_memory_mb = 256\n\
                     [[jobs]]\nname = \"wordcount\"\n[[jobs.stages]]\nname = \"map\"\ntasks = {}\nrun = {{ builtin = \"sleep\", ms = 500 }}\n",
                    4 * rounds
                );
                jobs.push((
                    number,
                    Instant::now(),
                    self.job(&format!("long-{long_queue}"), &spec)?,
                ));
            }
            // Full load: both long jobs hold all 8 cores.
            self.wait_for(|s| {
                s["workers"].as_array().is_some_and(|w| {
                    w.iter()
                        .map(|w| w["cores_used"].as_u64().unwrap_or(0))
                        .sum::<u64>()
                        == 8
                })
            })?;
        }
        let pi = format!(
            "name = \"pi\"\nqueue = \"{queue}\"\n[resources]\ncores_max = 2\nexecutor_cores = 1\nexecutor_memory_mb = 256\n\
             [[jobs]]\nname = \"pi\"\n[[jobs.stages]]\nname = \"sample\"\ntasks = 8\nrun = {{ builtin = \"pi\", samples = {} }}\n",
            self.scale.pi_samples
        );
        // Submitted in order, as in the paper: each pi job once the one before is
        // registered, so the masters see jobs 2 and 3 in that order.
        let mut registered = std::collections::BTreeSet::new();
        for number in [2, 3, 5] {
            let mut child = self.job(&format!("pi-{number}"), &pi)?;
            let began = Instant::now();
            while !self.new_pi(&mut registered)? && child.try_wait()?.is_none() {
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
                for app in status["apps"].as_array().into_iter().flatten() {
                    let queue = app["queue"].as_str().unwrap_or_default().to_owned();
                    *held.entry(queue).or_default() += app["cores_granted"].as_u64().unwrap_or(0);
                }
                samples.push((start.elapsed().as_secs_f64(), held));
            }
            let mut i = 0;
            while i < jobs.len() {
                if let Some(exit) = jobs[i].2.try_wait()? {
                    let (number, began, _) = jobs.remove(i);
                    if !exit.success() {
                        return Err(CliError::Failed(format!("job {number} failed ({exit})")));
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
        self.wait_for(|s| s["apps"].as_array().is_some_and(Vec::is_empty))?;
        Ok((turnarounds, long, finished))
    }
}

/// The cores each queue holds over time, as an SVG line chart.
fn plot(path: &Path, samples: &[(f64, BTreeMap<String, u64>)]) -> Result<(), CliError> {
    use plotters::prelude::*;
    let failed = |e: &dyn std::fmt::Display| {
        CliError::Failed(format!("cannot draw {}: {e}", path.display()))
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
