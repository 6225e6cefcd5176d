//! `WatchFeed`: one watch from its start point on, wherever that is: replayed from
//! storage (snapshot + log) while the history ring does not reach back, then caught up
//! from the ring, then live from the hub, one batch at a time.
//!
//! ```text
//!   Storage ──chunk ≤ chunk_bytes_max──▶ pending ──next()──▶ caller
//!      │ reached the ring
//!   Ring ──hub.catch_up(chunk)──▶ pending ─────▶
//!      │ caught up (registered in the same lock)      ▲
//!   Live(WatchReceiver) ───────────────────────────────┘
//! ```
//!
//! At most one chunk is held (charged to the watch budget until its batches are
//! taken), plus, while replaying from storage, the rebuilt tree. A chunk the budget
//! cannot hold ends the feed with `SlowConsumer` naming how far it got.
//!
//! What it must not do: hold a whole replay, or lose anything when `next` is
//! cancelled (a storage read in flight is kept and picked up by the next call).

use std::collections::VecDeque;
use std::sync::Arc;

use super::budget::Charge;
use super::hub::CatchUp;
use super::queue::batch_bytes;
use super::replay::StorageReplay;
use super::{WatchBatch, WatchError, WatchHub, WatchReceiver, WatchSpec};
use crate::storage::Storage;
use crate::txn::Zxid;

/// Bytes of batches a feed reads ahead in one chunk (at least one txn).
pub const CHUNK_BYTES_MAX: usize = 1 << 20;

enum Phase {
    /// Catching up from the history ring.
    Ring,
    /// Replaying from storage (the ring does not reach back far enough).
    Storage(Box<StorageReplay>),
    /// Caught up: live batches from the hub.
    Live(WatchReceiver),
    /// Nothing more (a `once` watch fired, or an error was returned).
    Done,
}

/// One watch's batches from `start_zxid` on, in zxid order, nothing lost or repeated.
pub struct WatchFeed {
    hub: WatchHub,
    storage: Arc<dyn Storage>,
    spec: WatchSpec,
    /// Unique on the hub; the live registration gets the same id.
    id: u64,
    /// Every matching event after this is delivered.
    start_zxid: Zxid,
    /// The read-ahead bound of one chunk.
    chunk_bytes_max: usize,
    phase: Phase,
    /// The current chunk's batches not yet returned.
    pending: VecDeque<WatchBatch>,
    /// What `pending` is charged to the watch budget.
    charge: Option<Charge>,
    /// Every matching event up to here is in `pending` or was returned.
    cursor: Zxid,
}

impl std::fmt::Debug for WatchFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchFeed")
            .field("id", &self.id)
            .field("spec", &self.spec)
            .field("start_zxid", &self.start_zxid)
            .field("cursor", &self.cursor)
            .finish_non_exhaustive()
    }
}

impl WatchFeed {
    /// A feed of every matching event after `after` (nothing is read until `next`).
    pub fn new(hub: &WatchHub, storage: Arc<dyn Storage>, spec: WatchSpec, after: Zxid) -> Self {
        Self::with_chunk_bytes(hub, storage, spec, after, CHUNK_BYTES_MAX)
    }

    /// The same with another read-ahead bound (tests).
    pub fn with_chunk_bytes(
        hub: &WatchHub,
        storage: Arc<dyn Storage>,
        spec: WatchSpec,
        after: Zxid,
        chunk_bytes_max: usize,
    ) -> Self {
        WatchFeed {
            hub: hub.clone(),
            storage,
            spec,
            id: hub.allocate_id(),
            start_zxid: after,
            chunk_bytes_max,
            phase: Phase::Ring,
            pending: VecDeque::new(),
            charge: None,
            cursor: after,
        }
    }

    /// This watch's id, unique on the hub.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Every matching event after this zxid is delivered.
    pub fn start_zxid(&self) -> Zxid {
        self.start_zxid
    }

    /// True once caught up: `next` then only waits on the hub.
    pub fn is_live(&self) -> bool {
        matches!(self.phase, Phase::Live(_))
    }

