//! The placer the master uses: the same decisions as [`super::spark::SparkLoop`], without
//! re-sorting every worker for every app and without granting one core unit at a time.
//!
//! # Keeping workers sorted across the pass
//!
//! ALIVE workers sit in ordered sets keyed by `(selection key, id rank)`, so each app walks
//! them in policy order from the first worker with enough of the sorted dimension, and stops
//! as soon as more workers could not change its assignment. A worker's key changes only when
//! the pass places something on it; [`ExecutorPlacer::workers_changed`], told an app's grants,
//! then moves each worker in the sets where its key changed; when the grants touched an
//! eighth of the workers or more, it drops the sets instead, and each is built afresh (a
//! radix sort of its entries) when a walk next needs it. A set is first built the same way.
//! A set built is a sorted list, cheap to make and to walk; it becomes an ordered tree the
//! first time a worker moves in it. An entry packs key, rank and worker into one `u128`, so
//! that the sets compare single integers.
//!
//! A worker's offer differs between queues only when it hosts prior work and the queue is a
//! normal one with a threshold below 1. So there is one *view* per such threshold plus the
//! plain view (free resources): workers without prior work live in one set shared by all
//! views; prior-hosting workers live in one set per view, keyed by what they offer in it.
//!
//! # The loop in closed form
//!
//! Spark's loop hands out units (`executor_cores` cores, or one core when unset) either
//! greedily worker by worker, or (spreadOut) one unit per worker per round. With `cap[i]` the
//! units worker `i` can take, and `U` the units the app gets in all:
//!
//! * with `executor_cores` set, every unit is a new executor, so
//!   `cap[i] = min(cores / cpe, memory / mem, resources / need)` and
//!   `U = min(cores_left / cpe, executors_left, sum cap)`;
//! * unset, only the first unit on a worker launches an executor, so the limit picks the
//!   workers: the first `min(executors_left, cores_left)` usable ones, each taking up to all
//!   its free cores, and `U = min(cores_left, sum of their cores)`.
//!
//! Greedy fills workers in order. Rounds are water-filling: every worker gets
//! `min(cap, t)` for the largest `t` that fits in `U`, and the units left over go one each to
//! the first workers that can take more. Walking stops once the workers seen so far decide
//! the result: for spreadOut, when as many workers as `U` can reach have been seen; for
//! greedy, when the workers seen can absorb `U`.

use std::cmp::Ordering;
use std::collections::{BTreeSet, btree_set};
use std::iter::Peekable;

use super::{ExecutorPlacer, ExecutorRequest, descending, selection_key};
use crate::ledger::{Ledger, Offer};
use crate::model::WorkerSelection;
use crate::queues::{Admission, Queues};
use crate::resources::Resources;

/// `(selection key, id rank, worker index)` packed into one integer, so that sets compare
/// one number: sorts in policy order (ascending).
type Entry = u128;

/// The entry of worker `w` (of id rank `rank`) filed under `key`.
fn entry(key: u64, rank: u32, w: usize) -> Entry {
    let w = u32::try_from(w).expect("fewer than 2^32 workers");
    (u128::from(key) << 64) | (u128::from(rank) << 32) | u128::from(w)
}

/// The worker an entry files.
fn worker_of(entry: Entry) -> usize {
    (entry & u128::from(u32::MAX)) as usize
}

/// Workers sorted per view, maintained as the pass places work.
pub(crate) struct IndexedPlacer {
    policy: WorkerSelection,
    /// Thresholds of the limiting views; view `v > 0` is `thresholds[v - 1]`.
    thresholds: Vec<f64>,
    /// ALIVE workers without prior work, keyed by their free resources; `None` while it is
    /// to be built afresh, which the next walk does.
    plain: Option<Sorted>,
    /// Per view, ALIVE workers hosting prior work, keyed by their offer in that view; `None`
    /// as for `plain`.
    prior: Vec<Option<Sorted>>,
    /// Per worker, where it is filed now.
    filed: Vec<Filed>,
    /// Per worker and view (`w * views + view`), the key it is filed under in the sets that
    /// are built; a plain worker uses view 0's slot.
    keys: Vec<u64>,
}

/// Where a worker is filed.
#[derive(Clone, Copy, PartialEq)]
enum Filed {
    /// Not ALIVE: never offered.
    Nowhere,
    /// In `plain`.
    Plain,
    /// In every `prior` set.
    Prior,
}

/// A usable worker and the units it can take.
struct Candidate {
    w: usize,
    cores: u32,
    cap: u64,
}

