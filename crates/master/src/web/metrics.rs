//! Prometheus metrics, served at `/metrics` on the master's `--http` endpoint in the text
//! exposition format (`prometheus-client`).
//!
//! Gauges are read when Prometheus scrapes: what this replica's Raft node reports, the
//! cluster as this replica has applied it (workers by state, queue usage and limits), and
//! while it leads, its recovery state and why work waits. Counters and the pass-latency
//! histogram count as things happen in this replica's leader sessions; a follower's stay
//! where its last term as leader left them.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use muster_core::ids::QueueName;
use muster_core::model::{GangStyle, WorkerState};
use muster_core::queues::{views, with_default};
use muster_proto::v1::BuildInfo;
use muster_raft::RaftNode;
use muster_state::ClusterState;
use muster_state::model::DriverState;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::session::Sessions;
use muster_core::model::RecoveryState;

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabel {
    queue: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UserLabels {
    queue: String,
    user: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PeerLabel {
    peer: u64,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StyleLabel {
    style: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    method: &'static str,
    code: &'static str,
}

/// A status code's name, as gRPC spells it in Rust (`Ok`, `Unavailable`, ...).
fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "Ok",
        Code::Cancelled => "Cancelled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
    commit: String,
}

type ByState = Family<StateLabel, Gauge>;
type ByQueue = Family<QueueLabel, Gauge>;
type FractionByQueue = Family<QueueLabel, Gauge<f64, AtomicU64>>;

/// Every metric this master exports.
pub struct Metrics {
    registry: Registry,
    /// Serializes scrapes: each resets and refills the scrape-time families.
    scrape: Mutex<()>,
    build_info: Family<BuildLabels, Gauge>,
    log_format: Gauge,
    term: Gauge,
    leader: Gauge,
    is_leader: Gauge,
    last_log_index: Gauge,
    applied_index: Gauge,
    apply_lag: Gauge,
    peer_failed_attempts: Family<PeerLabel, Gauge>,
    recovery: ByState,
    last_recovery_seconds: Gauge<f64, AtomicU64>,
    workers: ByState,
    apps: Gauge,
    drivers: ByState,
    waiting: Family<ReasonLabel, Gauge>,
    kept_cores: Family<KindLabel, Gauge>,
    gang_timeouts: Family<StyleLabel, Gauge>,
    queue_cores_used: ByQueue,
    queue_memory_used_mb: ByQueue,
    queue_prior: ByQueue,
    queue_threshold: FractionByQueue,
    queue_max_capacity: FractionByQueue,
    queue_capacity: FractionByQueue,
    user_active: Family<UserLabels, Gauge>,
    user_cores_used: Family<UserLabels, Gauge>,
    pass_seconds: Histogram,
    placement_wait_seconds: Family<KindLabel, Histogram, fn() -> Histogram>,
    launches: Family<KindLabel, Counter>,
    heartbeats: Counter,
    calls: Family<CallLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// The metrics, registered and at zero.
    pub fn new() -> Self {
        let mut metrics = Self {
            registry: Registry::with_prefix("muster"),
            scrape: Mutex::new(()),
            build_info: Family::default(),
            log_format: Gauge::default(),
            term: Gauge::default(),
            leader: Gauge::default(),
            is_leader: Gauge::default(),
            last_log_index: Gauge::default(),
            applied_index: Gauge::default(),
            apply_lag: Gauge::default(),
            peer_failed_attempts: Family::default(),
            recovery: ByState::default(),
            last_recovery_seconds: Gauge::default(),
            workers: ByState::default(),
            apps: Gauge::default(),
            drivers: ByState::default(),
            waiting: Family::default(),
            kept_cores: Family::default(),
            gang_timeouts: Family::default(),
            queue_cores_used: ByQueue::default(),
            queue_memory_used_mb: ByQueue::default(),
            queue_prior: ByQueue::default(),
            queue_threshold: FractionByQueue::default(),
            queue_max_capacity: FractionByQueue::default(),
            queue_capacity: FractionByQueue::default(),
            user_active: Family::default(),
            user_cores_used: Family::default(),
            pass_seconds: Histogram::new(exponential_buckets(0.000_05, 2.0, 16)),
            // From 10 ms to about an hour and a half.
            placement_wait_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.01, 2.0, 20))
            }),
            launches: Family::default(),
            heartbeats: Counter::default(),
            calls: Family::default(),
        };
        // At zero from the start, not absent until the first launch.
        for kind in ["driver", "executor"] {
            let _ = metrics.launches.get_or_create(&KindLabel {
                kind: kind.to_owned(),
            });
        }
        metrics.register();
        metrics
    }

    fn register(&mut self) {
        let r = &mut self.registry;
        r.register(
            "build_info",
            "1, labelled with the release and commit this master runs",
            self.build_info.clone(),
        );
        r.register(
            "log_format",
            "The cluster's effective log format, as this replica has applied the log",
            self.log_format.clone(),
        );
        r.register("raft_term", "Raft term of this replica", self.term.clone());
        r.register(
            "raft_leader",
            "Leader this replica knows, 0 if none",
            self.leader.clone(),
        );
        r.register(
            "raft_is_leader",
            "1 if this replica leads",
            self.is_leader.clone(),
        );
        r.register(
            "raft_last_log_index",
            "Index of this replica's last log entry",
            self.last_log_index.clone(),
        );
        r.register(
            "raft_applied_index",
            "Index of the last entry this replica applied",
            self.applied_index.clone(),
        );
        r.register(
            "raft_apply_lag",
            "Log entries not applied yet",
            self.apply_lag.clone(),
        );
        r.register(
            "raft_peer_failed_attempts",
            "Calls to each peer that failed since this replica started (a cut or refused link is tried again about ten times a second)",
            self.peer_failed_attempts.clone(),
        );
        r.register(
            "recovery_state",
            "1 for the recovery state of this replica's leader (Spark's RecoveryState)",
            self.recovery.clone(),
        );
        r.register(
            "last_recovery_seconds",
            "How long this replica's last recovery as leader took",
            self.last_recovery_seconds.clone(),
        );
        r.register("workers", "Workers by state", self.workers.clone());
        r.register("apps", "Active applications", self.apps.clone());
        r.register("drivers", "Active drivers by state", self.drivers.clone());
        r.register(
            "waiting",
            "Applications and drivers waiting, by reason (no_room, held_by_threshold, queue_at_capacity, ...), as of the leader's last pass",
            self.waiting.clone(),
        );
        r.register(
            "kept_cores",
            "Cores kept free for work that waits, by kind: for prior work that preempted (preemption), and, as of the leader's last pass, for the oldest waiting gang (gang)",
            self.kept_cores.clone(),
        );
        r.register(
            "gang_timeouts",
            "Active and retained applications, and drivers, whose gang waited its timeout, by gang_style (soft: placed as any application or driver since; hard: failed)",
            self.gang_timeouts.clone(),
        );
        r.register(
            "queue_cores_used",
            "Cores of the live executors and running drivers in each queue (below it, for a parent)",
            self.queue_cores_used.clone(),
        );
        r.register(
            "queue_memory_used_mb",
            "Memory of the live executors and running drivers in each queue (below it, for a parent)",
            self.queue_memory_used_mb.clone(),
        );
        r.register(
            "queue_prior",
            "1 for a prior queue",
            self.queue_prior.clone(),
        );
        r.register(
            "queue_threshold",
            "Share of a worker running prior work that a normal queue may use",
            self.queue_threshold.clone(),
        );
        r.register(
            "queue_max_capacity",
            "Share of its parent's maximum (of the ALIVE cores, at the top) a normal queue may hold",
            self.queue_max_capacity.clone(),
        );
        r.register(
            "queue_capacity",
            "Share of its parent's guarantee (of the ALIVE cores, at the top) a queue is guaranteed, when queues have capacities",
            self.queue_capacity.clone(),
        );
        r.register(
            "user_active",
            "Active applications and drivers of each named user, by queue",
            self.user_active.clone(),
        );
        r.register(
            "user_cores_used",
            "Cores of each named user's live executors and running drivers, by queue",
            self.user_cores_used.clone(),
        );
        r.register(
            "pass_seconds",
            "Time of one scheduling pass (a pass with nothing to place is skipped)",
            self.pass_seconds.clone(),
        );
        r.register(
            "placement_wait_seconds",
            "How long work waited to be placed, by kind (app: its first executors; driver: its launch), from the first scheduling pass of this replica's leader that left it waiting (0 if the first that saw it placed it) to the commit of the plan that placed it",
            self.placement_wait_seconds.clone(),
        );
        r.register(
            "launches",
            "Drivers and executors this replica's leader launched, by kind",
            self.launches.clone(),
        );
        r.register(
            "heartbeats",
            "Worker heartbeats this replica's leader answered",
            self.heartbeats.clone(),
        );
        r.register(
            "grpc_calls",
            "gRPC calls this master served, by method and status code, counted as they end",
            self.calls.clone(),
        );
    }

    /// A gRPC call to `method` (`Service/Method`) ended with `code`.
    pub(crate) fn call(&self, method: &'static str, code: tonic::Code) {
        self.calls
            .get_or_create(&CallLabels {
                method,
                code: code_name(code),
            })
            .inc();
    }

    /// This master runs `build`.
    pub fn built_from(&self, build: &BuildInfo) {
        let labels = BuildLabels {
            version: build.version.clone(),
            commit: build.commit.clone(),
        };
        self.build_info.get_or_create(&labels).set(1);
    }

    /// One scheduling pass took `elapsed`.
    pub(crate) fn pass(&self, elapsed: Duration) {
        self.pass_seconds.observe(elapsed.as_secs_f64());
    }

    /// Work of `kind` (`app`, `driver`) waited `waited` to be placed.
    pub(crate) fn placement_waited(&self, kind: &str, waited: Duration) {
        self.placement_wait_seconds
            .get_or_create(&KindLabel {
                kind: kind.to_owned(),
            })
            .observe(waited.as_secs_f64());
    }

    /// A launch was sent to a worker: `kind` is `driver` or `executor`.
    pub(crate) fn launched(&self, kind: &str) {
        self.launches
            .get_or_create(&KindLabel {
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// A worker heartbeat was answered.
    pub(crate) fn heartbeat(&self) {
        self.heartbeats.inc();
    }

    /// The leader of this replica became ALIVE `elapsed` after its term began.
    pub(crate) fn recovered(&self, elapsed: Duration) {
        self.last_recovery_seconds.set(elapsed.as_secs_f64());
    }

    /// Every metric at zero, each family with one series of empty labels so that its label
    /// names show: what the book's metric reference is made from. A family added to
    /// [`Metrics`] belongs here too.
    pub fn sample() -> String {
        let metrics = Self::new();
        let _ = metrics.build_info.get_or_create(&BuildLabels::default());
        let _ = metrics
            .peer_failed_attempts
            .get_or_create(&PeerLabel::default());
        for family in [&metrics.recovery, &metrics.workers, &metrics.drivers] {
            let _ = family.get_or_create(&StateLabel::default());
        }
        let _ = metrics.waiting.get_or_create(&ReasonLabel::default());
        let _ = metrics.kept_cores.get_or_create(&KindLabel::default());
        let _ = metrics
            .placement_wait_seconds
            .get_or_create(&KindLabel::default());
        let _ = metrics.gang_timeouts.get_or_create(&StyleLabel::default());
        for family in [
            &metrics.queue_cores_used,
            &metrics.queue_memory_used_mb,
            &metrics.queue_prior,
        ] {
            let _ = family.get_or_create(&QueueLabel::default());
        }
        for family in [
            &metrics.queue_threshold,
            &metrics.queue_max_capacity,
            &metrics.queue_capacity,
        ] {
            let _ = family.get_or_create(&QueueLabel::default());
        }
        for family in [&metrics.user_active, &metrics.user_cores_used] {
            let _ = family.get_or_create(&UserLabels::default());
        }
        let _ = metrics.calls.get_or_create(&CallLabels::default());
        metrics.encoded()
    }

    /// The text exposition of every metric as it stands.
    fn encoded(&self) -> String {
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("writing to a String cannot fail");
        text
    }

    /// The text exposition of every metric, with the scrape-time gauges read from `node` and
    /// `sessions` now.
    pub fn render(&self, node: &RaftNode, sessions: &Sessions) -> String {
        let _scrape = self.scrape.lock().expect("scrape lock");
        self.read_raft(node);
        {
            let state = node.local_state();
            let state = state.read().expect("state lock");
            self.read_state(&state);
        }
        self.recovery.clear();
        self.waiting.clear();
        let gang = KindLabel {
            kind: "gang".to_owned(),
        };
        self.kept_cores.get_or_create(&gang).set(0);
        if let Some(session) = sessions.current() {
            let kept: u64 = session
                .reserved()
                .iter()
                .map(|room| u64::from(room.resources.cores))
                .sum();
            self.kept_cores.get_or_create(&gang).set(gauge(kept));
            let recovery = match session.recovery_state() {
                RecoveryState::Recovering => "recovering",
                RecoveryState::CompletingRecovery => "completing_recovery",
                RecoveryState::Alive => "alive",
            };
            self.recovery.get_or_create(&state_label(recovery)).set(1);
            for (reason, count) in session.waiting_by_reason() {
                let reason = ReasonLabel {
                    reason: reason.to_owned(),
                };
                self.waiting.get_or_create(&reason).set(gauge(count as u64));
            }
        }
        self.encoded()
    }

    fn read_raft(&self, node: &RaftNode) {
        let metrics = node.metrics().borrow().clone();
        let last = metrics.last_log_index.unwrap_or(0);
        let applied = metrics.last_applied.map_or(0, |id| id.index);
        self.term.set(gauge(metrics.current_term));
        self.leader.set(gauge(metrics.current_leader.unwrap_or(0)));
        self.is_leader
            .set(i64::from(metrics.current_leader == Some(node.id())));
        self.last_log_index.set(gauge(last));
        self.applied_index.set(gauge(applied));
        self.apply_lag.set(gauge(last.saturating_sub(applied)));
        for (peer, failed) in node.peer_failed_attempts() {
            self.peer_failed_attempts
                .get_or_create(&PeerLabel { peer })
                .set(gauge(failed));
        }
    }

    fn read_state(&self, state: &ClusterState) {
        self.log_format.set(i64::from(state.log_format().0));
        self.workers.clear();
        for (worker_state, name) in [
            (WorkerState::Alive, "alive"),
            (WorkerState::Dead, "dead"),
            (WorkerState::Decommissioned, "decommissioned"),
        ] {
            let count = state
                .workers()
                .values()
                .filter(|w| w.state == worker_state)
                .count();
            self.workers
                .get_or_create(&state_label(name))
                .set(gauge(count as u64));
        }
        self.apps.set(gauge(state.apps().len() as u64));
        let preempted: u64 = state
            .reservations()
            .iter()
            .map(|room| u64::from(room.resources.cores))
            .sum();
        self.kept_cores
            .get_or_create(&KindLabel {
                kind: "preemption".to_owned(),
            })
            .set(gauge(preempted));
        self.gang_timeouts.clear();
        for style in [GangStyle::Soft, GangStyle::Hard] {
            let count = state
                .timed_out_gangs()
                .values()
                .filter(|t| t.style == style)
                .count();
            self.gang_timeouts
                .get_or_create(&StyleLabel {
                    style: style.to_string(),
                })
                .set(gauge(count as u64));
        }
        self.drivers.clear();
        for name in ["submitted", "running"] {
            self.drivers.get_or_create(&state_label(name)).set(0);
        }
        // What each leaf holds: live executors and running drivers.
        let mut used: BTreeMap<QueueName, (u64, u64)> = BTreeMap::new();
        for driver in state.drivers().values() {
            let name = match driver.state {
                DriverState::Submitted => "submitted",
                DriverState::Running => "running",
                _ => continue,
            };
            self.drivers.get_or_create(&state_label(name)).inc();
            if driver.state == DriverState::Running {
                let queue = used.entry(driver.desc.queue.clone()).or_default();
                queue.0 += u64::from(driver.desc.resources.cores);
                queue.1 += driver.desc.resources.memory_mb;
            }
        }
        for app in state.apps().values() {
            let queue = used.entry(app.desc.queue.clone()).or_default();
            for executor in app.executors.values() {
                queue.0 += u64::from(executor.resources.cores);
                queue.1 += executor.resources.memory_mb;
            }
        }
        for family in [
            &self.queue_cores_used,
            &self.queue_memory_used_mb,
            &self.queue_prior,
        ] {
            family.clear();
        }
        self.queue_threshold.clear();
        self.queue_max_capacity.clear();
        self.queue_capacity.clear();
        // `default` exists even when no queue configuration names it.
        let queues = with_default(&state.queues());
        for (queue, view) in queues.iter().zip(views(&queues, &used)) {
            let name = QueueLabel {
                queue: queue.name.to_string(),
            };
            self.queue_cores_used
                .get_or_create(&name)
                .set(gauge(view.cores_used));
            self.queue_memory_used_mb
                .get_or_create(&name)
                .set(gauge(view.memory_used_mb));
            if let Some(capacity) = queue.capacity {
                self.queue_capacity.get_or_create(&name).set(capacity);
            }
            self.queue_prior
                .get_or_create(&name)
                .set(i64::from(queue.prior));
            self.queue_threshold
                .get_or_create(&name)
                .set(queue.threshold);
            self.queue_max_capacity
                .get_or_create(&name)
                .set(queue.max_capacity);
        }
        self.read_users(state);
    }

    /// What each named user has in each queue (YARN's per-user queue metrics).
    fn read_users(&self, state: &ClusterState) {
        self.user_active.clear();
        self.user_cores_used.clear();
        let labels = |queue: &QueueName, user: &str| UserLabels {
            queue: queue.to_string(),
            user: user.to_owned(),
        };
        for app in state.apps().values() {
            let Some(user) = state.app_user(&app.id) else {
                continue;
            };
            let at = labels(&app.desc.queue, user);
            self.user_active.get_or_create(&at).inc();
            self.user_cores_used
                .get_or_create(&at)
                .inc_by(gauge(app.cores_granted));
        }
        for driver in state.drivers().values() {
            let Some(owner) = state.driver_owner(&driver.id) else {
                continue;
            };
            let at = labels(&driver.desc.queue, &owner.user);
            self.user_active.get_or_create(&at).inc();
            let cores = self.user_cores_used.get_or_create(&at);
            if driver.state == DriverState::Running {
                cores.inc_by(i64::from(driver.desc.resources.cores));
            }
        }
    }
}

fn state_label(state: &str) -> StateLabel {
    StateLabel {
        state: state.to_owned(),
    }
}

/// A count as a gauge value, saturating.
fn gauge(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use muster_core::ids::Timestamp;
    use muster_core::model::PassConfig;
    use muster_core::resources::Resources;
    use muster_state::commands::{
        AddUser, By, EndGangWait, RaiseLogFormat, RegisterWorker, SubmitApp, SubmitDriver,
        SubmitGang, plan_op,
    };
    use muster_state::model::{AppDescription, DriverDescription};
    use muster_state::version::LogFormat;
    use muster_state::{Command, Op};

    use super::*;

    fn apply(state: &mut ClusterState, op: Op) {
        let command = Command {
            at: Timestamp(0),
            request_id: None,
            term: None,
            op,
        };
        state.apply(&command).expect("applies");
    }

    fn by_alice(op: Op) -> Op {
        Op::By(By {
            user: "alice".into(),
            generation: 1,
            op: Box::new(op),
        })
    }

    #[test]
    fn each_named_users_work_is_counted_by_queue() {
        let mut state = ClusterState::default();
        apply(
            &mut state,
            Op::AddUser(AddUser {
                name: "alice".into(),
                admin: false,
            }),
        );
        let app = AppDescription {
            name: "etl".into(),
            user: "claimed".into(),
            queue: QueueName::default(),
            cores_max: None,
            executor_cores: None,
            executor_memory_mb: 512,
            executor_resources: BTreeMap::new(),
            command: "/bin/true".into(),
            args: Vec::new(),
            env: BTreeMap::new(),
        };
        apply(
            &mut state,
            by_alice(Op::SubmitApp(SubmitApp {
                desc: app.clone(),
                executor_limit: None,
            })),
        );
        let driver = DriverDescription {
            name: "d".into(),
            queue: QueueName::default(),
            resources: Resources::new(1, 256),
            command: "/bin/true".into(),
            args: Vec::new(),
            env: BTreeMap::new(),
            supervise: false,
        };
        apply(
            &mut state,
            by_alice(Op::SubmitDriver(SubmitDriver { desc: driver })),
        );
        // The cluster's own credential's work is nobody's.
        apply(
            &mut state,
            Op::SubmitApp(SubmitApp {
                desc: app,
                executor_limit: None,
            }),
        );
        apply(
            &mut state,
            Op::RegisterWorker(RegisterWorker {
                id: "w1".into(),
                host: "h".into(),
                address: "h:1".into(),
                resources: Resources::new(8, 8192),
                fence_grace_ms: None,
            }),
        );
        let plan = muster_core::schedule(&state.scheduling_snapshot(PassConfig::default()))
            .expect("a valid snapshot");
        apply(&mut state, plan_op(&plan));
        let metrics = Metrics::new();
        metrics.read_state(&state);
        metrics.built_from(&muster_raft::this_build("1a72777c4f0e".into()));
        let mut text = String::new();
        encode(&mut text, &metrics.registry).unwrap();
        let build_info = format!(
            r#"muster_build_info{{version="{}",commit="1a72777c4f0e"}} 1"#,
            env!("CARGO_PKG_VERSION")
        );
        for line in [
            build_info.as_str(),
            "muster_log_format 1",
            r#"muster_user_active{queue="default",user="alice"} 2"#,
            // Her driver's core and her app's 7 executor cores; the other app got none.
            r#"muster_user_cores_used{queue="default",user="alice"} 8"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in {text}");
        }
        assert!(!text.contains(r#"user="claimed""#), "{text}");
    }

    #[test]
    fn gangs_that_waited_their_timeout_are_counted_by_style_ended_ones_too() {
        let mut state = ClusterState::default();
        apply(
            &mut state,
            Op::RaiseLogFormat(RaiseLogFormat {
                to: LogFormat::NEWEST,
            }),
        );
        let gang = || {
            Op::SubmitGang(SubmitGang {
                app: SubmitApp {
                    desc: AppDescription {
                        name: "gang".into(),
                        user: String::new(),
                        queue: QueueName::default(),
                        cores_max: Some(4),
                        executor_cores: Some(1),
                        executor_memory_mb: 512,
                        executor_resources: BTreeMap::new(),
                        command: "/bin/true".into(),
                        args: Vec::new(),
                        env: BTreeMap::new(),
                    },
                    executor_limit: None,
                },
                min_executors: 4,
                driver: None,
            })
        };
        for style in [GangStyle::Soft, GangStyle::Hard, GangStyle::Hard] {
            apply(&mut state, gang());
            let app = state.apps().keys().last().unwrap().clone();
            apply(
                &mut state,
                Op::EndGangWait(EndGangWait {
                    work: muster_core::ids::WorkId::App(app),
                    style,
                    waited_ms: 900_000,
                }),
            );
        }
        let metrics = Metrics::new();
        metrics.read_state(&state);
        let mut text = String::new();
        encode(&mut text, &metrics.registry).unwrap();
        for line in [
            r#"muster_gang_timeouts{style="soft"} 1"#,
            r#"muster_gang_timeouts{style="hard"} 2"#,
            r#"muster_kept_cores{kind="preemption"} 0"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in {text}");
        }
    }
}
