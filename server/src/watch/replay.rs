//! Resuming a watch from further back than the history ring: rebuild the tree from the
//! newest snapshot at or before the resume point, re-apply the log after it, and keep
//! the matching events in (after, until].
//!
//! The result is collected in memory and bounded: more than `REPLAY_EVENTS_MAX` events
//! or `REPLAY_BYTES_MAX` bytes fails with `ReplayTooLarge` (a client that far behind
//! is better served by `initial_snapshot` than by a replay; the api reports it like a
//! compacted history). The disk work runs on a blocking thread.
//!
//! ```text
//!   snapshot(s ≤ after) ─decode─▶ DataTree ─apply(log > s)─▶ events ─filter─▶ batches
//! ```
//!
//! What it must not do: touch the hub's state (it only reads storage), or apply
//! anything to the live tree.

use std::sync::Arc;

use super::history::event_bytes;
use super::{check_path, WatchBatch, WatchError, WatchHub, WatchReceiver, WatchSpec};
use crate::storage::{Storage, StorageError};
use crate::tree::DataTree;
use crate::txn::Zxid;

/// Most events one replay may return.
pub const REPLAY_EVENTS_MAX: usize = 100_000;
/// Most bytes (as the history counts them) one replay may return.
pub const REPLAY_BYTES_MAX: usize = 64 << 20;
/// Txns read from the log per call.
const READ_CHUNK_TXNS: usize = 1024;
/// How many times `open` retries when the ring moved past its catch-up point.
const OPEN_ATTEMPTS_MAX: usize = 4;

impl From<StorageError> for WatchError {
    fn from(e: StorageError) -> Self {
        WatchError::Storage(e.to_string())
    }
}

/// The matching events with after < zxid <= until, one batch per txn, rebuilt from
/// the durable snapshot and log. Err(Compacted) if no snapshot at or before `after`
/// remains and the log does not start at the beginning.
pub async fn replay_from_storage(
    storage: Arc<dyn Storage>,
    spec: &WatchSpec,
    after: Zxid,
    until: Zxid,
) -> Result<Vec<WatchBatch>, WatchError> {
    check_path(&spec.path)?;
    let spec = spec.clone();
    tokio::task::spawn_blocking(move || replay_blocking(storage.as_ref(), &spec, after, until))
        .await
        .map_err(|e| WatchError::Storage(format!("replay task failed: {e}")))?
}

fn replay_blocking(
    storage: &dyn Storage,
    spec: &WatchSpec,
    after: Zxid,
    until: Zxid,
) -> Result<Vec<WatchBatch>, WatchError> {
    let mut tree = tree_at_or_before(storage, after)?;
    let mut out = Vec::new();
    let (mut events_n, mut bytes_n) = (0usize, 0usize);
    let mut cursor = tree.last_zxid();
    while cursor < until {
        let txns = storage.read_after(cursor, READ_CHUNK_TXNS)?;
        if txns.is_empty() {
            break;
        }
        for txn in txns.iter().take_while(|t| t.zxid <= until) {
            cursor = txn.zxid;
            let applied = tree.apply(txn);
            if txn.zxid <= after {
                continue;
            }
            let Some(batch) = spec.batch_for(txn.zxid, &applied.events) else {
                continue;
            };
            events_n += batch.events.len();
            bytes_n += batch.events.iter().map(event_bytes).sum::<usize>();
            if events_n > REPLAY_EVENTS_MAX || bytes_n > REPLAY_BYTES_MAX {
                return Err(WatchError::ReplayTooLarge {
                    events_max: REPLAY_EVENTS_MAX,
                    bytes_max: REPLAY_BYTES_MAX,
                });
            }
            out.push(batch);
            if spec.once {
                return Ok(out);
            }
        }
        if txns.last().is_some_and(|t| t.zxid > until) {
            break;
        }
    }
    Ok(out)
}

/// The tree at the newest snapshot with zxid <= `after`, or the empty tree if the log
/// starts at the beginning.
fn tree_at_or_before(storage: &dyn Storage, after: Zxid) -> Result<DataTree, WatchError> {
    let snapshots = storage.snapshots()?;
    let log_start = storage.log_start()?;
    let base = snapshots.iter().rev().find(|&&z| z <= after).copied();
    let compacted = || WatchError::Compacted {
        oldest_zxid: snapshots.first().copied().unwrap_or(log_start),
    };
    match base {
        // The log must continue right after the snapshot.
        Some(zxid) if log_start <= zxid => {
            let bytes = storage.load_snapshot(zxid)?;
            DataTree::decode_snapshot(&bytes).map_err(|e| WatchError::Storage(e.to_string()))
        }
        Some(_) => Err(compacted()),
        None if log_start == 0 => Ok(DataTree::new()),
        None => Err(compacted()),
    }
}

/// Opens a watch from `after`, wherever that is: from the hub's ring if it reaches,
/// else by replaying storage up to a zxid z still in the ring and registering at z.
/// Returns the replayed batches (deliver them first) and the live receiver.
pub async fn open(
    hub: &WatchHub,
    storage: Arc<dyn Storage>,
    spec: WatchSpec,
    after: Zxid,
) -> Result<(Vec<WatchBatch>, WatchReceiver), WatchError> {
    let mut replayed = Vec::new();
    let mut cursor = after;
    for _ in 0..OPEN_ATTEMPTS_MAX {
        match hub.register(spec.clone(), cursor) {
            Ok(rx) => return Ok((replayed, rx)),
            Err(WatchError::Compacted { .. }) => {}
            Err(e) => return Err(e),
        }
        // Catch up to what is published now: the ring must evict everything after it
        // during the replay for the next register to fail again.
        let until = hub.published_zxid();
        let batches = replay_from_storage(Arc::clone(&storage), &spec, cursor, until).await?;
        replayed.extend(batches);
        if spec.once && !replayed.is_empty() {
            replayed.truncate(1);
            return Ok((replayed, hub.register_finished(until)?));
        }
        cursor = until;
    }
    hub.register(spec, cursor).map(|rx| (replayed, rx))
}
