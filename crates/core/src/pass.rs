//! One scheduling pass: drivers first, then executors for each app, over a [`Ledger`] that
//! tracks what the pass has placed so far (Spark's `Master.schedule()`, in
//! `deploy/master/Master.scala`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use foldhash::fast::FixedState;

use crate::drivers::place_drivers;
use crate::executors::{ExecutorPlacer, ExecutorRequest};
use crate::ids::{QueueName, WorkId, WorkerId};
use crate::ledger::{Kept, Ledger, share};
use crate::model::{AppRequest, GangRequest, Snapshot};
use crate::ordering::{LeafTurns, Slotted, Step, alive_capacity, user};
use crate::plan::{ExecutorGrant, Kind, Plan, Reserved, WaitReason, Waiting};
use crate::queues::{Admission, Bound, Queues};
use crate::resources::ResourceAmounts;
use crate::resources::Resources;
use crate::wait::why_nothing_fits;

/// Runs one pass over a validated snapshot with executor placer `P`.
pub(crate) fn run<P: ExecutorPlacer>(snapshot: &Snapshot) -> Plan {
    let queues = Queues::new(&snapshot.queues);
    let mut ledger = Ledger::new(&snapshot.workers);
    let mut plan = Plan::default();
    // Room kept beside running drivers comes first: the drivers were started only because
    // it was there. An application that has registered takes its room back once drivers
    // are placed.
    let mut registered = Vec::new();
    for pending in &snapshot.pending_gangs {
        let kept = ledger.keep_for_gang(&pending.gang, queues.admission(&pending.queue));
        if pending.registered {
            registered.extend(kept);
        }
    }
    let mut apps = AppPass::new(snapshot, &queues, &ledger);
    // Gangs that wait and fit now keep their room while drivers are placed, so that a
    // driver placed first takes none of what they will be granted after.
    let kept = apps.keep_for_fitting_gangs(&mut ledger);
    // A gang that waits keeps the room it could use until its turn.
    apps.reserve_for_waiting_gang(&mut ledger);
    place_drivers(snapshot, &queues, &mut ledger, &mut plan);
    ledger.give_back_kept(kept);
    ledger.give_back_kept(registered);
    let mut placer = P::new(&ledger, &queues, snapshot.config.worker_selection);
    // Each app with its slot: its place in the snapshot, which keys what the pass tallies.
    // One whose cores left are fewer than any of its executors takes is passed over: it
    // would take nothing and wait for nothing in every round, and serving it would change
    // no queue's usage, so no other app's turn.
    let (prior, normal): (Vec<Slotted>, Vec<Slotted>) = snapshot
        .apps
        .iter()
        .enumerate()
        .filter(|&(slot, app)| apps.cores_left(slot, app) >= smallest_executor(app))
        .partition(|(_, app)| queues.get(&app.queue).prior);
    // The base of the shares `fair` and `drf` compare; no leaf of `fifo` reads it.
    let cluster = if snapshot.queues.iter().any(|q| !q.ordering.is_fifo()) {
        alive_capacity(snapshot.workers.iter())
    } else {
        Resources::default()
    };
    let mut turns = Turns {
        pass: &mut apps,
        ledger: &mut ledger,
        placer: &mut placer,
        plan: &mut plan,
    };
    turns.in_submission_order(&prior, &queues, &cluster);
    if !queues.guaranteed() {
        turns.in_submission_order(&normal, &queues, &cluster);
        let total_cores = apps.total_cores;
        (plan.executors, plan.reserved) = apps.into_grants(&ledger);
        behind_priority(snapshot, &mut plan);
        at_user_limit(snapshot, &queues, total_cores, &mut plan);
        return plan;
    }
    // Every queue up to its guarantee first, then up to its maximum; in each round the
    // queue furthest below its guarantee next, a turn of one of its apps as its ordering
    // has it.
    for bound in [Bound::Guaranteed, Bound::Max] {
        let mut pending = leaf_turns(turns.pass, &normal, &queues, &cluster);
        loop {
            let leaves: BTreeSet<&QueueName> = pending.keys().copied().collect();
            let total = turns.pass.total_cores;
            let Some(leaf) = queues.furthest_below(&leaves, |q| turns.pass.used(q), total) else {
                break;
            };
            let leaf_turns = pending.get_mut(leaf).expect("a pending leaf");
            turns.take(leaf_turns, bound);
            if leaf_turns.is_empty() {
                pending.remove(leaf);
            }
        }
    }
    let total_cores = apps.total_cores;
    (plan.executors, plan.reserved) = apps.into_grants(&ledger);
    behind_priority(snapshot, &mut plan);
    at_user_limit(snapshot, &queues, total_cores, &mut plan);
    plan
}

