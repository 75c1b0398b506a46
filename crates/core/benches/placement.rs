//! Criterion benchmark `placement`: time per scheduling pass of the indexed placer
//! (`muster_core::schedule`) and of the literal port of Spark's loop
//! (`muster_core::spark_reference::schedule`) on the same snapshots, at 100, 1,000 and 10,000
//! workers, then a summary of their ratio measured in the same run.
//!
//! Workloads:
//! * `mixed`: one app per 10 workers and one driver per 100, with every knob in use (cores
//!   caps, executor sizes, memory, GPUs, limits, three queues, prior-hosting and dead workers).
//! * `wide`: four apps that each ask for 2,000 one-core executors with spreadOut on, the case
//!   where Spark's loop is slowest.
//! * `tree`: `mixed` under a queue tree with capacities (a prior leaf, two teams, one with
//!   two leaves), so the pass serves guarantees first and then maxima; against `mixed` in
//!   the same run it is the cost of the capacity rounds.
//!
//! Then the cost of waiting gangs: `mixed` with a burst of 1,000 gangs after its apps that
//! never fit (a pass counts the executors of each size every ALIVE worker holds before they
//! wait), against `mixed` alone, at 1,000 and 10,000 workers. And the cost of a burst of
//! drivers that all wait on 5,000 full workers, 1,000 and 80,000 of them, per driver.
//!
//! Run with `cargo bench -p muster-core --bench placement`. With `MUSTER_BENCH_DATA=DIR` the
//! summary is also written to `DIR/placement.json`, which `muster bench plot` draws.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use muster_core::model::{
    AppRequest, DriverRequest, OrderingPolicy, QueueConfig, Snapshot, Worker, WorkerSelection,
    WorkerState,
};
use muster_core::resources::Resources;
use muster_core::{Plan, spark_reference};

const SIZES: [usize; 3] = [100, 1_000, 10_000];

/// A small deterministic generator, so every run benches the same snapshots.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % bound
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn workers(count: usize, rng: &mut Lcg) -> Vec<Worker> {
    (0..count)
        .map(|i| {
            let cores = [8, 16, 32, 64][rng.below(4) as usize];
            let memory_mb = u64::from(cores) * 4096;
            let hosts_prior = rng.chance(20);
            let cores_used = if hosts_prior { cores / 4 } else { 0 };
            let gpus = if rng.chance(10) { 4 } else { 0 };
            Worker {
                id: format!("worker-{i:05}").as_str().into(),
                host: format!("node-{i:05}").into(),
                capacity: Resources::new(cores, memory_mb).with_custom(if gpus > 0 {
                    [("gpu".to_string(), gpus)].into()
                } else {
                    Default::default()
                }),
                used: Resources::new(cores_used, u64::from(cores_used) * 4096),
                state: if rng.chance(5) {
                    WorkerState::Dead
                } else {
                    WorkerState::Alive
                },
                hosts_prior,
                without_spark: false,
            }
        })
        .collect()
}

fn queues() -> Vec<QueueConfig> {
    vec![
        QueueConfig {
            prior: true,
            ..QueueConfig::named("prod")
        },
        QueueConfig {
            threshold: 0.8,
            ..QueueConfig::named("default")
        },
        QueueConfig {
            threshold: 0.9,
            max_capacity: 0.5,
            ..QueueConfig::named("batch")
        },
    ]
}

fn app(id: usize, queue: &str) -> AppRequest {
    AppRequest {
        queue: queue.into(),
        ..AppRequest::new(&format!("app-{id:05}"))
    }
}

