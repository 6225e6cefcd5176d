//! A client whose endpoint or TLS options do not match the server is told what to
//! change, with a code a retry policy does not retry: plain text to a TLS port
//! (which h2 reported as "frame with invalid size"), TLS to a plain-text port, and a
//! server certificate the client's CA did not sign. Through concordctl (the SDK's
//! errors, as a user reads them) and the SDK's codes. A client certificate missing
//! or refused is not asserted: TLS 1.3 reports it after the client's side of the
//! handshake is done, so the client sees the server's alert (then named) or only a
//! closed stream, as the timing falls.

#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use concord::{Client, ConnectOptions, ErrorCode, ReadOptions};
use concord_tests::{bin, Certs, Server, ServerOptions};

fn server(extra: Vec<String>) -> Server {
    Server::start(ServerOptions {
        extra,
        ..ServerOptions::default()
    })
}

/// concordctl's stderr and exit code for `get /` at `endpoint` with `flags`.
fn ctl(endpoint: &str, flags: &[String]) -> (String, bool) {
    let out = Command::new(bin("concordctl"))
        .arg("--endpoint")
        .arg(endpoint)
        .args(flags)
        .args(["get", "/"])
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.success(),
    )
}

#[track_caller]
fn says(what: &str, (stderr, ok): (String, bool), words: &str) {
    assert!(!ok, "{what}: succeeded");
    assert!(stderr.contains(words), "{what}: {stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t90_a_tls_mismatch_says_what_to_change() {
    let certs = Certs::generate(1, &["admin"]);
    let others = Certs::generate(1, &["admin"]);
    let mtls = server(certs.server_flags(1, true));
    let plain = server(Vec::new());
    let tls_port = format!("127.0.0.1:{}", mtls.addr.port());

    says(
        "plain text to TLS",
        ctl(&format!("http://{tls_port}"), &[]),
        "BAD_ARGUMENTS: the server did not answer in plain-text HTTP/2: it expects TLS",
    );
    says(
        "TLS to plain text",
        ctl(
            &format!("https://127.0.0.1:{}", plain.addr.port()),
            &certs.ctl_flags("admin"),
        ),
        "BAD_ARGUMENTS: the server does not speak TLS",
    );
    let mut untrusted = others.ctl_flags("admin")[..2].to_vec();
    untrusted.extend(certs.ctl_flags("admin")[2..].to_vec());
    says(
        "a server certificate of another CA",
        ctl(&format!("https://{tls_port}"), &untrusted),
        "BAD_ARGUMENTS: the server's certificate is not signed by the CA the client trusts",
    );

    // The SDK's code is not one its retry policy retries: the call fails at once.
    let client = Client::builder()
        .endpoint(format!("http://{tls_port}"))
        .retry(concord::RetryPolicy::default())
        .connect()
        .await;
    let started = Instant::now();
    let err = match client {
        Ok(c) => c.get("/", ReadOptions::default()).await.unwrap_err(),
        Err(e) => e,
    };
    assert_eq!(err.code(), ErrorCode::BadArguments, "{err}");
    assert!(!err.is_retry_safe(), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5), "retried: {err}");
    let options = ConnectOptions {
        tls: Some(certs.tls_options(Some("admin"))),
    };
    let good = Client::connect_with(tls_port.clone(), &options)
        .await
        .unwrap();
    good.get("/", ReadOptions::default()).await.unwrap();
}
