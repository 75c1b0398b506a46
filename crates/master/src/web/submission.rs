//! Spark's REST submission protocol, without I/O: its requests and replies (the JSON of
//! Spark's `SubmitRestProtocolMessage`s), the paths it calls, and how a submission becomes a
//! Muster driver. [`crate::web::spark_rest`] serves it.
//!
//! A submission runs as a driver whose program is `spark-submit` in client mode against
//! Muster (`--master spark-muster://$MUSTER_MASTERS`), from the worker's `SPARK_HOME`, with
//! the submission's class, resource, arguments, properties and environment, and the plug-in
//! on its class path: Spark's standalone master runs the submitted class in a wrapper on a
//! worker the same way. `spark.driver.cores`, `spark.driver.memory` with its overhead (as
//! Spark sizes a driver's container on YARN and Kubernetes, since the worker holds the
//! driver to its memory) and `spark.driver.resource.NAME.amount` size it,
//! `spark.driver.supervise` supervises it, and
//! `spark.muster.queue` queues it (and its executors, which the plug-in asks for).

use std::collections::BTreeMap;

use muster_core::model::SPARK_SUBMISSION_VARIABLE;
use muster_proto::v1::{self, DriverState, Gang, Resources, StatusReply, SubmitDriverRequest};
use regex::Regex;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::web::view::RestartsView;

/// The Spark version the gateway says it serves: the one its protocol was tested against.
pub(crate) const SERVER_SPARK_VERSION: &str = "4.3.0";
/// The only protocol version there is.
const PROTOCOL_VERSION: &str = "v1";
/// Spark's status code for a request of an unknown protocol version.
pub(crate) const UNKNOWN_PROTOCOL_VERSION: u16 = 468;

/// What a path and method ask for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// `POST /v1/submissions/create`
    Create,
    /// `GET /v1/submissions/status/ID`
    Status(String),
    /// `POST /v1/submissions/kill/ID`
    Kill(String),
    /// `POST /v1/submissions/killall`
    KillAll,
    /// `POST /v1/submissions/clear`
    Clear,
    /// `GET /v1/submissions/readyz`
    Readyz,
}

/// A call to a path the protocol does not have.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct UnknownPath {
    /// Spark's status code for it.
    pub(crate) code: u16,
    /// Why.
    pub(crate) message: String,
}

/// A call's path: `[/TOKEN]/v1/submissions/ACTION[/ID]`, where a leading segment before the
/// protocol version is the caller's token (`spark-submit` sends no header: its master URL
/// `spark://HOST:PORT/TOKEN` carries it). Returns the action and the token, if any.
///
/// # Errors
///
/// An unknown protocol version, action or method, as Spark's server answers them.
pub(crate) fn route(post: bool, path: &str) -> Result<(Action, Option<&str>), UnknownPath> {
    let mut segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let token = match segments.first() {
        Some(&first) if segments.len() > 1 && segments[1].starts_with('v') && first != "v1" => {
            segments.remove(0);
            Some(first)
        }
        _ => None,
    };
    let unknown = |message: String| UnknownPath { code: 400, message };
    match segments.as_slice() {
        [version, "submissions", ..] if *version != PROTOCOL_VERSION => Err(UnknownPath {
            code: UNKNOWN_PROTOCOL_VERSION,
            message: format!("Unknown protocol version '{version}'."),
        }),
        [PROTOCOL_VERSION, "submissions", rest @ ..] => {
            let action = match (post, rest) {
                (true, ["create"]) => Action::Create,
                (false, ["status", id]) => Action::Status((*id).to_owned()),
                (true, ["kill", id]) => Action::Kill((*id).to_owned()),
                (true, ["killall"]) => Action::KillAll,
                (true, ["clear"]) => Action::Clear,
                (false, ["readyz"]) => Action::Readyz,
                _ => {
                    let method = if post { "POST" } else { "GET" };
                    return Err(unknown(format!(
                        "Unknown action: {method} {path}: the protocol has POST create, \
                         GET status/ID, POST kill/ID, POST killall, POST clear and GET readyz"
                    )));
                }
            };
            Ok((action, token))
        }
        _ => Err(unknown(format!(
            "Unknown path {path}: the protocol's paths start with /v1/submissions/"
        ))),
    }
}

/// Spark's `CreateSubmissionRequest`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreateSubmissionRequest {
    action: Option<String>,
    app_resource: Option<String>,
    main_class: Option<String>,
    #[serde(default)]
    app_args: Vec<String>,
    #[serde(default)]
    spark_properties: BTreeMap<String, String>,
    #[serde(default)]
    environment_variables: BTreeMap<String, String>,
}

/// Why a submission is not one this gateway takes; each names the field.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    /// Not a `CreateSubmissionRequest`, or one without a field it needs.
    #[error("Malformed request: {0}")]
    Malformed(String),
    /// A property whose value is not one it can have.
    #[error("{key} is {value}: it must be {expected}")]
    BadProperty {
        /// The property.
        key: String,
        /// Its value.
        value: String,
        /// What it must be.
        expected: &'static str,
    },
    /// Code from a resource no `--spark-rest-allow` pattern allows.
    #[error(
        "{field} {resource} is not allowed: it matches none of this master's --spark-rest-allow patterns"
    )]
    NotAllowed {
        /// `appResource` or `spark.jars`.
        field: &'static str,
        /// The resource.
        resource: String,
    },
    /// A gang asked for without the size of its executors.
    #[error(
        "{0} asks for a gang of executors, which needs spark.executor.cores: a gang's executors are all of one size"
    )]
    GangWithoutExecutorCores(&'static str),
    /// Under `--spark-rest-allow`, a setting that brings code from elsewhere.
    #[error(
        "{0} is not allowed: with --spark-rest-allow, a submission's code comes from allowed resources only"
    )]
    BringsCode(String),
}

