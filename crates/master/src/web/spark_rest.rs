//! The Spark REST gateway (`muster master --spark-rest HOST:PORT`): Spark's REST submission
//! protocol on every master, so that `spark-submit --deploy-mode cluster --master
//! spark://HOST:PORT/TOKEN,...` (and `--status`, `--kill`) work against Muster unchanged but
//! for the host names. What the messages mean and how a submission becomes a driver is
//! [`crate::web::submission`]'s; this module serves them.
//!
//! Each call is made on this master's own client API, so a follower's gateway reaches the
//! leader as every client call does, and the state machine checks named users as it checks
//! them everywhere. A call needs a token ([`muster_proto::rest_token`]): in an
//! `Authorization: Bearer` header (Spark's `JWSFilter` scheme), or, since `spark-submit`
//! sends no header, as the first segment of the path. A refused token changes nothing and is
//! answered 403, as Spark's filter answers it. A submission a busy leader refuses
//! (backpressure) is sent again after the wait it asks for, within the time Spark's client
//! waits for an answer.
//!
//! `spark-submit`'s client speaks plain HTTP only; a master with a certificate serves the
//! gateway over TLS as well, on the same port, to clients that start a TLS handshake.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use muster_core::ids::WorkId;
use muster_core::limits::MAX_REQUEST_BYTES;
use muster_proto::masters::while_busy;
use muster_proto::v1::cluster_client::ClusterClient;
use muster_proto::v1::{
    DriverState, KillRequest, StatusReply, StatusRequest, SubmitDriverReply, SubmitDriverRequest,
    WorkerState,
};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::grpc::callers::{Caller, Callers};
use crate::web::listener::{Connections, Serving};
use crate::web::submission::{Action, Reply, SERVER_SPARK_VERSION, Submissions, route};

/// How long a submission may wait for a busy leader: within the 10 s Spark's REST client
/// gives a master to answer.
const BUSY_PATIENCE: Duration = Duration::from_secs(7);

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
    /// Whom each call acts for.
    callers: Callers,
    submissions: Arc<Submissions>,
}

impl Gateway {
    /// A gateway calling the client API on `channel` ([`crate::grpc::call::own_api`]) for the
    /// callers its tokens name.
    pub(crate) fn new(channel: Channel, callers: Callers, submissions: Submissions) -> Self {
        Self {
            channel,
            callers,
            submissions: Arc::new(submissions),
        }
    }

    fn cluster(&self) -> ClusterClient<Channel> {
        ClusterClient::new(self.channel.clone())
            .max_decoding_message_size(muster_raft::MAX_MESSAGE_BYTES)
    }

    fn request<T>(caller: &Caller, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        caller.credential.attach(request.metadata_mut());
        request
    }

    /// Submits `driver` for `caller`, sending it again while the leader is busy and the wait
    /// it asks for ends within [`BUSY_PATIENCE`]: a refusal for being busy left it unqueued.
    async fn submit(
        &self,
        caller: &Caller,
        driver: SubmitDriverRequest,
    ) -> Result<SubmitDriverReply, Status> {
        let (answer, _) = while_busy(BUSY_PATIENCE, || {
            let request = Self::request(caller, driver.clone());
            let mut cluster = self.cluster();
            async move { cluster.submit_driver(request).await }
        })
        .await;
        answer.map(tonic::Response::into_inner)
    }

    async fn status(&self, caller: &Caller) -> Result<StatusReply, Status> {
        let request = Self::request(caller, StatusRequest::default());
        Ok(self.cluster().status(request).await?.into_inner())
    }

    /// Kills driver `id`: what to say. A kill needs no request id: a second one of the same
    /// driver changes nothing.
    async fn kill(&self, caller: &Caller, id: &str) -> Result<String, Status> {
        if !matches!(WorkId::from(id), WorkId::Driver(_)) {
            return Err(Status::invalid_argument(format!(
                "{id} is not a driver's id"
            )));
        }
        let request = Self::request(
            caller,
            KillRequest {
                request_id: String::new(),
                id: id.to_owned(),
            },
        );
        self.cluster().kill(request).await?;
        Ok(format!("Kill request for {id} submitted"))
    }

