//! The worker agent: one stream to the leading master, and the [`Supervisor`] that runs what
//! the leader launches.
//!
//! The agent registers with its capacity, the processes it runs and every report no leader has
//! acknowledged yet; then it heartbeats and reports every process change, keeping each report
//! until the leader acknowledges it (so nothing that happened during a failover is lost: it
//! arrives with the next registration, before the leader reconciles). Launches and kills from
//! the leader carry its term; a command from a term older than the newest seen is ignored
//! (fencing a deposed leader). A launch of something already running is answered with its
//! RUNNING report again, so a leader may safely send a launch twice.
//!
//! The leader answers every heartbeat. When it stays silent for `leader_timeout` (frozen,
//! cut off), or the stream breaks, the agent looks for the leader among all masters,
//! following a follower's hint, with jittered back-off, and re-registers **without stopping
//! anything it runs**. A leader that counts this worker as lost closes the stream with
//! ABORTED; the agent registers again at once and the leader kills what it no longer
//! assigns here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use muster_core::agent::ShuffleServiceStatus;
use muster_core::ids::{ExecutorId, Term, WorkerId, millis};
use muster_core::resources::{ResourceAddresses, Resources, Usage};
use muster_core::restarts::Restarts;
use muster_proto::auth::Credential;
use muster_proto::convert::{address_lists, addresses, resources};
use muster_proto::discovery::{LeaderFinder, leader_hint};
use muster_proto::exit;
use muster_proto::transport::Dialer;
use muster_proto::v1;
use muster_proto::v1::BuildInfo;
use muster_proto::v1::master_message::Body as Down;
use muster_proto::v1::worker_link_client::WorkerLinkClient;
use muster_proto::v1::worker_message::Body as Up;
use muster_proto::v1::{
    DriverUpdate, ExecutorUpdate, Heartbeat, LogChunk, MasterMessage, ReadLog, Register,
    RunningDriver, RunningExecutor, WorkerMessage,
};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

use crate::cleanup::CleanupPolicy;
use crate::isolation::Cgroups;
use crate::metrics::Metrics;
use crate::output::{Stream, read_chunk};
use crate::shuffle::{self, ShuffleServiceConfig};
use crate::supervisor::{
    LaunchError, LaunchSpec, ProcessEvent, ProcessState, Supervisor, SupervisorConfig, Workload,
};

/// How one worker runs.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// Every master's `host:port`.
    pub masters: Vec<String>,
    /// What its stream to the leader carries: the worker credential of the cluster's secret.
    pub credential: Credential,
    /// How it connects to the masters: plain, or TLS against the cluster's CA.
    pub dialer: Dialer,
    /// This worker's id.
    pub id: WorkerId,
    /// Its host name.
    pub host: String,
    /// Its rack label, for locality inside applications; empty for none.
    pub rack: String,
    /// What drivers it starts get to call the masters as clients (see
    /// [`SupervisorConfig::driver_environment`]).
    pub driver_environment: Vec<(&'static str, String)>,
    /// The cores, memory and custom resources it offers.
    pub capacity: Resources,
    /// The addresses of its custom resources, where they are not `0` to the amount less one.
    pub addresses: ResourceAddresses,
    /// Where processes get their directories.
    pub work_dir: PathBuf,
    /// Heartbeat period.
    pub heartbeat_interval: Duration,
    /// A leader silent this long (no answer to heartbeats) is given up: the agent looks for
    /// the leader again.
    pub leader_timeout: Duration,
    /// Time between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// The control groups that limit each process to its grant; `None` runs them unlimited.
    pub isolation: Option<Cgroups>,
    /// Kill everything this worker runs once it has been cut off from every leader for the
    /// leader's worker timeout, so that nothing it runs can overlap with its relaunch
    /// elsewhere (off by default, as in Spark and Nomad: a master outage then costs no work).
    pub fence: bool,
    /// The build this agent runs, which it tells the leader.
    pub build: BuildInfo,
    /// The Spark its drivers find in `SPARK_HOME` (one holding `bin/spark-submit`), which
    /// it tells the leader: the REST gateway's drivers need one.
    pub spark_home: Option<PathBuf>,
    /// Stop every process when the agent stops. Off, an agent stopped for an upgrade or a
    /// restart leaves its drivers and executors running, and the next agent on the work dir
    /// adopts them, as it does after a crash (YARN's work-preserving NodeManager restart,
    /// Nomad's client restart).
    pub stop_work_on_exit: bool,
    /// When the directories of ended processes are removed.
    pub cleanup: CleanupPolicy,
    /// Spark's external shuffle service, when this worker runs one for its host.
    pub shuffle_service: Option<ShuffleServiceConfig>,
}

