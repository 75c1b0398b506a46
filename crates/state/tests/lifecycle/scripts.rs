//! Lifecycle scripts (`tests/lifecycle/scripts`): commands applied to a `ClusterState` one by
//! one through [`Cluster`], which checks every invariant after each apply and that a refused
//! command changed nothing. Each command prints what it produced and the effects the leader
//! would carry out; `!` marks a command that must be refused.
//!
//! Ids are short in scripts and output: `a0` is the app numbered 0000, `d2` the driver
//! numbered 0002, `a0/1` executor 1 of `a0`.
//!
//! Commands:
//!
//! * `config [max_executor_retries=N] [retained_apps=N]`: a fresh state with these settings;
//! * `worker ID [cores=4] [mem=4096]`, `lose ID`, `decommission ID`;
//! * `app [cores_max=N] [executor_cores=N] [mem=512] [limit=N] [queue=Q] [command=S]
//!   [NAME=AMOUNT]...`, `driver [cores=1] [mem=512] [supervise=B] [queue=Q]`;
//! * `schedule`: one pass (workers by id) applied as a plan; `plan [launch=DRIVER@WORKER]...
//!   [grant=APP@WORKER@CORES]... [mem=512]`: a plan as given;
//! * `kill ID`, `release APP ID...`, `limit APP N|none`, `finish APP STATE`;
//! * `report a0/1 STATE [code=N]`, `report d0 STATE [code=N]`: a worker's report;
//! * `queues [NAME=THRESHOLD]...`: replaces the queues (`NAME=prior` for a prior queue);
//! * `raise N`: raises the cluster's log format to N;
//! * `preempt APP/EXECUTOR... [reserve=OWNER@WORKER@CORES]... [mem=512] [grace=MS]`: stops
//!   the executors and keeps room for the owners (every command advances the clock 1 s);
//!   `grant OWNER...` gives them the room kept for them;
//! * `state`: workers, active and completed apps and drivers.

use std::error::Error;
use std::fmt::Write as _;

use goldenscript::{Argument, Command, Context};
use muster_core::ids::{AppId, DriverId, ExecutorId, WorkId};
use muster_core::model::{PassConfig, WorkerSelection};
use muster_core::plan::DriverLaunch;
use muster_core::resources::{ListedAddresses, ResourceAddresses, ResourceAmounts, Resources};
use muster_state::commands::{
    AppFinished, ApplyPlan, DecommissionWorker, DrainWorker, DriverStateChanged,
    ExecutorStateChanged, Grant, GrantReservations, KillApp, KillDriver, KillExecutors, Preempt,
    QueueSettings, RaiseLogFormat, RegisterWorker, SetExecutorLimit, SetQueues, SubmitApp,
    SubmitDriver, WorkerLost, plan_op,
};
use muster_state::model::{AppState, DriverState, ExecutorState, Reservation};
use muster_state::version::LogFormat;
use muster_state::{Op, Outcome, Response, StateConfig, Stopped};

use crate::support::{Cluster, app_desc, driver_desc};

fn run_script(path: &std::path::Path) {
    goldenscript::run(&mut Runner(Cluster::new()), path).expect("goldenscript failed");
}

test_each_file::test_each_path! { in "crates/state/tests/lifecycle/scripts" as lifecycle => run_script }

struct Runner(Cluster);

type Output = Result<String, Box<dyn Error>>;

impl goldenscript::Runner for Runner {
    type Command = Command;

