//! Gives a Concord code to the failures tonic raises below the services, answers a
//! call whose deadline passes in the server with TIMEOUT, and (built `measured`)
//! counts and times every call by the code the client sees (`measure`).
//!
//! ```text
//!  request ──► Coded ──► TreeServer / SessionServer / ... (tonic's generated code:
//!                │         decode, size limits, method routing, then the handler)
//!                │◄── response headers (a trailers-only failure: decode error,
//!                │    request too large, unknown method) ── recoded here
//!                │◄── body trailers (a failure after the headers: response too
//!                │    large, a stream ending in an error) ── recoded in CodedBody
//!                └─ the client's grpc-timeout passes first ──► TIMEOUT
//! ```
//!
//! A status that already names a Concord code (every status the handlers build, see
//! `error`) passes unchanged; any other gets one from `error::framework_status`.
//!
//! Deadlines: tonic's own `grpc-timeout` guard sits outside every layer we can add and
//! answers CANCELLED "Timeout expired". `Coded` arms its own timer for the same
//! deadline, a little earlier (`deadline_margin`: a tenth of the timeout, 2 to 200
//! ms), so the client gets TIMEOUT, and gets it before its own timer gives up with
//! nothing but "deadline exceeded". Like tonic's, it covers the wait for the response
//! headers, not a stream that has started.
//!
//! Traces: `Call::start` opens the call's span when traces are exported, continuing
//! the caller's `traceparent`, and the handler runs in its context, so a write it
//! submits carries the trace (`telemetry::trace::WriteTrace`).
//!
//! What it must not do: look inside messages, or change a successful response.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use concord_proto::v1::ErrorCode;
use futures::future::Either;
use http::HeaderMap;
use http_body::{Frame, SizeHint};
use opentelemetry::context::FutureExt as _;
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::Status;

use super::error::{error, framework_status, ERROR_CODE_HEADER};
use super::measure::{code_in, Call};
use crate::telemetry::Metrics;

/// Least and most a server answers TIMEOUT before the client's `grpc-timeout`: at
/// least a tick of tokio's millisecond timer before tonic's own guard, and early
/// enough that the answer reaches the client before its own deadline passes.
const DEADLINE_MARGIN_MIN: Duration = Duration::from_millis(2);
const DEADLINE_MARGIN_MAX: Duration = Duration::from_millis(200);

/// How much earlier than `timeout` the server answers TIMEOUT: a tenth of it, within
/// the bounds above, and never more than half of it.
fn deadline_margin(timeout: Duration) -> Duration {
    (timeout / 10)
        .clamp(DEADLINE_MARGIN_MIN, DEADLINE_MARGIN_MAX)
        .min(timeout / 2)
}

const GRPC_STATUS: &str = "grpc-status";
const GRPC_MESSAGE: &str = "grpc-message";
const GRPC_STATUS_DETAILS: &str = "grpc-status-details-bin";
const GRPC_TIMEOUT: &str = "grpc-timeout";

/// A service whose failures all carry a Concord code. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Coded<S> {
    /// The generated tonic server it wraps.
    inner: S,
    /// Where each call is counted and timed (None: not measured).
    metrics: Option<Arc<Metrics>>,
}

impl<S> Coded<S> {
    /// Wraps a generated tonic server, not measured (for tests of the coding alone).
    #[cfg(test)]
    pub fn new(inner: S) -> Self {
        Coded {
            inner,
            metrics: None,
        }
    }

    /// Wraps a generated tonic server, measuring every call into `metrics`.
    pub fn measured(inner: S, metrics: Arc<Metrics>) -> Self {
        Coded {
            inner,
            metrics: Some(metrics),
        }
    }
}

impl<S: NamedService> NamedService for Coded<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> tower_service::Service<http::Request<Body>> for Coded<S>
where
    S: tower_service::Service<
            http::Request<Body>,
            Response = http::Response<Body>,
            Error = Infallible,
        > + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let timeout = request
            .headers()
            .get(GRPC_TIMEOUT)
            .and_then(|v| parse_grpc_timeout(v.as_bytes()));
        let deadline = timeout.map(|t| tokio::time::Instant::now() + (t - deadline_margin(t)));
        let method = request.uri().path().to_owned();
        let measured = Call::start(&method, request.headers(), self.metrics.clone());
        // A traced call's handler runs in its span's context (`telemetry::trace`).
        let call = match measured.trace() {
            Some(cx) => {
                let _attached = cx.clone().attach();
                Either::Left(self.inner.call(request).with_context(cx))
            }
            None => Either::Right(self.inner.call(request)),
        };
        Box::pin(async move {
            let response = match (deadline, timeout) {
                (Some(deadline), Some(timeout)) => {
                    match tokio::time::timeout_at(deadline, call).await {
                        Ok(response) => response,
                        Err(_) => Ok(deadline_passed(&method, timeout)),
                    }
                }
                _ => call.await,
            };
            Ok(match response {
                Ok(response) => recode_response(response, method, measured),
                Err(never) => match never {},
            })
        })
    }
}

