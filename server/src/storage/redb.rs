//! TEMPORARY compile stub; replaced by the storage helper's module at merge.
use super::*;
pub struct TailCut {
    pub first_bad_zxid: u64,
    pub entries_removed: u64,
    pub reason: String,
}
pub struct OpenReport {
    pub tail_cut: Option<TailCut>,
}
pub struct RedbStorage;
impl RedbStorage {
    pub fn open(_p: &std::path::Path) -> Result<(RedbStorage, OpenReport), StorageError> {
        todo!()
    }
}
impl Storage for RedbStorage {
    fn append(&self, _t: &[Txn]) -> Result<(), StorageError> {
        todo!()
    }
    fn last_zxid(&self) -> Result<Zxid, StorageError> {
        todo!()
    }
    fn read_after(&self, _a: Zxid, _m: usize) -> Result<Vec<Txn>, StorageError> {
        todo!()
    }
    fn truncate_after(&self, _z: Zxid) -> Result<(), StorageError> {
        todo!()
    }
    fn save_snapshot(&self, _z: Zxid, _d: &[u8]) -> Result<(), StorageError> {
        todo!()
    }
    fn snapshots(&self) -> Result<Vec<Zxid>, StorageError> {
        todo!()
    }
    fn load_snapshot(&self, _z: Zxid) -> Result<Vec<u8>, StorageError> {
        todo!()
    }
    fn purge(&self, _k: usize) -> Result<(), StorageError> {
        todo!()
    }
    fn log_start(&self) -> Result<Zxid, StorageError> {
        todo!()
    }
    fn get_u64(&self, _k: &str) -> Result<Option<u64>, StorageError> {
        todo!()
    }
    fn set_u64(&self, _k: &str, _v: u64) -> Result<(), StorageError> {
        todo!()
    }
}
