//! Jobs as DAGs of stages, over the task scheduler: Spark's `DAGScheduler` without shuffles.
//! A job's stages whose `after` stages have all succeeded become task sets; the job succeeds
//! when every stage has, and fails, with its other stages cancelled, when one aborts.

use std::collections::BTreeMap;

use crate::ids::{ExecutorId, Timestamp};
use crate::model::InputError;
use crate::tasks::pools::DEFAULT_POOL;
use crate::tasks::scheduler::{Launch, SchedulerConfig, StageEvent, TaskEnd, TaskScheduler};
use crate::tasks::task_set::TaskLocation;
use crate::tasks::{JobId, StageId, TaskId};

/// A job as submitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobSpec {
    /// Its name, for people.
    pub name: String,
    /// Its FAIR pool (ignored under FIFO).
    pub pool: String,
    /// Its stages.
    pub stages: Vec<StageSpec>,
}

/// A stage of a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageSpec {
    /// Its name, unique in the job.
    pub name: String,
    /// How many tasks it has, at least 1.
    pub tasks: u32,
    /// Stages of the same job that must succeed before it starts.
    pub after: Vec<String>,
    /// Task `i` prefers the hosts `prefer_hosts[i % len]`; empty: no preference.
    pub prefer_hosts: Vec<Vec<String>>,
}

impl JobSpec {
    /// Checks stage names, task counts and `after` references, and that `after` has no
    /// cycle.
    ///
    /// # Errors
    ///
    /// The first offending field, as `stages[i].after`.
    pub fn validate(&self) -> Result<(), InputError> {
        let refuse = |field: String, message: String| Err(InputError { field, message });
        if self.stages.is_empty() {
            return refuse("stages".into(), "a job needs at least one stage".into());
        }
        for (i, stage) in self.stages.iter().enumerate() {
            if stage.name.is_empty() {
                return refuse(format!("stages[{i}].name"), "must not be empty".into());
            }
            if self.stages[..i].iter().any(|s| s.name == stage.name) {
                return refuse(
                    format!("stages[{i}].name"),
                    format!("`{}` names two stages", stage.name),
                );
            }
            if stage.tasks == 0 {
                return refuse(format!("stages[{i}].tasks"), "must be at least 1".into());
            }
            if let Some(unknown) = stage
                .after
                .iter()
                .find(|after| !self.stages.iter().any(|s| &s.name == *after))
            {
                return refuse(
                    format!("stages[{i}].after"),
                    format!("no stage `{unknown}` in this job"),
                );
            }
        }
        if let Some(i) = self.cycle() {
            return refuse(
                format!("stages[{i}].after"),
                "the stages wait for each other in a cycle".into(),
            );
        }
        Ok(())
    }

    /// A stage that waits on itself through `after`, if any (Kahn's algorithm).
    fn cycle(&self) -> Option<usize> {
        let mut done = vec![false; self.stages.len()];
        loop {
            let ready = (0..self.stages.len())
                .find(|&i| !done[i] && self.stages[i].after.iter().all(|a| done[self.index(a)]));
            match ready {
                Some(i) => done[i] = true,
                None => return done.iter().position(|d| !d),
            }
        }
    }

    fn index(&self, stage: &str) -> usize {
        self.stages
            .iter()
            .position(|s| s.name == stage)
            .expect("validated `after`")
    }
}

/// How a job stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    /// Some stage has not succeeded yet.
    Running,
    /// Every stage succeeded.
    Succeeded,
    /// A stage aborted, with this message.
    Failed(String),
}

/// How a stage stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StageState {
    /// Waiting for the stages in its `after`.
    Waiting,
    /// Its task set runs.
    Running,
    /// Every task succeeded.
    Succeeded,
    /// It aborted, or its job failed.
    Failed,
}

/// A submitted job.
#[derive(Clone, Debug)]
pub struct Job {
    /// As submitted.
    pub spec: JobSpec,
    /// How it stands.
    pub state: JobState,
    /// Its stages' ids, in spec order.
    pub stage_ids: Vec<StageId>,
    /// Its stages' states, in spec order.
    pub stage_states: Vec<StageState>,
    /// When it was submitted.
    pub submitted: Timestamp,
    /// When it ended.
    pub finished: Option<Timestamp>,
}

/// What a task's end changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ended {
    /// The job that ended with it, if any.
    pub job: Option<JobId>,
    /// Attempts still running that are no longer needed (their stage ended, or another copy
    /// of their task succeeded): kill them.
    pub kill: Vec<TaskId>,
}

/// The jobs of one application and the task scheduler running their stages.
#[derive(Debug)]
pub struct JobScheduler {
    tasks: TaskScheduler,
    jobs: BTreeMap<JobId, Job>,
    /// Each stage's job and index in it.
    stages: BTreeMap<StageId, (JobId, usize)>,
    next_job: u32,
    next_stage: u32,
}

impl JobScheduler {
    /// No jobs and no executors yet.
    pub fn new(config: SchedulerConfig) -> Self {
        Self {
            tasks: TaskScheduler::new(config),
            jobs: BTreeMap::new(),
            stages: BTreeMap::new(),
            next_job: 0,
            next_stage: 0,
        }
    }

    /// The task scheduler, to read.
    pub fn tasks(&self) -> &TaskScheduler {
        &self.tasks
    }

    /// Every job submitted, by id.
    pub fn jobs(&self) -> &BTreeMap<JobId, Job> {
        &self.jobs
    }

    /// Whether every job has ended.
    pub fn is_idle(&self) -> bool {
        self.jobs.values().all(|j| j.state != JobState::Running)
    }

