//! What a simulation records as it runs ([`Recorder`]) and what it reports at the end
//! ([`Report`]): per queue and per user, how long work waited and took; what preemptions
//! cost; what waited and why; how busy the cluster was and how evenly its users shared it;
//! how much the log grew; and, apart
//! from the rest because it measures this machine rather than the simulation, how long each
//! scheduling pass really took.

use std::collections::BTreeMap;
use std::time::Duration;

use muster_core::resources::{Resources, dominant_share};
use muster_state::{ClusterState, Command};
use serde::Serialize;

use crate::cluster::Cluster;
use crate::trace::Entry;
use crate::world::Lost;

/// One app or driver of the trace, as it went.
#[derive(Clone, Debug, Serialize)]
pub struct Work {
    /// `app` or `driver`.
    pub kind: &'static str,
    /// Its trace name.
    pub name: String,
    /// Its id in the cluster, once submitted.
    pub id: String,
    /// Its queue.
    pub queue: String,
    /// Its user.
    pub user: String,
    /// When it was submitted, in seconds.
    pub submitted_s: f64,
    /// When it first ran (its first executor started, or the driver), in seconds.
    pub started_s: Option<f64>,
    /// When it was done, in seconds.
    pub ended_s: Option<f64>,
    /// How it ended: FINISHED, KILLED, FAILED, ..., or REFUSED at submission.
    pub outcome: Option<String>,
    /// A driver's runs that failed (exit 1) before it ended.
    #[serde(skip_serializing_if = "muster_core::model::is_zero")]
    pub failed_runs: u32,
    /// Core time its tasks ran, in seconds (apps).
    #[serde(skip)]
    pub core_ms: u64,
}

/// One look at what the cluster held.
#[derive(Clone, Debug)]
pub struct Sample {
    /// When, in seconds.
    pub at_s: f64,
    /// Cores held, by queue.
    pub cores: BTreeMap<String, u64>,
    /// How many waited, by reason.
    pub waiting: BTreeMap<&'static str, usize>,
    /// Each user with an active application: their dominant share of the ALIVE workers, from
    /// their applications' executors.
    pub shares: BTreeMap<String, f64>,
}

/// What a run recorded.
#[derive(Debug)]
pub struct Recorder {
    /// Every app and driver of the trace, by trace entry (None for faults).
    pub work: Vec<Option<Work>>,
    /// The apps and drivers in the order they ended.
    pub order: Vec<usize>,
    /// Samples, in time order.
    pub samples: Vec<Sample>,
    /// Total cores of the cluster.
    cores: u64,
    workers: usize,
    passes: Vec<Duration>,
    log_entries: u64,
    log_bytes: u64,
    preemptions: u64,
    preempted: Lost,
    lost: Lost,
    workers_lost: u64,
    leader_changes: u64,
    ran_twice: u64,
    overcommitted: u64,
    snapshot_bytes: usize,
    end_ms: u64,
}

impl Recorder {
    /// Ready to record a run of `trace` on `cluster`.
    pub fn new(trace: &[Entry], cluster: &Cluster) -> Self {
        let work = trace
            .iter()
            .map(|entry| {
                let (kind, name, queue, user, at_s) = match entry {
                    Entry::App(a) => ("app", &a.name, &a.queue, &a.user, a.at_s),
                    Entry::Driver(d) => ("driver", &d.name, &d.queue, &d.user, d.at_s),
                    _ => return None,
                };
                Some(Work {
                    kind,
                    name: name.clone(),
                    id: String::new(),
                    queue: queue.to_string(),
                    user: user.clone(),
                    submitted_s: at_s,
                    started_s: None,
                    ended_s: None,
                    outcome: None,
                    core_ms: 0,
                    failed_runs: 0,
                })
            })
            .collect();
        Self {
            work,
            order: Vec::new(),
            samples: Vec::new(),
            cores: cluster.cores(),
            workers: cluster.workers.len(),
            passes: Vec::new(),
            log_entries: 0,
            log_bytes: 0,
            preemptions: 0,
            preempted: Lost::default(),
            lost: Lost::default(),
            workers_lost: 0,
            leader_changes: 0,
            ran_twice: 0,
            overcommitted: 0,
            snapshot_bytes: 0,
            end_ms: 0,
        }
    }

