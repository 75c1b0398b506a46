//! The leader's session: the async shell that carries out what the [`Leader`] decides.
//!
//! A replica that leads, and hears from a quorum, runs one [`Session`] per term. The session
//! owns the worker and application streams and the Raft handle, and holds the [`Leader`]
//! behind **one** lock: every stream message, committed proposal and tick becomes an
//! [`Event`] stepped under that lock, and the [`Action`]s it returns are carried out before
//! the lock is released (messages go into bounded stream channels; proposals go to a writer
//! task that submits them to Raft in order and feeds their results back in the same order).
//! A stream whose channel is full is closed rather than losing a message: its peer
//! reconnects and reconciles. The scheduling pass that events make wanted runs on a task of
//! its own once it gets the lock, so that a burst of events (a batch of committed client
//! writes, a storm of registrations) is followed by one pass rather than one per event.
//!
//! The session ends when this replica stops leading, when a new term starts, or when it has
//! not heard from a quorum for an election timeout (check-quorum), or when the leader
//! panics (a bug: a fresh session of the same term then recovers from the log): its streams
//! close, so workers and clients look for the new leader at once. Nothing here is replicated except
//! through proposals; heartbeats, process ids and wait reasons live in the leader only.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use muster_core::ids::{AppId, DriverId, Term, WorkId, WorkerId, millis};
use muster_core::model::RecoveryState;
use muster_core::plan::Reserved;
use muster_core::resources::Usage;
use muster_core::restarts::Restarts;
use muster_leader::{
    Action, Close, Event, Leader, LeaderConfig, LinkId, ProcessKey, ProposalId, ToApp, ToWorker,
};
use muster_proto::auth::Tokens;
use muster_proto::convert::address_lists;
use muster_proto::v1;
use muster_proto::v1::app_event::Body as AppBody;
use muster_proto::v1::master_message::Body;
use muster_proto::v1::{
    Acknowledged, AppEnded, AppEvent, AppHeartbeatAck, AppRegistered, AppsEnded, ExecutorDraining,
    ExecutorEvent, ExecutorPreempted, HeartbeatAck, KillDriver, KillExecutor, LaunchDriver,
    LaunchExecutor, LogChunk, MasterMessage, ProfileRefused, ReadLog, Registered,
};
use muster_proto::v1::{BuildInfo, ShuffleService};
use muster_raft::{Applied, Leadership, RaftNode, WriteError};
use muster_state::{ClusterState, Command};
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tonic::{Status, Streaming};
use tracing::Instrument;

use crate::grpc::call::CallError;
use crate::web::metrics::Metrics;

/// How often the leader is ticked, and how often quorum is checked.
const TICK: Duration = Duration::from_millis(100);
/// How long a stream opened during an election waits for a leader (below the 2 s within
/// which workers and clients expect an answer).
pub(crate) const ELECTION_PATIENCE: Duration = Duration::from_secs(1);
/// How many messages a stream may have queued before it is closed.
const LINK_CAPACITY: usize = 1024;
/// How long a worker may take to answer a read of a process's output: below the time a
/// follower gives a call it forwards.
const LOG_READ_TIMEOUT: Duration = Duration::from_secs(2);
/// How many reads of process output the leader has under way at once.
const LOG_READS: usize = 8;
/// The variables that give an executor the addresses of the pages that show its standard
/// output and error (what a standalone worker gives Spark's executors as
/// `SPARK_LOG_URL_STDOUT` and `_STDERR`), set where the masters serve pages.
pub const LOG_URL_VARIABLES: [(&str, &str); 2] = [
    ("MUSTER_LOG_URL_STDOUT", "stdout"),
    ("MUSTER_LOG_URL_STDERR", "stderr"),
];
/// The variable that names the resource profile an executor is of, set for the executors
/// of an application's profiles (Spark's `--resourceProfileId`); unset, it is of the
/// application's own size, profile 0.
pub const PROFILE_VARIABLE: &str = "MUSTER_RESOURCE_PROFILE_ID";

/// A proposal's result, once Raft has it.
type Pending = std::pin::Pin<Box<dyn Future<Output = Result<Applied, WriteError>> + Send>>;

/// The leader's end of one worker's stream.
pub(crate) type WorkerSender = mpsc::Sender<Result<MasterMessage, Status>>;
/// The leader's end of one application's stream.
pub(crate) type AppSender = mpsc::Sender<Result<AppEvent, Status>>;

