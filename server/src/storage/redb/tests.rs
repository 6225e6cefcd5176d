//! Tests of the redb backend: the conformance suite, plus what only a file can show
//! (reopen, corrupt log entries, corrupt snapshots, interrupted snapshot saves,
//! discarding a store).
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::redb::{Database, ReadableDatabase, ReadableTable};
use tempfile::TempDir;

use super::snapshot::{CHUNK_BYTES, PURGE_ENTRIES_PER_COMMIT};
use super::{write_durably, RedbStorage, LOG, SNAP_CHUNKS};
use crate::storage::conformance::{conformance_tests, pattern, txn, txns};
use crate::storage::{Storage, StorageError};

fn make_store() -> (RedbStorage, TempDir) {
    let dir = TempDir::new().unwrap();
    let (store, report) = RedbStorage::open(&dir.path().join("concord.redb")).unwrap();
    assert_eq!(report, Default::default());
    (store, dir)
}

conformance_tests!(make_store);

fn db_path(dir: &TempDir) -> PathBuf {
    dir.path().join("concord.redb")
}

fn reopen(path: &Path) -> (RedbStorage, super::OpenReport) {
    RedbStorage::open(path).unwrap()
}

fn zxids(s: &RedbStorage) -> Vec<u64> {
    s.read_after(0, usize::MAX)
        .unwrap()
        .iter()
        .map(|t| t.zxid)
        .collect()
}

#[test]
fn a_batch_is_one_commit() {
    let (s, _dir) = make_store();
    let before = s.commits_total();
    s.append(&txns(1..=64)).unwrap();
    assert_eq!(s.commits_total() - before, 1);
    assert!(s.append(&txns([3])).is_err());
    assert_eq!(
        s.commits_total() - before,
        1,
        "a rejected batch commits nothing"
    );
}

#[test]
fn purge_removes_a_long_log_in_bounded_commits() {
    let (s, _dir) = make_store();
    let n = PURGE_ENTRIES_PER_COMMIT as u64;
    let cut = 2 * n + n / 2;
    s.append(&txns(1..=cut + 5)).unwrap();
    s.save_snapshot(cut, b"state").unwrap();
    let before = s.commits_total();
    s.purge(1).unwrap();
    // One commit raises log_start, then three delete n, n and n / 2 entries.
    assert_eq!(s.commits_total() - before, 4);
    assert_eq!(zxids(&s), (cut + 1..=cut + 5).collect::<Vec<_>>());
    assert_eq!(s.log_start().unwrap(), cut);
    s.purge(1).unwrap();
    assert_eq!(
        zxids(&s).len(),
        5,
        "a second purge finds nothing more to remove"
    );
}

#[test]
fn reopen_keeps_everything() {
    let dir = TempDir::new().unwrap();
    let path = db_path(&dir);
    let big = pattern(CHUNK_BYTES * 5 + 3, 9);
    {
        let (s, _) = reopen(&path);
        s.append(&txns(1..=40)).unwrap();
        s.save_snapshot(10, b"ten").unwrap();
        s.save_snapshot(30, &big).unwrap();
        s.purge(1).unwrap();
        s.set_u64("accepted_epoch", 4).unwrap();
    }
    let (s, report) = reopen(&path);
    assert_eq!(report, Default::default());
    assert_eq!(zxids(&s), (31..=40).collect::<Vec<_>>());
    assert_eq!(s.read_after(39, 5).unwrap(), vec![txn(40)]);
    assert_eq!(s.snapshots().unwrap(), vec![30]);
    assert_eq!(s.load_snapshot(30).unwrap(), big);
    assert_eq!(s.log_start().unwrap(), 30);
    assert_eq!(s.last_zxid().unwrap(), 40);
    assert_eq!(s.get_u64("accepted_epoch").unwrap(), Some(4));
    assert!(matches!(
        s.append(&txns([40])),
        Err(StorageError::Misuse(_))
    ));
    s.append(&txns([41])).unwrap();
}

/// Overwrites the raw log value at `zxid`.
fn put_raw_log(path: &Path, zxid: u64, value: &[u8]) {
    let db = Database::create(path).unwrap();
    write_durably(&db, "test", |wtx| {
        wtx.open_table(LOG).unwrap().insert(zxid, value).unwrap();
        Ok(())
    })
    .unwrap();
}

/// The zxid and reason of the bad entry `open` refused, or panics.
fn refused(path: &Path) -> (u64, String) {
    match RedbStorage::open(path) {
        Err(StorageError::BadLogEntry { zxid, reason }) => (zxid, reason),
        other => panic!("expected BadLogEntry, got {other:?}"),
    }
}

