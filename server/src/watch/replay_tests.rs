//! Tests of replay from storage (snapshot + log) and of `open`, against a reference
//! run of the same txns through a tree.

use std::sync::Arc;

use bytes::Bytes;

use super::hub_tests::{next, spec};
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
    })
}

fn set(path: &str, data: Bytes) -> TxnOp {
    TxnOp::Set(SetOp {
        path: path.into(),
        data,
        version: -1,
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

#[tokio::test]
async fn open_bridges_storage_and_the_ring() {
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
    let (replayed, mut rx) = open(&hub, storage.clone(), s.clone(), 3).await.unwrap();
    assert!(!replayed.is_empty());
    assert_eq!(hub.watch_count(), 1);

    // Then live events, and the whole sequence is exactly the suffix after 3.
    let live = vec![Event {
        zxid: n + 1,
        ..all[0].1[0].clone()
    }];
    hub.publish(n + 1, &live);
    let mut got = replayed;
    while got.last().map(|b| b.zxid) != Some(n + 1) {
        got.push(next(&mut rx).await.unwrap().unwrap());
    }
    let mut want = expected(&all, &s, 3, n);
    want.push(WatchBatch {
        zxid: n + 1,
        events: live,
    });
    assert_eq!(got, want);

    // A resume point the ring still holds needs no storage work.
    let (replayed, _rx) = open(&hub, storage.clone(), s.clone(), n).await.unwrap();
    assert!(replayed.is_empty());
    assert_eq!(
        open(&hub, storage, s, n + 5).await.err(),
        Some(WatchError::Future {
            published_zxid: n + 1
        })
    );
}

#[tokio::test]
async fn open_once_fires_from_storage_and_ends() {
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
    let (replayed, mut rx) = open(&hub, storage, once.clone(), 0).await.unwrap();
    let first = expected(&all, &once, 0, 100).remove(0);
    assert_eq!(replayed, [first]);
    assert_eq!(replayed[0].events.len(), 1);
    assert!(next(&mut rx).await.is_none());
    assert_eq!(hub.watch_count(), 0);
}

#[tokio::test]
async fn replay_larger_than_its_bound_fails() {
    let big = Bytes::from(vec![7u8; 1 << 20]);
    let mut txns = vec![txn(1, create("/big"))];
    let sets = REPLAY_BYTES_MAX / (2 << 20) + 2;
    for z in 2..=sets as Zxid + 1 {
        txns.push(txn(z, set("/big", big.clone())));
    }
    let storage = stored(&txns);
    let n = txns.len() as Zxid;
    let heavy = spec("/big", false);
    assert!(matches!(
        replay_from_storage(storage.clone(), &heavy, 0, n).await,
        Err(WatchError::ReplayTooLarge { .. })
    ));
    // Without data the same replay is small.
    let light = WatchSpec {
        with_data: false,
        ..heavy
    };
    let got = replay_from_storage(storage, &light, 0, n).await.unwrap();
    assert_eq!(got.len(), txns.len());
}
