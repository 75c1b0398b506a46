//! The client API (`proto/muster/v1/cluster.proto`). Handled on the leader; a follower
//! forwards the call once, to the leader it knows, and a call that still lands on a follower
//! fails with `UNAVAILABLE` and the leader's address in the [`LEADER_HEADER`] metadata.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use muster_core::access::QueueSpec;
use muster_core::ids::{DriverId, WorkId, WorkerId};
use muster_core::limits::MAX_REQUEST_BYTES;
use muster_core::queues::check_paths;
use muster_proto::auth::{AUTHORIZATION, NamedUser, Tokens};
use muster_proto::convert::{address_lists, submit_driver_op};
use muster_proto::transport::Dialer;
use muster_proto::v1::change_members_request::Change;
use muster_proto::v1::cluster_client::ClusterClient;
use muster_proto::v1::cluster_server::{Cluster, ClusterServer};
use muster_proto::v1::{
    self, AddUserReply, AddUserRequest, AppStatus, ChangeMembersReply, ChangeMembersRequest,
    DrainWorkerReply, DrainWorkerRequest, DriverStatus, ExecutorStatus, KillReply, KillRequest,
    Member, MemberRole, Page, ReadLogReply, ReadLogRequest, RevokeUserReply, RevokeUserRequest,
    SaveSnapshotReply, SaveSnapshotRequest, SetPriorityReply, SetPriorityRequest, SetQueuesReply,
    SetQueuesRequest, StatusReply, StatusRequest, SubmitDriverReply, SubmitDriverRequest,
    WorkerStatus,
};
use muster_raft::{MAX_MESSAGE_BYTES, NodeId, RaftNode, WriteError};
use muster_state::commands::{AddUser, RevokeUser, set_queues_op};
use muster_state::model::{App, DriverState};
use muster_state::version::LogFormat;
use muster_state::{ApplyError, ClusterState, Command, Op, Outcome, Response};
use tonic::transport::Channel;
use tonic::{Request, Status};

use crate::grpc::call::{CallError, admit, client_command, committed, may_act_on};
use crate::grpc::wire::{LogRead, drain_op, kill_op, log_read, priority_op};
use crate::session::Sessions;
use muster_leader::{Event, ProcessKey};

/// How long a forwarded call may take at the leader.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(3);
/// Metadata key marking a call a follower already forwarded.
const FORWARDED_HEADER: &str = "x-muster-forwarded";

/// The client API of one replica.
pub struct ClusterService {
    node: Arc<RaftNode>,
    sessions: Arc<Sessions>,
    leaders: Mutex<HashMap<String, Channel>>,
    /// How to reach the leader when forwarding.
    dialer: Dialer,
    /// What issues named users' credentials.
    tokens: Tokens,
}

impl ClusterService {
    /// The gRPC service for `node`, forwarding through `dialer`, issuing named users'
    /// credentials with `tokens`.
    pub fn server(
        node: Arc<RaftNode>,
        sessions: Arc<Sessions>,
        dialer: Dialer,
        tokens: Tokens,
    ) -> ClusterServer<Self> {
        ClusterServer::new(Self {
            node,
            sessions,
            leaders: Mutex::default(),
            dialer,
            tokens,
        })
        .max_decoding_message_size(MAX_REQUEST_BYTES)
    }

    /// Commits `command` here, then has the leader's session carry out its effects and
    /// schedule.
    async fn write(&self, command: Command) -> Result<Response, CallError> {
        let response = committed(self.node.write(command).await)?;
        if let Some(session) = self.sessions.current() {
            session.step(Event::ClientCommitted {
                effects: response.effects.clone(),
            });
        }
        Ok(response)
    }

