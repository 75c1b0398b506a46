//! Preemption for prior queues (issue: prior work that cannot wait). Spark's executors are
//! long-lived, so prior work that arrives on a cluster full of ordinary executors would wait
//! until one of them ends. When it has waited for room long enough (the caller decides which
//! waiting drivers and applications are `eligible`), [`choose`] picks executors of ordinary
//! queues to stop so that it fits, and the room it reserves for it:
//!
//! * victims are executors of ordinary (not prior) queues only, never drivers;
//! * from the application holding the most cores at that moment first (ties by id), its
//!   youngest executor (the highest id) first;
//! * no more than `max_fraction` of the ALIVE cores per round (an executor larger than what
//!   is left of that is passed over for smaller ones);
//! * only as many as the eligible work needs: the real scheduling pass runs on copies of the
//!   snapshot without the first candidates, so every placement rule (spreadOut, memory,
//!   custom resources, queue capacity, the threshold on prior-hosting workers) is taken into
//!   account. The shortest prefix of candidates that serves the most is found by doubling
//!   and halving (a logarithmic number of passes, not one per candidate: a round at 10,000
//!   workers may stop thousands of executors), and victims whose room the eligible work
//!   does not use are given back.
//!
//! Queues with capacities preempt the same way for their guarantees ([`Preempting::
//! BelowGuarantee`], YARN's proportional capacity preemption): work of an ordinary queue
//! below its guaranteed share may stop executors of ordinary queues above theirs, never
//! taking a queue (or a parent) below its guarantee, and no more cores than the waiting
//! queues lack.
//!
//! Applications of ordinary leaves may also preempt inside their own leaf
//! ([`Preempting::WithinQueue`], YARN's intra-queue preemption): executors of the leaf's
//! applications of lower priority, or, under `fair` and `drf`, of holders that stay at or
//! above the waiting one's share ([`within_queue`]).
//!
//! The result is deterministic: the same snapshot and eligible set give the same victims.

mod within_queue;

pub use within_queue::{WithinQueueRuleBroken, check as check_within_queue};

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use serde::{Deserialize, Serialize};

use crate::ids::{AppId, ExecutorId, QueueName, WorkId, WorkerId};
use crate::model::{AppRequest, HeldExecutor, InputError, Snapshot, WorkerState};
use crate::plan::Plan;
use crate::queues::{Bound, Queues};
use crate::resources::Resources;

/// What `muster plan` takes to show preemption as a dry run: the prior queues that preempt,
/// the share of the ALIVE cores one round may take, and whether queues below their guarantee
/// preempt. Everything of those queues that waits for room is eligible.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreemptionSettings {
    /// Prior queues whose waiting work may preempt.
    #[serde(default)]
    pub queues: Vec<QueueName>,
    /// The most of the ALIVE cores one round may take, in (0, 1] (default 0.1).
    #[serde(default = "default_fraction")]
    pub max_fraction: f64,
    /// Whether ordinary queues below their guaranteed capacity preempt too, when nothing
    /// prior does.
    #[serde(default)]
    pub capacities: bool,
    /// Whether applications of ordinary leaves preempt inside their leaf too, when nothing
    /// else does: higher priority over lower, and under `fair` and `drf` a holder below
    /// another's share.
    #[serde(default)]
    pub within_queues: bool,
}

/// Whose waiting work a round preempts for, which decides the executors it may stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preempting {
    /// Work of prior queues: executors of every ordinary queue may stop.
    Prior,
    /// Work of ordinary queues below their guaranteed capacity: executors of ordinary
    /// queues above theirs may stop, as long as none falls below its guarantee.
    BelowGuarantee,
    /// Applications of ordinary leaves: executors of the applications of their own leaf
    /// they outrank may stop ([`within_queue`]).
    WithinQueue,
}

fn default_fraction() -> f64 {
    0.1
}

/// An executor to stop.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Victim {
    /// Its application.
    pub app: AppId,
    /// Its id in the application.
    pub executor: ExecutorId,
    /// Its worker.
    pub worker: WorkerId,
    /// What stopping it frees there: cores, memory and custom resources.
    pub resources: Resources,
}

