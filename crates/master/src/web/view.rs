//! The cluster status as one typed view, built once from a status reply ([`StatusView::of`]).
//! Serialized, it is the JSON `muster status --json` prints and the master's `/json` serves;
//! the status pages and the client's tables read its fields.
//!
//! What is not set is `None` (`null` in JSON): a driver's worker before it is placed, a
//! process id not reported yet, a reason for something that does not wait. Custom resources
//! (`gpu`, ...) are a map by name, empty when none, as in `muster plan`'s snapshots; their
//! addresses a map of lists by name. A process shows what it uses where its worker measures
//! it (the leader's view: `None` in a follower's local status). States serialize as their
//! short names (`ALIVE`, `RUNNING`).

use std::collections::{BTreeMap, HashMap};

use muster_core::access::QueueSpec;
use muster_core::ids::QueueName;
use muster_core::model::{GangStyle, OrderingPolicy};
use muster_core::queues::{self, QueueView};
use muster_proto::exit;
use muster_proto::v1::{
    self, AddressList, AppState, DriverState, ExecutorState, MemberRole, ProcessUsage,
    RecoveryState, Resources, StatusReply, WorkerState,
};
use muster_state::version::LogFormat;
use serde::Serialize;

/// The whole status.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StatusView {
    /// The leader's node id; 0 when none is known.
    pub leader: u64,
    /// The Raft term.
    pub term: u64,
    /// The index of the last entry the answering master applied.
    pub applied_index: u64,
    /// The leader's recovery.
    pub recovery_state: RecoveryState,
    /// The cluster's effective log format: what its log and snapshots may hold (a master of
    /// release 0.1.0 does not say: its cluster is at the first).
    pub log_format: u32,
    /// The release that introduced that format: masters of older releases can no longer
    /// join.
    pub log_format_release: String,
    /// The answering master holds the log format where it is while it leads, even once
    /// every member reads a newer one (`hold_log_format`).
    pub log_format_held: bool,
    /// Why the masters' preemption settings can never stop an executor, if they cannot.
    pub preemption_warning: Option<String>,
    /// The masters.
    pub members: Vec<MemberView>,
    /// Every worker the log knows.
    pub workers: Vec<WorkerView>,
    /// Active applications.
    pub apps: Vec<AppView>,
    /// Ended applications, the most recent last.
    pub completed_apps: Vec<EndedAppView>,
    /// Drivers, active and ended: all of them, or the page asked for.
    pub drivers: Vec<DriverView>,
    /// How many drivers the cluster holds, whichever of them `drivers` lists.
    pub driver_counts: DriverCountsView,
    /// When `drivers` is a page and more follow: the driver the next page starts from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drivers_next: Option<String>,
    /// The queue tree, parents before their children.
    pub queues: Vec<QueueRow>,
    /// Named users.
    pub users: Vec<UserView>,
    /// Room kept for work that preempted, or for a waiting gang.
    pub kept: Vec<KeptView>,
}

/// Drivers by where they are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct DriverCountsView {
    /// Waiting to start.
    pub waiting: u32,
    /// Started, not ended.
    pub running: u32,
    /// Ended, and retained.
    pub ended: u32,
}

/// A master.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemberView {
    /// Its node id.
    pub id: u64,
    /// Its Raft address.
    pub addr: String,
    /// Leader, follower or learner.
    pub role: MemberRole,
    /// Whether the leader has not heard from it lately.
    pub silent: bool,
    /// The build it runs, as the leader last learned it.
    pub build: Option<BuildView>,
}

/// A build of Muster that a master or a worker runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BuildView {
    /// Its release.
    pub version: String,
    /// The commit it was built from; empty when not known.
    pub commit: String,
    /// The newest log format it reads (masters only).
    pub log_format: Option<u32>,
}

impl BuildView {
    /// The release, and the commit when known: `0.2.0 (1a72777c4f0e)`; `unknown` for none.
    pub fn line(build: Option<&Self>) -> String {
        match build {
            None => "unknown".to_owned(),
            Some(build) if build.commit.is_empty() => build.version.clone(),
            Some(build) => format!("{} ({})", build.version, build.commit),
        }
    }
}

fn build(b: &v1::BuildInfo) -> BuildView {
    BuildView {
        version: b.version.clone(),
        commit: b.commit.clone(),
        log_format: (b.log_format > 0).then_some(b.log_format),
    }
}