    fn run(&mut self, command: &Command, _context: &Context) -> Output {
        let mut args = command.consume_args();
        let op = match command.name.as_str() {
            "config" => {
                let defaults = StateConfig::default();
                self.0 = Cluster::with_config(StateConfig {
                    max_executor_retries: number(&mut args, "max_executor_retries")?
                        .unwrap_or(defaults.max_executor_retries),
                    retained_apps: number(&mut args, "retained_apps")?
                        .unwrap_or(defaults.retained_apps),
                    ..defaults
                });
                args.reject_next()?;
                return Ok(String::new());
            }
            "state" => return Ok(self.state()),
            "worker" => {
                let id = positional(&mut args)?.into();
                let cores = number(&mut args, "cores")?.unwrap_or(4);
                let memory_mb = number(&mut args, "mem")?.unwrap_or(4096);
                // `gpu=2` gives an amount, `gpu=a,b` the addresses.
                let (mut amounts, mut addresses) =
                    (ResourceAmounts::new(), ResourceAddresses::new());
                while let Some((name, value)) = args.next_key() {
                    match value.parse() {
                        Ok(amount) => amounts.insert(name.to_owned(), amount),
                        Err(_) => {
                            let list: Vec<String> = value.split(',').map(str::to_owned).collect();
                            amounts.insert(name.to_owned(), list.len() as u32);
                            addresses.insert(name.to_owned(), list);
                            None
                        }
                    };
                }
                RegisterWorker {
                    id,
                    host: "h".into(),
                    address: "h:1".into(),
                    resources: Resources::new(cores, memory_mb).with_custom(amounts),
                    fence_grace_ms: None,
                }
                .op(addresses)
            }
            "lose" => Op::WorkerLost(WorkerLost {
                id: positional(&mut args)?.into(),
                reason: "no heartbeat".into(),
            }),
            "decommission" => Op::DecommissionWorker(DecommissionWorker {
                id: positional(&mut args)?.into(),
            }),
            "drain" => Op::DrainWorker(DrainWorker {
                id: positional(&mut args)?.into(),
                kill_after_ms: number(&mut args, "kill_after_ms")?,
            }),
            "app" => {
                let mut desc = app_desc(
                    number(&mut args, "cores_max")?,
                    number(&mut args, "executor_cores")?,
                    number(&mut args, "mem")?.unwrap_or(512),
                );
                if let Some(queue) = args.take_key("queue") {
                    desc.queue = queue.into();
                }
                if let Some(command) = args.take_key("command") {
                    desc.command = command.to_owned();
                }
                let executor_limit = number(&mut args, "limit")?;
                desc.executor_resources = custom(&mut args)?;
                Op::SubmitApp(SubmitApp {
                    desc,
                    executor_limit,
                })
            }
            "driver" => {
                let mut desc = driver_desc(
                    number(&mut args, "cores")?.unwrap_or(1),
                    number(&mut args, "mem")?.unwrap_or(512),
                    number(&mut args, "supervise")?.unwrap_or(false),
                );
                if let Some(queue) = args.take_key("queue") {
                    desc.queue = queue.into();
                }
                desc.resources.custom = custom(&mut args)?;
                Op::SubmitDriver(SubmitDriver { desc })
            }
            "schedule" => {
                let config = PassConfig {
                    worker_selection: WorkerSelection::WorkerId,
                    ..PassConfig::default()
                };
                let plan = muster_core::schedule(&self.0.state.scheduling_snapshot(config))?;
                plan_op(&plan)
            }
            "plan" => self.plan(&mut args)?,
            "preempt" => self.preempt(&mut args)?,
            "grant" => Op::GrantReservations(GrantReservations {
                owners: std::iter::from_fn(|| args.next_pos())
                    .map(|owner| {
                        Ok(match owner.strip_prefix('d') {
                            Some(_) => WorkId::Driver(self.driver(owner)?),
                            None => WorkId::App(self.app(owner)?),
                        })
                    })
                    .collect::<Result<_, Box<dyn Error>>>()?,
            }),
            "kill" => match positional(&mut args)? {
                id if id.starts_with('d') => Op::KillDriver(KillDriver {
                    id: self.driver(id)?,
                }),
                id => Op::KillApp(KillApp { id: self.app(id)? }),
            },
            "release" => Op::KillExecutors(KillExecutors {
                app: self.app(positional(&mut args)?)?,
                executors: std::iter::from_fn(|| args.next_pos())
                    .map(|id| id.parse().map(ExecutorId))
                    .collect::<Result<_, _>>()?,
            }),
            "limit" => Op::SetExecutorLimit(SetExecutorLimit {
                app: self.app(positional(&mut args)?)?,
                limit: match positional(&mut args)? {
                    "none" => None,
                    n => Some(n.parse()?),
                },
            }),
            "finish" => Op::AppFinished(AppFinished {
                id: self.app(positional(&mut args)?)?,
                state: app_state(positional(&mut args)?)?,
            }),
            "report" => {
                let id = positional(&mut args)?;
                let state = positional(&mut args)?;
                let exit_code = number(&mut args, "code")?;
                match id.split_once('/') {
                    Some((app, executor)) => Op::ExecutorStateChanged(ExecutorStateChanged {
                        app: self.app(app)?,
                        executor: ExecutorId(executor.parse()?),
                        state: executor_state(state)?,
                        exit_code,
                    }),
                    None => Op::DriverStateChanged(DriverStateChanged {
                        driver: self.driver(id)?,
                        state: driver_state(state)?,
                        exit_code,
                    }),
                }
            }
            "raise" => Op::RaiseLogFormat(RaiseLogFormat {
                to: LogFormat(positional(&mut args)?.parse()?),
            }),
            "queues" => Op::SetQueues(SetQueues {
                queues: std::iter::from_fn(|| args.next_key())
                    .map(|(name, threshold)| {
                        let named = QueueSettings {
                            name: name.into(),
                            prior: false,
                            threshold: 1.0,
                            max_capacity: 1.0,
                        };
                        if threshold == "prior" {
                            return Ok(QueueSettings {
                                prior: true,
                                ..named
                            });
                        }
                        Ok(QueueSettings {
                            threshold: threshold.parse()?,
                            ..named
                        })
                    })
                    .collect::<Result<_, Box<dyn Error>>>()?,
            }),
            name => return Err(format!("unknown command {name}").into()),
        };
        args.reject_next()?;
        let response = self.0.apply(op)?;
        Ok(self.describe(&response))
    }
}

