//! Preemption by the leader ([`muster_core::preempt`] chooses; this part decides when).
//!
//! With a [`PreemptionPolicy`], each pass notes since when the work of its prior queues has
//! waited for room ([`Preemptor::note_room_waits`]). When a pass has nothing to place and
//! some of that work has waited past the delay (and has no room kept for it already), the
//! leader proposes the choice as one `Preempt` command ([`Preemptor::choose`]): the victims
//! end KILLED and the room they free is kept for the prior work. With `capacities`,
//! applications of ordinary queues waiting for room are noted too, and when no prior work
//! preempts, those below their queue's guarantee preempt executors of queues above theirs
//! the same way, as one `PreemptForGuarantees` command. With `within_queues`, when neither
//! does, applications of ordinary leaves preempt executors of their own leaf's applications
//! they outrank (by priority, or under `fair` and `drf` by share), as one
//! `PreemptWithinQueue` command, once the log format admits it. Once the grace has passed by this
//! leader's clock (a new leader gives room it finds kept a whole grace), a
//! `GrantReservations` command gives the room to that work ([`Preemptor::grant`]), and that
//! work waits a whole delay again before it may preempt again. One preemption and one grant
//! are in flight at a time; a refused preemption (the state moved on) is chosen again by a
//! later pass.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::{Duration, Instant};

use foldhash::fast::FixedState;
use muster_core::ids::{QueueName, WorkId, millis};
use muster_core::model::Snapshot;
use muster_core::plan::Plan;
use muster_core::preempt::Preempting;
use muster_state::commands::{GrantReservations, preempt_op};
use muster_state::version::LogFormat;
use muster_state::{ClusterState, Op};

/// How long room kept under an earlier leader is kept by a leader without a preemption
/// policy: the workers' default kill grace.
const DEFAULT_KEEP: Duration = Duration::from_secs(10);

/// When prior work may preempt ordinary executors ([`muster_core::preempt`]).
#[derive(Clone, Debug, PartialEq)]
pub struct PreemptionPolicy {
    /// Prior queues whose waiting work preempts.
    pub queues: BTreeSet<QueueName>,
    /// How long work must have waited for room before it preempts.
    pub delay: Duration,
    /// How long the room it frees is kept for it: at least the workers' kill grace, so the
    /// victims' processes are gone before anything else is placed there.
    pub grace: Duration,
    /// The most of the ALIVE cores one round may stop.
    pub max_fraction: f64,
    /// Whether applications of ordinary queues below their guaranteed capacity preempt
    /// executors of queues above theirs, when no prior work preempts.
    pub capacities: bool,
    /// Whether applications of ordinary leaves preempt executors of their own leaf's
    /// applications they outrank, when nothing else preempts.
    pub within_queues: bool,
}

impl PreemptionPolicy {
    /// Why this policy would never preempt under `queues` (the cluster's queue tree, each
    /// queue's name and whether it is prior): a preempting queue it does not have, or one
    /// that is not prior.
    pub fn never_preempts_under<'q>(
        &self,
        queues: impl IntoIterator<Item = (&'q QueueName, bool)>,
    ) -> Option<String> {
        let prior: BTreeMap<&QueueName, bool> = queues.into_iter().collect();
        self.queues.iter().find_map(|name| match prior.get(name) {
            Some(true) => None,
            Some(false) => Some(format!(
                "`{name}` is not a prior queue: it would never preempt"
            )),
            None => Some(format!(
                "no queue `{name}` among the queues: it would never preempt"
            )),
        })
    }

