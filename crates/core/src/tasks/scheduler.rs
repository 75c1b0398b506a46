//! Which task runs on which executor core: Spark's `TaskSchedulerImpl.resourceOffers`
//! (`scheduler/TaskSchedulerImpl.scala`) over the task sets of running stages, ordered by their pools, with the
//! delay-scheduling timer rule of Spark 3.1+ (SPARK-18886).

use std::collections::BTreeMap;

use crate::ids::{ExecutorId, Timestamp};
use crate::rng::SplitMix64;
use crate::tasks::executors::{ExecutorInfo, Executors};
use crate::tasks::locality::{Locality, LocalityWaits};
use crate::tasks::pools::{DEFAULT_POOL, PoolConfig, Schedulable, SchedulingMode};
use crate::tasks::task_set::{Speculation, TaskLocation, TaskSet};
use crate::tasks::{JobId, StageId, TaskId};

/// How tasks are scheduled within one application.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerConfig {
    /// `spark.scheduler.mode`: FIFO puts every task set under one root; FAIR puts them in
    /// pools.
    pub mode: SchedulingMode,
    /// FAIR pools; `default` and any pool a job names exist even when not listed.
    pub pools: Vec<PoolConfig>,
    /// `spark.locality.wait` and its overrides.
    pub waits: LocalityWaits,
    /// `spark.task.maxFailures`.
    pub max_task_failures: u32,
    /// Seeds the shuffle of offers, so a run can be replayed.
    pub seed: u64,
    /// `spark.speculation`: copies of slow tasks, when set.
    pub speculation: Option<Speculation>,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            mode: SchedulingMode::Fifo,
            pools: Vec::new(),
            waits: LocalityWaits::default(),
            max_task_failures: 4,
            seed: 0,
            speculation: None,
        }
    }
}

/// A task to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// The attempt's id, unique in the application.
    pub task: TaskId,
    /// Its stage.
    pub stage: StageId,
    /// Its index in the stage.
    pub index: usize,
    /// Its attempt number, from 0.
    pub attempt: u32,
    /// Where it runs.
    pub executor: ExecutorId,
    /// The executor's host.
    pub host: String,
    /// How local it is to its preferred data.
    pub locality: Locality,
    /// A copy of a task that runs slowly elsewhere.
    pub speculative: bool,
}

/// How a task attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskEnd {
    /// It succeeded.
    Succeeded,
    /// It failed by itself: the failure counts toward `max_task_failures`.
    Failed,
    /// Its executor was lost or killed, or the attempt was killed: it runs again, and the
    /// failure does not count.
    Lost,
}

/// What a task's end meant for its stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StageEvent {
    /// Every task of the stage succeeded.
    Done(StageId),
    /// A task failed `max_task_failures` times; the stage gives up.
    Aborted(StageId, String),
}

/// A running attempt.
#[derive(Clone, Debug)]
struct Running {
    stage: StageId,
    index: usize,
    executor: ExecutorId,
    started: Timestamp,
}

/// A stage's task set in its pool.
#[derive(Debug)]
struct Entry {
    set: TaskSet,
    job: JobId,
    pool: String,
    /// Spark's `noRejectsSinceLastReset`.
    no_rejects_since_reset: bool,
}

/// The task scheduler of one application.
#[derive(Debug)]
pub struct TaskScheduler {
    config: SchedulerConfig,
    executors: Executors,
    /// An executor came since the last offers: every set recomputes its levels then.
    executor_added: bool,
    sets: BTreeMap<StageId, Entry>,
    running: BTreeMap<TaskId, Running>,
    next_task: u64,
    rng: SplitMix64,
}

impl TaskScheduler {
    /// A scheduler with no executors and no work.
    pub fn new(config: SchedulerConfig) -> Self {
        let rng = SplitMix64::new(config.seed);
        Self {
            config,
            executors: Executors::default(),
            executor_added: false,
            sets: BTreeMap::new(),
            running: BTreeMap::new(),
            next_task: 0,
            rng,
        }
    }