fn mixed(worker_count: usize) -> Snapshot {
    let mut rng = Lcg(worker_count as u64);
    let apps = (0..worker_count / 10)
        .map(|i| {
            let queue = ["prod", "default", "default", "batch"][rng.below(4) as usize];
            let mut a = app(i, queue);
            a.cores_max = (!rng.chance(10)).then(|| 1 + rng.below(64) as u32);
            a.executor_cores = [None, Some(1), Some(2), Some(4)][rng.below(4) as usize];
            a.executor_memory_mb = 512 * (1 + rng.below(16));
            if rng.chance(5) {
                a.executor_resources = [("gpu".to_string(), 1)].into();
            }
            a.executor_limit = rng.chance(10).then(|| rng.below(8) as u32);
            a
        })
        .collect();
    let drivers = (0..worker_count / 100)
        .map(|i| DriverRequest {
            id: format!("driver-{i:05}").as_str().into(),
            need: Resources::new(1 + rng.below(2) as u32, 1024 * (1 + rng.below(4))),
            queue: ["prod", "default"][rng.below(2) as usize].into(),
            gang: None,
            priority: 0,
            spark: false,
        })
        .collect();
    let mut snapshot = Snapshot {
        queues: queues(),
        workers: workers(worker_count, &mut rng).into(),
        drivers,
        apps,
        ..Snapshot::default()
    };
    snapshot.config.worker_selection = WorkerSelection::CoresFreeDesc;
    snapshot
}

fn tree(worker_count: usize) -> Snapshot {
    let mut snapshot = mixed(worker_count);
    let queue = |name: &str, prior, max_capacity, capacity| QueueConfig {
        prior,
        threshold: if prior { 1.0 } else { 0.8 },
        max_capacity,
        capacity: Some(capacity),
        ..QueueConfig::named(name)
    };
    snapshot.queues = vec![
        queue("prod", true, 1.0, 0.2),
        queue("default", false, 1.0, 0.3),
        QueueConfig {
            threshold: 1.0,
            ..queue("team", false, 0.8, 0.5)
        },
        queue("team.batch", false, 0.5, 0.5),
        queue("team.etl", false, 1.0, 0.5),
    ];
    for app in snapshot.apps.make_mut() {
        if app.queue.0 == "batch" {
            app.queue = if app.id.0.ends_with(['0', '2', '4', '6', '8']) {
                "team.batch".into()
            } else {
                "team.etl".into()
            };
        }
    }
    snapshot
}

fn wide(worker_count: usize) -> Snapshot {
    let mut rng = Lcg(worker_count as u64 + 1);
    let apps = (0..4)
        .map(|i| {
            let mut a = app(i, "default");
            a.cores_max = Some(2_000);
            a.executor_cores = Some(1);
            a.executor_memory_mb = 256;
            a
        })
        .collect();
    Snapshot {
        queues: queues(),
        workers: workers(worker_count, &mut rng).into(),
        apps,
        ..Snapshot::default()
    }
}

type Scheduler = fn(&Snapshot) -> Result<Plan, muster_core::InputError>;

const SCHEDULERS: [(&str, Scheduler); 2] = [
    ("indexed", muster_core::schedule),
    ("spark_loop", spark_reference::schedule),
];
type Workload = fn(usize) -> Snapshot;

const WORKLOADS: [(&str, Workload); 3] = [("mixed", mixed), ("wide", wide), ("tree", tree)];

/// `mixed` with a burst of 1,000 gangs after its apps, of six executor sizes in two queues,
/// none of which fits: each asks for more executors at once than the cluster holds, so a
/// pass counts what every ALIVE worker offers it.
fn gangs(worker_count: usize) -> Snapshot {
    let mut snapshot = mixed(worker_count);
    let first = snapshot.apps.len();
    snapshot
        .apps
        .make_mut()
        .extend((first..first + 1_000).map(|i| {
            let mut gang = app(i, ["default", "batch"][i % 2]);
            gang.executor_cores = Some([1, 2, 4][i % 3]);
            gang.executor_memory_mb = [4_096, 16_384][i / 3 % 2];
            gang.min_executors = Some(1_000_000);
            gang
        }));
    snapshot
}

