//! The server side of replication: peers' RPCs handed to the local Raft.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use muster_proto::v1::replication_server::{Replication, ReplicationServer};
use muster_proto::v1::{BuildInfo, BuildRequest, RaftBytes};
use muster_state::version::LogFormat;
use openraft::ServerState;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use crate::network::{MAX_MESSAGE_BYTES, TimeoutNow};
use crate::types::Raft;
use muster_state::codec::{decode, encode};

/// Serves openraft's RPCs for one replica.
pub struct ReplicationService {
    raft: Raft,
    /// When the last AppendEntries (a heartbeat included) arrived.
    last_append: Mutex<Instant>,
    /// How long without AppendEntries before a `TimeoutNow` is believed: a leader that
    /// still heartbeats has not handed over.
    quiet: Duration,
    /// The build this replica runs.
    build: BuildInfo,
    /// Set, once, when a leader sends entries of a log format this build does not read:
    /// the replica stops (see [`crate::RaftNode::stopped`]).
    unreadable: watch::Sender<Option<String>>,
}

impl ReplicationService {
    /// The gRPC service for `raft`, accepting messages up to [`MAX_MESSAGE_BYTES`]; it
    /// campaigns when asked only after `quiet` without AppendEntries, says it runs `build`,
    /// and sets `unreadable` when a leader sends what `build` does not read.
    pub fn server(
        raft: Raft,
        quiet: Duration,
        build: BuildInfo,
        unreadable: watch::Sender<Option<String>>,
    ) -> ReplicationServer<Self> {
        ReplicationServer::new(Self {
            raft,
            last_append: Mutex::new(Instant::now()),
            quiet,
            build,
            unreadable,
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
        log_format: 0,
    }))
}

#[tonic::async_trait]
impl Replication for ReplicationService {
    /// Refuses entries of a log format this build does not read, and stops the replica
    /// with one line, rather than fail to decode them on every retry.
    async fn append_entries(&self, rpc: Request<RaftBytes>) -> Result<Response<RaftBytes>, Status> {
        *self.last_append.lock().expect("last append lock") = Instant::now();
        let sent = LogFormat(rpc.get_ref().log_format);
        if sent > LogFormat::NEWEST {
            let line = format!(
                "the leader sent entries of {sent}, and this master's build (release {}) reads \
                 up to {}: run {} on this master",
                self.build.version,
                LogFormat::NEWEST,
                sent.readers()
            );
            self.unreadable.send_if_modified(|unreadable| {
                let first = unreadable.is_none();
                if first {
                    *unreadable = Some(line.clone());
                }
                first
            });
            return Err(Status::failed_precondition(line));
        }
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

    async fn build(&self, _: Request<BuildRequest>) -> Result<Response<BuildInfo>, Status> {
        Ok(Response::new(self.build.clone()))
    }
}
