//! Spark's external shuffle service on a worker, as a standalone Worker runs it with
//! `spark.shuffle.service.enabled`: Spark's own `ExternalShuffleService` from the worker's
//! `SPARK_HOME` serves the shuffle files of this host's executors after they exit, so that
//! dynamic allocation can give an executor back without losing its output.
//!
//! The [`Supervisor`] runs it as [`Workload::ShuffleService`]: started again after a failure,
//! adopted by the next agent on the work dir if that agent runs it with the same port and
//! settings, else stopped ([`stop_unwanted`]). [`keep_running`] starts it whenever it does not
//! run and probes its port. With a secret, it authenticates the applications that use it
//! (`spark.authenticate`), which must then share that secret, as on a standalone cluster.
//!
//! Its local dirs (`spark.local.dir`) are its own directory, where it keeps the executors that
//! registered with it in a database (a restarted service still serves what they wrote), and
//! the work dir's `local/`, under which the executors write into their application's
//! directory: the service serves files only from under its local dirs. The worker removes an
//! application's directory once the leader says the application ended. Executors learn the
//! service's port from [`PORT_VARIABLE`].

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use muster_core::agent::ShuffleServiceStatus;
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
#[derive(Clone, PartialEq, Eq)]
pub struct ShuffleServiceConfig {
    /// The Spark that runs it.
    pub spark_home: PathBuf,
    /// The port it listens on (`spark.shuffle.service.port`).
    pub port: u16,
    /// Options for its JVM that the worker's environment gives (`SPARK_SHUFFLE_OPTS`).
    pub options: String,
    /// The secret of `spark.authenticate`, which every application that uses the service
    /// then shares with it, as on a standalone cluster; `None` for a service that
    /// authenticates nobody.
    pub secret: Option<String>,
}

impl fmt::Debug for ShuffleServiceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShuffleServiceConfig")
            .field("spark_home", &self.spark_home)
            .field("port", &self.port)
            .field("options", &self.options)
            .field("authenticates", &self.secret.is_some())
            .finish()
    }
}