/// A [`Refusal::BadProperty`] of `key`, `value` and what it must be.
fn bad_property(key: &str, value: &str, expected: &'static str) -> Refusal {
    Refusal::BadProperty {
        key: key.to_owned(),
        value: value.to_owned(),
        expected,
    }
}

/// How this gateway turns submissions into drivers.
#[derive(Clone, Debug, Default)]
pub struct Submissions {
    /// The plug-in jar (`muster-spark.jar`) as the workers find it; `None` when it lies in
    /// the workers' `$SPARK_HOME/jars`.
    pub plugin: Option<String>,
    /// When not empty, an application resource must match one of these
    /// ([`resource_pattern`]s, which match whole resources only).
    pub allowed_resources: Vec<Regex>,
}

/// The pattern an allowed application resource matches as a whole, from the regular
/// expression `text` (`file:/apps/.*\.jar`).
///
/// # Errors
///
/// `text` is not a regular expression.
pub fn resource_pattern(text: &str) -> Result<Regex, regex::Error> {
    Regex::new(&format!("^(?:{text})$"))
}

/// What a driver started from a submission runs, with `$0` as `spark-submit` and the
/// options, resource and arguments after it. A driver that holds resource addresses (its
/// GPUs) tells Spark which, through the resources file its worker wrote.
const DRIVER_SCRIPT: &str = r#": "${SPARK_HOME:?is not set on this worker: a Spark submission runs the spark-submit of the worker's SPARK_HOME}"
exec "$SPARK_HOME/bin/spark-submit" --master "spark-muster://$MUSTER_MASTERS" --deploy-mode client ${MUSTER_RESOURCES_FILE:+--conf "spark.driver.resourcesFile=$MUSTER_RESOURCES_FILE"} "$@""#;

/// Properties the driver's own `spark-submit` is given otherwise, or must not be given:
/// the worker hands its drivers the `muster` binary, a credential and the CA.
const NOT_PASSED_ON: [&str; 8] = [
    "spark.master",
    "spark.submit.deployMode",
    "spark.driver.supervise",
    "spark.jars",
    "spark.master.rest.enabled",
    "spark.muster.bin",
    "spark.muster.secretFile",
    "spark.muster.tlsCa",
];

impl Submissions {
    /// The driver `body` (a `CreateSubmissionRequest`'s JSON) asks for. Its request id is
    /// the body's SHA-256 (not the FNV of [`muster_core::ids::RequestId::of_content`], which
    /// a caller could collide on purpose): a client that sends the same submission again, to
    /// this master or another after a lost answer, gets the same driver. (`spark-submit`
    /// stamps every submission with `spark.app.submitTime`, so two are never the same.)
    ///
    /// # Errors
    ///
    /// Why the body is not a submission this gateway takes, naming the field.
    pub(crate) fn driver(&self, body: &[u8]) -> Result<SubmitDriverRequest, Refusal> {
        let request: CreateSubmissionRequest =
            serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_slice(body))
                .map_err(|e| Refusal::Malformed(e.to_string()))?;
        match request.action.as_deref() {
            Some("CreateSubmissionRequest") => {}
            Some(other) => {
                return Err(Refusal::Malformed(format!(
                    "action is {other}, where create takes a CreateSubmissionRequest"
                )));
            }
            None => return Err(Refusal::Malformed("action is missing".to_owned())),
        }
        let resource = match request.app_resource.as_deref() {
            Some(resource) if !resource.trim().is_empty() => resource,
            _ => return Err(Refusal::Malformed("appResource is missing".to_owned())),
        };
        let main_class = match request.main_class.as_deref() {
            Some(class) if !class.trim().is_empty() => class,
            _ => return Err(Refusal::Malformed("mainClass is missing".to_owned())),
        };
        let properties = &request.spark_properties;
        if let Some(key) = properties
            .keys()
            .find(|key| key.is_empty() || key.contains('='))
        {
            return Err(Refusal::Malformed(format!(
                "sparkProperties has the key `{key}`: a property's name is not empty and holds no ="
            )));
        }
        let jars = jars(properties, resource);
        self.check_code(resource, &jars, properties)?;
        let property = |key: &str| properties.get(key).map(String::as_str);
        let supervise = match property("spark.driver.supervise") {
            None => false,
            Some(text) if text.trim().eq_ignore_ascii_case("true") => true,
            Some(text) if text.trim().eq_ignore_ascii_case("false") => false,
            Some(text) => {
                return Err(bad_property(
                    "spark.driver.supervise",
                    text,
                    "true or false",
                ));
            }
        };
        Ok(SubmitDriverRequest {
            request_id: Sha256::digest(body)
                .iter()
                .fold("spark-rest-".to_owned(), |id, byte| {
                    id + &format!("{byte:02x}")
                }),
            name: property("spark.app.name").unwrap_or(main_class).to_owned(),
            queue: property("spark.muster.queue")
                .unwrap_or_default()
                .to_owned(),
            resources: Some(resources(properties)?),
            command: "/bin/sh".to_owned(),
            args: self.spark_submit_args(
                main_class,
                resource,
                &jars,
                properties,
                &request.app_args,
            ),
            env: {
                // Its driver goes to a worker with Spark only.
                let mut env = environment(&request.environment_variables);
                env.insert(SPARK_SUBMISSION_VARIABLE.to_owned(), "1".to_owned());
                env
            },
            supervise,
            gang: first_room(properties)?,
            priority: match property("spark.muster.priority") {
                None => 0,
                Some(text) => text
                    .trim()
                    .parse()
                    .map_err(|_| bad_property("spark.muster.priority", text, "a whole number"))?,
            },
        })
    }

    /// Whether the code a submission brings comes from allowed resources only, when this
    /// gateway allows some: its resource and every jar must match a pattern, hold no `..`
    /// segment nor escaped character, and no setting that loads code from elsewhere or
    /// changes how the JVMs start may be given.
    fn check_code(
        &self,
        resource: &str,
        jars: &[&str],
        properties: &BTreeMap<String, String>,
    ) -> Result<(), Refusal> {
        if self.allowed_resources.is_empty() {
            return Ok(());
        }
        for (field, path) in std::iter::once(("appResource", resource))
            .chain(jars.iter().map(|jar| ("spark.jars", *jar)))
        {
            let plain = !path.contains('%') && !path.split('/').any(|part| part == "..");
            if !plain || !self.allowed_resources.iter().any(|p| p.is_match(path)) {
                return Err(Refusal::NotAllowed {
                    field,
                    resource: path.to_owned(),
                });
            }
        }
        let brings_code = |key: &str, value: &str| {
            CODE_SETTINGS.contains(&key)
                || (key == "spark.submit.pyFiles" && !value.trim().is_empty())
                || key.starts_with("spark.executorEnv.")
                || key.ends_with(".discoveryScript")
        };
        match properties
            .iter()
            .find(|(key, value)| brings_code(key, value))
        {
            Some((key, _)) => Err(Refusal::BringsCode(key.clone())),
            None => Ok(()),
        }
    }

    /// The arguments of [`DRIVER_SCRIPT`]: `spark-submit` as its `$0`, then the options,
    /// the resource and the application's arguments.
    fn spark_submit_args(
        &self,
        main_class: &str,
        resource: &str,
        jars: &[&str],
        properties: &BTreeMap<String, String>,
        app_args: &[String],
    ) -> Vec<String> {
        let mut args = vec![
            "-c".to_owned(),
            DRIVER_SCRIPT.to_owned(),
            "spark-submit".to_owned(),
            "--class".to_owned(),
            main_class.to_owned(),
        ];
        let all_jars: Vec<&str> = self
            .plugin
            .as_deref()
            .into_iter()
            .chain(jars.iter().copied())
            .collect();
        if !all_jars.is_empty() {
            args.extend(["--jars".to_owned(), all_jars.join(",")]);
        }
        for (key, value) in properties {
            if !NOT_PASSED_ON.contains(&key.as_str()) {
                args.extend(["--conf".to_owned(), format!("{key}={value}")]);
            }
        }
        args.push(resource.to_owned());
        args.extend(app_args.iter().cloned());
        args
    }
}

