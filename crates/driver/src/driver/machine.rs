//! The driver's decisions as a state machine, with time passed in and no I/O: executors
//! joining, ending tasks and going away, the masters' word on executors, revives, checks for
//! speculation and dynamic allocation, and the job file's jobs falling due. Each call returns
//! the [`Order`]s the async shell (`super::run`) carries out: a task to run or kill on an
//! executor's stream, a request to the masters. What the shell could not deliver comes back
//! as an [`Input`] (a run order to a stream that is gone, a limit the masters' link had no
//! room for). Scripts in `tests/driver` drive it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use muster_core::ids::{ExecutorId, Timestamp, millis};
use muster_core::tasks::allocation::{Allocation, AllocationChange};
use muster_core::tasks::jobs::{JobScheduler, JobState};
use muster_core::tasks::scheduler::{Launch, TaskEnd};
use muster_core::tasks::{JobId, StageId, TaskId};
use muster_proto::exit;
use muster_proto::v1::app_message::Body as AppRequest;
use muster_proto::v1::task_work::Kind;
use muster_proto::v1::{
    Command, ExecutorEvent, ExecutorHello, ExecutorState, Noop, ReleaseExecutors, RunTask,
    SetExecutorLimit, TaskEnded, TaskState, TaskWork,
};

use super::{AttemptState, JobOutcome, JobReport, Progress, Report, StageReport, TaskReport};
use crate::spec::{JobFile, Work};

/// How long an executor whose stream closed waits for the masters' word on why it ended
/// before its attempts are taken as lost (Spark on YARN asks for the same loss reason).
/// The masters tell of a preemption before the process is stopped and of an exit as soon as
/// its worker reports it; the word never comes when the worker's machine vanished.
pub const LOSS_REASON_PATIENCE: Duration = Duration::from_secs(2);

/// What happened, for the driver to decide on.
#[derive(Clone, Debug)]
pub enum Input {
    /// An executor attached on stream `link` and said who it is.
    Joined {
        /// Its stream.
        link: u64,
        /// What it said.
        hello: ExecutorHello,
    },
    /// A task attempt ended, as the executor on `link` reports.
    Ended {
        /// The stream.
        link: u64,
        /// How it ended.
        end: TaskEnded,
    },
    /// The stream `link` closed.
    Gone {
        /// The stream.
        link: u64,
    },
    /// The masters' word on one of the application's executors: its grant, or its end.
    Masters(ExecutorEvent),
    /// The masters stopped this executor for prior work.
    Preempted(ExecutorId),
    /// A task could not be sent to this executor: its stream is gone.
    Unreachable(ExecutorId),
    /// Spark's revive: every free core is offered.
    Revive,
    /// The periodic look for slow tasks to copy and, when `allocate`, at the backlog for
    /// dynamic allocation (not once the application is being finished).
    Check {
        /// Whether dynamic allocation may ask the masters for anything.
        allocate: bool,
    },
    /// The masters' link had no room for this executor limit: it is asked for again.
    LimitNotSent(u32),
}

/// What the shell must carry out.
#[derive(Clone, Debug, PartialEq)]
pub enum Order {
    /// Send this task to the executor on `link`; if the stream is gone, tell the driver
    /// ([`Input::Unreachable`]).
    Run {
        /// The executor.
        executor: ExecutorId,
        /// Its stream.
        link: u64,
        /// The task.
        task: RunTask,
    },
    /// Ask the executor on `link` to kill this attempt, if its stream is still there.
    Kill {
        /// Its stream.
        link: u64,
        /// The attempt.
        task: TaskId,
    },
    /// Close the stream `link` of an executor the driver no longer holds: the executor
    /// stops its attempts and exits.
    Close {
        /// Its stream.
        link: u64,
    },
    /// Ask the masters (dynamic allocation: a new executor limit, or executors given back).
    Masters(Box<AppRequest>),
}

/// Why an executor is gone, for the attempts that ran on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loss {
    /// Its process failed or exited by itself, with this exit code if the masters know it:
    /// the application caused it.
    ByApp(Option<i32>),
    /// Its worker, process or stream is gone through no fault of the application.
    Lost,
    /// The masters stopped it for prior work: its attempts are not failures at all.
    Preempted,
}

