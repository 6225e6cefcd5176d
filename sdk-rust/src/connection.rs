//! The connection a [`Client`](crate::Client)'s calls and streams take: one HTTP/2
//! connection to one server of the endpoint list at a time, as ZooKeeper's clients
//! hold one, driven through h2 itself (`concord_direct`): a unary call leaves in one
//! write, with no task between the call and the connection.
//!
//! ```text
//!   "a:1,b:2,c:3" ──parse──▶ [Target] ──▶ Link ──first call──▶ dial from a random server (or the first)
//!                                          │ connection closed (server gone, unanswered
//!                                          │ keep-alive pings), abandoned (a session
//!                                          │ found its server stalled) or given up (the
//!                                          │ server answered NOT_LEADER/UNAVAILABLE)
//!                                          └──next call──▶ dial from the next server on
//!                                             (from the leader a NOT_LEADER named, if listed)
//! ```
//!
//! A stream (watch, cache, observer, keep-alive) or call goes on the link's first
//! connection while it has fewer than `concord_direct::STREAMS_PER_CONNECTION`
//! (1,000) streams open; when every connection is that full the link dials one more
//! to the same server (at most `concord_direct::CONNECTIONS_MAX`, 64), since a
//! server takes at most `client_streams_per_connection_max` (1,024) streams on one
//! connection and holds any beyond until one ends.
//!
//! A dial tries each server once, in list order from where the last one left off,
//! each for at most `CONNECT_TIMEOUT`; it fails (UNAVAILABLE, never sent) when none
//! answers. A dial cut short by its caller's deadline still moves the list on, so
//! the next one tries another server.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use concord_direct::{BoxError, Direct, Link, Tls};
use concord_proto::v1::ErrorCode;
use http::uri::Authority;

use crate::error::Error;
use crate::tls::{self, ConnectOptions};

/// Longest one server's dial (TCP, TLS, HTTP/2 handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A ping this often while connected; the connection is dropped when one goes
/// unanswered as long, so a dead server breaks long streams (watches, keep-alives).
const KEEPALIVE: Duration = Duration::from_secs(10);

/// One server of the list: where to dial, and TLS if any.
#[derive(Debug, Clone)]
struct Target {
    authority: Authority,
    tls: Option<Tls>,
}

/// The servers of a client's list, and which one its next dial tries first. Clones
/// share them.
#[derive(Debug, Clone)]
pub(crate) struct Servers {
    targets: Arc<Vec<Target>>,
    next: Arc<AtomicUsize>,
}

impl Servers {
    /// Makes the next dial start at the server whose address (`host:port`, as a
    /// server names its client address in a NOT_LEADER hint) is `addr`, if one of
    /// the list has it.
    pub(crate) fn prefer(&self, addr: &str) {
        let addr = addr.trim();
        let found = self
            .targets
            .iter()
            .position(|t| t.authority.as_str().eq_ignore_ascii_case(addr));
        if let Some(index) = found {
            self.next.store(index, Ordering::Relaxed);
        }
    }

    /// Dials the servers in turn from `next` until one answers.
    async fn dial(self) -> Result<Direct, BoxError> {
        let Servers { targets, next } = self;
        let mut failures = Vec::new();
        for _ in 0..targets.len() {
            // Moved on before the attempt: a dial dropped halfway leaves the next one
            // to the following server.
            let target = &targets[next.fetch_add(1, Ordering::Relaxed) % targets.len()];
            let connect = Direct::connect(
                target.authority.clone(),
                target.tls.clone(),
                Some(KEEPALIVE),
            );
            match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
                Ok(Ok(direct)) => return Ok(direct),
                Ok(Err(e)) => failures.push(format!("{}: {e}", target.authority)),
                Err(_) => failures.push(format!(
                    "{}: no connection within {CONNECT_TIMEOUT:?}",
                    target.authority
                )),
            }
        }
        Err(format!("no server answered ({})", failures.join("; ")).into())
    }

    /// Dials one more connection to the server of `first` (a link's connections
    /// to one server: room for more streams than one connection holds).
    async fn dial_again(self, first: Authority) -> Result<Direct, BoxError> {
        let Some(target) = self.targets.iter().find(|t| t.authority == first) else {
            return Err(format!("{first} is not in the list").into());
        };
        let connect = Direct::connect(
            target.authority.clone(),
            target.tls.clone(),
            Some(KEEPALIVE),
        );
        match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
            Ok(dialled) => dialled,
            Err(_) => Err(format!("{first}: no connection within {CONNECT_TIMEOUT:?}").into()),
        }
    }
}

