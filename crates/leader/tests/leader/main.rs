//! The leader's state machine driven by scripts (`tests/leader/scripts`), with no network and
//! no clock: each script sets up a replicated state as an earlier term left it, elects a
//! leader, and feeds it events (registrations, reports, heartbeats, commits, ticks). Every
//! action the leader takes is printed; proposals wait in a log until the script commits them
//! (applied with the term check, invariants checked) or fails them.
//!
//! Ids are shortened in scripts and output: `d3` is `driver-19700101000000-0003`, `a0` is
//! `app-19700101000000-0000`, `a0/1` is executor 1 of `a0`.
//!
//! Commands:
//!
//! * setup, applied directly as committed in an earlier term: `worker ID [cores=4]
//!   [mem=4096] [gpu=N]`, `driver [supervise=true] [spark=true] [cores=1]` (`spark`: a Spark
//!   submission's), `app [cores_max=N]
//!   [executor_cores=N] [mem=256] [gpu=N]`, `place` (one scheduling pass committed),
//!   `running PROCESS` (a worker's report
//!   of a start committed: an executor becomes RUNNING), `exited PROCESS [code=N]` (its
//!   exit), `lose ID`;
//! * `queue NAME`: a prior queue, as set in an earlier term; `capacities NAME=F...`: queues
//!   with these capacities instead; `app ... queue=Q`;
//! * `user NAME`: a named user (no admin); `app ... user=NAME`: submitted by them; `format
//!   N`: the log format raised to N; `max_priority N`: the default queue's; `app ...
//!   priority=N`: submitted with it;
//! * `elect term=N [preempt=QUEUE] [capacities=B] [within_queues=B] [delay=MS] [grace=MS]
//!   [fraction=F]` (with a preemption policy for that queue, for the queues' guarantees, or
//!   inside queues), `read` (the linearizable read succeeds), `tick [ms=N]` (time passes,
//!   ticked every 100 ms as the session does; `alive=LINK` heartbeats on that link before
//!   every tick, quietly), `pause ms=N` (the leader stood still: one tick
//!   after the gap);
//! * `register link=N worker=ID [cores=4] [mem=4096] [running=PROCESS@PID[@RESTARTS]]...
//!   [report=SEQ@PROCESS@STATE[@CODE]]... [spark=B]` (keys repeat; `spark`: whether its agent
//!   says it has Spark);
//! * `heartbeat link=N [usage=PROCESS@BYTES@CPU_MS]... [data=APP]...` (what the worker
//!   measured; the applications whose data it keeps), `report link=N seq=N PROCESS STATE [code=N] [pid=N]
//!   [restarts=COUNT@LAST_EXIT[@IN_MS]]` (a supervised driver started again on its worker,
//!   waiting IN_MS to), `close link=N`; `processes PROCESS...` (the pid and restarts the
//!   leader keeps);
//! * `attach link=N app=ID [user=NAME] [live=ID]...` (attached with NAME's credential as it
//!   is now; naming the executors its client has not seen end),
//!   `app_request link=N heartbeat|finish|unlimited|limit n=N|release id=N...`;
//! * `commit [n=N]` (default: all pending), `fail [n=N]`, `client OP...` (a client write:
//!   `client kill ID`, `client drain WORKER [kill_after_ms=N]`, `client revoke USER`);
//! * `state` (workers, apps and drivers as the log has them), `leader` (recovery state).

use std::collections::VecDeque;
use std::error::Error;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use goldenscript::{Argument, Command, Context};
use muster_core::access::QueueSpec;
use muster_core::ids::{AppId, DriverId, ExecutorId, Term, Timestamp, WorkerId};
use muster_core::model::{PassConfig, SPARK_SUBMISSION_VARIABLE};
use muster_core::resources::{ResourceAmounts, Resources, Usage};
use muster_core::restarts::Restarts;
use muster_leader::{
    Action, AppRequest, Event, Leader, LeaderConfig, LinkId, PreemptionPolicy, ProcessKey,
    ProposalId, Registration, Report, RunningProcess, ToApp, ToWorker, Update,
};
use muster_state::commands::{
    AddUser, By, DrainWorker, ExecutorStateChanged, Grant, KillApp, KillDriver, PreemptWithinQueue,
    RaiseLogFormat, RegisterWorker, RevokeUser, SubmitApp, SubmitDriver, SubmitWithSettings,
    WorkerLost, plan_op, set_queues_op,
};
use muster_state::model::{
    AppDescription, DriverDescription, DriverState, ExecutorState, Owner, Profile,
};
use muster_state::version::LogFormat;
use muster_state::{ClusterState, Op, StateConfig, Stopped};

const DRIVER: &str = "driver-19700101000000-";
/// How often the session ticks its leader.
const TICK_MS: u64 = 100;
const APP: &str = "app-19700101000000-";

