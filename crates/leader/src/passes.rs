//! When an ALIVE leader runs its scheduling pass, what the last pass left waiting, and how
//! long work waited to be placed.
//!
//! Events want a pass ([`Passes::want`]); [`Passes::due`] says whether one runs now: it
//! does when one is wanted or a tick has passed since the last, unless a plan is still in
//! flight. A burst of events is thus followed by one pass, not one each. Nor does a pass
//! start sooner after the last than [`PACE`] times as long as the last took: with a
//! hundred thousand drivers waiting a pass takes tens of milliseconds, and passes run back
//! to back would leave the leader no time to answer its peers and workers.
//!
//! Work a pass leaves waiting is noted with the time it was first seen waiting; when a plan
//! that places it (a driver's launch, an application's first executors) commits, how long
//! it waited is told once ([`Passes::take_placement_waits`]): from this leader's first sight
//! of it waiting, nothing for work placed by the first pass that saw it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use muster_core::ids::{AppId, Term, WorkId};
use muster_core::model::{AppRequest, Snapshot};
use muster_core::plan::{Plan, Reserved, WaitReason};

/// How many times as long as the last pass took must pass from its start before the next
/// starts: passes take at most a fifth of the leader's time.
pub(super) const PACE: u32 = 5;

/// The passes of one leader.
#[derive(Debug, Default)]
pub(super) struct Passes {
    /// Whether events since the last pass want another.
    wanted: bool,
    /// A plan is proposed and not settled yet.
    in_flight: bool,
    last: Option<Instant>,
    /// How long the last pass took, as the shell measured it.
    last_took: Duration,
    count: u64,
    /// Why each app or driver waits, as of the last pass.
    waiting: BTreeMap<WorkId, WaitReason>,
    /// How many wait, by [`muster_core::plan::WaitReason::code`], as of the last pass.
    waiting_reasons: BTreeMap<&'static str, usize>,
    /// The room the last pass kept for a waiting gang.
    reserved: Vec<Reserved>,
    /// Since when each app or driver not placed yet has waited, as passes saw it.
    waiting_since: BTreeMap<WorkId, Instant>,
    /// The work the plan in flight places for the first time, since when it waited.
    placing: Vec<(WorkId, Instant, Duration)>,
    /// How long the work committed plans placed first waited, not yet taken.
    placed: Vec<(WorkId, Duration)>,
}

impl Passes {
    /// Something changed that a pass may act on.
    pub(super) fn want(&mut self) {
        self.wanted = true;
    }

    pub(super) fn wanted(&self) -> bool {
        self.wanted
    }

    /// Whether a pass is due at `now`: one is wanted or `tick` has passed since the last, no
    /// plan is in flight, and the last pass started [`PACE`] times as long ago as it took, or
    /// a `tick` ago (a pass the machine stalled in holds the next back no longer).
    pub(super) fn due(&self, now: Instant, tick: Duration) -> bool {
        let since = self.last.map(|last| now.saturating_duration_since(last));
        let ticked = since.is_none_or(|since| since >= tick);
        let paced = since.is_none_or(|since| since >= (self.last_took * PACE).min(tick));
        !self.in_flight && paced && (self.wanted || ticked)
    }

    /// The last pass took `took`.
    pub(super) fn took(&mut self, took: Duration) {
        self.last_took = took;
    }

    /// A due pass runs at `now`: it is counted, and its seed (drawn afresh from the term and
    /// the pass number: the plan carries the outcome, so replicas never need it) returned.
    pub(super) fn start(&mut self, now: Instant, term: Term) -> u64 {
        self.wanted = false;
        self.last = Some(now);
        self.count += 1;
        term.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ self.count
    }

    /// A due pass at `now` had nothing to place: it stands for a pass that left nothing
    /// waiting, without being run or counted.
    pub(super) fn nothing_to_place(&mut self, now: Instant) {
        self.wanted = false;
        self.last = Some(now);
        self.waiting.clear();
        self.waiting_reasons.clear();
        self.reserved.clear();
        self.waiting_since.clear();
    }

