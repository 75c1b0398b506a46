//! `muster bench`: load against a running cluster, so that anyone can measure again what the
//! README reports.
//!
//! `submit` sends driver submissions through the client API from `--clients` concurrent
//! clients over `--connections` connections to the leader (one each unless fewer are asked
//! for: clients then share them, as HTTP/2 streams), and kills each driver right after it
//! is accepted, so the cluster stays empty: every submission and every kill is one committed
//! write. `etcd` puts 256-byte values into an etcd cluster the same way (connections spread
//! over its members, as etcd's own benchmark does), through the same gRPC stack, for the
//! comparison that `deploy/bench/etcd` runs. `workers` simulates worker agents
//! ([`workers`]).

mod workers;

use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use muster_proto::etcd::PutRequest;
use muster_proto::etcd::kv_client::KvClient;
use muster_proto::v1::{KillRequest, Resources, StatusRequest, SubmitDriverRequest};
use serde_json::json;
use tonic::Status;
use tonic::transport::{Channel, Endpoint};

use super::{MastersArg, runtime};
use crate::error::CliError;
use muster_proto::masters::{Client, request_id};

/// `muster bench`.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// Driver submissions and kills through the client API: writes per second and latency.
    Submit(SubmitBenchArgs),
    /// Puts of 256-byte values into etcd, measured the same way, for comparison.
    Etcd(EtcdBenchArgs),
    /// Simulated workers: registration, heartbeats, the leader's CPU and memory, failover.
    Workers(workers::WorkersBenchArgs),
}

/// How much load, and how to print what it measured.
#[derive(Args)]
pub struct Load {
    /// Concurrent clients.
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Connections the clients share, each carrying clients in turn as HTTP/2 streams;
    /// default: one per client.
    #[arg(long)]
    connections: Option<usize>,
    /// Writes in all, shared evenly among the clients.
    #[arg(long, default_value_t = 20_000)]
    requests: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// `muster bench submit`.
#[derive(Args)]
pub struct SubmitBenchArgs {
    #[command(flatten)]
    masters: MastersArg,
    #[command(flatten)]
    load: Load,
}

/// `muster bench etcd`.
#[derive(Args)]
pub struct EtcdBenchArgs {
    /// etcd's client URLs' `HOST:PORT`s, comma-separated.
    #[arg(long)]
    endpoints: String,
    #[command(flatten)]
    load: Load,
}

/// Runs a benchmark and renders what it measured.
///
/// # Errors
///
/// Bad arguments, nothing to connect to, or a write that failed.
pub fn run(command: BenchCommand) -> Result<String, CliError> {
    match command {
        BenchCommand::Submit(args) => {
            check(&args.load)?;
            let measured = runtime()?.block_on(async {
                let writers = muster_writers(&args).await?;
                drive(writers, &args.load).await
            })?;
            Ok(measured.render("muster", args.load.json))
        }
        BenchCommand::Etcd(args) => {
            check(&args.load)?;
            let measured = runtime()?.block_on(async {
                let writers = etcd_writers(&args).await?;
                drive(writers, &args.load).await
            })?;
            Ok(measured.render("etcd", args.load.json))
        }
        BenchCommand::Workers(args) => workers::run(args),
    }
}

/// Refuses a load that cannot be shared among its clients, or its clients among its
/// connections.
fn check(load: &Load) -> Result<(), CliError> {
    if load.clients == 0 || load.requests < load.clients {
        return Err(CliError::BadInput(
            "--clients must be at least 1 and at most --requests".to_owned(),
        ));
    }
    if load.connections().is_none_or(|n| n > load.clients) {
        return Err(CliError::BadInput(
            "--connections must be at least 1 and at most --clients".to_owned(),
        ));
    }
    Ok(())
}

impl Load {
    /// How many connections the clients share: `--connections`, or one per client;
    /// `None` for zero.
    fn connections(&self) -> Option<usize> {
        Some(self.connections.unwrap_or(self.clients)).filter(|&n| n > 0)
    }

    /// Which of the connections client `client` uses: each in turn.
    fn connection_of(&self, client: usize) -> usize {
        client % self.connections().expect("checked")
    }
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
                    let reply = client.submit_driver(bench_driver()).await?;
                    *submitted = Some(reply.into_inner().driver_id);
                }
                Some(id) => {
                    let request = KillRequest {
                        request_id: request_id(),
                        id,
                    };
                    match client.kill(request).await {
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
fn bench_driver() -> SubmitDriverRequest {
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
async fn muster_writers(args: &SubmitBenchArgs) -> Result<Vec<Writer>, CliError> {
    let masters = args.masters.parse()?;
    let status = masters
        .call(async |mut c| c.status(StatusRequest { local: false }).await)
        .await?;
    let leader = status
        .members
        .iter()
        .find(|m| m.id == status.leader)
        .ok_or_else(|| CliError::Unavailable("no leader is known".to_owned()))?;
    let mut connections = Vec::new();
    for _ in 0..args.load.connections().expect("checked") {
        connections.push(masters.connect(&leader.addr).await?);
    }
    Ok((0..args.load.clients)
        .map(|c| Writer::Muster {
            client: connections[args.load.connection_of(c)].clone(),
            submitted: None,
        })
        .collect())
}

/// Connections spread over etcd's members, shared by the clients; each client puts its
/// own keys.
async fn etcd_writers(args: &EtcdBenchArgs) -> Result<Vec<Writer>, CliError> {
    let endpoints: Vec<&str> = args.endpoints.split(',').map(str::trim).collect();
    let mut connections = Vec::new();
    for c in 0..args.load.connections().expect("checked") {
        let addr = endpoints[c % endpoints.len()];
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| CliError::BadInput(format!("--endpoints: `{addr}`: {e}")))?
            .connect()
            .await
            .map_err(|e| CliError::Unavailable(format!("etcd at {addr}: {e}")))?;
        connections.push(channel);
    }
    Ok((0..args.load.clients)
        .map(|c| Writer::Etcd {
            client: KvClient::new(connections[args.load.connection_of(c)].clone()),
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
async fn drive(writers: Vec<Writer>, load: &Load) -> Result<Measured, CliError> {
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
            .map_err(|e| CliError::Failed(format!("a client failed: {e}")))?;
        latencies.extend(written?);
    }
    let seconds = start.elapsed().as_secs_f64();
    latencies.sort();
    Ok(Measured {
        clients,
        connections: load.connections().expect("checked"),
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

    fn render(&self, system: &str, json: bool) -> String {
        let writes = self.latencies.len();
        let rate = writes as f64 / self.seconds;
        let (p50, p99, max) = (
            self.percentile_ms(0.5),
            self.percentile_ms(0.99),
            self.percentile_ms(1.0),
        );
        if json {
            return json!({
                "system": system,
                "clients": self.clients,
                "connections": self.connections,
                "writes": writes,
                "seconds": self.seconds,
                "writes_per_s": rate,
                "p50_ms": p50,
                "p99_ms": p99,
                "max_ms": max,
            })
            .to_string();
        }
        format!(
            "{:<8} {:>8} {:>12} {:>8} {:>9} {:>10} {:>8} {:>8} {:>8}\n\
             {system:<8} {:>8} {:>12} {writes:>8} {:>9.2} {rate:>10.0} {p50:>8.2} {p99:>8.2} \
             {max:>8.2}",
            "system",
            "clients",
            "connections",
            "writes",
            "seconds",
            "writes/s",
            "p50 ms",
            "p99 ms",
            "max ms",
            self.clients,
            self.connections,
            self.seconds,
        )
    }
}
