//! The simulation: Muster's leader ([`Leader`]: its steps, ticks and scheduling passes) and
//! replicated state ([`ClusterState::apply`], over a log kept in memory) driven in virtual
//! time by an agenda of what happens next.
//!
//! Everything a real session would do with the network, Raft and processes happens here as
//! an entry of the agenda, at the virtual time the cluster file's timings give: a proposal
//! commits `commit_ms` after it is made (in the order made, as Raft's), a launch is reported
//! started `launch_ms` later, a kill ended `stop_ms` later. Workers heartbeat, report with
//! numbers and re-send what is unacknowledged when they register again; applications attach,
//! run their tasks on their executors and finish. Faults go through the same paths a real
//! cluster's take: a lost worker falls silent until the leader loses it, a new leader starts
//! from the state and recovers.
//!
//! Entries of the agenda at the same time run in the order they were added, so one trace,
//! one cluster file and one seed always give the same run.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

use muster_core::ids::{AppId, DriverId, ExecutorId, Term, Timestamp, WorkerId};
use muster_core::model::GangRequest;
use muster_core::resources::Resources;
use muster_core::restarts::Backoff;
use muster_leader::{
    Action, AppRequest, Close, Event, Leader, LinkId, ProcessKey, ProposalId, Registration, ToApp,
    ToWorker, Update,
};
use muster_state::commands::{
    DrainWorker, RaiseLogFormat, SubmitApp, SubmitDriver, SubmitGangDriver, submit_app_op,
};
use muster_state::model::{AppDescription, DriverDescription, DriverState, ExecutorState};
use muster_state::version::LogFormat;
use muster_state::{ClusterState, Command, Op, Response};

use crate::cluster::Cluster;
use crate::report::Recorder;
use crate::trace::{AppEntry, DriverEntry, Entry};
use crate::world::{App, Process, Slots, Worker, driver_entry};

/// What happens next, at a virtual time.
#[derive(Debug)]
enum Happening {
    /// Trace entry `i` comes due.
    Entry(usize),
    /// A client's write of trace entry `i` (a submission, a drain) commits.
    ClientWrite(usize),
    /// The oldest proposal of the leader of this term commits.
    Commit(Term),
    /// The leader is ticked.
    Tick,
    /// The leader runs the pass it wants.
    Pass,
    /// What the cluster holds is sampled.
    Sample,
    /// A worker heartbeats, unless its machine failed since this was planned (it counts
    /// its failures).
    Heartbeat(WorkerId, u64),
    /// A worker registers with the leader (again).
    Register(WorkerId),
    /// An application's client attaches (again).
    Attach(AppId),
    /// A launched process started.
    Started(WorkerId, ProcessKey, u64),
    /// A process told to stop ended.
    Stopped(WorkerId, ProcessKey, u64),
    /// A driver's run is done: it exits.
    DriverDone(WorkerId, DriverId, u64),
    /// A supervised driver's worker starts it again after its back-off.
    DriverRestart(WorkerId, DriverId, u64),
    /// A task on an executor (of this serial) is done.
    TaskDone(AppId, ExecutorId, u64),
    /// A message reaches a worker.
    ToWorker(LinkId, ToWorker),
    /// A message reaches an application's client.
    ToApp(LinkId, ToApp),
    /// A worker's machine comes back, empty.
    WorkerBack(WorkerId),
    /// A new leader is elected.
    Elected,
}

/// The agenda: happenings by virtual time (ms), in the order added within a time. The heap
/// orders small keys; the happenings wait in slots of their own. Two kinds come due in the
/// order they are added: heartbeats, the bulk of a run at scale (each a fixed interval after
/// the last), and the trace's entries (in time order). Each waits in a lane of its own, and
/// each next happening is the earliest of the heap's first and the lanes'.
#[derive(Default)]
struct Agenda {
    /// When each waiting happening is due, the order it was added in, and its slot.
    due: BinaryHeap<Reverse<(u64, u64, usize)>>,
    slots: Vec<Option<Happening>>,
    /// Slots whose happenings have happened.
    free: Vec<usize>,
    /// Per [`Lane`], happenings added no earlier than the last of them, with when and the
    /// order added.
    lanes: [VecDeque<(u64, u64, Happening)>; 2],
    added: u64,
}

/// A kind of happening that mostly comes due in the order it is added.
#[derive(Clone, Copy)]
enum Lane {
    Heartbeats,
    Trace,
}

impl Agenda {
    fn at(&mut self, time: u64, happening: Happening) {
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = Some(happening);
                slot
            }
            None => {
                self.slots.push(Some(happening));
                self.slots.len() - 1
            }
        };
        self.due.push(Reverse((time, self.added, slot)));
        self.added += 1;
    }

    /// As [`Agenda::at`], for a happening that mostly comes due after every one added to
    /// `lane` before it: queued there, not heaped, when it does.
    fn at_in_order(&mut self, lane: Lane, time: u64, happening: Happening) {
        let queue = &mut self.lanes[lane as usize];
        if queue.back().is_some_and(|&(last, _, _)| time < last) {
            return self.at(time, happening);
        }
        queue.push_back((time, self.added, happening));
        self.added += 1;
    }

    fn next(&mut self) -> Option<(u64, Happening)> {
        let heaped = self
            .due
            .peek()
            .map(|&Reverse((time, added, _))| (time, added));
        let first_queued = self
            .lanes
            .iter_mut()
            .filter_map(|queue| {
                let &(time, added, _) = queue.front()?;
                Some(((time, added), queue))
            })
            .min_by_key(|&(key, _)| key);
        if let Some((queued, queue)) = first_queued
            && heaped.is_none_or(|heaped| queued < heaped)
        {
            let (time, _, happening) = queue.pop_front()?;
            return Some((time, happening));
        }
        let Reverse((time, _, slot)) = self.due.pop()?;
        self.free.push(slot);
        let happening = self.slots[slot]
            .take()
            .expect("a due slot holds its happening");
        Some((time, happening))
    }
}

