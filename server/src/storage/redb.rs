//! The real backend: one redb file per server holding the txn log, named u64s and
//! snapshots.
//!
//! ```text
//!   table            key                  value
//!   log              zxid                 crc32 (LE u32) ++ Txn::encode()
//!   meta             &str                 u64   (accepted_epoch, current_epoch, ...)
//!   state            &str                 u64   (this module's own: log_start)
//!   snapshot_chunks  (zxid, chunk index)  1 MiB - 4 KiB of snapshot bytes
//!   snapshot_index   zxid                 (total bytes, chunk count, crc32 of all)
//! ```
//!
//! Every change is a redb write transaction committed with `Durability::Immediate`
//! (fsync). `append` is exactly one such commit per call, whatever the batch size:
//! that is the group commit. Snapshots are written, and purges delete, in several
//! commits so appends can interleave (redb has one writer at a time, and its write
//! lock is not fair: `Turns` lets a waiting append go before each such commit); the
//! index record is written last, so a snapshot is visible only when complete. `open`
//! removes incomplete snapshots and refuses a log with a bad entry (see
//! `recovery.rs`).
//!
//! What it must not do: interpret txns beyond checking them, or know Zab's rules.

mod compact;
#[cfg(test)]
mod compact_tests;
#[cfg(test)]
mod crash_disk;
#[cfg(test)]
mod crash_tests;
mod recovery;
mod snapshot;
#[cfg(test)]
mod tests;

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard};
use std::time::Duration;

use ::redb::{
    Database, Durability, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction,
};

use super::{check_append_order, DiskUsage, Storage, StorageError};
use crate::telemetry::Seconds;
use crate::txn::{Txn, Zxid};

pub use recovery::{Discarded, OpenReport};

/// The txn log: zxid -> crc32 (LE) ++ encoded txn.
const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
/// Named u64s for callers (`get_u64` / `set_u64`).
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// This module's own durable values, apart from callers' names.
const STATE: TableDefinition<&str, u64> = TableDefinition::new("state");
/// Snapshot bytes in chunks: (zxid, chunk index) -> bytes.
const SNAP_CHUNKS: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("snapshot_chunks");
/// Complete snapshots: zxid -> (total bytes, chunk count, crc32 of all bytes).
const SNAP_INDEX: TableDefinition<u64, (u64, u32, u32)> = TableDefinition::new("snapshot_index");

/// Key in `STATE` of the zxid after which the log is complete.
const LOG_START_KEY: &str = "log_start";

/// Maps any redb error into a `StorageError` that says what we were doing.
fn redb_err<E: Into<::redb::Error>>(what: &str) -> impl FnOnce(E) -> StorageError + '_ {
    move |e| match e.into() {
        ::redb::Error::Corrupted(msg) => StorageError::Corrupt(format!("{what}: {msg}")),
        other => StorageError::Io(format!("{what}: {other}")),
    }
}

/// Runs `body` in one write transaction and commits it durably (fsync). If `body`
/// fails, the transaction is dropped, which aborts it: nothing is written.
fn write_durably<T>(
    db: &Database,
    what: &str,
    body: impl FnOnce(&WriteTransaction) -> Result<T, StorageError>,
) -> Result<T, StorageError> {
    write_timed(db, what, body).map(|(out, _)| out)
}

/// `write_durably`, also returning how long the commit itself took (the fsync).
fn write_timed<T>(
    db: &Database,
    what: &str,
    body: impl FnOnce(&WriteTransaction) -> Result<T, StorageError>,
) -> Result<(T, std::time::Duration), StorageError> {
    let mut wtx = db.begin_write().map_err(redb_err(what))?;
    wtx.set_durability(Durability::Immediate)
        .map_err(redb_err(what))?;
    let out = body(&wtx)?;
    let started = std::time::Instant::now();
    wtx.commit().map_err(redb_err(what))?;
    Ok((out, started.elapsed()))
}

