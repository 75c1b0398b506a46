//! Committed writes from concurrent clients, with each write's latency: driver submissions
//! and kills against Muster, or puts into etcd for comparison.
//!
//! [`submit`] sends driver submissions through the client API from [`Load::clients`]
//! concurrent clients over [`Load::connections`] connections to the leader (one each unless
//! fewer are asked for: clients then share them, as HTTP/2 streams), and kills each driver
//! right after it is accepted, so the cluster stays empty: every submission and every kill is
//! one committed write (a write a busy leader refused is sent again after the wait it asked
//! for, and its latency counts the wait). [`etcd`] puts 256-byte values into an etcd cluster the same way
//! (connections spread over its members, as etcd's own benchmark does), through the same gRPC
//! stack.

use std::time::{Duration, Instant};

use muster_proto::etcd::PutRequest;
use muster_proto::etcd::kv_client::KvClient;
use muster_proto::masters::{Client, Masters, PATIENCE_WITH_A_BUSY_LEADER, request_id, while_busy};
use muster_proto::v1::{KillRequest, Resources, StatusRequest, SubmitDriverRequest};
use serde::Serialize;
use tonic::Status;
use tonic::transport::{Channel, Endpoint};

use crate::BenchError;

/// How much load: the fields are `muster bench`'s options of the same names.
pub struct Load {
    /// Concurrent clients.
    pub clients: usize,
    /// Connections the clients share; `None` for one per client.
    pub connections: Option<usize>,
    /// Writes in all, shared evenly among the clients.
    pub requests: usize,
}

impl Load {
    /// Refuses a load that cannot be shared among its clients, or its clients among its
    /// connections.
    fn check(&self) -> Result<(), BenchError> {
        if self.clients == 0 || self.requests < self.clients {
            return Err(BenchError::BadInput(
                "--clients must be at least 1 and at most --requests".to_owned(),
            ));
        }
        if self.connection_count().is_none_or(|n| n > self.clients) {
            return Err(BenchError::BadInput(
                "--connections must be at least 1 and at most --clients".to_owned(),
            ));
        }
        Ok(())
    }

    /// How many connections the clients share: `connections`, or one per client; `None`
    /// for zero.
    fn connection_count(&self) -> Option<usize> {
        Some(self.connections.unwrap_or(self.clients)).filter(|&n| n > 0)
    }

    /// Which of the connections client `client` uses: each in turn.
    fn connection_of(&self, client: usize) -> usize {
        client % self.connection_count().expect("checked")
    }
}

/// Submits and kills drivers on `masters` under `load`.
///
/// # Errors
///
/// A load that cannot be shared out, no leader, or a write that failed.
pub async fn submit(masters: &Masters, load: &Load) -> Result<LoadReport, BenchError> {
    load.check()?;
    let writers = muster_writers(masters, load).await?;
    Ok(drive(writers, load).await?.report("muster"))
}

/// Puts values into the etcd cluster whose client `HOST:PORT`s are `endpoints`
/// (comma-separated) under `load`.
///
/// # Errors
///
/// A load that cannot be shared out, an endpoint that is malformed or unreachable, or a
/// write that failed.
pub async fn etcd(endpoints: &str, load: &Load) -> Result<LoadReport, BenchError> {
    load.check()?;
    let writers = etcd_writers(endpoints, load).await?;
    Ok(drive(writers, load).await?.report("etcd"))
}

/// One client's connection and what it does next.
enum Writer {
    /// Submits a driver, then kills it.
    Muster {
        client: Client,
        submitted: Option<String>,
    },
    /// Puts values.
    Etcd { client: KvClient<Channel>, key: u64 },
}

impl Writer {
    /// One write: Muster's next submission or kill, or one put into etcd.
    async fn write(&mut self) -> Result<(), Status> {
        match self {
            Self::Muster { client, submitted } => match submitted.take() {
                None => {
                    let request = bench_driver();
                    let (reply, _) = while_busy(PATIENCE_WITH_A_BUSY_LEADER, || {
                        let mut client = client.clone();
                        let request = request.clone();
                        async move { client.submit_driver(request).await }
                    })
                    .await;
                    *submitted = Some(reply?.into_inner().driver_id);
                }
                Some(id) => {
                    let request = KillRequest {
                        request_id: request_id(),
                        id,
                    };
                    let (answer, _) = while_busy(PATIENCE_WITH_A_BUSY_LEADER, || {
                        let mut client = client.clone();
                        let request = request.clone();
                        async move { client.kill(request).await }
                    })
                    .await;
                    match answer {
                        // On a cluster with workers the driver may have run and ended
                        // already: the kill was still committed, and refused when applied.
                        Err(status) if status.code() == tonic::Code::NotFound => {}
                        answer => {
                            answer?;
                        }
                    }
                }
            },
            Self::Etcd { client, key } => {
                *key += 1;
                let request = PutRequest {
                    key: format!("bench-{key:012}").into_bytes(),
                    value: vec![b'x'; 256],
                };
                client.put(request).await?;
            }
        }
        Ok(())
    }
}