/// The jars of `spark.jars` but `resource`, which Spark lists among them.
fn jars<'p>(properties: &'p BTreeMap<String, String>, resource: &str) -> Vec<&'p str> {
    properties
        .get("spark.jars")
        .into_iter()
        .flat_map(|list| list.split(','))
        .map(str::trim)
        .filter(|jar| !jar.is_empty() && *jar != resource)
        .collect()
}

/// The driver's cores, memory and custom resources, by its `spark.driver.*` settings.
fn resources(properties: &BTreeMap<String, String>) -> Result<Resources, Refusal> {
    let cores = match properties.get("spark.driver.cores") {
        None => 1,
        Some(text) => whole_above_zero(text)
            .ok_or_else(|| bad_property("spark.driver.cores", text, "a whole number above 0"))?,
    };
    Ok(Resources {
        cores,
        memory_mb: memory_with_overhead_mb(properties, "spark.driver")?,
        custom: custom_resources(properties, "spark.driver")?
            .into_iter()
            .collect(),
    })
}

/// The room the submitted application needs first, which its driver starts beside: all of
/// its gang when its settings name one, as the plug-in reads them when the driver registers
/// the application (`spark.muster.minExecutors`, or `spark.executor.instances` when the
/// application waits for all of them before it schedules a task,
/// `spark.scheduler.minRegisteredResourcesRatio` of 1.0, and allocates no executors
/// dynamically), else one executor. Executors of `spark.executor.cores`, or of one core for
/// executors that take every core a worker gives; a gang at most what
/// `spark.executor.instances` and `spark.cores.max` allow, as the masters count it. None when
/// `spark.cores.max` allows no executor at all.
///
/// # Errors
///
/// A setting that is not a number it can be, or a gang without `spark.executor.cores` (its
/// executors are all of one size).
fn first_room(properties: &BTreeMap<String, String>) -> Result<Option<Gang>, Refusal> {
    let property = |key: &str| properties.get(key).map(String::as_str);
    let whole = |key: &'static str| match property(key) {
        None => Ok(None),
        Some(text) => whole_above_zero(text)
            .map(Some)
            .ok_or_else(|| bad_property(key, text, "a whole number above 0")),
    };
    let dynamic = property("spark.dynamicAllocation.enabled")
        .is_some_and(|text| text.trim().eq_ignore_ascii_case("true"));
    let instances = if dynamic {
        None
    } else {
        whole("spark.executor.instances")?
    };
    let waits_for_all = match property("spark.scheduler.minRegisteredResourcesRatio") {
        None => false,
        Some(text) => {
            text.trim().parse::<f64>().map_err(|_| {
                bad_property(
                    "spark.scheduler.minRegisteredResourcesRatio",
                    text,
                    "a ratio from 0 to 1",
                )
            })? >= 1.0
        }
    };
    let gang = match whole("spark.muster.minExecutors")? {
        Some(minimum) => Some(("spark.muster.minExecutors", minimum)),
        None => match instances {
            Some(instances) if waits_for_all => Some(("spark.executor.instances", instances)),
            _ => None,
        },
    };
    let executor_cores = match (whole("spark.executor.cores")?, gang) {
        (Some(cores), _) => cores,
        (None, Some((key, _))) => return Err(Refusal::GangWithoutExecutorCores(key)),
        (None, None) => 1,
    };
    let by_cores = whole("spark.cores.max")?.map_or(u32::MAX, |cores| cores / executor_cores);
    let min_executors = gang
        .map_or(1, |(_, minimum)| minimum.min(instances.unwrap_or(u32::MAX)))
        .min(by_cores);
    if min_executors == 0 {
        return Ok(None);
    }
    Ok(Some(Gang {
        min_executors,
        executor_cores,
        executor_memory_mb: memory_with_overhead_mb(properties, "spark.executor")?,
        executor_resources: custom_resources(properties, "spark.executor")?
            .into_iter()
            .collect(),
    }))
}