/// A log value: crc32 of the encoded txn (LE u32), then the encoding.
fn frame_txn(txn: &Txn) -> Vec<u8> {
    let body = txn.encode();
    let mut value = Vec::with_capacity(4 + body.len());
    value.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    value.extend_from_slice(&body);
    value
}

/// Checks and decodes a log value; Err says what is wrong with it.
fn unframe_txn(value: &[u8]) -> Result<Txn, String> {
    let (crc, body) = value
        .split_first_chunk::<4>()
        .ok_or_else(|| format!("entry of {} bytes has no crc", value.len()))?;
    if u32::from_le_bytes(*crc) != crc32fast::hash(body) {
        return Err("crc mismatch".into());
    }
    Txn::decode(body).map_err(|e| format!("undecodable txn: {e}"))
}

/// Checks a log entry read under `key`: good crc, decodable, and the txn's own zxid.
fn check_entry(key: Zxid, value: &[u8]) -> Result<Txn, String> {
    let txn = unframe_txn(value)?;
    if txn.zxid != key {
        return Err(format!("key {key:#x} holds txn {:#x}", txn.zxid));
    }
    Ok(txn)
}

/// `Storage` in one redb file. Open with `RedbStorage::open`.
pub struct RedbStorage {
    /// The one redb file of this server. Every call holds it shared for as long as
    /// its transaction lives (`db`); only a compaction holds it alone (redb's
    /// `Database::compact` wants no transaction alive).
    db: RwLock<Database>,
    /// max(newest log zxid, newest snapshot zxid), cached so appends need no read.
    /// Moved only while `order_lock` is held.
    last_zxid: AtomicU64,
    /// Held by every writer that checks or moves `last_zxid` (append, truncate,
    /// snapshot publish) from the check until after its commit, so two appends can
    /// never both pass the order check against the same `last_zxid`.
    order_lock: Mutex<()>,
    /// Durable commits since open: a metric (fsyncs), and how tests see that one
    /// `append` is one commit.
    commits_total: AtomicU64,
    /// How long each commit took (`concord_disk_backend_commit_duration_seconds`).
    commit_seconds: Seconds,
    /// Waiting appends go before the next commit of a snapshot or a purge.
    turns: Turns,
    /// Where the bytes are, to learn their size.
    place: Place,
}

/// Where a store's bytes are.
enum Place {
    /// The file at this path.
    File(std::path::PathBuf),
    /// A test's backend (a disk that crashes), shared with redb.
    #[cfg(test)]
    Backend(std::sync::Arc<dyn ::redb::StorageBackend>),
}

/// Longest a snapshot's or a purge's next commit waits for an append to go first.
const TURN_WAIT_MAX: Duration = Duration::from_millis(50);

/// Turns between log appends and the writers that work in the background in many
/// commits (a snapshot's chunks, a purge's batches). redb's write lock is not fair:
/// such a writer takes it again, commit after commit, before a waiting append has
/// woken, and the append (every write in flight) waited for the whole snapshot or
/// purge: 34 ms seen at 64 writing clients on a tree of 64 nodes, and a large
/// tree's snapshot takes many more commits. Before each of its commits (every
/// commit but an append: `RedbStorage::write`) a writer lets one waiting append go
/// first.
#[derive(Default)]
struct Turns {
    /// Appends waiting for the write lock or holding it.
    waiting: AtomicUsize,
    /// Appends done; background writers wait for it to move.
    done: Mutex<u64>,
    moved: Condvar,
}

impl Turns {
    /// Runs an append (`commit`), known to the background writers meanwhile.
    fn append<T>(&self, commit: impl FnOnce() -> T) -> T {
        self.waiting.fetch_add(1, Ordering::AcqRel);
        let out = commit();
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        *self.done.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        self.moved.notify_all();
        out
    }