impl ShuffleServiceConfig {
    /// The service of the Spark in `spark_home`, on `port`, with the JVM `options` the
    /// worker's environment gives, authenticating applications with `secret` if there is one.
    ///
    /// # Errors
    ///
    /// `spark_home` holds no `bin/spark-class`, `port` is 0, or the secret is empty: the
    /// message says which.
    pub fn new(
        spark_home: &Path,
        port: u16,
        options: String,
        secret: Option<String>,
    ) -> Result<Self, String> {
        if port == 0 {
            return Err("the shuffle service needs a port other than 0".to_owned());
        }
        if secret.as_ref().is_some_and(String::is_empty) {
            return Err("the shuffle service's secret is empty".to_owned());
        }
        let config = Self {
            spark_home: spark_home.to_path_buf(),
            port,
            options,
            secret,
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
    /// port, with its local dirs, after the options the worker's environment gives it. With
    /// a secret, `spark.authenticate` is on and the secret is in the environment variable
    /// Spark reads it from, out of sight of other users' `ps`.
    pub fn launch(&self, work_dir: &Path) -> LaunchSpec {
        // Its database goes in the first.
        let local_dirs = format!(
            "{},{}",
            work_dir.join(SHUFFLE_SERVICE_DIRECTORY).display(),
            work_dir.join(LOCAL_DIRECTORY).display()
        );
        let mut options = vec![
            self.options.trim().to_owned(),
            format!("-Dspark.shuffle.service.port={}", self.port),
            option_word(&format!("-Dspark.local.dir={local_dirs}")),
        ];
        let mut env = BTreeMap::from([(
            "SPARK_HOME".to_owned(),
            self.spark_home.display().to_string(),
        )]);
        if let Some(secret) = &self.secret {
            options.push("-Dspark.authenticate=true".to_owned());
            env.insert(AUTH_SECRET_VARIABLE.to_owned(), secret.clone());
        }
        options.retain(|option| !option.is_empty());
        env.insert("SPARK_SHUFFLE_OPTS".to_owned(), options.join(" "));
        LaunchSpec {
            workload: Workload::ShuffleService,
            command: self.spark_class().display().to_string(),
            args: vec![SERVICE_CLASS.to_owned()],
            env,
            resources: Resources::default(),
            supervise: true,
            credential: None,
            addresses: Default::default(),
        }
    }
}

/// Where Spark's daemons read the secret of `spark.authenticate` from when their settings
/// do not give it.
const AUTH_SECRET_VARIABLE: &str = "_SPARK_AUTH_SECRET";

/// `option` as one word of the options Spark's launcher splits (`SPARK_SHUFFLE_OPTS`): as
/// it is when it holds no white space, quote or backslash, else double-quoted with `"` and
/// `\` escaped, as the launcher's parser reads quotes.
fn option_word(option: &str) -> String {
    let plain = !option
        .chars()
        .any(|c| c.is_whitespace() || matches!(c, '"' | '\'' | '\\'));
    if plain {
        return option.to_owned();
    }
    let mut word = String::from('"');
    for c in option.chars() {
        if matches!(c, '"' | '\\') {
            word.push('\\');
        }
        word.push(c);
    }
    word.push('"');
    word
}

/// Stops the service a predecessor ran on this work dir unless it is the one `wanted`
/// describes: none is wanted, or it listens on another port or runs with other settings or
/// another Spark. [`keep_running`] then starts the wanted one once it is gone; its database
/// keeps the executors that registered with the one stopped.
pub fn stop_unwanted(supervisor: &Supervisor, wanted: Option<&ShuffleServiceConfig>) {
    let Some(running) = supervisor.launched(&Workload::ShuffleService) else {
        return;
    };
    let launch = wanted.map(|config| config.launch(&supervisor.canonical_work_dir()));
    if launch.as_ref() == Some(&running) {
        return;
    }
    if supervisor.kill(&Workload::ShuffleService, None) {
        match launch {
            None => tracing::info!(
                "stopping the shuffle service a predecessor ran: this agent runs none"
            ),
            Some(_) => tracing::info!(
                "stopping the shuffle service a predecessor ran with other settings, to start \
                 this agent's"
            ),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config(secret: Option<&str>) -> ShuffleServiceConfig {
        ShuffleServiceConfig {
            spark_home: PathBuf::from("/opt/spark"),
            port: 7337,
            options: " -Xmx1g ".to_owned(),
            secret: secret.map(str::to_owned),
        }
    }

    #[test]
    fn a_work_dir_with_spaces_or_quotes_is_one_quoted_word_of_the_options() {
        let launch = config(None).launch(Path::new("/data/work \"w\\1\""));
        assert_eq!(
            launch.env["SPARK_SHUFFLE_OPTS"],
            "-Xmx1g -Dspark.shuffle.service.port=7337 \"-Dspark.local.dir=/data/work \
             \\\"w\\\\1\\\"/shuffle-service,/data/work \\\"w\\\\1\\\"/local\""
        );
        let plain = config(None).launch(Path::new("/data/work"));
        assert_eq!(
            plain.env["SPARK_SHUFFLE_OPTS"],
            "-Xmx1g -Dspark.shuffle.service.port=7337 \
             -Dspark.local.dir=/data/work/shuffle-service,/data/work/local"
        );
    }

    #[test]
    fn a_secret_turns_authentication_on_and_stays_out_of_the_command_line() {
        let launch = config(Some("s3cret")).launch(Path::new("/data/work"));
        let options = &launch.env["SPARK_SHUFFLE_OPTS"];
        assert!(options.ends_with(" -Dspark.authenticate=true"), "{options}");
        assert!(!options.contains("s3cret"), "{options}");
        assert_eq!(launch.env[AUTH_SECRET_VARIABLE], "s3cret");
        assert!(!format!("{:?}", config(Some("s3cret"))).contains("s3cret"));
        assert_ne!(launch, config(None).launch(Path::new("/data/work")));
    }
}
