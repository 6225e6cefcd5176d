//! The core's in-memory view of this server's history: the newest snapshot (its zxid
//! and bytes) and the log entries after it. The runtime keeps the durable copy; the
//! core keeps this one to synchronize learners (DIFF/TRUNC/SNAP) and to hand out
//! committed txns. `compact` drops what a newer snapshot covers.
//!
//! What it must not do: any IO.

use bytes::Bytes;

use crate::txn::{Txn, Zxid};

/// A snapshot the core can send to a learner far behind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The state is exactly that after applying every txn up to this zxid.
    pub zxid: Zxid,
    /// The encoded state (opaque to the core; `DataTree::encode_snapshot`).
    pub data: Bytes,
}

/// Snapshot + entries after it, in strictly increasing zxid order.
#[derive(Clone, Debug, Default)]
pub struct Log {
    /// The history at or below `start()` is covered by this snapshot (None: empty).
    snapshot: Option<Snapshot>,
    /// Entries with zxid > start(), ascending.
    entries: Vec<Txn>,
}

impl Log {
    /// A log restored from durable state. Entries at or below the snapshot are
    /// dropped; out-of-order entries are refused.
    pub fn restore(snapshot: Option<Snapshot>, entries: Vec<Txn>) -> Result<Log, String> {
        let start = snapshot.as_ref().map_or(0, |s| s.zxid);
        let entries: Vec<Txn> = entries.into_iter().filter(|t| t.zxid > start).collect();
        if entries.windows(2).any(|w| w[0].zxid >= w[1].zxid) {
            return Err("restored log is not in strictly increasing zxid order".into());
        }
        Ok(Log { snapshot, entries })
    }

    /// The zxid the snapshot covers (0 without one): the log is complete above it.
    pub fn start(&self) -> Zxid {
        self.snapshot.as_ref().map_or(0, |s| s.zxid)
    }

    pub fn snapshot(&self) -> Option<&Snapshot> {
        self.snapshot.as_ref()
    }

    /// The newest zxid in the history.
    pub fn last_zxid(&self) -> Zxid {
        self.entries.last().map_or(self.start(), |t| t.zxid)
    }

    /// Appends `txn` if its zxid is above the last one; returns whether it did.
    pub fn append(&mut self, txn: Txn) -> bool {
        if txn.zxid <= self.last_zxid() {
            return false;
        }
        self.entries.push(txn);
        true
    }

    /// Removes every entry above `zxid`.
    pub fn truncate_after(&mut self, zxid: Zxid) {
        let keep = self.entries.partition_point(|t| t.zxid <= zxid);
        self.entries.truncate(keep);
    }

    /// Replaces the whole history with a snapshot.
    pub fn install(&mut self, snapshot: Snapshot) {
        self.entries.clear();
        self.snapshot = Some(snapshot);
    }

    /// Records a newer snapshot and drops the entries it covers. Ignored if it is
    /// not newer than the current one or beyond the log.
    pub fn compact(&mut self, snapshot: Snapshot) -> bool {
        if snapshot.zxid <= self.start() || snapshot.zxid > self.last_zxid() {
            return false;
        }
        let drop = self.entries.partition_point(|t| t.zxid <= snapshot.zxid);
        self.entries.drain(..drop);
        self.snapshot = Some(snapshot);
        true
    }

    /// The largest zxid of the history (the snapshot point or an entry) that is at
    /// or below `zxid`; None if `zxid` is below the snapshot point.
    pub fn floor(&self, zxid: Zxid) -> Option<Zxid> {
        if zxid < self.start() {
            return None;
        }
        let i = self.entries.partition_point(|t| t.zxid <= zxid);
        Some(if i == 0 {
            self.start()
        } else {
            self.entries[i - 1].zxid
        })
    }

    /// Whether `zxid` is in the history (0 and the snapshot point count).
    pub fn contains(&self, zxid: Zxid) -> bool {
        self.floor(zxid) == Some(zxid)
    }

    /// Entries in (after, up_to], ascending.
    pub fn range(&self, after: Zxid, up_to: Zxid) -> &[Txn] {
        let lo = self.entries.partition_point(|t| t.zxid <= after);
        let hi = self.entries.partition_point(|t| t.zxid <= up_to);
        if lo >= hi {
            return &[];
        }
        &self.entries[lo..hi]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::{make_zxid, TxnOp};

    pub(crate) fn txn(zxid: Zxid) -> Txn {
        Txn {
            zxid,
            time_ms: 0,
            session_id: 0,
            request_id: 0,
            fence: None,
            op: TxnOp::Reap { path: "/x".into() },
        }
    }

    #[test]
    fn floor_range_truncate_compact() {
        let mut log = Log::default();
        for z in [make_zxid(1, 1), make_zxid(1, 2), make_zxid(2, 1)] {
            assert!(log.append(txn(z)));
        }
        assert!(!log.append(txn(make_zxid(1, 3))));
        assert_eq!(log.floor(make_zxid(1, 9)), Some(make_zxid(1, 2)));
        assert_eq!(log.floor(0), Some(0));
        assert!(log.contains(make_zxid(2, 1)) && !log.contains(make_zxid(1, 3)));
        assert_eq!(log.range(make_zxid(1, 1), make_zxid(2, 1)).len(), 2);
        let snap = Snapshot {
            zxid: make_zxid(1, 2),
            data: Bytes::new(),
        };
        assert!(log.compact(snap));
        assert_eq!(log.start(), make_zxid(1, 2));
        assert_eq!(log.floor(make_zxid(1, 1)), None);
        assert_eq!(log.range(0, u64::MAX).len(), 1);
        log.truncate_after(make_zxid(1, 2));
        assert_eq!(log.last_zxid(), make_zxid(1, 2));
        assert!(Log::restore(None, vec![txn(5), txn(3)]).is_err());
    }
}
