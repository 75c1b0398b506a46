//! An application's link to the masters: register it (or re-attach after a failover), follow
//! its executors, pass on dynamic-allocation requests, and finish it. Used by `muster app run`
//! and by a driver alike.
//!
//! The link heartbeats and expects every heartbeat answered; a leader silent for
//! [`LEADER_TIMEOUT`] is left for the next one found ([`muster_proto::discovery`]), and the
//! application re-attaches with its id and token, keeping its executors. A registration a
//! busy leader refuses is made again after the wait the leader names.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use muster_proto::discovery::{LeaderFinder, leader_hint, retry_after, worth_retrying};
use muster_proto::masters::Masters;
use muster_proto::v1::app_event::Body as Event;
use muster_proto::v1::app_link_client::AppLinkClient;
use muster_proto::v1::app_message::Body as Message;
use muster_proto::v1::{
    AppHeartbeat, AppMessage, ExecutorEvent, ExecutorState, FinishApp, RegisterApp,
    ReleaseExecutors, SetExecutorLimit, SetProfileLimit,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

/// How long the masters may stay unreachable before the link gives up.
const PATIENCE: Duration = Duration::from_secs(60);
/// How long the leader may leave heartbeats unanswered before the link looks for a new one
/// (below the masters' recovery timeout, so a frozen leader costs little).
pub const LEADER_TIMEOUT: Duration = Duration::from_secs(2);

/// What the link tells its owner.
#[derive(Clone, Debug, PartialEq)]
pub enum AppUpdate {
    /// The application is registered under this id.
    Registered(String),
    /// An executor as the log has it now.
    Executor(ExecutorEvent),
    /// An executor is stopped for prior work; its end follows as an [`AppUpdate::Executor`].
    Preempted {
        /// The executor.
        executor_id: u32,
        /// Its process gets SIGTERM now and SIGKILL after this.
        grace: Duration,
    },
    /// An executor's worker is drained; its end follows as an [`AppUpdate::Executor`].
    Draining {
        /// The executor.
        executor_id: u32,
        /// It is killed after this long, if at all.
        kill_after: Option<Duration>,
    },
    /// The masters refused the application's request for executors of a resource profile:
    /// none come, and it is not asked for again.
    ProfileRefused {
        /// The profile.
        profile_id: u32,
        /// Why.
        reason: String,
    },
    /// The link to the leader broke; it is being found again.
    Reconnecting(String),
}

/// Why the link ended without the application ending.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The masters refused the application.
    #[error("{}", .0.message())]
    Refused(Status),
    /// No leader answered for too long.
    #[error("{0}")]
    Unavailable(String),
}

/// Why one attachment ended.
enum Detached {
    /// The application ended in this state.
    Ended(String),
    /// Try this master next.
    LeaderAt(String),
    /// Try the next master.
    Retry(String),
    /// The leader is busy (backpressure): ask it again after this wait.
    Busy(Duration),
    /// The stream to the leader broke: find the leader again.
    Broken(String),
}

/// Runs the application's link until the application ends, and returns the state it ended
/// in (`FINISHED`, `FAILED`, `KILLED`). `requests` carries what the owner asks the master
/// (executor limits, releases, finishing); when it closes, the application is finished.
///
/// # Errors
///
/// The masters refused the application, or none could be reached for a minute.
pub async fn run(
    masters: Masters,
    mut register: RegisterApp,
    mut requests: mpsc::Receiver<Message>,
    updates: mpsc::UnboundedSender<AppUpdate>,
) -> Result<String, LinkError> {
    let mut finder = LeaderFinder::new(masters.addrs().to_vec());
    let mut unreachable_since = Instant::now();
    let mut link = Attachment {
        masters: &masters,
        register: &mut register,
        finishing: false,
        limit: None,
        profile_limits: BTreeMap::new(),
        released: BTreeSet::new(),
        live: BTreeSet::new(),
        requests: &mut requests,
        updates: &updates,
    };
    loop {
        let addr = finder.next_master();
        let waited = unreachable_since.elapsed();
        match link.attach(&addr).await? {
            Detached::Ended(state) => return Ok(state),
            Detached::LeaderAt(_) if waited > PATIENCE => {
                return Err(LinkError::Unavailable(format!(
                    "no leader reachable for {PATIENCE:?}"
                )));
            }
            Detached::Retry(reason) if waited > PATIENCE => {
                return Err(LinkError::Unavailable(format!(
                    "no leader reachable for {PATIENCE:?}: {reason}"
                )));
            }
            Detached::LeaderAt(leader) => tokio::time::sleep(finder.hinted(&leader)).await,
            // A busy leader answers: it is reachable, and asks to be asked again later.
            Detached::Busy(hint) => {
                unreachable_since = Instant::now();
                tokio::time::sleep(finder.busy(&addr, hint)).await;
            }
            Detached::Retry(_) => tokio::time::sleep(finder.failed()).await,
            // The patience counts from when the last good stream broke.
            Detached::Broken(reason) => {
                let _ = updates.send(AppUpdate::Reconnecting(reason));
                unreachable_since = Instant::now();
                finder.found();
                finder.silent(&addr);
            }
        }
    }
}