    fn work(&mut self, entry: usize) -> &mut Work {
        self.work[entry].as_mut().expect("an app or a driver")
    }

    /// Entry `entry` was accepted as `id`.
    pub fn submitted(&mut self, entry: usize, id: &str) {
        id.clone_into(&mut self.work(entry).id);
    }

    /// Entry `entry`'s submission was refused.
    pub fn refused(&mut self, entry: usize) {
        self.work(entry).outcome = Some("REFUSED".into());
        self.order.push(entry);
    }

    /// Entry `entry` ran something at `now` (ms); its first start counts.
    pub fn started(&mut self, entry: usize, now: u64) {
        self.work(entry).started_s.get_or_insert(seconds(now));
    }

    /// App `entry` ran its last task at `now`.
    pub fn finished(&mut self, entry: usize, now: u64) {
        self.work(entry).ended_s.get_or_insert(seconds(now));
    }

    /// Entry `entry` ended at `now` with `outcome`; whether that was news.
    pub fn ended(&mut self, entry: usize, now: u64, outcome: &str) -> bool {
        let work = self.work(entry);
        if work.outcome.is_some() {
            return false;
        }
        work.ended_s.get_or_insert(seconds(now));
        work.outcome = Some(outcome.to_owned());
        self.order.push(entry);
        true
    }

    /// A task of `task_ms` ran to its end.
    pub fn task_done(&mut self, entry: usize, task_ms: u64) {
        self.work(entry).core_ms += task_ms;
    }

    /// An executor was stopped for prior work.
    pub fn preempted(&mut self) {
        self.preemptions += 1;
    }

    /// Tasks ran again: their executor was preempted, or ended otherwise.
    pub fn lost(&mut self, lost: Lost, preempted: bool) {
        let total = if preempted {
            &mut self.preempted
        } else {
            &mut self.lost
        };
        total.tasks += lost.tasks;
        total.core_ms += lost.core_ms;
    }

    /// A scheduling pass took `wall` on this machine.
    pub fn pass(&mut self, wall: Duration) {
        self.passes.push(wall);
    }

    /// `command` was written to the log.
    pub fn logged(&mut self, command: &Command) {
        self.log_entries += 1;
        self.log_bytes += muster_state::codec::encoded_len(command) as u64;
    }

    /// A worker's machine failed.
    pub fn worker_lost(&mut self) {
        self.workers_lost += 1;
    }

    /// The leader failed.
    pub fn leader_changed(&mut self) {
        self.leader_changes += 1;
    }

    /// A run of driver `entry` failed.
    pub fn failed_run(&mut self, entry: usize) {
        self.work(entry).failed_runs += 1;
    }

    /// A process was launched while another worker still ran it.
    pub fn ran_twice(&mut self) {
        self.ran_twice += 1;
    }

    /// A process was launched on a worker that it overcommitted.
    pub fn overcommitted(&mut self) {
        self.overcommitted += 1;
    }

