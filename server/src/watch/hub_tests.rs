//! Tests of matching, the hub's fan-out, history resume, slow consumers and cleanup.

use std::time::Duration;

use bytes::Bytes;

use super::hub::CatchUp;
use super::queue::batch_bytes;
use super::*;
use crate::tree::{Event, EventKind, Stat};

const DEADLINE: Duration = Duration::from_secs(10);

pub(super) fn ev(zxid: Zxid, kind: EventKind, path: &str) -> Event {
    Event {
        zxid,
        kind,
        path: path.into(),
        data: Bytes::from(format!("new{zxid}")),
        prev_data: Bytes::from(format!("old{zxid}")),
        stat: Stat::default(),
    }
}

pub(super) fn spec(path: &str, recursive: bool) -> WatchSpec {
    WatchSpec {
        path: path.into(),
        recursive,
        kinds: vec![],
        once: false,
        with_data: true,
    }
}

fn hub(queue_txns_max: usize, history_txns_max: usize) -> WatchHub {
    let config = WatchConfig {
        queue_txns_max,
        history_txns_max,
        ..WatchConfig::default()
    };
    WatchHub::new(config, 0)
}

/// The next item, failing the test if none comes in time.
pub(super) async fn next(rx: &mut WatchReceiver) -> Option<Result<WatchBatch, WatchError>> {
    match tokio::time::timeout(DEADLINE, rx.next()).await {
        Ok(item) => item,
        Err(_) => panic!("watch {} produced nothing before the deadline", rx.id()),
    }
}

async fn next_batch(rx: &mut WatchReceiver) -> WatchBatch {
    match next(rx).await {
        Some(Ok(b)) => b,
        other => panic!("expected a batch, got {other:?}"),
    }
}

/// (zxid, path) of each event of a batch.
fn paths(b: &WatchBatch) -> Vec<(Zxid, String)> {
    b.events
        .iter()
        .map(|e| (b.zxid, e.path.to_string()))
        .collect()
}

#[test]
fn spec_matching_exact_recursive_and_root() {
    let exact = spec("/a", false);
    let rec = spec("/a", true);
    let root = spec("/", true);
    let root_exact = spec("/", false);
    for (path, e, r, rt, rte) in [
        ("/a", true, true, true, false),
        ("/a/b", false, true, true, false),
        ("/a/b/c", false, true, true, false),
        ("/ab", false, false, true, false),
        ("/ab/c", false, false, true, false),
        ("/", false, false, true, true),
        ("/b", false, false, true, false),
    ] {
        let event = ev(1, EventKind::Created, path);
        assert_eq!(exact.matches(&event), e, "exact /a vs {path}");
        assert_eq!(rec.matches(&event), r, "recursive /a vs {path}");
        assert_eq!(root.matches(&event), rt, "recursive / vs {path}");
        assert_eq!(root_exact.matches(&event), rte, "exact / vs {path}");
    }
    let ancestors: Vec<&str> = self_and_ancestors("/a/b/c").collect();
    assert_eq!(ancestors, ["/a/b/c", "/a/b", "/a", "/"]);
    assert_eq!(self_and_ancestors("/").collect::<Vec<_>>(), ["/"]);
}

#[test]
fn hub_and_receiver_can_cross_tasks() {
    fn is_send<T: Send + 'static>(_: &T) {}
    let hub = hub(1, 1);
    let mut rx = hub.register_now(spec("/", true)).unwrap();
    is_send(&hub);
    is_send(&async move { rx.next().await });
}

#[test]
fn spec_kinds_filter() {
    let mut s = spec("/a", false);
    s.kinds = vec![EventKind::Deleted, EventKind::ChildrenChanged];
    assert!(!s.matches(&ev(1, EventKind::Created, "/a")));
    assert!(!s.matches(&ev(1, EventKind::DataChanged, "/a")));
    assert!(s.matches(&ev(1, EventKind::Deleted, "/a")));
    assert!(s.matches(&ev(1, EventKind::ChildrenChanged, "/a")));
}

