//! The per-server quotas at the service level: a team's watches hit `watches_max`
//! exactly (and come back when a stream ends), and a team over its request rate is
//! answered QUOTA_EXCEEDED before the handler runs (on paused time).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use concord_proto::v1 as pb;
use concord_proto::v1::watch_server::Watch;
use concord_proto::v1::ErrorCode;
use tonic::body::Body;
use tonic::server::NamedService;
use tower_service::Service;

use super::error::code_of;
use super::framework::Coded;
use super::watch::WatchService;
use crate::config::{Config, QuotaConfig, TeamConfig};
use crate::replica::Replica;
use crate::security::{Authenticated, Security, TeamLimits};

fn team_config(dir: &std::path::Path, quota: QuotaConfig) -> Config {
    Config {
        data_dir: dir.to_path_buf(),
        local_identity: "a-1".into(),
        teams: vec![TeamConfig {
            name: "a".into(),
            root: "/teams/a".into(),
            identities: vec!["a-*".into()],
            quota,
        }],
        ..Config::default()
    }
}

fn watch_request(limits: &Arc<TeamLimits>) -> tonic::Request<pb::WatchRequest> {
    let mut request = tonic::Request::new(pb::WatchRequest {
        path: "/".into(),
        recursive: true,
        ..Default::default()
    });
    request.extensions_mut().insert(limits.clone());
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nth_watch_opens_and_the_next_fails_with_quota_exceeded() {
    let dir = tempfile::tempdir().unwrap();
    let quota = QuotaConfig {
        watches_max: 3,
        ..QuotaConfig::default()
    };
    let config = team_config(dir.path(), quota);
    let security = Security::new(&config).unwrap();
    let limits = security.limits("a").unwrap().clone();
    let replica = Replica::start(&config).await.unwrap();
    let service = WatchService::new(replica.clone());
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(service.watch(watch_request(&limits)).await.unwrap());
    }
    let status = match service.watch(watch_request(&limits)).await {
        Err(status) => status,
        Ok(_) => panic!("a fourth watch opened"),
    };
    assert_eq!(code_of(&status), Some(ErrorCode::QuotaExceeded));
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    assert!(
        status
            .message()
            .contains("watches quota on this server: 3 used of 3"),
        "{}",
        status.message()
    );
    // A refused watch holds nothing; one that ends gives its place back.
    assert_eq!(limits.watches(), 3);
    drop(open.pop());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while limits.watches() > 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the watch was not given back"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    open.push(service.watch(watch_request(&limits)).await.unwrap());
    assert!(service.watch(watch_request(&limits)).await.is_err());
    // A caller without a team (an admin, or a direct call) is not counted.
    let plain = tonic::Request::new(pb::WatchRequest {
        path: "/".into(),
        ..Default::default()
    });
    let _admin = service.watch(plain).await.unwrap();
    assert_eq!(limits.watches(), 3);
    drop(open);
    replica.shutdown();
}

/// A service that counts its calls and answers OK.
#[derive(Clone, Default)]
struct Counting {
    calls: Arc<AtomicUsize>,
}

impl NamedService for Counting {
    const NAME: &'static str = "concord.v1.Tree";
}

impl Service<http::Request<Body>> for Counting {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: http::Request<Body>) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async {
            let mut response = http::Response::new(Body::empty());
            response
                .headers_mut()
                .insert("grpc-status", http::HeaderValue::from_static("0"));
            Ok(response)
        })
    }
}

/// Sends one request through `Coded(Authenticated(service))`: its grpc-status and
/// Concord code.
async fn call(service: &mut Coded<Authenticated<Counting>>) -> (String, Option<String>) {
    let request = http::Request::builder()
        .uri("/concord.v1.Tree/Get")
        .header("content-type", "application/grpc")
        .body(Body::empty())
        .unwrap();
    let response = service.call(request).await.unwrap();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    (
        header("grpc-status").unwrap_or_default(),
        header("concord-error-code"),
    )
}

#[tokio::test(start_paused = true)]
async fn a_team_over_its_request_rate_is_refused_before_the_handler_runs() {
    let dir = tempfile::tempdir().unwrap();
    let quota = QuotaConfig {
        requests_per_second: 4,
        requests_burst: 2,
        ..QuotaConfig::default()
    };
    let security = Security::new(&team_config(dir.path(), quota)).unwrap();
    let inner = Counting::default();
    let calls = inner.calls.clone();
    let mut service = Coded::new(Authenticated::new(inner, security));
    // The burst, then a refusal that never reaches the handler.
    for _ in 0..2 {
        assert_eq!(call(&mut service).await, ("0".into(), None));
    }
    let (status, code) = call(&mut service).await;
    assert_eq!(status, (tonic::Code::ResourceExhausted as i32).to_string());
    assert_eq!(code.as_deref(), Some("QUOTA_EXCEEDED"));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // A quarter of a second later (paused time): exactly one more.
    tokio::time::advance(Duration::from_millis(250)).await;
    assert_eq!(call(&mut service).await.0, "0");
    assert_ne!(call(&mut service).await.0, "0");
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    // An admin is never limited.
    let mut config = team_config(dir.path(), quota);
    config.local_identity = "admin".into();
    let inner = Counting::default();
    let calls = inner.calls.clone();
    let mut admin = Coded::new(Authenticated::new(inner, Security::new(&config).unwrap()));
    for _ in 0..10 {
        assert_eq!(call(&mut admin).await.0, "0");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 10);
}
