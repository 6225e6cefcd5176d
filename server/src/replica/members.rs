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
    /// Voters (this server included) a quorum takes.
    pub quorum: usize,
    /// When the pipeline published this (None: not yet).
    pub published: Option<tokio::time::Instant>,
}

impl Progress {
    /// Whether this server, leading, heard from a quorum of voters (itself
    /// included) within the last half of `sync_limit_ticks` as of `now`, counting
    /// the time since this was published. A leader claims its quorum in
    /// `Cluster/Status` only then: voters that stopped hearing from it give up on it
    /// only after `sync_limit_ticks`, so it stops claiming before they can have
    /// elected another, rather than when the core gives up (at `sync_limit_ticks`
    /// too, after they may have).
    pub fn quorum_heard(&self, now: tokio::time::Instant) -> bool {
        if self.quorum <= 1 {
            return true;
        }
        let Some(published) = self.published else {
            return false;
        };
        let window = self.sync_limit_ticks.div_ceil(2);
        let since = now.saturating_duration_since(published).as_millis();
        let since_ticks =
            u64::try_from(since / u128::from(self.tick_ms.max(1))).unwrap_or(u64::MAX);
        let heard = self
            .learners
            .iter()
            .filter(|l| !l.observer && l.synced)
            .filter(|l| l.heard_ticks_ago.saturating_add(since_ticks) <= window)
            .count();
        1 + heard >= self.quorum
    }
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
        quorum: node.cfg.quorum(),
        published: Some(tokio::time::Instant::now()),
    };
    *lock(&shared.progress) = progress;
}

impl Replica {
    /// The members' progress as of the core's last tick.
    pub fn progress(&self) -> Progress {
        lock(&self.shared.progress).clone()
    }

    /// Whether this server leads an established epoch and heard from a quorum
    /// lately (`Progress::quorum_heard`): what `Cluster/Status` reports as
    /// `leader_serving`.
    pub fn leads_quorum(&self) -> bool {
        self.is_leader() && lock(&self.shared.progress).quorum_heard(tokio::time::Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn voter(id: u64, heard_ticks_ago: u64) -> LearnerProgress {
        LearnerProgress {
            id,
            observer: false,
            synced: true,
            zxid: 0,
            lag_txns: 0,
            heard_ticks_ago,
        }
    }

    /// Five voters, sync limit 5 ticks of 100 ms: a quorum is this leader and two
    /// voters heard within 3 ticks.
    fn five(learners: Vec<LearnerProgress>, published: tokio::time::Instant) -> Progress {
        Progress {
            learners,
            tick_ms: 100,
            sync_limit_ticks: 5,
            quorum: 3,
            published: Some(published),
            ..Progress::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_claims_its_quorum_only_while_it_hears_from_one() {
        let now = tokio::time::Instant::now();
        let heard = five(vec![voter(2, 0), voter(3, 3), voter(4, 9)], now);
        assert!(heard.quorum_heard(now));
        // Two ticks later voter 3 was last heard 5 ticks ago: no quorum any more.
        assert!(!heard.quorum_heard(now + Duration::from_millis(200)));
        assert!(!five(vec![voter(2, 0), voter(3, 4)], now).quorum_heard(now));
        let mut observer = voter(3, 0);
        observer.observer = true;
        assert!(
            !five(vec![voter(2, 0), observer], now).quorum_heard(now),
            "observers do not count"
        );
        let mut syncing = voter(3, 0);
        syncing.synced = false;
        assert!(!five(vec![voter(2, 0), syncing], now).quorum_heard(now));
        let unpublished = Progress {
            published: None,
            ..five(vec![voter(2, 0), voter(3, 0)], now)
        };
        assert!(!unpublished.quorum_heard(now));
        let alone = Progress {
            quorum: 1,
            ..Progress::default()
        };
        assert!(
            alone.quorum_heard(now),
            "an ensemble of one is its own quorum"
        );
    }
}
