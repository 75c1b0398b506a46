//! The master's HTTP endpoint, for people and scripts without the CLI (Spark's master UI):
//! `/json` is the cluster status exactly as `muster status --json` prints it, and `/` a plain
//! page of the same. Both ask the master's own client API, so any master shows the leader's
//! view. `/metrics` is this replica's own Prometheus metrics ([`crate::metrics`]). A master
//! with a TLS certificate serves it over HTTPS only.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{Html, Json};
use axum::routing::get;
use muster_proto::auth::Credential;
use muster_proto::transport::Dialer;
use muster_proto::v1::StatusRequest;
use muster_proto::v1::cluster_client::ClusterClient;
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tonic::Request;

use crate::metrics::Metrics;
use crate::report::status_json;
use crate::session::Sessions;
use muster_raft::RaftNode;

/// This master's own client API, and how to call it.
#[derive(Clone)]
struct Grpc {
    addr: String,
    credential: Credential,
    dialer: Dialer,
}

/// What `/metrics` reads: this replica's node, its leader sessions and its metrics.
#[derive(Clone)]
pub(crate) struct Replica {
    pub(crate) node: Arc<RaftNode>,
    pub(crate) sessions: Arc<Sessions>,
    pub(crate) metrics: Arc<Metrics>,
}

/// Serves the endpoint on `listener` (over TLS with `https`) until `shutdown` resolves;
/// `grpc` is this master's own gRPC address, called with `credential` through `dialer`.
pub(crate) async fn serve(
    listener: TcpListener,
    https: Option<TlsAcceptor>,
    grpc: String,
    credential: Credential,
    dialer: Dialer,
    replica: Replica,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/json", get(json))
        .route("/", get(page))
        .with_state(Grpc {
            addr: grpc,
            credential,
            dialer,
        })
        .route("/metrics", get(metrics).with_state(replica));
    match https {
        Some(acceptor) => {
            let listener = TlsListener { listener, acceptor };
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
        }
        None => {
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
        }
    }
}

/// How long a client may take over its TLS handshake before it is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Accepts connections and completes their TLS handshakes.
struct TlsListener {
    listener: TcpListener,
    acceptor: TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, SocketAddr) {
        loop {
            let Ok((stream, addr)) = self.listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, self.acceptor.accept(stream)).await {
                Ok(Ok(tls)) => return (tls, addr),
                Ok(Err(error)) => tracing::debug!(%addr, %error, "TLS handshake failed"),
                Err(_) => tracing::debug!(%addr, "TLS handshake timed out"),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

type Failure = (StatusCode, String);

async fn status(grpc: &Grpc) -> Result<Value, Failure> {
    let unavailable = |e: String| (StatusCode::SERVICE_UNAVAILABLE, e);
    let channel = grpc
        .dialer
        .endpoint(&grpc.addr)
        .map_err(|e| unavailable(e.to_string()))?
        .connect()
        .await
        .map_err(|e| unavailable(e.to_string()))?;
    let mut client = ClusterClient::new(channel);
    let mut request = Request::new(StatusRequest { local: false });
    grpc.credential.attach(request.metadata_mut());
    let reply = client
        .status(request)
        .await
        .map_err(|s| unavailable(s.message().to_owned()))?;
    Ok(status_json(&reply.into_inner()))
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
    status(&grpc).await.map(Json)
}

/// `text` made safe inside an HTML element or a quoted attribute.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// One HTML table of `rows` (JSON objects) with `columns`.
fn table(title: &str, rows: &Value, columns: &[&str]) -> String {
    let head: String = columns
        .iter()
        .map(|c| format!("<th>{}</th>", escape(c)))
        .collect();
    let body: String = rows
        .as_array()
        .into_iter()
        .flatten()
        .map(|row| {
            let cells: String = columns
                .iter()
                .map(|c| match &row[*c] {
                    Value::Null => "<td></td>".to_owned(),
                    Value::String(s) => format!("<td>{}</td>", escape(s)),
                    other => format!("<td>{}</td>", escape(&other.to_string())),
                })
                .collect();
            format!("<tr>{cells}</tr>")
        })
        .collect();
    format!("<h2>{title}</h2><table><tr>{head}</tr>{body}</table>")
}

async fn page(State(grpc): State<Grpc>) -> Result<Html<String>, Failure> {
    let s = status(&grpc).await?;
    let header = format!(
        "<h1>Muster</h1><p>leader {} &middot; term {} &middot; {}</p>",
        s["leader"],
        s["term"],
        escape(s["recovery_state"].as_str().unwrap_or_default())
    );
    let tables = [
        table("Masters", &s["members"], &["id", "addr", "role"]),
        table(
            "Workers",
            &s["workers"],
            &[
                "id",
                "host",
                "state",
                "cores",
                "cores_used",
                "memory_mb",
                "memory_used_mb",
            ],
        ),
        table(
            "Applications",
            &s["apps"],
            &["id", "name", "queue", "state", "cores_granted", "waiting"],
        ),
        table(
            "Drivers",
            &s["drivers"],
            &[
                "id",
                "name",
                "queue",
                "state",
                "worker",
                "pid",
                "exit_code",
                "waiting",
            ],
        ),
        table(
            "Queues",
            &s["queues"],
            &["name", "prior", "threshold", "max_capacity"],
        ),
        table(
            "Room kept for prior work (preemption)",
            &s["kept"],
            &["owner", "worker", "cores", "memory_mb", "until_ms"],
        ),
    ];
    Ok(Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Muster</title>\
         <style>body{{font-family:sans-serif}}td,th{{padding:2px 8px;text-align:left}}</style></head>\
         <body>{header}{}</body></html>",
        tables.concat()
    )))
}
