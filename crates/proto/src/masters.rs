//! The masters a client talks to, and calls to them: any reachable master answers
//! (followers forward to the leader); when one is down or a call is lost on the way the next
//! is tried, and a leader hint is followed ([`crate::discovery`]). Elections and broken links
//! are waited out for a while before giving up, but a list in which no master even listens
//! fails within 2 s. The command line, an application's link and the benchmarks all reach the
//! masters through [`Masters`].

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tonic::Status;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::auth::{Credential, random_hex};
use crate::discovery::{LeaderFinder, busy_wait, leader_hint, retry_after, worth_retrying};
use crate::transport::Dialer;
use crate::v1::cluster_client::ClusterClient;

/// How long a command keeps trying before it reports the masters unreachable.
const PATIENCE: Duration = Duration::from_secs(10);
/// How long it keeps trying while no master of its list has so much as taken a connection
/// (each refused it: nothing listens there), as long as it has tried them all.
const PATIENCE_WITH_NONE_LISTENING: Duration = Duration::from_secs(2);
/// How long it keeps trying while the leader answers that it is busy (backpressure): a
/// client slows down under load rather than fail.
pub const PATIENCE_WITH_A_BUSY_LEADER: Duration = Duration::from_secs(60);
/// The longest one master may take to answer one call.
const ATTEMPT: Duration = Duration::from_secs(5);

/// The masters a client may talk to.
#[derive(Clone, Debug)]
pub struct Masters {
    addrs: Vec<String>,
    credential: Credential,
    dialer: Dialer,
}

/// Why a list of masters was refused.
#[derive(Debug, thiserror::Error)]
pub enum MastersError {
    /// It names no master.
    #[error("no masters given")]
    Empty,
    /// This entry is not `HOST:PORT`.
    #[error("`{0}` is not HOST:PORT")]
    NotHostPort(String),
}

/// A client of one master, adding the caller's credential to every call.
pub type Client = ClusterClient<InterceptedService<Channel, Credential>>;

/// A fresh id for one write, reused by its retries.
/// It is random: a request id that another client could guess would let it read this
/// write's result (an application's id, and so its token) by replaying it.
pub fn request_id() -> String {
    match random_hex(16) {
        Ok(random) => format!("req-{random}"),
        // Unique still, if guessable: better than no deduplication of retries.
        Err(_) => {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            format!("req-{}-{nanos}", std::process::id())
        }
    }
}