impl IndexedPlacer {
    fn view_admission(&self, view: usize) -> Admission {
        if view == 0 {
            Admission::Prior
        } else {
            Admission::Normal {
                threshold: self.thresholds[view - 1],
            }
        }
    }

    fn view_of(&self, admission: Admission) -> usize {
        match admission {
            Admission::Normal { threshold } if threshold < 1.0 => {
                1 + self
                    .thresholds
                    .iter()
                    .position(|&t| t == threshold)
                    .expect("every normal queue's threshold has a view")
            }
            _ => 0,
        }
    }

    fn views(&self) -> usize {
        self.prior.len()
    }

    /// The views in which a worker filed as `filed` has a key.
    fn views_of(&self, filed: Filed) -> usize {
        match filed {
            Filed::Nowhere => 0,
            Filed::Plain => 1,
            Filed::Prior => self.views(),
        }
    }

    /// Where the set that holds the workers filed as `filed` in `view` is kept (`None` in
    /// it while it is to be built); no set holds workers filed nowhere.
    fn slot(&mut self, filed: Filed, view: usize) -> Option<&mut Option<Sorted>> {
        match filed {
            Filed::Nowhere => None,
            Filed::Plain => Some(&mut self.plain),
            Filed::Prior => Some(&mut self.prior[view]),
        }
    }

    /// Whether the set that holds the workers filed as `filed` in `view` is built.
    fn is_built(&mut self, filed: Filed, view: usize) -> bool {
        self.slot(filed, view).is_some_and(|set| set.is_some())
    }

    /// The built set that holds the workers filed as `filed` in `view`, to move workers in.
    fn set_mut(&mut self, filed: Filed, view: usize) -> Option<&mut BTreeSet<Entry>> {
        self.slot(filed, view)?.as_mut().map(Sorted::tree)
    }

    /// Worker `w`'s key in `view` as it stands now (view 0 for a plain worker), written down.
    fn note_key(&mut self, ledger: &Ledger<'_>, w: usize, view: usize) -> u64 {
        let key = selection_key(self.policy, ledger.offer(w, self.view_admission(view)));
        let views = self.views();
        self.keys[w * views + view] = key;
        key
    }

    /// Files worker `w` where it belongs as it stands now.
    fn file(&mut self, ledger: &Ledger<'_>, w: usize) {
        let filed = filing(ledger, w);
        self.filed[w] = filed;
        let rank = ledger.rank(w);
        for view in 0..self.views_of(filed) {
            let key = self.note_key(ledger, w, view);
            if let Some(set) = self.set_mut(filed, view) {
                set.insert(entry(key, rank, w));
            }
        }
    }

    /// Removes worker `w` from wherever it is filed.
    fn unfile(&mut self, ledger: &Ledger<'_>, w: usize) {
        let filed = std::mem::replace(&mut self.filed[w], Filed::Nowhere);
        let (rank, views) = (ledger.rank(w), self.views());
        for view in 0..self.views_of(filed) {
            let key = self.keys[w * views + view];
            if let Some(set) = self.set_mut(filed, view) {
                set.remove(&entry(key, rank, w));
            }
        }
    }

    /// Moves worker `w`, whose usage changed, to where its keys now file it: within each
    /// built set whose key changed, or from the plain set into every view's when it took its
    /// first prior work.
    fn worker_changed(&mut self, ledger: &Ledger<'_>, w: usize) {
        let filed = self.filed[w];
        if filed == Filed::Nowhere {
            return;
        }
        if (filed == Filed::Prior) != ledger.hosts_prior(w) {
            self.unfile(ledger, w);
            self.file(ledger, w);
            return;
        }
        let (rank, views) = (ledger.rank(w), self.views());
        for view in 0..self.views_of(filed) {
            if !self.is_built(filed, view) {
                // Built afresh, keys and all, when next walked.
                continue;
            }
            let old = self.keys[w * views + view];
            let new = self.note_key(ledger, w, view);
            if old != new {
                let set = self.set_mut(filed, view).expect("built");
                set.remove(&entry(old, rank, w));
                set.insert(entry(new, rank, w));
            }
        }
    }

    /// Builds the sets that a walk in `view` needs and that are to be built afresh: from
    /// each ALIVE worker's keys as it stands now, all entries at once, not one insert each.
    fn build(&mut self, ledger: &Ledger<'_>, view: usize) {
        for (filed, view) in [(Filed::Plain, 0), (Filed::Prior, view)] {
            if self.is_built(filed, view) {
                continue;
            }
            let mut entries = Vec::new();
            for &w in ledger.alive_by_id() {
                if self.filed[w] == filed {
                    let key = self.note_key(ledger, w, view);
                    entries.push(entry(key, ledger.rank(w), w));
                }
            }
            *self.slot(filed, view).expect("plain or prior") =
                Some(Sorted::List(sort_by_key(entries)));
        }
    }