    /// What `state` holds at `now`, and what waited (as of the leader's last pass).
    pub fn sample(
        &mut self,
        now: u64,
        state: &ClusterState,
        waiting: Option<&BTreeMap<&'static str, usize>>,
    ) {
        let mut cores: BTreeMap<String, u64> = BTreeMap::new();
        for app in state.apps().values() {
            *cores.entry(app.desc.queue.to_string()).or_default() += app.cores_granted;
        }
        for driver in state.drivers().values() {
            if driver.worker.is_some() {
                *cores.entry(driver.desc.queue.to_string()).or_default() +=
                    u64::from(driver.desc.resources.cores);
            }
        }
        let cluster = state.alive_capacity();
        let mut held: BTreeMap<String, Resources> = BTreeMap::new();
        for app in state.apps().values() {
            let user = state.user_of(app).unwrap_or_default().to_owned();
            let held = held.entry(user).or_default();
            for executor in app.executors.values() {
                *held = held.saturating_add(&executor.resources);
            }
        }
        self.samples.push(Sample {
            at_s: seconds(now),
            cores,
            waiting: waiting.cloned().unwrap_or_default(),
            shares: held
                .into_iter()
                .map(|(user, held)| (user, dominant_share(&held, &cluster)))
                .collect(),
        });
    }

    /// The run ended at `now` with `state`.
    pub fn end(&mut self, now: u64, state: &ClusterState) {
        self.end_ms = now;
        self.snapshot_bytes = state.encode_snapshot().len();
    }

    /// The apps and drivers of the trace that had not ended when the run did.
    pub fn unfinished(&self) -> Vec<usize> {
        (0..self.work.len())
            .filter(|&i| self.work[i].as_ref().is_some_and(|w| w.outcome.is_none()))
            .collect()
    }

    /// The report of the run.
    pub fn report(&self) -> Report {
        let mut queues: BTreeMap<String, Vec<&Work>> = BTreeMap::new();
        let mut users: BTreeMap<String, Vec<&Work>> = BTreeMap::new();
        for work in self.work.iter().flatten() {
            queues.entry(work.queue.clone()).or_default().push(work);
            users.entry(work.user.clone()).or_default().push(work);
        }
        let groups = |by: BTreeMap<String, Vec<&Work>>| {
            by.into_iter()
                .map(|(name, work)| (name, Group::of(&work)))
                .collect()
        };
        let hours = (self.end_ms as f64 / 3_600_000.0).max(f64::MIN_POSITIVE);
        let mut waiting: BTreeMap<&'static str, Waiting> = BTreeMap::new();
        for sample in &self.samples {
            for (reason, count) in &sample.waiting {
                let waiting = waiting.entry(reason).or_default();
                waiting.mean += *count as f64;
                waiting.most = waiting.most.max(*count);
            }
        }
        let count = self.samples.len().max(1) as f64;
        for waiting in waiting.values_mut() {
            waiting.mean = round(waiting.mean / count);
        }
        let used: f64 = self
            .samples
            .iter()
            .map(|s| s.cores.values().sum::<u64>() as f64)
            .sum();
        let work: Vec<&Work> = self.work.iter().flatten().collect();
        let ended = work.iter().filter(|w| w.outcome.is_some()).count();
        Report {
            simulated: Simulated {
                span_s: round(seconds(self.end_ms)),
                workers: self.workers,
                cores: self.cores,
                submitted: work.len(),
                ended,
                unfinished: work.len() - ended,
                queues: groups(queues),
                users: groups(users),
                fairness: Fairness::of(&self.samples),
                preemption: Preemption {
                    executors: self.preemptions,
                    tasks_rerun: self.preempted.tasks,
                    core_s_lost: round(seconds(self.preempted.core_ms)),
                },
                other_losses: Preemption {
                    executors: 0,
                    tasks_rerun: self.lost.tasks,
                    core_s_lost: round(seconds(self.lost.core_ms)),
                },
                waiting,
                utilisation: round(used / count / self.cores.max(1) as f64),
                log: LogGrowth {
                    entries: self.log_entries,
                    bytes: self.log_bytes,
                    entries_per_hour: round(self.log_entries as f64 / hours),
                    bytes_per_hour: round(self.log_bytes as f64 / hours),
                },
                snapshot_bytes: self.snapshot_bytes,
                passes: self.passes.len(),
                workers_lost: self.workers_lost,
                leader_changes: self.leader_changes,
                ran_twice: self.ran_twice,
                overcommitted: self.overcommitted,
            },
            measured: Measured {
                pass_ms: Distribution::of(
                    self.passes
                        .iter()
                        .map(|d| d.as_secs_f64() * 1000.0)
                        .collect(),
                ),
                wall_s: 0.0,
            },
        }
    }
}