/// Runs every script under `tests/leader/scripts`.
fn run_script(path: &std::path::Path) {
    goldenscript::run(&mut Runner::new(), path).expect("goldenscript failed");
}

test_each_file::test_each_path! { in "crates/leader/tests/leader/scripts" as leader => run_script }

struct Runner {
    state: ClusterState,
    leader: Option<Leader>,
    term: Term,
    start: Instant,
    now: Instant,
    /// Proposed, not yet committed, in proposal order.
    log: VecDeque<(ProposalId, Op)>,
}

type Output = Result<String, Box<dyn Error>>;

impl goldenscript::Runner for Runner {
    type Command = Command;

    fn run(&mut self, command: &Command, _context: &Context) -> Output {
        let mut args = Args::new(command);
        let output = match command.name.as_str() {
            "worker" => {
                let id = args.positional_or_empty();
                let op = Op::RegisterWorker(register_op(id, &mut args)?);
                self.apply_setup(op)?;
                String::new()
            }
            "driver" => {
                let desc = DriverDescription {
                    name: String::new(),
                    queue: Default::default(),
                    resources: Resources::new(args.number("cores", 1)?, args.number("mem", 256)?),
                    command: "/bin/true".into(),
                    args: Vec::new(),
                    env: if args.flag("spark")? {
                        [(SPARK_SUBMISSION_VARIABLE.to_owned(), "1".to_owned())].into()
                    } else {
                        Default::default()
                    },
                    supervise: args.flag("supervise")?,
                };
                let response = self.apply_setup(Op::SubmitDriver(SubmitDriver { desc }))?;
                format!("{:?}\n", response.outcome)
            }
            "queue" => {
                // A prior queue, applied as committed in an earlier term.
                let queue = QueueSpec {
                    prior: true,
                    ..QueueSpec::named(args.positional()?)
                };
                self.apply_setup(set_queues_op(vec![queue]))?;
                String::new()
            }
            "capacities" => {
                // Queues with these capacities, applied as committed in an earlier term.
                let queues = std::mem::take(&mut args.args)
                    .into_iter()
                    .map(|arg| match arg {
                        Argument::KeyValue(name, capacity) => Ok(QueueSpec {
                            capacity: Some(capacity.parse()?),
                            ..QueueSpec::named(name)
                        }),
                        _ => Err("capacities are NAME=F".into()),
                    })
                    .collect::<Result<Vec<_>, Box<dyn Error>>>()?;
                self.apply_setup(set_queues_op(queues))?;
                String::new()
            }
            "app" => {
                let desc = AppDescription {
                    name: String::new(),
                    user: String::new(),
                    queue: args
                        .optional::<String>("queue")?
                        .map_or_else(Default::default, |q| q.as_str().into()),
                    cores_max: args.optional("cores_max")?,
                    executor_cores: args.optional("executor_cores")?,
                    executor_memory_mb: args.number("mem", 256)?,
                    executor_resources: gpus(&mut args)?,
                    command: "/bin/true".into(),
                    args: Vec::new(),
                    env: Default::default(),
                };
                let op = Op::SubmitApp(SubmitApp {
                    desc,
                    executor_limit: None,
                });
                let op = match args.optional("priority")? {
                    Some(priority) => Op::SubmitWithSettings(SubmitWithSettings {
                        submit: Box::new(op),
                        priority,
                        logs_events: false,
                    }),
                    None => op,
                };
                let op = match args.optional::<String>("user")? {
                    Some(name) => self.by(&name, op)?,
                    None => op,
                };
                format!("{:?}\n", self.apply_setup(op)?.outcome)
            }
            "place" => {
                let plan =
                    muster_core::schedule(&self.state.scheduling_snapshot(PassConfig::default()))?;
                let op = plan_op(&plan);
                let line = describe(&op);
                self.apply_setup(op)?;
                format!("{line}\n")
            }
            "running" => {
                let Some(ProcessKey::Executor(app, executor)) = args.process()? else {
                    return Err("running takes an executor".into());
                };
                self.apply_setup(Op::ExecutorStateChanged(ExecutorStateChanged {
                    app,
                    executor,
                    state: ExecutorState::Running,
                    exit_code: None,
                }))?;
                String::new()
            }
            "exited" => {
                let Some(ProcessKey::Executor(app, executor)) = args.process()? else {
                    return Err("exited takes an executor".into());
                };
                self.apply_setup(Op::ExecutorStateChanged(ExecutorStateChanged {
                    app,
                    executor,
                    state: ExecutorState::Exited,
                    exit_code: Some(args.number("code", 0)?),
                }))?;
                String::new()
            }
            "lose" => {
                let id = WorkerId::from(args.positional()?);
                let reason = "lost in an earlier term".into();
                self.apply_setup(Op::WorkerLost(WorkerLost { id, reason }))?;
                String::new()
            }
            "elect" => {
                self.term = Term(args.number("term", self.term.0 + 1)?);
                let capacities = args.optional("capacities")?.unwrap_or(false);
                let within_queues = args.optional("within_queues")?.unwrap_or(false);
                let preempting = args.optional::<String>("preempt")?;
                let preemption = (preempting.is_some() || capacities || within_queues).then(|| {
                    Ok::<_, Box<dyn Error>>(PreemptionPolicy {
                        queues: preempting.iter().map(|q| q.as_str().into()).collect(),
                        capacities,
                        within_queues,
                        delay: Duration::from_millis(args.number("delay", 5000)?),
                        grace: Duration::from_millis(args.number("grace", 10_000)?),
                        max_fraction: args.number("fraction", 1.0)?,
                    })
                });
                let config = LeaderConfig {
                    preemption: preemption.transpose()?,
                    ..LeaderConfig::default()
                };
                self.leader = Some(Leader::new(self.term, config, self.now));
                self.log.clear();
                String::new()
            }
            "read" => self.step(Event::StateRead)?,
            // Time passes as the session lets it: a tick every 100 ms.
            // Links named by `alive=` heartbeat before every tick (their answers not shown).
            "tick" => {
                let mut left = args.number("ms", TICK_MS)?;
                let alive = args
                    .list("alive")
                    .into_iter()
                    .map(|link| link.parse().map(LinkId))
                    .collect::<Result<Vec<_>, _>>()?;
                let mut output = String::new();
                while left > 0 {
                    for &link in &alive {
                        let answer = self.step(Event::WorkerHeartbeat {
                            link,
                            usage: Vec::new(),
                            shuffle_service: None,
                            apps_with_data: Vec::new(),
                        })?;
                        output += &answer.replace(&format!("link{} ← HeartbeatAck\n", link.0), "");
                    }
                    let step = left.min(TICK_MS);
                    left -= step;
                    output += &self.tick(step)?;
                }
                output
            }
            // The leader's own process stood still: one tick after a long gap.
            "pause" => self.tick(args.number("ms", TICK_MS)?)?,
            "register" => {
                let link = args.link()?;
                let id = args.key("worker")?;
                let worker = register_op(id, &mut args)?;
                let running = args
                    .list("running")
                    .into_iter()
                    .map(|item| {
                        let mut parts = item.splitn(3, '@');
                        let process = parse_process(parts.next().unwrap_or_default())?;
                        let pid = parts.next().ok_or("PROCESS@PID[@RESTARTS]")?.parse()?;
                        let restarts = parts.next().map(parse_restarts).transpose()?;
                        Ok((process, RunningProcess { pid, restarts }))
                    })
                    .collect::<Result<_, Box<dyn Error>>>()?;
                let reports = args
                    .list("report")
                    .into_iter()
                    .map(parse_report)
                    .collect::<Result<_, _>>()?;
                let spark_home = args.optional::<bool>("spark")?.map(|has| {
                    if has {
                        "/opt/spark".into()
                    } else {
                        String::new()
                    }
                });
                let registration = Registration {
                    worker,
                    addresses: Default::default(),
                    running,
                    reports,
                    build: None,
                    shuffle_service: None,
                    spark_home,
                };
                self.step(Event::WorkerAttached { link, registration })?
            }
            // `usage=PROCESS@BYTES@CPU_MS`, repeated: what the worker measured; `data=APP`,
            // repeated: the applications whose data it keeps.
            "heartbeat" => {
                let link = args.link()?;
                let usage = args
                    .list("usage")
                    .into_iter()
                    .map(|item| {
                        let [process, memory, cpu] = item.split('@').collect::<Vec<_>>()[..] else {
                            return Err("PROCESS@BYTES@CPU_MS".into());
                        };
                        let usage = Usage {
                            memory_bytes: memory.parse()?,
                            cpu_ms: Some(cpu.parse()?),
                        };
                        Ok((parse_process(process)?, usage))
                    })
                    .collect::<Result<_, Box<dyn Error>>>()?;
                let apps_with_data = args
                    .list("data")
                    .into_iter()
                    .map(|app| AppId::from(expand(app)))
                    .collect();
                self.step(Event::WorkerHeartbeat {
                    link,
                    usage,
                    shuffle_service: None,
                    apps_with_data,
                })?
            }
            // The process id and restarts the leader keeps of each named process.
            "processes" => {
                let leader = self.leader.as_ref().ok_or("no leader elected")?;
                let mut output = String::new();
                loop {
                    let process = args.positional_or_empty();
                    if process.is_empty() {
                        break;
                    }
                    let key = parse_process(process)?;
                    let pid = leader
                        .pid(&key)
                        .map_or("no pid".to_owned(), |pid| format!("pid {pid}"));
                    let restarts = leader.restarts(&key).map_or(String::new(), |r| {
                        let next = r.starts_again.map_or(String::new(), |at| {
                            format!(", starts again in {:?}", at.duration_since(self.now))
                        });
                        format!(
                            ", restarts {} last exit {:?}{next}",
                            r.count, r.last_exit_code
                        )
                    });
                    output += &format!("{process}: {pid}{restarts}\n");
                }
                output
            }
            // What the leader keeps of each named process's use on worker `worker=`.
            "usage" => {
                let worker = WorkerId::from(args.key("worker")?);
                let leader = self.leader.as_ref().ok_or("no leader elected")?;
                let mut output = String::new();
                loop {
                    let process = args.positional_or_empty();
                    if process.is_empty() {
                        break;
                    }
                    let kept = match leader.usage(&worker, &parse_process(process)?) {
                        Some(u) => {
                            let cpu = u
                                .cpu_ms
                                .map_or("no CPU time".to_owned(), |ms| format!("{ms} ms"));
                            format!("{} bytes, {cpu}", u.memory_bytes)
                        }
                        None => "none".to_owned(),
                    };
                    output += &format!("{process}: {kept}\n");
                }
                output
            }
            "report" => {
                let link = args.link()?;
                let seq = args.number("seq", 0)?;
                let process = args.positional()?;
                let state = args.positional()?;
                let code = args.optional::<i32>("code")?;
                let pid = args.number("pid", 0)?;
                let mut update = update(process, state, code, pid)?;
                if let Update::Driver { restarts, .. } = &mut update {
                    *restarts = args
                        .optional::<String>("restarts")?
                        .as_deref()
                        .map(parse_restarts)
                        .transpose()?;
                }
                self.step(Event::WorkerReport {
                    link,
                    report: Report { seq, update },
                })?
            }
            "close" => {
                let link = args.link()?;
                self.step(Event::LinkClosed { link })?
            }
            "user" => {
                let name = args.positional()?.to_owned();
                self.apply_setup(Op::AddUser(AddUser { name, admin: false }))?;
                String::new()
            }
            "max_priority" => {
                let max_priority = Some(args.number("n", 0)?);
                self.apply_setup(set_queues_op(vec![QueueSpec {
                    max_priority,
                    ..QueueSpec::named("default")
                }]))?;
                String::new()
            }
            "format" => {
                let to = LogFormat(args.number("n", 0)?);
                self.apply_setup(Op::RaiseLogFormat(RaiseLogFormat { to }))?;
                String::new()
            }
            "attach" => {
                let link = args.link()?;
                let app = AppId::from(expand(args.key("app")?));
                let user = args
                    .optional::<String>("user")?
                    .map(|name| self.owner(&name))
                    .transpose()?;
                let believed_live = args
                    .list("live")
                    .into_iter()
                    .map(|id| id.parse().map(ExecutorId))
                    .collect::<Result<_, _>>()?;
                self.step(Event::AppAttached {
                    link,
                    app,
                    ui_address: String::new(),
                    driver: None,
                    user,
                    believed_live,
                })?
            }
            "app_request" => {
                let link = args.link()?;
                let request = match args.positional()? {
                    "heartbeat" => AppRequest::Heartbeat,
                    "finish" => AppRequest::Finish,
                    "unlimited" => AppRequest::SetLimit(None),
                    "limit" => AppRequest::SetLimit(Some(args.number("n", 0)?)),
                    "profile" => AppRequest::SetProfileLimit(
                        args.number("id", 1)?,
                        Profile {
                            executor_cores: args.optional("executor_cores")?,
                            executor_memory_mb: args.number("mem", 256)?,
                            executor_resources: gpus(&mut args)?,
                            env: Default::default(),
                            executor_limit: args.number("n", 0)?,
                        },
                    ),
                    "release" => AppRequest::Release(
                        args.list("id")
                            .into_iter()
                            .map(|id| id.parse().map(ExecutorId))
                            .collect::<Result<_, _>>()?,
                    ),
                    other => return Err(format!("unknown app request {other}").into()),
                };
                self.step(Event::AppRequest { link, request })?
            }
            "commit" => {
                let n = args.number("n", self.log.len())?;
                let mut output = String::new();
                for _ in 0..n {
                    let (proposal, op) = self.log.pop_front().ok_or("nothing to commit")?;
                    let command = muster_state::Command {
                        at: Timestamp(0),
                        request_id: None,
                        term: Some(self.term),
                        op,
                    };
                    let result = self.state.apply_in_term(self.term, &command);
                    self.state.check_invariants()?;
                    if let Err(refused) = &result {
                        writeln!(output, "#{} refused: {refused}", proposal.0)?;
                    }
                    output += &self.step(Event::Committed { proposal, result })?;
                }
                output
            }
            "fail" => {
                let n = args.number("n", 1)?;
                let mut output = String::new();
                for _ in 0..n {
                    let (proposal, _) = self.log.pop_front().ok_or("nothing to fail")?;
                    output += &self.step(Event::NotCommitted { proposal })?;
                }
                output
            }
            "client" => {
                let op = match args.positional()? {
                    "kill" => {
                        let id = expand(args.positional()?);
                        if id.starts_with(DRIVER) {
                            Op::KillDriver(KillDriver { id: DriverId(id) })
                        } else {
                            Op::KillApp(KillApp {
                                id: AppId::from(id),
                            })
                        }
                    }
                    "drain" => Op::DrainWorker(DrainWorker {
                        id: WorkerId::from(args.positional()?),
                        kill_after_ms: args.optional("kill_after_ms")?,
                    }),
                    "revoke" => Op::RevokeUser(RevokeUser {
                        name: args.positional()?.to_owned(),
                    }),
                    other => return Err(format!("unknown client op {other}").into()),
                };
                let drained = match &op {
                    Op::DrainWorker(drain) => Some(Event::WorkerDrained {
                        worker: drain.id.clone(),
                        kill_after: drain.kill_after_ms.map(Duration::from_millis),
                    }),
                    _ => None,
                };
                let response = self.apply_setup(op)?;
                let mut output = self.step(Event::ClientCommitted {
                    effects: response.effects,
                })?;
                // As the client API does once a drain is committed.
                if let Some(drained) = drained {
                    output += &self.step(drained)?;
                }
                output
            }
            "state" => self.dump(),
            "leader" => {
                let leader = self.leader.as_ref().ok_or("no leader elected")?;
                format!("{}\n", leader.recovery_state().name())
            }
            other => return Err(format!("unknown command {other}").into()),
        };
        args.done()?;
        Ok(shorten(&output))
    }