/// `text` as a whole number above 0, if it is one.
fn whole_above_zero(text: &str) -> Option<u32> {
    text.trim().parse().ok().filter(|&n| n > 0)
}

/// The memory a driver's or executor's container needs by Spark's rule, `role` being
/// `spark.driver` or `spark.executor`: its heap (`ROLE.memory`, 1g by default) and the
/// overhead set (`ROLE.memoryOverhead`), or a share of the heap
/// (`ROLE.memoryOverheadFactor`) but at least a minimum (`ROLE.minMemoryOverhead`); for an
/// executor, PySpark's memory and the off-heap memory where enabled too, as the plug-in
/// counts them.
fn memory_with_overhead_mb(
    properties: &BTreeMap<String, String>,
    role: &str,
) -> Result<u64, Refusal> {
    let property = |key: &str| properties.get(key).map(String::as_str);
    let size = |key: String, default_mb: u64| match properties.get_key_value(&key) {
        None => Ok(default_mb),
        Some((key, text)) => memory_mb(text)
            .ok_or_else(|| bad_property(key, text, "a size such as 512m or 2g, of 1m at least")),
    };
    let heap_mb = size(format!("{role}.memory"), 1024)?;
    let overhead_mb = match property(&format!("{role}.memoryOverhead")) {
        Some(_) => size(format!("{role}.memoryOverhead"), 0)?,
        None => {
            let factor = match properties.get_key_value(&format!("{role}.memoryOverheadFactor")) {
                None => 0.10,
                Some((key, text)) => text
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|f| (0.0..=1.0).contains(f))
                    .ok_or_else(|| bad_property(key, text, "a ratio from 0 to 1"))?,
            };
            let minimum_mb = size(format!("{role}.minMemoryOverhead"), 384)?;
            ((heap_mb as f64 * factor) as u64).max(minimum_mb)
        }
    };
    let mut extra_mb = 0;
    if role == "spark.executor" {
        extra_mb += size("spark.executor.pyspark.memory".to_owned(), 0)?;
        let off_heap = property("spark.memory.offHeap.enabled")
            .is_some_and(|text| text.trim().eq_ignore_ascii_case("true"));
        if off_heap {
            extra_mb += size("spark.memory.offHeap.size".to_owned(), 0)?;
        }
    }
    Ok(heap_mb.saturating_add(overhead_mb).saturating_add(extra_mb))
}

/// The custom resources `ROLE.resource.NAME.amount` settings ask for, `role` being
/// `spark.driver` or `spark.executor`.
fn custom_resources(
    properties: &BTreeMap<String, String>,
    role: &str,
) -> Result<BTreeMap<String, u32>, Refusal> {
    let prefix = format!("{role}.resource.");
    let mut custom = BTreeMap::new();
    for (key, value) in properties {
        let Some(name) = key
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(".amount"))
        else {
            continue;
        };
        let amount = value
            .trim()
            .parse()
            .map_err(|_| bad_property(key, value, "a whole number"))?;
        custom.insert(name.to_owned(), amount);
    }
    Ok(custom)
}

/// The driver's environment: the submission's Spark settings (`SPARK_*`, all Spark's client
/// sends) but those that would choose another Spark, configuration or JVM start than the
/// worker's, and the submitting machine's addresses, which Spark's master drops too. Nothing
/// else: not the worker's own (`MUSTER_*`), not `PATH` nor `LD_PRELOAD`.
fn environment(variables: &BTreeMap<String, String>) -> std::collections::HashMap<String, String> {
    variables
        .iter()
        .filter(|(name, _)| {
            name.starts_with("SPARK_") && !NOT_TAKEN_VARIABLES.contains(&name.as_str())
        })
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect()
}

/// `SPARK_*` variables a submission's environment may not set.
const NOT_TAKEN_VARIABLES: [&str; 9] = [
    "SPARK_HOME",
    "SPARK_CONF_DIR",
    "SPARK_ENV_LOADED",
    "SPARK_SUBMIT_OPTS",
    "SPARK_DIST_CLASSPATH",
    "SPARK_PREPEND_CLASSES",
    "SPARK_LAUNCHER_OPTS",
    "SPARK_LOCAL_IP",
    "SPARK_LOCAL_HOSTNAME",
];

/// Settings that load code from elsewhere than the submission's resource and jars, or
/// change how the driver's and executors' JVMs start: refused under `--spark-rest-allow`
/// (besides `spark.executorEnv.*`, resource discovery scripts and non-empty
/// `spark.submit.pyFiles`).
const CODE_SETTINGS: [&str; 14] = [
    "spark.jars.packages",
    "spark.jars.repositories",
    "spark.jars.ivy",
    "spark.jars.ivySettings",
    "spark.archives",
    "spark.driver.extraClassPath",
    "spark.driver.extraJavaOptions",
    "spark.driver.defaultJavaOptions",
    "spark.driver.extraLibraryPath",
    "spark.executor.extraClassPath",
    "spark.executor.extraJavaOptions",
    "spark.executor.defaultJavaOptions",
    "spark.executor.extraLibraryPath",
    "spark.plugins",
];