    /// Bytes of read-ahead held now (charged to the watch budget).
    pub fn pending_bytes(&self) -> usize {
        self.charge.as_ref().map_or(0, Charge::bytes)
    }

    /// If the feed is live and idle, the zxid it is complete through (see
    /// `WatchReceiver::idle_progress`).
    pub fn idle_progress(&self) -> Option<Zxid> {
        match &self.phase {
            Phase::Live(rx) if self.pending.is_empty() => rx.idle_progress(),
            _ => None,
        }
    }

    /// The next batch; `Some(Err(_))` once, then `None`, when the watch cannot go on;
    /// `None` when it is over. Cancel-safe.
    pub async fn next(&mut self) -> Option<Result<WatchBatch, WatchError>> {
        // Each round either returns or moves the cursor or the phase forward; the
        // bound only guards against a broken invariant.
        for _ in 0..1_000_000 {
            if let Some(batch) = self.pending.pop_front() {
                if let Some(charge) = &mut self.charge {
                    charge.shrink(batch_bytes(&batch));
                }
                return Some(Ok(batch));
            }
            self.charge = None;
            let step = match &mut self.phase {
                Phase::Done => return None,
                Phase::Live(rx) => return rx.next().await,
                Phase::Ring => self.ring_step(),
                Phase::Storage(_) => self.storage_step().await,
            };
            if let Err(e) = step {
                self.phase = Phase::Done;
                self.pending.clear();
                return Some(Err(e));
            }
        }
        self.phase = Phase::Done;
        Some(Err(WatchError::Storage(
            "watch feed made no progress".into(),
        )))
    }

    fn ring_step(&mut self) -> Result<(), WatchError> {
        let step = self
            .hub
            .catch_up(&self.spec, self.cursor, self.chunk_bytes_max, self.id);
        match step {
            Ok(CatchUp::More {
                batches,
                through,
                charge,
            }) => {
                self.hold(batches, charge);
                self.cursor = through;
            }
            Ok(CatchUp::Live {
                batches,
                charge,
                receiver,
            }) => {
                self.hold(batches, charge);
                self.phase = Phase::Live(receiver);
            }
            Ok(CatchUp::Fired { batch, charge }) => {
                self.hold(vec![batch], charge);
                self.phase = Phase::Done;
            }
            Err(WatchError::Compacted { .. }) => {
                let permit = self.hub.replay_permit()?;
                let replay = StorageReplay::new(
                    Arc::clone(&self.storage),
                    self.spec.clone(),
                    self.cursor,
                    Some(permit),
                )?;
                self.phase = Phase::Storage(Box::new(replay));
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    async fn storage_step(&mut self) -> Result<(), WatchError> {
        let Phase::Storage(replay) = &mut self.phase else {
            return Ok(());
        };
        let until = self.hub.published_zxid();
        let before = replay.through();
        let chunk = replay.next_chunk(until, self.chunk_bytes_max).await?;
        if chunk.batches.is_empty() && chunk.through <= before && !chunk.fired {
            // The replay is at the end of this server's durable log, and the ring no
            // longer holds what comes next (applied before this server's own fsync
            // of it ended, then pushed out): wait for the disk, then read on.
            return self.hub.log_durable_past(before).await;
        }
        let bytes = chunk.batches.iter().map(batch_bytes).sum();
        let charge = self.hub.reserve(bytes).ok_or(WatchError::SlowConsumer {
            last_delivered_zxid: self.cursor,
        })?;
        self.cursor = chunk.through;
        let fired = chunk.fired;
        self.hold(chunk.batches, charge);
        if fired {
            self.phase = Phase::Done;
        } else if self.cursor >= self.hub.oldest_resumable_zxid() {
            // The ring reaches back here now: the tree and permit can go.
            self.phase = Phase::Ring;
        }
        Ok(())
    }

    fn hold(&mut self, batches: Vec<WatchBatch>, charge: Charge) {
        self.pending = batches.into();
        self.charge = Some(charge);
    }
}
