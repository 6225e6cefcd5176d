//! Peer identities: the mapping from certificate identities to members, and the
//! refusal of every other identity before a request reaches any peer service.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::service::interceptor::InterceptedService;
use tonic::Code;
use tower_service::Service;

use super::*;
use crate::config::Role;

fn member(id: ServerId, identity: Option<&str>) -> Member {
    Member {
        id,
        client_addr: SocketAddr::from(([127, 0, 0, 1], 1)).into(),
        peer_addr: SocketAddr::from(([127, 0, 0, 1], 2)).into(),
        role: Role::Voter,
        peer_identity: identity.map(str::to_owned),
        zookeeper_addr: None,
    }
}

/// Members 1 and 3 by default identity, 2 by a name of its own.
fn three() -> Vec<Member> {
    vec![
        member(1, None),
        member(2, Some("concord-2.example.org")),
        member(3, None),
    ]
}

fn tls(identity: Option<&str>) -> ConnInfo {
    ConnInfo {
        remote_addr: Some(SocketAddr::from(([127, 0, 0, 1], 4242))),
        tls: true,
        cert_identity: identity.map(Arc::from),
    }
}

#[test]
fn identities_default_to_concord_peer_id_and_map_back_to_members() {
    let members = three();
    assert_eq!(
        peer_identity(&members, 1).as_deref(),
        Some("concord-peer-1")
    );
    assert_eq!(
        peer_identity(&members, 2).as_deref(),
        Some("concord-2.example.org")
    );
    assert_eq!(peer_identity(&members, 4), None);
    let auth = PeerAuthorizer::new(&members, 1).unwrap();
    assert_eq!(auth.member_of("concord-peer-3"), Some(3));
    assert_eq!(auth.member_of("concord-2.example.org"), Some(2));
    // Member 2 configured another identity: its default names nobody.
    assert_eq!(auth.member_of("concord-peer-2"), None);
    assert_eq!(auth.member_of("concord-peer-9"), None);
    assert_eq!(
        auth.member_of("CONCORD-PEER-3"),
        None,
        "exact, case included"
    );
}

#[test]
fn identities_must_be_unique_and_plain() {
    validate(&three()).unwrap();
    let same = vec![member(1, Some("a")), member(2, Some("a"))];
    assert!(validate(&same).is_err(), "one identity for two members");
    let default_taken = vec![member(1, Some("concord-peer-2")), member(2, None)];
    assert!(
        validate(&default_taken).is_err(),
        "a configured identity equal to another member's default"
    );
    assert!(validate(&[member(1, Some(""))]).is_err(), "empty");
    assert!(validate(&[member(1, Some("a b"))]).is_err(), "whitespace");
    let uri = "spiffe://example.org/concord/1";
    assert!(validate(&[member(1, Some(uri))]).is_err(), "not a DNS name");
    assert!(PeerAuthorizer::new(&same, 1).is_err());
}

#[test]
fn a_certificate_names_the_member_and_nothing_else_is_admitted() {
    let auth = PeerAuthorizer::new(&three(), 1).unwrap();
    let admit = |info: Option<ConnInfo>| auth.admit(info.as_ref());
    assert_eq!(admit(Some(tls(Some("concord-peer-3")))).unwrap(), Some(3));
    assert_eq!(
        admit(Some(tls(Some("concord-2.example.org")))).unwrap(),
        Some(2)
    );
    for refused in [
        tls(Some("concord-peer-9")),  // the CA's, but no member's
        tls(Some("concord-peer-1")),  // this server's own
        tls(Some("concord-peer-2")),  // member 2 is known by another identity
        tls(None),                    // no identity at all
        tls(Some(&"x".repeat(5000))), // a long one is quoted clipped
    ] {
        let status = admit(Some(refused.clone())).unwrap_err();
        assert_eq!(status.code(), Code::PermissionDenied, "{refused:?}");
        assert!(status.message().len() < 300, "{}", status.message());
    }
    // Plain text (a loopback ensemble without peer TLS): nothing to check here.
    let plain = ConnInfo {
        tls: false,
        ..tls(Some("concord-peer-9"))
    };
    assert_eq!(admit(Some(plain)).unwrap(), None);
    assert_eq!(admit(None).unwrap(), None);
}

