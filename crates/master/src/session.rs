//! The leader's session: recovery after an election, worker links, liveness and scheduling.
//!
//! A replica that becomes leader starts a [`Session`] for its term in RECOVERING: every worker
//! the log says is ALIVE must reconnect and report what it runs, and every active
//! application's client must re-attach. Once all have, or after `recovery_timeout`, the session
//! goes through COMPLETING_RECOVERY (workers that never came back are lost and applications
//! whose clients never came back are finished, through the log) to ALIVE, and only then
//! schedules. Losing leadership (or a new term) ends the session at once: its worker and
//! application streams close, so their peers look for the new leader. Nothing here is
//! replicated except through commands written to the log; heartbeats, process ids and wait
//! reasons live in the session only.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use muster_core::model::{AppId, DriverId, PassConfig, QueueConfig, WorkerId, WorkerState};
use muster_proto::v1::app_event::Body as AppBody;
use muster_proto::v1::master_message::Body;
use muster_proto::v1::{AppEnded, AppEvent, ExecutorEvent};
use muster_proto::v1::{
    KillDriver as KillDriverMessage, KillExecutor as KillExecutorMessage, LaunchDriver,
    LaunchExecutor, MasterMessage,
};
use muster_raft::{Leadership, RaftNode};
use muster_state::commands::{AppFinished, ApplyPlan, SetQueues, WorkerLost};
use muster_state::model::{AppState, DriverState, Executor, ExecutorState};
use muster_state::{Command, Effects, ExecutorId, Op, Outcome, RequestId, Response, Timestamp};
use tokio::sync::{Notify, mpsc, watch};
use tonic::Status;

/// Timings of the leader's session.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// How long a new leader waits for known workers to report.
    pub recovery_timeout: Duration,
    /// How long an application whose client vanished may take to re-attach before it is
    /// finished for it.
    pub app_grace: Duration,
    /// How often workers heartbeat, and how often liveness is checked.
    pub heartbeat_interval: Duration,
    /// A worker silent this long is lost.
    pub worker_timeout: Duration,
    /// Scheduling runs at least this often while ALIVE.
    pub schedule_tick: Duration,
    /// The scheduling pass's settings; the seed is replaced by the leader's clock each pass.
    pub pass: PassConfig,
    /// Queues from this master's configuration, applied through the log once per distinct
    /// content when its session reaches ALIVE; `muster queues --set` changes them later.
    pub queues: Option<Vec<QueueConfig>>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            recovery_timeout: Duration::from_secs(15),
            app_grace: Duration::from_secs(10),
            heartbeat_interval: Duration::from_secs(1),
            worker_timeout: Duration::from_secs(15),
            schedule_tick: Duration::from_secs(1),
            pass: PassConfig::default(),
            queues: None,
        }
    }
}

/// Spark's `RecoveryState` for the leader's session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryState {
    /// Waiting for known workers to report.
    Recovering,
    /// Removing what never came back.
    CompletingRecovery,
    /// Scheduling.
    Alive,
}

impl RecoveryState {
    /// The name `muster status` shows.
    pub fn name(self) -> &'static str {
        match self {
            Self::Recovering => "RECOVERING",
            Self::CompletingRecovery => "COMPLETING_RECOVERY",
            Self::Alive => "ALIVE",
        }
    }
}

/// A process a worker runs for the log: an executor or a driver.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ProcessKey {
    /// An executor.
    Executor(AppId, ExecutorId),
    /// A driver.
    Driver(DriverId),
}

/// The leader's end of one worker's stream.
struct Link {
    sender: mpsc::Sender<Result<MasterMessage, Status>>,
}

/// The leader's end of one application's stream.
pub(crate) type AppLink = mpsc::Sender<Result<AppEvent, Status>>;