/// Says of each app left without room, in a leaf that limits users, that its user holds
/// at least the limit (granted in this pass or before) while another user below it has work
/// waiting there, which is served first.
fn at_user_limit(snapshot: &Snapshot, queues: &Queues, total_cores: u64, plan: &mut Plan) {
    if !snapshot.queues.iter().any(|q| q.user_limit.is_some()) {
        return;
    }
    let limited = |leaf: &QueueName| user_limit_cores(queues, leaf, total_cores);
    let granted: BTreeMap<&crate::ids::AppId, u64> =
        plan.executors.iter().fold(BTreeMap::new(), |mut sum, g| {
            *sum.entry(&g.app).or_default() += u64::from(g.resources.cores) * u64::from(g.count);
            sum
        });
    let mut held: BTreeMap<(&QueueName, &str), u64> = BTreeMap::new();
    for app in snapshot.apps.iter().filter(|a| limited(&a.queue).is_some()) {
        let cores = app.executors.cores() + granted.get(&app.id).copied().unwrap_or(0);
        *held.entry((&app.queue, user(app))).or_default() += cores;
    }
    let apps: HashMap<&crate::ids::AppId, &AppRequest, FixedState> =
        snapshot.apps.iter().map(|a| (&a.id, a)).collect();
    // The apps of limited leaves waiting for room, with their limits.
    let waiting: Vec<(usize, &AppRequest, u64)> = plan
        .waiting
        .iter()
        .enumerate()
        .filter_map(|(i, waiting)| match (&waiting.id, &waiting.reason) {
            (WorkId::App(id), WaitReason::NoRoom { .. } | WaitReason::BehindPriority { .. }) => {
                let app = *apps.get(id)?;
                Some((i, app, limited(&app.queue)?))
            }
            _ => None,
        })
        .collect();
    let holds = |app: &AppRequest| held.get(&(&app.queue, user(app))).copied().unwrap_or(0);
    for &(i, app, limit) in &waiting {
        // Those behind priority count as waiting, and keep their reason.
        let WaitReason::NoRoom { need, .. } = &plan.waiting[i].reason else {
            continue;
        };
        let served_first = waiting
            .iter()
            .any(|&(_, other, _)| other.queue == app.queue && holds(other) < limit);
        if holds(app) < limit || !served_first {
            continue;
        }
        plan.waiting[i].reason = WaitReason::AtUserLimit {
            user: user(app).to_owned(),
            queue: app.queue.clone(),
            held: holds(app),
            limit,
            need: need.clone(),
        };
    }
}

/// The most cores one user's apps of `leaf` may hold while another user's could take more:
/// its user limit of the leaf's maximum share of `total_cores`, if it limits users.
fn user_limit_cores(queues: &Queues, leaf: &QueueName, total_cores: u64) -> Option<u64> {
    queues.get(leaf).user_limit.map(|limit| {
        let room = queues.share(leaf, Bound::Max) * total_cores as f64;
        (limit * room).floor() as u64
    })
}

/// Says of each app left without room that work of a higher priority in its queue holds
/// executors, when some does (granted in this pass or before): the most urgent of it.
fn behind_priority(snapshot: &Snapshot, plan: &mut Plan) {
    if snapshot.apps.iter().all(|a| a.priority == 0) {
        return;
    }
    let mut served: BTreeMap<&QueueName, i32> = BTreeMap::new();
    let granted: BTreeSet<&crate::ids::AppId> = plan.executors.iter().map(|g| &g.app).collect();
    let holding = |app: &&AppRequest| !app.executors.is_empty() || granted.contains(&app.id);
    for app in snapshot.apps.iter().filter(holding) {
        let highest = served.entry(&app.queue).or_insert(app.priority);
        *highest = (*highest).max(app.priority);
    }
    if served.is_empty() {
        return;
    }
    let apps: HashMap<&crate::ids::AppId, &AppRequest, FixedState> =
        snapshot.apps.iter().map(|a| (&a.id, a)).collect();
    for waiting in &mut plan.waiting {
        let WorkId::App(id) = &waiting.id else {
            continue;
        };
        let WaitReason::NoRoom { need, .. } = &waiting.reason else {
            continue;
        };
        let Some(app) = apps.get(id) else {
            continue;
        };
        if let Some(&priority) = served.get(&app.queue).filter(|&&p| p > app.priority) {
            waiting.reason = WaitReason::BehindPriority {
                priority,
                need: need.clone(),
            };
        }
    }
}