/// A burst of `drivers` one-core drivers on `worker_count` workers that are all full, as
/// when submissions outrun the cluster: every driver waits.
fn driver_burst(worker_count: usize, drivers: usize) -> Snapshot {
    let mut snapshot = mixed(worker_count);
    for worker in snapshot.workers.make_mut() {
        worker.used = worker.capacity.clone();
    }
    snapshot.drivers = (0..drivers)
        .map(|i| DriverRequest {
            id: format!("burst-{i:06}").as_str().into(),
            need: Resources::new(1, [1024, 2048][i % 2]),
            queue: ["default", "batch"][i / 2 % 2].into(),
            gang: None,
            priority: 0,
            spark: false,
        })
        .collect();
    snapshot.apps = Vec::new().into();
    snapshot
}

/// Prints the cost of a pass over a burst of drivers that all wait, 1,000 and 80,000 of
/// them on 5,000 full workers: a driver that fits nowhere should cost no search of its own
/// once one of its size and queue found no room.
fn driver_burst_summary() {
    println!("\nwaiting drivers on 5,000 full workers (median of interleaved runs)");
    println!("{:>8} {:>14} {:>16}", "drivers", "pass", "per driver");
    let bursts = [1_000, 80_000].map(|drivers| (drivers, driver_burst(5_000, drivers)));
    let mut times = [Vec::new(), Vec::new()];
    for _ in 0..5 {
        for (i, (_, snapshot)) in bursts.iter().enumerate() {
            times[i].push(pass_seconds(snapshot));
        }
    }
    for ((drivers, snapshot), mut times) in bursts.into_iter().zip(times) {
        let plan = muster_core::schedule(&snapshot).expect("valid snapshot");
        assert_eq!(plan.waiting.len(), drivers, "every driver waits");
        times.sort_by(f64::total_cmp);
        let pass = times[times.len() / 2];
        println!(
            "{drivers:>8} {:>11.3} ms {:>13.3} us",
            pass * 1e3,
            pass * 1e6 / drivers as f64
        );
    }
}

/// Seconds one pass of `muster_core::schedule` over `snapshot` takes.
fn pass_seconds(snapshot: &Snapshot) -> f64 {
    let start = Instant::now();
    black_box(muster_core::schedule(black_box(snapshot)).expect("valid snapshot"));
    start.elapsed().as_secs_f64()
}

/// Prints the cost of 1,000 waiting gangs: a pass with them over a pass without, the two
/// interleaved so both see the same noise.
fn gang_summary() {
    println!("\nwaiting gangs (median of interleaved runs; ratio = with gangs / without)");
    println!(
        "{:>8} {:>14} {:>14} {:>8}",
        "workers", "mixed", "with gangs", "ratio"
    );
    for size in [1_000, 10_000] {
        let (without, with) = (mixed(size), gangs(size));
        let waiting = muster_core::schedule(&with)
            .expect("valid snapshot")
            .waiting
            .iter()
            .filter(|w| w.reason.code() == "gang")
            .count();
        assert_eq!(waiting, 1_000, "every gang waits");
        let (mut plain, mut ganged) = (Vec::new(), Vec::new());
        for _ in 0..15 {
            plain.push(pass_seconds(&without));
            ganged.push(pass_seconds(&with));
        }
        let middle = |mut t: Vec<f64>| {
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        };
        let (plain, ganged) = (middle(plain), middle(ganged));
        println!(
            "{size:>8} {:>11.3} ms {:>11.3} ms {:>7.2}x",
            plain * 1e3,
            ganged * 1e3,
            ganged / plain
        );
    }
}

/// `mixed`, its apps those of ten users, with every queue's ordering `ordering`.
fn ordered(worker_count: usize, ordering: OrderingPolicy) -> Snapshot {
    let mut snapshot = mixed(worker_count);
    for (i, app) in snapshot.apps.make_mut().iter_mut().enumerate() {
        app.user = Some(format!("user-{}", i % 10).as_str().into());
    }
    for queue in &mut snapshot.queues {
        queue.ordering = ordering;
    }
    snapshot
}

