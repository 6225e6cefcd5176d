//! One watch's bounded queue of batches and the `WatchReceiver` that drains it.
//!
//! The hub pushes (under its own lock, then this queue's short lock); the receiver pops.
//! Batches replayed from history at registration do not count against the bound:
//! only live batches do, so a resume from far back is not cut for its own replay
//! (the replay is already bounded by the history's size). When a live batch does not
//! fit, the queue is cut: already queued batches are still delivered, then one
//! `SlowConsumer` error, then the end.
//!
//! What it must not do: block the publisher (pushing never waits).

use std::collections::VecDeque;
use std::sync::{Mutex, Weak};

use tokio::sync::Notify;

use super::hub::Shared;
use super::{lock, WatchBatch, WatchError};
use crate::txn::Zxid;

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
    batches: VecDeque<WatchBatch>,
    /// How many of the front `batches` came from the replay (not bounded).
    replay_left: usize,
    /// The zxid of the newest batch ever queued (`after` before the first): what a
    /// cut watch has been given in full.
    last_queued_zxid: Zxid,
    /// Set when no more batches will be pushed.
    end: Option<End>,
}

/// Shared between the hub (producer) and one receiver (consumer).
#[derive(Debug)]
pub(super) struct Queue {
    state: Mutex<QueueState>,
    /// Wakes the receiver; `notify_one` keeps a permit, so no wake-up is lost.
    notify: Notify,
}

/// What the hub learns from offering a live batch.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Offer {
    Queued,
    /// The queue was full: it is now cut and the watch must be removed.
    Cut,
}

impl Queue {
    /// A queue holding the replayed `batches`; `after` is the watch's start point.
    pub(super) fn new(batches: Vec<WatchBatch>, after: Zxid, finished: bool) -> Self {
        let last_queued_zxid = batches.last().map_or(after, |b| b.zxid);
        Queue {
            state: Mutex::new(QueueState {
                replay_left: batches.len(),
                batches: batches.into(),
                last_queued_zxid,
                end: finished.then_some(End::Finished),
            }),
            notify: Notify::new(),
        }
    }

    /// Queues a live batch unless `live_max` live batches are already waiting; then
    /// cuts the queue instead. With `last`, the queue finishes after this batch.
    pub(super) fn offer(&self, batch: WatchBatch, live_max: usize, last: bool) -> Offer {
        let mut st = lock(&self.state);
        if st.end.is_some() {
            return Offer::Cut;
        }
        let offer = if st.batches.len() - st.replay_left >= live_max {
            st.end = Some(End::Cut {
                last_delivered_zxid: st.last_queued_zxid,
            });
            Offer::Cut
        } else {
            st.last_queued_zxid = batch.zxid;
            st.batches.push_back(batch);
            if last {
                st.end = Some(End::Finished);
            }
            Offer::Queued
        };
        drop(st);
        self.notify.notify_one();
        offer
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
        if let Some(batch) = st.batches.pop_front() {
            st.replay_left = st.replay_left.saturating_sub(1);
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

    /// The next batch, in zxid order. `Some(Err(SlowConsumer))` once after the queued
    /// batches of a cut watch; `None` when the watch is over (a `once` watch fired, the
    /// hub shut down or was dropped, or after the error). Cancel-safe.
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
