//! The client side of replication: openraft's RPCs to a peer over gRPC.
//!
//! openraft asks for a client often (per replication stream, election round and linearizable
//! read), so channels are built lazily once per peer address and shared.
//!
//! Every failed call, whatever its kind (refused, reset, closed, timed out, refused by the
//! peer), makes openraft back off before it tries that peer again, so a cut link costs about
//! ten attempts a second instead of a busy loop. The network keeps each peer's link: when it
//! last answered, and since when and how often it has failed, so that a peer going away and
//! coming back is one log line each, and the metrics can count the failed attempts.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use muster_proto::auth::Credential;
use muster_proto::discovery::jitter;
use muster_proto::transport::Dialer;
use muster_proto::v1::replication_client::ReplicationClient;
use muster_proto::v1::{BuildInfo, BuildRequest, RaftBytes};
use muster_state::version::LogFormat;
use openraft::EntryPayload;
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tonic::transport::Channel;

use crate::builds::first_release;
use crate::types::{Node, NodeId, TypeConfig};
use muster_state::codec::{decode, encode, encoded_len};

/// Largest message a replica sends or accepts: a batch of plan entries can be large.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// The most entry bytes one AppendEntries carries, unless a single entry is larger.
pub(crate) const APPEND_BUDGET: usize = 4 * 1024 * 1024;

/// A leader's request that a follower campaign now (the last step of a transfer).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct TimeoutNow {
    /// The leader that asks.
    pub(crate) leader: NodeId,
    /// Its term.
    pub(crate) term: u64,
}

/// What this replica knows of its link to one peer.
#[derive(Clone, Copy, Debug, Default)]
struct Link {
    /// When the peer last answered a call.
    answered: Option<Instant>,
    /// Since when calls have failed without an answer between, and how many.
    failing: Option<(Instant, u64)>,
    /// Calls that failed since this replica started.
    failed_attempts: u64,
}

/// Each peer's link.
type Links = Arc<Mutex<HashMap<NodeId, Link>>>;

/// Builds peer clients, sharing one channel per address.
#[derive(Clone, Default)]
pub struct Network {
    channels: Arc<Mutex<HashMap<String, Channel>>>,
    /// Each peer's link.
    links: Links,
    /// Addresses that replace peers' membership addresses.
    routes: Arc<BTreeMap<NodeId, String>>,
    /// What every call carries.
    credential: Credential,
    dialer: Dialer,
}

impl Network {
    /// A network that reaches the peers in `routes` at the address given there, and every
    /// other peer at its membership address, every call carrying `credential`.
    pub fn new(routes: BTreeMap<NodeId, String>, credential: Credential, dialer: Dialer) -> Self {
        Self {
            channels: Arc::default(),
            links: Arc::default(),
            routes: Arc::new(routes),
            credential,
            dialer,
        }
    }

    fn channel(&self, addr: &str) -> Result<Channel, tonic::transport::Error> {
        let mut channels = self.channels.lock().expect("channel cache lock");
        if let Some(channel) = channels.get(addr) {
            return Ok(channel.clone());
        }
        let channel = self
            .dialer
            .endpoint(addr)?
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true)
            .connect_lazy();
        channels.insert(addr.to_owned(), channel.clone());
        Ok(channel)
    }
}

impl Network {
    /// Whether `peer` answered a call of this replica's within `patience`.
    pub(crate) fn heard_within(&self, peer: NodeId, patience: Duration) -> bool {
        let links = self.links.lock().expect("links lock");
        links
            .get(&peer)
            .and_then(|link| link.answered)
            .is_some_and(|at| at.elapsed() <= patience)
    }

    /// Calls to each peer that failed since this replica started.
    pub(crate) fn failed_attempts(&self) -> BTreeMap<NodeId, u64> {
        let links = self.links.lock().expect("links lock");
        links
            .iter()
            .map(|(&peer, link)| (peer, link.failed_attempts))
            .collect()
    }