    /// A client for `leader`, if this call may still be forwarded.
    fn leader_client(
        &self,
        leader: Option<(NodeId, String)>,
        forwarded: bool,
    ) -> Result<ClusterClient<Channel>, Status> {
        let addr = match leader {
            Some((_, addr)) if !forwarded => addr,
            _ => return Err(CallError::not_leader(&self.node).into()),
        };
        let mut leaders = self.leaders.lock().expect("leader channels lock");
        let channel = match leaders.get(&addr) {
            Some(channel) => channel.clone(),
            None => {
                let endpoint = self
                    .dialer
                    .endpoint(&addr)
                    .map_err(|e| Status::internal(format!("leader address {addr}: {e}")))?;
                // A forwarded call to a leader that froze must not hold the client forever.
                let channel = endpoint
                    .connect_timeout(Duration::from_secs(2))
                    .timeout(FORWARD_TIMEOUT)
                    .connect_lazy();
                leaders.insert(addr, channel.clone());
                channel
            }
        };
        Ok(ClusterClient::new(channel)
            .max_decoding_message_size(muster_core::limits::MAX_REPLY_BYTES))
    }

    /// The outcome of handling a call here, or the leader's answer to it when this replica
    /// does not lead.
    async fn answer<Req: Clone, Rep>(
        &self,
        request: Request<Req>,
        here: impl AsyncFnOnce(&Self, Option<&NamedUser>, Req) -> Result<Rep, CallError>,
        forward: impl AsyncFnOnce(
            ClusterClient<Channel>,
            Request<Req>,
        ) -> Result<tonic::Response<Rep>, Status>,
    ) -> Result<tonic::Response<Rep>, Status> {
        let forwarded = request.metadata().contains_key(FORWARDED_HEADER);
        let user = request.extensions().get::<NamedUser>().cloned();
        // The leader checks the caller's own credential, not this replica's.
        let authorization = request.metadata().get(AUTHORIZATION).cloned();
        let body = request.into_inner();
        match here(self, user.as_ref(), body.clone()).await {
            Ok(reply) => Ok(tonic::Response::new(reply)),
            Err(CallError::NotLeader(leader)) => {
                let client = self.leader_client(leader, forwarded)?;
                let mut request = Request::new(body);
                let metadata = request.metadata_mut();
                metadata.insert(FORWARDED_HEADER, "1".parse().expect("ASCII value"));
                if let Some(authorization) = authorization {
                    metadata.insert(AUTHORIZATION, authorization);
                }
                forward(client, request).await
            }
            Err(error) => Err(error.into()),
        }
    }

