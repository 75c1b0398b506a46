//! Conversions between the gRPC messages and Muster's own types: resources, queues, every
//! state, and the requests that become log commands (apps, drivers, worker registrations),
//! each written once, as `From` towards the wire and `TryFrom` back (a state the sender left
//! unset or that this build does not know is an error, never a guess).
//!
//! States travel as proto enums; [`v1::ExecutorState::name`] and its siblings give the short
//! upper-case names (`RUNNING`) that tables and JSON show.

use std::time::Duration;

use muster_core::access::QueueSpec;
use muster_core::agent::{Build, ShuffleServiceStatus};
use muster_core::ids::{QueueName, millis};
use muster_core::model::{GangRequest, GangStyle, OrderingPolicy, RecoveryState, WorkerState};
use muster_core::resources::{ResourceAddresses, Resources};
use muster_core::restarts::Restarts;
use muster_state::commands::{
    RegisterWorker, SubmitApp, SubmitDriver, SubmitGangDriver, SubmitWithSettings, submit_app_op,
};
use muster_state::model::{
    AppDescription, AppState, DriverDescription, DriverState, Executor, ExecutorState, Reservation,
    Worker,
};
use muster_state::version::LogFormat;
use muster_state::{ClusterState, Op};

use crate::v1;

impl From<Build> for v1::BuildInfo {
    fn from(build: Build) -> Self {
        Self {
            version: build.version,
            commit: build.commit,
            log_format: build.log_format,
        }
    }
}

impl From<v1::BuildInfo> for Build {
    fn from(build: v1::BuildInfo) -> Self {
        Self {
            version: build.version,
            commit: build.commit,
            log_format: build.log_format,
        }
    }
}

impl From<ShuffleServiceStatus> for v1::ShuffleService {
    fn from(status: ShuffleServiceStatus) -> Self {
        Self {
            port: u32::from(status.port),
            ready: status.ready,
            restarts: status.restarts,
        }
    }
}

impl TryFrom<v1::ShuffleService> for ShuffleServiceStatus {
    type Error = String;

    fn try_from(service: v1::ShuffleService) -> Result<Self, String> {
        Ok(Self {
            port: u16::try_from(service.port)
                .map_err(|_| format!("shuffle service port {} is not a port", service.port))?,
            ready: service.ready,
            restarts: service.restarts,
        })
    }
}

impl From<Restarts<Duration>> for v1::Restarts {
    fn from(restarts: Restarts<Duration>) -> Self {
        Self {
            count: restarts.count,
            last_exit_code: restarts.last_exit_code,
            starts_again_in_ms: restarts.starts_again.map_or(0, millis),
        }
    }
}

impl From<&v1::Restarts> for Restarts<Duration> {
    /// A wait of 0 is none: the driver is not waiting to start again.
    fn from(restarts: &v1::Restarts) -> Self {
        Self {
            count: restarts.count,
            last_exit_code: restarts.last_exit_code,
            starts_again: (restarts.starts_again_in_ms > 0)
                .then(|| Duration::from_millis(restarts.starts_again_in_ms)),
        }
    }
}

impl From<&Resources> for v1::Resources {
    fn from(resources: &Resources) -> Self {
        Self {
            cores: resources.cores,
            memory_mb: resources.memory_mb,
            custom: resources
                .custom
                .iter()
                .map(|(name, &amount)| (name.clone(), amount))
                .collect(),
        }
    }
}

impl From<v1::Resources> for Resources {
    fn from(resources: v1::Resources) -> Self {
        Resources::new(resources.cores, resources.memory_mb)
            .with_custom(resources.custom.into_iter().collect())
    }
}

/// Addresses as the wire carries them.
pub fn address_lists(
    addresses: &ResourceAddresses,
) -> std::collections::HashMap<String, v1::AddressList> {
    addresses
        .iter()
        .map(|(name, list)| {
            let list = v1::AddressList {
                addresses: list.clone(),
            };
            (name.clone(), list)
        })
        .collect()
}

/// Addresses from the wire.
pub fn addresses(lists: std::collections::HashMap<String, v1::AddressList>) -> ResourceAddresses {
    lists
        .into_iter()
        .map(|(name, list)| (name, list.addresses))
        .collect()
}

