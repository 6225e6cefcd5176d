//! Snapshots in redb: chunked writes, an index record written last, crc-checked
//! loads, and purging old snapshots with the log below them.
//!
//! ```text
//!   save:  [chunks 0..4] [chunks 4..8] ... [index record]
//!          each [..] one durable commit; appends may commit between them
//!   save over a snapshot at the same zxid: nothing if the bytes are the same,
//!          else [all chunks, index record] in one commit
//!   purge: [drop old index records, raise log_start] [old chunks] [old log, in batches]
//! ```
//!
//! A crash between commits leaves chunks without an index record: invisible, and
//! removed by the next `open`. What it must not do: interpret snapshot bytes.

use std::sync::atomic::Ordering;

use ::redb::{ReadableDatabase, ReadableTable, WriteTransaction};

use super::{redb_err, RedbStorage, LOG, LOG_START_KEY, SNAP_CHUNKS, SNAP_INDEX, STATE};
use crate::storage::StorageError;
use crate::txn::Zxid;

/// Bytes per snapshot chunk: a 1 MiB page less room for the chunk's key and the
/// page's header. A chunk of exactly 1 MiB took a 2 MiB page (redb's pages are 4 KiB
/// times a power of two), so each snapshot took twice its size on disk. Loads take
/// chunks of any size: stores written with 1 MiB chunks read as before.
pub(super) const CHUNK_BYTES: usize = (1 << 20) - 4096;
/// Chunks written per commit (a few MiB), so a log append waits at most for one such
/// commit (`Turns` lets it go before the next).
const CHUNKS_PER_COMMIT: usize = 4;
/// Most bytes `load` reserves up front from an index record not yet verified.
const PREALLOC_BYTES_MAX: u64 = 64 << 20;
/// Log entries deleted per commit by `purge`, for the same reason: appends wait for
/// redb's write lock behind each of these commits.
pub(super) const PURGE_ENTRIES_PER_COMMIT: usize = 1_000;

/// Writes a snapshot in several commits, publishing its index record last. One
/// already at `zxid` is never hidden while its replacement is written (the log may
/// start at it): the same bytes again change nothing, and other bytes replace it in
/// one commit.
pub(super) fn save(store: &RedbStorage, zxid: Zxid, data: &[u8]) -> Result<(), StorageError> {
    let what = "save snapshot";
    let chunks: Vec<&[u8]> = data.chunks(CHUNK_BYTES).collect();
    let chunk_count = u32::try_from(chunks.len())
        .map_err(|_| StorageError::Misuse(format!("snapshot of {} bytes", data.len())))?;
    let record = (data.len() as u64, chunk_count, crc32fast::hash(data));
    let replacing = {
        let db = store.db()?;
        match index_record(&db, zxid)? {
            Some(old) if old == record && load(&db, zxid).is_ok() => return Ok(()),
            old => old.is_some(),
        }
    };
    if !replacing {
        let mut first_index: u32 = 0;
        for group in chunks.chunks(CHUNKS_PER_COMMIT) {
            store.write(what, |wtx| insert_chunks(wtx, zxid, first_index, group))?;
            // chunk_count fits in u32, so this cannot wrap before the last group.
            first_index = first_index.saturating_add(CHUNKS_PER_COMMIT as u32);
        }
    }
    // The last commit (a replacement's only one), under the order lock since it may
    // raise `last_zxid` (appends wait for that lock, so none waits for a turn here).
    let _order = store.lock_order()?;
    store.write(what, |wtx| {
        if replacing {
            insert_chunks(wtx, zxid, 0, &chunks)?;
        }
        publish_in(wtx, zxid, record)
    })?;
    store.last_zxid.fetch_max(zxid, Ordering::AcqRel);
    Ok(())
}

