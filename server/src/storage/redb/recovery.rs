//! Opening a redb store: create the tables, remove incomplete snapshots, validate the
//! log tail and cut it at the first bad entry, and compute `last_zxid`.
//!
//! ```text
//!   open ─▶ tables ─▶ chunks without index? delete ─▶ log after newest snapshot:
//!           crc ok, decodes, key == txn.zxid, ascending? first bad ─▶ delete it and
//!           everything after (durably) ─▶ OpenReport
//! ```
//!
//! What it must not do: repair an entry, or keep anything after a bad one: a torn or
//! corrupt tail is cut, never applied.

use std::collections::BTreeSet;
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use ::redb::{Database, ReadableDatabase, ReadableTable};

use super::snapshot::remove_chunks;
use super::{
    check_entry, redb_err, write_durably, RedbStorage, LOG, META, SNAP_CHUNKS, SNAP_INDEX, STATE,
};
use crate::storage::StorageError;
use crate::txn::Zxid;

/// What `RedbStorage::open` found and repaired.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// The log tail that was cut, if any.
    pub tail_cut: Option<TailCut>,
    /// Zxids of incomplete snapshots (chunks without an index record) that were deleted.
    pub incomplete_snapshots_removed: Vec<Zxid>,
}

/// A bad log tail removed on open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TailCut {
    /// Key of the first bad entry; it and every entry after it were deleted.
    pub first_bad_zxid: Zxid,
    /// How many entries were deleted.
    pub entries_removed: u64,
    /// What was wrong with the first bad entry.
    pub reason: String,
}

/// redb's page cache. Its default (1 GiB) would hold the whole log and snapshots in
/// memory for nothing: the log is appended and read back only on recovery, SNAP and
/// old watch resumes, and the tree itself lives in memory already.
const CACHE_BYTES: usize = 64 << 20;

impl RedbStorage {
    /// Opens the store at `path`, creating it if absent, and repairs it: incomplete
    /// snapshots are deleted and the log after the newest complete snapshot is
    /// validated; at the first bad entry it and everything after are deleted
    /// durably. Both are reported (and logged with `tracing::warn`).
    pub fn open(path: &Path) -> Result<(RedbStorage, OpenReport), StorageError> {
        let what = format!("open {}", path.display());
        let db = Database::builder()
            .set_cache_size(CACHE_BYTES)
            .create(path)
            .map_err(redb_err(&what))?;
        write_durably(&db, &what, |wtx| {
            wtx.open_table(LOG).map_err(redb_err("create log"))?;
            wtx.open_table(META).map_err(redb_err("create meta"))?;
            wtx.open_table(STATE).map_err(redb_err("create state"))?;
            wtx.open_table(SNAP_CHUNKS)
                .map_err(redb_err("create chunks"))?;
            wtx.open_table(SNAP_INDEX)
                .map_err(redb_err("create index"))?;
            Ok(())
        })?;
        let report = OpenReport {
            incomplete_snapshots_removed: remove_incomplete_snapshots(&db)?,
            tail_cut: cut_bad_tail(&db)?,
        };
        let last_zxid = newest_zxid(&db)?;
        let store = RedbStorage {
            db,
            last_zxid: AtomicU64::new(last_zxid),
            order_lock: Mutex::new(()),
            commits_total: AtomicU64::new(0),
        };
        Ok((store, report))
    }
}

/// Deletes chunks that have no index record (a save interrupted by a crash).
fn remove_incomplete_snapshots(db: &Database) -> Result<Vec<Zxid>, StorageError> {
    let what = "find incomplete snapshots";
    let rtx = db.begin_read().map_err(redb_err(what))?;
    let index = rtx.open_table(SNAP_INDEX).map_err(redb_err(what))?;
    let chunks = rtx.open_table(SNAP_CHUNKS).map_err(redb_err(what))?;
    let mut orphans = BTreeSet::new();
    for entry in chunks.range::<(u64, u32)>(..).map_err(redb_err(what))? {
        let zxid = entry.map_err(redb_err(what))?.0.value().0;
        if !orphans.contains(&zxid) && index.get(zxid).map_err(redb_err(what))?.is_none() {
            orphans.insert(zxid);
        }
    }
    drop((index, chunks, rtx));
    for &zxid in &orphans {
        tracing::warn!(zxid = format!("{zxid:#x}"), "removing incomplete snapshot");
        write_durably(db, "remove incomplete snapshot", |wtx| {
            remove_chunks(wtx, zxid)
        })?;
    }
    Ok(orphans.into_iter().collect())
}