/// The driver's state.
pub struct Driver {
    file: JobFile,
    scheduler: JobScheduler,
    /// When the run started: the scheduler's clock counts from here.
    start: Instant,
    /// Each live executor's stream.
    executors: HashMap<ExecutorId, u64>,
    /// Executors whose stream closed, given no more tasks, waiting until then for the
    /// masters' word on why (a failure of theirs counts against their attempts, a
    /// preemption does not) before they are taken as lost.
    disconnected: HashMap<ExecutorId, Instant>,
    /// Each submitted job's index in the file.
    jobs: BTreeMap<JobId, usize>,
    /// What each stage's tasks run, as sent to executors: by job then stage, in file order,
    /// made once from the checked file.
    works: Vec<Vec<TaskWork>>,
    /// Jobs not yet submitted, by `at_ms` then file order.
    upcoming: Vec<(u64, usize)>,
    /// Every attempt launched, by task id, with its stage.
    tasks: BTreeMap<TaskId, (StageId, TaskReport)>,
    /// Failed attempts per stage.
    failures: HashMap<StageId, u32>,
    /// Tasks that succeeded (a second successful copy counts once).
    succeeded: HashSet<(StageId, usize)>,
    /// Each executor's cores as the masters granted them, from their events.
    granted: HashMap<ExecutorId, u32>,
    /// Dynamic allocation, when the file asks for it.
    allocation: Option<Allocation>,
    /// An executor target dynamic allocation could not send yet.
    unsent_target: Option<u32>,
    /// What the current call decided, in order.
    orders: Vec<Order>,
}

impl Driver {
    /// The driver of `file`, its run starting at `start`.
    pub fn new(file: JobFile, start: Instant) -> Self {
        let mut upcoming: Vec<(u64, usize)> = file
            .jobs
            .iter()
            .enumerate()
            .map(|(i, job)| (job.at_ms, i))
            .collect();
        // Submitted from the end: the latest first in the list.
        upcoming.sort_by(|a, b| b.cmp(a));
        Self {
            scheduler: JobScheduler::new(file.scheduler_config()),
            works: file
                .jobs
                .iter()
                .map(|job| {
                    job.stages
                        .iter()
                        .map(|stage| task_work(&stage.run.work().expect("validated when read")))
                        .collect()
                })
                .collect(),
            allocation: file.resources.allocation().map(Allocation::new),
            file,
            start,
            executors: HashMap::new(),
            disconnected: HashMap::new(),
            jobs: BTreeMap::new(),
            upcoming,
            tasks: BTreeMap::new(),
            failures: HashMap::new(),
            succeeded: HashSet::new(),
            granted: HashMap::new(),
            unsent_target: None,
            orders: Vec::new(),
        }
    }

    /// Whether the run needs [`Input::Check`]s: the file asks for speculation or dynamic
    /// allocation.
    pub fn checks(&self) -> bool {
        self.file.scheduler.speculation || self.allocation.is_some()
    }

    /// When [`Driver::tick`] has something to do: the next job falls due, or an executor
    /// whose stream closed has waited long enough for word of why.
    pub fn next_due(&self) -> Option<Instant> {
        let submission = self
            .upcoming
            .last()
            .map(|&(at, _)| self.start + Duration::from_millis(at));
        let loss = self.disconnected.values().min().copied();
        submission.into_iter().chain(loss).min()
    }

    /// Reacts to `input` at `now`.
    pub fn step(&mut self, now: Instant, input: Input) -> Vec<Order> {
        let at = self.timestamp(now);
        match input {
            Input::Joined { link, hello } => self.joined(at, link, &hello),
            Input::Ended { link, end } => self.ended(at, link, &end),
            Input::Gone { link } => {
                if let Some(executor) = self.executor_on(link) {
                    tracing::info!(executor = executor.0, "executor stream closed");
                    self.executors.remove(&executor);
                    self.scheduler.drain_executor(executor);
                    self.disconnected
                        .insert(executor, now + LOSS_REASON_PATIENCE);
                }
            }
            Input::Masters(event) => self.on_executor_event(at, &event),
            Input::Preempted(executor) => {
                tracing::info!(executor = executor.0, "executor preempted");
                self.lose_executor(at, executor, Loss::Preempted);
            }
            Input::Unreachable(executor) => self.lose_executor(at, executor, Loss::Lost),
            Input::Revive => {
                let launches = self.scheduler.resource_offers(at, None);
                self.launch(at, launches);
            }
            Input::Check { allocate } => {
                if self.scheduler.check_speculatable(at) {
                    let launches = self.scheduler.resource_offers(at, None);
                    self.launch(at, launches);
                }
                if allocate {
                    self.allocate(at);
                }
            }
            Input::LimitNotSent(limit) => self.unsent_target = Some(limit),
        }
        std::mem::take(&mut self.orders)
    }

