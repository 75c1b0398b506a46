//! Which application of a leaf queue a pass serves next ([`OrderingPolicy`]).
//!
//! Higher priority is served first under every policy; among equal priorities:
//! * `fifo` serves the applications in submission order, each taking all it can in its turn
//!   (Spark's order, unchanged when every priority is 0);
//! * `fair` serves the application holding the smallest dominant share of the cluster: its
//!   largest share of the ALIVE cores, memory or any custom resource (the
//!   CapacityScheduler's fair ordering, by dominant share rather than memory alone);
//! * `drf` serves the first application of the user whose dominant share of the cluster,
//!   from what their applications of the leaf hold, divided by the user's weight, is
//!   smallest: dominant resource fairness (Ghodsi et al., NSDI'11; YARN's `drf`, Mesos'
//!   sorter).
//!
//! Under `fair` and `drf` the result is progressive filling an executor at a time; a turn
//! gives at once the executors that one-at-a-time filling would give the same app in a
//! row, so that a pass takes as many turns as holders overtake each other, not one per
//! executor. Ties go to the holder whose first application was submitted first. An
//! application that took nothing in its turn is done for the pass (what is free only shrinks
//! as the pass goes on), unless its user's limit stopped it: with a `user_limit`, while
//! another user's applications are still to be served, one user's may hold at most that
//! many cores, and those it stopped are served again, without it, once every other has
//! been. A size without `executor_cores` (one executor per worker absorbing cores) takes all
//! it is given in a turn, as it does in Spark.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::ids::SmolStr;
use crate::model::{AppRequest, OrderingPolicy, QueueConfig, WorkerState};
use crate::resources::{Resources, dominant_share};

/// An app of the snapshot with its slot, its index in the snapshot's apps.
pub(crate) type Slotted<'s> = (usize, &'s AppRequest);

/// How much an app may take in one turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// All it can, in its last turn.
    Whole,
    /// At most this many executors of each size it asks for (a waiting gang: all of its
    /// minimum), or all it can; more turns follow while it takes something.
    Part(Option<u64>),
}

/// A leaf queue's apps still to serve this round, and what each holder (app or user) holds.
pub(crate) struct LeafTurns<'s> {
    policy: OrderingPolicy,
    weights: &'s BTreeMap<SmolStr, f64>,
    /// The ALIVE workers' capacity: the base of every share.
    cluster: &'s Resources,
    /// Under `fifo` without a user limit, the common case: the apps still served, highest
    /// priority first, then in submission order, each taking one whole turn.
    in_order: Option<VecDeque<Slotted<'s>>>,
    /// Otherwise the apps still served by priority, highest first.
    levels: BTreeMap<Reverse<i32>, Level<'s>>,
    /// What each holder the policy evens out holds, its grants this pass included: each
    /// app under `fifo` and `fair`, each user under `drf` (their apps that are done too).
    held: BTreeMap<&'s str, Resources>,
    /// The most cores one user's apps of the leaf may hold while another user's are still
    /// to be served, when the leaf limits users; none in the second round.
    user_limit: Option<u64>,
    /// What each user's apps of the leaf hold, in cores, when it limits users.
    user_cores: BTreeMap<&'s str, u64>,
    /// How many apps each user has still to be served, in this round or the second.
    to_serve: BTreeMap<&'s str, usize>,
    /// The apps that stopped at their user's limit: served again, without it, once every
    /// other app has been.
    later: Vec<Slotted<'s>>,
    /// The app `next` gave its turn, with its holder and the cores its user's limit let it
    /// take.
    serving: Option<(Slotted<'s>, &'s str, Option<u64>)>,
}

/// The apps of one priority still served.
#[derive(Default)]
struct Level<'s> {
    /// Each holder's apps, in submission order.
    apps: BTreeMap<&'s str, VecDeque<Slotted<'s>>>,
    /// The holders lightest first: by share (the bits of a share order as it does), then by
    /// the slot of their first app. Under `fifo` every share is 0.
    turns: BTreeSet<(u64, usize, &'s str)>,
}