/// How evenly the users with active applications shared the cluster, by their dominant
/// shares of the ALIVE workers (their largest share of cores, memory or a custom resource),
/// over the samples.
#[derive(Debug, Serialize)]
pub struct Fairness {
    /// Each user's dominant share: the mean over the samples in which they had an active
    /// application, and the most.
    pub users: BTreeMap<String, Share>,
    /// Jain's index of the active users' dominant shares, (Σx)² / (n Σx²): 1 when all hold
    /// the same, 1/n when one holds everything. The mean over the samples with two or more
    /// active users holding anything; none without such a sample.
    pub jain_index: Option<f64>,
}

/// One user's dominant share over the samples.
#[derive(Debug, Default, Serialize)]
pub struct Share {
    /// The mean.
    pub mean: f64,
    /// The most.
    pub most: f64,
}

impl Fairness {
    /// Each user's mean dominant share, as `alice 0.41, bob 0.39`.
    pub fn means(&self) -> String {
        let shares: Vec<String> = self
            .users
            .iter()
            .map(|(user, share)| format!("{user} {:.2}", share.mean))
            .collect();
        shares.join(", ")
    }

    fn of(samples: &[Sample]) -> Self {
        let mut sums: BTreeMap<&str, (f64, usize, f64)> = BTreeMap::new();
        let mut indices = Vec::new();
        for sample in samples {
            for (user, &share) in &sample.shares {
                let (sum, count, most) = sums.entry(user).or_default();
                *sum += share;
                *count += 1;
                *most = most.max(share);
            }
            let (sum, squares) = sample
                .shares
                .values()
                .fold((0.0, 0.0), |(sum, squares), x| (sum + x, squares + x * x));
            if sample.shares.len() >= 2 && squares > 0.0 {
                indices.push(sum * sum / (sample.shares.len() as f64 * squares));
            }
        }
        Self {
            users: sums
                .into_iter()
                .map(|(user, (sum, count, most))| {
                    let share = Share {
                        mean: round(sum / count as f64),
                        most: round(most),
                    };
                    (user.to_owned(), share)
                })
                .collect(),
            jain_index: (!indices.is_empty())
                .then(|| round(indices.iter().sum::<f64>() / indices.len() as f64)),
        }
    }
}

/// Everything a run reports; `simulated` is the same for the same inputs, byte for byte.
#[derive(Debug, Serialize)]
pub struct Report {
    /// What happened in the simulated cluster.
    pub simulated: Simulated,
    /// What this machine measured while simulating it.
    pub measured: Measured,
}

/// What happened in the simulated cluster.
#[derive(Debug, Serialize)]
pub struct Simulated {
    /// Virtual seconds from the start to the end of the run.
    pub span_s: f64,
    /// Workers at the start.
    pub workers: usize,
    /// Their cores.
    pub cores: u64,
    /// Apps and drivers in the trace.
    pub submitted: usize,
    /// Those that ended (or were refused).
    pub ended: usize,
    /// Those still waiting or running at the end.
    pub unfinished: usize,
    /// By queue.
    pub queues: BTreeMap<String, Group>,
    /// By user.
    pub users: BTreeMap<String, Group>,
    /// How evenly the users shared the cluster.
    pub fairness: Fairness,
    /// Executors stopped for prior work, and their tasks' work lost.
    pub preemption: Preemption,
    /// Work lost otherwise: lost workers, drains.
    pub other_losses: Preemption,
    /// How many apps and drivers waited, by reason, over the samples.
    pub waiting: BTreeMap<&'static str, Waiting>,
    /// Cores held over cores in the cluster, over the samples.
    pub utilisation: f64,
    /// What the log took.
    pub log: LogGrowth,
    /// The state's snapshot at the end, in bytes.
    pub snapshot_bytes: usize,
    /// Scheduling passes run.
    pub passes: usize,
    /// Worker machines that failed.
    pub workers_lost: u64,
    /// Leaders that failed.
    pub leader_changes: u64,
    /// Processes launched while another worker still ran them: never two copies, so 0.
    pub ran_twice: u64,
    /// Processes launched on a worker whose processes, those still stopping included, then
    /// needed more cores or memory than it has: never promised more than it has, so 0.
    pub overcommitted: u64,
}