    /// The pass at `now` over `snapshot` made `plan`: what it places for the first time
    /// waited since it was first seen waiting (if it was), and what it leaves waiting waits
    /// from now on, if not already.
    pub(super) fn placing(&mut self, now: Instant, snapshot: &Snapshot, plan: &Plan) {
        // The few apps the plan grants to, then those of them that held none.
        let granted: BTreeSet<&AppId> = plan.executors.iter().map(|grant| &grant.app).collect();
        let apps: &[AppRequest] = if granted.is_empty() {
            &[]
        } else {
            &snapshot.apps
        };
        let first_grants = apps
            .iter()
            .filter(|app| app.executors.is_empty() && granted.contains(&app.id))
            .map(|app| WorkId::App(app.id.clone()));
        let launches = plan
            .drivers
            .iter()
            .map(|d| WorkId::Driver(d.driver.clone()));
        let placed: BTreeSet<WorkId> = first_grants.chain(launches).collect();
        self.placing = placed
            .into_iter()
            .map(|work| {
                let since = self.waiting_since.remove(&work).unwrap_or(now);
                (work, since, now.saturating_duration_since(since))
            })
            .collect();
        let mut waiting = BTreeMap::new();
        for w in &plan.waiting {
            let since = self.waiting_since.get(&w.id).copied().unwrap_or(now);
            waiting.insert(w.id.clone(), since);
        }
        self.waiting_since = waiting;
    }

    /// How long the work placed by plans committed since last asked had waited.
    pub(super) fn take_placement_waits(&mut self) -> Vec<(WorkId, Duration)> {
        std::mem::take(&mut self.placed)
    }

    /// The pass left `plan`'s work waiting (taken from it: the pass is done with it).
    pub(super) fn waited(&mut self, plan: &mut Plan) {
        self.reserved.clone_from(&plan.reserved);
        self.waiting_reasons.clear();
        for waiting in &plan.waiting {
            *self
                .waiting_reasons
                .entry(waiting.reason.code())
                .or_default() += 1;
        }
        self.waiting = std::mem::take(&mut plan.waiting)
            .into_iter()
            .map(|w| (w.id, w.reason))
            .collect();
    }

    /// The pass's plan is proposed.
    pub(super) fn planned(&mut self) {
        self.in_flight = true;
    }

    /// The plan in flight was settled: `committed` or not (its work waits on, from when it
    /// was first seen waiting).
    pub(super) fn settled(&mut self, committed: bool) {
        self.in_flight = false;
        for (work, since, waited) in std::mem::take(&mut self.placing) {
            if committed {
                self.placed.push((work, waited));
            } else {
                self.waiting_since.entry(work).or_insert(since);
            }
        }
    }

    pub(super) fn count(&self) -> u64 {
        self.count
    }

    pub(super) fn waiting(&self, id: &WorkId) -> Option<&WaitReason> {
        self.waiting.get(id)
    }

    pub(super) fn waiting_reasons(&self) -> &BTreeMap<&'static str, usize> {
        &self.waiting_reasons
    }

    pub(super) fn reserved(&self) -> &[Reserved] {
        &self.reserved
    }
}

#[cfg(test)]
mod tests {
    use muster_core::model::{AppRequest, HeldExecutor};
    use muster_core::plan::{DriverLaunch, ExecutorGrant, WaitReason, Waiting};
    use muster_core::resources::Resources;

    use super::*;

    fn snapshot(apps: &[(&str, bool)]) -> Snapshot {
        let apps: Vec<AppRequest> = apps
            .iter()
            .map(|&(id, holds)| {
                let mut app = AppRequest::new(id);
                if holds {
                    app.executors.push(HeldExecutor {
                        id: None,
                        worker: "w1".into(),
                        resources: Resources::new(1, 64),
                        profile: 0,
                    });
                }
                app
            })
            .collect();
        Snapshot {
            apps: apps.into(),
            ..Snapshot::default()
        }
    }