/// Room kept for eligible work once the victims are gone: a driver launch or an executor
/// grant of the pass that would run then.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Reservation {
    /// The driver or application it is for.
    pub id: WorkId,
    /// Where.
    pub worker: WorkerId,
    /// How much.
    pub resources: Resources,
    /// The application's resource profile the executor is of; 0 for its own size or a
    /// driver.
    #[serde(skip_serializing_if = "crate::plan::is_own_size")]
    pub profile: u32,
}

/// One round of preemption.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Preemption {
    /// The executors to stop, in the order chosen.
    pub victims: Vec<Victim>,
    /// The room they free, kept for the eligible work.
    pub reservations: Vec<Reservation>,
}

/// The victims and reservations for `eligible` work (drivers and applications) that waits
/// for room in `snapshot`, or `None` when stopping ordinary executors would place none of it.
/// Only eligible work the rule lets preempt counts: that of prior queues for
/// [`Preempting::Prior`], apps of ordinary queues below their guarantee for
/// [`Preempting::BelowGuarantee`], apps of ordinary queues for [`Preempting::WithinQueue`].
/// A preemption for guarantees or inside queues is one the state's own check
/// ([`check_for_guarantees`], [`check_within_queue`]) accepts: when the room its victims
/// free goes to fewer owners than it was chosen for and the check refuses it, it is chosen
/// again for the owners that got it.
///
/// # Errors
///
/// The snapshot is malformed, or `max_fraction` is not in (0, 1].
pub fn choose(
    snapshot: &Snapshot,
    eligible: &BTreeSet<WorkId>,
    max_fraction: f64,
    preempting: Preempting,
) -> Result<Option<Preemption>, InputError> {
    if !(max_fraction > 0.0 && max_fraction <= 1.0) {
        return Err(InputError {
            field: "preemption.max_fraction".into(),
            message: format!("must be in (0, 1], got {max_fraction}"),
        });
    }
    let snapshot = with_executor_ids(snapshot);
    let mut eligible = eligible.clone();
    loop {
        let Some(preemption) = choose_for(&snapshot, &eligible, max_fraction, preempting)? else {
            return Ok(None);
        };
        let victims: Vec<(AppId, ExecutorId)> = preemption
            .victims
            .iter()
            .map(|v| (v.app.clone(), v.executor))
            .collect();
        let owners: BTreeSet<&WorkId> = preemption.reservations.iter().map(|r| &r.id).collect();
        let accepted = match preempting {
            Preempting::Prior => true,
            Preempting::BelowGuarantee => {
                let apps: Vec<&AppId> = owners
                    .iter()
                    .filter_map(|owner| match owner {
                        WorkId::App(app) => Some(app),
                        WorkId::Driver(_) => None,
                    })
                    .collect();
                check_for_guarantees(&snapshot, &victims, &apps).is_ok()
            }
            Preempting::WithinQueue => {
                let rooms: Vec<(&AppId, &Resources)> = preemption
                    .reservations
                    .iter()
                    .filter_map(|r| match &r.id {
                        WorkId::App(app) => Some((app, &r.resources)),
                        WorkId::Driver(_) => None,
                    })
                    .collect();
                check_within_queue(&snapshot, &victims, &rooms).is_ok()
            }
        };
        if accepted {
            return Ok(Some(preemption));
        }
        // Fewer owners got the room than it was chosen for: choose again for them alone.
        // The eligible work shrinks every round, so this ends.
        let got_room: BTreeSet<WorkId> = owners.into_iter().cloned().collect();
        if got_room.len() >= eligible.len() {
            return Ok(None);
        }
        eligible = got_room;
    }
}

