//! Preemption (`muster_core::preempt` decides it): executors of ordinary queues stop so that
//! prior work fits, and the room they free is kept for that work until their processes are
//! surely gone, all in one command, so nobody takes the room and a new leader keeps it. The
//! leader releases kept room whose grace has passed with [`ExpireReservations`].

use muster_core::ids::{AppId, ExecutorId, Timestamp};
use serde::{Deserialize, Serialize};

use super::Apply;
use crate::ClusterState;
use crate::model::{DriverState, ExecutorState, Reservation};
use crate::response::{ApplyError, Effects, Outcome, Response};

/// Stop `victims` and keep `reservations` for `grace_ms`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Preempt {
    /// The executors to stop.
    pub victims: Vec<(AppId, ExecutorId)>,
    /// The room to keep, and for whom; their `until` is set from the command's time.
    pub reservations: Vec<Reservation>,
    /// How long the victims' processes may take to end (their worker's kill grace, and a
    /// margin): the reservations last that long.
    pub grace_ms: u64,
}

/// Releases the kept room whose grace has passed by the command's time.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpireReservations {}

impl Apply for ExpireReservations {
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        state.expire_reservations(at);
        Ok(Response::default())
    }
}

impl Apply for Preempt {
    /// Refuses, changing nothing: no victim, a victim that is not a live executor or runs
    /// for a prior queue, a reservation for work that is not waiting, or one that does not
    /// fit its worker once the victims are gone.
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        if self.victims.is_empty() {
            return Err(ApplyError::Invalid {
                field: "victims".into(),
                message: "a preemption needs a victim".into(),
            });
        }
        for (app, executor) in &self.victims {
            let live = state
                .apps
                .get(app)
                .is_some_and(|a| a.executors.contains_key(executor));
            if !live {
                return Err(ApplyError::UnknownExecutor(app.clone(), *executor));
            }
            let queue = &state.apps[app].desc.queue;
            if state.queues.iter().any(|q| &q.name == queue && q.prior) {
                return Err(ApplyError::Conflict(format!(
                    "`{app}` runs in a prior queue: prior work is never preempted"
                )));
            }
        }
        for reservation in &self.reservations {
            let waiting = state.apps.contains_key(&reservation.owner.as_str().into())
                || state
                    .drivers
                    .get(&reservation.owner.as_str().into())
                    .is_some_and(|d| d.state == DriverState::Submitted);
            if !waiting {
                return Err(ApplyError::Conflict(format!(
                    "`{}` does not wait: nothing to reserve room for",
                    reservation.owner
                )));
            }
            reservation
                .resources
                .validate("reservations.")
                .map_err(ApplyError::from)?;
        }
        // Check the reservations against the room the victims leave, on a copy: a refusal
        // must change nothing.
        let mut after = state.clone();
        let mut effects = Effects::default();
        for (app, executor) in &self.victims {
            if after.apps[app].executors.contains_key(executor) {
                after.end_executor(app, *executor, ExecutorState::Killed, None, &mut effects);
            }
        }
        let until = Timestamp(at.0.saturating_add(self.grace_ms));
        for reservation in &self.reservations {
            after
                .room_on(&reservation.worker, &reservation.resources)
                .map_err(|rejection| {
                    ApplyError::Conflict(format!(
                        "no room to keep on `{}` for `{}`: {rejection}",
                        reservation.worker, reservation.owner
                    ))
                })?;
            let worker = after
                .workers
                .get_mut(&reservation.worker)
                .expect("room_on found it");
            crate::state::take(worker, &reservation.resources);
            after.reservations.push(Reservation {
                until,
                ..reservation.clone()
            });
        }
        *state = after;
        Ok(Response {
            outcome: Outcome::Preempted {
                victims: self.victims.len(),
            },
            effects,
        })
    }
}