    /// Before a background commit: if an append is waiting, waits until one is
    /// done (at most `TURN_WAIT_MAX`, so appends back to back never stop the
    /// background writer: it alternates with them).
    fn let_an_append_in(&self) {
        let done = self.done.lock().unwrap_or_else(PoisonError::into_inner);
        if self.waiting.load(Ordering::Acquire) == 0 {
            return;
        }
        let seen = *done;
        let _ = self
            .moved
            .wait_timeout_while(done, TURN_WAIT_MAX, |now| *now == seen);
    }
}

impl std::fmt::Debug for RedbStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbStorage")
            .field("last_zxid", &self.last_zxid.load(Ordering::Acquire))
            .field("commits_total", &self.commits_total.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl RedbStorage {
    /// Durable write transactions committed since open (each one fsync).
    pub fn commits_total(&self) -> u64 {
        self.commits_total.load(Ordering::Relaxed)
    }

    /// The histogram of this store's commit durations (shared, not copied).
    pub fn commit_seconds(&self) -> Seconds {
        self.commit_seconds.clone()
    }

    /// One durable commit that is not a log append: a waiting append goes first
    /// (`Turns`). Only the snapshots' and purges' commits, which come from another
    /// thread than the appends, ever find one waiting.
    fn write<T>(
        &self,
        what: &str,
        body: impl FnOnce(&WriteTransaction) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        self.turns.let_an_append_in();
        self.commit(what, body)
    }

    /// One durable commit, counted and timed.
    fn commit<T>(
        &self,
        what: &str,
        body: impl FnOnce(&WriteTransaction) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        let (out, took) = write_timed(&*self.db()?, what, body)?;
        self.commits_total.fetch_add(1, Ordering::Relaxed);
        self.commit_seconds.observe(took);
        Ok(out)
    }

    /// The database, shared: hold the guard for as long as a transaction begun from
    /// it lives (declare it first), and never take a second one while holding it (a
    /// compaction waiting between the two would deadlock them).
    fn db(&self) -> Result<RwLockReadGuard<'_, Database>, StorageError> {
        self.db
            .read()
            .map_err(|_| StorageError::Io("storage database lock poisoned".into()))
    }

    /// The size of the store's file.
    fn file_bytes(&self) -> Result<u64, StorageError> {
        match &self.place {
            Place::File(path) => std::fs::metadata(path)
                .map(|m| m.len())
                .map_err(|e| StorageError::Io(format!("size of {}: {e}", path.display()))),
            #[cfg(test)]
            Place::Backend(backend) => backend
                .len()
                .map_err(|e| StorageError::Io(format!("size of the backend: {e}"))),
        }
    }

    fn lock_order(&self) -> Result<MutexGuard<'_, ()>, StorageError> {
        self.order_lock
            .lock()
            .map_err(|_| StorageError::Io("storage order lock poisoned".into()))
    }

    fn read_state(&self, key: &str) -> Result<Option<u64>, StorageError> {
        let what = "read state";
        let db = self.db()?;
        let rtx = db.begin_read().map_err(redb_err(what))?;
        let table = rtx.open_table(STATE).map_err(redb_err(what))?;
        let value = table.get(key).map_err(redb_err(what))?;
        Ok(value.map(|v| v.value()))
    }
}

impl Storage for RedbStorage {
    fn append(&self, txns: &[Txn]) -> Result<(), StorageError> {
        let Some(newest) = txns.last().map(|t| t.zxid) else {
            return Ok(());
        };
        let _order = self.lock_order()?;
        check_append_order(self.last_zxid.load(Ordering::Acquire), txns)?;
        // The group commit: the whole batch in one write transaction, one fsync.
        self.turns.append(|| {
            self.commit("append", |wtx| {
                let mut log = wtx.open_table(LOG).map_err(redb_err("append"))?;
                for txn in txns {
                    log.insert(txn.zxid, frame_txn(txn).as_slice())
                        .map_err(redb_err("append"))?;
                }
                Ok(())
            })
        })?;
        self.last_zxid.store(newest, Ordering::Release);
        Ok(())
    }