/// One choice for `eligible` work in a snapshot whose held executors are all named.
fn choose_for(
    snapshot: &Snapshot,
    eligible: &BTreeSet<WorkId>,
    max_fraction: f64,
    preempting: Preempting,
) -> Result<Option<Preemption>, InputError> {
    let base = crate::schedule(snapshot)?;
    let queues = Queues::new(&snapshot.queues);
    let guarantees = Guarantees::of(snapshot, &queues);
    // Only the work the rule lets preempt counts.
    let eligible: &BTreeSet<WorkId> = &eligible
        .iter()
        .filter(|id| {
            let queue = match id {
                WorkId::App(app) => snapshot
                    .apps
                    .iter()
                    .find(|a| &a.id == app)
                    .map(|a| &a.queue),
                WorkId::Driver(driver) => snapshot
                    .drivers
                    .iter()
                    .find(|d| &d.id == driver)
                    .map(|d| &d.queue),
            };
            queue.is_some_and(|queue| match preempting {
                Preempting::Prior => queues.get(queue).prior,
                Preempting::BelowGuarantee => {
                    matches!(id, WorkId::App(_))
                        && !queues.get(queue).prior
                        && guarantees.lack(queue) > 0
                }
                Preempting::WithinQueue => matches!(id, WorkId::App(_)) && !queues.get(queue).prior,
            })
        })
        .cloned()
        .collect();
    let mut waiting: BTreeSet<&WorkId> = base
        .waiting
        .iter()
        .filter(|w| eligible.contains(&w.id) && w.reason.is_for_room())
        .map(|w| &w.id)
        .collect();
    // Inside queues, only the applications no other waiting one of their leaf outranks.
    let mut leading = BTreeSet::new();
    if preempting == Preempting::WithinQueue {
        let apps = waiting.iter().copied().filter_map(|id| match id {
            WorkId::App(app) => Some(app),
            WorkId::Driver(_) => None,
        });
        leading = within_queue::leading(snapshot, &queues, &apps.collect());
        waiting.retain(|id| matches!(id, WorkId::App(app) if leading.contains(app)));
    }
    if waiting.is_empty() {
        return Ok(None);
    }
    let mut budget = (max_fraction * snapshot.alive_cores() as f64).floor() as u64;
    if preempting == Preempting::BelowGuarantee {
        // No more than the queues of the work that waits for room lack.
        let lacking: BTreeSet<&QueueName> = snapshot
            .apps
            .iter()
            .filter(|a| waiting.contains(&WorkId::App(a.id.clone())))
            .map(|a| &a.queue)
            .collect();
        budget = budget.min(lacking.iter().map(|q| guarantees.lack(q)).sum());
    }

    // The candidates in the order they are taken, within the budget.
    let owners: BTreeSet<WorkId>;
    let (candidates, eligible) = if preempting == Preempting::WithinQueue {
        // Only the owners some candidate of their own leaf is taken for are served by the
        // round: room another leaf's work would get is not theirs to give.
        let (candidates, credited) = within_queue::candidates(snapshot, &queues, &leading, budget);
        owners = credited
            .into_iter()
            .map(|app| WorkId::App(app.clone()))
            .collect();
        waiting.retain(|id| owners.contains(id));
        (candidates, &owners)
    } else {
        (
            across_queues(snapshot, &queues, budget, preempting),
            eligible,
        )
    };
    let unpreempted = served(&base, snapshot, eligible);
    let Some(taken) = shortest_prefix(snapshot, &candidates, eligible, &waiting, unpreempted)
    else {
        return Ok(None);
    };
    let victims = give_back(snapshot, &candidates[..taken.count], eligible, taken.served);
    if victims.is_empty() {
        return Ok(None);
    }
    let plan = crate::schedule_valid(&without(snapshot, &victims));
    Ok(Some(Preemption {
        victims,
        reservations: reservations(&plan, snapshot, eligible),
    }))
}

/// The executors of other queues a round may stop for prior work or guarantees, in the order
/// it takes them, up to `budget` cores.
fn across_queues(
    snapshot: &Snapshot,
    queues: &Queues,
    budget: u64,
    preempting: Preempting,
) -> Vec<Victim> {
    let mut order = Candidates::new(snapshot, queues);
    // What queues hold as the round goes, where guarantees decide.
    let mut current = (preempting == Preempting::BelowGuarantee).then(|| snapshot.clone());
    let mut candidates = Vec::new();
    let mut spent = 0u64;
    while spent < budget {
        let guarantees = current.as_ref().map(|c| Guarantees::of(c, queues));
        let Some(victim) = order.next(budget - spent, guarantees.as_ref()) else {
            break;
        };
        spent += u64::from(victim.resources.cores);
        if let Some(current) = &mut current {
            remove(current, &victim);
        }
        candidates.push(victim);
    }
    candidates
}