/// Prints the cost of `fair` and `drf` ordering over `fifo`: each pass over the same apps
/// of ten users, interleaved so all see the same noise.
fn ordering_summary() {
    println!(
        "
ordering (median of interleaved runs; ratio = over fifo)"
    );
    println!(
        "{:>8} {:>14} {:>14} {:>8} {:>14} {:>8}",
        "workers", "fifo", "fair", "ratio", "drf", "ratio"
    );
    let policies = [
        OrderingPolicy::Fifo,
        OrderingPolicy::Fair,
        OrderingPolicy::Drf,
    ];
    for size in [1_000, 10_000] {
        let snapshots = policies.map(|ordering| ordered(size, ordering));
        let mut times = [Vec::new(), Vec::new(), Vec::new()];
        for _ in 0..15 {
            for (snapshot, times) in snapshots.iter().zip(&mut times) {
                times.push(pass_seconds(snapshot));
            }
        }
        let [fifo, fair, drf] = times.map(|mut t| {
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        });
        println!(
            "{size:>8} {:>11.3} ms {:>11.3} ms {:>7.2}x {:>11.3} ms {:>7.2}x",
            fifo * 1e3,
            fair * 1e3,
            fair / fifo,
            drf * 1e3,
            drf / fifo
        );
    }
}

fn bench_placement(c: &mut Criterion) {
    for (workload, build) in WORKLOADS {
        let mut group = c.benchmark_group(format!("placement/{workload}"));
        group
            .sample_size(10)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(3));
        for size in SIZES {
            let snapshot = build(size);
            for (name, schedule) in SCHEDULERS {
                group.bench_with_input(BenchmarkId::new(name, size), &snapshot, |b, s| {
                    b.iter(|| schedule(black_box(s)).expect("valid snapshot"))
                });
            }
        }
        group.finish();
    }
}

/// Median seconds per pass of each scheduler, the two interleaved so both see the same noise.
fn medians(snapshot: &Snapshot, runs: usize) -> [f64; 2] {
    let mut times = [Vec::new(), Vec::new()];
    for _ in 0..runs {
        for (i, (_, schedule)) in SCHEDULERS.iter().enumerate() {
            let start = Instant::now();
            black_box(schedule(black_box(snapshot)).expect("valid snapshot"));
            times[i].push(start.elapsed().as_secs_f64());
        }
    }
    times.map(|mut t| {
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    })
}

/// Prints the ratio of the two placers on each workload and size, and writes it to
/// `MUSTER_BENCH_DATA` when that is set.
fn summary() {
    println!("\nplacement summary (median of interleaved runs; ratio = spark_loop / indexed)");
    println!(
        "{:<8} {:>8} {:>14} {:>14} {:>8}  placed (grants)",
        "workload", "workers", "indexed", "spark_loop", "ratio"
    );
    let mut passes = Vec::new();
    for (workload, build) in WORKLOADS {
        for size in SIZES {
            let snapshot = build(size);
            let plan = muster_core::schedule(&snapshot).expect("valid snapshot");
            let [indexed, spark] = medians(&snapshot, 15);
            let executors: u64 = plan.executors.iter().map(|g| u64::from(g.count)).sum();
            println!(
                "{workload:<8} {size:>8} {:>11.3} ms {:>11.3} ms {:>7.1}x  {} ({})",
                indexed * 1e3,
                spark * 1e3,
                spark / indexed,
                executors + plan.drivers.len() as u64,
                plan.executors.len() + plan.drivers.len()
            );
            passes.push(serde_json::json!({
                "workload": workload,
                "workers": size,
                "indexed_ms": indexed * 1e3,
                "spark_loop_ms": spark * 1e3,
            }));
        }
    }
    if let Some(data) = std::env::var_os("MUSTER_BENCH_DATA") {
        let path = std::path::Path::new(&data).join("placement.json");
        let json = serde_json::to_string_pretty(&passes).expect("JSON prints");
        std::fs::write(&path, json).expect("the summary is written");
        println!("wrote {}", path.display());
    }
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    bench_placement(&mut criterion);
    criterion.final_summary();
    summary();
    gang_summary();
    ordering_summary();
    driver_burst_summary();
}
