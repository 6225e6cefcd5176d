//! The core's in-memory view of this server's history: the newest snapshot (its zxid,
//! and its bytes unless they are in storage) and the log entries after it. The
//! runtime keeps the durable copy; the core keeps this one to synchronize learners
//! (DIFF/TRUNC/SNAP) and to hand out committed txns. `compact` takes out what a
//! newer snapshot covers and hands it to the caller to free.
//!
//! The log counts the bytes its entries hold (`bytes()`, by `txn_bytes`): the
//! runtime snapshots on that count as well as on the number of entries, so the
//! memory the log holds is bounded by bytes written, not only by txns.
//!
//! What it must not do: any IO.

use bytes::Bytes;

use crate::txn::{MultiOp, QueueOp, Txn, TxnOp, Zxid};

/// The memory one txn holds in the log, approximately: the struct and the paths and
/// data it points to. Used for the log's byte budget; cheap (no encoding).
pub fn txn_bytes(txn: &Txn) -> usize {
    let fence = txn.fence.as_ref().map_or(0, |f| f.key.len());
    std::mem::size_of::<Txn>() + op_bytes(&txn.op) + fence
}

/// The heap bytes an op points to (paths, data, names), without the op itself.
pub fn op_bytes(op: &TxnOp) -> usize {
    match op {
        TxnOp::Create(c) => c.path.len() + c.data.len(),
        TxnOp::Set(s) => s.path.len() + s.data.len(),
        TxnOp::Delete(d) => d.path.len(),
        TxnOp::Multi(ops) => ops
            .iter()
            .map(|op| {
                std::mem::size_of::<MultiOp>()
                    + match op {
                        MultiOp::Create(c) => c.path.len() + c.data.len(),
                        MultiOp::Set(s) => s.path.len() + s.data.len(),
                        MultiOp::Delete(d) => d.path.len(),
                        MultiOp::Check(c) => c.path.len(),
                    }
            })
            .sum(),
        TxnOp::OpenSession { .. } | TxnOp::CloseSession { .. } => 0,
        TxnOp::Reap { path } => path.len(),
        TxnOp::Queue(q) => match q {
            QueueOp::Join {
                queue,
                owner_id,
                value,
                ..
            } => queue.len() + owner_id.len() + value.len(),
            QueueOp::Leave { path, .. } => path.len(),
            QueueOp::Update { path, value, .. } => path.len() + value.len(),
        },
        TxnOp::OpenOwnedSession { owner, .. } => owner.len(),
        TxnOp::Access(a) => access_op_bytes(a),
    }
}

/// The heap bytes an access op points to.
fn access_op_bytes(op: &crate::txn::AccessOp) -> usize {
    use crate::txn::AccessOp;
    let grant = |g: &crate::security::Grant| std::mem::size_of_val(g) + g.path.len() + 64;
    match op {
        AccessOp::Seed { grants, roots } => {
            grants.iter().map(grant).sum::<usize>()
                + roots.iter().map(|r| r.len() + 24).sum::<usize>()
        }
        AccessOp::Grant(g) | AccessOp::Revoke(g) => grant(g),
    }
}

/// A snapshot with its bytes: one a learner received in a SNAP, on its way to
/// storage (`PersistOp::Snapshot`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The state is exactly that after applying every txn up to this zxid.
    pub zxid: Zxid,
    /// The encoded state (opaque to the core; `DataTree::encode_snapshot`).
    pub data: Bytes,
}

/// Snapshot + entries after it, in strictly increasing zxid order. The snapshot
/// is known by its zxid only: its bytes are in this server's storage (at a million
/// nodes they weigh over 100 MiB), needed only to send a SNAP, whose bytes the peer
/// transport reads from there.
#[derive(Clone, Debug, Default)]
pub struct Log {
    /// The history at or below `start()` is covered by the stored snapshot at this
    /// zxid (None: no snapshot, the log starts at 0).
    snapshot: Option<Zxid>,
    /// Entries with zxid > start(), ascending.
    entries: Vec<Txn>,
    /// The sum of `txn_bytes` over `entries`.
    bytes: usize,
}

impl Log {
    /// A log restored from durable state. Entries at or below the snapshot are
    /// dropped; out-of-order entries are refused.
    pub fn restore(snapshot: Option<Zxid>, entries: Vec<Txn>) -> Result<Log, String> {
        let start = snapshot.unwrap_or(0);
        let entries: Vec<Txn> = entries.into_iter().filter(|t| t.zxid > start).collect();
        if entries.windows(2).any(|w| w[0].zxid >= w[1].zxid) {
            return Err("restored log is not in strictly increasing zxid order".into());
        }
        let bytes = entries.iter().map(txn_bytes).sum();
        Ok(Log {
            snapshot,
            entries,
            bytes,
        })
    }

