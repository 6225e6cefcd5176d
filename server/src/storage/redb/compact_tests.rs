//! Compacting the redb file (`compact.rs`): the file shrinks after a large purge and
//! keeps everything it held, and how long one compaction holds the store (measured
//! by an ignored test, not asserted).
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tempfile::TempDir;

use super::RedbStorage;
use crate::storage::conformance::pattern;
use crate::storage::{DiskUsage, Storage};
use crate::txn::{SetOp, Txn, TxnOp, Zxid};

const MIB: u64 = 1 << 20;

/// A txn at `zxid` carrying `bytes` of data.
fn big_txn(zxid: Zxid, bytes: usize) -> Txn {
    Txn {
        zxid,
        time_ms: 1_700_000_000_000,
        session_id: 7,
        request_id: zxid,
        fence: None,
        op: TxnOp::Set(SetOp {
            path: format!("/big/{}", zxid % 100),
            data: Bytes::from(pattern(bytes, zxid as u8)),
            version: -1,
            null_data: false,
        }),
    }
}

/// Appends txns 1..=`count` of `bytes` each, 64 to a commit.
fn write_log(s: &RedbStorage, count: u64, bytes: usize) {
    let zxids: Vec<Zxid> = (1..=count).collect();
    for batch in zxids.chunks(64) {
        let txns: Vec<Txn> = batch.iter().map(|z| big_txn(*z, bytes)).collect();
        s.append(&txns).unwrap();
    }
}

fn usage(s: &RedbStorage) -> DiskUsage {
    s.disk_usage().unwrap().unwrap()
}

/// What a store holds, to compare before and after a compaction.
#[derive(Debug, PartialEq)]
struct Contents {
    log: Vec<Txn>,
    snapshots: Vec<(Zxid, Vec<u8>)>,
    last_zxid: Zxid,
    log_start: Zxid,
    epoch: Option<u64>,
}

fn contents(s: &RedbStorage) -> Contents {
    let snapshots = s.snapshots().unwrap();
    Contents {
        log: s.read_after(0, usize::MAX).unwrap(),
        snapshots: snapshots
            .into_iter()
            .map(|z| (z, s.load_snapshot(z).unwrap()))
            .collect(),
        last_zxid: s.last_zxid().unwrap(),
        log_start: s.log_start().unwrap(),
        epoch: s.get_u64("current_epoch").unwrap(),
    }
}

/// A store that wrote a lot, snapshotted and purged keeps the file at its peak
/// size; compaction gives the free part back and keeps every entry, in order,
/// every snapshot and every named value, also after a reopen.
#[test]
fn the_file_shrinks_after_a_large_purge_and_keeps_everything() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("concord.redb");
    let (s, _) = RedbStorage::open(&path).unwrap();
    s.set_u64("current_epoch", 3).unwrap();
    // 24 MiB of log, then snapshots, of which the purge keeps the newest only, and
    // with it the log after it.
    write_log(&s, 1_536, 16 << 10);
    s.save_snapshot(1_000, &pattern(3 << 20, 1)).unwrap();
    s.save_snapshot(1_500, &pattern(2 << 20, 2)).unwrap();
    s.purge(1).unwrap();
    let before = usage(&s);
    let kept = contents(&s);
    assert_eq!(kept.log.len(), 36, "the log after the kept snapshot");
    assert!(before.file_bytes >= 24 * MIB, "{before:?}");
    assert!(
        before.free_bytes() > 2 * before.in_use_bytes,
        "the purge left most of the file free: {before:?}"
    );

    let after = s.compact_file().unwrap().unwrap();
    assert!(
        after.file_bytes < before.file_bytes / 3,
        "the file did not shrink: {before:?} then {after:?}"
    );
    assert!(
        after.free_bytes() < after.in_use_bytes,
        "most of the compacted file is in use: {after:?}"
    );
    assert_eq!(after.file_bytes, std::fs::metadata(&path).unwrap().len());
    assert_eq!(
        contents(&s),
        kept,
        "the compaction changed what the store holds"
    );
    s.append(&[big_txn(1_537, 100)]).unwrap();
    drop(s);

    let (s, _) = RedbStorage::open(&path).unwrap();
    let mut reopened = contents(&s);
    assert_eq!(reopened.log.pop().map(|t| t.zxid), Some(1_537));
    assert_eq!(reopened.last_zxid, 1_537);
    reopened.last_zxid = kept.last_zxid;
    assert_eq!(
        reopened, kept,
        "the compacted file reopens with the same contents"
    );
}

