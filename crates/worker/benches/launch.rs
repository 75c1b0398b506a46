//! Benchmark `launch`: how long the supervisor takes from a launch to the reported end of a
//! process that exits at once (`/bin/true`), without control groups (the baseline) and with
//! them (a group created, limited, joined by the wrapper and removed for every process), in
//! alternating rounds of the same run, and the ratio of their medians.
//!
//! Run with `cargo bench -p muster-worker --bench launch` (`MUSTER_BENCH_ROUNDS`, default
//! 200). Where the machine offers no control groups only the baseline runs.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use muster_core::ids::{ExecutorId, WorkerId};
use muster_core::resources::Resources;
use muster_worker::isolation::{Cgroups, Limits};
use muster_worker::supervisor::{
    LaunchSpec, ProcessEvent, ProcessState, Supervisor, SupervisorConfig, Workload,
};
use tokio::sync::mpsc::UnboundedReceiver;

/// One supervisor and its events.
struct Bench {
    supervisor: Supervisor,
    events: UnboundedReceiver<ProcessEvent>,
    next_executor: u32,
}

impl Bench {
    fn new(dir: &std::path::Path, isolation: Option<Cgroups>) -> Self {
        let config = SupervisorConfig {
            isolation,
            ..SupervisorConfig::new(dir.to_owned(), "m1:7077".into())
        };
        let (supervisor, events) = Supervisor::new(config);
        Self {
            supervisor,
            events,
            next_executor: 0,
        }
    }

    /// Launches `/bin/true` and waits for its end: how long that took.
    async fn launch_to_end(&mut self) -> Duration {
        let workload = Workload::Executor {
            app: "app-bench".into(),
            executor: ExecutorId(self.next_executor),
        };
        self.next_executor += 1;
        let spec = LaunchSpec {
            workload: workload.clone(),
            command: "/bin/true".into(),
            args: Vec::new(),
            env: BTreeMap::new(),
            resources: Resources::new(1, 256),
            supervise: false,
            credential: None,
            addresses: Default::default(),
        };
        let start = Instant::now();
        self.supervisor.launch(spec).expect("the process starts");
        loop {
            let event = self.events.recv().await.expect("the supervisor runs");
            if event.workload == workload && matches!(event.state, ProcessState::Exited { .. }) {
                return start.elapsed();
            }
        }
    }
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; a filter that does not match skips the benchmark.
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with("--") && !"launch".contains(&a))
    {
        return;
    }
    let rounds: usize = std::env::var("MUSTER_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(200);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (plain_dir, limited_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let worker = WorkerId::from("bench-launch");
    let cgroups = match Cgroups::open(&worker, Limits::default()) {
        Ok(cgroups) => Some(cgroups),
        Err(error) => {
            println!("no control groups here ({error}): the baseline only");
            None
        }
    };
    runtime.block_on(async {
        let mut plain = Bench::new(plain_dir.path(), None);
        let mut limited = cgroups
            .clone()
            .map(|cgroups| Bench::new(limited_dir.path(), Some(cgroups)));
        let (mut plain_samples, mut limited_samples) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            plain_samples.push(plain.launch_to_end().await);
            if let Some(limited) = &mut limited {
                limited_samples.push(limited.launch_to_end().await);
            }
        }
        let plain_median = median(&mut plain_samples);
        println!("launch to reported end, median of {rounds}:");
        println!(
            "  without control groups {:>8.2} ms",
            plain_median.as_secs_f64() * 1e3
        );
        if let Some(limited) = &limited {
            let limited_median = median(&mut limited_samples);
            println!(
                "  in control groups      {:>8.2} ms",
                limited_median.as_secs_f64() * 1e3
            );
            println!(
                "  ratio                  {:>8.2}x",
                limited_median.as_secs_f64() / plain_median.as_secs_f64()
            );
            limited.supervisor.shutdown().await;
        }
        plain.supervisor.shutdown().await;
    });
    if let Some(cgroups) = cgroups {
        cgroups.close();
    }
}
