//! The layer every public gRPC request passes first: it measures the
//! request (latency and count by method and status code, in flight), gives
//! it its trace context and runs its handler inside a `request` span that
//! carries the trace id.
//!
//! # Decisions
//!
//! - **Where the status code is.** A gRPC answer carries `grpc-status` in
//!   its headers when it is an error with no message body
//!   ("trailers-only"), and otherwise in the trailers after the body. So
//!   the response body is wrapped, and the request is recorded when its
//!   trailers pass (or when the body ends or is dropped: a client that
//!   went away is recorded as CANCELLED). Latency is thus until the last
//!   byte, which for a watch stream is the stream's life.
//! - **Only the public services.** It wraps `palisade.v1.Palisade` and
//!   `palisade.v1.ClusterAdmin`, not the peer transport, whose long-lived
//!   replication streams would drown the in-flight gauge.
//! - **The answer names its trace.** The response carries the request's
//!   `traceparent`, so a client that sent none can still find its trace in
//!   the logs.

use std::borrow::Cow;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use http_body::{Body, Frame, SizeHint};
use tonic::body::Body as TonicBody;
use tonic::codegen::{BoxFuture, Service};
use tonic::server::NamedService;
use tracing::Instrument;

use crate::trace::{self, TRACEPARENT, TraceContext};
use crate::{Metrics, RpcLabels};

/// Wraps a tonic service so its requests are measured and traced.
#[derive(Clone)]
pub struct Observed<S> {
    inner: S,
    metrics: Arc<Metrics>,
    node_id: u64,
}

impl<S> Observed<S> {
    /// `inner`, measured into `metrics`, its spans naming `node_id`.
    pub fn new(inner: S, metrics: Arc<Metrics>, node_id: u64) -> Self {
        Self {
            inner,
            metrics,
            node_id,
        }
    }
}

impl<S: NamedService> NamedService for Observed<S> {
    const NAME: &'static str = S::NAME;
}

/// `/palisade.v1.Palisade/CreateSandbox` -> (`palisade.v1.Palisade`,
/// `CreateSandbox`). The service is the wrapped service's static name
/// when the path names it (always, behind tonic's router), so only the
/// method is copied per request.
fn service_and_method(path: &str, named: &'static str) -> (Cow<'static, str>, String) {
    let path = path.trim_start_matches('/');
    let (service, method) = path.split_once('/').unwrap_or((path, ""));
    let service = if service == named {
        Cow::Borrowed(named)
    } else {
        Cow::Owned(service.to_string())
    };
    (service, method.to_string())
}

/// The canonical name of a gRPC status code, as Prometheus labels it.
pub fn code_name(code: i32) -> &'static str {
    match code {
        0 => "OK",
        1 => "CANCELLED",
        2 => "UNKNOWN",
        3 => "INVALID_ARGUMENT",
        4 => "DEADLINE_EXCEEDED",
        5 => "NOT_FOUND",
        6 => "ALREADY_EXISTS",
        7 => "PERMISSION_DENIED",
        8 => "RESOURCE_EXHAUSTED",
        9 => "FAILED_PRECONDITION",
        10 => "ABORTED",
        11 => "OUT_OF_RANGE",
        12 => "UNIMPLEMENTED",
        13 => "INTERNAL",
        14 => "UNAVAILABLE",
        15 => "DATA_LOSS",
        16 => "UNAUTHENTICATED",
        _ => "UNKNOWN",
    }
}

fn grpc_status(headers: &http::HeaderMap) -> Option<i32> {
    headers
        .get("grpc-status")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse().ok())
}

/// Records one request once, when it is finished (or abandoned).
struct Finish {
    metrics: Arc<Metrics>,
    service: Cow<'static, str>,
    method: String,
    started: Instant,
    trace_id: String,
    recorded: bool,
}

