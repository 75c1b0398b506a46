//! When an ALIVE leader runs its scheduling pass, and what the last pass left waiting.
//!
//! Events want a pass ([`Passes::want`]); [`Passes::due`] says whether one runs now: it
//! does when one is wanted or a tick has passed since the last, unless a plan is still in
//! flight. A burst of events is thus followed by one pass, not one each.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use muster_core::ids::{Term, WorkId};
use muster_core::plan::{Plan, Reserved};

/// The passes of one leader.
#[derive(Debug, Default)]
pub(super) struct Passes {
    /// Whether events since the last pass want another.
    wanted: bool,
    /// A plan is proposed and not settled yet.
    in_flight: bool,
    last: Option<Instant>,
    count: u64,
    /// Why each app or driver waits, as of the last pass.
    waiting: BTreeMap<WorkId, String>,
    /// How many wait, by [`muster_core::plan::WaitReason::code`], as of the last pass.
    waiting_reasons: BTreeMap<&'static str, usize>,
    /// The room the last pass kept for a waiting gang.
    reserved: Vec<Reserved>,
}

impl Passes {
    /// Something changed that a pass may act on.
    pub(super) fn want(&mut self) {
        self.wanted = true;
    }

    pub(super) fn wanted(&self) -> bool {
        self.wanted
    }

    /// Whether a pass is due at `now`: one is wanted or `tick` has passed since the last, and
    /// no plan is in flight.
    pub(super) fn due(&self, now: Instant, tick: Duration) -> bool {
        let ticked = self
            .last
            .is_none_or(|last| now.saturating_duration_since(last) >= tick);
        !self.in_flight && (self.wanted || ticked)
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
    }

    /// The pass left `plan`'s work waiting.
    pub(super) fn waited(&mut self, plan: &Plan) {
        self.waiting = plan
            .waiting
            .iter()
            .map(|w| (w.id.clone(), w.reason.to_string()))
            .collect();
        self.reserved.clone_from(&plan.reserved);
        self.waiting_reasons.clear();
        for waiting in &plan.waiting {
            *self
                .waiting_reasons
                .entry(waiting.reason.code())
                .or_default() += 1;
        }
    }

    /// The pass's plan is proposed.
    pub(super) fn planned(&mut self) {
        self.in_flight = true;
    }

    /// The plan in flight was settled, committed or not.
    pub(super) fn settled(&mut self) {
        self.in_flight = false;
    }

    pub(super) fn count(&self) -> u64 {
        self.count
    }

    pub(super) fn waiting(&self, id: &WorkId) -> Option<&str> {
        self.waiting.get(id).map(String::as_str)
    }

    pub(super) fn waiting_reasons(&self) -> &BTreeMap<&'static str, usize> {
        &self.waiting_reasons
    }

    pub(super) fn reserved(&self) -> &[Reserved] {
        &self.reserved
    }
}
