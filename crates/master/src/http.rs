//! The master's HTTP endpoint, for people and scripts without the CLI (Spark's master UI):
//! `/json` is the cluster status exactly as `muster status --json` prints it, and `/` with
//! `/app/ID`, `/driver/ID` and `/worker/ID` the pages of the same ([`crate::ui`]). Both ask
//! the master's own client API, so any master shows the leader's view. `/metrics` is this
//! replica's own Prometheus metrics ([`crate::metrics`]). A master
//! with a TLS certificate serves it over HTTPS only.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, Json};
use axum::routing::get;
use muster_proto::auth::Credential;
use muster_proto::v1::StatusRequest;
use muster_proto::v1::cluster_client::ClusterClient;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tonic::Request;
use tonic::transport::Channel;

use crate::history::{self, QueueHistory};
use crate::listener::{Connections, Serving};
use crate::metrics::Metrics;
use crate::session::Sessions;
use crate::ui;
use crate::view::StatusView;
use muster_raft::RaftNode;

/// This master's own client API, the credential to call it with, and what the queues held
/// as sampled through it.
#[derive(Clone)]
struct Grpc {
    channel: Channel,
    credential: Credential,
    history: Arc<Mutex<QueueHistory>>,
}

/// What `/metrics` reads: this replica's node, its leader sessions and its metrics.
#[derive(Clone)]
pub(crate) struct Replica {
    pub(crate) node: Arc<RaftNode>,
    pub(crate) sessions: Arc<Sessions>,
    pub(crate) metrics: Arc<Metrics>,
}

/// Serves the endpoint on `listener` (over TLS with `https`) until `shutdown` resolves;
/// `grpc` is this master's own client API ([`crate::call::own_api`]), called with
/// `credential`.
pub(crate) async fn serve(
    listener: TcpListener,
    https: Option<TlsAcceptor>,
    grpc: Channel,
    credential: Credential,
    replica: Replica,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let grpc = Grpc {
        channel: grpc,
        credential,
        history: Arc::default(),
    };
    let sampler = tokio::spawn(sample(grpc.clone()));
    let app = Router::new()
        .route("/json", get(json))
        .route("/", get(page))
        .route("/app/{id}", get(app_page))
        .route("/driver/{id}", get(driver_page))
        .route("/worker/{id}", get(worker_page))
        .with_state(grpc)
        .route("/metrics", get(metrics).with_state(replica));
    let serving = https.map_or(Serving::Plain, Serving::Tls);
    let served = axum::serve(Connections::start(listener, serving)?, app)
        .with_graceful_shutdown(shutdown)
        .await;
    sampler.abort();
    served
}

/// Records what the queues hold every [`history::SAMPLE_EVERY_MS`], for the overview's
/// charts; a status that cannot be had (no leader) is a gap.
async fn sample(grpc: Grpc) {
    let mut every = tokio::time::interval(Duration::from_millis(history::SAMPLE_EVERY_MS));
    loop {
        every.tick().await;
        if let Ok(status) = status(&grpc).await {
            let mut history = grpc.history.lock().expect("history lock");
            history.record(now_ms(), &status);
        }
    }
}

/// The wall clock in Unix milliseconds.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, muster_core::ids::millis)
}

type Failure = (StatusCode, String);

async fn status(grpc: &Grpc) -> Result<StatusView, Failure> {
    let unavailable = |e: String| (StatusCode::SERVICE_UNAVAILABLE, e);
    let mut client = ClusterClient::new(grpc.channel.clone());
    let mut request = Request::new(StatusRequest { local: false });
    grpc.credential.attach(request.metadata_mut());
    let reply = client
        .status(request)
        .await
        .map_err(|s| unavailable(s.message().to_owned()))?;
    Ok(StatusView::of(&reply.into_inner()))
}

/// The Prometheus text exposition of this replica's metrics.
async fn metrics(State(replica): State<Replica>) -> impl axum::response::IntoResponse {
    let text = replica.metrics.render(&replica.node, &replica.sessions);
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
}

async fn json(State(grpc): State<Grpc>) -> Result<Json<Value>, Failure> {
    status(&grpc).await.map(|view| Json(view.to_json()))
}

async fn page(State(grpc): State<Grpc>) -> Result<Html<String>, Failure> {
    let status = status(&grpc).await?;
    let charts = grpc.history.lock().expect("history lock").charts(now_ms());
    Ok(Html(ui::overview(&status, charts).into_string()))
}

async fn app_page(
    State(grpc): State<Grpc>,
    Path(id): Path<String>,
) -> Result<Html<String>, Failure> {
    let status = status(&grpc).await?;
    ui::app(&status, &id)
        .map(|page| Html(page.into_string()))
        .ok_or((StatusCode::NOT_FOUND, format!("no application {id}")))
}

async fn worker_page(
    State(grpc): State<Grpc>,
    Path(id): Path<String>,
) -> Result<Html<String>, Failure> {
    let status = status(&grpc).await?;
    ui::worker(&status, &id)
        .map(|page| Html(page.into_string()))
        .ok_or((StatusCode::NOT_FOUND, format!("no worker {id}")))
}

async fn driver_page(
    State(grpc): State<Grpc>,
    Path(id): Path<String>,
) -> Result<Html<String>, Failure> {
    let status = status(&grpc).await?;
    ui::driver(&status, &id)
        .map(|page| Html(page.into_string()))
        .ok_or((StatusCode::NOT_FOUND, format!("no driver {id}")))
}
