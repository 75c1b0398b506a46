//! The driver: runs a job file's jobs on the application's executors. This process is the
//! driver (`muster job run`, Spark's client mode); it registers the application with the
//! masters, serves the executors' task streams, and carries out what the pure
//! [`JobScheduler`] decides: every second it offers all free cores (Spark's revive), after
//! each task end the free cores of that executor, and it submits jobs at their `at_ms`.
//!
//! Executors authenticate with a credential of the driver's own random secret, and the
//! driver with a TLS certificate made for the run, whose CA the executors trust alone; both
//! reach the executors in their environment, through the master. A master failover does not disturb the
//! run: the application link re-attaches and the executors' streams go to this process.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use muster_core::ids::{ExecutorId, Timestamp, millis};
use muster_core::tasks::allocation::{Allocation, AllocationChange};
use muster_core::tasks::jobs::{JobScheduler, JobState};
use muster_core::tasks::scheduler::{Launch, TaskEnd};
use muster_core::tasks::{JobId, StageId, TaskId};
use muster_proto::auth::{Role, Secret};
use muster_proto::exit;
use muster_proto::transport::{ThrowawayTls, TlsError};
use muster_proto::v1::app_message::Body as AppRequest;
use muster_proto::v1::driver_message::Body as Down;
use muster_proto::v1::executor_message::Body as Up;
use muster_proto::v1::task_link_server::{TaskLink, TaskLinkServer};
use muster_proto::v1::task_work::Kind;
use muster_proto::v1::{
    Command, DriverMessage, ExecutorEvent, ExecutorMessage, ExecutorState, KillTask, Noop,
    RegisterApp, ReleaseExecutors, RunTask, SetExecutorLimit, TaskEnded, TaskState, TaskWork,
};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status, Streaming};

use crate::app::{self, AppUpdate, LinkError, MasterLink};
use crate::executor::{CA_VARIABLE, CREDENTIAL_VARIABLE, DRIVER_VARIABLE};
use crate::spec::{JobFile, Work};

/// How often every free core is offered (Spark's `spark.scheduler.revive.interval`).
const REVIVE_INTERVAL: Duration = Duration::from_secs(1);
/// How often dynamic allocation looks at the backlog and speculation for slow tasks
/// (Spark's 100 ms for both).
const CHECK_INTERVAL: Duration = Duration::from_millis(100);
/// How often the task link checks that an executor's connection is alive; three missed
/// answers close it.
const KEEPALIVE: Duration = Duration::from_secs(2);
/// How long an interrupted run waits for the masters to finish its application.
const FINISH_PATIENCE: Duration = Duration::from_secs(10);
/// How long a new executor stream may take to say which executor it is.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an executor whose stream closed waits for the masters' word on why it ended
/// before its attempts are taken as lost (Spark on YARN asks for the same loss reason).
/// The masters tell of a preemption before the process is stopped and of an exit as soon as
/// its worker reports it; the word never comes when the worker's machine vanished.
const LOSS_REASON_PATIENCE: Duration = Duration::from_secs(2);

/// How to run a job file.
#[derive(Clone, Debug)]
pub struct DriverConfig {
    /// The job file.
    pub file: JobFile,
    /// The masters.
    pub masters: MasterLink,
    /// The address executors reach this process at (its port is chosen at start).
    pub host: String,
    /// The program workers start for executors: this `muster` binary, run as
    /// `PROGRAM executor`.
    pub executor_program: String,
    /// A random request id for the registration.
    pub request_id: String,
    /// Where the run's progress is published, for a display.
    pub progress: watch::Sender<Progress>,
}

/// How far a run is, for a progress display.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Jobs in the file.
    pub jobs: usize,
    /// Jobs ended.
    pub jobs_ended: usize,
    /// Tasks of submitted jobs.
    pub tasks: usize,
    /// Tasks succeeded.
    pub tasks_done: usize,
    /// Attempts running.
    pub running: usize,
    /// Executors connected.
    pub executors: usize,
}

