//! Watches that lose nothing: resume from a zxid (from the in-memory history, from
//! storage, across a kill -9 and restart), compacted history, and a slow consumer cut
//! off and resumed. The initial snapshot is in t32.

#![allow(clippy::unwrap_used)]

mod watch_util;

use concord_proto::v1 as pb;
use concord_tests::{code_of, config_file, config_flags, eventually, Server, ServerOptions};
use pb::watch_response::Msg;
use pb::EventKind as K;
use watch_util::*;

/// Nodes /r/n0.. with a Multi and sets in between: `count` txns under /r.
async fn write_batch(w: &mut Writer, from: usize, count: usize) {
    for i in from..from + count {
        match i % 4 {
            0 => {
                let (a, b) = (format!("/r/m{i}a"), format!("/r/m{i}b"));
                w.multi_create(&[&a, &b]).await;
            }
            1 => {
                w.create(&format!("/r/n{i}"), "x").await;
            }
            2 => {
                w.set("/r", &i.to_string()).await;
            }
            _ => {
                w.create(&format!("/outside{i}"), "").await;
            }
        };
    }
}

#[tokio::test]
async fn t31_resume_from_a_zxid_loses_nothing_and_repeats_nothing() {
    let server = Server::start(ServerOptions::default());
    let mut w = Writer::new(&server).await;
    w.create("/r", "").await;
    let mut full = open(&server, request("/r", true)).await;
    let mut broken = open(&server, request("/r", true)).await;
    let st = started(&mut full).await;
    assert_eq!(started(&mut broken).await.zxid, st.zxid);
    write_batch(&mut w, 0, 12).await;

    // Read part of the stream, stopping at a txn boundary with more events queued.
    let expected = w.expected("/r", true, st.zxid);
    let cut_zxid = expected[expected.len() / 2].0;
    let upto = expected.iter().filter(|k| k.0 <= cut_zxid).count();
    let first = take_events(&mut broken, upto).await;
    assert_eq!(first.last().unwrap().zxid, cut_zxid);
    drop(broken);

    write_batch(&mut w, 12, 12).await;
    let resume = pb::WatchRequest {
        start_zxid: Some(cut_zxid),
        ..request("/r", true)
    };
    let mut resumed = open(&server, resume).await;
    assert_eq!(started(&mut resumed).await.zxid, cut_zxid);
    let rest = events_through(&mut resumed, w.last_zxid).await;
    let all = events_through(&mut full, w.last_zxid).await;

    assert_eq!(keys(&all), w.expected("/r", true, st.zxid));
    let joined: Vec<pb::WatchEvent> = first.into_iter().chain(rest.clone()).collect();
    assert_eq!(joined, all, "resumed stream differs from the unbroken one");
    assert!(rest.iter().all(|e| e.zxid > cut_zxid));
    // It goes on live after the replay.
    let z = w.set("/r", "live").await;
    let live = events_through(&mut resumed, z).await;
    assert_eq!(keys(&live), [(z, K::DataChanged, "/r".to_owned())]);
}

#[tokio::test]
async fn t31_resume_across_kill9_and_restart_replays_the_log() {
    let mut server = Server::start(ServerOptions::default());
    let mut w = Writer::new(&server).await;
    w.create("/r", "").await;
    let mut live = open(&server, request("/", true)).await;
    let st = started(&mut live).await;
    write_batch(&mut w, 0, 10).await;
    let before = events_through(&mut live, w.last_zxid).await;
    assert_eq!(keys(&before), w.expected("/", true, st.zxid));
    let middle = before[before.len() / 2].zxid;

    server.kill9();
    server.restart();
    // The broken stream ends with an error or a clean end, not with more events.
    loop {
        match next(&mut live).await {
            Ok(Some(Msg::Progress(_))) => {}
            Ok(None) | Err(_) => break,
            Ok(Some(other)) => panic!("after the kill: {other:?}"),
        }
    }

    w.reconnect(&server).await;
    for from in [st.zxid, middle] {
        let req = pb::WatchRequest {
            start_zxid: Some(from),
            ..request("/", true)
        };
        let mut s = open(&server, req).await;
        assert_eq!(started(&mut s).await.zxid, from);
        let replayed = events_through(&mut s, w.last_zxid).await;
        let want: Vec<&pb::WatchEvent> = before.iter().filter(|e| e.zxid > from).collect();
        assert_eq!(
            replayed.iter().collect::<Vec<_>>(),
            want,
            "replay from {from:#x}"
        );
    }
    // A watch resumed from before the kill continues live after the restart.
    let req = pb::WatchRequest {
        start_zxid: Some(middle),
        ..request("/r", true)
    };
    let mut s = open(&server, req).await;
    started(&mut s).await;
    let z_before = w.last_zxid;
    w.set("/r", "after").await;
    w.create("/r/after", "").await;
    let got = events_through(&mut s, w.last_zxid).await;
    assert_eq!(keys(&got), w.expected("/r", true, middle));
    assert!(got.iter().filter(|e| e.zxid > z_before).count() == 3);
}

