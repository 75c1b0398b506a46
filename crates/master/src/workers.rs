//! The leader's side of worker streams (`proto/muster/v1/worker.proto`): registration with
//! reconciliation, heartbeats, and process state changes written to the log.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use muster_core::model::{AppId, DriverId, WorkerId};
use muster_proto::v1::master_message::Body as Down;
use muster_proto::v1::worker_link_server::{WorkerLink, WorkerLinkServer};
use muster_proto::v1::worker_message::Body as Up;
use muster_proto::v1::{
    DriverUpdate, ExecutorUpdate, KillDriver, KillExecutor, MasterMessage, Register, Registered,
    WorkerMessage,
};
use muster_raft::{RaftNode, WriteError};
use muster_state::commands::{DriverStateChanged, ExecutorStateChanged, RegisterWorker};
use muster_state::model::{DriverState, ExecutorState};
use muster_state::{ExecutorId, Op};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::client::not_leader;
use crate::session::{ProcessKey, Session, Sessions, driver_state, executor_state, leader_command};

/// Serves worker streams on the leader.
pub struct WorkerLinkService {
    node: Arc<RaftNode>,
    sessions: Arc<Sessions>,
}

impl WorkerLinkService {
    /// The gRPC service.
    pub fn server(node: Arc<RaftNode>, sessions: Arc<Sessions>) -> WorkerLinkServer<Self> {
        WorkerLinkServer::new(Self { node, sessions })
    }
}

type Outbound = mpsc::Sender<Result<MasterMessage, Status>>;

fn down(session: &Session, body: Down) -> Result<MasterMessage, Status> {
    Ok(MasterMessage {
        term: session.term,
        body: Some(body),
    })
}

#[tonic::async_trait]
impl WorkerLink for WorkerLinkService {
    type AttachStream = ReceiverStream<Result<MasterMessage, Status>>;

    async fn attach(
        &self,
        request: Request<Streaming<WorkerMessage>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let Some(session) = self.sessions.current() else {
            return Err(not_leader(&self.node));
        };
        let mut inbound = request.into_inner();
        let Some(WorkerMessage {
            body: Some(Up::Register(register)),
        }) = inbound.message().await?
        else {
            return Err(Status::invalid_argument("a worker must register first"));
        };
        let worker = WorkerId(register.worker_id.clone());
        let op = Op::RegisterWorker(RegisterWorker {
            id: worker.clone(),
            host: register.host.clone(),
            address: register.address.clone(),
            cores: register.cores,
            memory_mb: register.memory_mb,
            resources: register.resources.clone().into_iter().collect(),
        });
        match self.node.write(leader_command(op)).await {
            Ok(Ok(_)) => {}
            Ok(Err(refused)) => return Err(Status::invalid_argument(refused.to_string())),
            Err(WriteError::NotLeader(_)) => return Err(not_leader(&self.node)),
            Err(error) => return Err(Status::unavailable(error.to_string())),
        }
        tracing::info!(%worker, "worker registered");

        let (sender, receiver) = mpsc::channel(1024);
        reconcile(&self.node, &session, &worker, &register, &sender).await;
        session.attach(worker.clone(), sender.clone());
        let _ = sender
            .send(down(
                &session,
                Down::Registered(Registered {
                    master_id: self.node.id(),
                }),
            ))
            .await;
        tokio::spawn(follow_worker(session, worker, inbound, sender));
        Ok(Response::new(ReceiverStream::new(receiver)))
    }
}

