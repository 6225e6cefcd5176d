//! Counts every call to Concord's services and times it, by method and Concord
//! code (`concord_rpc_requests_total`, `concord_rpc_duration_seconds`): a tower
//! layer outside `Coded`, so it sees the code the client sees.
//!
//! ```text
//!  request ──► Measured ──► Coded ──► Authenticated ──► service
//!                 │◄── response headers: a trailers-only failure ends the call here
//!                 │◄── body: the call ends at its trailers (a stream at its end),
//!                 │    or when the body is dropped unfinished (CANCELLED)
//!                 └─► metrics.rpc(method, code, elapsed), once per call
//! ```
//!
//! Labels are bounded: the method is one of the methods of `concord.v1`'s services
//! (read from the compiled descriptor at start), or `unknown`; the code is `OK`, a
//! Concord code's name, `CANCELLED` (the response was dropped before it ended), or
//! `UNKNOWN` for a status without a Concord code.
//!
//! What it must not do: change a request or a response, or cost more per call than
//! a clock read, a map lookup and two atomic adds.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{ready, Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use concord_proto::v1::ErrorCode;
use http::HeaderMap;
use http_body::{Frame, SizeHint};
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::Status;

use super::error::ERROR_CODE_HEADER;
use crate::telemetry::Metrics;

/// The method label of a path that is no method of Concord's services.
pub const UNKNOWN_METHOD: &str = "unknown";
/// The code label of a call that succeeded.
pub const OK: &str = "OK";
/// The code label of a call whose response was dropped before it ended (the client
/// went away, or the server stopped).
pub const CANCELLED: &str = "CANCELLED";

/// Every `/package.Service/Method` of `concord.v1`, as `&'static str` labels.
fn methods() -> &'static HashMap<String, &'static str> {
    static METHODS: OnceLock<HashMap<String, &'static str>> = OnceLock::new();
    METHODS.get_or_init(|| {
        use prost::Message;
        let Ok(set) = prost_types::FileDescriptorSet::decode(concord_proto::FILE_DESCRIPTOR_SET)
        else {
            return HashMap::new();
        };
        let mut methods = HashMap::new();
        for file in set.file.iter().filter(|f| f.package() == "concord.v1") {
            for service in &file.service {
                for method in &service.method {
                    let path = format!("/concord.v1.{}/{}", service.name(), method.name());
                    // Leaked once per method, at start: labels live as long as the
                    // process, and there are a few dozen.
                    let label: &'static str = Box::leak(path.clone().into_boxed_str());
                    methods.insert(path, label);
                }
            }
        }
        methods
    })
}

/// The label for a request's path.
pub fn method_label(path: &str) -> &'static str {
    methods().get(path).copied().unwrap_or(UNKNOWN_METHOD)
}

/// The Concord code of a status in `headers` (response headers or trailers), if
/// they carry one: `OK` for grpc-status 0.
fn code_in(headers: &HeaderMap) -> Option<&'static str> {
    let status = headers.get("grpc-status")?;
    if status.as_bytes() == b"0" {
        return Some(OK);
    }
    let code = headers
        .get(ERROR_CODE_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(ErrorCode::from_str_name)
        .map_or("UNKNOWN", |c| c.as_str_name());
    Some(code)
}

/// A service whose calls are counted and timed. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Measured<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S> Measured<S> {
    pub fn new(inner: S, metrics: Arc<Metrics>) -> Self {
        Measured { inner, metrics }
    }
}

impl<S: NamedService> NamedService for Measured<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> tower_service::Service<http::Request<Body>> for Measured<S>
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
        let call = Call {
            method: method_label(request.uri().path()),
            started: Instant::now(),
            metrics: Some(self.metrics.clone()),
        };
        let response = self.inner.call(request);
        Box::pin(async move {
            let mut call = call;
            let response = match response.await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            if let Some(code) = code_in(response.headers()) {
                call.end(code);
            }
            Ok(response.map(|inner| Body::new(MeasuredBody { inner, call })))
        })
    }
}

/// One call being measured; recorded once, when it ends (or as CANCELLED when
/// dropped before it ended: the client went away, or the server stopped).
struct Call {
    method: &'static str,
    started: Instant,
    /// Taken when recorded.
    metrics: Option<Arc<Metrics>>,
}

impl Call {
    fn end(&mut self, code: &'static str) {
        if let Some(metrics) = self.metrics.take() {
            metrics.rpc(self.method, code, self.started.elapsed());
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.end(CANCELLED);
    }
}

/// A response body that ends its call at the trailers.
struct MeasuredBody {
    inner: Body,
    call: Call,
}

impl http_body::Body for MeasuredBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        let frame = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        match &frame {
            Some(Ok(f)) => {
                if let Some(trailers) = f.trailers_ref() {
                    this.call.end(code_in(trailers).unwrap_or("UNKNOWN"));
                }
            }
            Some(Err(_)) => this.call.end("UNKNOWN"),
            // A body that ends with no trailers after a trailers-only response
            // was recorded at its headers already.
            None => this.call.end("UNKNOWN"),
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_come_from_the_descriptor_and_others_are_unknown() {
        assert_eq!(
            method_label("/concord.v1.Tree/Create"),
            "/concord.v1.Tree/Create"
        );
        assert_eq!(
            method_label("/concord.v1.Watch/Watch"),
            "/concord.v1.Watch/Watch"
        );
        assert_eq!(method_label("/concord.v1.Tree/Nope"), UNKNOWN_METHOD);
        assert_eq!(
            method_label("/concord.peer.v1.Forward/Submit"),
            UNKNOWN_METHOD
        );
        assert_eq!(method_label(&"/x".repeat(10_000)), UNKNOWN_METHOD);
        assert!(methods().len() > 20, "{:?}", methods().keys());
    }

    #[test]
    fn codes_are_read_from_the_status_headers() {
        let mut h = HeaderMap::new();
        assert_eq!(code_in(&h), None, "no status yet: a body follows");
        h.insert("grpc-status", "0".parse().unwrap());
        assert_eq!(code_in(&h), Some("OK"));
        h.insert("grpc-status", "5".parse().unwrap());
        assert_eq!(code_in(&h), Some("UNKNOWN"), "no Concord code");
        h.insert(ERROR_CODE_HEADER, "NO_NODE".parse().unwrap());
        assert_eq!(code_in(&h), Some("NO_NODE"));
        h.insert(ERROR_CODE_HEADER, "MADE_UP".parse().unwrap());
        assert_eq!(code_in(&h), Some("UNKNOWN"), "never an unbounded label");
    }
}