/// The index record of the snapshot at `zxid`, if it is complete.
fn index_record(db: &::redb::Database, zxid: Zxid) -> Result<Option<IndexRecord>, StorageError> {
    let what = "read snapshot index";
    let rtx = db.begin_read().map_err(redb_err(what))?;
    let index = rtx.open_table(SNAP_INDEX).map_err(redb_err(what))?;
    let record = index.get(zxid).map_err(redb_err(what))?;
    Ok(record.map(|v| v.value()))
}

/// (total bytes, chunk count, crc32 of all bytes).
type IndexRecord = (u64, u32, u32);

fn insert_chunks(
    wtx: &WriteTransaction,
    zxid: Zxid,
    first_index: u32,
    chunks: &[&[u8]],
) -> Result<(), StorageError> {
    let what = "save snapshot";
    let mut table = wtx.open_table(SNAP_CHUNKS).map_err(redb_err(what))?;
    for (index, chunk) in (first_index..).zip(chunks) {
        table
            .insert((zxid, index), *chunk)
            .map_err(redb_err(what))?;
    }
    Ok(())
}

/// What makes a snapshot visible: drops chunks beyond its count (left by a bigger
/// one replaced, or by a save that failed) and writes the index record. A snapshot
/// beyond the log's last entry (a SNAP from the leader, installed over an emptied
/// log) raises `log_start` to its zxid in the same commit: the txns below it are not
/// in the log, so no older snapshot may be replayed from.
fn publish_in(wtx: &WriteTransaction, zxid: Zxid, record: IndexRecord) -> Result<(), StorageError> {
    let what = "publish snapshot";
    let chunk_count = record.1;
    let mut chunks = wtx.open_table(SNAP_CHUNKS).map_err(redb_err(what))?;
    chunks
        .retain_in((zxid, chunk_count)..=(zxid, u32::MAX), |_, _| false)
        .map_err(redb_err(what))?;
    let mut index = wtx.open_table(SNAP_INDEX).map_err(redb_err(what))?;
    index.insert(zxid, record).map_err(redb_err(what))?;
    let log = wtx.open_table(LOG).map_err(redb_err(what))?;
    let log_last = log.last().map_err(redb_err(what))?.map(|(k, _)| k.value());
    if log_last.is_none_or(|last| last < zxid) {
        let mut state = wtx.open_table(STATE).map_err(redb_err(what))?;
        let old = state
            .get(LOG_START_KEY)
            .map_err(redb_err(what))?
            .map_or(0, |v| v.value());
        state
            .insert(LOG_START_KEY, old.max(zxid))
            .map_err(redb_err(what))?;
    }
    Ok(())
}

/// Zxids of complete snapshots, ascending.
pub(super) fn list(db: &::redb::Database) -> Result<Vec<Zxid>, StorageError> {
    let what = "list snapshots";
    let rtx = db.begin_read().map_err(redb_err(what))?;
    let index = rtx.open_table(SNAP_INDEX).map_err(redb_err(what))?;
    let mut out = Vec::new();
    for entry in index.range::<u64>(..).map_err(redb_err(what))? {
        let (key, _) = entry.map_err(redb_err(what))?;
        out.push(key.value());
    }
    Ok(out)
}

/// Reads a complete snapshot and checks its length, chunk count and crc.
pub(super) fn load(db: &::redb::Database, zxid: Zxid) -> Result<Vec<u8>, StorageError> {
    let what = "load snapshot";
    let rtx = db.begin_read().map_err(redb_err(what))?;
    let index = rtx.open_table(SNAP_INDEX).map_err(redb_err(what))?;
    let (total_bytes, chunk_count, crc) = index
        .get(zxid)
        .map_err(redb_err(what))?
        .map(|v| v.value())
        .ok_or_else(|| StorageError::Misuse(format!("no snapshot at zxid {zxid:#x}")))?;
    let chunks = rtx.open_table(SNAP_CHUNKS).map_err(redb_err(what))?;
    // The record is not trusted with the allocation size until the crc says so.
    let capacity = usize::try_from(total_bytes.min(PREALLOC_BYTES_MAX)).unwrap_or(0);
    let mut data = Vec::with_capacity(capacity);
    let mut found: u32 = 0;
    for entry in chunks
        .range((zxid, 0)..(zxid, chunk_count))
        .map_err(redb_err(what))?
    {
        let (_, chunk) = entry.map_err(redb_err(what))?;
        data.extend_from_slice(chunk.value());
        found = found.saturating_add(1);
    }
    let corrupt = |detail: String| StorageError::Corrupt(format!("snapshot {zxid:#x}: {detail}"));
    if found != chunk_count {
        return Err(corrupt(format!("{found} of {chunk_count} chunks")));
    }
    if data.len() as u64 != total_bytes {
        return Err(corrupt(format!(
            "{} bytes, expected {total_bytes}",
            data.len()
        )));
    }
    if crc32fast::hash(&data) != crc {
        return Err(corrupt("crc mismatch".into()));
    }
    Ok(data)
}

