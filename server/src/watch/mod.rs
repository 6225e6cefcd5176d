//! TEMPORARY compile stub; replaced by the watch helper's module at merge.
use crate::tree::Event;
use crate::txn::Zxid;
pub struct WatchConfig {
    pub queue_txns_max: usize,
    pub history_txns_max: usize,
}
#[derive(Clone)]
pub struct WatchHub;
impl WatchHub {
    pub fn new(_c: WatchConfig, _z: Zxid) -> Self {
        WatchHub
    }
    pub fn publish(&self, _z: Zxid, _e: &[Event]) {}
    pub fn watch_count(&self) -> usize {
        0
    }
    pub fn oldest_resumable_zxid(&self) -> Zxid {
        0
    }
}
