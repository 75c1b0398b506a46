//! The leader's side of application streams (`proto/muster/v1/app.proto`): register or
//! re-attach, follow the executors, finish.

use std::sync::Arc;

use muster_core::model::AppId;
use muster_proto::v1::app_event::Body as AppBody;
use muster_proto::v1::app_link_server::{AppLink, AppLinkServer};
use muster_proto::v1::app_message::Body as Up;
use muster_proto::v1::{AppEvent, AppMessage, AppRegistered, RegisterApp};
use muster_raft::{RaftNode, WriteError};
use muster_state::commands::{KillExecutors, SetExecutorLimit, SubmitApp};
use muster_state::model::AppDescription;
use muster_state::{Command, ExecutorId, Op, Outcome, RequestId};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::client::{not_leader, refused};
use crate::session::{Session, Sessions, now};

/// Serves application streams on the leader.
pub struct AppLinkService {
    node: Arc<RaftNode>,
    sessions: Arc<Sessions>,
}

impl AppLinkService {
    /// The gRPC service.
    pub fn server(node: Arc<RaftNode>, sessions: Arc<Sessions>) -> AppLinkServer<Self> {
        AppLinkServer::new(Self { node, sessions })
    }

    /// Submits a new application, or checks that the one to re-attach to is still active.
    async fn register(&self, register: RegisterApp) -> Result<AppId, Status> {
        if !register.app_id.is_empty() {
            let id = AppId(register.app_id);
            let active = self
                .node
                .read(|state| state.apps().contains_key(&id))
                .await
                .map_err(|_| not_leader(&self.node))?;
            return if active {
                Ok(id)
            } else {
                Err(Status::not_found(format!("application `{id}` has ended")))
            };
        }
        let desc = AppDescription {
            name: register.name,
            user: register.user,
            queue: if register.queue.is_empty() {
                Default::default()
            } else {
                register.queue.as_str().into()
            },
            cores_max: register.cores_max,
            executor_cores: register.executor_cores,
            executor_memory_mb: register.executor_memory_mb,
            executor_resources: register.executor_resources.into_iter().collect(),
            command: register.command,
            args: register.args,
            env: register.env.into_iter().collect(),
        };
        let request_id =
            (!register.request_id.is_empty()).then_some(RequestId(register.request_id));
        let op = Op::SubmitApp(SubmitApp {
            desc,
            executor_limit: register.executor_limit,
        });
        match self
            .node
            .write(Command {
                at: now(),
                request_id,
                op,
            })
            .await
        {
            Ok(Ok(response)) => match response.outcome {
                Outcome::AppSubmitted { id } => Ok(id),
                other => Err(Status::internal(format!("unexpected outcome {other:?}"))),
            },
            Ok(Err(error)) => Err(refused(&error)),
            Err(WriteError::NotLeader(_)) => Err(not_leader(&self.node)),
            Err(error) => Err(Status::unavailable(error.to_string())),
        }
    }
}

#[tonic::async_trait]
impl AppLink for AppLinkService {
    type RunStream = ReceiverStream<Result<AppEvent, Status>>;

    async fn run(
        &self,
        request: Request<Streaming<AppMessage>>,
    ) -> Result<Response<Self::RunStream>, Status> {
        let Some(session) = self.sessions.current() else {
            return Err(not_leader(&self.node));
        };
        let mut inbound = request.into_inner();
        let Some(AppMessage {
            body: Some(Up::Register(register)),
        }) = inbound.message().await?
        else {
            return Err(Status::invalid_argument(
                "an application must register first",
            ));
        };
        let app = self.register(register).await?;
        let (link, events) = mpsc::channel(1024);
        let registered = AppEvent {
            body: Some(AppBody::Registered(AppRegistered {
                app_id: app.0.clone(),
            })),
        };
        let _ = link.send(Ok(registered)).await;
        session.attach_app(app.clone(), link.clone());
        // The executors it already holds, so a re-attached client starts from the truth.
        let held: Vec<_> = {
            let state = self.node.local_state();
            let state = state.read().expect("state lock");
            state
                .apps()
                .get(&app)
                .map(|a| a.executors.values().cloned().collect())
                .unwrap_or_default()
        };
        for executor in &held {
            session.executor_event(&app, executor);
        }
        session.wake();
        tokio::spawn(follow_app(session, app, inbound, link));
        Ok(Response::new(ReceiverStream::new(events)))
    }
}

/// Reads an application's stream: a finish ends the application; a stream that ends without
/// one leaves the application the grace period to re-attach.
async fn follow_app(
    session: Arc<Session>,
    app: AppId,
    mut inbound: Streaming<AppMessage>,
    link: mpsc::Sender<Result<AppEvent, Status>>,
) {
    let mut ended = session.ended();
    loop {
        let message = tokio::select! {
            message = inbound.message() => message,
            _ = ended.changed() => return,
        };
        match message {
            Ok(Some(AppMessage {
                body: Some(Up::Finish(_)),
            })) => {
                session.finish_app(app).await;
                return;
            }
            Ok(Some(AppMessage {
                body: Some(Up::SetLimit(set)),
            })) => {
                let op = Op::SetExecutorLimit(SetExecutorLimit {
                    app: app.clone(),
                    limit: set.executor_limit,
                });
                if session.write(op).await.is_some() {
                    session.wake();
                }
            }
            Ok(Some(AppMessage {
                body: Some(Up::Release(release)),
            })) => {
                let executors = release.executor_ids.into_iter().map(ExecutorId).collect();
                let op = Op::KillExecutors(KillExecutors {
                    app: app.clone(),
                    executors,
                });
                if let Some(response) = session.write(op).await {
                    session.carry_out(&response.effects, None);
                }
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => {
                session.detach_app(app, &link);
                return;
            }
        }
    }
}
