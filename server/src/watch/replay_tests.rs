//! Tests of replay from storage (snapshot + log) and of `open`, against a reference
//! run of the same txns through a tree.

use std::sync::Arc;

use bytes::Bytes;

use super::hub_tests::spec;
use super::snapshot::SnapshotWalk;
use super::*;
use crate::storage::{MemStorage, Storage};
use crate::tree::{DataTree, Event, EventKind};
use crate::txn::{CreateMode, CreateOp, DeleteOp, SetOp, Txn, TxnOp};

fn txn(zxid: Zxid, op: TxnOp) -> Txn {
    Txn {
        zxid,
        time_ms: 1_000 + zxid as i64,
        session_id: 0,
        request_id: 0,
        fence: None,
        op,
    }
}

fn create(path: &str) -> TxnOp {
    TxnOp::Create(CreateOp {
        path: path.into(),
        data: Bytes::from(format!("c:{path}")),
        mode: CreateMode::Persistent,
        ttl_ms: 0,
        null_data: false,
    })
}

fn set(path: &str, data: Bytes) -> TxnOp {
    TxnOp::Set(SetOp {
        path: path.into(),
        data,
        version: -1,
        null_data: false,
    })
}

fn delete(path: &str) -> TxnOp {
    TxnOp::Delete(DeleteOp {
        path: path.into(),
        version: -1,
    })
}

/// A scripted history: creates, sets and deletes under /a, /ab and /x, plus txns that
/// fail (no events). Zxids 1..=len.
fn script() -> Vec<Txn> {
    let mut ops = vec![create("/a"), create("/ab"), create("/x")];
    for r in 0..12 {
        ops.push(create(&format!("/a/r{r}")));
        ops.push(set("/a", Bytes::from(format!("a{r}"))));
        ops.push(set("/ab", Bytes::from(format!("ab{r}"))));
        if r > 0 {
            ops.push(delete(&format!("/a/r{}", r - 1)));
        }
        ops.push(create("/x")); // fails: exists
        ops.push(set(&format!("/a/r{r}"), Bytes::from(format!("r{r}"))));
    }
    ops.into_iter()
        .enumerate()
        .map(|(i, op)| txn(i as Zxid + 1, op))
        .collect()
}

/// Each txn's events, applied to a fresh tree; optionally snapshots at `snap_at`.
fn reference(txns: &[Txn], snap_at: &[Zxid], storage: &dyn Storage) -> Vec<(Zxid, Vec<Event>)> {
    let mut tree = DataTree::new();
    let mut out = Vec::new();
    for t in txns {
        out.push((t.zxid, tree.apply(t).events));
        if snap_at.contains(&t.zxid) {
            storage
                .save_snapshot(t.zxid, &tree.encode_snapshot().unwrap())
                .unwrap();
        }
    }
    out
}

fn expected(
    all: &[(Zxid, Vec<Event>)],
    spec: &WatchSpec,
    after: Zxid,
    until: Zxid,
) -> Vec<WatchBatch> {
    all.iter()
        .filter(|(z, _)| *z > after && *z <= until)
        .filter_map(|(z, evs)| spec.batch_for(*z, evs))
        .collect()
}

fn specs() -> Vec<WatchSpec> {
    vec![
        spec("/a", true),
        spec("/a", false),
        spec("/", true),
        WatchSpec {
            kinds: vec![EventKind::Deleted, EventKind::Created],
            with_data: false,
            ..spec("/a", true)
        },
    ]
}

fn stored(txns: &[Txn]) -> Arc<MemStorage> {
    let storage = Arc::new(MemStorage::new());
    storage.append(txns).unwrap();
    storage
}

#[tokio::test]
async fn replay_from_the_start_of_the_log() {
    let txns = script();
    let n = txns.len() as Zxid;
    let storage = stored(&txns);
    let all = reference(&txns, &[], storage.as_ref());
    assert!(
        all.iter().any(|(_, evs)| evs.is_empty()),
        "script has failing txns"
    );
    for spec in specs() {
        for (after, until) in [(0, n), (7, n), (20, 40), (n, n), (n - 1, n)] {
            let got = replay_from_storage(storage.clone(), &spec, after, until)
                .await
                .unwrap();
            assert_eq!(
                got,
                expected(&all, &spec, after, until),
                "{spec:?} ({after}, {until}]"
            );
        }
    }
}

#[tokio::test]
async fn replay_from_a_snapshot_and_compacted_before_it() {
    let txns = script();
    let n = txns.len() as Zxid;
    let storage = stored(&txns);
    let all = reference(&txns, &[12, 30], storage.as_ref());
    storage.purge(2).unwrap();
    assert_eq!(storage.log_start().unwrap(), 12);
    let s = spec("/a", true);
    assert_eq!(
        replay_from_storage(storage.clone(), &s, 5, n).await.err(),
        Some(WatchError::Compacted { oldest_zxid: 12 })
    );
    for spec in specs() {
        for after in [12, 20, 30, 45] {
            let got = replay_from_storage(storage.clone(), &spec, after, n)
                .await
                .unwrap();
            assert_eq!(
                got,
                expected(&all, &spec, after, n),
                "{spec:?} after {after}"
            );
        }
    }
}

