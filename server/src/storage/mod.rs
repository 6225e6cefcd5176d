//! Durable storage: the txn log, epochs and snapshots, behind the `Storage` trait.
//!
//! Backends: `redb` (one redb file per server, the real one) and `memory` (for the
//! simulator and unit tests). Both pass the same conformance suite.
//!
//! What it must not do: know Zab's rules or the tree's semantics; it stores opaque
//! snapshots and txns it can check (crc) but does not interpret.
//!
//! ```text
//!   zab/runtime ──append(batch)──▶ Storage ──one fsync per batch──▶ log
//!               ──save_snapshot──▶         ──chunked commits──────▶ snapshots
//!   start-up   ◀──load_snapshot + read_after(snapshot zxid)──
//! ```

pub mod memory;
pub mod redb;

#[cfg(test)]
pub(crate) mod conformance;

pub use memory::MemStorage;
pub use redb::{Discarded, OpenReport, RedbStorage};

use crate::txn::{Txn, Zxid};

/// What storage can fail with. Any of these means this server must stop serving.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("storage io: {0}")]
    Io(String),
    #[error("corrupt storage: {0}")]
    Corrupt(String),
    /// A committed log entry fails its check (crc, decoding, or its key): the history
    /// is damaged at `zxid`. Never cut or skipped: see docs/operations.md.
    #[error("corrupt log entry at zxid {zxid:#x}: {reason}")]
    BadLogEntry { zxid: Zxid, reason: String },
    #[error("misuse of storage: {0}")]
    Misuse(String),
}

/// A store's file: its size, and the bytes of it that hold live data (the pages of
/// its tables, as full pages). The rest is free space, which the store reuses for
/// new writes but which only `Storage::compact_file` gives back to the file system.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskUsage {
    pub file_bytes: u64,
    pub in_use_bytes: u64,
}

impl DiskUsage {
    /// The bytes of the file that hold nothing live.
    pub fn free_bytes(&self) -> u64 {
        self.file_bytes.saturating_sub(self.in_use_bytes)
    }
}

/// The log, epochs and snapshots of one server. Every method that changes state is
/// durable (fsynced) when it returns Ok.
pub trait Storage: Send + Sync + 'static {
    /// Appends txns whose zxids strictly increase and exceed `last_zxid()`, in one
    /// durable commit (the group commit). Err(Misuse) if the order is broken.
    fn append(&self, txns: &[Txn]) -> Result<(), StorageError>;
    /// The newest zxid in the log or the newest snapshot, 0 if none.
    fn last_zxid(&self) -> Result<Zxid, StorageError>;
    /// Txns with zxid > `after`, ascending, at most `max`.
    fn read_after(&self, after: Zxid, max: usize) -> Result<Vec<Txn>, StorageError>;
    /// Removes every txn with zxid > `zxid`.
    fn truncate_after(&self, zxid: Zxid) -> Result<(), StorageError>;
    /// Stores a snapshot of the state at `zxid`. Written in pieces so log appends can
    /// interleave; becomes visible only when complete. A snapshot above the log's
    /// last entry (installed over an emptied log) raises `log_start` to `zxid`.
    fn save_snapshot(&self, zxid: Zxid, data: &[u8]) -> Result<(), StorageError>;
    /// Zxids of complete snapshots, ascending.
    fn snapshots(&self) -> Result<Vec<Zxid>, StorageError>;
    /// A snapshot's bytes, checksum verified (Err(Corrupt) if not).
    fn load_snapshot(&self, zxid: Zxid) -> Result<Vec<u8>, StorageError>;
    /// Keeps the newest `keep` snapshots (at least 1), deletes older ones and every
    /// txn at or below the oldest kept snapshot's zxid.
    fn purge(&self, keep: usize) -> Result<(), StorageError>;
    /// The oldest zxid after which the log is complete: txns > this are all present
    /// (0 when the log starts at the beginning).
    fn log_start(&self) -> Result<Zxid, StorageError>;
    /// A durable named u64 (accepted_epoch, current_epoch, ...).
    fn get_u64(&self, key: &str) -> Result<Option<u64>, StorageError>;
    fn set_u64(&self, key: &str, value: u64) -> Result<(), StorageError>;
    /// The file's size and the bytes of it in use; None for a store without a file.
    /// Reads every page in use (about the kept snapshots and log): for housekeeping,
    /// never the write path.
    fn disk_usage(&self) -> Result<Option<DiskUsage>, StorageError>;
    /// Moves what is in use to the start of the file and cuts the free end off
    /// (redb's compaction), then measures the file; None for a store without a
    /// file. Changes nothing the other methods read, but every other call waits
    /// until it is done: worth it only when most of the file is free.
    fn compact_file(&self) -> Result<Option<DiskUsage>, StorageError>;
}

