//! One stage's tasks as Spark's `TaskSetManager` keeps them (`scheduler/TaskSetManager.scala`):
//! pending lists per executor, host, rack, no preference and all, used as stacks; delay
//! scheduling over the task set's valid locality levels; retries up to `max_task_failures`;
//! and speculation (`checkSpeculatableTasks`): a copy of a task running far longer than the
//! median.

use std::collections::{BTreeMap, BTreeSet};

use crate::ids::{ExecutorId, Timestamp};
use crate::tasks::executors::Executors;
use crate::tasks::locality::{Locality, LocalityWaits};

/// Where a task would like to run: a host, or one executor on it (Spark's
/// `ExecutorCacheTaskLocation`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskLocation {
    /// The host, as workers name themselves.
    pub host: String,
    /// The executor on it, if the data is in that process.
    pub executor: Option<ExecutorId>,
}

/// A task handed out by [`TaskSet::resource_offer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Dequeued {
    /// The task's index in its set.
    pub(crate) index: usize,
    /// Which attempt of it this is, from 0.
    pub(crate) attempt: u32,
    /// The locality it launches at.
    pub(crate) locality: Locality,
    /// A second copy of a task that runs slowly.
    pub(crate) speculative: bool,
}

/// The pending lists. Tasks are pushed in reverse index order and taken from the end, so
/// low indices go first and a failed task, pushed again, is retried first. Entries of
/// tasks that started or succeeded meanwhile are dropped lazily when met.
#[derive(Debug, Default)]
struct Pending {
    for_executor: BTreeMap<ExecutorId, Vec<usize>>,
    for_host: BTreeMap<String, Vec<usize>>,
    for_rack: BTreeMap<String, Vec<usize>>,
    no_prefs: Vec<usize>,
    all: Vec<usize>,
}

/// How one task of the set stands.
#[derive(Clone, Debug, Default)]
struct TaskState {
    locations: Vec<TaskLocation>,
    copies_running: u32,
    successful: bool,
    /// Failures that count toward `max_task_failures`.
    failures: u32,
    /// Attempts launched so far.
    attempts: u32,
    /// Hosts its attempts ran on: a speculative copy goes elsewhere.
    hosts: BTreeSet<String>,
}

/// A stage's tasks, with the state delay scheduling needs.
#[derive(Debug)]
pub(crate) struct TaskSet {
    tasks: Vec<TaskState>,
    pending: Pending,
    /// Spark's `pendingSpeculatableTasks`: copies of slow tasks waiting for a core.
    pending_speculative: Pending,
    /// Spark's `speculatableTasks`: tasks marked for a copy.
    speculatable: BTreeSet<usize>,
    /// How long each task took to succeed, in ms.
    durations: Vec<u64>,
    running: u32,
    succeeded: usize,
    /// No more tasks are handed out: every task succeeded, or the set was aborted.
    zombie: bool,
    max_task_failures: u32,
    waits: LocalityWaits,
    /// The valid locality levels, most local first; ANY is always last.
    levels: Vec<Locality>,
    current: usize,
    last_reset: Timestamp,
}

impl TaskSet {
    /// A task set whose task `i` prefers `locations[i]`, created at `now`.
    pub(crate) fn new(
        locations: Vec<Vec<TaskLocation>>,
        waits: LocalityWaits,
        max_task_failures: u32,
        now: Timestamp,
        executors: &Executors,
    ) -> Self {
        let tasks = locations
            .into_iter()
            .map(|locations| TaskState {
                locations,
                ..TaskState::default()
            })
            .collect::<Vec<_>>();
        let mut set = Self {
            tasks,
            pending: Pending::default(),
            pending_speculative: Pending::default(),
            speculatable: BTreeSet::new(),
            durations: Vec::new(),
            running: 0,
            succeeded: 0,
            zombie: false,
            max_task_failures,
            waits,
            levels: Vec::new(),
            current: 0,
            last_reset: now,
        };
        for index in (0..set.tasks.len()).rev() {
            set.add_pending(index, executors);
        }
        set.levels = set.valid_levels(executors);
        set
    }

    /// Tasks of the set running now.
    pub(crate) fn running(&self) -> u32 {
        self.running
    }

    /// Tasks neither running nor succeeded, while the set still launches.
    pub(crate) fn pending(&self) -> usize {
        if self.zombie {
            return 0;
        }
        self.tasks
            .iter()
            .filter(|t| t.copies_running == 0 && !t.successful)
            .count()
    }

