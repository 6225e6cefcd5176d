//! Traces from real servers (`--otlp-endpoint`): a test collector (a tonic server of
//! OTLP's TraceService) receives the spans of a write sent with the Rust SDK inside
//! a sampled trace: the RPC's span is a child of the client's span, and the write
//! path's spans (api, propose, fsync, quorum, apply, reply) are children of it,
//! each naming the write's zxid. A write through a follower puts the leader's
//! spans under the follower's `forward` span. An unsampled trace, and calls with no
//! trace at sample ratio 0, export nothing.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use concord_tests::{eventually, Ensemble, Server, ServerOptions};
use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;

/// Long enough for the exporter's batch (sent every 5 s by default).
const WAIT: Duration = Duration::from_secs(30);
/// The write path's spans, children of the RPC's span on the server that leads.
const WRITE_PATH: [&str; 6] = ["api", "propose", "fsync", "quorum", "apply", "reply"];

/// A span as the collector received it, with the server that sent it.
#[derive(Clone, Debug)]
struct Received {
    instance: String,
    trace_id: Vec<u8>,
    span_id: Vec<u8>,
    parent: Vec<u8>,
    name: String,
    kind: i32,
    zxid: Option<String>,
}

/// The collector: keeps every span it is sent.
#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<Received>>>,
}