    /// The status of `state`, with all of its drivers or the `drivers` page of them.
    fn status_reply(&self, state: &ClusterState, drivers: Option<&Page>) -> StatusReply {
        let app_status = |a: &App| AppStatus {
            id: a.id.to_string(),
            name: a.desc.name.clone(),
            queue: a.desc.queue.to_string(),
            state: v1::AppState::from(a.state).into(),
            user: a.desc.user.clone(),
            ended_executors: state
                .ended_executors(&a.id)
                .map(|e| ExecutorStatus {
                    id: e.id.0,
                    worker: e.worker.to_string(),
                    resources: Some((&e.resources).into()),
                    state: v1::ExecutorState::from(e.state).into(),
                    exit_code: e.exit_code,
                    ..ExecutorStatus::default()
                })
                .collect(),
            submitted_at_ms: a.submitted_at.0,
            ended_at_ms: a.ended_at.map_or(0, |at| at.0),
            executor_memory_mb: a.desc.executor_memory_mb,
            executor_cores: a.desc.executor_cores,
            gang_timed_out: state
                .timed_out_gang(&WorkId::App(a.id.clone()))
                .map(ToString::to_string)
                .unwrap_or_default(),
            ..AppStatus::default()
        };
        let leadership = self.node.leadership().borrow().clone();
        let metrics = self.node.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        let voters: Vec<u64> = membership.voter_ids().collect();
        let silent = self.node.silent_members();
        let builds = self.node.member_builds();
        let members = membership
            .nodes()
            .map(|(&id, node)| Member {
                id,
                addr: node.addr.clone(),
                silent: silent.contains(&id),
                build: builds.get(&id).cloned(),
                role: if Some(id) == leadership.leader.as_ref().map(|(l, _)| *l) {
                    MemberRole::Leader
                } else if voters.contains(&id) {
                    MemberRole::Follower
                } else {
                    MemberRole::Learner
                }
                .into(),
            })
            .collect();
        let session = self.sessions.current();
        let pid = |key: ProcessKey| session.as_ref().and_then(|s| s.pid(&key)).unwrap_or(0);
        let usage = |worker: Option<&WorkerId>, key: ProcessKey| {
            let usage = session.as_ref()?.usage(worker?, &key)?;
            Some(v1::ProcessUsage {
                memory_bytes: usage.memory_bytes,
                cpu_ms: usage.cpu_ms,
                ..v1::ProcessUsage::default()
            })
        };
        let now = std::time::Instant::now();
        let restarts = |key: ProcessKey| {
            let restarts = session.as_ref()?.restarts(&key)?;
            Some(v1::Restarts::from(restarts.told_at(now)))
        };
        let waiting = |id: &WorkId| {
            session
                .as_ref()
                .and_then(|s| s.waiting(id))
                .unwrap_or_default()
        };
        let (listed, drivers_next) = match drivers {
            Some(page) => {
                let from = DriverId(page.from.clone());
                state.drivers_page(&from, page.limit as usize)
            }
            // Active drivers, then the retained completed ones, newest last.
            None => (
                state
                    .drivers()
                    .values()
                    .chain(state.completed_drivers())
                    .collect(),
                None,
            ),
        };
        let counts = state.driver_counts();
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        StatusReply {
            leader: leadership.leader.map_or(0, |(id, _)| id),
            term: leadership.term.0,
            applied_index: metrics.last_applied.map_or(0, |applied| applied.index),
            log_format: state.log_format().0,
            log_format_held: self.node.holds_log_format(),
            preemption_warning: session
                .as_ref()
                .and_then(|s| s.preemption_warning(state))
                .unwrap_or_default(),
            recovery_state: session
                .as_ref()
                .map_or(v1::RecoveryState::Standby, |s| s.recovery_state().into())
                .into(),
            members,
            workers: state
                .workers()
                .values()
                .map(|w| WorkerStatus {
                    draining: state.draining().contains_key(&w.id),
                    addresses: address_lists(state.worker_addresses(&w.id)),
                    build: session.as_ref().and_then(|s| s.worker_build(&w.id)),
                    shuffle_service: session.as_ref().and_then(|s| s.shuffle_service(&w.id)),
                    spark_home: session.as_ref().and_then(|s| s.spark_home(&w.id)),
                    ..WorkerStatus::from(w)
                })
                .collect(),
            completed_apps: state
                .completed_apps()
                .iter()
                .map(|a| AppStatus {
                    logs_events: state.logs_events(&a.id),
                    ..app_status(a)
                })
                .collect(),
            apps: state
                .apps()
                .values()
                .map(|a| AppStatus {
                    cores_granted: a.cores_granted,
                    min_executors: state.gang(&a.id),
                    priority: state.app_priority(&a.id),
                    logs_events: state.logs_events(&a.id),
                    waiting: waiting(&WorkId::App(a.id.clone())),
                    ui_address: session
                        .as_ref()
                        .map(|s| s.ui_address(&a.id))
                        .unwrap_or_default(),
                    driver_id: session
                        .as_ref()
                        .and_then(|s| s.app_driver(&a.id))
                        .map(|driver| driver.0)
                        .unwrap_or_default(),
                    executors: a
                        .executors
                        .values()
                        .map(|e| ExecutorStatus {
                            id: e.id.0,
                            worker: e.worker.to_string(),
                            resources: Some((&e.resources).into()),
                            state: v1::ExecutorState::from(e.state).into(),
                            pid: pid(ProcessKey::Executor(a.id.clone(), e.id)),
                            usage: usage(Some(&e.worker), ProcessKey::Executor(a.id.clone(), e.id)),
                            addresses: address_lists(state.executor_addresses(&a.id, e.id)),
                            exit_code: None,
                            resource_profile: state
                                .executor_profile(&a.id, e.id)
                                .map_or(0, |(id, _)| id),
                        })
                        .collect(),
                    ..app_status(a)
                })
                .collect(),
            driver_counts: Some(v1::DriverCounts {
                waiting: count(counts.waiting),
                running: count(counts.running),
                ended: count(counts.ended),
            }),
            drivers_next: drivers_next.map(|id| id.0).unwrap_or_default(),
            drivers: listed
                .into_iter()
                .map(|d| DriverStatus {
                    id: d.id.0.clone(),
                    name: d.desc.name.clone(),
                    queue: d.desc.queue.to_string(),
                    state: v1::DriverState::from(d.state).into(),
                    worker: d
                        .worker
                        .as_ref()
                        .map(ToString::to_string)
                        .unwrap_or_default(),
                    pid: pid(ProcessKey::Driver(d.id.clone())),
                    usage: usage(d.worker.as_ref(), ProcessKey::Driver(d.id.clone())),
                    restarts: restarts(ProcessKey::Driver(d.id.clone())),
                    resources: Some((&d.desc.resources).into()),
                    priority: state.driver_priority(&d.id),
                    program: program(&d.desc.command, &d.desc.args),
                    submitted_at_ms: d.submitted_at.0,
                    ended_at_ms: d.ended_at.map_or(0, |at| at.0),
                    relaunched_as: state
                        .relaunched_as(&d.id)
                        .map(ToString::to_string)
                        .unwrap_or_default(),
                    addresses: address_lists(state.driver_addresses(&d.id)),
                    exit_code: d.exit_code,
                    waiting: if d.state == DriverState::Submitted {
                        waiting(&WorkId::Driver(d.id.clone()))
                    } else {
                        String::new()
                    },
                    gang_timed_out: state
                        .timed_out_gang(&WorkId::Driver(d.id.clone()))
                        .map(ToString::to_string)
                        .unwrap_or_default(),
                    user: state
                        .driver_owner(&d.id)
                        .map(|o| o.user.clone())
                        .unwrap_or_default(),
                })
                .collect(),
            queues: state
                .queues_in_force()
                .iter()
                .map(v1::Queue::from)
                .collect(),
            users: state
                .users()
                .iter()
                .map(|(name, user)| v1::User {
                    name: name.clone(),
                    admin: user.admin,
                    revoked: user.revoked,
                    generation: user.generation,
                })
                .collect(),
            kept: state
                .reservations()
                .iter()
                .map(v1::KeptRoom::from)
                .chain(
                    session
                        .iter()
                        .flat_map(|s| s.reserved())
                        .map(|room| v1::KeptRoom {
                            owner: room.app.to_string(),
                            worker: room.worker.to_string(),
                            resources: Some((&room.resources).into()),
                            until_ms: 0,
                        }),
                )
                .collect(),
        }
    }
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    async fn status(
        &self,
        request: Request<StatusRequest>,
    ) -> Result<tonic::Response<StatusReply>, Status> {
        if request.get_ref().local {
            let user = request.extensions().get::<NamedUser>();
            let state = self.node.local_state();
            let state = state.read().expect("state lock");
            admit(&state, user, false)?;
            let page = request.get_ref().drivers.as_ref();
            return Ok(tonic::Response::new(self.status_reply(&state, page)));
        }
        self.answer(
            request,
            async |this, user, body| {
                let reply = this.node.read(|state| {
                    admit(state, user, false)?;
                    Ok::<_, CallError>(this.status_reply(state, body.drivers.as_ref()))
                });
                reply.await?
            },
            async |mut leader, request| leader.status(request).await,
        )
        .await
    }