    fn end_script(&mut self) -> Result<(), Box<dyn Error>> {
        self.state.check_invariants()?;
        Ok(())
    }
}

impl Runner {
    fn new() -> Self {
        let now = Instant::now();
        Self {
            state: ClusterState::new(StateConfig::default()),
            leader: None,
            term: Term(1),
            start: now,
            now,
            log: VecDeque::new(),
        }
    }

    /// Applies `op` as committed before the current leader: setup, or a client write.
    /// `name` with the generation of their credential now.
    fn owner(&self, name: &str) -> Result<Owner, Box<dyn Error>> {
        let user = self.state.users().get(name).ok_or("no such user")?;
        Ok(Owner {
            user: name.to_owned(),
            generation: user.generation,
        })
    }

    /// `op` as `name`'s request.
    fn by(&self, name: &str, op: Op) -> Result<Op, Box<dyn Error>> {
        let Owner { user, generation } = self.owner(name)?;
        Ok(Op::By(By {
            user,
            generation,
            op: Box::new(op),
        }))
    }

    fn apply_setup(&mut self, op: Op) -> Result<muster_state::Response, Box<dyn Error>> {
        let command = muster_state::Command {
            at: Timestamp(0),
            request_id: None,
            term: None,
            op,
        };
        let response = self.state.apply(&command)?;
        self.state.check_invariants()?;
        Ok(response)
    }

