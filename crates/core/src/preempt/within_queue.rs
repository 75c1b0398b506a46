//! Preemption inside a leaf queue ([`Preempting::WithinQueue`](super::Preempting), YARN's
//! intra-queue preemption). An application of an ordinary leaf that has waited for room may
//! stop executors of the applications of its own leaf it outranks:
//!
//! * those of lower priority; or
//! * at equal priority, under `fair` or `drf`, those of another holder (the application, or
//!   its user under `drf`) whose dominant share is larger than the waiting holder's, and,
//!   once the executors stop and their room goes to the waiting holder, still at least the
//!   waiting holder's. A holder is never taken below the one it made room for, and one
//!   preempts another only from strictly below it, so two holders never take turns
//!   preempting each other (not even where a resource neither move changes, a GPU, decides
//!   their shares).
//!
//! Never a driver, never an executor of a prior queue, never an application below its gang's
//! minimum. A round takes, while its budget lasts, the youngest executor of the outranked
//! application of the lowest priority, then of the holder with the largest share, then of the
//! application holding the most cores (ties by submission); [`check`] is the rule the state holds a
//! chosen preemption to, on what the holders hold once its victims stop and its room is
//! granted.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use crate::ids::{AppId, ExecutorId, QueueName};
use crate::model::{AppRequest, HeldExecutor, OrderingPolicy, Snapshot};
use crate::ordering::{alive_capacity, holder, weighted_share};
use crate::queues::Queues;
use crate::resources::Resources;

use super::{Victim, alive_workers, executors_on};

/// How a preemption inside a queue breaks its rule ([`check`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WithinQueueRuleBroken {
    /// An owner or a victim's application is not active.
    #[error("`{0}` is not an active application")]
    NotActive(AppId),
    /// An owner or a victim runs in a prior queue.
    #[error("`{0}` runs in a prior queue: only ordinary queues preempt inside themselves")]
    Prior(AppId),
    /// A victim is not an executor of its application.
    #[error("`{0}` holds no executor {1}")]
    NoSuchExecutor(AppId, ExecutorId),
    /// A victim is named twice.
    #[error("executor {1} of `{0}` is named twice")]
    Twice(AppId, ExecutorId),
    /// An owner outranks none of the victims: room would go to work of another leaf.
    #[error("`{0}` outranks none of the executors stopped: its room is not theirs to give")]
    OutranksNone(AppId),
    /// The victims of a leaf free more cores than the room kept for its owners holds.
    #[error(
        "stopping {stopped} cores of queue `{queue}` for {kept} kept for its work: a \
         preemption inside a queue stops no more than its work gets"
    )]
    MoreThanKept {
        /// The leaf.
        queue: QueueName,
        /// The cores its victims hold.
        stopped: u64,
        /// The cores kept for its owners.
        kept: u64,
    },
    /// The victims take a gang below its minimum.
    #[error("stopping these executors takes `{0}` below its gang's minimum")]
    BelowGang(AppId),
    /// No owner of its leaf outranks a victim's application.
    #[error(
        "no application the room is kept for outranks `{0}` in its queue: neither a higher \
         priority nor a holder left below its share"
    )]
    NotOutranked(AppId),
}

