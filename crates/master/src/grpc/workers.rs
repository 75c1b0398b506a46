//! The leader's side of worker streams (`proto/muster/v1/worker.proto`): each message is
//! checked, turned into an [`Event`] and stepped through the session's leader.

use std::sync::Arc;
use std::time::Duration;

use muster_core::limits::MAX_REQUEST_BYTES;
use muster_proto::v1::worker_link_server::{WorkerLink, WorkerLinkServer};
use muster_proto::v1::worker_message::Body as Up;
use muster_proto::v1::{MasterMessage, WorkerMessage};
use muster_raft::RaftNode;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use crate::grpc::call::CallError;
use crate::grpc::wire::{registration, worker_event};
use crate::session::{ELECTION_PATIENCE, Sessions, link_channel};
use muster_leader::Event;

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
        let span = tracing::info_span!("worker", worker = %worker);
        tokio::spawn(
            async move {
                let relay = Arc::clone(&session);
                let events = |message: WorkerMessage| match message.body? {
                    Up::LogChunk(chunk) => {
                        relay.answer_log_read(link, chunk);
                        None
                    }
                    body => worker_event(&worker, link, body),
                };
                session.follow(link, inbound, events).await;
                tracing::info!("worker stream closed");
            }
            .instrument(span),
        );
        Ok(Response::new(ReceiverStream::new(receiver)))
    }
}