    fn tick(&mut self, ms: u64) -> Output {
        self.now += Duration::from_millis(ms);
        let leader = self.leader.as_mut().ok_or("no leader elected")?;
        let actions = leader.tick(self.now, &self.state);
        Ok(self.print(actions))
    }

    fn step(&mut self, event: Event) -> Output {
        let now = self.now;
        let leader = self.leader.as_mut().ok_or("no leader elected")?;
        let mut actions = leader.step(now, &self.state, event);
        actions.extend(leader.pass(now, &self.state));
        Ok(self.print(actions))
    }

    /// One line per action; proposals join the log.
    fn print(&mut self, actions: Vec<Action>) -> String {
        let mut output = String::new();
        for action in actions {
            let line = match action {
                Action::Propose {
                    proposal,
                    op,
                    request_id,
                } => {
                    let line = format!(
                        "propose #{} {}{}",
                        proposal.0,
                        describe(&op),
                        request_id
                            .map(|r| format!(" request={r}"))
                            .unwrap_or_default()
                    );
                    self.log.push_back((proposal, op));
                    line
                }
                Action::ToWorker { link, message } => {
                    format!("link{} ← {}", link.0, worker_message(&message))
                }
                Action::ToApp { link, message } => {
                    format!("link{} ← {}", link.0, app_message(&message))
                }
                Action::Close { link, reason } => format!("close link{}: {reason:?}", link.0),
            };
            output.push_str(&line);
            output.push('\n');
        }
        output
    }

