//! The Spark REST gateway (`muster master --spark-rest HOST:PORT`): Spark's REST submission
//! protocol on every master, so that `spark-submit --deploy-mode cluster --master
//! spark://HOST:PORT/TOKEN,...` (and `--status`, `--kill`) work against Muster unchanged but
//! for the host names. What the messages mean and how a submission becomes a driver is
//! [`crate::submission`]'s; this module serves them.
//!
//! Each call is made on this master's own client API, so a follower's gateway reaches the
//! leader as every client call does, and the state machine checks named users as it checks
//! them everywhere. A call needs a token ([`muster_proto::rest_token`]): in an
//! `Authorization: Bearer` header (Spark's `JWSFilter` scheme), or, since `spark-submit`
//! sends no header, as the first segment of the path. A refused token changes nothing and is
//! answered 403, as Spark's filter answers it.
//!
//! `spark-submit`'s client speaks plain HTTP only; a master with a certificate serves the
//! gateway over TLS as well, on the same port, to clients that start a TLS handshake.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use muster_core::ids::WorkId;
use muster_core::limits::MAX_REQUEST_BYTES;
use muster_proto::auth::{Credential, Tokens};
use muster_proto::transport::Dialer;
use muster_proto::v1::cluster_client::ClusterClient;
use muster_proto::v1::{KillRequest, StatusReply, StatusRequest};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::either::Either;
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::submission::{Action, Reply, SERVER_SPARK_VERSION, Submissions, route};

/// Where the gateway listens and how it makes drivers of submissions.
#[derive(Clone, Debug)]
pub struct SparkRest {
    /// `HOST:PORT`.
    pub listen: String,
    /// How submissions become drivers.
    pub submissions: Submissions,
}

/// What every call of the gateway needs.
#[derive(Clone)]
pub(crate) struct Gateway {
    /// This master's own client API.
    channel: Channel,
    /// The cluster's own client credential.
    client: Credential,
    /// What checks tokens and derives named users' credentials.
    tokens: Tokens,
    submissions: Arc<Submissions>,
}

impl Gateway {
    /// A gateway calling the client API at `grpc` through `dialer`.
    ///
    /// # Errors
    ///
    /// `grpc` is not an address `dialer` can reach.
    pub(crate) fn new(
        grpc: &str,
        dialer: &Dialer,
        client: Credential,
        tokens: Tokens,
        submissions: Submissions,
    ) -> Result<Self, String> {
        let channel = dialer
            .endpoint(grpc)
            .map_err(|e| format!("{grpc}: {e}"))?
            .connect_timeout(Duration::from_secs(2))
            .connect_lazy();
        Ok(Self {
            channel,
            client,
            tokens,
            submissions: Arc::new(submissions),
        })
    }