/// The id kept in `work_dir/worker-id`, created on first start, so that a restarted worker
/// comes back under the same id.
///
/// # Errors
///
/// The work dir cannot be read or written.
pub fn stable_id(work_dir: &std::path::Path, host: &str) -> std::io::Result<WorkerId> {
    let path = work_dir.join("worker-id");
    if let Ok(id) = std::fs::read_to_string(&path) {
        return Ok(WorkerId::from(id.trim()));
    }
    std::fs::create_dir_all(work_dir)?;
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    // A host already named `worker-...` (as `muster dev` names them) is not prefixed twice.
    let name = host.strip_prefix("worker-").unwrap_or(host);
    let id = format!("worker-{name}-{:x}", nanos ^ u128::from(std::process::id()));
    std::fs::write(&path, &id)?;
    Ok(WorkerId::from(id))
}

/// Takes `work_dir` for this agent alone: a second agent on the same work dir would adopt,
/// and kill, the first one's work. Keep the returned file open while the agent runs.
///
/// # Errors
///
/// Another agent holds the work dir, or it cannot be created.
pub fn lock_work_dir(work_dir: &std::path::Path) -> std::io::Result<std::fs::File> {
    std::fs::create_dir_all(work_dir)?;
    let lock = std::fs::File::create(work_dir.join(".lock"))?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(std::fs::TryLockError::WouldBlock) => Err(std::io::Error::other(format!(
            "another worker agent runs on {}",
            work_dir.display()
        ))),
        Err(std::fs::TryLockError::Error(error)) => Err(error),
    }
}

/// Runs the worker, counting into `metrics`, until `shutdown` resolves; then stops its
/// processes if [`AgentConfig::stop_work_on_exit`] says so, or leaves them for the next agent.
pub async fn run(config: AgentConfig, metrics: Arc<Metrics>, shutdown: impl Future<Output = ()>) {
    let supervisor_config = SupervisorConfig {
        kill_grace: config.kill_grace,
        host: config.host.clone(),
        rack: config.rack.clone(),
        driver_environment: config.driver_environment.clone(),
        executor_environment: config
            .shuffle_service
            .iter()
            .map(|service| (shuffle::PORT_VARIABLE, service.port.to_string()))
            .collect(),
        isolation: config.isolation.clone(),
        // Absolute: the wrapper runs in the process's own directory.
        fence_file: config.fence.then(|| {
            std::fs::canonicalize(&config.work_dir)
                .unwrap_or_else(|_| config.work_dir.clone())
                .join(FENCE_FILE)
        }),
        ..SupervisorConfig::new(config.work_dir.clone(), config.masters.join(","))
    };
    if !config.fence {
        // What a fencing predecessor started watches its fence file: without one, nothing
        // is fenced any more.
        let fence = config.work_dir.join(FENCE_FILE);
        let _ = std::fs::remove_file(crate::fence::contact_file(&fence));
        let _ = std::fs::remove_file(fence);
    }
    let (supervisor, events) = Supervisor::new(supervisor_config);
    let supervisor = Arc::new(supervisor);
    // What a crashed predecessor started is taken over (or killed) before registering, so
    // the first registration reports it.
    supervisor.adopt();
    // A fencing agent restarted while cut off keeps counting from its predecessor's last
    // contact with a leader.
    let (fence_after, last_contact) = match config.fence.then(|| last_fence(&config.work_dir)) {
        Some(Some((after, contact))) => (Some(after), contact),
        _ => (None, Instant::now()),
    };
    shuffle::stop_unwanted(&supervisor, config.shuffle_service.as_ref());
    let cleaner = tokio::spawn(clean_up(Arc::clone(&supervisor), config.cleanup));
    let (shuffle_status, shuffle_service) = watch::channel(ShuffleServiceStatus {
        port: config.shuffle_service.as_ref().map_or(0, |s| s.port),
        ..ShuffleServiceStatus::default()
    });
    let shuffle_keeper = config.shuffle_service.clone().map(|service| {
        tokio::spawn(shuffle::keep_running(
            Arc::clone(&supervisor),
            service,
            Arc::clone(&metrics),
            shuffle_status,
        ))
    });
    let mut agent = Agent {
        config,
        metrics,
        supervisor,
        events,
        unacknowledged: BTreeMap::new(),
        next_seq: 1,
        last_contact,
        contact_saved: last_contact,
        fence_after,
        fenced: BTreeSet::new(),
        highest_term: Term::default(),
        shuffle_service,
    };
    tokio::select! {
        () = agent.serve() => {}
        () = shutdown => {}
    }
    cleaner.abort();
    if let Some(keeper) = shuffle_keeper {
        keeper.abort();
    }
    if agent.config.stop_work_on_exit {
        agent.supervisor.shutdown().await;
    } else {
        let running = agent.supervisor.running().len();
        tracing::info!(
            running,
            "stopping; what runs here keeps running, for the next agent on this work dir to adopt"
        );
    }
}