impl Finish {
    fn record(&mut self, code: i32) {
        if std::mem::replace(&mut self.recorded, true) {
            return;
        }
        let seconds = self.started.elapsed().as_secs_f64();
        if crate::is_write_method(&self.method) {
            self.metrics.request_finished(crate::RecentRequest {
                finished_at_ms: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |elapsed| elapsed.as_millis() as i64),
                method: self.method.clone(),
                code: code_name(code),
                seconds,
                trace_id: std::mem::take(&mut self.trace_id),
            });
        }
        let labels = RpcLabels {
            grpc_service: std::mem::take(&mut self.service),
            grpc_method: std::mem::take(&mut self.method),
            grpc_code: Cow::Borrowed(code_name(code)),
        };
        let rpc = &self.metrics.rpc;
        rpc.handling_seconds.get_or_create(&labels).observe(seconds);
        rpc.handled.get_or_create(&labels).inc();
        rpc.in_flight.dec();
    }
}

impl Drop for Finish {
    fn drop(&mut self) {
        // The body was dropped before its trailers: the client went away.
        self.record(tonic::Code::Cancelled as i32);
    }
}

pin_project_lite::pin_project! {
    /// A response body that records its request when its trailers pass.
    struct ObservedBody {
        #[pin]
        inner: TonicBody,
        finish: Finish,
    }
}

impl Body for ObservedBody {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(context);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(trailers) = frame.trailers_ref() {
                    this.finish
                        .record(grpc_status(trailers).unwrap_or(tonic::Code::Unknown as i32));
                }
            }
            Poll::Ready(Some(Err(status))) => this.finish.record(status.code() as i32),
            // Ended without trailers: not a well-formed gRPC answer.
            Poll::Ready(None) => this.finish.record(tonic::Code::Unknown as i32),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<S> Service<http::Request<TonicBody>> for Observed<S>
where
    S: NamedService,
    S: Service<http::Request<TonicBody>, Response = http::Response<TonicBody>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<TonicBody>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, request: http::Request<TonicBody>) -> Self::Future {
        let (service, method) = service_and_method(request.uri().path(), S::NAME);
        let context = TraceContext::from_header_or_new(
            request
                .headers()
                .get(TRACEPARENT)
                .and_then(|value| value.to_str().ok()),
        );
        let span = tracing::info_span!(
            "request",
            trace_id = %context.trace_id,
            node_id = self.node_id,
            method = %method,
        );
        trace::link_span(&span, &context);
        self.metrics.rpc.in_flight.inc();
        let mut finish = Finish {
            metrics: self.metrics.clone(),
            service,
            method,
            started: Instant::now(),
            trace_id: context.trace_id.clone(),
            recorded: false,
        };
        let traceparent = context.header();
        let response = {
            let _entered = span.enter();
            self.inner.call(request)
        };
        Box::pin(
            trace::scope(context, async move {
                let Ok(response) = response.await;
                let (mut parts, body) = response.into_parts();
                if let Ok(value) = http::HeaderValue::from_str(&traceparent) {
                    parts.headers.insert(TRACEPARENT, value);
                }
                if let Some(code) = grpc_status(&parts.headers) {
                    // Trailers-only: the status is already known.
                    finish.record(code);
                    tracing::debug!(code = code_name(code), "request finished");
                    return Ok(http::Response::from_parts(parts, body));
                }
                let body = ObservedBody {
                    inner: body,
                    finish,
                };
                Ok(http::Response::from_parts(parts, TonicBody::new(body)))
            })
            .instrument(span),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_split_into_service_and_method() {
        assert_eq!(
            service_and_method(
                "/palisade.v1.Palisade/CreateSandbox",
                "palisade.v1.Palisade"
            ),
            ("palisade.v1.Palisade".into(), "CreateSandbox".into())
        );
        assert_eq!(
            service_and_method("/other.Service/Call", "palisade.v1.Palisade"),
            ("other.Service".into(), "Call".into())
        );
        assert_eq!(code_name(14), "UNAVAILABLE");
    }
}
