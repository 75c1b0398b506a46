//! The server side of replication: peers' RPCs handed to the local Raft.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use muster_proto::v1::RaftBytes;
use muster_proto::v1::replication_server::{Replication, ReplicationServer};
use openraft::ServerState;
use serde::de::DeserializeOwned;
use tonic::{Request, Response, Status};

use crate::codec::{decode, encode};
use crate::network::{MAX_MESSAGE_BYTES, TimeoutNow};
use crate::types::Raft;

/// Serves openraft's RPCs for one replica.
pub struct ReplicationService {
    raft: Raft,
    /// When the last AppendEntries (a heartbeat included) arrived.
    last_append: Mutex<Instant>,
    /// How long without AppendEntries before a `TimeoutNow` is believed: a leader that
    /// still heartbeats has not handed over.
    quiet: Duration,
}

impl ReplicationService {
    /// The gRPC service for `raft`, accepting messages up to [`MAX_MESSAGE_BYTES`]; it
    /// campaigns when asked only after `quiet` without AppendEntries.
    pub fn server(raft: Raft, quiet: Duration) -> ReplicationServer<Self> {
        ReplicationServer::new(Self {
            raft,
            last_append: Mutex::new(Instant::now()),
            quiet,
        })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }
}

fn request<T: DeserializeOwned>(request: Request<RaftBytes>) -> Result<T, Status> {
    decode(&request.into_inner().data)
        .map_err(|e| Status::invalid_argument(format!("malformed Raft message: {e}")))
}

fn reply<T: serde::Serialize>(result: &T) -> Result<Response<RaftBytes>, Status> {
    Ok(Response::new(RaftBytes {
        data: encode(result),
    }))
}

#[tonic::async_trait]
impl Replication for ReplicationService {
    async fn append_entries(&self, rpc: Request<RaftBytes>) -> Result<Response<RaftBytes>, Status> {
        *self.last_append.lock().expect("last append lock") = Instant::now();
        reply(&self.raft.append_entries(request(rpc)?).await)
    }

    async fn vote(&self, rpc: Request<RaftBytes>) -> Result<Response<RaftBytes>, Status> {
        reply(&self.raft.vote(request(rpc)?).await)
    }

    async fn install_snapshot(
        &self,
        rpc: Request<RaftBytes>,
    ) -> Result<Response<RaftBytes>, Status> {
        reply(&self.raft.install_snapshot(request(rpc)?).await)
    }

    /// Campaigns at once when asked by the leader this replica follows, in its term, once
    /// that leader has gone quiet: a stale, stray or late request changes nothing.
    async fn timeout_now(&self, rpc: Request<RaftBytes>) -> Result<Response<RaftBytes>, Status> {
        let TimeoutNow { leader, term } = request(rpc)?;
        let quiet = self.last_append.lock().expect("last append lock").elapsed() >= self.quiet;
        let campaigns = quiet && {
            let metrics = self.raft.metrics();
            let metrics = metrics.borrow();
            metrics.state == ServerState::Follower
                && metrics.current_leader == Some(leader)
                && metrics.current_term == term
        };
        if campaigns {
            tracing::info!(%leader, term, "the leader hands over: campaigning");
            self.raft
                .trigger()
                .elect()
                .await
                .map_err(|e| Status::internal(e.to_string()))?;
        }
        reply(&campaigns)
    }
}