    /// The live executors.
    pub fn executors(&self) -> &Executors {
        &self.executors
    }

    /// Tasks running now.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Each live executor, and whether it runs a task.
    pub fn executors_busy(&self) -> Vec<(ExecutorId, bool)> {
        self.executors
            .iter()
            .map(|(id, info)| (id, info.free < info.cores))
            .collect()
    }

    /// Tasks of running stages waiting for a core.
    pub fn pending(&self) -> usize {
        self.sets.values().map(|e| e.set.pending()).sum()
    }

    /// An executor joined with `cores` free.
    pub fn add_executor(&mut self, id: ExecutorId, host: &str, rack: Option<&str>, cores: u32) {
        let info = ExecutorInfo {
            host: host.to_owned(),
            rack: rack.map(str::to_owned),
            cores,
            free: cores,
            draining: false,
        };
        self.executors.insert(id, info);
        self.executor_added = true;
    }

    /// An executor is being given back: it gets no more tasks.
    pub fn drain(&mut self, id: ExecutorId) {
        if let Some(info) = self.executors.get_mut(id) {
            info.draining = true;
        }
    }

    /// An executor is gone: its running tasks run again elsewhere, and every set's locality
    /// levels are recomputed. Their failures count when the application caused the loss
    /// (`caused_by_app`: the executor process failed), not when a worker was lost or the
    /// executor killed.
    /// Returns the attempts that ran there and what their ends meant for their stages.
    pub fn remove_executor(
        &mut self,
        now: Timestamp,
        id: ExecutorId,
        caused_by_app: bool,
    ) -> (Vec<TaskId>, Vec<StageEvent>) {
        if self.executors.remove(id).is_none() {
            return (Vec::new(), Vec::new());
        }
        let lost: Vec<TaskId> = self
            .running
            .iter()
            .filter(|(_, r)| r.executor == id)
            .map(|(&task, _)| task)
            .collect();
        let end = if caused_by_app {
            TaskEnd::Failed
        } else {
            TaskEnd::Lost
        };
        let events = lost
            .iter()
            .filter_map(|&task| self.end(now, task, end).0)
            .collect();
        for entry in self.sets.values_mut() {
            entry.set.recompute_locality(&self.executors);
        }
        (lost, events)
    }

    /// A stage of job `job` is ready: its task `i` prefers `locations[i]`.
    pub fn submit(
        &mut self,
        now: Timestamp,
        stage: StageId,
        job: JobId,
        pool: &str,
        locations: Vec<Vec<TaskLocation>>,
    ) {
        let set = TaskSet::new(
            locations,
            self.config.waits,
            self.config.max_task_failures,
            now,
            &self.executors,
        );
        let entry = Entry {
            set,
            job,
            pool: pool.to_owned(),
            no_rejects_since_reset: true,
        };
        self.sets.insert(stage, entry);
    }

    /// A stage stops launching tasks (its job ended); returns its attempts still running,
    /// for the caller to kill.
    pub fn cancel(&mut self, stage: StageId) -> Vec<TaskId> {
        if let Some(entry) = self.sets.get_mut(&stage) {
            entry.set.abort();
        }
        self.running
            .iter()
            .filter(|(_, r)| r.stage == stage)
            .map(|(&task, _)| task)
            .collect()
    }

