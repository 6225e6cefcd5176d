//! Tests of recovery's refusals: a damaged history is refused naming the zxid, an
//! unreadable newest snapshot falls back only when the log covers the gap, and the
//! must-resync marker left by a discard reaches the core (or is cleared, alone).
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use tempfile::TempDir;

use super::*;
use crate::storage::conformance::txn;

fn file(dir: &TempDir) -> PathBuf {
    dir.path().join(STORE_FILE)
}

/// A good snapshot at `zxid`: the tree after txns 1..=zxid.
fn snapshot_at(zxid: Zxid) -> Vec<u8> {
    let mut tree = DataTree::new();
    for z in 1..=zxid {
        tree.apply(&txn(z));
    }
    tree.encode_snapshot().unwrap()
}

fn store_with(path: &Path, log: std::ops::RangeInclusive<Zxid>) -> RedbStorage {
    let (s, _) = RedbStorage::open(path).unwrap();
    s.append(&log.map(txn).collect::<Vec<_>>()).unwrap();
    s
}

/// The detail of a Damaged refusal, or panics.
fn damaged(path: &Path, ensemble: bool) -> String {
    match recover(path, ensemble) {
        Err(e @ StartError::Damaged { .. }) => e.to_string(),
        Err(e) => panic!("expected Damaged, got {e}"),
        Ok(_) => panic!("expected Damaged, recovery succeeded"),
    }
}

#[test]
fn a_bad_newest_snapshot_falls_back_when_the_log_covers_the_gap() {
    let dir = TempDir::new().unwrap();
    let s = store_with(&file(&dir), 1..=30);
    s.save_snapshot(10, &snapshot_at(10)).unwrap();
    s.save_snapshot(20, b"not a snapshot").unwrap();
    drop(s);
    let r = recover(&file(&dir), false).unwrap();
    assert_eq!(r.tree.last_zxid(), 10);
    assert_eq!(r.restored.log.first().map(|t| t.zxid), Some(11));
    assert_eq!(r.restored.log.last().map(|t| t.zxid), Some(30));
}

#[test]
fn a_bad_newest_snapshot_is_refused_when_the_log_does_not_cover_the_gap() {
    let dir = TempDir::new().unwrap();
    let s = store_with(&file(&dir), 1..=30);
    s.save_snapshot(10, &snapshot_at(10)).unwrap();
    s.save_snapshot(20, b"not a snapshot").unwrap();
    s.purge(1).unwrap(); // only the (bad) snapshot at 20 and the log after it
    drop(s);
    let e = damaged(&file(&dir), true);
    assert!(e.contains("snapshot at zxid 0x14"), "{e}");
    assert!(e.contains("--discard-local-state"), "{e}");
}

#[test]
fn a_bad_snap_from_the_leader_is_not_replaced_by_an_older_local_snapshot() {
    // A learner had a snapshot at 10, then installed the leader's snapshot at 40
    // over an emptied log: the txns 11..=40 are nowhere here.
    let dir = TempDir::new().unwrap();
    let s = store_with(&file(&dir), 1..=12);
    s.save_snapshot(10, &snapshot_at(10)).unwrap();
    s.truncate_after(0).unwrap();
    s.save_snapshot(40, b"unreadable").unwrap();
    s.append(&[txn(41)]).unwrap();
    drop(s);
    let e = damaged(&file(&dir), true);
    assert!(e.contains("snapshot at zxid 0x28"), "{e}");
}

#[test]
fn a_bad_log_entry_is_refused_naming_its_zxid() {
    let dir = TempDir::new().unwrap();
    let s = store_with(&file(&dir), 1..=9);
    s.save_snapshot(4, b"junk that hides nothing").unwrap();
    drop(s);
    // The snapshot at 4 is bad; falling back to the whole log works...
    assert_eq!(recover(&file(&dir), false).unwrap().restored.log.len(), 9);
    // ... but not past a bad entry below it: the fallback reads it, and refuses.
    // (Open validates only the log above the newest snapshot.)
    let db = ::redb::Database::create(file(&dir)).unwrap();
    let wtx = db.begin_write().unwrap();
    {
        let mut log = wtx
            .open_table(::redb::TableDefinition::<u64, &[u8]>::new("log"))
            .unwrap();
        log.insert(2, b"junk".as_slice()).unwrap();
    }
    wtx.commit().unwrap();
    drop(db);
    let e = damaged(&file(&dir), false);
    assert!(e.contains("zxid 0x2"), "{e}");
    assert!(e.contains("single server"), "{e}");
}

#[test]
fn a_discarded_store_must_resync_in_an_ensemble_and_not_alone() {
    let dir = TempDir::new().unwrap();
    let s = store_with(&file(&dir), 1..=3);
    s.set_u64(ACCEPTED_EPOCH, 5).unwrap();
    s.set_u64(CURRENT_EPOCH, 4).unwrap();
    drop(s);
    let config = Config {
        data_dir: dir.path().to_path_buf(),
        ..Config::default()
    };
    let report = discard_local_state(&config).unwrap();
    assert!(
        report.contains("single server") && report.contains("lost"),
        "{report}"
    );
    let r = recover(&file(&dir), true).unwrap();
    assert!(r.restored.must_resync);
    assert_eq!(
        (r.restored.accepted_epoch, r.restored.current_epoch),
        (5, 4),
        "the epochs are kept"
    );
    assert!(r.restored.log.is_empty());
    drop(r);
    // Alone, there is no leader to sync from: the marker is cleared, durably.
    assert!(!recover(&file(&dir), false).unwrap().restored.must_resync);
    assert!(!recover(&file(&dir), true).unwrap().restored.must_resync);
}

#[test]
fn the_peer_ports_bounds_come_from_the_config() {
    let derived = peer_config(&Config::default());
    assert_eq!(
        derived.connections_max,
        crate::peer::peer_connections_max(1),
        "0 means 4 per member plus 16"
    );
    assert_eq!(derived.connection_idle_timeout_ms, 30_000);
    let set = peer_config(&Config {
        peer_connections_max: 7,
        peer_connection_idle_timeout_ms: 5_000,
        ..Config::default()
    });
    assert_eq!(
        (set.connections_max, set.connection_idle_timeout_ms),
        (7, 5_000)
    );
}
