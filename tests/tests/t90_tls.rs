//! TLS with real certificates (`concord certs`) and real processes: the SDK,
//! concordctl and grpcurl over TLS and mTLS; handshakes refused without a client
//! certificate, with one from another CA, with an expired one; a silent handshake
//! closed after the timeout; certificates rotated (on file change and on SIGHUP)
//! without dropping open connections or sessions; an ensemble whose peer links are
//! mTLS.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use concord::{Client, ConnectOptions, ConnectionState, CreateOptions, ReadOptions, WatchOptions};
use concord_server::security::certs::{self, Ca, Leaf};
use concord_tests::{
    bin, eventually, workspace_dir, Background, Certs, Ensemble, Server, ServerOptions,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls_pki_types::pem::PemObject;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest any wait here.
const WAIT: Duration = Duration::from_secs(20);

fn tls_server(certs: &Certs, mtls: bool, more: &[&str]) -> Server {
    let mut extra = certs.server_flags(1, mtls);
    extra.extend(more.iter().map(|s| (*s).to_owned()));
    let options = ServerOptions {
        extra,
        ..ServerOptions::default()
    };
    Server::start(options)
}

async fn sdk(
    server: &Server,
    certs: &Certs,
    client: Option<&str>,
) -> Result<Client, concord::Error> {
    let options = ConnectOptions {
        tls: Some(certs.tls_options(client)),
    };
    Client::connect_with(server.addr.to_string(), &options).await
}

/// A rustls client trusting `ca`, presenting `identity` (certificate and key PEM
/// files) if given.
fn raw_client(ca: &Path, identity: Option<(PathBuf, PathBuf)>) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let mut config = match identity {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let key = PrivateKeyDer::from_pem_file(key).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

fn loopback() -> ServerName<'static> {
    ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into())
}

/// Whether the server refuses `connector`'s handshake: it fails, or (TLS 1.3, where
/// the client finishes first) the connection is closed before any byte comes back.
async fn refused(server: &impl Addressed, connector: tokio_rustls::TlsConnector) -> bool {
    let tcp = TcpStream::connect(server.addr()).await.unwrap();
    match connector.connect(loopback(), tcp).await {
        Err(_) => true,
        Ok(mut tls) => {
            // An HTTP/2 preface: an accepted connection answers with SETTINGS.
            let _ = tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await;
            let _ = tls.flush().await;
            let mut b = [0u8; 1];
            matches!(
                tokio::time::timeout(WAIT, tls.read(&mut b)).await,
                Ok(Ok(0) | Err(_))
            )
        }
    }
}