/// Reads `feed` until it returned a batch at `zxid` (or failed), with a deadline.
async fn feed_through(feed: &mut WatchFeed, zxid: Zxid) -> Vec<WatchBatch> {
    let mut got = Vec::new();
    while got.last().map(|b: &WatchBatch| b.zxid) != Some(zxid) {
        match tokio::time::timeout(std::time::Duration::from_secs(10), feed.next()).await {
            Ok(Some(Ok(batch))) => got.push(batch),
            other => panic!("feed stopped after {} batches: {other:?}", got.len()),
        }
    }
    got
}

#[tokio::test]
async fn feed_bridges_storage_and_the_ring() {
    let txns = script();
    let n = txns.len() as Zxid;
    let storage = stored(&txns);
    let all = reference(&txns, &[], storage.as_ref());
    let config = WatchConfig {
        history_txns_max: 5,
        ..WatchConfig::default()
    };
    let hub = WatchHub::new(config, 0);
    for (z, evs) in &all {
        hub.publish(*z, evs);
    }
    assert!(hub.oldest_resumable_zxid() > 10);
    let s = spec("/a", true);
    // A 1-byte chunk: one batch per chunk, from storage and from the ring.
    let mut feed = WatchFeed::with_chunk_bytes(&hub, storage.clone(), s.clone(), 3, 1);
    let want_so_far = expected(&all, &s, 3, n);
    let last = want_so_far.last().unwrap().zxid;
    let mut got = feed_through(&mut feed, last).await;
    assert_eq!(got, want_so_far);

    // Then live events, and the whole sequence is exactly the suffix after 3.
    let live = vec![Event {
        zxid: n + 1,
        ..all[0].1[0].clone()
    }];
    hub.publish(n + 1, &live);
    got.extend(feed_through(&mut feed, n + 1).await);
    // One more ask finds the ring exhausted and registers live (then waits).
    let idle = tokio::time::timeout(std::time::Duration::from_millis(50), feed.next()).await;
    assert!(idle.is_err(), "{idle:?}");
    assert!(feed.is_live());
    assert_eq!(hub.watch_count(), 1);
    let mut want = expected(&all, &s, 3, n);
    want.push(WatchBatch {
        zxid: n + 1,
        events: live,
    });
    assert_eq!(got, want);
    assert_eq!(hub.stats().memory_bytes, 0, "nothing held once delivered");
    drop(feed);
    assert_eq!(hub.watch_count(), 0);

    let mut ahead = WatchFeed::new(&hub, storage, s, n + 5);
    assert_eq!(
        ahead.next().await,
        Some(Err(WatchError::Future {
            published_zxid: n + 1
        }))
    );
    assert_eq!(ahead.next().await, None);
}

#[tokio::test]
async fn feed_once_fires_from_storage_and_ends() {
    let txns = script();
    let storage = stored(&txns);
    let all = reference(&txns, &[], storage.as_ref());
    let config = WatchConfig {
        history_txns_max: 2,
        ..WatchConfig::default()
    };
    let hub = WatchHub::new(config, 0);
    for (z, evs) in &all {
        hub.publish(*z, evs);
    }
    let once = WatchSpec {
        once: true,
        ..spec("/a/r0", false)
    };
    let mut feed = WatchFeed::new(&hub, storage, once.clone(), 0);
    let first = expected(&all, &once, 0, 100).remove(0);
    assert_eq!(feed.next().await, Some(Ok(first.clone())));
    assert_eq!(first.events.len(), 1);
    assert_eq!(feed.next().await, None);
    assert_eq!(hub.watch_count(), 0);
}

/// Sets of 1 MiB to one node: with data, each event carries 2 MiB.
fn heavy_script(sets: usize) -> Vec<Txn> {
    let big = Bytes::from(vec![7u8; 1 << 20]);
    let mut txns = vec![txn(1, create("/big"))];
    for z in 2..=sets as Zxid + 1 {
        txns.push(txn(z, set("/big", big.clone())));
    }
    txns
}

