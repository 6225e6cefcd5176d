//! Unit tests of security/tls.rs and listen.rs's TLS accept loop, with certificates
//! from `certs` (rcgen) in a temporary folder.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;
use crate::listen::{self, ListenLimits};
use crate::security::certs::{self, Ca, Plan};

/// A folder with `concord certs`'s files for one member and clients admin and
/// team-a.
fn certs_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let plan = Plan {
        members: 1,
        clients: vec!["admin".into(), "team-a".into()],
        force: false,
        dns: Vec::new(),
        ips: Vec::new(),
    };
    certs::write(dir.path(), &plan).unwrap();
    dir
}

fn config(dir: &Path, mtls: bool) -> Config {
    Config {
        cert_file: Some(dir.join("server-1.pem")),
        key_file: Some(dir.join("server-1-key.pem")),
        trusted_ca_file: mtls.then(|| dir.join("ca.pem")),
        tls_reload_interval_ms: 20,
        tls_handshake_timeout_ms: 300,
        ..Config::default()
    }
}

/// A rustls client trusting `dir`'s CA, presenting `client` (a stem such as
/// "admin") if given.
fn client(dir: &Path, client: Option<&str>) -> tokio_rustls::TlsConnector {
    client_of(dir, client.map(|stem| (dir, stem)))
}