/// How many of the candidates a round takes, and the cores the eligible work then gets.
struct Prefix {
    count: usize,
    served: u64,
}

/// The shortest prefix of `candidates` that serves the eligible work as much as any prefix
/// up to the first after which none of it waits for room, or `None` if none serves more
/// than stopping nothing (`unpreempted`). Room only grows with each victim, so both what is
/// served and whether work still waits change one way along the candidates: the prefix is
/// found by doubling, then halving, in a logarithmic number of passes rather than one per
/// candidate. `snapshot` is valid, and so is every one a prefix leaves.
fn shortest_prefix(
    snapshot: &Snapshot,
    candidates: &[Victim],
    eligible: &BTreeSet<WorkId>,
    waiting: &BTreeSet<&WorkId>,
    unpreempted: u64,
) -> Option<Prefix> {
    let probe = |count: usize| -> (u64, bool) {
        let rest = without(snapshot, &candidates[..count]);
        let plan = crate::schedule_valid(&rest);
        let still_waits = plan
            .waiting
            .iter()
            .any(|w| waiting.contains(&w.id) && w.reason.is_for_room());
        (served(&plan, &rest, eligible), still_waits)
    };
    if candidates.is_empty() {
        return None;
    }
    // The first prefix after which nothing eligible waits for room, or all of them.
    let (mut low, mut high) = (0, 1);
    let (mut end, still_waits) = loop {
        let (served, still_waits) = probe(high);
        if !still_waits || high == candidates.len() {
            break ((high, served), still_waits);
        }
        low = high;
        high = (2 * high).min(candidates.len());
    };
    if !still_waits && end.0 > low + 1 {
        // Halve (low, end]: the first of it after which nothing waits.
        let mut high = end.0;
        while high - low > 1 {
            let middle = low + (high - low) / 2;
            let (served, still_waits) = probe(middle);
            if still_waits {
                low = middle;
            } else {
                high = middle;
                end = (middle, served);
            }
        }
    }
    let (end, most) = end;
    if most <= unpreempted {
        return None;
    }
    // The shortest prefix that serves as much.
    let (mut low, mut high) = (0, end);
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        if probe(middle).0 >= most {
            high = middle;
        } else {
            low = middle;
        }
    }
    Some(Prefix {
        count: high,
        served: most,
    })
}

/// Give-back probes a round makes one victim at a time, each a scheduling pass: every victim
/// of a round of up to this many is checked, and the last this many of a larger one.
const GIVE_BACK_PROBES: usize = 64;