struct Agent {
    config: AgentConfig,
    metrics: Arc<Metrics>,
    supervisor: Arc<Supervisor>,
    events: mpsc::UnboundedReceiver<ProcessEvent>,
    /// Reports no leader has acknowledged yet, by sequence number.
    unacknowledged: BTreeMap<u64, Up>,
    /// The next report's sequence number.
    next_seq: u64,
    /// When a leader was last heard from.
    last_contact: Instant,
    /// When `last_contact` was last written to the work dir (fencing only).
    contact_saved: Instant,
    /// With fencing on, how long without a leader before everything is killed: the leader's
    /// worker timeout, once a leader has said it.
    fence_after: Option<Duration>,
    /// Workloads killed by the fence, whose ends are reported as lost.
    fenced: BTreeSet<Workload>,
    /// The newest leader term seen.
    highest_term: Term,
    /// The shuffle service as last probed, when the worker runs one.
    shuffle_service: watch::Receiver<ShuffleServiceStatus>,
}

/// Why a stream ended.
enum Broken {
    /// Try this address next.
    LeaderAt(String),
    /// The leader stopped answering: try the others first.
    Silent(String),
    /// A working stream ended: look for the leader afresh.
    Ended(String),
    /// Try the next master.
    Retry(String),
}

impl Agent {
    /// Keeps a stream to the leader open for as long as the agent runs.
    async fn serve(&mut self) {
        let mut finder = LeaderFinder::new(self.config.masters.clone());
        loop {
            self.maybe_fence();
            let addr = finder.next_master();
            let broken = self.session(&addr).await;
            self.metrics.connected(false);
            match broken {
                Broken::LeaderAt(leader) => tokio::time::sleep(finder.hinted(&leader)).await,
                Broken::Silent(reason) => {
                    tracing::info!(master = %addr, %reason, "the leader fell silent");
                    finder.found();
                    finder.silent(&addr);
                }
                Broken::Ended(reason) => {
                    tracing::info!(master = %addr, %reason, "the leader stream ended");
                    finder.found();
                }
                Broken::Retry(reason) => {
                    tracing::info!(master = %addr, %reason, "no leader stream");
                    tokio::time::sleep(finder.failed()).await;
                }
            }
        }
    }