/// A worker.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorkerView {
    /// Its id.
    pub id: String,
    /// Its host.
    pub host: String,
    /// ALIVE, DEAD or DECOMMISSIONED.
    pub state: WorkerState,
    /// Whether it is being drained.
    pub draining: bool,
    /// Its cores.
    pub cores: u32,
    /// Cores granted there.
    pub cores_used: u32,
    /// Its memory in MB.
    pub memory_mb: u64,
    /// Memory granted there, in MB.
    pub memory_used_mb: u64,
    /// Its custom resources, by name.
    pub resources: BTreeMap<String, u32>,
    /// Custom resources granted there, by name.
    pub resources_used: BTreeMap<String, u32>,
    /// The addresses it named, by resource.
    pub addresses: BTreeMap<String, Vec<String>>,
    /// The build its agent runs, as it told the leader.
    pub build: Option<BuildView>,
    /// Its shuffle service, when it runs one.
    pub shuffle_service: Option<ShuffleServiceView>,
    /// The Spark its drivers run Spark submissions with, as its agent told the leader;
    /// empty when it has none, unset when the agent did not say.
    pub spark_home: Option<String>,
}

/// Spark's external shuffle service on a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ShuffleServiceView {
    /// Its port.
    pub port: u32,
    /// It accepts connections.
    pub ready: bool,
    /// Times it was started again after it failed.
    pub restarts: u32,
}

impl ShuffleServiceView {
    /// `:7337 up`, `:7337 down, restarted 2 times`; `-` for none.
    pub fn line(service: Option<&Self>) -> String {
        let Some(service) = service else {
            return "-".to_owned();
        };
        let state = if service.ready { "up" } else { "down" };
        match service.restarts {
            0 => format!(":{} {state}", service.port),
            1 => format!(":{} {state}, restarted once", service.port),
            n => format!(":{} {state}, restarted {n} times", service.port),
        }
    }
}

/// An active application.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AppView {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its queue.
    pub queue: String,
    /// Who submitted it, when a named user did.
    pub user: Option<String>,
    /// WAITING or RUNNING.
    pub state: AppState,
    /// Cores its executors hold.
    pub cores_granted: u64,
    /// The executors of its own size it needs at once, if it is a gang.
    pub min_executors: Option<u32>,
    /// Why it is no longer a gang, if it waited its gang's timeout.
    pub gang_timed_out: Option<String>,
    /// Why it waits for more, if it does.
    pub waiting: Option<String>,
    /// Its own web UI, if it gave one.
    pub ui_address: Option<String>,
    /// When it was submitted, in Unix milliseconds.
    pub submitted_at_ms: u64,
    /// The memory each of its executors is granted, in MB (for Spark, heap and overhead);
    /// 0 from a master of 0.3.0, which does not say.
    pub executor_memory_mb: u64,
    /// The cores of each of its executors, when it asked for a number.
    pub executor_cores: Option<u32>,
    /// The cluster-mode driver that runs it, if one does.
    pub driver: Option<String>,
    /// Its priority in its queue: higher is served first.
    pub priority: i32,
    /// Its executors.
    pub executors: Vec<ExecutorView>,
    /// Its ended executors the masters keep, oldest first.
    pub ended_executors: Vec<ExecutorView>,
}

/// An executor.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ExecutorView {
    /// Its id in its application.
    pub id: u32,
    /// Its worker.
    pub worker: String,
    /// Its cores.
    pub cores: u32,
    /// Its memory in MB.
    pub memory_mb: u64,
    /// Its custom resources, by name.
    pub resources: BTreeMap<String, u32>,
    /// The addresses it holds, by resource.
    pub addresses: BTreeMap<String, Vec<String>>,
    /// LAUNCHING, RUNNING, or how it ended.
    pub state: ExecutorState,
    /// Its process id, once reported.
    pub pid: Option<u32>,
    /// What it uses, where measured.
    pub usage: Option<UsageView>,
    /// Its exit code, once it exited.
    pub exit_code: Option<i32>,
    /// The application's resource profile it is of, when not the application's own size.
    #[serde(skip_serializing_if = "is_own_size")]
    pub resource_profile: u32,
}