/// A channel for a new stream's messages, with room for `backlog` more than usual (what is
/// sent before the stream is read).
pub(crate) fn link_channel<T>(backlog: usize) -> (mpsc::Sender<T>, mpsc::Receiver<T>) {
    mpsc::channel(LINK_CAPACITY + backlog)
}

/// One term of leadership.
pub struct Session {
    node: Arc<RaftNode>,
    term: Term,
    /// Told to workers, which fence by it.
    worker_timeout: Duration,
    /// Handed to an application's client when it registers.
    tokens: Tokens,
    /// Where people reach this master's pages, for the links to executors' output.
    pages: Option<Arc<str>>,
    inner: Mutex<Inner>,
    proposals: mpsc::UnboundedSender<(ProposalId, Command)>,
    /// Wakes the pass task: a pass is wanted.
    pass_wanted: Notify,
    ended: watch::Sender<bool>,
    metrics: Arc<Metrics>,
    /// Room for reads of process output (see [`Session::read_log`]).
    log_slots: tokio::sync::Semaphore,
    /// When the term began, for the recovery's duration.
    started: Instant,
}

/// What the session's lock guards: the leader and the streams its actions go to.
///
/// Lock order: the replicated state's lock, for reading, first, then this one; never the
/// other way round, and neither across an `.await`. The leader decides on the state as
/// applied when it is called, so both are held while it steps, ticks or plans: a scheduling
/// pass (and a preemption's choice, which runs several) keeps `apply` on this replica
/// waiting for as long as it takes.
struct Inner {
    leader: Leader,
    /// Whether the recovery's duration is in the metrics yet.
    recovery_timed: bool,
    workers: HashMap<LinkId, WorkerSender>,
    apps: HashMap<LinkId, AppSender>,
    next_link: u64,
    /// Reads of process output sent to workers and not answered yet, by request number, with
    /// the stream the answer must come on.
    log_reads: HashMap<u64, (LinkId, oneshot::Sender<LogChunk>)>,
    next_log_read: u64,
}

impl Session {
    /// Starts the session of `term`: its writer, its ticks and the read that begins recovery.
    fn start(sessions: &Sessions, term: Term) -> Arc<Self> {
        let config = sessions.config.clone();
        let (proposals, to_write) = mpsc::unbounded_channel();
        let session = Arc::new(Self {
            node: Arc::clone(&sessions.node),
            term,
            worker_timeout: config.worker_timeout,
            tokens: sessions.tokens.clone(),
            pages: sessions.pages.clone(),
            inner: Mutex::new(Inner {
                leader: Leader::new(term, config, Instant::now()),
                recovery_timed: false,
                workers: HashMap::new(),
                apps: HashMap::new(),
                next_link: 0,
                log_reads: HashMap::new(),
                next_log_read: 0,
            }),
            proposals,
            pass_wanted: Notify::new(),
            ended: watch::channel(false).0,
            metrics: Arc::clone(&sessions.metrics),
            log_slots: tokio::sync::Semaphore::new(LOG_READS),
            started: Instant::now(),
        });
        // Everything the session's own tasks log carries its term.
        let span = tracing::info_span!("leader", term = %term);
        session.spawn(
            Arc::clone(&session)
                .write_proposals(to_write)
                .instrument(span.clone()),
        );
        session.spawn(
            Arc::clone(&session)
                .tick_until_ended()
                .instrument(span.clone()),
        );
        session.spawn(
            Arc::clone(&session)
                .pass_when_wanted()
                .instrument(span.clone()),
        );
        session.spawn(Arc::clone(&session).read_state().instrument(span));
        session
    }

    /// Runs `task`, one of the session's own. A panic in it (a bug in the leader) ends the
    /// session, as a panic under its lock does (see [`Session::lock`]): a task that died
    /// would otherwise leave the leader waiting for it.
    fn spawn(self: &Arc<Self>, task: impl Future<Output = ()> + Send + 'static) {
        let task = tokio::spawn(task);
        let session = Arc::clone(self);
        tokio::spawn(async move {
            if task.await.is_err_and(|error| error.is_panic()) {
                session.end_after_panic(&mut session.lock());
            }
        });
    }

    /// Where recovery stands.
    pub fn recovery_state(&self) -> RecoveryState {
        self.lock().leader.recovery_state()
    }

    /// The process id a worker reported for `key`.
    pub fn pid(&self, key: &ProcessKey) -> Option<u32> {
        self.lock().leader.pid(key)
    }

    /// The restarts a worker reported for `key`, a supervised driver started again.
    pub fn restarts(&self, key: &ProcessKey) -> Option<Restarts<std::time::Instant>> {
        self.lock().leader.restarts(key)
    }