#[tokio::test]
async fn hub_routes_by_path_kind_and_strips_data() {
    let hub = hub(16, 16);
    let mut exact = hub.register_now(spec("/a", false)).unwrap();
    let mut rec = hub.register_now(spec("/a", true)).unwrap();
    let mut root = hub.register_now(spec("/", true)).unwrap();
    let mut deletes = hub
        .register_now(WatchSpec {
            kinds: vec![EventKind::Deleted],
            with_data: false,
            ..spec("/", true)
        })
        .unwrap();
    hub.publish(1, &[ev(1, EventKind::Created, "/ab")]);
    hub.publish(2, &[ev(2, EventKind::Created, "/a/b")]);
    hub.publish(3, &[ev(3, EventKind::DataChanged, "/a")]);
    hub.publish(4, &[ev(4, EventKind::Deleted, "/a/b")]);
    hub.shutdown();

    let mut got = Vec::new();
    while let Some(b) = next(&mut exact).await {
        got.extend(paths(&b.unwrap()));
    }
    assert_eq!(got, [(3, "/a".to_string())]);
    let mut got = Vec::new();
    while let Some(b) = next(&mut rec).await {
        got.extend(paths(&b.unwrap()));
    }
    assert_eq!(
        got,
        [(2, "/a/b".into()), (3, "/a".into()), (4, "/a/b".into())]
    );
    let mut n = 0;
    while let Some(b) = next(&mut root).await {
        n += b.unwrap().events.len();
    }
    assert_eq!(n, 4);
    let b = next_batch(&mut deletes).await;
    assert_eq!(paths(&b), [(4, "/a/b".to_string())]);
    assert!(b.events[0].data.is_empty() && b.events[0].prev_data.is_empty());
    assert!(next(&mut deletes).await.is_none());
}

#[tokio::test]
async fn one_batch_per_txn_with_all_its_matching_events() {
    let hub = hub(16, 16);
    let mut rx = hub.register_now(spec("/s", true)).unwrap();
    hub.publish(
        7,
        &[
            ev(7, EventKind::Deleted, "/s/e1"),
            ev(7, EventKind::Deleted, "/other"),
            ev(7, EventKind::Deleted, "/s/e2"),
            ev(7, EventKind::ChildrenChanged, "/s"),
        ],
    );
    hub.publish(8, &[ev(8, EventKind::Created, "/s/x")]);
    let b = next_batch(&mut rx).await;
    assert_eq!(b.zxid, 7);
    let want: Vec<(Zxid, String)> = ["/s/e1", "/s/e2", "/s"]
        .iter()
        .map(|p| (7, p.to_string()))
        .collect();
    assert_eq!(paths(&b), want);
    assert_eq!(b.events[0].data, Bytes::from("new7"));
    assert_eq!(b.events[0].prev_data, Bytes::from("old7"));
    assert_eq!(next_batch(&mut rx).await.zxid, 8);
}

#[tokio::test]
async fn once_fires_once_then_ends() {
    let hub = hub(16, 16);
    let mut rx = hub
        .register_now(WatchSpec {
            once: true,
            ..spec("/a", true)
        })
        .unwrap();
    assert_eq!(hub.watch_count(), 1);
    hub.publish(1, &[ev(1, EventKind::Created, "/b")]);
    hub.publish(
        2,
        &[
            ev(2, EventKind::Created, "/a/x"),
            ev(2, EventKind::Created, "/a/y"),
        ],
    );
    assert_eq!(
        hub.watch_count(),
        0,
        "a once watch leaves the hub when it fires"
    );
    hub.publish(3, &[ev(3, EventKind::Created, "/a/z")]);
    let b = next_batch(&mut rx).await;
    assert_eq!(paths(&b), [(2, "/a/x".to_string())]);
    assert!(next(&mut rx).await.is_none());

    // From the history too: fires with the first replayed event, never goes live.
    let mut rx = hub
        .register(
            WatchSpec {
                once: true,
                ..spec("/a", true)
            },
            0,
        )
        .unwrap();
    assert_eq!(hub.watch_count(), 0);
    assert_eq!(paths(&next_batch(&mut rx).await), [(2, "/a/x".to_string())]);
    assert!(next(&mut rx).await.is_none());
}

#[tokio::test]
async fn persistent_fires_for_every_change() {
    let hub = hub(64, 64);
    let mut rx = hub.register_now(spec("/p", false)).unwrap();
    for z in 1..=20 {
        hub.publish(2 * z - 1, &[ev(2 * z - 1, EventKind::DataChanged, "/p")]);
        hub.publish(2 * z, &[ev(2 * z, EventKind::DataChanged, "/p/child")]);
    }
    for z in 1..=20 {
        let b = next_batch(&mut rx).await;
        assert_eq!(paths(&b), [(2 * z - 1, "/p".to_string())]);
    }
    assert_eq!(rx.idle_progress(), Some(40));
    assert_eq!(hub.watch_count(), 1);
}

