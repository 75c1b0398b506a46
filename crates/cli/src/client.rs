//! Talking to the masters: any reachable master answers (followers forward to the leader);
//! when one is down the next is tried, and a leader hint is followed
//! ([`muster_proto::discovery`]). Elections are waited out for a while before giving up.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use muster_proto::discovery::{LeaderFinder, leader_hint};
use muster_proto::v1::cluster_client::ClusterClient;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

/// How long a command keeps trying before it reports the masters unreachable.
const PATIENCE: Duration = Duration::from_secs(10);
/// The longest one master may take to answer one call.
const ATTEMPT: Duration = Duration::from_secs(5);

/// The masters a command may talk to.
pub struct Masters {
    addrs: Vec<String>,
}

/// A fresh id for one write, reused by its retries.
pub fn request_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("cli-{}-{nanos}", std::process::id())
}

impl Masters {
    /// Parses `host:port,host:port,...`.
    ///
    /// # Errors
    ///
    /// The list is empty.
    pub fn parse(list: &str) -> Result<Self, String> {
        let addrs: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::to_owned)
            .collect();
        if addrs.is_empty() {
            return Err(
                "no masters given: use --masters HOST:PORT,... or MUSTER_MASTERS".to_owned(),
            );
        }
        Ok(Self { addrs })
    }

    /// The addresses, in the order given.
    pub fn addrs(&self) -> &[String] {
        &self.addrs
    }

    async fn connect(addr: &str) -> Result<ClusterClient<Channel>, String> {
        let endpoint =
            Endpoint::from_shared(format!("http://{addr}")).map_err(|e| format!("{addr}: {e}"))?;
        let channel = endpoint
            .connect_timeout(Duration::from_secs(2))
            .connect()
            .await
            .map_err(|e| format!("{addr}: {e}"))?;
        Ok(ClusterClient::new(channel))
    }

    /// Calls `rpc` on the masters until one answers.
    ///
    /// # Errors
    ///
    /// The answer was an error (its message), or no master answered within the patience,
    /// listing what was tried.
    pub async fn call<T>(
        &self,
        rpc: impl AsyncFn(ClusterClient<Channel>) -> Result<tonic::Response<T>, Status>,
    ) -> Result<T, String> {
        let start = Instant::now();
        let mut tried = Vec::new();
        let mut finder = LeaderFinder::new(self.addrs.clone());
        loop {
            if start.elapsed() > PATIENCE {
                return Err(format!("no master reachable (tried {})", tried.join("; ")));
            }
            let addr = finder.next_master();
            // A frozen master accepts connections and never answers: bound each attempt. A
            // write that timed out may have been applied; its retry carries the same request
            // id and is applied once.
            let attempt = async {
                let client = Self::connect(&addr).await?;
                Ok::<_, String>(rpc(client).await)
            };
            let answer = match tokio::time::timeout(ATTEMPT, attempt).await {
                Ok(Ok(answer)) => answer,
                Ok(Err(e)) => Err(Status::unavailable(e)),
                Err(_) => Err(Status::deadline_exceeded(format!(
                    "{addr}: no answer within {ATTEMPT:?}"
                ))),
            };
            match answer {
                Ok(reply) => return Ok(reply.into_inner()),
                Err(status)
                    if matches!(
                        status.code(),
                        Code::Unavailable | Code::Cancelled | Code::DeadlineExceeded
                    ) =>
                {
                    tried.push(format!("{addr}: {}", status.message()));
                    let wait = match leader_hint(&status, &addr) {
                        Some(leader) => finder.hinted(leader),
                        None => finder.failed(),
                    };
                    tokio::time::sleep(wait).await;
                }
                Err(status) => return Err(status.message().to_owned()),
            }
        }
    }
}