    /// What the process `key` on `worker` uses, as the worker last measured it.
    pub fn usage(&self, worker: &WorkerId, key: &ProcessKey) -> Option<Usage> {
        self.lock().leader.usage(worker, key)
    }

    /// Why app or driver `id` waits, as of the last scheduling pass.
    pub fn waiting(&self, id: &WorkId) -> Option<String> {
        self.lock().leader.waiting(id).map(ToString::to_string)
    }

    /// The room the last scheduling pass kept for a waiting gang.
    pub fn reserved(&self) -> Vec<Reserved> {
        self.lock().leader.reserved().to_vec()
    }

    /// The web UI app `app` gave when it attached; empty if none.
    pub fn ui_address(&self, app: &AppId) -> String {
        self.lock().leader.ui_address(app).to_owned()
    }

    /// The build `worker`'s agent said it runs when it registered with this leader.
    pub fn worker_build(&self, worker: &WorkerId) -> Option<BuildInfo> {
        self.lock()
            .leader
            .worker_build(worker)
            .cloned()
            .map(Into::into)
    }

    /// `worker`'s shuffle service as it last told this leader, when it runs one.
    pub fn shuffle_service(&self, worker: &WorkerId) -> Option<ShuffleService> {
        self.lock()
            .leader
            .shuffle_service(worker)
            .copied()
            .map(Into::into)
    }

    /// Why the masters' preemption settings can never stop an executor in `state`, if they
    /// cannot.
    pub fn preemption_warning(&self, state: &ClusterState) -> Option<String> {
        self.lock().leader.preemption_warning(state)
    }

    /// The cluster-mode driver that runs `app`, as its client said when it attached.
    pub fn app_driver(&self, app: &AppId) -> Option<DriverId> {
        self.lock().leader.app_driver(app).cloned()
    }

    /// The Spark `worker`'s drivers run Spark submissions with, as its agent said (empty:
    /// none); `None` when it did not say.
    pub fn spark_home(&self, worker: &WorkerId) -> Option<String> {
        self.lock().leader.spark_home(worker).map(str::to_owned)
    }

    /// How many apps and drivers wait, by reason, as of the last scheduling pass.
    pub fn waiting_by_reason(&self) -> Vec<(&'static str, usize)> {
        let inner = self.lock();
        let waiting = inner.leader.waiting_by_reason();
        waiting
            .iter()
            .map(|(&reason, &count)| (reason, count))
            .collect()
    }