    fn dump(&self) -> String {
        let mut output = String::new();
        let elapsed = self.now - self.start;
        let _ = writeln!(output, "t={}ms", elapsed.as_millis());
        for worker in self.state.workers().values() {
            let draining = if self.state.draining().contains_key(&worker.id) {
                " draining"
            } else {
                ""
            };
            let _ = writeln!(
                output,
                "worker {} {:?}{draining} cores {}/{}",
                worker.id, worker.state, worker.used.cores, worker.capacity.cores
            );
        }
        for app in self.state.apps().values() {
            let _ = writeln!(output, "app {} {:?}", app.id, app.state);
            for e in app.executors.values() {
                let _ = writeln!(
                    output,
                    "  {}/{} on {} {:?}",
                    app.id, e.id, e.worker, e.state
                );
            }
        }
        for app in self.state.completed_apps() {
            let _ = writeln!(output, "app {} {:?} (ended)", app.id, app.state);
        }
        for (process, worker, _) in self.state.stopping() {
            let process = match process {
                Stopped::Executor(app, executor) => format!("{app}/{executor}"),
                Stopped::Driver(driver) => driver.to_string(),
            };
            let _ = writeln!(output, "stopping {process} on {worker}");
        }
        for driver in self.state.drivers().values() {
            let worker = driver.worker.as_ref().map_or("-", |w| w.as_ref());
            let _ = writeln!(
                output,
                "driver {} {:?} on {worker}",
                driver.id, driver.state
            );
        }
        for driver in self.state.completed_drivers() {
            let _ = writeln!(
                output,
                "driver {} {:?} exit {:?} (ended)",
                driver.id, driver.state, driver.exit_code
            );
        }
        for kept in self.state.reservations() {
            let _ = writeln!(
                output,
                "kept {} cores on {} for {}",
                kept.resources.cores, kept.worker, kept.owner
            );
        }
        output
    }
}

