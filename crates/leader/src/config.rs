//! The master's settings file (`muster master --config FILE`) and queue files: parsed and
//! checked one way wherever they are used (the master, `muster queues`, `muster simulate`),
//! every error naming the file and the field. The master reads them from disk.

use std::path::{Path, PathBuf};
use std::time::Duration;

use muster_core::access::QueueSpec;
use muster_core::ids::QueueName;
use muster_core::model::{GangStyle, PassConfig, QueueConfig, validate_queues};
use muster_core::queues::check_paths;
use muster_state::StateConfig;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::{GangTimeout, LeaderConfig, PreemptionPolicy};

/// What `muster master --config FILE` may set. Every field is optional. The scheduling and
/// retry settings must be the same on every master.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MasterFile {
    /// Seconds without a heartbeat before a worker is lost.
    pub worker_timeout_s: Option<f64>,
    /// Seconds a new leader waits for known workers and applications.
    pub recovery_timeout_s: Option<f64>,
    /// Seconds an application's client may be gone before its application is finished.
    pub app_grace_s: Option<f64>,
    /// Seconds within which workers heartbeat at the least (a leader that stood still for
    /// three of these blames no worker for the silence).
    pub heartbeat_interval_s: Option<f64>,
    /// Scheduling settings, as in a `muster plan` snapshot's `config` (the seed is ignored).
    pub scheduling: Option<PassConfig>,
    /// Spark's `spark.deploy.maxExecutorRetries`; negative disables.
    pub max_executor_retries: Option<i32>,
    /// Ended applications kept for status (`spark.deploy.retainedApplications`, 200).
    pub retained_apps: Option<usize>,
    /// Ended drivers kept for status (`spark.deploy.retainedDrivers`, 200).
    pub retained_drivers: Option<usize>,
    /// Prior queues whose waiting work may stop ordinary executors; off when unset.
    pub preemption: Option<PreemptionFile>,
    /// Seconds a gang may wait for all of its minimum before `gang_style` applies (900),
    /// where its queue sets none.
    pub gang_timeout_s: Option<f64>,
    /// What becomes of a gang that waited its timeout (`soft`), where its queue sets none.
    pub gang_style: Option<GangStyle>,
    /// Log entries applied between two snapshots of the state (10,000).
    pub snapshot_every: Option<u64>,
    /// Log entries kept behind a snapshot, for followers a little behind (1,000); a follower
    /// further behind is sent the snapshot.
    pub log_kept_after_snapshot: Option<u64>,
    /// Client writes the leader keeps waiting to be committed at the most (2,048); past it,
    /// it refuses the next with `RESOURCE_EXHAUSTED` and how long to wait, which clients
    /// honour.
    pub max_queued_writes: Option<usize>,
    /// Keep the cluster's log format where it is after an upgrade, until `muster members
    /// raise-log-format`: the previous release may be put back meanwhile.
    pub hold_log_format: bool,
}

/// `"preemption": {"queues": ["prod"], "delay_s": 5, "grace_s": 10, "max_fraction": 0.1,
/// "capacities": false, "within_queues": false}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreemptionFile {
    /// The prior queues whose work preempts.
    #[serde(default)]
    pub queues: Vec<QueueName>,
    /// Whether applications of ordinary queues below their guaranteed capacity preempt
    /// executors of queues above theirs (false).
    #[serde(default)]
    pub capacities: bool,
    /// Whether applications of ordinary leaves preempt executors of their own leaf's
    /// applications they outrank: of lower priority, or under `fair` and `drf` of holders
    /// that stay at or above their share (false).
    #[serde(default)]
    pub within_queues: bool,
    /// Seconds work waits for room before it preempts (5).
    #[serde(default = "preemption_delay")]
    pub delay_s: f64,
    /// Seconds the freed room is kept for it (10: the workers' kill grace).
    #[serde(default = "preemption_grace")]
    pub grace_s: f64,
    /// The most of the ALIVE cores one round may stop (0.1).
    #[serde(default = "preemption_fraction")]
    pub max_fraction: f64,
}

fn preemption_delay() -> f64 {
    5.0
}

fn preemption_grace() -> f64 {
    10.0
}

fn preemption_fraction() -> f64 {
    0.1
}