/// What attachments work with, and what carries over from one to the next.
struct Attachment<'a> {
    masters: &'a Masters,
    register: &'a mut RegisterApp,
    /// Finishing was asked for: every attachment asks again until the application ends.
    finishing: bool,
    /// The last executor limit asked for, asked again on every attachment (the stream it
    /// went on may have broken before the leader read it).
    limit: Option<SetExecutorLimit>,
    /// The last limit asked for each resource profile, asked again on every attachment, as
    /// `limit`.
    profile_limits: BTreeMap<u32, SetProfileLimit>,
    /// Executors given back and not yet seen ending, asked again on every attachment (a
    /// broken stream may have lost the request).
    released: BTreeSet<u32>,
    /// Executors seen launching or running and not yet seen ending, named on every
    /// re-attachment: the leader tells of the end of each that ended meanwhile.
    live: BTreeSet<u32>,
    requests: &'a mut mpsc::Receiver<Message>,
    updates: &'a mpsc::UnboundedSender<AppUpdate>,
}

impl Attachment<'_> {
    /// One attachment to `addr`; `register.app_id` is set once the application is
    /// registered.
    async fn attach(&mut self, addr: &str) -> Result<Detached, LinkError> {
        let retry = |e: String| Ok(Detached::Retry(e));
        let endpoint = match self.masters.dialer().endpoint(addr) {
            Ok(endpoint) => endpoint
                .connect_timeout(LEADER_TIMEOUT)
                .http2_keep_alive_interval(LEADER_TIMEOUT / 2)
                .keep_alive_timeout(LEADER_TIMEOUT),
            Err(e) => return retry(e.to_string()),
        };
        // Room for everything carried over (registration, limit, release, finish, and a
        // request per resource profile) before the stream is read, and the requests after.
        let (up, outbound) = mpsc::channel(16 + self.profile_limits.len());
        let send = |body| AppMessage { body: Some(body) };
        self.register.live_executor_ids = self.live.iter().copied().collect();
        let _ = up
            .send(send(Message::Register(self.register.clone())))
            .await;
        let released = (!self.released.is_empty()).then(|| {
            Message::Release(ReleaseExecutors {
                executor_ids: self.released.iter().copied().collect(),
            })
        });
        let carried = [
            self.limit.map(Message::SetLimit),
            released,
            self.finishing.then_some(Message::Finish(FinishApp {})),
        ];
        let profile_limits = self.profile_limits.values().cloned();
        let profile_limits = profile_limits.map(|set| Some(Message::SetProfileLimit(set)));
        for body in profile_limits.chain(carried).flatten() {
            let _ = up.send(send(body)).await;
        }
        // A frozen master accepts connections and never answers: bound the whole attempt.
        let attach = async {
            let channel = endpoint
                .connect()
                .await
                .map_err(|e| format!("{addr}: {e}"))?;
            let mut request = tonic::Request::new(ReceiverStream::new(outbound));
            self.masters.credential().attach(request.metadata_mut());
            Ok::<_, String>(AppLinkClient::new(channel).run(request).await)
        };
        let attached = match tokio::time::timeout(LEADER_TIMEOUT, attach).await {
            Err(_) => return retry(format!("{addr}: no answer to the registration")),
            Ok(Err(error)) => return retry(error),
            Ok(Ok(attached)) => attached,
        };
        let mut events = match attached {
            Ok(response) => response.into_inner(),
            Err(status) if let Some(hint) = self.masters.dialer().mismatch(&status, addr) => {
                return Err(LinkError::Refused(Status::invalid_argument(hint)));
            }
            Err(status) if let Some(hint) = retry_after(&status) => {
                return Ok(Detached::Busy(hint));
            }
            // Lost on the way (a transport error), or not the leader: never a reason to give
            // up the application while the masters may still answer.
            Err(status) if worth_retrying(&status) => {
                return match leader_hint(&status, addr) {
                    Some(leader) => Ok(Detached::LeaderAt(leader.to_owned())),
                    None => retry(format!("{addr}: {}", status.message())),
                };
            }
            Err(status) => return Err(LinkError::Refused(status)),
        };
        let mut heartbeats = tokio::time::interval(LEADER_TIMEOUT / 4);
        let mut heard = Instant::now();
        loop {
            tokio::select! {
                _ = heartbeats.tick() => {
                    if heard.elapsed() > LEADER_TIMEOUT {
                        return Ok(Detached::Broken(format!("the leader was silent for {LEADER_TIMEOUT:?}")));
                    }
                    let _ = up.send(send(Message::Heartbeat(AppHeartbeat {}))).await;
                }
                event = events.message() => match event {
                    Ok(Some(event)) => match event.body.inspect(|_| heard = Instant::now()) {
                        // The first registration names the app and proves it is ours:
                        // re-attach under this id, with this token, from now on.
                        Some(Event::Registered(registered)) if self.register.app_id.is_empty() => {
                            self.register.app_id = registered.app_id.clone();
                            self.register.app_token = registered.app_token;
                            let _ = self.updates.send(AppUpdate::Registered(registered.app_id));
                        }
                        Some(Event::Executor(executor)) => {
                            if matches!(executor.state(), ExecutorState::Launching | ExecutorState::Running) {
                                self.live.insert(executor.executor_id);
                            } else {
                                self.live.remove(&executor.executor_id);
                                self.released.remove(&executor.executor_id);
                            }
                            let _ = self.updates.send(AppUpdate::Executor(executor));
                        }
                        Some(Event::Preempted(preempted)) => {
                            let _ = self.updates.send(AppUpdate::Preempted {
                                executor_id: preempted.executor_id,
                                grace: Duration::from_millis(preempted.grace_ms),
                            });
                        }
                        Some(Event::Draining(draining)) => {
                            let _ = self.updates.send(AppUpdate::Draining {
                                executor_id: draining.executor_id,
                                kill_after: draining.kill_after_ms.map(Duration::from_millis),
                            });
                        }
                        Some(Event::ProfileRefused(refused)) => {
                            self.profile_limits.remove(&refused.profile_id);
                            let _ = self.updates.send(AppUpdate::ProfileRefused {
                                profile_id: refused.profile_id,
                                reason: refused.reason,
                            });
                        }
                        Some(Event::Ended(ended)) => {
                            return Ok(Detached::Ended(ended.state().name().to_owned()));
                        }
                        Some(Event::Registered(_) | Event::HeartbeatAck(_)) | None => {}
                    },
                    Ok(None) => return Ok(Detached::Broken("the master closed the stream".into())),
                    Err(status) => return Ok(Detached::Broken(status.message().to_owned())),
                },
                request = self.requests.recv(), if !self.finishing => {
                    let body = request.unwrap_or(Message::Finish(FinishApp {}));
                    match &body {
                        Message::Finish(_) => self.finishing = true,
                        Message::SetLimit(limit) => self.limit = Some(*limit),
                        Message::SetProfileLimit(set) => {
                            self.profile_limits.insert(set.profile_id, set.clone());
                        }
                        Message::Release(release) => self.released.extend(&release.executor_ids),
                        _ => {}
                    }
                    // Whatever it carried is asked again on the next attachment.
                    if up.send(send(body)).await.is_err() {
                        return Ok(Detached::Broken("the stream to the master broke".into()));
                    }
                }
            }
        }
    }
}
