//! A linearizability check of the client API's driver registry (Wing and Gong's search, with
//! Lowe's memoization, as Knossos and Porcupine run it): a history of submissions and status
//! reads, each with when it was invoked and when it returned, is linearizable if some order of
//! its operations, each taking effect at one instant between its invocation and its return,
//! is a history of a sequential registry.
//!
//! The registry keeps every driver it accepted (the chaos cluster retains every ended one), so
//! its sequential model is a growing set of ids: a submission adds a new id, a read returns
//! the whole set. A submission that returned an id took effect exactly once, with that id; one
//! that failed on the client's side may have taken effect or not, under an id nobody was told,
//! so it may be placed anywhere after its invocation, or nowhere. No acknowledged submission
//! lost, none applied twice, no read missing a write acknowledged before it began: each is a
//! history this check refuses.

use std::collections::{BTreeSet, HashSet};

/// One client operation as the client saw it.
#[derive(Clone, Debug)]
pub struct Operation {
    /// When it was invoked, in any one clock's units.
    pub invoked: u64,
    /// When it returned; `None` for a call whose outcome is unknown (it failed, or timed out).
    pub returned: Option<u64>,
    /// What it was and what it answered.
    pub kind: Kind,
}

/// What an operation was.
#[derive(Clone, Debug)]
pub enum Kind {
    /// A driver submission: the id it was given, if it returned one.
    Submit(Option<String>),
    /// A status read: every driver id it showed.
    Read(BTreeSet<String>),
}

/// The registry after some operations took effect: the ids whose submissions returned them,
/// the ids reads showed that no returned submission had (each from a submission whose
/// outcome is unknown), and how many of those submissions took effect.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
struct Registry {
    known: BTreeSet<String>,
    unattributed: BTreeSet<String>,
    unknown_applied: usize,
}

/// How much stack the search takes per operation in effect: it recurses once for each.
const STACK_PER_OPERATION: usize = 16 << 10;

/// Whether `history` is linearizable; if not, what the longest linearizable prefix of it (in
/// some order) could not be extended by. The search runs on a thread with a stack deep enough
/// for the whole history (a 30-minute chaos run records thousands of operations).
pub fn check(history: &[Operation]) -> Result<(), String> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .stack_size((8 << 20) + history.len() * STACK_PER_OPERATION)
            .spawn_scoped(scope, || search(history))
            .expect("the search thread starts")
            .join()
            .expect("the search does not panic")
    })
}

fn search(history: &[Operation]) -> Result<(), String> {
    let acknowledged: HashSet<&str> = history
        .iter()
        .filter_map(|op| match &op.kind {
            Kind::Submit(Some(id)) => Some(id.as_str()),
            _ => None,
        })
        .collect();
    let mut search = Search {
        history,
        acknowledged,
        seen: HashSet::new(),
        deepest: (0, String::new()),
    };
    let mut done = vec![false; history.len()];
    if search.extend(&Registry::default(), &mut done, 0) {
        Ok(())
    } else {
        Err(format!(
            "not linearizable: after {} operations in effect, none of the next could be: {}",
            search.deepest.0, search.deepest.1
        ))
    }
}

struct Search<'h> {
    history: &'h [Operation],
    acknowledged: HashSet<&'h str>,
    /// States already searched from: which operations had taken effect (a bit each), and
    /// the registry's ids from submissions of unknown outcome (the acknowledged ones follow
    /// from the first).
    seen: HashSet<(Vec<u64>, BTreeSet<String>, usize)>,
    /// The most operations any order reached, and what blocked it there.
    deepest: (usize, String),
}