/// The resources of a message field; an absent field is no resources at all, which
/// validation then refuses where something is needed.
pub fn resources(message: Option<v1::Resources>) -> Resources {
    message.map(Resources::from).unwrap_or_default()
}

/// The queue a request names; naming none is naming `default`.
fn queue_named(name: &str) -> QueueName {
    if name.is_empty() {
        QueueName::default()
    } else {
        name.into()
    }
}

impl From<v1::RegisterApp> for SubmitApp {
    /// The application a registration describes (its request id and re-attach id are the
    /// caller's to read first).
    fn from(register: v1::RegisterApp) -> Self {
        Self {
            desc: AppDescription {
                queue: queue_named(&register.queue),
                name: register.name,
                user: register.user,
                cores_max: register.cores_max,
                executor_cores: register.executor_cores,
                executor_memory_mb: register.executor_memory_mb,
                executor_resources: register.executor_resources.into_iter().collect(),
                command: register.command,
                args: register.args,
                env: register.env.into_iter().collect(),
            },
            executor_limit: register.executor_limit,
        }
    }
}

/// The op that submits the application a registration describes, as [`submit_app_op`]
/// chooses it with `state`, with the priority it asks for when not the default and whether
/// it logs events (its request id and re-attach id are the caller's to read first; those
/// settings are the caller's to admit first, from log format 4).
pub fn register_op(register: v1::RegisterApp, state: &ClusterState) -> Op {
    let min_executors = register.min_executors;
    let (priority, logs_events) = (register.priority, register.logs_events);
    let driver = (!register.driver_id.is_empty()).then(|| register.driver_id.as_str().into());
    let submit = submit_app_op(SubmitApp::from(register), min_executors, driver, state);
    if priority == 0 && !logs_events {
        return submit;
    }
    Op::SubmitWithSettings(SubmitWithSettings {
        submit: Box::new(submit),
        priority,
        logs_events,
    })
}

/// The op that submits the driver a submission describes: with the room its application
/// needs first when it names one, and its priority when not the default (its request id is
/// the caller's to read first; a priority is the caller's to admit first, from log format
/// 4). Room for one executor is asked for only once the cluster's log `format` admits it:
/// before, the driver is submitted as before it did.
pub fn submit_driver_op(mut request: v1::SubmitDriverRequest, format: LogFormat) -> Op {
    let gang = request
        .gang
        .take()
        .filter(|gang| gang.min_executors > 1 || format >= LogFormat::FOURTH);
    let priority = request.priority;
    let driver = SubmitDriver::from(request);
    let submit = match gang {
        Some(gang) => Op::SubmitGangDriver(SubmitGangDriver {
            driver,
            gang: GangRequest {
                min_executors: gang.min_executors,
                executor_cores: gang.executor_cores,
                executor_memory_mb: gang.executor_memory_mb,
                executor_resources: gang.executor_resources.into_iter().collect(),
            },
        }),
        None => Op::SubmitDriver(driver),
    };
    if priority == 0 {
        return submit;
    }
    Op::SubmitWithSettings(SubmitWithSettings {
        submit: Box::new(submit),
        priority,
        logs_events: false,
    })
}

impl From<v1::SubmitDriverRequest> for SubmitDriver {
    /// The driver a submission describes (its request id is the caller's to read first).
    fn from(request: v1::SubmitDriverRequest) -> Self {
        Self {
            desc: DriverDescription {
                queue: queue_named(&request.queue),
                name: request.name,
                resources: resources(request.resources),
                command: request.command,
                args: request.args,
                env: request.env.into_iter().collect(),
                supervise: request.supervise,
            },
        }
    }
}

impl From<&v1::Register> for RegisterWorker {
    /// What a registering worker says about itself; what it runs and its reports are the
    /// leader's to read.
    fn from(register: &v1::Register) -> Self {
        Self {
            id: register.worker_id.as_str().into(),
            host: register.host.clone(),
            address: register.address.clone(),
            resources: resources(register.capacity.clone()),
            fence_grace_ms: register.fence.then_some(register.kill_grace_ms),
        }
    }
}

impl From<&Executor> for v1::ExecutorEvent {
    fn from(executor: &Executor) -> Self {
        Self {
            executor_id: executor.id.0,
            worker: executor.worker.to_string(),
            resources: Some((&executor.resources).into()),
            state: v1::ExecutorState::from(executor.state).into(),
            exit_code: executor.exit_code,
        }
    }
}