/// Why a run could not finish.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The executors' port could not be opened.
    #[error("cannot listen for executors on {host}: {source}")]
    Listen {
        /// Where.
        host: String,
        /// Why.
        source: std::io::Error,
    },
    /// No randomness for the executors' secret.
    #[error("cannot make the executors' secret: {0}")]
    Secret(std::io::Error),
    /// The task link's certificate could not be made.
    #[error("cannot set up TLS for executors: {0}")]
    Tls(TlsError),
    /// The application's link to the masters failed.
    #[error(transparent)]
    Link(#[from] LinkError),
    /// The run was interrupted (Ctrl-C).
    #[error("interrupted")]
    Interrupted,
    /// The application ended before its jobs did.
    #[error("the application ended ({state}) before its jobs did")]
    Ended {
        /// How it ended.
        state: String,
        /// What ran until then.
        report: Box<Report>,
    },
}

/// What a run did: the `--json` report.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// The application's id.
    pub app: String,
    /// Every job, in submission order.
    pub jobs: Vec<JobReport>,
    /// Every task attempt, in launch order.
    pub tasks: Vec<TaskReport>,
}

/// How a job stands in the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobOutcome {
    /// Not ended (the run was interrupted).
    Running,
    /// Every stage succeeded.
    Succeeded,
    /// A stage failed.
    Failed,
}

impl JobOutcome {
    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Self::Running => "RUNNING",
            Self::Succeeded => "SUCCEEDED",
            Self::Failed => "FAILED",
        }
    }
}

/// How a task attempt stands in the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AttemptState {
    /// Launched, not ended.
    Running,
    /// It succeeded.
    Succeeded,
    /// It failed, or its executor's process failed or exited by itself.
    Failed,
    /// Killed (a losing speculative copy, or its job ended).
    Killed,
    /// Its executor was lost through no fault of the application.
    Lost,
    /// Its executor was stopped for prior work: not counted as a failure.
    Preempted,
}

/// One job in the report.
#[derive(Clone, Debug, Serialize)]
pub struct JobReport {
    /// Its name.
    pub name: String,
    /// How it stands.
    pub state: JobOutcome,
    /// Why it failed; `null` when it did not.
    pub error: Option<String>,
    /// When it was submitted, in ms from the driver's start.
    pub submitted_ms: u64,
    /// When it ended.
    pub finished_ms: Option<u64>,
    /// Its stages.
    pub stages: Vec<StageReport>,
}

/// One stage in the report.
#[derive(Clone, Debug, Serialize)]
pub struct StageReport {
    /// Its name.
    pub name: String,
    /// How many tasks it has.
    pub tasks: u32,
    /// Attempts that failed (counted or not).
    pub failed_attempts: u32,
}

/// One task attempt in the report.
#[derive(Clone, Debug, Serialize)]
pub struct TaskReport {
    /// Its job's name.
    pub job: String,
    /// Its stage's name.
    pub stage: String,
    /// Its index in the stage.
    pub index: usize,
    /// Its attempt number.
    pub attempt: u32,
    /// Where it ran.
    pub executor: u32,
    /// The executor's host.
    pub host: String,
    /// Spark's locality name.
    pub locality: String,
    /// A copy of a slow task (speculation).
    pub speculative: bool,
    /// How it stands.
    pub state: AttemptState,
    /// How long it ran, as its executor measured.
    pub duration_ms: Option<u64>,
    /// Why it failed or was lost, if it was: the task's own error, or what became of its
    /// executor (`executor 2 ended: exit -104 (killed for going over its memory limit)`).
    pub reason: Option<String>,
}

/// What the executors' streams tell the driver loop.
enum Event {
    /// An executor attached on `link`.
    Joined {
        link: u64,
        hello: muster_proto::v1::ExecutorHello,
        orders: mpsc::UnboundedSender<Result<DriverMessage, Status>>,
    },
    /// A task ended.
    Ended { link: u64, end: TaskEnded },
    /// The stream `link` closed.
    Gone { link: u64 },
}