    /// Why one round could stop no executor on `alive_cores` cores: `max_fraction` of them
    /// is less than one core, or fewer cores than each of `ordinary_executors` holds (the
    /// cores of each executor of an ordinary queue, the only victims: one larger than what
    /// is left of a round is passed over). The walk of them stops at the first that fits.
    pub fn stops_nothing_on(
        &self,
        alive_cores: u64,
        ordinary_executors: impl IntoIterator<Item = u32>,
    ) -> Option<String> {
        let budget = (self.max_fraction * alive_cores as f64).floor() as u64;
        if alive_cores == 0 {
            return None;
        }
        if budget == 0 {
            return Some(format!(
                "max_fraction {} of {alive_cores} cores is less than one core: no round could \
                 stop an executor",
                self.max_fraction
            ));
        }
        let mut smallest: Option<u32> = None;
        for cores in ordinary_executors {
            if u64::from(cores) <= budget {
                return None;
            }
            smallest = Some(smallest.map_or(cores, |s| s.min(cores)));
        }
        let round = if budget == 1 {
            "1 core".to_owned()
        } else {
            format!("{budget} cores")
        };
        smallest.map(|smallest| {
            format!(
                "max_fraction {} of {alive_cores} cores is {round}, fewer than any executor of \
                 an ordinary queue holds (the smallest, {smallest}): no round could stop one",
                self.max_fraction
            )
        })
    }

    /// Why this policy can never stop an executor in `state`: it preempts for a queue that
    /// is missing or not prior, or a round's `max_fraction` of the ALIVE cores is less than
    /// one core or than any running executor of an ordinary queue.
    pub fn cannot_preempt_in(&self, state: &ClusterState) -> Option<String> {
        let queues = state.queues_in_force();
        let ordinary_executors = state
            .apps()
            .values()
            .filter(|a| !state.is_prior(&a.desc.queue))
            .flat_map(|a| a.executors.values().map(|e| e.resources.cores));
        self.never_preempts_under(queues.iter().map(|q| (&q.name, q.prior)))
            .or_else(|| {
                let alive_cores = u64::from(state.alive_capacity().cores);
                self.stops_nothing_on(alive_cores, ordinary_executors)
            })
    }
}

/// Room waits, kept room and the preemption and grant in flight.
#[derive(Debug)]
pub(super) struct Preemptor {
    policy: Option<PreemptionPolicy>,
    /// Since when each app or driver of a preempting queue has waited for room, without a
    /// break, as the passes saw it.
    room_waits: BTreeMap<WorkId, Instant>,
    /// When the room kept in the log for each owner goes to it: a grace after the
    /// preemption that kept it committed (or after this leader first saw it), by this
    /// leader's clock.
    kept: BTreeMap<WorkId, Instant>,
    /// A preemption is proposed and not settled yet.
    preempt_in_flight: bool,
    /// A grant of kept room is proposed and not settled yet.
    grant_in_flight: bool,
    /// Why the policy can never stop an executor, as last said.
    said_cannot_preempt: Option<String>,
}

impl Preemptor {
    pub(super) fn new(policy: Option<PreemptionPolicy>) -> Self {
        Self {
            policy,
            room_waits: BTreeMap::new(),
            kept: BTreeMap::new(),
            preempt_in_flight: false,
            grant_in_flight: false,
            said_cannot_preempt: None,
        }
    }

    /// How long preempted room is kept: the policy's grace, or without a policy (room kept
    /// under an earlier leader's) the workers' default kill grace.
    pub(super) fn keep_for(&self) -> Duration {
        self.policy
            .as_ref()
            .map_or(DEFAULT_KEEP, |policy| policy.grace)
    }

    /// The grant of the room kept in the log whose grace has passed at `now`, if any and
    /// none is in flight; a leader that finds room kept gives it a whole grace first. An
    /// owner granted its room waits a whole delay again before it may preempt again.
    pub(super) fn grant(&mut self, now: Instant, state: &ClusterState) -> Option<Op> {
        let owners: BTreeSet<&WorkId> = state.reservations().iter().map(|r| &r.owner).collect();
        self.kept.retain(|owner, _| owners.contains(owner));
        let keep = self.keep_for();
        for owner in owners {
            self.kept.entry(owner.clone()).or_insert(now + keep);
        }
        if self.grant_in_flight {
            return None;
        }
        let due: Vec<WorkId> = self
            .kept
            .iter()
            .filter(|(_, until)| now >= **until)
            .map(|(owner, _)| owner.clone())
            .collect();
        if due.is_empty() {
            return None;
        }
        for owner in &due {
            self.room_waits.remove(owner);
        }
        self.grant_in_flight = true;
        Some(Op::GrantReservations(GrantReservations { owners: due }))
    }

