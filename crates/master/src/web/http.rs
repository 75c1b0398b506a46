//! The master's HTTP endpoint, for people and scripts without the CLI (Spark's master UI):
//! `/json` is the cluster status exactly as `muster status --json` prints it, and `/` with
//! `/app/ID`, `/driver/ID` and `/worker/ID` the pages of the same ([`crate::web::ui`]). Both ask
//! the master's own client API, so any master shows the leader's view. What the pages guard
//! (`/logs/ID`, a process's output, and the kill buttons, `POST /kill`) acts for whoever
//! signed in (`/sign-in`, [`crate::web::signin`]) or sends a token in an `Authorization: Bearer`
//! header. `/metrics` is this replica's own Prometheus metrics ([`crate::web::metrics`]). A master
//! with a TLS certificate serves it over HTTPS only.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Json, Response};
use axum::routing::{get, post};
use muster_core::limits::MAX_LOG_CHUNK_BYTES;
use muster_proto::auth::Credential;
use muster_proto::v1::cluster_client::ClusterClient;
use muster_proto::v1::{KillRequest, LogStream, ReadLogRequest, StatusRequest};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tonic::transport::Channel;
use tonic::{Code, Request};

use crate::grpc::callers::{Caller, Callers, Unauthorized};
use crate::session::Sessions;
use crate::web::history::{self, QueueHistory};
use crate::web::listener::{Connections, Serving};
use crate::web::metrics::Metrics;
use crate::web::signin::{SignIns, back_to, same_origin};
use crate::web::ui;
use crate::web::view::StatusView;
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
    sign_ins: Arc<SignIns>,
    /// Where people reach this master's Spark REST gateway, when it serves one.
    spark_rest: Option<String>,
    /// Spark's history server, which completed applications' pages link.
    history_server: Option<String>,
}

/// What `/metrics` reads: this replica's node, its leader sessions and its metrics.
#[derive(Clone)]
pub(crate) struct Replica {
    pub(crate) node: Arc<RaftNode>,
    pub(crate) sessions: Arc<Sessions>,
    pub(crate) metrics: Arc<Metrics>,
}

/// What the pages call and show.
pub(crate) struct Pages {
    /// This master's own client API ([`crate::grpc::call::own_api`]).
    pub(crate) grpc: Channel,
    /// What the pages' own reads carry.
    pub(crate) credential: Credential,
    /// Whom the guarded pages' tokens name.
    pub(crate) callers: Callers,
    /// Where people reach this master's Spark REST gateway, if it serves one.
    pub(crate) spark_rest: Option<String>,
    /// Spark's history server, which completed applications' pages link.
    pub(crate) history_server: Option<String>,
}

/// Serves the endpoint on `listener` (over TLS with `https`) until `shutdown` resolves.
pub(crate) async fn serve(
    listener: TcpListener,
    https: Option<TlsAcceptor>,
    pages: Pages,
    replica: Replica,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let grpc = Grpc {
        channel: pages.grpc,
        credential: pages.credential,
        callers: pages.callers,
        https: https.is_some(),
        history: Arc::default(),
        sign_ins: Arc::new(SignIns::new()?),
        spark_rest: pages.spark_rest,
        history_server: pages.history_server,
    };
    let sampler = tokio::spawn(sample(grpc.clone()));
    let app = Router::new()
        .route("/json", get(json))
        .route("/", get(page))
        .route("/app/{id}", get(app_page))
        .route("/driver/{id}", get(driver_page))
        .route("/worker/{id}", get(worker_page))
        .route("/logs/{*id}", get(output))
        .route("/sign-in", get(sign_in_page).post(sign_in))
        .route("/kill", post(kill))
        .with_state(grpc)
        .route("/metrics", get(metrics).with_state(replica))
        .layer(axum::middleware::map_response(guarded));
    let serving = https.map_or(Serving::Plain, Serving::Tls);
    let served = axum::serve(Connections::start(listener, serving)?, app)
        .with_graceful_shutdown(shutdown)
        .await;
    sampler.abort();
    served
}