/// One term of leadership.
pub struct Session {
    node: Arc<RaftNode>,
    config: SessionConfig,
    /// The term this session leads.
    pub term: u64,
    state: Mutex<RecoveryState>,
    links: Mutex<HashMap<WorkerId, Link>>,
    /// When each worker was last heard from in this session, stream or not.
    heard: Mutex<HashMap<WorkerId, Instant>>,
    /// When the session began: every worker gets the full timeout from here.
    started: Instant,
    /// Workers the log had ALIVE at election that have not reported yet.
    awaited: Mutex<BTreeSet<WorkerId>>,
    /// Applications' streams, by app.
    app_links: Mutex<HashMap<AppId, AppLink>>,
    /// Applications active at election whose clients have not re-attached yet.
    awaited_apps: Mutex<BTreeSet<AppId>>,
    pids: Mutex<HashMap<ProcessKey, u32>>,
    /// Why each app or driver waits, as of the last scheduling pass.
    waiting: Mutex<HashMap<String, String>>,
    wake: Notify,
    ended: watch::Sender<bool>,
}

/// A command the leader originates, stamped with its clock (no client request id).
pub(crate) fn leader_command(op: Op) -> Command {
    Command {
        at: now(),
        request_id: None,
        op,
    }
}

/// The leader's wall-clock time, stamped on every command it writes.
pub fn now() -> Timestamp {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    Timestamp(u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX))
}

impl Session {
    fn new(node: Arc<RaftNode>, config: SessionConfig, term: u64) -> Arc<Self> {
        Arc::new(Self {
            node,
            config,
            term,
            state: Mutex::new(RecoveryState::Recovering),
            links: Mutex::default(),
            heard: Mutex::default(),
            started: Instant::now(),
            awaited: Mutex::default(),
            app_links: Mutex::default(),
            awaited_apps: Mutex::default(),
            pids: Mutex::default(),
            waiting: Mutex::default(),
            wake: Notify::new(),
            ended: watch::channel(false).0,
        })
    }

    /// Where recovery stands.
    pub fn recovery_state(&self) -> RecoveryState {
        *self.state.lock().expect("state lock")
    }

    /// The process id a worker reported for `key`.
    pub fn pid(&self, key: &ProcessKey) -> Option<u32> {
        self.pids.lock().expect("pids lock").get(key).copied()
    }

    /// Why app or driver `id` waits, as of the last scheduling pass.
    pub fn waiting(&self, id: &str) -> Option<String> {
        self.waiting.lock().expect("waiting lock").get(id).cloned()
    }