impl From<&Worker> for v1::WorkerStatus {
    fn from(worker: &Worker) -> Self {
        Self {
            id: worker.id.to_string(),
            host: worker.host.to_string(),
            state: v1::WorkerState::from(worker.state).into(),
            capacity: Some((&worker.capacity).into()),
            used: Some((&worker.used).into()),
            // Draining and addresses are the state's, and the build, shuffle service and
            // Spark the leader's: the status sets them.
            draining: false,
            addresses: Default::default(),
            build: None,
            shuffle_service: None,
            spark_home: None,
        }
    }
}

impl From<&Reservation> for v1::KeptRoom {
    fn from(kept: &Reservation) -> Self {
        Self {
            owner: kept.owner.to_string(),
            worker: kept.worker.to_string(),
            resources: Some((&kept.resources).into()),
            until_ms: kept.until.0,
        }
    }
}

impl From<&QueueSpec> for v1::Queue {
    fn from(queue: &QueueSpec) -> Self {
        Self {
            name: queue.name.to_string(),
            prior: queue.prior,
            threshold: queue.threshold,
            max_capacity: queue.max_capacity,
            capacity: queue.capacity,
            driver_share: queue.driver_share,
            gang_timeout_s: queue.gang_timeout_s,
            gang_style: queue.gang_style.map(|style| {
                match style {
                    GangStyle::Soft => v1::GangStyle::Soft,
                    GangStyle::Hard => v1::GangStyle::Hard,
                }
                .into()
            }),
            submit: queue.submit.as_ref().map(|users| v1::AccessList {
                users: users.clone(),
            }),
            administer: queue.administer.clone(),
            max_per_user: queue.max_per_user,
            ordering: match queue.ordering {
                OrderingPolicy::Fifo => v1::OrderingPolicy::Fifo,
                OrderingPolicy::Fair => v1::OrderingPolicy::Fair,
                OrderingPolicy::Drf => v1::OrderingPolicy::Drf,
            }
            .into(),
            user_weights: queue
                .user_weights
                .iter()
                .map(|(user, &weight)| (user.to_string(), weight))
                .collect(),
            max_priority: queue.max_priority,
            user_limit: queue.user_limit,
        }
    }
}

/// The ordering `queue` sets: an unknown one, from a newer client, reads as `fifo`.
pub fn ordering(queue: &v1::Queue) -> OrderingPolicy {
    match v1::OrderingPolicy::try_from(queue.ordering) {
        Ok(v1::OrderingPolicy::Fair) => OrderingPolicy::Fair,
        Ok(v1::OrderingPolicy::Drf) => OrderingPolicy::Drf,
        Ok(v1::OrderingPolicy::Fifo) | Err(_) => OrderingPolicy::Fifo,
    }
}

/// The gang style `queue` sets, if it sets one: an unknown one, from a newer client, reads
/// as unset.
pub fn gang_style(queue: &v1::Queue) -> Option<GangStyle> {
    match queue.gang_style.map(v1::GangStyle::try_from) {
        Some(Ok(v1::GangStyle::Soft)) => Some(GangStyle::Soft),
        Some(Ok(v1::GangStyle::Hard)) => Some(GangStyle::Hard),
        _ => None,
    }
}

impl From<&v1::Queue> for QueueSpec {
    fn from(queue: &v1::Queue) -> Self {
        Self {
            name: queue.name.as_str().into(),
            prior: queue.prior,
            threshold: queue.threshold,
            max_capacity: queue.max_capacity,
            capacity: queue.capacity,
            driver_share: queue.driver_share,
            gang_timeout_s: queue.gang_timeout_s,
            gang_style: gang_style(queue),
            ordering: ordering(queue),
            user_weights: queue
                .user_weights
                .iter()
                .map(|(user, &weight)| (user.as_str().into(), weight))
                .collect(),
            max_priority: queue.max_priority,
            user_limit: queue.user_limit,
            submit: queue.submit.as_ref().map(|list| list.users.clone()),
            administer: queue.administer.clone(),
            max_per_user: queue.max_per_user,
        }
    }
}

/// A state field left unset, or holding a value this build does not know (prost's getters
/// read both as `UNSPECIFIED`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("missing or unknown {of} state")]
pub struct UnknownState {
    /// What the state is of: `executor`, `driver`, ...
    pub of: &'static str,
}