    async fn submit_driver(
        &self,
        request: Request<SubmitDriverRequest>,
    ) -> Result<tonic::Response<SubmitDriverReply>, Status> {
        self.answer(
            request,
            async |this, user, mut body| {
                let request_id = std::mem::take(&mut body.request_id);
                if body.priority != 0 {
                    this.node.admits(LogFormat::FOURTH)?;
                }
                // A format raised since this master applied it only admits more.
                let format = this
                    .node
                    .local_state()
                    .read()
                    .expect("state lock")
                    .log_format();
                let op = submit_driver_op(body, format);
                let response = this.write(client_command(&request_id, user, op)).await?;
                match response.outcome {
                    Outcome::DriverSubmitted { id } => {
                        tracing::info!(driver = %id, "driver submitted");
                        Ok(SubmitDriverReply { driver_id: id.0 })
                    }
                    other => Err(CallError::Internal(format!("unexpected outcome {other:?}"))),
                }
            },
            async |mut leader, request| leader.submit_driver(request).await,
        )
        .await
    }

    async fn kill(
        &self,
        request: Request<KillRequest>,
    ) -> Result<tonic::Response<KillReply>, Status> {
        self.answer(
            request,
            async |this, user, body| {
                let op = kill_op(&body)?;
                this.write(client_command(&body.request_id, user, op))
                    .await?;
                tracing::info!(id = %body.id, "killed on request");
                Ok(KillReply {})
            },
            async |mut leader, request| leader.kill(request).await,
        )
        .await
    }

