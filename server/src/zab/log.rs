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

use std::collections::VecDeque;

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

/// Entries per chunk of the log. A chunk never grows past it (256 txns of 152 bytes:
/// 38 KiB, from the allocator's ordinary pages), so an append never copies the log:
/// one Vec of a snapshot interval's txns, doubling, copied 20 MiB into fresh memory
/// and held the pipeline's thread for about 40 ms (seen in a profile of one server
/// at 64 writing clients).
const CHUNK_TXNS: usize = 256;

/// Snapshot + entries after it, in strictly increasing zxid order. The snapshot
/// is known by its zxid only: its bytes are in this server's storage (at a million
/// nodes they weigh over 100 MiB), needed only to send a SNAP, whose bytes the peer
/// transport reads from there.
#[derive(Clone, Debug, Default)]
pub struct Log {
    /// The history at or below `start()` is covered by the stored snapshot at this
    /// zxid (None: no snapshot, the log starts at 0).
    snapshot: Option<Zxid>,
    /// Entries with zxid > start(), ascending, in chunks of at most `CHUNK_TXNS`;
    /// no chunk is empty.
    chunks: VecDeque<Vec<Txn>>,
    /// The sum of `txn_bytes` over the entries.
    bytes: usize,
}

/// Where an entry is: its chunk and its index in that chunk. `(chunks, 0)` is the
/// end of the log.
type Position = (usize, usize);

/// The entries a compaction took out of the log, in their chunks: freeing them is
/// the caller's to place.
#[derive(Debug, Default)]
pub struct Covered {
    chunks: Vec<Vec<Txn>>,
}

impl Covered {
    /// How many txns.
    pub fn len(&self) -> usize {
        self.chunks.iter().map(Vec::len).sum()
    }

    /// Whether it holds no txn.
    pub fn is_empty(&self) -> bool {
        self.chunks.iter().all(Vec::is_empty)
    }

    /// The txns, ascending.
    pub fn iter(&self) -> impl Iterator<Item = &Txn> {
        self.chunks.iter().flatten()
    }
}

impl Log {
    /// A log restored from durable state. Entries at or below the snapshot are
    /// dropped; out-of-order entries are refused.
    pub fn restore(snapshot: Option<Zxid>, entries: Vec<Txn>) -> Result<Log, String> {
        let start = snapshot.unwrap_or(0);
        let mut log = Log {
            snapshot,
            ..Log::default()
        };
        for txn in entries.into_iter().filter(|t| t.zxid > start) {
            if !log.append(txn) {
                return Err("restored log is not in strictly increasing zxid order".into());
            }
        }
        Ok(log)
    }

    /// The memory the entries hold, by `txn_bytes` (the snapshot not counted).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// How many entries the log holds above the snapshot (a walk over its chunks, not
    /// its entries: for reports, not for the write path).
    pub fn len(&self) -> usize {
        self.chunks.iter().map(Vec::len).sum()
    }