/// Compares what the worker runs with what the log expects on it: processes the log does not
/// know are killed; what the log expects but the worker lacks ends through the log.
async fn reconcile(
    node: &RaftNode,
    session: &Session,
    worker: &WorkerId,
    register: &Register,
    sender: &Outbound,
) {
    let (expected_executors, expected_drivers): (
        BTreeSet<(AppId, ExecutorId)>,
        BTreeSet<DriverId>,
    ) = {
        let state = node.local_state();
        let state = state.read().expect("state lock");
        let executors = state
            .apps()
            .values()
            .flat_map(|app| {
                app.executors
                    .values()
                    .filter(|e| &e.worker == worker)
                    .map(|e| (app.id.clone(), e.id))
            })
            .collect();
        let drivers = state
            .drivers()
            .values()
            .filter(|d| d.worker.as_ref() == Some(worker))
            .map(|d| d.id.clone())
            .collect();
        (executors, drivers)
    };
    let reported_executors: BTreeMap<(AppId, ExecutorId), u32> = register
        .executors
        .iter()
        .map(|e| ((AppId(e.app_id.clone()), ExecutorId(e.executor_id)), e.pid))
        .collect();
    let reported_drivers: BTreeMap<DriverId, u32> = register
        .drivers
        .iter()
        .map(|d| (DriverId(d.driver_id.clone()), d.pid))
        .collect();

    for ((app, executor), pid) in &reported_executors {
        if expected_executors.contains(&(app.clone(), *executor)) {
            session.record_pid(ProcessKey::Executor(app.clone(), *executor), *pid);
        } else {
            let kill = Down::KillExecutor(KillExecutor {
                app_id: app.0.clone(),
                executor_id: executor.0,
            });
            let _ = sender.send(down(session, kill)).await;
        }
    }
    for (driver, pid) in &reported_drivers {
        if expected_drivers.contains(driver) {
            session.record_pid(ProcessKey::Driver(driver.clone()), *pid);
        } else {
            let _ = sender
                .send(down(
                    session,
                    Down::KillDriver(KillDriver {
                        driver_id: driver.0.clone(),
                    }),
                ))
                .await;
        }
    }
    for (app, executor) in expected_executors
        .into_iter()
        .filter(|key| !reported_executors.contains_key(key))
    {
        let op = Op::ExecutorStateChanged(ExecutorStateChanged {
            app,
            executor,
            state: ExecutorState::Lost,
            exit_code: None,
        });
        write_report(session, worker, op).await;
    }
    for driver in expected_drivers
        .into_iter()
        .filter(|d| !reported_drivers.contains_key(d))
    {
        let op = Op::DriverStateChanged(DriverStateChanged {
            driver,
            state: DriverState::Error,
            exit_code: None,
        });
        write_report(session, worker, op).await;
    }
}

/// Writes what a worker reported and carries out the consequences.
async fn write_report(session: &Session, worker: &WorkerId, op: Op) {
    if let Some(response) = session.write(op).await {
        session.carry_out(&response.effects, Some(worker));
    }
}

/// Reads a worker's stream until it ends or the session does.
async fn follow_worker(
    session: Arc<Session>,
    worker: WorkerId,
    mut inbound: Streaming<WorkerMessage>,
    sender: Outbound,
) {
    let mut ended = session.ended();
    loop {
        let message = tokio::select! {
            message = inbound.message() => message,
            () = sender.closed() => break,
            _ = ended.changed() => break,
        };
        let body = match message {
            Ok(Some(WorkerMessage { body: Some(body) })) => body,
            Ok(Some(_)) => continue,
            Ok(None) | Err(_) => break,
        };
        match body {
            Up::Heartbeat(_) => session.heartbeat(&worker),
            Up::Register(_) => tracing::warn!(%worker, "a worker registered twice on one stream"),
            Up::Executor(update) => executor_update(&session, &worker, update).await,
            Up::Driver(update) => driver_update(&session, &worker, update).await,
        }
    }
    session.detach(&worker, &sender);
    tracing::info!(%worker, "worker stream closed");
}

async fn executor_update(session: &Session, worker: &WorkerId, update: ExecutorUpdate) {
    let Some(state) = executor_state(&update.state) else {
        tracing::warn!(%worker, state = update.state, "unknown executor state reported");
        return;
    };
    let app = AppId(update.app_id);
    let executor = ExecutorId(update.executor_id);
    if state == ExecutorState::Running {
        session.record_pid(ProcessKey::Executor(app.clone(), executor), update.pid);
    }
    let op = Op::ExecutorStateChanged(ExecutorStateChanged {
        app: app.clone(),
        executor,
        state,
        exit_code: update.exit_code,
    });
    write_report(session, worker, op).await;
    if state == ExecutorState::Running {
        // Ended executors reach their app through the command's effects; a start has none.
        session.executor_started(&app, executor);
    }
}

async fn driver_update(session: &Session, worker: &WorkerId, update: DriverUpdate) {
    let Some(state) = driver_state(&update.state) else {
        tracing::warn!(%worker, state = update.state, "unknown driver state reported");
        return;
    };
    let driver = DriverId(update.driver_id);
    if state == DriverState::Running {
        // Placement already made it RUNNING in the log; only the process id is new.
        session.record_pid(ProcessKey::Driver(driver), update.pid);
        return;
    }
    let op = Op::DriverStateChanged(DriverStateChanged {
        driver,
        state,
        exit_code: update.exit_code,
    });
    write_report(session, worker, op).await;
}
