//! The health port (`--health-addr`) and the metrics port over TLS, on real
//! servers: the health port answers `/healthz` and `/readyz` and nothing else (404
//! for `/metrics`), in plain text, bound to any address without `--insecure`; the
//! metrics port binds beyond loopback in plain text only with `--insecure`, and
//! whenever the client port serves TLS it serves HTTPS with the client port's
//! certificate, to clients with a certificate the client port would take. (The
//! tests dial 127.0.0.1 only; an address "beyond loopback" is 0.0.0.0.)

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use concord_tests::{eventually, free_addr, http_get, start_refused, Certs, Server, ServerOptions};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls_pki_types::pem::PemObject;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(20);
const CALL: Duration = Duration::from_secs(5);

fn server(extra: Vec<String>) -> Server {
    Server::start(ServerOptions {
        extra,
        ..ServerOptions::default()
    })
}

/// `addr` on every interface (0.0.0.0), same port.
fn anywhere(addr: SocketAddr) -> String {
    format!("0.0.0.0:{}", addr.port())
}

/// The status of GET `path`, once the port answers at all.
async fn status(addr: SocketAddr, path: &str) -> (u16, String) {
    eventually(&format!("an answer to {path} at {addr}"), WAIT, || async {
        http_get(addr, path, CALL).await
    })
    .await
}

#[tokio::test]
async fn the_health_port_serves_health_and_readiness_only() {
    let health = free_addr();
    let metrics = free_addr();
    let _s = server(vec![
        "--health-addr".into(),
        anywhere(health),
        "--metrics-addr".into(),
        metrics.to_string(),
    ]);
    let local = SocketAddr::from(([127, 0, 0, 1], health.port()));
    assert_eq!(status(local, "/healthz").await, (200, "ok\n".into()));
    eventually("ready on the health port", WAIT, || async {
        (http_get(local, "/readyz", CALL).await?.0 == 200).then_some(())
    })
    .await;
    for path in ["/metrics", "/", "/metrics?x=1", "/healthz/x", "/debug"] {
        let (code, body) = status(local, path).await;
        assert_eq!(code, 404, "{path}: {body}");
        assert!(!body.contains("concord_"), "{path}: {body}");
    }
    // The metrics port still serves everything.
    let (code, body) = status(metrics, "/metrics").await;
    assert_eq!(code, 200);
    assert!(body.contains("concord_"), "{body}");
}

#[tokio::test]
async fn plain_metrics_beyond_loopback_still_need_insecure() {
    let flags = ["--metrics-addr".to_owned(), anywhere(free_addr())];
    let (code, stderr) = start_refused(&flags).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("refusing to serve plain text"), "{stderr}");
}

/// A rustls client for HTTP/1.1 trusting `dir`'s CA, presenting `client`'s
/// certificate if given.
fn https_client(dir: &Path, client: Option<&str>) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(dir.join("ca.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let mut config = match client {
        Some(name) => {
            let chain = CertificateDer::pem_file_iter(dir.join(format!("{name}.pem")))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let key = PrivateKeyDer::from_pem_file(dir.join(format!("{name}-key.pem"))).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    // As curl and Prometheus offer it.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// GET `path` over HTTPS: the status line and the body, or None if the handshake
/// or the exchange failed.
async fn https_get(
    addr: SocketAddr,
    connector: &tokio_rustls::TlsConnector,
    path: &str,
) -> Option<(String, String)> {
    let exchange = async {
        let tcp = TcpStream::connect(addr).await.ok()?;
        let name = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
        let mut tls = connector.connect(name, tcp).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
        tls.write_all(request.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        tls.read_to_end(&mut raw).await.ok()?;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n")?;
        Some((head.lines().next()?.to_owned(), body.to_owned()))
    };
    tokio::time::timeout(CALL, exchange).await.ok().flatten()
}

#[tokio::test]
async fn with_tls_on_the_client_port_the_metrics_port_serves_https_anywhere() {
    let certs = Certs::generate(1, &["admin"]);
    let metrics = free_addr();
    let health = free_addr();
    let mut flags = certs.server_flags(1, true);
    flags.extend([
        "--metrics-addr".into(),
        anywhere(metrics),
        "--health-addr".into(),
        health.to_string(),
    ]);
    let _s = server(flags);
    let local = SocketAddr::from(([127, 0, 0, 1], metrics.port()));
    let admin = https_client(certs.dir(), Some("admin"));
    let (line, body) = eventually("an HTTPS scrape", WAIT, || async {
        https_get(local, &admin, "/metrics").await
    })
    .await;
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    assert!(body.contains("concord_"), "{body}");
    let (line, _) = https_get(local, &admin, "/healthz").await.unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    // No client certificate (the client port requires one): refused.
    let anonymous = https_client(certs.dir(), None);
    assert_eq!(https_get(local, &anonymous, "/metrics").await, None);
    // Plain HTTP gets no HTTP answer.
    assert_eq!(http_get(local, "/metrics", CALL).await, None);
    // The health port stays plain text.
    assert_eq!(status(health, "/healthz").await.0, 200);
    assert_eq!(status(health, "/metrics").await.0, 404);
}