#[tokio::test]
async fn register_after_replays_the_exact_suffix() {
    let hub = hub(64, 64);
    for z in 1..=10 {
        hub.publish(z, &[ev(z, EventKind::DataChanged, &format!("/k{}", z % 2))]);
    }
    let mut rx = hub.register(spec("/k1", false), 4).unwrap();
    assert_eq!(rx.start_zxid(), 4);
    hub.publish(11, &[ev(11, EventKind::DataChanged, "/k1")]);
    for z in [5, 7, 9, 11] {
        assert_eq!(next_batch(&mut rx).await.zxid, z);
    }
    assert_eq!(rx.idle_progress(), Some(11));
    assert!(matches!(
        hub.register(spec("/k1", false), 12),
        Err(WatchError::Future { published_zxid: 11 })
    ));
    assert!(matches!(
        hub.register(spec("k1", false), 3),
        Err(WatchError::BadPath(_))
    ));
}

/// Registers at pseudo-random points while another task publishes; every receiver
/// must see exactly the txns after its start point, once each, in order. The publisher
/// waits every 10 txns until there was a registration since its last checkpoint, so
/// registrations are spread over the whole run; otherwise the two race freely.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_races_publish_without_loss_or_repeat() {
    const TXNS: u64 = 600;
    let hub = hub(TXNS as usize + 1, TXNS as usize + 1);
    let (registered_tx, mut registered_rx) = tokio::sync::watch::channel(0usize);
    let publisher = {
        let hub = hub.clone();
        tokio::spawn(async move {
            let mut seen = 0;
            for z in 1..=TXNS {
                if z % 10 == 1 {
                    let fresh = registered_rx.wait_for(|n| *n > seen);
                    tokio::time::timeout(DEADLINE, fresh)
                        .await
                        .unwrap()
                        .unwrap();
                    seen = *registered_rx.borrow();
                }
                hub.publish(z, &[ev(z, EventKind::Created, &format!("/r/{z}"))]);
                tokio::task::yield_now().await;
            }
        })
    };
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut receivers = Vec::new();
    let mut last_published = None;
    while !publisher.is_finished() {
        // At most one registration per published zxid.
        let published = hub.published_zxid();
        if last_published == Some(published) {
            tokio::task::yield_now().await;
            continue;
        }
        last_published = Some(published);
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let after = if rng.is_multiple_of(3) {
            published
        } else {
            rng % (published + 1)
        };
        receivers.push(hub.register(spec("/r", true), after).unwrap());
        registered_tx.send_replace(receivers.len());
    }
    tokio::time::timeout(DEADLINE, publisher)
        .await
        .unwrap()
        .unwrap();
    let mid = receivers
        .iter()
        .filter(|r| r.start_zxid() > 0 && r.start_zxid() < TXNS)
        .count();
    assert!(mid >= 20, "only {mid} registrations happened mid-stream");
    for rx in &mut receivers {
        let mut want = rx.start_zxid() + 1;
        while want <= TXNS {
            let b = next_batch(rx).await;
            assert_eq!(b.zxid, want, "watch {} from {}", rx.id(), rx.start_zxid());
            assert_eq!(&*b.events[0].path, format!("/r/{want}"));
            want += 1;
        }
        assert_eq!(rx.idle_progress(), Some(TXNS), "nothing more queued");
    }
}

#[tokio::test]
async fn compacted_when_the_ring_evicted() {
    let hub = hub(16, 3);
    hub.publish(1, &[ev(1, EventKind::Created, "/a")]);
    hub.publish(2, &[]);
    assert!(hub.register(spec("/a", false), 0).is_ok());
    for z in 3..=6 {
        hub.publish(z, &[ev(z, EventKind::DataChanged, "/a")]);
    }
    // Ring holds 4, 5, 6: complete after 3.
    assert_eq!(hub.oldest_resumable_zxid(), 3);
    assert_eq!(
        hub.register(spec("/a", false), 2).err(),
        Some(WatchError::Compacted { oldest_zxid: 3 })
    );
    let mut rx = hub.register(spec("/a", false), 3).unwrap();
    for z in 4..=6 {
        assert_eq!(next_batch(&mut rx).await.zxid, z);
    }

    // The byte bound evicts too.
    let config = WatchConfig {
        history_bytes_max: 3 * history::event_bytes(&ev(101, EventKind::Created, "/a")),
        ..WatchConfig::default()
    };
    let hub = WatchHub::new(config, 100);
    assert_eq!(hub.oldest_resumable_zxid(), 100);
    for z in 101..=105 {
        hub.publish(z, &[ev(z, EventKind::Created, "/a")]);
    }
    assert_eq!(hub.stats().history_txns, 3);
    assert_eq!(hub.oldest_resumable_zxid(), 102);
}

