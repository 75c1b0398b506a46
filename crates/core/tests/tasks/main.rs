//! Task scheduling scripts (`tests/tasks/scripts`): one application's driver with executors,
//! jobs, offers and task ends, time passed explicitly. Expectations come from Spark's
//! `TaskSchedulerImpl`, `TaskSetManager` and their suites (TaskSchedulerImplSuite,
//! TaskSetManagerSuite), not from runs.
//!
//! Commands:
//!
//! * `config [mode=FIFO|FAIR] [wait=MS] [process_wait=MS] [node_wait=MS] [rack_wait=MS]
//!   [max_failures=N] [seed=N] [speculation=true [quantile=F] [multiplier=F]
//!   [min_runtime=MS]]` and `pool NAME [mode=FIFO|FAIR] [weight=N] [min_share=N]`,
//!   before anything else;
//! * `executor ID host=H [rack=R] [cores=1]`, `lose ID [by_app=true]` (prints the attempts
//!   it ran; with `by_app` the executor failed by itself and their failures count);
//! * `job NAME [pool=P] [tasks=N] [prefer=H1|H2,H3,...]`: one stage `s` of N tasks, task i
//!   preferring the i-th entry (cyclically; `|` separates the hosts of one entry, `-` is no
//!   preference); or `job NAME stages=A:N,B:N:A+C,...` (name, tasks, the stages it waits
//!   for);
//! * `time MS`: the clock, in milliseconds;
//! * `revive` offers every free core, `offer ID` the free cores of one executor; each
//!   launch prints `tTASK JOB/STAGE.INDEX#ATTEMPT on EXECUTOR (HOST) LOCALITY`;
//! * `end TASK... succeeded|failed|lost`, printing stages and jobs that ended and attempts to
//!   kill; `finish` ends every running attempt successfully, in task id order;
//! * `jobs`: every job's state and stages; `speculate` marks slow tasks for copies (prints
//!   `marked` when it did);
//! * `allocation [min=N] [max=N] [initial=N] [per=N] [backlog=MS] [sustained=MS] [idle=MS]`
//!   starts a dynamic-allocation manager (Spark's defaults otherwise), and `demand
//!   [pending=N] [running=N] [executors=ID:busy|idle,...]` ticks it at the current time,
//!   printing what it asks for.

use std::error::Error;
use std::fmt::Write as _;

use muster_core::ids::{ExecutorId, Timestamp};
use muster_core::tasks::allocation::{Allocation, AllocationChange, AllocationConfig};
use muster_core::tasks::jobs::{Ended, JobScheduler, JobSpec, JobState, StageSpec};
use muster_core::tasks::locality::LocalityWaits;
use muster_core::tasks::pools::{PoolConfig, SchedulingMode};
use muster_core::tasks::scheduler::{Launch, SchedulerConfig, TaskEnd};
use muster_core::tasks::{Speculation, StageId, TaskId};

fn run_script(path: &std::path::Path) {
    goldenscript::run(&mut Runner::default(), path).expect("goldenscript failed");
}

test_each_file::test_each_path! { in "crates/core/tests/tasks/scripts" as tasks => run_script }

