//! The `WatchHub`: registered watches, the history ring, and the fan-out of each
//! published txn.
//!
//! One std mutex guards the whole state. `publish` and `register` both take it, so a
//! registration sees the history up to some zxid z and is live from z + 1 on: no txn
//! can slip between. Critical sections do only in-memory work proportional to the
//! txn's events and the watches they match (the index finds those without scanning).
//!
//! ```text
//!   publish(z, events) ─lock─▶ index.candidates(path) ─▶ spec.matches ─▶ queue.offer
//!                              history.push(z, events)   progress ← z
//! ```
//!
//! What it must not do: wait on a consumer, or await while holding the lock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::history::History;
use super::index::WatchIndex;
use super::queue::{Offer, Queue, WatchReceiver};
use super::{check_path, lock, WatchBatch, WatchError, WatchSpec};
use crate::tree::Event;
use crate::txn::Zxid;

/// Sizes of the hub's bounded memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchConfig {
    /// Live batches (txns) a watch may have waiting before it is cut as a slow
    /// consumer. At least 1 is used.
    pub queue_txns_max: usize,
    /// Txns (those with events) kept in the history ring for resume.
    pub history_txns_max: usize,
    /// Bytes of events (paths, data, prev_data, struct size) kept in the ring.
    pub history_bytes_max: usize,
}

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig {
            queue_txns_max: 1024,
            history_txns_max: 100_000,
            history_bytes_max: 64 << 20,
        }
    }
}

/// Counters for metrics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WatchStats {
    /// Registered live watches.
    pub watches: usize,
    /// The zxid of the last published txn.
    pub published_zxid: Zxid,
    /// The smallest `after` that `register` accepts.
    pub oldest_resumable_zxid: Zxid,
    /// Txns held in the history ring.
    pub history_txns: usize,
    /// Bytes held in the history ring.
    pub history_bytes: usize,
    /// How many (event, watch) pairs publish has checked: grows with the watches an
    /// event may concern, not with all watches.
    pub match_checks: u64,
    /// Watches cut off as slow consumers.
    pub slow_consumer_cuts: u64,
}

/// One registered watch.
#[derive(Debug)]
struct Slot {
    spec: WatchSpec,
    queue: Arc<Queue>,
}

#[derive(Debug)]
struct HubState {
    config: WatchConfig,
    /// The zxid of the last txn published (the tree's applied zxid).
    published_zxid: Zxid,
    history: History,
    index: WatchIndex,
    /// Live watches by id.
    watches: HashMap<u64, Slot>,
    /// The next watch id.
    next_id: u64,
    /// Set by `shutdown`: no more publishing or registering.
    closed: bool,
    match_checks: u64,
    slow_consumer_cuts: u64,
}

/// What receivers point back to (weakly) and the hub's clones share.
#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<HubState>,
    /// The published zxid, for idle streams' Progress messages.
    progress: tokio::sync::watch::Sender<Zxid>,
}

/// Fans applied txns' events out to watches. Cheap to clone (one Arc).
#[derive(Clone, Debug)]
pub struct WatchHub {
    shared: Arc<Shared>,
}