/// Why a settings or queue file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A field is missing, misspelt or out of range.
    #[error("{path}: {field}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The field's path.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A duration is not a positive number of seconds.
    #[error("{setting}: {value} is not a positive number of seconds")]
    Seconds {
        /// The setting.
        setting: &'static str,
        /// What was given.
        value: f64,
    },
    /// A share that is not in (0, 1].
    #[error("{setting}: {value} is not in (0, 1]")]
    Fraction {
        /// The setting.
        setting: &'static str,
        /// What was given.
        value: f64,
    },
}

/// Parses `text`, read from `path`, as JSON.
///
/// # Errors
///
/// The JSON does not match `T` (naming the field).
pub fn parse_json<T: DeserializeOwned>(text: &str, path: &Path) -> Result<T, ConfigError> {
    let mut json = serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(&mut json).map_err(|e| ConfigError::Invalid {
        path: path.to_owned(),
        field: e.path().to_string(),
        message: e.inner().to_string(),
    })
}

/// Parses `text`, read from `path`, as a queue file: a JSON list such as
/// `[{"name": "prod", "prior": true}, {"name": "default", "threshold": 0.8}]`, or a tree
/// with capacities such as `[{"name": "team", "capacity": 1}, {"name": "team.etl",
/// "capacity": 1}]`.
///
/// # Errors
///
/// As [`parse_json`], or a queue setting out of range (a duplicate name, a fraction outside
/// (0, 1]), or a malformed tree (a parent not listed, capacities that do not sum to 1).
pub fn parse_queues(text: &str, path: &Path) -> Result<Vec<QueueSpec>, ConfigError> {
    let queues: Vec<QueueSpec> = parse_json(text, path)?;
    check_queues(&queues, path)?;
    Ok(queues)
}

/// Checks queues read from `path` as a queue file's are: settings in range, one `default`,
/// parents before their children.
///
/// # Errors
///
/// The first queue setting that is out of range or inconsistent, naming its field.
pub fn check_queues(queues: &[QueueSpec], path: &Path) -> Result<(), ConfigError> {
    let configs: Vec<QueueConfig> = queues.iter().map(|q| q.split().0).collect();
    validate_queues(&configs)
        .and_then(|()| check_paths(queues))
        .map_err(|e| ConfigError::Invalid {
            path: path.to_owned(),
            field: e.field,
            message: e.message,
        })
}

/// `value` seconds as a duration, refusing zero, negative and non-finite values.
///
/// # Errors
///
/// [`ConfigError::Seconds`] naming `setting`.
pub fn seconds(setting: &'static str, value: f64) -> Result<Duration, ConfigError> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or(ConfigError::Seconds { setting, value })
}

impl PreemptionFile {
    fn policy(&self) -> Result<PreemptionPolicy, ConfigError> {
        if !(self.max_fraction > 0.0 && self.max_fraction <= 1.0) {
            return Err(ConfigError::Fraction {
                setting: "preemption max_fraction",
                value: self.max_fraction,
            });
        }
        Ok(PreemptionPolicy {
            capacities: self.capacities,
            within_queues: self.within_queues,
            queues: self.queues.iter().cloned().collect(),
            delay: seconds("preemption delay", self.delay_s)?,
            grace: seconds("preemption grace", self.grace_s)?,
            max_fraction: self.max_fraction,
        })
    }
}