/// Checks a preemption inside queues against the snapshot it was chosen on (the state's own
/// check of the leader's choice): every owner an application of an ordinary queue, given
/// each room of `rooms` kept for it; every victim an executor of an ordinary queue's application, none below
/// its gang's minimum once they stop, each application outranked by an owner of its leaf
/// once the victims stop and the owners have their room, each owner outranking a victim,
/// and no leaf's victims freeing more cores than the room kept for its owners.
///
/// # Errors
///
/// The first part of the rule the preemption breaks.
pub fn check(
    snapshot: &Snapshot,
    victims: &[(AppId, ExecutorId)],
    rooms: &[(&AppId, &Resources)],
) -> Result<(), WithinQueueRuleBroken> {
    let queues = Queues::new(&snapshot.queues);
    let before = Standings::of(snapshot, &queues);
    let mut after = Standings::of(snapshot, &queues);
    let app = |id: &AppId| snapshot.apps.iter().find(|a| &a.id == id);
    let ordinary = |id: &AppId| match app(id) {
        None => Err(WithinQueueRuleBroken::NotActive(id.clone())),
        Some(app) if queues.get(&app.queue).prior => Err(WithinQueueRuleBroken::Prior(id.clone())),
        Some(app) => Ok(app),
    };
    let mut owning: BTreeMap<&AppId, &AppRequest> = BTreeMap::new();
    let mut kept: BTreeMap<&QueueName, u64> = BTreeMap::new();
    for &(owner, room) in rooms {
        let owner = ordinary(owner)?;
        after.add(owner, room);
        *kept.entry(&owner.queue).or_default() += u64::from(room.cores);
        owning.insert(&owner.id, owner);
    }
    let mut stopped: BTreeMap<&AppId, usize> = BTreeMap::new();
    let mut named = BTreeSet::new();
    let mut freed: BTreeMap<&QueueName, u64> = BTreeMap::new();
    let mut outranked = Vec::new();
    for (id, executor) in victims {
        let victim = ordinary(id)?;
        let Some(held) = victim.executors.iter().find(|e| e.id == Some(*executor)) else {
            return Err(WithinQueueRuleBroken::NoSuchExecutor(id.clone(), *executor));
        };
        if !named.insert((id, executor)) {
            return Err(WithinQueueRuleBroken::Twice(id.clone(), *executor));
        }
        after.remove(victim, &held.resources);
        *stopped.entry(&victim.id).or_insert(0) += 1;
        *freed.entry(&victim.queue).or_default() += u64::from(held.resources.cores);
        outranked.push(victim);
    }
    for (&queue, &stopped) in &freed {
        let kept = kept.get(queue).copied().unwrap_or(0);
        if stopped > kept {
            return Err(WithinQueueRuleBroken::MoreThanKept {
                queue: queue.clone(),
                stopped,
                kept,
            });
        }
    }
    for (&id, &count) in &stopped {
        let victim = app(id).expect("checked above");
        if count > victim.executors.len().saturating_sub(minimum(victim)) {
            return Err(WithinQueueRuleBroken::BelowGang(id.clone()));
        }
    }
    let ranks = |owner: &AppRequest, victim: &AppRequest| {
        outranks(&before, owner, victim, || {
            (after.share_of(victim), after.share_of(owner))
        })
    };
    for &victim in &outranked {
        if !owning.values().any(|owner| ranks(owner, victim)) {
            return Err(WithinQueueRuleBroken::NotOutranked(victim.id.clone()));
        }
    }
    for owner in owning.into_values() {
        if !outranked.iter().any(|victim| ranks(owner, victim)) {
            return Err(WithinQueueRuleBroken::OutranksNone(owner.id.clone()));
        }
    }
    Ok(())
}

/// Of `waiting` (applications waiting for room), those no other of them outranks as things
/// stand: of the highest priority waiting in their leaf, and under `fair` and `drf` of a
/// holder whose share is no larger than any other waiting holder's of that priority. Only
/// they preempt, so that an application outranked in its own leaf does not count the room
/// it would take back.
pub(super) fn leading<'a>(
    snapshot: &Snapshot,
    queues: &Queues,
    waiting: &BTreeSet<&'a AppId>,
) -> BTreeSet<&'a AppId> {
    let standings = Standings::of(snapshot, queues);
    let apps: Vec<&AppRequest> = snapshot
        .apps
        .iter()
        .filter(|a| waiting.contains(&a.id))
        .collect();
    let outranked = |app: &AppRequest| {
        apps.iter().any(|other| {
            if other.queue != app.queue || other.id == app.id {
                return false;
            }
            if other.priority != app.priority {
                return other.priority > app.priority;
            }
            let policy = standings.policy(app);
            !policy.is_fifo()
                && holder(policy, other) != holder(policy, app)
                && standings.share_of(app) > standings.share_of(other)
        })
    };
    waiting
        .iter()
        .copied()
        .filter(|id| {
            apps.iter()
                .find(|a| &&a.id == id)
                .is_some_and(|app| !outranked(app))
        })
        .collect()
}

