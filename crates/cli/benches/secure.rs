//! Benchmark `secure`: what authentication and TLS cost on the commit path. Three real
//! masters, once plain (no secret, no TLS) and once with the secret and TLS, take driver
//! submissions through the client API from 1 and from 64 concurrent clients (each its own
//! connection); every submission is one committed write. Rounds alternate the two modes
//! so both see the same noise; the summary is the median of each and their ratio.
//!
//! Run with `cargo bench -p muster-cli --bench secure` (`MUSTER_BENCH_ROUNDS`, default 3;
//! `MUSTER_BENCH_REQUESTS`, default 2000 per measurement).

use std::time::{Duration, Instant};

use muster_proto::auth::{Credential, Role};
use muster_proto::transport::Dialer;
use muster_proto::v1::cluster_client::ClusterClient;
use muster_proto::v1::{Resources, StatusRequest, SubmitDriverRequest};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

// The cluster the end-to-end tests start: masters as child processes, stopped when dropped.
#[allow(dead_code)]
#[path = "../../../tests/support.rs"]
mod support;

use support::Masters;

const CLIENTS: [usize; 2] = [1, 64];
const DEADLINE: Duration = Duration::from_secs(60);

/// How a mode's clients connect and authenticate.
#[derive(Clone)]
struct Mode {
    name: &'static str,
    dialer: Dialer,
    credential: Credential,
}

type Client = ClusterClient<InterceptedService<Channel, Credential>>;

async fn connect(mode: &Mode, addr: &str) -> Result<Client, tonic::transport::Error> {
    let channel = mode.dialer.endpoint(addr)?.connect().await?;
    Ok(ClusterClient::with_interceptor(
        channel,
        mode.credential.clone(),
    ))
}

/// The leader's address, once there is one.
async fn leader(mode: &Mode, masters: &Masters) -> String {
    let start = Instant::now();
    loop {
        for addr in &masters.addrs {
            let Ok(mut client) = connect(mode, addr).await else {
                continue;
            };
            if let Ok(reply) = client
                .status(StatusRequest {
                    local: true,
                    ..StatusRequest::default()
                })
                .await
            {
                let reply = reply.into_inner();
                if reply.leader != 0 {
                    return masters.addrs[reply.leader as usize - 1].clone();
                }
            }
        }
        assert!(start.elapsed() < DEADLINE, "no leader");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Submissions per second from `clients` concurrent clients, `requests` in all.
async fn submissions_per_second(mode: &Mode, addr: &str, clients: usize, requests: usize) -> f64 {
    let mut tasks = Vec::new();
    let mut connected = Vec::new();
    for _ in 0..clients {
        connected.push(connect(mode, addr).await.expect("the leader answers"));
    }
    let start = Instant::now();
    for (c, mut client) in connected.into_iter().enumerate() {
        let each = requests / clients;
        tasks.push(tokio::spawn(async move {
            for i in 0..each {
                let request = SubmitDriverRequest {
                    request_id: format!("bench-{c}-{i}-{:?}", Instant::now()),
                    command: "/bin/true".into(),
                    resources: Some(Resources {
                        cores: 1,
                        memory_mb: 1,
                        ..Default::default()
                    }),
                    ..Default::default()
                };
                client.submit_driver(request).await.expect("accepted");
            }
            each
        }));
    }
    let mut done = 0;
    for task in tasks {
        done += task.await.expect("a client");
    }
    done as f64 / start.elapsed().as_secs_f64()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let rounds: usize = std::env::var("MUSTER_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let requests: usize = std::env::var("MUSTER_BENCH_REQUESTS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(2000);
    let modes = [
        Mode {
            name: "plain",
            dialer: Dialer::plain(),
            credential: Credential::none(),
        },
        Mode {
            name: "secret + TLS",
            dialer: support::dialer(),
            credential: support::credential(Role::Client),
        },
    ];
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // rates[mode][clients] over the rounds.
    let mut rates = vec![vec![Vec::new(); CLIENTS.len()]; modes.len()];
    for round in 1..=rounds {
        for (m, mode) in modes.iter().enumerate() {
            let masters = if m == 0 {
                Masters::start_plain()
            } else {
                Masters::start()
            };
            runtime.block_on(async {
                let addr = leader(mode, &masters).await;
                for (c, &clients) in CLIENTS.iter().enumerate() {
                    let rate = submissions_per_second(mode, &addr, clients, requests).await;
                    println!(
                        "round {round} {:<13} {clients:>3} clients {rate:>8.0} submissions/s",
                        mode.name
                    );
                    rates[m][c].push(rate);
                }
            });
        }
    }
    println!("\nsecure summary (median of {rounds} rounds; ratio = secure / plain)");
    println!(
        "{:>8} {:>14} {:>14} {:>7}",
        "clients", "plain /s", "secure /s", "ratio"
    );
    for (c, clients) in CLIENTS.iter().enumerate() {
        let plain = median(rates[0][c].clone());
        let secure = median(rates[1][c].clone());
        println!(
            "{clients:>8} {plain:>14.0} {secure:>14.0} {:>7.2}",
            secure / plain
        );
    }
}