#[test]
fn a_bad_entry_in_the_middle_refuses_open_and_removes_nothing() {
    let dir = TempDir::new().unwrap();
    let path = db_path(&dir);
    reopen(&path).0.append(&txns(1..=10)).unwrap();
    let mut flipped = super::frame_txn(&txn(6));
    let last = flipped.len() - 1;
    flipped[last] ^= 0x40;
    put_raw_log(&path, 6, &flipped);
    let (zxid, reason) = refused(&path);
    assert_eq!(zxid, 6);
    assert!(reason.contains("crc"), "{reason}");
    // Refused again: nothing was cut, every entry after the bad one is still there.
    assert_eq!(refused(&path).0, 6);
    put_raw_log(&path, 6, &super::frame_txn(&txn(6)));
    let (s, _) = reopen(&path);
    assert_eq!(zxids(&s), (1..=10).collect::<Vec<_>>());
}

#[test]
fn a_bad_last_entry_refuses_open_too() {
    let dir = TempDir::new().unwrap();
    let path = db_path(&dir);
    reopen(&path).0.append(&txns(1..=8)).unwrap();
    let framed = super::frame_txn(&txn(8));
    put_raw_log(&path, 8, &framed[..framed.len() / 2]);
    assert_eq!(refused(&path).0, 8);
}

#[test]
fn an_undecodable_entry_or_one_under_the_wrong_key_refuses_open() {
    let dir = TempDir::new().unwrap();
    let path = db_path(&dir);
    reopen(&path).0.append(&txns(1..=3)).unwrap();
    put_raw_log(&path, 3, &super::frame_txn(&txn(99)));
    let (zxid, reason) = refused(&path);
    assert_eq!(zxid, 3);
    assert!(reason.contains("holds txn"), "{reason}");
    let junk = b"not a txn";
    let mut framed = crc32fast::hash(junk).to_le_bytes().to_vec();
    framed.extend_from_slice(junk);
    put_raw_log(&path, 2, &framed);
    let (zxid, reason) = refused(&path);
    assert_eq!(zxid, 2);
    assert!(reason.contains("undecodable"), "{reason}");
}

#[test]
fn corrupt_entry_below_a_snapshot_is_an_error_on_read() {
    let dir = TempDir::new().unwrap();
    let path = db_path(&dir);
    {
        let (s, _) = reopen(&path);
        s.append(&txns(1..=4)).unwrap();
        s.save_snapshot(4, b"four").unwrap();
    }
    put_raw_log(&path, 2, b"junk");
    // Only the log after the newest snapshot is validated on open; the bad entry
    // below it is an error (naming it) when read.
    let (s, _) = reopen(&path);
    assert!(matches!(
        s.read_after(0, 10),
        Err(StorageError::BadLogEntry { zxid: 2, .. })
    ));
    assert_eq!(s.read_after(2, 10).unwrap(), txns([3, 4]));
}

#[test]
fn corrupt_snapshot_is_detected() {
    let dir = TempDir::new().unwrap();
    let path = db_path(&dir);
    let data = pattern(CHUNK_BYTES + 100, 3);
    reopen(&path).0.save_snapshot(5, &data).unwrap();
    let db = Database::create(&path).unwrap();
    write_durably(&db, "test", |wtx| {
        let mut chunks = wtx.open_table(SNAP_CHUNKS).unwrap();
        let mut chunk = chunks.get((5, 1)).unwrap().unwrap().value().to_vec();
        chunk[10] ^= 1;
        chunks.insert((5, 1), chunk.as_slice()).unwrap();
        Ok(())
    })
    .unwrap();
    drop(db);
    let (s, _) = reopen(&path);
    assert_eq!(s.snapshots().unwrap(), vec![5]);
    let err = s.load_snapshot(5).unwrap_err();
    assert!(
        matches!(err, StorageError::Corrupt(ref m) if m.contains("crc")),
        "{err}"
    );
}

#[test]
fn incomplete_snapshot_is_removed_on_open() {
    let dir = TempDir::new().unwrap();
    let path = db_path(&dir);
    {
        let (s, _) = reopen(&path);
        s.append(&txns(1..=3)).unwrap();
        s.save_snapshot(2, b"complete").unwrap();
    }
    let db = Database::create(&path).unwrap();
    write_durably(&db, "test", |wtx| {
        let mut chunks = wtx.open_table(SNAP_CHUNKS).unwrap();
        chunks.insert((3, 0), b"half of".as_slice()).unwrap();
        chunks.insert((3, 1), b"a snapshot".as_slice()).unwrap();
        Ok(())
    })
    .unwrap();
    drop(db);
    let (s, report) = reopen(&path);
    assert_eq!(report.incomplete_snapshots_removed, vec![3]);
    assert_eq!(s.snapshots().unwrap(), vec![2]);
    assert_eq!(s.load_snapshot(2).unwrap(), b"complete");
    drop(s);
    let db = Database::create(&path).unwrap();
    let rtx = db.begin_read().unwrap();
    let chunks = rtx.open_table(SNAP_CHUNKS).unwrap();
    let left: Vec<(u64, u32)> = chunks
        .range::<(u64, u32)>(..)
        .unwrap()
        .map(|e| e.unwrap().0.value())
        .collect();
    assert_eq!(
        left,
        vec![(2, 0)],
        "only the complete snapshot's chunk is left"
    );
}