    /// The session's lock. A panic while it was held (a bug in the leader) leaves the leader
    /// in doubt: the session is then over, and a fresh one recovers from the log.
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|poisoned| {
            let mut inner = poisoned.into_inner();
            self.end_after_panic(&mut inner);
            inner
        })
    }

    /// Ends the session after a panic in the leader, once, saying so.
    fn end_after_panic(&self, inner: &mut Inner) {
        if !self.ended.send_replace(true) {
            tracing::error!(term = %self.term, "the leader panicked: its session ends");
            close_all(inner);
        }
    }

    fn is_over(&self) -> bool {
        *self.ended.borrow()
    }

    /// Resolves (changes) when the session ends.
    pub(crate) fn ended(&self) -> watch::Receiver<bool> {
        self.ended.subscribe()
    }

    /// Ends the session: its tasks stop and its streams close, telling each peer to look for
    /// the new leader.
    fn end(&self) {
        self.ended.send_replace(true);
        close_all(&mut self.lock());
    }

    /// Registers a worker's new stream; its events name the returned link. `None` once the
    /// session has ended.
    pub(crate) fn open_worker_link(&self, sender: WorkerSender) -> Option<LinkId> {
        let mut inner = self.lock();
        let link = self.next_link(&mut inner)?;
        inner.workers.insert(link, sender);
        Some(link)
    }

    /// Registers an application's new stream; its events name the returned link. `None` once
    /// the session has ended.
    pub(crate) fn open_app_link(&self, sender: AppSender) -> Option<LinkId> {
        let mut inner = self.lock();
        let link = self.next_link(&mut inner)?;
        inner.apps.insert(link, sender);
        Some(link)
    }

    /// A new link number, unless the session ended (checked under the lock [`Session::end`]
    /// drains the links under).
    fn next_link(&self, inner: &mut Inner) -> Option<LinkId> {
        if self.is_over() {
            return None;
        }
        let link = LinkId(inner.next_link);
        inner.next_link += 1;
        Some(link)
    }

    /// Steps the leader with `event` and carries out what it decides.
    pub(crate) fn step(&self, event: Event) {
        if self.is_over() {
            return;
        }
        let state = self.node.local_state();
        let state = state.read().expect("state lock");
        let mut inner = self.lock();
        if self.is_over() {
            return;
        }
        match &event {
            Event::LinkClosed { link } => {
                inner.workers.remove(link);
                inner.apps.remove(link);
                // Their readers hear that no answer will come.
                inner.log_reads.retain(|_, (on, _)| on != link);
            }
            Event::WorkerHeartbeat { .. } => self.metrics.heartbeat(),
            _ => {}
        }
        let actions = inner.leader.step(Instant::now(), &state, event);
        self.carry_out(&mut inner, &state, actions);
        if inner.leader.wants_pass() {
            self.pass_wanted.notify_one();
        }
    }

    /// Asks worker `worker`, over its stream, for part of a process's output, and waits for
    /// the answer (which may say why the worker could not read it). Relayed past the
    /// leader's state machine: nothing is decided here. At most [`LOG_READS`] are under way
    /// at once, so that reads cannot crowd out a worker's reports on its stream.
    pub(crate) async fn read_log(
        &self,
        worker: &WorkerId,
        mut read: ReadLog,
    ) -> Result<LogChunk, CallError> {
        let unanswered = || CallError::Unavailable(format!("worker `{worker}` did not answer"));
        let _slot = tokio::time::timeout(LOG_READ_TIMEOUT / 4, self.log_slots.acquire())
            .await
            .map_err(|_| CallError::Unavailable("too many reads of output under way".into()))?
            .map_err(|_| unanswered())?;
        let (answer, answered) = oneshot::channel();
        let request = {
            let mut inner = self.lock();
            let link = (!self.is_over())
                .then(|| inner.leader.worker_link(worker))
                .flatten()
                // It may be reconnecting after a failover: worth retrying.
                .ok_or_else(|| {
                    CallError::Unavailable(format!(
                        "worker `{worker}` is not connected to the leader"
                    ))
                })?;
            let request = inner.next_log_read;
            inner.next_log_read += 1;
            read.request = request;
            inner.log_reads.insert(request, (link, answer));
            let message = MasterMessage {
                term: self.term.0,
                body: Some(Body::ReadLog(read)),
            };
            send_or_close(&mut inner.workers, link, message);
            request
        };
        // However this call ends (answered, timed out, or dropped by a caller that left),
        // its entry goes.
        let _pending = PendingRead {
            session: self,
            request,
        };
        match tokio::time::timeout(LOG_READ_TIMEOUT, answered).await {
            Ok(Ok(chunk)) => Ok(chunk),
            Ok(Err(_)) | Err(_) => Err(unanswered()),
        }
    }

    /// Hands a worker's answer on `link` to the read that asked for it.
    pub(crate) fn answer_log_read(&self, link: LinkId, chunk: LogChunk) {
        let mut inner = self.lock();
        if inner
            .log_reads
            .get(&chunk.request)
            .is_some_and(|(on, _)| *on == link)
            && let Some((_, answer)) = inner.log_reads.remove(&chunk.request)
        {
            let _ = answer.send(chunk);
        }
    }

    /// Runs the scheduling pass the leader wants.
    fn pass(&self) {
        let state = self.node.local_state();
        let state = state.read().expect("state lock");
        let mut inner = self.lock();
        if self.is_over() {
            return;
        }
        let actions = self.timing_passes(&mut inner, |leader, now| leader.pass(now, &state));
        self.carry_out(&mut inner, &state, actions);
    }

    fn tick(&self) {
        let state = self.node.local_state();
        let state = state.read().expect("state lock");
        let mut inner = self.lock();
        let actions = self.timing_passes(&mut inner, |leader, now| leader.tick(now, &state));
        self.carry_out(&mut inner, &state, actions);
    }

    /// Runs `call` on the leader at the time it starts, telling the leader (and the
    /// metrics) how long it took when it ran a scheduling pass.
    fn timing_passes(
        &self,
        inner: &mut Inner,
        call: impl FnOnce(&mut Leader, Instant) -> Vec<Action>,
    ) -> Vec<Action> {
        let (passes, start) = (inner.leader.passes(), Instant::now());
        let actions = call(&mut inner.leader, start);
        if inner.leader.passes() > passes {
            let took = start.elapsed();
            inner.leader.pass_took(took);
            self.metrics.pass(took);
        }
        actions
    }

    fn carry_out(&self, inner: &mut Inner, state: &ClusterState, actions: Vec<Action>) {
        if !inner.recovery_timed && inner.leader.recovery_state() == RecoveryState::Alive {
            inner.recovery_timed = true;
            self.metrics.recovered(self.started.elapsed());
        }
        for (work, waited) in inner.leader.take_placement_waits() {
            let kind = match work {
                WorkId::App(_) => "app",
                WorkId::Driver(_) => "driver",
            };
            self.metrics.placement_waited(kind, waited);
        }
        for action in actions {
            match action {
                Action::Propose {
                    proposal,
                    op,
                    request_id,
                } => {
                    let command = Command {
                        at: muster_raft::now(),
                        request_id,
                        term: Some(self.term),
                        op,
                    };
                    // The writer is gone only when the session ended.
                    let _ = self.proposals.send((proposal, command));
                }
                Action::ToWorker { link, message } => {
                    match &message {
                        ToWorker::LaunchExecutor(..) => self.metrics.launched("executor"),
                        ToWorker::LaunchDriver(_) => self.metrics.launched("driver"),
                        _ => {}
                    }
                    let Some(body) = self.worker_message(state, message) else {
                        continue;
                    };
                    let message = MasterMessage {
                        term: self.term.0,
                        body: Some(body),
                    };
                    send_or_close(&mut inner.workers, link, message);
                }
                Action::ToApp { link, message } => {
                    let event = AppEvent {
                        body: Some(self.app_event(message)),
                    };
                    send_or_close(&mut inner.apps, link, event);
                }
                Action::Close { link, reason } => {
                    let status = match reason {
                        Close::Reregister => {
                            Status::aborted("this leader counts the worker as lost: register again")
                        }
                        Close::Superseded => Status::cancelled("a newer stream replaced this one"),
                        Close::Refused(message) => Status::invalid_argument(message),
                        Close::Denied(message) => Status::permission_denied(message),
                    };
                    if let Some(sender) = inner.workers.remove(&link) {
                        let _ = sender.try_send(Err(status));
                    } else if let Some(sender) = inner.apps.remove(&link) {
                        let _ = sender.try_send(Err(status));
                    }
                }
            }
        }
    }

    /// Submits proposals to Raft in the order the leader made them, and steps their results
    /// back in the same order (a proposal Raft refused at once included).
    async fn write_proposals(
        self: Arc<Self>,
        mut to_write: mpsc::UnboundedReceiver<(ProposalId, Command)>,
    ) {
        let (pending, mut to_await) = mpsc::unbounded_channel::<(ProposalId, Pending)>();
        let session = Arc::clone(&self);
        self.spawn(async move {
            let mut ended = session.ended();
            loop {
                let (proposal, result) = tokio::select! {
                    next = to_await.recv() => match next {
                        Some(next) => next,
                        None => return,
                    },
                    _ = ended.changed() => return,
                };
                let event = match result.await {
                    Ok(result) => Event::Committed { proposal, result },
                    Err(error) => {
                        tracing::debug!(%error, "a leader proposal was not committed");
                        Event::NotCommitted { proposal }
                    }
                };
                session.step(event);
            }
        });
        let mut ended = self.ended();
        loop {
            let (proposal, command) = tokio::select! {
                next = to_write.recv() => match next {
                    Some(next) => next,
                    None => return,
                },
                _ = ended.changed() => return,
            };
            let result: Pending = match self.node.propose(command, self.ended()) {
                Ok(result) => Box::pin(result),
                Err(error) => Box::pin(std::future::ready(Err(error))),
            };
            if pending.send((proposal, result)).is_err() {
                return;
            }
        }
    }

    /// Confirms with a quorum that the state holds everything committed before this term,
    /// retrying until it does or the session ends; recovery starts from there.
    async fn read_state(self: Arc<Self>) {
        let mut ended = self.ended();
        loop {
            match self.node.read(|_| ()).await {
                Ok(()) => {
                    self.step(Event::StateRead);
                    return;
                }
                Err(error) => tracing::info!(%error, "cannot confirm the state yet"),
            }
            tokio::select! {
                () = tokio::time::sleep(TICK) => {}
                _ = ended.changed() => return,
            }
        }
    }

    /// One pass per wake-up: the events stepped meanwhile all wait for the same one.
    async fn pass_when_wanted(self: Arc<Self>) {
        let mut ended = self.ended();
        loop {
            tokio::select! {
                () = self.pass_wanted.notified() => self.pass(),
                _ = ended.changed() => return,
            }
        }
    }

    async fn tick_until_ended(self: Arc<Self>) {
        let mut ticks = tokio::time::interval(TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut ended = self.ended();
        loop {
            tokio::select! {
                _ = ticks.tick() => self.tick(),
                _ = ended.changed() => return,
            }
        }
    }
}

