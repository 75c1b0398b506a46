//! Named users and what they may do: adding and revoking them, and [`By`], the command a
//! named user's request travels in, which applies its op only when the user's credential is
//! still valid and the queues' access lists allow it (YARN's queue ACLs).
//!
//! A command without [`By`] comes from the holder of the cluster's own client credential, or
//! from the leader: it may do anything, as every command could before there were users.

use muster_core::access::user_name;
use muster_core::ids::{QueueName, Timestamp};
use serde::{Deserialize, Serialize};

use super::{
    AppFinished, Apply, KillExecutors, Op, SetAppPriority, SetExecutorLimit, SetProfileLimit,
    SubmitApp, SubmitDriverApp, SubmitGang, SubmitGangDriver,
};
use crate::ClusterState;
use crate::model::{Owner, User};
use crate::response::{ApplyError, Outcome, Response};
use crate::version::LogFormat;

/// A user is added, or one revoked is added again (with a new credential).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddUser {
    /// Their name.
    pub name: String,
    /// Whether they may do anything the cluster's own client credential may.
    pub admin: bool,
}

impl Apply for AddUser {
    /// Refused for a malformed name or a user who is there and not revoked.
    fn apply(&self, state: &mut ClusterState, _at: Timestamp) -> Result<Response, ApplyError> {
        user_name("name", &self.name)?;
        let user = state.users.entry(self.name.clone()).or_insert(User {
            admin: self.admin,
            generation: 0,
            revoked: true,
        });
        if !user.revoked {
            return Err(ApplyError::Conflict(format!(
                "user `{}` exists: revoke it first to issue a new credential",
                self.name
            )));
        }
        user.admin = self.admin;
        user.generation += 1;
        user.revoked = false;
        Ok(Response {
            outcome: Outcome::UserAdded {
                name: self.name.clone(),
                generation: user.generation,
            },
            effects: crate::response::Effects::default(),
        })
    }
}

/// A user's credential is revoked: every master refuses it from this command on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevokeUser {
    /// Their name.
    pub name: String,
}

impl Apply for RevokeUser {
    fn apply(&self, state: &mut ClusterState, _at: Timestamp) -> Result<Response, ApplyError> {
        let user = state
            .users
            .get_mut(&self.name)
            .filter(|user| !user.revoked)
            .ok_or_else(|| ApplyError::Invalid {
                field: "name".to_owned(),
                message: format!("no user `{}` to revoke", self.name),
            })?;
        user.revoked = true;
        Ok(Response::default())
    }
}

/// A named user's request: `op`, made with the credential of `user` at `generation`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct By {
    /// Who asks.
    pub user: String,
    /// The generation of the credential they asked with.
    pub generation: u64,
    /// What they ask for: no batch, no other [`By`].
    pub op: Box<Op>,
}

impl Apply for By {
    /// Refused with [`ApplyError::Denied`] when the credential is no longer valid or the user
    /// may not do this; else `op` applies, recorded as theirs.
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        let user = state
            .users
            .get(&self.user)
            .filter(|user| !user.revoked && user.generation == self.generation)
            .ok_or_else(|| {
                ApplyError::Denied(format!(
                    "the credential of user `{}` was revoked",
                    self.user
                ))
            })?;
        if !user.admin {
            authorize(state, &self.user, &self.op)?;
        }
        within_limit(state, &self.user, &self.op)?;
        match &*self.op {
            Op::Batch(_) | Op::By(_) => Err(ApplyError::Batch),
            op if op.app_submitted().is_some() => {
                let mut op = op.clone();
                if let Some(submit) = op.app_submitted_mut() {
                    submit.desc.user.clone_from(&self.user);
                }
                let response = state.apply_op(&op, at)?;
                if let Outcome::AppSubmitted { id } = &response.outcome {
                    state.app_users.insert(id.clone(), self.user.clone());
                }
                Ok(response)
            }
            op if op.driver_submitted() => {
                let response = state.apply_op(&self.op, at)?;
                if let Outcome::DriverSubmitted { id } = &response.outcome {
                    let owner = Owner {
                        user: self.user.clone(),
                        generation: self.generation,
                    };
                    state.driver_users.insert(id.clone(), owner);
                }
                Ok(response)
            }
            op => state.apply_op(op, at),
        }
    }
}

/// Whether a submission leaves `user` within their queue's cap per user
/// ([`ClusterState::active_of`]).
fn within_limit(state: &ClusterState, user: &str, op: &Op) -> Result<(), ApplyError> {
    let Some(queue) = op.submitted_to() else {
        return Ok(());
    };
    let Some(max) = state.access(queue).max_per_user else {
        return Ok(());
    };
    let active = state.active_of(user, queue);
    if active < max as usize {
        Ok(())
    } else {
        Err(ApplyError::Conflict(format!(
            "user `{user}` has {active} applications and waiting drivers in queue `{queue}`, its limit per user"
        )))
    }
}