/// Pairs a domain state enum with its proto enum: `From` towards the wire, `TryFrom` back,
/// and the short display name.
macro_rules! states {
    ($of:literal, $domain:ident, $proto:ident, $prefix:literal, [$($variant:ident),* $(,)?]) => {
        impl From<$domain> for v1::$proto {
            fn from(state: $domain) -> Self {
                match state {
                    $($domain::$variant => Self::$variant,)*
                }
            }
        }

        impl TryFrom<v1::$proto> for $domain {
            type Error = UnknownState;

            fn try_from(state: v1::$proto) -> Result<Self, UnknownState> {
                match state {
                    $(v1::$proto::$variant => Ok(Self::$variant),)*
                    v1::$proto::Unspecified => Err(UnknownState { of: $of }),
                }
            }
        }

        impl v1::$proto {
            /// The state's short name, as tables and JSON show it: `RUNNING`.
            pub fn name(self) -> &'static str {
                let name = self.as_str_name();
                name.strip_prefix($prefix).unwrap_or(name)
            }
        }

        named!($proto);
    };
}

/// Serializes a wire enum as its short name ([`name`](v1::WorkerState::name)), as the status
/// JSON shows it.
macro_rules! named {
    ($proto:ident) => {
        impl serde::Serialize for v1::$proto {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.name())
            }
        }
    };
}

states!(
    "worker",
    WorkerState,
    WorkerState,
    "WORKER_STATE_",
    [Alive, Dead, Decommissioned]
);
states!(
    "application",
    AppState,
    AppState,
    "APP_STATE_",
    [Waiting, Running, Finished, Failed, Killed]
);
states!(
    "executor",
    ExecutorState,
    ExecutorState,
    "EXECUTOR_STATE_",
    [Launching, Running, Killed, Failed, Lost, Exited]
);
states!(
    "driver",
    DriverState,
    DriverState,
    "DRIVER_STATE_",
    [
        Submitted,
        Running,
        Finished,
        Relaunching,
        Killed,
        Failed,
        Error
    ]
);

impl From<RecoveryState> for v1::RecoveryState {
    fn from(state: RecoveryState) -> Self {
        match state {
            RecoveryState::Recovering => Self::Recovering,
            RecoveryState::CompletingRecovery => Self::CompletingRecovery,
            RecoveryState::Alive => Self::Alive,
        }
    }
}

impl v1::RecoveryState {
    /// The state's short name: `ALIVE`.
    pub fn name(self) -> &'static str {
        let name = self.as_str_name();
        name.strip_prefix("RECOVERY_STATE_").unwrap_or(name)
    }
}

named!(RecoveryState);
named!(MemberRole);

impl v1::MemberRole {
    /// The role in lower case, as tables show it: `leader`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Leader => "leader",
            Self::Follower => "follower",
            Self::Learner => "learner",
            Self::Unspecified => "unknown",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_and_unknown_values_are_refused() {
        for state in [
            ExecutorState::Launching,
            ExecutorState::Running,
            ExecutorState::Killed,
            ExecutorState::Failed,
            ExecutorState::Lost,
            ExecutorState::Exited,
        ] {
            assert_eq!(
                ExecutorState::try_from(v1::ExecutorState::from(state)),
                Ok(state)
            );
        }
        assert_eq!(
            DriverState::try_from(v1::DriverState::Unspecified),
            Err(UnknownState { of: "driver" })
        );
        // An unknown value reads as UNSPECIFIED.
        let ended = v1::AppEnded { state: 99 };
        assert_eq!(
            AppState::try_from(ended.state()).unwrap_err().to_string(),
            "missing or unknown application state"
        );
        assert_eq!(
            v1::DriverState::from(DriverState::Relaunching).name(),
            "RELAUNCHING"
        );
        assert_eq!(
            v1::RecoveryState::CompletingRecovery.name(),
            "COMPLETING_RECOVERY"
        );
    }

    #[test]
    fn resources_round_trip() {
        let resources = Resources::new(2, 512).with_custom([("gpu".to_owned(), 1)].into());
        assert_eq!(Resources::from(v1::Resources::from(&resources)), resources);
        assert_eq!(super::resources(None), Resources::default());
    }
}
