//! Built-in workloads, each a cluster file and a trace.
//!
//! * [`paper`]: the priority experiment (`muster experiment priority`) at any multiple of its
//!   four two-core workers. Per four workers: two long jobs (`default` and `food`, 4 cores
//!   each, 500 ms tasks) that fill them, then three `pi` jobs of 8 tasks on 2 cores each, in
//!   `prod` (prior, preempting) or, as the control, in `food`.
//! * [`mix`]: a synthetic production day: Poisson arrivals whose rate follows the day (half
//!   again at the afternoon peak, half at night), heavy-tailed sizes and durations, three
//!   queues and fifty users.
//! * [`bursts`]: a day of a workflow scheduler's bursts on a cluster that set nothing: each
//!   hour, more cluster-mode job drivers at once than the cluster has cores, a third of
//!   their applications gangs, and client applications (gangs among them) between bursts.
//! * [`teams`]: two teams sharing one queue under a given ordering: an ETL team's large
//!   batch applications, more than the cluster holds, and an analysts' team's small
//!   interactive ones.

use muster_core::access::QueueSpec;
use muster_core::ids::QueueName;
use muster_core::model::OrderingPolicy;
use serde_json::json;

use crate::engine::splitmix;
use crate::trace::{AppEntry, DriverEntry, Entry};

/// Where the paper's `pi` jobs go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// To `prod` on an idle cluster.
    Idle,
    /// To `prod` (prior) under full load.
    Prior,
    /// To `food` (ordinary) under full load: the control.
    Ordinary,
}

/// The paper's experiment's settings.
#[derive(Clone, Debug)]
pub struct Paper {
    /// Workers, a multiple of 4.
    pub workers: u32,
    /// Where the pi jobs go.
    pub scenario: Scenario,
    /// Whether `prod` preempts.
    pub preempt: bool,
    /// Rounds of 500 ms tasks of each long job on its 4 cores (160: 80 s).
    pub long_rounds: u32,
    /// How long a pi task takes, in seconds: a quarter of a pi job's time on an idle
    /// cluster, as measured by `muster experiment priority`.
    pub pi_task_s: f64,
}

/// A generated workload: a cluster file (JSON) and a trace.
pub struct Workload {
    /// The cluster file.
    pub cluster: serde_json::Value,
    /// The trace, in time order.
    pub trace: Vec<Entry>,
}

/// When the pi jobs are submitted under load: the long jobs hold every core by then.
const LOADED_AT_S: f64 = 5.0;

/// The paper's experiment at `paper.workers` workers.
pub fn paper(paper: &Paper) -> Workload {
    let groups = (paper.workers / 4).max(1);
    let mut master = json!({});
    if paper.preempt {
        master = json!({"preemption": {"queues": ["prod"], "delay_s": 1, "grace_s": 1, "max_fraction": 0.25}});
    }
    let queues = [
        QueueSpec {
            prior: true,
            ..QueueSpec::named("prod")
        },
        QueueSpec {
            threshold: 0.8,
            ..QueueSpec::named("default")
        },
        QueueSpec::named("food"),
    ];
    let cluster = json!({
        "workers": [{"count": groups * 4, "cores": 2, "memory_mb": 4096}],
        "queues": queues,
        "master": master,
    });
    let job = |at_s: f64, name: &str, queue: &str, cores_max: u32, tasks: u32, task_s: f64| {
        Entry::App(AppEntry {
            at_s,
            name: name.into(),
            queue: QueueName::from(queue),
            user: "experiment".into(),
            cores_max: Some(cores_max),
            executor_cores: Some(1),
            executor_memory_mb: 256,
            executor_limit: None,
            min_executors: None,
            tasks,
            task_s,
        })
    };
    let mut trace = Vec::new();
    let (pi_at, pi_queue) = match paper.scenario {
        Scenario::Idle => (0.0, "prod"),
        Scenario::Prior => (LOADED_AT_S, "prod"),
        Scenario::Ordinary => (LOADED_AT_S, "food"),
    };
    if paper.scenario != Scenario::Idle {
        for _ in 0..groups {
            let tasks = 4 * paper.long_rounds;
            trace.push(job(0.0, "long-default", "default", 4, tasks, 0.5));
            trace.push(job(0.0, "long-food", "food", 4, tasks, 0.5));
        }
    }
    // As the experiment submits them: each a moment after the one before.
    for n in 0..3 {
        for _ in 0..groups {
            let at_s = pi_at + 0.3 * f64::from(n);
            trace.push(job(at_s, "pi", pi_queue, 2, 8, paper.pi_task_s));
        }
    }
    Workload { cluster, trace }
}

/// The synthetic production mix's settings.
#[derive(Clone, Debug)]
pub struct Mix {
    /// Workers of 16 cores and 64 GB.
    pub workers: u32,
    /// Applications over the day.
    pub apps: u32,
    /// Simulated hours.
    pub hours: f64,
    /// Seeds every draw.
    pub seed: u64,
}