/// How a group of apps and drivers went.
#[derive(Debug, Serialize)]
pub struct Group {
    /// How many were submitted.
    pub submitted: usize,
    /// How many were done.
    pub finished: usize,
    /// From submission to first running, in seconds.
    pub wait_s: Distribution,
    /// From submission to done, in seconds.
    pub turnaround_s: Distribution,
    /// Core seconds of tasks run to their end: goodput.
    pub goodput_core_s: f64,
}

impl Group {
    fn of(work: &[&Work]) -> Self {
        let waits = work
            .iter()
            .filter_map(|w| Some(w.started_s? - w.submitted_s))
            .collect();
        let done: Vec<&&Work> = work
            .iter()
            .filter(|w| w.outcome.as_deref() == Some("FINISHED"))
            .collect();
        let turnarounds = done
            .iter()
            .filter_map(|w| Some(w.ended_s? - w.submitted_s))
            .collect();
        Self {
            submitted: work.len(),
            finished: done.len(),
            wait_s: Distribution::of(waits),
            turnaround_s: Distribution::of(turnarounds),
            goodput_core_s: round(seconds(work.iter().map(|w| w.core_ms).sum())),
        }
    }
}

/// Percentiles (nearest rank), mean and worst of some values.
#[derive(Debug, Default, Serialize)]
pub struct Distribution {
    /// How many.
    pub count: usize,
    /// Their mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// The largest.
    pub max: f64,
}

impl Distribution {
    fn of(mut values: Vec<f64>) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        values.sort_by(f64::total_cmp);
        let rank = |p: f64| {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let index = ((p * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1;
            round(values[index])
        };
        Self {
            count: values.len(),
            mean: round(values.iter().sum::<f64>() / values.len() as f64),
            p50: rank(0.50),
            p95: rank(0.95),
            p99: rank(0.99),
            max: round(values[values.len() - 1]),
        }
    }
}

/// Executors stopped and the work their tasks lost.
#[derive(Debug, Serialize)]
pub struct Preemption {
    /// Executors stopped for prior work.
    pub executors: u64,
    /// Tasks that ran again elsewhere.
    pub tasks_rerun: u32,
    /// Core seconds those tasks had run.
    pub core_s_lost: f64,
}

/// How many apps and drivers waited for one reason.
#[derive(Debug, Default, Serialize)]
pub struct Waiting {
    /// On average over the samples.
    pub mean: f64,
    /// At the most.
    pub most: usize,
}

/// What the log took.
#[derive(Debug, Serialize)]
pub struct LogGrowth {
    /// Entries written: the leader's proposals and clients' writes.
    pub entries: u64,
    /// Their encoded size.
    pub bytes: u64,
    /// Per simulated hour.
    pub entries_per_hour: f64,
    /// Per simulated hour.
    pub bytes_per_hour: f64,
}

/// What this machine measured.
#[derive(Debug, Serialize)]
pub struct Measured {
    /// The real time of each scheduling pass, in ms.
    pub pass_ms: Distribution,
    /// The real time of the whole run, in seconds, where the caller measured it.
    pub wall_s: f64,
}

/// `ms` in seconds.
fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// `value` to three decimals: reports stay readable and equal across runs.
fn round(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}