    /// Whether the log holds no entry above the snapshot (no chunk is empty).
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
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
        self.chunks
            .back()
            .and_then(|chunk| chunk.last())
            .map_or(self.start(), |t| t.zxid)
    }

    /// Appends `txn` if its zxid is above the last one; returns whether it did.
    pub fn append(&mut self, txn: Txn) -> bool {
        if txn.zxid <= self.last_zxid() {
            return false;
        }
        self.bytes += txn_bytes(&txn);
        match self.chunks.back_mut() {
            Some(chunk) if chunk.len() < CHUNK_TXNS => chunk.push(txn),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK_TXNS);
                chunk.push(txn);
                self.chunks.push_back(chunk);
            }
        }
        true
    }

    /// The position of the first entry above `zxid` (the end if there is none).
    fn position(&self, zxid: Zxid) -> Position {
        let c = self
            .chunks
            .partition_point(|chunk| chunk.last().is_some_and(|t| t.zxid <= zxid));
        let i = self
            .chunks
            .get(c)
            .map_or(0, |chunk| chunk.partition_point(|t| t.zxid <= zxid));
        (c, i)
    }

    /// Removes every entry above `zxid`.
    pub fn truncate_after(&mut self, zxid: Zxid) {
        let (c, i) = self.position(zxid);
        let keep_chunks = if i > 0 { c + 1 } else { c };
        let weigh = |t: Txn| txn_bytes(&t);
        let mut cut: usize = self.chunks.drain(keep_chunks..).flatten().map(weigh).sum();
        if let Some(chunk) = self.chunks.get_mut(c).filter(|_| i > 0) {
            cut += chunk.drain(i..).map(weigh).sum::<usize>();
        }
        self.bytes -= cut;
    }

    /// Replaces the whole history with the snapshot at `zxid`.
    pub fn install(&mut self, zxid: Zxid) {
        self.chunks = VecDeque::new();
        self.bytes = 0;
        self.snapshot = Some(zxid);
    }

    /// Records a newer snapshot (at `zxid`) and takes out the entries it covers,
    /// which it returns: freeing a whole snapshot interval's txns takes milliseconds,
    /// so the caller chooses where that happens. None (nothing changes) if `zxid` is
    /// not newer than the current snapshot or is beyond the log.
    pub fn compact(&mut self, zxid: Zxid) -> Option<Covered> {
        if zxid <= self.start() || zxid > self.last_zxid() {
            return None;
        }
        // Whole chunks move out as they are; only the covered head of the chunk that
        // holds `zxid` is moved (at most a chunk's worth), and only the entries kept
        // (those after the snapshot: few) are walked.
        let (c, i) = self.position(zxid);
        let mut covered: Vec<Vec<Txn>> = self.chunks.drain(..c).collect();
        if let Some(chunk) = self.chunks.front_mut().filter(|_| i > 0) {
            covered.push(chunk.drain(..i).collect());
        }
        self.bytes = self.chunks.iter().flatten().map(txn_bytes).sum();
        self.snapshot = Some(zxid);
        Some(Covered { chunks: covered })
    }

    /// The largest zxid of the history (the snapshot point or an entry) that is at
    /// or below `zxid`; None if `zxid` is below the snapshot point.
    pub fn floor(&self, zxid: Zxid) -> Option<Zxid> {
        if zxid < self.start() {
            return None;
        }
        let (c, i) = self.position(zxid);
        let before = match i.checked_sub(1) {
            Some(i) => self.chunks.get(c).and_then(|chunk| chunk.get(i)),
            None => c
                .checked_sub(1)
                .and_then(|c| self.chunks.get(c))
                .and_then(|chunk| chunk.last()),
        };
        Some(before.map_or(self.start(), |t| t.zxid))
    }

    /// Whether `zxid` is in the history (0 and the snapshot point count).
    pub fn contains(&self, zxid: Zxid) -> bool {
        self.floor(zxid) == Some(zxid)
    }

    /// The positions that bound the entries in (after, up_to].
    fn span(&self, after: Zxid, up_to: Zxid) -> (Position, Position) {
        let lo = self.position(after);
        (lo, self.position(up_to).max(lo))
    }

    /// Entries in (after, up_to], ascending.
    pub fn range(&self, after: Zxid, up_to: Zxid) -> impl Iterator<Item = &Txn> {
        let (lo, hi) = self.span(after, up_to);
        let end = (hi.0 + 1).min(self.chunks.len());
        self.chunks
            .range(lo.0.min(end)..end)
            .zip(lo.0..)
            .flat_map(move |(chunk, c)| {
                let from = if c == lo.0 { lo.1 } else { 0 };
                let to = if c == hi.0 { hi.1 } else { chunk.len() };
                chunk.get(from..to).unwrap_or_default()
            })
    }

    /// How many entries are in (after, up_to], without walking them.
    pub fn count(&self, after: Zxid, up_to: Zxid) -> usize {
        let (lo, hi) = self.span(after, up_to);
        let chunk_len = |c: usize| self.chunks.get(c).map_or(0, Vec::len);
        if lo.0 == hi.0 {
            return hi.1 - lo.1;
        }
        let middle: usize = (lo.0 + 1..hi.0).map(chunk_len).sum();
        chunk_len(lo.0) - lo.1 + middle + hi.1
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
        assert_eq!(log.range(make_zxid(1, 1), make_zxid(2, 1)).count(), 2);
        let covered = log.compact(make_zxid(1, 2)).expect("newer snapshot");
        let covered: Vec<Zxid> = covered.iter().map(|t| t.zxid).collect();
        assert_eq!(covered, [make_zxid(1, 1), make_zxid(1, 2)]);
        assert!(log.compact(make_zxid(1, 2)).is_none(), "not newer");
        assert!(log.compact(make_zxid(3, 1)).is_none(), "beyond the log");
        assert_eq!(log.start(), make_zxid(1, 2));
        assert_eq!(log.floor(make_zxid(1, 1)), None);
        assert_eq!(log.range(0, u64::MAX).count(), 1);
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
                null_data: false,
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

    /// The chunked log against a plain Vec of the same entries, over chunk
    /// boundaries: every query after every change, with zxids that skip (new epochs).
    #[test]
    fn the_chunked_log_answers_as_one_sorted_vec_would() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |bound: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % bound
        };
        let mut log = Log::default();
        let mut model: Vec<Zxid> = Vec::new();
        let mut start: Zxid = 0;
        let mut last: Zxid = 0;
        for round in 0..400 {
            match next(10) {
                0..=5 => {
                    for _ in 0..next(3 * CHUNK_TXNS as u64) {
                        last += 1 + next(3) * next(2) * 1000;
                        assert!(log.append(txn(last)));
                        model.push(last);
                    }
                }
                6 => {
                    let to = start + next(last - start + 1);
                    log.truncate_after(to);
                    model.retain(|&z| z <= to);
                    last = model.last().copied().unwrap_or(start);
                }
                7 | 8 if last > start => {
                    let to = start + 1 + next(last - start);
                    let covered = log.compact(to).expect("newer, in the log");
                    let taken: Vec<Zxid> = covered.iter().map(|t| t.zxid).collect();
                    let kept = model.split_off(model.partition_point(|&z| z <= to));
                    assert_eq!(taken, model, "round {round}");
                    assert_eq!(covered.len(), taken.len());
                    model = kept;
                    start = to;
                }
                _ => {}
            }
            assert_eq!(
                (log.len(), log.start(), log.last_zxid()),
                (model.len(), start, last)
            );
            assert!(log
                .chunks
                .iter()
                .all(|c| !c.is_empty() && c.len() <= CHUNK_TXNS));
            assert_eq!(log.bytes(), model.len() * txn_bytes(&txn(1)));
            for _ in 0..20 {
                let (a, b) = (next(last + 2), next(last + 2));
                let want: Vec<Zxid> = model.iter().copied().filter(|&z| z > a && z <= b).collect();
                let got: Vec<Zxid> = log.range(a, b).map(|t| t.zxid).collect();
                assert_eq!(got, want, "range({a}, {b}) in round {round}");
                assert_eq!(log.count(a, b), want.len(), "count({a}, {b})");
                let below = model.partition_point(|&z| z <= a);
                let floor = (a >= start).then(|| below.checked_sub(1).map_or(start, |i| model[i]));
                assert_eq!(log.floor(a), floor, "floor({a}) in round {round}");
            }
        }
    }
}