    /// What this worker says when it registers: what runs, then every report not yet
    /// acknowledged, including events that arrived while no leader listened. The list comes
    /// first: a process that ends meanwhile is then in the list, in the reports, or in both,
    /// never in neither.
    fn registration(&mut self) -> WorkerMessage {
        let running = self.supervisor.running();
        self.metrics.running(&running);
        while let Ok(event) = self.events.try_recv() {
            self.record(&event);
        }
        let mut executors = Vec::new();
        let mut drivers = Vec::new();
        for (workload, pid) in running {
            match workload {
                Workload::Executor { app, executor } => {
                    executors.push(RunningExecutor {
                        app_id: app.to_string(),
                        executor_id: executor.0,
                        pid,
                    });
                }
                Workload::Driver { driver } => drivers.push(RunningDriver {
                    restarts: self.restarts(&Workload::Driver {
                        driver: driver.clone(),
                    }),
                    driver_id: driver.0,
                    pid,
                }),
                Workload::ShuffleService => {}
            }
        }
        let register = Register {
            worker_id: self.config.id.to_string(),
            host: self.config.host.clone(),
            address: self.config.host.clone(),
            capacity: Some((&self.config.capacity).into()),
            addresses: address_lists(&self.config.addresses),
            executors,
            drivers,
            fence: self.config.fence,
            kill_grace_ms: millis(self.config.kill_grace),
            build: Some(self.config.build.clone()),
            shuffle_service: self.shuffle_service_status(),
            spark_home: Some(
                self.config
                    .spark_home
                    .as_ref()
                    .map(|home| home.display().to_string())
                    .unwrap_or_default(),
            ),
            ..Register::default()
        };
        WorkerMessage {
            body: Some(Up::Register(
                register.unacknowledged(self.unacknowledged.values()),
            )),
        }
    }

    /// The shuffle service as the leader is told of it, when this worker runs one.
    fn shuffle_service_status(&self) -> Option<v1::ShuffleService> {
        self.config.shuffle_service.as_ref()?;
        let status = *self.shuffle_service.borrow();
        Some(status.into())
    }

    /// One stream to `addr`: register, then relay until it breaks or the leader falls silent.
    async fn session(&mut self, addr: &str) -> Broken {
        let timeout = self.config.leader_timeout;
        let endpoint = match self.config.dialer.endpoint(addr) {
            Ok(endpoint) => endpoint
                .connect_timeout(timeout)
                .http2_keep_alive_interval(timeout / 2)
                .keep_alive_timeout(timeout),
            Err(e) => return Broken::Retry(e.to_string()),
        };
        let (up, outbound) = mpsc::channel(1024);
        if up.send(self.registration()).await.is_err() {
            return Broken::Retry("stream closed".into());
        }
        // A frozen master accepts connections and never answers: bound the whole attempt.
        let attach = async {
            let channel = endpoint.connect().await.map_err(|e| e.to_string())?;
            let mut request = tonic::Request::new(ReceiverStream::new(outbound));
            self.config.credential.attach(request.metadata_mut());
            Ok::<_, String>(WorkerLinkClient::new(channel).attach(request).await)
        };
        let mut inbound = match tokio::time::timeout(timeout, attach).await {
            Err(_) => return Broken::Retry("no answer to the registration".into()),
            Ok(Err(error)) => return Broken::Retry(error),
            Ok(Ok(Ok(response))) => response.into_inner(),
            Ok(Ok(Err(status))) => {
                return match leader_hint(&status, addr) {
                    Some(leader) => Broken::LeaderAt(leader.to_owned()),
                    None => Broken::Retry(status.message().to_owned()),
                };
            }
        };
        tracing::info!(master = %addr, "attached to the leader");
        self.metrics.connected(true);
        let mut heartbeats = tokio::time::interval(self.config.heartbeat_interval);
        let mut heard = Instant::now();
        loop {
            tokio::select! {
                _ = heartbeats.tick() => {
                    self.maybe_fence();
                    self.metrics.running(&self.supervisor.running());
                    if heard.elapsed() > timeout {
                        return Broken::Silent(format!("no answer for {timeout:?}"));
                    }
                    let usage = self.supervisor.usage();
                    self.metrics.usage(&usage);
                    let heartbeat = Heartbeat {
                        usage: usage.iter().filter_map(process_usage).collect(),
                        shuffle_service: self.shuffle_service_status(),
                        apps_with_data: self.supervisor.apps_with_data().iter().map(ToString::to_string).collect(),
                    };
                    if up.send(WorkerMessage { body: Some(Up::Heartbeat(heartbeat)) }).await.is_err() {
                        return Broken::Ended("stream closed".into());
                    }
                }
                event = self.events.recv() => {
                    let Some(report) = event.and_then(|e| self.record(&e)) else { continue };
                    if up.send(WorkerMessage { body: Some(report) }).await.is_err() {
                        return Broken::Ended("stream closed".into());
                    }
                }
                message = inbound.message() => match message {
                    Ok(Some(message)) => {
                        heard = Instant::now();
                        self.contact(heard);
                        self.obey(message, &up).await;
                    }
                    Ok(None) => return Broken::Ended("the master closed the stream".into()),
                    // The leader counts this worker as lost: register again with it at once.
                    Err(status) if status.code() == Code::Aborted => {
                        tracing::warn!(master = %addr, reason = status.message(), "registering again");
                        return Broken::LeaderAt(addr.to_owned());
                    }
                    // A refused registration: wait before trying again.
                    Err(status) if status.code() == Code::InvalidArgument => {
                        return Broken::Retry(status.message().to_owned());
                    }
                    Err(status) => return Broken::Ended(status.message().to_owned()),
                },
            }
        }
    }

