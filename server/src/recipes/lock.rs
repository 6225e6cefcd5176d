//! Locks and semaphores: names to queues, and the reads (holders, waiters, validate).
//!
//! A lock NAME is the queue `/concord/locks/NAME`; its holders are its first
//! `permits` members (1 for a mutex). Acquire, release and fencing are the shared
//! queue ops (`queue.rs`).
//!
//! What it must not do: decide anything the tree does not decide at apply time.

use super::{RecipeError, Recipes};
use crate::tree::path;
use crate::tree::queue::{queue_path, QueueEntry, LOCKS_ROOT};
use crate::tree::TreeError;
use crate::txn::{Fence, Zxid};

/// The queue of lock `name`, or BadArguments if `name` is not one path segment.
pub fn lock_queue(name: &str) -> Result<String, RecipeError> {
    checked_queue(LOCKS_ROOT, name, "lock")
}

/// `root/name` if `name` is one valid path segment.
pub(super) fn checked_queue(root: &str, name: &str, what: &str) -> Result<String, RecipeError> {
    let queue = queue_path(root, name);
    if name.is_empty() || name.contains('/') || path::validate(&queue).is_err() {
        return Err(TreeError::BadArguments(format!(
            "{what} name \"{}\" must be one non-empty path segment",
            path::clip(name)
        ))
        .into());
    }
    Ok(queue)
}

impl Recipes {
    /// The holders of lock `name` (up to its permits) and the applied zxid.
    pub fn lock_holders(&self, name: &str) -> Result<(Zxid, Vec<QueueEntry>), RecipeError> {
        let queue = lock_queue(name)?;
        Ok(self.replica.read(|t| {
            let permits = t.queue_permits(&queue).unwrap_or(1) as usize;
            (t.last_zxid(), t.queue_entries(&queue, permits))
        }))
    }

    /// Every member of lock `name` in order, holders first, and the applied zxid.
    pub fn lock_members(&self, name: &str) -> Result<(Zxid, Vec<QueueEntry>), RecipeError> {
        let queue = lock_queue(name)?;
        Ok(self
            .replica
            .read(|t| (t.last_zxid(), t.queue_entries(&queue, 0))))
    }

    /// Whether (key, token) still holds its lock or leadership, and the applied zxid.
    pub fn validate(&self, key: &str, token: Zxid) -> (Zxid, bool) {
        let fence = Fence {
            key: key.to_string(),
            token,
        };
        self.replica
            .read(|t| (t.last_zxid(), t.fence_holds(&fence)))
    }
}