impl Masters {
    /// Parses `host:port,host:port,...`; every call will carry `credential` and connect
    /// through `dialer`.
    ///
    /// # Errors
    ///
    /// The list is empty, or an address is not `HOST:PORT`.
    pub fn parse(list: &str, credential: Credential, dialer: Dialer) -> Result<Self, MastersError> {
        let addrs: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::to_owned)
            .collect();
        if addrs.is_empty() {
            return Err(MastersError::Empty);
        }
        if let Some(bad) = addrs.iter().find(|addr| dialer.endpoint(addr).is_err()) {
            return Err(MastersError::NotHostPort(bad.clone()));
        }
        Ok(Self {
            addrs,
            credential,
            dialer,
        })
    }

    /// The addresses, in the order given.
    pub fn addrs(&self) -> &[String] {
        &self.addrs
    }

    /// The credential every call carries.
    pub fn credential(&self) -> &Credential {
        &self.credential
    }

    /// How every connection is made.
    pub fn dialer(&self) -> &Dialer {
        &self.dialer
    }

    /// A client of the master at `addr`, with the credential and connection of all calls.
    ///
    /// # Errors
    ///
    /// It cannot be reached.
    pub async fn connect(&self, addr: &str) -> Result<Client, Status> {
        let unreachable = |e: tonic::transport::Error| {
            let reason = if refused(&e) {
                NOTHING_LISTENS.to_owned()
            } else {
                e.to_string()
            };
            Status::unavailable(format!("{addr}: {reason}"))
        };
        let endpoint = self.dialer.endpoint(addr).map_err(unreachable)?;
        let channel = endpoint
            .connect_timeout(Duration::from_secs(2))
            .connect()
            .await
            .map_err(unreachable)?;
        Ok(
            ClusterClient::with_interceptor(channel, self.credential.clone())
                .max_decoding_message_size(muster_core::limits::MAX_REPLY_BYTES),
        )
    }

    /// Calls `rpc` on the masters until one answers; a busy leader is asked again after the
    /// wait it asks for, for up to a minute.
    ///
    /// # Errors
    ///
    /// The answer was an error; no master answered within the patience (`UNAVAILABLE`,
    /// listing what was tried); or the masters speak TLS to a plain client
    /// (`INVALID_ARGUMENT`, saying so).
    pub async fn call<T>(
        &self,
        rpc: impl AsyncFn(Client) -> Result<tonic::Response<T>, Status>,
    ) -> Result<T, Status> {
        let start = Instant::now();
        // The last reason each master gave.
        let mut tried: Vec<(String, String)> = Vec::new();
        let mut finder = LeaderFinder::new(self.addrs.clone());
        // Whether the last answer was a busy leader's.
        let mut busy = false;
        loop {
            let none_listening = tried.len() == self.addrs.len()
                && tried.iter().all(|(_, reason)| reason == NOTHING_LISTENS);
            let patience = if busy {
                PATIENCE_WITH_A_BUSY_LEADER
            } else if none_listening {
                PATIENCE_WITH_NONE_LISTENING
            } else {
                PATIENCE
            };
            if start.elapsed() > patience {
                let reasons: Vec<String> = tried
                    .iter()
                    .map(|(addr, reason)| format!("{addr}: {reason}"))
                    .collect();
                return Err(Status::unavailable(format!(
                    "no master reachable (tried {})",
                    reasons.join("; ")
                )));
            }
            let addr = finder.next_master();
            // A frozen master accepts connections and never answers: bound each attempt. A
            // write that timed out may have been applied; its retry carries the same request
            // id and is applied once.
            let attempt = async { rpc(self.connect(&addr).await?).await };
            let answer = tokio::time::timeout(ATTEMPT, attempt)
                .await
                .unwrap_or_else(|_| {
                    Err(Status::deadline_exceeded(format!(
                        "{addr}: no answer within {ATTEMPT:?}"
                    )))
                });
            match answer {
                Ok(reply) => return Ok(reply.into_inner()),
                Err(status) if let Some(hint) = self.dialer.mismatch(&status, &addr) => {
                    return Err(Status::invalid_argument(hint));
                }
                Err(status) if worth_retrying(&status) => {
                    busy = retry_after(&status).is_some();
                    let reason = status.message();
                    let reason = reason
                        .strip_prefix(&format!("{addr}: "))
                        .unwrap_or(reason)
                        .to_owned();
                    match tried.iter_mut().find(|(tried, _)| *tried == addr) {
                        Some((_, last)) => *last = reason,
                        None => tried.push((addr.clone(), reason)),
                    }
                    let wait = if let Some(hint) = retry_after(&status) {
                        finder.busy(&addr, hint)
                    } else if let Some(leader) = leader_hint(&status, &addr) {
                        finder.hinted(leader)
                    } else {
                        finder.failed()
                    };
                    tokio::time::sleep(wait).await;
                }
                Err(status) => return Err(status),
            }
        }
    }
}

/// Makes `call` again, after the wait each refusal asks for ([`busy_wait`]), for as long as
/// the master answers that it is busy and the wait would end within `patience`: its last
/// answer, and how many busy refusals came before it.
pub async fn while_busy<T, F: Future<Output = Result<T, Status>>>(
    patience: Duration,
    call: impl Fn() -> F,
) -> (Result<T, Status>, u64) {
    let start = Instant::now();
    let mut refusals = 0;
    loop {
        match call().await {
            Err(status)
                if let Some(hint) = retry_after(&status)
                    && start.elapsed() + hint < patience =>
            {
                refusals += 1;
                tokio::time::sleep(busy_wait(hint)).await;
            }
            answer => return (answer, refusals),
        }
    }
}

/// Why a master that refused the connection was not reached.
const NOTHING_LISTENS: &str = "connection refused: no master listens there";

/// Whether connecting failed because the connection was refused.
fn refused(error: &tonic::transport::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = source {
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        source = error.source();
    }
    false
}