    /// The credential a call with `token` makes its calls with.
    fn caller(&self, token: Option<&str>) -> Result<Credential, String> {
        if self.tokens.is_open() {
            return Ok(self.client.clone());
        }
        let Some(token) = token else {
            return Err(
                "Authorization header is missing: give a token of `muster rest-token` \
                        (Authorization: Bearer TOKEN, or the master URL spark://HOST:PORT/TOKEN)"
                    .to_owned(),
            );
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        match self.tokens.check_rest_token(token, now) {
            Ok(None) => Ok(self.client.clone()),
            Ok(Some(user)) => {
                let text = self
                    .tokens
                    .user_credential(&user.name, user.generation)
                    .expect("a secret derives users' credentials");
                Ok(Credential::from_text(&text).expect("a credential is ASCII"))
            }
            Err(error) => Err(format!("Failed to verify the token: {error}")),
        }
    }

    fn cluster(&self) -> ClusterClient<Channel> {
        ClusterClient::new(self.channel.clone())
            .max_decoding_message_size(muster_raft::MAX_MESSAGE_BYTES)
    }

    fn request<T>(credential: &Credential, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        credential.attach(request.metadata_mut());
        request
    }

    async fn status(&self, credential: &Credential) -> Result<StatusReply, Status> {
        let request = Self::request(credential, StatusRequest { local: false });
        Ok(self.cluster().status(request).await?.into_inner())
    }

    /// Kills driver `id`: whether it was, and what to say.
    async fn kill(&self, credential: &Credential, id: &str) -> Result<(bool, String), Status> {
        if !matches!(WorkId::from(id), WorkId::Driver(_)) {
            return Ok((false, format!("{id} is not a driver's id")));
        }
        let request = Self::request(
            credential,
            KillRequest {
                request_id: format!("spark-rest-kill-{id}"),
                id: id.to_owned(),
            },
        );
        match self.cluster().kill(request).await {
            Ok(_) => Ok((true, format!("Kill request for {id} submitted"))),
            Err(status) if refused(&status) => Ok((false, status.message().to_owned())),
            Err(status) => Err(status),
        }
    }

    /// The answer to `action` with `body`, made with `credential`.
    async fn answer(
        &self,
        action: Action,
        credential: &Credential,
        body: &[u8],
    ) -> (StatusCode, Reply) {
        let unavailable = |status: Status| {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Reply::error(format!(
                    "the masters cannot answer now: {}",
                    status.message()
                )),
            )
        };
        match action {
            Action::Create => {
                let driver = match self.submissions.driver(body) {
                    Ok(driver) => driver,
                    Err(message) => return (StatusCode::BAD_REQUEST, Reply::error(message)),
                };
                let created = |submission_id, success, message| Reply::Created {
                    server_spark_version: SERVER_SPARK_VERSION,
                    submission_id,
                    success,
                    message: Some(message),
                };
                match self
                    .cluster()
                    .submit_driver(Self::request(credential, driver))
                    .await
                {
                    Ok(reply) => {
                        let id = reply.into_inner().driver_id;
                        let message = format!("Driver successfully submitted as {id}");
                        (StatusCode::OK, created(Some(id), true, message))
                    }
                    Err(status) if refused(&status) => (
                        StatusCode::OK,
                        created(None, false, status.message().to_owned()),
                    ),
                    Err(status) => unavailable(status),
                }
            }
            Action::Status(id) => match self.status(credential).await {
                Ok(status) => (StatusCode::OK, Reply::status(&id, &status)),
                Err(status) => unavailable(status),
            },
            Action::Kill(id) => match self.kill(credential, &id).await {
                Ok((success, message)) => (
                    StatusCode::OK,
                    Reply::Killed {
                        server_spark_version: SERVER_SPARK_VERSION,
                        submission_id: id,
                        success,
                        message,
                    },
                ),
                Err(status) => unavailable(status),
            },
            Action::KillAll => {
                let status = match self.status(credential).await {
                    Ok(status) => status,
                    Err(status) => return unavailable(status),
                };
                let mut refusals = Vec::new();
                let active = Reply::active_drivers(&status);
                for id in &active {
                    match self.kill(credential, id).await {
                        Ok((true, _)) => {}
                        Ok((false, message)) => refusals.push(message),
                        Err(status) => return unavailable(status),
                    }
                }
                let message = format!(
                    "Kill requests for {} of {} active drivers submitted{}",
                    active.len() - refusals.len(),
                    active.len(),
                    if refusals.is_empty() {
                        String::new()
                    } else {
                        format!("; refused: {}", refusals.join("; "))
                    }
                );
                (
                    StatusCode::OK,
                    Reply::KilledAll {
                        server_spark_version: SERVER_SPARK_VERSION,
                        success: refusals.is_empty(),
                        message,
                    },
                )
            }
            Action::Clear => (
                StatusCode::OK,
                Reply::Cleared {
                    server_spark_version: SERVER_SPARK_VERSION,
                    success: false,
                    message: "Muster keeps a bounded number of ended drivers and applications \
                              (retained_drivers, retained_apps) and clears nothing on request"
                        .to_owned(),
                },
            ),
            Action::Readyz => match self.status(credential).await {
                Ok(status) => {
                    let reply = Reply::readyz(&status);
                    let code = match &reply {
                        Reply::Readyz { success: true, .. } => StatusCode::OK,
                        _ => StatusCode::SERVICE_UNAVAILABLE,
                    };
                    (code, reply)
                }
                Err(status) => unavailable(status),
            },
        }
    }
}