impl Runner {
    /// The full id of app `a<N>`, active or completed.
    fn app(&self, short: &str) -> Result<AppId, Box<dyn Error>> {
        let state = &self.0.state;
        let number = numbered(short, 'a')?;
        state
            .apps()
            .keys()
            .chain(state.completed_apps().iter().map(|a| &a.id))
            .find(|id| id.0.ends_with(&number))
            .cloned()
            .ok_or_else(|| format!("no app {short}").into())
    }

    /// The full id of driver `d<N>`, active or completed.
    fn driver(&self, short: &str) -> Result<DriverId, Box<dyn Error>> {
        let state = &self.0.state;
        let number = numbered(short, 'd')?;
        state
            .drivers()
            .keys()
            .chain(state.completed_drivers().iter().map(|d| &d.id))
            .find(|id| id.0.ends_with(&number))
            .cloned()
            .ok_or_else(|| format!("no driver {short}").into())
    }

    fn plan(&self, args: &mut goldenscript::ArgumentConsumer<'_>) -> Result<Op, Box<dyn Error>> {
        let mut plan = ApplyPlan::default();
        let mut grants = Vec::new();
        let mut memory_mb = 512;
        for arg in args.by_ref() {
            let Argument::KeyValue(key, value) = arg else {
                return Err(format!("unexpected argument {arg}").into());
            };
            let parts: Vec<&str> = value.split('@').collect();
            match (key.as_str(), parts.as_slice()) {
                ("launch", [driver, worker]) => plan.drivers.push(DriverLaunch {
                    driver: self.driver(driver)?,
                    worker: (*worker).into(),
                }),
                ("grant", [app, worker, cores, count @ ..]) if count.len() <= 1 => {
                    let count = count.first().map_or(Ok(1), |count| count.parse())?;
                    grants.push((self.app(app)?, (*worker).into(), cores.parse()?, count));
                }
                ("mem", [mem]) => memory_mb = mem.parse()?,
                _ => return Err(format!("unexpected argument {arg}").into()),
            }
        }
        plan.executors = grants
            .into_iter()
            .map(|(app, worker, cores, count)| Grant {
                app,
                worker,
                resources: Resources::new(cores, memory_mb),
                count,
            })
            .collect();
        Ok(Op::ApplyPlan(plan))
    }

