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
//!   catch_up(spec, after) ─lock─▶ history.after(after) ─▶ one chunk ≤ bytes_max
//!                                 (or, caught up, the live registration)
//! ```
//!
//! Memory: every queued batch and every catch-up chunk is charged to one
//! `MemoryBudget` (`memory_bytes_max`). When a charge does not fit, the hub cuts the
//! watch holding the most queued bytes (its queue is dropped at once) and tries
//! again; a watch is never waited for.
//!
//! What it must not do: wait on a consumer, or await while holding the lock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::budget::{Charge, MemoryBudget};
use super::history::History;
use super::index::WatchIndex;
use super::queue::{batch_bytes, Bounds, Offer, Queue, WatchReceiver};
use super::{check_path, lock, WatchBatch, WatchError, WatchSpec};
use crate::tree::Event;
use crate::txn::Zxid;

/// Sizes of the hub's bounded memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchConfig {
    /// Live batches (txns) a watch may have waiting before it is cut as a slow
    /// consumer. At least 1 is used.
    pub queue_txns_max: usize,
    /// Bytes of events (as the history counts them) a watch may have waiting before
    /// it is cut; an empty queue still takes one txn of any size.
    pub queue_bytes_max: usize,
    /// Bytes of all watches together: queued batches and catch-up chunks. Over it,
    /// the watch with the most queued bytes is cut.
    pub memory_bytes_max: usize,
    /// Txns (those with events) kept in the history ring for resume.
    pub history_txns_max: usize,
    /// Bytes of events (paths, data, prev_data, struct size) kept in the ring.
    pub history_bytes_max: usize,
    /// Replays from storage running at once (each holds a rebuilt tree); more is
    /// `WatchError::Busy`. At least 1 is used.
    pub replays_max: usize,
}

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig {
            queue_txns_max: 1024,
            queue_bytes_max: 8 << 20,
            memory_bytes_max: 256 << 20,
            history_txns_max: 100_000,
            history_bytes_max: 64 << 20,
            replays_max: 4,
        }
    }
}

/// One step of catching a watch up from the history ring (`WatchHub::catch_up`).
#[derive(Debug)]
pub(crate) enum CatchUp {
    /// More is to come: deliver `batches`, then ask again from `through` (every
    /// matching event up to it is in `batches`).
    More {
        batches: Vec<WatchBatch>,
        through: Zxid,
        /// What `batches` are charged to the watch budget; drop it once sent.
        charge: Charge,
    },
    /// Caught up: deliver `batches`, then what `receiver` gets (it is registered).
    Live {
        batches: Vec<WatchBatch>,
        charge: Charge,
        receiver: WatchReceiver,
    },
    /// A `once` watch found its event: deliver it, and nothing after.
    Fired { batch: WatchBatch, charge: Charge },
}

/// What `HubState::collect` found in the ring.
enum Collected {
    /// Over `bytes_max` before the end of the ring: complete through `through`.
    More {
        batches: Vec<WatchBatch>,
        through: Zxid,
    },
    /// Everything matching in the ring after `after`.
    All(Vec<WatchBatch>),
    /// The first match of a `once` watch.
    Fired(WatchBatch),
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
    /// Watches cut off as slow consumers (over their own bound or the budget).
    pub slow_consumer_cuts: u64,
    /// Bytes charged to the watch budget now (queues and catch-up chunks).
    pub memory_bytes: usize,
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
    /// The server-wide byte budget every queue and catch-up chunk is charged to.
    budget: Arc<MemoryBudget>,
    match_checks: u64,
    slow_consumer_cuts: u64,
}