    /// The lowest key a worker that admits `need` can have in the sorted dimension.
    fn min_key(&self, need: &Resources) -> u64 {
        match self.policy {
            WorkerSelection::CoresFreeAsc | WorkerSelection::CoresFreeDesc => need.cores.into(),
            WorkerSelection::MemoryFreeAsc | WorkerSelection::MemoryFreeDesc => need.memory_mb,
            WorkerSelection::WorkerId => 0,
        }
    }

    /// ALIVE workers that admit one `need` as offered to `admission`, in policy order, with
    /// their offers: Spark's `usableWorkers`, produced lazily.
    fn usable<'s>(
        &'s self,
        ledger: &'s Ledger<'_>,
        need: &'s Resources,
        admission: Admission,
    ) -> impl Iterator<Item = (usize, Offer)> + 's {
        let from = entry(self.min_key(need), 0, 0);
        let built = "the sets a walk needs are built first";
        let plain = self.plain.as_ref().expect(built).walk_from(from);
        let prior = self.prior[self.view_of(admission)]
            .as_ref()
            .expect(built)
            .walk_from(from);
        let walk: Box<dyn Iterator<Item = &Entry> + 's> = if descending(self.policy) {
            Box::new(Merge::new(plain.rev(), prior.rev(), Ordering::Greater))
        } else {
            Box::new(Merge::new(plain, prior, Ordering::Less))
        };
        walk.map(move |&entry| {
            let w = worker_of(entry);
            (w, ledger.offer(w, admission))
        })
        .filter(move |&(w, offer)| ledger.admits(w, offer, need))
    }

    /// Usable workers in policy order, as many as decide the assignment.
    fn candidates(&self, ledger: &Ledger<'_>, request: &ExecutorRequest<'_>) -> Vec<Candidate> {
        let enough = Enough::new(request);
        let mut found = Vec::new();
        let mut units = 0;
        for (w, offer) in self.usable(ledger, request.need, request.admission) {
            let cap = units_cap(ledger, w, offer, request);
            units += cap;
            found.push(Candidate {
                w,
                cores: offer.cores,
                cap,
            });
            if enough.reached(found.len() as u64, units) {
                break;
            }
        }
        found
    }
}

/// Where ALIVE worker `w` belongs as it stands now.
fn filing(ledger: &Ledger<'_>, w: usize) -> Filed {
    if ledger.hosts_prior(w) {
        Filed::Prior
    } else {
        Filed::Plain
    }
}

/// How small a share of the workers an app's grants may change before the sets are built
/// afresh instead: one in this many.
const REBUILD_SHARE: usize = 8;

/// Entries in order: a sorted list as a set is built, cheap to make and to walk, and a tree
/// from the first time a worker moves in it.
enum Sorted {
    List(Vec<Entry>),
    Tree(BTreeSet<Entry>),
}

impl Sorted {
    /// The entries from `from` on, in order.
    fn walk_from(&self, from: Entry) -> Walk<'_> {
        match self {
            Self::List(list) => Walk::List(list[list.partition_point(|&e| e < from)..].iter()),
            Self::Tree(tree) => Walk::Tree(tree.range(from..)),
        }
    }

    /// The entries as a tree, to move workers in: made from the list in one go.
    fn tree(&mut self) -> &mut BTreeSet<Entry> {
        if let Self::List(list) = self {
            *self = Self::Tree(std::mem::take(list).into_iter().collect());
        }
        match self {
            Self::Tree(tree) => tree,
            Self::List(_) => unreachable!("made a tree above"),
        }
    }
}

/// A walk over the entries of a [`Sorted`], either way.
enum Walk<'a> {
    List(std::slice::Iter<'a, Entry>),
    Tree(btree_set::Range<'a, Entry>),
}

impl<'a> Iterator for Walk<'a> {
    type Item = &'a Entry;

    fn next(&mut self) -> Option<&'a Entry> {
        match self {
            Self::List(walk) => walk.next(),
            Self::Tree(walk) => walk.next(),
        }
    }
}

impl<'a> DoubleEndedIterator for Walk<'a> {
    fn next_back(&mut self) -> Option<&'a Entry> {
        match self {
            Self::List(walk) => walk.next_back(),
            Self::Tree(walk) => walk.next_back(),
        }
    }
}