/// An ended application.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EndedAppView {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its queue.
    pub queue: String,
    /// Who submitted it, when a named user did.
    pub user: Option<String>,
    /// How it ended.
    pub state: AppState,
    /// Why it was no longer a gang, if it waited its gang's timeout (why it failed, for a
    /// hard one).
    pub gang_timed_out: Option<String>,
    /// When it was submitted, in Unix milliseconds.
    pub submitted_at_ms: u64,
    /// When it ended, in Unix milliseconds.
    pub ended_at_ms: Option<u64>,
    /// It logged Spark events: Spark's history server has its jobs, stages and tasks.
    pub logs_events: bool,
    /// Its executors the masters keep, oldest first: where each ran and how it ended.
    pub ended_executors: Vec<ExecutorView>,
}

/// A driver.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DriverView {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// What it runs: its program, or a Spark submission's main class.
    pub program: Option<String>,
    /// Its queue.
    pub queue: String,
    /// Who submitted it, when a named user did.
    pub user: Option<String>,
    /// SUBMITTED, RUNNING, RELAUNCHING, or how it ended.
    pub state: DriverState,
    /// The cores it asked for.
    pub cores: u32,
    /// The memory it asked for, in MB.
    pub memory_mb: u64,
    /// The custom resources it asked for.
    pub resources: BTreeMap<String, u32>,
    /// When it was submitted, in Unix milliseconds.
    pub submitted_at_ms: u64,
    /// When it ended, in Unix milliseconds.
    pub ended_at_ms: Option<u64>,
    /// Where it runs or ran, once placed.
    pub worker: Option<String>,
    /// Its process id, once reported; none while a supervised driver waits to start again.
    pub pid: Option<u32>,
    /// A supervised driver's restarts on its worker, once it failed and was started again.
    pub restarts: Option<RestartsView>,
    /// For a driver that ended RELAUNCHING, the driver it was submitted again as.
    pub relaunched_as: Option<String>,
    /// Its priority in its queue: higher starts first.
    pub priority: i32,
    /// What it uses, where measured.
    pub usage: Option<UsageView>,
    /// The addresses it holds, by resource.
    pub addresses: BTreeMap<String, Vec<String>>,
    /// Its exit code, once it exited.
    pub exit_code: Option<i32>,
    /// What its exit code means, where Muster gave it one.
    pub exit_reason: Option<&'static str>,
    /// Why it waits, if it does.
    pub waiting: Option<String>,
    /// Why it no longer waits for room for its application's gang, if it waited the
    /// gang's timeout.
    pub gang_timed_out: Option<String>,
}

/// A supervised driver's restarts on its worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RestartsView {
    /// How many times it was started again.
    pub count: u32,
    /// The exit code of its last failed run, when it had one.
    pub last_exit_code: Option<i32>,
    /// While it waits to start again, in how many milliseconds it does.
    pub starts_again_in_ms: Option<u64>,
}

impl From<&v1::Restarts> for RestartsView {
    fn from(r: &v1::Restarts) -> Self {
        Self {
            count: r.count,
            last_exit_code: r.last_exit_code,
            starts_again_in_ms: (r.starts_again_in_ms != 0).then_some(r.starts_again_in_ms),
        }
    }
}

impl RestartsView {
    /// `restarted 3 times, last failed with exit 1`, and while it waits, `; starts again in
    /// 4.0 s`.
    pub fn describe(&self) -> String {
        let times = match self.count {
            1 => "once".to_owned(),
            n => format!("{n} times"),
        };
        let last = self
            .last_exit_code
            .map(|code| format!(", last failed with {}", exit::describe(code)))
            .unwrap_or_default();
        let next = self
            .starts_again_in_ms
            .map(|ms| format!("; starts again in {:.1} s", ms as f64 / 1000.0))
            .unwrap_or_default();
        format!("restarted {times}{last}{next}")
    }
}

/// A span of time for people: `850 ms`, `42 s`, `3.5 min`, `2.0 h`.
pub fn duration(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{} s", ms / 1000),
        60_000..3_600_000 => format!("{:.1} min", ms as f64 / 60_000.0),
        _ => format!("{:.1} h", ms as f64 / 3_600_000.0),
    }
}

/// What a process uses.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct UsageView {
    /// Memory in MB, as grants count it.
    pub memory_mb: u64,
    /// CPU time in seconds, where its worker counts it.
    pub cpu_seconds: Option<f64>,
}