/// The answer to a call whose deadline passed before its handler answered.
fn deadline_passed(method: &str, timeout: Duration) -> http::Response<Body> {
    let status = error(
        ErrorCode::Timeout,
        format_args!(
            "{}: the call's deadline ({} ms) passed before the server answered; \
             a write may still be applied",
            crate::tree::path::clip(method),
            timeout.as_millis()
        ),
    );
    status_response(status)
}

/// A trailers-only response carrying `status`.
pub(super) fn status_response(status: Status) -> http::Response<Body> {
    let (parts, ()) = status.into_http::<()>().into_parts();
    http::Response::from_parts(parts, Body::empty())
}

/// The answer for a path no service serves (the router's fallback).
pub(super) async fn unknown_service(uri: http::Uri) -> http::Response<Body> {
    status_response(error(
        ErrorCode::Unimplemented,
        format_args!(
            "{} is not a method of this server",
            crate::tree::path::clip(uri.path())
        ),
    ))
}

/// The response with a Concord code in its status, wherever the status is; `call`
/// ends at that status (here for a trailers-only response, else in its body).
fn recode_response(
    mut response: http::Response<Body>,
    method: String,
    mut call: Call,
) -> http::Response<Body> {
    recode(response.headers_mut(), &method);
    if let Some(code) = code_in(response.headers()) {
        call.end(code);
    }
    response.map(|inner| {
        Body::new(CodedBody {
            inner,
            method,
            call,
        })
    })
}

/// Replaces a failure status without a Concord code, in response headers or
/// trailers, with one that has it. Leaves OK and coded statuses alone.
fn recode(headers: &mut HeaderMap, method: &str) {
    match headers.get(GRPC_STATUS) {
        None => return,
        Some(code) if code.as_bytes() == b"0" => return,
        Some(_) => {}
    }
    // Statuses with details come from code that built them on purpose (tonic's own
    // carry none); `from_header_map` also panics on bad base64 there.
    if headers.contains_key(ERROR_CODE_HEADER) || headers.contains_key(GRPC_STATUS_DETAILS) {
        return;
    }
    let Some(status) = Status::from_header_map(headers) else {
        return;
    };
    let coded = framework_status(&status, method);
    let mut fresh = HeaderMap::new();
    if coded.add_header(&mut fresh).is_err() {
        return;
    }
    headers.remove(GRPC_STATUS);
    headers.remove(GRPC_MESSAGE);
    headers.extend(fresh);
}

/// A response body whose trailers get a Concord code (`recode`), and that ends its
/// call there (or at an error, or at an end without trailers: UNKNOWN).
struct CodedBody {
    /// The body tonic built.
    inner: Body,
    /// The call's path, for messages.
    method: String,
    call: Call,
}

impl http_body::Body for CodedBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        let frame = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        Poll::Ready(match frame {
            Some(Ok(frame)) => Some(Ok(match frame.into_trailers() {
                Ok(mut trailers) => {
                    recode(&mut trailers, &this.method);
                    this.call.end(code_in(&trailers).unwrap_or("UNKNOWN"));
                    Frame::trailers(trailers)
                }
                Err(frame) => frame,
            })),
            Some(Err(e)) => {
                this.call.end("UNKNOWN");
                Some(Err(e))
            }
            // A body that ends with no trailers after a trailers-only response was
            // recorded at its headers already.
            None => {
                this.call.end("UNKNOWN");
                None
            }
        })
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The `grpc-timeout` header's duration: 1 to 8 digits and a unit (H, M, S, m, u, n),
/// as the gRPC HTTP/2 protocol writes it; None when malformed.
fn parse_grpc_timeout(value: &[u8]) -> Option<Duration> {
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
#[path = "framework_tests.rs"]
mod tests;
