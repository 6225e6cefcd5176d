//! What this server knows of the ensemble's members' progress, for
//! `Cluster/Members`: the pipeline publishes the core's view every tick
//! (`publish`), and `Replica::progress` hands out a copy.
//!
//! ```text
//!   pipeline tick ─▶ node.learner_progress(), node.last_zxid() ─▶ Shared::progress
//!   api (Members) ◀─ Replica::progress() ─┘
//! ```
//!
//! What it must not do: hold the lock while doing anything but a copy.

use super::{lock, Replica, Shared};
use crate::txn::Zxid;
use crate::zab::{LearnerProgress, Node};

/// The core's view of progress at its last tick.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    /// Every learner of this leader (empty unless it leads).
    pub learners: Vec<LearnerProgress>,
    /// The newest zxid in this server's history (proposed on a leader, received on
    /// a learner).
    pub last_zxid: Zxid,
    /// Txns in this server's history after what it has applied.
    pub own_lag_txns: u64,
    /// Milliseconds per tick, to turn `heard_ticks_ago` into time.
    pub tick_ms: u64,
    /// A learner not heard from for this many ticks is given up on by the core.
    pub sync_limit_ticks: u64,
}

/// Records the core's view (called by the pipeline every tick).
pub(super) fn publish(shared: &Shared, node: &Node) {
    let applied = *shared.applied.borrow();
    let progress = Progress {
        learners: node.learner_progress(),
        last_zxid: node.last_zxid(),
        own_lag_txns: node.lag_after(applied),
        tick_ms: shared.tick_ms,
        sync_limit_ticks: node.cfg.sync_limit_ticks,
    };
    *lock(&shared.progress) = progress;
}

impl Replica {
    /// The members' progress as of the core's last tick.
    pub fn progress(&self) -> Progress {
        lock(&self.shared.progress).clone()
    }
}