/// Each leaf's turns for `apps` (in submission order), what every app of the snapshot holds,
/// `granted` in this pass included, counting for its holder, a leaf's user limit of its
/// maximum share of the `total_cores`.
fn leaf_turns<'s>(
    pass: &AppPass<'s>,
    apps: &[Slotted<'s>],
    queues: &'s Queues,
    cluster: &'s Resources,
) -> BTreeMap<&'s QueueName, LeafTurns<'s>> {
    let (snapshot, total_cores) = (pass.snapshot, pass.total_cores);
    let mut by_leaf: BTreeMap<&QueueName, Vec<Slotted>> = BTreeMap::new();
    for &app in apps {
        by_leaf.entry(&app.1.queue).or_default().push(app);
    }
    // What a leaf's apps hold counts only where it shares among holders or limits users.
    let counts = |leaf: &QueueName| {
        let queue = queues.get(leaf);
        !queue.ordering.is_fifo() || queue.user_limit.is_some()
    };
    let mut holding: BTreeMap<&QueueName, Vec<(&AppRequest, Resources)>> = BTreeMap::new();
    let mut granted = BTreeMap::new();
    if by_leaf.keys().any(|leaf| counts(leaf)) {
        granted = pass.granted();
    }
    for app in snapshot.apps.iter() {
        if by_leaf.contains_key(&app.queue) && counts(&app.queue) {
            let holds = app.executors.iter().fold(
                granted.remove(&app.id).unwrap_or_default(),
                |sum: Resources, e| sum.saturating_add(&e.resources),
            );
            holding.entry(&app.queue).or_default().push((app, holds));
        }
    }
    by_leaf
        .into_iter()
        .map(|(leaf, apps)| {
            let holding = holding.remove(leaf).unwrap_or_default();
            let queue = queues.get(leaf);
            let user_limit = user_limit_cores(queues, leaf, total_cores);
            let turns = LeafTurns::new(queue, apps, &holding, user_limit, cluster);
            (leaf, turns)
        })
        .collect()
}

/// What serving an app in its turn works with.
struct Turns<'p, 's, P> {
    pass: &'p mut AppPass<'s>,
    ledger: &'p mut Ledger<'s>,
    placer: &'p mut P,
    plan: &'p mut Plan,
}

impl<'s, P: ExecutorPlacer> Turns<'_, 's, P> {
    /// Serves `apps` (in submission order) up to their queues' maximum, as Spark's Master
    /// does when no queue has a guarantee: a `fifo` leaf's apps take the places of its
    /// apps in that order, highest priority first; a leaf of another ordering, or one that
    /// limits users, is served all of its turns in the place of its first app.
    fn in_submission_order(
        &mut self,
        apps: &[Slotted<'s>],
        queues: &'s Queues,
        cluster: &'s Resources,
    ) {
        let mut pending = leaf_turns(self.pass, apps, queues, cluster);
        for (_, app) in apps {
            let Some(leaf_turns) = pending.get_mut(&app.queue) else {
                continue;
            };
            while !leaf_turns.first_round_over() {
                if self.take(leaf_turns, Bound::Max) == Some(Step::Whole) {
                    break;
                }
            }
            if leaf_turns.is_empty() {
                pending.remove(&app.queue);
            }
        }
        // Apps that stopped at their user's limit take what is left, once every app has been
        // served.
        for leaf_turns in pending.values_mut() {
            while self.take(leaf_turns, Bound::Max).is_some() {}
        }
    }

    /// Serves the next app of `leaf_turns` one turn under `bound`; how much it could take.
    fn take(&mut self, leaf_turns: &mut LeafTurns<'s>, bound: Bound) -> Option<Step> {
        let (app, step, cores) = leaf_turns.next()?;
        let last = bound == Bound::Max;
        let whole = Turn {
            bound,
            last,
            cap: None,
            cores: None,
        };
        let granted = match step {
            Step::Whole => self.place(app, whole),
            Step::Part(cap) => {
                let part = Turn {
                    last: false,
                    cap: Some(cap.unwrap_or(u64::MAX)),
                    cores,
                    ..whole
                };
                self.place(app, part)
            }
        };
        let done = leaf_turns.served(&granted);
        if done && last && step != Step::Whole {
            // Done: placed once more only to say why it waits.
            self.place(app, whole);
        }
        Some(step)
    }

    fn place(&mut self, app: Slotted<'s>, turn: Turn) -> Resources {
        self.pass
            .place(app, turn, self.ledger, self.placer, self.plan)
    }
}

/// How an app is served in one turn.
#[derive(Clone, Copy)]
struct Turn {
    /// Up to which bound of its queue.
    bound: Bound,
    /// Whether it is the app's last turn of the pass: then it says why it waits, if it does.
    last: bool,
    /// At most how many new executors of each size (a waiting gang's first grant is all of
    /// its minimum whatever this is).
    cap: Option<u64>,
    /// At most how many cores in all, its user's limit (not a waiting gang's first grant).
    cores: Option<u64>,
}

/// One executor size an app asks for: its own (profile 0) or a resource profile's.
#[derive(Clone, Copy)]
struct Shape<'s> {
    profile: u32,
    executor_cores: Option<u32>,
    memory_mb: u64,
    resources: &'s ResourceAmounts,
    /// Cap on the app's executors of this size.
    limit: Option<u32>,
}

/// The sizes `app` asks for, its own first, then its profiles by id, as Spark's Master
/// serves an application's resource profiles.
fn shapes(app: &AppRequest) -> Vec<Shape<'_>> {
    let own = Shape {
        profile: 0,
        executor_cores: app.executor_cores,
        memory_mb: app.executor_memory_mb,
        resources: &app.executor_resources,
        limit: app.executor_limit,
    };
    let mut shapes = vec![own];
    shapes.extend(app.profiles.iter().map(|profile| Shape {
        profile: profile.id,
        executor_cores: profile.executor_cores,
        memory_mb: profile.executor_memory_mb,
        resources: &profile.executor_resources,
        limit: Some(profile.executor_limit),
    }));
    shapes.sort_by_key(|shape| shape.profile);
    shapes
}

