//! Preemption (`muster_core::preempt` decides it): executors of ordinary queues stop so that
//! prior work fits, or, with queue capacities, so that an ordinary queue below its guarantee
//! gets it back from queues above theirs, or so that an application gets room its own leaf's
//! applications it outranks hold (by priority or share); the room they free is kept for that
//! work until
//! their processes are surely gone, all in one command, so nobody takes the room and a new
//! leader keeps it. Once the grace has passed, [`GrantReservations`] gives the room to its
//! owner. What of a victim's room is not kept for that work stays the victim's until its end
//! is reported (from log format 4), as any stopped process's does.

use std::collections::BTreeMap;

use muster_core::ids::{AppId, ExecutorId, Timestamp, WorkId, WorkerId};
use muster_core::model::PassConfig;
use muster_core::plan::DriverLaunch;
use muster_core::preempt::{Preempting, Preemption, check_for_guarantees, check_within_queue};
use muster_core::resources::{ResourceAmounts, Resources};
use serde::{Deserialize, Serialize};

use super::plan::{Grant, apply_plan};
use super::{Apply, Op};
use crate::ClusterState;
use crate::model::{DriverState, ExecutorState, Reservation};
use crate::response::{ApplyError, Effects, Outcome, Response};
use crate::stopping::Stopped;
use crate::version::LogFormat;

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

/// The op for what `muster_core::preempt` chose for `preempting`'s work, keeping the room for
/// `grace_ms`: room kept for a resource profile is kept for it from log format 4 on
/// ([`PreemptForProfiles`]); before, and for room of the owners' own sizes, [`Preempt`] (or
/// `PreemptForGuarantees`). A preemption inside queues is [`PreemptWithinQueue`], which only
/// a cluster at log format 4 is given.
pub fn preempt_op(
    chosen: Preemption,
    grace_ms: u64,
    preempting: Preempting,
    state: &ClusterState,
) -> Op {
    let profiles: Vec<u32> = chosen.reservations.iter().map(|r| r.profile).collect();
    let preempt = Preempt::chosen(chosen, grace_ms);
    let for_profiles =
        profiles.iter().any(|&profile| profile != 0) && state.log_format() >= LogFormat::FOURTH;
    match preempting {
        Preempting::WithinQueue => Op::PreemptWithinQueue(PreemptWithinQueue { preempt, profiles }),
        _ if for_profiles => Op::PreemptForProfiles(PreemptForProfiles {
            preempt,
            for_guarantees: preempting == Preempting::BelowGuarantee,
            profiles,
        }),
        Preempting::Prior => Op::Preempt(preempt),
        Preempting::BelowGuarantee => Op::PreemptForGuarantees(preempt),
    }
}

/// A preemption inside ordinary leaf queues (from log format 4): applications stop
/// executors of their own leaf's applications they outrank, by priority or, under `fair` and
/// `drf`, by share ([`muster_core::preempt::check_within_queue`]); each reservation is kept
/// for the profile `profiles` names for it, as [`PreemptForProfiles`] keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PreemptWithinQueue {
    /// The preemption.
    pub preempt: Preempt,
    /// The profile each reservation is kept for.
    pub profiles: Vec<u32>,
}

impl Apply for PreemptWithinQueue {
    /// Refuses, changing nothing, as [`PreemptForProfiles`] does, and a preemption the rule
    /// of preemption inside queues does not allow.
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        check_profiles(state, &self.preempt.reservations, &self.profiles)?;
        self.preempt
            .apply_for(state, at, Preempting::WithinQueue, &self.profiles)
    }
}

impl Op {
    /// The preemption this op makes, if it makes one.
    pub fn preemption(&self) -> Option<&Preempt> {
        match self {
            Op::Preempt(preempt) | Op::PreemptForGuarantees(preempt) => Some(preempt),
            Op::PreemptForProfiles(PreemptForProfiles { preempt, .. })
            | Op::PreemptWithinQueue(PreemptWithinQueue { preempt, .. }) => Some(preempt),
            _ => None,
        }
    }
}

impl Preempt {
    /// The command for what `muster_core::preempt` chose, keeping the room for `grace_ms`.
    pub fn chosen(chosen: Preemption, grace_ms: u64) -> Self {
        Self {
            victims: chosen
                .victims
                .into_iter()
                .map(|v| (v.app, v.executor))
                .collect(),
            reservations: chosen
                .reservations
                .into_iter()
                .map(|r| Reservation {
                    owner: r.id,
                    worker: r.worker,
                    resources: r.resources,
                    until: Timestamp(0),
                })
                .collect(),
            grace_ms,
        }
    }
}

/// A preemption whose room is kept for resource profiles (from log format 4): `preempt` as
/// [`Preempt`] (or, `for_guarantees`, as `PreemptForGuarantees`) has it, each reservation
/// granted as the profile `profiles` names for it (by position; 0: the first of its owner's
/// sizes it fits, as [`Preempt`]'s), not as another size that happens to fit the room.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PreemptForProfiles {
    /// The preemption.
    pub preempt: Preempt,
    /// Whether it is for queues below their guarantee rather than for prior work.
    pub for_guarantees: bool,
    /// The profile each reservation is kept for.
    pub profiles: Vec<u32>,
}

