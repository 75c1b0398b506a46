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
//!
//! `agenda` holds what happens next; `workers` plays the workers (links, launches, stops,
//! drivers' restarts, losses) and `apps` the clients and applications (the trace's entries,
//! attachments, tasks); this module runs the leader and the log between them.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use muster_core::ids::{AppId, DriverId, Term, Timestamp, WorkerId};
use muster_leader::{
    Action, Close, Event, Leader, LinkId, ProcessKey, ProposalId, ToApp, ToWorker,
};
use muster_state::commands::RaiseLogFormat;
use muster_state::model::DriverState;
use muster_state::version::LogFormat;
use muster_state::{ClusterState, Command, Op, Response};

use crate::cluster::Cluster;
use crate::report::Recorder;
use crate::trace::Entry;
use crate::world::{App, Worker, driver_entry};

mod agenda;
mod apps;
mod workers;

use agenda::{Agenda, Happening, Lane};

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
        if let Some(preempt) = op.preemption() {
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