#[derive(goldenscript::Command)]
enum Command {
    Config {
        #[arg(key)]
        mode: Option<String>,
        #[arg(key)]
        wait: Option<u64>,
        #[arg(key)]
        process_wait: Option<u64>,
        #[arg(key)]
        node_wait: Option<u64>,
        #[arg(key)]
        rack_wait: Option<u64>,
        #[arg(key)]
        max_failures: Option<u32>,
        #[arg(key)]
        seed: Option<u64>,
        #[arg(key)]
        speculation: Option<bool>,
        #[arg(key)]
        quantile: Option<f64>,
        #[arg(key)]
        multiplier: Option<f64>,
        #[arg(key)]
        min_runtime: Option<u64>,
    },
    Pool {
        name: String,
        #[arg(key)]
        mode: Option<String>,
        #[arg(key)]
        weight: Option<u32>,
        #[arg(key)]
        min_share: Option<u32>,
    },
    Executor {
        id: u32,
        #[arg(key)]
        host: String,
        #[arg(key)]
        rack: Option<String>,
        #[arg(key)]
        cores: Option<u32>,
    },
    Lose {
        id: u32,
        #[arg(key)]
        by_app: Option<bool>,
    },
    Job {
        name: String,
        #[arg(key)]
        pool: Option<String>,
        #[arg(key)]
        tasks: Option<u32>,
        #[arg(key)]
        prefer: Option<String>,
        #[arg(key)]
        stages: Option<String>,
    },
    Time(u64),
    Revive,
    Offer(u32),
    End {
        #[arg(many)]
        args: Vec<String>,
    },
    Finish,
    Jobs,
    Speculate,
    Allocation {
        #[arg(key)]
        min: Option<u32>,
        #[arg(key)]
        max: Option<u32>,
        #[arg(key)]
        initial: Option<u32>,
        #[arg(key)]
        per: Option<u32>,
        #[arg(key)]
        backlog: Option<u64>,
        #[arg(key)]
        sustained: Option<u64>,
        #[arg(key)]
        idle: Option<u64>,
    },
    Demand {
        #[arg(key)]
        pending: Option<u32>,
        #[arg(key)]
        running: Option<u32>,
        #[arg(key)]
        executors: Option<String>,
    },
}

#[derive(Default)]
struct Runner {
    config: SchedulerConfig,
    scheduler: Option<JobScheduler>,
    now: Timestamp,
    /// Running attempts, to print and to finish.
    running: Vec<Launch>,
    allocation: Option<Allocation>,
}

impl Runner {
    fn scheduler(&mut self) -> &mut JobScheduler {
        let config = &self.config;
        self.scheduler
            .get_or_insert_with(|| JobScheduler::new(config.clone()))
    }

    fn configure(&mut self) -> Result<&mut SchedulerConfig, Box<dyn Error>> {
        if self.scheduler.is_some() {
            return Err("configure before anything else".into());
        }
        Ok(&mut self.config)
    }

    fn print_launches(&mut self, launches: Vec<Launch>) -> String {
        let mut output = String::new();
        for launch in launches {
            let (job, _) = self.stage_name(launch.stage);
            let _ = writeln!(
                output,
                "t{} {job}.{}#{} on e{} ({}) {}{}",
                launch.task.0,
                launch.index,
                launch.attempt,
                launch.executor.0,
                launch.host,
                launch.locality,
                if launch.speculative {
                    " speculative"
                } else {
                    ""
                }
            );
            self.running.push(launch);
        }
        output
    }

    /// `JOB/STAGE` of a stage, and its job's id.
    fn stage_name(&self, stage: StageId) -> (String, u32) {
        let scheduler = self.scheduler.as_ref().expect("a scheduler");
        for (id, job) in scheduler.jobs() {
            if let Some(i) = job.stage_ids.iter().position(|&s| s == stage) {
                return (
                    format!("{}/{}", job.spec.name, job.spec.stages[i].name),
                    id.0,
                );
            }
        }
        unreachable!("every stage has a job")
    }

    fn end(&mut self, task: TaskId, end: TaskEnd) -> Result<String, Box<dyn Error>> {
        let at = self
            .running
            .iter()
            .position(|l| l.task == task)
            .ok_or_else(|| format!("t{} is not running", task.0))?;
        self.running.remove(at);
        let now = self.now;
        let ended = self.scheduler().task_ended(now, task, end);
        Ok(self.print_ended(ended))
    }

    fn print_ended(&mut self, ended: Ended) -> String {
        let mut output = String::new();
        if let Some(job) = ended.job {
            let job = &self.scheduler().jobs()[&job];
            let _ = writeln!(output, "job {} {}", job.spec.name, job_state(&job.state));
        }
        for task in ended.kill {
            let _ = writeln!(output, "kill t{}", task.0);
        }
        output
    }
}

fn job_state(state: &JobState) -> String {
    match state {
        JobState::Running => "running".into(),
        JobState::Succeeded => "succeeded".into(),
        JobState::Failed(message) => format!("failed: {message}"),
    }
}