    /// Lets time pass to `now`: submits every job that is due, and takes as lost every
    /// executor whose stream closed and of which the masters said nothing in time.
    pub fn tick(&mut self, now: Instant) -> Vec<Order> {
        let at = self.timestamp(now);
        let mut submitted = false;
        while let Some(&(due, index)) = self.upcoming.last() {
            if due > at.0 {
                break;
            }
            self.upcoming.pop();
            let spec = self.file.jobs[index].spec();
            let id = self
                .scheduler
                .submit(at, spec)
                .expect("job files are validated when read");
            self.jobs.insert(id, index);
            submitted = true;
        }
        if submitted {
            let launches = self.scheduler.resource_offers(at, None);
            self.launch(at, launches);
        }
        let unexplained: Vec<ExecutorId> = self
            .disconnected
            .iter()
            .filter(|&(_, &due)| due <= now)
            .map(|(&id, _)| id)
            .collect();
        for id in unexplained {
            tracing::info!(
                executor = id.0,
                "executor gone without word from the masters"
            );
            self.lose_executor(at, id, Loss::Lost);
        }
        std::mem::take(&mut self.orders)
    }

    /// `now` on the scheduler's clock: milliseconds since the run started.
    fn timestamp(&self, now: Instant) -> Timestamp {
        Timestamp(millis(now.saturating_duration_since(self.start)))
    }

    /// An executor attached: a newer stream of the same executor replaces the old one.
    fn joined(&mut self, at: Timestamp, link: u64, hello: &ExecutorHello) {
        let id = ExecutorId(hello.executor_id);
        if self.knows(id) {
            self.lose_executor(at, id, Loss::Lost);
        }
        let rack = (!hello.rack.is_empty()).then_some(hello.rack.as_str());
        // No more cores than the masters granted it, once their event is here.
        let granted = self.granted.get(&id).copied().unwrap_or(u32::MAX);
        let cores = hello.cores.clamp(1, granted.max(1));
        self.scheduler.add_executor(id, &hello.host, rack, cores);
        self.executors.insert(id, link);
        tracing::info!(executor = id.0, host = %hello.host, cores, "executor joined");
        let launches = self.scheduler.resource_offers(at, Some(id));
        self.launch(at, launches);
    }

    /// A task attempt ended, as the executor on `link` reports: only the executor it runs on
    /// speaks for it.
    fn ended(&mut self, at: Timestamp, link: u64, end: &TaskEnded) {
        let Some(executor) = self.executor_on(link) else {
            return;
        };
        let task = TaskId(end.task_id);
        let Some((stage, report)) = self
            .tasks
            .get_mut(&task)
            .filter(|(_, r)| r.executor == executor.0 && r.state == AttemptState::Running)
        else {
            return;
        };
        let state = end.state();
        let how = match state {
            TaskState::Succeeded => TaskEnd::Succeeded,
            TaskState::Killed => TaskEnd::Lost,
            TaskState::Failed | TaskState::Unspecified => TaskEnd::Failed,
        };
        report.state = match state {
            TaskState::Succeeded => AttemptState::Succeeded,
            TaskState::Killed => AttemptState::Killed,
            TaskState::Failed | TaskState::Unspecified => AttemptState::Failed,
        };
        report.duration_ms = Some(end.duration_ms);
        if how == TaskEnd::Failed && !end.message.is_empty() {
            report.reason = Some(end.message.clone());
        }
        match how {
            TaskEnd::Succeeded => {
                self.succeeded.insert((*stage, report.index));
            }
            TaskEnd::Failed => {
                tracing::info!(task = task.0, message = %end.message, "task attempt failed");
                *self.failures.entry(*stage).or_default() += 1;
            }
            TaskEnd::Lost => {}
        }
        let ended = self.scheduler.task_ended(at, task, how);
        self.kill(&ended.kill);
        let launches = self.scheduler.resource_offers(at, Some(executor));
        self.launch(at, launches);
    }

    /// Whether `id` is an executor the driver holds, live or waiting for word of its end.
    fn knows(&self, id: ExecutorId) -> bool {
        self.executors.contains_key(&id) || self.disconnected.contains_key(&id)
    }