/// What receivers point back to (weakly) and the hub's clones share.
#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<HubState>,
    /// The published zxid, for idle streams' Progress messages.
    progress: tokio::sync::watch::Sender<Zxid>,
    /// Permits for replays from storage (`replays_max`).
    replays: Arc<tokio::sync::Semaphore>,
    /// How far this server's own log is durable, as its replica says: a replay
    /// from storage reads no further, and waits on it.
    log_durable: tokio::sync::watch::Sender<Zxid>,
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
        let budget = MemoryBudget::new(config.memory_bytes_max);
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
            budget,
            match_checks: 0,
            slow_consumer_cuts: 0,
        };
        let (progress, _) = tokio::sync::watch::channel(start_zxid);
        WatchHub {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                progress,
                replays: Arc::new(tokio::sync::Semaphore::new(config.replays_max.max(1))),
                log_durable: tokio::sync::watch::Sender::new(start_zxid),
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
    /// exactly once, in order: first from the history, then live. The history's part
    /// is queued like live batches: more than `queue_bytes_max` of it is
    /// Err(SlowConsumer) (a `WatchFeed` streams it instead).
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

    /// Catches a watch up from the ring after `after`, one chunk of at most about
    /// `bytes_max` bytes per call (at least one batch), charged to the watch budget;
    /// once the ring holds nothing more, registers it live in the same critical
    /// section (nothing lost, nothing twice). Err(Compacted) if the ring does not
    /// reach back to `after` (replay from storage), Err(Future) if `after` is ahead,
    /// Err(SlowConsumer) if the budget has no room for the chunk.
    pub(crate) fn catch_up(
        &self,
        spec: &WatchSpec,
        after: Zxid,
        bytes_max: usize,
        id: u64,
    ) -> Result<CatchUp, WatchError> {
        let mut st = lock(&self.shared.state);
        let collected = st.collect(spec, after, bytes_max)?;
        let bytes: usize = match &collected {
            Collected::More { batches, .. } | Collected::All(batches) => {
                batches.iter().map(batch_bytes).sum()
            }
            Collected::Fired(batch) => batch_bytes(batch),
        };
        let charge = st.reserve(bytes).ok_or(WatchError::SlowConsumer {
            last_delivered_zxid: after,
        })?;
        Ok(match collected {
            Collected::More { batches, through } => CatchUp::More {
                batches,
                through,
                charge,
            },
            Collected::Fired(batch) => CatchUp::Fired { batch, charge },
            Collected::All(batches) => {
                let queue = st.insert(id, spec.clone(), Vec::new(), after)?;
                drop(st);
                CatchUp::Live {
                    batches,
                    charge,
                    receiver: self.receiver(id, after, queue),
                }
            }
        })
    }

    /// A fresh watch id (for a feed, which registers live later under it).
    pub(crate) fn allocate_id(&self) -> u64 {
        let mut st = lock(&self.shared.state);
        st.next_id += 1;
        st.next_id - 1
    }

    /// A permit to replay from storage, or Err(Busy) if `replays_max` run already.
    pub(crate) fn replay_permit(&self) -> Result<tokio::sync::OwnedSemaphorePermit, WatchError> {
        Arc::clone(&self.shared.replays)
            .try_acquire_owned()
            .map_err(|_| WatchError::Busy {
                replays_max: lock(&self.shared.state).config.replays_max.max(1),
            })
    }

    /// Charges `bytes` to the watch budget, cutting the watches with the most queued
    /// bytes if that makes room; None if it cannot.
    pub(crate) fn reserve(&self, bytes: usize) -> Option<Charge> {
        lock(&self.shared.state).reserve(bytes)
    }

    /// Registered live watches.
    pub fn watch_count(&self) -> usize {
        lock(&self.shared.state).watches.len()
    }

    /// The published zxid as it moves (set after each txn's batches are queued).
    pub fn subscribe_progress(&self) -> tokio::sync::watch::Receiver<Zxid> {
        self.shared.progress.subscribe()
    }

    /// This server's own log is durable up to `zxid` (after each of its fsyncs). A
    /// txn is applied, and published, once a quorum has it durable, which may be
    /// before this server's own log has it.
    pub fn note_log_durable(&self, zxid: Zxid) {
        self.shared.log_durable.send_if_modified(|durable| {
            let moved = *durable != zxid;
            *durable = zxid;
            moved
        });
    }

    /// Returns once this server's own log is durable past `zxid`; Err(Closed) if the
    /// hub shuts down first. Cancel-safe.
    pub(crate) async fn log_durable_past(&self, zxid: Zxid) -> Result<(), WatchError> {
        let mut durable = self.shared.log_durable.subscribe();
        loop {
            // Seen before `closed` is read: a shutdown after it wakes `changed`.
            let past = *durable.borrow_and_update() > zxid;
            if lock(&self.shared.state).closed {
                return Err(WatchError::Closed);
            }
            if past {
                return Ok(());
            }
            if durable.changed().await.is_err() {
                return Err(WatchError::Closed);
            }
        }
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
            memory_bytes: st.budget.used(),
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
        // Wakes replays waiting for the log (`log_durable_past`).
        self.shared.log_durable.send_modify(|_| {});
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
    /// The ring's matching batches after `after` are queued (charged like live ones);
    /// more than `queue_bytes_max` of them is `SlowConsumer` (use `catch_up`).
    fn register(
        &mut self,
        spec: WatchSpec,
        after: Option<Zxid>,
    ) -> Result<(u64, Arc<Queue>), WatchError> {
        let after = after.unwrap_or(self.published_zxid);
        let too_far = WatchError::SlowConsumer {
            last_delivered_zxid: after,
        };
        match self.collect(&spec, after, self.config.queue_bytes_max)? {
            Collected::More { .. } => Err(too_far),
            Collected::All(batches) => {
                let id = self.next_id;
                self.next_id += 1;
                Ok((id, self.insert(id, spec, batches, after)?))
            }
            Collected::Fired(batch) => {
                let id = self.next_id;
                self.next_id += 1;
                let queue = Queue::new(vec![batch], after, true, &self.budget).ok_or(too_far)?;
                Ok((id, Arc::new(queue)))
            }
        }
    }

    /// The matching batches of the ring after `after`, stopping once they exceed
    /// `bytes_max` (at least one batch). Checks the watch and the resume point.
    fn collect(
        &self,
        spec: &WatchSpec,
        after: Zxid,
        bytes_max: usize,
    ) -> Result<Collected, WatchError> {
        if self.closed {
            return Err(WatchError::Closed);
        }
        check_path(&spec.path)?;
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
        let mut batches = Vec::new();
        let mut bytes = 0usize;
        for (zxid, events) in self.history.after(after) {
            let Some(batch) = spec.batch_for(zxid, events) else {
                continue;
            };
            if spec.once {
                return Ok(Collected::Fired(batch));
            }
            bytes = bytes.saturating_add(batch_bytes(&batch));
            batches.push(batch);
            if bytes >= bytes_max {
                return Ok(Collected::More {
                    batches,
                    through: zxid,
                });
            }
        }
        Ok(Collected::All(batches))
    }

    /// Registers a live watch `id` whose queue starts with `batches`.
    fn insert(
        &mut self,
        id: u64,
        spec: WatchSpec,
        batches: Vec<WatchBatch>,
        after: Zxid,
    ) -> Result<Arc<Queue>, WatchError> {
        let queue =
            Queue::new(batches, after, false, &self.budget).ok_or(WatchError::SlowConsumer {
                last_delivered_zxid: after,
            })?;
        let queue = Arc::new(queue);
        self.index.insert(id, &spec.path, spec.recursive);
        self.watches.insert(
            id,
            Slot {
                spec,
                queue: Arc::clone(&queue),
            },
        );
        Ok(queue)
    }

    /// Charges `bytes`, cutting the watches with the most queued bytes until they fit;
    /// None if even that does not make room.
    fn reserve(&mut self, bytes: usize) -> Option<Charge> {
        loop {
            if let Some(charge) = Charge::take(&self.budget, bytes) {
                return Some(charge);
            }
            self.cut_largest()?;
        }
    }

    /// Cuts the watch holding the most queued bytes (its memory comes back at once)
    /// and returns its id; None if no watch holds any.
    fn cut_largest(&mut self) -> Option<u64> {
        let (bytes, id) = self
            .watches
            .iter()
            .map(|(id, slot)| (slot.queue.bytes(), *id))
            .max()?;
        if bytes == 0 {
            return None;
        }
        if let Some(slot) = self.watches.get(&id) {
            slot.queue.cut();
        }
        self.slow_consumer_cuts += 1;
        tracing::debug!(
            watch_id = id,
            bytes,
            "watch cut off: watch memory budget full"
        );
        self.remove(id);
        Some(id)
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
        let bounds = Bounds {
            txns_max: self.config.queue_txns_max,
            bytes_max: self.config.queue_bytes_max,
        };
        let mut batch = WatchBatch {
            zxid,
            events: std::mem::take(events),
        };
        // Each NoMemory round cuts one other watch, so this ends.
        loop {
            let Some(slot) = self.watches.get(&id) else {
                return;
            };
            let once = slot.spec.once;
            if once {
                batch.events.truncate(1);
            }
            let queue = Arc::clone(&slot.queue);
            match queue.offer(batch, bounds, once) {
                Offer::Queued => {
                    if once {
                        self.remove(id);
                    }
                    return;
                }
                Offer::Cut => {
                    self.slow_consumer_cuts += 1;
                    tracing::debug!(watch_id = id, zxid, "watch cut off: slow consumer");
                    self.remove(id);
                    return;
                }
                Offer::NoMemory(back) => match self.cut_largest() {
                    Some(cut) if cut != id => batch = back,
                    Some(_) => return,
                    None => {
                        queue.cut();
                        self.slow_consumer_cuts += 1;
                        tracing::debug!(watch_id = id, zxid, "watch cut off: budget full");
                        self.remove(id);
                        return;
                    }
                },
            }
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
