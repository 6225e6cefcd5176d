//! `concord certs --dns NAME --ip ADDR`: the members' client-port certificates carry
//! those names besides the loopback ones, so a client that dials a real host, a
//! pod or a Service by name (or by another address) verifies the server; a bad name
//! or address is refused with exit status 2 and nothing written. The clients here
//! reach the server on 127.0.0.1 and check the certificate against the name they
//! were told (the SDK's `TlsOptions::domain`), as a client that resolved the name
//! to this server would.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use concord::{Client, ConnectOptions};
use concord_tests::{bin, Certs, Server, ServerOptions};

const WAIT: Duration = Duration::from_secs(20);

fn certs(dir: &Path, more: &[&str]) -> Output {
    Command::new(bin("concord"))
        .arg("certs")
        .arg(dir)
        .args(["--members", "1", "--clients", "admin"])
        .args(more)
        .output()
        .unwrap()
}

fn tls_server(dir: &Path) -> Server {
    let path = |n: &str| dir.join(n).display().to_string();
    let extra = vec![
        "--cert-file".to_owned(),
        path("server-1.pem"),
        "--key-file".to_owned(),
        path("server-1-key.pem"),
        "--trusted-ca-file".to_owned(),
        path("ca.pem"),
    ];
    Server::start(ServerOptions {
        extra,
        ..ServerOptions::default()
    })
}

/// Whether a client that expects the server's certificate to carry `name` gets an
/// answer from it.
async fn answers_as(server: &Server, dir: &Path, name: &str) -> bool {
    let mut tls = concord::TlsOptions::with_ca(dir.join("ca.pem"))
        .identity(dir.join("admin.pem"), dir.join("admin-key.pem"));
    tls.domain = Some(name.to_owned());
    let options = ConnectOptions { tls: Some(tls) };
    let attempt = async {
        let client = Client::connect_with(server.addr.to_string(), &options).await?;
        client.status().await
    };
    match tokio::time::timeout(WAIT, attempt).await {
        Ok(Ok(_)) => true,
        Ok(Err(_)) => false,
        Err(_) => panic!("no answer either way in {WAIT:?} as {name}"),
    }
}

#[tokio::test]
async fn clients_verify_the_server_by_the_extra_names() {
    let dir = tempfile::tempdir().unwrap();
    let out = certs(
        dir.path(),
        &[
            "--dns",
            "concord.example.com",
            "--dns",
            "*.concord-peers.concord.svc.cluster.local,concord.concord.svc",
            "--ip",
            "10.1.2.3",
            "--ip",
            "fd00::7",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let server = tls_server(dir.path());
    for name in [
        "concord.example.com",
        "concord-0.concord-peers.concord.svc.cluster.local",
        "concord.concord.svc",
        "10.1.2.3",
        "fd00::7",
        "127.0.0.1",
        "localhost",
    ] {
        assert!(
            answers_as(&server, dir.path(), name).await,
            "{name} refused"
        );
    }
    for name in [
        "other.example.com",
        "a.b.concord-peers.concord.svc.cluster.local",
        "10.1.2.4",
    ] {
        assert!(
            !answers_as(&server, dir.path(), name).await,
            "{name} accepted"
        );
    }
}

/// Without the flags, the certificates carry loopback names only: a client that
/// dials the server by a real name is refused.
#[tokio::test]
async fn by_default_only_loopback_names_verify() {
    let certs = Certs::generate(1, &["admin"]);
    let server = tls_server(certs.dir());
    assert!(answers_as(&server, certs.dir(), "127.0.0.1").await);
    assert!(!answers_as(&server, certs.dir(), "concord.example.com").await);
}

#[test]
fn a_bad_name_or_address_writes_nothing() {
    for (flag, value, says) in [
        ("--ip", "10.0.0.300", "invalid IP address"),
        ("--ip", "db.example.com", "invalid IP address"),
        ("--dns", "bad_name.example.com", "bad DNS name"),
        ("--dns", "10.0.0.1", "pass it with --ip"),
        ("--dns", "", "bad DNS name"),
        ("--dns", "*.com", "wildcard"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = certs(dir.path(), &["--dns", "ok.example.com", flag, value]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value:?}: {stderr}");
        assert!(stderr.contains(says), "{flag} {value:?}: {stderr}");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "{flag} {value:?} wrote files"
        );
    }
}
