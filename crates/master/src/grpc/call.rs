//! What every client-facing call shares: a client write as a log command, why a call
//! failed, modelled by what the caller must do and turned into a gRPC status in one place,
//! and the channel the HTTP endpoints call this master's own client API on.

use std::time::Duration;

use muster_core::ids::{RequestId, WorkId};
use muster_proto::auth::NamedUser;
use muster_proto::discovery::{LEADER_HEADER, RETRY_AFTER_HEADER};
use muster_proto::transport::Dialer;
use muster_raft::{Applied, NodeId, RaftNode, WriteError};
use muster_state::commands::By;
use muster_state::{ApplyError, ClusterState, Command, Op, Response};
use tonic::Status;
use tonic::transport::Channel;

use muster_raft::now;

/// How long a call of an HTTP endpoint on this master's client API may take: less than the
/// 10 s after which Spark's REST client gives a master up.
const OWN_API_CALL_TIMEOUT: Duration = Duration::from_secs(8);

/// A channel to this master's own client API at `grpc` (its listen address), through
/// `dialer`: connected on first use and again after a failure, each call bounded by
/// [`OWN_API_CALL_TIMEOUT`].
///
/// # Errors
///
/// `grpc` is not an address `dialer` can reach.
pub(crate) fn own_api(grpc: &str, dialer: &Dialer) -> Result<Channel, tonic::transport::Error> {
    Ok(dialer
        .endpoint(grpc)?
        .connect_timeout(Duration::from_secs(2))
        .timeout(OWN_API_CALL_TIMEOUT)
        .connect_lazy())
}

/// Why a call was not answered.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    /// Another replica leads, or none does yet: ask the leader (its id and address when known).
    #[error("{}", match .0 {
        Some((id, _)) => format!("not the leader; master {id} leads"),
        None => "no leader elected yet".to_owned(),
    })]
    NotLeader(Option<(NodeId, String)>),
    /// No quorum now: try again later.
    #[error("{0}")]
    Unavailable(String),
    /// The leader takes no more writes now (backpressure): send it again after the wait.
    #[error("{line}")]
    Busy {
        /// What the leader said.
        line: String,
        /// How long it asked the caller to wait.
        retry_after: Duration,
    },
    /// The request is malformed or does not apply: retrying will not help.
    #[error(transparent)]
    Refused(#[from] ApplyError),
    /// The request needs a log format the cluster has not been raised to: a master runs an
    /// older build. Says which.
    #[error("{0}")]
    TooNew(String),
    /// The caller may not do this (already a status: the check said why).
    #[error("{}", .0.message())]
    Denied(Status),
    /// A bug: the state machine answered something this call cannot mean.
    #[error("{0}")]
    Internal(String),
}

impl From<WriteError> for CallError {
    fn from(error: WriteError) -> Self {
        match error {
            WriteError::NotLeader(leader) => Self::NotLeader(leader),
            WriteError::Unavailable(_) => Self::Unavailable(error.to_string()),
            // Raised within seconds: the caller tries again.
            WriteError::NotRaisedYet(line) => Self::Unavailable(line),
            WriteError::TooNew(line) => Self::TooNew(line),
            WriteError::Busy { retry_after, .. } => Self::Busy {
                line: error.to_string(),
                retry_after,
            },
        }
    }
}

impl CallError {
    /// This replica does not lead: who does, as `node` knows it.
    pub(crate) fn not_leader(node: &RaftNode) -> Self {
        Self::NotLeader(node.leadership().borrow().leader.clone())
    }
}

impl From<CallError> for Status {
    fn from(error: CallError) -> Self {
        let message = error.to_string();
        match error {
            CallError::NotLeader(leader) => {
                let mut status = Status::unavailable(message);
                if let Some(value) = leader.and_then(|(_, addr)| addr.parse().ok()) {
                    status.metadata_mut().insert(LEADER_HEADER, value);
                }
                status
            }
            CallError::Unavailable(_) => Status::unavailable(message),
            CallError::Busy { retry_after, .. } => {
                let mut status = Status::resource_exhausted(message);
                let millis = muster_core::ids::millis(retry_after).to_string();
                let value = millis.parse().expect("digits are a metadata value");
                status.metadata_mut().insert(RETRY_AFTER_HEADER, value);
                status
            }
            CallError::Refused(
                ApplyError::UnknownWorker(_)
                | ApplyError::UnknownApp(_)
                | ApplyError::UnknownDriver(_)
                | ApplyError::UnknownExecutor(..),
            ) => Status::not_found(message),
            CallError::Refused(
                ApplyError::UnknownQueue(_) | ApplyError::Invalid { .. } | ApplyError::Batch,
            ) => Status::invalid_argument(message),
            CallError::Refused(ApplyError::Conflict(_) | ApplyError::StaleTerm { .. }) => {
                Status::failed_precondition(message)
            }
            CallError::Refused(ApplyError::Denied(_)) => Status::permission_denied(message),
            CallError::TooNew(_) => Status::failed_precondition(message),
            CallError::Denied(status) => status,
            CallError::Internal(_) => Status::internal(message),
        }
    }
}

