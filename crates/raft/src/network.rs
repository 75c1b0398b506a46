//! The client side of replication: openraft's RPCs to a peer over gRPC.
//!
//! openraft asks for a client often (per replication stream, election round and linearizable
//! read), so channels are built lazily once per peer address and shared.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use muster_proto::auth::Credential;
use muster_proto::transport::Dialer;
use muster_proto::v1::RaftBytes;
use muster_proto::v1::replication_client::ReplicationClient;
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

use crate::codec::{decode, encode};
use crate::types::{Node, NodeId, TypeConfig};

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

/// When each peer last answered a call of this replica's.
type Contacts = Arc<Mutex<HashMap<NodeId, Instant>>>;

/// Builds peer clients, sharing one channel per address.
#[derive(Clone, Default)]
pub struct Network {
    channels: Arc<Mutex<HashMap<String, Channel>>>,
    /// When each peer last answered.
    contacts: Contacts,
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
            contacts: Arc::default(),
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
        let contacts = self.contacts.lock().expect("contacts lock");
        contacts
            .get(&peer)
            .is_some_and(|at| at.elapsed() <= patience)
    }

    /// Asks `target` (a member at `addr`) to campaign now, within `deadline`; whether it does.
    pub(crate) async fn timeout_now(
        &self,
        target: NodeId,
        addr: &str,
        request: &TimeoutNow,
        deadline: Duration,
    ) -> Result<bool, String> {
        let addr = self.routes.get(&target).map_or(addr, String::as_str);
        let channel = self.channel(addr).map_err(|e| e.to_string())?;
        let mut call = tonic::Request::new(RaftBytes {
            data: encode(request),
        });
        call.set_timeout(deadline);
        self.credential.attach(call.metadata_mut());
        let mut client = ReplicationClient::new(channel);
        let response = tokio::time::timeout(deadline, client.timeout_now(call))
            .await
            .map_err(|_| format!("no answer within {deadline:?}"))?
            .map_err(|status| status.message().to_owned())?;
        decode(&response.into_inner().data).map_err(|e| e.to_string())
    }
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
            contacts: Arc::clone(&self.contacts),
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
    contacts: Contacts,
}

type RpcResult<T, E> = Result<T, RPCError<NodeId, Node, RaftError<NodeId, E>>>;

impl PeerClient {
    /// Sends one bincode request and decodes the peer's `Result<T, RaftError<E>>`.
    async fn call<T, E, F, Fut>(
        &mut self,
        request: Vec<u8>,
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
            Err(e) => return Err(RPCError::Unreachable(Unreachable::new(e))),
        };
        let mut request = tonic::Request::new(RaftBytes { data: request });
        request.set_timeout(option.hard_ttl());
        self.credential.attach(request.metadata_mut());
        let response = send(client, request)
            .await
            .map_err(|status| match status.code() {
                // Nothing answered: openraft backs off before trying this peer again.
                tonic::Code::Unavailable => RPCError::Unreachable(Unreachable::new(&status)),
                _ => RPCError::Network(NetworkError::new(&status)),
            })?;
        self.contacts
            .lock()
            .expect("contacts lock")
            .insert(self.target, Instant::now());
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

/// How long replication to an unreachable peer pauses before trying again. openraft's 500 ms
/// default lets a restarted peer's election timer run out before the leader reaches it, and
/// its campaign then deposes a healthy leader.
const UNREACHABLE_BACKOFF: Duration = Duration::from_millis(100);

impl RaftNetwork<TypeConfig> for PeerClient {
    fn backoff(&self) -> Backoff {
        Backoff::new(std::iter::repeat(UNREACHABLE_BACKOFF))
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
        let mut request = encode(&rpc);
        let mut partial = None;
        if request.len() > APPEND_BUDGET && rpc.entries.len() > 1 {
            let mut used = 0;
            let fitting = rpc
                .entries
                .iter()
                .take_while(|entry| {
                    used += encode(entry).len();
                    used <= APPEND_BUDGET
                })
                .count()
                .max(1);
            rpc.entries.truncate(fitting);
            partial = rpc.entries.last().map(|entry| entry.log_id);
            request = encode(&rpc);
        }
        let response = self
            .call(request, &option, |mut c, r| async move {
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
        self.call(encode(&rpc), &option, |mut c, r| async move {
            c.install_snapshot(r).await
        })
        .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>, openraft::error::Infallible> {
        self.call(
            encode(&rpc),
            &option,
            |mut c, r| async move { c.vote(r).await },
        )
        .await
    }
}