    /// Whether every task succeeded.
    pub(crate) fn is_done(&self) -> bool {
        self.succeeded == self.tasks.len()
    }

    /// Whether the set hands out no more tasks.
    pub(crate) fn is_zombie(&self) -> bool {
        self.zombie
    }

    /// Spark's `isSchedulable`: not a zombie, and something is pending (perhaps only an
    /// entry of a task that runs), or a copy of a slow task.
    pub(crate) fn is_schedulable(&self) -> bool {
        let pending = !self.pending.all.is_empty() || !self.pending_speculative.all.is_empty();
        !self.zombie && pending
    }

    /// The valid locality levels, most local first.
    pub(crate) fn levels(&self) -> &[Locality] {
        &self.levels
    }

    /// Spark's `addPendingTask`: the task joins the list of every executor, host and rack
    /// it prefers (or the no-preference list), and the list of all tasks.
    fn add_pending(&mut self, index: usize, executors: &Executors) {
        let locations = &self.tasks[index].locations;
        self.pending.add(index, locations, executors);
    }

    /// Spark's `computeValidLocalityLevels`.
    fn valid_levels(&self, executors: &Executors) -> Vec<Locality> {
        let pending = &self.pending;
        let mut levels = Vec::new();
        if pending.for_executor.keys().any(|e| executors.is_alive(*e)) {
            levels.push(Locality::ProcessLocal);
        }
        if pending.for_host.keys().any(|h| executors.has_host(h)) {
            levels.push(Locality::NodeLocal);
        }
        if !pending.no_prefs.is_empty() {
            levels.push(Locality::NoPref);
        }
        if pending.for_rack.keys().any(|r| executors.has_rack(r)) {
            levels.push(Locality::RackLocal);
        }
        levels.push(Locality::Any);
        levels
    }

    /// Spark's `recomputeLocality`, when executors come or go: the current level is kept
    /// where it still exists, and a set that gains a level more local than where it stood
    /// moves to that level (SPARK-31837).
    pub(crate) fn recompute_locality(&mut self, executors: &Executors) {
        if self.zombie {
            return;
        }
        let previous_index = self.current;
        let previous_level = self.levels[self.current];
        let levels = self.valid_levels(executors);
        let previous_levels = std::mem::replace(&mut self.levels, levels);
        self.current = self.index_of(previous_level);
        if self.current > previous_index {
            let gained = self
                .levels
                .iter()
                .find(|level| !previous_levels.contains(level))
                .copied()
                .expect("a set with more levels gained one");
            self.current = self.index_of(gained);
        }
    }

    /// Spark's `getLocalityIndex`: the first valid level at least as wide as `level`.
    fn index_of(&self, level: Locality) -> usize {
        self.levels
            .iter()
            .position(|&valid| level <= valid)
            .unwrap_or(self.levels.len() - 1)
    }

    /// Spark's `resetDelayScheduleTimer`: the wait starts again now, at the most local level
    /// a task just launched at.
    pub(crate) fn reset_delay_timer(&mut self, now: Timestamp, min_launched: Option<Locality>) {
        self.last_reset = now;
        if let Some(level) = min_launched {
            self.current = self.index_of(level);
        }
    }

    /// Spark's `getAllowedLocalityLevel`: levels with nothing left to run are skipped at
    /// once (SPARK-4939); otherwise a level is left after its wait.
    fn allowed_level(&mut self, now: Timestamp) -> Locality {
        while self.current < self.levels.len() - 1 {
            let level = self.levels[self.current];
            let more = match level {
                Locality::ProcessLocal => {
                    more_to_run_in(&mut self.pending.for_executor, &self.tasks)
                }
                Locality::NodeLocal => more_to_run_in(&mut self.pending.for_host, &self.tasks),
                Locality::NoPref => !self.pending.no_prefs.is_empty(),
                Locality::RackLocal => more_to_run_in(&mut self.pending.for_rack, &self.tasks),
                Locality::Any => unreachable!("ANY is the last level"),
            };
            let wait = self.waits.at(level);
            if !more {
                self.last_reset = now;
                self.current += 1;
            } else if now.0.saturating_sub(self.last_reset.0) >= wait {
                self.last_reset = Timestamp(self.last_reset.0 + wait);
                self.current += 1;
            } else {
                return level;
            }
        }
        self.levels[self.current]
    }

