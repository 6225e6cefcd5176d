//! Traces to a collector over TLS (`--otlp-endpoint https://...` with
//! `--otlp-ca-file`, and `--otlp-cert-file`/`--otlp-key-file` for one that asks
//! for a client certificate): a test collector (OTLP's TraceService on tonic, with
//! certificates from `concord certs`) receives a real server's spans; the settings
//! that cannot work are refused at start with exit status 2, and an unreadable CA
//! file with 1, naming it.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use concord_tests::{eventually, start_refused, Certs, Server, ServerOptions};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

/// Long enough for the exporter's batch (sent every 5 s by default).
const WAIT: Duration = Duration::from_secs(30);

/// The collector: keeps the names of the spans it is sent.
#[derive(Clone, Default)]
struct Collector {
    names: Arc<Mutex<Vec<String>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut names = self.names.lock().unwrap();
        for resource in request.into_inner().resource_spans {
            for span in resource.scope_spans.into_iter().flat_map(|s| s.spans) {
                names.push(span.name);
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl Collector {
    /// Serves TLS with member 1's client-port certificate (SAN 127.0.0.1) on a free
    /// loopback port, requiring a client certificate from the CA (until the test's
    /// runtime ends).
    async fn start_tls(certs: &Certs) -> (Collector, SocketAddr) {
        let read = |n: &str| std::fs::read(certs.path(n)).unwrap();
        let tls = ServerTlsConfig::new()
            .identity(Identity::from_pem(
                read("server-1.pem"),
                read("server-1-key.pem"),
            ))
            .client_ca_root(Certificate::from_pem(read("ca.pem")));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let collector = Collector::default();
        let service = TraceServiceServer::new(collector.clone());
        tokio::spawn(
            tonic::transport::Server::builder()
                .tls_config(tls)
                .unwrap()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        (collector, addr)
    }

    fn names(&self) -> Vec<String> {
        self.names.lock().unwrap().clone()
    }
}

fn flag(certs: &Certs, name: &str, file: &str) -> [String; 2] {
    [name.to_owned(), certs.path(file).display().to_string()]
}

#[tokio::test]
async fn spans_reach_a_collector_over_mtls() {
    let certs = Certs::generate(1, &["admin"]);
    let (collector, addr) = Collector::start_tls(&certs).await;
    let mut extra = vec![
        "--otlp-endpoint".to_owned(),
        format!("https://{addr}"),
        "--otlp-sample-ratio".to_owned(),
        "1".to_owned(),
    ];
    extra.extend(flag(&certs, "--otlp-ca-file", "ca.pem"));
    extra.extend(flag(&certs, "--otlp-cert-file", "admin.pem"));
    extra.extend(flag(&certs, "--otlp-key-file", "admin-key.pem"));
    let server = Server::start(ServerOptions {
        extra,
        ..ServerOptions::default()
    });
    let client = server.sdk().await;
    client
        .create("/traced", "x", Default::default())
        .await
        .unwrap();
    eventually("the Create's span at the collector", WAIT, || {
        let names = collector.names();
        let seen = names.iter().any(|n| n == "concord.v1.Tree/Create");
        std::future::ready(seen.then_some(()))
    })
    .await;
}

#[tokio::test]
async fn settings_that_cannot_work_are_refused_at_start() {
    let certs = Certs::generate(1, &["admin"]);
    let https = [
        "--otlp-endpoint".to_owned(),
        "https://127.0.0.1:4317".into(),
    ];
    let http = ["--otlp-endpoint".to_owned(), "http://127.0.0.1:4317".into()];
    let ca = flag(&certs, "--otlp-ca-file", "ca.pem");
    let cert = flag(&certs, "--otlp-cert-file", "admin.pem");
    let cases: [(Vec<String>, &str); 3] = [
        (https.to_vec(), "needs otlp_ca_file"),
        (
            [&http[..], &ca[..]].concat(),
            "need an https:// otlp_endpoint",
        ),
        ([&https[..], &ca[..], &cert[..]].concat(), "go together"),
    ];
    for (flags, says) in cases {
        let (code, stderr) = start_refused(&flags).await;
        assert_eq!(code, Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(says), "{flags:?}: {stderr}");
    }
    let missing = certs.path("nowhere.pem").display().to_string();
    let flags = [&https[..], &["--otlp-ca-file".to_owned(), missing.clone()]].concat();
    let (code, stderr) = start_refused(&flags).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains(&missing), "{stderr}");
}