impl Apply for PreemptForProfiles {
    /// Refuses, changing nothing, as [`Preempt`] does, and a list of profiles that does not
    /// match the reservations, or a profile its owner does not have or whose size the room
    /// does not fit.
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        check_profiles(state, &self.preempt.reservations, &self.profiles)?;
        let preempting = if self.for_guarantees {
            Preempting::BelowGuarantee
        } else {
            Preempting::Prior
        };
        self.preempt
            .apply_for(state, at, preempting, &self.profiles)
    }
}

/// Refuses a list of `profiles` that does not match `reservations`, or a profile its owner
/// does not have or whose size the room does not fit.
fn check_profiles(
    state: &ClusterState,
    reservations: &[Reservation],
    profiles: &[u32],
) -> Result<(), ApplyError> {
    if profiles.len() != reservations.len() {
        return Err(ApplyError::Invalid {
            field: "profiles".into(),
            message: format!(
                "{} profiles for {} reservations",
                profiles.len(),
                reservations.len()
            ),
        });
    }
    for (reservation, &id) in reservations.iter().zip(profiles) {
        if id == 0 {
            continue;
        }
        let profile = match &reservation.owner {
            WorkId::App(app) => state
                .profiles
                .get(app)
                .and_then(|profiles| profiles.profiles.get(&id)),
            WorkId::Driver(_) => None,
        };
        if !profile.is_some_and(|profile| profile.fits(&reservation.resources)) {
            return Err(ApplyError::Invalid {
                field: "profiles".into(),
                message: format!(
                    "`{}` has no resource profile {id} of the size kept for it",
                    reservation.owner
                ),
            });
        }
    }
    Ok(())
}

/// The room kept for `owners` goes to them, now that the victims' processes are gone:
/// released and, in the same command, granted to each owner still waiting as the
/// preemption planned it (a launch or grant that no longer fits is rejected, and its room
/// stays free). The leader names the owners by its own clock: command times of different
/// leaders are never compared.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantReservations {
    /// Whose kept room to grant.
    pub owners: Vec<WorkId>,
}

impl Apply for GrantReservations {
    fn apply(&self, state: &mut ClusterState, _at: Timestamp) -> Result<Response, ApplyError> {
        let granted = state.release_kept_room(|r| self.owners.contains(&r.owner));
        let (mut drivers, mut grants) = (Vec::new(), Vec::new());
        for (room, profile) in granted {
            match room.owner {
                WorkId::Driver(driver)
                    if state
                        .drivers
                        .get(&driver)
                        .is_some_and(|d| d.state == DriverState::Submitted) =>
                {
                    drivers.push(DriverLaunch {
                        driver,
                        worker: room.worker,
                    });
                }
                WorkId::App(app) if state.apps.contains_key(&app) => {
                    let grant = Grant {
                        app,
                        worker: room.worker,
                        resources: room.resources,
                        count: 1,
                    };
                    grants.push((grant, (profile != 0).then_some(profile)));
                }
                // What it was kept for ended meanwhile: the room stays free.
                WorkId::Driver(_) | WorkId::App(_) => {}
            }
        }
        // Room kept for a profile is granted as that profile; other room as the first of its
        // app's sizes it fits.
        let grants = grants.iter().map(|(grant, profile)| (grant, *profile));
        Ok(apply_plan(state, &drivers, grants))
    }
}

impl Apply for Preempt {
    fn apply(&self, state: &mut ClusterState, at: Timestamp) -> Result<Response, ApplyError> {
        self.apply_for(state, at, Preempting::Prior, &[])
    }
}

/// Each victim ended in `effects` keeps, until its end is reported, the cores and memory of
/// its that the room kept on its worker (`reservations`) does not already hold: its process
/// runs on through its kill grace, and nothing else may be placed on its room meanwhile.
fn keep_victims_room(state: &mut ClusterState, reservations: &[Reservation], effects: &Effects) {
    let mut kept: BTreeMap<&WorkerId, (u32, u64)> = BTreeMap::new();
    for reservation in reservations {
        let (cores, memory_mb) = kept.entry(&reservation.worker).or_default();
        *cores += reservation.resources.cores;
        *memory_mb += reservation.resources.memory_mb;
    }
    for (app, victim) in &effects.ended_executors {
        let (cores, memory_mb) = kept.entry(&victim.worker).or_default();
        let covered = (
            victim.resources.cores.min(*cores),
            victim.resources.memory_mb.min(*memory_mb),
        );
        *cores -= covered.0;
        *memory_mb -= covered.1;
        let room = Resources {
            cores: victim.resources.cores - covered.0,
            memory_mb: victim.resources.memory_mb - covered.1,
            custom: ResourceAmounts::new(),
        };
        let process = Stopped::Executor(app.clone(), victim.id);
        state.keep_room_until_ended(process, &victim.worker, room);
    }
}