/// A queue: its settings, and its place and use in the tree.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QueueRow {
    /// Its dotted path.
    pub name: String,
    /// Whether its work is served first (and may preempt).
    pub prior: bool,
    /// The share of a prior-hosting worker its work may use.
    pub threshold: f64,
    /// Its maximum share of its parent.
    pub max_capacity: f64,
    /// Its guaranteed share of its parent, when the queues have capacities.
    pub capacity: Option<f64>,
    /// The share of its room its running drivers may hold, when it sets its own (the
    /// masters' `driver_share` otherwise).
    pub driver_share: Option<f64>,
    /// How long its gangs may wait, in seconds, when it sets its own (the masters'
    /// `gang_timeout_s` otherwise).
    pub gang_timeout_s: Option<u64>,
    /// What becomes of its gangs that waited that long (`soft`, `hard`), when it sets it.
    pub gang_style: Option<GangStyle>,
    /// The order in which it serves its applications (`fifo`, `fair`, `drf`).
    pub ordering: OrderingPolicy,
    /// Its users' weights under `drf`, where it sets any.
    pub user_weights: BTreeMap<String, f64>,
    /// The most of its maximum one user may hold while others could take more, if it
    /// limits users.
    pub user_limit: Option<f64>,
    /// Who may submit besides the admins; `None`: everyone (admins only, for a prior queue).
    pub submit: Option<Vec<String>>,
    /// Who may administer it besides the admins.
    pub administer: Vec<String>,
    /// How many active apps and drivers one user may have in it.
    pub max_per_user: Option<u32>,
    /// How many parents it has.
    pub depth: usize,
    /// Whether it takes work.
    pub leaf: bool,
    /// Its guaranteed share of the ALIVE cores, when the queues have capacities.
    pub guaranteed_share: Option<f64>,
    /// The share of the ALIVE cores its work may hold.
    pub max_share: f64,
    /// Executor cores held below it.
    pub cores_used: u64,
    /// Executor memory held below it, in MB.
    pub memory_used_mb: u64,
}

impl QueueRow {
    /// Who may submit to it besides the admins, in words: `everyone`, `admins` or the names.
    pub fn submitters(&self) -> String {
        match &self.submit {
            Some(users) if users.iter().any(|u| u == "*") => "everyone".to_owned(),
            Some(users) if users.is_empty() => "admins".to_owned(),
            Some(users) => users.join(", "),
            None if self.prior => "admins".to_owned(),
            None => "everyone".to_owned(),
        }
    }
}

/// A named user.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct UserView {
    /// Their name.
    pub name: String,
    /// Whether they administer the cluster.
    pub admin: bool,
    /// Whether their credentials are revoked.
    pub revoked: bool,
    /// Their credentials' generation.
    pub generation: u64,
}

/// Room kept for work that preempted, or for a waiting gang.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KeptView {
    /// The driver or application it is kept for.
    pub owner: String,
    /// Where.
    pub worker: String,
    /// Its cores.
    pub cores: u32,
    /// Its memory in MB.
    pub memory_mb: u64,
    /// Its custom resources, by name.
    pub resources: BTreeMap<String, u32>,
    /// When it goes to its owner, by the leader's clock when it was kept; 0 for a waiting
    /// gang's, kept until the gang starts.
    pub until_ms: u64,
}

impl StatusView {
    /// What the answering master's hold of the log format means now, if it holds it: the
    /// newer format every member reads, if they all do, and how to raise the cluster to it.
    pub fn held_log_format(&self) -> Option<String> {
        if !self.log_format_held {
            return None;
        }
        let every_member_reads = self
            .members
            .iter()
            .map(|m| Some(m.build.as_ref()?.log_format.unwrap_or(LogFormat::FIRST.0)))
            .collect::<Option<Vec<u32>>>()
            .and_then(|formats| formats.into_iter().min())
            .filter(|&reads| reads > self.log_format);
        Some(match every_member_reads {
            Some(newer) => format!(
                "held (hold_log_format) although every master reads {}: the previous \
                 release may still be put back; `muster members raise-log-format` raises it",
                LogFormat(newer)
            ),
            None => "held (hold_log_format): once every master reads a newer one, it \
                     stays until `muster members raise-log-format`"
                .to_owned(),
        })
    }

