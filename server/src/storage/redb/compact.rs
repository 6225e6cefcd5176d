//! Giving a redb file's free space back: the file's size against the bytes its live
//! data takes (`usage`), and redb's compaction (`compact`).
//!
//! redb reuses the pages a purge frees but never shrinks its file: after a large
//! purge (or a burst of writes that a snapshot then made obsolete) the file keeps
//! its peak size. `Database::compact` moves the pages in use towards the start of
//! the file and cuts the free end off, in several commits, each atomic and durable
//! as any other (the crash tests crash inside it). It needs the database alone (no
//! transaction alive), so it holds the store's lock exclusively: every other call of
//! this store, log appends included, waits until it is done. The caller decides
//! when that is worth it (`replica::housekeeping`: only when most of the file is
//! free, once after a snapshot and its purge).
//!
//! ```text
//!   usage:   read txn ─▶ the pages of every table (redb's stats) = in use
//!            the file's length                                   = file
//!   compact: lock alone ─▶ Database::compact ─▶ unlock ─▶ usage
//! ```
//!
//! What it must not do: change what the store holds; it moves pages only.

use ::redb::{CompactionError, ReadableDatabase, ReadableTableMetadata};

use super::{redb_err, RedbStorage, LOG, META, SNAP_CHUNKS, SNAP_INDEX, STATE};
use crate::storage::{DiskUsage, StorageError};

/// The file's size and the bytes of its tables' pages. Reads every page in use
/// (one read transaction: appends go on meanwhile).
pub(super) fn usage(store: &RedbStorage) -> Result<DiskUsage, StorageError> {
    let what = "measure the store";
    let in_use_bytes = {
        let db = store.db()?;
        let rtx = db.begin_read().map_err(redb_err(what))?;
        let open = |e| redb_err(what)(e);
        [
            pages_bytes(&rtx.open_table(LOG).map_err(open)?)?,
            pages_bytes(&rtx.open_table(META).map_err(open)?)?,
            pages_bytes(&rtx.open_table(STATE).map_err(open)?)?,
            pages_bytes(&rtx.open_table(SNAP_CHUNKS).map_err(open)?)?,
            pages_bytes(&rtx.open_table(SNAP_INDEX).map_err(open)?)?,
        ]
        .iter()
        .sum()
    };
    Ok(DiskUsage {
        file_bytes: store.file_bytes()?,
        in_use_bytes,
    })
}

/// The bytes of a table's pages: what its entries take, their pages' own overhead,
/// and the unused rest of each page.
fn pages_bytes(table: &impl ReadableTableMetadata) -> Result<u64, StorageError> {
    let stats = table.stats().map_err(redb_err("measure a table"))?;
    Ok(stats.stored_bytes() + stats.metadata_bytes() + stats.fragmented_bytes())
}

/// Compacts the file with every other call held off, then measures it.
pub(super) fn compact(store: &RedbStorage) -> Result<DiskUsage, StorageError> {
    let what = "compact the file";
    {
        let mut db = store
            .db
            .write()
            .map_err(|_| StorageError::Io("storage database lock poisoned".into()))?;
        db.compact().map_err(|e| match e {
            CompactionError::Storage(e) => redb_err(what)(e),
            // Held alone, the database has no transaction alive, and this store
            // makes no savepoints: a bug, not the disk.
            other => StorageError::Misuse(format!("{what}: {other}")),
        })?;
    }
    usage(store)
}
