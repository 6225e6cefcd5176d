//! Team quotas on a real server process: a plain-text server whose local identity is
//! a team member (one identity per process). The team's root is `/`, so its paths
//! read the same before and after namespaces map them.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use concord_proto::v1 as pb;
use concord_tests::{code_of, config_file, config_flags, Server, ServerOptions};

/// A server whose callers are all team `q` (root `/`) with `quota` (TOML keys).
async fn server(quota: &str) -> (Server, tempfile::TempPath) {
    let cfg = config_file(&format!(
        "local_identity = \"q-1\"\n\
         [[teams]]\nname = \"q\"\nroot = \"/\"\nidentities = [\"q-*\"]\n\
         [teams.quota]\n{quota}\n"
    ));
    let server = Server::start(ServerOptions {
        extra: config_flags(&cfg),
        // Sessions outlive the test: none expires to free a place.
        session_ttl_ms: Some((100, 60_000)),
        ..ServerOptions::default()
    });
    server.wait_seeded().await;
    (server, cfg)
}

fn create(path: &str, data: &[u8]) -> pb::CreateRequest {
    pb::CreateRequest {
        path: path.into(),
        data: data.to_vec().into(),
        mode: pb::CreateMode::Persistent.into(),
        ..Default::default()
    }
}

fn create_op(path: &str) -> pb::Op {
    pb::Op {
        op: Some(pb::op::Op::Create(pb::CreateOp {
            path: path.into(),
            mode: pb::CreateMode::Persistent.into(),
            ..Default::default()
        })),
    }
}

fn set(path: &str, data: &[u8]) -> pb::SetRequest {
    pb::SetRequest {
        path: path.into(),
        data: data.to_vec().into(),
        version: -1,
        ..Default::default()
    }
}

#[tokio::test]
async fn t45_nodes_and_bytes_are_hit_exactly_at_their_limits() {
    let (server, _cfg) = server("nodes_max = 3\ndata_bytes_max = 10").await;
    let mut tree = server.tree().await;
    for p in ["/a", "/b", "/c"] {
        tree.create(create(p, b"")).await.unwrap();
    }
    let e = tree.create(create("/d", b"")).await.unwrap_err();
    assert_eq!(code_of(&e), "QUOTA_EXCEEDED");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted);
    assert!(
        e.message()
            .contains("team \"q\" would exceed its nodes quota: 3 used of 3, the write adds 1"),
        "{}",
        e.message()
    );
    assert!(
        !server.exists("/d").await,
        "a refused create changed nothing"
    );
    // Bytes: a set that grows data to the limit, then one byte more.
    tree.set(set("/a", b"0123456789")).await.unwrap();
    let e = tree.set(set("/b", b"x")).await.unwrap_err();
    assert_eq!(code_of(&e), "QUOTA_EXCEEDED");
    assert!(
        e.message().contains("data_bytes quota: 10 used of 10"),
        "{}",
        e.message()
    );
    let got = tree
        .get(concord_tests::get_req("/b"))
        .await
        .unwrap()
        .into_inner();
    assert!(got.data.is_empty());
    // A Multi over the limit changes nothing; a delete frees room once applied.
    let multi = pb::MultiRequest {
        ops: vec![
            create_op("/e"),
            pb::Op {
                op: Some(pb::op::Op::Delete(pb::DeleteOp {
                    path: "/c".into(),
                    version: -1,
                })),
            },
            create_op("/f"),
        ],
        ..Default::default()
    };
    let e = tree.multi(multi).await.unwrap_err();
    assert_eq!(code_of(&e), "QUOTA_EXCEEDED");
    assert!(server.exists("/c").await);
    tree.delete(concord_tests::delete_req("/c", -1))
        .await
        .unwrap();
    tree.create(create("/d", b"")).await.unwrap();
}

#[tokio::test]
async fn t45_watches_are_hit_exactly_at_their_limit() {
    let (server, _cfg) = server("watches_max = 2").await;
    let mut watch = server.watch().await;
    let request = || pb::WatchRequest {
        path: "/".into(),
        recursive: true,
        ..Default::default()
    };
    let mut open = Vec::new();
    for _ in 0..2 {
        let mut stream = watch.watch(request()).await.unwrap().into_inner();
        // The watch is registered: it says where it starts.
        assert!(stream.message().await.unwrap().is_some());
        open.push(stream);
    }
    let e = watch.watch(request()).await.unwrap_err();
    assert_eq!(code_of(&e), "QUOTA_EXCEEDED");
    assert!(
        e.message()
            .contains("watches quota on this server: 2 used of 2"),
        "{}",
        e.message()
    );
    // Closing one gives its place back (once the server sees the stream gone).
    drop(open.pop());
    concord_tests::eventually("a watch slot freed", Duration::from_secs(10), || {
        let mut watch = watch.clone();
        async move {
            let stream = watch.watch(request()).await.ok()?;
            Some(stream)
        }
    })
    .await;
}

#[tokio::test]
async fn t45_a_team_over_its_request_rate_is_refused() {
    // One request a second, a burst of 3: however slow this machine is, no more
    // than the burst plus one per elapsed second get through.
    let (server, _cfg) = server("requests_per_second = 1\nrequests_burst = 3").await;
    let mut tree = server.tree().await;
    let started = Instant::now();
    let mut admitted = 0u64;
    let mut refused = None;
    for _ in 0..50 {
        match tree.exists(concord_tests::exists_req("/")).await {
            Ok(_) => admitted += 1,
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let elapsed = started.elapsed().as_secs() + 1;
    let e = refused.expect("50 requests at once were all admitted");
    assert_eq!(code_of(&e), "QUOTA_EXCEEDED");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted);
    assert!(
        e.message().contains("requests_per_second quota"),
        "{}",
        e.message()
    );
    assert!(admitted >= 1, "the burst admits requests");
    assert!(
        admitted <= 3 + elapsed,
        "{admitted} admitted in {elapsed} s"
    );
}

#[tokio::test]
async fn t45_sessions_are_hit_exactly_at_their_limit() {
    let (server, _cfg) = server("sessions_max = 2").await;
    let mut session = server.session().await;
    let open = || pb::OpenSessionRequest { ttl_ms: 60_000 };
    let first = session.open(open()).await.unwrap().into_inner();
    session.open(open()).await.unwrap();
    let e = session.open(open()).await.unwrap_err();
    assert_eq!(code_of(&e), "QUOTA_EXCEEDED");
    assert!(
        e.message().contains("sessions quota: 2 used of 2"),
        "{}",
        e.message()
    );
    // Closing one frees its place.
    session
        .close(pb::CloseSessionRequest {
            session_id: first.session_id,
        })
        .await
        .unwrap();
    session.open(open()).await.unwrap();
}