impl Session {
    /// Reads a worker's or an application's stream until it ends or the session does,
    /// stepping the event each message means; once the stream ends, the leader hears that
    /// the link closed.
    pub(crate) async fn follow<M>(
        self: Arc<Self>,
        link: LinkId,
        mut inbound: Streaming<M>,
        mut event: impl FnMut(M) -> Option<Event>,
    ) {
        let mut ended = self.ended();
        while !*ended.borrow_and_update() {
            let message = tokio::select! {
                message = inbound.message() => message,
                _ = ended.changed() => return,
            };
            match message {
                Ok(Some(message)) => {
                    if let Some(event) = event(message) {
                        self.step(event);
                    }
                }
                Ok(None) | Err(_) => break,
            }
        }
        self.step(Event::LinkClosed { link });
    }

    /// The wire form of a message for a worker; launches take what to run from the state,
    /// and are dropped when the state no longer has it.
    fn worker_message(&self, state: &ClusterState, message: ToWorker) -> Option<Body> {
        Some(match message {
            ToWorker::Registered => Body::Registered(Registered {
                master_id: self.node.id(),
                worker_timeout_ms: millis(self.worker_timeout),
            }),
            ToWorker::HeartbeatAck => Body::HeartbeatAck(HeartbeatAck {}),
            ToWorker::AppsEnded(apps) => Body::AppsEnded(AppsEnded {
                app_ids: apps.iter().map(ToString::to_string).collect(),
            }),
            ToWorker::Acknowledged(seqs) => Body::Acknowledged(Acknowledged { seqs }),
            ToWorker::LaunchExecutor(app, id) => {
                let app = state.apps().get(&app)?;
                let executor = app.executors.get(&id)?;
                let mut env = app.desc.env.clone();
                // An executor of a resource profile: its own environment, and which it is.
                if let Some((profile_id, profile)) = state.executor_profile(&app.id, id) {
                    env.extend(profile.env.clone());
                    env.insert(PROFILE_VARIABLE.to_owned(), profile_id.to_string());
                }
                if let Some(pages) = &self.pages {
                    for (variable, stream) in LOG_URL_VARIABLES {
                        let url = format!("{pages}/logs/{}/{}?stream={stream}", app.id, id.0);
                        env.insert(variable.to_owned(), url);
                    }
                }
                Body::LaunchExecutor(LaunchExecutor {
                    app_id: app.id.to_string(),
                    executor_id: id.0,
                    resources: Some((&executor.resources).into()),
                    command: app.desc.command.clone(),
                    args: app.desc.args.clone(),
                    env: env.into_iter().collect(),
                    addresses: address_lists(state.executor_addresses(&app.id, id)),
                })
            }
            ToWorker::LaunchDriver(id) => {
                let desc = &state.drivers().get(&id)?.desc;
                // A named user's driver acts as that user, never with the worker's rights.
                // The credential it was submitted with: revoked, it is refused like any other.
                let credential = state
                    .driver_owner(&id)
                    .and_then(|owner| self.tokens.user_credential(&owner.user, owner.generation))
                    .unwrap_or_default();
                let addresses = address_lists(state.driver_addresses(&id));
                Body::LaunchDriver(LaunchDriver {
                    credential,
                    driver_id: id.0,
                    resources: Some((&desc.resources).into()),
                    command: desc.command.clone(),
                    args: desc.args.clone(),
                    env: desc.env.clone().into_iter().collect(),
                    supervise: desc.supervise,
                    addresses,
                })
            }
            ToWorker::KillExecutor(app, id, grace) => Body::KillExecutor(KillExecutor {
                app_id: app.to_string(),
                executor_id: id.0,
                grace_ms: grace.map(millis),
            }),
            ToWorker::KillDriver(id) => Body::KillDriver(KillDriver { driver_id: id.0 }),
        })
    }