    /// Spark's `resourceOffer` for one free core on `executor` at `host`, at most
    /// `max_locality` away. Returns the task launched, if any, and whether the offer was
    /// refused only because delay scheduling held the set back.
    pub(crate) fn resource_offer(
        &mut self,
        now: Timestamp,
        executor: ExecutorId,
        host: &str,
        rack: Option<&str>,
        max_locality: Locality,
    ) -> (Option<Dequeued>, bool) {
        if self.zombie {
            return (None, false);
        }
        let allowed = if max_locality == Locality::NoPref {
            max_locality
        } else {
            self.allowed_level(now).min(max_locality)
        };
        // Regular tasks first, then copies of slow ones.
        let launched = [false, true]
            .into_iter()
            .find_map(|speculative| {
                self.dequeue(executor, host, rack, allowed, speculative)
                    .map(|(index, locality)| (index, locality, speculative))
            })
            .map(|(index, locality, speculative)| {
                let task = &mut self.tasks[index];
                let attempt = task.attempts;
                task.attempts += 1;
                task.copies_running += 1;
                task.hosts.insert(host.to_owned());
                self.running += 1;
                Dequeued {
                    index,
                    attempt,
                    locality,
                    speculative,
                }
            });
        let pending = !self.pending.all.is_empty() || !self.pending_speculative.all.is_empty();
        let delay_reject = launched.is_none() && max_locality == Locality::Any && pending;
        (launched, delay_reject)
    }

    /// Spark's `dequeueTaskHelper`: executor, host, no-preference (which reports
    /// PROCESS_LOCAL), rack, then all, each as far as `allowed` permits; from the regular
    /// lists, or from the speculative ones on a host the task has not run on.
    fn dequeue(
        &mut self,
        executor: ExecutorId,
        host: &str,
        rack: Option<&str>,
        allowed: Locality,
        speculative: bool,
    ) -> Option<(usize, Locality)> {
        let tasks = &self.tasks;
        let pending = if speculative {
            &mut self.pending_speculative
        } else {
            &mut self.pending
        };
        if pending.all.is_empty() {
            return None;
        }
        let mut take = |list: &mut Vec<usize>| take(list, tasks, speculative.then_some(host));
        if let Some(index) = pending.for_executor.get_mut(&executor).and_then(&mut take) {
            return Some((index, Locality::ProcessLocal));
        }
        if Locality::NodeLocal <= allowed
            && let Some(index) = pending.for_host.get_mut(host).and_then(&mut take)
        {
            return Some((index, Locality::NodeLocal));
        }
        if Locality::NoPref <= allowed
            && let Some(index) = take(&mut pending.no_prefs)
        {
            return Some((index, Locality::ProcessLocal));
        }
        if Locality::RackLocal <= allowed
            && let Some(index) = rack
                .and_then(|rack| pending.for_rack.get_mut(rack))
                .and_then(&mut take)
        {
            return Some((index, Locality::RackLocal));
        }
        if Locality::Any <= allowed
            && let Some(index) = take(&mut pending.all)
        {
            return Some((index, Locality::Any));
        }
        None
    }

    /// Spark's `checkSpeculatableTasks`: once `quantile` of the tasks succeeded, a task whose
    /// only running copy has run longer than `multiplier` times their median duration (and
    /// at least `min_runtime_ms`) is marked for a copy. `running` gives each running
    /// attempt's task index and start. Returns whether any task was marked.
    pub(crate) fn check_speculatable(
        &mut self,
        now: Timestamp,
        speculation: &Speculation,
        running: impl Iterator<Item = (usize, Timestamp)>,
        executors: &Executors,
    ) -> bool {
        if self.zombie || self.tasks.len() == 1 {
            return false;
        }
        let needed = ((speculation.quantile * self.tasks.len() as f64).floor() as usize).max(1);
        if self.durations.len() < needed {
            return false;
        }
        let threshold = (speculation.multiplier * median(&mut self.durations))
            .max(speculation.min_runtime_ms as f64);
        let mut marked = false;
        for (index, started) in running {
            let task = &self.tasks[index];
            let slow = now.0.saturating_sub(started.0) as f64 > threshold;
            if slow
                && !task.successful
                && task.copies_running == 1
                && self.speculatable.insert(index)
            {
                let locations = &self.tasks[index].locations;
                self.pending_speculative.add(index, locations, executors);
                marked = true;
            }
        }
        marked
    }