/// A JVM memory size (`512m`, `2g`, `1024k`, `1073741824b`, or a plain number of MiB, as
/// Spark reads `spark.driver.memory`) in MiB, rounded down; `None` if it is not one or is
/// under 1 MiB.
fn memory_mb(text: &str) -> Option<u64> {
    let text = text.trim().to_ascii_lowercase();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let bytes_per_unit: u64 = match unit {
        "b" => 1,
        "k" | "kb" => 1 << 10,
        "" | "m" | "mb" => 1 << 20,
        "g" | "gb" => 1 << 30,
        "t" | "tb" => 1 << 40,
        "p" | "pb" => 1 << 50,
        _ => return None,
    };
    Some(number.checked_mul(bytes_per_unit)? >> 20).filter(|&mb| mb > 0)
}

/// A reply of the protocol, as Spark's client reads it: the `action` names the message.
#[derive(Debug, PartialEq, Serialize)]
#[serde(tag = "action", rename_all_fields = "camelCase")]
pub(crate) enum Reply {
    /// To create.
    #[serde(rename = "CreateSubmissionResponse")]
    Created {
        server_spark_version: &'static str,
        submission_id: String,
        success: bool,
        message: String,
    },
    /// To status.
    #[serde(rename = "SubmissionStatusResponse")]
    Status {
        server_spark_version: &'static str,
        submission_id: String,
        success: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        driver_state: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        worker_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        worker_host_port: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// To kill.
    #[serde(rename = "KillSubmissionResponse")]
    Killed {
        server_spark_version: &'static str,
        submission_id: String,
        success: bool,
        message: String,
    },
    /// To killall.
    #[serde(rename = "KillAllSubmissionResponse")]
    KilledAll {
        server_spark_version: &'static str,
        success: bool,
        message: String,
    },
    /// To readyz.
    #[serde(rename = "ReadyzResponse")]
    Readyz {
        server_spark_version: &'static str,
        success: bool,
        message: String,
    },
    /// To clear.
    #[serde(rename = "ClearResponse")]
    Cleared {
        server_spark_version: &'static str,
        success: bool,
        message: String,
    },
    /// To anything that could not be answered otherwise.
    #[serde(rename = "ErrorResponse")]
    Error {
        server_spark_version: &'static str,
        message: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        highest_protocol_version: Option<&'static str>,
    },
}

impl Reply {
    /// An `ErrorResponse` saying `message`.
    pub(crate) fn error(message: impl Into<String>) -> Self {
        Self::Error {
            server_spark_version: SERVER_SPARK_VERSION,
            message: message.into(),
            highest_protocol_version: None,
        }
    }

    /// The `ErrorResponse` to a path the protocol does not have.
    pub(crate) fn unknown_path(unknown: &UnknownPath) -> Self {
        Self::Error {
            server_spark_version: SERVER_SPARK_VERSION,
            message: unknown.message.clone(),
            highest_protocol_version: (unknown.code == UNKNOWN_PROTOCOL_VERSION)
                .then_some(PROTOCOL_VERSION),
        }
    }

    /// The status of submission `id` in `status`: its driver's state in Spark's names (the
    /// same as Muster's), its worker, and why it failed.
    pub(crate) fn status(id: &str, status: &StatusReply) -> Self {
        let Some(driver) = status.drivers.iter().find(|d| d.id == id) else {
            return Self::Status {
                server_spark_version: SERVER_SPARK_VERSION,
                submission_id: id.to_owned(),
                success: false,
                driver_state: None,
                worker_id: None,
                worker_host_port: None,
                message: Some(format!(
                    "Driver {id} not found: not submitted, or ended long enough ago to be forgotten"
                )),
            };
        };
        let state = driver.state();
        let worker = status.workers.iter().find(|w| w.id == driver.worker);
        let message = match (state, driver.exit_code) {
            (DriverState::Failed, Some(code)) => Some(format!(
                "the driver exited with code {code}; `muster logs {id}` shows its output"
            )),
            (DriverState::Error, _) => {
                Some("the driver's worker was lost and it was not supervised".to_owned())
            }
            (DriverState::Relaunching, _) => Some(match driver.relaunched_as.as_str() {
                "" => "the driver's worker was lost: it was relaunched under a new id".to_owned(),
                successor => {
                    format!("the driver's worker was lost: it was relaunched as {successor}")
                }
            }),
            (DriverState::Running, _) => driver.restarts.as_ref().map(|restarts| {
                format!(
                    "{}; `muster logs --stderr {id}` shows why",
                    RestartsView::from(restarts).describe()
                )
            }),
            _ => None,
        };
        Self::Status {
            server_spark_version: SERVER_SPARK_VERSION,
            submission_id: id.to_owned(),
            success: true,
            driver_state: Some(match state {
                DriverState::Unspecified => "UNKNOWN",
                known => known.name(),
            }),
            worker_id: worker.map(|w| w.id.clone()),
            worker_host_port: worker.map(|w| w.host.clone()),
            message,
        }
    }