/// The executors a round may stop for `owners` (applications of ordinary leaves waiting for
/// room), in the order it takes them, up to `budget` cores (see the module's doc), and the
/// owners they are taken for.
pub(super) fn candidates<'s>(
    snapshot: &'s Snapshot,
    queues: &Queues,
    owners: &BTreeSet<&AppId>,
    budget: u64,
) -> (Vec<Victim>, BTreeSet<&'s AppId>) {
    let mut standings = Standings::of(snapshot, queues);
    let mut waiting: BTreeMap<&QueueName, Vec<&AppRequest>> = BTreeMap::new();
    for app in snapshot.apps.iter().filter(|a| owners.contains(&a.id)) {
        if !queues.get(&app.queue).prior {
            waiting.entry(&app.queue).or_default().push(app);
        }
    }
    let alive = alive_workers(snapshot);
    // Each application of those leaves, its executors on ALIVE workers youngest last, and
    // how many of them it may still lose.
    let mut pools: Vec<Pool<'_>> = snapshot
        .apps
        .iter()
        .filter(|a| waiting.contains_key(&a.queue))
        .map(|app| Pool {
            app,
            executors: executors_on(app, &alive),
            spare: app.executors.len().saturating_sub(minimum(app)),
            cores: app.executors.cores(),
        })
        .collect();
    let mut victims = Vec::new();
    let mut credited = BTreeSet::new();
    let mut spent = 0u64;
    while spent < budget {
        let left = budget - spent;
        // The outranked application taken from first, and the owner its room goes to.
        let mut best: Option<(Rank, usize, usize)> = None;
        for (i, pool) in pools.iter_mut().enumerate() {
            // Larger executors are passed over for good: what is left of a round only
            // shrinks.
            while pool
                .executors
                .last()
                .is_some_and(|e| u64::from(e.resources.cores) > left)
            {
                pool.executors.pop();
            }
            let (Some(executor), true) = (pool.executors.last(), pool.spare > 0) else {
                continue;
            };
            let victim = pool.app;
            let owners = &waiting[&victim.queue];
            let Some(owner) = owners.iter().position(|owner| {
                standings.outranks(owner, &executor.resources, victim, &executor.resources)
            }) else {
                continue;
            };
            // Shares are not negative: their bits order as they do.
            let rank = (
                victim.priority,
                Reverse(standings.share_of(victim).to_bits()),
                Reverse(pool.cores),
            );
            if best.as_ref().is_none_or(|(best, _, _)| rank < *best) {
                best = Some((rank, i, owner));
            }
        }
        let Some((_, i, owner)) = best else {
            break;
        };
        let pool = &mut pools[i];
        let executor = pool.executors.pop().expect("a candidate executor");
        pool.spare -= 1;
        pool.cores -= u64::from(executor.resources.cores);
        let victim = pool.app;
        let owner = waiting[&victim.queue][owner];
        standings.remove(victim, &executor.resources);
        standings.add(owner, &executor.resources);
        credited.insert(&owner.id);
        spent += u64::from(executor.resources.cores);
        victims.push(Victim {
            app: victim.id.clone(),
            executor: executor.id.expect("named first"),
            worker: executor.worker.clone(),
            resources: executor.resources.clone(),
        });
    }
    (victims, credited)
}

/// An application a round may take executors from.
struct Pool<'s> {
    app: &'s AppRequest,
    /// Its executors on ALIVE workers not yet taken or passed over, youngest last.
    executors: Vec<&'s HeldExecutor>,
    /// How many more it may lose: those above its gang's minimum.
    spare: usize,
    /// The cores it holds, less those taken.
    cores: u64,
}