/// A compaction holds the store alone: an append that comes meanwhile waits for
/// it and is then in the log; none is lost or reordered.
#[test]
fn appends_during_a_compaction_wait_and_are_kept_in_order() {
    let dir = TempDir::new().unwrap();
    let (s, _) = RedbStorage::open(&dir.path().join("concord.redb")).unwrap();
    write_log(&s, 512, 16 << 10);
    s.save_snapshot(512, &pattern(1 << 20, 1)).unwrap();
    s.purge(1).unwrap();
    let s = Arc::new(s);
    let stop = Arc::new(AtomicBool::new(false));
    let appender = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut zxid = 512;
            while !stop.load(Ordering::Acquire) && zxid < 100_000 {
                zxid += 1;
                s.append(&[big_txn(zxid, 200)]).unwrap();
            }
            zxid
        })
    };
    for _ in 0..3 {
        s.compact_file().unwrap().unwrap();
    }
    stop.store(true, Ordering::Release);
    let last = appender.join().unwrap();
    let log: Vec<Zxid> = s
        .read_after(512, usize::MAX)
        .unwrap()
        .iter()
        .map(|t| t.zxid)
        .collect();
    assert_eq!(log, (513..=last).collect::<Vec<_>>());
    assert_eq!(s.last_zxid().unwrap(), last);
}

/// How long one compaction holds the store, on a file of 136 MiB of which 12 MiB is
/// in use, and the slowest append meanwhile (docs/operations.md,
/// "Data and recovery"). Not a test of a bound: run it by hand,
/// `cargo test -p concord-server --lib storage::redb::compact_tests::measure -- --ignored --nocapture`
/// (redb is optimized in test builds, see Cargo.toml).
#[test]
#[ignore = "a measurement: run by hand"]
fn measure_one_compaction_of_a_mostly_free_100_mib_file() {
    let dir = TempDir::new().unwrap();
    let (s, _) = RedbStorage::open(&dir.path().join("concord.redb")).unwrap();
    // 90 MiB of log (the file doubles as it grows: 136 MiB); the snapshot kept and
    // the log after it take 12 MiB.
    let count = 6_144;
    write_log(&s, count, 15 << 10);
    s.save_snapshot(count - 512, &pattern(2 << 20, 1)).unwrap();
    s.purge(1).unwrap();
    let before = usage(&s);
    let s = Arc::new(s);
    let stop = Arc::new(AtomicBool::new(false));
    let appender = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || {
            let (mut zxid, mut slowest) = (count, Duration::ZERO);
            while !stop.load(Ordering::Acquire) {
                zxid += 1;
                let started = Instant::now();
                s.append(&[big_txn(zxid, 200)]).unwrap();
                slowest = slowest.max(started.elapsed());
            }
            (zxid - count, slowest)
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let after = s.compact_file().unwrap().unwrap();
    let took = started.elapsed();
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Release);
    let (appends, slowest) = appender.join().unwrap();
    eprintln!(
        "compaction: {took:?} (with measuring after it); file {} -> {} bytes, in use {} -> {}; \
         {appends} appends meanwhile, the slowest {slowest:?}",
        before.file_bytes, after.file_bytes, before.in_use_bytes, after.in_use_bytes
    );
}

/// A snapshot's pages take about its size: a chunk of exactly 1 MiB did not fit a
/// 1 MiB page beside its key and the page's header, so each took a 2 MiB page and
/// every snapshot twice its size on disk.
#[test]
fn a_snapshot_takes_about_its_size_on_disk() {
    let dir = TempDir::new().unwrap();
    let (s, _) = RedbStorage::open(&dir.path().join("concord.redb")).unwrap();
    let empty = usage(&s).in_use_bytes;
    s.save_snapshot(1, &pattern(8 << 20, 1)).unwrap();
    let taken = usage(&s).in_use_bytes - empty;
    assert!(
        taken < 8 * MIB + MIB / 2,
        "an 8 MiB snapshot takes {taken} bytes of pages"
    );
}