    async fn set_priority(
        &self,
        request: Request<SetPriorityRequest>,
    ) -> Result<tonic::Response<SetPriorityReply>, Status> {
        self.answer(
            request,
            async |this, user, body| {
                let op = priority_op(&body.app_id, body.priority)?;
                let response = this
                    .write(client_command(&body.request_id, user, op))
                    .await?;
                let Outcome::Prioritized { priority } = response.outcome else {
                    return Err(CallError::Internal(format!(
                        "unexpected outcome {:?}",
                        response.outcome
                    )));
                };
                tracing::info!(app = %body.app_id, priority, "priority set on request");
                Ok(SetPriorityReply { priority })
            },
            async |mut leader, request| leader.set_priority(request).await,
        )
        .await
    }

    async fn drain_worker(
        &self,
        request: Request<DrainWorkerRequest>,
    ) -> Result<tonic::Response<DrainWorkerReply>, Status> {
        self.answer(
            request,
            async |this, user, body| {
                let op = drain_op(&body)?;
                this.write(client_command(&body.request_id, user, op))
                    .await?;
                if let Some(session) = this.sessions.current() {
                    session.step(Event::WorkerDrained {
                        worker: body.worker_id.as_str().into(),
                        kill_after: body.kill_after_ms.map(Duration::from_millis),
                    });
                }
                Ok(DrainWorkerReply {})
            },
            async |mut leader, request| leader.drain_worker(request).await,
        )
        .await
    }