    /// Notes that a leader was heard from at `now`; a fencing agent writes it down (at most
    /// once a second) for a successor that starts while this worker is cut off.
    fn contact(&mut self, now: Instant) {
        self.last_contact = now;
        if self.fence_after.is_some() && now - self.contact_saved >= Duration::from_secs(1) {
            self.contact_saved = now;
            let fence = self.config.work_dir.join(FENCE_FILE);
            // The contact file for this build's wrappers, then the file's time, the same, for
            // those an older agent started; each whatever became of the other. In that order
            // the fence file is never newer than the contact, which would discount it.
            let at = SystemTime::now();
            let noted = crate::fence::note_contact(&fence, at);
            let touched = std::fs::File::options()
                .write(true)
                .open(&fence)
                .and_then(|file| file.set_modified(at));
            for failed in [noted, touched].into_iter().filter_map(Result::err) {
                tracing::warn!(error = %failed, "cannot note the last contact in the work dir");
            }
        }
    }

    /// With fencing on, kills everything once no leader has been heard from for the worker
    /// timeout: by then a leader may count this worker lost and relaunch its work elsewhere.
    fn maybe_fence(&mut self) {
        let Some(after) = self.fence_after else {
            return;
        };
        if self.last_contact.elapsed() <= after {
            return;
        }
        let mut killed = 0;
        let assigned = self
            .supervisor
            .running()
            .into_iter()
            .filter(|(w, _)| w.is_assigned());
        for (workload, _) in assigned {
            if self.supervisor.kill(&workload, None) {
                self.fenced.insert(workload);
                killed += 1;
            }
        }
        if killed > 0 {
            tracing::warn!(
                silent = ?self.last_contact.elapsed(),
                killed,
                "no leader for the worker timeout: fencing, killing everything"
            );
        }
    }

