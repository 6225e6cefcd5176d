//! Broadcast: an established leader stamps proposals, sends them (batched) on every
//! follower's stream, commits in zxid order once a quorum acked durably, and tells
//! observers with INFORM. Also the leader's stream intake, heartbeats, quorum
//! checks (a leader that cannot count a quorum heard from within sync_limit steps
//! down at once) and the read index.
//!
//! ```text
//!   propose ─▶ log + persist ─▶ PROPOSAL ─▶ followers ─(durable)─▶ ACK ─▶ quorum? ─▶ COMMIT / INFORM
//!   read_index(id) ─▶ note commit point, PING(round) ─▶ quorum of PINGACK ≥ round ─▶ ReadState
//! ```
//!
//! What it must not do: commit a zxid of an older epoch by counting acks (older
//! history is committed only by establishment), or count acks of unsynced learners.

use super::leader::{LeaderPhase, LearnerPhase, PendingRead};
use super::message::{LeaderMsg, LearnerMsg, Message, ServerId};
use super::node::{Node, State};
use super::ready::ReadState;
use super::{PlantedBug, ZabError};
use crate::txn::{make_zxid, zxid_epoch, Txn, Zxid, ZXID_COUNTER_MAX};

impl Node {
    /// The leader to forward to, for NotLeader.
    fn leader_hint(&self) -> Option<ServerId> {
        match &self.state {
            State::Learning(f) => Some(f.leader),
            _ => None,
        }
    }

    pub(crate) fn propose_txn(&mut self, mut txn: Txn) -> Result<Zxid, ZabError> {
        let hint = self.leader_hint();
        let State::Leading(l) = &mut self.state else {
            return Err(ZabError::NotLeader { hint });
        };
        if !l.serving() || self.failed {
            return Err(ZabError::NotLeader { hint: None });
        }
        if l.counter >= ZXID_COUNTER_MAX {
            self.enter_looking();
            return Err(ZabError::EpochExhausted);
        }
        l.counter += 1;
        txn.zxid = make_zxid(l.epoch, l.counter);
        l.unsent.push(txn.clone());
        let zxid = txn.zxid;
        self.append(vec![txn]);
        Ok(zxid)
    }

    /// Sends the proposals made since the last flush to every forwarding follower.
    pub(crate) fn flush_proposals(&mut self) {
        let State::Leading(l) = &mut self.state else {
            return;
        };
        if l.unsent.is_empty() {
            return;
        }
        let txns = std::mem::take(&mut l.unsent);
        for h in l.learners.values_mut() {
            if h.forwarding() && !h.observer {
                h.send(&mut self.out, LeaderMsg::Proposal { txns: txns.clone() });
            }
        }
    }

    /// Leader: a message on a learner's stream.
    pub(crate) fn on_learner_msg(
        &mut self,
        from: ServerId,
        session: u64,
        seq: u64,
        body: LearnerMsg,
    ) {
        let now = self.now;
        let State::Leading(l) = &mut self.state else {
            return;
        };
        let known = l.learners.get(&from).is_some_and(|h| h.session == session);
        if !known {
            self.out.send(from, Message::Reset { session });
            return;
        }
        let Some(h) = l.learners.get_mut(&from) else {
            return;
        };
        let Ok(bodies) = h.inbox.accept(seq, body, now) else {
            l.learners.remove(&from);
            self.out.send(from, Message::Reset { session });
            return;
        };
        h.last_heard = now;
        for body in bodies {
            self.on_learner_body(from, session, body);
        }
    }

    /// Leader: a learner heard a `Ping` on its stream `session`, whatever its log
    /// still has to make durable: it counts as heard from (its stream's sequence is
    /// not touched).
    pub(crate) fn on_alive(&mut self, from: ServerId, session: u64) {
        let now = self.now;
        let State::Leading(l) = &mut self.state else {
            return;
        };
        if let Some(h) = l.learners.get_mut(&from).filter(|h| h.session == session) {
            h.last_heard = now;
        }
    }

    fn on_learner_body(&mut self, from: ServerId, session: u64, body: LearnerMsg) {
        let State::Leading(l) = &mut self.state else {
            return;
        };
        let Some(h) = l.learners.get_mut(&from).filter(|h| h.session == session) else {
            return;
        };
        match body {
            LearnerMsg::AckEpoch {
                epoch,
                current_epoch,
                last_zxid,
                counts,
            } => self.on_ack_epoch(from, Some(epoch), current_epoch, last_zxid, counts),
            LearnerMsg::AckEpochV1 {
                current_epoch,
                last_zxid,
                counts,
            } => self.on_ack_epoch(from, None, current_epoch, last_zxid, counts),
            LearnerMsg::AckNewLeader { epoch } => self.on_ack_new_leader(from, epoch),
            LearnerMsg::Ack { zxid } => {
                if h.voting() {
                    h.acked = h.acked.max(zxid);
                    self.try_commit();
                }
            }
            LearnerMsg::PingAck { round } => {
                h.ping_acked = h.ping_acked.max(round);
                self.check_reads();
            }
        }
    }