    /// The grant in flight was settled, committed or not.
    pub(super) fn grant_settled(&mut self) {
        self.grant_in_flight = false;
    }

    /// Says in the log, once as it changes, why the policy can never stop an executor in
    /// `state`, if it cannot: a setting the operator should fix, as `muster queues` and the
    /// status page show it.
    pub(super) fn note_settings(&mut self, state: &ClusterState) {
        let cannot_preempt = self
            .policy
            .as_ref()
            .and_then(|p| p.cannot_preempt_in(state));
        if cannot_preempt != self.said_cannot_preempt {
            if let Some(why) = &cannot_preempt {
                tracing::warn!("preemption can never stop an executor: {why}");
            }
            self.said_cannot_preempt = cannot_preempt;
        }
    }

    /// Nothing waits for room any more.
    pub(super) fn nothing_waits(&mut self) {
        self.room_waits.clear();
    }

    /// Notes since when the work of preempting queues has waited for room, as `plan` (of
    /// `snapshot`, at `now`) has it.
    pub(super) fn note_room_waits(&mut self, now: Instant, snapshot: &Snapshot, plan: &Plan) {
        let Some(policy) = &self.policy else {
            return;
        };
        // A preempting queue that is not prior (any more) preempts nothing; with capacities,
        // any ordinary queue's application may preempt for its guarantee, and inside queues
        // for what it outranks.
        let preempts = |queue: &QueueName, app: bool| {
            let prior = snapshot.queues.iter().any(|c| &c.name == queue && c.prior);
            let ordinary = policy.capacities || policy.within_queues;
            (prior && policy.queues.contains(queue)) || (ordinary && app && !prior)
        };
        // Hashed: every app of the snapshot is looked up in them.
        let mut apps = HashSet::with_hasher(FixedState::default());
        let mut drivers = HashSet::with_hasher(FixedState::default());
        let for_room = plan.waiting.iter().filter(|w| w.reason.is_for_room());
        for waiting in for_room {
            match &waiting.id {
                WorkId::App(id) => apps.insert(id),
                WorkId::Driver(id) => drivers.insert(id),
            };
        }
        // Found by a walk of the snapshot that copies only the ids of work waiting for room.
        let waits: BTreeSet<WorkId> = snapshot
            .apps
            .iter()
            .filter(|a| apps.contains(&a.id) && preempts(&a.queue, true))
            .map(|a| WorkId::App(a.id.clone()))
            .chain(
                snapshot
                    .drivers
                    .iter()
                    .filter(|d| drivers.contains(&d.id) && preempts(&d.queue, false))
                    .map(|d| WorkId::Driver(d.id.clone())),
            )
            .collect();
        // Each keeps the time it was first noted at: both are in id order, so merged in one
        // walk.
        let mut noted = std::mem::take(&mut self.room_waits).into_iter().peekable();
        self.room_waits = waits
            .into_iter()
            .map(|id| {
                while noted.next_if(|(earlier, _)| earlier < &id).is_some() {}
                let since = noted.next_if(|(earlier, _)| earlier == &id);
                (id, since.map_or(now, |(_, since)| since))
            })
            .collect();
    }