/// The `Storage` methods other than `append`, passed on to the field `$inner`: for
/// test storages that change only what an append does (count it, fail it, or hold
/// it as a stalled disk would).
#[cfg(test)]
macro_rules! storage_but_append_from {
    ($inner:ident) => {
        fn last_zxid(&self) -> Result<$crate::txn::Zxid, $crate::storage::StorageError> {
            self.$inner.last_zxid()
        }
        fn read_after(
            &self,
            after: $crate::txn::Zxid,
            max: usize,
        ) -> Result<Vec<$crate::txn::Txn>, $crate::storage::StorageError> {
            self.$inner.read_after(after, max)
        }
        fn truncate_after(
            &self,
            zxid: $crate::txn::Zxid,
        ) -> Result<(), $crate::storage::StorageError> {
            self.$inner.truncate_after(zxid)
        }
        fn save_snapshot(
            &self,
            zxid: $crate::txn::Zxid,
            data: &[u8],
        ) -> Result<(), $crate::storage::StorageError> {
            self.$inner.save_snapshot(zxid, data)
        }
        fn snapshots(&self) -> Result<Vec<$crate::txn::Zxid>, $crate::storage::StorageError> {
            self.$inner.snapshots()
        }
        fn load_snapshot(
            &self,
            zxid: $crate::txn::Zxid,
        ) -> Result<Vec<u8>, $crate::storage::StorageError> {
            self.$inner.load_snapshot(zxid)
        }
        fn purge(&self, keep: usize) -> Result<(), $crate::storage::StorageError> {
            self.$inner.purge(keep)
        }
        fn log_start(&self) -> Result<$crate::txn::Zxid, $crate::storage::StorageError> {
            self.$inner.log_start()
        }
        fn get_u64(&self, key: &str) -> Result<Option<u64>, $crate::storage::StorageError> {
            self.$inner.get_u64(key)
        }
        fn set_u64(&self, key: &str, value: u64) -> Result<(), $crate::storage::StorageError> {
            self.$inner.set_u64(key, value)
        }
        fn disk_usage(
            &self,
        ) -> Result<Option<$crate::storage::DiskUsage>, $crate::storage::StorageError> {
            self.$inner.disk_usage()
        }
        fn compact_file(
            &self,
        ) -> Result<Option<$crate::storage::DiskUsage>, $crate::storage::StorageError> {
            self.$inner.compact_file()
        }
    };
}
#[cfg(test)]
pub(crate) use storage_but_append_from;

/// Checks the append contract shared by every backend: zxids strictly increase within
/// the batch and the first exceeds `last`. Err(Misuse) names the offending zxid.
pub(crate) fn check_append_order(last: Zxid, txns: &[Txn]) -> Result<(), StorageError> {
    let mut prev = last;
    for txn in txns {
        if txn.zxid <= prev {
            return Err(StorageError::Misuse(format!(
                "append out of order: zxid {:#x} after {:#x}",
                txn.zxid, prev
            )));
        }
        prev = txn.zxid;
    }
    Ok(())
}