    /// Asks for a scheduling pass soon.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    fn is_over(&self) -> bool {
        *self.ended.borrow()
    }

    /// Ends the session: its loops stop and its worker streams close, telling each worker to
    /// look for the new leader.
    fn end(&self) {
        self.ended.send_replace(true);
        for (_, link) in self.links.lock().expect("links lock").drain() {
            let _ = link
                .sender
                .try_send(Err(Status::unavailable("this master no longer leads")));
        }
        for (_, link) in self.app_links.lock().expect("app links lock").drain() {
            let _ = link.try_send(Err(Status::unavailable("this master no longer leads")));
        }
    }

    /// Resolves (changes) when the session ends.
    pub fn ended(&self) -> watch::Receiver<bool> {
        self.ended.subscribe()
    }

    /// Commits a command the leader originates; a refusal or a lost leadership is logged.
    pub(crate) async fn write(&self, op: Op) -> Option<Response> {
        match self.node.write(leader_command(op)).await {
            Ok(Ok(response)) => Some(response),
            Ok(Err(refused)) => {
                tracing::debug!(%refused, "command refused");
                None
            }
            Err(error) => {
                tracing::warn!(%error, "command not committed");
                None
            }
        }
    }

    fn send(&self, worker: &WorkerId, body: Body) {
        let links = self.links.lock().expect("links lock");
        if let Some(link) = links.get(worker) {
            let message = MasterMessage {
                term: self.term,
                body: Some(body),
            };
            if link.sender.try_send(Ok(message)).is_err() {
                tracing::warn!(%worker, "worker stream full or closed; it will reconcile when it re-registers");
            }
        }
    }

    /// Carries out what a committed command asks of workers: stop what ended, except what the
    /// reporting worker itself said has ended.
    pub fn carry_out(&self, effects: &Effects, reported_by: Option<&WorkerId>) {
        for (app, executor) in &effects.ended_executors {
            self.executor_event(app, executor);
            self.pids
                .lock()
                .expect("pids lock")
                .remove(&ProcessKey::Executor(app.clone(), executor.id));
            if reported_by != Some(&executor.worker) {
                let body = Body::KillExecutor(KillExecutorMessage {
                    app_id: app.0.clone(),
                    executor_id: executor.id.0,
                });
                self.send(&executor.worker, body);
            }
        }
        for (driver, worker, _) in &effects.ended_drivers {
            self.pids
                .lock()
                .expect("pids lock")
                .remove(&ProcessKey::Driver(driver.clone()));
            if let Some(worker) = worker
                && reported_by != Some(worker)
            {
                self.send(
                    worker,
                    Body::KillDriver(KillDriverMessage {
                        driver_id: driver.0.clone(),
                    }),
                );
            }
        }
        for (app, state) in &effects.removed_apps {
            if let Some(link) = self.app_links.lock().expect("app links lock").remove(app) {
                let ended = AppEnded {
                    state: format!("{state:?}").to_uppercase(),
                };
                let _ = link.try_send(Ok(AppEvent {
                    body: Some(AppBody::Ended(ended)),
                }));
            }
        }
        if !effects.ended_executors.is_empty() || !effects.ended_drivers.is_empty() {
            self.wake();
        }
    }

    /// Tells `app`'s client what became of one of its executors.
    pub(crate) fn executor_event(&self, app: &AppId, executor: &Executor) {
        let links = self.app_links.lock().expect("app links lock");
        if let Some(link) = links.get(app) {
            let event = ExecutorEvent {
                executor_id: executor.id.0,
                worker: executor.worker.0.clone(),
                cores: executor.cores,
                memory_mb: executor.memory_mb,
                state: format!("{:?}", executor.state).to_uppercase(),
                exit_code: executor.exit_code,
            };
            let _ = link.try_send(Ok(AppEvent {
                body: Some(AppBody::Executor(event)),
            }));
        }
    }

    /// Tells `app`'s client that executor `id` now runs, as the log has it.
    pub(crate) fn executor_started(&self, app: &AppId, id: ExecutorId) {
        let executor = {
            let state = self.node.local_state();
            let state = state.read().expect("state lock");
            state
                .apps()
                .get(app)
                .and_then(|a| a.executors.get(&id))
                .cloned()
        };
        if let Some(executor) = executor {
            self.executor_event(app, &executor);
        }
    }

    /// Whether every worker and application the log knew at election has come back.
    fn recovered(&self) -> bool {
        self.awaited.lock().expect("awaited lock").is_empty()
            && self
                .awaited_apps
                .lock()
                .expect("awaited apps lock")
                .is_empty()
    }

    /// Takes an application's stream, replacing any earlier one.
    pub(crate) fn attach_app(&self, app: AppId, link: AppLink) {
        self.app_links
            .lock()
            .expect("app links lock")
            .insert(app.clone(), link);
        let all_back = {
            let mut awaited = self.awaited_apps.lock().expect("awaited apps lock");
            awaited.remove(&app);
            awaited.is_empty()
        };
        if all_back {
            self.wake();
        }
    }

    /// Forgets an application's stream if `link` is still the current one, and finishes the
    /// application unless its client re-attaches within the grace period.
    pub(crate) fn detach_app(self: &Arc<Self>, app: AppId, link: &AppLink) {
        {
            let mut links = self.app_links.lock().expect("app links lock");
            if !links
                .get(&app)
                .is_some_and(|current| current.same_channel(link))
            {
                return;
            }
            links.remove(&app);
        }
        let session = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(session.config.app_grace).await;
            let back = session
                .app_links
                .lock()
                .expect("app links lock")
                .contains_key(&app);
            if !back && !session.is_over() {
                tracing::info!(%app, "the application's client did not come back: finishing it");
                session.finish_app(app).await;
            }
        });
    }

    /// Finishes an application through the log and carries out the consequences.
    pub(crate) async fn finish_app(&self, app: AppId) {
        let op = Op::AppFinished(AppFinished {
            id: app,
            state: AppState::Finished,
        });
        if let Some(response) = self.write(op).await {
            self.carry_out(&response.effects, None);
        }
    }

    /// Takes a worker's stream: from now on launches and kills for it go to `sender`.
    pub fn attach(&self, worker: WorkerId, sender: mpsc::Sender<Result<MasterMessage, Status>>) {
        self.heartbeat(&worker);
        self.links
            .lock()
            .expect("links lock")
            .insert(worker.clone(), Link { sender });
        let all_back = {
            let mut awaited = self.awaited.lock().expect("awaited lock");
            awaited.remove(&worker);
            awaited.is_empty()
        };
        if all_back {
            self.wake();
        }
    }

    /// Forgets a worker's stream, if `sender` is still the current one.
    pub fn detach(&self, worker: &WorkerId, sender: &mpsc::Sender<Result<MasterMessage, Status>>) {
        let mut links = self.links.lock().expect("links lock");
        if links
            .get(worker)
            .is_some_and(|link| link.sender.same_channel(sender))
        {
            links.remove(worker);
        }
    }

    /// Records that `worker` was heard from.
    pub fn heartbeat(&self, worker: &WorkerId) {
        self.heard
            .lock()
            .expect("heard lock")
            .insert(worker.clone(), Instant::now());
    }

    /// Records the process id a worker reported.
    pub fn record_pid(&self, key: ProcessKey, pid: u32) {
        if pid != 0 {
            self.pids.lock().expect("pids lock").insert(key, pid);
        }
    }

    /// Recovery, then scheduling and liveness until the session ends.
    async fn run(self: Arc<Self>) {
        self.recover().await;
        if self.is_over() {
            return;
        }
        let liveness = tokio::spawn(Arc::clone(&self).watch_liveness());
        self.schedule_loop().await;
        liveness.abort();
    }

    async fn recover(&self) {
        let alive: BTreeSet<WorkerId> = match self
            .node
            .read(|state| {
                state
                    .workers()
                    .values()
                    .filter(|w| w.state == WorkerState::Alive)
                    .map(|w| w.id.clone())
                    .collect()
            })
            .await
        {
            Ok(alive) => alive,
            Err(error) => {
                tracing::warn!(%error, "cannot read the state to recover");
                return;
            }
        };
        {
            let links = self.links.lock().expect("links lock");
            let mut awaited = self.awaited.lock().expect("awaited lock");
            *awaited = alive
                .into_iter()
                .filter(|w| !links.contains_key(w))
                .collect();
            let active_apps: Vec<AppId> = self
                .node
                .local_state()
                .read()
                .expect("state lock")
                .apps()
                .keys()
                .cloned()
                .collect();
            let app_links = self.app_links.lock().expect("app links lock");
            *self.awaited_apps.lock().expect("awaited apps lock") = active_apps
                .into_iter()
                .filter(|a| !app_links.contains_key(a))
                .collect();
        }
        let deadline = Instant::now() + self.config.recovery_timeout;
        let mut ended = self.ended.subscribe();
        while !self.recovered() && Instant::now() < deadline {
            tokio::select! {
                () = self.wake.notified() => {}
                () = tokio::time::sleep_until(deadline.into()) => {}
                _ = ended.changed() => return,
            }
        }
        *self.state.lock().expect("state lock") = RecoveryState::CompletingRecovery;
        let missing: Vec<WorkerId> =
            std::mem::take(&mut *self.awaited.lock().expect("awaited lock"))
                .into_iter()
                .collect();
        for worker in missing {
            let reason = "did not reconnect after the master failover".to_owned();
            if let Some(response) = self
                .write(Op::WorkerLost(WorkerLost { id: worker, reason }))
                .await
            {
                self.carry_out(&response.effects, None);
            }
        }
        let gone: Vec<AppId> =
            std::mem::take(&mut *self.awaited_apps.lock().expect("awaited apps lock"))
                .into_iter()
                .collect();
        for app in gone {
            self.finish_app(app).await;
        }
        if let Some(queues) = &self.config.queues {
            self.apply_configured_queues(queues).await;
        }
        *self.state.lock().expect("state lock") = RecoveryState::Alive;
        tracing::info!(term = self.term, "leader ALIVE");
    }

    /// Writes the configured queues under a request id derived from their content, so that
    /// the same configuration is applied once however many leaders carry it.
    async fn apply_configured_queues(&self, queues: &[QueueConfig]) {
        // FNV-1a: stable across builds, unlike the standard library's hasher.
        let digest = format!("{queues:?}")
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
                (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
            });
        let command = Command {
            at: now(),
            request_id: Some(RequestId(format!("configured-queues-{digest:016x}"))),
            op: Op::SetQueues(SetQueues {
                queues: queues.to_vec(),
            }),
        };
        match self.node.write(command).await {
            Ok(Ok(_)) => {}
            Ok(Err(refused)) => tracing::warn!(%refused, "the configured queues were refused"),
            Err(error) => tracing::warn!(%error, "the configured queues were not committed"),
        }
    }

    async fn watch_liveness(self: Arc<Self>) {
        let mut ticks = tokio::time::interval(self.config.heartbeat_interval);
        loop {
            ticks.tick().await;
            if self.is_over() {
                return;
            }
            // Every worker the log has ALIVE must be heard from within the timeout, counted
            // from when it was last heard in this session, or from the session's start.
            let silent: Vec<WorkerId> = {
                let state = self.node.local_state();
                let state = state.read().expect("state lock");
                let heard = self.heard.lock().expect("heard lock");
                state
                    .workers()
                    .values()
                    .filter(|w| w.state == WorkerState::Alive)
                    .filter(|w| {
                        heard.get(&w.id).unwrap_or(&self.started).elapsed()
                            > self.config.worker_timeout
                    })
                    .map(|w| w.id.clone())
                    .collect()
            };
            for worker in silent {
                self.links.lock().expect("links lock").remove(&worker);
                self.heard.lock().expect("heard lock").remove(&worker);
                let reason = format!("no heartbeat for {:?}", self.config.worker_timeout);
                if let Some(response) = self
                    .write(Op::WorkerLost(WorkerLost { id: worker, reason }))
                    .await
                {
                    self.carry_out(&response.effects, None);
                }
            }
        }
    }

    async fn schedule_loop(&self) {
        let mut ended = self.ended.subscribe();
        loop {
            self.schedule_once().await;
            tokio::select! {
                () = self.wake.notified() => {}
                () = tokio::time::sleep(self.config.schedule_tick) => {}
                _ = ended.changed() => return,
            }
            if self.is_over() {
                return;
            }
        }
    }

    /// One pass: plan from the current state, commit it, then send the launches.
    async fn schedule_once(&self) {
        // Each pass draws its drivers' starting worker afresh; the plan carries the outcome,
        // so replicas never need the seed.
        let pass = PassConfig {
            seed: now().0,
            ..self.config.pass.clone()
        };
        let snapshot = match self
            .node
            .read(|state| state.scheduling_snapshot(pass))
            .await
        {
            Ok(snapshot) => snapshot,
            Err(_) => return,
        };
        let plan = match muster_core::schedule(&snapshot) {
            Ok(plan) => plan,
            Err(error) => {
                tracing::error!(%error, "the state gave an invalid scheduling snapshot");
                return;
            }
        };
        *self.waiting.lock().expect("waiting lock") = plan
            .waiting
            .iter()
            .map(|w| (w.id.clone(), w.reason.to_string()))
            .collect();
        if plan.drivers.is_empty() && plan.executors.is_empty() {
            return;
        }
        let Some(response) = self
            .write(Op::ApplyPlan(ApplyPlan {
                drivers: plan.drivers,
                executors: plan.executors,
            }))
            .await
        else {
            return;
        };
        let Outcome::PlanApplied {
            drivers,
            executors,
            rejected,
        } = response.outcome
        else {
            return;
        };
        if !rejected.is_empty() {
            tracing::info!(?rejected, "parts of a plan no longer fitted");
        }
        let state = self.node.local_state();
        let launches: Vec<(WorkerId, Body)> = {
            let state = state.read().expect("state lock");
            let driver_launches = drivers.iter().filter_map(|(id, worker)| {
                let driver = state.drivers().get(id)?;
                let desc = &driver.desc;
                Some((
                    worker.clone(),
                    Body::LaunchDriver(LaunchDriver {
                        driver_id: id.0.clone(),
                        cores: desc.cores,
                        memory_mb: desc.memory_mb,
                        command: desc.command.clone(),
                        args: desc.args.clone(),
                        env: desc.env.clone().into_iter().collect(),
                        supervise: desc.supervise,
                    }),
                ))
            });
            let executor_launches = executors.iter().filter_map(|(app, executor)| {
                let desc = &state.apps().get(app)?.desc;
                Some((
                    executor.worker.clone(),
                    Body::LaunchExecutor(LaunchExecutor {
                        app_id: app.0.clone(),
                        executor_id: executor.id.0,
                        cores: executor.cores,
                        memory_mb: executor.memory_mb,
                        command: desc.command.clone(),
                        args: desc.args.clone(),
                        env: desc.env.clone().into_iter().collect(),
                    }),
                ))
            });
            driver_launches.chain(executor_launches).collect()
        };
        for (worker, body) in launches {
            self.send(&worker, body);
        }
        for (app, executor) in &executors {
            self.executor_event(app, executor);
        }
    }
}

