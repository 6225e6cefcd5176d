//! Watches whose client has gone: the server notices a closed stream at once, not at
//! its next message, so an abandoned watch with a huge progress interval (no
//! heartbeat for 49 days) leaves the server's watch count as soon as its client does.
//! Both ways a client leaves are tried: cancelling the stream on a live connection
//! (HTTP/2 RST_STREAM), and closing the connection.

#![allow(clippy::unwrap_used)]

mod watch_util;

use std::time::Duration;

use concord_proto::v1 as pb;
use concord_tests::{eventually, Server, ServerOptions};
use watch_util::*;

/// The server's registered watches, as Cluster.Status reports them.
async fn watch_count(server: &Server) -> u64 {
    status(server).await.watch_count
}

async fn wait_watch_count(server: &Server, want: u64, what: &str) {
    eventually(what, Duration::from_secs(10), || async {
        (watch_count(server).await == want).then_some(())
    })
    .await;
}

/// A watch that would send its first Progress only after u32::MAX ms.
fn silent(path: &str, start_zxid: Option<u64>) -> pb::WatchRequest {
    pb::WatchRequest {
        path: path.into(),
        recursive: true,
        progress_interval_ms: u32::MAX,
        start_zxid,
        ..Default::default()
    }
}

#[tokio::test]
async fn t36_abandoned_watches_are_unregistered_at_once() {
    let server = Server::start(ServerOptions::default());
    let mut w = Writer::new(&server).await;
    let z = w.create("/a", "").await;
    assert_eq!(watch_count(&server).await, 0);

    // Cancelled streams on a connection that stays open.
    let mut client = server.watch().await;
    let mut live = client.watch(silent("/a", None)).await.unwrap().into_inner();
    started(&mut live).await;
    let mut resumed = client
        .watch(silent("/a", Some(z - 1)))
        .await
        .unwrap()
        .into_inner();
    started(&mut resumed).await;
    // The resumed one delivers the create of /a, then both are live and idle.
    match next_msg(&mut resumed).await {
        Some(pb::watch_response::Msg::Event(e)) => assert_eq!(e.zxid, z),
        other => panic!("expected the replayed event, got {other:?}"),
    }
    wait_watch_count(&server, 2, "two watches registered").await;
    drop(live);
    drop(resumed);
    wait_watch_count(&server, 0, "cancelled watches unregistered").await;

    // A connection that closes under its watch.
    let mut gone = server.watch().await;
    let mut s = gone.watch(silent("/", None)).await.unwrap().into_inner();
    started(&mut s).await;
    wait_watch_count(&server, 1, "the watch registered").await;
    drop(s);
    drop(gone);
    wait_watch_count(&server, 0, "the closed connection's watch unregistered").await;

    // The channel of the first client still works: it was only its streams.
    let mut again = client.watch(silent("/a", None)).await.unwrap().into_inner();
    started(&mut again).await;
    wait_watch_count(&server, 1, "a new watch on the old connection").await;
}

/// The Rust SDK's watch, dropped, cancels its stream (its connection, shared with the
/// client's other calls, stays open): the server unregisters it at once.
#[tokio::test]
async fn t36_a_dropped_sdk_watch_is_unregistered_at_once() {
    let server = Server::start(ServerOptions::default());
    let client = concord::Client::connect(server.endpoint()).await.unwrap();
    let options = concord::WatchOptions {
        progress_interval_ms: u32::MAX,
        ..concord::WatchOptions::path("/")
    };
    let watch = client.watch(options.clone()).await.unwrap();
    wait_watch_count(&server, 1, "the SDK's watch registered").await;
    drop(watch);
    wait_watch_count(&server, 0, "the dropped SDK watch unregistered").await;
    // The client's connection went on: a new watch registers on it.
    let _again = client.watch(options).await.unwrap();
    wait_watch_count(&server, 1, "a new watch on the same client").await;
}