    async fn change_members(
        &self,
        request: Request<ChangeMembersRequest>,
    ) -> Result<tonic::Response<ChangeMembersReply>, Status> {
        self.answer(
            request,
            async |this, user, body| {
                // Only the leader's view of the membership counts: a follower's may lag.
                this.node.read(|state| admit(state, user, true)).await??;
                let mut reply = ChangeMembersReply::default();
                match body.change {
                    Some(Change::Add(member)) => {
                        if member.id == 0 || member.addr.is_empty() {
                            return Err(ApplyError::Invalid {
                                field: "add".to_owned(),
                                message: "a new member needs an id of at least 1 and an address"
                                    .to_owned(),
                            }
                            .into());
                        }
                        this.node.add_learner(member.id, &member.addr).await?;
                        this.node.add_voter(member.id).await?;
                    }
                    Some(Change::Remove(id)) => {
                        let membership = this.node.metrics().borrow().membership_config.clone();
                        let membership = membership.membership();
                        if membership.get_node(&id).is_none() {
                            let message = format!("no member {id}");
                            return Err(ApplyError::Conflict(message).into());
                        }
                        if membership.voter_ids().eq([id]) {
                            let message = "the last voting member cannot leave".to_owned();
                            return Err(ApplyError::Conflict(message).into());
                        }
                        this.node.remove_member(id).await?;
                    }
                    Some(Change::TransferLeader(id)) => {
                        let membership = this.node.metrics().borrow().membership_config.clone();
                        if !membership.membership().voter_ids().any(|v| v == id) {
                            let message = format!("master {id} is not a voting member");
                            return Err(ApplyError::Conflict(message).into());
                        }
                        // A transfer that could not be made is not worth retrying at once:
                        // the lead stays, and the reason is the operator's to read.
                        match this.node.transfer_leadership(id).await {
                            Ok(()) => tracing::info!(to = id, "the lead was handed over"),
                            Err(WriteError::Unavailable(reason)) => {
                                return Err(ApplyError::Conflict(reason).into());
                            }
                            Err(error) => return Err(error.into()),
                        }
                    }
                    Some(Change::RaiseLogFormat(_)) => {
                        let (from, to) = this
                            .node
                            .raise_log_format()
                            .await?
                            .map_err(ApplyError::Conflict)?;
                        reply.log_format_from = from.0;
                        reply.log_format_to = to.0;
                    }
                    None => {
                        return Err(ApplyError::Invalid {
                            field: "change".to_owned(),
                            message: "no change given".to_owned(),
                        }
                        .into());
                    }
                }
                Ok(reply)
            },
            async |mut leader, request| leader.change_members(request).await,
        )
        .await
    }

    async fn save_snapshot(
        &self,
        request: Request<SaveSnapshotRequest>,
    ) -> Result<tonic::Response<SaveSnapshotReply>, Status> {
        self.answer(
            request,
            async |this, user, _| {
                let snapshot = this.node.read(|state| {
                    admit(state, user, true)?;
                    Ok::<_, CallError>(state.encode_snapshot())
                });
                let snapshot = snapshot.await??;
                Ok(SaveSnapshotReply { snapshot })
            },
            async |leader, request| {
                leader
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .save_snapshot(request)
                    .await
            },
        )
        .await
    }

    async fn read_log(
        &self,
        request: Request<ReadLogRequest>,
    ) -> Result<tonic::Response<ReadLogReply>, Status> {
        self.answer(
            request,
            async |this, user, body| {
                let Some(session) = this.sessions.current() else {
                    return Err(CallError::not_leader(&this.node));
                };
                let LogRead { worker, live, read } = {
                    let state = this.node.local_state();
                    let state = state.read().expect("state lock");
                    admit(&state, user, false)?;
                    may_act_on(&state, user, "read the output of", &body.id)?;
                    log_read(&state, &body)?
                };
                // A driver never placed has written nothing (and will, while it waits).
                let Some(worker) = worker else {
                    return Ok(ReadLogReply {
                        running: live,
                        ..ReadLogReply::default()
                    });
                };
                let chunk = session.read_log(&worker, read).await?;
                let worker_id = worker.to_string();
                if !chunk.error.is_empty() {
                    // A live process whose worker has not started it yet.
                    if live {
                        return Ok(ReadLogReply {
                            running: true,
                            worker_id,
                            ..ReadLogReply::default()
                        });
                    }
                    return Err(ApplyError::Conflict(chunk.error).into());
                }
                Ok(ReadLogReply {
                    data: chunk.data,
                    size: chunk.size,
                    running: chunk.running || live,
                    worker_id,
                })
            },
            async |leader, request| {
                leader
                    .max_decoding_message_size(MAX_REQUEST_BYTES)
                    .read_log(request)
                    .await
            },
        )
        .await
    }