/// The executors' side of the driver: each stream is turned into events for the loop.
struct TaskLinkService {
    events: mpsc::UnboundedSender<Event>,
    links: AtomicU64,
}

#[tonic::async_trait]
impl TaskLink for TaskLinkService {
    type AttachStream = UnboundedReceiverStream<Result<DriverMessage, Status>>;

    async fn attach(
        &self,
        request: Request<Streaming<ExecutorMessage>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let mut inbound = request.into_inner();
        let first = tokio::time::timeout(HELLO_TIMEOUT, inbound.message())
            .await
            .map_err(|_| Status::deadline_exceeded("no hello in time"))??;
        let Some(ExecutorMessage {
            body: Some(Up::Hello(hello)),
        }) = first
        else {
            return Err(Status::invalid_argument("an executor must say hello first"));
        };
        let link = self.links.fetch_add(1, Ordering::Relaxed);
        let (orders, outbound) = mpsc::unbounded_channel();
        let events = self.events.clone();
        let _ = events.send(Event::Joined {
            link,
            hello,
            orders,
        });
        tokio::spawn(async move {
            while let Ok(Some(message)) = inbound.message().await {
                if let Some(Up::Ended(end)) = message.body {
                    let _ = events.send(Event::Ended { link, end });
                }
            }
            let _ = events.send(Event::Gone { link });
        });
        Ok(Response::new(UnboundedReceiverStream::new(outbound)))
    }
}

