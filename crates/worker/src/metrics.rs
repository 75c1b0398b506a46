//! A worker's Prometheus metrics, served at `/metrics` on `muster worker --http` in the text
//! exposition format (`prometheus-client`): what it launched, how its processes ended, what
//! runs now, and its link to the leader.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use muster_core::resources::Usage;

use crate::supervisor::Workload;

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProcessLabels {
    kind: &'static str,
    /// The driver id, or `APP/EXECUTOR`.
    id: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndLabels {
    kind: &'static str,
    /// The exit code, or `killed` or `failed` (it could not be started).
    code: String,
}

/// Every metric a worker exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    processes: Family<KindLabel, Gauge>,
    launches: Family<KindLabel, Counter>,
    ends: Family<EndLabels, Counter>,
    connected: Gauge,
    unacknowledged: Gauge,
    memory: Family<ProcessLabels, Gauge>,
    cpu: Family<ProcessLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    shuffle_service_up: Gauge,
    shuffle_service_restarts: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// `driver`, `executor` or `shuffle-service`.
fn kind(workload: &Workload) -> &'static str {
    match workload {
        Workload::Driver { .. } => "driver",
        Workload::Executor { .. } => "executor",
        Workload::ShuffleService => "shuffle-service",
    }
}

impl Metrics {
    /// The metrics, registered and at zero.
    pub fn new() -> Self {
        let mut metrics = Self {
            registry: Registry::with_prefix("muster_worker"),
            processes: Family::default(),
            launches: Family::default(),
            ends: Family::default(),
            connected: Gauge::default(),
            unacknowledged: Gauge::default(),
            memory: Family::default(),
            cpu: Family::default(),
            shuffle_service_up: Gauge::default(),
            shuffle_service_restarts: Gauge::default(),
        };
        let r = &mut metrics.registry;
        r.register(
            "processes",
            "Drivers and executors running (or stopping), by kind, as of the last heartbeat or process change",
            metrics.processes.clone(),
        );
        r.register(
            "launches",
            "Processes started on the leader's request, by kind (a supervised driver's restarts not counted)",
            metrics.launches.clone(),
        );
        r.register(
            "process_ends",
            "Processes that ended, by kind and exit code (or `killed`, `oom` when the kernel killed it for going over its memory limit, `failed` when it could not start); a supervised driver's runs that are restarted are not counted",
            metrics.ends.clone(),
        );
        r.register(
            "leader_connected",
            "1 while attached to a leader",
            metrics.connected.clone(),
        );
        r.register(
            "unacknowledged_reports",
            "Process changes reported and not yet acknowledged by a leader",
            metrics.unacknowledged.clone(),
        );
        r.register(
            "process_memory_bytes",
            "Memory each running process holds, by kind and id, from its control group",
            metrics.memory.clone(),
        );
        r.register(
            "process_cpu_seconds",
            "CPU time each running process has taken, by kind and id, from its control group",
            metrics.cpu.clone(),
        );
        r.register(
            "shuffle_service_up",
            "1 while the worker's shuffle service accepts connections on its port",
            metrics.shuffle_service_up.clone(),
        );
        r.register(
            "shuffle_service_restarts",
            "Times the worker's shuffle service was started again after it failed, since the agent started",
            metrics.shuffle_service_restarts.clone(),
        );
        // At zero from the start, not absent until the first launch.
        for kind in ["driver", "executor"] {
            let _ = metrics.launches.get_or_create(&KindLabel { kind });
            let _ = metrics.processes.get_or_create(&KindLabel { kind });
        }
        metrics
    }

    /// The processes running now.
    pub(crate) fn running(&self, running: &[(Workload, u32)]) {
        for kind in ["driver", "executor"] {
            let count = running
                .iter()
                .filter(|(w, _)| self::kind(w) == kind)
                .count();
            self.processes
                .get_or_create(&KindLabel { kind })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }

    /// `workload` was started.
    pub(crate) fn launched(&self, workload: &Workload) {
        let kind = kind(workload);
        self.launches.get_or_create(&KindLabel { kind }).inc();
    }

    /// `workload`'s process ended: `code` is its exit code, `killed` or `failed`.
    pub(crate) fn ended(&self, workload: &Workload, code: String) {
        let kind = kind(workload);
        self.ends.get_or_create(&EndLabels { kind, code }).inc();
    }

    /// What each running process uses: the processes not listed are gone from the metrics.
    pub(crate) fn usage(&self, usage: &[(Workload, Usage)]) {
        self.memory.clear();
        self.cpu.clear();
        for (workload, usage) in usage {
            let labels = ProcessLabels {
                kind: kind(workload),
                id: match workload {
                    Workload::Executor { app, executor } => format!("{app}/{executor}"),
                    Workload::Driver { driver } => driver.to_string(),
                    Workload::ShuffleService => String::new(),
                },
            };
            self.memory
                .get_or_create(&labels)
                .set(i64::try_from(usage.memory_bytes).unwrap_or(i64::MAX));
            if let Some(cpu_ms) = usage.cpu_ms {
                self.cpu.get_or_create(&labels).set(cpu_ms as f64 / 1000.0);
            }
        }
    }

    /// The shuffle service, as last probed.
    pub(crate) fn shuffle_service(&self, up: bool, restarts: u32) {
        self.shuffle_service_up.set(i64::from(up));
        self.shuffle_service_restarts.set(i64::from(restarts));
    }

    /// Whether a leader stream is open.
    pub(crate) fn connected(&self, connected: bool) {
        self.connected.set(i64::from(connected));
    }

    /// How many reports wait for a leader's acknowledgement.
    pub(crate) fn unacknowledged(&self, count: usize) {
        self.unacknowledged
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Every metric at zero, each family with one series of empty labels so that its label
    /// names show: what the book's metric reference is made from. A family added to
    /// [`Metrics`] belongs here too.
    pub fn sample() -> String {
        let metrics = Self::new();
        let _ = metrics.ends.get_or_create(&EndLabels::default());
        let _ = metrics.memory.get_or_create(&ProcessLabels::default());
        let _ = metrics.cpu.get_or_create(&ProcessLabels::default());
        metrics.render()
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("writing to a String");
        text
    }
}

/// Serves `/metrics` on `listener` (plain HTTP) until `shutdown` resolves.
///
/// # Errors
///
/// The listener fails.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(render))
        .with_state(metrics);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn render(State(metrics): State<Arc<Metrics>>) -> impl axum::response::IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        metrics.render(),
    )
}