    /// Numbers the report a process event makes, if any, and keeps it until acknowledged.
    fn record(&mut self, event: &ProcessEvent) -> Option<Up> {
        let end = match &event.state {
            ProcessState::Exited { code } => Some(code.to_string()),
            ProcessState::Killed { .. } => Some("killed".to_owned()),
            ProcessState::OutOfMemory => Some("oom".to_owned()),
            ProcessState::Failed { .. } => Some("failed".to_owned()),
            ProcessState::Running { .. } | ProcessState::Restarting { .. } => None,
        };
        if let Some(code) = end {
            self.metrics.ended(&event.workload, code);
            if !event.workload.is_assigned() {
                // No leader hears of it: its record goes now.
                self.supervisor.forget(&event.workload);
            }
        }
        self.metrics.running(&self.supervisor.running());
        let mut report = report(event)?;
        if let (Up::Driver(update), ProcessState::Running { restarts, .. }) =
            (&mut report, &event.state)
        {
            update.restarts = restarts.map(wire_restarts);
        }
        if matches!(event.state, ProcessState::Killed { .. }) && self.fenced.remove(&event.workload)
        {
            // Not asked for by any leader: a supervised driver must run again elsewhere.
            if let Up::Driver(update) = &mut report {
                update.set_state(v1::DriverState::Relaunching);
            }
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        match &mut report {
            Up::Executor(update) => update.seq = seq,
            Up::Driver(update) => update.seq = seq,
            Up::Register(_) | Up::Heartbeat(_) | Up::LogChunk(_) => {}
        }
        self.unacknowledged.insert(seq, report.clone());
        self.metrics.unacknowledged(self.unacknowledged.len());
        Some(report)
    }

    /// What the leader is told of `workload`'s restarts now, a supervised driver started
    /// again here.
    fn restarts(&self, workload: &Workload) -> Option<v1::Restarts> {
        self.supervisor.restarts(workload).map(wire_restarts)
    }

    /// Carries out one command from the leader, unless an older term sent it.
    async fn obey(&mut self, message: MasterMessage, up: &mpsc::Sender<WorkerMessage>) {
        let term = Term(message.term);
        if term < self.highest_term {
            tracing::warn!(
                %term,
                newest = %self.highest_term,
                "ignoring a deposed leader"
            );
            return;
        }
        self.highest_term = term;
        let Some(body) = message.body else { return };
        match body {
            Down::Registered(registered) => {
                tracing::info!("registered with the leader");
                if self.config.fence {
                    let after = Duration::from_millis(registered.worker_timeout_ms);
                    self.fence_after = Some(after);
                    if let Err(error) = std::fs::write(
                        self.config.work_dir.join(FENCE_FILE),
                        registered.worker_timeout_ms.to_string(),
                    ) {
                        tracing::warn!(%error, "cannot keep the fence in the work dir");
                    }
                }
            }
            Down::HeartbeatAck(_) => {}
            Down::AppsEnded(ended) => {
                for app in ended.app_ids {
                    if self.supervisor.remove_app_data(&app.as_str().into()) {
                        tracing::info!(%app, "removed the data of an ended application");
                    }
                }
            }
            Down::Acknowledged(acknowledged) => {
                for seq in acknowledged.seqs {
                    match self.unacknowledged.remove(&seq) {
                        // The leader has the end: the process's record may go.
                        Some(Up::Executor(update))
                            if update.state() != v1::ExecutorState::Running =>
                        {
                            self.supervisor.forget(&Workload::Executor {
                                app: update.app_id.as_str().into(),
                                executor: ExecutorId(update.executor_id),
                            });
                        }
                        Some(Up::Driver(update)) if update.state() != v1::DriverState::Running => {
                            self.supervisor.forget(&Workload::Driver {
                                driver: update.driver_id.as_str().into(),
                            });
                        }
                        _ => {}
                    }
                }
                self.metrics.unacknowledged(self.unacknowledged.len());
            }
            Down::LaunchExecutor(launch) => {
                let workload = Workload::Executor {
                    app: launch.app_id.as_str().into(),
                    executor: ExecutorId(launch.executor_id),
                };
                let spec = LaunchSpec {
                    workload: workload.clone(),
                    command: launch.command,
                    args: launch.args,
                    env: launch.env.into_iter().collect(),
                    resources: resources(launch.resources),
                    supervise: false,
                    credential: None,
                    addresses: addresses(launch.addresses),
                };
                self.start(spec, up).await;
            }
            Down::LaunchDriver(launch) => {
                let spec = LaunchSpec {
                    workload: Workload::Driver {
                        driver: launch.driver_id.as_str().into(),
                    },
                    command: launch.command,
                    args: launch.args,
                    env: launch.env.into_iter().collect(),
                    resources: resources(launch.resources),
                    supervise: launch.supervise,
                    credential: (!launch.credential.is_empty()).then_some(launch.credential),
                    addresses: addresses(launch.addresses),
                };
                self.start(spec, up).await;
            }
            Down::KillExecutor(kill) => {
                let workload = Workload::Executor {
                    app: kill.app_id.as_str().into(),
                    executor: ExecutorId(kill.executor_id),
                };
                self.supervisor
                    .kill(&workload, kill.grace_ms.map(Duration::from_millis));
            }
            Down::KillDriver(kill) => {
                let workload = Workload::Driver {
                    driver: kill.driver_id.as_str().into(),
                };
                self.supervisor.kill(&workload, None);
            }
            Down::ReadLog(read) => self.read_log(read, up),
        }
    }

    /// Answers a read of a process's output on a task of its own, so that a slow disk holds
    /// up no heartbeat. Whether the process runs is taken before the file is read: a reader
    /// told it no longer runs has everything it wrote.
    fn read_log(&self, read: ReadLog, up: &mpsc::Sender<WorkerMessage>) {
        let workload = if read.driver_id.is_empty() {
            Workload::Executor {
                app: read.app_id.as_str().into(),
                executor: ExecutorId(read.executor_id),
            }
        } else {
            Workload::Driver {
                driver: read.driver_id.as_str().into(),
            }
        };
        let stream = match read.stream() {
            v1::LogStream::Stdout => Stream::Stdout,
            v1::LogStream::Stderr => Stream::Stderr,
        };
        let read_request = read.request;
        let running = self.supervisor.pid(&workload).is_some();
        let cleaned_up = !running && self.supervisor.cleaned_up(&workload);
        let path = self.supervisor.output_file(&workload, stream);
        let up = up.clone();
        tokio::spawn(async move {
            let read = match path {
                Ok(path) => match read_chunk(&path, read.offset, read.max_bytes).await {
                    // Its directory exists, or it runs: it has written nothing yet.
                    Err(error)
                        if error.kind() == std::io::ErrorKind::NotFound
                            && (running || path.parent().is_some_and(std::path::Path::exists)) =>
                    {
                        Ok((Vec::new(), 0))
                    }
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound && cleaned_up => {
                        Err(format!(
                            "the output of {workload} was cleaned up from this worker's work dir \
                             after it ended (muster worker --cleanup-ttl)"
                        ))
                    }
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                        Err(format!("this worker has no output of {workload}"))
                    }
                    read => read.map_err(|e| format!("{} of {workload}: {e}", stream.file_name())),
                },
                Err(error) => Err(error.to_string()),
            };
            let mut chunk = LogChunk {
                request: read_request,
                running,
                ..LogChunk::default()
            };
            match read {
                Ok((data, size)) => (chunk.data, chunk.size) = (data, size),
                Err(error) => chunk.error = error,
            }
            // Never waits for room among the reports: a full or broken stream drops the
            // answer, and the leader's caller times out and retries.
            let _ = up.try_send(WorkerMessage {
                body: Some(Up::LogChunk(chunk)),
            });
        });
    }