/// `victims` less those whose room the eligible work does without, as long as the pass
/// still serves `served_with_all`. First in one checked step: on each worker, the last
/// victims whose room, with what was free there, holds what the pass then gives eligible
/// work there are kept, and the rest given back. Then one victim at a time, the last first
/// (the last was taken because the others did not suffice), up to [`GIVE_BACK_PROBES`]: each
/// is given back if the pass serves as much without it, so no victim of a round of up to
/// that many is stopped in vain. `snapshot` is valid, and so is every one a set of victims
/// leaves.
fn give_back(
    snapshot: &Snapshot,
    victims: &[Victim],
    eligible: &BTreeSet<WorkId>,
    served_with_all: u64,
) -> Vec<Victim> {
    let serves = |victims: &[Victim]| -> bool {
        let rest = without(snapshot, victims);
        served(&crate::schedule_valid(&rest), &rest, eligible) >= served_with_all
    };
    let plan = crate::schedule_valid(&without(snapshot, victims));
    let mut need: BTreeMap<WorkerId, Resources> = BTreeMap::new();
    for reservation in reservations(&plan, snapshot, eligible) {
        let sum = need.entry(reservation.worker).or_default();
        *sum = sum.checked_add(&reservation.resources).unwrap_or_default();
    }
    let mut room: BTreeMap<&WorkerId, Resources> = snapshot
        .workers
        .iter()
        .map(|w| (&w.id, w.capacity.saturating_sub(&w.used)))
        .collect();
    let mut keep = vec![false; victims.len()];
    for (i, victim) in victims.iter().enumerate().rev() {
        let Some(need) = need.get(&victim.worker) else {
            continue;
        };
        let room = room.entry(&victim.worker).or_default();
        if room.fits(need).is_err() {
            *room = room.checked_add(&victim.resources).unwrap_or_default();
            keep[i] = true;
        }
    }
    let kept: Vec<Victim> = victims
        .iter()
        .zip(keep)
        .filter(|(_, keep)| *keep)
        .map(|(victim, _)| victim.clone())
        .collect();
    let mut victims = if kept.len() < victims.len() && serves(&kept) {
        kept
    } else {
        victims.to_vec()
    };
    let probed = victims.len().saturating_sub(GIVE_BACK_PROBES);
    for i in (probed..victims.len()).rev() {
        let mut fewer = victims.clone();
        fewer.remove(i);
        if serves(&fewer) {
            victims = fewer;
        }
    }
    victims
}

/// `choose` for `muster plan`: everything of the preempting queues that waits is eligible;
/// then, as the settings ask, every application for its guarantee, then inside its queue.
///
/// # Errors
///
/// As [`choose`], or a preempting queue that is unknown or not prior.
pub fn dry_run(
    snapshot: &Snapshot,
    settings: &PreemptionSettings,
) -> Result<Option<Preemption>, InputError> {
    for (i, name) in settings.queues.iter().enumerate() {
        if !snapshot.queues.iter().any(|q| &q.name == name && q.prior) {
            return Err(InputError {
                field: format!("preemption.queues[{i}]"),
                message: format!("`{name}` is not a prior queue of this snapshot"),
            });
        }
    }
    let preempting = |queue: &QueueName| settings.queues.contains(queue);
    let eligible = snapshot
        .drivers
        .iter()
        .filter(|d| preempting(&d.queue))
        .map(|d| WorkId::Driver(d.id.clone()))
        .chain(
            snapshot
                .apps
                .iter()
                .filter(|a| preempting(&a.queue))
                .map(|a| WorkId::App(a.id.clone())),
        )
        .collect();
    if let Some(preemption) = choose(
        snapshot,
        &eligible,
        settings.max_fraction,
        Preempting::Prior,
    )? {
        return Ok(Some(preemption));
    }
    let ordinary: BTreeSet<WorkId> = snapshot
        .apps
        .iter()
        .map(|a| WorkId::App(a.id.clone()))
        .collect();
    let rules = [
        (settings.capacities, Preempting::BelowGuarantee),
        (settings.within_queues, Preempting::WithinQueue),
    ];
    for (on, preempting) in rules {
        if !on {
            continue;
        }
        if let Some(preemption) = choose(snapshot, &ordinary, settings.max_fraction, preempting)? {
            return Ok(Some(preemption));
        }
    }
    Ok(None)
}

/// How many cores `plan` gives eligible work, in driver launches and executor grants (an
/// executor that absorbs cores counts each).
fn served(plan: &Plan, snapshot: &Snapshot, eligible: &BTreeSet<WorkId>) -> u64 {
    let drivers: u64 = plan
        .drivers
        .iter()
        .filter(|d| eligible.contains(&WorkId::Driver(d.driver.clone())))
        .filter_map(|d| snapshot.drivers.iter().find(|r| r.id == d.driver))
        .map(|d| u64::from(d.need.cores))
        .sum();
    let executors: u64 = plan
        .executors
        .iter()
        .filter(|g| eligible.contains(&WorkId::App(g.app.clone())))
        .map(|g| u64::from(g.resources.cores) * u64::from(g.count))
        .sum();
    drivers + executors
}