fn mode(name: &str) -> Result<SchedulingMode, Box<dyn Error>> {
    match name {
        "FIFO" => Ok(SchedulingMode::Fifo),
        "FAIR" => Ok(SchedulingMode::Fair),
        other => Err(format!("unknown mode {other}").into()),
    }
}

/// `H1|H2,H3,-`: task i prefers entry i; `-` is no preference.
fn preferences(text: &str) -> Vec<Vec<String>> {
    text.split(',')
        .map(|entry| {
            if entry == "-" {
                Vec::new()
            } else {
                entry.split('|').map(str::to_owned).collect()
            }
        })
        .collect()
}

/// `A:N,B:N:A+C`.
fn stages(text: &str) -> Result<Vec<StageSpec>, Box<dyn Error>> {
    text.split(',')
        .map(|stage| {
            let mut parts = stage.split(':');
            let name = parts.next().ok_or("a stage name")?.to_owned();
            let tasks = parts.next().ok_or("a task count")?.parse()?;
            let after = parts
                .next()
                .map(|a| a.split('+').map(str::to_owned).collect())
                .unwrap_or_default();
            Ok(StageSpec {
                name,
                tasks,
                after,
                prefer_hosts: Vec::new(),
            })
        })
        .collect()
}

impl goldenscript::Runner for Runner {
    type Command = Command;

