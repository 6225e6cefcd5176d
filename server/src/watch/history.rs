//! The in-memory ring of recent txns' events, for resuming a watch without the disk.
//!
//! Only txns that produced events take a slot: a txn with none has nothing to replay,
//! so the ring is complete after `complete_after` whether or not it stored it. The ring
//! is bounded twice: by stored txns (`txns_max`) and by bytes (`bytes_max`, counting
//! each event's path, data, prev_data and fixed size). Evicting the oldest txn moves
//! `complete_after` up to its zxid. A single txn larger than `bytes_max` is evicted
//! at once (the ring never holds more than the bound).
//!
//! What it must not do: filter (the hub does) or grow past its bounds.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::tree::Event;
use crate::txn::Zxid;

/// One stored txn.
#[derive(Debug)]
struct Entry {
    zxid: Zxid,
    events: Arc<[Event]>,
    /// What this entry counts against `bytes_max`.
    bytes: usize,
}

/// Recent txns' events, oldest first.
#[derive(Debug)]
pub(super) struct History {
    /// Stored txns in zxid order.
    entries: VecDeque<Entry>,
    /// Sum of `entries[..].bytes`.
    bytes: usize,
    txns_max: usize,
    bytes_max: usize,
    /// Every txn with zxid > this that produced events is in `entries`.
    complete_after: Zxid,
}

/// What one event costs in the ring: its buffers plus the struct itself.
pub(super) fn event_bytes(e: &Event) -> usize {
    std::mem::size_of::<Event>() + e.path.len() + e.data.len() + e.prev_data.len()
}

impl History {
    /// An empty ring complete after `start_zxid` (the zxid the tree was recovered at).
    pub(super) fn new(start_zxid: Zxid, txns_max: usize, bytes_max: usize) -> Self {
        History {
            entries: VecDeque::new(),
            bytes: 0,
            txns_max,
            bytes_max,
            complete_after: start_zxid,
        }
    }

    /// Records a txn (zxids must increase; the hub checks). Evicts the oldest txns
    /// until both bounds hold again.
    pub(super) fn push(&mut self, zxid: Zxid, events: &[Event]) {
        if events.is_empty() {
            return;
        }
        let bytes = events.iter().map(event_bytes).sum();
        self.entries.push_back(Entry {
            zxid,
            events: events.into(),
            bytes,
        });
        self.bytes += bytes;
        while self.entries.len() > self.txns_max || self.bytes > self.bytes_max {
            let Some(old) = self.entries.pop_front() else {
                break;
            };
            self.bytes -= old.bytes;
            self.complete_after = old.zxid;
        }
    }

    /// The smallest `after` the ring can resume from.
    pub(super) fn complete_after(&self) -> Zxid {
        self.complete_after
    }

    /// Stored txns with zxid > `after`, oldest first.
    pub(super) fn after(&self, after: Zxid) -> impl Iterator<Item = (Zxid, &[Event])> {
        let start = self.entries.partition_point(|e| e.zxid <= after);
        self.entries
            .range(start..)
            .map(|e| (e.zxid, e.events.as_ref()))
    }

    /// Stored txns.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Bytes counted against `bytes_max`.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }
}