/// The launches and executors `plan` gives eligible work, as reservations: one each.
fn reservations(plan: &Plan, snapshot: &Snapshot, eligible: &BTreeSet<WorkId>) -> Vec<Reservation> {
    let drivers = plan.drivers.iter().filter_map(|d| {
        let request = snapshot.drivers.iter().find(|r| r.id == d.driver)?;
        let id = WorkId::Driver(d.driver.clone());
        eligible
            .contains(&id)
            .then(|| (id, d.worker.clone(), request.need.clone(), 0))
    });
    let executors = plan
        .executors
        .iter()
        .map(|g| (WorkId::App(g.app.clone()), g))
        .filter(|(id, _)| eligible.contains(id))
        .flat_map(|(id, g)| {
            std::iter::repeat_n(
                (id, g.worker.clone(), g.resources.clone(), g.profile),
                g.count as usize,
            )
        });
    drivers
        .chain(executors)
        .map(|(id, worker, resources, profile)| Reservation {
            id,
            worker,
            resources,
            profile,
        })
        .collect()
}

/// How a preemption for guarantees breaks its rule ([`check_for_guarantees`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GuaranteeRuleBroken {
    /// An owner or a victim's application is not active.
    #[error("`{0}` is not an active application")]
    NotActive(AppId),
    /// An owner is not below its queue's guarantee.
    #[error("`{0}` is not below its queue's guarantee: only such work preempts for it")]
    NotBelowGuarantee(AppId),
    /// A victim runs in a prior queue.
    #[error("`{0}` runs in a prior queue: prior work is never preempted")]
    PriorVictim(AppId),
    /// A victim is not an executor of its application.
    #[error("`{0}` holds no executor {1}")]
    NoSuchExecutor(AppId, ExecutorId),
    /// More cores stop than the owners' queues lack.
    #[error(
        "stopping {stopped} cores for queues that lack {lack}: a preemption for guarantees \
         takes no more than they lack"
    )]
    TooMany {
        /// The cores the victims hold.
        stopped: u64,
        /// The cores the owners' queues lack.
        lack: u64,
    },
    /// The victims' stop takes a queue (or a parent) below its guarantee.
    #[error("stopping these executors takes queue `{0}` below its guarantee")]
    TakesBelow(QueueName),
}

/// Checks a preemption for guarantees against the snapshot it was chosen on (the state's
/// own check of the leader's choice): every owner an app of an ordinary queue below its
/// guarantee, every victim an executor of an ordinary queue, no more cores stopped than the
/// owners' queues lack, and no queue or parent below its guarantee once they stop.
///
/// # Errors
///
/// The first part of the rule the preemption breaks.
pub fn check_for_guarantees(
    snapshot: &Snapshot,
    victims: &[(AppId, ExecutorId)],
    owners: &[&AppId],
) -> Result<(), GuaranteeRuleBroken> {
    let queues = Queues::new(&snapshot.queues);
    let guarantees = Guarantees::of(snapshot, &queues);
    let app = |id: &AppId| snapshot.apps.iter().find(|a| &a.id == id);
    for &owner in owners {
        let Some(queue) = app(owner).map(|a| &a.queue) else {
            return Err(GuaranteeRuleBroken::NotActive(owner.clone()));
        };
        if queues.get(queue).prior || guarantees.lack(queue) == 0 {
            return Err(GuaranteeRuleBroken::NotBelowGuarantee(owner.clone()));
        }
    }
    let lacking: BTreeSet<&QueueName> = owners
        .iter()
        .filter_map(|&owner| app(owner).map(|a| &a.queue))
        .collect();
    let lack: u64 = lacking.iter().map(|q| guarantees.lack(q)).sum();
    let mut stopped: BTreeMap<&QueueName, u64> = BTreeMap::new();
    for (id, executor) in victims {
        let Some(victim) = app(id) else {
            return Err(GuaranteeRuleBroken::NotActive(id.clone()));
        };
        if queues.get(&victim.queue).prior {
            return Err(GuaranteeRuleBroken::PriorVictim(id.clone()));
        }
        let Some(held) = victim.executors.iter().find(|e| e.id == Some(*executor)) else {
            return Err(GuaranteeRuleBroken::NoSuchExecutor(id.clone(), *executor));
        };
        *stopped.entry(&victim.queue).or_insert(0) += u64::from(held.resources.cores);
    }
    let total: u64 = stopped.values().sum();
    if total > lack {
        return Err(GuaranteeRuleBroken::TooMany {
            stopped: total,
            lack,
        });
    }
    match guarantees.taken_below(&stopped) {
        Some(queue) => Err(GuaranteeRuleBroken::TakesBelow(queue.clone())),
        None => Ok(()),
    }
}