    /// `preempt APP/EXECUTOR... [reserve=OWNER@WORKER@CORES]... [mem=512] [grace=MS]`.
    fn preempt(&self, args: &mut goldenscript::ArgumentConsumer<'_>) -> Result<Op, Box<dyn Error>> {
        let mut victims = Vec::new();
        let mut reserved = Vec::new();
        let (mut memory_mb, mut grace_ms) = (512, 0);
        for arg in args.by_ref() {
            match &arg {
                Argument::Positional(victim) => {
                    let (app, executor) = victim.split_once('/').ok_or("APP/EXECUTOR")?;
                    victims.push((self.app(app)?, ExecutorId(executor.parse()?)));
                }
                Argument::KeyValue(key, value) => {
                    let parts: Vec<&str> = value.split('@').collect();
                    match (key.as_str(), parts.as_slice()) {
                        ("reserve", [owner, worker, cores]) => {
                            let owner = match owner.strip_prefix('d') {
                                Some(_) => WorkId::Driver(self.driver(owner)?),
                                None => WorkId::App(self.app(owner)?),
                            };
                            reserved.push((owner, (*worker).into(), cores.parse()?));
                        }
                        ("mem", [mem]) => memory_mb = mem.parse()?,
                        ("grace", [ms]) => grace_ms = ms.parse()?,
                        _ => return Err(format!("unexpected argument {arg}").into()),
                    }
                }
                _ => return Err(format!("unexpected argument {arg}").into()),
            }
        }
        let reservations = reserved
            .into_iter()
            .map(|(owner, worker, cores)| Reservation {
                owner,
                worker,
                resources: Resources::new(cores, memory_mb),
                until: Default::default(),
            })
            .collect();
        Ok(Op::Preempt(Preempt {
            victims,
            reservations,
            grace_ms,
        }))
    }