impl<'s> LeafTurns<'s> {
    /// The turns of `apps` (of one leaf, in submission order) under `queue`'s policy, with
    /// `cluster` as the base of shares, `holding` every app of the leaf, those with nothing
    /// more to take included, with what it holds (counted for its holder), and `user_limit`
    /// the most cores one user's apps may hold while another's are to be served.
    pub(crate) fn new(
        queue: &'s QueueConfig,
        apps: Vec<Slotted<'s>>,
        holding: &[(&'s AppRequest, Resources)],
        user_limit: Option<u64>,
        cluster: &'s Resources,
    ) -> Self {
        let mut turns = Self {
            policy: queue.ordering,
            weights: &queue.user_weights,
            cluster,
            in_order: None,
            levels: BTreeMap::new(),
            held: BTreeMap::new(),
            user_limit,
            user_cores: BTreeMap::new(),
            to_serve: BTreeMap::new(),
            later: Vec::new(),
            serving: None,
        };
        if queue.ordering.is_fifo() && user_limit.is_none() {
            let mut in_order = apps;
            // Stable: equal priorities keep submission order.
            in_order.sort_by_key(|&(_, app)| Reverse(app.priority));
            turns.in_order = Some(in_order.into());
            return turns;
        }
        for (app, holds) in holding {
            if !turns.policy.is_fifo() {
                let held = turns.held.entry(turns.holder(app)).or_default();
                *held = held.saturating_add(holds);
            }
            if user_limit.is_some() {
                *turns.user_cores.entry(user(app)).or_default() += u64::from(holds.cores);
            }
        }
        turns.enqueue(apps);
        turns
    }

    /// Adds `apps` (in submission order) to those to be served.
    fn enqueue(&mut self, apps: Vec<Slotted<'s>>) {
        for (slot, app) in apps {
            let holder = self.holder(app);
            *self.to_serve.entry(user(app)).or_default() += 1;
            let level = self.levels.entry(Reverse(app.priority)).or_default();
            level.apps.entry(holder).or_default().push_back((slot, app));
        }
        for level in self.levels.values_mut() {
            level.turns = level
                .apps
                .iter()
                .map(|(&holder, apps)| {
                    let share = share(self.policy, self.weights, self.cluster, &self.held, holder);
                    (share.to_bits(), apps[0].0, holder)
                })
                .collect();
        }
    }

    /// Whether every app has had its turns but for those at their user's limit, which are
    /// served again, without it, in a second round.
    pub(crate) fn first_round_over(&self) -> bool {
        match &self.in_order {
            Some(in_order) => in_order.is_empty(),
            None => self.levels.is_empty(),
        }
    }

    /// Whether every app has had its turns.
    pub(crate) fn is_empty(&self) -> bool {
        match &self.in_order {
            Some(in_order) => in_order.is_empty(),
            None => self.levels.is_empty() && self.later.is_empty(),
        }
    }

    /// The app served next, how much it may take, and the most cores its user's limit lets
    /// it take: the first of the lightest holder's apps of the highest priority, as many
    /// executors as keep its holder the lightest and one more (as many turns of one
    /// executor each would give it). A `Whole` turn is its last.
    pub(crate) fn next(&mut self) -> Option<(Slotted<'s>, Step, Option<u64>)> {
        if let Some(in_order) = &mut self.in_order {
            return Some((in_order.pop_front()?, Step::Whole, None));
        }
        if self.levels.is_empty() && self.user_limit.take().is_some() {
            // The second round: what those at their user's limit may still take.
            let later = std::mem::take(&mut self.later);
            self.to_serve.clear();
            self.enqueue(later);
        }
        let level = self.levels.values().next()?;
        let mut lightest = level.turns.iter();
        let &(_, slot, holder) = lightest.next()?;
        let runner_up = lightest
            .next()
            .map(|&(bits, slot, _)| (f64::from_bits(bits), slot));
        let app = level.apps[holder][0];
        let cores = self.cores_allowed(app.1);
        if self.policy.is_fifo() && self.user_limit.is_none() {
            self.done(app, holder);
            return Some((app, Step::Whole, None));
        }
        let step = match self.policy {
            OrderingPolicy::Fifo => Step::Part(None),
            OrderingPolicy::Fair | OrderingPolicy::Drf => {
                Step::Part(self.executors_while_lightest(holder, (slot, app.1), runner_up))
            }
        };
        self.serving = Some((app, holder, cores));
        Some((app, step, cores))
    }

    /// The most cores `app` may take now: what its user's limit leaves them while another
    /// user's apps are still to be served; no bound otherwise.
    fn cores_allowed(&self, app: &AppRequest) -> Option<u64> {
        let limit = self.user_limit?;
        let user = user(app);
        let others_wait = self.to_serve.keys().any(|&other| other != user);
        others_wait.then(|| limit.saturating_sub(self.user_cores.get(user).copied().unwrap_or(0)))
    }

    /// How many executors of `app`'s own size `holder` (its first app `slot` of its level)
    /// takes before `runner_up` (the next lightest holder's share and first slot) is
    /// lighter; no bound (`None`) when there is no runner-up or the size is not known (one
    /// executor per worker absorbing cores).
    fn executors_while_lightest(
        &self,
        holder: &str,
        (slot, app): (usize, &AppRequest),
        runner_up: Option<(f64, usize)>,
    ) -> Option<u64> {
        let (next_share, next_slot) = runner_up?;
        let one = Resources::new(app.executor_cores?, app.executor_memory_mb)
            .with_custom(app.executor_resources.clone());
        let weight = self.weight(holder);
        let mut held = self.held.get(holder).cloned().unwrap_or_default();
        // One executor a turn, each given while the holder is the lightest: bounded by the
        // cluster, which holds no more than its cores' worth.
        let mut count = 0;
        while count <= u64::from(self.cluster.cores) {
            held = held.saturating_add(&one);
            count += 1;
            let share = dominant_share(&held, self.cluster) / weight;
            if (share, slot) > (next_share, next_slot) {
                break;
            }
        }
        Some(count)
    }

    /// The app `next` gave its turn was given `granted`; whether that was its last turn of
    /// the pass. With nothing, it is done: for the pass, or, when its user's limit bound it,
    /// until every other app has been served.
    pub(crate) fn served(&mut self, granted: &Resources) -> bool {
        let Some((app, holder, cores)) = self.serving.take() else {
            return true;
        };
        if self.user_limit.is_some() {
            *self.user_cores.entry(user(app.1)).or_default() += u64::from(granted.cores);
        }
        if granted.cores == 0 {
            self.done(app, holder);
            if cores.is_none() {
                return true;
            }
            self.later.push(app);
            *self.to_serve.entry(user(app.1)).or_default() += 1;
            return false;
        }
        if self.policy.is_fifo() {
            return false;
        }
        let before = self.share(holder).to_bits();
        let held = self.held.entry(holder).or_default();
        *held = held.saturating_add(granted);
        let after = self.share(holder).to_bits();
        for level in self.levels.values_mut() {
            if let Some(apps) = level.apps.get(holder) {
                level.turns.remove(&(before, apps[0].0, holder));
                level.turns.insert((after, apps[0].0, holder));
            }
        }
        false
    }

    /// `app`, the first of `holder`'s at the highest priority, has had its last turn.
    fn done(&mut self, app: Slotted<'s>, holder: &'s str) {
        if let Some(count) = self.to_serve.get_mut(user(app.1)) {
            *count -= 1;
            if *count == 0 {
                self.to_serve.remove(user(app.1));
            }
        }
        let share = self.share(holder).to_bits();
        let mut level = self.levels.first_entry().expect("a level to serve");
        let level_apps = level.get_mut();
        level_apps.turns.remove(&(share, app.0, holder));
        let apps = level_apps.apps.get_mut(holder).expect("the holder's apps");
        apps.pop_front();
        match apps.front() {
            Some(&(next, _)) => {
                level_apps.turns.insert((share, next, holder));
            }
            None => {
                level_apps.apps.remove(holder);
            }
        }
        if level_apps.apps.is_empty() {
            level.remove();
        }
    }

    fn holder(&self, app: &'s AppRequest) -> &'s str {
        holder(self.policy, app)
    }

    fn share(&self, holder: &str) -> f64 {
        share(self.policy, self.weights, self.cluster, &self.held, holder)
    }

    fn weight(&self, holder: &str) -> f64 {
        weight(self.policy, self.weights, holder)
    }
}

/// Who `app`'s holdings count for under `policy`: its user under `drf`, itself otherwise.
pub(crate) fn holder(policy: OrderingPolicy, app: &AppRequest) -> &str {
    match policy {
        OrderingPolicy::Drf => user(app),
        OrderingPolicy::Fifo | OrderingPolicy::Fair => &app.id.0,
    }
}

/// `holder`'s weight: its own under `drf`, 1 otherwise.
fn weight(policy: OrderingPolicy, weights: &BTreeMap<SmolStr, f64>, holder: &str) -> f64 {
    match policy {
        OrderingPolicy::Drf => weights.get(holder).copied().unwrap_or(1.0),
        OrderingPolicy::Fifo | OrderingPolicy::Fair => 1.0,
    }
}

/// `holder`'s dominant share of `cluster` from what it holds, divided by its weight under
/// `drf`; 0 under `fifo`.
fn share(
    policy: OrderingPolicy,
    weights: &BTreeMap<SmolStr, f64>,
    cluster: &Resources,
    held: &BTreeMap<&str, Resources>,
    holder: &str,
) -> f64 {
    if policy.is_fifo() {
        return 0.0;
    }
    held.get(holder).map_or(0.0, |held| {
        weighted_share(policy, weights, cluster, holder, held)
    })
}

/// The dominant share of `cluster` that `held` is, divided by `holder`'s weight under `drf`.
pub(crate) fn weighted_share(
    policy: OrderingPolicy,
    weights: &BTreeMap<SmolStr, f64>,
    cluster: &Resources,
    holder: &str,
    held: &Resources,
) -> f64 {
    dominant_share(held, cluster) / weight(policy, weights, holder)
}

/// The user an app counts for: the cluster's own credential's work is one user, "".
pub(crate) fn user(app: &AppRequest) -> &str {
    app.user.as_deref().unwrap_or("")
}

/// The capacity of `workers` that are ALIVE.
pub(crate) fn alive_capacity<'w>(
    workers: impl IntoIterator<Item = &'w crate::model::Worker>,
) -> Resources {
    workers
        .into_iter()
        .filter(|w| w.state == WorkerState::Alive)
        .fold(Resources::default(), |sum, w| {
            sum.saturating_add(&w.capacity)
        })
}