/// The selection key an entry is filed under.
fn key_of(entry: Entry) -> u64 {
    (entry >> 64) as u64
}

/// Sorts entries made in id-rank order: a stable sort by key alone then orders them by
/// `(key, rank)`. A radix sort on the key's bytes, least significant first, skipping the
/// bytes in which no two keys differ: keys are cores or MB, so that is most of them, and a
/// rebuild of the sets takes one or a few linear passes instead of a comparison sort.
fn sort_by_key(mut entries: Vec<Entry>) -> Vec<Entry> {
    let (any, all) = entries.iter().fold((0, u64::MAX), |(any, all), &e| {
        (any | key_of(e), all & key_of(e))
    });
    let varying = any ^ all;
    let mut spare = vec![0; entries.len()];
    for shift in (0..64)
        .step_by(8)
        .filter(|shift| (varying >> shift) & 0xff != 0)
    {
        let digit = |e: Entry| (key_of(e) >> shift) as u8 as usize;
        let mut next = [0usize; 256];
        for &e in &entries {
            next[digit(e)] += 1;
        }
        let mut start = 0;
        for slot in &mut next {
            (*slot, start) = (start, start + *slot);
        }
        for &e in &entries {
            spare[next[digit(e)]] = e;
            next[digit(e)] += 1;
        }
        std::mem::swap(&mut entries, &mut spare);
    }
    entries
}

/// When the candidates seen so far decide the assignment (see the module docs).
enum Enough {
    /// SpreadOut: once this many workers are seen, round one already uses every unit.
    Workers(u64),
    /// Greedy: once the workers seen can absorb this many units (or reach the worker count).
    Units { units: u64, workers: u64 },
}

impl Enough {
    fn new(request: &ExecutorRequest<'_>) -> Self {
        let (units, workers) = match request.cores_per_executor {
            Some(cpe) => {
                let units = (request.cores_left / u64::from(cpe)).min(request.executors_left);
                (units, units)
            }
            None => (
                request.cores_left,
                request.executors_left.min(request.cores_left),
            ),
        };
        if request.spread_out {
            Self::Workers(workers)
        } else {
            Self::Units { units, workers }
        }
    }

    fn reached(&self, workers_seen: u64, units_seen: u64) -> bool {
        match *self {
            Self::Workers(workers) => workers_seen >= workers,
            Self::Units { units, workers } => units_seen >= units || workers_seen >= workers,
        }
    }
}

/// Units worker `w` can take for the request: executors of `cpe` cores when `executor_cores`
/// is set, single cores of one absorbing executor otherwise.
fn units_cap(ledger: &Ledger<'_>, w: usize, offer: Offer, request: &ExecutorRequest<'_>) -> u64 {
    match request.cores_per_executor {
        None => offer.cores.into(),
        Some(cpe) => {
            let by_cores_and_memory =
                u64::from(offer.cores / cpe).min(offer.memory_mb / request.need.memory_mb);
            request
                .need
                .custom
                .iter()
                .map(|(name, &amount)| u64::from(ledger.resource_free(w, name) / amount))
                .fold(by_cores_and_memory, u64::min)
        }
    }
}

impl ExecutorPlacer for IndexedPlacer {
    fn new(ledger: &Ledger<'_>, queues: &Queues, policy: WorkerSelection) -> Self {
        let thresholds = queues.limiting_thresholds();
        let views = thresholds.len() + 1;
        let mut placer = Self {
            policy,
            prior: std::iter::repeat_with(|| None).take(views).collect(),
            thresholds,
            plain: None,
            filed: vec![Filed::Nowhere; ledger.len()],
            keys: vec![0; ledger.len() * views],
        };
        for &w in ledger.alive_by_id() {
            placer.filed[w] = filing(ledger, w);
        }
        placer
    }

    fn assign(&mut self, ledger: &Ledger<'_>, request: &ExecutorRequest<'_>) -> Vec<(usize, u32)> {
        self.build(ledger, self.view_of(request.admission));
        let candidates = self.candidates(ledger, request);
        let (caps, total): (Vec<u64>, u64) = match request.cores_per_executor {
            Some(cpe) => {
                let caps: Vec<u64> = candidates.iter().map(|c| c.cap).collect();
                let units = (request.cores_left / u64::from(cpe))
                    .min(request.executors_left)
                    .min(caps.iter().sum());
                (caps, units)
            }
            None => {
                let slots = request
                    .executors_left
                    .min(request.cores_left)
                    .min(candidates.len() as u64) as usize;
                let caps: Vec<u64> = candidates[..slots]
                    .iter()
                    .map(|c| u64::from(c.cores))
                    .collect();
                let units = request.cores_left.min(caps.iter().sum());
                (caps, units)
            }
        };
        let units = if request.spread_out {
            water_fill(&caps, total)
        } else {
            fill_in_order(&caps, total)
        };
        let unit_cores = u64::from(request.need.cores);
        candidates
            .iter()
            .zip(units)
            .filter(|&(_, units)| units > 0)
            .map(|(c, units)| {
                (
                    c.w,
                    u32::try_from(units * unit_cores).expect("at most the worker's cores"),
                )
            })
            .collect()
    }