impl WatchHub {
    /// A hub whose history starts empty and complete after `start_zxid`, the zxid the
    /// tree was recovered at.
    pub fn new(config: WatchConfig, start_zxid: Zxid) -> Self {
        let config = WatchConfig {
            queue_txns_max: config.queue_txns_max.max(1),
            ..config
        };
        let state = HubState {
            config,
            published_zxid: start_zxid,
            history: History::new(
                start_zxid,
                config.history_txns_max,
                config.history_bytes_max,
            ),
            index: WatchIndex::default(),
            watches: HashMap::new(),
            next_id: 1,
            closed: false,
            match_checks: 0,
            slow_consumer_cuts: 0,
        };
        let (progress, _) = tokio::sync::watch::channel(start_zxid);
        WatchHub {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                progress,
            }),
        }
    }

    /// Records one applied txn and delivers its events to the watches that match.
    /// Call for every txn in zxid order, also those with no events. A zxid not above
    /// the last one is a caller bug: it is logged and ignored.
    pub fn publish(&self, zxid: Zxid, events: &[Event]) {
        let mut st = lock(&self.shared.state);
        if st.closed {
            return;
        }
        if zxid <= st.published_zxid {
            tracing::error!(
                zxid,
                published = st.published_zxid,
                "watch publish out of order"
            );
            return;
        }
        st.published_zxid = zxid;
        if !events.is_empty() {
            st.fan_out(zxid, events);
            st.history.push(zxid, events);
        }
        // After the queues: see WatchReceiver::idle_progress.
        self.shared.progress.send_replace(zxid);
    }

    /// Registers a watch that receives every matching event with zxid > `after`,
    /// exactly once, in order: first from the history, then live.
    /// Err(Compacted) if the history does not reach back to `after`, Err(Future) if
    /// `after` is above the published zxid.
    pub fn register(&self, spec: WatchSpec, after: Zxid) -> Result<WatchReceiver, WatchError> {
        let mut st = lock(&self.shared.state);
        let (id, queue) = st.register(spec, Some(after))?;
        Ok(self.receiver(id, after, queue))
    }

    /// Registers a watch live from the published zxid on (`start_zxid()` tells which).
    pub fn register_now(&self, spec: WatchSpec) -> Result<WatchReceiver, WatchError> {
        let mut st = lock(&self.shared.state);
        let after = st.published_zxid;
        let (id, queue) = st.register(spec, None)?;
        Ok(self.receiver(id, after, queue))
    }

    /// A receiver that delivers nothing and ends at once (a `once` watch that already
    /// fired during a storage replay), with a fresh id.
    pub(crate) fn register_finished(&self, after: Zxid) -> Result<WatchReceiver, WatchError> {
        let mut st = lock(&self.shared.state);
        if st.closed {
            return Err(WatchError::Closed);
        }
        let id = st.next_id;
        st.next_id += 1;
        let queue = Arc::new(Queue::new(Vec::new(), after, true));
        Ok(self.receiver(id, after, queue))
    }

    fn receiver(&self, id: u64, after: Zxid, queue: Arc<Queue>) -> WatchReceiver {
        let progress = self.shared.progress.subscribe();
        WatchReceiver::new(id, after, queue, Arc::downgrade(&self.shared), progress)
    }

    /// The zxid of the last published txn.
    pub fn published_zxid(&self) -> Zxid {
        lock(&self.shared.state).published_zxid
    }

    /// The smallest `after` that `register` accepts: the history is complete after it.
    pub fn oldest_resumable_zxid(&self) -> Zxid {
        lock(&self.shared.state).history.complete_after()
    }

    /// Registered live watches.
    pub fn watch_count(&self) -> usize {
        lock(&self.shared.state).watches.len()
    }

    /// The published zxid as it moves (set after each txn's batches are queued).
    pub fn subscribe_progress(&self) -> tokio::sync::watch::Receiver<Zxid> {
        self.shared.progress.subscribe()
    }

    /// A consistent snapshot of the hub's counters.
    pub fn stats(&self) -> WatchStats {
        let st = lock(&self.shared.state);
        WatchStats {
            watches: st.watches.len(),
            published_zxid: st.published_zxid,
            oldest_resumable_zxid: st.history.complete_after(),
            history_txns: st.history.len(),
            history_bytes: st.history.bytes(),
            match_checks: st.match_checks,
            slow_consumer_cuts: st.slow_consumer_cuts,
        }
    }

    /// The tree jumped to a snapshot at `zxid` (a learner far behind its leader):
    /// every watch ends with `Resynchronized` after what it was given, and the
    /// history restarts, complete after `zxid`.
    pub fn resynchronize(&self, zxid: Zxid) {
        let mut st = lock(&self.shared.state);
        st.index = WatchIndex::default();
        for (_, slot) in st.watches.drain() {
            slot.queue.resync(zxid);
        }
        st.history = History::new(
            zxid,
            st.config.history_txns_max,
            st.config.history_bytes_max,
        );
        st.published_zxid = zxid;
        drop(st);
        self.shared.progress.send_replace(zxid);
    }

    /// Ends every watch (each receiver drains its queue, then gets None) and refuses
    /// new ones. Dropping the last hub clone does the same.
    pub fn shutdown(&self) {
        lock(&self.shared.state).close();
    }
}