/// Who is at the other end of a stream.
#[derive(Clone, Debug)]
enum Peer {
    Worker(WorkerId),
    App(AppId),
}

/// How a run goes beyond its cluster file and trace.
#[derive(Clone, Debug)]
pub struct Options {
    /// Seeds the spread of process start times.
    pub seed: u64,
    /// Stop at this virtual time (ms) even if work remains; unset: a day after the trace's
    /// last entry.
    pub until_ms: Option<u64>,
    /// Sample what the cluster holds this often (ms).
    pub sample_ms: u64,
    /// Check the replicated state's invariants after every entry (slow at scale).
    pub check_invariants: bool,
}

/// One simulated run.
pub struct Simulation<'a> {
    cluster: &'a Cluster,
    trace: &'a [Entry],
    options: Options,
    /// Virtual time, in ms from the start.
    now: u64,
    /// The real instant virtual time 0 stands for; the leader measures time in instants.
    origin: Instant,
    agenda: Agenda,
    state: ClusterState,
    leader: Option<Leader>,
    term: Term,
    /// Proposals made and not yet committed, oldest first.
    log: VecDeque<(ProposalId, Command)>,
    pass_due: bool,
    links: BTreeMap<LinkId, Peer>,
    next_link: u64,
    workers: BTreeMap<WorkerId, Worker>,
    apps: BTreeMap<AppId, App>,
    /// Which worker runs each process: a process launched while another worker still runs
    /// it runs twice.
    placed: BTreeMap<ProcessKey, WorkerId>,
    next_pid: u32,
    next_serial: u64,
    /// The failed runs of each driver of the trace so far, by entry.
    failed_runs: BTreeMap<usize, u32>,
    /// The drivers that registered their applications.
    driver_apps: BTreeSet<DriverId>,
    /// Trace entries of work not ended yet.
    unfinished: usize,
    random: u64,
    recorder: Recorder,
}

impl<'a> Simulation<'a> {
    /// A cluster of `cluster`'s workers, about to run `trace` (in time order).
    pub fn new(cluster: &'a Cluster, trace: &'a [Entry], options: Options) -> Self {
        let mut state = ClusterState::new(cluster.state.clone());
        // Every master of a simulated cluster runs this build.
        let raise = Op::RaiseLogFormat(RaiseLogFormat {
            to: LogFormat::NEWEST,
        });
        state
            .apply(&Command {
                at: Timestamp(0),
                request_id: None,
                term: None,
                op: raise,
            })
            .expect("a new state takes the newest log format");
        let workers = cluster
            .workers
            .iter()
            .map(|w| (w.id.clone(), Worker::new(w.clone())))
            .collect();
        let unfinished = trace
            .iter()
            .filter(|e| matches!(e, Entry::App(_) | Entry::Driver(_)))
            .count();
        Self {
            cluster,
            trace,
            recorder: Recorder::new(trace, cluster),
            random: options.seed ^ 0x5DEE_CE66_D1CE_4E5B,
            options,
            now: 0,
            origin: Instant::now(),
            agenda: Agenda::default(),
            state,
            leader: None,
            term: Term(0),
            log: VecDeque::new(),
            pass_due: false,
            links: BTreeMap::new(),
            next_link: 0,
            workers,
            apps: BTreeMap::new(),
            placed: BTreeMap::new(),
            next_pid: 1000,
            next_serial: 0,
            failed_runs: BTreeMap::new(),
            driver_apps: BTreeSet::new(),
            unfinished,
        }
    }

    /// Runs until every app and driver of the trace has ended (or the time limit), calling
    /// `progress` with the virtual time now and then; returns what was recorded.
    pub fn run(mut self, progress: &mut dyn FnMut(u64)) -> Recorder {
        let last = self
            .trace
            .last()
            .map_or(0, |entry| seconds_to_ms(entry.at_s()));
        let until = self.options.until_ms.unwrap_or(last + 24 * 3_600_000);
        self.agenda.at(0, Happening::Elected);
        let heartbeat = millis(self.cluster.heartbeat());
        let count = self.workers.len() as u64;
        for (i, id) in self.workers.keys().enumerate() {
            // Spread over one interval, as workers started at different moments.
            let offset = heartbeat * i as u64 / count.max(1);
            self.agenda.at(0, Happening::Register(id.clone()));
            self.agenda.at_in_order(
                Lane::Heartbeats,
                offset,
                Happening::Heartbeat(id.clone(), 0),
            );
        }
        for i in 0..self.trace.len() {
            let at = seconds_to_ms(self.trace[i].at_s());
            self.agenda
                .at_in_order(Lane::Trace, at, Happening::Entry(i));
        }
        self.agenda.at(0, Happening::Tick);
        self.agenda.at(0, Happening::Sample);
        let mut reported = 0;
        while let Some((time, happening)) = self.agenda.next() {
            if time > until || (self.unfinished == 0 && self.all_entries_due(time)) {
                break;
            }
            self.now = time;
            if time >= reported + 60_000 {
                reported = time;
                progress(time);
            }
            self.happen(happening);
        }
        self.recorder.end(self.now, &self.state);
        self.recorder
    }