/// A day of a synthetic production mix: see the module's documentation.
///
/// * Arrivals: Poisson, at a rate that follows `1 + 0.5 sin(2 pi (t - 6 h) / 24 h)`.
/// * Queues: `prod` (prior, preempting, capacity 0.1, 10% of apps), `etl` (capacity 0.5,
///   60%), `adhoc` (capacity 0.4, threshold 0.8, 30%); users `user-01` to `user-50`, the first ten
///   submitting half of all apps.
/// * Size: executors of 1, 2, 4 or 8 cores (weights 2, 4, 3, 1), 4 GB per core; `cores.max`
///   a Pareto draw (shape 0.8) of 1 to 400 executors.
/// * Work: tasks of log-normal length (median 90 s, sigma 1, at most an hour), one to
///   32 waves of them on its cores.
pub fn mix(mix: &Mix) -> Workload {
    let mut random = Random(mix.seed);
    let queues = [
        QueueSpec {
            prior: true,
            capacity: Some(0.1),
            ..QueueSpec::named("prod")
        },
        QueueSpec {
            capacity: Some(0.5),
            ..QueueSpec::named("etl")
        },
        QueueSpec {
            capacity: Some(0.4),
            threshold: 0.8,
            ..QueueSpec::named("adhoc")
        },
    ];
    let cluster = json!({
        "workers": [{"count": mix.workers, "cores": 16, "memory_mb": 65536}],
        "queues": queues,
        "master": {
            "worker_timeout_s": 60,
            "heartbeat_interval_s": 15,
            "preemption": {"queues": ["prod"], "delay_s": 5, "grace_s": 10, "max_fraction": 0.1},
        },
        "timings": {"tick_ms": 1000},
    });
    let span_s = mix.hours * 3600.0;
    let mean_rate = f64::from(mix.apps) / span_s;
    let mut trace = Vec::new();
    let mut at_s = 0.0;
    while trace.len() < mix.apps as usize {
        // Thinning: draw at the peak rate, keep with the rate now over the peak.
        at_s += random.exponential(1.5 * mean_rate);
        let phase = 2.0 * std::f64::consts::PI * (at_s - 6.0 * 3600.0) / 86_400.0;
        if random.unit() * 1.5 > 1.0 + 0.5 * phase.sin() {
            continue;
        }
        let queue = match random.unit() {
            u if u < 0.1 => "prod",
            u if u < 0.7 => "etl",
            _ => "adhoc",
        };
        let user = if random.unit() < 0.5 {
            1 + random.below(10)
        } else {
            1 + random.below(50)
        };
        let executor_cores = [1, 2, 2, 2, 2, 4, 4, 4, 8, 1][random.below(10) as usize];
        let executors = random.pareto(0.8).min(400.0).floor().max(1.0);
        let cores_max = executor_cores * f64_to_u32(executors);
        let waves = 1 + random.below(32);
        let task_s = (90.0 * random.normal().exp()).clamp(1.0, 3600.0);
        trace.push(Entry::App(AppEntry {
            at_s: (at_s * 1000.0).round() / 1000.0,
            name: format!("app-{}", trace.len()),
            queue: QueueName::from(queue),
            user: format!("user-{user:02}"),
            cores_max: Some(cores_max),
            executor_cores: Some(executor_cores),
            executor_memory_mb: 4096 * u64::from(executor_cores),
            executor_limit: None,
            min_executors: None,
            tasks: cores_max * waves,
            task_s: (task_s * 10.0).round() / 10.0,
        }));
    }
    Workload { cluster, trace }
}

/// The burst day's settings.
#[derive(Clone, Debug)]
pub struct Bursts {
    /// Workers of 16 cores and 64 GB.
    pub workers: u32,
    /// Hours, each starting with a burst.
    pub hours: u32,
    /// Seeds every draw.
    pub seed: u64,
}