    fn last_zxid(&self) -> Result<Zxid, StorageError> {
        Ok(self.last_zxid.load(Ordering::Acquire))
    }

    fn read_after(&self, after: Zxid, max: usize) -> Result<Vec<Txn>, StorageError> {
        let what = "read log";
        let db = self.db()?;
        let rtx = db.begin_read().map_err(redb_err(what))?;
        let log = rtx.open_table(LOG).map_err(redb_err(what))?;
        let range = log
            .range::<u64>((Bound::Excluded(after), Bound::Unbounded))
            .map_err(redb_err(what))?;
        let mut out = Vec::new();
        for entry in range.take(max) {
            let (key, value) = entry.map_err(redb_err(what))?;
            let txn = check_entry(key.value(), value.value()).map_err(|reason| {
                StorageError::BadLogEntry {
                    zxid: key.value(),
                    reason,
                }
            })?;
            out.push(txn);
        }
        Ok(out)
    }

    fn truncate_after(&self, zxid: Zxid) -> Result<(), StorageError> {
        let what = "truncate log";
        let _order = self.lock_order()?;
        if zxid >= self.last_zxid.load(Ordering::Acquire) {
            return Ok(()); // nothing above it: no commit needed
        }
        let last = self.write(what, |wtx| {
            let mut log = wtx.open_table(LOG).map_err(redb_err(what))?;
            log.retain_in::<u64, _>((Bound::Excluded(zxid), Bound::Unbounded), |_, _| false)
                .map_err(redb_err(what))?;
            let log_last = log.last().map_err(redb_err(what))?.map(|(k, _)| k.value());
            let index = wtx.open_table(SNAP_INDEX).map_err(redb_err(what))?;
            let snap_last = index
                .last()
                .map_err(redb_err(what))?
                .map(|(k, _)| k.value());
            Ok(log_last.unwrap_or(0).max(snap_last.unwrap_or(0)))
        })?;
        self.last_zxid.store(last, Ordering::Release);
        Ok(())
    }

    fn save_snapshot(&self, zxid: Zxid, data: &[u8]) -> Result<(), StorageError> {
        snapshot::save(self, zxid, data)
    }

    fn snapshots(&self) -> Result<Vec<Zxid>, StorageError> {
        snapshot::list(&*self.db()?)
    }

    fn load_snapshot(&self, zxid: Zxid) -> Result<Vec<u8>, StorageError> {
        snapshot::load(&*self.db()?, zxid)
    }

    fn purge(&self, keep: usize) -> Result<(), StorageError> {
        snapshot::purge(self, keep)
    }

    fn log_start(&self) -> Result<Zxid, StorageError> {
        Ok(self.read_state(LOG_START_KEY)?.unwrap_or(0))
    }

    fn get_u64(&self, key: &str) -> Result<Option<u64>, StorageError> {
        let what = "read meta";
        let db = self.db()?;
        let rtx = db.begin_read().map_err(redb_err(what))?;
        let meta = rtx.open_table(META).map_err(redb_err(what))?;
        let value = meta.get(key).map_err(redb_err(what))?;
        Ok(value.map(|v| v.value()))
    }

    fn set_u64(&self, key: &str, value: u64) -> Result<(), StorageError> {
        let what = "write meta";
        self.write(what, |wtx| {
            let mut meta = wtx.open_table(META).map_err(redb_err(what))?;
            meta.insert(key, value).map_err(redb_err(what))?;
            Ok(())
        })
    }

    fn disk_usage(&self) -> Result<Option<DiskUsage>, StorageError> {
        compact::usage(self).map(Some)
    }

    fn compact_file(&self) -> Result<Option<DiskUsage>, StorageError> {
        compact::compact(self).map(Some)
    }
}