    /// Submits `spec` at `now`; stages with nothing to wait for start at once.
    ///
    /// # Errors
    ///
    /// The spec is malformed ([`JobSpec::validate`]); nothing is submitted then.
    pub fn submit(&mut self, now: Timestamp, mut spec: JobSpec) -> Result<JobId, InputError> {
        spec.validate()?;
        if spec.pool.is_empty() {
            spec.pool = DEFAULT_POOL.to_owned();
        }
        let id = JobId(self.next_job);
        self.next_job += 1;
        let stage_ids: Vec<StageId> = (0..spec.stages.len())
            .map(|i| {
                let stage = StageId(self.next_stage);
                self.next_stage += 1;
                self.stages.insert(stage, (id, i));
                stage
            })
            .collect();
        let job = Job {
            stage_states: vec![StageState::Waiting; spec.stages.len()],
            spec,
            state: JobState::Running,
            stage_ids,
            submitted: now,
            finished: None,
        };
        self.jobs.insert(id, job);
        self.start_ready(now, id);
        Ok(id)
    }

    /// An executor joined.
    pub fn add_executor(&mut self, id: ExecutorId, host: &str, rack: Option<&str>, cores: u32) {
        self.tasks.add_executor(id, host, rack, cores);
    }

    /// An executor is being given back: it gets no more tasks.
    pub fn drain_executor(&mut self, id: ExecutorId) {
        self.tasks.drain(id);
    }

    /// An executor is gone; returns its attempts that were running (they run again; see
    /// [`TaskScheduler::remove_executor`] for `caused_by_app`). Stages that abort with it
    /// fail their jobs.
    pub fn remove_executor(
        &mut self,
        now: Timestamp,
        id: ExecutorId,
        caused_by_app: bool,
    ) -> (Vec<TaskId>, Ended) {
        let (lost, events) = self.tasks.remove_executor(now, id, caused_by_app);
        let mut ended = Ended::default();
        for event in events {
            self.stage_event(now, event, &mut ended);
        }
        (lost, ended)
    }

    /// Marks slow tasks for copies ([`TaskScheduler::check_speculatable`]).
    pub fn check_speculatable(&mut self, now: Timestamp) -> bool {
        self.tasks.check_speculatable(now)
    }

    /// Offers free cores to the running stages ([`TaskScheduler::resource_offers`]).
    pub fn resource_offers(&mut self, now: Timestamp, only: Option<ExecutorId>) -> Vec<Launch> {
        self.tasks.resource_offers(now, only)
    }

    /// Task `task` ended at `now`.
    pub fn task_ended(&mut self, now: Timestamp, task: TaskId, end: TaskEnd) -> Ended {
        let (event, copies) = self.tasks.end(now, task, end);
        let mut ended = Ended {
            job: None,
            kill: copies,
        };
        if let Some(event) = event {
            self.stage_event(now, event, &mut ended);
        }
        ended
    }

    /// Carries a stage's end to its job: the next stages start, or the job ends. A stage of
    /// a job that already ended changes nothing.
    fn stage_event(&mut self, now: Timestamp, event: StageEvent, ended: &mut Ended) {
        let stage = match &event {
            StageEvent::Done(stage) | StageEvent::Aborted(stage, _) => *stage,
        };
        let (job_id, index) = self.stages[&stage];
        let job = self.jobs.get_mut(&job_id).expect("a stage's job exists");
        if job.state != JobState::Running {
            return;
        }
        match event {
            StageEvent::Done(_) => {
                job.stage_states[index] = StageState::Succeeded;
                if job.stage_states.iter().all(|s| *s == StageState::Succeeded) {
                    job.state = JobState::Succeeded;
                    job.finished = Some(now);
                    ended.job = Some(job_id);
                } else {
                    self.start_ready(now, job_id);
                }
            }
            StageEvent::Aborted(_, message) => {
                let name = &job.spec.stages[index].name;
                job.state = JobState::Failed(format!("stage {name}: {message}"));
                job.finished = Some(now);
                ended.job = Some(job_id);
                for (i, state) in job.stage_states.iter_mut().enumerate() {
                    if *state == StageState::Running {
                        ended.kill.extend(self.tasks.cancel(job.stage_ids[i]));
                    }
                    if *state != StageState::Succeeded {
                        *state = StageState::Failed;
                    }
                }
            }
        }
    }

    /// Starts the stages of job `id` whose `after` stages all succeeded.
    fn start_ready(&mut self, now: Timestamp, id: JobId) {
        let job = self.jobs.get_mut(&id).expect("the job exists");
        for i in 0..job.spec.stages.len() {
            let stage = &job.spec.stages[i];
            let ready = job.stage_states[i] == StageState::Waiting
                && stage.after.iter().all(|after| {
                    let j = job.spec.index(after);
                    job.stage_states[j] == StageState::Succeeded
                });
            if !ready {
                continue;
            }
            job.stage_states[i] = StageState::Running;
            let locations = (0..stage.tasks as usize)
                .map(|task| {
                    if stage.prefer_hosts.is_empty() {
                        return Vec::new();
                    }
                    let hosts = &stage.prefer_hosts[task % stage.prefer_hosts.len()];
                    hosts
                        .iter()
                        .map(|host| TaskLocation {
                            host: host.clone(),
                            executor: None,
                        })
                        .collect()
                })
                .collect();
            self.tasks
                .submit(now, job.stage_ids[i], id, &job.spec.pool, locations);
        }
    }
}