/// Finds the first bad log entry after the newest complete snapshot: (key, reason).
fn find_bad_entry(db: &Database) -> Result<Option<(Zxid, String)>, StorageError> {
    let what = "validate log";
    let rtx = db.begin_read().map_err(redb_err(what))?;
    let index = rtx.open_table(SNAP_INDEX).map_err(redb_err(what))?;
    let start = index
        .last()
        .map_err(redb_err(what))?
        .map_or(0, |(k, _)| k.value());
    let log = rtx.open_table(LOG).map_err(redb_err(what))?;
    let mut prev: Option<Zxid> = None;
    for entry in log
        .range::<u64>((Bound::Excluded(start), Bound::Unbounded))
        .map_err(redb_err(what))?
    {
        let (key, value) = entry.map_err(redb_err(what))?;
        let key = key.value();
        if prev.is_some_and(|p| key <= p) {
            return Ok(Some((key, "keys do not ascend".into())));
        }
        if let Err(reason) = check_entry(key, value.value()) {
            return Ok(Some((key, reason)));
        }
        prev = Some(key);
    }
    Ok(None)
}

/// Deletes the first bad log entry and everything after it, durably.
fn cut_bad_tail(db: &Database) -> Result<Option<TailCut>, StorageError> {
    let Some((first_bad_zxid, reason)) = find_bad_entry(db)? else {
        return Ok(None);
    };
    let what = "cut log tail";
    let entries_removed = write_durably(db, what, |wtx| {
        let mut log = wtx.open_table(LOG).map_err(redb_err(what))?;
        let mut removed: u64 = 0;
        log.retain_in::<u64, _>(first_bad_zxid.., |_, _| {
            removed += 1;
            false
        })
        .map_err(redb_err(what))?;
        Ok(removed)
    })?;
    tracing::warn!(
        first_bad_zxid = format!("{first_bad_zxid:#x}"),
        entries_removed,
        reason = reason.as_str(),
        "cut a bad log tail"
    );
    Ok(Some(TailCut {
        first_bad_zxid,
        entries_removed,
        reason,
    }))
}

/// max(newest log zxid, newest snapshot zxid), 0 if both are empty.
fn newest_zxid(db: &Database) -> Result<Zxid, StorageError> {
    let what = "read last zxid";
    let rtx = db.begin_read().map_err(redb_err(what))?;
    let log = rtx.open_table(LOG).map_err(redb_err(what))?;
    let index = rtx.open_table(SNAP_INDEX).map_err(redb_err(what))?;
    let log_last = log
        .last()
        .map_err(redb_err(what))?
        .map_or(0, |(k, _)| k.value());
    let snap_last = index
        .last()
        .map_err(redb_err(what))?
        .map_or(0, |(k, _)| k.value());
    Ok(log_last.max(snap_last))
}

/// Test aid (for integration tests in other crates): simulates a torn final write.
/// Opens the store at `path` (which must not be open elsewhere), overwrites the value
/// of the newest log entry with its first half, and returns that entry's zxid. The
/// next `RedbStorage::open` must cut it. Err(Misuse) if the log is empty.
#[doc(hidden)]
pub fn tear_last_log_entry(path: &Path) -> Result<Zxid, StorageError> {
    let what = "tear last log entry";
    let db = Database::create(path).map_err(redb_err(what))?;
    write_durably(&db, what, |wtx| {
        let mut log = wtx.open_table(LOG).map_err(redb_err(what))?;
        let (zxid, torn) = match log.last().map_err(redb_err(what))? {
            Some((key, value)) => {
                let bytes = value.value();
                (key.value(), bytes[..bytes.len() / 2].to_vec())
            }
            None => return Err(StorageError::Misuse("the log is empty".into())),
        };
        log.insert(zxid, torn.as_slice()).map_err(redb_err(what))?;
        Ok(zxid)
    })
}