    /// Whether every trace entry has come due by `time`.
    fn all_entries_due(&self, time: u64) -> bool {
        self.trace
            .last()
            .is_none_or(|entry| seconds_to_ms(entry.at_s()) <= time)
    }

    fn happen(&mut self, happening: Happening) {
        match happening {
            Happening::Entry(i) => self.entry(i),
            Happening::ClientWrite(i) => self.client_write(i),
            Happening::Commit(term) => self.commit(term),
            Happening::Tick => {
                self.agenda
                    .at(self.now + self.cluster.timings.tick_ms, Happening::Tick);
                self.timed(Leader::tick);
            }
            Happening::Pass => {
                self.pass_due = false;
                self.timed(Leader::pass);
            }
            Happening::Sample => {
                self.agenda
                    .at(self.now + self.options.sample_ms.max(1), Happening::Sample);
                let waiting = self.leader.as_ref().map(Leader::waiting_by_reason);
                self.recorder.sample(self.now, &self.state, waiting);
            }
            Happening::Heartbeat(id, failures) => self.heartbeat(&id, failures),
            Happening::Register(id) => self.register(&id),
            Happening::Attach(id) => self.attach(&id),
            Happening::Started(worker, key, serial) => self.started(&worker, key, serial),
            Happening::Stopped(worker, key, serial) => self.stopped(&worker, &key, serial),
            Happening::DriverDone(worker, driver, serial) => {
                self.driver_done(&worker, driver, serial);
            }
            Happening::DriverRestart(worker, driver, serial) => {
                self.driver_restart(&worker, driver, serial);
            }
            Happening::TaskDone(app, executor, serial) => self.task_done(&app, executor, serial),
            Happening::ToWorker(link, message) => self.worker_hears(link, message),
            Happening::ToApp(link, message) => self.app_hears(link, message),
            Happening::WorkerBack(id) => {
                if let Some(worker) = self.workers.get_mut(&id)
                    && !worker.up
                {
                    worker.up = true;
                    self.agenda.at(self.now, Happening::Register(id.clone()));
                    let failures = worker.failures;
                    self.agenda.at(self.now, Happening::Heartbeat(id, failures));
                }
            }
            Happening::Elected => self.elected(),
        }
    }

    /// The instant the leader is told for virtual time now.
    fn instant(&self) -> Instant {
        self.origin + Duration::from_millis(self.now)
    }

    /// Runs the leader's `call` (a tick or a pass), timing it when it runs a scheduling
    /// pass.
    fn timed(&mut self, call: fn(&mut Leader, Instant, &ClusterState) -> Vec<Action>) {
        let now = self.instant();
        let Some(leader) = self.leader.as_mut() else {
            return;
        };
        let passes = leader.passes();
        let start = Instant::now();
        let actions = call(leader, now, &self.state);
        if leader.passes() > passes {
            self.recorder.pass(start.elapsed());
        }
        self.carry_out(actions);
    }

    /// Steps the leader with `event`, if there is one.
    fn step(&mut self, event: Event) {
        let now = self.instant();
        let Some(leader) = self.leader.as_mut() else {
            return;
        };
        let actions = leader.step(now, &self.state, event);
        self.carry_out(actions);
        // As the session does: a step that leaves a pass wanted wakes the pass, which runs
        // unless a plan is in flight (its commit is a step, and wakes it again).
        if !self.pass_due && self.leader.as_ref().is_some_and(Leader::wants_pass) {
            self.pass_due = true;
            self.agenda.at(self.now, Happening::Pass);
        }
    }