    /// What a command produced, then its effects.
    fn describe(&self, response: &Response) -> String {
        let mut out = String::new();
        match &response.outcome {
            Outcome::Done => {}
            Outcome::UserAdded { name, generation } => {
                let _ = writeln!(out, "user {name} at generation {generation}");
            }
            Outcome::WorkerRegistered { duplicate } => {
                let _ = writeln!(
                    out,
                    "{}",
                    if *duplicate {
                        "registered again"
                    } else {
                        "registered"
                    }
                );
            }
            Outcome::AppSubmitted { id } => {
                let _ = writeln!(out, "submitted {}", short_app(id));
            }
            Outcome::DriverSubmitted { id } => {
                let _ = writeln!(out, "submitted {}", short_driver(id));
            }
            Outcome::Prioritized { priority } => {
                let _ = writeln!(out, "priority {priority}");
            }
            Outcome::PlanApplied {
                drivers,
                executors,
                rejected,
            } => {
                let state = &self.0.state;
                for (driver, worker) in drivers {
                    let held = holding(state.driver_addresses(driver));
                    let _ = writeln!(out, "launch {} on {worker}{held}", short_driver(driver));
                }
                for (app, executor) in executors {
                    let _ = writeln!(
                        out,
                        "grant {}/{} on {}: {}{}",
                        short_app(app),
                        executor.id,
                        executor.worker,
                        executor.resources,
                        holding(state.executor_addresses(app, executor.id))
                    );
                }
                for rejection in rejected {
                    let id = if rejection.id.starts_with("driver-") {
                        short_driver(&DriverId(rejection.id.clone()))
                    } else {
                        short_app(&AppId::from(rejection.id.as_str()))
                    };
                    let _ = writeln!(
                        out,
                        "rejected {id} on {}: {}",
                        rejection.worker, rejection.reason
                    );
                }
            }
            Outcome::Preempted { victims } => {
                let _ = writeln!(out, "preempted {victims}");
            }
            Outcome::Batch(results) => {
                for result in results {
                    match result {
                        Ok(response) => out.push_str(&self.describe(response)),
                        Err(error) => {
                            let _ = writeln!(out, "refused: {error}");
                        }
                    }
                }
            }
            Outcome::ExecutorsKilled { unknown } => {
                if !unknown.is_empty() {
                    let ids: Vec<String> = unknown.iter().map(ToString::to_string).collect();
                    let _ = writeln!(out, "unknown executors {}", ids.join(" "));
                }
            }
        }
        let effects = &response.effects;
        for (app, executor) in &effects.ended_executors {
            let exit = executor
                .exit_code
                .map(|code| format!(" exit {code}"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "ended {}/{} on {}: {:?}{exit}",
                short_app(app),
                executor.id,
                executor.worker,
                executor.state
            );
        }
        for (driver, worker, state) in &effects.ended_drivers {
            let on = worker
                .as_ref()
                .map(|w| format!(" on {w}"))
                .unwrap_or_default();
            let _ = writeln!(out, "ended {}{on}: {state:?}", short_driver(driver));
        }
        for (old, new) in &effects.relaunched_drivers {
            let _ = writeln!(
                out,
                "relaunch {} as {}",
                short_driver(old),
                short_driver(new)
            );
        }
        for (app, state) in &effects.removed_apps {
            let _ = writeln!(out, "removed {}: {state:?}", short_app(app));
        }
        out
    }

    /// Workers, active apps with their executors, active drivers, then what completed.
    fn state(&self) -> String {
        let state = &self.0.state;
        let mut out = String::new();
        for w in state.workers().values() {
            let drain = state
                .draining()
                .get(&w.id)
                .map(|d| format!(", draining (kill after {:?} ms)", d.kill_after_ms))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "worker {} {:?}: {} of {} cores, {} of {} MB used{drain}",
                w.id,
                w.state,
                w.used.cores,
                w.capacity.cores,
                w.used.memory_mb,
                w.capacity.memory_mb
            );
        }
        for a in state.apps().values() {
            let executors: Vec<String> = a
                .executors
                .values()
                .map(|e| {
                    let held = holding(state.executor_addresses(&a.id, e.id));
                    format!(
                        "{}@{}:{}:{:?}{held}",
                        e.id, e.worker, e.resources.cores, e.state
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                "app {} {:?}: {} cores, retries {}, executors [{}]",
                short_app(&a.id),
                a.state,
                a.cores_granted,
                a.retry_count,
                executors.join(" ")
            );
        }
        for r in state.reservations() {
            let owner = match &r.owner {
                WorkId::Driver(driver) => short_driver(driver),
                WorkId::App(app) => short_app(app),
            };
            let left = r.until.0.saturating_sub(self.0.clock);
            let _ = writeln!(
                out,
                "reserved {} on {} for {owner}, {left} ms left",
                r.resources, r.worker
            );
        }
        for (process, worker, addresses) in state.stopping() {
            let process = match process {
                Stopped::Executor(app, id) => format!("{}/{id}", short_app(app)),
                Stopped::Driver(id) => short_driver(id),
            };
            let held = holding(addresses);
            let _ = writeln!(out, "stopping {process} on {worker}{held}");
        }
        for d in state.drivers().values() {
            let on = d
                .worker
                .as_ref()
                .map(|w| format!(" on {w}"))
                .unwrap_or_default();
            let held = holding(state.driver_addresses(&d.id));
            let _ = writeln!(
                out,
                "driver {} {:?}{on}{held}",
                short_driver(&d.id),
                d.state
            );
        }
        for a in state.completed_apps() {
            let _ = writeln!(out, "completed app {} {:?}", short_app(&a.id), a.state);
        }
        for a in state.apps().values().chain(state.completed_apps()) {
            let ended: Vec<String> = state
                .ended_executors(&a.id)
                .map(|e| {
                    let exit = e
                        .exit_code
                        .map(|c| format!(" exit {c}"))
                        .unwrap_or_default();
                    format!(
                        "{}/{} on {} {:?}{exit}",
                        short_app(&a.id),
                        e.id,
                        e.worker,
                        e.state
                    )
                })
                .collect();
            if !ended.is_empty() {
                let _ = writeln!(out, "ended executors: {}", ended.join(", "));
            }
        }
        for d in state.completed_drivers() {
            let exit = d
                .exit_code
                .map(|c| format!(" exit {c}"))
                .unwrap_or_default();
            let successor = state
                .relaunched_as(&d.id)
                .map(|new| format!(", relaunched as {}", short_driver(new)))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "completed driver {} {:?}{exit}{successor}",
                short_driver(&d.id),
                d.state
            );
        }
        out
    }
}

/// `-NNNN`, the counter part of an id written `<prefix>N`.
fn numbered(short: &str, prefix: char) -> Result<String, Box<dyn Error>> {
    let number: u64 = short
        .strip_prefix(prefix)
        .ok_or_else(|| format!("{short} is not {prefix}N"))?
        .parse()?;
    Ok(format!("-{number:04}"))
}

fn short(id: &str, prefix: &str) -> String {
    let number: u64 = id
        .rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    format!("{prefix}{number}")
}

fn short_app(id: &AppId) -> String {
    short(&id.0, "a")
}

fn short_driver(id: &DriverId) -> String {
    short(&id.0, "d")
}

fn positional<'a>(
    args: &mut goldenscript::ArgumentConsumer<'a>,
) -> Result<&'a str, Box<dyn Error>> {
    args.next_pos().ok_or_else(|| "missing argument".into())
}