/// Whether `user`, not an admin, may have `op` applied.
fn authorize(state: &ClusterState, user: &str, op: &Op) -> Result<(), ApplyError> {
    let submit = |queue: &QueueName| {
        let prior = state.is_prior(queue);
        // An unknown queue is the op's own refusal.
        if state.takes_work(queue).is_err() || state.access(queue).may_submit(prior, user) {
            Ok(())
        } else {
            Err(ApplyError::Denied(format!(
                "user `{user}` may not submit to queue `{queue}`: it is not on the queue's submit list"
            )))
        }
    };
    // Work is its owner's to stop or steer, and its queue's administrators'.
    let steer = |what: &str, owner: Option<&str>, queue: &QueueName| {
        if owner == Some(user) || state.access(queue).may_administer(user) {
            Ok(())
        } else {
            Err(ApplyError::Denied(format!(
                "user `{user}` may not {what} of {}: that needs administer on queue `{queue}`",
                owner.map_or_else(|| "the cluster's admin".to_owned(), |o| format!("`{o}`"))
            )))
        }
    };
    if let Some(queue) = op.submitted_to() {
        return submit(queue);
    }
    match op {
        Op::KillApp(kill_app) => match state.apps.get(&kill_app.id) {
            Some(app) => steer(
                &format!("kill `{}`", app.id),
                state.app_user(&app.id),
                &app.desc.queue,
            ),
            None => Ok(()),
        },
        Op::KillDriver(kill_driver) => match state.drivers.get(&kill_driver.id) {
            Some(driver) => steer(
                &format!("kill `{}`", driver.id),
                state.driver_owner(&driver.id).map(|o| o.user.as_str()),
                &driver.desc.queue,
            ),
            None => Ok(()),
        },
        // Written as a user's only from the format that made them theirs; before it, as
        // release 0.2.0 applies them, they are an admin's.
        Op::SetExecutorLimit(SetExecutorLimit { app: id, .. })
        | Op::SetAppPriority(SetAppPriority { app: id, .. })
        | Op::SetProfileLimit(SetProfileLimit { app: id, .. })
        | Op::KillExecutors(KillExecutors { app: id, .. })
        | Op::AppFinished(AppFinished { id, .. })
            if state.log_format() >= LogFormat::THIRD =>
        {
            match state.apps.get(id) {
                Some(app) => steer(
                    &format!("steer `{id}`"),
                    state.app_user(id),
                    &app.desc.queue,
                ),
                None => Ok(()),
            }
        }
        _ => Err(ApplyError::Denied(format!(
            "user `{user}` is not an admin: only admins change the cluster itself"
        ))),
    }
}

impl Op {
    /// The application this op submits, if it submits one.
    pub fn app_submitted(&self) -> Option<&SubmitApp> {
        match self {
            Op::SubmitApp(submit)
            | Op::SubmitGang(SubmitGang { app: submit, .. })
            | Op::SubmitDriverApp(SubmitDriverApp { app: submit, .. }) => Some(submit),
            Op::SubmitWithSettings(prioritized) => prioritized.submit.app_submitted(),
            _ => None,
        }
    }

    /// The queue of the application or driver this op submits, if it submits one.
    fn submitted_to(&self) -> Option<&QueueName> {
        match self {
            Op::SubmitDriver(submit)
            | Op::SubmitGangDriver(SubmitGangDriver { driver: submit, .. }) => {
                Some(&submit.desc.queue)
            }
            Op::SubmitWithSettings(prioritized) => prioritized.submit.submitted_to(),
            op => op.app_submitted().map(|submit| &submit.desc.queue),
        }
    }

    /// Whether this op submits a driver.
    fn driver_submitted(&self) -> bool {
        match self {
            Op::SubmitDriver(_) | Op::SubmitGangDriver(_) => true,
            Op::SubmitWithSettings(prioritized) => prioritized.submit.driver_submitted(),
            _ => false,
        }
    }

    fn app_submitted_mut(&mut self) -> Option<&mut SubmitApp> {
        match self {
            Op::SubmitApp(submit)
            | Op::SubmitGang(SubmitGang { app: submit, .. })
            | Op::SubmitDriverApp(SubmitDriverApp { app: submit, .. }) => Some(submit),
            Op::SubmitWithSettings(prioritized) => prioritized.submit.app_submitted_mut(),
            _ => None,
        }
    }

    /// Whether this is an application's own request on its stream: its executor limit or a
    /// profile's, a release of executors, or its end.
    pub fn is_app_request(&self) -> bool {
        matches!(
            self,
            Op::SetExecutorLimit(_)
                | Op::SetProfileLimit(_)
                | Op::KillExecutors(_)
                | Op::AppFinished(_)
        )
    }
}
