//! How far each learner has got, as the leader knows it (`Node::learner_progress`),
//! for `Cluster/Members` and metrics. Read-only: nothing here changes the core.
//!
//! ```text
//!   leader: LearnerHandle { acked (voters), sent_up_to (observers), last_heard }
//!        ─▶ LearnerProgress { zxid, lag_txns, synced, heard_ticks_ago }
//! ```
//!
//! What it must not do: change protocol state, or allocate beyond one entry per
//! learner.

use super::leader::LearnerPhase;
use super::log::Log;
use super::message::ServerId;
use super::node::{Node, State};
use crate::txn::{zxid_counter, zxid_epoch, Zxid};

/// One learner as the leader sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LearnerProgress {
    /// The learner's server id.
    pub id: ServerId,
    /// An observer (never acks; `zxid` is what was sent to it).
    pub observer: bool,
    /// Synchronized: a voter that acked NEWLEADER, or an observer sent UPTODATE.
    pub synced: bool,
    /// A voter's newest acknowledged (durable) zxid; an observer's newest zxid sent.
    pub zxid: Zxid,
    /// Txns in the leader's history after `zxid` (approximate when `zxid` is before
    /// the leader's snapshot: the log there is gone, and the count is by zxid).
    pub lag_txns: u64,
    /// Ticks since the leader last heard from it.
    pub heard_ticks_ago: u64,
}

impl Node {
    /// Every learner registered with this leader, by id; empty unless it leads.
    pub fn learner_progress(&self) -> Vec<LearnerProgress> {
        let State::Leading(l) = &self.state else {
            return Vec::new();
        };
        l.learners
            .values()
            .map(|h| {
                let zxid = if h.observer { h.sent_up_to } else { h.acked };
                let synced = if h.observer {
                    h.phase >= LearnerPhase::UpToDate
                } else {
                    h.phase >= LearnerPhase::Synced
                };
                LearnerProgress {
                    id: h.id,
                    observer: h.observer,
                    synced,
                    zxid,
                    lag_txns: lag_txns(&self.log, zxid),
                    heard_ticks_ago: self.now.saturating_sub(h.last_heard),
                }
            })
            .collect()
    }

    /// Txns in this server's history after `zxid` (see `LearnerProgress::lag_txns`).
    pub fn lag_after(&self, zxid: Zxid) -> u64 {
        lag_txns(&self.log, zxid)
    }
}

/// Entries of `log` after `zxid`; below the snapshot point, plus the zxid counter's
/// distance to it within one epoch (one more per epoch boundary otherwise).
fn lag_txns(log: &Log, zxid: Zxid) -> u64 {
    let start = log.start();
    let in_log = log.count(zxid.max(start), Zxid::MAX) as u64;
    if zxid >= start {
        return in_log;
    }
    let before = if zxid_epoch(zxid) == zxid_epoch(start) {
        zxid_counter(start) - zxid_counter(zxid)
    } else {
        zxid_counter(start).max(1)
    };
    in_log + before
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::make_zxid;
    use crate::zab::log::tests::txn;

    #[test]
    fn lag_counts_the_log_after_a_zxid_and_estimates_before_the_snapshot() {
        let entries = (11..=15).map(|c| txn(make_zxid(2, c))).collect();
        let log = Log::restore(Some(make_zxid(2, 10)), entries).unwrap();
        assert_eq!(lag_txns(&log, make_zxid(2, 15)), 0);
        assert_eq!(lag_txns(&log, make_zxid(2, 12)), 3);
        assert_eq!(lag_txns(&log, make_zxid(2, 10)), 5);
        assert_eq!(lag_txns(&log, make_zxid(2, 4)), 11, "6 before the snapshot");
        assert!(lag_txns(&log, make_zxid(1, 99)) > 5, "an older epoch");
    }
}