    /// An attempt of task `index` succeeded after `duration_ms`: the set is done when all
    /// tasks have. Other running copies of it are the caller's to kill.
    pub(crate) fn succeeded(&mut self, index: usize, duration_ms: u64) {
        let task = &mut self.tasks[index];
        task.copies_running -= 1;
        self.running -= 1;
        if !task.successful {
            task.successful = true;
            self.succeeded += 1;
            self.durations.push(duration_ms);
        }
        if self.is_done() {
            self.zombie = true;
        }
    }

    /// Task `index` ended without success. When `counts` (the task itself failed, not its
    /// executor nor a kill) its failures grow, and at `max_task_failures` the set aborts
    /// with the message returned; otherwise it waits to run again, first in line.
    pub(crate) fn failed(
        &mut self,
        index: usize,
        counts: bool,
        executors: &Executors,
    ) -> Option<String> {
        let task = &mut self.tasks[index];
        task.copies_running -= 1;
        self.running -= 1;
        if task.successful {
            return None;
        }
        if counts && !self.zombie {
            task.failures += 1;
            if task.failures >= self.max_task_failures {
                self.zombie = true;
                return Some(format!("task {index} failed {} times", task.failures));
            }
        }
        if !self.zombie {
            self.add_pending(index, executors);
        }
        None
    }

    /// The set stops handing out tasks (its job ended).
    pub(crate) fn abort(&mut self) {
        self.zombie = true;
    }
}

impl Pending {
    /// Pushes task `index`, preferring `locations`, on its lists.
    fn add(&mut self, index: usize, locations: &[TaskLocation], executors: &Executors) {
        for location in locations {
            if let Some(executor) = location.executor {
                self.for_executor.entry(executor).or_default().push(index);
            }
            self.for_host
                .entry(location.host.clone())
                .or_default()
                .push(index);
            if let Some(rack) = executors.rack_of(&location.host) {
                self.for_rack
                    .entry(rack.to_owned())
                    .or_default()
                    .push(index);
            }
        }
        if locations.is_empty() {
            self.no_prefs.push(index);
        }
        self.all.push(index);
    }
}

/// Spark's `moreTasksToRunIn`: whether any list still holds a task to launch. Like Spark's
/// `exists`, it stops at the first such list, dropping the lists found empty before it.
fn more_to_run_in<K: Ord + Clone>(
    lists: &mut BTreeMap<K, Vec<usize>>,
    tasks: &[TaskState],
) -> bool {
    let mut empty = Vec::new();
    let mut more = false;
    for (key, list) in lists.iter_mut() {
        if needs_scheduling(list, tasks) {
            more = true;
            break;
        }
        empty.push(key.clone());
    }
    for key in empty {
        lists.remove(&key);
    }
    more
}

/// Spark's `tasksNeedToBeScheduledFrom`: drops entries of tasks that run or succeeded from
/// the top of `list` until one still waits.
fn needs_scheduling(list: &mut Vec<usize>, tasks: &[TaskState]) -> bool {
    while let Some(&index) = list.last() {
        let task = &tasks[index];
        if task.copies_running == 0 && !task.successful {
            return true;
        }
        list.pop();
    }
    false
}

/// Spark's `dequeueTaskFromList`: the topmost task that neither runs nor succeeded, or for a
/// speculative copy (`copy_on: Some(host)`) the topmost that runs once and never ran on
/// `host`; entries met on the way are dropped.
fn take(list: &mut Vec<usize>, tasks: &[TaskState], copy_on: Option<&str>) -> Option<usize> {
    let mut at = list.len();
    while at > 0 {
        at -= 1;
        let index = list[at];
        let task = &tasks[index];
        if copy_on.is_some_and(|host| task.hosts.contains(host)) {
            continue;
        }
        list.remove(at);
        let wanted = task.copies_running == 0 || (copy_on.is_some() && task.copies_running == 1);
        if wanted && !task.successful {
            return Some(index);
        }
    }
    None
}

/// The median of `values` (not empty), as Spark's `MedianHeap` gives it: the mean of the
/// two middle values of an even count.
fn median(values: &mut [u64]) -> f64 {
    values.sort_unstable();
    let middle = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[middle - 1] + values[middle]) as f64 / 2.0
    } else {
        values[middle] as f64
    }
}

/// `spark.speculation.*`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Speculation {
    /// `quantile`: the share of tasks that must have succeeded first.
    pub quantile: f64,
    /// `multiplier`: how many times the median duration counts as slow.
    pub multiplier: f64,
    /// `minTaskRuntime`, in ms: never slow before this.
    pub min_runtime_ms: u64,
}