impl Search<'_> {
    /// Whether the operations not `done` can take effect in some order from `registry`.
    fn extend(&mut self, registry: &Registry, done: &mut Vec<bool>, in_effect: usize) -> bool {
        let pending = || (0..self.history.len()).filter(|&i| !done[i]);
        // The next to take effect was invoked before every pending one returned.
        let Some(first_return) = pending().filter_map(|i| self.history[i].returned).min() else {
            // Only operations of unknown outcome are left: they may never have taken effect.
            return true;
        };
        let mut bits = vec![0u64; done.len().div_ceil(64)];
        for (i, _) in done.iter().enumerate().filter(|(_, done)| **done) {
            bits[i / 64] |= 1 << (i % 64);
        }
        let state = (
            bits,
            registry.unattributed.clone(),
            registry.unknown_applied,
        );
        if !self.seen.insert(state) {
            return false;
        }
        let mut tried_unknown = false;
        let candidates: Vec<usize> = pending()
            .filter(|&i| self.history[i].invoked < first_return)
            .collect();
        for i in candidates {
            let op = &self.history[i];
            // Submissions of unknown outcome are alike: trying the first invoked is enough.
            if matches!(op.kind, Kind::Submit(None)) {
                if tried_unknown {
                    continue;
                }
                tried_unknown = true;
            }
            if let Some(next) = self.step(registry, &op.kind) {
                done[i] = true;
                if self.extend(&next, done, in_effect + 1) {
                    return true;
                }
                done[i] = false;
            } else if in_effect >= self.deepest.0 {
                self.deepest = (in_effect, format!("{op:?} on {registry:?}"));
            }
        }
        false
    }

    /// The registry after `kind` takes effect on `registry`, if the answer it gave fits.
    fn step(&self, registry: &Registry, kind: &Kind) -> Option<Registry> {
        let mut next = registry.clone();
        match kind {
            Kind::Submit(Some(id)) => next.known.insert(id.clone()).then_some(next),
            Kind::Submit(None) => {
                next.unknown_applied += 1;
                Some(next)
            }
            Kind::Read(ids) => {
                let (known, unattributed): (BTreeSet<String>, BTreeSet<String>) = ids
                    .iter()
                    .cloned()
                    .partition(|id| self.acknowledged.contains(id.as_str()));
                let fits = known == registry.known
                    && registry.unattributed.is_subset(&unattributed)
                    && unattributed.len() == registry.unknown_applied;
                next.unattributed = unattributed;
                fits.then_some(next)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn submit(invoked: u64, returned: Option<u64>, id: Option<&str>) -> Operation {
        Operation {
            invoked,
            returned,
            kind: Kind::Submit(id.map(str::to_owned)),
        }
    }

    fn read(invoked: u64, returned: u64, ids: &[&str]) -> Operation {
        Operation {
            invoked,
            returned: Some(returned),
            kind: Kind::Read(ids.iter().map(|id| id.to_string()).collect()),
        }
    }

    #[test]
    fn reads_that_see_every_earlier_write_and_overlapping_ones_either_way_are_linearizable() {
        let history = [
            submit(0, Some(10), Some("a")),
            read(11, 20, &["a"]),
            // b overlaps both reads: one may miss it, the later may not.
            submit(15, Some(40), Some("b")),
            read(21, 30, &["a"]),
            read(41, 50, &["a", "b"]),
        ];
        assert_eq!(check(&history), Ok(()));
    }

    #[test]
    fn a_lost_acknowledged_write_a_stale_read_and_a_write_applied_twice_are_not() {
        let lost = [submit(0, Some(10), Some("a")), read(11, 20, &[])];
        assert!(check(&lost).is_err());
        let back_in_time = [
            submit(0, Some(10), Some("a")),
            read(11, 20, &["a"]),
            read(21, 30, &[]),
        ];
        assert!(check(&back_in_time).is_err());
        let twice = [
            submit(0, Some(10), Some("a")),
            submit(11, Some(20), Some("a")),
        ];
        assert!(check(&twice).is_err());
        // Two concurrent writes seen in opposite orders by two concurrent reads.
        let opposite = [
            submit(0, Some(100), Some("a")),
            submit(0, Some(100), Some("b")),
            read(10, 90, &["a"]),
            read(10, 90, &["b"]),
        ];
        assert!(check(&opposite).is_err());
    }

    #[test]
    fn a_history_as_long_as_a_long_chaos_run_records_is_checked() {
        // A submission and two reads every step, 4,500 operations: the search recurses once
        // per operation, deeper than a test thread's stack allows.
        let mut history = Vec::new();
        let mut ids: Vec<String> = Vec::new();
        for step in 0..1_500u64 {
            let at = step * 100;
            let id = format!("driver-{step:05}");
            history.push(submit(at, Some(at + 10), Some(&id)));
            ids.push(id);
            let seen: Vec<&str> = ids.iter().map(String::as_str).collect();
            history.push(read(at + 20, at + 30, &seen));
            history.push(read(at + 40, at + 50, &seen));
        }
        assert_eq!(check(&history), Ok(()));
        history.push(read(1_000_000, 1_000_010, &[]));
        assert!(check(&history).is_err(), "a read that lost every driver");
    }

    #[test]
    fn a_failed_submission_may_have_taken_effect_once_or_not_at_all() {
        let applied = [
            submit(0, None, None),
            read(20, 30, &["x"]),
            read(31, 40, &["x"]),
        ];
        assert_eq!(check(&applied), Ok(()));
        let not_applied = [submit(0, None, None), read(20, 30, &[])];
        assert_eq!(check(&not_applied), Ok(()));
        // One failed submission cannot account for two drivers nobody was told of.
        let two_from_one = [submit(0, None, None), read(20, 30, &["x", "y"])];
        assert!(check(&two_from_one).is_err());
        // Nor for a driver seen before it was invoked.
        let early = [read(0, 10, &["x"]), submit(20, None, None)];
        assert!(check(&early).is_err());
        // And a driver once seen stays.
        let vanished = [
            submit(0, None, None),
            read(20, 30, &["x"]),
            read(31, 40, &[]),
        ];
        assert!(check(&vanished).is_err());
    }
}
