//! Builders for snapshots and readers for plans.

use muster_core::ids::QueueName;
use muster_core::model::{
    AppRequest, DriverRequest, QueueConfig, Snapshot, Worker, WorkerSelection, WorkerState,
};
use muster_core::resources::Resources;
use muster_core::{Plan, spark_reference};

/// A worker with nothing running.
pub fn worker(id: &str, cores: u32, memory_mb: u64) -> Worker {
    Worker {
        id: id.into(),
        host: format!("host-{id}").into(),
        capacity: Resources::new(cores, memory_mb),
        used: Resources::default(),
        state: WorkerState::Alive,
        hosts_prior: false,
        without_spark: false,
    }
}

/// `n` identical workers `w0`, `w1`, ...
pub fn workers(n: usize, cores: u32, memory_mb: u64) -> Vec<Worker> {
    (0..n)
        .map(|i| worker(&format!("w{i}"), cores, memory_mb))
        .collect()
}

/// An app in the default queue with Spark's defaults.
pub fn app(id: &str) -> AppRequest {
    AppRequest::new(id)
}

/// A driver in the default queue.
pub fn driver(id: &str, cores: u32, memory_mb: u64) -> DriverRequest {
    DriverRequest {
        id: id.into(),
        need: Resources::new(cores, memory_mb),
        queue: QueueName::default(),
        gang: None,
        priority: 0,
        spark: false,
    }
}

/// A queue.
pub fn queue(name: &str, prior: bool, threshold: f64, max_capacity: f64) -> QueueConfig {
    QueueConfig {
        name: name.into(),
        prior,
        threshold,
        max_capacity,
        capacity: None,
        driver_share: None,
        gang_timeout_s: None,
        gang_style: None,
        ..QueueConfig::named(name)
    }
}

/// A snapshot over `workers`, placing workers by id (the order Spark's placement tests use).
pub fn cluster(workers: Vec<Worker>) -> Snapshot {
    let mut snapshot = Snapshot {
        workers: workers.into(),
        ..Snapshot::default()
    };
    snapshot.config.worker_selection = WorkerSelection::WorkerId;
    snapshot
}

/// Schedules with both placers, asserts they agree, and returns the plan.
pub fn plan(snapshot: &Snapshot) -> Plan {
    let fast = muster_core::schedule(snapshot).expect("valid snapshot");
    let reference = spark_reference::schedule(snapshot).expect("valid snapshot");
    assert_eq!(fast, reference, "indexed placer and Spark's loop disagree");
    fast
}
