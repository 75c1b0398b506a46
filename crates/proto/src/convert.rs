//! Conversions between the gRPC messages and Muster's own types: resources, queues and every
//! state, each written once, as `From` towards the wire and `TryFrom` back (a state the
//! sender left unset or that this build does not know is an error, never a guess).
//!
//! States travel as proto enums; [`v1::ExecutorState::name`] and its siblings give the short
//! upper-case names (`RUNNING`) that tables and JSON show.

use muster_core::model::{QueueConfig, WorkerState};
use muster_core::resources::Resources;
use muster_state::model::{AppState, DriverState, ExecutorState};

use crate::v1;

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

/// The resources of a message field; an absent field is no resources at all, which
/// validation then refuses where something is needed.
pub fn resources(message: Option<v1::Resources>) -> Resources {
    message.map(Resources::from).unwrap_or_default()
}

impl From<&QueueConfig> for v1::Queue {
    fn from(queue: &QueueConfig) -> Self {
        Self {
            name: queue.name.0.clone(),
            prior: queue.prior,
            threshold: queue.threshold,
            max_capacity: queue.max_capacity,
        }
    }
}

impl From<&v1::Queue> for QueueConfig {
    fn from(queue: &v1::Queue) -> Self {
        Self {
            name: queue.name.as_str().into(),
            prior: queue.prior,
            threshold: queue.threshold,
            max_capacity: queue.max_capacity,
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

impl v1::RecoveryState {
    /// The state's short name: `ALIVE`.
    pub fn name(self) -> &'static str {
        let name = self.as_str_name();
        name.strip_prefix("RECOVERY_STATE_").unwrap_or(name)
    }
}

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
