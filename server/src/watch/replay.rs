//! Resuming a watch from further back than the history ring: rebuild the tree from the
//! newest snapshot at or before the resume point, re-apply the log after it, and keep
//! the matching events after the resume point, streamed in chunks.
//!
//! Nothing is collected whole: `StorageReplay::next_chunk` reads the log a few txns at
//! a time (`READ_CHUNK_TXNS`) and returns once its batches pass `bytes_max` (at least
//! one batch, a txn is never split), keeping the rebuilt tree and the log cursor for
//! the next call. A replay holds one rebuilt tree (about a snapshot's size) for as
//! long as it runs, so at most `replays_max` run at once on a server (a permit from
//! the hub; more is `WatchError::Busy`). The disk work runs on a blocking thread.
//!
//! ```text
//!   snapshot(s ≤ after) ─decode─▶ DataTree ─apply(log > s, 8 txns a read)─▶ events
//!        ─filter─▶ chunk of batches (≤ bytes_max) ─▶ feed ─▶ ... ─▶ next chunk
//! ```
//!
//! What it must not do: touch the hub's state (it only reads storage), or apply
//! anything to the live tree.

use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;
use tokio::task::JoinHandle;

use super::queue::batch_bytes;
use super::{check_path, WatchBatch, WatchError, WatchHub, WatchSpec};
use crate::storage::{Storage, StorageError};
use crate::tree::DataTree;
use crate::txn::Zxid;

/// Txns read from the log per read: few, since one txn may be as large as a request.
pub const READ_CHUNK_TXNS: usize = 8;

impl From<StorageError> for WatchError {
    fn from(e: StorageError) -> Self {
        WatchError::Storage(e.to_string())
    }
}

/// One chunk of a replay.
#[derive(Debug, Default)]
pub(crate) struct Chunk {
    /// Matching batches, in zxid order.
    pub(crate) batches: Vec<WatchBatch>,
    /// Every matching event up to this zxid is in `batches` (or an earlier chunk).
    pub(crate) through: Zxid,
    /// A `once` watch found its event (the only batch): the replay is over.
    pub(crate) fired: bool,
}

/// What a blocking read hands back: the tree, and the chunk (None for the load).
type Read = Result<(DataTree, Option<Chunk>), WatchError>;

/// A replay from storage in progress: the rebuilt tree and how far it got.
pub(crate) struct StorageReplay {
    storage: Arc<dyn Storage>,
    spec: WatchSpec,
    /// Events at or below this are not wanted (the resume point).
    after: Zxid,
    /// The tree rebuilt up to `tree.last_zxid()`; None while a chunk is read.
    tree: Option<DataTree>,
    /// The chunk being read on a blocking thread (it has the tree); kept across a
    /// cancelled `next_chunk`, so the next call picks it up.
    /// The first one loads the tree (no chunk: `None`).
    reading: Option<JoinHandle<Read>>,
    /// Matching events up to here have been returned.
    through: Zxid,
    /// This replay's share of the server's `replays_max`; released on drop.
    _permit: Option<OwnedSemaphorePermit>,
}

impl std::fmt::Debug for StorageReplay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorageReplay")
            .field("spec", &self.spec)
            .field("after", &self.after)
            .field("through", &self.through)
            .finish_non_exhaustive()
    }
}

