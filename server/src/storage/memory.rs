//! In-memory storage with the same semantics as the redb backend, for the simulator
//! and unit tests.
//!
//! Everything lives in one `Mutex<MemState>`; every call is "durable" the moment it
//! returns (a simulator that wants to lose unsynced writes models that above this).
//!
//! What it must not do: diverge from the `Storage` contract; it passes the same
//! conformance suite as `RedbStorage`.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard};

use super::{check_append_order, DiskUsage, Storage, StorageError};
use crate::txn::{Txn, Zxid};

/// The contents of a `MemStorage`.
#[derive(Clone, Debug, Default)]
struct MemState {
    /// The txn log, by zxid.
    log: BTreeMap<Zxid, Txn>,
    /// Complete snapshots, by the zxid they were taken at.
    snapshots: BTreeMap<Zxid, Vec<u8>>,
    /// Named u64s (epochs, ...).
    meta: HashMap<String, u64>,
    /// Txns above this are all in `log` (raised by `purge`).
    log_start: Zxid,
}

impl MemState {
    fn last_zxid(&self) -> Zxid {
        let log_last = self.log.last_key_value().map_or(0, |(z, _)| *z);
        let snap_last = self.snapshots.last_key_value().map_or(0, |(z, _)| *z);
        log_last.max(snap_last)
    }
}

/// `Storage` kept in memory. Cheap to create; lost when dropped.
#[derive(Debug, Default)]
pub struct MemStorage {
    /// All state, behind one lock so every call is atomic.
    state: Mutex<MemState>,
}

impl MemStorage {
    /// An empty store.
    pub fn new() -> MemStorage {
        MemStorage::default()
    }

    fn lock(&self) -> Result<MutexGuard<'_, MemState>, StorageError> {
        self.state
            .lock()
            .map_err(|_| StorageError::Io("memory storage lock poisoned".into()))
    }
}

impl Storage for MemStorage {
    fn append(&self, txns: &[Txn]) -> Result<(), StorageError> {
        let mut state = self.lock()?;
        check_append_order(state.last_zxid(), txns)?;
        for txn in txns {
            state.log.insert(txn.zxid, txn.clone());
        }
        Ok(())
    }

    fn last_zxid(&self) -> Result<Zxid, StorageError> {
        Ok(self.lock()?.last_zxid())
    }

    fn read_after(&self, after: Zxid, max: usize) -> Result<Vec<Txn>, StorageError> {
        let state = self.lock()?;
        Ok(state
            .log
            .range((Bound::Excluded(after), Bound::Unbounded))
            .take(max)
            .map(|(_, txn)| txn.clone())
            .collect())
    }

    fn truncate_after(&self, zxid: Zxid) -> Result<(), StorageError> {
        let mut state = self.lock()?;
        // split_off keeps keys < zxid + 1 in place; at u64::MAX nothing is above.
        if let Some(first_cut) = zxid.checked_add(1) {
            state.log.split_off(&first_cut);
        }
        Ok(())
    }

    fn save_snapshot(&self, zxid: Zxid, data: &[u8]) -> Result<(), StorageError> {
        let mut state = self.lock()?;
        state.snapshots.insert(zxid, data.to_vec());
        if state
            .log
            .last_key_value()
            .is_none_or(|(last, _)| *last < zxid)
        {
            state.log_start = state.log_start.max(zxid);
        }
        Ok(())
    }

    fn snapshots(&self) -> Result<Vec<Zxid>, StorageError> {
        Ok(self.lock()?.snapshots.keys().copied().collect())
    }

    fn load_snapshot(&self, zxid: Zxid) -> Result<Vec<u8>, StorageError> {
        self.lock()?
            .snapshots
            .get(&zxid)
            .cloned()
            .ok_or_else(|| StorageError::Misuse(format!("no snapshot at zxid {zxid:#x}")))
    }

    fn purge(&self, keep: usize) -> Result<(), StorageError> {
        let mut state = self.lock()?;
        let zxids: Vec<Zxid> = state.snapshots.keys().copied().collect();
        let cut = zxids.len().saturating_sub(keep.max(1));
        let Some(&oldest_kept) = zxids.get(cut) else {
            return Ok(());
        };
        for zxid in &zxids[..cut] {
            state.snapshots.remove(zxid);
        }
        state.log_start = state.log_start.max(oldest_kept);
        let log_start = state.log_start;
        state.log.retain(|zxid, _| *zxid > log_start);
        Ok(())
    }

    fn log_start(&self) -> Result<Zxid, StorageError> {
        Ok(self.lock()?.log_start)
    }

    fn get_u64(&self, key: &str) -> Result<Option<u64>, StorageError> {
        Ok(self.lock()?.meta.get(key).copied())
    }

    fn set_u64(&self, key: &str, value: u64) -> Result<(), StorageError> {
        self.lock()?.meta.insert(key.to_owned(), value);
        Ok(())
    }

    /// No file: nothing to measure.
    fn disk_usage(&self) -> Result<Option<DiskUsage>, StorageError> {
        Ok(None)
    }

    /// No file: nothing to compact.
    fn compact_file(&self) -> Result<Option<DiskUsage>, StorageError> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::MemStorage;
    use crate::storage::conformance::conformance_tests;

    fn make_store() -> (MemStorage, ()) {
        (MemStorage::new(), ())
    }

    conformance_tests!(make_store);
}