    /// A client of `target` (a member at `addr`, or at its route) and `message` as a call of
    /// this replica's own, with its credential and `deadline`.
    fn peer_call<T>(
        &self,
        target: NodeId,
        addr: &str,
        message: T,
        deadline: Duration,
    ) -> Result<(ReplicationClient<Channel>, tonic::Request<T>), PeerCallError> {
        let addr = self.routes.get(&target).map_or(addr, String::as_str);
        let client = ReplicationClient::new(self.channel(addr)?);
        let mut call = tonic::Request::new(message);
        call.set_timeout(deadline);
        self.credential.attach(call.metadata_mut());
        Ok((client, call))
    }

    /// Asks `target` (a member at `addr`) to campaign now, within `deadline`; whether it does.
    pub(crate) async fn timeout_now(
        &self,
        target: NodeId,
        addr: &str,
        request: &TimeoutNow,
        deadline: Duration,
    ) -> Result<bool, PeerCallError> {
        let message = RaftBytes {
            data: encode(request),
            log_format: 0,
        };
        let (mut client, call) = self.peer_call(target, addr, message, deadline)?;
        let response = tokio::time::timeout(deadline, client.timeout_now(call))
            .await
            .map_err(|_| PeerCallError::NoAnswer(deadline))??;
        Ok(decode(&response.into_inner().data)?)
    }

    /// Asks `target` (a member at `addr`) which build it runs, within `deadline`. A member of
    /// release 0.1.0, which has no such call, runs [`first_release`].
    pub(crate) async fn build(
        &self,
        target: NodeId,
        addr: &str,
        deadline: Duration,
    ) -> Result<BuildInfo, PeerCallError> {
        let (mut client, call) = self.peer_call(target, addr, BuildRequest {}, deadline)?;
        match tokio::time::timeout(deadline, client.build(call)).await {
            Err(_) => Err(PeerCallError::NoAnswer(deadline)),
            Ok(Ok(build)) => Ok(build.into_inner()),
            Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => Ok(first_release()),
            Ok(Err(status)) => Err(status.into()),
        }
    }
}