/// A live executor's stream.
struct ExecutorLink {
    link: u64,
    orders: mpsc::UnboundedSender<Result<DriverMessage, Status>>,
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

/// The driver loop's state.
struct Driver {
    file: JobFile,
    scheduler: JobScheduler,
    start: Instant,
    executors: HashMap<ExecutorId, ExecutorLink>,
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
    /// An executor target dynamic allocation could not send yet.
    unsent_target: Option<u32>,
}

/// Runs `config.file` to its end: every job succeeded or failed. Returns the report. When
/// `stop` resolves first, the application is finished and the run ends
/// [`DriverError::Interrupted`].
///
/// # Errors
///
/// The executors' port cannot be opened, the masters refuse the application or cannot be
/// reached, the application ends before its jobs (killed by someone), or `stop`.
pub async fn run(
    config: DriverConfig,
    stop: impl Future<Output = ()>,
) -> Result<Report, DriverError> {
    let listener = TcpListener::bind((config.host.as_str(), 0))
        .await
        .map_err(|source| DriverError::Listen {
            host: config.host.clone(),
            source,
        })?;
    let port = listener
        .local_addr()
        .map(|a: SocketAddr| a.port())
        .map_err(|source| DriverError::Listen {
            host: config.host.clone(),
            source,
        })?;
    let secret = Secret::random().map_err(DriverError::Secret)?;
    // The task link is TLS with a certificate made for this run; executors get the CA that
    // signed it, so they know it is their driver they reach.
    let tls = ThrowawayTls::new(&[config.host.as_str()]).map_err(DriverError::Tls)?;
    let (events, mut event_stream) = mpsc::unbounded_channel();
    let service = TaskLinkServer::new(TaskLinkService {
        events,
        links: AtomicU64::new(0),
    });
    let guard = secret.verifier().guard("task link", &[Role::Executor]);
    // Keepalives find an executor whose machine vanished without closing its stream.
    let server = tonic::transport::Server::builder()
        .tls_config(tls.server())
        .map_err(|e| DriverError::Tls(TlsError::Generate(e.to_string())))?
        .http2_keepalive_interval(Some(KEEPALIVE))
        .http2_keepalive_timeout(Some(KEEPALIVE * 3))
        .add_service(InterceptedService::new(service, guard))
        .serve_with_incoming(muster_proto::transport::incoming(listener));
    let server = tokio::spawn(server);

    let register = registration(&config, &secret, &tls.ca, port);
    let (requests, requested) = mpsc::channel(16);
    let (updates, mut update_stream) = mpsc::unbounded_channel();
    let link = tokio::spawn(app::run(
        config.masters.clone(),
        register,
        requested,
        updates,
    ));
    let mut allocation = config.file.resources.allocation().map(Allocation::new);
    let mut check = tokio::time::interval(CHECK_INTERVAL);
    let speculation = config.file.scheduler.speculation;
    let mut driver = Driver::new(config.file);
    let mut app_id = String::new();
    let mut revive = tokio::time::interval(REVIVE_INTERVAL);
    let mut link = std::pin::pin!(link);
    let mut requests = Some(requests);
    let mut stop = std::pin::pin!(stop);
    // Set when every job ended (`done`) or on `stop` (`give_up_at`): the application is
    // being finished.
    let mut done = false;
    let mut give_up_at: Option<tokio::time::Instant> = None;
    let outcome = loop {
        let next_job = driver.next_submission();
        let loss_due = driver.loss_due();
        tokio::select! {
            _ = revive.tick() => {
                let launches = driver.scheduler.resource_offers(driver.now(), None);
                driver.launch(launches);
            }
            () = tokio::time::sleep_until(next_job.into()), if !driver.upcoming.is_empty() => {
                driver.submit_due();
            }
            _ = check.tick(), if speculation || allocation.is_some() => {
                if driver.scheduler.check_speculatable(driver.now()) {
                    let launches = driver.scheduler.resource_offers(driver.now(), None);
                    driver.launch(launches);
                }
                if let (Some(allocation), Some(requests)) = (allocation.as_mut(), &requests) {
                    driver.allocate(allocation, requests);
                }
            }
            () = tokio::time::sleep_until(loss_due.unwrap_or(next_job).into()), if loss_due.is_some() => {
                driver.lose_unexplained();
            }
            Some(event) = event_stream.recv() => driver.on_event(event),
            Some(update) = update_stream.recv() => match update {
                AppUpdate::Registered(id) => app_id = id,
                AppUpdate::Executor(executor) => driver.on_executor_event(&executor),
                AppUpdate::Preempted { executor_id, grace } => {
                    tracing::info!(executor = executor_id, ?grace, "executor preempted");
                    driver.lose_executor(ExecutorId(executor_id), Loss::Preempted);
                }
                AppUpdate::Reconnecting(reason) => tracing::warn!(%reason, "lost the leader; reconnecting"),
            },
            ended = &mut link => {
                let ended = ended.unwrap_or_else(|e| Err(LinkError::Unavailable(e.to_string())));
                break ended;
            }
            () = &mut stop, if give_up_at.is_none() && !done => {
                give_up_at = Some(tokio::time::Instant::now() + FINISH_PATIENCE);
                requests.take();
            }
            () = tokio::time::sleep_until(give_up_at.unwrap_or_else(tokio::time::Instant::now)), if give_up_at.is_some() => {
                break Ok("unfinished: the masters did not answer".to_owned());
            }
        }
        config.progress.send_if_modified(|progress| {
            let now = driver.progress();
            std::mem::replace(progress, now) != now
        });
        // Every job ended and every attempt has answered (killed copies included):
        // finishing the application ends the link, and with it the loop.
        if driver.is_done() && !done {
            done = true;
            requests.take();
        }
    };
    server.abort();
    let mut report = driver.report();
    report.app = app_id;
    match outcome {
        Ok(_) if done => Ok(report),
        Ok(_) if give_up_at.is_some() => Err(DriverError::Interrupted),
        Ok(state) => Err(DriverError::Ended {
            state,
            report: Box::new(report),
        }),
        Err(error) => Err(error.into()),
    }
}

/// The application's registration: its executors run `PROGRAM executor` and find this
/// driver through their environment.
fn registration(config: &DriverConfig, secret: &Secret, ca: &str, port: u16) -> RegisterApp {
    let resources = &config.file.resources;
    let credential = secret
        .credential(Role::Executor)
        .to_text()
        .expect("a secret's credential is set");
    let env = [
        (
            DRIVER_VARIABLE.to_owned(),
            format!("{}:{port}", config.host),
        ),
        (CREDENTIAL_VARIABLE.to_owned(), credential),
        (CA_VARIABLE.to_owned(), ca.to_owned()),
    ];
    RegisterApp {
        request_id: config.request_id.clone(),
        name: config.file.name.clone(),
        user: std::env::var("USER").unwrap_or_default(),
        queue: config.file.queue.clone(),
        cores_max: resources.cores_max,
        executor_cores: resources.executor_cores,
        executor_memory_mb: resources.executor_memory_mb,
        executor_resources: resources.executor_resources.clone().into_iter().collect(),
        command: config.executor_program.clone(),
        args: vec!["executor".to_owned()],
        env: env.into_iter().collect(),
        executor_limit: resources
            .allocation()
            .map(|config| Allocation::new(config).target())
            .or(resources.executor_limit),
        ..RegisterApp::default()
    }
}

impl Driver {
    fn new(file: JobFile) -> Self {
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
            file,
            start: Instant::now(),
            executors: HashMap::new(),
            disconnected: HashMap::new(),
            jobs: BTreeMap::new(),
            upcoming,
            tasks: BTreeMap::new(),
            failures: HashMap::new(),
            succeeded: HashSet::new(),
            granted: HashMap::new(),
            unsent_target: None,
        }
    }