/// Whether the masters refused a call for what it asks (an answer to give the caller), not
/// for being unable to answer now.
fn refused(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::InvalidArgument
            | Code::NotFound
            | Code::FailedPrecondition
            | Code::PermissionDenied
            | Code::AlreadyExists
    )
}

/// `reply` as JSON with status `code`.
fn respond(code: StatusCode, reply: &Reply) -> Response {
    let json = serde_json::to_string_pretty(reply).expect("a reply serializes");
    (
        code,
        [(header::CONTENT_TYPE, "application/json;charset=utf-8")],
        json,
    )
        .into_response()
}

/// Every call: its path names the action (and maybe carries the token).
async fn handle(State(gateway): State<Gateway>, request: Request<Body>) -> Response {
    let post = match *request.method() {
        Method::POST => true,
        Method::GET => false,
        _ => {
            return respond(
                StatusCode::METHOD_NOT_ALLOWED,
                &Reply::error("the protocol takes GET and POST only"),
            );
        }
    };
    let path = request.uri().path().to_owned();
    let (action, path_token) = match route(post, &path) {
        Ok(routed) => routed,
        Err(unknown) => {
            let code = StatusCode::from_u16(unknown.code).unwrap_or(StatusCode::BAD_REQUEST);
            return respond(code, &Reply::unknown_path(&unknown));
        }
    };
    let header_token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    let credential = match gateway.caller(header_token.or(path_token)) {
        Ok(credential) => credential,
        Err(message) => return respond(StatusCode::FORBIDDEN, &Reply::error(message)),
    };
    let Ok(body) = axum::body::to_bytes(request.into_body(), MAX_REQUEST_BYTES).await else {
        return respond(
            StatusCode::PAYLOAD_TOO_LARGE,
            &Reply::error(format!(
                "the request is larger than {MAX_REQUEST_BYTES} bytes, or was cut off"
            )),
        );
    };
    let (code, reply) = gateway.answer(action, &credential, &body).await;
    respond(code, &reply)
}

/// Serves the gateway on `listener` until `shutdown` resolves, over TLS as well when
/// `https` is given.
pub(crate) async fn serve(
    listener: TcpListener,
    https: Option<TlsAcceptor>,
    gateway: Gateway,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new().fallback(handle).with_state(gateway);
    axum::serve(SniffingListener { listener, https }, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// How long a client may take to send its first byte or finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// The first byte of every TLS connection: a handshake record.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// Accepts connections, plain or, when it has an acceptor, TLS for those that start a
/// handshake.
struct SniffingListener {
    listener: TcpListener,
    https: Option<TlsAcceptor>,
}

impl SniffingListener {
    async fn open(
        &self,
        stream: TcpStream,
    ) -> std::io::Result<Either<TcpStream, TlsStream<TcpStream>>> {
        let Some(acceptor) = &self.https else {
            return Ok(Either::Left(stream));
        };
        let mut first = [0u8; 1];
        stream.peek(&mut first).await?;
        if first[0] == TLS_HANDSHAKE_RECORD {
            Ok(Either::Right(acceptor.accept(stream).await?))
        } else {
            Ok(Either::Left(stream))
        }
    }
}

impl axum::serve::Listener for SniffingListener {
    type Io = Either<TcpStream, TlsStream<TcpStream>>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, SocketAddr) {
        loop {
            let Ok((stream, addr)) = self.listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, self.open(stream)).await {
                Ok(Ok(io)) => return (io, addr),
                Ok(Err(error)) => tracing::debug!(%addr, %error, "a gateway connection failed"),
                Err(_) => tracing::debug!(%addr, "a gateway connection sent nothing in time"),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}