impl StorageReplay {
    /// A replay of the matching events after `after`. Its first `next_chunk` loads
    /// the tree at the newest snapshot at or before `after` (or the empty tree if the
    /// log starts at the beginning): Err(Compacted) if neither reaches back.
    pub(crate) fn new(
        storage: Arc<dyn Storage>,
        spec: WatchSpec,
        after: Zxid,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Result<StorageReplay, WatchError> {
        check_path(&spec.path)?;
        let st = Arc::clone(&storage);
        let load = tokio::task::spawn_blocking(move || -> Read {
            Ok((tree_at_or_before(st.as_ref(), after)?, None))
        });
        Ok(StorageReplay {
            storage,
            spec,
            after,
            tree: None,
            reading: Some(load),
            through: after,
            _permit: permit,
        })
    }

    /// The next matching batches after what was returned, up to `until`, stopping
    /// once they pass `bytes_max` or at the end of the durable log. `through == until`
    /// when the replay reached it.
    /// Cancel-safe: a read cut short is finished by the next call (whose `until` and
    /// `bytes_max` it then ignores).
    pub(crate) async fn next_chunk(
        &mut self,
        until: Zxid,
        bytes_max: usize,
    ) -> Result<Chunk, WatchError> {
        // At most two rounds: the load of the tree, then a chunk.
        for _ in 0..3 {
            if self.reading.is_none() {
                let Some(mut tree) = self.tree.take() else {
                    return Err(WatchError::Storage("replay lost its tree".to_owned()));
                };
                let storage = Arc::clone(&self.storage);
                let spec = self.spec.clone();
                let after = self.after;
                self.reading = Some(tokio::task::spawn_blocking(move || -> Read {
                    let chunk = chunk_blocking(
                        storage.as_ref(),
                        &spec,
                        &mut tree,
                        after,
                        until,
                        bytes_max,
                    )?;
                    Ok((tree, Some(chunk)))
                }));
            }
            let Some(reading) = self.reading.as_mut() else {
                return Err(WatchError::Storage("replay lost its read".to_owned()));
            };
            let joined = reading.await;
            self.reading = None;
            let (tree, chunk) =
                joined.map_err(|e| WatchError::Storage(format!("replay task failed: {e}")))??;
            self.tree = Some(tree);
            if let Some(chunk) = chunk {
                self.through = chunk.through;
                return Ok(chunk);
            }
        }
        Err(WatchError::Storage("replay read nothing".to_owned()))
    }

    /// Matching events up to here have been returned.
    pub(crate) fn through(&self) -> Zxid {
        self.through
    }
}

fn chunk_blocking(
    storage: &dyn Storage,
    spec: &WatchSpec,
    tree: &mut DataTree,
    after: Zxid,
    until: Zxid,
    bytes_max: usize,
) -> Result<Chunk, WatchError> {
    let mut out = Chunk::default();
    let mut bytes = 0usize;
    let mut cursor = tree.last_zxid();
    while cursor < until {
        let txns = storage.read_after(cursor, READ_CHUNK_TXNS)?;
        // A purge between reads would leave a gap: the log must still start at or
        // before where this read began.
        let log_start = storage.log_start()?;
        if log_start > cursor {
            return Err(WatchError::Compacted {
                oldest_zxid: log_start,
            });
        }
        // A txn is applied, and its events published, once a quorum has it durable,
        // which may be before this server's own log has it: the chunk ends where the
        // log does, and the next one reads on (the feed waits for the log if it
        // must, `WatchHub::log_durable_past`).
        let Some(first) = txns.first() else {
            out.through = cursor.max(after);
            return Ok(out);
        };
        if first.zxid > until {
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
            bytes = bytes.saturating_add(batch_bytes(&batch));
            out.batches.push(batch);
            if spec.once {
                out.fired = true;
                out.through = cursor;
                return Ok(out);
            }
            if bytes >= bytes_max {
                out.through = cursor.max(after);
                return Ok(out);
            }
        }
    }
    out.through = until.max(after);
    Ok(out)
}

/// The tree at the newest snapshot with zxid <= `after`, or the empty tree if the log
/// starts at the beginning.
fn tree_at_or_before(storage: &dyn Storage, after: Zxid) -> Result<DataTree, WatchError> {
    match base_snapshot(storage, after)? {
        Some(zxid) => {
            let bytes = storage.load_snapshot(zxid)?;
            DataTree::decode_snapshot(&bytes).map_err(|e| WatchError::Storage(e.to_string()))
        }
        None => Ok(DataTree::new()),
    }
}

/// The snapshot a replay from `after` starts at (None: the empty tree, the log starts
/// at the beginning), or Err(Compacted) if storage does not reach back to `after`.
fn base_snapshot(storage: &dyn Storage, after: Zxid) -> Result<Option<Zxid>, WatchError> {
    let snapshots = storage.snapshots()?;
    let log_start = storage.log_start()?;
    let base = snapshots.iter().rev().find(|&&z| z <= after).copied();
    let compacted = || WatchError::Compacted {
        oldest_zxid: snapshots.first().copied().unwrap_or(log_start),
    };
    match base {
        // The log must continue right after the snapshot.
        Some(zxid) if log_start <= zxid => Ok(Some(zxid)),
        Some(_) => Err(compacted()),
        None if log_start == 0 => Ok(None),
        None => Err(compacted()),
    }
}

/// Whether a watch can resume after `after`: from the hub's ring, or else from a
/// snapshot and the log (only their metadata is read). Err(Compacted) names the
/// oldest resume point; a purge right after may still end the stream so.
pub async fn check_resumable(
    hub: &WatchHub,
    storage: Arc<dyn Storage>,
    after: Zxid,
) -> Result<(), WatchError> {
    if after >= hub.oldest_resumable_zxid() {
        return Ok(());
    }
    tokio::task::spawn_blocking(move || base_snapshot(storage.as_ref(), after).map(|_| ()))
        .await
        .map_err(|e| WatchError::Storage(format!("resume check failed: {e}")))?
}

/// The matching events with after < zxid <= until, one batch per txn, rebuilt from
/// the durable snapshot and log, collected whole (tests only: the server streams).
#[cfg(test)]
pub(crate) async fn replay_from_storage(
    storage: Arc<dyn Storage>,
    spec: &WatchSpec,
    after: Zxid,
    until: Zxid,
) -> Result<Vec<WatchBatch>, WatchError> {
    let mut replay = StorageReplay::new(storage, spec.clone(), after, None)?;
    let mut out = Vec::new();
    for _ in 0..1_000_000 {
        // One batch per chunk: every chunk boundary is exercised.
        let chunk = replay.next_chunk(until, 1).await?;
        out.extend(chunk.batches);
        if chunk.fired || chunk.through >= until {
            return Ok(out);
        }
    }
    Err(WatchError::Storage("replay did not end".to_owned()))
}