    /// Spark's `resourceOffers`: every free core of every live executor (`only: None`, the
    /// periodic revive) or of one executor (`only: Some`, after a status update), shuffled,
    /// offered to the task sets in pool order, most local level first.
    pub fn resource_offers(&mut self, now: Timestamp, only: Option<ExecutorId>) -> Vec<Launch> {
        let all_free = only.is_none();
        let mut offers: Vec<(ExecutorId, String, Option<String>, u32)> = self
            .executors
            .iter()
            .filter(|&(id, info)| {
                only.is_none_or(|only| only == id) && info.free > 0 && !info.draining
            })
            .map(|(id, info)| (id, info.host.clone(), info.rack.clone(), info.free))
            .collect();
        for i in (1..offers.len()).rev() {
            let j = self.rng.below(i + 1);
            offers.swap(i, j);
        }
        let sorted = self.sorted_sets();
        if std::mem::take(&mut self.executor_added) {
            for stage in &sorted {
                let entry = self.sets.get_mut(stage).expect("a sorted set exists");
                entry.set.recompute_locality(&self.executors);
            }
        }
        let mut launches = Vec::new();
        for stage in sorted {
            let entry = self.sets.get_mut(&stage).expect("a sorted set exists");
            let mut launched_any = false;
            let mut no_rejects = true;
            let mut min_launched: Option<Locality> = None;
            for max_locality in entry.set.levels().to_vec() {
                loop {
                    let mut launched_here = false;
                    for (executor, host, rack, free) in &mut offers {
                        if *free == 0 {
                            continue;
                        }
                        let (launched, rejected) = entry.set.resource_offer(
                            now,
                            *executor,
                            host,
                            rack.as_deref(),
                            max_locality,
                        );
                        no_rejects &= !rejected;
                        if let Some(task) = launched {
                            *free -= 1;
                            let id = TaskId(self.next_task);
                            self.next_task += 1;
                            self.running.insert(
                                id,
                                Running {
                                    stage,
                                    index: task.index,
                                    executor: *executor,
                                    started: now,
                                },
                            );
                            launches.push(Launch {
                                task: id,
                                stage,
                                index: task.index,
                                attempt: task.attempt,
                                executor: *executor,
                                host: host.clone(),
                                locality: task.locality,
                                speculative: task.speculative,
                            });
                            launched_here = true;
                            min_launched =
                                Some(min_launched.map_or(task.locality, |m| m.min(task.locality)));
                        }
                    }
                    if !launched_here {
                        break;
                    }
                    launched_any = true;
                }
            }
            if no_rejects {
                if launched_any && (all_free || entry.no_rejects_since_reset) {
                    entry.set.reset_delay_timer(now, min_launched);
                    entry.no_rejects_since_reset = true;
                }
            } else {
                entry.no_rejects_since_reset = false;
            }
        }
        for launch in &launches {
            if let Some(info) = self.executors.get_mut(launch.executor) {
                info.free -= 1;
            }
        }
        launches
    }

    /// Task `task` ended at `now`; returns what that means for its stage, if anything, and
    /// the other running copies of a task that just succeeded, to kill.
    pub fn end(
        &mut self,
        now: Timestamp,
        task: TaskId,
        end: TaskEnd,
    ) -> (Option<StageEvent>, Vec<TaskId>) {
        let Some(running) = self.running.remove(&task) else {
            return (None, Vec::new());
        };
        if let Some(info) = self.executors.get_mut(running.executor) {
            info.free += 1;
        }
        let Some(entry) = self.sets.get_mut(&running.stage) else {
            return (None, Vec::new());
        };
        let mut copies = Vec::new();
        let event = match end {
            TaskEnd::Succeeded => {
                let was_done = entry.set.is_done();
                let duration = now.0.saturating_sub(running.started.0);
                entry.set.succeeded(running.index, duration);
                copies = self
                    .running
                    .iter()
                    .filter(|(_, r)| r.stage == running.stage && r.index == running.index)
                    .map(|(&id, _)| id)
                    .collect();
                (!was_done && entry.set.is_done()).then_some(StageEvent::Done(running.stage))
            }
            TaskEnd::Failed | TaskEnd::Lost => entry
                .set
                .failed(running.index, end == TaskEnd::Failed, &self.executors)
                .map(|message| StageEvent::Aborted(running.stage, message)),
        };
        if entry.set.is_zombie() && entry.set.running() == 0 {
            self.sets.remove(&running.stage);
        }
        (event, copies)
    }

    /// Spark's `checkSpeculatableTasks` over every running stage, when speculation is on;
    /// returns whether any task was marked for a copy (then offers are due).
    pub fn check_speculatable(&mut self, now: Timestamp) -> bool {
        let Some(speculation) = self.config.speculation else {
            return false;
        };
        let mut marked = false;
        for (stage, entry) in &mut self.sets {
            let running = self
                .running
                .values()
                .filter(|r| r.stage == *stage)
                .map(|r| (r.index, r.started));
            marked |= entry
                .set
                .check_speculatable(now, &speculation, running, &self.executors);
        }
        marked
    }

