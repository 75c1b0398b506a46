//! The driver: runs a job file's jobs on the application's executors. This process is the
//! driver (`muster job run`, Spark's client mode); it registers the application with the
//! masters and serves the executors' task streams. What to do is decided by [`machine`], a
//! state machine with time passed in, on top of the pure `muster_core::tasks` scheduler:
//! every second it offers all free cores (Spark's revive), after each task end the free
//! cores of that executor, and it submits jobs at their `at_ms`. This module is its async
//! shell: it turns streams, timers and the masters' word into
//! [`machine::Input`]s and carries out the [`machine::Order`]s.
//!
//! Executors authenticate with a credential of the driver's own random secret, and the
//! driver with a TLS certificate made for the run, whose CA the executors trust alone; both
//! reach the executors in their environment, through the master. A master failover does not
//! disturb the run: the application link re-attaches and the executors' streams go to this
//! process.

pub mod machine;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use muster_core::ids::ExecutorId;
use muster_core::tasks::allocation::Allocation;
use muster_proto::auth::{Role, Secret};
use muster_proto::masters::Masters;
use muster_proto::transport::{ThrowawayTls, TlsError};
use muster_proto::v1::app_message::Body as AppRequest;
use muster_proto::v1::driver_message::Body as Down;
use muster_proto::v1::executor_message::Body as Up;
use muster_proto::v1::task_link_server::{TaskLink, TaskLinkServer};
use muster_proto::v1::{
    DriverMessage, ExecutorMessage, KillTask, RegisterApp, SetExecutorLimit, TaskEnded,
};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status, Streaming};

use crate::app::{self, AppUpdate, LinkError};
use crate::executor::{CA_VARIABLE, CREDENTIAL_VARIABLE, DRIVER_VARIABLE};
use crate::spec::JobFile;
use machine::{Driver, Input, Order};

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

/// How to run a job file.
#[derive(Clone, Debug)]
pub struct DriverConfig {
    /// The job file.
    pub file: JobFile,
    /// The masters.
    pub masters: Masters,
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

/// Where orders to each executor's stream go, by stream.
type Streams = HashMap<u64, mpsc::UnboundedSender<Result<DriverMessage, Status>>>;

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
    let mut check = tokio::time::interval(CHECK_INTERVAL);
    let mut driver = Driver::new(config.file, Instant::now());
    let mut streams = Streams::new();
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
        let due = driver.next_due();
        let orders = tokio::select! {
            _ = revive.tick() => driver.step(Instant::now(), Input::Revive),
            () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now).into()), if due.is_some() => {
                driver.tick(Instant::now())
            }
            _ = check.tick(), if driver.checks() => {
                let allocate = requests.is_some();
                driver.step(Instant::now(), Input::Check { allocate })
            }
            Some(event) = event_stream.recv() => {
                let input = match event {
                    Event::Joined { link, hello, orders } => {
                        streams.insert(link, orders);
                        Input::Joined { link, hello }
                    }
                    Event::Ended { link, end } => Input::Ended { link, end },
                    Event::Gone { link } => {
                        streams.remove(&link);
                        Input::Gone { link }
                    }
                };
                driver.step(Instant::now(), input)
            }
            Some(update) = update_stream.recv() => match update {
                AppUpdate::Registered(id) => {
                    app_id = id;
                    Vec::new()
                }
                AppUpdate::Executor(executor) => driver.step(Instant::now(), Input::Masters(executor)),
                AppUpdate::Preempted { executor_id, grace } => {
                    tracing::info!(executor = executor_id, ?grace, "executor preempted");
                    driver.step(Instant::now(), Input::Preempted(ExecutorId(executor_id)))
                }
                AppUpdate::Draining { executor_id, kill_after } => {
                    // Its tasks finish or are killed with it; nothing moves in a job's run.
                    tracing::info!(executor = executor_id, ?kill_after, "executor's worker drained");
                    Vec::new()
                }
                AppUpdate::ProfileRefused { profile_id, reason } => {
                    tracing::error!(profile = profile_id, %reason, "resource profile refused");
                    Vec::new()
                }
                AppUpdate::Reconnecting(reason) => {
                    tracing::warn!(%reason, "lost the leader; reconnecting");
                    Vec::new()
                }
            },
            ended = &mut link => {
                let ended = ended.unwrap_or_else(|e| Err(LinkError::Unavailable(e.to_string())));
                break ended;
            }
            () = &mut stop, if give_up_at.is_none() && !done => {
                give_up_at = Some(tokio::time::Instant::now() + FINISH_PATIENCE);
                requests.take();
                Vec::new()
            }
            () = tokio::time::sleep_until(give_up_at.unwrap_or_else(tokio::time::Instant::now)), if give_up_at.is_some() => {
                break Ok("unfinished: the masters did not answer".to_owned());
            }
        };
        carry_out(&mut driver, &mut streams, requests.as_ref(), orders);
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

/// Carries out the driver's orders: tasks to executors' streams (a stream that is gone is
/// told back to the driver, and what it decides then carried out too), closes of streams of
/// executors it no longer holds, and requests to the masters while the application is not
/// being finished (a limit without room is told back).
fn carry_out(
    driver: &mut Driver,
    streams: &mut Streams,
    requests: Option<&mpsc::Sender<AppRequest>>,
    orders: Vec<Order>,
) {
    let mut orders = VecDeque::from(orders);
    while let Some(order) = orders.pop_front() {
        let told_back = match order {
            Order::Run {
                executor,
                link,
                task,
            } => {
                let message = DriverMessage {
                    body: Some(Down::Run(task)),
                };
                let sent = streams
                    .get(&link)
                    .is_some_and(|stream| stream.send(Ok(message)).is_ok());
                (!sent).then_some(Input::Unreachable(executor))
            }
            Order::Close { link } => {
                // Dropping its sender ends the stream.
                streams.remove(&link);
                None
            }
            Order::Kill { link, task } => {
                if let Some(stream) = streams.get(&link) {
                    let body = Some(Down::Kill(KillTask { task_id: task.0 }));
                    let _ = stream.send(Ok(DriverMessage { body }));
                }
                None
            }
            Order::Masters(request) => {
                let limit = match request.as_ref() {
                    AppRequest::SetLimit(SetExecutorLimit {
                        executor_limit: Some(n),
                    }) => Some(*n),
                    _ => None,
                };
                let sent = requests.is_some_and(|r| r.try_send(*request).is_ok());
                limit.filter(|_| !sent).map(Input::LimitNotSent)
            }
        };
        if let Some(input) = told_back {
            orders.extend(driver.step(Instant::now(), input));
        }
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
        min_executors: resources.min_executors,
        // A worker names the driver it starts; its gang's room is kept until this registers.
        driver_id: std::env::var("MUSTER_DRIVER_ID").unwrap_or_default(),
        priority: config.file.priority,
        ..RegisterApp::default()
    }
}
