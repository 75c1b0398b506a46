//! Counting every gRPC call a master serves by method and status code: a tower layer around
//! all its services, so that calls its guards refuse (an unknown credential) count too. The
//! layer also gives the handling of each client call a `call` span naming its method, which
//! its log lines carry.
//!
//! A call's code is its `grpc-status`: in the response headers when the call failed before
//! any message (tonic's trailers-only answer), else in the trailers at the end of the body. A
//! body dropped before its trailers (the caller went away, the stream was cut) counts as
//! `CANCELLED`. Streams count when they end.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};
use tonic::Code;
use tower_layer::Layer;
use tower_service::Service;
use tracing::Instrument;

use crate::web::metrics::Metrics;

/// Adds the count of each call to a master's metrics.
#[derive(Clone)]
pub struct CountCalls {
    metrics: Arc<Metrics>,
}

impl CountCalls {
    /// Counts into `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self { metrics }
    }
}

impl<S> Layer<S> for CountCalls {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            metrics: Arc::clone(&self.metrics),
        }
    }
}

/// A service whose calls are counted.
#[derive(Clone)]
pub struct Counted<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, Req, ResBody> Service<http::Request<Req>> for Counted<S>
where
    S: Service<http::Request<Req>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<CountedBody<ResBody>>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Req>) -> Self::Future {
        let call = Call {
            method: method(request.uri().path()),
            metrics: Some(Arc::clone(&self.metrics)),
        };
        // Client calls get a span; replication, the bulk of the calls, logs through openraft.
        let span = if call.method.starts_with("Cluster/") {
            tracing::info_span!("call", method = call.method)
        } else {
            tracing::Span::none()
        };
        let response = span.in_scope(|| self.inner.call(request)).instrument(span);
        Box::pin(async move {
            let (parts, body) = response.await?.into_parts();
            let mut call = call;
            if let Some(code) = grpc_status(&parts.headers) {
                call.end(code);
            }
            Ok(http::Response::from_parts(
                parts,
                CountedBody { body, call },
            ))
        })
    }
}

/// Every method a master serves, as `/package.Service/Method` paths name them.
const METHODS: &[&str] = &[
    "/muster.v1.Cluster/Status",
    "/muster.v1.Cluster/SubmitDriver",
    "/muster.v1.Cluster/Kill",
    "/muster.v1.Cluster/SetQueues",
    "/muster.v1.Cluster/DrainWorker",
    "/muster.v1.Cluster/SaveSnapshot",
    "/muster.v1.Cluster/ChangeMembers",
    "/muster.v1.Cluster/ReadLog",
    "/muster.v1.Cluster/AddUser",
    "/muster.v1.Cluster/RevokeUser",
    "/muster.v1.Cluster/SetPriority",
    "/muster.v1.WorkerLink/Attach",
    "/muster.v1.AppLink/Run",
    "/muster.v1.Replication/AppendEntries",
    "/muster.v1.Replication/Vote",
    "/muster.v1.Replication/InstallSnapshot",
    "/muster.v1.Replication/TimeoutNow",
    "/muster.v1.Replication/Build",
];

/// `Service/Method` of a gRPC path (`/muster.v1.Cluster/Status` → `Cluster/Status`); any
/// path this master does not serve is `unknown`, so that callers cannot mint labels.
fn method(path: &str) -> &'static str {
    METHODS
        .iter()
        .find(|&&known| known == path)
        .map_or("unknown", |known| known.trim_start_matches("/muster.v1."))
}

fn grpc_status(headers: &http::HeaderMap) -> Option<Code> {
    let value = headers
        .get("grpc-status")?
        .to_str()
        .ok()?
        .parse::<i32>()
        .ok()?;
    Some(Code::from_i32(value))
}

/// One call not counted yet.
struct Call {
    method: &'static str,
    /// Taken once counted.
    metrics: Option<Arc<Metrics>>,
}

impl Call {
    fn end(&mut self, code: Code) {
        if let Some(metrics) = self.metrics.take() {
            metrics.call(self.method, code);
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.end(Code::Cancelled);
    }
}

/// A response body that counts its call when its trailers pass.
pub struct CountedBody<B> {
    body: B,
    call: Call,
}

impl<B: Body + Unpin> Body for CountedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(code) = frame.trailers_ref().and_then(grpc_status)
        {
            self.call.end(code);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::{METHODS, method};

    #[test]
    fn a_method_is_named_by_its_service_and_name() {
        assert_eq!(method("/muster.v1.Cluster/Status"), "Cluster/Status");
        assert_eq!(method("/muster.v1.WorkerLink/Attach"), "WorkerLink/Attach");
        assert_eq!(method("/nonsense"), "unknown");
        assert_eq!(method("/muster.v1.Cluster/Made-Up"), "unknown");
    }

    #[test]
    fn every_method_a_master_serves_is_known() {
        let protos = [
            include_str!("../../../../proto/muster/v1/cluster.proto"),
            include_str!("../../../../proto/muster/v1/worker.proto"),
            include_str!("../../../../proto/muster/v1/app.proto"),
            include_str!("../../../../proto/muster/v1/raft.proto"),
        ];
        let mut served = Vec::new();
        for proto in protos {
            let mut service = "";
            for line in proto.lines().map(str::trim) {
                if let Some(rest) = line.strip_prefix("service ") {
                    service = rest.trim_end_matches(" {");
                } else if let Some(rest) = line.strip_prefix("rpc ") {
                    let name = rest.split('(').next().unwrap();
                    served.push(format!("/muster.v1.{service}/{name}"));
                }
            }
        }
        let known: Vec<String> = METHODS.iter().map(|m| (*m).to_owned()).collect();
        assert_eq!(served, known);
    }
}
