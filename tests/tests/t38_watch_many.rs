//! One Rust SDK client holds 5,000 watches on one server, more than one HTTP/2
//! connection carries (the server allows `client_streams_per_connection_max`, 1,024
//! by default, streams on one): the client opens more connections to the server as
//! its streams fill them, every watch sees a write made after all are open, and a
//! unary call still answers while they are held.
//!
//! The server's per-team watch quota (`[teams.quota] watches_max`) is unlimited by
//! default, so the default server takes 5,000 watches from one team.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use concord::{Client, CreateOptions, ReadOptions, WatchMessage, WatchOptions};
use concord_tests::{Server, ServerOptions};
use futures::future::join_all;
use tokio::time::{timeout_at, Instant};

const WATCHES: usize = 5_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t38_one_client_holds_5000_watches_and_each_sees_a_write() {
    let server = Server::start(ServerOptions::default());
    let client = Client::connect(server.endpoint()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);

    // Opened all at once, each read to its Started: registered on the server.
    let opened = join_all((0..WATCHES).map(|i| {
        let client = client.clone();
        async move {
            let mut watch = client.watch(WatchOptions::path("/many")).await?;
            match watch.next().await {
                Some(Ok(WatchMessage::Started { .. })) => Ok(watch),
                other => panic!("watch {i}: {other:?} instead of Started"),
            }
        }
    }));
    let watches: Vec<_> = timeout_at(deadline, opened)
        .await
        .unwrap_or_else(|_| panic!("{WATCHES} watches did not all start in 90 s"))
        .into_iter()
        .collect::<Result<_, concord::Error>>()
        .unwrap();
    let connections = client.link().connections();
    assert!(
        // 1,000 streams a connection at most, 64 connections at most.
        (WATCHES / 1000..=64).contains(&connections),
        "{connections} connections for {WATCHES} watches"
    );

    // A unary call is not held up behind the streams.
    timeout_at(
        Instant::now() + Duration::from_secs(10),
        client.get("/", ReadOptions::default()),
    )
    .await
    .expect("a read answers within 10 s while the watches are held")
    .unwrap();

    let created = client
        .create("/many", "x", CreateOptions::default())
        .await
        .unwrap();
    let seen = join_all(watches.into_iter().map(|mut watch| async move {
        loop {
            match watch.next().await {
                Some(Ok(WatchMessage::Event(e))) => return e.zxid,
                Some(Ok(_)) => {}
                other => panic!("{other:?} before the event"),
            }
        }
    }));
    let zxids = timeout_at(deadline, seen)
        .await
        .unwrap_or_else(|_| panic!("not every watch saw the write within 90 s"));
    assert_eq!(zxids.len(), WATCHES);
    assert!(zxids.iter().all(|z| *z == created.zxid), "{created:?}");
}