fn worker_message(message: &ToWorker) -> String {
    match message {
        ToWorker::LaunchExecutor(app, id) => format!("launch {app}/{id}"),
        ToWorker::LaunchDriver(driver) => format!("launch {driver}"),
        ToWorker::KillExecutor(app, id, None) => format!("kill {app}/{id}"),
        ToWorker::KillExecutor(app, id, Some(grace)) => {
            format!("kill {app}/{id} grace={}s", grace.as_secs_f64())
        }
        ToWorker::KillDriver(driver) => format!("kill {driver}"),
        ToWorker::Acknowledged(seqs) => format!("ack {seqs:?}"),
        ToWorker::AppsEnded(apps) => {
            let apps: Vec<String> = apps.iter().map(ToString::to_string).collect();
            format!("ended {}", apps.join(" "))
        }
        other => format!("{other:?}"),
    }
}

fn app_message(message: &ToApp) -> String {
    match message {
        ToApp::Executor(e) => format!(
            "executor {} on {} {:?}{}",
            e.id,
            e.worker,
            e.state,
            e.exit_code
                .map(|c| format!(" exit {c}"))
                .unwrap_or_default()
        ),
        ToApp::Registered(app) => format!("registered {app}"),
        ToApp::Preempted(id, grace) => format!("preempted {id} grace={}s", grace.as_secs_f64()),
        ToApp::Draining(id, kill_after) => match kill_after {
            Some(after) => format!("draining {id} kill_after={}s", after.as_secs_f64()),
            None => format!("draining {id}"),
        },
        ToApp::ProfileRefused(id, reason) => format!("profile {id} refused: {reason}"),
        ToApp::Ended(state) => format!("ended {state:?}"),
        ToApp::HeartbeatAck => "HeartbeatAck".into(),
    }
}

