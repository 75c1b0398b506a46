//! The masters a client talks to, and calls to them: any reachable master answers
//! (followers forward to the leader); when one is down or a call is lost on the way the next
//! is tried, and a leader hint is followed ([`crate::discovery`]). Elections and broken links
//! are waited out for a while before giving up, but a list in which no master even listens,
//! resolves, takes a connection or speaks gRPC fails within seconds, saying which. The
//! command line, an application's link and the benchmarks all reach the masters through
//! [`Masters`].

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
/// How long it keeps trying while no master of its list could be reached for a reason that
/// waiting does not mend (nothing listens there, no such host, no answer to connecting, not
/// a master), as long as it has tried them all.
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
        let unreachable =
            |e: tonic::transport::Error| Status::unavailable(format!("{addr}: {}", unreached(&e)));
        let endpoint = self.dialer.endpoint(addr).map_err(unreachable)?;
        let channel = endpoint
            .connect_timeout(CONNECT_TIMEOUT)
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
            let none_listening =
                tried.len() == self.addrs.len() && tried.iter().all(|(_, reason)| hopeless(reason));
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
            // Something else answered there: a web server, the status pages' port.
            let answer = answer.map_err(|status| match not_a_master(&status) {
                Some(reason) => Status::unavailable(format!("{addr}: {reason}")),
                None => status,
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

/// How long connecting to one master may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a master that refused the connection was not reached.
const NOTHING_LISTENS: &str = "connection refused: no master listens there";
/// Why a master whose host took no connection at all was not reached.
const NO_ANSWER: &str =
    "no answer to connecting within 2 s: the host is down or a firewall drops the connection";
/// Why a master whose host name does not resolve was not reached.
const NO_SUCH_HOST: &str = "no such host";
/// Why a server that answered was not taken for a master.
const NOT_A_MASTER: &str = "not a Muster master";

/// What to give instead of a server that is no master.
const GIVE_THE_GRPC_ADDRESS: &str =
    "give a master's gRPC address (its --listen), not its status pages' (--http)";

/// `error` and the causes under it, outermost first.
fn causes<'e>(
    error: &'e (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'e (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(error), |error| error.source())
}

/// Why connecting failed, in words.
fn unreached(error: &tonic::transport::Error) -> String {
    let mut dns = false;
    for cause in causes(error) {
        match cause
            .downcast_ref::<std::io::Error>()
            .map(std::io::Error::kind)
        {
            Some(std::io::ErrorKind::ConnectionRefused) => return NOTHING_LISTENS.to_owned(),
            Some(std::io::ErrorKind::TimedOut) => return NO_ANSWER.to_owned(),
            _ => {}
        }
        let said = cause.to_string();
        if said.contains("HTTP/2 was not negotiated") {
            return format!(
                "{NOT_A_MASTER}: a TLS server answered that does not speak gRPC; \
                 {GIVE_THE_GRPC_ADDRESS}"
            );
        }
        dns |= said == "dns error";
        if dns && cause.source().is_none() {
            return format!("{NO_SUCH_HOST}: the name does not resolve ({said})");
        }
    }
    // Each cause once: wrappers often repeat what they wrap.
    let mut said: Vec<String> = Vec::new();
    for cause in causes(error) {
        let cause = cause.to_string();
        if !said.contains(&cause) {
            said.push(cause);
        }
    }
    said.join(": ")
}

/// Why the server that gave `status` is no master, when a server that does not speak gRPC
/// answered (an HTTP status with no gRPC status).
fn not_a_master(status: &Status) -> Option<String> {
    let http = status
        .message()
        .strip_prefix("grpc-status header missing, mapped from HTTP status code ")?;
    Some(format!(
        "{NOT_A_MASTER}: an HTTP server answered (status {http}); {GIVE_THE_GRPC_ADDRESS}"
    ))
}

/// Whether a master was not reached for a reason that waiting does not mend.
fn hopeless(reason: &str) -> bool {
    reason == NOTHING_LISTENS
        || reason == NO_ANSWER
        || reason.starts_with(NO_SUCH_HOST)
        || reason.starts_with(NOT_A_MASTER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_http_server_is_no_master_and_not_worth_waiting_for() {
        let answered =
            Status::unimplemented("grpc-status header missing, mapped from HTTP status code 404");
        let reason = not_a_master(&answered).unwrap();
        assert_eq!(
            reason,
            "not a Muster master: an HTTP server answered (status 404); give a master's gRPC \
             address (its --listen), not its status pages' (--http)"
        );
        assert!(hopeless(&reason));
        assert_eq!(not_a_master(&Status::unimplemented("no such method")), None);
        // A master without a leader is worth waiting for.
        assert!(!hopeless("not the leader, and no leader is known"));
    }
}
