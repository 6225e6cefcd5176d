//! One watch's bounded queue of live batches and the `WatchReceiver` that drains it.
//!
//! The hub pushes (under its own lock, then this queue's short lock); the receiver pops.
//! The queue is bounded twice, in txns (`queue_txns_max`) and in bytes
//! (`queue_bytes_max`, counted as the history counts them), and every queued byte is
//! also charged to the server-wide `MemoryBudget`. An empty queue takes one batch
//! whatever its size (a txn is never split), so a queue holds at most
//! `queue_bytes_max` or one txn. When a batch does not fit, the queue is cut: what it
//! holds is dropped at once (its memory given back; those events are still in the
//! history or the log), then the receiver gets one `SlowConsumer` naming the last
//! zxid it took, then the end.
//!
//! What it must not do: block the publisher (pushing never waits).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;

use super::budget::MemoryBudget;
use super::history::event_bytes;
use super::hub::Shared;
use super::{lock, WatchBatch, WatchError};
use crate::txn::Zxid;

/// What a batch costs in a queue: its events as the history counts them.
pub(crate) fn batch_bytes(batch: &WatchBatch) -> usize {
    batch.events.iter().map(event_bytes).sum()
}

/// How a queue ends once drained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// Report `SlowConsumer`, then finish.
    Cut { last_delivered_zxid: Zxid },
    /// Report `Resynchronized`, then finish: the server's tree was replaced by a
    /// snapshot at `snapshot_zxid`, so the txns between were never published here.
    Resync {
        last_delivered_zxid: Zxid,
        snapshot_zxid: Zxid,
    },
    /// Nothing more will come (once fired, hub shut down, or the cut was reported).
    Finished,
}

#[derive(Debug)]
struct QueueState {
    /// Queued batches with what each is charged.
    batches: VecDeque<(WatchBatch, usize)>,
    /// Sum of the charges of `batches` (all taken from the budget).
    bytes: usize,
    /// The zxid of the newest batch queued (`after` before the first): with the
    /// queue drained, what the receiver has been given in full.
    last_queued_zxid: Zxid,
    /// The zxid of the newest batch the receiver took (`after` before the first):
    /// what a cut watch names, since the batches after it were dropped.
    last_taken_zxid: Zxid,
    /// Set when no more batches will be pushed.
    end: Option<End>,
}

/// The bounds a live batch must fit in.
#[derive(Clone, Copy, Debug)]
pub(super) struct Bounds {
    pub(super) txns_max: usize,
    pub(super) bytes_max: usize,
}

/// Shared between the hub (producer) and one receiver (consumer).
#[derive(Debug)]
pub(super) struct Queue {
    state: Mutex<QueueState>,
    /// Wakes the receiver; `notify_one` keeps a permit, so no wake-up is lost.
    notify: Notify,
    /// Where the queued bytes are charged; given back on pop, cut and drop.
    budget: Arc<MemoryBudget>,
}

/// What the hub learns from offering a live batch.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Offer {
    Queued,
    /// The queue was over its own bound (or had ended): it is now cut and the watch
    /// must be removed.
    Cut,
    /// The server-wide budget has no room for the batch: nothing changed; the hub
    /// makes room (cutting the largest queue) and offers the batch (given back
    /// here) again, or cuts this one.
    NoMemory(WatchBatch),
}

impl Queue {
    /// A queue holding `batches` (charged to `budget` here), or None if the budget
    /// cannot hold them. `after` is the watch's start point; `finished`: no more
    /// batches will come.
    pub(super) fn new(
        batches: Vec<WatchBatch>,
        after: Zxid,
        finished: bool,
        budget: &Arc<MemoryBudget>,
    ) -> Option<Self> {
        let batches: VecDeque<(WatchBatch, usize)> = batches
            .into_iter()
            .map(|b| {
                let n = batch_bytes(&b);
                (b, n)
            })
            .collect();
        let bytes = batches.iter().map(|(_, n)| n).sum();
        if !budget.take(bytes) {
            return None;
        }
        let last_queued_zxid = batches.back().map_or(after, |(b, _)| b.zxid);
        Some(Queue {
            state: Mutex::new(QueueState {
                batches,
                bytes,
                last_queued_zxid,
                last_taken_zxid: after,
                end: finished.then_some(End::Finished),
            }),
            notify: Notify::new(),
            budget: Arc::clone(budget),
        })
    }

    /// Queues a live batch if it fits this queue's `bounds` and the budget; cuts the
    /// queue if it does not fit the bounds. With `last`, the queue finishes after
    /// this batch.
    pub(super) fn offer(&self, batch: WatchBatch, bounds: Bounds, last: bool) -> Offer {
        let bytes = batch_bytes(&batch);
        let mut st = lock(&self.state);
        if st.end.is_some() {
            return Offer::Cut;
        }
        let over = st.batches.len() >= bounds.txns_max
            || st.bytes.saturating_add(bytes) > bounds.bytes_max;
        if over && !st.batches.is_empty() {
            self.cut_locked(&mut st);
            drop(st);
            self.notify.notify_one();
            return Offer::Cut;
        }
        if !self.budget.take(bytes) {
            return Offer::NoMemory(batch);
        }
        st.bytes += bytes;
        st.last_queued_zxid = batch.zxid;
        st.batches.push_back((batch, bytes));
        if last {
            st.end = Some(End::Finished);
        }
        drop(st);
        self.notify.notify_one();
        Offer::Queued
    }