    fn plan(granted: &[&str], launched: &[&str], waiting: &[WorkId]) -> Plan {
        Plan {
            executors: granted
                .iter()
                .map(|&app| ExecutorGrant {
                    app: app.into(),
                    worker: "w1".into(),
                    resources: Resources::new(1, 64),
                    count: 1,
                    profile: 0,
                })
                .collect(),
            drivers: launched
                .iter()
                .map(|&driver| DriverLaunch {
                    driver: driver.into(),
                    worker: "w1".into(),
                })
                .collect(),
            waiting: waiting
                .iter()
                .map(|id| Waiting {
                    id: id.clone(),
                    reason: WaitReason::NoAliveWorker,
                })
                .collect(),
            reserved: Vec::new(),
        }
    }

    #[test]
    fn a_wanted_pass_waits_until_the_last_started_five_times_as_long_ago_as_it_took() {
        let t0 = Instant::now();
        let tick = Duration::from_secs(1);
        let mut passes = Passes::default();
        passes.want();
        assert!(passes.due(t0, tick));
        passes.start(t0, Term(1));
        passes.took(Duration::from_millis(80));
        passes.want();
        assert!(!passes.due(t0 + Duration::from_millis(399), tick));
        assert!(passes.due(t0 + Duration::from_millis(400), tick));
        // A quick pass: the next wanted one runs at once.
        passes.start(t0 + Duration::from_millis(400), Term(1));
        passes.took(Duration::from_micros(100));
        passes.want();
        assert!(passes.due(t0 + Duration::from_millis(401), tick));
        // A pass the machine stalled in holds the next back a tick at most.
        passes.start(t0 + Duration::from_secs(1), Term(1));
        passes.took(Duration::from_secs(3));
        passes.want();
        assert!(!passes.due(t0 + Duration::from_millis(1_999), tick));
        assert!(passes.due(t0 + Duration::from_secs(2), tick));
    }

    #[test]
    fn work_is_told_once_how_long_it_waited_from_first_seen_waiting_to_a_committed_placement() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let (app, driver) = (WorkId::App("a".into()), WorkId::Driver("d".into()));
        let mut passes = Passes::default();
        passes.placing(
            at(0),
            &snapshot(&[("a", false)]),
            &plan(&[], &[], &[app.clone(), driver.clone()]),
        );
        passes.placing(
            at(5),
            &snapshot(&[("a", false)]),
            &plan(&["a"], &["d"], &[]),
        );
        // Nothing is told before its plan commits.
        assert!(passes.take_placement_waits().is_empty());
        passes.settled(true);
        let five = Duration::from_secs(5);
        assert_eq!(
            passes.take_placement_waits(),
            [(app.clone(), five), (driver, five)]
        );
        // More executors for an app that holds some is no first placement.
        passes.placing(at(7), &snapshot(&[("a", true)]), &plan(&["a"], &[], &[]));
        passes.settled(true);
        assert!(passes.take_placement_waits().is_empty());

        // A plan that does not commit leaves its work waiting since it was first seen.
        let b = WorkId::App("b".into());
        passes.placing(
            at(10),
            &snapshot(&[("b", false)]),
            &plan(&[], &[], std::slice::from_ref(&b)),
        );
        passes.placing(at(12), &snapshot(&[("b", false)]), &plan(&["b"], &[], &[]));
        passes.settled(false);
        assert!(passes.take_placement_waits().is_empty());
        passes.placing(at(14), &snapshot(&[("b", false)]), &plan(&["b"], &[], &[]));
        passes.settled(true);
        assert_eq!(passes.take_placement_waits(), [(b, Duration::from_secs(4))]);
    }
}
