//! The `Storage` contract as checks every backend must pass (test builds only).
//!
//! Each check takes a fresh, empty store as `&dyn Storage`. A backend's tests call
//! `conformance_tests!(make_store)`, where `make_store() -> (Store, Guard)` (the guard
//! keeps e.g. a temp dir alive), and get one `#[test]` per check.
//!
//! What it must not do: depend on a backend's internals.
#![allow(clippy::unwrap_used)]

use bytes::Bytes;

use super::{Storage, StorageError};
use crate::txn::{make_zxid, SetOp, Txn, TxnOp, Zxid};

/// A small txn at `zxid`.
pub(crate) fn txn(zxid: Zxid) -> Txn {
    Txn {
        zxid,
        time_ms: 1_700_000_000_000,
        session_id: 7,
        request_id: zxid,
        fence: None,
        op: TxnOp::Set(SetOp {
            path: format!("/n{zxid}"),
            data: Bytes::from(zxid.to_le_bytes().to_vec()),
            version: -1,
            null_data: false,
        }),
    }
}

/// Txns at each of `zxids`.
pub(crate) fn txns(zxids: impl IntoIterator<Item = Zxid>) -> Vec<Txn> {
    zxids.into_iter().map(txn).collect()
}

fn zxids_of(txns: &[Txn]) -> Vec<Zxid> {
    txns.iter().map(|t| t.zxid).collect()
}

fn all_zxids(s: &dyn Storage) -> Vec<Zxid> {
    zxids_of(&s.read_after(0, usize::MAX).unwrap())
}

/// Bytes that are not all alike, `len` long.
pub(crate) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add((i >> 9) as u8) ^ seed)
        .collect()
}

pub(crate) fn empty_store(s: &dyn Storage) {
    assert_eq!(s.last_zxid().unwrap(), 0);
    assert_eq!(s.log_start().unwrap(), 0);
    assert!(s.snapshots().unwrap().is_empty());
    assert!(s.read_after(0, 10).unwrap().is_empty());
    s.append(&[]).unwrap();
    assert_eq!(s.last_zxid().unwrap(), 0);
}

pub(crate) fn append_then_read_in_order(s: &dyn Storage) {
    let e1 = |c| make_zxid(1, c);
    s.append(&txns([e1(1)])).unwrap();
    s.append(&txns((2..=64).map(e1))).unwrap();
    s.append(&txns([make_zxid(2, 1), make_zxid(2, 5)])).unwrap();
    let all = s.read_after(0, usize::MAX).unwrap();
    assert_eq!(all.len(), 66);
    assert_eq!(all[0], txn(e1(1)), "txns come back whole");
    assert_eq!(all[65], txn(make_zxid(2, 5)));
    assert!(all.windows(2).all(|w| w[0].zxid < w[1].zxid));
    assert_eq!(s.last_zxid().unwrap(), make_zxid(2, 5));
}

pub(crate) fn append_rejects_bad_order(s: &dyn Storage) {
    s.append(&txns([10, 20])).unwrap();
    let misuse = |r: Result<(), StorageError>| matches!(r, Err(StorageError::Misuse(_)));
    assert!(misuse(s.append(&txns([20]))), "equal to last");
    assert!(misuse(s.append(&txns([5]))), "below last");
    assert!(misuse(s.append(&txns([30, 30]))), "repeat in batch");
    assert!(misuse(s.append(&txns([40, 35]))), "descending in batch");
    assert!(
        misuse(s.append(&txns([21, 22, 15]))),
        "bad zxid late in batch"
    );
    assert_eq!(
        all_zxids(s),
        vec![10, 20],
        "a rejected batch writes nothing"
    );
    assert_eq!(s.last_zxid().unwrap(), 20);
    s.append(&txns([21])).unwrap();
}

