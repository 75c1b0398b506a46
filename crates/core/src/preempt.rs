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
//! * only as many as the eligible work needs: each candidate is removed from a copy of the
//!   snapshot and the real scheduling pass runs on it, so every placement rule (spreadOut,
//!   memory, custom resources, queue capacity, the threshold on prior-hosting workers) is
//!   taken into account; candidates that placed nothing more are given back.
//!
//! The result is deterministic: the same snapshot and eligible set give the same victims.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::ids::{AppId, ExecutorId, QueueName, WorkId, WorkerId};
use crate::model::{InputError, Snapshot, WorkerState};
use crate::plan::{Plan, WaitReason};
use crate::resources::Resources;

/// What `muster plan` takes to show preemption as a dry run: the prior queues that preempt,
/// and the share of the ALIVE cores one round may take. Everything of those queues that
/// waits for room is eligible.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreemptionSettings {
    /// Prior queues whose waiting work may preempt.
    pub queues: Vec<QueueName>,
    /// The most of the ALIVE cores one round may take, in (0, 1] (default 0.1).
    #[serde(default = "default_fraction")]
    pub max_fraction: f64,
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
///
/// # Errors
///
/// The snapshot is malformed, or `max_fraction` is not in (0, 1].
pub fn choose(
    snapshot: &Snapshot,
    eligible: &BTreeSet<WorkId>,
    max_fraction: f64,
) -> Result<Option<Preemption>, InputError> {
    if !(max_fraction > 0.0 && max_fraction <= 1.0) {
        return Err(InputError {
            field: "preemption.max_fraction".into(),
            message: format!("must be in (0, 1], got {max_fraction}"),
        });
    }
    let base = crate::schedule(snapshot)?;
    let waiting: BTreeSet<&WorkId> = base
        .waiting
        .iter()
        .filter(|w| eligible.contains(&w.id) && waits_for_room(&w.reason))
        .map(|w| &w.id)
        .collect();
    if waiting.is_empty() {
        return Ok(None);
    }
    let snapshot = with_executor_ids(snapshot);
    let alive_cores: u64 = snapshot
        .workers
        .iter()
        .filter(|w| w.state == WorkerState::Alive)
        .map(|w| u64::from(w.cores))
        .sum();
    let budget = (max_fraction * alive_cores as f64).floor() as u64;

    // Take candidates in order until the eligible work no longer waits for room or the
    // budget is spent; keep the prefix after which nothing more was placed.
    let mut current = snapshot.clone();
    let mut victims = Vec::new();
    let mut spent = 0u64;
    let mut best = (served(&base, eligible), 0);
    // Candidates larger than what is left of the budget are passed over for smaller ones.
    let mut passed_over = BTreeSet::new();
    while let Some(victim) = next_candidate(&current, &passed_over) {
        if spent + u64::from(victim.resources.cores) > budget {
            passed_over.insert((victim.app, victim.executor));
            continue;
        }
        spent += u64::from(victim.resources.cores);
        remove(&mut current, &victim);
        victims.push(victim);
        let plan = crate::schedule(&current)?;
        let now = served(&plan, eligible);
        if now > best.0 {
            best = (now, victims.len());
        }
        if !plan
            .waiting
            .iter()
            .any(|w| waiting.contains(&w.id) && waits_for_room(&w.reason))
        {
            break;
        }
    }
    victims.truncate(best.1);
    // Give back every victim the others do without.
    for i in (0..victims.len()).rev() {
        let mut fewer = victims.clone();
        fewer.remove(i);
        if served(&crate::schedule(&without(&snapshot, &fewer))?, eligible) >= best.0 {
            victims = fewer;
        }
    }
    if victims.is_empty() {
        return Ok(None);
    }
    let plan = crate::schedule(&without(&snapshot, &victims))?;
    Ok(Some(Preemption {
        victims,
        reservations: reservations(&plan, &snapshot, eligible),
    }))
}

/// `choose` for `muster plan`: everything of the preempting queues that waits is eligible.
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
    choose(snapshot, &eligible, settings.max_fraction)
}

/// Whether waiting for `reason` is waiting for room that stopping executors could free.
fn waits_for_room(reason: &WaitReason) -> bool {
    matches!(
        reason,
        WaitReason::NoRoom { .. } | WaitReason::HeldByThreshold { .. }
    )
}