    fn run(
        &mut self,
        command: &Command,
        _context: &goldenscript::Context,
    ) -> Result<String, Box<dyn Error>> {
        let mut output = String::new();
        match command {
            Command::Config {
                mode: scheduling,
                wait,
                process_wait,
                node_wait,
                rack_wait,
                max_failures,
                seed,
                speculation,
                quantile,
                multiplier,
                min_runtime,
            } => {
                let config = self.configure()?;
                if let Some(name) = scheduling {
                    config.mode = mode(name)?;
                }
                if let Some(ms) = wait {
                    config.waits = LocalityWaits::uniform(*ms);
                }
                let waits = &mut config.waits;
                waits.process_ms = process_wait.unwrap_or(waits.process_ms);
                waits.node_ms = node_wait.unwrap_or(waits.node_ms);
                waits.rack_ms = rack_wait.unwrap_or(waits.rack_ms);
                config.max_task_failures = max_failures.unwrap_or(config.max_task_failures);
                config.seed = seed.unwrap_or(config.seed);
                if speculation.unwrap_or(false) {
                    config.speculation = Some(Speculation {
                        quantile: quantile.unwrap_or(0.75),
                        multiplier: multiplier.unwrap_or(1.5),
                        min_runtime_ms: min_runtime.unwrap_or(100),
                    });
                }
            }
            Command::Pool {
                name,
                mode: scheduling,
                weight,
                min_share,
            } => {
                let mut pool = PoolConfig::named(name);
                if let Some(name) = scheduling {
                    pool.mode = mode(name)?;
                }
                pool.weight = weight.unwrap_or(pool.weight);
                pool.min_share = min_share.unwrap_or(pool.min_share);
                self.configure()?.pools.push(pool);
            }
            Command::Executor {
                id,
                host,
                rack,
                cores,
            } => {
                let cores = cores.unwrap_or(1);
                self.scheduler()
                    .add_executor(ExecutorId(*id), host, rack.as_deref(), cores);
            }
            Command::Lose { id, by_app } => {
                let now = self.now;
                let caused_by_app = by_app.unwrap_or(false);
                let (lost, ended) =
                    self.scheduler()
                        .remove_executor(now, ExecutorId(*id), caused_by_app);
                self.running.retain(|l| !lost.contains(&l.task));
                for task in lost {
                    writeln!(output, "lost t{}", task.0)?;
                }
                output += &self.print_ended(ended);
            }
            Command::Job {
                name,
                pool,
                tasks,
                prefer,
                stages: stage_list,
            } => {
                let stages = match stage_list {
                    Some(list) => stages(list)?,
                    None => vec![StageSpec {
                        name: "s".into(),
                        tasks: tasks.unwrap_or(1),
                        after: Vec::new(),
                        prefer_hosts: prefer.as_deref().map(preferences).unwrap_or_default(),
                    }],
                };
                let spec = JobSpec {
                    name: name.clone(),
                    pool: pool.clone().unwrap_or_default(),
                    stages,
                };
                let now = self.now;
                self.scheduler().submit(now, spec)?;
            }
            Command::Time(ms) => {
                if *ms < self.now.0 {
                    return Err("time goes forward".into());
                }
                self.now = Timestamp(*ms);
            }
            Command::Revive => {
                let now = self.now;
                let launches = self.scheduler().resource_offers(now, None);
                output = self.print_launches(launches);
            }
            Command::Offer(id) => {
                let now = self.now;
                let launches = self.scheduler().resource_offers(now, Some(ExecutorId(*id)));
                output = self.print_launches(launches);
            }
            Command::End { args } => {
                let (how, tasks) = args.split_last().ok_or("end TASK... HOW")?;
                let end = match how.as_str() {
                    "succeeded" => TaskEnd::Succeeded,
                    "failed" => TaskEnd::Failed,
                    "lost" => TaskEnd::Lost,
                    other => return Err(format!("unknown end {other}").into()),
                };
                for task in tasks {
                    let id = task.strip_prefix('t').unwrap_or(task).parse()?;
                    output += &self.end(TaskId(id), end)?;
                }
            }
            Command::Finish => {
                let mut tasks: Vec<TaskId> = self.running.iter().map(|l| l.task).collect();
                tasks.sort();
                for task in tasks {
                    output += &self.end(task, TaskEnd::Succeeded)?;
                }
            }
            Command::Allocation {
                min,
                max,
                initial,
                per,
                backlog,
                sustained,
                idle,
            } => {
                let backlog = backlog.unwrap_or(1000);
                self.allocation = Some(Allocation::new(AllocationConfig {
                    min: min.unwrap_or(0),
                    max: max.unwrap_or(u32::MAX),
                    initial: initial.unwrap_or(0),
                    tasks_per_executor: per.unwrap_or(1),
                    backlog_timeout_ms: backlog,
                    sustained_backlog_timeout_ms: sustained.unwrap_or(backlog),
                    idle_timeout_ms: idle.unwrap_or(60_000),
                }));
            }
            Command::Demand {
                pending,
                running,
                executors,
            } => {
                let executors = executors
                    .as_deref()
                    .unwrap_or_default()
                    .split(',')
                    .filter(|e| !e.is_empty())
                    .map(|e| {
                        let (id, state) = e.split_once(':').ok_or("ID:busy|idle")?;
                        Ok((ExecutorId(id.parse()?), state == "busy"))
                    })
                    .collect::<Result<Vec<_>, Box<dyn Error>>>()?;
                let allocation = self.allocation.as_mut().ok_or("no allocation")?;
                let changes = allocation.tick(
                    self.now,
                    pending.unwrap_or(0),
                    running.unwrap_or(0),
                    &executors,
                );
                for change in changes {
                    match change {
                        AllocationChange::Target(n) => writeln!(output, "target {n}")?,
                        AllocationChange::Release(ids) => {
                            let ids: Vec<String> = ids.iter().map(|e| e.0.to_string()).collect();
                            writeln!(output, "release {}", ids.join(" "))?;
                        }
                    }
                }
            }
            Command::Speculate => {
                let now = self.now;
                if self.scheduler().check_speculatable(now) {
                    writeln!(output, "marked")?;
                }
            }
            Command::Jobs => {
                let scheduler = self.scheduler();
                for job in scheduler.jobs().values() {
                    let stages: Vec<String> = job
                        .spec
                        .stages
                        .iter()
                        .zip(&job.stage_states)
                        .map(|(stage, state)| format!("{}={state:?}", stage.name))
                        .collect();
                    writeln!(
                        output,
                        "{}: {} [{}]",
                        job.spec.name,
                        job_state(&job.state),
                        stages.join(" ")
                    )?;
                }
            }
        }
        Ok(output)
    }
}
