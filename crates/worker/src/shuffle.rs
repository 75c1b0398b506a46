//! Spark's external shuffle service on a worker, as a standalone Worker runs it with
//! `spark.shuffle.service.enabled`: Spark's own `ExternalShuffleService` from the worker's
//! `SPARK_HOME` serves the shuffle files of this host's executors after they exit, so that
//! dynamic allocation can give an executor back without losing its output.
//!
//! The [`Supervisor`] runs it as [`Workload::ShuffleService`]: started again after a failure,
//! adopted by the next agent on the work dir. [`keep_running`] starts it whenever it does not
//! run and probes its port. Its local dirs (`spark.local.dir`) are its own directory, where it
//! keeps the executors that registered with it in a database (a restarted service still serves
//! what they wrote), and the work dir's `local/`, under which the executors write into their
//! application's directory: the service serves files only from under its local dirs. The
//! worker removes an application's directory once the leader says the application ended.
//! Executors learn the service's port from [`PORT_VARIABLE`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use muster_core::resources::Resources;
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::supervisor::{
    LOCAL_DIRECTORY, LaunchSpec, SHUFFLE_SERVICE_DIRECTORY, Supervisor, Workload,
};

/// The variable that gives executors the port of their worker's shuffle service.
pub const PORT_VARIABLE: &str = "MUSTER_SHUFFLE_SERVICE_PORT";

/// How often the service is checked on.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// Spark's class for the service, which `spark-class` runs with Spark's daemon settings
/// (`SPARK_DAEMON_MEMORY`, `SPARK_DAEMON_JAVA_OPTS`, `SPARK_SHUFFLE_OPTS`).
const SERVICE_CLASS: &str = "org.apache.spark.deploy.ExternalShuffleService";

/// How a worker runs its shuffle service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShuffleServiceConfig {
    /// The Spark that runs it.
    pub spark_home: PathBuf,
    /// The port it listens on (`spark.shuffle.service.port`).
    pub port: u16,
}

/// The service as last seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShuffleServiceStatus {
    /// Its port.
    pub port: u16,
    /// It accepts connections.
    pub ready: bool,
    /// Times it was started again after it failed.
    pub restarts: u32,
}

impl ShuffleServiceConfig {
    /// The service of the Spark in `spark_home`, on `port`.
    ///
    /// # Errors
    ///
    /// `spark_home` holds no `bin/spark-class`, or `port` is 0: the message says which.
    pub fn new(spark_home: &Path, port: u16) -> Result<Self, String> {
        if port == 0 {
            return Err("the shuffle service needs a port other than 0".to_owned());
        }
        let config = Self {
            spark_home: spark_home.to_path_buf(),
            port,
        };
        if !config.spark_class().is_file() {
            return Err(format!(
                "the shuffle service runs Spark's own, and {} is not there: set SPARK_HOME to a Spark",
                config.spark_class().display()
            ));
        }
        Ok(config)
    }

    /// Spark's launcher of its classes, which runs the service.
    fn spark_class(&self) -> PathBuf {
        self.spark_home.join("bin").join("spark-class")
    }

    /// The service's launch for the work dir `work_dir` (absolute): Spark's class on the
    /// port, with its local dirs, after any options the worker's environment gives it.
    pub fn launch(&self, work_dir: &Path) -> LaunchSpec {
        let given = std::env::var("SPARK_SHUFFLE_OPTS").unwrap_or_default();
        // Its database goes in the first.
        let local_dirs = format!(
            "{},{}",
            work_dir.join(SHUFFLE_SERVICE_DIRECTORY).display(),
            work_dir.join(LOCAL_DIRECTORY).display()
        );
        let options = format!(
            "{given} -Dspark.shuffle.service.port={} -Dspark.local.dir={local_dirs}",
            self.port
        );
        LaunchSpec {
            workload: Workload::ShuffleService,
            command: self.spark_class().display().to_string(),
            args: vec![SERVICE_CLASS.to_owned()],
            env: [
                (
                    "SPARK_HOME".to_owned(),
                    self.spark_home.display().to_string(),
                ),
                ("SPARK_SHUFFLE_OPTS".to_owned(), options.trim().to_owned()),
            ]
            .into(),
            resources: Resources::default(),
            supervise: true,
            credential: None,
            addresses: Default::default(),
        }
    }
}

/// Keeps the service running under `supervisor`, and publishes how it is on `status` and in
/// `metrics` every [`PROBE_INTERVAL`]. Runs until dropped.
pub async fn keep_running(
    supervisor: Arc<Supervisor>,
    config: ShuffleServiceConfig,
    metrics: Arc<Metrics>,
    status: watch::Sender<ShuffleServiceStatus>,
) {
    let mut ticks = tokio::time::interval(PROBE_INTERVAL);
    let mut failing = false;
    let work_dir = supervisor.canonical_work_dir();
    loop {
        ticks.tick().await;
        // Not running: never started, adopted ended, or over without a restart.
        if supervisor.pid(&Workload::ShuffleService).is_none() {
            let launched = std::fs::create_dir_all(work_dir.join(LOCAL_DIRECTORY))
                .map_err(|e| e.to_string())
                .and_then(|()| {
                    supervisor
                        .launch(config.launch(&work_dir))
                        .map_err(|e| e.to_string())
                });
            match launched {
                Ok(pid) => {
                    failing = false;
                    tracing::info!(pid, port = config.port, "started the shuffle service");
                }
                Err(error) if !failing => {
                    failing = true;
                    tracing::error!(%error, "cannot start the shuffle service; trying again");
                }
                Err(_) => {}
            }
        }
        let ready = accepts(config.port).await;
        let restarts = supervisor
            .restarts(&Workload::ShuffleService)
            .map_or(0, |r| r.count);
        metrics.shuffle_service(ready, restarts);
        status.send_replace(ShuffleServiceStatus {
            port: config.port,
            ready,
            restarts,
        });
    }
}

/// Whether something accepts connections on `port` of this host.
async fn accepts(port: u16) -> bool {
    let connect = tokio::net::TcpStream::connect(("127.0.0.1", port));
    matches!(
        tokio::time::timeout(PROBE_INTERVAL / 2, connect).await,
        Ok(Ok(_))
    )
}
