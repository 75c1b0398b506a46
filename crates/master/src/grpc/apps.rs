//! The leader's side of application streams (`proto/muster/v1/app.proto`): register or
//! re-attach, then step every request through the session's leader.

use std::sync::Arc;

use muster_core::ids::{AppId, DriverId, ExecutorId};
use muster_core::limits::{self, MAX_REQUEST_BYTES};
use muster_proto::auth::{NamedUser, Tokens};
use muster_proto::convert::register_op;
use muster_proto::v1::app_link_server::{AppLink, AppLinkServer};
use muster_proto::v1::app_message::Body as Up;
use muster_proto::v1::{AppEvent, AppMessage, RegisterApp};
use muster_raft::RaftNode;
use muster_state::model::Owner;
use muster_state::version::LogFormat;
use muster_state::{ApplyError, Outcome};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use crate::grpc::call::{CallError, admit, client_command, committed, may_act_on};
use crate::grpc::wire::app_event;
use crate::session::{ELECTION_PATIENCE, Sessions, link_channel};
use muster_leader::Event;

/// Serves application streams on the leader.
pub struct AppLinkService {
    node: Arc<RaftNode>,
    sessions: Arc<Sessions>,
    /// Re-attaching to an app needs its token.
    tokens: Tokens,
}

impl AppLinkService {
    /// The gRPC service.
    pub fn server(
        node: Arc<RaftNode>,
        sessions: Arc<Sessions>,
        tokens: Tokens,
    ) -> AppLinkServer<Self> {
        AppLinkServer::new(Self {
            node,
            sessions,
            tokens,
        })
        .max_decoding_message_size(MAX_REQUEST_BYTES)
    }

    /// Submits a new application, or checks that the one to re-attach to is still active.
    async fn register(
        &self,
        user: Option<&NamedUser>,
        mut register: RegisterApp,
    ) -> Result<AppId, CallError> {
        limits::web_address("ui_address", &register.ui_address).map_err(ApplyError::from)?;
        if !register.app_id.is_empty() {
            self.tokens
                .check_app(&register.app_id, &register.app_token)
                .map_err(CallError::Denied)?;
            let id = AppId::from(register.app_id);
            // A revoked user's application does not attach again, nor does a named user
            // attach to an application they may not steer.
            let active = self
                .node
                .read(|state| {
                    admit(state, user, false)?;
                    may_act_on(state, user, "steer", id.as_ref())?;
                    Ok::<_, CallError>(state.apps().contains_key(&id))
                })
                .await??;
            return if active {
                Ok(id)
            } else {
                Err(ApplyError::UnknownApp(id).into())
            };
        }
        let request_id = std::mem::take(&mut register.request_id);
        // The application and its priority are one entry, from log format 4. Whether it logs
        // events only decides a link: before, it goes unsaid rather than refused.
        if register.priority != 0 {
            self.node.admits(LogFormat::FOURTH)?;
        }
        register.logs_events &= self.node.admits(LogFormat::FOURTH).is_ok();
        // As this master applied it: the room kept beside a driver that registers its
        // application was kept before the driver started.
        let op = register_op(
            register,
            &self.node.local_state().read().expect("state lock"),
        );
        let command = client_command(&request_id, user, op);
        let id = match committed(self.node.write(command).await)?.outcome {
            Outcome::AppSubmitted { id } => id,
            other => return Err(CallError::Internal(format!("unexpected outcome {other:?}"))),
        };
        Ok(id)
    }
}

#[tonic::async_trait]
impl AppLink for AppLinkService {
    type RunStream = ReceiverStream<Result<AppEvent, Status>>;

    async fn run(
        &self,
        request: Request<Streaming<AppMessage>>,
    ) -> Result<Response<Self::RunStream>, Status> {
        let Some(session) = self.sessions.current_or_wait(ELECTION_PATIENCE).await else {
            return Err(CallError::not_leader(&self.node).into());
        };
        let user = request.extensions().get::<NamedUser>().cloned();
        let mut inbound = request.into_inner();
        let Some(AppMessage {
            body: Some(Up::Register(register)),
        }) = inbound.message().await?
        else {
            return Err(Status::invalid_argument(
                "an application must register first",
            ));
        };
        let ui_address = register.ui_address.clone();
        let driver = (!register.driver_id.is_empty()).then(|| DriverId(register.driver_id.clone()));
        let believed_live = register
            .live_executor_ids
            .iter()
            .copied()
            .map(ExecutorId)
            .collect();
        let app = self.register(user.as_ref(), register).await?;
        tracing::info!(%app, "application attached");
        // Room for every executor it holds: they are sent before the stream is read.
        let held = self
            .node
            .local_state()
            .read()
            .expect("state lock")
            .apps()
            .get(&app)
            .map_or(0, |a| a.executors.len());
        let (sender, receiver) = link_channel(held);
        let Some(link) = session.open_app_link(sender) else {
            return Err(CallError::not_leader(&self.node).into());
        };
        session.step(Event::AppAttached {
            link,
            app: app.clone(),
            ui_address,
            driver,
            user: user.map(|user| Owner {
                user: user.name,
                generation: user.generation,
            }),
            believed_live,
        });
        let span = tracing::info_span!("app", app = %app);
        tokio::spawn(
            session
                .follow(link, inbound, move |message: AppMessage| {
                    app_event(&app, link, message.body?)
                })
                .instrument(span),
        );
        Ok(Response::new(ReceiverStream::new(receiver)))
    }
}
