//! The leader's side of worker streams (`proto/muster/v1/worker.proto`): each message is
//! checked, turned into an [`Event`] and stepped through the session's leader.

use std::sync::Arc;
use std::time::Duration;

use muster_core::ids::{ExecutorId, WorkerId};
use muster_core::limits::MAX_REQUEST_BYTES;
use muster_proto::v1::worker_link_server::{WorkerLink, WorkerLinkServer};
use muster_proto::v1::worker_message::Body as Up;
use muster_proto::v1::{DriverUpdate, ExecutorUpdate, MasterMessage, Register, WorkerMessage};
use muster_raft::RaftNode;
use muster_state::commands::RegisterWorker;
use muster_state::model::{DriverState, ExecutorState};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::call::CallError;
use crate::leader::{Event, LinkId, ProcessKey, Registration, Report, Update};
use crate::session::{ELECTION_PATIENCE, Sessions, link_channel};

/// How long a new stream may take to send its registration.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves worker streams on the leader.
pub struct WorkerLinkService {
    node: Arc<RaftNode>,
    sessions: Arc<Sessions>,
}

impl WorkerLinkService {
    /// The gRPC service.
    pub fn server(node: Arc<RaftNode>, sessions: Arc<Sessions>) -> WorkerLinkServer<Self> {
        WorkerLinkServer::new(Self { node, sessions }).max_decoding_message_size(MAX_REQUEST_BYTES)
    }
}

#[tonic::async_trait]
impl WorkerLink for WorkerLinkService {
    type AttachStream = ReceiverStream<Result<MasterMessage, Status>>;

    async fn attach(
        &self,
        request: Request<Streaming<WorkerMessage>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let Some(session) = self.sessions.current_or_wait(ELECTION_PATIENCE).await else {
            return Err(CallError::not_leader(&self.node).into());
        };
        let mut inbound = request.into_inner();
        let first = tokio::time::timeout(REGISTER_TIMEOUT, inbound.message())
            .await
            .map_err(|_| Status::deadline_exceeded("no registration in time"))??;
        let Some(WorkerMessage {
            body: Some(Up::Register(register)),
        }) = first
        else {
            return Err(Status::invalid_argument("a worker must register first"));
        };
        let registration = registration(register)?;
        let worker = registration.worker.id.clone();
        tracing::info!(%worker, "worker registering");
        let (sender, receiver) = link_channel(0);
        let Some(link) = session.open_worker_link(sender) else {
            return Err(CallError::not_leader(&self.node).into());
        };
        session.step(Event::WorkerAttached { link, registration });
        tokio::spawn(async move {
            let events = |message: WorkerMessage| worker_event(&worker, link, message.body?);
            session.follow(link, inbound, events).await;
            tracing::info!(%worker, "worker stream closed");
        });
        Ok(Response::new(ReceiverStream::new(receiver)))
    }
}

/// Checks a registration and turns it into the leader's terms.
fn registration(register: Register) -> Result<Registration, Status> {
    let worker = RegisterWorker::from(&register);
    worker
        .validate()
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    let executors = register.executors.into_iter().map(|e| {
        let key = ProcessKey::Executor(e.app_id.as_str().into(), ExecutorId(e.executor_id));
        (key, e.pid)
    });
    let drivers = register
        .drivers
        .into_iter()
        .map(|d| (ProcessKey::Driver(d.driver_id.as_str().into()), d.pid));
    let mut reports = register
        .executor_updates
        .into_iter()
        .map(executor_report)
        .chain(register.driver_updates.into_iter().map(driver_report))
        .collect::<Result<Vec<_>, _>>()?;
    reports.sort_by_key(|r| r.seq);
    Ok(Registration {
        worker,
        running: executors.chain(drivers).collect(),
        reports,
    })
}

/// A worker reports a process that runs or ended by itself or on request; launching, lost and
/// waiting are the leader's to decide, so a report of them is refused.
fn reported<S: Copy + PartialEq + std::fmt::Debug>(
    state: S,
    reportable: &[S],
) -> Result<S, Status> {
    if reportable.contains(&state) {
        Ok(state)
    } else {
        Err(Status::invalid_argument(format!(
            "a worker does not report {state:?}"
        )))
    }
}

fn executor_report(update: ExecutorUpdate) -> Result<Report, Status> {
    let state = ExecutorState::try_from(update.state())
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    let state = reported(
        state,
        &[
            ExecutorState::Running,
            ExecutorState::Exited,
            ExecutorState::Failed,
            ExecutorState::Killed,
        ],
    )?;
    Ok(Report {
        seq: update.seq,
        update: Update::Executor {
            app: update.app_id.as_str().into(),
            executor: ExecutorId(update.executor_id),
            state,
            exit_code: update.exit_code,
            pid: update.pid,
        },
    })
}

fn driver_report(update: DriverUpdate) -> Result<Report, Status> {
    let state = DriverState::try_from(update.state())
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    // RELAUNCHING: a fencing worker killed it; relaunched elsewhere if supervised.
    let state = reported(
        state,
        &[
            DriverState::Running,
            DriverState::Finished,
            DriverState::Failed,
            DriverState::Killed,
            DriverState::Error,
            DriverState::Relaunching,
        ],
    )?;
    Ok(Report {
        seq: update.seq,
        update: Update::Driver {
            driver: update.driver_id.as_str().into(),
            state,
            exit_code: update.exit_code,
            pid: update.pid,
        },
    })
}

/// The leader's event for one message on worker `worker`'s stream, if it means one.
fn worker_event(worker: &WorkerId, link: LinkId, body: Up) -> Option<Event> {
    let report = match body {
        Up::Heartbeat(_) => return Some(Event::WorkerHeartbeat { link }),
        Up::Executor(update) => executor_report(update),
        Up::Driver(update) => driver_report(update),
        Up::Register(_) => {
            tracing::warn!(%worker, "a worker registered twice on one stream");
            return None;
        }
    };
    match report {
        Ok(report) => Some(Event::WorkerReport { link, report }),
        Err(status) => {
            tracing::warn!(%worker, %status, "bad report");
            None
        }
    }
}