/// How many launches and grants `plan` gives eligible work.
fn served(plan: &Plan, eligible: &BTreeSet<WorkId>) -> usize {
    plan.drivers
        .iter()
        .filter(|d| eligible.contains(&WorkId::Driver(d.driver.clone())))
        .count()
        + plan
            .executors
            .iter()
            .filter(|g| eligible.contains(&WorkId::App(g.app.clone())))
            .count()
}

/// The launches and grants `plan` gives eligible work, as reservations.
fn reservations(plan: &Plan, snapshot: &Snapshot, eligible: &BTreeSet<WorkId>) -> Vec<Reservation> {
    let drivers = plan.drivers.iter().filter_map(|d| {
        let request = snapshot.drivers.iter().find(|r| r.id == d.driver)?;
        let id = WorkId::Driver(d.driver.clone());
        eligible
            .contains(&id)
            .then(|| (id, d.worker.clone(), request.need()))
    });
    let executors = plan
        .executors
        .iter()
        .map(|g| (WorkId::App(g.app.clone()), g))
        .filter(|(id, _)| eligible.contains(id))
        .map(|(id, g)| (id, g.worker.clone(), g.resources.clone()));
    drivers
        .chain(executors)
        .map(|(id, worker, resources)| Reservation {
            id,
            worker,
            resources,
        })
        .collect()
}

/// The snapshot with every held executor named: one without an id is named by its place.
fn with_executor_ids(snapshot: &Snapshot) -> Snapshot {
    let mut named = snapshot.clone();
    for app in &mut named.apps {
        for (i, executor) in app.executors.iter_mut().enumerate() {
            executor
                .id
                .get_or_insert(ExecutorId(u32::try_from(i).unwrap_or(u32::MAX)));
        }
    }
    named
}

/// The next victim: the youngest executor of the ordinary application holding the most
/// cores, on an ALIVE worker, that was not passed over.
fn next_candidate(
    snapshot: &Snapshot,
    passed_over: &BTreeSet<(AppId, ExecutorId)>,
) -> Option<Victim> {
    let prior: BTreeSet<&QueueName> = snapshot
        .queues
        .iter()
        .filter(|q| q.prior)
        .map(|q| &q.name)
        .collect();
    let alive: BTreeSet<&WorkerId> = snapshot
        .workers
        .iter()
        .filter(|w| w.state == WorkerState::Alive)
        .map(|w| &w.id)
        .collect();
    snapshot
        .apps
        .iter()
        .filter(|a| !prior.contains(&a.queue))
        .filter_map(|app| {
            let held = app.held_cores();
            let youngest = app
                .executors
                .iter()
                .filter(|e| alive.contains(&e.worker))
                .filter(|e| {
                    !e.id
                        .is_some_and(|id| passed_over.contains(&(app.id.clone(), id)))
                })
                .max_by_key(|e| e.id)?;
            Some((held, app, youngest))
        })
        // The most cores first; among equals the smallest app id.
        .max_by(|(h1, a1, _), (h2, a2, _)| h1.cmp(h2).then(a2.id.cmp(&a1.id)))
        .map(|(_, app, executor)| Victim {
            app: app.id.clone(),
            executor: executor.id.expect("named first"),
            worker: executor.worker.clone(),
            resources: executor.resources.clone(),
        })
}

/// Stops `victim` in `snapshot`: its app no longer holds it and its worker has the room.
fn remove(snapshot: &mut Snapshot, victim: &Victim) {
    if let Some(app) = snapshot.apps.iter_mut().find(|a| a.id == victim.app) {
        app.executors.retain(|e| e.id != Some(victim.executor));
    }
    if let Some(worker) = snapshot.workers.iter_mut().find(|w| w.id == victim.worker) {
        let used = worker.used().saturating_sub(&victim.resources);
        worker.cores_used = used.cores;
        worker.memory_used_mb = used.memory_mb;
        worker.resources_used = used.custom;
    }
}

fn without(snapshot: &Snapshot, victims: &[Victim]) -> Snapshot {
    let mut rest = snapshot.clone();
    for victim in victims {
        remove(&mut rest, victim);
    }
    rest
}