/// A server with a 10-txn watch history and snapshots every `snapshot_every_txns`
/// (all kept), 60 writes, then resumes from each of `resume_at` (indexes of writes):
/// further back than the ring, so the events are rebuilt from a snapshot (or the
/// empty tree) and the log; then the same after kill -9.
async fn resume_far_back(snapshot_every_txns: u64, resume_at: &[usize]) {
    let cfg = config_file("watch_history_txns_max = 10\nsnapshots_keep = 10\n");
    let mut server = Server::start(ServerOptions {
        snapshot_every_txns,
        extra: config_flags(&cfg),
        ..ServerOptions::default()
    });
    let mut w = Writer::new(&server).await;
    w.create("/r", "").await;
    let mut live = open(&server, request("/", true)).await;
    let st = started(&mut live).await;
    let mut zxids = Vec::new();
    for i in 0..60 {
        write_batch(&mut w, i, 1).await;
        zxids.push(w.last_zxid);
    }
    let all = events_through(&mut live, w.last_zxid).await;
    assert_eq!(keys(&all), w.expected("/", true, st.zxid));
    if snapshot_every_txns < 60 {
        eventually("a snapshot is written", WAIT, || async {
            server.log().contains("snapshot written").then_some(())
        })
        .await;
    }
    let status = status(&server).await;
    let oldest = status.watch_history_oldest_zxid;
    assert!(status.oldest_resumable_zxid <= from_min(resume_at, &zxids));
    let from = resume_at.iter().map(|&i| zxids[i]).collect::<Vec<_>>();
    assert!(
        from.iter().all(|&z| z < oldest),
        "the ring reaches back to {oldest:#x}: the test would not exercise storage"
    );
    let check = |got: Vec<pb::WatchEvent>, from: u64| {
        let want: Vec<&pb::WatchEvent> = all.iter().filter(|e| e.zxid > from).collect();
        assert_eq!(
            got.iter().collect::<Vec<_>>(),
            want,
            "resume from {from:#x}"
        );
    };
    for &z in &from {
        let req = pb::WatchRequest {
            start_zxid: Some(z),
            ..request("/", true)
        };
        let mut s = open(&server, req).await;
        assert_eq!(started(&mut s).await.zxid, z);
        check(events_through(&mut s, w.last_zxid).await, z);
    }
    // A one-shot watch replayed from storage fires once.
    let once = pb::WatchRequest {
        start_zxid: Some(from[0]),
        once: true,
        ..request("/r", true)
    };
    let mut s = open(&server, once).await;
    started(&mut s).await;
    let first = take_events(&mut s, 1).await;
    assert_eq!(key(&first[0]), w.expected("/r", true, from[0])[0]);
    for _ in 0..1000 {
        match next_msg(&mut s).await {
            None => break,
            Some(Msg::Progress(_)) => {}
            Some(other) => panic!("a once watch went on: {other:?}"),
        }
    }

    // And after kill -9, from disk only.
    server.kill9();
    server.restart();
    for &z in &from {
        let req = pb::WatchRequest {
            start_zxid: Some(z),
            ..request("/", true)
        };
        let mut s = open(&server, req).await;
        started(&mut s).await;
        check(events_through(&mut s, w.last_zxid).await, z);
    }
}

#[tokio::test]
async fn t31_resume_from_far_back_replays_the_whole_log() {
    // No snapshot: the replay starts from the empty tree.
    resume_far_back(100_000, &[0, 4, 25, 44]).await;
}

#[tokio::test]
async fn t31_resume_from_far_back_replays_from_a_snapshot() {
    // Snapshots at about zxid 20, 40, 60; the log before the oldest one is purged
    // (so no resume point before it), resumes after it start from a snapshot.
    resume_far_back(20, &[25, 39, 44]).await;
}

#[tokio::test]
async fn t31_purged_history_is_zxid_compacted_and_the_hint_works() {
    let cfg = config_file("watch_history_txns_max = 5\nsnapshots_keep = 1\n");
    let server = Server::start(ServerOptions {
        snapshot_every_txns: 10,
        extra: config_flags(&cfg),
        ..ServerOptions::default()
    });
    let mut w = Writer::new(&server).await;
    w.create("/r", "").await;
    let first = w.last_zxid;
    let mut live = open(&server, request("/", true)).await;
    let st = started(&mut live).await;
    for i in 0..40 {
        write_batch(&mut w, i, 1).await;
    }
    let all = events_through(&mut live, w.last_zxid).await;
    assert_eq!(keys(&all), w.expected("/", true, st.zxid));
    let from_first = pb::WatchRequest {
        start_zxid: Some(first),
        ..request("/", true)
    };
    // Snapshots and purges run in the background: wait until the log is cut.
    let status = eventually("the log before the snapshot is purged", WAIT, || {
        let req = from_first.clone();
        let server = &server;
        async move {
            let mut client = server.watch().await;
            client.watch(req).await.err()
        }
    })
    .await;
    assert_eq!(code_of(&status), "ZXID_COMPACTED", "{status:?}");
    // The message names where a resume can start; that point works.
    let hint = status
        .message()
        .split("resume from 0x")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_hexdigit()).next())
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .unwrap_or_else(|| panic!("no resume point in {:?}", status.message()));
    assert!(hint > first && hint <= w.last_zxid, "hint {hint:#x}");
    let req = pb::WatchRequest {
        start_zxid: Some(hint),
        ..request("/", true)
    };
    let mut s = open(&server, req).await;
    started(&mut s).await;
    let got = events_through(&mut s, w.last_zxid).await;
    let want: Vec<&pb::WatchEvent> = all.iter().filter(|e| e.zxid > hint).collect();
    assert_eq!(got.iter().collect::<Vec<_>>(), want);
}