    /// The view of `status`.
    pub fn of(status: &StatusReply) -> Self {
        let effective = LogFormat(status.log_format).max(LogFormat::FIRST);
        Self {
            leader: status.leader,
            term: status.term,
            applied_index: status.applied_index,
            recovery_state: status.recovery_state(),
            log_format: effective.0,
            log_format_release: effective.release().unwrap_or("a later release").to_owned(),
            log_format_held: status.log_format_held,
            preemption_warning: set(&status.preemption_warning),
            members: status.members.iter().map(member).collect(),
            workers: status.workers.iter().map(worker).collect(),
            apps: status.apps.iter().map(app).collect(),
            completed_apps: status.completed_apps.iter().map(ended_app).collect(),
            drivers: status.drivers.iter().map(driver).collect(),
            driver_counts: driver_counts(status),
            drivers_next: set(&status.drivers_next),
            queues: status
                .queues
                .iter()
                .zip(queue_views(status))
                .map(|(q, view)| queue(q, view))
                .collect(),
            users: status.users.iter().map(user).collect(),
            kept: status.kept.iter().map(kept).collect(),
        }
    }

    /// The view as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("a status view is always JSON")
    }
}

fn member(m: &v1::Member) -> MemberView {
    MemberView {
        id: m.id,
        addr: m.addr.clone(),
        role: m.role(),
        silent: m.silent,
        build: m.build.as_ref().map(build),
    }
}

fn worker(w: &v1::WorkerStatus) -> WorkerView {
    let (capacity, used) = (
        w.capacity.clone().unwrap_or_default(),
        w.used.clone().unwrap_or_default(),
    );
    WorkerView {
        id: w.id.clone(),
        host: w.host.clone(),
        state: w.state(),
        draining: w.draining,
        cores: capacity.cores,
        cores_used: used.cores,
        memory_mb: capacity.memory_mb,
        memory_used_mb: used.memory_mb,
        resources: custom(&capacity),
        resources_used: custom(&used),
        addresses: addresses(&w.addresses),
        build: w.build.as_ref().map(build),
        shuffle_service: w.shuffle_service.map(|s| ShuffleServiceView {
            port: s.port,
            ready: s.ready,
            restarts: s.restarts,
        }),
        spark_home: w.spark_home.clone(),
    }
}

fn app(a: &v1::AppStatus) -> AppView {
    AppView {
        id: a.id.clone(),
        name: a.name.clone(),
        queue: a.queue.clone(),
        user: set(&a.user),
        state: a.state(),
        cores_granted: a.cores_granted,
        min_executors: a.min_executors,
        gang_timed_out: set(&a.gang_timed_out),
        waiting: set(&a.waiting),
        ui_address: set(&a.ui_address),
        submitted_at_ms: a.submitted_at_ms,
        executor_memory_mb: a.executor_memory_mb,
        executor_cores: a.executor_cores,
        driver: set(&a.driver_id),
        priority: a.priority,
        executors: a.executors.iter().map(executor).collect(),
        ended_executors: a.ended_executors.iter().map(executor).collect(),
    }
}

fn executor(e: &v1::ExecutorStatus) -> ExecutorView {
    let resources = e.resources.clone().unwrap_or_default();
    ExecutorView {
        id: e.id,
        worker: e.worker.clone(),
        cores: resources.cores,
        memory_mb: resources.memory_mb,
        resources: custom(&resources),
        addresses: addresses(&e.addresses),
        state: e.state(),
        pid: (e.pid != 0).then_some(e.pid),
        usage: e.usage.as_ref().map(usage),
        exit_code: e.exit_code,
        resource_profile: e.resource_profile,
    }
}

fn is_own_size(profile: &u32) -> bool {
    *profile == 0
}

fn ended_app(a: &v1::AppStatus) -> EndedAppView {
    EndedAppView {
        id: a.id.clone(),
        name: a.name.clone(),
        queue: a.queue.clone(),
        user: set(&a.user),
        state: a.state(),
        gang_timed_out: set(&a.gang_timed_out),
        submitted_at_ms: a.submitted_at_ms,
        ended_at_ms: (a.ended_at_ms != 0).then_some(a.ended_at_ms),
        logs_events: a.logs_events,
        ended_executors: a.ended_executors.iter().map(executor).collect(),
    }
}