impl MasterFile {
    /// The leader's settings: a flag given overrides the file, which overrides the
    /// defaults.
    ///
    /// # Errors
    ///
    /// A duration that is not a positive number of seconds, or a scheduling setting out of
    /// range.
    pub fn leader(
        &self,
        worker_timeout: Option<f64>,
        recovery_timeout: Option<f64>,
        queues: Option<Vec<QueueSpec>>,
    ) -> Result<LeaderConfig, ConfigError> {
        let defaults = LeaderConfig::default();
        let pass = self.scheduling.clone().unwrap_or_default();
        let checked = muster_core::Snapshot {
            config: pass.clone(),
            ..muster_core::Snapshot::default()
        };
        if let Err(error) = checked.validate() {
            return Err(ConfigError::Invalid {
                path: PathBuf::from("--config"),
                field: error.field.replacen("config.", "scheduling.", 1),
                message: error.message,
            });
        }
        let duration = |setting, value: Option<f64>, default| {
            value.map_or(Ok(default), |v| seconds(setting, v))
        };
        let preemption = self
            .preemption
            .as_ref()
            .map(PreemptionFile::policy)
            .transpose()?;
        if let Some((policy, queues)) = preemption.as_ref().zip(queues.as_ref())
            && let Some(message) =
                policy.never_preempts_under(queues.iter().map(|q| (&q.name, q.prior)))
        {
            return Err(ConfigError::Invalid {
                path: PathBuf::from("--config"),
                field: "preemption.queues".to_owned(),
                message,
            });
        }
        Ok(LeaderConfig {
            worker_timeout: duration(
                "worker timeout",
                worker_timeout.or(self.worker_timeout_s),
                defaults.worker_timeout,
            )?,
            recovery_timeout: duration(
                "recovery timeout",
                recovery_timeout.or(self.recovery_timeout_s),
                defaults.recovery_timeout,
            )?,
            app_grace: duration("app grace", self.app_grace_s, defaults.app_grace)?,
            heartbeat_interval: duration(
                "heartbeat interval",
                self.heartbeat_interval_s,
                defaults.heartbeat_interval,
            )?,
            pass,
            queues,
            preemption,
            gang_timeout: GangTimeout {
                after: duration(
                    "gang timeout",
                    self.gang_timeout_s,
                    defaults.gang_timeout.after,
                )?,
                style: self.gang_style.unwrap_or(defaults.gang_timeout.style),
            },
            ..defaults
        })
    }

    /// The replicated state's settings.
    pub fn state(&self) -> StateConfig {
        let defaults = StateConfig::default();
        StateConfig {
            max_executor_retries: self
                .max_executor_retries
                .unwrap_or(defaults.max_executor_retries),
            retained_apps: self.retained_apps.unwrap_or(defaults.retained_apps),
            retained_drivers: self.retained_drivers.unwrap_or(defaults.retained_drivers),
            ..defaults
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: &str = "settings.json";

    fn settings(text: &str) -> MasterFile {
        parse_json(text, Path::new(SETTINGS)).unwrap()
    }

    fn queues_error(text: &str) -> String {
        parse_queues(text, Path::new("queues.json"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn flags_override_the_file_which_overrides_the_defaults() {
        let master =
            settings(r#"{"worker_timeout_s": 30, "recovery_timeout_s": 20, "retained_apps": 5}"#);
        let leader = master.leader(Some(7.5), None, None).unwrap();
        assert_eq!(leader.worker_timeout, Duration::from_millis(7500));
        assert_eq!(leader.recovery_timeout, Duration::from_secs(20));
        assert_eq!(leader.app_grace, LeaderConfig::default().app_grace);
        assert_eq!(master.state().retained_apps, 5);
        assert_eq!(
            master
                .leader(Some(0.0), None, None)
                .unwrap_err()
                .to_string(),
            "worker timeout: 0 is not a positive number of seconds"
        );
    }

    #[test]
    fn bad_files_name_the_file_and_the_field() {
        let error = parse_json::<MasterFile>(r#"{"worker_timeout": 30}"#, Path::new(SETTINGS))
            .unwrap_err()
            .to_string();
        assert!(error.contains("unknown field `worker_timeout`"), "{error}");
        assert!(error.starts_with(SETTINGS), "{error}");

        let error =
            queues_error(r#"[{"name": "prod", "prior": true}, {"name": "batch", "threshold": 2}]"#);
        assert!(
            error.ends_with("queues[1].threshold: must be in (0, 1], got 2"),
            "{error}"
        );

        let share = settings(r#"{"scheduling": {"driver_share": 0}}"#);
        let error = share.leader(None, None, None).unwrap_err().to_string();
        assert_eq!(
            error,
            "--config: scheduling.driver_share: must be in (0, 1], got 0"
        );
        let error = queues_error(
            r#"[{"name": "team", "driver_share": 0.2}, {"name": "team.etl", "driver_share": 0.5}]"#,
        );
        assert!(
            error.ends_with(
                "queues[0].driver_share: `team` is a parent queue: `driver_share` belongs to its leaves"
            ),
            "{error}"
        );

        let error = queues_error(
            r#"[{"name": "team", "capacity": 1}, {"name": "team.etl", "capacity": 0.5}]"#,
        );
        assert!(
            error.ends_with(
                "queues: the capacities of the children of `team` sum to 0.5, not 1: team.etl 0.5"
            ),
            "{error}"
        );
    }
}