fn string_attr(attrs: &[KeyValue], key: &str) -> Option<String> {
    let kv = attrs.iter().find(|kv| kv.key == key)?;
    match kv.value.as_ref()?.value.as_ref()? {
        Value::StringValue(s) => Some(s.clone()),
        _ => None,
    }
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for resource in request.into_inner().resource_spans {
            let attrs = resource.resource.map(|r| r.attributes).unwrap_or_default();
            assert_eq!(
                string_attr(&attrs, "service.name").as_deref(),
                Some("concord")
            );
            let instance = string_attr(&attrs, "service.instance.id").unwrap();
            for span in resource.scope_spans.into_iter().flat_map(|s| s.spans) {
                spans.push(Received {
                    instance: instance.clone(),
                    zxid: string_attr(&span.attributes, "concord.zxid"),
                    trace_id: span.trace_id,
                    span_id: span.span_id,
                    parent: span.parent_span_id,
                    name: span.name,
                    kind: span.kind,
                });
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl Collector {
    /// Serves on a free loopback port (until the test's runtime ends).
    async fn start() -> (Collector, SocketAddr) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let collector = Collector::default();
        let service = TraceServiceServer::new(collector.clone());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        (collector, addr)
    }

    fn spans(&self) -> Vec<Received> {
        self.spans.lock().unwrap().clone()
    }

    /// The spans of trace `trace`, once one of each name in `names` is there.
    async fn trace(&self, trace: TraceId, names: &[&str]) -> Vec<Received> {
        let id = trace.to_bytes().to_vec();
        eventually("the trace's spans at the collector", WAIT, || {
            let spans: Vec<Received> = self
                .spans()
                .into_iter()
                .filter(|s| s.trace_id == id)
                .collect();
            let done = names.iter().all(|n| spans.iter().any(|s| s.name == *n));
            std::future::ready(done.then_some(spans))
        })
        .await
    }
}

/// Flags that export to the collector at `addr`, sampling no trace a caller did not
/// start.
fn traced(addr: SocketAddr) -> ServerOptions {
    ServerOptions {
        extra: vec![
            "--otlp-endpoint".into(),
            format!("http://{addr}"),
            "--otlp-sample-ratio".into(),
            "0".into(),
        ],
        ..ServerOptions::default()
    }
}

/// A client's span context in a fresh trace (`sampled` or not).
fn client_span(seed: u8, sampled: bool) -> SpanContext {
    let mut trace = [0u8; 16];
    trace[0] = 0x7c;
    trace[15] = seed;
    let flags = if sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    SpanContext::new(
        TraceId::from_bytes(trace),
        SpanId::from_bytes([0x5a, 0, 0, 0, 0, 0, 0, seed]),
        flags,
        true,
        TraceState::default(),
    )
}

/// Creates `path` with the SDK inside the client span `parent`; its zxid.
async fn create_in(client: &concord::Client, path: &str, parent: &SpanContext) -> u64 {
    let cx = opentelemetry::Context::new().with_remote_span_context(parent.clone());
    let created = client
        .create(path, "x", Default::default())
        .with_context(cx);
    created.await.unwrap().zxid
}

/// The one span named `name` in `spans`.
fn named<'a>(spans: &'a [Received], name: &str) -> &'a Received {
    let found: Vec<&Received> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one {name} span in {spans:#?}");
    found[0]
}

fn names(spans: &[Received]) -> BTreeSet<String> {
    spans.iter().map(|s| s.name.clone()).collect()
}

/// Checks the write path's spans are children of `parent` on server `instance`,
/// each naming `zxid`.
fn check_write_path(spans: &[Received], parent: &[u8], instance: &str, zxid: u64) {
    for name in WRITE_PATH.iter().filter(|&&n| n != "api") {
        let span = named(spans, name);
        assert_eq!(span.parent, parent, "{name} is a child of {parent:?}");
        assert_eq!(
            span.instance, instance,
            "{name} comes from server {instance}"
        );
        assert_eq!(
            span.zxid,
            Some(format!("{zxid:#x}")),
            "{name} names the zxid"
        );
    }
}

#[tokio::test]
async fn t49_a_write_in_a_sampled_trace_arrives_with_the_clients_parent() {
    let (collector, addr) = Collector::start().await;
    let server = Server::start(traced(addr));
    let client = server.sdk().await;

    // Not traced: no context, and an unsampled one (ratio 0 samples no new trace).
    client
        .create("/untraced", "x", Default::default())
        .await
        .unwrap();
    create_in(&client, "/unsampled", &client_span(1, false)).await;

    let sampled = client_span(2, true);
    let zxid = create_in(&client, "/traced", &sampled).await;
    let spans = collector.trace(sampled.trace_id(), &WRITE_PATH).await;

    let rpc = named(&spans, "concord.v1.Tree/Create");
    assert_eq!(
        rpc.parent,
        sampled.span_id().to_bytes(),
        "the client's span is the parent"
    );
    assert_eq!(rpc.kind, SpanKind::Server as i32);
    assert_eq!(rpc.instance, "1");
    check_write_path(&spans, &rpc.span_id, "1", zxid);
    let api = named(&spans, "api");
    assert_eq!(api.parent, rpc.span_id);
    assert_eq!(api.zxid, Some(format!("{:#x}", zxid)));
    assert_eq!(
        names(&spans),
        names(&spans)
            .into_iter()
            .filter(|n| n == &rpc.name || WRITE_PATH.contains(&n.as_str()))
            .collect(),
        "nothing else in the trace"
    );

    // Every span exported belongs to the sampled trace: the untraced calls (the
    // creates, and the SDK's own) sent none. (By now the batch with the sampled
    // trace has gone out, and the calls before it were made earlier.)
    let others: Vec<Received> = collector
        .spans()
        .into_iter()
        .filter(|s| s.trace_id != sampled.trace_id().to_bytes())
        .collect();
    assert!(others.is_empty(), "spans of unsampled traces: {others:#?}");
}

#[tokio::test]
async fn t49_a_write_through_a_follower_goes_under_its_forward_span() {
    let (collector, addr) = Collector::start().await;
    let ensemble = Ensemble::start(3, traced(addr));
    let leader = ensemble.leader(WAIT).await;
    let follower = (leader + 1) % 3;
    let client = ensemble.servers[follower].sdk().await;
    let sampled = client_span(3, true);
    let zxid = create_in(&client, "/forwarded", &sampled).await;
    let mut names = vec!["concord.v1.Tree/Create", "forward"];
    names.extend(WRITE_PATH);
    let spans = collector.trace(sampled.trace_id(), &names).await;
    let follower_id = (follower + 1).to_string();
    let leader_id = (leader + 1).to_string();
    let rpc = named(&spans, "concord.v1.Tree/Create");
    assert_eq!(rpc.parent, sampled.span_id().to_bytes());
    assert_eq!(rpc.instance, follower_id);
    let api = named(&spans, "api");
    assert_eq!(
        (api.parent.as_slice(), api.instance.as_str()),
        (rpc.span_id.as_slice(), follower_id.as_str())
    );
    assert_eq!(api.zxid, Some(format!("{:#x}", zxid)));
    let forward = named(&spans, "forward");
    assert_eq!(forward.parent, rpc.span_id);
    assert_eq!(forward.zxid, Some(format!("{:#x}", zxid)));
    assert_eq!(forward.instance, follower_id);
    assert_eq!(forward.kind, SpanKind::Client as i32);
    check_write_path(&spans, &forward.span_id, &leader_id, zxid);
}