    /// The preemption `muster_core::preempt` chooses at `now` for the work that has waited
    /// for room past the delay and has no room kept for it yet, with the owners of the room
    /// it keeps; none while one is in flight.
    pub(super) fn choose(
        &mut self,
        now: Instant,
        state: &ClusterState,
        snapshot: &Snapshot,
    ) -> Option<(Op, Vec<WorkId>)> {
        let policy = self.policy.as_ref()?;
        if self.preempt_in_flight {
            return None;
        }
        let kept: BTreeSet<&WorkId> = state.reservations().iter().map(|r| &r.owner).collect();
        let eligible: BTreeSet<WorkId> = self
            .room_waits
            .iter()
            .filter(|(id, since)| {
                now.saturating_duration_since(**since) >= policy.delay && !kept.contains(id)
            })
            .map(|(id, _)| id.clone())
            .collect();
        if eligible.is_empty() {
            return None;
        }
        // Prior work first; then, with capacities, ordinary work below its guarantee, of
        // queues without room kept for them already; then, inside queues, applications that
        // outrank others of their leaf.
        let waits_for_guarantee: BTreeSet<WorkId> = eligible
            .iter()
            .filter(|id| match id {
                WorkId::App(app) => state
                    .apps()
                    .get(app)
                    .is_some_and(|a| !state.room_kept_for_queue(&a.desc.queue)),
                WorkId::Driver(_) => false,
            })
            .cloned()
            .collect();
        let choose = |preempting| {
            let eligible = match preempting {
                Preempting::Prior | Preempting::WithinQueue => &eligible,
                Preempting::BelowGuarantee => &waits_for_guarantee,
            };
            muster_core::preempt::choose(snapshot, eligible, policy.max_fraction, preempting)
                .unwrap_or_else(|error| {
                    panic!("the state gave an invalid scheduling snapshot: {error}")
                })
                .map(|chosen| (chosen, preempting))
        };
        // Inside queues only once every master reads the op that says so.
        let within_queues = policy.within_queues && state.log_format() >= LogFormat::FOURTH;
        let (chosen, preempting) = choose(Preempting::Prior)
            .or_else(|| {
                policy
                    .capacities
                    .then(|| choose(Preempting::BelowGuarantee))
                    .flatten()
            })
            .or_else(|| {
                within_queues
                    .then(|| choose(Preempting::WithinQueue))
                    .flatten()
            })?;
        let owners = chosen.reservations.iter().map(|r| r.id.clone()).collect();
        let op = preempt_op(chosen, millis(policy.grace), preempting, state);
        self.preempt_in_flight = true;
        Some((op, owners))
    }

    /// The preemption in flight was refused or not committed: a later pass chooses again.
    pub(super) fn preempt_settled(&mut self) {
        self.preempt_in_flight = false;
    }

    /// The preemption in flight was committed at `now`: its room is kept for `owners` for a
    /// grace. The grace, which is also the victims' kill grace.
    pub(super) fn preempted(&mut self, now: Instant, owners: Vec<WorkId>) -> Duration {
        self.preempt_in_flight = false;
        let grace = self.keep_for();
        let until = now + grace;
        for owner in owners {
            self.kept.insert(owner, until);
        }
        grace
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use super::PreemptionPolicy;

    fn policy(max_fraction: f64) -> PreemptionPolicy {
        PreemptionPolicy {
            queues: BTreeSet::from(["prod".into()]),
            delay: Duration::from_secs(1),
            grace: Duration::from_secs(1),
            max_fraction,
            capacities: false,
            within_queues: false,
        }
    }

    #[test]
    fn a_round_that_could_stop_no_executor_says_why() {
        assert_eq!(
            policy(0.1).stops_nothing_on(5, [1]).as_deref(),
            Some(
                "max_fraction 0.1 of 5 cores is less than one core: no round could stop an executor"
            )
        );
        assert_eq!(
            policy(0.1).stops_nothing_on(30, [5, 4, 6]).as_deref(),
            Some(
                "max_fraction 0.1 of 30 cores is 3 cores, fewer than any executor of an \
                 ordinary queue holds (the smallest, 4): no round could stop one"
            )
        );
        // One executor that fits is enough, and with none running nothing is said.
        assert_eq!(policy(0.1).stops_nothing_on(30, [4, 3, 2]), None);
        assert_eq!(policy(0.1).stops_nothing_on(30, []), None);
        assert_eq!(policy(0.1).stops_nothing_on(0, [4]), None);
    }
}