#[test]
fn the_interceptor_puts_the_member_in_the_request_or_refuses_it() {
    let mut auth = PeerAuthorizer::new(&three(), 1).unwrap();
    let request = |info: ConnInfo| {
        let mut r = Request::new(());
        r.extensions_mut().insert(info);
        r
    };
    let admitted = auth.call(request(tls(Some("concord-peer-3")))).unwrap();
    assert_eq!(authenticated(&admitted), Some(3));
    let refused = auth.call(request(tls(Some("intruder")))).unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied);
    assert!(
        refused.message().contains("intruder"),
        "{}",
        refused.message()
    );
    let plain = auth
        .call(request(ConnInfo::default()))
        .expect("plain text passes");
    assert_eq!(authenticated(&plain), None);
    assert_eq!(auth.refused(), 1);
}

#[test]
fn a_claim_must_be_the_certificates_member() {
    assert!(check_claim(Some(2), 2).is_ok());
    assert_eq!(
        check_claim(Some(2), 3).unwrap_err().code(),
        Code::PermissionDenied
    );
    assert!(check_claim(None, 3).is_ok(), "plain text: the claim stands");
}

#[test]
fn refusals_are_logged_at_most_every_ten_seconds() {
    let mut t = Throttled::default();
    let start = Instant::now();
    assert_eq!(t.count(start), Some(1));
    assert_eq!(t.count(start + Duration::from_secs(1)), None);
    assert_eq!(t.count(start + Duration::from_secs(9)), None);
    assert_eq!(t.count(start + WARN_EVERY), Some(3));
}

/// A peer service that counts the requests reaching it, and what they carried.
#[derive(Clone, Default)]
struct Recording {
    reached: Arc<AtomicUsize>,
    peers: Arc<Mutex<Vec<Option<ServerId>>>>,
}

impl Service<http::Request<Body>> for Recording {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        self.reached.fetch_add(1, Ordering::SeqCst);
        let peer = request.extensions().get::<AuthenticatedPeer>().map(|p| p.0);
        self.peers.lock().unwrap().push(peer);
        std::future::ready(Ok(http::Response::new(Body::empty())))
    }
}

/// The layer the peer port installs stops a stranger on every path (the message
/// stream, the forwarding channel, a path that does not exist) before the service
/// behind it sees the request; a member's request reaches it with its id.
#[tokio::test]
async fn a_stranger_reaches_no_peer_service() {
    let auth = PeerAuthorizer::new(&three(), 1).unwrap();
    let inner = Recording::default();
    let mut service = InterceptedService::new(inner.clone(), auth.clone());
    let paths = [
        "/concord.peer.v1.PeerTransport/Deliver",
        "/concord.peer.v1.Forward/Submit",
        "/concord.peer.v1.Forward/ReadIndex",
        "/concord.peer.v1.Forward/Touch",
        "/grpc.health.v1.Health/Check",
    ];
    let call = |service: &mut InterceptedService<Recording, PeerAuthorizer>,
                path: &str,
                info: ConnInfo| {
        let mut request = http::Request::builder()
            .method("POST")
            .uri(format!("http://peer{path}"))
            .header("content-type", "application/grpc")
            .body(Body::empty())
            .unwrap();
        request.extensions_mut().insert(info);
        service.call(request)
    };
    for path in paths {
        for stranger in [tls(Some("concord-peer-9")), tls(None)] {
            let response = call(&mut service, path, stranger).await.unwrap();
            let status = Status::from_header_map(response.headers()).expect("a gRPC status");
            assert_eq!(status.code(), Code::PermissionDenied, "{path}");
        }
    }
    assert_eq!(inner.reached.load(Ordering::SeqCst), 0);
    assert_eq!(auth.refused(), 2 * paths.len() as u64);
    for path in paths {
        call(&mut service, path, tls(Some("concord-peer-3")))
            .await
            .unwrap();
    }
    assert_eq!(inner.reached.load(Ordering::SeqCst), paths.len());
    assert!(inner.peers.lock().unwrap().iter().all(|p| *p == Some(3)));
}