impl Shared {
    /// Removes a watch (its receiver was dropped).
    pub(crate) fn unregister(&self, id: u64) {
        lock(&self.state).remove(id);
    }
}

impl HubState {
    /// Validates and registers; `after` None means "now" (no replay, never Compacted).
    fn register(
        &mut self,
        spec: WatchSpec,
        after: Option<Zxid>,
    ) -> Result<(u64, Arc<Queue>), WatchError> {
        if self.closed {
            return Err(WatchError::Closed);
        }
        check_path(&spec.path)?;
        let after = after.unwrap_or(self.published_zxid);
        if after > self.published_zxid {
            return Err(WatchError::Future {
                published_zxid: self.published_zxid,
            });
        }
        if after < self.history.complete_after() {
            return Err(WatchError::Compacted {
                oldest_zxid: self.history.complete_after(),
            });
        }
        let id = self.next_id;
        self.next_id += 1;
        let mut replay: Vec<WatchBatch> = self
            .history
            .after(after)
            .filter_map(|(zxid, events)| spec.batch_for(zxid, events))
            .collect();
        let fired = spec.once && !replay.is_empty();
        replay.truncate(if spec.once { 1 } else { replay.len() });
        let queue = Arc::new(Queue::new(replay, after, fired));
        if !fired {
            self.index.insert(id, &spec.path, spec.recursive);
            let queue = Arc::clone(&queue);
            self.watches.insert(id, Slot { spec, queue });
        }
        Ok((id, queue))
    }

    /// Hands each matching watch one batch holding all its events of this txn.
    fn fan_out(&mut self, zxid: Zxid, events: &[Event]) {
        if self.watches.is_empty() {
            return;
        }
        let mut batches: HashMap<u64, Vec<Event>> = HashMap::new();
        let mut candidates = Vec::new();
        for event in events {
            candidates.clear();
            self.index.candidates(&event.path, &mut candidates);
            self.match_checks += candidates.len() as u64;
            for id in &candidates {
                let Some(slot) = self.watches.get(id) else {
                    continue;
                };
                if slot.spec.matches(event) {
                    batches.entry(*id).or_default().push(slot.spec.shape(event));
                }
            }
        }
        for (id, mut events) in batches {
            self.deliver(id, zxid, &mut events);
        }
    }

    fn deliver(&mut self, id: u64, zxid: Zxid, events: &mut Vec<Event>) {
        let Some(slot) = self.watches.get(&id) else {
            return;
        };
        let once = slot.spec.once;
        if once {
            events.truncate(1);
        }
        let batch = WatchBatch {
            zxid,
            events: std::mem::take(events),
        };
        let offer = slot.queue.offer(batch, self.config.queue_txns_max, once);
        if offer == Offer::Cut {
            self.slow_consumer_cuts += 1;
            tracing::debug!(watch_id = id, zxid, "watch cut off: slow consumer");
        }
        if once || offer == Offer::Cut {
            self.remove(id);
        }
    }

    fn remove(&mut self, id: u64) {
        if let Some(slot) = self.watches.remove(&id) {
            self.index.remove(id, &slot.spec.path, slot.spec.recursive);
            slot.queue.finish();
        }
    }

    fn close(&mut self) {
        self.closed = true;
        self.index = WatchIndex::default();
        for (_, slot) in self.watches.drain() {
            slot.queue.finish();
        }
    }
}

impl Drop for HubState {
    fn drop(&mut self) {
        self.close();
    }
}