    fn now(&self) -> Timestamp {
        Timestamp(millis(self.start.elapsed()))
    }

    /// When the next job is due.
    fn next_submission(&self) -> Instant {
        let at = self.upcoming.last().map_or(0, |&(at, _)| at);
        self.start + Duration::from_millis(at)
    }

    /// Submits every job that is due.
    fn submit_due(&mut self) {
        let now = self.now();
        while let Some(&(at, index)) = self.upcoming.last() {
            if at > now.0 {
                break;
            }
            self.upcoming.pop();
            let spec = self.file.jobs[index].spec();
            let id = self
                .scheduler
                .submit(now, spec)
                .expect("job files are validated when read");
            self.jobs.insert(id, index);
        }
        let launches = self.scheduler.resource_offers(now, None);
        self.launch(launches);
    }

    fn on_event(&mut self, event: Event) {
        let now = self.now();
        match event {
            Event::Joined {
                link,
                hello,
                orders,
            } => {
                let id = ExecutorId(hello.executor_id);
                // A newer stream of the same executor replaces the old one.
                if self.knows(id) {
                    self.lose_executor(id, Loss::Lost);
                }
                let rack = (!hello.rack.is_empty()).then_some(hello.rack.as_str());
                // No more cores than the masters granted it, once their event is here.
                let granted = self.granted.get(&id).copied().unwrap_or(u32::MAX);
                let cores = hello.cores.clamp(1, granted.max(1));
                self.scheduler.add_executor(id, &hello.host, rack, cores);
                self.executors.insert(id, ExecutorLink { link, orders });
                tracing::info!(executor = id.0, host = %hello.host, cores, "executor joined");
                let launches = self.scheduler.resource_offers(now, Some(id));
                self.launch(launches);
            }
            Event::Ended { link, end } => {
                let Some(executor) = self.executor_on(link) else {
                    return;
                };
                let task = TaskId(end.task_id);
                // Only the executor an attempt runs on reports its end.
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
                let ended = self.scheduler.task_ended(now, task, how);
                self.kill(&ended.kill);
                let launches = self.scheduler.resource_offers(now, Some(executor));
                self.launch(launches);
            }
            Event::Gone { link } => {
                if let Some(executor) = self.executor_on(link) {
                    tracing::info!(executor = executor.0, "executor stream closed");
                    self.executors.remove(&executor);
                    self.scheduler.drain_executor(executor);
                    self.disconnected
                        .insert(executor, Instant::now() + LOSS_REASON_PATIENCE);
                }
            }
        }
    }

    /// Whether `id` is an executor the driver holds, live or waiting for word of its end.
    fn knows(&self, id: ExecutorId) -> bool {
        self.executors.contains_key(&id) || self.disconnected.contains_key(&id)
    }

