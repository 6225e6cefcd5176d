//! Sessions against a real server: ephemerals live exactly as long as their session.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use concord_proto::v1 as pb;
use concord_tests::{code_of, eventually, Server, ServerOptions};
use tokio_stream::StreamExt;

async fn open(server: &Server, ttl_ms: i64) -> u64 {
    let r = server
        .session()
        .await
        .open(pb::OpenSessionRequest { ttl_ms })
        .await
        .unwrap()
        .into_inner();
    r.session_id
}

/// Opens a KeepAlive stream: where pings go, and where their answers come from.
async fn keep_alive_stream(
    server: &Server,
) -> (
    tokio::sync::mpsc::Sender<pb::KeepAliveRequest>,
    tonic::Streaming<pb::KeepAliveResponse>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let replies = server
        .session()
        .await
        .keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    (tx, replies)
}

async fn create_ephemeral(server: &Server, path: &str, session_id: u64) {
    server
        .tree()
        .await
        .create(pb::CreateRequest {
            path: path.into(),
            mode: pb::CreateMode::Ephemeral.into(),
            session_id,
            ..Default::default()
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn t20_ttl_is_clamped_to_tick_range() {
    // tick 50 ms: TTLs are clamped to [100, 1000] ms.
    let server = Server::start(ServerOptions::default());
    let mut s = server.session().await;
    let low = s.open(pb::OpenSessionRequest { ttl_ms: 1 }).await.unwrap();
    assert_eq!(low.into_inner().ttl_ms, 100);
    let high = s
        .open(pb::OpenSessionRequest { ttl_ms: 99_999 })
        .await
        .unwrap();
    assert_eq!(high.into_inner().ttl_ms, 1000);
    let err = s
        .open(pb::OpenSessionRequest { ttl_ms: -5 })
        .await
        .unwrap_err();
    assert_eq!(code_of(&err), "BAD_ARGUMENTS");
}

#[tokio::test]
async fn t20_ephemeral_lives_while_keepalives_flow_then_expires() {
    let server = Server::start(ServerOptions::default());
    let sid = open(&server, 300).await;
    create_ephemeral(&server, "/alive", sid).await;

    // Ping every 60 ms for 1.5 s (five TTLs): the node must stay.
    let (tx, mut replies) = keep_alive_stream(&server).await;
    for _ in 0..25 {
        tx.send(pb::KeepAliveRequest {
            session_id: sid,
            ..Default::default()
        })
        .await
        .unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(5), replies.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(!reply.expired);
        assert_eq!(reply.ttl_ms, 300);
        assert!(server.exists("/alive").await, "expired while pinged");
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    // Stop pinging: the session expires and takes its node.
    drop(tx);
    eventually(
        "the ephemeral is deleted",
        Duration::from_secs(5),
        || async { (!server.exists("/alive").await).then_some(()) },
    )
    .await;
    let err = server
        .session()
        .await
        .get(pb::GetSessionRequest {
            session_id: sid,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(code_of(&err), "SESSION_EXPIRED");
}

#[tokio::test]
async fn t20_close_deletes_ephemerals_at_once() {
    let server = Server::start(ServerOptions::default());
    let sid = open(&server, 1000).await;
    create_ephemeral(&server, "/a", sid).await;
    create_ephemeral(&server, "/b", sid).await;
    let info = server
        .session()
        .await
        .get(pb::GetSessionRequest {
            session_id: sid,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert_eq!(info.ephemerals, ["/a", "/b"]);
    server
        .session()
        .await
        .close(pb::CloseSessionRequest { session_id: sid })
        .await
        .unwrap();
    assert!(!server.exists("/a").await && !server.exists("/b").await);
    let err = server
        .session()
        .await
        .close(pb::CloseSessionRequest { session_id: sid })
        .await
        .unwrap_err();
    assert_eq!(code_of(&err), "SESSION_EXPIRED");
}

#[tokio::test]
async fn t20_sessions_survive_restart_with_a_fresh_ttl() {
    let mut server = Server::start(ServerOptions::default());
    let sid = open(&server, 1000).await;
    create_ephemeral(&server, "/kept", sid).await;
    server.kill9();
    server.restart();
    // Right after the restart the session is alive, with a full TTL ahead of it.
    let info = server
        .session()
        .await
        .get(pb::GetSessionRequest {
            session_id: sid,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert!(info.remaining_ms > 500, "remaining {}", info.remaining_ms);
    assert!(server.exists("/kept").await);
    // Without keep-alives it then expires.
    eventually(
        "the ephemeral is deleted",
        Duration::from_secs(5),
        || async { (!server.exists("/kept").await).then_some(()) },
    )
    .await;
}

/// Creates `path` (persistent); returns the create's zxid.
async fn create_at(server: &Server, path: &str) -> u64 {
    let r = server
        .tree()
        .await
        .create(pb::CreateRequest {
            path: path.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    r.header.unwrap().zxid
}

#[tokio::test]
async fn t20_a_server_behind_the_pings_min_zxid_waits_before_calling_a_session_expired() {
    // A follower still catching up has not heard of a session opened after its applied
    // zxid. Here the server is made "behind" by a min_zxid it has not reached yet: it
    // must not answer (not `expired`, not anything) until it has applied it.
    let server = Server::start(ServerOptions::default());
    let applied = create_at(&server, "/before").await;
    let (tx, mut replies) = keep_alive_stream(&server).await;
    let unknown = pb::KeepAliveRequest {
        session_id: 424_242,
        min_zxid: applied + 2,
    };
    tx.send(unknown).await.unwrap();
    // No answer while the server is behind the ping (a server that ignored min_zxid
    // would answer `expired` at once).
    let early = tokio::time::timeout(Duration::from_millis(300), replies.next()).await;
    assert!(
        early.is_err(),
        "answered before applying min_zxid: {early:?}"
    );
    create_at(&server, "/a").await;
    let reached = create_at(&server, "/b").await;
    assert_eq!(reached, applied + 2);
    let reply = tokio::time::timeout(Duration::from_secs(5), replies.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(reply.header.unwrap().zxid >= applied + 2);
    assert!(reply.expired, "the session never existed: {reply:?}");
}
