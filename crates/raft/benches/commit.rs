//! Benchmark `commit`: commands committed per second on three local replicas with fsync, for
//! apply-plan entries of 1, 100 and 1,000 executor grants and 1 and 64 concurrent writers,
//! with write latency percentiles. The baseline, measured in the same run on the same disk, is
//! one sled insert plus flush at a time: the rate a single fsync-bound writer reaches alone.
//!
//! Reads are measured beside the writes: one reader reads the leader's state in a loop while
//! the writers write, and before they start. A read waits until the log, as it was when the
//! read began, is applied, so under writes it waits for those in flight: its latency is given
//! as a ratio to a write's, and to a read's with no writes.
//!
//! Run with `cargo bench -p muster-raft --bench commit`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use muster_core::ids::Timestamp;
use muster_core::limits::{MAX_CORES, MAX_MEMORY_MB};

use muster_core::resources::Resources;
use muster_raft::local::LocalCluster;
use muster_raft::{Disk, RaftSettings};
use muster_state::commands::{ApplyPlan, Grant, RegisterWorker, SubmitApp};
use muster_state::model::AppDescription;
use muster_state::{Command, Op, Outcome};

const WORKERS: usize = 100;
const DEADLINE: Duration = Duration::from_secs(60);

fn command(op: Op) -> Command {
    Command {
        at: Timestamp(1_700_000_000_000),
        request_id: None,
        term: None,
        op,
    }
}

fn app() -> Op {
    Op::SubmitApp(SubmitApp {
        desc: AppDescription {
            name: "bench".into(),
            user: "bench".into(),
            queue: Default::default(),
            cores_max: None,
            executor_cores: Some(1),
            executor_memory_mb: 1,
            executor_resources: Default::default(),
            command: "/bin/true".into(),
            args: Vec::new(),
            env: Default::default(),
        },
        executor_limit: None,
    })
}

/// Baseline: sequential inserts into sled, each flushed as the log flushes an append,
/// entries per second.
async fn fsync_baseline(dir: &std::path::Path, count: u32) -> f64 {
    let disk = Disk::open(&dir.join("baseline"), 1 << 24).expect("sled opens");
    let tree = disk.tree("baseline").expect("tree opens");
    let start = Instant::now();
    for i in 0..count {
        tree.insert(i.to_be_bytes(), vec![0u8; 128])
            .expect("insert");
        disk.flush().await.expect("flush");
    }
    f64::from(count) / start.elapsed().as_secs_f64()
}

struct Run {
    grants: usize,
    writers: usize,
    entries: usize,
    seconds: f64,
    latencies: Vec<Duration>,
    /// Reads of the leader's state with no writes, then while the writers write.
    idle_reads: Vec<Duration>,
    reads: Vec<Duration>,
}

