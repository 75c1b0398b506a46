//! Benchmark `failover`: how long real `muster` processes (three masters, two workers, a
//! running driver) take to have a new leader ALIVE with every worker registered, after the
//! leader is killed (SIGKILL) and after it freezes (SIGSTOP). The baseline, measured in the
//! same rounds, is the election alone: until another master reports itself leader.
//!
//! Run with `cargo bench -p muster-cli --bench failover` (`MUSTER_BENCH_ROUNDS`, default 10).
//! With `MUSTER_BENCH_DATA=DIR` every round is also written to `DIR/failover.json`, which
//! `muster bench plot` draws.

use std::time::{Duration, Instant};

use muster_proto::v1::cluster_client::ClusterClient;
use muster_proto::v1::{RecoveryState, StatusRequest, WorkerState};

// The cluster the end-to-end tests start: masters and workers as child processes, stopped
// when dropped, logs in a temporary directory (kept with `MUSTER_TEST_KEEP`).
#[allow(dead_code)]
#[path = "../../../tests/support.rs"]
mod support;

use support::{Masters, Process, start_worker};

const MASTERS: usize = 3;
const DEADLINE: Duration = Duration::from_secs(60);

/// What a round does to the leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    Kill,
    Freeze,
}

/// What one master says, asked directly (no forwarding), or `None` if it does not answer
/// within 200 ms.
struct View {
    leader: u64,
    alive: bool,
    workers_alive: usize,
    /// The index of the last log entry it applied: equal on replicas that caught up.
    applied: u64,
}

fn ask(runtime: &tokio::runtime::Runtime, addr: &str) -> Option<View> {
    runtime.block_on(async {
        let call = async {
            let channel = support::dialer()
                .endpoint(addr)
                .ok()?
                .connect()
                .await
                .ok()?;
            let mut client = ClusterClient::with_interceptor(
                channel,
                support::credential(muster_proto::auth::Role::Client),
            );
            // Local: this master's own view; a leader's own view includes its recovery state.
            let reply = client
                .status(StatusRequest {
                    local: true,
                    ..StatusRequest::default()
                })
                .await
                .ok()?
                .into_inner();
            Some(View {
                leader: reply.leader,
                alive: reply.recovery_state() == RecoveryState::Alive,
                workers_alive: reply
                    .workers
                    .iter()
                    .filter(|w| w.state() == WorkerState::Alive)
                    .count(),
                applied: reply.applied_index,
            })
        };
        tokio::time::timeout(Duration::from_millis(200), call)
            .await
            .ok()
            .flatten()
    })
}

struct Cluster {
    masters: Masters,
    _workers: Vec<Process>,
}

impl Cluster {
    fn start() -> Self {
        let masters = Masters::start();
        let workers = ["w1", "w2"]
            .into_iter()
            .map(|name| start_worker(&masters, name, 2))
            .collect();
        Self {
            masters,
            _workers: workers,
        }
    }

    /// Waits until some master leads, ALIVE, with both workers, and every master follows
    /// it with the same state applied (a restarted master has caught up); returns the
    /// leader's id (1-based).
    fn settled(&self, runtime: &tokio::runtime::Runtime) -> usize {
        let start = Instant::now();
        loop {
            let views: Vec<Option<View>> =
                self.masters.addrs.iter().map(|a| ask(runtime, a)).collect();
            let leader = views.iter().flatten().map(|v| v.leader).next().unwrap_or(0) as usize;
            let agreed = views.iter().all(|v| {
                v.as_ref().is_some_and(|v| {
                    v.leader == leader as u64
                        && views[0]
                            .as_ref()
                            .is_some_and(|first| first.applied == v.applied)
                })
            });
            if leader != 0
                && agreed
                && views[leader - 1]
                    .as_ref()
                    .is_some_and(|v| v.alive && v.workers_alive == 2)
            {
                return leader;
            }
            assert!(start.elapsed() < DEADLINE, "no ALIVE leader");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// One fault on the leader: seconds until another master leads, and until it is ALIVE with
/// every worker.
fn round(cluster: &mut Cluster, runtime: &tokio::runtime::Runtime, fault: Fault) -> (f64, f64) {
    let leader = cluster.settled(runtime);
    let slot = &mut cluster.masters.running[leader - 1];
    let start = Instant::now();
    match fault {
        Fault::Kill => slot.take().expect("the leader runs").crash(),
        Fault::Freeze => slot.as_ref().expect("the leader runs").freeze(),
    }
    let mut elected = None;
    let alive = 'waiting: loop {
        for id in (1..=MASTERS).filter(|&id| id != leader) {
            let Some(view) = ask(runtime, &cluster.masters.addrs[id - 1]) else {
                continue;
            };
            if view.leader == id as u64 {
                elected.get_or_insert(start.elapsed());
                if view.alive && view.workers_alive == 2 {
                    break 'waiting start.elapsed();
                }
            }
        }
        assert!(start.elapsed() < DEADLINE, "no failover");
        std::thread::sleep(Duration::from_millis(10));
    };
    // Bring the old leader back for the next round.
    match fault {
        Fault::Kill => cluster.masters.running[leader - 1] = Some(cluster.masters.spawn(leader)),
        Fault::Freeze => cluster.masters.running[leader - 1]
            .as_ref()
            .expect("the leader runs")
            .thaw(),
    }
    (elected.unwrap_or(alive).as_secs_f64(), alive.as_secs_f64())
}

fn percentile(samples: &mut [f64], p: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    let index = ((samples.len() - 1) as f64 * p).round() as usize;
    samples[index]
}

fn main() {
    // `cargo bench` passes `--bench`; a filter that does not match skips the benchmark.
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with("--") && !"failover".contains(&a))
    {
        return;
    }
    let rounds: usize = std::env::var("MUSTER_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(10);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut cluster = Cluster::start();
    let driver = Masters::client(
        &cluster.masters.list_from(1),
        &["submit", "--supervise", "--", "/bin/sleep", "1000"],
    );
    assert!(driver.status.success(), "the driver was not accepted");
    println!(
        "failover: {rounds} rounds each; seconds until a new leader is ALIVE with every worker"
    );
    println!(
        "{:<8} {:>9} {:>9} {:>9} {:>14} {:>9}",
        "fault", "elect p50", "ALIVE p50", "ALIVE p90", "ALIVE max", "ratio"
    );
    let mut samples = Vec::new();
    for (name, fault) in [("SIGKILL", Fault::Kill), ("SIGSTOP", Fault::Freeze)] {
        let mut elected = Vec::new();
        let mut alive = Vec::new();
        for _ in 0..rounds {
            let (e, a) = round(&mut cluster, &runtime, fault);
            elected.push(e);
            alive.push(a);
            samples.push(serde_json::json!({"fault": name, "elected_s": e, "alive_s": a}));
        }
        let elect_p50 = percentile(&mut elected, 0.5);
        let alive_p50 = percentile(&mut alive, 0.5);
        println!(
            "{name:<8} {elect_p50:>9.3} {alive_p50:>9.3} {:>9.3} {:>14.3} {:>8.2}x",
            percentile(&mut alive, 0.9),
            percentile(&mut alive, 1.0),
            alive_p50 / elect_p50,
        );
    }
    println!("ratio: ALIVE with every worker over the election alone (median over median)");
    if let Some(data) = std::env::var_os("MUSTER_BENCH_DATA") {
        let path = std::path::Path::new(&data).join("failover.json");
        let json = serde_json::to_string_pretty(&samples).expect("JSON prints");
        std::fs::write(&path, json).expect("the rounds are written");
        println!("wrote {}", path.display());
    }
}
