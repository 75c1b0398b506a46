//! Benchmark `failover`: how long real `muster` processes (three masters, two workers, a
//! running driver) take to have a new leader ALIVE with every worker registered, after the
//! leader is killed (SIGKILL) and after it freezes (SIGSTOP). The baseline, measured in the
//! same rounds, is the election alone: until another master reports itself leader.
//!
//! Run with `cargo bench -p muster-cli --bench failover` (`MUSTER_BENCH_ROUNDS`, default 10).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use muster_proto::v1::StatusRequest;
use muster_proto::v1::cluster_client::ClusterClient;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const MASTERS: usize = 3;
const DEADLINE: Duration = Duration::from_secs(60);

fn muster() -> Command {
    Command::new(env!("CARGO_BIN_EXE_muster"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// What one master says, asked directly (no forwarding), or `None` if it does not answer
/// within 200 ms.
struct View {
    leader: u64,
    alive: bool,
    workers_alive: usize,
    /// Workers and drivers with their states: equal on replicas that applied the same log.
    applied: String,
}

fn ask(runtime: &tokio::runtime::Runtime, addr: &str) -> Option<View> {
    runtime.block_on(async {
        let call = async {
            let mut client = ClusterClient::connect(format!("http://{addr}"))
                .await
                .ok()?;
            // Local: this master's own view; a leader's own view includes its recovery state.
            let reply = client
                .status(StatusRequest { local: true })
                .await
                .ok()?
                .into_inner();
            Some(View {
                leader: reply.leader,
                alive: reply.recovery_state == "ALIVE",
                workers_alive: reply.workers.iter().filter(|w| w.state == "ALIVE").count(),
                applied: format!(
                    "{:?} {:?}",
                    reply
                        .workers
                        .iter()
                        .map(|w| (&w.id, &w.state))
                        .collect::<Vec<_>>(),
                    reply
                        .drivers
                        .iter()
                        .map(|d| (&d.id, &d.state))
                        .collect::<Vec<_>>()
                ),
            })
        };
        tokio::time::timeout(Duration::from_millis(200), call)
            .await
            .ok()
            .flatten()
    })
}

struct Cluster {
    addrs: Vec<String>,
    peers: String,
    dir: tempfile::TempDir,
    masters: Vec<Child>,
    workers: Vec<Child>,
}

impl Cluster {
    fn start() -> Self {
        let addrs: Vec<String> = (0..MASTERS)
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        let peers = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}={a}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Self {
            addrs,
            peers,
            dir: tempfile::tempdir().unwrap(),
            masters: Vec::new(),
            workers: Vec::new(),
        };
        for id in 1..=MASTERS {
            let master = cluster.spawn_master(id);
            cluster.masters.push(master);
        }
        for name in ["w1", "w2"] {
            let worker = muster()
                .args(["worker", "--cores", "2", "--memory", "2048", "--host", name])
                .arg("--work-dir")
                .arg(cluster.dir.path().join(name))
                .env("MUSTER_MASTERS", cluster.addrs.join(","))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            cluster.workers.push(worker);
        }
        cluster
    }

    fn spawn_master(&self, id: usize) -> Child {
        muster()
            .args([
                "master",
                "--id",
                &id.to_string(),
                "--listen",
                &self.addrs[id - 1],
            ])
            .args(["--peers", &self.peers])
            .arg("--data-dir")
            .arg(self.dir.path().join(format!("master-{id}")))
            .stdout(Stdio::null())
            .stderr(match std::env::var_os("MUSTER_BENCH_LOGS") {
                Some(dir) => Stdio::from(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(Path::new(&dir).join(format!("master-{id}.log")))
                        .unwrap(),
                ),
                None => Stdio::null(),
            })
            .spawn()
            .unwrap()
    }

    /// Waits until some master leads, ALIVE, with both workers, and every master follows
    /// it with the same state applied (a restarted master has caught up); returns the
    /// leader's id (1-based).
    fn settled(&self, runtime: &tokio::runtime::Runtime) -> usize {
        let start = Instant::now();
        loop {
            let views: Vec<Option<View>> = self.addrs.iter().map(|a| ask(runtime, a)).collect();
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

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.workers.iter_mut().chain(self.masters.iter_mut()) {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGCONT);
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
            let _ = child.wait();
        }
    }
}

/// One fault on the leader: seconds until another master leads, and until it is ALIVE with
/// every worker.
fn round(cluster: &mut Cluster, runtime: &tokio::runtime::Runtime, signal: Signal) -> (f64, f64) {
    let leader = cluster.settled(runtime);
    let pid = Pid::from_raw(cluster.masters[leader - 1].id() as i32);
    let start = Instant::now();
    kill(pid, signal).unwrap();
    let mut elected = None;
    let alive = 'waiting: loop {
        for id in (1..=MASTERS).filter(|&id| id != leader) {
            let Some(view) = ask(runtime, &cluster.addrs[id - 1]) else {
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
    if signal == Signal::SIGKILL {
        let _ = cluster.masters[leader - 1].wait();
        cluster.masters[leader - 1] = cluster.spawn_master(leader);
    } else {
        kill(pid, Signal::SIGCONT).unwrap();
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
    let driver = muster()
        .args(["submit", "--supervise", "--", "/bin/sleep", "1000"])
        .env("MUSTER_MASTERS", cluster.addrs.join(","))
        .output()
        .unwrap();
    assert!(driver.status.success(), "the driver was not accepted");
    println!(
        "failover: {rounds} rounds each; seconds until a new leader is ALIVE with every worker"
    );
    println!(
        "{:<8} {:>9} {:>9} {:>9} {:>14} {:>9}",
        "fault", "elect p50", "ALIVE p50", "ALIVE p90", "ALIVE max", "ratio"
    );
    let mut samples = Vec::new();
    for (name, signal) in [("SIGKILL", Signal::SIGKILL), ("SIGSTOP", Signal::SIGSTOP)] {
        let mut elected = Vec::new();
        let mut alive = Vec::new();
        for _ in 0..rounds {
            let (e, a) = round(&mut cluster, &runtime, signal);
            elected.push(e);
            alive.push(a);
            samples.push((name, e, a));
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
    if std::env::var_os("MUSTER_BENCH_SAMPLES").is_some() {
        println!("samples (elected, ALIVE): {samples:?}");
    }
}