impl Preempt {
    /// Applies the preemption for `preempting`'s work. Refuses, changing nothing: no
    /// victim, a victim that is not a live executor or runs for a prior queue, a reservation
    /// for work that is not waiting or that the rule does not let preempt (prior work, or
    /// an app below its queue's guarantee whose victims leave every queue at or above its
    /// own), or one that does not fit its worker once the victims are gone. Each reservation
    /// is kept for the profile `profiles` names for it (none: the first size it fits).
    pub(crate) fn apply_for(
        &self,
        state: &mut ClusterState,
        at: Timestamp,
        preempting: Preempting,
        profiles: &[u32],
    ) -> Result<Response, ApplyError> {
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
            if state.is_prior(queue) {
                return Err(ApplyError::Conflict(format!(
                    "`{app}` runs in a prior queue: prior work is never preempted"
                )));
            }
        }
        for reservation in &self.reservations {
            let owner = &reservation.owner;
            let waiting = match owner {
                WorkId::App(app) => state.apps.get(app).map(|a| &a.desc.queue),
                WorkId::Driver(driver) => state
                    .drivers
                    .get(driver)
                    .filter(|d| d.state == DriverState::Submitted)
                    .map(|d| &d.desc.queue),
            };
            let Some(queue) = waiting else {
                return Err(ApplyError::Conflict(format!(
                    "`{owner}` does not wait: nothing to reserve room for"
                )));
            };
            match preempting {
                Preempting::Prior if !state.is_prior(queue) => {
                    return Err(ApplyError::Conflict(format!(
                        "`{owner}` is not prior work: only prior work preempts"
                    )));
                }
                Preempting::BelowGuarantee if matches!(owner, WorkId::Driver(_)) => {
                    return Err(ApplyError::Conflict(format!(
                        "`{owner}` is a driver: only applications preempt for guarantees"
                    )));
                }
                Preempting::WithinQueue if matches!(owner, WorkId::Driver(_)) => {
                    return Err(ApplyError::Conflict(format!(
                        "`{owner}` is a driver: only applications preempt inside their queue"
                    )));
                }
                Preempting::Prior | Preempting::BelowGuarantee | Preempting::WithinQueue => {}
            }
            reservation
                .resources
                .validate("reservations.")
                .map_err(ApplyError::from)?;
        }
        if preempting == Preempting::BelowGuarantee {
            let owners: Vec<&AppId> = self
                .reservations
                .iter()
                .filter_map(|r| match &r.owner {
                    WorkId::App(app) => Some(app),
                    WorkId::Driver(_) => None,
                })
                .collect();
            // Room already kept for a queue is not yet counted in what it holds: it waits
            // for that room to be granted before it preempts again.
            if let Some(queue) = owners
                .iter()
                .map(|&owner| &state.apps[owner].desc.queue)
                .find(|&queue| state.room_kept_for_queue(queue))
            {
                return Err(ApplyError::Conflict(format!(
                    "room is already kept for queue `{queue}`: it preempts again once that \
                     room is granted"
                )));
            }
            let snapshot = state.scheduling_snapshot(PassConfig::default());
            check_for_guarantees(&snapshot, &self.victims, &owners)
                .map_err(|broken| ApplyError::Conflict(broken.to_string()))?;
        }
        if preempting == Preempting::WithinQueue {
            // Room already kept for an owner is not yet counted in what it holds: it waits
            // for that room to be granted before it preempts again.
            if let Some(kept) = state
                .reservations
                .iter()
                .find(|kept| self.reservations.iter().any(|r| r.owner == kept.owner))
            {
                return Err(ApplyError::Conflict(format!(
                    "room is already kept for `{}`: it preempts again once that room is \
                     granted",
                    kept.owner
                )));
            }
            let rooms: Vec<(&AppId, &Resources)> = self
                .reservations
                .iter()
                .filter_map(|r| match &r.owner {
                    WorkId::App(app) => Some((app, &r.resources)),
                    WorkId::Driver(_) => None,
                })
                .collect();
            let snapshot = state.scheduling_snapshot(PassConfig::default());
            check_within_queue(&snapshot, &self.victims, &rooms)
                .map_err(|broken| ApplyError::Conflict(broken.to_string()))?;
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
        let profiles = profiles.iter().copied().chain(std::iter::repeat(0));
        for (reservation, profile) in self.reservations.iter().zip(profiles) {
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
            after.show_worker_to_passes(&reservation.worker);
            let reservation = Reservation {
                until,
                ..reservation.clone()
            };
            after.keep_room(reservation, profile);
        }
        keep_victims_room(&mut after, &self.reservations, &effects);
        *state = after;
        Ok(Response {
            outcome: Outcome::Preempted {
                victims: self.victims.len(),
            },
            effects,
        })
    }
}
