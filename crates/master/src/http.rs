//! The master's HTTP endpoint, for people and scripts without the CLI (Spark's master UI):
//! `/json` is the cluster status exactly as `muster status --json` prints it, and `/` with
//! `/app/ID`, `/driver/ID` and `/worker/ID` the pages of the same ([`crate::ui`]). Both ask
//! the master's own client API, so any master shows the leader's view. `/metrics` is this
//! replica's own Prometheus metrics ([`crate::metrics`]). A master
//! with a TLS certificate serves it over HTTPS only.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Json, Response};
use axum::routing::get;
use muster_core::limits::MAX_LOG_CHUNK_BYTES;
use muster_proto::auth::Credential;
use muster_proto::v1::cluster_client::ClusterClient;
use muster_proto::v1::{LogStream, ReadLogRequest, StatusRequest};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tonic::transport::Channel;
use tonic::{Code, Request};

use crate::callers::{Caller, Callers};
use crate::history::{self, QueueHistory};
use crate::listener::{Connections, Serving};
use crate::metrics::Metrics;
use crate::session::Sessions;
use crate::ui;
use crate::view::StatusView;
use muster_raft::RaftNode;

/// This master's own client API, the credential to call it with, whom an output page's
/// token names, and what the queues held as sampled through it.
#[derive(Clone)]
struct Grpc {
    channel: Channel,
    credential: Credential,
    callers: Callers,
    /// Whether the endpoint serves HTTPS, where its cookies are marked `Secure`.
    https: bool,
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
    callers: Callers,
    replica: Replica,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let grpc = Grpc {
        channel: grpc,
        credential,
        callers,
        https: https.is_some(),
        history: Arc::default(),
    };
    let sampler = tokio::spawn(sample(grpc.clone()));
    let app = Router::new()
        .route("/json", get(json))
        .route("/", get(page))
        .route("/app/{id}", get(app_page))
        .route("/driver/{id}", get(driver_page))
        .route("/worker/{id}", get(worker_page))
        .route("/logs/{*id}", get(output))
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
        // The queues' charts need no driver: a cluster with many is not sent them all.
        if let Ok(status) = status(&grpc, StatusRequest::without_drivers()).await {
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

/// The status `asked` (all of it, or a page of the drivers).
async fn status(grpc: &Grpc, asked: StatusRequest) -> Result<StatusView, Failure> {
    let unavailable = |e: String| (StatusCode::SERVICE_UNAVAILABLE, e);
    let mut client = ClusterClient::new(grpc.channel.clone())
        .max_decoding_message_size(muster_core::limits::MAX_REPLY_BYTES);
    let mut request = Request::new(asked);
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

/// Which drivers a status asks for: `?drivers_from=ID&drivers_limit=N` (both optional) for a
/// page of them in id order.
#[derive(serde::Deserialize)]
struct DriversQuery {
    drivers_from: Option<String>,
    drivers_limit: Option<u32>,
}

impl DriversQuery {
    /// The status request for these drivers: a page when either is given, `or` otherwise.
    fn request(&self, or: Option<u32>) -> StatusRequest {
        match (self.drivers_limit.or(or), &self.drivers_from) {
            (None, None) => StatusRequest::default(),
            (limit, from) => StatusRequest::drivers_from(
                from.as_deref().unwrap_or_default(),
                limit.unwrap_or(ui::DRIVERS_PER_PAGE),
            ),
        }
    }
}

async fn json(
    State(grpc): State<Grpc>,
    Query(drivers): Query<DriversQuery>,
) -> Result<Json<Value>, Failure> {
    status(&grpc, drivers.request(None))
        .await
        .map(|view| Json(view.to_json()))
}

async fn page(
    State(grpc): State<Grpc>,
    Query(drivers): Query<DriversQuery>,
) -> Result<Html<String>, Failure> {
    let status = status(&grpc, drivers.request(Some(ui::DRIVERS_PER_PAGE))).await?;
    let charts = grpc.history.lock().expect("history lock").charts(now_ms());
    Ok(Html(ui::overview(&status, charts).into_string()))
}

async fn app_page(
    State(grpc): State<Grpc>,
    Path(id): Path<String>,
) -> Result<Html<String>, Failure> {
    let status = status(&grpc, StatusRequest::without_drivers()).await?;
    ui::app(&status, &id)
        .map(|page| Html(page.into_string()))
        .ok_or((StatusCode::NOT_FOUND, format!("no application {id}")))
}

async fn worker_page(
    State(grpc): State<Grpc>,
    Path(id): Path<String>,
) -> Result<Html<String>, Failure> {
    let status = status(&grpc, StatusRequest::default()).await?;
    ui::worker(&status, &id)
        .map(|page| Html(page.into_string()))
        .ok_or((StatusCode::NOT_FOUND, format!("no worker {id}")))
}

async fn driver_page(
    State(grpc): State<Grpc>,
    Path(id): Path<String>,
) -> Result<Html<String>, Failure> {
    let status = status(&grpc, StatusRequest::drivers_from(&id, 1)).await?;
    ui::driver(&status, &id)
        .map(|page| Html(page.into_string()))
        .ok_or((StatusCode::NOT_FOUND, format!("no driver {id}")))
}

/// What an output page's URL may carry.
#[derive(serde::Deserialize)]
struct OutputQuery {
    /// `stdout` (the default) or `stderr`.
    stream: Option<String>,
    /// A token of `muster rest-token`, given once: it is kept in a cookie.
    token: Option<String>,
}

/// The cookie that keeps an output page's token.
const TOKEN_COOKIE: &str = "muster_token";

/// `/logs/ID` (a driver, or an executor as `APP/N`): the last [`MAX_LOG_CHUNK_BYTES`] the
/// process wrote (`?stream=stderr` for its standard error), read from its worker as `muster
/// logs` reads it, for the caller its token names, who must be allowed to read it. The
/// token comes in an `Authorization: Bearer` header, a cookie, or once as `?token=`, which
/// sets the cookie and sends the browser to the same page without it.
async fn output(
    State(grpc): State<Grpc>,
    Path(id): Path<String>,
    Query(query): Query<OutputQuery>,
    headers: HeaderMap,
) -> Response {
    let stream = match query.stream.as_deref() {
        None | Some("stdout") => LogStream::Stdout,
        Some("stderr") => LogStream::Stderr,
        Some(other) => {
            let message = format!("no output stream `{other}`: stdout or stderr");
            return (StatusCode::BAD_REQUEST, message).into_response();
        }
    };
    let token = query
        .token
        .as_deref()
        .or_else(|| bearer(&headers))
        .or_else(|| cookie(&headers, TOKEN_COOKIE));
    let caller = match grpc.callers.caller(token) {
        Ok(caller) => caller,
        Err(refused) => {
            let page = ui::sign_in(&id, stream_name(stream), &refused.to_string());
            return (StatusCode::UNAUTHORIZED, Html(page.into_string())).into_response();
        }
    };
    if let Some(token) = &query.token {
        let secure = if grpc.https { "; Secure" } else { "" };
        let cookie = format!("{TOKEN_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict{secure}");
        let location = format!("/logs/{id}?stream={}", stream_name(stream));
        return (
            StatusCode::SEE_OTHER,
            [(header::SET_COOKIE, cookie), (header::LOCATION, location)],
        )
            .into_response();
    }
    match last_output(&grpc, &caller, &id, stream).await {
        // Whatever a process wrote is shown as text, never taken for a page.
        Ok(text) => (
            [
                (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            text,
        )
            .into_response(),
        Err(status) => {
            let code = match status.code() {
                Code::PermissionDenied | Code::Unauthenticated => StatusCode::FORBIDDEN,
                Code::InvalidArgument => StatusCode::BAD_REQUEST,
                Code::NotFound | Code::FailedPrecondition => StatusCode::NOT_FOUND,
                _ => StatusCode::SERVICE_UNAVAILABLE,
            };
            (code, status.message().to_owned()).into_response()
        }
    }
}

/// The last [`MAX_LOG_CHUNK_BYTES`] of process `id`'s `stream`, read for `caller`, saying
/// what was left out before them.
async fn last_output(
    grpc: &Grpc,
    caller: &Caller,
    id: &str,
    stream: LogStream,
) -> Result<String, tonic::Status> {
    let read = |offset: u64, max_bytes: u32| {
        let mut request = Request::new(ReadLogRequest {
            id: id.to_owned(),
            stream: stream.into(),
            offset,
            max_bytes,
            worker_id: String::new(),
        });
        caller.credential.attach(request.metadata_mut());
        let mut client = ClusterClient::new(grpc.channel.clone())
            .max_decoding_message_size(muster_raft::MAX_MESSAGE_BYTES);
        async move { Ok::<_, tonic::Status>(client.read_log(request).await?.into_inner()) }
    };
    let size = read(0, 1).await?.size;
    let from = size.saturating_sub(u64::from(MAX_LOG_CHUNK_BYTES));
    let chunk = read(from, MAX_LOG_CHUNK_BYTES).await?;
    let left_out = if from > 0 {
        format!("[the first {from} bytes are left out: `muster logs {id}` prints them]\n")
    } else {
        String::new()
    };
    Ok(left_out + &String::from_utf8_lossy(&chunk.data))
}

/// `stdout` or `stderr`, as an output page's URL names it.
fn stream_name(stream: LogStream) -> &'static str {
    match stream {
        LogStream::Stdout => "stdout",
        LogStream::Stderr => "stderr",
    }
}

/// The token of an `Authorization: Bearer` header.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
}

/// The value of cookie `name`.
fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(name)?.strip_prefix('='))
}
