//! `muster bench`: load against a running cluster, so that anyone can measure again what the
//! README reports.
//!
//! `submit` sends driver submissions through the client API from `--clients` concurrent
//! clients, each on its own connection to the leader, and kills each driver right after it
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
use crate::client::{Client, request_id};
use crate::error::CliError;

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
    /// Concurrent clients, each with its own connection.
    #[arg(long, default_value_t = 64)]
    clients: usize,
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
                drive(writers, args.load.requests / args.load.clients).await
            })?;
            Ok(measured.render("muster", args.load.json))
        }
        BenchCommand::Etcd(args) => {
            check(&args.load)?;
            let measured = runtime()?.block_on(async {
                let writers = etcd_writers(&args).await?;
                drive(writers, args.load.requests / args.load.clients).await
            })?;
            Ok(measured.render("etcd", args.load.json))
        }
        BenchCommand::Workers(args) => workers::run(args),
    }
}

/// Refuses a load that cannot be shared among its clients.
fn check(load: &Load) -> Result<(), CliError> {
    if load.clients == 0 || load.requests < load.clients {
        return Err(CliError::BadInput(
            "--clients must be at least 1 and at most --requests".to_owned(),
        ));
    }
    Ok(())
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

/// One connection to the leader per client.
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
    let mut writers = Vec::with_capacity(args.load.clients);
    for _ in 0..args.load.clients {
        let client = masters.connect(&leader.addr).await?;
        writers.push(Writer::Muster {
            client,
            submitted: None,
        });
    }
    Ok(writers)
}

/// Connections spread over etcd's members; each client puts its own keys.
async fn etcd_writers(args: &EtcdBenchArgs) -> Result<Vec<Writer>, CliError> {
    let endpoints: Vec<&str> = args.endpoints.split(',').map(str::trim).collect();
    let mut writers = Vec::with_capacity(args.load.clients);
    for c in 0..args.load.clients {
        let addr = endpoints[c % endpoints.len()];
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| CliError::BadInput(format!("--endpoints: `{addr}`: {e}")))?
            .connect()
            .await
            .map_err(|e| CliError::Unavailable(format!("etcd at {addr}: {e}")))?;
        writers.push(Writer::Etcd {
            client: KvClient::new(channel),
            key: (c as u64) << 40,
        });
    }
    Ok(writers)
}

/// What one run measured.
struct Measured {
    clients: usize,
    seconds: f64,
    /// Each write's latency, sorted.
    latencies: Vec<Duration>,
}

/// Has every writer make `each` writes, all at once; their latencies.
async fn drive(writers: Vec<Writer>, each: usize) -> Result<Measured, CliError> {
    let clients = writers.len();
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
            "{:<8} {:>8} {:>8} {:>9} {:>10} {:>8} {:>8} {:>8}\n\
             {system:<8} {:>8} {writes:>8} {:>9.2} {rate:>10.0} {p50:>8.2} {p99:>8.2} {max:>8.2}",
            "system",
            "clients",
            "writes",
            "seconds",
            "writes/s",
            "p50 ms",
            "p99 ms",
            "max ms",
            self.clients,
            self.seconds,
        )
    }
}