/// The link to the servers of `list` (comma-separated endpoints), starting at one
/// drawn at random when `randomize`, else at the first, and those servers. Nothing
/// is dialled until the first call.
pub(crate) fn link_to(
    list: &str,
    options: &ConnectOptions,
    randomize: bool,
) -> Result<(Link, Servers), Error> {
    let targets = targets_of(list, options)?;
    if targets.is_empty() {
        return Err(Error::client(ErrorCode::BadArguments, "no endpoint given"));
    }
    // Drawn at random, many clients of one list spread over the ensemble, as
    // ZooKeeper's and kazoo's clients shuffle their connection strings.
    let first = if randomize {
        std::collections::hash_map::RandomState::new().hash_one(0u8) as usize
    } else {
        0
    };
    let servers = Servers {
        next: Arc::new(AtomicUsize::new(first % targets.len())),
        targets: Arc::new(targets),
    };
    let (dialled, again) = (servers.clone(), servers.clone());
    let link = Link::pooled(
        move || dialled.clone().dial(),
        move |first: &Direct| again.clone().dial_again(first.authority().clone()),
    );
    Ok((link, servers))
}

/// The servers of a comma-separated list (one, usually).
fn targets_of(list: &str, options: &ConnectOptions) -> Result<Vec<Target>, Error> {
    let tls = match &options.tls {
        Some(files) => Some((tls::rustls_config(files)?, files.domain.clone())),
        None => None,
    };
    list.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| target_of(e, tls.as_ref()))
        .collect()
}