/// What every answer carries: no other site may frame the pages (and so their kill
/// buttons), and no cache keeps them (process output).
async fn guarded(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("frame-ancestors 'none'"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
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
    let now = now_ms();
    let charts = grpc.history.lock().expect("history lock").charts(now);
    let page = ui::overview(&status, charts, now, grpc.spark_rest.as_deref());
    Ok(Html(page.into_string()))
}

async fn app_page(
    State(grpc): State<Grpc>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Html<String>, Failure> {
    let status = status(&grpc, StatusRequest::without_drivers()).await?;
    let form_key = form_key(&grpc, &headers);
    ui::app(
        &status,
        &id,
        form_key.as_deref(),
        grpc.history_server.as_deref(),
    )
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
    headers: HeaderMap,
) -> Result<Html<String>, Failure> {
    let status = status(&grpc, StatusRequest::drivers_from(&id, 1)).await?;
    ui::driver(&status, &id, form_key(&grpc, &headers).as_deref())
        .map(|page| Html(page.into_string()))
        .ok_or((StatusCode::NOT_FOUND, format!("no driver {id}")))
}

/// Whom a request of the guarded pages acts for: anyone on an open cluster, the caller an
/// `Authorization: Bearer` token names, or whoever signed in; with the anti-forgery value
/// its forms carry (none for a bearer token: a script posts no forms).
fn caller_of(grpc: &Grpc, headers: &HeaderMap) -> Result<(Caller, Option<String>), Unauthorized> {
    if let Some(token) = bearer(headers) {
        return Ok((grpc.callers.caller(Some(token))?, None));
    }
    if grpc.callers.is_open() {
        let key = grpc.sign_ins.open_form_key().to_owned();
        return Ok((grpc.callers.caller(None)?, Some(key)));
    }
    match grpc.sign_ins.session(headers, grpc.https, Instant::now()) {
        Some(session) => Ok((
            grpc.callers.caller(Some(&session.token))?,
            Some(session.form_key),
        )),
        None => Err(Unauthorized::Missing),
    }
}

/// The anti-forgery value of the forms on a page for the request with `headers`, when it
/// may post them.
fn form_key(grpc: &Grpc, headers: &HeaderMap) -> Option<String> {
    caller_of(grpc, headers).ok()?.1
}

/// What an output page's URL may carry.
#[derive(serde::Deserialize)]
struct OutputQuery {
    /// `stdout` (the default) or `stderr`.
    stream: Option<String>,
    /// The first byte to show; the last [`MAX_LOG_CHUNK_BYTES`] without it.
    from: Option<u64>,
}

/// `/logs/ID` (a driver, or an executor as `APP/N`): the last [`MAX_LOG_CHUNK_BYTES`] the
/// process wrote (`?stream=stderr` for its standard error; `&from=BYTE` for those from a
/// byte on), read from its worker as `muster logs` reads it, for whoever signed in or the
/// caller a bearer token names, who must be allowed to read it; otherwise the sign-in form,
/// which brings the reader back here. A browser (asking for HTML) is given a page around
/// the text, with the way back, the bytes shown and links to those before and after; a
/// script, the text alone.
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
    let caller = match caller_of(&grpc, &headers) {
        Ok((caller, _)) => caller,
        Err(refused) => {
            let here = format!("/logs/{id}?stream={}", stream_name(stream));
            return ask_to_sign_in(&here, &refused);
        }
    };
    let output = match read_output(&grpc, &caller, &id, stream, query.from).await {
        Ok(output) => output,
        Err(status) => return refused(&status),
    };
    let browser = headers
        .get(header::ACCEPT)
        .and_then(|accept| accept.to_str().ok())
        .is_some_and(|accept| accept.contains("text/html"));
    if browser {
        let page = ui::output(&id, stream_name(stream), &output);
        return Html(page.into_string()).into_response();
    }
    let left_out = if output.from > 0 && query.from.is_none() {
        format!(
            "[the first {} bytes are left out: `muster logs {id}` prints them]\n",
            output.from
        )
    } else {
        String::new()
    };
    // Whatever a process wrote is shown as text, never taken for a page.
    (
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        left_out + &output.text,
    )
        .into_response()
}

/// The sign-in form, for a request refused as `refused`, which brings the reader back to
/// `then`: with why, unless they only had not signed in yet.
fn ask_to_sign_in(then: &str, refused: &Unauthorized) -> Response {
    let why = match refused {
        Unauthorized::Missing => None,
        Unauthorized::Invalid(_) => Some(refused.to_string()),
    };
    let page = ui::sign_in(then, why.as_deref());
    (StatusCode::UNAUTHORIZED, Html(page.into_string())).into_response()
}

/// A refusal of the masters as an HTTP answer.
fn refused(status: &tonic::Status) -> Response {
    let code = match status.code() {
        Code::PermissionDenied | Code::Unauthenticated => StatusCode::FORBIDDEN,
        Code::InvalidArgument => StatusCode::BAD_REQUEST,
        Code::NotFound | Code::FailedPrecondition => StatusCode::NOT_FOUND,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    (code, status.message().to_owned()).into_response()
}

/// Where a form sends the browser once done.
#[derive(serde::Deserialize)]
struct Then {
    then: Option<String>,
}

/// `GET /sign-in?then=PATH`: the sign-in form.
async fn sign_in_page(Query(then): Query<Then>) -> Html<String> {
    let then = back_to(then.then.as_deref().unwrap_or("/"));
    Html(ui::sign_in(then, None).into_string())
}

/// What the sign-in form posts.
#[derive(serde::Deserialize)]
struct SignInForm {
    token: String,
    then: String,
}

/// `POST /sign-in`: a token checked and kept, the browser given its session's cookie and
/// sent back where it came from; or the form again, saying why not. Only from these pages:
/// another site may not sign a browser in as someone else.
async fn sign_in(
    State(grpc): State<Grpc>,
    headers: HeaderMap,
    Form(form): Form<SignInForm>,
) -> Response {
    if !same_origin(&headers) {
        return not_from_these_pages();
    }
    let then = back_to(&form.then);
    if let Err(refused) = grpc.callers.caller(Some(form.token.trim())) {
        return ask_to_sign_in(then, &refused);
    }
    // An open cluster has nothing to sign in with, and gives no cookie.
    if grpc.callers.is_open() {
        return (StatusCode::SEE_OTHER, [(header::LOCATION, then.to_owned())]).into_response();
    }
    match grpc
        .sign_ins
        .sign_in(form.token.trim(), Instant::now(), grpc.https)
    {
        Ok(cookie) => (
            StatusCode::SEE_OTHER,
            [
                (header::SET_COOKIE, cookie),
                (header::LOCATION, then.to_owned()),
            ],
        )
            .into_response(),
        Err(error) => (StatusCode::SERVICE_UNAVAILABLE, error.to_string()).into_response(),
    }
}

/// What a kill button posts; a script that sends a bearer token gives only the id.
#[derive(serde::Deserialize)]
struct KillForm {
    id: String,
    form_key: Option<String>,
    then: Option<String>,
}

/// The refusal of a form that another site's page sent.
fn not_from_these_pages() -> Response {
    let message = "this form was not sent by this master's page: reload the page and use it \
                   from there";
    (StatusCode::FORBIDDEN, message).into_response()
}

/// `POST /kill`: kills the application or driver a page's button names, for whoever signed
/// in (the masters refuse what they may not kill), if the form comes from these pages and
/// carries their anti-forgery value, or for the caller a bearer token names (a browser never
/// sends one by itself); then back to the page.
async fn kill(
    State(grpc): State<Grpc>,
    headers: HeaderMap,
    Form(form): Form<KillForm>,
) -> Response {
    let then = back_to(form.then.as_deref().unwrap_or("/"));
    let (caller, key) = match caller_of(&grpc, &headers) {
        Ok(signed_in) => signed_in,
        Err(refused) => return ask_to_sign_in(then, &refused),
    };
    let by_script = bearer(&headers).is_some();
    if !by_script && (!same_origin(&headers) || key.is_none() || key != form.form_key) {
        return not_from_these_pages();
    }
    let mut request = Request::new(KillRequest {
        request_id: String::new(),
        id: form.id.clone(),
    });
    caller.credential.attach(request.metadata_mut());
    let mut client = ClusterClient::new(grpc.channel.clone());
    match client.kill(request).await {
        Ok(_) => (StatusCode::SEE_OTHER, [(header::LOCATION, then.to_owned())]).into_response(),
        Err(status) => refused(&status),
    }
}

/// Up to [`MAX_LOG_CHUNK_BYTES`] of process `id`'s `stream` from byte `from` (the last
/// ones without it), read for `caller`.
async fn read_output(
    grpc: &Grpc,
    caller: &Caller,
    id: &str,
    stream: LogStream,
    from: Option<u64>,
) -> Result<ui::Output, tonic::Status> {
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
    let from = from
        .unwrap_or_else(|| size.saturating_sub(u64::from(MAX_LOG_CHUNK_BYTES)))
        .min(size);
    let chunk = read(from, MAX_LOG_CHUNK_BYTES).await?;
    Ok(ui::Output {
        from,
        to: from + chunk.data.len() as u64,
        size: chunk.size.max(size),
        text: String::from_utf8_lossy(&chunk.data).into_owned(),
    })
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