/// The order victims are taken from applications in: the lowest priority, the holder with
/// the largest share, the application holding the most cores.
type Rank = (i32, Reverse<u64>, Reverse<u64>);

/// The executors a gang may not fall below: its minimum, none for another application.
fn minimum(app: &AppRequest) -> usize {
    app.min_executors.map_or(0, |min| min as usize)
}

/// What each holder of each leaf holds, as a round moves room between them.
struct Standings<'s> {
    queues: &'s Queues,
    /// The ALIVE workers' capacity: the base of every share.
    cluster: Resources,
    held: BTreeMap<(&'s QueueName, &'s str), Resources>,
}

impl<'s> Standings<'s> {
    fn of(snapshot: &'s Snapshot, queues: &'s Queues) -> Self {
        let mut standings = Self {
            queues,
            cluster: alive_capacity(snapshot.workers.iter()),
            held: BTreeMap::new(),
        };
        for app in &snapshot.apps {
            for executor in app.executors.iter() {
                standings.add(app, &executor.resources);
            }
        }
        standings
    }

    fn policy(&self, app: &AppRequest) -> OrderingPolicy {
        self.queues.get(&app.queue).ordering
    }

    fn add(&mut self, app: &'s AppRequest, resources: &Resources) {
        let key = (&app.queue, holder(self.policy(app), app));
        let held = self.held.entry(key).or_default();
        *held = held.saturating_add(resources);
    }

    fn remove(&mut self, app: &'s AppRequest, resources: &Resources) {
        let key = (&app.queue, holder(self.policy(app), app));
        let held = self.held.entry(key).or_default();
        *held = held.saturating_sub(resources);
    }

    /// The share of `app`'s holder in its leaf, with `more` added and `less` taken away.
    fn share_with(&self, app: &AppRequest, more: &Resources, less: &Resources) -> f64 {
        let policy = self.policy(app);
        let holder = holder(policy, app);
        let held = self
            .held
            .get(&(&app.queue, holder))
            .cloned()
            .unwrap_or_default()
            .saturating_add(more)
            .saturating_sub(less);
        let weights = &self.queues.get(&app.queue).user_weights;
        weighted_share(policy, weights, &self.cluster, holder, &held)
    }

    fn share_of(&self, app: &AppRequest) -> f64 {
        let none = Resources::default();
        self.share_with(app, &none, &none)
    }

    /// Whether `owner`, given `gain`, outranks `victim`, losing `loss`, as things stand.
    fn outranks(
        &self,
        owner: &AppRequest,
        gain: &Resources,
        victim: &AppRequest,
        loss: &Resources,
    ) -> bool {
        let none = Resources::default();
        outranks(self, owner, victim, || {
            (
                self.share_with(victim, &none, loss),
                self.share_with(owner, gain, &none),
            )
        })
    }
}

/// Whether `owner` outranks `victim`: both of one leaf, and the victim of lower priority, or
/// of equal priority under `fair` or `drf` and another holder whose share is larger than the
/// owner's `before` the move and at least the owner's after it (`after`: the victim's and
/// the owner's shares then).
fn outranks(
    before: &Standings<'_>,
    owner: &AppRequest,
    victim: &AppRequest,
    after: impl FnOnce() -> (f64, f64),
) -> bool {
    if owner.queue != victim.queue || owner.id == victim.id {
        return false;
    }
    if owner.priority != victim.priority {
        return owner.priority > victim.priority;
    }
    let policy = before.policy(owner);
    if policy.is_fifo() || holder(policy, owner) == holder(policy, victim) {
        return false;
    }
    if before.share_of(victim) <= before.share_of(owner) {
        return false;
    }
    let (victim_after, owner_after) = after();
    victim_after >= owner_after
}