/// Each queue's executor cores and guaranteed cores in a snapshot, parents included.
struct Guarantees<'q> {
    queues: &'q Queues,
    used: BTreeMap<&'q QueueName, u64>,
    total_cores: u64,
}

impl<'q> Guarantees<'q> {
    fn of(snapshot: &Snapshot, queues: &'q Queues) -> Self {
        Self {
            queues,
            used: queues.sum_below(
                snapshot
                    .apps
                    .iter()
                    .map(|a| (&a.queue, a.executors.cores())),
            ),
            total_cores: snapshot.alive_cores(),
        }
    }

    /// The cores `queue` is guaranteed (none without capacities).
    fn guaranteed(&self, queue: &QueueName) -> u64 {
        if !self.queues.guaranteed() {
            return 0;
        }
        let share = self.queues.share(queue, Bound::Guaranteed);
        crate::ledger::share(share, self.total_cores)
    }

    /// The cores `queue` lacks to reach its guarantee.
    fn lack(&self, queue: &QueueName) -> u64 {
        self.guaranteed(queue)
            .saturating_sub(self.used.get(queue).copied().unwrap_or(0))
    }

    /// The first queue, leaf or parent, that stopping `stopped` cores of each leaf would take
    /// below its guarantee.
    fn taken_below(&self, stopped: &BTreeMap<&QueueName, u64>) -> Option<&'q QueueName> {
        let mut below: BTreeMap<&'q QueueName, u64> = BTreeMap::new();
        for (&leaf, &cores) in stopped {
            for queue in self.queues.path(leaf) {
                *below.entry(queue).or_insert(0) += cores;
            }
        }
        below.into_iter().find_map(|(queue, cores)| {
            let used = self.used.get(queue).copied().unwrap_or(0);
            (used.saturating_sub(cores) < self.guaranteed(queue)).then_some(queue)
        })
    }
}

/// The snapshot with every held executor named: one without an id is named by its place.
fn with_executor_ids(snapshot: &Snapshot) -> Snapshot {
    let mut named = snapshot.clone();
    let unnamed = |app: &AppRequest| app.executors.iter().any(|e| e.id.is_none());
    if !named.apps.iter().any(unnamed) {
        return named;
    }
    for app in named.apps.make_mut().iter_mut().filter(|a| unnamed(a)) {
        app.executors.update(|executors| {
            for (i, executor) in executors.iter_mut().enumerate() {
                executor
                    .id
                    .get_or_insert(ExecutorId(u32::try_from(i).unwrap_or(u32::MAX)));
            }
        });
    }
    named
}

/// The executors a round may stop, in the order it takes them: the youngest executor of the
/// ordinary application holding the most cores (ties by the smallest id), on an ALIVE
/// worker. Kept as a heap of applications by what they hold, so that a round at 10,000
/// workers takes thousands of candidates without rescanning every executor for each.
struct Candidates<'s> {
    /// Each ordinary application's queue and its executors on ALIVE workers not yet taken
    /// or passed over, youngest last.
    apps: BTreeMap<&'s AppId, (&'s QueueName, Vec<&'s HeldExecutor>)>,
    /// The applications by cores held, the smallest id first among equals.
    heap: BinaryHeap<(u64, Reverse<&'s AppId>)>,
}