fn driver(d: &v1::DriverStatus) -> DriverView {
    let resources = d.resources.clone().unwrap_or_default();
    DriverView {
        id: d.id.clone(),
        name: d.name.clone(),
        program: set(&d.program),
        queue: d.queue.clone(),
        user: set(&d.user),
        state: d.state(),
        cores: resources.cores,
        memory_mb: resources.memory_mb,
        resources: custom(&resources),
        submitted_at_ms: d.submitted_at_ms,
        ended_at_ms: (d.ended_at_ms != 0).then_some(d.ended_at_ms),
        worker: set(&d.worker),
        pid: (d.pid != 0).then_some(d.pid),
        restarts: d.restarts.as_ref().map(RestartsView::from),
        relaunched_as: set(&d.relaunched_as),
        priority: d.priority,
        usage: d.usage.as_ref().map(usage),
        addresses: addresses(&d.addresses),
        exit_code: d.exit_code,
        exit_reason: d.exit_code.and_then(exit::reason),
        waiting: set(&d.waiting),
        gang_timed_out: set(&d.gang_timed_out),
    }
}

fn queue(q: &v1::Queue, view: QueueView) -> QueueRow {
    QueueRow {
        name: q.name.clone(),
        prior: q.prior,
        threshold: q.threshold,
        max_capacity: q.max_capacity,
        capacity: q.capacity,
        driver_share: q.driver_share,
        gang_timeout_s: q.gang_timeout_s,
        gang_style: muster_proto::convert::gang_style(q),
        ordering: muster_proto::convert::ordering(q),
        user_weights: q.user_weights.clone().into_iter().collect(),
        user_limit: q.user_limit,
        submit: q.submit.as_ref().map(|list| list.users.clone()),
        administer: q.administer.clone(),
        max_per_user: q.max_per_user,
        depth: view.depth,
        leaf: view.leaf,
        guaranteed_share: view.guaranteed_share,
        max_share: view.max_share,
        cores_used: view.cores_used,
        memory_used_mb: view.memory_used_mb,
    }
}

fn user(u: &v1::User) -> UserView {
    UserView {
        name: u.name.clone(),
        admin: u.admin,
        revoked: u.revoked,
        generation: u.generation,
    }
}

fn kept(k: &v1::KeptRoom) -> KeptView {
    let resources = k.resources.clone().unwrap_or_default();
    KeptView {
        owner: k.owner.clone(),
        worker: k.worker.clone(),
        cores: resources.cores,
        memory_mb: resources.memory_mb,
        resources: custom(&resources),
        until_ms: k.until_ms,
    }
}

/// The counts a master gives, or, from a master of 0.3.0, which gives none and every driver,
/// those of its drivers.
fn driver_counts(status: &StatusReply) -> DriverCountsView {
    if let Some(counts) = &status.driver_counts {
        return DriverCountsView {
            waiting: counts.waiting,
            running: counts.running,
            ended: counts.ended,
        };
    }
    let mut counts = DriverCountsView::default();
    for d in &status.drivers {
        match d.state() {
            v1::DriverState::Submitted => counts.waiting += 1,
            v1::DriverState::Running => counts.running += 1,
            _ => counts.ended += 1,
        }
    }
    counts
}

/// The status's queues in the tree, with the executor cores and memory held below each.
fn queue_views(status: &StatusReply) -> Vec<QueueView> {
    let mut used_by_leaf: BTreeMap<QueueName, (u64, u64)> = BTreeMap::new();
    for app in &status.apps {
        let used = used_by_leaf.entry(app.queue.as_str().into()).or_default();
        for executor in &app.executors {
            let resources = executor.resources.clone().unwrap_or_default();
            used.0 += u64::from(resources.cores);
            used.1 += resources.memory_mb;
        }
    }
    let configs: Vec<_> = status
        .queues
        .iter()
        .map(|q| QueueSpec::from(q).split().0)
        .collect();
    queues::views(&configs, &used_by_leaf)
}

/// A wire string that is empty when not set.
fn set(value: &str) -> Option<String> {
    (!value.is_empty()).then(|| value.to_owned())
}

/// What a process uses: memory in MB (as grants count it) and CPU time in seconds.
fn usage(usage: &ProcessUsage) -> UsageView {
    UsageView {
        memory_mb: usage.memory_bytes / (1024 * 1024),
        cpu_seconds: usage.cpu_ms.map(|ms| ms as f64 / 1000.0),
    }
}

/// Resource addresses by name, in name order.
fn addresses(lists: &HashMap<String, AddressList>) -> BTreeMap<String, Vec<String>> {
    lists
        .iter()
        .map(|(name, list)| (name.clone(), list.addresses.clone()))
        .collect()
}

/// The custom amounts of `resources`, by name.
fn custom(resources: &Resources) -> BTreeMap<String, u32> {
    resources.custom.clone().into_iter().collect()
}