pub(crate) fn read_after_respects_after_and_max(s: &dyn Storage) {
    s.append(&txns([2, 4, 6, 8, 10])).unwrap();
    assert_eq!(zxids_of(&s.read_after(4, 2).unwrap()), vec![6, 8]);
    assert_eq!(zxids_of(&s.read_after(5, 100).unwrap()), vec![6, 8, 10]);
    assert_eq!(zxids_of(&s.read_after(0, 1).unwrap()), vec![2]);
    assert!(s.read_after(0, 0).unwrap().is_empty());
    assert!(s.read_after(10, 5).unwrap().is_empty());
    assert!(s.read_after(u64::MAX, 5).unwrap().is_empty());
}

pub(crate) fn truncate_after_removes_the_tail(s: &dyn Storage) {
    s.append(&txns(1..=10)).unwrap();
    s.truncate_after(20).unwrap();
    assert_eq!(
        all_zxids(s).len(),
        10,
        "truncating above the end is a no-op"
    );
    s.truncate_after(6).unwrap();
    assert_eq!(all_zxids(s), (1..=6).collect::<Vec<_>>());
    assert_eq!(s.last_zxid().unwrap(), 6);
    s.append(&txns([7, 8])).unwrap();
    assert_eq!(s.last_zxid().unwrap(), 8);
    s.truncate_after(0).unwrap();
    assert!(all_zxids(s).is_empty());
    assert_eq!(s.last_zxid().unwrap(), 0);
    s.append(&txns([1])).unwrap();
}

pub(crate) fn snapshots_round_trip(s: &dyn Storage) {
    let big = pattern(3 * (1 << 20) + 12_345, 1);
    s.append(&txns(1..=5)).unwrap();
    s.save_snapshot(3, &big).unwrap();
    s.save_snapshot(5, b"").unwrap();
    s.save_snapshot(9, b"small").unwrap();
    assert_eq!(s.snapshots().unwrap(), vec![3, 5, 9]);
    assert_eq!(s.load_snapshot(3).unwrap(), big);
    assert!(s.load_snapshot(5).unwrap().is_empty());
    assert_eq!(s.load_snapshot(9).unwrap(), b"small");
    assert_eq!(s.last_zxid().unwrap(), 9, "a snapshot above the log counts");
    assert!(s.load_snapshot(4).is_err(), "no snapshot at 4");
    assert!(
        matches!(s.append(&txns([9])), Err(StorageError::Misuse(_))),
        "appends must pass the newest snapshot"
    );
    s.append(&txns([10])).unwrap();
}

pub(crate) fn snapshot_at_same_zxid_is_replaced(s: &dyn Storage) {
    s.save_snapshot(4, &pattern(2 * (1 << 20) + 7, 2)).unwrap();
    s.save_snapshot(4, b"shorter").unwrap();
    assert_eq!(s.snapshots().unwrap(), vec![4]);
    assert_eq!(s.load_snapshot(4).unwrap(), b"shorter");
}

pub(crate) fn purge_keeps_newest_snapshots_and_log_after_them(s: &dyn Storage) {
    s.append(&txns(1..=30)).unwrap();
    for zxid in [10, 20, 25] {
        s.save_snapshot(zxid, &pattern(100, zxid as u8)).unwrap();
    }
    s.purge(2).unwrap();
    assert_eq!(s.snapshots().unwrap(), vec![20, 25]);
    assert_eq!(s.log_start().unwrap(), 20);
    assert_eq!(all_zxids(s), (21..=30).collect::<Vec<_>>());
    assert_eq!(s.last_zxid().unwrap(), 30);
    assert_eq!(s.load_snapshot(20).unwrap(), pattern(100, 20));
    assert!(s.load_snapshot(10).is_err());
    s.purge(0).unwrap(); // keeps at least one
    assert_eq!(s.snapshots().unwrap(), vec![25]);
    assert_eq!(s.log_start().unwrap(), 25);
    assert_eq!(
        zxids_of(&s.read_after(25, 100).unwrap()),
        vec![26, 27, 28, 29, 30]
    );
    s.purge(5).unwrap();
    assert_eq!(
        s.snapshots().unwrap(),
        vec![25],
        "fewer than keep: all kept"
    );
    assert_eq!(s.log_start().unwrap(), 25);
}