    fn has_room(&mut self, ledger: &Ledger<'_>, need: &Resources, admission: Admission) -> bool {
        self.build(ledger, self.view_of(admission));
        self.usable(ledger, need, admission).next().is_some()
    }

    fn workers_changed(&mut self, ledger: &Ledger<'_>, changed: &[usize]) {
        // Past an eighth of the workers, building a set afresh from sorted entries costs less
        // than moving each worker (a remove and an insert per set); each is built when a
        // walk next needs it, so a set no later app walks is never built.
        if changed.len() * REBUILD_SHARE < ledger.alive_by_id().len() {
            for &w in changed {
                self.worker_changed(ledger, w);
            }
            return;
        }
        for &w in changed {
            if self.filed[w] != Filed::Nowhere {
                self.filed[w] = filing(ledger, w);
            }
        }
        self.plain = None;
        self.prior.fill_with(|| None);
    }
}

/// Spark's spreadOut rounds: one unit per worker per round, in order, until `total` is used.
fn water_fill(caps: &[u64], total: u64) -> Vec<u64> {
    let filled = |level: u64| caps.iter().map(|&cap| cap.min(level)).sum::<u64>();
    // The largest number of complete rounds that `total` covers.
    let (mut low, mut high) = (0, caps.iter().copied().max().unwrap_or(0));
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if filled(mid) <= total {
            low = mid
        } else {
            high = mid - 1
        }
    }
    let mut left = total - filled(low);
    caps.iter()
        .map(|&cap| {
            let extra = u64::from(cap > low && left > 0);
            left -= extra;
            cap.min(low) + extra
        })
        .collect()
}

/// Spark without spreadOut: each worker in order takes all it can until `total` is used.
fn fill_in_order(caps: &[u64], total: u64) -> Vec<u64> {
    let mut left = total;
    caps.iter()
        .map(|&cap| {
            let take = cap.min(left);
            left -= take;
            take
        })
        .collect()
}

/// Merges two iterators sorted the same way into one, in that order: `first` is the
/// ordering an entry must have against the other side's head to come out first.
struct Merge<'a, A: Iterator<Item = &'a Entry>, B: Iterator<Item = &'a Entry>> {
    a: Peekable<A>,
    b: Peekable<B>,
    first: Ordering,
}

impl<'a, A: Iterator<Item = &'a Entry>, B: Iterator<Item = &'a Entry>> Merge<'a, A, B> {
    fn new(a: A, b: B, first: Ordering) -> Self {
        Self {
            a: a.peekable(),
            b: b.peekable(),
            first,
        }
    }
}

impl<'a, A: Iterator<Item = &'a Entry>, B: Iterator<Item = &'a Entry>> Iterator
    for Merge<'a, A, B>
{
    type Item = &'a Entry;

    fn next(&mut self) -> Option<&'a Entry> {
        match (self.a.peek(), self.b.peek()) {
            (Some(a), Some(b)) if b.cmp(a) == self.first => self.b.next(),
            (Some(_), _) => self.a.next(),
            (None, _) => self.b.next(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorting_by_key_orders_entries_as_a_comparison_sort_does() {
        // Keys with low, middle and high bytes in use, many equal keys, and ranks made in
        // order, as `build` makes them.
        let mut seed = 7u64;
        let entries: Vec<Entry> = (0..2_000u32)
            .map(|rank| {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let key = match rank % 3 {
                    0 => seed >> 60,
                    1 => seed >> 40,
                    _ => seed >> 1,
                };
                entry(key, rank, (rank as usize * 7) % 2_000)
            })
            .collect();
        let mut expected = entries.clone();
        expected.sort_unstable();
        assert_eq!(sort_by_key(entries), expected);
        assert_eq!(sort_by_key(Vec::new()), Vec::<Entry>::new());
        let same = vec![entry(5, 0, 3), entry(5, 1, 1), entry(5, 2, 2)];
        assert_eq!(sort_by_key(same.clone()), same);
    }
}