fn number<T: std::str::FromStr>(
    args: &mut goldenscript::ArgumentConsumer<'_>,
    key: &str,
) -> Result<Option<T>, Box<dyn Error>>
where
    T::Err: Error + 'static,
{
    Ok(args.take_key(key).map(str::parse).transpose()?)
}

/// The remaining `NAME=AMOUNT` arguments, as custom resources.
/// ` holding gpu=0,1` for the addresses a process holds; empty when it holds none.
fn holding(addresses: &ResourceAddresses) -> String {
    if addresses.is_empty() {
        String::new()
    } else {
        format!(" holding {}", ListedAddresses(addresses))
    }
}

fn custom(
    args: &mut goldenscript::ArgumentConsumer<'_>,
) -> Result<ResourceAmounts, Box<dyn Error>> {
    std::iter::from_fn(|| args.next_key())
        .map(|(name, amount)| Ok((name.to_owned(), amount.parse()?)))
        .collect()
}

fn app_state(name: &str) -> Result<AppState, Box<dyn Error>> {
    Ok(match name {
        "WAITING" => AppState::Waiting,
        "RUNNING" => AppState::Running,
        "FINISHED" => AppState::Finished,
        "FAILED" => AppState::Failed,
        "KILLED" => AppState::Killed,
        other => return Err(format!("unknown app state {other}").into()),
    })
}

fn executor_state(name: &str) -> Result<ExecutorState, Box<dyn Error>> {
    Ok(match name {
        "LAUNCHING" => ExecutorState::Launching,
        "RUNNING" => ExecutorState::Running,
        "KILLED" => ExecutorState::Killed,
        "FAILED" => ExecutorState::Failed,
        "LOST" => ExecutorState::Lost,
        "EXITED" => ExecutorState::Exited,
        other => return Err(format!("unknown executor state {other}").into()),
    })
}

fn driver_state(name: &str) -> Result<DriverState, Box<dyn Error>> {
    Ok(match name {
        "SUBMITTED" => DriverState::Submitted,
        "RUNNING" => DriverState::Running,
        "FINISHED" => DriverState::Finished,
        "RELAUNCHING" => DriverState::Relaunching,
        "KILLED" => DriverState::Killed,
        "FAILED" => DriverState::Failed,
        "ERROR" => DriverState::Error,
        other => return Err(format!("unknown driver state {other}").into()),
    })
}