    /// Commits the highest zxid of this epoch a quorum has durably.
    pub(crate) fn try_commit(&mut self) {
        let quorum = if self.cfg.bug(PlantedBug::CommitWithoutQuorum) {
            1
        } else {
            self.cfg.quorum()
        };
        let last = self.log.last_zxid();
        let mine = if self.self_durable_at(last) {
            last
        } else {
            self.durable.log_zxid
        };
        let State::Leading(l) = &self.state else {
            return;
        };
        if l.phase != LeaderPhase::Broadcast {
            return;
        }
        let mut acks: Vec<Zxid> = l
            .learners
            .values()
            .filter(|h| h.voting())
            .map(|h| h.acked)
            .collect();
        acks.push(mine);
        acks.sort_unstable_by(|a, b| b.cmp(a));
        let Some(&candidate) = acks.get(quorum - 1) else {
            return;
        };
        if candidate > self.committed && zxid_epoch(candidate) == l.epoch {
            self.commit(candidate.min(last));
        }
    }

    /// Records `zxid` as committed and tells followers and observers.
    pub(crate) fn commit(&mut self, zxid: Zxid) {
        if zxid <= self.committed {
            return;
        }
        self.flush_proposals();
        self.committed = zxid;
        if let State::Leading(l) = &mut self.state {
            for h in l.learners.values_mut() {
                if !h.forwarding() {
                    continue;
                }
                if h.observer {
                    let txns = self.log.range(h.sent_up_to, zxid).cloned().collect();
                    h.sent_up_to = h.sent_up_to.max(zxid);
                    h.send(
                        &mut self.out,
                        LeaderMsg::Inform {
                            txns,
                            committed: zxid,
                        },
                    );
                } else {
                    h.send(&mut self.out, LeaderMsg::Commit { zxid });
                }
            }
        }
        self.release_committed();
    }

    pub(crate) fn tick_leader(&mut self) {
        let now = self.now;
        let quorum = self.cfg.quorum();
        let (sync_limit, init_limit) = (self.cfg.sync_limit_ticks, self.cfg.init_limit_ticks);
        let State::Leading(l) = &mut self.state else {
            return;
        };
        if l.phase != LeaderPhase::Broadcast {
            if now.saturating_sub(l.started) > init_limit {
                self.enter_looking();
                return;
            }
        } else {
            let alive = 1 + l
                .learners
                .values()
                .filter(|h| h.voting() && now.saturating_sub(h.last_heard) <= sync_limit)
                .count();
            if alive < quorum {
                self.enter_looking();
                return;
            }
        }
        let broken: Vec<(ServerId, u64)> = l
            .learners
            .values()
            .filter(|h| h.inbox.check(now).is_err())
            .map(|h| (h.id, h.session))
            .collect();
        for (id, session) in broken {
            l.learners.remove(&id);
            self.out.send(id, Message::Reset { session });
        }
        l.ping_round += 1;
        let round = l.ping_round;
        for h in l.learners.values_mut() {
            if h.phase > LearnerPhase::Registered {
                h.send(&mut self.out, LeaderMsg::Ping { round });
            }
        }
        self.check_reads();
    }

    /// Leader: starts a read-index confirmation round.
    pub(crate) fn request_read(&mut self, id: u64) -> Result<(), ZabError> {
        let hint = self.leader_hint();
        let committed = self.committed;
        let State::Leading(l) = &mut self.state else {
            return Err(ZabError::NotLeader { hint });
        };
        if !l.serving() || self.failed {
            return Err(ZabError::NotLeader { hint: None });
        }
        l.ping_round += 1;
        let round = l.ping_round;
        l.reads.push(PendingRead {
            id,
            zxid: committed,
            round,
        });
        for h in l.learners.values_mut() {
            if h.voting() {
                h.send(&mut self.out, LeaderMsg::Ping { round });
            }
        }
        self.check_reads();
        Ok(())
    }

    /// Answers reads whose round a quorum acknowledged.
    fn check_reads(&mut self) {
        let quorum = self.cfg.quorum();
        let State::Leading(l) = &mut self.state else {
            return;
        };
        if l.reads.is_empty() {
            return;
        }
        let mut rounds: Vec<u64> = l
            .learners
            .values()
            .filter(|h| h.voting())
            .map(|h| h.ping_acked)
            .collect();
        rounds.push(u64::MAX);
        rounds.sort_unstable_by(|a, b| b.cmp(a));
        let Some(&confirmed) = rounds.get(quorum - 1) else {
            return;
        };
        let (done, waiting): (Vec<PendingRead>, Vec<PendingRead>) =
            l.reads.drain(..).partition(|r| r.round <= confirmed);
        l.reads = waiting;
        let answers = done.into_iter().map(|r| ReadState {
            id: r.id,
            result: Ok(r.zxid),
        });
        self.out.building().reads.extend(answers);
    }
}