impl<'s> Candidates<'s> {
    fn new(snapshot: &'s Snapshot, queues: &Queues) -> Self {
        let alive = alive_workers(snapshot);
        let mut apps = BTreeMap::new();
        let mut heap = BinaryHeap::new();
        for app in &snapshot.apps {
            if queues.get(&app.queue).prior {
                continue;
            }
            apps.insert(&app.id, (&app.queue, executors_on(app, &alive)));
            heap.push((app.executors.cores(), Reverse(&app.id)));
        }
        Self { apps, heap }
    }

    /// The next victim of at most `left` cores; larger executors are passed over for good,
    /// since what is left of a round's budget only shrinks. For work below its guarantee
    /// (`guarantees` as the round stands), only an executor whose queue stays at or above
    /// its own: what queues hold only falls during a round, so one that would not stays so.
    fn next(&mut self, left: u64, guarantees: Option<&Guarantees<'_>>) -> Option<Victim> {
        while let Some((held, Reverse(app))) = self.heap.pop() {
            let (queue, executors) = self.apps.get_mut(app).expect("every app in the heap");
            while let Some(executor) = executors.pop() {
                let cores = u64::from(executor.resources.cores);
                let below = guarantees
                    .is_some_and(|g| g.taken_below(&BTreeMap::from([(*queue, cores)])).is_some());
                if cores > left || below {
                    continue;
                }
                self.heap.push((held - cores, Reverse(app)));
                return Some(Victim {
                    app: app.clone(),
                    executor: executor.id.expect("named first"),
                    worker: executor.worker.clone(),
                    resources: executor.resources.clone(),
                });
            }
        }
        None
    }
}

/// The ids of the snapshot's ALIVE workers.
fn alive_workers(snapshot: &Snapshot) -> BTreeSet<&WorkerId> {
    snapshot
        .workers
        .iter()
        .filter(|w| w.state == WorkerState::Alive)
        .map(|w| &w.id)
        .collect()
}

/// `app`'s executors on `alive` workers, the youngest (the highest id) last: a round's
/// candidates of it, in the order it takes them from the end.
fn executors_on<'s>(app: &'s AppRequest, alive: &BTreeSet<&WorkerId>) -> Vec<&'s HeldExecutor> {
    let mut executors: Vec<&HeldExecutor> = app
        .executors
        .iter()
        .filter(|e| alive.contains(&e.worker))
        .collect();
    executors.sort_by_key(|e| e.id);
    executors
}

/// Stops `victim` in `snapshot`: its app no longer holds it and its worker has the room.
fn remove(snapshot: &mut Snapshot, victim: &Victim) {
    if let Some(app) = snapshot
        .apps
        .make_mut()
        .iter_mut()
        .find(|a| a.id == victim.app)
    {
        app.executors
            .update(|e| e.retain(|e| e.id != Some(victim.executor)));
    }
    if let Some(worker) = snapshot
        .workers
        .make_mut()
        .iter_mut()
        .find(|w| w.id == victim.worker)
    {
        worker.used = worker.used.saturating_sub(&victim.resources);
    }
}

/// `snapshot` with every victim stopped, as [`remove`] stops one, in one sweep of its apps
/// and workers.
fn without(snapshot: &Snapshot, victims: &[Victim]) -> Snapshot {
    let mut stopped: BTreeMap<&AppId, BTreeSet<ExecutorId>> = BTreeMap::new();
    let mut freed: BTreeMap<&WorkerId, Vec<&Resources>> = BTreeMap::new();
    for victim in victims {
        stopped
            .entry(&victim.app)
            .or_default()
            .insert(victim.executor);
        freed
            .entry(&victim.worker)
            .or_default()
            .push(&victim.resources);
    }
    let mut rest = snapshot.clone();
    for app in rest.apps.make_mut() {
        if let Some(ids) = stopped.get(&app.id) {
            app.executors
                .update(|e| e.retain(|e| e.id.is_none_or(|id| !ids.contains(&id))));
        }
    }
    for worker in rest.workers.make_mut() {
        for resources in freed.get(&worker.id).into_iter().flatten() {
            worker.used = worker.used.saturating_sub(resources);
        }
    }
    rest
}
