//! The server-wide byte budget for watch memory: every live batch waiting in a watch's
//! queue and every catch-up chunk (from the history ring or a storage replay) held for
//! a stream is charged here, so the sum over all watches never exceeds
//! `watch_memory_bytes_max`.
//!
//! ```text
//!   queue.offer ──take(n)──▶ MemoryBudget ◀──give_back(n)── queue.pop / cut / drop
//!   feed chunk  ──Charge──▶              ◀──Charge drops (or shrinks)──
//! ```
//!
//! What it must not do: wait (a take that does not fit fails at once; the hub then
//! cuts the largest queue, see `hub.rs`), or lock (one atomic counter).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Bytes charged against a fixed maximum. Shared by the hub, every queue and feed.
#[derive(Debug)]
pub(crate) struct MemoryBudget {
    /// The cap: `used` never exceeds it.
    max: usize,
    /// Bytes charged now.
    used: AtomicUsize,
}

impl MemoryBudget {
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Arc::new(MemoryBudget {
            max,
            used: AtomicUsize::new(0),
        })
    }

    /// Charges `n` bytes if they fit under the cap; false (nothing charged) if not.
    pub(crate) fn take(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&sum| sum <= self.max)
            })
            .is_ok()
    }

    /// Returns `n` bytes taken before.
    pub(crate) fn give_back(&self, n: usize) {
        let prev = self.used.fetch_sub(n, Ordering::AcqRel);
        debug_assert!(prev >= n, "watch budget: gave back more than taken");
    }

    /// Bytes charged now.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

/// Bytes held against a budget, given back when dropped (or piece by piece).
#[derive(Debug)]
pub(crate) struct Charge {
    budget: Arc<MemoryBudget>,
    bytes: usize,
}

impl Charge {
    /// Charges `n` bytes, or None if they do not fit.
    pub(crate) fn take(budget: &Arc<MemoryBudget>, n: usize) -> Option<Charge> {
        budget.take(n).then(|| Charge {
            budget: Arc::clone(budget),
            bytes: n,
        })
    }

    /// Gives back `n` of the bytes held (at most what is held).
    pub(crate) fn shrink(&mut self, n: usize) {
        let n = n.min(self.bytes);
        self.bytes -= n;
        self.budget.give_back(n);
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.give_back(self.bytes);
    }
}