/// The fewest cores any executor of `app` takes: a size without `executor_cores` takes one
/// or more.
fn smallest_executor(app: &AppRequest) -> u64 {
    std::iter::once(app.executor_cores)
        .chain(app.profiles.iter().map(|profile| profile.executor_cores))
        .map(|cores| u64::from(cores.unwrap_or(1)))
        .min()
        .unwrap_or(1)
}

/// A grant as the pass makes it: the plan's [`ExecutorGrant`] once the pass is over, without
/// the ids and resources copied into it before then.
struct Grant<'s> {
    app: &'s AppRequest,
    /// The profile of the executors' size.
    profile: u32,
    /// Each executor's memory.
    memory_mb: u64,
    /// Each executor's custom resources.
    resources: &'s ResourceAmounts,
    worker: &'s WorkerId,
    /// Each executor's cores.
    cores: u32,
    /// How many executors.
    count: u32,
    /// The step of the pass at which it was made or last grew: listed in that order, each
    /// grant is admissible (thresholds included) after the ones before it.
    step: usize,
}

/// State carried from one app to the next: queue usage, what each app got so far, and the
/// cluster's size.
struct AppPass<'s> {
    snapshot: &'s Snapshot,
    queues: &'s Queues,
    /// Executor cores held and granted in this pass below each queue, parents included.
    queue_used: BTreeMap<&'s QueueName, u64>,
    /// Executor cores each app holds, those granted in this pass included, by slot.
    app_cores: Vec<u64>,
    /// Executors granted to each app in this pass, by profile.
    granted_executors: BTreeMap<(usize, u32), u64>,
    /// The grants made so far, in the order they were made.
    grants: Vec<Grant<'s>>,
    /// The grant (its index in `grants`) of each app's executor of each profile on each
    /// worker this pass, for sizes without `executor_cores`, whose one executor per worker
    /// absorbs the cores of every round (see `grow_sole_executors`).
    sole_executors: BTreeMap<(usize, u32, usize), usize>,
    /// Steps taken: grants made or grown.
    steps: usize,
    /// Total cores of ALIVE workers, the base of every queue's share.
    total_cores: u64,
    /// The gangs all of whose minimum fit at the start of the pass, by slot, in order.
    fitting_gangs: Vec<usize>,
    /// The gang that keeps room this pass, and the room it keeps.
    reserving: Option<Reserving>,
}

/// A waiting gang's kept room: what it takes when its turn comes and all of its minimum
/// fits, and keeps again when not.
struct Reserving {
    /// The gang's slot.
    slot: usize,
    /// Its room, worker by worker.
    kept: Vec<Kept>,
    /// How many of its executors that room holds.
    executors: u64,
}

impl<'s> AppPass<'s> {
    fn new(snapshot: &'s Snapshot, queues: &'s Queues, ledger: &Ledger<'_>) -> Self {
        let app_cores: Vec<u64> = snapshot.apps.iter().map(|a| a.executors.cores()).collect();
        Self {
            snapshot,
            queues,
            queue_used: queues.sum_below(
                snapshot
                    .apps
                    .iter()
                    .zip(&app_cores)
                    .map(|(a, &c)| (&a.queue, c)),
            ),
            app_cores,
            granted_executors: BTreeMap::new(),
            grants: Vec::new(),
            sole_executors: BTreeMap::new(),
            steps: 0,
            total_cores: ledger.alive_total_cores(),
            fitting_gangs: Vec::new(),
            reserving: None,
        }
    }

    fn add_used(&mut self, leaf: &QueueName, cores: u64) {
        for queue in self.queues.path(leaf) {
            *self.queue_used.entry(queue).or_insert(0) += cores;
        }
    }

    /// A step later than every one so far.
    fn next_step(&mut self) -> usize {
        self.steps += 1;
        self.steps
    }