    async fn set_queues(
        &self,
        request: Request<SetQueuesRequest>,
    ) -> Result<tonic::Response<SetQueuesReply>, Status> {
        self.answer(
            request,
            async |this, user, body| {
                let queues: Vec<QueueSpec> = body.queues.iter().map(QueueSpec::from).collect();
                // Queue names written now are paths of a tree; the log also takes those
                // of builds before trees, so the tree is checked here, where they are
                // written.
                check_paths(&queues).map_err(|e| CallError::Refused(e.into()))?;
                let prior = queues.iter().map(|q| (&q.name, q.prior));
                if let Some(why) = this
                    .sessions
                    .preemption()
                    .and_then(|policy| policy.never_preempts_under(prior))
                {
                    return Err(CallError::Refused(ApplyError::Invalid {
                        field: "queues".to_owned(),
                        message: format!("the masters' preemption settings need them: {why}"),
                    }));
                }
                let op = set_queues_op(queues);
                this.write(client_command(&body.request_id, user, op))
                    .await?;
                Ok(SetQueuesReply {})
            },
            async |mut leader, request| leader.set_queues(request).await,
        )
        .await
    }

    async fn add_user(
        &self,
        request: Request<AddUserRequest>,
    ) -> Result<tonic::Response<AddUserReply>, Status> {
        self.answer(
            request,
            async |this, user, body| {
                let no_secret = || {
                    let message = "this cluster has no secret: named users need one".to_owned();
                    CallError::Refused(ApplyError::Conflict(message))
                };
                if this.tokens.is_open() {
                    return Err(no_secret());
                }
                let op = Op::AddUser(AddUser {
                    name: body.name.clone(),
                    admin: body.admin,
                });
                let response = this
                    .write(client_command(&body.request_id, user, op))
                    .await?;
                // The credential the log issued, never one the request names: a retry
                // answers the same one, and a request id of another write answers none.
                let Outcome::UserAdded { name, generation } = response.outcome else {
                    let message = "this request id belongs to another write".to_owned();
                    return Err(ApplyError::Conflict(message).into());
                };
                tracing::info!(user = %name, admin = body.admin, "user added");
                let credential = this.tokens.user_credential(&name, generation);
                Ok(AddUserReply {
                    credential: credential.ok_or_else(no_secret)?,
                })
            },
            async |mut leader, request| leader.add_user(request).await,
        )
        .await
    }

    async fn revoke_user(
        &self,
        request: Request<RevokeUserRequest>,
    ) -> Result<tonic::Response<RevokeUserReply>, Status> {
        self.answer(
            request,
            async |this, user, body| {
                let op = Op::RevokeUser(RevokeUser {
                    name: body.name.clone(),
                });
                this.write(client_command(&body.request_id, user, op))
                    .await?;
                tracing::info!(user = %body.name, "user revoked");
                Ok(RevokeUserReply {})
            },
            async |mut leader, request| leader.revoke_user(request).await,
        )
        .await
    }
}
/// What a driver of `command` with `args` runs, for people: a Spark submission's main class
/// and resource (`--class` and the first argument after the options), or its program and
/// the first of its arguments, shortened. Its environment is never shown.
fn program(command: &str, args: &[String]) -> String {
    const SHOWN: usize = 200;
    if let Some(class) = args.windows(2).find(|w| w[0] == "--class").map(|w| &w[1]) {
        return format!("Spark: {class}");
    }
    let mut line = std::iter::once(command)
        .chain(args.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ");
    if line.len() > SHOWN {
        let cut = (0..=SHOWN)
            .rev()
            .find(|&i| line.is_char_boundary(i))
            .unwrap_or(0);
        line.truncate(cut);
        line.push('…');
    }
    line
}

#[cfg(test)]
mod tests {
    use super::program;

    #[test]
    fn a_driver_shows_its_main_class_or_its_program_never_all_of_a_long_one() {
        let args = |list: &[&str]| list.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
        let spark = args(&[
            "-c",
            "exec spark-submit",
            "spark-submit",
            "--class",
            "a.B",
            "x.jar",
        ]);
        assert_eq!(program("/bin/sh", &spark), "Spark: a.B");
        assert_eq!(program("/bin/sleep", &args(&["10"])), "/bin/sleep 10");
        let long = program("/bin/echo", &args(&[&"é".repeat(300)]));
        assert!(
            long.ends_with('…') && long.len() <= 200 + '…'.len_utf8(),
            "{long}"
        );
    }
}