/// Why a member did not answer a call of a replica's own (campaign now, which build).
#[derive(Debug, thiserror::Error)]
pub(crate) enum PeerCallError {
    /// Its address makes no channel.
    #[error(transparent)]
    Channel(#[from] tonic::transport::Error),
    /// It did not answer in time.
    #[error("no answer within {0:?}")]
    NoAnswer(Duration),
    /// It refused the call.
    #[error("{}", .0.message())]
    Refused(#[from] tonic::Status),
    /// Its answer did not decode.
    #[error(transparent)]
    Garbled(#[from] bincode::error::DecodeError),
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> PeerClient {
        let addr = self.routes.get(&target).unwrap_or(&node.addr).clone();
        let client = self.channel(&addr).map(|channel| {
            ReplicationClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES)
        });
        PeerClient {
            target,
            addr,
            client,
            credential: self.credential.clone(),
            links: Arc::clone(&self.links),
        }
    }
}

/// openraft's view of one peer.
pub struct PeerClient {
    target: NodeId,
    addr: String,
    /// The client, or why the peer's address could not make one.
    client: Result<ReplicationClient<Channel>, tonic::transport::Error>,
    credential: Credential,
    links: Links,
}

type RpcResult<T, E> = Result<T, RPCError<NodeId, Node, RaftError<NodeId, E>>>;

impl PeerClient {
    /// Sends one bincode request and decodes the peer's `Result<T, RaftError<E>>`.
    async fn call<T, E, F, Fut>(
        &mut self,
        request: Vec<u8>,
        log_format: LogFormat,
        option: &RPCOption,
        send: F,
    ) -> RpcResult<T, E>
    where
        T: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
        F: FnOnce(ReplicationClient<Channel>, tonic::Request<RaftBytes>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<RaftBytes>, tonic::Status>>,
    {
        let client = match &self.client {
            Ok(client) => client.clone(),
            Err(e) => {
                self.failed(&e.to_string());
                return Err(RPCError::Unreachable(Unreachable::new(e)));
            }
        };
        let mut request = tonic::Request::new(RaftBytes {
            data: request,
            log_format: log_format.0,
        });
        request.set_timeout(option.hard_ttl());
        self.credential.attach(request.metadata_mut());
        // Whatever the failure, openraft backs off before it tries this peer again.
        let response = send(client, request).await.map_err(|status| {
            self.failed(status.message());
            RPCError::Unreachable(Unreachable::new(&status))
        })?;
        self.answered();
        let result: Result<T, RaftError<NodeId, E>> = decode(&response.into_inner().data)
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| {
            RPCError::RemoteError(RemoteError::new_with_node(
                self.target,
                Node::new(self.addr.clone()),
                e,
            ))
        })
    }
}

impl PeerClient {
    /// Notes a call that failed: the first of a run is logged, with its reason.
    fn failed(&self, reason: &str) {
        let mut links = self.links.lock().expect("links lock");
        let link = links.entry(self.target).or_default();
        link.failed_attempts += 1;
        match &mut link.failing {
            Some((_, attempts)) => *attempts += 1,
            None => {
                link.failing = Some((Instant::now(), 1));
                tracing::warn!(peer = self.target, addr = %self.addr, reason, "peer unreachable");
            }
        }
    }

    /// Notes an answer; one that ends a run of failures is logged, with the run.
    fn answered(&self) {
        let mut links = self.links.lock().expect("links lock");
        let link = links.entry(self.target).or_default();
        link.answered = Some(Instant::now());
        if let Some((since, failed_attempts)) = link.failing.take() {
            tracing::info!(
                peer = self.target,
                addr = %self.addr,
                failed_attempts,
                after = ?since.elapsed(),
                "peer reachable again"
            );
        }
    }
}

/// How long replication to an unreachable peer pauses before trying again, give or take
/// [`BACKOFF_JITTER`]: short, because openraft's 500 ms default lets a restarted peer's
/// election timer run out before the leader reaches it, and its campaign then deposes a
/// healthy leader; a healed link is used again within a heartbeat or two.
const UNREACHABLE_BACKOFF: Duration = Duration::from_millis(100);

/// The spread of the back-off, so that the replicas' retries do not fall into step.
const BACKOFF_JITTER: Duration = Duration::from_millis(20);

/// One back-off: [`UNREACHABLE_BACKOFF`], moved by up to [`BACKOFF_JITTER`] either way.
fn jittered_backoff() -> Duration {
    UNREACHABLE_BACKOFF - BACKOFF_JITTER + jitter(2 * BACKOFF_JITTER)
}

impl RaftNetwork<TypeConfig> for PeerClient {
    fn backoff(&self) -> Backoff {
        Backoff::new(std::iter::repeat_with(jittered_backoff))
    }

    /// Sends the entries, or as many of them as fit in [`APPEND_BUDGET`] bytes (at least
    /// one) and reports the rest unsent with a partial success: a batch of large entries
    /// could otherwise exceed the message limit or the RPC deadline every time, and a lagging
    /// follower would never catch up.
    async fn append_entries(
        &mut self,
        mut rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, openraft::error::Infallible> {
        // Entries are sized one by one only up to the budget, and the message is encoded
        // once: encoding a whole batch of large entries first took longer than an election
        // timeout (in debug builds), so the follower never heard from its leader in time.
        let mut used = 0;
        let fitting = rpc
            .entries
            .iter()
            .take_while(|entry| {
                used += encoded_len(entry);
                used <= APPEND_BUDGET
            })
            .count()
            .max(1);
        let mut partial = None;
        if fitting < rpc.entries.len() {
            rpc.entries.truncate(fitting);
            partial = rpc.entries.last().map(|entry| entry.log_id);
        }
        let log_format = rpc
            .entries
            .iter()
            .filter_map(|entry| match &entry.payload {
                EntryPayload::Normal(command) => Some(command.op.introduced_in()),
                _ => None,
            })
            .max()
            .unwrap_or(LogFormat::FIRST);
        let request = encode(&rpc);
        let response = self
            .call(request, log_format, &option, |mut c, r| async move {
                c.append_entries(r).await
            })
            .await?;
        Ok(match (response, partial) {
            (AppendEntriesResponse::Success, Some(sent)) => {
                AppendEntriesResponse::PartialSuccess(Some(sent))
            }
            (response, _) => response,
        })
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        // The snapshot's own format byte says what it needs.
        let last = rpc.done.then_some(rpc.meta.last_log_id).flatten();
        let response = self
            .call(
                encode(&rpc),
                LogFormat::FIRST,
                &option,
                |mut c, r| async move { c.install_snapshot(r).await },
            )
            .await?;
        if let Some(last) = last {
            tracing::info!(
                peer = self.target,
                index = last.index,
                "snapshot sent to a follower behind the log"
            );
        }
        Ok(response)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>, openraft::error::Infallible> {
        self.call(
            encode(&rpc),
            LogFormat::FIRST,
            &option,
            |mut c, r| async move { c.vote(r).await },
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use muster_proto::v1::replication_server::{Replication, ReplicationServer};
    use openraft::Vote;
    use tonic::{Request, Response, Status};

    use super::*;

    /// A peer that refuses every call, as one with another cluster's credential does.
    struct Refusing;

    #[tonic::async_trait]
    impl Replication for Refusing {
        async fn append_entries(
            &self,
            _: Request<RaftBytes>,
        ) -> Result<Response<RaftBytes>, Status> {
            Err(Status::unauthenticated("wrong credential"))
        }
        async fn vote(&self, _: Request<RaftBytes>) -> Result<Response<RaftBytes>, Status> {
            Err(Status::unauthenticated("wrong credential"))
        }
        async fn install_snapshot(
            &self,
            _: Request<RaftBytes>,
        ) -> Result<Response<RaftBytes>, Status> {
            Err(Status::unauthenticated("wrong credential"))
        }
        async fn timeout_now(&self, _: Request<RaftBytes>) -> Result<Response<RaftBytes>, Status> {
            Err(Status::unauthenticated("wrong credential"))
        }
        async fn build(&self, _: Request<BuildRequest>) -> Result<Response<BuildInfo>, Status> {
            Err(Status::unauthenticated("wrong credential"))
        }
    }

    #[tokio::test]
    async fn every_failed_call_backs_off_and_is_counted() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let refusing = listener.local_addr().unwrap().to_string();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(ReplicationServer::new(Refusing))
                .serve_with_incoming(muster_proto::transport::incoming(listener)),
        );
        // Peer 2 refuses; peer 3's address has nothing listening.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let nobody = closed.local_addr().unwrap().to_string();
        drop(closed);
        let mut network = Network::new(BTreeMap::new(), Credential::none(), Dialer::plain());
        let option = RPCOption::new(Duration::from_secs(2));
        for (peer, addr) in [(2, &refusing), (3, &nobody)] {
            let mut client = network.new_client(peer, &Node::new(addr.clone())).await;
            for _ in 0..3 {
                let vote = VoteRequest::new(Vote::new(1, 1), None);
                let error = client.vote(vote, option.clone()).await.unwrap_err();
                assert!(
                    matches!(error, RPCError::Unreachable(_)),
                    "{addr}: openraft backs off only after Unreachable: {error}"
                );
            }
        }
        assert_eq!(network.failed_attempts(), BTreeMap::from([(2, 3), (3, 3)]));
        assert!(!network.heard_within(2, Duration::from_secs(60)));
    }

    #[test]
    fn the_back_off_is_jittered_around_a_tenth_of_a_second() {
        let waits: Vec<Duration> = (0..100).map(|_| jittered_backoff()).collect();
        assert!(waits.iter().all(|w| {
            *w >= UNREACHABLE_BACKOFF - BACKOFF_JITTER && *w <= UNREACHABLE_BACKOFF + BACKOFF_JITTER
        }));
    }
}
