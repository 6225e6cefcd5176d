//! Watches: registrations, fan-out of the tree's events, and resume from history.
//!
//! The applier calls `WatchHub::publish(zxid, &events)` for every applied txn, in zxid
//! order, even one with no events. The hub keeps a bounded ring of recent txns' events
//! (the history) and hands each matching watch one `WatchBatch` per txn (a txn's events
//! are never split). A `WatchFeed` delivers one watch from its start point on: the
//! part older than the ring replayed from the durable log (`replay`), then the ring's
//! part, then live, each in chunks of bounded bytes: nothing lost, nothing twice, and
//! never a whole replay in memory. An initial snapshot is walked node by node from an
//! O(1) clone of the tree (`SnapshotWalk`).
//!
//! ```text
//!   applier ──publish(zxid, events)──▶ WatchHub ──┬─▶ history ring (resume)
//!                                                 └─▶ index ─▶ per-watch queue ─┐
//!   storage (snapshot + log) ──StorageReplay chunks──▶ WatchFeed ◀─catch_up chunks┤
//!                                                        │        ◀─WatchReceiver─┘
//!                                                        ▼
//!                                                       api
//! ```
//!
//! Memory is bounded in bytes everywhere: each queue (`queue_bytes_max`, and
//! `queue_txns_max`), the ring (`history_bytes_max`, and `history_txns_max`), each
//! feed's read-ahead (`CHUNK_BYTES_MAX`), all queues and read-ahead together
//! (`memory_bytes_max`, the `MemoryBudget`), and replays from storage in number
//! (`replays_max`, each holding one rebuilt tree).
//!
//! Filtering (path, subtree, kinds) and stripping data (`with_data == false`) happen
//! here; turning batches into protobuf messages is the api's job.
//!
//! What it must not do: know Zab, touch the network, or block the applier: every
//! per-watch queue is bounded and a watch over its bound (or the server's) is cut off
//! (`WatchError::SlowConsumer`), never waited for.

mod budget;
mod feed;
mod history;
mod hub;
mod index;
mod queue;
mod replay;
mod snapshot;

#[cfg(test)]
mod hub_tests;
#[cfg(test)]
mod replay_tests;

pub use feed::{WatchFeed, CHUNK_BYTES_MAX};
pub use hub::{WatchConfig, WatchHub, WatchStats};
pub use queue::WatchReceiver;
#[cfg(test)]
pub(crate) use replay::replay_from_storage;
pub use replay::{check_resumable, READ_CHUNK_TXNS};
pub use snapshot::SnapshotWalk;

use crate::tree::{Event, EventKind};
use crate::txn::Zxid;

/// What a watch wants to see (mirrors `concord.v1.WatchRequest`, minus the stream
/// options the api handles itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchSpec {
    /// The watched node; it need not exist.
    pub path: String,
    /// Also every node below `path`.
    pub recursive: bool,
    /// The kinds wanted; empty means all.
    pub kinds: Vec<EventKind>,
    /// Fire once: deliver the first matching event, then end.
    pub once: bool,
    /// Keep `data` and `prev_data` in the events; without it they are emptied.
    pub with_data: bool,
}

impl WatchSpec {
    /// Whether `event` is one this watch wants: its path is `self.path` (or, when
    /// recursive, below it) and its kind is wanted.
    pub fn matches(&self, event: &Event) -> bool {
        self.path_matches(&event.path) && self.kind_matches(event.kind)
    }

    /// Whether an event on `path` concerns this watch. "/a" covers "/a/b" but not
    /// "/ab"; "/" covers everything.
    pub fn path_matches(&self, path: &str) -> bool {
        path == self.path || (self.recursive && is_below(path, &self.path))
    }

    /// Whether events of `kind` are wanted.
    pub fn kind_matches(&self, kind: EventKind) -> bool {
        self.kinds.is_empty() || self.kinds.contains(&kind)
    }

    /// The event as this watch delivers it: data dropped unless `with_data`.
    pub(crate) fn shape(&self, event: &Event) -> Event {
        let mut out = event.clone();
        if !self.with_data {
            out.data = bytes::Bytes::new();
            out.prev_data = bytes::Bytes::new();
        }
        out
    }