/// The driver every benchmark submits: one core, 1 MB, `/bin/true`, a fresh request id.
pub(crate) fn bench_driver() -> SubmitDriverRequest {
    SubmitDriverRequest {
        request_id: request_id(),
        name: "bench".to_owned(),
        command: "/bin/true".to_owned(),
        resources: Some(Resources {
            cores: 1,
            memory_mb: 1,
            ..Resources::default()
        }),
        ..SubmitDriverRequest::default()
    }
}

/// The clients, sharing their connections to the leader.
async fn muster_writers(masters: &Masters, load: &Load) -> Result<Vec<Writer>, BenchError> {
    let status = masters
        .call(async |mut c| c.status(StatusRequest::without_drivers()).await)
        .await?;
    let leader = status
        .members
        .iter()
        .find(|m| m.id == status.leader)
        .ok_or_else(|| BenchError::Unavailable("no leader is known".to_owned()))?;
    let mut connections = Vec::new();
    for _ in 0..load.connection_count().expect("checked") {
        connections.push(masters.connect(&leader.addr).await?);
    }
    Ok((0..load.clients)
        .map(|c| Writer::Muster {
            client: connections[load.connection_of(c)].clone(),
            submitted: None,
        })
        .collect())
}

/// Connections spread over etcd's members, shared by the clients; each client puts its
/// own keys.
async fn etcd_writers(endpoints: &str, load: &Load) -> Result<Vec<Writer>, BenchError> {
    let endpoints: Vec<&str> = endpoints.split(',').map(str::trim).collect();
    let mut connections = Vec::new();
    for c in 0..load.connection_count().expect("checked") {
        let addr = endpoints[c % endpoints.len()];
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| BenchError::BadInput(format!("--endpoints: `{addr}`: {e}")))?
            .connect()
            .await
            .map_err(|e| BenchError::Unavailable(format!("etcd at {addr}: {e}")))?;
        connections.push(channel);
    }
    Ok((0..load.clients)
        .map(|c| Writer::Etcd {
            client: KvClient::new(connections[load.connection_of(c)].clone()),
            key: (c as u64) << 40,
        })
        .collect())
}

/// What one run measured.
struct Measured {
    clients: usize,
    connections: usize,
    seconds: f64,
    /// Each write's latency, sorted.
    latencies: Vec<Duration>,
}

/// Has every writer make its share of `load`'s writes, all at once; their latencies.
async fn drive(writers: Vec<Writer>, load: &Load) -> Result<Measured, BenchError> {
    let clients = writers.len();
    let each = load.requests / clients;
    let start = Instant::now();
    let tasks: Vec<_> = writers
        .into_iter()
        .map(|mut writer| {
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(each);
                for _ in 0..each {
                    let sent = Instant::now();
                    writer.write().await?;
                    latencies.push(sent.elapsed());
                }
                Ok::<_, Status>(latencies)
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(clients * each);
    for task in tasks {
        let written = task
            .await
            .map_err(|e| BenchError::Failed(format!("a client failed: {e}")))?;
        latencies.extend(written?);
    }
    let seconds = start.elapsed().as_secs_f64();
    latencies.sort();
    Ok(Measured {
        clients,
        connections: load.connection_count().expect("checked"),
        seconds,
        latencies,
    })
}

impl Measured {
    fn percentile_ms(&self, p: f64) -> f64 {
        let last = self.latencies.len() - 1;
        let at = ((last as f64) * p).round() as usize;
        self.latencies[at].as_secs_f64() * 1e3
    }

    /// What it measured, as `system`'s rates and latencies.
    fn report(&self, system: &str) -> LoadReport {
        let writes = self.latencies.len();
        LoadReport {
            system: system.to_owned(),
            clients: self.clients,
            connections: self.connections,
            writes,
            seconds: self.seconds,
            writes_per_s: writes as f64 / self.seconds,
            p50_ms: self.percentile_ms(0.5),
            p99_ms: self.percentile_ms(0.99),
            max_ms: self.percentile_ms(1.0),
        }
    }
}

/// One run's rates and latencies, as `muster bench submit --json` prints them.
#[derive(Debug, Serialize)]
pub struct LoadReport {
    /// `muster` or `etcd`.
    pub system: String,
    /// Concurrent clients.
    pub clients: usize,
    /// Connections they shared.
    pub connections: usize,
    /// Committed writes.
    pub writes: usize,
    /// How long they took, from the first to the last.
    pub seconds: f64,
    /// Writes per second.
    pub writes_per_s: f64,
    /// The median latency of a write.
    pub p50_ms: f64,
    /// The 99th percentile.
    pub p99_ms: f64,
    /// The slowest write.
    pub max_ms: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(clients: usize, connections: Option<usize>, requests: usize) -> Load {
        Load {
            clients,
            connections,
            requests,
        }
    }

    #[test]
    fn a_load_is_shared_out_or_refused() {
        for refused in [
            load(0, None, 10),
            load(11, None, 10),
            load(4, Some(0), 10),
            load(4, Some(5), 10),
        ] {
            assert!(matches!(refused.check(), Err(BenchError::BadInput(_))));
        }
        let shared = load(5, Some(2), 10);
        shared.check().unwrap();
        let connections: Vec<usize> = (0..5).map(|c| shared.connection_of(c)).collect();
        assert_eq!(connections, [0, 1, 0, 1, 0]);
        let own = load(3, None, 3);
        own.check().unwrap();
        assert_eq!(own.connection_count(), Some(3));
    }
}