/// Keeps the newest `keep` (at least 1) snapshots; deletes older ones and the log at
/// or below the oldest kept one, whose zxid becomes `log_start`.
pub(super) fn purge(store: &RedbStorage, keep: usize) -> Result<(), StorageError> {
    let what = "purge";
    // First commit: old snapshots vanish from the index and log_start is raised, so
    // a crash after it leaves only garbage that open or the next purge removes.
    let plan = store.write(what, |wtx| {
        let mut index = wtx.open_table(SNAP_INDEX).map_err(redb_err(what))?;
        let mut zxids = Vec::new();
        for entry in index.range::<u64>(..).map_err(redb_err(what))? {
            zxids.push(entry.map_err(redb_err(what))?.0.value());
        }
        let cut = zxids.len().saturating_sub(keep.max(1));
        let Some(&oldest_kept) = zxids.get(cut) else {
            return Ok(None);
        };
        for zxid in &zxids[..cut] {
            index.remove(*zxid).map_err(redb_err(what))?;
        }
        let mut state = wtx.open_table(STATE).map_err(redb_err(what))?;
        let old_start = state
            .get(LOG_START_KEY)
            .map_err(redb_err(what))?
            .map(|v| v.value());
        let log_start = old_start.unwrap_or(0).max(oldest_kept);
        state
            .insert(LOG_START_KEY, log_start)
            .map_err(redb_err(what))?;
        zxids.truncate(cut);
        Ok(Some((zxids, log_start)))
    })?;
    let Some((dropped, log_start)) = plan else {
        return Ok(());
    };
    for zxid in dropped {
        store.write(what, |wtx| remove_chunks(wtx, zxid))?;
    }
    while store.write(what, |wtx| remove_log_through(wtx, log_start))? {}
    Ok(())
}

/// Removes every chunk of the snapshot at `zxid`.
pub(super) fn remove_chunks(wtx: &WriteTransaction, zxid: Zxid) -> Result<(), StorageError> {
    let mut chunks = wtx
        .open_table(SNAP_CHUNKS)
        .map_err(redb_err("remove chunks"))?;
    chunks
        .retain_in((zxid, 0)..=(zxid, u32::MAX), |_, _| false)
        .map_err(redb_err("remove chunks"))
}

/// Removes up to `PURGE_ENTRIES_PER_COMMIT` log entries at or below `zxid`, in one
/// range deletion; true if there may be more.
fn remove_log_through(wtx: &WriteTransaction, zxid: Zxid) -> Result<bool, StorageError> {
    let what = "purge log";
    let mut log = wtx.open_table(LOG).map_err(redb_err(what))?;
    // The last entry this commit removes: the batch's last, or `zxid` if fewer remain.
    let last = log
        .range::<u64>(..=zxid)
        .map_err(redb_err(what))?
        .nth(PURGE_ENTRIES_PER_COMMIT - 1)
        .transpose()
        .map_err(redb_err(what))?
        .map_or(zxid, |(key, _)| key.value());
    log.retain_in::<u64, _>(..=last, |_, _| false)
        .map_err(redb_err(what))?;
    Ok(last < zxid)
}