/// The leaf certificate a new connection to `server` is shown.
async fn leaf_seen(server: &Server, connector: &tokio_rustls::TlsConnector) -> Vec<u8> {
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let tls = connector.connect(loopback(), tcp).await.unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

fn der_of(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

/// Replaces member 1's client-port certificate and key with new ones from the same
/// CA (each file renamed into place); returns the new certificate, DER.
fn rotate_server_cert(certs: &Certs) -> Vec<u8> {
    let issued = Ca::load(certs.dir())
        .unwrap()
        .issue(&certs::server_leaf(1))
        .unwrap();
    for (name, text) in [
        ("server-1-key.pem", &issued.key_pem),
        ("server-1.pem", &issued.cert_pem),
    ] {
        let tmp = certs.path(&format!("{name}.new"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, certs.path(name)).unwrap();
    }
    der_of(&issued.cert_pem)
}

async fn concordctl(
    server: &Server,
    certs: &Certs,
    client: &str,
    args: &[&str],
) -> (bool, String, String) {
    let mut cmd = Command::new(bin("concordctl"));
    cmd.arg("--endpoint")
        .arg(server.addr.to_string())
        .args(certs.ctl_flags(client))
        .args(args)
        .env_remove("CONCORD_ENDPOINT");
    let mut child = Background::spawn(&mut cmd);
    let status = child.wait_exit(WAIT).await;
    (status.success(), child.stdout(), child.stderr())
}

fn grpcurl_path() -> PathBuf {
    let path = match std::env::var_os("CONCORD_GRPCURL") {
        Some(p) => PathBuf::from(p),
        None => workspace_dir().join(".venv/bin/grpcurl"),
    };
    assert!(
        path.exists(),
        "grpcurl not found at {} ($CONCORD_GRPCURL, else <workspace>/.venv/bin/grpcurl): run scripts/test.sh",
        path.display()
    );
    path
}

#[tokio::test]
async fn mtls_serves_the_sdk_concordctl_and_grpcurl() {
    let certs = Certs::generate(1, &["admin", "team-a"]);
    let server = tls_server(&certs, true, &[]);
    // The SDK with a client certificate.
    let client = sdk(&server, &certs, Some("admin")).await.unwrap();
    let created = client
        .create("/tls", "over mtls", CreateOptions::default())
        .await
        .unwrap();
    let node = client
        .get("/tls", ReadOptions::at_least(created.zxid))
        .await
        .unwrap();
    assert_eq!(node.data, b"over mtls");
    // concordctl with --cacert --cert --key.
    let (ok, out, err) = concordctl(&server, &certs, "admin", &["get", "/tls"]).await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "over mtls");
    let (ok, _, err) = concordctl(&server, &certs, "admin", &["create", "/ctl", "x"]).await;
    assert!(ok, "{err}");
    assert!(client.get("/ctl", ReadOptions::default()).await.is_ok());
    // grpcurl, as docs/security.md shows it.
    let out = Command::new(grpcurl_path())
        .args(["-cacert", &certs.path("ca.pem").display().to_string()])
        .args(["-cert", &certs.path("admin.pem").display().to_string()])
        .args(["-key", &certs.path("admin-key.pem").display().to_string()])
        .arg(server.addr.to_string())
        .arg("concord.v1.Cluster/Status")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("\"serverId\": \"1\""), "{stdout}");
    // Plain text to a TLS port gets nowhere.
    let plain = Client::connect(server.endpoint()).await;
    let plain_ok = match plain {
        Ok(c) => c.status().await.is_ok(),
        Err(_) => false,
    };
    assert!(!plain_ok, "plain text was served on a TLS port");
}

#[tokio::test]
async fn tls_without_client_certificates_serves_anyone_with_the_ca() {
    let certs = Certs::generate(1, &["admin"]);
    let server = tls_server(&certs, false, &[]);
    let client = sdk(&server, &certs, None).await.unwrap();
    assert_eq!(client.status().await.unwrap().server_id, 1);
    // A client that does not trust the server's CA refuses it.
    let other = Certs::generate(1, &["admin"]);
    let stranger = ConnectOptions {
        tls: Some(other.tls_options(None)),
    };
    let refused = match Client::connect_with(server.addr.to_string(), &stranger).await {
        Ok(c) => c.status().await.is_err(),
        Err(_) => true,
    };
    assert!(refused, "a client accepted a server of another CA");
}

#[tokio::test]
async fn handshakes_without_a_good_client_certificate_are_refused() {
    let certs = Certs::generate(1, &["admin"]);
    let server = tls_server(&certs, true, &[]);
    let ca = certs.path("ca.pem");
    // Sanity: the admin certificate gets through this very check.
    let admin = Some((certs.path("admin.pem"), certs.path("admin-key.pem")));
    assert!(!refused(&server, raw_client(&ca, admin)).await);
    // No client certificate.
    assert!(refused(&server, raw_client(&ca, None)).await);
    // One from another CA.
    let other = Certs::generate(1, &["admin"]);
    let foreign = Some((other.path("admin.pem"), other.path("admin-key.pem")));
    assert!(refused(&server, raw_client(&ca, foreign)).await);
    // An expired one, from the right CA.
    let expired = Ca::load(certs.dir())
        .unwrap()
        .issue(&Leaf {
            valid_years: Some((2000, 2001)),
            ..certs::client_leaf("admin")
        })
        .unwrap();
    std::fs::write(certs.path("old.pem"), &expired.cert_pem).unwrap();
    std::fs::write(certs.path("old-key.pem"), &expired.key_pem).unwrap();
    let old = Some((certs.path("old.pem"), certs.path("old-key.pem")));
    assert!(refused(&server, raw_client(&ca, old)).await);
    // The SDK sees the same refusals as call failures.
    let no_cert = sdk(&server, &certs, None).await;
    assert!(match no_cert {
        Ok(c) => c.status().await.is_err(),
        Err(_) => true,
    });
    let log = server.log();
    assert!(log.contains("TLS handshake failed"), "{log}");
}

/// The expired certificate is refused because it expired (the reason is logged).
#[tokio::test]
async fn an_expired_client_certificate_is_refused_as_expired() {
    let certs = Certs::generate(1, &["admin"]);
    let server = tls_server(&certs, true, &[]);
    let expired = Ca::load(certs.dir())
        .unwrap()
        .issue(&Leaf {
            valid_years: Some((2000, 2001)),
            ..certs::client_leaf("admin")
        })
        .unwrap();
    std::fs::write(certs.path("old.pem"), &expired.cert_pem).unwrap();
    std::fs::write(certs.path("old-key.pem"), &expired.key_pem).unwrap();
    let old = Some((certs.path("old.pem"), certs.path("old-key.pem")));
    assert!(refused(&server, raw_client(&certs.path("ca.pem"), old)).await);
    eventually("the refusal is logged", WAIT, || {
        let log = server.log();
        async move {
            (log.contains("TLS handshake failed") && log.to_lowercase().contains("expired"))
                .then_some(())
        }
    })
    .await;
}

#[tokio::test]
async fn a_silent_handshake_is_closed_after_the_timeout() {
    let certs = Certs::generate(1, &["admin"]);
    let server = tls_server(&certs, true, &["--tls-handshake-timeout-ms", "500"]);
    let started = tokio::time::Instant::now();
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    // Meanwhile others are served.
    let client = sdk(&server, &certs, Some("admin")).await.unwrap();
    client.status().await.unwrap();
    let mut b = [0u8; 1];
    let read = tokio::time::timeout(WAIT, silent.read(&mut b))
        .await
        .expect("the silent connection was never closed");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert!(started.elapsed() >= Duration::from_millis(500));
}

/// Rotated files are picked up by new handshakes while an open watch stream and a
/// session on the old connection carry on.
#[tokio::test]
async fn a_rotated_certificate_is_picked_up_without_dropping_sessions() {
    let certs = Certs::generate(1, &["admin"]);
    let server = tls_server(&certs, true, &["--tls-reload-interval-ms", "100"]);
    let admin = || Some((certs.path("admin.pem"), certs.path("admin-key.pem")));
    let connector = raw_client(&certs.path("ca.pem"), admin());
    let first = leaf_seen(&server, &connector).await;
    let client = sdk(&server, &certs, Some("admin")).await.unwrap();
    let session = client.open_session(1000).await.unwrap();
    let states = session.state_watch();
    // A watch without resume ends at the first broken stream.
    let mut watch = client
        .watch(WatchOptions {
            path: "/after".into(),
            ..WatchOptions::default()
        })
        .await
        .unwrap();

    let new = rotate_server_cert(&certs);
    assert_ne!(new, first);
    eventually(
        "a new connection is shown the new certificate",
        WAIT,
        || {
            let connector = connector.clone();
            let server = &server;
            let new = new.clone();
            async move { (leaf_seen(server, &connector).await == new).then_some(()) }
        },
    )
    .await;

    // The old connection still works: the watch sees a write made now, and the
    // session never left Alive.
    let created = client
        .create("/after", "", CreateOptions::default())
        .await
        .unwrap();
    let event = tokio::time::timeout(WAIT, watch.next_event())
        .await
        .expect("no event on the watch opened before the rotation")
        .unwrap()
        .unwrap();
    assert_eq!(event.zxid, created.zxid);
    assert_eq!(watch.resumes(), 0);
    assert_eq!(session.state(), ConnectionState::Connected);
    assert!(
        !states.has_changed().unwrap(),
        "the session's state changed"
    );
    // A new SDK connection works with the new certificate.
    let fresh = sdk(&server, &certs, Some("admin")).await.unwrap();
    fresh.status().await.unwrap();
    assert!(server.log().contains("TLS certificates reloaded"));
}

#[tokio::test]
async fn sighup_reloads_at_once() {
    let certs = Certs::generate(1, &["admin"]);
    // Files are checked only every minute: the signal does it.
    let server = tls_server(&certs, false, &["--tls-reload-interval-ms", "60000"]);
    let connector = raw_client(&certs.path("ca.pem"), None);
    let first = leaf_seen(&server, &connector).await;
    let new = rotate_server_cert(&certs);
    assert_eq!(leaf_seen(&server, &connector).await, first);
    server.signal("HUP");
    eventually("SIGHUP reloads the certificate", WAIT, || {
        let connector = connector.clone();
        let server = &server;
        let new = new.clone();
        async move { (leaf_seen(server, &connector).await == new).then_some(()) }
    })
    .await;
    assert!(server.is_running());
}

/// Three members whose peer links are all mTLS elect a leader and replicate.
#[tokio::test]
async fn an_ensemble_runs_over_peer_mtls() {
    let certs = Certs::generate(3, &["admin"]);
    let options = ServerOptions {
        extra: certs.peer_flags(),
        ..ServerOptions::default()
    };
    let ensemble = Ensemble::start(3, options);
    let leader = ensemble.leader(WAIT).await;
    let follower = (leader + 1) % 3;
    // A write through a follower is forwarded to the leader over the peer port.
    let client = Client::connect(ensemble.servers[follower].endpoint())
        .await
        .unwrap();
    let created = client
        .create("/peers", "mtls", CreateOptions::default())
        .await
        .unwrap();
    for i in 0..3 {
        ensemble.caught_up(i, created.zxid, WAIT).await;
    }
    let log = ensemble.servers[leader].log();
    assert!(!log.contains("TLS handshake failed"), "{log}");
    // The peer port is mTLS: refused without a certificate, a member's peer
    // certificate gets through (a plain-text port would refuse both).
    let peer = peer_server(&ensemble.servers[leader]);
    let ca = certs.path("ca.pem");
    assert!(refused(&peer, raw_client(&ca, None)).await);
    let member = Some((certs.path("peer-2.pem"), certs.path("peer-2-key.pem")));
    assert!(!refused(&peer, raw_client(&ca, member)).await);
}

/// A stand-in `Server` at `server`'s peer address (read from its config file), for
/// the connection checks above.
fn peer_server(server: &Server) -> PeerPort {
    let extra = &server.options().extra;
    let at = extra.iter().position(|a| a == "--config").unwrap();
    let toml = std::fs::read_to_string(&extra[at + 1]).unwrap();
    let line = toml.lines().find(|l| l.starts_with("peer_addr")).unwrap();
    let addr = line.split('"').nth(1).unwrap().parse().unwrap();
    PeerPort { addr }
}

/// Just an address (`refused` needs only that).
struct PeerPort {
    addr: std::net::SocketAddr,
}

impl Addressed for PeerPort {
    fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }
}

impl Addressed for Server {
    fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }
}

/// What can be connected to.
trait Addressed {
    fn addr(&self) -> std::net::SocketAddr;
}