/// The zxid named in a SLOW_CONSUMER message (`... resume with start_zxid=N`).
fn resume_zxid(status: &tonic::Status) -> u64 {
    status
        .message()
        .rsplit("start_zxid=")
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no start_zxid in {:?}", status.message()))
}

#[tokio::test]
async fn t31_slow_consumer_is_cut_and_resumes_without_a_gap() {
    slow_consumer_is_cut_and_resumes("watch_queue_txns_max = 16\n").await;
}

/// The same with a queue bounded in bytes only: 256 KiB is 4 of these txns (32 KiB of
/// data and 32 KiB of prev_data each), whatever the txn bound (4096 by default).
#[tokio::test]
async fn t31_slow_consumer_over_its_bytes_is_cut_and_resumes_without_a_gap() {
    slow_consumer_is_cut_and_resumes("watch_queue_bytes_max = 262144\n").await;
}

async fn slow_consumer_is_cut_and_resumes(toml: &str) {
    let cfg = config_file(toml);
    let server = Server::start(ServerOptions {
        extra: config_flags(&cfg),
        ..ServerOptions::default()
    });
    let mut w = Writer::new(&server).await;
    w.create("/slow", "").await;
    let req = pb::WatchRequest {
        with_data: true,
        ..request("/slow", true)
    };
    let mut s = open(&server, req).await;
    let st = started(&mut s).await;

    // 32 KiB per set, data and prev_data in each event. The queue (16 txns, or
    // 256 KiB) is larger than a group commit of the 8 writers, so the cut comes from
    // the consumer not reading: about 120 txns fill the HTTP/2 window and the
    // stream's buffers, then the queue; 320 sets are well past that.
    const WRITERS: usize = 8;
    const SETS_PER_WRITER: usize = 40;
    let blob = "x".repeat(32 << 10);
    for i in 0..WRITERS {
        w.create(&format!("/slow/n{i}"), "").await;
    }
    let mut tasks = Vec::new();
    for i in 0..WRITERS {
        let mut tree = server.tree().await;
        let blob = blob.clone();
        tasks.push(tokio::spawn(async move {
            let mut zxids = Vec::new();
            for _ in 0..SETS_PER_WRITER {
                let req = pb::SetRequest {
                    path: format!("/slow/n{i}"),
                    data: blob.clone().into_bytes().into(),
                    version: -1,
                    ..Default::default()
                };
                let r = tree.set(req).await.unwrap().into_inner();
                zxids.push((r.header.unwrap().zxid, format!("/slow/n{i}")));
            }
            zxids
        }));
    }
    for t in tasks {
        for (zxid, path) in t.await.unwrap() {
            w.log.push((zxid, K::DataChanged, path));
            w.last_zxid = w.last_zxid.max(zxid);
        }
    }
    w.log.sort();
    let expected = w.expected("/slow", true, st.zxid);

    // Now read: a prefix of the events, then SLOW_CONSUMER naming the last of them.
    let mut delivered = Vec::new();
    let cut = loop {
        assert!(delivered.len() <= expected.len(), "more events than writes");
        match next(&mut s).await {
            Ok(Some(Msg::Event(e))) => delivered.push(e),
            Ok(Some(Msg::Progress(p))) => {
                assert!(p.zxid < w.last_zxid, "never cut: got everything")
            }
            Err(status) => break status,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(code_of(&cut), "SLOW_CONSUMER", "{cut:?}");
    let z = resume_zxid(&cut);
    assert_eq!(delivered.last().map(|e| e.zxid), Some(z), "{cut:?}");
    assert!(z < w.last_zxid);
    assert_eq!(keys(&delivered), expected[..delivered.len()]);
    for e in delivered.iter().filter(|e| key(e).1 == K::DataChanged) {
        assert_eq!(e.data.len(), blob.len());
    }

    let resume = pb::WatchRequest {
        start_zxid: Some(z),
        ..request("/slow", true)
    };
    let mut resumed = open(&server, resume).await;
    started(&mut resumed).await;
    let rest = events_through(&mut resumed, w.last_zxid).await;
    let joined: Vec<Key> = keys(&delivered).into_iter().chain(keys(&rest)).collect();
    assert_eq!(joined, expected);
}

/// The oldest zxid a test resumes from.
fn from_min(resume_at: &[usize], zxids: &[u64]) -> u64 {
    resume_at.iter().map(|&i| zxids[i]).min().unwrap_or(0)
}