#[test]
fn discard_keeps_the_old_file_aside_and_carries_the_named_values() {
    let dir = TempDir::new().unwrap();
    let path = db_path(&dir);
    {
        let (s, _) = reopen(&path);
        s.append(&txns(1..=5)).unwrap();
        s.set_u64("accepted_epoch", 7).unwrap();
        s.set_u64("current_epoch", 6).unwrap();
    }
    put_raw_log(&path, 3, b"junk");
    let done = RedbStorage::discard(&path, "42", &[("must_resync", 1)]).unwrap();
    let aside = dir.path().join("concord.redb.discarded-42");
    assert_eq!(done.kept_at.as_deref(), Some(aside.as_path()));
    assert_eq!(done.unreadable, None);
    assert_eq!(
        done.carried,
        vec![("accepted_epoch".into(), 7), ("current_epoch".into(), 6)]
    );
    let (s, _) = reopen(&path);
    assert_eq!(zxids(&s), Vec::<u64>::new());
    assert_eq!(s.last_zxid().unwrap(), 0);
    assert_eq!(s.get_u64("accepted_epoch").unwrap(), Some(7));
    assert_eq!(s.get_u64("current_epoch").unwrap(), Some(6));
    assert_eq!(s.get_u64("must_resync").unwrap(), Some(1));
    drop(s);
    // The old file is kept as it was, bad entry and all.
    assert_eq!(refused(&aside).0, 3);
    // The same name again is refused rather than overwritten.
    assert!(matches!(
        RedbStorage::discard(&path, "42", &[]),
        Err(StorageError::Misuse(_))
    ));
}

#[test]
fn discard_refuses_a_store_open_elsewhere_and_works_without_one() {
    let dir = TempDir::new().unwrap();
    let path = db_path(&dir);
    let (s, _) = reopen(&path);
    let err = RedbStorage::discard(&path, "1", &[]).unwrap_err();
    assert!(
        matches!(err, StorageError::Misuse(ref m) if m.contains("open")),
        "{err}"
    );
    assert!(path.exists() && !dir.path().join("concord.redb.discarded-1").exists());
    drop(s);
    let other = dir.path().join("none.redb");
    let done = RedbStorage::discard(&other, "1", &[("must_resync", 1)]).unwrap();
    assert_eq!(done.kept_at, None);
    assert_eq!(reopen(&other).0.get_u64("must_resync").unwrap(), Some(1));
}

/// redb sizes a new file before it writes its header, and a crash between the two
/// leaves a file that never opens (the crash tests found it): a store is made beside
/// its path and renamed into place, so what such a crash leaves is only a leftover
/// beside it, which the next open replaces.
#[test]
fn a_crash_while_creating_leaves_no_store_that_cannot_open() {
    let dir = TempDir::new().unwrap();
    let path = db_path(&dir);
    let creating = dir.path().join("concord.redb.creating");
    // What such a crash leaves: a sized file of zeros, no header.
    std::fs::write(&creating, vec![0u8; 4096]).unwrap();
    assert!(
        Database::open(&creating).is_err(),
        "a headerless file is not a store"
    );
    let (s, _) = reopen(&path);
    s.append(&txns(1..=3)).unwrap();
    drop(s);
    assert!(!creating.exists(), "the leftover was replaced and renamed");
    assert_eq!(zxids(&reopen(&path).0), vec![1, 2, 3]);
}

#[test]
fn an_append_goes_before_the_rest_of_a_long_purge() {
    let (s, _dir) = make_store();
    let s = Arc::new(s);
    let cut = 200 * PURGE_ENTRIES_PER_COMMIT as u64;
    s.append(&txns(1..=cut)).unwrap();
    s.save_snapshot(cut, b"state").unwrap();
    let purging = {
        let s = s.clone();
        std::thread::spawn(move || s.purge(1))
    };
    // The purge's first commit raises log_start; its batches of deletions follow.
    let deadline = Instant::now() + Duration::from_secs(30);
    while s.log_start().unwrap() < cut {
        assert!(Instant::now() < deadline, "the purge never began");
        std::thread::sleep(Duration::from_millis(1));
    }
    s.append(&txns([cut + 1])).unwrap();
    let purged_meanwhile = !s.read_after(0, 1).unwrap().iter().any(|t| t.zxid <= cut);
    purging.join().unwrap().unwrap();
    assert!(
        !purged_meanwhile,
        "the append waited until the purge had deleted all {cut} entries"
    );
    assert_eq!(zxids(&s), [cut + 1]);
}