    /// Starts `spec`; a launch of something already running reports it RUNNING again.
    async fn start(&mut self, spec: LaunchSpec, up: &mpsc::Sender<WorkerMessage>) {
        let workload = spec.workload.clone();
        let state = match self.supervisor.launch(spec) {
            Ok(_) => {
                self.metrics.launched(&workload);
                return;
            }
            // Its end is reported once it is gone; the leader decides again then.
            Err(LaunchError::Stopping(_)) => {
                tracing::info!(%workload, "launch ignored: still stopping");
                return;
            }
            Err(LaunchError::AlreadyRunning(_)) => {
                // A driver waiting to start again has said so already.
                let Some(pid) = self.supervisor.pid(&workload).filter(|&pid| pid != 0) else {
                    return;
                };
                let restarts = self.supervisor.restarts(&workload);
                ProcessState::Running { pid, restarts }
            }
            Err(error) => {
                tracing::warn!(%workload, %error, "launch failed");
                ProcessState::Failed {
                    reason: error.to_string(),
                }
            }
        };
        let event = ProcessEvent { workload, state };
        if let Some(report) = self.record(&event) {
            // A broken stream is noticed by the caller; the report waits unacknowledged.
            let _ = up.send(WorkerMessage { body: Some(report) }).await;
        }
    }
}

/// Where a fencing worker keeps the leader's worker timeout (in ms); the file's modification
/// time is its last contact with a leader, give or take a second.
const FENCE_FILE: &str = ".fence";

/// Removes what ended processes left in the work dir, every `policy.every`, for as long as
/// the agent runs.
async fn clean_up(supervisor: Arc<Supervisor>, policy: CleanupPolicy) {
    let mut every = tokio::time::interval(policy.every);
    loop {
        every.tick().await;
        let supervisor = Arc::clone(&supervisor);
        let cleaned = tokio::task::spawn_blocking(move || {
            supervisor.clean_up(std::time::SystemTime::now(), &policy)
        })
        .await;
        match cleaned {
            Ok(Ok(removed)) if !removed.is_empty() => {
                tracing::info!(
                    removed = removed.len(),
                    "removed the directories of ended processes"
                );
            }
            Ok(Ok(_)) => {}
            Ok(Err(error)) => tracing::warn!(%error, "cannot clean up the work dir"),
            Err(error) => tracing::warn!(%error, "the work dir cleanup failed"),
        }
    }
}