/// A short description of a proposed op.
fn describe(op: &Op) -> String {
    match op {
        Op::RegisterWorker(op) => format!("RegisterWorker {}", op.id),
        Op::WorkerLost(op) => format!("WorkerLost {} ({})", op.id, op.reason),
        Op::DecommissionWorker(op) => format!("DecommissionWorker {}", op.id),
        Op::ExecutorStateChanged(op) => format!(
            "Executor {}/{} {:?}{}",
            op.app,
            op.executor,
            op.state,
            op.exit_code
                .map(|c| format!(" exit {c}"))
                .unwrap_or_default()
        ),
        Op::DriverStateChanged(op) => format!(
            "Driver {} {:?}{}",
            op.driver,
            op.state,
            op.exit_code
                .map(|c| format!(" exit {c}"))
                .unwrap_or_default()
        ),
        Op::ApplyPlan(plan) => {
            let grants = plan.executors.iter().map(|grant| (grant, 0));
            describe_plan(&plan.drivers, grants)
        }
        Op::ApplyPlanWithProfiles(plan) => {
            let grants = plan.executors.iter().map(|g| (&g.grant, g.profile));
            describe_plan(&plan.drivers, grants)
        }
        Op::SetProfileLimit(op) => format!(
            "SetProfileLimit {} profile {}: {}",
            op.app, op.id, op.profile.executor_limit
        ),
        Op::AppFinished(op) => format!("AppFinished {} {:?}", op.id, op.state),
        Op::By(by) => format!("By {} ({})", by.user, describe(&by.op)),
        Op::SetExecutorLimit(op) => match op.limit {
            Some(limit) => format!("SetExecutorLimit {} {limit}", op.app),
            None => format!("SetExecutorLimit {} none", op.app),
        },
        Op::KillExecutors(op) => {
            let executors: Vec<String> = op.executors.iter().map(ToString::to_string).collect();
            format!("KillExecutors {} [{}]", op.app, executors.join(", "))
        }
        Op::GrantReservations(op) => {
            let owners: Vec<String> = op.owners.iter().map(ToString::to_string).collect();
            format!("GrantReservations [{}]", owners.join(", "))
        }
        Op::Preempt(preempt)
        | Op::PreemptForGuarantees(preempt)
        | Op::PreemptWithinQueue(PreemptWithinQueue { preempt, .. }) => {
            let name = match op {
                Op::Preempt(_) => "Preempt",
                Op::PreemptForGuarantees(_) => "PreemptForGuarantees",
                _ => "PreemptWithinQueue",
            };
            let op = preempt;
            let victims = op.victims.iter().map(|(app, e)| format!("{app}/{e}"));
            let kept = op.reservations.iter().map(|r| {
                format!(
                    "{} cores on {} for {}",
                    r.resources.cores, r.worker, r.owner
                )
            });
            format!(
                "{name} [{}] keep [{}] for {} ms",
                victims.collect::<Vec<_>>().join(", "),
                kept.collect::<Vec<_>>().join(", "),
                op.grace_ms
            )
        }
        other => format!("{other:?}"),
    }
}

fn register_op(id: &str, args: &mut Args) -> Result<RegisterWorker, Box<dyn Error>> {
    let id = WorkerId::from(id);
    Ok(RegisterWorker {
        host: id.to_string(),
        address: id.to_string(),
        id,
        resources: Resources::new(args.number("cores", 4)?, args.number("mem", 4096)?)
            .with_custom(gpus(args)?),
        fence_grace_ms: args.optional("fence_grace_ms")?,
    })
}

/// `gpu=N`, if given, as custom resources.
fn gpus(args: &mut Args) -> Result<ResourceAmounts, Box<dyn Error>> {
    Ok(args
        .optional::<u32>("gpu")?
        .map(|gpus| ResourceAmounts::from([("gpu".to_owned(), gpus)]))
        .unwrap_or_default())
}

/// `d3` → the full driver id, `a0` → the full app id; anything else unchanged.
fn expand(short: &str) -> String {
    let number = |rest: &str| rest.parse::<u32>().ok();
    match short.split_at_checked(1) {
        Some(("d", rest)) if number(rest).is_some() => {
            format!("{DRIVER}{:04}", number(rest).unwrap())
        }
        Some(("a", rest)) if number(rest).is_some() => format!("{APP}{:04}", number(rest).unwrap()),
        _ => short.to_owned(),
    }
}

/// The reverse of [`expand`], over a whole text.
fn shorten(text: &str) -> String {
    let mut output = text.to_owned();
    for (long, short) in [(DRIVER, "d"), (APP, "a")] {
        while let Some(at) = output.find(long) {
            let digits = &output[at + long.len()..at + long.len() + 4];
            let number: u32 = digits.parse().expect("four digits");
            output.replace_range(at..at + long.len() + 4, &format!("{short}{number}"));
        }
    }
    output
}

/// `d3` or `a0/1`.
fn parse_process(text: &str) -> Result<ProcessKey, Box<dyn Error>> {
    Ok(match text.split_once('/') {
        Some((app, executor)) => {
            ProcessKey::Executor(AppId::from(expand(app)), ExecutorId(executor.parse()?))
        }
        None => ProcessKey::Driver(DriverId(expand(text))),
    })
}

/// `COUNT@LAST_EXIT[@IN_MS]`: restarted COUNT times, the last run exited LAST_EXIT, and it
/// starts again IN_MS after the report (running again without it).
fn parse_restarts(text: &str) -> Result<Restarts<Duration>, Box<dyn Error>> {
    let parts: Vec<&str> = text.split('@').collect();
    let (count, last, wait) = match parts.as_slice() {
        [count, last] => (count, last, None),
        [count, last, wait] => (count, last, Some(Duration::from_millis(wait.parse()?))),
        _ => return Err(format!("bad restarts {text}").into()),
    };
    Ok(Restarts {
        count: count.parse()?,
        last_exit_code: Some(last.parse()?),
        starts_again: wait,
    })
}

/// `SEQ@PROCESS@STATE[@CODE]`.
fn parse_report(text: &str) -> Result<Report, Box<dyn Error>> {
    let parts: Vec<&str> = text.split('@').collect();
    let (seq, process, state, code) = match parts.as_slice() {
        [seq, process, state] => (seq, process, state, None),
        [seq, process, state, code] => (seq, process, state, Some(code.parse()?)),
        _ => return Err(format!("bad report {text}").into()),
    };
    Ok(Report {
        seq: seq.parse()?,
        update: update(process, state, code, 0)?,
    })
}

