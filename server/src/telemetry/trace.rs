//! OpenTelemetry traces, exported over OTLP/gRPC when `otlp_endpoint` is set: a span
//! per RPC, continuing the caller's W3C `traceparent`, and child spans along the
//! write path with the write's zxid (docs/operations.md, "Traces").
//!
//! ```text
//!  client ─traceparent─▶ rpc span (api::measure::Call) ─┬─ api      until the write is handed on
//!                                                       ├─ forward  a follower hands it to its leader
//!  leader's pipeline, for a write in a sampled trace: ──┼─ propose  until the core gives it a zxid
//!                                                       ├─ fsync    its batch made durable here
//!                                                       ├─ quorum   until a quorum has it (committed)
//!                                                       ├─ apply    applied to the tree
//!                                                       └─ reply    events published, caller answered
//! ```
//!
//! The collector is dialled in plain text (`http://`), or over TLS (`https://`)
//! trusting `otlp_ca_file` and presenting `otlp_cert_file` if set; the files are
//! read once, at start.
//!
//! A forwarded write carries the follower's `forward` span as its `traceparent`
//! (`SubmitRequest.traceparent`), so the leader's spans sit under it.
//!
//! Off (no endpoint), nothing is created: `tracer()` is None and every call here
//! returns at once. A write whose trace is not sampled carries nothing. Spans wait
//! for export in the SDK's batch queue (`OTEL_BSP_MAX_QUEUE_SIZE`, 2048 by default:
//! a full queue drops new spans, it never blocks a write); every span here has a
//! fixed, small set of attributes, so the queue is bounded in bytes too.
//!
//! What it must not do: slow a call that is not traced, or fail one because the
//! collector is away.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;

/// The tracer, once `init` has run with an endpoint.
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// How long an export may take before it is given up (the spans are dropped).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the exit waits for the last spans to go out.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(3);

/// The W3C trace-context header (a gRPC metadata key).
const TRACEPARENT: &str = "traceparent";

/// The running exporter; `shutdown` sends what is queued.
pub struct Tracing {
    provider: SdkTracerProvider,
}

impl Tracing {
    /// Exports what is queued and stops (blocks up to `SHUTDOWN_TIMEOUT`: call it off
    /// the runtime's worker threads, or at exit).
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT) {
            tracing::warn!(error = %e, "traces: the last spans may not have been exported");
        }
    }
}

/// TLS to the collector (an `https://` endpoint): PEM files.
#[derive(Clone, Debug)]
pub struct CollectorTls {
    /// CA certificates the collector's certificate must be signed by.
    pub ca_file: PathBuf,
    /// This server's client certificate and its key, for a collector that asks
    /// for one.
    pub identity: Option<(PathBuf, PathBuf)>,
}

impl CollectorTls {
    /// tonic's client TLS settings, from the files (an error names the file).
    fn client_config(&self) -> Result<tonic::transport::ClientTlsConfig, String> {
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
        };
        let ca = tonic::transport::Certificate::from_pem(read(&self.ca_file)?);
        let mut config = tonic::transport::ClientTlsConfig::new().ca_certificate(ca);
        if let Some((cert, key)) = &self.identity {
            config = config.identity(tonic::transport::Identity::from_pem(
                read(cert)?,
                read(key)?,
            ));
        }
        Ok(config)
    }
}

/// Starts exporting spans to `endpoint` (an `http://host:port` OTLP/gRPC collector),
/// sampling `ratio` of the traces no caller started (a caller's sampled trace is
/// always continued, an unsampled one never). Must run inside the tokio runtime
/// (the exporter's channel lives there). A second call changes nothing.
pub fn init(endpoint: &str, ratio: f64, server_id: u64) -> Result<Tracing, String> {
    init_with_tls(endpoint, None, ratio, server_id)
}