    /// What each app was granted in this pass so far.
    fn granted(&self) -> BTreeMap<&'s crate::ids::AppId, Resources> {
        let mut granted: BTreeMap<&crate::ids::AppId, Resources> = BTreeMap::new();
        for grant in &self.grants {
            let executors = Resources {
                cores: grant.cores,
                memory_mb: grant.memory_mb,
                custom: grant.resources.clone(),
            }
            .times(grant.count);
            let sum = granted.entry(&grant.app.id).or_default();
            *sum = sum.saturating_add(&executors);
        }
        granted
    }

    /// The plan's grants, in the order they last grew: an executor that took more cores in
    /// a later round moves to where it took them. Made at once, in a list allocated once.
    /// And the room kept for a waiting gang at the end of the pass.
    fn into_grants(mut self, ledger: &Ledger<'_>) -> (Vec<ExecutorGrant>, Vec<Reserved>) {
        let reserved = match self.reserving.take() {
            Some(reserving) => {
                let app = &self.snapshot.apps[reserving.slot].id;
                reserving
                    .kept
                    .into_iter()
                    .map(|kept| Reserved {
                        app: app.clone(),
                        worker: ledger.worker(kept.w).id.clone(),
                        resources: kept.need,
                    })
                    .collect()
            }
            None => Vec::new(),
        };
        // Steps are unique: an unstable sort orders them the same, with no scratch space.
        self.grants.sort_unstable_by_key(|grant| grant.step);
        let grants = self
            .grants
            .iter()
            .map(|grant| ExecutorGrant {
                app: grant.app.id.clone(),
                worker: grant.worker.clone(),
                // Field by field: no empty custom map made only to be replaced.
                resources: Resources {
                    cores: grant.cores,
                    memory_mb: grant.memory_mb,
                    custom: grant.resources.clone(),
                },
                count: grant.count,
                profile: grant.profile,
            })
            .collect();
        (grants, reserved)
    }

    /// The cores `app`, in `slot`, may still take under its `cores_max` (the default's for
    /// one without), as of this point of the pass.
    fn cores_left(&self, slot: usize, app: &AppRequest) -> u64 {
        let requested = app
            .cores_max
            .or(self.snapshot.config.default_cores)
            .map_or(u64::MAX, u64::from);
        requested.saturating_sub(self.app_cores[slot])
    }

    fn used(&self, queue: &QueueName) -> u64 {
        self.queue_used.get(queue).copied().unwrap_or(0)
    }

    /// The cores `leaf`'s executors may still take under `bound`, and the queue on its path
    /// that allows the fewest with its share in cores, the one nearest the root on a tie
    /// (none for a prior leaf: prior work may use the whole cluster).
    fn room(&self, leaf: &'s QueueName, bound: Bound) -> (u64, Option<(&'s QueueName, u64)>) {
        if self.queues.get(leaf).prior {
            return (u64::MAX, None);
        }
        let mut tightest = (u64::MAX, None);
        for queue in self.queues.path(leaf) {
            let share = share(self.queues.share(queue, bound), self.total_cores);
            let left = share.saturating_sub(self.used(queue));
            if tightest.1.is_none() || left <= tightest.0 {
                tightest = (left, Some((queue, share)));
            }
        }
        tightest
    }

    /// Adds up to `cores` to the executors of `profile` (a size without `executor_cores`)
    /// `app` got earlier in this pass, as Spark adds cores to an executor it is launching:
    /// whatever the worker still offers the app's queue, without memory or the executor
    /// limit, one core per worker in turn when spreading out, else each worker filled in
    /// turn. Returns the cores added and the workers they went to.
    fn grow_sole_executors(
        &mut self,
        (slot, app): Slotted<'s>,
        profile: u32,
        mut cores: u64,
        ledger: &mut Ledger<'_>,
    ) -> (u64, Vec<usize>) {
        let admission = self.queues.admission(&app.queue);
        let mut executors: Vec<(usize, usize, u32)> = self
            .sole_executors
            .range((slot, profile, 0)..=(slot, profile, usize::MAX))
            .map(|(&(_, _, w), &grant)| (grant, w, 0))
            .collect();
        // In the order they were granted. An executor on a worker whose memory in use went
        // over the queue's threshold since (others' grants) does not grow: listed where it
        // grows, its memory would count there.
        executors.sort_unstable();
        executors.retain(|&(_, w, _)| ledger.memory_within_threshold(w, admission));
        let spread_out = self.snapshot.config.spread_out_apps;
        let mut added_any = true;
        while cores > 0 && added_any {
            added_any = false;
            for (_, w, added) in &mut executors {
                while cores > 0 && ledger.offer(*w, admission).cores > *added {
                    *added += 1;
                    cores -= 1;
                    added_any = true;
                    if spread_out {
                        break;
                    }
                }
            }
        }
        let mut grown = (0, Vec::new());
        for (grant, w, added) in executors.into_iter().filter(|&(_, _, added)| added > 0) {
            ledger.take(w, &Resources::new(added, 0), admission == Admission::Prior);
            let step = self.next_step();
            let grant = &mut self.grants[grant];
            grant.cores += added;
            grant.step = step;
            grown.0 += u64::from(added);
            grown.1.push(w);
        }
        grown
    }

    /// Serves `app` one `turn` ([`Self::place_turn`]); what it was granted.
    fn place<P: ExecutorPlacer>(
        &mut self,
        (slot, app): Slotted<'s>,
        turn: Turn,
        ledger: &mut Ledger<'s>,
        placer: &mut P,
        plan: &mut Plan,
    ) -> Resources {
        let (cores_before, grants_before) = (self.app_cores[slot], self.grants.len());
        self.place_turn((slot, app), turn, ledger, placer, plan);
        // Grown sole executors add cores only; new grants add executors whole.
        let cores = self.app_cores[slot] - cores_before;
        let mut granted = Resources::new(u32::try_from(cores).unwrap_or(u32::MAX), 0);
        for grant in &self.grants[grants_before..] {
            granted.memory_mb += grant.memory_mb * u64::from(grant.count);
            for (name, &amount) in grant.resources {
                *granted.custom.entry(name.clone()).or_default() += amount * grant.count;
            }
        }
        granted
    }

    /// Grants `app` what the placer assigns within the room `turn`'s bound leaves its queue,
    /// each of its sizes in turn, then, when this is the app's `last` turn, records why it
    /// still waits, if it does: for the first of its sizes that waits for more than its
    /// limit, else for the first that waits at all.
    fn place_turn<P: ExecutorPlacer>(
        &mut self,
        (slot, app): Slotted<'s>,
        turn: Turn,
        ledger: &mut Ledger<'s>,
        placer: &mut P,
        plan: &mut Plan,
    ) {
        let Turn {
            bound, last, cap, ..
        } = turn;
        // Its kept room is its own to take now.
        let reserving = self
            .reserving
            .take_if(|reserving| reserving.slot == slot)
            .map(|reserving| {
                let changed: Vec<usize> = reserving.kept.iter().map(|kept| kept.w).collect();
                ledger.give_back_kept(reserving.kept);
                placer.workers_changed(ledger, &changed);
                reserving.executors
            });
        let gang = self.gang((slot, app)).map(|gang| {
            let minimum = u64::from(gang.min_executors);
            let fit = self.gang_fit((slot, app), &gang, bound, ledger);
            (gang, minimum, fit)
        });
        if let Some((ref gang, minimum, fit)) = gang
            && fit < minimum
        {
            if let Some(executors) = reserving {
                let kept = ledger.keep_for_gang(gang, self.queues.admission(&app.queue));
                let changed: Vec<usize> = kept.iter().map(|kept| kept.w).collect();
                placer.workers_changed(ledger, &changed);
                self.reserving = Some(Reserving {
                    slot,
                    kept,
                    executors,
                });
            }
            if last {
                let reason = match reserving {
                    Some(reserved) => WaitReason::GangReserved { minimum, reserved },
                    None => WaitReason::Gang { minimum, fit },
                };
                plan.waiting.push(Waiting {
                    id: WorkId::App(app.id.clone()),
                    reason,
                });
            }
            return;
        }
        // A gang's first grant is all of its minimum, whatever the turn's caps.
        let turn = Turn {
            cap: cap.map(|cap| gang.as_ref().map_or(cap, |&(_, minimum, _)| minimum)),
            cores: turn.cores.filter(|_| gang.is_none()),
            ..turn
        };
        let mut turn = turn;
        let mut reasons = Vec::new();
        for shape in shapes(app) {
            let before = self.app_cores[slot];
            reasons.extend(self.place_shape((slot, app), shape, turn, ledger, placer));
            // The user's limit bounds the app's sizes together.
            if let Some(cores) = &mut turn.cores {
                *cores = cores.saturating_sub(self.app_cores[slot] - before);
            }
        }
        debug_assert!(
            gang.is_none_or(|(_, minimum, _)| {
                self.granted_executors.get(&(slot, 0)).copied().unwrap_or(0) >= minimum
            }),
            "a gang granted part of its minimum"
        );
        let first_for_room = reasons
            .iter()
            .position(|reason| !matches!(reason, WaitReason::ExecutorLimit { .. }));
        if !reasons.is_empty() {
            plan.waiting.push(Waiting {
                id: WorkId::App(app.id.clone()),
                reason: reasons.swap_remove(first_for_room.unwrap_or(0)),
            });
        }
    }

    /// The executors of its own size `app` must be granted at once, if it is a gang that has
    /// none yet: its `min_executors`, or as many as its `cores_max` and executor limit allow
    /// when that is fewer (none: no gang to wait for).
    fn gang(&self, (slot, app): Slotted<'s>) -> Option<GangRequest> {
        let minimum = app.min_executors?;
        let started = app.executors.iter().any(|e| e.profile == 0)
            || self.granted_executors.contains_key(&(slot, 0));
        if started {
            return None;
        }
        let cpe = app
            .executor_cores
            .expect("validation: a gang has executor_cores");
        let by_cores = self.cores_left(slot, app) / u64::from(cpe);
        let by_limit = app.executor_limit.unwrap_or(u32::MAX);
        let minimum = minimum
            .min(by_limit)
            .min(u32::try_from(by_cores).unwrap_or(u32::MAX));
        (minimum > 0).then(|| GangRequest {
            min_executors: minimum,
            executor_cores: cpe,
            executor_memory_mb: app.executor_memory_mb,
            executor_resources: app.executor_resources.clone(),
        })
    }

    /// Keeps, in `ledger`, the room of every waiting gang all of whose minimum fits now,
    /// oldest first; what it kept.
    fn keep_for_fitting_gangs(&mut self, ledger: &mut Ledger<'_>) -> Vec<Kept> {
        let mut kept = Vec::new();
        for (slot, app) in self.snapshot.apps.iter().enumerate() {
            let Some(gang) = self.gang((slot, app)) else {
                continue;
            };
            let admission = self.queues.admission(&app.queue);
            if ledger.gang_fit(&gang, admission) >= u64::from(gang.min_executors) {
                kept.extend(ledger.keep_for_gang(&gang, admission));
                self.fitting_gangs.push(slot);
            }
        }
        kept
    }

    /// Keeps, in `ledger`, the room free now that the first waiting gang all of whose
    /// minimum does not fit could use, up to its minimum, until its turn: a gang that waits
    /// behind others reserves room as it frees, pass after pass, so that a stream of smaller
    /// work does not starve it.
    ///
    /// One gang at a time, the oldest of prior queues first, then the oldest of the others,
    /// and only
    /// - a gang that fits once the executors running now have ended, and its queue's maximum
    ///   holds it: executors end as their applications progress, while a driver may wait
    ///   for room itself, so kept room never waits for room held by what waits for it;
    /// - of a normal queue, while no prior work wants room: prior work is served first.
    fn reserve_for_waiting_gang(&mut self, ledger: &mut Ledger<'s>) {
        let (prior, mut normal): (Vec<Slotted>, Vec<Slotted>) = self
            .snapshot
            .apps
            .iter()
            .enumerate()
            .filter(|(_, app)| app.min_executors.is_some())
            .partition(|(_, app)| self.queues.get(&app.queue).prior);
        // Asked only where an ordinary queue has a gang: most passes have none.
        if !normal.is_empty() && self.prior_wants_room() {
            normal.clear();
        }
        // Built once, for the first gang that gets this far.
        let mut held: Option<HashMap<&WorkerId, Resources, FixedState>> = None;
        for (slot, app) in prior.into_iter().chain(normal) {
            if self.fitting_gangs.binary_search(&slot).is_ok() {
                continue;
            }
            let Some(gang) = self.gang((slot, app)) else {
                continue;
            };
            let admission = self.queues.admission(&app.queue);
            let minimum = u64::from(gang.min_executors);
            if ledger.gang_fit(&gang, admission) >= minimum
                || minimum * u64::from(gang.executor_cores) > self.most_cores(&app.queue)
            {
                continue;
            }
            let held = held.get_or_insert_with(|| self.held_by_executors());
            if ledger.gang_fit_once_executors_end(&gang, |worker| held.get(worker)) < minimum {
                continue;
            }
            let kept = ledger.keep_for_gang(&gang, admission);
            let executors = kept
                .iter()
                .map(|kept| u64::from(kept.need.cores / gang.executor_cores))
                .sum();
            self.reserving = Some(Reserving {
                slot,
                kept,
                executors,
            });
            return;
        }
    }

    /// Whether a driver of a prior queue waits, or an application of one could take
    /// another executor under its `cores_max` and limits.
    fn prior_wants_room(&self) -> bool {
        let prior = |queue: &QueueName| self.queues.get(queue).prior;
        self.snapshot.drivers.iter().any(|d| prior(&d.queue))
            || self.snapshot.apps.iter().enumerate().any(|(slot, app)| {
                prior(&app.queue)
                    && self.cores_left(slot, app) >= smallest_executor(app)
                    && shapes(app).iter().any(|shape| {
                        shape.limit.is_none_or(|limit| {
                            app.executors
                                .iter()
                                .filter(|e| e.profile == shape.profile)
                                .count()
                                < limit as usize
                        })
                    })
            })
    }

    /// The most cores `leaf`'s executors may ever hold: its maximum's share of the ALIVE
    /// cores, the tightest along its path (all of them for a prior queue).
    fn most_cores(&self, leaf: &QueueName) -> u64 {
        if self.queues.get(leaf).prior {
            return self.total_cores;
        }
        self.queues
            .path(leaf)
            .iter()
            .map(|queue| share(self.queues.share(queue, Bound::Max), self.total_cores))
            .min()
            .unwrap_or(self.total_cores)
    }

    /// What the executors the applications hold take on each worker.
    fn held_by_executors(&self) -> HashMap<&'s WorkerId, Resources, FixedState> {
        let mut held: HashMap<&WorkerId, Resources, FixedState> = HashMap::default();
        for executor in self
            .snapshot
            .apps
            .iter()
            .flat_map(|app| app.executors.iter())
        {
            let sum = held.entry(&executor.worker).or_default();
            *sum = sum
                .checked_add(&executor.resources)
                .expect("what executors hold is within capacity");
        }
        held
    }

    /// How many of `app`'s `gang` fit now: on the ALIVE workers as they offer its queue,
    /// within the room `bound` leaves the queue. Exactly what placement would grant, up to
    /// the gang's minimum: Spark's loop places executors while any worker takes one and
    /// cores are left.
    fn gang_fit(
        &self,
        (slot, app): Slotted<'s>,
        gang: &GangRequest,
        bound: Bound,
        ledger: &Ledger<'_>,
    ) -> u64 {
        let admission = self.queues.admission(&app.queue);
        let cores = self
            .cores_left(slot, app)
            .min(self.room(&app.queue, bound).0);
        ledger
            .gang_fit(gang, admission)
            .min(cores / u64::from(gang.executor_cores))
    }

    /// Grants `app` executors of `shape` as [`AppPass::place`] does, and returns why more of
    /// them wait, if they do and this is the app's `last` round.
    fn place_shape<P: ExecutorPlacer>(
        &mut self,
        (slot, app): Slotted<'s>,
        shape: Shape<'s>,
        turn: Turn,
        ledger: &mut Ledger<'s>,
        placer: &mut P,
    ) -> Option<WaitReason> {
        let Turn {
            bound,
            last,
            cap,
            cores,
        } = turn;
        let cpe = shape.executor_cores.unwrap_or(1);
        let own_left = self.cores_left(slot, app);
        let (queue_left, _) = self.room(&app.queue, bound);
        let granted_before = (slot, shape.profile);
        // Only a size with a limit counts its executors: a count of none is never the limit.
        let held_executors = match shape.limit {
            Some(_) => {
                app.executors
                    .iter()
                    .filter(|e| e.profile == shape.profile)
                    .count() as u64
                    + self
                        .granted_executors
                        .get(&granted_before)
                        .copied()
                        .unwrap_or_default()
            }
            None => 0,
        };
        let executors_left = shape
            .limit
            .map_or(u64::MAX, |limit| {
                u64::from(limit).saturating_sub(held_executors)
            })
            .min(cap.unwrap_or(u64::MAX));
        let admission = self.queues.admission(&app.queue);
        let need = &Resources::new(cpe, shape.memory_mb).with_custom(shape.resources.clone());
        let mut cores_left = own_left.min(queue_left).min(cores.unwrap_or(u64::MAX));
        let (mut granted_cores, mut granted_executors) = (0u64, 0u64);
        if shape.executor_cores.is_none() {
            let (grown, changed) =
                self.grow_sole_executors((slot, app), shape.profile, cores_left, ledger);
            cores_left -= grown;
            granted_cores += grown;
            placer.workers_changed(ledger, &changed);
        }
        let request = ExecutorRequest {
            cores_per_executor: shape.executor_cores,
            need,
            cores_left,
            executors_left,
            admission,
            spread_out: self.snapshot.config.spread_out_apps,
        };
        if request.cores_left >= u64::from(cpe) {
            let assigned = placer.assign(ledger, &request);
            for &(w, cores) in &assigned {
                // allocateWorkerResourceToExecutors: `cores / cpe` executors, or one with all.
                let (count, cores_each) = shape
                    .executor_cores
                    .map_or((1, cores), |cpe| (cores / cpe, cpe));
                let executors = Resources {
                    cores: cores_each,
                    ..need.clone()
                }
                .times(count);
                ledger.take(w, &executors, admission == Admission::Prior);
                if shape.executor_cores.is_none() {
                    // Its executors there took every core offered: a worker the placer
                    // picks has none of this app's of this size yet.
                    let earlier = self
                        .sole_executors
                        .insert((slot, shape.profile, w), self.grants.len());
                    debug_assert!(earlier.is_none(), "one executor per worker");
                }
                let step = self.next_step();
                self.grants.push(Grant {
                    app,
                    profile: shape.profile,
                    memory_mb: shape.memory_mb,
                    resources: shape.resources,
                    worker: &ledger.worker(w).id,
                    cores: cores_each,
                    count,
                    step,
                });
                granted_cores += u64::from(cores);
                granted_executors += u64::from(count);
            }
            let changed: Vec<usize> = assigned.iter().map(|&(w, _)| w).collect();
            placer.workers_changed(ledger, &changed);
        }
        self.add_used(&app.queue, granted_cores);
        self.app_cores[slot] += granted_cores;
        if granted_executors > 0 {
            *self.granted_executors.entry(granted_before).or_default() += granted_executors;
        }

        if !last || own_left - granted_cores < u64::from(cpe) {
            return None;
        }
        // A queue allowed the whole cluster is never the reason: the cluster is.
        let (room_after, tightest) = self.room(&app.queue, bound);
        let at_capacity = tightest.filter(|&(queue, _)| {
            self.queues.share(queue, bound) < 1.0 && room_after < u64::from(cpe)
        });
        let reason = if executors_left == granted_executors {
            WaitReason::ExecutorLimit {
                limit: shape.limit.expect("only a set limit runs out"),
                held: held_executors + granted_executors,
            }
        } else {
            // A cause no capacity change would cure outranks the queue's capacity.
            match (
                why_nothing_fits(ledger, Kind::Executor, need, &app.queue, self.queues, |a| {
                    placer.has_room(ledger, need, a)
                }),
                at_capacity,
            ) {
                (
                    permanent
                    @ (WaitReason::NoAliveWorker | WaitReason::LargerThanAnyWorker { .. }),
                    _,
                ) => permanent,
                (_, Some((queue, capacity))) => WaitReason::QueueAtCapacity {
                    queue: queue.clone(),
                    used: self.used(queue),
                    capacity,
                },
                (reason, None) => reason,
            }
        };
        Some(reason)
    }
}