#[tokio::test]
async fn slow_consumer_is_cut_after_its_queue_fills() {
    let hub = hub(3, 100);
    hub.publish(1, &[ev(1, EventKind::Created, "/q")]);
    hub.publish(2, &[ev(2, EventKind::DataChanged, "/q")]);
    // Batches from the history are queued like live ones and count against the bound.
    let mut rx = hub.register(spec("/q", false), 0).unwrap();
    assert_eq!(next_batch(&mut rx).await.zxid, 1);
    for z in 3..=4 {
        hub.publish(z, &[ev(z, EventKind::DataChanged, "/q")]);
    }
    assert_eq!(hub.watch_count(), 1);
    hub.publish(5, &[ev(5, EventKind::DataChanged, "/q")]);
    assert_eq!(hub.watch_count(), 0, "cut watches leave the hub");
    assert_eq!(
        hub.stats().memory_bytes,
        0,
        "a cut queue gives its memory back"
    );
    hub.publish(6, &[ev(6, EventKind::DataChanged, "/q")]);
    // What was queued is dropped: the error names the last zxid the receiver took.
    assert_eq!(
        next(&mut rx).await,
        Some(Err(WatchError::SlowConsumer {
            last_delivered_zxid: 1
        }))
    );
    assert!(next(&mut rx).await.is_none());
    assert_eq!(hub.stats().slow_consumer_cuts, 1);
}

/// An event carrying `n` bytes of data (and none before).
fn big(zxid: Zxid, path: &str, n: usize) -> Event {
    Event {
        data: Bytes::from(vec![1u8; n]),
        prev_data: Bytes::new(),
        ..ev(zxid, EventKind::DataChanged, path)
    }
}

fn byte_hub(queue_bytes_max: usize, memory_bytes_max: usize) -> WatchHub {
    let config = WatchConfig {
        queue_txns_max: 10_000,
        queue_bytes_max,
        memory_bytes_max,
        ..WatchConfig::default()
    };
    WatchHub::new(config, 0)
}

#[tokio::test]
async fn queue_is_bounded_in_bytes_not_only_in_txns() {
    const MIB: usize = 1 << 20;
    // 10,000 txns would be allowed; 3 MiB is the bound.
    let hub = byte_hub(3 * MIB + MIB / 2, 1 << 30);
    let mut rx = hub.register_now(spec("/b", false)).unwrap();
    for z in 1..=3 {
        hub.publish(z, &[big(z, "/b", MIB)]);
    }
    assert_eq!(hub.watch_count(), 1);
    assert!(hub.stats().memory_bytes >= 3 * MIB);
    hub.publish(4, &[big(4, "/b", MIB)]);
    assert_eq!(hub.watch_count(), 0, "the fourth MiB is over the bound");
    assert_eq!(hub.stats().memory_bytes, 0);
    assert_eq!(
        next(&mut rx).await,
        Some(Err(WatchError::SlowConsumer {
            last_delivered_zxid: 0
        }))
    );

    // An empty queue takes one txn larger than its bound (a txn is never split).
    let mut rx = hub.register_now(spec("/b", false)).unwrap();
    hub.publish(5, &[big(5, "/b", 5 * MIB)]);
    assert_eq!(next_batch(&mut rx).await.zxid, 5);
    assert_eq!(hub.watch_count(), 1);
    // A resume whose history part is over the bound is refused (a feed streams it).
    assert_eq!(
        hub.register(spec("/b", false), 0).err(),
        Some(WatchError::SlowConsumer {
            last_delivered_zxid: 0
        })
    );
}