    /// The wire form of an event for an application's client.
    fn app_event(&self, message: ToApp) -> AppBody {
        match message {
            ToApp::Registered(app) => AppBody::Registered(AppRegistered {
                app_token: self.tokens.app_token(&app.0),
                app_id: app.to_string(),
            }),
            ToApp::Executor(executor) => AppBody::Executor(ExecutorEvent::from(&executor)),
            ToApp::Preempted(executor, grace) => AppBody::Preempted(ExecutorPreempted {
                executor_id: executor.0,
                grace_ms: millis(grace),
            }),
            ToApp::Draining(executor, kill_after) => AppBody::Draining(ExecutorDraining {
                executor_id: executor.0,
                kill_after_ms: kill_after.map(millis),
            }),
            ToApp::ProfileRefused(profile_id, reason) => {
                AppBody::ProfileRefused(ProfileRefused { profile_id, reason })
            }
            ToApp::Ended(state) => AppBody::Ended(AppEnded {
                state: v1::AppState::from(state).into(),
            }),
            ToApp::HeartbeatAck => AppBody::HeartbeatAck(AppHeartbeatAck {}),
        }
    }
}

/// A read of output sent to a worker: its entry is removed when the reader stops waiting.
struct PendingRead<'s> {
    session: &'s Session,
    request: u64,
}

