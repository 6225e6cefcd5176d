//! Synchronization: the leader brings each learner's history in line with its own
//! (DIFF, TRUNC or SNAP, then the missing proposals, the commit point and NEWLEADER);
//! a quorum of durable NEWLEADER acks establishes the leader, whose whole history
//! is then committed, and UPTODATE tells learners to serve.
//!
//! Choosing the sync (ZooKeeper's rule): let t be the newest zxid of the leader's
//! history at or below the learner's last zxid. If t is the learner's last: DIFF.
//! If the learner has more: TRUNC to t (those extra entries were never committed,
//! or the leader, which holds every committed txn, would have them). If the
//! learner's last is below the leader's snapshot: SNAP.
//!
//! What it must not do: let a learner's acks count before its NEWLEADER ack, or
//! establish the leader before its own epoch and history are durable.

use bytes::Bytes;

use super::leader::{LeaderPhase, LearnerPhase};
use super::learner::FollowPhase;
use super::log::Snapshot;
use super::message::{LeaderMsg, LearnerMsg, ServerId, SyncKind};
use super::node::{Node, State};
use super::ready::PersistOp;
use crate::txn::{Txn, Zxid};

impl Node {
    /// Sends the sync stream to one learner (it acked the epoch, which is established).
    pub(crate) fn start_sync(&mut self, id: ServerId) {
        self.flush_proposals();
        let last = self.log.last_zxid();
        let committed = self.committed;
        let batch_max = self.cfg.sync_batch_txns_max.max(1);
        let State::Leading(l) = &mut self.state else {
            return;
        };
        let epoch = l.epoch;
        let Some(h) = l.learners.get_mut(&id) else {
            return;
        };
        let (kind, from) = match (self.log.floor(h.peer_last), self.log.snapshot()) {
            (Some(t), _) if t == h.peer_last => (SyncKind::Diff { from: t }, t),
            (Some(t), _) => (SyncKind::Trunc { to: t }, t),
            // The bytes are in storage: the transport reads them as it sends.
            (None, Some(zxid)) => (
                SyncKind::Snap {
                    zxid,
                    data: Bytes::new(),
                },
                zxid,
            ),
            (None, None) => (SyncKind::Diff { from: 0 }, 0),
        };
        h.send(&mut self.out, LeaderMsg::Sync(kind));
        let mut entries = self.log.range(from, last).peekable();
        while entries.peek().is_some() {
            let txns = entries.by_ref().take(batch_max).cloned().collect();
            h.send(&mut self.out, LeaderMsg::Proposal { txns });
        }
        if committed > 0 {
            h.send(&mut self.out, LeaderMsg::Commit { zxid: committed });
        }
        h.send(&mut self.out, LeaderMsg::NewLeader { epoch });
        h.phase = LearnerPhase::Syncing;
        h.sync_last = last;
        h.sent_up_to = last;
    }

    /// A NEWLEADER ack: the learner holds my history (as of its sync) durably.
    pub(crate) fn on_ack_new_leader(&mut self, from: ServerId, epoch: u32) {
        let committed = self.committed;
        let is_voter = self.cfg.is_voter(from);
        let State::Leading(l) = &mut self.state else {
            return;
        };
        let Some(h) = l.learners.get_mut(&from) else {
            return;
        };
        if epoch != l.epoch || h.phase != LearnerPhase::Syncing {
            return;
        }
        h.phase = LearnerPhase::Synced;
        h.acked = h.acked.max(h.sync_last);
        if l.phase == LeaderPhase::Broadcast {
            h.send(&mut self.out, LeaderMsg::UpToDate { committed });
            h.phase = LearnerPhase::UpToDate;
            self.try_commit();
            return;
        }
        if is_voter {
            l.newleader_acks.insert(from);
        }
        self.check_newleader_quorum();
    }

    /// Once a quorum acked NEWLEADER (me included, durably): establish the epoch.
    pub(crate) fn check_newleader_quorum(&mut self) {
        let quorum = self.cfg.quorum();
        let last = self.log.last_zxid();
        let me_ok = self.self_durable_at(last)
            && self.durable.current_epoch >= self.current_epoch
            && self.durable.accepted_epoch >= self.current_epoch;
        let State::Leading(l) = &mut self.state else {
            return;
        };
        if l.phase != LeaderPhase::Syncing || !me_ok || 1 + l.newleader_acks.len() < quorum {
            return;
        }
        l.phase = LeaderPhase::Broadcast;
        self.shunned.clear();
        let now = self.now;
        for h in l.learners.values_mut() {
            h.last_heard = h.last_heard.max(now);
        }
        // The whole history is now on a quorum: it is committed.
        self.commit(last);
        let committed = self.committed;
        if let State::Leading(l) = &mut self.state {
            for h in l.learners.values_mut() {
                if h.phase == LearnerPhase::Synced {
                    h.send(&mut self.out, LeaderMsg::UpToDate { committed });
                    h.phase = LearnerPhase::UpToDate;
                }
            }
        }
        self.report_status();
    }

    /// Learner: how the sync starts.
    pub(crate) fn on_sync(&mut self, kind: SyncKind) -> bool {
        let ok = match kind {
            SyncKind::Diff { from } => self.log.last_zxid() == from,
            SyncKind::Trunc { to } => self.log.contains(to) && self.truncate(to),
            SyncKind::Snap { zxid, data } => self.install_snapshot(Snapshot { zxid, data }),
        };
        if ok {
            self.set_learner_phase(FollowPhase::Syncing);
        }
        ok
    }

    /// Learner: proposals (sync history or broadcast).
    pub(crate) fn on_proposal(&mut self, txns: Vec<Txn>) -> bool {
        self.append(txns);
        let acking = matches!(&self.state, State::Learning(f) if f.phase >= FollowPhase::Synced && !f.observer);
        if acking {
            let zxid = self.log.last_zxid();
            self.send_leader(LearnerMsg::Ack { zxid });
        }
        true
    }

    /// Learner: everything up to `zxid` is committed.
    pub(crate) fn on_commit(&mut self, zxid: Zxid) -> bool {
        self.committed = self.committed.max(zxid.min(self.log.last_zxid()));
        self.release_committed();
        true
    }

    /// Learner: the sync is complete; ack once history and epoch are durable.
    pub(crate) fn on_new_leader(&mut self, epoch: u32) -> bool {
        let State::Learning(f) = &self.state else {
            return false;
        };
        if epoch != f.epoch {
            return false;
        }
        self.persist_current_epoch(epoch);
        self.set_learner_phase(FollowPhase::Synced);
        self.send_leader(LearnerMsg::AckNewLeader { epoch });
        true
    }

    /// Learner: the leader is established; serve. A server that had to resync now
    /// holds that leader's history durably (NEWLEADER was acked after it was): it
    /// votes again.
    pub(crate) fn on_up_to_date(&mut self, committed: Zxid) -> bool {
        if self.resyncing {
            self.resyncing = false;
            self.persist(PersistOp::Resynced);
        }
        self.on_commit(committed);
        self.set_learner_phase(FollowPhase::UpToDate);
        self.shunned.clear();
        true
    }

    /// Observer: committed txns.
    pub(crate) fn on_inform(&mut self, txns: Vec<Txn>, committed: Zxid) -> bool {
        self.append(txns);
        self.on_commit(committed)
    }
}