/// As `init`, to an `https://host:port` collector when `tls` is given.
pub fn init_with_tls(
    endpoint: &str,
    tls: Option<&CollectorTls>,
    ratio: f64,
    server_id: u64,
) -> Result<Tracing, String> {
    let builder = opentelemetry_otlp::SpanExporter::builder().with_tonic();
    let builder = match tls {
        None => builder.with_endpoint(endpoint).with_timeout(EXPORT_TIMEOUT),
        // The exporter's own TLS needs a feature of its own; a channel of ours
        // uses tonic's (ring, as everywhere here).
        Some(tls) => {
            let channel = tonic::transport::Endpoint::from_shared(endpoint.to_owned())
                .map_err(|e| format!("bad OTLP endpoint {endpoint}: {e}"))?
                .tls_config(tls.client_config()?)
                .map_err(|e| format!("cannot use TLS to {endpoint}: {e}"))?
                .timeout(EXPORT_TIMEOUT)
                .connect_lazy();
            builder.with_channel(channel)
        }
    };
    let exporter = builder
        .build()
        .map_err(|e| format!("cannot build the OTLP exporter for {endpoint}: {e}"))?;
    let resource = Resource::builder()
        .with_service_name("concord")
        .with_attribute(KeyValue::new("service.instance.id", server_id.to_string()))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            ratio,
        ))))
        .with_resource(resource)
        .build();
    let _ = TRACER.set(provider.tracer("concord"));
    Ok(Tracing { provider })
}

/// The tracer, if traces are exported.
fn tracer() -> Option<&'static SdkTracer> {
    TRACER.get()
}

/// When the RPC began, kept in its context for the `api` span.
#[derive(Clone, Copy, Debug)]
struct RpcStarted(SystemTime);

/// gRPC request headers as the propagator reads them.
struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// One string as the propagator reads it (a forwarded write's `traceparent`).
struct Traceparent<'a>(&'a str);

impl Extractor for Traceparent<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        (key == TRACEPARENT).then_some(self.0)
    }

    fn keys(&self) -> Vec<&str> {
        vec![TRACEPARENT]
    }
}

/// The span of an RPC to `path` (`/package.Service/Method`), a child of the trace
/// context in `headers` if they carry one; None when traces are off. The context
/// returned holds it: handlers run in it (`FutureExt::with_context`).
pub fn rpc_span(path: &str, headers: &http::HeaderMap) -> Option<Context> {
    let tracer = tracer()?;
    let parent = TraceContextPropagator::new().extract(&Headers(headers));
    let name = path.trim_start_matches('/');
    let (service, method) = name.split_once('/').unwrap_or((name, ""));
    let span = tracer
        .span_builder(name.to_owned())
        .with_kind(SpanKind::Server)
        .with_attributes([
            KeyValue::new("rpc.system", "grpc"),
            KeyValue::new("rpc.service", service.to_owned()),
            KeyValue::new("rpc.method", method.to_owned()),
        ])
        .start_with_context(tracer, &parent);
    Some(
        parent
            .with_span(span)
            .with_value(RpcStarted(SystemTime::now())),
    )
}

/// Ends an RPC's span with the Concord code the client sees (`OK`, or a failure).
pub fn end_rpc(cx: &Context, code: &'static str) {
    let span = cx.span();
    span.set_attribute(KeyValue::new("concord.code", code));
    if code != "OK" {
        span.set_status(Status::error(code));
    }
    span.end();
}

/// What a write in a sampled trace carries along the write path: the span its own
/// spans are children of, and the times they start at.
#[derive(Clone, Debug)]
pub struct WriteTrace {
    parent: SpanContext,
    /// When its RPC began, until the `api` span is recorded (None: recorded, or the
    /// write came from another server).
    rpc_started: Option<SystemTime>,
    /// When it was handed to the replica (the `propose` span's start).
    handed_on: SystemTime,
}

impl WriteTrace {
    /// The trace of a write whose spans go under `cx`'s span, if traces are
    /// exported and that span is in a sampled trace.
    fn under(cx: &Context) -> Option<WriteTrace> {
        tracer()?;
        let span = cx.span();
        let parent = span.span_context();
        if !parent.is_valid() || !parent.is_sampled() {
            return None;
        }
        Some(WriteTrace {
            parent: parent.clone(),
            rpc_started: cx.get::<RpcStarted>().map(|s| s.0),
            handed_on: SystemTime::now(),
        })
    }

    /// The trace of a write made now, in the current context (its RPC's).
    pub fn current() -> Option<WriteTrace> {
        WriteTrace::under(&Context::current())
    }

    /// The trace of a write another server forwarded with `traceparent` (W3C).
    pub fn from_traceparent(traceparent: &str) -> Option<WriteTrace> {
        WriteTrace::under(&TraceContextPropagator::new().extract(&Traceparent(traceparent)))
    }