    /// The batch this watch gets for one txn, or None if nothing in it matches.
    /// With `once`, only the first matching event.
    pub(crate) fn batch_for(&self, zxid: Zxid, events: &[Event]) -> Option<WatchBatch> {
        let mut matching = events.iter().filter(|e| self.matches(e));
        let events: Vec<Event> = if self.once {
            matching.next().map(|e| self.shape(e)).into_iter().collect()
        } else {
            matching.map(|e| self.shape(e)).collect()
        };
        (!events.is_empty()).then_some(WatchBatch { zxid, events })
    }
}

/// Whether `path` is strictly below `root` (both normalized absolute paths).
fn is_below(path: &str, root: &str) -> bool {
    if root == "/" {
        return path.len() > 1 && path.starts_with('/');
    }
    path.len() > root.len() && path.starts_with(root) && path.as_bytes()[root.len()] == b'/'
}

/// Checks the watched path against the tree's path rules (it need not exist). The
/// matching relies on their shape: absolute, no empty segment, no trailing slash.
pub(crate) fn check_path(path: &str) -> Result<(), WatchError> {
    crate::tree::path::validate(path).map_err(|why| WatchError::BadPath(format!("{path:?}: {why}")))
}

/// Every path a watch indexed at could cover `path` from: `path` itself, then each
/// ancestor up to "/" ("/a/b" → "/a/b", "/a", "/").
pub(crate) fn self_and_ancestors(path: &str) -> impl Iterator<Item = &str> {
    let mut next = Some(path);
    std::iter::from_fn(move || {
        let cur = next?;
        next = match cur.rfind('/') {
            _ if cur == "/" || cur.is_empty() => None,
            Some(0) => Some("/"),
            Some(i) => Some(&cur[..i]),
            None => None,
        };
        Some(cur)
    })
}

/// All of one watch's matching events of one txn, in the order they happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchBatch {
    /// The txn's zxid.
    pub zxid: Zxid,
    /// Filtered by the spec; without `with_data`, `data` and `prev_data` are empty.
    pub events: Vec<Event>,
}

/// Why a watch could not start or had to stop.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WatchError {
    /// The history no longer reaches back to the requested zxid; resuming works only
    /// from `oldest_zxid` on (or not at all, if that is above what the client has).
    #[error("history compacted: cannot resume before zxid {oldest_zxid:#x}")]
    Compacted { oldest_zxid: Zxid },
    /// The requested zxid is ahead of what this server has published.
    #[error("zxid is ahead of this server, which has applied up to {published_zxid:#x}")]
    Future { published_zxid: Zxid },
    /// The watch's queue filled up; everything up to `last_delivered_zxid` was
    /// delivered, resume after it.
    #[error("slow consumer: cut off after zxid {last_delivered_zxid:#x}")]
    SlowConsumer { last_delivered_zxid: Zxid },
    /// This server's tree was replaced by a snapshot from the leader (it had fallen
    /// too far behind), so the txns before `snapshot_zxid` were never published
    /// here. Everything up to `last_delivered_zxid` was delivered: resume after it on
    /// a server whose history reaches back that far, or start with a snapshot.
    #[error("server resynchronized from a snapshot at zxid {snapshot_zxid:#x}; delivered up to {last_delivered_zxid:#x}")]
    Resynchronized {
        last_delivered_zxid: Zxid,
        snapshot_zxid: Zxid,
    },
    /// `replays_max` replays from storage are running already; try again later.
    #[error(
        "{replays_max} watch replays from storage are running, the most this server runs at once"
    )]
    Busy { replays_max: usize },
    /// Reading snapshots or the log failed.
    #[error("storage: {0}")]
    Storage(String),
    /// The watched path is malformed.
    #[error("bad path {0}")]
    BadPath(String),
    /// The hub is shut down.
    #[error("watch hub is shut down")]
    Closed,
}

/// Locks a std mutex, recovering the data if a holder panicked (never on input; the
/// state stays consistent because no critical section can panic midway).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