/// How long each read of the leader's state took, read after read while `go_on` says so of
/// the reads made, sorted.
async fn reads(
    cluster: &LocalCluster,
    leader: muster_raft::NodeId,
    go_on: impl Fn(usize) -> bool,
) -> Vec<Duration> {
    let mut latencies = Vec::new();
    while go_on(latencies.len()) {
        let sent = Instant::now();
        cluster
            .node(leader)
            .read(|state| state.apps().len())
            .await
            .expect("the leader reads");
        latencies.push(sent.elapsed());
    }
    latencies.sort();
    latencies
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn run(grants: usize, writers: usize, entries: usize) -> Run {
    let dir = tempfile::tempdir().expect("temporary directory");
    let cluster = Arc::new(
        LocalCluster::start(3, RaftSettings::default(), dir.path())
            .await
            .expect("cluster starts"),
    );
    let leader = cluster.leader(DEADLINE).await.expect("a leader");
    for w in 0..WORKERS {
        let op = Op::RegisterWorker(RegisterWorker {
            id: format!("w{w:03}").as_str().into(),
            host: "bench".into(),
            address: "bench:1".into(),
            resources: Resources::new(MAX_CORES, MAX_MEMORY_MB),
            fence_grace_ms: None,
        });
        cluster
            .write(command(op), DEADLINE)
            .await
            .expect("register")
            .expect("registered");
    }
    let mut apps = Vec::new();
    for _ in 0..writers {
        match cluster
            .write(command(app()), DEADLINE)
            .await
            .expect("submit")
            .expect("submitted")
            .outcome
        {
            Outcome::AppSubmitted { id } => apps.push(id),
            other => panic!("unexpected {other:?}"),
        }
    }

    let idle_reads = reads(&cluster, leader, |made| made < 200).await;
    let writing = Arc::new(AtomicBool::new(true));
    let reader = {
        let (cluster, writing) = (Arc::clone(&cluster), Arc::clone(&writing));
        tokio::spawn(
            async move { reads(&cluster, leader, |_| writing.load(Ordering::SeqCst)).await },
        )
    };
    let start = Instant::now();
    let tasks: Vec<_> = apps
        .into_iter()
        .enumerate()
        .map(|(writer, app)| {
            let cluster = Arc::clone(&cluster);
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                for entry in (writer..entries).step_by(writers) {
                    let executors = (0..grants)
                        .map(|g| Grant {
                            app: app.clone(),
                            worker: format!("w{:03}", (entry + g) % WORKERS).as_str().into(),
                            resources: Resources::new(1, 1),
                            count: 1,
                        })
                        .collect();
                    let plan = command(Op::ApplyPlan(ApplyPlan {
                        drivers: Vec::new(),
                        executors,
                    }));
                    let sent = Instant::now();
                    let applied = cluster
                        .node(leader)
                        .write(plan)
                        .await
                        .expect("the leader stays")
                        .expect("applies");
                    latencies.push(sent.elapsed());
                    let Outcome::PlanApplied { rejected, .. } = applied.outcome else {
                        panic!("not a plan outcome")
                    };
                    assert!(rejected.is_empty(), "grants rejected: {rejected:?}");
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("writer"));
    }
    let seconds = start.elapsed().as_secs_f64();
    writing.store(false, Ordering::SeqCst);
    let reads = reader.await.expect("reader");
    latencies.sort();
    Arc::into_inner(cluster)
        .expect("writers are done")
        .shutdown()
        .await
        .expect("cluster stops");
    Run {
        grants,
        writers,
        entries,
        seconds,
        latencies,
        idle_reads,
        reads,
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("temporary directory");
        let baseline = fsync_baseline(dir.path(), 2_000).await;
        println!("baseline: sled insert + flush, one at a time: {baseline:.0} per second\n");
        println!(
            "{:>7} {:>8} {:>8} {:>12} {:>10} {:>12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10}",
            "grants",
            "writers",
            "writes",
            "writes/s",
            "vs fsync",
            "grants/s",
            "p50 ms",
            "p99 ms",
            "max ms",
            "read p50",
            "read p99",
            "vs write",
            "vs idle"
        );
        for (grants, entries) in [(1, 2_000), (100, 600), (1_000, 120)] {
            for writers in [1, 64] {
                let r = run(grants, writers, entries).await;
                let rate = r.entries as f64 / r.seconds;
                let ms = |d: Duration| d.as_secs_f64() * 1e3;
                let (read, write) = (percentile(&r.reads, 0.5), percentile(&r.latencies, 0.5));
                let idle = percentile(&r.idle_reads, 0.5);
                println!(
                    "{:>7} {:>8} {:>8} {:>12.0} {:>9.2}x {:>12.0} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}x {:>9.1}x",
                    r.grants,
                    r.writers,
                    r.entries,
                    rate,
                    rate / baseline,
                    rate * r.grants as f64,
                    ms(write),
                    ms(percentile(&r.latencies, 0.99)),
                    ms(*r.latencies.last().expect("latencies")),
                    ms(read),
                    ms(percentile(&r.reads, 0.99)),
                    ms(read) / ms(write),
                    ms(read) / ms(idle)
                );
            }
        }
    });
}