impl Drop for PendingRead<'_> {
    fn drop(&mut self) {
        self.session.lock().log_reads.remove(&self.request);
    }
}

/// Queues `message` on `link`'s stream; a stream whose queue is full (or whose peer left) is
/// closed rather than losing a message: its peer reconnects and reconciles.
fn send_or_close<T>(
    links: &mut HashMap<LinkId, mpsc::Sender<Result<T, Status>>>,
    link: LinkId,
    message: T,
) {
    if let Some(sender) = links.get(&link)
        && sender.try_send(Ok(message)).is_err()
    {
        tracing::warn!(?link, "stream full or gone: closing it");
        links.remove(&link);
    }
}

/// Closes every stream of a session that ended, telling each peer to look for the leader.
fn close_all(inner: &mut Inner) {
    // Their readers hear at once that no answer will come.
    inner.log_reads.clear();
    for (_, sender) in inner.workers.drain() {
        let _ = sender.try_send(Err(Status::unavailable("this master no longer leads")));
    }
    for (_, sender) in inner.apps.drain() {
        let _ = sender.try_send(Err(Status::unavailable("this master no longer leads")));
    }
}

/// Follows leadership and keeps one session running while this replica leads with a quorum.
pub struct Sessions {
    node: Arc<RaftNode>,
    config: LeaderConfig,
    tokens: Tokens,
    pages: Option<Arc<str>>,
    metrics: Arc<Metrics>,
    current: Mutex<Option<Arc<Session>>>,
}

impl Sessions {
    /// Starts following `node`'s leadership; its sessions count into `metrics`, and link
    /// executors' output to the pages at `pages` (this master's, as people reach them).
    pub fn start(
        node: Arc<RaftNode>,
        config: LeaderConfig,
        tokens: Tokens,
        pages: Option<String>,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let sessions = Arc::new(Self {
            node,
            config,
            tokens,
            pages: pages.map(Arc::from),
            metrics,
            current: Mutex::new(None),
        });
        tokio::spawn(Arc::clone(&sessions).follow());
        sessions
    }

    /// The leaders' preemption policy, if any.
    pub fn preemption(&self) -> Option<&muster_leader::PreemptionPolicy> {
        self.config.preemption.as_ref()
    }

    /// Ends the current session, if any, as a replica that stops leading would.
    pub fn stop(&self) {
        if let Some(session) = self.current.lock().expect("sessions lock").take() {
            session.end();
        }
    }

    /// The running session, while this replica leads.
    pub fn current(&self) -> Option<Arc<Session>> {
        self.current
            .lock()
            .expect("sessions lock")
            .clone()
            .filter(|s| !s.is_over())
    }

