//! Memory benchmark (ignored by default: it writes ~0.5 GB and reads the server's RSS):
//! what unread watches cost the server, as the difference in resident memory between
//! a run with them and the same run without. Run with
//! `cargo build --bins && cargo test -p concord-tests --test t37_watch_memory -- --ignored --nocapture`.
//!
//! Issue 10 measured +361 MB for 5 unread watches with data on a busy subtree, and
//! +1.2 GB for 30 unread resumes from an old `start_zxid`. With the byte bounds, each
//! unread watch holds at most its queue (`watch_queue_bytes_max`, 8 MiB) until it is
//! cut, plus the txn and the few messages in flight to its client; and at most
//! `watch_replays_max` (4) replays from the log run at once.

#![allow(clippy::unwrap_used)]

mod watch_util;

use concord_proto::v1 as pb;
use concord_tests::{config_file, config_flags, Server, ServerOptions};
use watch_util::*;

const MIB: u64 = 1 << 20;
/// Sets of 1 MiB written to one node.
const SETS: usize = 200;

/// The server's resident set, in bytes.
fn rss(server: &Server) -> u64 {
    let pid = server.pid().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// RSS growth over SETS sets of 1 MiB with `watches` unread watches opened first
/// (resuming from the first zxid when `resume`).
async fn growth(watches: usize, resume: bool) -> u64 {
    // A short history, so that resumes replay the log.
    let cfg = config_file("watch_history_txns_max = 10\n");
    let server = Server::start(ServerOptions {
        extra: config_flags(&cfg),
        ..ServerOptions::default()
    });
    let mut w = Writer::new(&server).await;
    let first = w.create("/busy", "").await;
    w.create("/busy/n", "").await;
    let blob = vec![7u8; MIB as usize];
    let mut tree = server.tree().await;
    let set = |tree: &mut pb::tree_client::TreeClient<_>| {
        let req = pb::SetRequest {
            path: "/busy/n".into(),
            data: blob.clone().into(),
            version: -1,
            ..Default::default()
        };
        let mut tree = tree.clone();
        async move { tree.set(req).await.unwrap() }
    };
    if resume {
        // History for the resumes to replay.
        for _ in 0..SETS / 2 {
            set(&mut tree).await;
        }
    }
    let before = rss(&server);
    let mut streams = Vec::new();
    for _ in 0..watches {
        let req = pb::WatchRequest {
            path: "/busy".into(),
            recursive: true,
            with_data: true,
            start_zxid: resume.then_some(first),
            ..Default::default()
        };
        let mut s = open(&server, req).await;
        started(&mut s).await;
        streams.push(s); // never read again
    }
    for _ in 0..SETS {
        set(&mut tree).await;
    }
    let after = rss(&server);
    drop(streams);
    after.saturating_sub(before)
}

#[tokio::test]
#[ignore = "memory benchmark: run with --ignored --nocapture"]
async fn t37_unread_watches_cost_a_bounded_amount() {
    let base = growth(0, false).await;
    let five = growth(5, false).await;
    let cost = five.saturating_sub(base);
    println!(
        "5 unread watches: +{} MiB over the same writes without them ({} vs {} MiB)",
        cost / MIB,
        five / MIB,
        base / MIB
    );
    let base = growth(0, true).await;
    let thirty = growth(30, true).await;
    let cost_resume = thirty.saturating_sub(base);
    println!(
        "30 unread resumes: +{} MiB over the same writes without them ({} vs {} MiB)",
        cost_resume / MIB,
        thirty / MIB,
        base / MIB
    );
    // Generous: queues (5 x 8 MiB) plus what is in flight to each client.
    assert!(cost < 150 * MIB, "5 unread watches cost {} MiB", cost / MIB);
    assert!(
        cost_resume < 300 * MIB,
        "30 unread resumes cost {} MiB",
        cost_resume / MIB
    );
}