    /// The executor whose current stream is `link`.
    fn executor_on(&self, link: u64) -> Option<ExecutorId> {
        self.executors
            .iter()
            .find(|&(_, &on)| on == link)
            .map(|(&id, _)| id)
    }

    /// What the masters say about an executor: its grant, or its end. An executor that
    /// ended is lost even if its stream has not closed yet (its machine may be gone); its
    /// tasks' failures count when it failed or exited by itself.
    fn on_executor_event(&mut self, at: Timestamp, event: &ExecutorEvent) {
        let id = ExecutorId(event.executor_id);
        let state = event.state();
        match state {
            ExecutorState::Launching | ExecutorState::Running => {
                let cores = event.resources.as_ref().map_or(1, |r| r.cores);
                self.granted.insert(id, cores);
            }
            ExecutorState::Unspecified => {}
            ExecutorState::Killed
            | ExecutorState::Failed
            | ExecutorState::Lost
            | ExecutorState::Exited => {
                self.granted.remove(&id);
                if self.knows(id) {
                    tracing::info!(
                        executor = id.0,
                        state = state.as_str_name(),
                        "executor ended"
                    );
                    let loss = match state {
                        ExecutorState::Failed | ExecutorState::Exited => {
                            Loss::ByApp(event.exit_code)
                        }
                        _ => Loss::Lost,
                    };
                    self.lose_executor(at, id, loss);
                }
            }
        }
    }

    /// An executor is gone: its running attempts run again elsewhere (counted against
    /// their tasks' retries only when the application caused the loss).
    fn lose_executor(&mut self, at: Timestamp, id: ExecutorId, loss: Loss) {
        if let Some(link) = self.executors.remove(&id) {
            self.orders.push(Order::Close { link });
        }
        self.disconnected.remove(&id);
        let by_app = matches!(loss, Loss::ByApp(_));
        let (lost, ended) = self.scheduler.remove_executor(at, id, by_app);
        let reason = match loss {
            Loss::ByApp(Some(code)) => format!("executor {} ended: {}", id.0, exit::describe(code)),
            Loss::ByApp(None) => format!("executor {} failed", id.0),
            Loss::Lost => format!("executor {} was lost", id.0),
            Loss::Preempted => format!("executor {} was preempted for prior work", id.0),
        };
        for task in lost {
            if let Some((stage, report)) = self.tasks.get_mut(&task) {
                report.state = match loss {
                    Loss::ByApp(_) => AttemptState::Failed,
                    Loss::Lost => AttemptState::Lost,
                    Loss::Preempted => AttemptState::Preempted,
                };
                report.reason = Some(reason.clone());
                if loss != Loss::Preempted {
                    *self.failures.entry(*stage).or_default() += 1;
                }
            }
        }
        self.kill(&ended.kill);
    }

    /// Orders each launch to its executor; an executor without a stream is lost at once,
    /// with every attempt just launched on it.
    fn launch(&mut self, at: Timestamp, launches: Vec<Launch>) {
        let mut streamless = Vec::new();
        for launch in launches {
            let (job_name, stage_name, work) = self.describe(launch.stage);
            let task = RunTask {
                task_id: launch.task.0,
                partition: u32::try_from(launch.index).unwrap_or(u32::MAX),
                attempt: launch.attempt,
                work: Some(work),
            };
            match self.executors.get(&launch.executor) {
                Some(&link) => self.orders.push(Order::Run {
                    executor: launch.executor,
                    link,
                    task,
                }),
                None => streamless.push(launch.executor),
            }
            let report = TaskReport {
                job: job_name,
                stage: stage_name,
                index: launch.index,
                attempt: launch.attempt,
                executor: launch.executor.0,
                host: launch.host,
                locality: launch.locality.name().to_owned(),
                speculative: launch.speculative,
                state: AttemptState::Running,
                duration_ms: None,
                reason: None,
            };
            self.tasks.insert(launch.task, (launch.stage, report));
        }
        streamless.sort();
        streamless.dedup();
        for executor in streamless {
            self.lose_executor(at, executor, Loss::Lost);
        }
    }

    /// Whether the run is over: every job submitted and ended, and every attempt answered.
    pub fn is_done(&self) -> bool {
        self.upcoming.is_empty()
            && self.scheduler.is_idle()
            && self.scheduler.tasks().running() == 0
    }