    /// The running session; while no leader is known (an election is under way), waits up
    /// to `patience` for one, so that a worker or client asking during an election is served
    /// (or pointed to the new leader) the moment there is one, instead of retrying blind.
    pub async fn current_or_wait(&self, patience: Duration) -> Option<Arc<Session>> {
        let deadline = tokio::time::Instant::now() + patience;
        let mut leadership = self.node.leadership();
        loop {
            if let Some(session) = self.current() {
                return Some(session);
            }
            let leader = leadership.borrow_and_update().leader.clone();
            if leader.is_some_and(|(id, _)| id != self.node.id()) {
                return None;
            }
            // No leader yet, or this replica leads and its session is about to start.
            let changed = tokio::time::timeout_at(deadline, async {
                tokio::select! {
                    _ = leadership.changed() => {}
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
            });
            if changed.await.is_err() {
                return None;
            }
        }
    }

    /// Re-evaluates on every leadership change and every tick (for check-quorum).
    async fn follow(self: Arc<Self>) {
        let mut leadership = self.node.leadership();
        let mut ticks = tokio::time::interval(TICK);
        loop {
            let Leadership {
                term, is_leader, ..
            } = leadership.borrow_and_update().clone();
            self.follow_term(term, is_leader, self.node.has_quorum());
            tokio::select! {
                changed = leadership.changed() => if changed.is_err() {
                    // Raft stopped: no replica work is left.
                    self.stop();
                    return;
                },
                _ = ticks.tick() => {}
            }
        }
    }

    /// Keeps the session of `term` while leading with a quorum; ends it otherwise, and starts
    /// a new one when leading again.
    fn follow_term(&self, term: Term, is_leader: bool, has_quorum: bool) {
        let mut current = self.current.lock().expect("sessions lock");
        let leads = is_leader && has_quorum;
        if current
            .as_ref()
            .is_some_and(|s| leads && s.term == term && !s.is_over())
        {
            return;
        }
        if let Some(old) = current.take()
            && !old.is_over()
        {
            if is_leader && old.term == term {
                tracing::warn!(%term, "no quorum for an election timeout: session ends");
            } else {
                tracing::info!(term = %old.term, "leadership lost: session ends");
            }
            old.end();
        }
        if leads {
            tracing::info!(%term, "leader: recovering");
            *current = Some(Session::start(self, term));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use muster_raft::RaftSettings;
    use muster_state::StateConfig;

    use super::*;

    /// A replica that is a group of its own, so it leads, followed by [`Sessions`].
    async fn lone_leader(dir: &Path) -> Arc<Sessions> {
        let settings = RaftSettings::default();
        let node = RaftNode::open(1, dir, &settings, StateConfig::default())
            .await
            .unwrap();
        let members = BTreeMap::from([(1, "127.0.0.1:1".to_owned())]);
        node.bootstrap(&members).await.unwrap();
        Sessions::start(
            Arc::new(node),
            LeaderConfig::default(),
            Tokens::open(),
            None,
            Arc::new(Metrics::new()),
        )
    }

    /// Waits for a session other than `old` to be ALIVE.
    async fn alive_session(sessions: &Sessions, old: Option<&Arc<Session>>) -> Arc<Session> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(session) = sessions.current()
                && !old.is_some_and(|old| Arc::ptr_eq(old, &session))
                && session.recovery_state() == RecoveryState::Alive
            {
                return session;
            }
            assert!(Instant::now() < deadline, "no new session came ALIVE");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The ALIVE session of a lone leader, with a worker's stream open on it.
    async fn alive_with_a_worker(
        dir: &Path,
    ) -> (
        Arc<Sessions>,
        Arc<Session>,
        mpsc::Receiver<Result<MasterMessage, Status>>,
    ) {
        let sessions = lone_leader(dir).await;
        let session = alive_session(&sessions, None).await;
        let (sender, stream) = link_channel(0);
        session.open_worker_link(sender).unwrap();
        (sessions, session, stream)
    }

    /// Ends with `session` ended and its worker stream, opened before, told to look for the
    /// leader; then a fresh session of the same term comes ALIVE.
    async fn is_replaced_after_a_panic(
        sessions: &Sessions,
        session: &Arc<Session>,
        mut stream: mpsc::Receiver<Result<MasterMessage, Status>>,
    ) {
        let mut ended = session.ended();
        tokio::time::timeout(Duration::from_secs(5), ended.wait_for(|&ended| ended))
            .await
            .expect("the session ends")
            .unwrap();
        let closed = stream.recv().await.expect("the stream hears why it closes");
        assert_eq!(closed.unwrap_err().code(), tonic::Code::Unavailable);
        let fresh = alive_session(sessions, Some(session)).await;
        assert_eq!(fresh.term, session.term);
    }

    #[tokio::test]
    async fn a_panic_under_the_leaders_lock_ends_the_session_and_a_fresh_one_recovers() {
        let dir = tempfile::tempdir().unwrap();
        let (sessions, session, stream) = alive_with_a_worker(dir.path()).await;
        let panicked = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let _inner = session.inner.lock();
                    panic!("a bug in the leader");
                })
                .join()
        });
        assert!(panicked.is_err());
        is_replaced_after_a_panic(&sessions, &session, stream).await;
    }

    #[tokio::test]
    async fn a_panic_in_a_session_task_ends_the_session_and_a_fresh_one_recovers() {
        let dir = tempfile::tempdir().unwrap();
        let (sessions, session, stream) = alive_with_a_worker(dir.path()).await;
        session.spawn(async { panic!("a bug in the leader") });
        is_replaced_after_a_panic(&sessions, &session, stream).await;
    }
}