    fn carry_out(&mut self, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Propose {
                    proposal,
                    op,
                    request_id,
                } => {
                    let command = Command {
                        at: Timestamp(self.now),
                        request_id,
                        term: Some(self.term),
                        op,
                    };
                    self.log.push_back((proposal, command));
                    let at = self.now + self.cluster.timings.commit_ms;
                    self.agenda.at(at, Happening::Commit(self.term));
                }
                // What a simulated worker does nothing on need not wait its turn.
                Action::ToWorker {
                    message: ToWorker::Registered | ToWorker::HeartbeatAck | ToWorker::AppsEnded(_),
                    ..
                } => {}
                Action::ToWorker { link, message } => {
                    self.agenda.at(self.now, Happening::ToWorker(link, message));
                }
                // Nor what a simulated app does nothing on; a preemption is recorded as it
                // commits.
                Action::ToApp {
                    message:
                        ToApp::Registered(_)
                        | ToApp::HeartbeatAck
                        | ToApp::Draining(..)
                        | ToApp::Preempted(..)
                        | ToApp::ProfileRefused(..),
                    ..
                } => {}
                Action::ToApp { link, message } => {
                    self.agenda.at(self.now, Happening::ToApp(link, message));
                }
                Action::Close { link, reason } => self.closed(link, &reason),
            }
        }
    }

    /// The leader closed `link`: its peer reconnects as a real one would.
    fn closed(&mut self, link: LinkId, reason: &Close) {
        match self.links.remove(&link) {
            Some(Peer::Worker(id)) => {
                let worker = self.workers.get_mut(&id).expect("a simulated worker");
                if worker.link == Some(link) {
                    worker.link = None;
                    if matches!(reason, Close::Reregister) {
                        let at = self.now + self.cluster.timings.reconnect_ms;
                        self.agenda.at(at, Happening::Register(id));
                    }
                }
            }
            Some(Peer::App(id)) => {
                if let Some(app) = self.apps.get_mut(&id)
                    && app.link == Some(link)
                {
                    app.link = None;
                }
            }
            None => {}
        }
    }

    fn new_link(&mut self, peer: Peer) -> LinkId {
        let link = LinkId(self.next_link);
        self.next_link += 1;
        self.links.insert(link, peer);
        link
    }

    /// A client write: applied when it commits, at `at`.
    fn write(&mut self, op: Op) -> Result<Response, muster_state::ApplyError> {
        let command = Command {
            at: Timestamp(self.now),
            request_id: None,
            term: None,
            op,
        };
        self.recorder.logged(&command);
        let response = self.state.apply(&command)?;
        self.applied(&command.op, &response);
        Ok(response)
    }

    fn entry(&mut self, i: usize) {
        match &self.trace[i] {
            Entry::App(_) | Entry::Driver(_) | Entry::Drain { .. } => {
                let at = self.now + self.cluster.timings.commit_ms;
                self.agenda.at(at, Happening::ClientWrite(i));
            }
            Entry::LoseWorker { worker, down_s, .. } => {
                let id = WorkerId::from(worker.as_str());
                self.lose_worker(&id);
                if let Some(down) = down_s {
                    let at = self.now + seconds_to_ms(*down);
                    self.agenda.at(at, Happening::WorkerBack(id));
                }
            }
            Entry::LeaderChange { .. } => self.leader_lost(),
        }
    }

    /// Entry `i`'s client write commits, if a leader takes it; otherwise its client tries
    /// again once one may.
    fn client_write(&mut self, i: usize) {
        if self.leader.is_none() {
            let at = self.now + self.cluster.timings.reconnect_ms;
            self.agenda.at(at, Happening::ClientWrite(i));
            return;
        }
        match &self.trace[i] {
            Entry::App(app) => {
                let Some(id) = self.submit_app(i, app, None) else {
                    self.refused(i);
                    return;
                };
                self.recorder.submitted(i, id.as_ref());
                self.attach(&id);
            }
            Entry::Driver(driver) => {
                let desc = DriverDescription {
                    name: driver.name.clone(),
                    queue: driver.queue.clone(),
                    resources: Resources::new(driver.cores, driver.memory_mb),
                    command: "simulated".into(),
                    args: vec![i.to_string()],
                    env: BTreeMap::new(),
                    supervise: driver.supervise,
                };
                let submit = SubmitDriver { desc };
                // A job driver starts beside room for its gang, or for its first executor.
                let gang = driver.app().map(|app| GangRequest {
                    min_executors: app.min_executors.unwrap_or(1),
                    executor_cores: app.executor_cores.unwrap_or(1),
                    executor_memory_mb: app.executor_memory_mb,
                    executor_resources: BTreeMap::new(),
                });
                let op = match gang {
                    Some(gang) => Op::SubmitGangDriver(SubmitGangDriver {
                        driver: submit,
                        gang,
                    }),
                    None => Op::SubmitDriver(submit),
                };
                let Ok(response) = self.write(op) else {
                    self.refused(i);
                    return;
                };
                if let muster_state::Outcome::DriverSubmitted { id } = &response.outcome {
                    self.recorder.submitted(i, &id.0);
                }
                self.step(Event::ClientCommitted {
                    effects: response.effects,
                });
            }
            Entry::Drain {
                worker,
                kill_after_s,
                ..
            } => {
                let kill_after_ms = kill_after_s.map(seconds_to_ms);
                let op = Op::DrainWorker(DrainWorker {
                    id: worker.as_str().into(),
                    kill_after_ms,
                });
                if let Ok(response) = self.write(op) {
                    self.step(Event::ClientCommitted {
                        effects: response.effects,
                    });
                    self.step(Event::WorkerDrained {
                        worker: worker.as_str().into(),
                        kill_after: kill_after_ms.map(Duration::from_millis),
                    });
                }
            }
            Entry::LoseWorker { .. } | Entry::LeaderChange { .. } => {}
        }
    }

    /// Submits `app`, of trace entry `i`, registered by `driver` in cluster mode: its id,
    /// or `None` if refused.
    fn submit_app(
        &mut self,
        i: usize,
        app: &AppEntry,
        driver: Option<(WorkerId, DriverId, u64)>,
    ) -> Option<AppId> {
        let desc = AppDescription {
            name: app.name.clone(),
            user: app.user.clone(),
            queue: app.queue.clone(),
            cores_max: app.cores_max,
            executor_cores: app.executor_cores,
            executor_memory_mb: app.executor_memory_mb,
            executor_resources: BTreeMap::new(),
            command: "simulated".into(),
            args: Vec::new(),
            env: BTreeMap::new(),
        };
        let submit = SubmitApp {
            desc,
            executor_limit: app.executor_limit,
        };
        let driver_id = driver.as_ref().map(|(_, id, _)| id.clone());
        let op = submit_app_op(submit, app.min_executors, driver_id, &self.state);
        let response = self.write(op).ok()?;
        let muster_state::Outcome::AppSubmitted { id } = response.outcome else {
            unreachable!("a submission's outcome names the app");
        };
        self.apps.insert(
            id.clone(),
            App {
                entry: i,
                link: None,
                task_ms: seconds_to_ms(app.task_s).max(1),
                tasks_left: app.tasks,
                executors: BTreeMap::new(),
                done: false,
                driver,
            },
        );
        Some(id)
    }

    /// Entry `i`'s submission was refused: it ends there.
    fn refused(&mut self, i: usize) {
        self.recorder.refused(i);
        self.unfinished -= 1;
    }

    fn commit(&mut self, term: Term) {
        if term != self.term || self.leader.is_none() {
            // Its leader is gone, and its proposals with it.
            return;
        }
        let (proposal, command) = self.log.pop_front().expect("a proposal per commit");
        self.recorder.logged(&command);
        let result = self.state.apply_in_term(term, &command);
        if self.options.check_invariants
            && let Err(broken) = self.state.check_invariants()
        {
            panic!("after {command:?}: {broken}");
        }
        if let Ok(response) = &result {
            self.applied(&command.op, response);
        }
        self.step(Event::Committed { proposal, result });
    }

    /// Records what `op`, applied with `response`, did to the trace's work: the executors
    /// it preempted (whether or not their apps are attached to hear it) and the apps and
    /// drivers it ended.
    fn applied(&mut self, op: &Op, response: &Response) {
        if let (Op::Batch(commands), muster_state::Outcome::Batch(results)) =
            (op, &response.outcome)
        {
            for (command, result) in commands.iter().zip(results) {
                if let Ok(response) = result {
                    self.applied(&command.op, response);
                }
            }
        }
        if let Op::Preempt(preempt) | Op::PreemptForGuarantees(preempt) = op {
            for (app, executor) in &preempt.victims {
                self.recorder.preempted();
                let slots = self
                    .apps
                    .get_mut(app)
                    .and_then(|app| app.executors.get_mut(executor));
                if let Some(slots) = slots {
                    slots.preempted = true;
                }
            }
        }
        for (id, state) in &response.effects.removed_apps {
            if let Some(app) = self.apps.get(id)
                && self.recorder.ended(app.entry, self.now, &state.to_string())
            {
                self.unfinished -= 1;
            }
        }
        for (id, _, state) in &response.effects.ended_drivers {
            let entry = self
                .state
                .known_driver(id)
                .and_then(|d| driver_entry(&d.desc.args));
            if let Some(entry) = entry
                && *state != DriverState::Relaunching
                && self.recorder.ended(entry, self.now, &state.to_string())
            {
                self.unfinished -= 1;
            }
        }
    }

    fn elected(&mut self) {
        self.term = Term(self.term.0 + 1);
        self.leader = Some(Leader::new(
            self.term,
            self.cluster.leader.clone(),
            self.instant(),
        ));
        self.step(Event::StateRead);
        if self.term.0 > 1 {
            let at = self.now + self.cluster.timings.reconnect_ms;
            let workers: Vec<WorkerId> = self.workers.keys().cloned().collect();
            for id in workers {
                self.agenda.at(at, Happening::Register(id));
            }
            let apps: Vec<AppId> = self.apps.keys().cloned().collect();
            for id in apps {
                self.agenda.at(at, Happening::Attach(id));
            }
        }
    }

    /// The leader fails: its streams break, its proposals in flight are lost, and another
    /// is elected.
    fn leader_lost(&mut self) {
        if self.leader.take().is_none() {
            return;
        }
        self.recorder.leader_changed();
        self.log.clear();
        self.links.clear();
        self.pass_due = false;
        for worker in self.workers.values_mut() {
            worker.link = None;
        }
        for app in self.apps.values_mut() {
            app.link = None;
        }
        let at = self.now + self.cluster.timings.election_ms;
        self.agenda.at(at, Happening::Elected);
    }

    fn register(&mut self, id: &WorkerId) {
        let Some(worker) = self.workers.get(id) else {
            return;
        };
        if !worker.up || self.leader.is_none() {
            return;
        }
        if let Some(old) = worker.link {
            self.links.remove(&old);
            self.step(Event::LinkClosed { link: old });
        }
        let link = self.new_link(Peer::Worker(id.clone()));
        let worker = self.workers.get_mut(id).expect("a simulated worker");
        worker.link = Some(link);
        let registration = Registration {
            worker: worker.registration.clone(),
            addresses: Default::default(),
            running: worker.running(self.now),
            reports: worker.unacked.values().cloned().collect(),
            build: None,
            shuffle_service: None,
            spark_home: None,
        };
        self.step(Event::WorkerAttached { link, registration });
    }

    fn heartbeat(&mut self, id: &WorkerId, failures: u64) {
        let Some(worker) = self.workers.get(id) else {
            return;
        };
        if !worker.up || worker.failures != failures {
            return;
        }
        let at = self.now + millis(self.cluster.heartbeat()).max(1);
        self.agenda.at_in_order(
            Lane::Heartbeats,
            at,
            Happening::Heartbeat(id.clone(), failures),
        );
        if let Some(link) = worker.link {
            self.step(Event::WorkerHeartbeat {
                link,
                usage: Vec::new(),
                shuffle_service: None,
                apps_with_data: Vec::new(),
            });
        }
    }

    fn lose_worker(&mut self, id: &WorkerId) {
        let Some(worker) = self.workers.get_mut(id) else {
            return;
        };
        if !worker.up {
            return;
        }
        self.recorder.worker_lost();
        let link = worker.link;
        for key in worker.fail() {
            self.placed.remove(&key);
            // Its executors stop running their tasks with it.
            if let ProcessKey::Executor(app_id, executor) = key
                && let Some(app) = self.apps.get_mut(&app_id)
            {
                let (lost, _) = app.remove(executor, self.now);
                self.recorder.lost(lost, false);
                self.run_tasks(&app_id);
            }
        }
        if let Some(link) = link {
            self.links.remove(&link);
            self.step(Event::LinkClosed { link });
        }
    }

    /// Worker `id` reports `update`, now or when it next registers.
    fn report(&mut self, id: &WorkerId, update: Update) {
        let worker = self.workers.get_mut(id).expect("a simulated worker");
        let report = worker.report(update);
        if let Some(link) = worker.link {
            self.step(Event::WorkerReport { link, report });
        }
    }

    fn worker_hears(&mut self, link: LinkId, message: ToWorker) {
        let Some(Peer::Worker(id)) = self.links.get(&link).cloned() else {
            return;
        };
        let worker = self.workers.get_mut(&id).expect("a simulated worker");
        match message {
            ToWorker::Registered | ToWorker::HeartbeatAck | ToWorker::AppsEnded(_) => {
                unreachable!("dropped when sent")
            }
            ToWorker::Acknowledged(seqs) => {
                for seq in seqs {
                    worker.unacked.remove(&seq);
                }
            }
            ToWorker::LaunchExecutor(app, executor) => {
                self.launch(&id, ProcessKey::Executor(app, executor));
            }
            ToWorker::LaunchDriver(driver) => self.launch(&id, ProcessKey::Driver(driver)),
            ToWorker::KillExecutor(app, executor, _) => {
                self.stop(&id, ProcessKey::Executor(app, executor));
            }
            ToWorker::KillDriver(driver) => self.stop(&id, ProcessKey::Driver(driver)),
        }
    }

    fn launch(&mut self, id: &WorkerId, key: ProcessKey) {
        let worker = self.workers.get_mut(id).expect("a simulated worker");
        if worker.processes.contains_key(&key) {
            return;
        }
        let placed = match &key {
            ProcessKey::Executor(app, executor) => self
                .state
                .apps()
                .get(app)
                .and_then(|a| a.executors.get(executor))
                .map(|e| &e.resources),
            ProcessKey::Driver(driver) => {
                self.state.drivers().get(driver).map(|d| &d.desc.resources)
            }
        };
        let holds = placed.map_or((0, 0), |r| (r.cores, r.memory_mb));
        // What its worker's processes hold, those told to stop and not yet ended included,
        // with it: never more than the worker has.
        let (cores, memory_mb) = worker
            .processes
            .values()
            .fold(holds, |(c, m), p| (c + p.holds.0, m + p.holds.1));
        let has = &worker.registration.resources;
        if cores > has.cores || memory_mb > has.memory_mb {
            self.recorder.overcommitted();
        }
        let process = Process {
            pid: self.next_pid,
            serial: self.next_serial,
            stopping: false,
            holds,
            started_ms: self.now,
            restarts: 0,
            starts_again_ms: None,
            backoff: Backoff::default(),
        };
        self.next_pid += 1;
        self.next_serial += 1;
        worker.processes.insert(key.clone(), process);
        if let Some(other) = self.placed.insert(key.clone(), id.clone())
            && other != *id
        {
            self.recorder.ran_twice();
        }
        let at = self.now + self.spread(self.cluster.timings.launch_ms);
        self.agenda
            .at(at, Happening::Started(id.clone(), key, process.serial));
    }

    fn stop(&mut self, id: &WorkerId, key: ProcessKey) {
        let worker = self.workers.get_mut(id).expect("a simulated worker");
        let Some(process) = worker.processes.get_mut(&key) else {
            return;
        };
        if let (Some(_), ProcessKey::Driver(driver)) = (process.starts_again_ms, &key) {
            // A supervised driver waiting to start again has no process: it ends at once.
            let update = Update::Driver {
                driver: driver.clone(),
                state: DriverState::Killed,
                exit_code: None,
                pid: 0,
                restarts: None,
            };
            worker.processes.remove(&key);
            self.placed.remove(&key);
            self.report(id, update);
            return;
        }
        if !process.stopping {
            process.stopping = true;
            let at = self.now + self.cluster.timings.stop_ms;
            self.agenda
                .at(at, Happening::Stopped(id.clone(), key, process.serial));
        }
    }

    /// `ms`, spread by a quarter either way: processes do not all start equally fast.
    fn spread(&mut self, ms: u64) -> u64 {
        self.random = splitmix(self.random);
        let quarter = ms / 4;
        ms - quarter + self.random % (2 * quarter + 1)
    }

    /// A launched process started (unless it was told to stop, or its worker failed).
    fn started(&mut self, id: &WorkerId, key: ProcessKey, serial: u64) {
        let worker = self.workers.get_mut(id).expect("a simulated worker");
        let Some(process) = worker.live_process(&key, serial) else {
            return;
        };
        process.started_ms = self.now;
        let process = *process;
        let update = match &key {
            ProcessKey::Executor(app, executor) => Update::Executor {
                app: app.clone(),
                executor: *executor,
                state: ExecutorState::Running,
                exit_code: None,
                pid: process.pid,
            },
            ProcessKey::Driver(driver) => {
                if let Some((entry, spec)) = self.driver_spec(driver) {
                    let at = self.now + seconds_to_ms(spec.duration_s);
                    self.agenda.at(
                        at,
                        Happening::DriverDone(id.clone(), driver.clone(), serial),
                    );
                    self.recorder.started(entry, self.now);
                }
                Update::Driver {
                    driver: driver.clone(),
                    state: DriverState::Running,
                    exit_code: None,
                    pid: process.pid,
                    restarts: None,
                }
            }
        };
        self.report(id, update);
    }

    /// A process told to stop ended.
    fn stopped(&mut self, id: &WorkerId, key: &ProcessKey, serial: u64) {
        let worker = self.workers.get_mut(id).expect("a simulated worker");
        if worker.processes.get(key).is_none_or(|p| p.serial != serial) {
            return;
        }
        let process = worker.processes.remove(key).expect("checked");
        self.placed.remove(key);
        let update = match key {
            ProcessKey::Executor(app, executor) => Update::Executor {
                app: app.clone(),
                executor: *executor,
                state: ExecutorState::Killed,
                exit_code: None,
                pid: process.pid,
            },
            ProcessKey::Driver(driver) => Update::Driver {
                driver: driver.clone(),
                state: DriverState::Killed,
                exit_code: None,
                pid: process.pid,
                restarts: None,
            },
        };
        self.report(id, update);
    }

    /// The trace entry of driver `id` while the log has it, with its place in the trace.
    fn driver_spec(&self, id: &DriverId) -> Option<(usize, &'a DriverEntry)> {
        let entry = driver_entry(&self.state.drivers().get(id)?.desc.args)?;
        match &self.trace[entry] {
            Entry::Driver(spec) => Some((entry, spec)),
            _ => None,
        }
    }

    /// A driver's run is done: it finishes, or, while its trace entry has failures left, it
    /// fails, and a supervised one waits its back-off to start again as a real worker has it.
    fn driver_done(&mut self, id: &WorkerId, driver: DriverId, serial: u64) {
        let spec = self.driver_spec(&driver);
        // A driver that runs an application registers it first, and ends once it has.
        let mut refused = false;
        if let Some((entry, app)) = spec.and_then(|(entry, spec)| Some((entry, spec.app()?)))
            && !self.driver_apps.contains(&driver)
        {
            let runs = self.workers[id]
                .processes
                .get(&ProcessKey::Driver(driver.clone()));
            if runs.is_none_or(|process| process.serial != serial) {
                return;
            }
            if self.leader.is_none() {
                let at = self.now + self.cluster.timings.reconnect_ms;
                self.agenda
                    .at(at, Happening::DriverDone(id.clone(), driver, serial));
                return;
            }
            self.driver_apps.insert(driver.clone());
            let registered = (id.clone(), driver.clone(), serial);
            match self.submit_app(entry, &app, Some(registered)) {
                Some(app) => {
                    self.attach(&app);
                    return;
                }
                // Its registration was refused: it fails, as Spark's driver does.
                None => refused = true,
            }
        }
        let worker = self.workers.get_mut(id).expect("a simulated worker");
        let key = ProcessKey::Driver(driver.clone());
        let Some(process) = worker.live_process(&key, serial) else {
            return;
        };
        let fails = match spec {
            Some(_) if refused => Some(false),
            Some((entry, spec)) => {
                let failed = self.failed_runs.entry(entry).or_default();
                let fails = *failed < spec.failures;
                if fails {
                    *failed += 1;
                    self.recorder.failed_run(entry);
                }
                fails.then_some(spec.supervise)
            }
            None => None,
        };
        let update = match fails {
            Some(true) => {
                let ran = Duration::from_millis(self.now - process.started_ms);
                let wait = process.backoff.after_failure(ran);
                process.restarts += 1;
                let again = self
                    .now
                    .saturating_add(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
                process.starts_again_ms = Some(again);
                self.agenda.at(
                    again,
                    Happening::DriverRestart(id.clone(), driver.clone(), serial),
                );
                Update::Driver {
                    driver,
                    state: DriverState::Running,
                    exit_code: None,
                    pid: 0,
                    restarts: process.reported_restarts(self.now),
                }
            }
            ended => {
                let process = worker.processes.remove(&key).expect("checked");
                self.placed.remove(&key);
                let (state, code) = match ended {
                    Some(_) => (DriverState::Failed, 1),
                    None => (DriverState::Finished, 0),
                };
                Update::Driver {
                    driver,
                    state,
                    exit_code: Some(code),
                    pid: process.pid,
                    restarts: None,
                }
            }
        };
        self.report(id, update);
    }

    /// A supervised driver's worker starts it again (unless it was told to stop meanwhile,
    /// or its worker failed): a new process, running for the driver's duration again.
    fn driver_restart(&mut self, id: &WorkerId, driver: DriverId, serial: u64) {
        // The log may have ended the driver while its kill is still on the way.
        let Some((_, spec)) = self.driver_spec(&driver) else {
            return;
        };
        let worker = self.workers.get_mut(id).expect("a simulated worker");
        let key = ProcessKey::Driver(driver.clone());
        let Some(process) = worker.live_process(&key, serial) else {
            return;
        };
        process.pid = self.next_pid;
        self.next_pid += 1;
        process.started_ms = self.now;
        process.starts_again_ms = None;
        let (pid, restarts) = (process.pid, process.reported_restarts(self.now));
        self.agenda.at(
            self.now + seconds_to_ms(spec.duration_s),
            Happening::DriverDone(id.clone(), driver.clone(), serial),
        );
        let update = Update::Driver {
            driver,
            state: DriverState::Running,
            exit_code: None,
            pid,
            restarts,
        };
        self.report(id, update);
    }

    fn attach(&mut self, id: &AppId) {
        let Some(app) = self.apps.get(id) else {
            return;
        };
        if self.leader.is_none() || !self.state.apps().contains_key(id) {
            return;
        }
        let believed_live = app.executors.keys().copied().collect();
        let done = app.done;
        let link = self.new_link(Peer::App(id.clone()));
        self.apps.get_mut(id).expect("checked").link = Some(link);
        self.step(Event::AppAttached {
            link,
            app: id.clone(),
            ui_address: String::new(),
            driver: None,
            user: None,
            believed_live,
        });
        if done {
            self.finish(id);
        }
    }

    fn app_hears(&mut self, link: LinkId, message: ToApp) {
        let Some(Peer::App(id)) = self.links.get(&link).cloned() else {
            return;
        };
        let Some(app) = self.apps.get_mut(&id) else {
            return;
        };
        match message {
            ToApp::Registered(_)
            | ToApp::HeartbeatAck
            | ToApp::Draining(..)
            | ToApp::Preempted(..)
            | ToApp::ProfileRefused(..) => unreachable!("dropped when sent"),
            ToApp::Executor(executor) => match executor.state {
                ExecutorState::Launching => {}
                ExecutorState::Running => {
                    // A new leader tells a re-attached client of executors on a machine that
                    // failed and is not yet lost: they run no tasks.
                    let runs = self.workers.get(&executor.worker).is_some_and(|w| {
                        w.processes
                            .contains_key(&ProcessKey::Executor(id.clone(), executor.id))
                    });
                    if !runs || app.executors.contains_key(&executor.id) {
                        return;
                    }
                    let entry = app.entry;
                    app.executors.insert(
                        executor.id,
                        Slots {
                            serial: self.next_serial,
                            cores: executor.resources.cores,
                            running: VecDeque::new(),
                            preempted: false,
                        },
                    );
                    self.next_serial += 1;
                    self.recorder.started(entry, self.now);
                    self.run_tasks(&id);
                }
                ExecutorState::Killed
                | ExecutorState::Failed
                | ExecutorState::Lost
                | ExecutorState::Exited => {
                    let (lost, preempted) = app.remove(executor.id, self.now);
                    self.recorder.lost(lost, preempted);
                    self.run_tasks(&id);
                }
            },
            ToApp::Ended(_) => {
                // Its end is recorded as it commits.
                self.links.remove(&link);
                self.apps.remove(&id);
            }
        }
    }

    /// Starts app `id`'s waiting tasks on its free cores.
    fn run_tasks(&mut self, id: &AppId) {
        let app = self.apps.get_mut(id).expect("a simulated app");
        let (task_ms, started) = (app.task_ms, app.fill(self.now));
        self.tasks_started(id, task_ms, started);
    }

    /// App `id` started tasks of `task_ms` each on `started` (executor and its serial): each
    /// ends that long from now.
    fn tasks_started(
        &mut self,
        id: &AppId,
        task_ms: u64,
        started: impl IntoIterator<Item = (ExecutorId, u64)>,
    ) {
        let done_at = self.now + task_ms;
        for (executor, serial) in started {
            self.agenda
                .at(done_at, Happening::TaskDone(id.clone(), executor, serial));
        }
    }

    fn task_done(&mut self, id: &AppId, executor: ExecutorId, serial: u64) {
        let Some(app) = self.apps.get_mut(id) else {
            return;
        };
        if !app.task_done(executor, serial) {
            return;
        }
        self.recorder.task_done(app.entry, app.task_ms);
        if app.all_run() && !app.done {
            app.done = true;
            let (entry, driver) = (app.entry, app.driver.clone());
            self.recorder.finished(entry, self.now);
            self.finish(id);
            if let Some((worker, driver, serial)) = driver {
                self.agenda
                    .at(self.now, Happening::DriverDone(worker, driver, serial));
            }
        } else if let Some(serial) = app.refill(executor, self.now) {
            let task_ms = app.task_ms;
            self.tasks_started(id, task_ms, [(executor, serial)]);
        }
    }

    /// App `id`'s client asks to finish, if it is attached (else when it attaches again).
    fn finish(&mut self, id: &AppId) {
        if let Some(link) = self.apps.get(id).and_then(|app| app.link) {
            self.step(Event::AppRequest {
                link,
                request: AppRequest::Finish,
            });
        }
    }
}

/// `seconds` in whole ms.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn seconds_to_ms(seconds: f64) -> u64 {
    (seconds * 1000.0).round() as u64
}

fn millis(duration: Duration) -> u64 {
    muster_core::ids::millis(duration)
}

/// The next of a splitmix64 sequence: small, fast, and the same everywhere.
pub fn splitmix(state: u64) -> u64 {
    let mut z = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
