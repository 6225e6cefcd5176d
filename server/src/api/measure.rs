//! Counts every call to Concord's services and times it, by method and Concord
//! code (`concord_rpc_requests_total`, `concord_rpc_duration_seconds`). `Coded`
//! (framework.rs), which every call goes through and which gives every failure its
//! code, ends each call's `Call` with the code the client sees:
//!
//! ```text
//!  request ──► Coded: Call::start ──► Authenticated ──► service
//!                │◄── response headers: a trailers-only failure ends the call here
//!                │◄── body (CodedBody): the call ends at its trailers (a stream at
//!                │    its end), or when the body is dropped unfinished (CANCELLED)
//!                └─► metrics.rpc(method, code, elapsed), once per call
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
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use concord_proto::v1::ErrorCode;
use http::HeaderMap;

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
pub(super) fn code_in(headers: &HeaderMap) -> Option<&'static str> {
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

/// One call being measured; recorded once, when it ends (or as CANCELLED when
/// dropped before it ended: the client went away, or the server stopped).
pub(super) struct Call {
    method: &'static str,
    started: Instant,
    /// Taken when recorded; None: not measured.
    metrics: Option<Arc<Metrics>>,
    /// The context holding the call's span, ended with it (None: traces are off).
    trace: Option<opentelemetry::Context>,
}

impl Call {
    /// A call to `path` with request `headers` begins now (measured into `metrics`,
    /// if given; traced if traces are exported, continuing the caller's trace).
    pub(super) fn start(path: &str, headers: &HeaderMap, metrics: Option<Arc<Metrics>>) -> Call {
        Call {
            method: method_label(path),
            started: Instant::now(),
            metrics,
            trace: crate::telemetry::trace::rpc_span(path, headers),
        }
    }

    /// The context the call's handler runs in (None: traces are off).
    pub(super) fn trace(&self) -> Option<opentelemetry::Context> {
        self.trace.clone()
    }

    /// The call ended with `code` (only the first end counts).
    pub(super) fn end(&mut self, code: &'static str) {
        if let Some(metrics) = self.metrics.take() {
            metrics.rpc(self.method, code, self.started.elapsed());
        }
        if let Some(cx) = self.trace.take() {
            crate::telemetry::trace::end_rpc(&cx, code);
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.end(CANCELLED);
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
