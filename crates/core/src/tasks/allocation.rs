//! Dynamic allocation: how many executors an application asks for and which idle ones it
//! gives back, as Spark's `ExecutorAllocationManager` decides it with its defaults. Tasks
//! pending for `backlog_timeout` raise the target by 1, then 2, 4, ... each further
//! `sustained_backlog_timeout` while the backlog lasts, never beyond what the pending and
//! running tasks need nor `max`; when fewer are needed the target drops at once (not below
//! `min`); an executor idle for `idle_timeout` is released unless that would leave fewer than
//! `min` or the target.

use std::collections::{BTreeMap, BTreeSet};

use crate::ids::{ExecutorId, Timestamp};

/// Spark's `spark.dynamicAllocation.*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocationConfig {
    /// `minExecutors`.
    pub min: u32,
    /// `maxExecutors`.
    pub max: u32,
    /// `initialExecutors` (at least `min`).
    pub initial: u32,
    /// Tasks one executor runs at once (its cores).
    pub tasks_per_executor: u32,
    /// `schedulerBacklogTimeout`, in ms (Spark: 1 s).
    pub backlog_timeout_ms: u64,
    /// `sustainedSchedulerBacklogTimeout`, in ms (Spark: the backlog timeout).
    pub sustained_backlog_timeout_ms: u64,
    /// `executorIdleTimeout`, in ms (Spark: 60 s).
    pub idle_timeout_ms: u64,
}

/// What the application should ask the masters for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllocationChange {
    /// Hold at most this many executors.
    Target(u32),
    /// Give these idle executors back.
    Release(Vec<ExecutorId>),
}

/// The allocation manager's state.
#[derive(Clone, Debug)]
pub struct Allocation {
    config: AllocationConfig,
    target: u32,
    /// How many to add at the next backlog deadline.
    to_add: u32,
    /// When the backlog next raises the target, if there is one.
    add_at: Option<Timestamp>,
    /// No work seen yet: the target stays at its initial value.
    initializing: bool,
    /// Since when each live executor has run nothing.
    idle_since: BTreeMap<ExecutorId, Timestamp>,
    /// Executors released and not gone yet.
    releasing: BTreeSet<ExecutorId>,
}

impl Allocation {
    /// The manager at start: the target is `max(initial, min)`.
    pub fn new(config: AllocationConfig) -> Self {
        Self {
            target: config.initial.max(config.min),
            config,
            to_add: 1,
            add_at: None,
            initializing: true,
            idle_since: BTreeMap::new(),
            releasing: BTreeSet::new(),
        }
    }

    /// The executor target now.
    pub fn target(&self) -> u32 {
        self.target
    }

    /// One step at `now` (Spark runs it every 100 ms): `pending` and `running` tasks, and
    /// each live executor with whether it runs a task.
    pub fn tick(
        &mut self,
        now: Timestamp,
        pending: u32,
        running: u32,
        executors: &[(ExecutorId, bool)],
    ) -> Vec<AllocationChange> {
        let mut changes = Vec::new();
        if pending > 0 || running > 0 {
            self.initializing = false;
        }
        // Spark's onSchedulerBacklogged and onSchedulerQueueEmpty.
        if pending == 0 {
            self.add_at = None;
            self.to_add = 1;
        } else if self.add_at.is_none() {
            self.add_at = Some(Timestamp(now.0 + self.config.backlog_timeout_ms));
        }
        let before = self.target;
        self.update_target(now, pending + running, executors.len() as u32);
        if self.target != before {
            changes.push(AllocationChange::Target(self.target));
        }
        let idle = self.idle(now, executors);
        if !idle.is_empty() {
            changes.push(AllocationChange::Release(idle));
        }
        changes
    }

    /// Spark's `updateAndSyncNumExecutorsTarget`.
    fn update_target(&mut self, now: Timestamp, tasks: u32, executors: u32) {
        if self.initializing {
            return;
        }
        let needed = tasks.div_ceil(self.config.tasks_per_executor.max(1));
        if needed < self.target {
            self.target = needed.max(self.config.min);
            self.to_add = 1;
        } else if self.add_at.is_some_and(|at| now >= at) {
            self.add(needed, executors);
            self.add_at = Some(Timestamp(now.0 + self.config.sustained_backlog_timeout_ms));
        }
    }

    /// Spark's `addExecutors`: up by `to_add`, which doubles while each raise is granted in
    /// full.
    fn add(&mut self, needed: u32, executors: u32) {
        let config = self.config;
        if self.target >= config.max {
            self.to_add = 1;
            return;
        }
        let old = self.target;
        let raised = self.target.max(executors).saturating_add(self.to_add);
        self.target = raised.min(needed).min(config.max).max(config.min);
        let delta = self.target.saturating_sub(old);
        self.to_add = if delta == self.to_add {
            self.to_add.saturating_mul(2)
        } else {
            1
        };
    }

    /// Executors idle for the idle timeout that may go: never below `min` nor the target.
    fn idle(&mut self, now: Timestamp, executors: &[(ExecutorId, bool)]) -> Vec<ExecutorId> {
        let live: BTreeSet<ExecutorId> = executors.iter().map(|&(id, _)| id).collect();
        self.idle_since.retain(|id, _| live.contains(id));
        self.releasing.retain(|id| live.contains(id));
        for &(id, busy) in executors {
            if busy {
                self.idle_since.remove(&id);
            } else {
                self.idle_since.entry(id).or_insert(now);
            }
        }
        let floor = self.config.min.max(self.target) as usize;
        let mut left = live.len() - self.releasing.len();
        let mut released = Vec::new();
        for (&id, &since) in &self.idle_since {
            if left <= floor {
                break;
            }
            if self.releasing.contains(&id) || now.0 - since.0 < self.config.idle_timeout_ms {
                continue;
            }
            released.push(id);
            left -= 1;
        }
        self.releasing.extend(released.iter().copied());
        released
    }
}