#[tokio::test]
async fn the_total_cap_cuts_the_largest_queue() {
    const MIB: usize = 1 << 20;
    // Each queue may hold 8 MiB, but all of them together only 6 MiB.
    let hub = byte_hub(8 * MIB, 6 * MIB);
    let mut hog = hub.register_now(spec("/busy", true)).unwrap();
    let mut small = hub.register_now(spec("/busy/quiet", false)).unwrap();
    let mut reader = hub.register_now(spec("/busy", true)).unwrap();
    hub.publish(1, &[big(1, "/busy/quiet", MIB / 4)]);
    assert_eq!(next_batch(&mut reader).await.zxid, 1);
    for z in 2..=13 {
        hub.publish(z, &[big(z, "/busy/x", MIB)]);
        assert!(hub.stats().memory_bytes <= 6 * MIB, "over the cap at {z}");
        assert_eq!(next_batch(&mut reader).await.zxid, z, "the reader goes on");
    }
    // The hog (never read, the most bytes) was cut to make room, once.
    assert_eq!(hub.stats().slow_consumer_cuts, 1);
    assert_eq!(
        next(&mut hog).await,
        Some(Err(WatchError::SlowConsumer {
            last_delivered_zxid: 0
        }))
    );
    assert_eq!(hub.watch_count(), 2);
    assert_eq!(next_batch(&mut small).await.zxid, 1);
    assert_eq!(hub.stats().memory_bytes, 0);
}

#[tokio::test]
async fn catch_up_from_the_ring_comes_in_bounded_chunks() {
    let hub = hub(4, 1000);
    for z in 1..=100 {
        hub.publish(z, &[ev(z, EventKind::DataChanged, "/c")]);
    }
    let one = batch_bytes(&WatchBatch {
        zxid: 1,
        events: vec![ev(1, EventKind::DataChanged, "/c")],
    });
    let mut cursor = 0;
    let mut got = Vec::new();
    for _ in 0..100 {
        match hub
            .catch_up(&spec("/c", false), cursor, 10 * one, 77)
            .unwrap()
        {
            CatchUp::More {
                batches,
                through,
                charge,
            } => {
                assert!(batches.len() <= 10 && charge.bytes() <= 10 * one + one);
                assert_eq!(hub.stats().memory_bytes, charge.bytes());
                got.extend(batches.iter().map(|b| b.zxid));
                cursor = through;
            }
            CatchUp::Live {
                batches, receiver, ..
            } => {
                got.extend(batches.iter().map(|b| b.zxid));
                assert_eq!(receiver.id(), 77);
                assert_eq!(hub.watch_count(), 1);
                break;
            }
            CatchUp::Fired { .. } => panic!("not a once watch"),
        }
    }
    assert_eq!(got, (1..=100).collect::<Vec<_>>());
    assert_eq!(hub.stats().memory_bytes, 0);
}

#[tokio::test]
async fn dropping_the_receiver_unregisters() {
    let hub = hub(4, 4);
    let a = hub.register_now(spec("/a", false)).unwrap();
    let b = hub.register_now(spec("/a", true)).unwrap();
    let c = hub.register_now(spec("/a", false)).unwrap();
    assert_eq!(hub.watch_count(), 3);
    drop(a);
    assert_eq!(hub.watch_count(), 2);
    drop(b);
    drop(c);
    assert_eq!(hub.watch_count(), 0);
    let before = hub.stats().match_checks;
    hub.publish(1, &[ev(1, EventKind::Created, "/a/b")]);
    assert_eq!(hub.stats().match_checks, before, "index emptied too");
}