    /// The stages whose task sets are schedulable, in the order they get offers.
    fn sorted_sets(&self) -> Vec<StageId> {
        let set = |stage: &StageId, entry: &Entry| Schedulable {
            name: "",
            priority: entry.job.0,
            stage: stage.0,
            running: entry.set.running(),
            weight: 1,
            min_share: 0,
        };
        match self.config.mode {
            SchedulingMode::Fifo => {
                let mut stages: Vec<_> = self
                    .sets
                    .iter()
                    .filter(|(_, e)| e.set.is_schedulable())
                    .collect();
                stages.sort_by(|(s1, e1), (s2, e2)| {
                    SchedulingMode::Fifo.compare(&set(s1, e1), &set(s2, e2))
                });
                stages.into_iter().map(|(&stage, _)| stage).collect()
            }
            SchedulingMode::Fair => self.fair_order(),
        }
    }

    /// FAIR: pools ordered by the fair algorithm over their running tasks, each pool's
    /// task sets by the pool's own mode (task sets named `TaskSet_STAGE.0`). Without
    /// configured pools, `default` is FAIR (Spark's `buildPools` without an allocation
    /// file); of pools configured twice, the last counts.
    fn fair_order(&self) -> Vec<StageId> {
        let configured = &self.config.pools;
        let mut pools: Vec<PoolConfig> = configured
            .iter()
            .enumerate()
            .filter(|(i, p)| !configured[i + 1..].iter().any(|later| later.name == p.name))
            .map(|(_, p)| p.clone())
            .collect();
        if pools.is_empty() {
            pools.push(PoolConfig {
                mode: SchedulingMode::Fair,
                ..PoolConfig::named(DEFAULT_POOL)
            });
        }
        let known = |name: &str, pools: &mut Vec<PoolConfig>| {
            if !pools.iter().any(|p| p.name == name) {
                pools.push(PoolConfig::named(name));
            }
        };
        known(DEFAULT_POOL, &mut pools);
        for entry in self.sets.values() {
            known(&entry.pool, &mut pools);
        }
        let running = |pool: &str| -> u32 {
            self.sets
                .values()
                .filter(|e| e.pool == pool)
                .map(|e| e.set.running())
                .sum()
        };
        let running_by_pool: Vec<u32> = pools.iter().map(|p| running(&p.name)).collect();
        let mut order: Vec<usize> = (0..pools.len()).collect();
        order.sort_by(|&i, &j| {
            let schedulable = |k: usize| Schedulable {
                name: &pools[k].name,
                priority: 0,
                stage: 0,
                running: running_by_pool[k],
                weight: pools[k].weight,
                min_share: pools[k].min_share,
            };
            SchedulingMode::Fair.compare(&schedulable(i), &schedulable(j))
        });
        let mut stages = Vec::new();
        for k in order {
            let pool = &pools[k];
            let names: BTreeMap<StageId, String> = self
                .sets
                .iter()
                .filter(|(_, e)| e.pool == pool.name)
                .map(|(&stage, _)| (stage, format!("TaskSet_{}.0", stage.0)))
                .collect();
            let mut members: Vec<(&StageId, &Entry)> = self
                .sets
                .iter()
                .filter(|(_, e)| e.pool == pool.name)
                .collect();
            members.sort_by(|(s1, e1), (s2, e2)| {
                let schedulable = |stage: &StageId, entry: &Entry| Schedulable {
                    name: &names[stage],
                    priority: entry.job.0,
                    stage: stage.0,
                    running: entry.set.running(),
                    weight: 1,
                    min_share: 0,
                };
                pool.mode
                    .compare(&schedulable(s1, e1), &schedulable(s2, e2))
            });
            stages.extend(members.into_iter().map(|(&stage, _)| stage));
        }
        stages
    }
}