    /// The answer to `action` with `body`, made for `caller`. What the masters refuse is
    /// an `ErrorResponse`, not a response with `success: false`: Spark's client prints the
    /// one (at ERROR) and logs the other at INFO, which `spark-submit` does not show.
    async fn answer(&self, action: Action, caller: &Caller, body: &[u8]) -> (StatusCode, Reply) {
        match action {
            Action::Create => {
                let driver = match self.submissions.driver(body) {
                    Ok(driver) => driver,
                    Err(refused) => {
                        return (StatusCode::BAD_REQUEST, Reply::error(refused.to_string()));
                    }
                };
                // A driver no worker could run would fail, or restart for ever if supervised.
                let workers = StatusRequest::without_drivers();
                let workers = self.cluster().status(Self::request(caller, workers)).await;
                if let Some(refused) = workers.ok().and_then(|s| no_worker_has_spark(s.get_ref())) {
                    return (StatusCode::BAD_REQUEST, Reply::error(refused));
                }
                match self.submit(caller, driver).await {
                    Ok(reply) => {
                        let id = reply.driver_id;
                        let message = format!("Driver successfully submitted as {id}");
                        let created = Reply::Created {
                            server_spark_version: SERVER_SPARK_VERSION,
                            submission_id: id,
                            success: true,
                            message,
                        };
                        (StatusCode::OK, created)
                    }
                    Err(status) => failed(&status),
                }
            }
            Action::Status(id) => match self.status(caller).await {
                Ok(status) => (StatusCode::OK, Reply::status(&id, &status)),
                Err(status) => failed(&status),
            },
            Action::Kill(id) => match self.kill(caller, &id).await {
                Ok(message) => (
                    StatusCode::OK,
                    Reply::Killed {
                        server_spark_version: SERVER_SPARK_VERSION,
                        submission_id: id,
                        success: true,
                        message,
                    },
                ),
                Err(status) => failed(&status),
            },
            Action::KillAll => {
                let status = match self.status(caller).await {
                    Ok(status) => status,
                    Err(status) => return failed(&status),
                };
                let mut refusals = Vec::new();
                let active = active_drivers(&status, caller.user.as_deref());
                for id in &active {
                    match self.kill(caller, id).await {
                        Ok(_) => {}
                        Err(status) if refused(&status) => {
                            refusals.push(status.message().to_owned());
                        }
                        Err(status) => return failed(&status),
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
            Action::Readyz => match self.status(caller).await {
                Ok(status) => {
                    let reply = Reply::readyz(&status);
                    let code = match &reply {
                        Reply::Readyz { success: true, .. } => StatusCode::OK,
                        _ => StatusCode::SERVICE_UNAVAILABLE,
                    };
                    (code, reply)
                }
                Err(status) => failed(&status),
            },
        }
    }
}

/// Why no worker could run a Spark submission's driver, when every ALIVE worker's agent
/// said it has no Spark (`SPARK_HOME`); `None` while one has, did not say (an older agent),
/// or no worker is ALIVE (the cluster may grow).
fn no_worker_has_spark(status: &StatusReply) -> Option<String> {
    let alive: Vec<_> = status
        .workers
        .iter()
        .filter(|w| w.state() == WorkerState::Alive && !w.draining)
        .collect();
    let none = !alive.is_empty() && alive.iter().all(|w| w.spark_home.as_deref() == Some(""));
    none.then(|| {
        format!(
            "no worker can run this driver: a Spark submission runs the spark-submit of the \
             worker's SPARK_HOME, and none of the {} ALIVE workers has one (start their \
             agents with SPARK_HOME set to a Spark)",
            alive.len()
        )
    })
}

/// The drivers of `status` that have not ended, `user`'s only for a named user: what
/// killall kills.
fn active_drivers(status: &StatusReply, user: Option<&str>) -> Vec<String> {
    status
        .drivers
        .iter()
        .filter(|d| matches!(d.state(), DriverState::Submitted | DriverState::Running))
        .filter(|d| user.is_none_or(|user| d.user == user))
        .map(|d| d.id.clone())
        .collect()
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

/// The answer to a call the masters did not carry out: 403 for a caller who may not, 400
/// for what cannot be done, 503 when they cannot answer now.
fn failed(status: &Status) -> (StatusCode, Reply) {
    let code = match status.code() {
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        _ if refused(status) => StatusCode::BAD_REQUEST,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    let message = if code == StatusCode::SERVICE_UNAVAILABLE {
        format!("the masters cannot answer now: {}", status.message())
    } else {
        status.message().to_owned()
    };
    (code, Reply::error(message))
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
    let caller = match gateway.callers.caller(header_token.or(path_token)) {
        Ok(caller) => caller,
        Err(refused) => {
            return respond(StatusCode::FORBIDDEN, &Reply::error(refused.to_string()));
        }
    };
    let Ok(body) = axum::body::to_bytes(request.into_body(), MAX_REQUEST_BYTES).await else {
        return respond(
            StatusCode::PAYLOAD_TOO_LARGE,
            &Reply::error(format!(
                "the request is larger than {MAX_REQUEST_BYTES} bytes, or was cut off"
            )),
        );
    };
    let (code, reply) = gateway.answer(action, &caller, &body).await;
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
    let serving = https.map_or(Serving::Plain, Serving::Both);
    axum::serve(Connections::start(listener, serving)?, app)
        .with_graceful_shutdown(shutdown)
        .await
}
