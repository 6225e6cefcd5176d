//! Locks, semaphores and elections on top of the tree's queues (`tree::queue`).
//!
//! Everything that decides (who holds, whether a fence holds, adoption of a retried
//! join) happens in queue txns applied in zxid order; this module only submits those
//! txns and waits, in the server, for a member to become a holder:
//!
//! ```text
//!   acquire ─submit Join─▶ node K (token = czxid)
//!      loop: read tree at zxid z ─▶ holder? ──yes──▶ Holding{K, token}
//!                 │ no: window = the `permits` nearest predecessors of K
//!                 ▼
//!            watch Deleted on window paths and on K, from z (no race)
//!            window node deleted ─▶ wake-up (counted) ─▶ loop
//!            K deleted           ─▶ Lost (session expired or released)
//!   drop before holding (timeout, cancelled call) ─▶ submit Leave(K)
//! ```
//!
//! With one permit the window is the predecessor only, so one release wakes exactly
//! one waiter; with `permits` = N a deletion wakes at most N waiters.
//!
//! What it must not do: speak gRPC, or decide anything from local state alone.

mod election;
mod lock;
mod queue;

pub use election::{election_queue, Observer};
pub use lock::lock_queue;
pub use queue::{Holding, JoinSpec, Needs};

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::replica::{Replica, ReplicaError};
use crate::tree::TreeError;
use crate::txn::Zxid;
use crate::watch::WatchError;

/// Why a recipe call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecipeError {
    /// A queue txn failed deterministically (NoNode, Fenced, LockHeld, ...).
    #[error(transparent)]
    Tree(#[from] TreeError),
    #[error(transparent)]
    Replica(#[from] ReplicaError),
    /// The wait ran out of time; the member's node was removed.
    #[error("not a holder after {timeout_ms} ms; left the queue")]
    Timeout { timeout_ms: u64 },
    /// The member's node went away while it waited: its session expired (or was
    /// closed), or someone released it.
    #[error(
        "{} left the queue while waiting (session {session_id} expired: {expired})",
        crate::tree::path::clip(.key)
    )]
    Lost {
        key: String,
        session_id: u64,
        expired: bool,
    },
    /// The server could not watch the queue.
    #[error("watch: {0}")]
    Watch(#[from] WatchError),
    /// The caller lost a permission the write needs (checked when it was proposed).
    #[error("no {} permission on {}", .0.missing.names(), crate::tree::path::clip(&.0.path))]
    Denied(crate::security::Denied),
    /// A result of the wrong kind: a server bug.
    #[error("unexpected result: {0}")]
    Unexpected(String),
}

/// Shared state of the lock and election services. Cheap to clone.
#[derive(Clone)]
pub struct Recipes {
    replica: Replica,
    shared: Arc<Shared>,
}

struct Shared {
    /// Waiters woken by the removal of a node in their window.
    wakeups: AtomicU64,
    /// Calls currently waiting on each member node, and whether one of them has
    /// returned it as held: a cancelled call removes the node only if it was the last
    /// caller waiting on it and nobody was handed the node yet (retries adopt nodes).
    attached: Mutex<HashMap<String, Attached>>,
}

#[derive(Debug, Default)]
struct Attached {
    calls: usize,
    held: bool,
}

impl Recipes {
    pub fn new(replica: Replica) -> Self {
        Recipes {
            replica,
            shared: Arc::new(Shared {
                wakeups: AtomicU64::new(0),
                attached: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// How many times a waiter was woken by a predecessor's removal, since start.
    pub fn wakeups(&self) -> u64 {
        self.shared.wakeups.load(Ordering::Relaxed)
    }

    /// The replica the recipes run on.
    pub fn replica(&self) -> &Replica {
        &self.replica
    }

    /// The newest applied zxid (for response headers).
    pub fn applied_zxid(&self) -> Zxid {
        self.replica.applied_zxid()
    }
}

impl Shared {
    fn attach(&self, key: &str) {
        crate::watch::lock(&self.attached)
            .entry(key.to_string())
            .or_default()
            .calls += 1;
    }

    /// Ends one call's wait on `key`; `held` if it returned the node as held.
    /// Returns whether the node should now be removed.
    fn detach(&self, key: &str, held: bool) -> bool {
        let mut map = crate::watch::lock(&self.attached);
        let Some(entry) = map.get_mut(key) else {
            return !held;
        };
        entry.calls = entry.calls.saturating_sub(1);
        entry.held |= held;
        let remove = entry.calls == 0 && !entry.held;
        if entry.calls == 0 {
            map.remove(key);
        }
        remove
    }
}