    /// The readiness of the cluster `status` shows: ready once a leader is ALIVE.
    pub(crate) fn readyz(status: &StatusReply) -> Self {
        let state = status.recovery_state();
        Self::Readyz {
            server_spark_version: SERVER_SPARK_VERSION,
            success: state == v1::RecoveryState::Alive,
            message: format!("the leading master is {}", state.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What spark-submit 4.3.0 posts for `--deploy-mode cluster --supervise --driver-cores 1
    /// --driver-memory 700m --class com.example.Etl --jars /x/a.jar /path/etl.jar 2026-12-01`.
    const SPARK_SUBMIT_BODY: &str = r#"{
      "action" : "CreateSubmissionRequest",
      "appArgs" : [ "2026-12-01", "two words" ],
      "appResource" : "file:/path/etl.jar",
      "clientSparkVersion" : "4.3.0",
      "environmentVariables" : {
        "SPARK_SCALA_VERSION" : "2.13",
        "SPARK_LOCAL_IP" : "10.0.0.9",
        "MUSTER_CREDENTIAL" : "Bearer someone-elses",
        "SPARK_HOME" : "/tmp/another-spark",
        "SPARK_SUBMIT_OPTS" : "-javaagent:/tmp/agent.jar",
        "LD_PRELOAD" : "/tmp/evil.so",
        "SPARK_FOO" : "bar"
      },
      "mainClass" : "com.example.Etl",
      "sparkProperties" : {
        "spark.jars" : "file:/x/a.jar,file:/path/etl.jar",
        "spark.driver.supervise" : "true",
        "spark.app.name" : "com.example.Etl",
        "spark.driver.memory" : "700m",
        "spark.driver.cores" : "2",
        "spark.driver.resource.gpu.amount" : "1",
        "spark.muster.queue" : "q1",
        "spark.muster.priority" : "3",
        "spark.muster.bin" : "/tmp/not-muster",
        "spark.submit.deployMode" : "cluster",
        "spark.master" : "spark://127.0.0.1:6066",
        "spark.app.submitTime" : "1796189395469"
      }
    }"#;

    fn submissions() -> Submissions {
        Submissions {
            plugin: Some("/opt/muster-spark.jar".to_owned()),
            allowed_resources: Vec::new(),
        }
    }

    #[test]
    fn a_submission_of_spark_submit_becomes_a_driver_running_spark_submit_in_client_mode() {
        let driver = submissions().driver(SPARK_SUBMIT_BODY.as_bytes()).unwrap();
        assert_eq!(driver.name, "com.example.Etl");
        assert_eq!(driver.queue, "q1");
        // The driver starts at the priority its application asks for, which its own
        // spark-submit passes on.
        assert_eq!(driver.priority, 3);
        assert!(driver.supervise);
        let resources = driver.resources.unwrap();
        // 700 MiB of heap and Spark's least overhead, 384 MiB.
        assert_eq!((resources.cores, resources.memory_mb), (2, 700 + 384));
        assert_eq!(resources.custom.get("gpu"), Some(&1));
        assert_eq!(driver.command, "/bin/sh");
        assert_eq!(
            driver.args[..2],
            ["-c".to_owned(), DRIVER_SCRIPT.to_owned()]
        );
        let submit: Vec<&str> = driver.args[2..].iter().map(String::as_str).collect();
        assert_eq!(
            submit[..5],
            [
                "spark-submit",
                "--class",
                "com.example.Etl",
                "--jars",
                "/opt/muster-spark.jar,file:/x/a.jar"
            ]
        );
        assert!(submit.contains(&"spark.muster.queue=q1"));
        assert!(submit.contains(&"spark.muster.priority=3"));
        assert!(submit.contains(&"spark.driver.memory=700m"));
        assert!(!submit.iter().any(|arg| arg.contains("/tmp/not-muster")));
        for dropped in NOT_PASSED_ON {
            assert!(
                !submit
                    .iter()
                    .any(|arg| arg.starts_with(&format!("{dropped}="))),
                "{dropped}"
            );
        }
        assert_eq!(
            submit[submit.len() - 3..],
            ["file:/path/etl.jar", "2026-12-01", "two words"]
        );
        assert_eq!(driver.env.get("SPARK_FOO").map(String::as_str), Some("bar"));
        assert!(driver.env.contains_key(SPARK_SUBMISSION_VARIABLE));
        for dropped in [
            "SPARK_LOCAL_IP",
            "MUSTER_CREDENTIAL",
            "LD_PRELOAD",
            "SPARK_HOME",
            "SPARK_SUBMIT_OPTS",
        ] {
            assert!(!driver.env.contains_key(dropped), "{dropped}");
        }
        // The same body is the same request; another is another.
        let again = submissions().driver(SPARK_SUBMIT_BODY.as_bytes()).unwrap();
        assert_eq!(again.request_id, driver.request_id);
        let other = SPARK_SUBMIT_BODY.replace("1796189395469", "1796189395470");
        assert_ne!(
            submissions().driver(other.as_bytes()).unwrap().request_id,
            driver.request_id
        );
    }

    #[test]
    fn a_submission_sends_the_room_its_application_needs_first_with_its_driver() {
        let room_of = |properties: &[(&str, &str)]| {
            let properties = properties
                .iter()
                .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
                .collect();
            first_room(&properties)
        };
        let first_executor = |cores, memory_mb| {
            Ok(Some(Gang {
                min_executors: 1,
                executor_cores: cores,
                executor_memory_mb: memory_mb,
                executor_resources: [("gpu".to_owned(), 1)].into(),
            }))
        };
        let waits_for_three = [
            ("spark.executor.instances", "3"),
            ("spark.scheduler.minRegisteredResourcesRatio", "1.0"),
            ("spark.executor.cores", "1"),
            ("spark.executor.memory", "512m"),
            ("spark.executor.resource.gpu.amount", "1"),
        ];
        assert_eq!(
            room_of(&waits_for_three),
            Ok(Some(Gang {
                min_executors: 3,
                executor_cores: 1,
                executor_memory_mb: 512 + 384,
                executor_resources: [("gpu".to_owned(), 1)].into(),
            }))
        );
        // Spark starts with fewer: no gang, room for the first executor.
        let mut fewer = waits_for_three;
        fewer[1].1 = "0.8";
        assert_eq!(room_of(&fewer), first_executor(1, 512 + 384));
        let dynamic = [
            &waits_for_three[..],
            &[("spark.dynamicAllocation.enabled", "true")],
        ]
        .concat();
        assert_eq!(room_of(&dynamic), first_executor(1, 512 + 384));
        // Named, and at most what cores.max allows.
        let named = room_of(&[
            ("spark.muster.minExecutors", "4"),
            ("spark.executor.cores", "2"),
            ("spark.cores.max", "6"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (named.min_executors, named.executor_memory_mb),
            (3, 1024 + 384)
        );
        // Spark's defaults: an executor of 1g that takes every core a worker gives, at
        // least one; none at all when cores.max is below an executor's cores.
        let default = room_of(&[]).unwrap().unwrap();
        assert_eq!((default.min_executors, default.executor_cores), (1, 1));
        assert_eq!(default.executor_memory_mb, 1024 + 384);
        let no_executor = [("spark.executor.cores", "4"), ("spark.cores.max", "2")];
        assert_eq!(room_of(&no_executor), Ok(None));

        for (properties, refusal) in [
            (
                &[("spark.muster.minExecutors", "2")][..],
                "spark.muster.minExecutors asks for a gang of executors, which needs spark.executor.cores",
            ),
            (
                &[("spark.muster.minExecutors", "none")],
                "spark.muster.minExecutors is none",
            ),
            (
                &[
                    ("spark.executor.instances", "2"),
                    ("spark.scheduler.minRegisteredResourcesRatio", "all"),
                ],
                "spark.scheduler.minRegisteredResourcesRatio is all",
            ),
        ] {
            let error = room_of(properties).unwrap_err().to_string();
            assert!(error.starts_with(refusal), "{error}");
        }
    }

    #[test]
    fn bad_submissions_are_refused_naming_the_field() {
        let cases = [
            ("not json", "Malformed request"),
            (
                r#"{"action": "KillSubmissionRequest"}"#,
                "action is KillSubmissionRequest",
            ),
            (
                r#"{"action": "CreateSubmissionRequest", "mainClass": "A"}"#,
                "appResource is missing",
            ),
            (
                r#"{"action": "CreateSubmissionRequest", "appResource": "a.jar"}"#,
                "mainClass is missing",
            ),
            (
                r#"{"action": "CreateSubmissionRequest", "appResource": "a.jar", "mainClass": "A", "appArgs": [1]}"#,
                "appArgs",
            ),
            (
                r#"{"action": "CreateSubmissionRequest", "appResource": "a.jar", "mainClass": "A", "sparkProperties": {"spark.driver.memory": "lots"}}"#,
                "spark.driver.memory is lots",
            ),
            (
                r#"{"action": "CreateSubmissionRequest", "appResource": "a.jar", "mainClass": "A", "sparkProperties": {"spark.driver.cores": "0"}}"#,
                "spark.driver.cores is 0",
            ),
            (
                r#"{"action": "CreateSubmissionRequest", "appResource": "a.jar", "mainClass": "A", "sparkProperties": {"spark.driver.supervise": "yes"}}"#,
                "spark.driver.supervise is yes",
            ),
            (
                r#"{"action": "CreateSubmissionRequest", "appResource": "a.jar", "mainClass": "A", "sparkProperties": {"spark.muster.priority": "high"}}"#,
                "spark.muster.priority is high",
            ),
        ];
        for (body, expected) in cases {
            let error = submissions()
                .driver(body.as_bytes())
                .unwrap_err()
                .to_string();
            assert!(error.contains(expected), "{body}: {error}");
        }
    }

    #[test]
    fn under_allowed_patterns_all_code_comes_from_resources_matching_one_whole() {
        let submissions = Submissions {
            allowed_resources: vec![resource_pattern(r"file:/apps/.*\.jar").unwrap()],
            ..submissions()
        };
        let body = |resource: &str, properties: &str| {
            format!(
                r#"{{"action": "CreateSubmissionRequest", "appResource": "{resource}",
                    "mainClass": "A", "sparkProperties": {{{properties}}}}}"#
            )
        };
        let jars =
            r#""spark.jars": "file:/apps/etl.jar,file:/apps/lib.jar", "spark.submit.pyFiles": """#;
        assert!(
            submissions
                .driver(body("file:/apps/etl.jar", jars).as_bytes())
                .is_ok()
        );
        let refused = [
            ("file:/apps/../etc/evil.jar", "", "appResource"),
            ("file:/apps/%2e%2e/evil.jar", "", "appResource"),
            ("file:/apps/etl.jar.sh", "", "appResource"),
            ("http://x/file:/apps/a.jar", "", "appResource"),
            (
                "file:/apps/etl.jar",
                r#""spark.jars": "http://x/evil.jar""#,
                "spark.jars http://x/evil.jar",
            ),
            (
                "file:/apps/etl.jar",
                r#""spark.driver.extraJavaOptions": "-javaagent:/tmp/a.jar""#,
                "spark.driver.extraJavaOptions",
            ),
            (
                "file:/apps/etl.jar",
                r#""spark.jars.packages": "evil:evil:1""#,
                "spark.jars.packages",
            ),
            (
                "file:/apps/etl.jar",
                r#""spark.executorEnv.LD_PRELOAD": "/tmp/e.so""#,
                "spark.executorEnv.LD_PRELOAD",
            ),
            (
                "file:/apps/etl.jar",
                r#""spark.executor.resource.gpu.discoveryScript": "/tmp/x""#,
                "discoveryScript",
            ),
            (
                "file:/apps/etl.jar",
                r#""spark.submit.pyFiles": "http://x/e.py""#,
                "spark.submit.pyFiles",
            ),
        ];
        for (resource, properties, named) in refused {
            let error = submissions
                .driver(body(resource, properties).as_bytes())
                .unwrap_err()
                .to_string();
            assert!(
                error.contains("is not allowed") && error.contains(named),
                "{resource} {properties}: {error}"
            );
        }
    }

    #[test]
    fn memory_sizes_are_read_as_spark_reads_them() {
        for (text, mb) in [
            ("700m", Some(700)),
            ("2g", Some(2048)),
            ("2G", Some(2048)),
            ("1024", Some(1024)),
            ("2048k", Some(2)),
            ("1gb", Some(1024)),
            ("512k", None),
            ("0", None),
            ("g", None),
            ("1x", None),
        ] {
            assert_eq!(memory_mb(text), mb, "{text}");
        }
    }

    #[test]
    fn a_drivers_memory_is_its_heap_and_its_overhead_by_sparks_rule() {
        let memory = |settings: &[(&str, &str)]| {
            let properties = settings
                .iter()
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect();
            resources(&properties).ok().map(|r| r.memory_mb)
        };
        let one_gig = ("spark.driver.memory", "1g");
        assert_eq!(memory(&[]), Some(1024 + 384));
        assert_eq!(memory(&[("spark.driver.memory", "8g")]), Some(8192 + 819));
        assert_eq!(
            memory(&[one_gig, ("spark.driver.memoryOverhead", "100m")]),
            Some(1024 + 100)
        );
        assert_eq!(
            memory(&[one_gig, ("spark.driver.memoryOverheadFactor", "0.5")]),
            Some(1024 + 512)
        );
        assert_eq!(
            memory(&[one_gig, ("spark.driver.minMemoryOverhead", "1g")]),
            Some(1024 + 1024)
        );
        assert_eq!(memory(&[("spark.driver.memoryOverheadFactor", "2")]), None);
        assert_eq!(memory(&[("spark.driver.memoryOverhead", "lots")]), None);
    }

    #[test]
    fn paths_carry_the_action_the_id_and_maybe_a_token() {
        assert_eq!(
            route(true, "/v1/submissions/create"),
            Ok((Action::Create, None))
        );
        assert_eq!(
            route(false, "/tok.en/v1/submissions/status/driver-1"),
            Ok((Action::Status("driver-1".to_owned()), Some("tok.en")))
        );
        assert_eq!(
            route(true, "/v1/submissions/kill/driver-1"),
            Ok((Action::Kill("driver-1".to_owned()), None))
        );
        assert_eq!(
            route(false, "/v1/submissions/readyz"),
            Ok((Action::Readyz, None))
        );
        assert_eq!(
            route(false, "/v2/submissions/create").unwrap_err().code,
            UNKNOWN_PROTOCOL_VERSION
        );
        assert_eq!(
            route(false, "/tok/v2/submissions/create").unwrap_err().code,
            UNKNOWN_PROTOCOL_VERSION
        );
        assert_eq!(
            route(false, "/v1/submissions/create").unwrap_err().code,
            400
        );
        assert_eq!(
            route(true, "/v1/submissions/status/x").unwrap_err().code,
            400
        );
        assert_eq!(route(true, "/elsewhere").unwrap_err().code, 400);
    }

    #[test]
    fn replies_carry_their_action_and_spark_field_names() {
        let killed = Reply::Killed {
            server_spark_version: SERVER_SPARK_VERSION,
            submission_id: "driver-1".to_owned(),
            success: true,
            message: "Kill request for driver-1 submitted".to_owned(),
        };
        assert_eq!(
            serde_json::to_value(&killed).unwrap(),
            serde_json::json!({"action": "KillSubmissionResponse", "serverSparkVersion": "4.3.0",
                "submissionId": "driver-1", "success": true,
                "message": "Kill request for driver-1 submitted"})
        );
    }

    #[test]
    fn a_status_names_the_drivers_state_its_worker_and_why_it_failed() {
        let status = StatusReply {
            workers: vec![v1::WorkerStatus {
                id: "w-1".to_owned(),
                host: "node-a".to_owned(),
                ..Default::default()
            }],
            drivers: vec![v1::DriverStatus {
                id: "driver-1".to_owned(),
                worker: "w-1".to_owned(),
                state: DriverState::Failed.into(),
                exit_code: Some(3),
                ..Default::default()
            }],
            ..Default::default()
        };
        let Reply::Status {
            success,
            driver_state,
            worker_id,
            worker_host_port,
            message,
            ..
        } = Reply::status("driver-1", &status)
        else {
            panic!("not a status")
        };
        assert!(success);
        assert_eq!(driver_state, Some("FAILED"));
        assert_eq!(worker_id.as_deref(), Some("w-1"));
        assert_eq!(worker_host_port.as_deref(), Some("node-a"));
        assert!(message.unwrap().contains("exited with code 3"));
        let Reply::Status { success, .. } = Reply::status("driver-2", &status) else {
            panic!("not a status")
        };
        assert!(!success, "an unknown driver is not found");
    }

    #[test]
    fn a_relaunched_drivers_status_names_the_driver_that_replaced_it() {
        let status = StatusReply {
            drivers: vec![v1::DriverStatus {
                id: "driver-1".to_owned(),
                state: DriverState::Relaunching.into(),
                relaunched_as: "driver-2".to_owned(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let Reply::Status { message, .. } = Reply::status("driver-1", &status) else {
            panic!("not a status")
        };
        assert_eq!(
            message.as_deref(),
            Some("the driver's worker was lost: it was relaunched as driver-2")
        );
    }

    #[test]
    fn a_status_says_a_supervised_driver_keeps_failing() {
        let status = StatusReply {
            drivers: vec![v1::DriverStatus {
                id: "driver-1".to_owned(),
                state: DriverState::Running.into(),
                restarts: Some(v1::Restarts {
                    count: 2,
                    last_exit_code: Some(1),
                    starts_again_in_ms: 4000,
                }),
                ..Default::default()
            }],
            ..Default::default()
        };
        let Reply::Status { message, .. } = Reply::status("driver-1", &status) else {
            panic!("not a status")
        };
        assert_eq!(
            message.as_deref(),
            Some(
                "restarted 2 times, last failed with exit 1; starts again in 4.0 s; \
                 `muster logs --stderr driver-1` shows why"
            )
        );
    }
}