/// A client's write as a log command, stamped now; an empty request id means none. A named
/// user's write travels in [`By`], for the state machine to check that they may make it, and
/// their request ids are theirs (`NAME:ID`): nobody replays another's to get its answer.
pub(crate) fn client_command(request_id: &str, user: Option<&NamedUser>, op: Op) -> Command {
    let request_id = (!request_id.is_empty()).then(|| match user {
        Some(user) => RequestId(format!("{}:{request_id}", user.name)),
        None => RequestId(request_id.to_owned()),
    });
    let op = match user {
        Some(user) => {
            tracing::info!(user = %user.name, "a named user's write");
            Op::By(By {
                user: user.name.clone(),
                generation: user.generation,
                op: Box::new(op),
            })
        }
        None => op,
    };
    Command {
        at: now(),
        request_id,
        term: None,
        op,
    }
}

/// Whether `user` may make a call that writes nothing, by `state`: their credential is still
/// valid, and they are an admin if `admin` is needed. The cluster's own credential may.
///
/// # Errors
///
/// [`ApplyError::Denied`] saying why not.
pub(crate) fn admit(
    state: &ClusterState,
    user: Option<&NamedUser>,
    admin: bool,
) -> Result<(), CallError> {
    let Some(user) = user else {
        return Ok(());
    };
    let denied = |message: String| Err(CallError::Refused(ApplyError::Denied(message)));
    match state.users().get(&user.name) {
        Some(known) if !known.revoked && known.generation == user.generation => {
            if admin && !known.admin {
                denied(format!("user `{}` is not an admin", user.name))
            } else {
                Ok(())
            }
        }
        _ => denied(format!(
            "the credential of user `{}` was revoked",
            user.name
        )),
    }
}

/// Whether `user` may `act` (read what it wrote, steer it) on work `id` (`DRIVER_ID`,
/// `APP_ID` or `APP_ID/EXECUTOR_ID`): their own, or another's in a queue they administer;
/// admins and the cluster's own credential any. Work the state does not know is for the
/// caller to report.
///
/// # Errors
///
/// [`ApplyError::Denied`] naming what is missing.
pub(crate) fn may_act_on(
    state: &ClusterState,
    user: Option<&NamedUser>,
    act: &str,
    id: &str,
) -> Result<(), CallError> {
    let Some(user) = user else {
        return Ok(());
    };
    if state.users().get(&user.name).is_some_and(|u| u.admin) {
        return Ok(());
    }
    let (owner, queue) = match WorkId::from(id.split('/').next().unwrap_or(id)) {
        WorkId::Driver(driver) => {
            let Some(found) = state.known_driver(&driver) else {
                return Ok(());
            };
            let owner = state.driver_owner(&driver).map(|o| o.user.as_str());
            (owner, &found.desc.queue)
        }
        WorkId::App(app) => {
            let Some(found) = state.known_app(&app) else {
                return Ok(());
            };
            (state.app_user(&app), &found.desc.queue)
        }
    };
    if owner == Some(user.name.as_str()) || state.access(queue).may_administer(&user.name) {
        Ok(())
    } else {
        Err(CallError::Refused(ApplyError::Denied(format!(
            "user `{}` may not {act} `{id}`: it is not theirs, and that needs administer on queue `{queue}`",
            user.name
        ))))
    }
}

/// The response of a committed write, or why there is none.
pub(crate) fn committed(written: Result<Applied, WriteError>) -> Result<Response, CallError> {
    Ok(written??)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_leaders_refusal_tells_clients_how_long_to_wait() {
        let busy = WriteError::Busy {
            queued: 2048,
            retry_after: Duration::from_millis(120),
        };
        let status = Status::from(CallError::from(busy));
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            muster_proto::discovery::retry_after(&status),
            Some(Duration::from_millis(120))
        );
        assert_eq!(
            status.message(),
            "the leader is busy: 2048 client writes wait to be committed; send this one again \
             in 120 ms"
        );
    }
}