#[tokio::test]
async fn storage_replay_streams_in_bounded_chunks() {
    // 40 sets with data are about 80 MiB of events: more than the old whole-replay
    // limit (64 MiB, then ReplayTooLarge); streamed, one chunk at a time.
    let txns = heavy_script(40);
    let n = txns.len() as Zxid;
    let storage = stored(&txns);
    let hub = WatchHub::new(
        WatchConfig {
            history_txns_max: 1,
            ..WatchConfig::default()
        },
        0,
    );
    let all = reference(&txns, &[], storage.as_ref());
    for (z, evs) in &all {
        hub.publish(*z, evs);
    }
    let heavy = spec("/big", false);
    let chunk_max = 4 << 20;
    let one_batch = 2 * (1 << 20) + 4096;
    let mut feed = WatchFeed::with_chunk_bytes(&hub, storage.clone(), heavy.clone(), 0, chunk_max);
    let mut got = 0;
    let mut peak = 0;
    while got < txns.len() {
        match feed.next().await {
            Some(Ok(batch)) => {
                got += 1;
                assert_eq!(batch.zxid, got as Zxid);
            }
            other => panic!("after {got}: {other:?}"),
        }
        peak = peak.max(hub.stats().memory_bytes);
        assert!(feed.pending_bytes() <= chunk_max + one_batch);
    }
    assert!(peak > 0, "chunks are charged to the watch budget");
    assert!(peak <= chunk_max + one_batch, "peak {peak}");
    // The whole of it, collected, is the reference.
    let whole = replay_from_storage(storage, &heavy, 0, n).await.unwrap();
    assert_eq!(whole, expected(&all, &heavy, 0, n));
}

#[tokio::test]
async fn storage_replays_are_limited_in_number() {
    let txns = script();
    let storage = stored(&txns);
    let all = reference(&txns, &[], storage.as_ref());
    let hub = WatchHub::new(
        WatchConfig {
            history_txns_max: 1,
            replays_max: 2,
            ..WatchConfig::default()
        },
        0,
    );
    for (z, evs) in &all {
        hub.publish(*z, evs);
    }
    let s = spec("/", true);
    let mut feeds: Vec<WatchFeed> = (0..3)
        .map(|_| WatchFeed::with_chunk_bytes(&hub, storage.clone(), s.clone(), 0, 1))
        .collect();
    assert!(matches!(feeds[0].next().await, Some(Ok(_))));
    assert!(matches!(feeds[1].next().await, Some(Ok(_))));
    assert_eq!(
        feeds[2].next().await,
        Some(Err(WatchError::Busy { replays_max: 2 }))
    );
    // A finished (dropped) replay frees its permit.
    feeds.remove(0);
    let mut again = WatchFeed::with_chunk_bytes(&hub, storage, s, 0, 1);
    assert!(matches!(again.next().await, Some(Ok(_))));
}

#[tokio::test]
async fn a_feed_cancelled_mid_replay_loses_nothing() {
    let txns = script();
    let n = txns.len() as Zxid;
    let storage = stored(&txns);
    let all = reference(&txns, &[20], storage.as_ref());
    let hub = WatchHub::new(
        WatchConfig {
            history_txns_max: 3,
            ..WatchConfig::default()
        },
        0,
    );
    for (z, evs) in &all {
        hub.publish(*z, evs);
    }
    let s = spec("/", true);
    let want = expected(&all, &s, 25, n);
    let mut feed = WatchFeed::with_chunk_bytes(&hub, storage, s, 25, 1);
    // Poll with a timer that often fires mid-read, as the api's progress timer does.
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while got.len() < want.len() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "stuck after {}",
            got.len()
        );
        match tokio::time::timeout(std::time::Duration::from_micros(50), feed.next()).await {
            Ok(Some(Ok(batch))) => got.push(batch),
            Ok(other) => panic!("after {}: {other:?}", got.len()),
            Err(_cancelled) => {}
        }
    }
    assert_eq!(got, want);
}

#[test]
fn snapshot_walk_is_the_tree_walk_node_by_node_at_its_zxid() {
    let mut tree = DataTree::new();
    let mut txns = script();
    let mut z = txns.len() as Zxid;
    for p in ["/a/r11/x", "/a/r11/x/y", "/a/r11/x/y/z", "/a/r11/b", "/x/q"] {
        z += 1;
        txns.push(txn(z, create(p)));
    }
    for t in &txns {
        tree.apply(t);
    }
    let cases = [
        ("/", true),
        ("/", false),
        ("/a", true),
        ("/a/r11", true),
        ("/a/r11/x/y/z", true),
        ("/x", false),
        ("/missing", true),
    ];
    let frozen = tree.clone();
    let mut walks: Vec<SnapshotWalk> = cases
        .iter()
        .map(|&(p, rec)| SnapshotWalk::new(frozen.clone(), p, rec))
        .collect();
    // Half-way through, the live tree moves on: the walks stay at their zxid.
    let firsts: Vec<_> = walks.iter_mut().map(|w| w.next()).collect();
    for p in ["/a/r11/x/y/new", "/a/zz", "/b"] {
        z += 1;
        tree.apply(&txn(z, create(p)));
    }
    z += 1;
    tree.apply(&txn(z, delete("/a/r11/b")));
    for ((walk, first), &(p, rec)) in walks.into_iter().zip(firsts).zip(&cases) {
        let got: Vec<_> = first.into_iter().chain(walk).collect();
        assert_eq!(got, frozen.walk(p, rec), "{p} recursive={rec}");
    }
    assert!(frozen.walk("/", true).len() >= 10);
}