/// Parses an endpoint, adding `http://` to a bare `host:port` (`https://` with
/// `tls`, whose optional name is the one the server's certificate must carry; by
/// default the endpoint's host).
fn target_of(
    endpoint: &str,
    tls: Option<&(Arc<rustls::ClientConfig>, Option<String>)>,
) -> Result<Target, Error> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let uri = if endpoint.contains("://") {
        endpoint.to_owned()
    } else {
        format!("{scheme}://{endpoint}")
    };
    let bad = |e: &dyn std::fmt::Display| {
        Error::client(
            ErrorCode::BadArguments,
            format!("bad endpoint {uri:?}: {e}"),
        )
    };
    let tls = tls.map(|(config, domain)| (config, domain.as_deref()));
    let (authority, tls) = concord_direct::target(&uri, tls).map_err(|e| bad(&e))?;
    Ok(Target { authority, tls })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_host_port_gets_http() {
        let target = target_of("127.0.0.1:7181", None).expect("valid");
        assert_eq!(target.authority.as_str(), "127.0.0.1:7181");
        assert!(target.tls.is_none());
        let target = target_of(crate::client::DEFAULT_ENDPOINT, None).expect("valid");
        assert_eq!(target.authority.port_u16(), Some(7181));
    }

    #[test]
    fn bad_endpoints_are_bad_arguments() {
        for bad in [
            "http://bad host:1",
            "http://127.0.0.1",
            "https://127.0.0.1:7181",
            "ftp://127.0.0.1:7181",
        ] {
            let err = target_of(bad, None).expect_err(bad);
            assert_eq!(err.code(), ErrorCode::BadArguments, "{bad}");
            assert!(err.message().contains(bad), "{err:?}");
        }
        let err = link_to(" , ", &ConnectOptions::default(), true).expect_err("empty list");
        assert_eq!(err.code(), ErrorCode::BadArguments);
    }

    #[test]
    fn tls_means_https_and_readable_files() {
        let dir = tempfile::tempdir().expect("temp dir");
        let ca = dir.path().join("ca.pem");
        let key = dir.path().join("key.pem");
        let issued = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("ca");
        std::fs::write(&ca, issued.cert.pem()).expect("write");
        std::fs::write(&key, issued.signing_key.serialize_pem()).expect("write");
        let with_ca = ConnectOptions {
            tls: Some(crate::TlsOptions::with_ca(&ca)),
        };
        let ends = targets_of(
            "127.0.0.1:7181, https://localhost:7182, [::1]:7183",
            &with_ca,
        )
        .expect("ok");
        let name = |t: &Target| t.tls.as_ref().expect("TLS").1.clone();
        let named =
            |n: &str| rustls::pki_types::ServerName::try_from(n.to_owned()).expect("a name");
        assert_eq!(name(&ends[0]), named("127.0.0.1"));
        assert_eq!(name(&ends[1]), named("localhost"));
        assert_eq!(
            name(&ends[2]),
            named("::1"),
            "an IPv6 host without its brackets"
        );
        assert_eq!(ends[2].authority.as_str(), "[::1]:7183");
        let renamed = ConnectOptions {
            tls: Some(crate::TlsOptions {
                domain: Some("concord.example".into()),
                ..crate::TlsOptions::with_ca(&ca)
            }),
        };
        let ends = targets_of("127.0.0.1:7181", &renamed).expect("ok");
        assert_eq!(name(&ends[0]), named("concord.example"));
        let plain = targets_of("http://127.0.0.1:7181", &with_ca).expect_err("http with TLS");
        assert_eq!(plain.code(), ErrorCode::BadArguments);
        let missing = ConnectOptions {
            tls: Some(crate::TlsOptions::with_ca(dir.path().join("nope.pem"))),
        };
        let err = targets_of("127.0.0.1:1", &missing).expect_err("no CA file");
        assert_eq!(err.code(), ErrorCode::BadArguments);
        assert!(err.message().contains("nope.pem"), "{err:?}");
        let half = ConnectOptions {
            tls: Some(crate::TlsOptions {
                cert_file: Some(ca.clone()),
                ..crate::TlsOptions::with_ca(&ca)
            }),
        };
        assert!(
            targets_of("127.0.0.1:1", &half).is_err(),
            "cert without key"
        );
        let whole = ConnectOptions {
            tls: Some(crate::TlsOptions::with_ca(&ca).identity(&ca, &key)),
        };
        targets_of("127.0.0.1:1", &whole).expect("cert with its key");
    }

    /// A dial goes through the list from where the last left off, skipping servers
    /// that do not answer, and fails only when none does.
    #[tokio::test]
    async fn a_dial_moves_along_the_list() {
        let up = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let up_port = up.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = up.accept().await {
                tokio::spawn(async move {
                    if let Ok(mut conn) = h2::server::handshake(tcp).await {
                        while conn.accept().await.is_some() {}
                    }
                });
            }
        });
        // Port 1 on loopback: nothing listens there.
        let list = format!("127.0.0.1:1,127.0.0.1:{up_port}");
        let targets = Arc::new(targets_of(&list, &ConnectOptions::default()).expect("ok"));
        for start in 0..2 {
            let next = Arc::new(AtomicUsize::new(start));
            let servers = Servers {
                targets: targets.clone(),
                next: next.clone(),
            };
            servers.dial().await.expect("one answers");
            assert_eq!(next.load(Ordering::Relaxed) % 2, 0, "from {start}");
        }
        let down = Servers {
            targets: Arc::new(targets_of("127.0.0.1:1", &ConnectOptions::default()).expect("ok")),
            next: Arc::default(),
        };
        let err = down.dial().await.expect_err("none answers");
        assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
    }
}