/// Follows leadership and keeps one session running while this replica leads.
pub struct Sessions {
    node: Arc<RaftNode>,
    config: SessionConfig,
    current: Mutex<Option<Arc<Session>>>,
}

impl Sessions {
    /// Starts following `node`'s leadership.
    pub fn start(node: Arc<RaftNode>, config: SessionConfig) -> Arc<Self> {
        let sessions = Arc::new(Self {
            node,
            config,
            current: Mutex::new(None),
        });
        tokio::spawn(Arc::clone(&sessions).follow());
        sessions
    }

    /// Ends the current session, if any, as a replica that stops leading would.
    pub fn stop(&self) {
        if let Some(session) = self.current.lock().expect("session lock").take() {
            session.end();
        }
    }

    /// The session of the current term, while this replica leads.
    pub fn current(&self) -> Option<Arc<Session>> {
        self.current.lock().expect("session lock").clone()
    }

    async fn follow(self: Arc<Self>) {
        let mut leadership = self.node.leadership();
        loop {
            let Leadership {
                term, is_leader, ..
            } = leadership.borrow_and_update().clone();
            self.follow_term(term, is_leader);
            if leadership.changed().await.is_err() {
                // Raft stopped: no replica work is left.
                self.follow_term(term, false);
                return;
            }
        }
    }