fn update(
    process: &str,
    state: &str,
    code: Option<i32>,
    pid: u32,
) -> Result<Update, Box<dyn Error>> {
    Ok(match parse_process(process)? {
        ProcessKey::Executor(app, executor) => Update::Executor {
            app,
            executor,
            state: match state {
                "RUNNING" => ExecutorState::Running,
                "EXITED" => ExecutorState::Exited,
                "FAILED" => ExecutorState::Failed,
                "KILLED" => ExecutorState::Killed,
                other => return Err(format!("unknown executor state {other}").into()),
            },
            exit_code: code,
            pid,
        },
        ProcessKey::Driver(driver) => Update::Driver {
            driver,
            state: match state {
                "RUNNING" => DriverState::Running,
                "FINISHED" => DriverState::Finished,
                "FAILED" => DriverState::Failed,
                "KILLED" => DriverState::Killed,
                "ERROR" => DriverState::Error,
                other => return Err(format!("unknown driver state {other}").into()),
            },
            exit_code: code,
            pid,
            restarts: None,
        },
    })
}

/// A command's arguments, consumed by name; anything left over is an error.
struct Args<'a> {
    args: Vec<&'a Argument>,
}

impl<'a> Args<'a> {
    fn new(command: &'a Command) -> Self {
        Self {
            args: command.args.iter().collect(),
        }
    }

    fn take(&mut self, key: &str) -> Option<&'a str> {
        let at = self
            .args
            .iter()
            .position(|a| matches!(a, Argument::KeyValue(k, _) if k == key))?;
        match self.args.remove(at) {
            Argument::KeyValue(_, value) => Some(value),
            _ => None,
        }
    }

    fn key(&mut self, key: &str) -> Result<&'a str, Box<dyn Error>> {
        self.take(key)
            .ok_or_else(|| format!("missing {key}=").into())
    }

    fn positional_or_empty(&mut self) -> &'a str {
        let at = self
            .args
            .iter()
            .position(|a| matches!(a, Argument::Positional(_)));
        match at.map(|at| self.args.remove(at)) {
            Some(Argument::Positional(value)) => value,
            _ => "",
        }
    }

    fn positional(&mut self) -> Result<&'a str, Box<dyn Error>> {
        match self.positional_or_empty() {
            "" => Err("missing argument".into()),
            value => Ok(value),
        }
    }

    fn number<T: std::str::FromStr>(&mut self, key: &str, default: T) -> Result<T, Box<dyn Error>>
    where
        T::Err: Error + 'static,
    {
        Ok(self.optional(key)?.unwrap_or(default))
    }

    fn optional<T: std::str::FromStr>(&mut self, key: &str) -> Result<Option<T>, Box<dyn Error>>
    where
        T::Err: Error + 'static,
    {
        Ok(match self.take(key) {
            Some(value) => Some(value.parse()?),
            None => None,
        })
    }

    fn flag(&mut self, key: &str) -> Result<bool, Box<dyn Error>> {
        self.number(key, false)
    }

    fn link(&mut self) -> Result<LinkId, Box<dyn Error>> {
        Ok(LinkId(self.key("link")?.parse()?))
    }

    fn process(&mut self) -> Result<Option<ProcessKey>, Box<dyn Error>> {
        Ok(Some(parse_process(self.positional()?)?))
    }

    /// Every value of a repeated `key=`.
    fn list(&mut self, key: &str) -> Vec<&'a str> {
        std::iter::from_fn(|| self.take(key)).collect()
    }

    fn done(&self) -> Result<(), Box<dyn Error>> {
        match self.args.first() {
            Some(arg) => Err(format!("unexpected argument {arg}").into()),
            None => Ok(()),
        }
    }
}

/// A plan as `ApplyPlan [DRIVER on WORKER, APP CORES cores on WORKER (profile N), ...]`: one
/// entry per executor, however the plan groups them.
fn describe_plan<'g>(
    drivers: &[muster_core::plan::DriverLaunch],
    grants: impl Iterator<Item = (&'g Grant, u32)>,
) -> String {
    let drivers = drivers
        .iter()
        .map(|d| format!("{} on {}", d.driver, d.worker));
    let executors = grants.flat_map(|(e, profile)| {
        let profile = match profile {
            0 => String::new(),
            profile => format!(" (profile {profile})"),
        };
        let executor = format!(
            "{} {} cores on {}{profile}",
            e.app, e.resources.cores, e.worker
        );
        std::iter::repeat_n(executor, e.count as usize)
    });
    format!(
        "ApplyPlan [{}]",
        drivers.chain(executors).collect::<Vec<_>>().join(", ")
    )
}
