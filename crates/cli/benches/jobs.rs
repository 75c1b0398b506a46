//! Benchmark `jobs`: the driver runtime on a real cluster of three masters and four workers
//! (w1..w4, two cores each), with `muster job run` as the driver. Three measurements, each
//! against its baseline in the same run:
//!
//! * locality: 200 short tasks that all prefer w1, with Spark's default locality wait (3 s)
//!   against no wait: the share of NODE_LOCAL tasks and the run time;
//! * FAIR against FIFO: a long job saturates the executors and a short job arrives 2 s
//!   later; the short job's latency under each mode;
//! * throughput: 20,000 `noop` tasks on four one-core executors, tasks per second through
//!   real executors, against the same job scheduled in-process with no I/O at all.
//!
//! Run with `cargo bench -p muster-cli --bench jobs`.

use std::time::Instant;

use muster_core::ids::{ExecutorId, Timestamp};
use muster_core::tasks::jobs::{JobScheduler, JobSpec, StageSpec};
use muster_core::tasks::scheduler::{SchedulerConfig, TaskEnd};
use serde_json::Value;

// The cluster the end-to-end tests start: processes stopped when dropped.
#[allow(dead_code)]
#[path = "../../../tests/support.rs"]
mod support;

use support::{Masters, muster, start_worker};

const NOOP_TASKS: u32 = 20_000;

/// Runs a job file, returns its JSON report.
fn job_run(masters: &Masters, name: &str, spec: &str) -> Value {
    let path = masters.dir.path().join(format!("{name}.toml"));
    std::fs::write(&path, spec).unwrap();
    let output: std::process::Output = muster()
        .args(["job", "run", "--json"])
        .arg(&path)
        .env("MUSTER_MASTERS", masters.list_from(1))
        .output()
        .expect("muster job run runs");
    assert!(
        output.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("a JSON report")
}

fn resources(executors: u32) -> String {
    format!("[resources]\ncores_max = {executors}\nexecutor_cores = 1\nexecutor_memory_mb = 64\n")
}

/// A job's duration in seconds, from its report.
fn duration(job: &Value) -> f64 {
    (job["finished_ms"].as_u64().unwrap() - job["submitted_ms"].as_u64().unwrap()) as f64 / 1000.0
}

fn locality(masters: &Masters, wait_ms: u64) -> (f64, f64) {
    let spec = format!(
        "name = \"locality\"\n{}[scheduler]\nlocality_wait_ms = {wait_ms}\n\
         [[jobs]]\nname = \"skewed\"\n[[jobs.stages]]\nname = \"s\"\ntasks = 200\n\
         run = {{ builtin = \"sleep\", ms = 20 }}\nprefer_hosts = [[\"w1\"]]\n",
        resources(8)
    );
    let report = job_run(masters, "locality", &spec);
    let tasks = report["tasks"].as_array().unwrap();
    let local = tasks
        .iter()
        .filter(|t| t["state"] == "SUCCEEDED" && t["locality"] == "NODE_LOCAL")
        .count();
    (local as f64 / 200.0, duration(&report["jobs"][0]))
}

fn short_job_latency(masters: &Masters, mode: &str) -> f64 {
    let spec = format!(
        "name = \"pools\"\n{}[scheduler]\nmode = \"{mode}\"\n\
         [[jobs]]\nname = \"long\"\n[[jobs.stages]]\nname = \"scan\"\ntasks = 64\n\
         run = {{ builtin = \"sleep\", ms = 250 }}\n\
         [[jobs]]\nname = \"short\"\nat_ms = 2000\n[[jobs.stages]]\nname = \"lookup\"\ntasks = 4\n\
         run = {{ builtin = \"sleep\", ms = 250 }}\n",
        resources(4)
    );
    let report = job_run(masters, "pools", &spec);
    duration(&report["jobs"][1])
}

fn throughput(masters: &Masters) -> f64 {
    let spec = format!(
        "name = \"noop\"\n{}[[jobs]]\nname = \"noop\"\n[[jobs.stages]]\nname = \"s\"\n\
         tasks = {NOOP_TASKS}\nrun = {{ builtin = \"noop\" }}\n",
        resources(4)
    );
    let report = job_run(masters, "noop", &spec);
    f64::from(NOOP_TASKS) / duration(&report["jobs"][0])
}

/// The same job scheduled with no I/O: every launch ends at once.
fn throughput_in_process() -> f64 {
    let start = Instant::now();
    let mut scheduler = JobScheduler::new(SchedulerConfig::default());
    for id in 0..4 {
        scheduler.add_executor(ExecutorId(id), &format!("w{id}"), None, 1);
    }
    let stage = StageSpec {
        name: "s".into(),
        tasks: NOOP_TASKS,
        after: Vec::new(),
        prefer_hosts: Vec::new(),
    };
    let spec = JobSpec {
        name: "noop".into(),
        pool: String::new(),
        stages: vec![stage],
    };
    scheduler.submit(Timestamp(0), spec).unwrap();
    let mut launches = scheduler.resource_offers(Timestamp(0), None);
    while let Some(launch) = launches.pop() {
        scheduler.task_ended(Timestamp(0), launch.task, TaskEnd::Succeeded);
        launches.extend(scheduler.resource_offers(Timestamp(0), Some(launch.executor)));
    }
    assert!(scheduler.is_idle());
    f64::from(NOOP_TASKS) / start.elapsed().as_secs_f64()
}

fn main() {
    let masters = Masters::start();
    let _workers: Vec<_> = ["w1", "w2", "w3", "w4"]
        .into_iter()
        .map(|name| start_worker(&masters, name, 2))
        .collect();
    masters.leader(0);
    // Warm up: executors start from a cold page cache once.
    throughput(&masters);

    let (local_wait, time_wait) = locality(&masters, 3000);
    let (local_none, time_none) = locality(&masters, 0);
    println!("locality, 200 tasks preferring w1 of 4 workers:");
    println!(
        "  default wait (3 s): {:>5.1}% NODE_LOCAL in {time_wait:.2} s",
        local_wait * 100.0
    );
    println!(
        "  no wait:            {:>5.1}% NODE_LOCAL in {time_none:.2} s",
        local_none * 100.0
    );

    let fifo = short_job_latency(&masters, "FIFO");
    let fair = short_job_latency(&masters, "FAIR");
    println!("a short job beside a long one (latency of the short job):");
    println!(
        "  FIFO {fifo:.2} s, FAIR {fair:.2} s: FAIR/FIFO {:.2}",
        fair / fifo
    );

    let real = throughput(&masters);
    let alone = throughput_in_process();
    println!("throughput, {NOOP_TASKS} noop tasks on 4 executors:");
    println!(
        "  through executors {real:.0} tasks/s, scheduler alone {alone:.0} tasks/s: ratio {:.3}",
        real / alone
    );
}