#[tokio::test]
async fn hub_drop_or_shutdown_ends_receivers() {
    let hub = hub(4, 4);
    let mut rx = hub.register_now(spec("/", true)).unwrap();
    hub.publish(1, &[ev(1, EventKind::Created, "/x")]);
    drop(hub);
    assert_eq!(
        next_batch(&mut rx).await.zxid,
        1,
        "queued batches still come"
    );
    assert!(next(&mut rx).await.is_none());

    let hub2 = self::hub(4, 4);
    let mut rx = hub2.register_now(spec("/", true)).unwrap();
    let waiter = tokio::spawn(async move { rx.next().await });
    hub2.shutdown();
    let got = tokio::time::timeout(DEADLINE, waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(got.is_none());
    assert_eq!(
        hub2.register_now(spec("/", true)).err(),
        Some(WatchError::Closed)
    );
}

#[tokio::test]
async fn progress_follows_published_zxid() {
    let hub = hub(4, 4);
    let mut progress = hub.subscribe_progress();
    assert_eq!(*progress.borrow(), 0);
    hub.publish(5, &[]);
    tokio::time::timeout(DEADLINE, progress.changed())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(*progress.borrow_and_update(), 5);
    hub.publish(4, &[]);
    assert_eq!(hub.published_zxid(), 5, "out-of-order publish is ignored");
}

#[tokio::test]
async fn ten_thousand_watches_cost_only_their_matches() {
    let hub = hub(4, 4);
    let mut receivers: Vec<WatchReceiver> = (0..10_000)
        .map(|i| hub.register_now(spec(&format!("/w/{i}"), false)).unwrap())
        .collect();
    let mut subtree = hub.register_now(spec("/w/42", true)).unwrap();
    let sibling = hub.register_now(spec("/w/4", true)).unwrap();
    assert_eq!(hub.watch_count(), 10_002);

    let before = hub.stats().match_checks;
    hub.publish(1, &[ev(1, EventKind::DataChanged, "/w/42")]);
    // The exact watch on /w/42 and the recursive one: nothing else is looked at.
    assert_eq!(hub.stats().match_checks - before, 2);
    hub.publish(2, &[ev(2, EventKind::Created, "/w/42/c")]);
    assert_eq!(hub.stats().match_checks - before, 3);
    hub.publish(3, &[ev(3, EventKind::Created, "/elsewhere/z")]);
    assert_eq!(hub.stats().match_checks - before, 3);

    assert_eq!(next_batch(&mut receivers[42]).await.zxid, 1);
    assert_eq!(receivers[42].idle_progress(), Some(3));
    assert_eq!(receivers[41].idle_progress(), Some(3), "others got nothing");
    assert_eq!(next_batch(&mut subtree).await.zxid, 1);
    assert_eq!(next_batch(&mut subtree).await.zxid, 2);
    assert_eq!(
        sibling.idle_progress(),
        Some(3),
        "/w/4 does not cover /w/42"
    );
    drop((receivers, subtree, sibling));
    assert_eq!(hub.watch_count(), 0);
}

#[tokio::test]
async fn resynchronize_ends_every_watch_and_restarts_the_history() {
    let hub = hub(8, 100);
    hub.publish(1, &[ev(1, EventKind::Created, "/r")]);
    let mut rx = hub.register(spec("/r", false), 0).unwrap();
    hub.publish(2, &[ev(2, EventKind::DataChanged, "/r")]);
    hub.resynchronize(50);
    assert_eq!(hub.watch_count(), 0);
    for z in 1..=2 {
        assert_eq!(next_batch(&mut rx).await.zxid, z);
    }
    assert_eq!(
        next(&mut rx).await,
        Some(Err(WatchError::Resynchronized {
            last_delivered_zxid: 2,
            snapshot_zxid: 50
        }))
    );
    assert!(next(&mut rx).await.is_none());
    // Before the snapshot nothing can be resumed here; after it, all can.
    assert!(matches!(
        hub.register(spec("/r", false), 2),
        Err(WatchError::Compacted { oldest_zxid: 50 })
    ));
    let mut after = hub.register(spec("/r", false), 50).unwrap();
    hub.publish(51, &[ev(51, EventKind::DataChanged, "/r")]);
    assert_eq!(next_batch(&mut after).await.zxid, 51);
    assert_eq!(hub.published_zxid(), 51);
}

/// A replay from storage that reached the end of this server's durable log waits
/// until the log is durable past where it stands, and ends when the hub shuts down.
#[tokio::test]
async fn a_wait_for_the_durable_log_ends_past_it_or_at_shutdown() {
    let hub = hub(8, 8);
    let past = |zxid| {
        let hub = hub.clone();
        tokio::spawn(async move { hub.log_durable_past(zxid).await })
    };
    // One runtime thread: a yield lets the waiter run until it waits.
    let waiting = past(6);
    tokio::task::yield_now().await;
    hub.note_log_durable(6);
    tokio::task::yield_now().await;
    assert!(
        !waiting.is_finished(),
        "the log is durable up to 6, not past it"
    );
    hub.note_log_durable(7);
    let done = tokio::time::timeout(Duration::from_secs(10), waiting).await;
    assert_eq!(done.expect("woken in time").unwrap(), Ok(()));
    assert_eq!(hub.log_durable_past(6).await, Ok(()), "already past");
    let waiting = past(7);
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished());
    hub.shutdown();
    let done = tokio::time::timeout(Duration::from_secs(10), waiting).await;
    assert_eq!(
        done.expect("woken in time").unwrap(),
        Err(WatchError::Closed)
    );
}