    /// Keeps the session of `term` while leading, ends it otherwise, and starts a new one for
    /// a new term.
    fn follow_term(&self, term: u64, is_leader: bool) {
        let mut current = self.current.lock().expect("session lock");
        if current
            .as_ref()
            .is_some_and(|s| is_leader && s.term == term)
        {
            return;
        }
        if let Some(old) = current.take() {
            tracing::info!(term = old.term, "leadership lost: session ends");
            old.end();
        }
        if is_leader {
            tracing::info!(term, "leader: recovering");
            let session = Session::new(Arc::clone(&self.node), self.config.clone(), term);
            *current = Some(Arc::clone(&session));
            tokio::spawn(session.run());
        }
    }
}

/// The executor state a worker's report names.
pub fn executor_state(name: &str) -> Option<ExecutorState> {
    Some(match name {
        "RUNNING" => ExecutorState::Running,
        "EXITED" => ExecutorState::Exited,
        "FAILED" => ExecutorState::Failed,
        "KILLED" => ExecutorState::Killed,
        "LOST" => ExecutorState::Lost,
        _ => return None,
    })
}

/// The driver state a worker's report names.
pub fn driver_state(name: &str) -> Option<DriverState> {
    Some(match name {
        "RUNNING" => DriverState::Running,
        "FINISHED" => DriverState::Finished,
        "FAILED" => DriverState::Failed,
        "KILLED" => DriverState::Killed,
        "ERROR" => DriverState::Error,
        _ => return None,
    })
}