pub(crate) fn purge_without_snapshots_changes_nothing(s: &dyn Storage) {
    s.append(&txns(1..=5)).unwrap();
    s.purge(1).unwrap();
    assert_eq!(all_zxids(s), vec![1, 2, 3, 4, 5]);
    assert_eq!(s.log_start().unwrap(), 0);
}

pub(crate) fn last_zxid_survives_a_purge_that_empties_the_log(s: &dyn Storage) {
    s.append(&txns(1..=10)).unwrap();
    s.save_snapshot(10, b"state at 10").unwrap();
    s.purge(1).unwrap();
    assert!(all_zxids(s).is_empty());
    assert_eq!(s.log_start().unwrap(), 10);
    assert_eq!(s.last_zxid().unwrap(), 10);
    assert!(matches!(
        s.append(&txns([10])),
        Err(StorageError::Misuse(_))
    ));
    s.append(&txns([11])).unwrap();
    assert_eq!(
        zxids_of(&s.read_after(s.log_start().unwrap(), 10).unwrap()),
        vec![11]
    );
}

/// A SNAP from the leader: the log is emptied and a snapshot above it saved. The
/// txns below that snapshot are gone, so the log no longer covers an older one.
pub(crate) fn a_snapshot_beyond_the_log_raises_log_start(s: &dyn Storage) {
    s.append(&txns(1..=10)).unwrap();
    s.save_snapshot(5, b"at 5").unwrap();
    assert_eq!(s.log_start().unwrap(), 0, "the log reaches 5 and 10");
    s.truncate_after(0).unwrap();
    s.save_snapshot(40, b"from the leader").unwrap();
    assert_eq!(s.log_start().unwrap(), 40);
    s.append(&txns([41, 42])).unwrap();
    s.save_snapshot(42, b"at 42").unwrap();
    assert_eq!(s.log_start().unwrap(), 40, "the log reaches 42");
    assert_eq!(s.snapshots().unwrap(), vec![5, 40, 42]);
}

pub(crate) fn named_u64s(s: &dyn Storage) {
    assert_eq!(s.get_u64("accepted_epoch").unwrap(), None);
    s.set_u64("accepted_epoch", 3).unwrap();
    s.set_u64("current_epoch", 2).unwrap();
    assert_eq!(s.get_u64("accepted_epoch").unwrap(), Some(3));
    s.set_u64("accepted_epoch", u64::MAX).unwrap();
    assert_eq!(s.get_u64("accepted_epoch").unwrap(), Some(u64::MAX));
    assert_eq!(s.get_u64("current_epoch").unwrap(), Some(2));
    assert_eq!(
        s.get_u64("log_start").unwrap(),
        None,
        "names are the caller's own"
    );
}

/// Expands to one `#[test]` per check, each on a fresh store from `$make()`.
macro_rules! conformance_tests {
    ($make:path) => {
        $crate::storage::conformance::conformance_tests!(
            @each $make;
            empty_store,
            append_then_read_in_order,
            append_rejects_bad_order,
            read_after_respects_after_and_max,
            truncate_after_removes_the_tail,
            snapshots_round_trip,
            snapshot_at_same_zxid_is_replaced,
            purge_keeps_newest_snapshots_and_log_after_them,
            purge_without_snapshots_changes_nothing,
            last_zxid_survives_a_purge_that_empties_the_log,
            a_snapshot_beyond_the_log_raises_log_start,
            named_u64s,
        );
    };
    (@each $make:path; $($check:ident),+ $(,)?) => {
        $(
            #[test]
            fn $check() {
                let (store, _guard) = $make();
                $crate::storage::conformance::$check(&store);
            }
        )+
    };
}
pub(crate) use conformance_tests;