    /// A context whose span is this write's parent, for its child spans.
    fn parent_context(&self) -> Context {
        Context::new().with_remote_span_context(self.parent.clone())
    }

    /// The W3C `traceparent` naming this write's parent span.
    pub fn traceparent(&self) -> String {
        let p = &self.parent;
        format!(
            "00-{:032x}-{:016x}-{:02x}",
            p.trace_id(),
            p.span_id(),
            p.trace_flags().to_u8()
        )
    }

    /// The write is handed to the replica now: starts the `propose` span's clock,
    /// and returns the `api` span (from the RPC's start, the first time), to be
    /// recorded once the write's zxid is known.
    pub fn handed_on(&mut self) -> Option<ApiSpan> {
        let now = SystemTime::now();
        self.handed_on = now;
        let started = self.rpc_started.take()?;
        Some(ApiSpan {
            trace: self.clone(),
            started,
            ended: now,
        })
    }

    /// The `api` span went with an earlier attempt of this write: later attempts
    /// record none.
    pub fn api_recorded(&mut self) {
        self.rpc_started = None;
    }

    /// When the write was handed to the replica.
    pub fn handed_on_at(&self) -> SystemTime {
        self.handed_on
    }

    /// Records a finished child span `name` from `start` to `end`, naming `zxid`.
    pub fn record(
        &self,
        name: &'static str,
        start: SystemTime,
        end: SystemTime,
        zxid: Option<u64>,
    ) {
        let Some(tracer) = tracer() else { return };
        let mut builder = tracer
            .span_builder(name)
            .with_kind(SpanKind::Internal)
            .with_start_time(start);
        if let Some(zxid) = zxid {
            builder = builder.with_attributes([zxid_attribute(zxid)]);
        }
        builder
            .start_with_context(tracer, &self.parent_context())
            .end_with_timestamp(end);
    }

    /// Starts a child span `name` that ends when the returned `Child` does; the
    /// write's trace continues under it (`Child::trace`).
    pub fn child(&self, name: &'static str) -> Option<Child> {
        let tracer = tracer()?;
        let span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Client)
            .start_with_context(tracer, &self.parent_context());
        let trace = WriteTrace {
            parent: span.span_context().clone(),
            rpc_started: None,
            handed_on: SystemTime::now(),
        };
        Some(Child { span, trace })
    }
}

/// A span's `concord.zxid`: the write's zxid in hex, as the logs print it.
fn zxid_attribute(zxid: u64) -> KeyValue {
    KeyValue::new("concord.zxid", format!("{zxid:#x}"))
}

/// A write's `api` span, ended and waiting for the write's outcome.
pub struct ApiSpan {
    trace: WriteTrace,
    started: SystemTime,
    ended: SystemTime,
}

impl ApiSpan {
    /// Records it, naming the write's `zxid` if it committed.
    pub fn record(self, zxid: Option<u64>) {
        self.trace.record("api", self.started, self.ended, zxid);
    }
}

/// A span in progress under a write's trace (a forward to the leader).
pub struct Child {
    span: opentelemetry_sdk::trace::Span,
    trace: WriteTrace,
}

impl Child {
    /// The write's trace with this span as the parent.
    pub fn trace(&self) -> WriteTrace {
        self.trace.clone()
    }

    /// Ends the span, naming the write's zxid, or as failed with why.
    pub fn end(mut self, outcome: Result<u64, String>) {
        match outcome {
            Ok(zxid) => self.span.set_attribute(zxid_attribute(zxid)),
            Err(why) => self.span.set_status(Status::error(why)),
        }
        self.span.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanId, TraceFlags, TraceId, TraceState};

    #[test]
    fn a_traceparent_names_the_parent_span_and_its_flags() {
        let parent = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        );
        let trace = WriteTrace {
            parent,
            rpc_started: None,
            handed_on: SystemTime::now(),
        };
        assert_eq!(
            trace.traceparent(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
    }

    #[test]
    fn nothing_is_traced_while_traces_are_off() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            TRACEPARENT,
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                .parse()
                .unwrap(),
        );
        assert!(rpc_span("/concord.v1.Tree/Create", &headers).is_none());
        assert!(WriteTrace::current().is_none());
        assert!(WriteTrace::from_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        )
        .is_none());
    }
}