    /// Cuts the queue now: drops what it holds and ends with `SlowConsumer` naming
    /// the last zxid the receiver took. Returns the bytes given back.
    pub(super) fn cut(&self) -> usize {
        let mut st = lock(&self.state);
        let freed = self.cut_locked(&mut st);
        drop(st);
        self.notify.notify_one();
        freed
    }

    fn cut_locked(&self, st: &mut QueueState) -> usize {
        let freed = std::mem::take(&mut st.bytes);
        st.batches.clear();
        self.budget.give_back(freed);
        if matches!(st.end, None | Some(End::Resync { .. })) {
            st.end = Some(End::Cut {
                last_delivered_zxid: st.last_taken_zxid,
            });
        }
        freed
    }

    /// Bytes queued now (charged to the budget).
    pub(super) fn bytes(&self) -> usize {
        lock(&self.state).bytes
    }

    /// No more batches: the receiver drains what is queued, then ends.
    pub(super) fn finish(&self) {
        let mut st = lock(&self.state);
        st.end.get_or_insert(End::Finished);
        drop(st);
        self.notify.notify_one();
    }

    /// The server jumped to a snapshot at `snapshot_zxid`: what is queued is still
    /// delivered, then `Resynchronized`, then the end.
    pub(super) fn resync(&self, snapshot_zxid: Zxid) {
        let mut st = lock(&self.state);
        if st.end.is_none() {
            st.end = Some(End::Resync {
                last_delivered_zxid: st.last_queued_zxid,
                snapshot_zxid,
            });
        }
        drop(st);
        self.notify.notify_one();
    }

    /// The next item, or Err(()) if the receiver must wait.
    fn pop(&self) -> Result<Option<Result<WatchBatch, WatchError>>, ()> {
        let mut st = lock(&self.state);
        if let Some((batch, bytes)) = st.batches.pop_front() {
            st.bytes -= bytes;
            self.budget.give_back(bytes);
            st.last_taken_zxid = batch.zxid;
            return Ok(Some(Ok(batch)));
        }
        match st.end {
            None => Err(()),
            Some(End::Finished) => Ok(None),
            Some(End::Cut {
                last_delivered_zxid,
            }) => {
                st.end = Some(End::Finished);
                Ok(Some(Err(WatchError::SlowConsumer {
                    last_delivered_zxid,
                })))
            }
            Some(End::Resync {
                last_delivered_zxid,
                snapshot_zxid,
            }) => {
                st.end = Some(End::Finished);
                Ok(Some(Err(WatchError::Resynchronized {
                    last_delivered_zxid,
                    snapshot_zxid,
                })))
            }
        }
    }

    /// True if nothing is queued and more may come.
    fn is_idle(&self) -> bool {
        let st = lock(&self.state);
        st.batches.is_empty() && st.end.is_none()
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        let st = lock(&self.state);
        self.budget.give_back(st.bytes);
    }
}

/// The consuming end of one watch. Dropping it unregisters the watch.
#[derive(Debug)]
pub struct WatchReceiver {
    /// Unique on this hub (for logs and `WatchStarted.watch_id`).
    id: u64,
    /// Everything matching after this zxid is delivered.
    start_zxid: Zxid,
    queue: std::sync::Arc<Queue>,
    /// To unregister on drop; weak so receivers do not keep a dropped hub alive.
    hub: Weak<Shared>,
    /// The hub's published zxid, for `idle_progress`.
    progress: tokio::sync::watch::Receiver<Zxid>,
}

impl WatchReceiver {
    pub(super) fn new(
        id: u64,
        start_zxid: Zxid,
        queue: std::sync::Arc<Queue>,
        hub: Weak<Shared>,
        progress: tokio::sync::watch::Receiver<Zxid>,
    ) -> Self {
        WatchReceiver {
            id,
            start_zxid,
            queue,
            hub,
            progress,
        }
    }

    /// This watch's id, unique on this hub.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Every matching event with a zxid above this one is delivered (the `after` it
    /// was registered with).
    pub fn start_zxid(&self) -> Zxid {
        self.start_zxid
    }

    /// The next batch, in zxid order. `Some(Err(SlowConsumer))` once when the watch
    /// was cut (what was queued is dropped; the error names the last zxid taken);
    /// `None` when the watch is over (a `once` watch fired, the hub shut down or was
    /// dropped, or after the error). Cancel-safe.
    pub async fn next(&mut self) -> Option<Result<WatchBatch, WatchError>> {
        loop {
            match self.queue.pop() {
                Ok(item) => return item,
                Err(()) => self.queue.notify.notified().await,
            }
        }
    }

    /// If this watch is idle, the zxid it is complete through: every matching event
    /// up to it has already been returned by `next`. For `Progress` messages. None if
    /// batches are waiting or the watch has ended.
    pub fn idle_progress(&self) -> Option<Zxid> {
        // The hub queues a txn's batches before it publishes the txn's zxid here, so
        // reading the zxid first and then finding the queue empty proves completeness.
        let zxid = *self.progress.borrow();
        self.queue.is_idle().then_some(zxid.max(self.start_zxid))
    }
}

impl Drop for WatchReceiver {
    fn drop(&mut self) {
        if let Some(hub) = self.hub.upgrade() {
            hub.unregister(self.id);
        }
    }
}