/// A day of bursts: see the module's documentation.
///
/// * Each hour on the hour, a burst of job drivers (one core, 1 GB) twice as many as the
///   cluster has cores, submitted within a second: each registers its application a few
///   seconds after it starts; a third of those applications are gangs of all their
///   executors.
/// * Between bursts, client applications arrive, Poisson, about one a minute, a third of
///   them gangs.
/// * Jobs: 2 to 8 executors of 1, 2 or 4 cores and 2 GB a core, one to four waves of tasks of
///   log-normal length (median 30 s, sigma 0.5, at most 10 minutes).
pub fn bursts(bursts: &Bursts) -> Workload {
    let mut random = Random(bursts.seed);
    let cluster = json!({
        "workers": [{"count": bursts.workers, "cores": 16, "memory_mb": 65536}],
        "timings": {"tick_ms": 1000},
    });
    let mut trace = Vec::new();
    let job = |random: &mut Random, at_s: f64| {
        let executor_cores = [1, 2, 4][random.below(3) as usize];
        let executors = 2 + random.below(7);
        let gang = random.below(3) == 0;
        let waves = 1 + random.below(4);
        let task_s = (30.0 * (0.5 * random.normal()).exp()).clamp(1.0, 600.0);
        AppEntry {
            at_s: (at_s * 1000.0).round() / 1000.0,
            name: String::new(),
            queue: QueueName::default(),
            user: String::new(),
            cores_max: Some(executor_cores * executors),
            executor_cores: Some(executor_cores),
            executor_memory_mb: 2048 * u64::from(executor_cores),
            executor_limit: None,
            min_executors: gang.then_some(executors),
            tasks: executor_cores * executors * waves,
            task_s: (task_s * 10.0).round() / 10.0,
        }
    };
    for hour in 0..bursts.hours {
        let start = f64::from(hour) * 3600.0;
        for i in 0..bursts.workers * 32 {
            let at_s = start + random.unit();
            let app = job(&mut random, at_s);
            trace.push(Entry::Driver(DriverEntry {
                at_s: app.at_s,
                name: format!("burst-{hour}-{i}"),
                queue: app.queue,
                user: String::new(),
                cores: 1,
                memory_mb: 1024,
                duration_s: 2.0 + 3.0 * random.unit(),
                supervise: false,
                failures: 0,
                cores_max: app.cores_max,
                executor_cores: app.executor_cores,
                executor_memory_mb: Some(app.executor_memory_mb),
                min_executors: app.min_executors,
                tasks: Some(app.tasks),
                task_s: Some(app.task_s),
            }));
        }
        let mut at_s = start;
        loop {
            at_s += random.exponential(1.0 / 60.0);
            if at_s >= start + 3600.0 {
                break;
            }
            let mut app = job(&mut random, at_s);
            app.name = format!("client-{}", trace.len());
            trace.push(Entry::App(app));
        }
    }
    trace.sort_by(|a, b| a.at_s().total_cmp(&b.at_s()));
    Workload { cluster, trace }
}

/// The two-team day's settings.
#[derive(Clone, Debug)]
pub struct Teams {
    /// Workers of 16 cores and 64 GB.
    pub workers: u32,
    /// Simulated hours the applications arrive over.
    pub hours: f64,
    /// How the shared queue orders its applications.
    pub ordering: OrderingPolicy,
    /// Seeds every draw.
    pub seed: u64,
}

/// Two teams share the queue `shared`: see the module's documentation.
///
/// * `etl`: batch applications, Poisson, about one every five minutes per four workers,
///   each of 16 executors of 4 cores and 16 GB (a whole worker's worth and more), two to
///   six waves of tasks of log-normal length (median 120 s, sigma 0.5): together more than
///   the cluster holds, so that some always wait.
/// * `analysts`: interactive applications, Poisson, about one a minute per four workers,
///   each of 2 executors of 2 cores and 8 GB, two waves of 20 s tasks.
pub fn teams(teams: &Teams) -> Workload {
    let mut random = Random(teams.seed);
    let queue = QueueSpec {
        ordering: teams.ordering,
        ..QueueSpec::named("shared")
    };
    let cluster = json!({
        "workers": [{"count": teams.workers, "cores": 16, "memory_mb": 65536}],
        "queues": [queue],
        "timings": {"tick_ms": 1000},
    });
    let span_s = teams.hours * 3600.0;
    let scale = f64::from(teams.workers) / 4.0;
    let mut trace = Vec::new();
    for (user, per_s) in [("etl", scale / 300.0), ("analysts", scale / 60.0)] {
        let mut at_s = 0.0;
        loop {
            at_s += random.exponential(per_s);
            if at_s >= span_s {
                break;
            }
            let (executors, executor_cores, waves, task_s) = if user == "etl" {
                let task_s = (120.0 * (0.5 * random.normal()).exp()).clamp(10.0, 1200.0);
                (16, 4, 2 + random.below(5), task_s)
            } else {
                (2, 2, 2, 20.0)
            };
            trace.push(Entry::App(AppEntry {
                at_s: (at_s * 1000.0).round() / 1000.0,
                name: format!("{user}-{}", trace.len()),
                queue: "shared".into(),
                user: user.to_owned(),
                cores_max: Some(executors * executor_cores),
                executor_cores: Some(executor_cores),
                executor_memory_mb: 4096 * u64::from(executor_cores),
                executor_limit: None,
                min_executors: None,
                tasks: executors * executor_cores * waves,
                task_s: (task_s * 10.0).round() / 10.0,
            }));
        }
    }
    trace.sort_by(|a, b| a.at_s().total_cmp(&b.at_s()));
    Workload { cluster, trace }
}

#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn f64_to_u32(value: f64) -> u32 {
    value as u32
}

/// Seeded draws: splitmix64, so the same seed gives the same workload everywhere.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        splitmix(self.0)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in 0..n.
    fn below(&mut self, n: u32) -> u32 {
        u32::try_from(self.next() % u64::from(n)).expect("below n")
    }

    fn exponential(&mut self, rate: f64) -> f64 {
        -(1.0 - self.unit()).ln() / rate
    }

    /// Pareto with scale 1.
    fn pareto(&mut self, shape: f64) -> f64 {
        (1.0 - self.unit()).powf(-1.0 / shape)
    }

    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let (u, v) = (1.0 - self.unit(), self.unit());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}