/// A rustls client trusting `ca_dir`'s CA, presenting the certificate `stem` of
/// the folder given, if any.
fn client_of(ca_dir: &Path, client: Option<(&Path, &str)>) -> tokio_rustls::TlsConnector {
    let dir = ca_dir;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(dir.join("ca.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match client {
        Some((dir, stem)) => {
            let chain = CertificateDer::pem_file_iter(dir.join(format!("{stem}.pem")))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let key = PrivateKeyDer::from_pem_file(dir.join(format!("{stem}-key.pem"))).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

fn localhost() -> ServerName<'static> {
    ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into())
}

/// The leaf certificate a fresh connection to `addr` is shown.
async fn server_leaf(addr: SocketAddr, connector: &tokio_rustls::TlsConnector) -> Vec<u8> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let tls = connector.connect(localhost(), tcp).await.unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

#[tokio::test]
async fn bad_files_are_refused_naming_the_file() {
    let dir = certs_dir();
    let c = config(dir.path(), true);
    ServerTls::client_port(&c).unwrap().unwrap();
    // Not PEM.
    std::fs::write(dir.path().join("junk.pem"), "junk").unwrap();
    let junk = Config {
        trusted_ca_file: Some(dir.path().join("junk.pem")),
        ..c.clone()
    };
    let e = ServerTls::client_port(&junk).unwrap_err();
    assert_eq!(e.setting, "trusted_ca_file", "{e}");
    assert!(e.to_string().contains("junk.pem"), "{e}");
    // A key that does not go with the certificate.
    let mismatched = Config {
        key_file: Some(dir.path().join("admin-key.pem")),
        ..c.clone()
    };
    let e = ServerTls::client_port(&mismatched).unwrap_err();
    assert_eq!(e.setting, "key_file", "{e}");
    // A missing file.
    let missing = Config {
        cert_file: Some(dir.path().join("nope.pem")),
        ..c.clone()
    };
    let e = ServerTls::client_port(&missing).unwrap_err();
    assert_eq!(e.setting, "cert_file", "{e}");
    // No TLS configured: none.
    assert!(ServerTls::client_port(&Config::default())
        .unwrap()
        .is_none());
}

/// Starts a TLS accept loop; returns its address and the accepted connections.
async fn serve(
    tls: ServerTls,
    connections_max: usize,
) -> (SocketAddr, tokio::sync::mpsc::Receiver<listen::TlsConn>) {
    let listener = listen::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = ListenLimits {
        connections_max,
        idle_timeout: Duration::from_secs(60),
    };
    let conns = listen::incoming_tls(listener, limits, "test", tls);
    (addr, listen::accepted(conns))
}

#[tokio::test]
async fn client_certificates_are_required_and_name_the_caller() {
    let dir = certs_dir();
    let tls = ServerTls::client_port(&config(dir.path(), true))
        .unwrap()
        .unwrap();
    let (addr, mut accepted) = serve(tls, 16).await;
    // With a certificate of the CA: accepted, identity = its CN.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut ok = client(dir.path(), Some("team-a"))
        .connect(localhost(), tcp)
        .await
        .unwrap();
    ok.write_all(b"x").await.unwrap();
    let conn = accepted.recv().await.unwrap();
    assert!(conn.info().tls);
    assert_eq!(conn.info().cert_identity.as_deref(), Some("team-a"));
    assert!(conn.info().remote_addr.is_some());
    // Without one: the handshake fails (the server closes the connection).
    let refused = |connector: tokio_rustls::TlsConnector| async move {
        let tcp = TcpStream::connect(addr).await.unwrap();
        match connector.connect(localhost(), tcp).await {
            Err(_) => true,
            // TLS 1.3: the client finishes first; the refusal comes on the first read.
            Ok(mut s) => {
                let mut b = [0u8; 1];
                let _ = s.write_all(b"x").await;
                matches!(
                    tokio::time::timeout(Duration::from_secs(5), s.read(&mut b)).await,
                    Ok(Ok(0) | Err(_))
                )
            }
        }
    };
    assert!(refused(client(dir.path(), None)).await);
    // One from another CA.
    let other = certs_dir();
    let foreign = client_of(dir.path(), Some((other.path(), "admin")));
    assert!(refused(foreign).await);
    // None of the refused ones reached the server.
    assert!(accepted.try_recv().is_err());
}

/// A client that connects and sends nothing is closed after the handshake timeout,
/// and meanwhile other clients' handshakes go through.
#[tokio::test]
async fn a_silent_handshake_times_out_without_holding_up_others() {
    let dir = certs_dir();
    let tls = ServerTls::client_port(&config(dir.path(), false))
        .unwrap()
        .unwrap();
    let timeout = tls.handshake_timeout();
    let (addr, mut accepted) = serve(tls, 16).await;
    let started = Instant::now();
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let connector = client(dir.path(), None);
    for _ in 0..3 {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let mut s = connector.connect(localhost(), tcp).await.unwrap();
        s.write_all(b"x").await.unwrap();
        let conn = accepted.recv().await.unwrap();
        assert_eq!(conn.info().cert_identity, None, "no client certificate");
    }
    assert!(
        started.elapsed() < timeout,
        "the others waited for the silent one"
    );
    let mut b = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(10), silent.read(&mut b))
        .await
        .expect("the silent connection was never closed");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert!(started.elapsed() >= timeout);
}

/// New files are picked up for new handshakes; a bad rewrite keeps the old ones.
#[tokio::test]
async fn rotated_files_are_reloaded_and_bad_ones_ignored() {
    let dir = certs_dir();
    let tls = ServerTls::client_port(&config(dir.path(), false))
        .unwrap()
        .unwrap();
    let (addr, _accepted) = serve(tls.clone(), 16).await;
    let connector = client(dir.path(), None);
    let first = server_leaf(addr, &connector).await;
    // A half-done rotation (new certificate, old key): refused, the old stays.
    let ca = Ca::load(dir.path()).unwrap();
    let new = ca.issue(&certs::server_leaf(1)).unwrap();
    std::fs::write(dir.path().join("server-1.pem"), &new.cert_pem).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(tls.reloads(), 0);
    assert_eq!(server_leaf(addr, &connector).await, first);
    // The key follows: the new pair is in use.
    std::fs::write(dir.path().join("server-1-key.pem"), &new.key_pem).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while tls.reloads() == 0 {
        assert!(Instant::now() < deadline, "never reloaded");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let second = server_leaf(addr, &connector).await;
    assert_ne!(second, first);
    assert_eq!(
        second,
        CertificateDer::from_pem_slice(new.cert_pem.as_bytes())
            .unwrap()
            .to_vec()
    );
}

#[test]
fn peer_identity_is_the_dns_san_certs_writes() {
    assert_eq!(certs::peer_leaf(3).dns, ["concord-peer-3"]);
    assert_eq!(
        crate::security::peers::default_identity(3),
        "concord-peer-3"
    );
}

/// A member's configured `peer_identity` is what dialling it checks.
#[test]
fn peer_links_check_each_members_configured_identity() {
    let dir = certs_dir();
    let member = |id: u64, identity: Option<&str>| crate::config::Member {
        id,
        client_addr: std::net::SocketAddr::from(([127, 0, 0, 1], 7000 + id as u16)).into(),
        peer_addr: std::net::SocketAddr::from(([127, 0, 0, 1], 8000 + id as u16)).into(),
        role: crate::config::Role::Voter,
        peer_identity: identity.map(str::to_owned),
        zookeeper_addr: None,
    };
    let config = Config {
        client_addr: std::net::SocketAddr::from(([127, 0, 0, 1], 7001)),
        peer_addr: std::net::SocketAddr::from(([127, 0, 0, 1], 8001)),
        members: vec![member(1, None), member(2, Some("db-2.example.org"))],
        peer_cert_file: Some(dir.path().join("peer-1.pem")),
        peer_key_file: Some(dir.path().join("peer-1-key.pem")),
        peer_trusted_ca_file: Some(dir.path().join("ca.pem")),
        ..Config::default()
    };
    let tls = PeerClientTls::from_config(&config).unwrap();
    assert_eq!(
        tls.identities.get(&1).map(String::as_str),
        Some("concord-peer-1")
    );
    assert_eq!(
        tls.identities.get(&2).map(String::as_str),
        Some("db-2.example.org")
    );
    // The rustls configuration (the write forwarder's) checks the same names.
    for (id, name) in [(1, "concord-peer-1"), (2, "db-2.example.org")] {
        let (config, server_name) = tls.rustls_config(id).unwrap();
        assert_eq!(server_name.to_str(), name);
        assert_eq!(config.alpn_protocols, [b"h2".to_vec()]);
    }
}

#[test]
fn peer_files_changes_are_noticed_at_most_every_interval() {
    let dir = certs_dir();
    let config = Config {
        peer_cert_file: Some(dir.path().join("peer-1.pem")),
        peer_key_file: Some(dir.path().join("peer-1-key.pem")),
        peer_trusted_ca_file: Some(dir.path().join("ca.pem")),
        tls_reload_interval_ms: 500,
        ..Config::default()
    };
    let tls = PeerClientTls::from_config(&config).unwrap();
    tls.client_config(2).unwrap();
    assert!(
        !tls.files_changed(),
        "the first look sees nothing to compare"
    );
    let issued = Ca::load(dir.path())
        .unwrap()
        .issue(&certs::peer_leaf(1))
        .unwrap();
    std::fs::write(dir.path().join("peer-1.pem"), &issued.cert_pem).unwrap();
    // Within the interval: not looked at yet.
    assert!(!tls.files_changed());
    let deadline = Instant::now() + Duration::from_secs(5);
    while !tls.files_changed() {
        assert!(Instant::now() < deadline, "the change was never noticed");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(550));
    assert!(!tls.files_changed(), "reported once");
}