    /// When the first executor whose stream closed has waited long enough for word of why.
    fn loss_due(&self) -> Option<Instant> {
        self.disconnected.values().min().copied()
    }

    /// Executors whose stream closed and of which the masters said nothing in time: lost.
    fn lose_unexplained(&mut self) {
        let now = Instant::now();
        let due: Vec<ExecutorId> = self
            .disconnected
            .iter()
            .filter(|&(_, &at)| at <= now)
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            tracing::info!(
                executor = id.0,
                "executor gone without word from the masters"
            );
            self.lose_executor(id, Loss::Lost);
        }
    }

    /// The executor whose current stream is `link`.
    fn executor_on(&self, link: u64) -> Option<ExecutorId> {
        self.executors
            .iter()
            .find(|(_, e)| e.link == link)
            .map(|(&id, _)| id)
    }

    /// What the masters say about an executor: its grant, or its end. An executor that
    /// ended is lost even if its stream has not closed yet (its machine may be gone); its
    /// tasks' failures count when it failed or exited by itself.
    fn on_executor_event(&mut self, event: &ExecutorEvent) {
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
                    self.lose_executor(id, loss);
                }
            }
        }
    }

    /// An executor is gone: its running attempts run again elsewhere (counted against
    /// their tasks' retries only when the application caused the loss).
    fn lose_executor(&mut self, id: ExecutorId, loss: Loss) {
        self.executors.remove(&id);
        self.disconnected.remove(&id);
        let now = self.now();
        let by_app = matches!(loss, Loss::ByApp(_));
        let (lost, ended) = self.scheduler.remove_executor(now, id, by_app);
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

    /// Sends each launch to its executor; an executor whose stream is gone is lost at once,
    /// with every attempt just launched on it.
    fn launch(&mut self, launches: Vec<Launch>) {
        let mut orders = Vec::with_capacity(launches.len());
        for launch in launches {
            let (job_name, stage_name, work) = self.describe(launch.stage);
            orders.push((
                launch.executor,
                DriverMessage {
                    body: Some(Down::Run(RunTask {
                        task_id: launch.task.0,
                        partition: u32::try_from(launch.index).unwrap_or(u32::MAX),
                        attempt: launch.attempt,
                        work: Some(work),
                    })),
                },
            ));
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
        for (executor, order) in orders {
            let sent = self
                .executors
                .get(&executor)
                .is_some_and(|e| e.orders.send(Ok(order)).is_ok());
            if !sent {
                self.lose_executor(executor, Loss::Lost);
            }
        }
    }

    /// Whether the run is over: every job submitted and ended, and every attempt answered.
    fn is_done(&self) -> bool {
        self.upcoming.is_empty()
            && self.scheduler.is_idle()
            && self.scheduler.tasks().running() == 0
    }

    /// One step of dynamic allocation; its requests go to the masters through `requests`.
    fn allocate(&mut self, allocation: &mut Allocation, requests: &mpsc::Sender<AppRequest>) {
        let tasks = self.scheduler.tasks();
        let changes = allocation.tick(
            self.now(),
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
                    let _ = requests.try_send(release);
                }
            }
        }
        // A target that cannot be sent now is sent at a later step: it must not be lost.
        if let Some(n) = target {
            let limit = AppRequest::SetLimit(SetExecutorLimit {
                executor_limit: Some(n),
            });
            if requests.try_send(limit).is_err() {
                self.unsent_target = Some(n);
            }
        }
    }

    /// Asks executors to kill these attempts.
    fn kill(&self, tasks: &[TaskId]) {
        for &task in tasks {
            let Some((_, report)) = self.tasks.get(&task) else {
                continue;
            };
            if let Some(executor) = self.executors.get(&ExecutorId(report.executor)) {
                let body = Some(Down::Kill(KillTask { task_id: task.0 }));
                let _ = executor.orders.send(Ok(DriverMessage { body }));
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

    fn progress(&self) -> Progress {
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

    fn report(&self) -> Report {
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