    /// The memory the entries hold, by `txn_bytes` (the snapshot not counted).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// How many entries the log holds above the snapshot.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the log holds no entry above the snapshot.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The zxid the snapshot covers (0 without one): the log is complete above it.
    pub fn start(&self) -> Zxid {
        self.snapshot.unwrap_or(0)
    }

    /// The zxid of the stored snapshot the log starts from, if any.
    pub fn snapshot(&self) -> Option<Zxid> {
        self.snapshot
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
        self.bytes += txn_bytes(&txn);
        self.entries.push(txn);
        true
    }

    /// Removes every entry above `zxid`.
    pub fn truncate_after(&mut self, zxid: Zxid) {
        let keep = self.entries.partition_point(|t| t.zxid <= zxid);
        let cut: usize = self.entries[keep..].iter().map(txn_bytes).sum();
        self.bytes -= cut;
        self.entries.truncate(keep);
    }

    /// Replaces the whole history with the snapshot at `zxid`.
    pub fn install(&mut self, zxid: Zxid) {
        self.entries = Vec::new();
        self.bytes = 0;
        self.snapshot = Some(zxid);
    }

    /// Records a newer snapshot (at `zxid`) and takes out the entries it covers,
    /// which it returns: freeing a whole snapshot interval's txns takes milliseconds,
    /// so the caller chooses where that happens. None (nothing changes) if `zxid` is
    /// not newer than the current snapshot or is beyond the log.
    pub fn compact(&mut self, zxid: Zxid) -> Option<Vec<Txn>> {
        if zxid <= self.start() || zxid > self.last_zxid() {
            return None;
        }
        let drop = self.entries.partition_point(|t| t.zxid <= zxid);
        // The entries kept (those after the snapshot: few) move to a Vec sized for
        // the log as it was, the next interval's likely size, so that it does not
        // grow by copying; a burst's larger capacity goes with the covered entries,
        // which are not moved at all. Only the kept entries are walked.
        let mut kept = Vec::with_capacity(self.entries.len());
        kept.extend(self.entries.drain(drop..));
        let covered = std::mem::replace(&mut self.entries, kept);
        self.bytes = self.entries.iter().map(txn_bytes).sum();
        self.snapshot = Some(zxid);
        Some(covered)
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
pub(crate) mod tests {
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
        let covered = log.compact(make_zxid(1, 2)).expect("newer snapshot");
        let covered: Vec<Zxid> = covered.iter().map(|t| t.zxid).collect();
        assert_eq!(covered, [make_zxid(1, 1), make_zxid(1, 2)]);
        assert!(log.compact(make_zxid(1, 2)).is_none(), "not newer");
        assert!(log.compact(make_zxid(3, 1)).is_none(), "beyond the log");
        assert_eq!(log.start(), make_zxid(1, 2));
        assert_eq!(log.floor(make_zxid(1, 1)), None);
        assert_eq!(log.range(0, u64::MAX).len(), 1);
        log.truncate_after(make_zxid(1, 2));
        assert_eq!(log.last_zxid(), make_zxid(1, 2));
        assert!(Log::restore(None, vec![txn(5), txn(3)]).is_err());
    }

    fn set(zxid: Zxid, data_bytes: usize) -> Txn {
        Txn {
            op: TxnOp::Set(crate::txn::SetOp {
                path: "/big".into(),
                data: Bytes::from(vec![7u8; data_bytes]),
                version: -1,
            }),
            ..txn(zxid)
        }
    }

    #[test]
    fn bytes_follow_every_change_of_the_entries() {
        let one = txn_bytes(&set(1, 1 << 20));
        assert!(one >= 1 << 20, "the data counts: {one}");
        let mut log = Log::default();
        for z in 1..=10 {
            assert!(log.append(set(z, 1 << 20)));
        }
        assert!(!log.append(set(3, 1 << 20)), "refused: not above the last");
        assert_eq!((log.len(), log.bytes()), (10, 10 * one));
        log.truncate_after(8);
        assert_eq!(log.bytes(), 8 * one);
        assert_eq!(log.compact(5).map(|covered| covered.len()), Some(5));
        assert_eq!((log.len(), log.bytes()), (3, 3 * one));
        let restored = Log::restore(Some(6), (1..=8).map(|z| set(z, 10)).collect());
        assert_eq!(restored.unwrap().bytes(), 2 * txn_bytes(&set(7, 10)));
        log.install(20);
        assert_eq!((log.len(), log.bytes()), (0, 0));
    }
}