/// The fence a predecessor kept in `work_dir`: the worker timeout and the last contact.
fn last_fence(work_dir: &std::path::Path) -> Option<(Duration, Instant)> {
    let path = work_dir.join(FENCE_FILE);
    let after = std::fs::read_to_string(&path).ok()?.trim().parse().ok()?;
    let since = match crate::fence::since_contact(&path) {
        Some(since) => since,
        // An older agent's fence: its file's time.
        None => SystemTime::now()
            .duration_since(std::fs::metadata(&path).ok()?.modified().ok()?)
            .unwrap_or(Duration::ZERO),
    };
    let now = Instant::now();
    Some((
        Duration::from_millis(after),
        now.checked_sub(since).unwrap_or(now),
    ))
}

/// A supervised driver's `restarts` as the leader is told them: the wait before its next start
/// counted from now.
fn wire_restarts(restarts: Restarts<std::time::Instant>) -> v1::Restarts {
    restarts.told_at(std::time::Instant::now()).into()
}

/// The report a process event makes to the leader, if any, not yet numbered. A supervised
/// driver's failed run is reported as RUNNING without a process, with its restarts.
fn report(event: &ProcessEvent) -> Option<Up> {
    let (pid, exit_code) = match event.state {
        ProcessState::Running { pid, .. } => (pid, None),
        ProcessState::Exited { code } => (0, Some(code)),
        ProcessState::OutOfMemory => (0, Some(exit::OVER_MEMORY_LIMIT)),
        ProcessState::Killed { code } => (0, code),
        ProcessState::Failed { .. } | ProcessState::Restarting { .. } => (0, None),
    };
    let body = match &event.workload {
        Workload::Executor { app, executor } => {
            let state = match event.state {
                ProcessState::Running { .. } => v1::ExecutorState::Running,
                ProcessState::Killed { .. } => v1::ExecutorState::Killed,
                ProcessState::Exited { .. } => v1::ExecutorState::Exited,
                ProcessState::OutOfMemory | ProcessState::Failed { .. } => {
                    v1::ExecutorState::Failed
                }
                // Only drivers are supervised.
                ProcessState::Restarting { .. } => return None,
            };
            Up::Executor(ExecutorUpdate {
                app_id: app.to_string(),
                executor_id: executor.0,
                state: state.into(),
                exit_code,
                pid,
                seq: 0,
            })
        }
        Workload::Driver { driver } => {
            let state = match event.state {
                ProcessState::Running { .. } | ProcessState::Restarting { .. } => {
                    v1::DriverState::Running
                }
                ProcessState::Killed { .. } => v1::DriverState::Killed,
                ProcessState::Exited { code: 0 } => v1::DriverState::Finished,
                ProcessState::Exited { .. } | ProcessState::OutOfMemory => v1::DriverState::Failed,
                ProcessState::Failed { .. } => v1::DriverState::Error,
            };
            let restarts = match event.state {
                ProcessState::Restarting {
                    attempt,
                    after,
                    last_exit_code,
                } => Some(v1::Restarts::from(Restarts {
                    count: attempt,
                    last_exit_code,
                    starts_again: Some(after),
                })),
                _ => None,
            };
            Up::Driver(DriverUpdate {
                driver_id: driver.0.clone(),
                state: state.into(),
                exit_code,
                pid,
                seq: 0,
                restarts,
            })
        }
        Workload::ShuffleService => return None,
    };
    Some(body)
}

/// What `workload`'s process uses, as a heartbeat carries it: a driver's or an executor's.
fn process_usage((workload, usage): &(Workload, Usage)) -> Option<v1::ProcessUsage> {
    let (app_id, executor_id, driver_id) = match workload {
        Workload::Executor { app, executor } => (app.to_string(), executor.0, String::new()),
        Workload::Driver { driver } => (String::new(), 0, driver.to_string()),
        Workload::ShuffleService => return None,
    };
    Some(v1::ProcessUsage {
        app_id,
        executor_id,
        driver_id,
        memory_bytes: usage.memory_bytes,
        cpu_ms: usage.cpu_ms,
    })
}