    /// One step of dynamic allocation: its requests are orders to the masters.
    fn allocate(&mut self, at: Timestamp) {
        let Some(allocation) = self.allocation.as_mut() else {
            return;
        };
        let tasks = self.scheduler.tasks();
        let changes = allocation.tick(
            at,
            u32::try_from(tasks.pending()).unwrap_or(u32::MAX),
            u32::try_from(tasks.running()).unwrap_or(u32::MAX),
            &tasks.executors_busy(),
        );
        let mut target = self.unsent_target.take();
        for change in changes {
            match change {
                AllocationChange::Target(n) => target = Some(n),
                AllocationChange::Release(ids) => {
                    for &id in &ids {
                        self.scheduler.drain_executor(id);
                    }
                    let executor_ids = ids.into_iter().map(|id| id.0).collect();
                    let release = AppRequest::Release(ReleaseExecutors { executor_ids });
                    self.orders.push(Order::Masters(Box::new(release)));
                }
            }
        }
        // A target that cannot be sent now comes back as `LimitNotSent`: it must not be lost.
        if let Some(n) = target {
            let limit = AppRequest::SetLimit(SetExecutorLimit {
                executor_limit: Some(n),
            });
            self.orders.push(Order::Masters(Box::new(limit)));
        }
    }

    /// Orders executors to kill these attempts.
    fn kill(&mut self, tasks: &[TaskId]) {
        for &task in tasks {
            let Some((_, report)) = self.tasks.get(&task) else {
                continue;
            };
            if let Some(&link) = self.executors.get(&ExecutorId(report.executor)) {
                self.orders.push(Order::Kill { link, task });
            }
        }
    }

    /// A stage's job name, stage name and work.
    fn describe(&self, stage: StageId) -> (String, String, TaskWork) {
        for (id, job) in self.scheduler.jobs() {
            if let Some(i) = job.stage_ids.iter().position(|&s| s == stage) {
                let index = self.jobs[id];
                let entry = &self.file.jobs[index];
                let work = self.works[index][i].clone();
                return (entry.name.clone(), entry.stages[i].name.clone(), work);
            }
        }
        unreachable!("a launched stage belongs to a submitted job")
    }

    /// How far the run is.
    pub fn progress(&self) -> Progress {
        let jobs = self.scheduler.jobs();
        Progress {
            jobs: self.file.jobs.len(),
            jobs_ended: jobs
                .values()
                .filter(|j| j.state != JobState::Running)
                .count(),
            tasks: jobs
                .values()
                .flat_map(|j| &j.spec.stages)
                .map(|s| s.tasks as usize)
                .sum(),
            tasks_done: self.succeeded.len(),
            running: self.scheduler.tasks().running(),
            executors: self.executors.len(),
        }
    }

    /// What the run did so far.
    pub fn report(&self) -> Report {
        let jobs = self
            .scheduler
            .jobs()
            .values()
            .map(|job| JobReport {
                name: job.spec.name.clone(),
                state: match job.state {
                    JobState::Running => JobOutcome::Running,
                    JobState::Succeeded => JobOutcome::Succeeded,
                    JobState::Failed(_) => JobOutcome::Failed,
                },
                error: match &job.state {
                    JobState::Failed(message) => Some(message.clone()),
                    _ => None,
                },
                submitted_ms: job.submitted.0,
                finished_ms: job.finished.map(|t| t.0),
                stages: job
                    .spec
                    .stages
                    .iter()
                    .zip(&job.stage_ids)
                    .map(|(stage, id)| StageReport {
                        name: stage.name.clone(),
                        tasks: stage.tasks,
                        failed_attempts: self.failures.get(id).copied().unwrap_or(0),
                    })
                    .collect(),
            })
            .collect();
        Report {
            app: String::new(),
            jobs,
            tasks: self.tasks.values().map(|(_, t)| t.clone()).collect(),
        }
    }
}

/// A stage's work as the executors' protocol carries it.
fn task_work(work: &Work) -> TaskWork {
    let kind = match work {
        Work::Sleep(ms) => Kind::SleepMs(*ms),
        Work::Pi(samples) => Kind::PiSamples(*samples),
        Work::Noop => Kind::Noop(Noop {}),
        Work::Command(argv) => Kind::Command(Command { argv: argv.clone() }),
    };
    TaskWork { kind: Some(kind) }
}
