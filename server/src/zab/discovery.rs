//! Discovery: the leader learns a quorum's accepted epochs, picks a new epoch above
//! them all, and gets a quorum to accept it durably (ACKEPOCH). A learner accepts
//! only a strictly newer epoch; one it already accepted it acks with
//! `counts: false`, so no epoch is ever acked twice by one server (two leaders can
//! never both gather a quorum for the same epoch).
//!
//! ```text
//!   learner ──FollowerInfo(accepted)──▶ leader   (quorum) epoch = max(accepted)+1, persist
//!   learner ◀──NEWEPOCH(epoch)──────── leader
//!   learner: persist accepted ──ACKEPOCH(epoch, current, last_zxid, counts)──▶ leader
//!   leader: quorum of counting acks of this epoch, none newer than itself
//!           ──▶ persist current ──▶ sync
//! ```
//!
//! What it must not do: let the leader count itself before its epoch is durable, or
//! count an ack that answered another epoch's NEWEPOCH.

use super::leader::{LeaderPhase, LearnerHandle, LearnerPhase};
use super::learner::FollowPhase;
use super::message::{LeaderMsg, LearnerMsg, Message, ServerId};
use super::node::{Node, State, SESSIONS_REMEMBERED};
use super::PlantedBug;
use crate::txn::EPOCH_MAX;

impl Node {
    /// Just became leader: report my own accepted epoch.
    pub(crate) fn leader_started(&mut self) {
        let (id, accepted) = (self.cfg.id, self.accepted_epoch);
        if let State::Leading(l) = &mut self.state {
            l.infos.insert(id, accepted);
        }
        self.maybe_choose_epoch();
    }

    pub(crate) fn on_follower_info(
        &mut self,
        from: ServerId,
        session: u64,
        accepted_epoch: u32,
        observer: bool,
    ) {
        let now = self.now;
        let is_voter = self.cfg.is_voter(from);
        let State::Leading(l) = &mut self.state else {
            return;
        };
        if observer == is_voter {
            return; // misconfigured peer
        }
        if l.learners.get(&from).is_some_and(|h| h.session == session) {
            return; // a repeat
        }
        if self
            .opened_sessions
            .get(&from)
            .is_some_and(|o| o.contains(&session))
        {
            // Its stream was dropped (or belonged to an earlier leadership of mine):
            // never open it again, the learner registers anew.
            self.out.send(from, Message::Reset { session });
            return;
        }
        if is_voter && l.epoch != 0 && accepted_epoch > l.epoch {
            // It promised a newer epoch to someone else and can never follow mine:
            // step down so the next epoch is above its promise.
            self.epoch_floor = self.epoch_floor.max(accepted_epoch);
            self.enter_looking();
            return;
        }
        let opened = self.opened_sessions.entry(from).or_default();
        if opened.len() >= SESSIONS_REMEMBERED {
            opened.pop_front();
        }
        opened.push_back(session);
        let mut handle = LearnerHandle::new(from, session, observer, now);
        if l.epoch != 0 {
            handle.send(&mut self.out, LeaderMsg::NewEpoch { epoch: l.epoch });
            handle.phase = LearnerPhase::EpochSent;
        } else if is_voter {
            l.infos.insert(from, accepted_epoch);
        }
        l.learners.insert(from, handle);
        self.maybe_choose_epoch();
    }

    /// Once a quorum of voters reported, picks the new epoch and proposes it.
    fn maybe_choose_epoch(&mut self) {
        let quorum = self.cfg.quorum();
        let State::Leading(l) = &mut self.state else {
            return;
        };
        if l.phase != LeaderPhase::Discovery || l.infos.len() < quorum {
            return;
        }
        let highest = l.infos.values().copied().max().unwrap_or(0);
        let highest = highest.max(self.accepted_epoch).max(self.epoch_floor);
        if highest >= EPOCH_MAX {
            self.fail("epoch space exhausted".into());
            return;
        }
        let epoch = highest + 1;
        l.epoch = epoch;
        l.phase = LeaderPhase::EpochProposed;
        for h in l.learners.values_mut() {
            h.send(&mut self.out, LeaderMsg::NewEpoch { epoch });
            h.phase = LearnerPhase::EpochSent;
        }
        self.persist_accepted_epoch(epoch);
        self.report_status();
        self.check_epoch_quorum();
    }

    /// An ACKEPOCH from a learner, naming the epoch it accepted (None from a
    /// learner that speaks only peer protocol 1).
    pub(crate) fn on_ack_epoch(
        &mut self,
        from: ServerId,
        epoch: Option<u32>,
        current_epoch: u32,
        last_zxid: u64,
        counts: bool,
    ) {
        let mine = (self.current_epoch, self.log.last_zxid());
        let is_voter = self.cfg.is_voter(from);
        let State::Leading(l) = &mut self.state else {
            return;
        };
        let Some(h) = l.learners.get_mut(&from) else {
            return;
        };
        if h.phase != LearnerPhase::EpochSent {
            return;
        }
        if epoch.is_some_and(|e| e != l.epoch) {
            // An answer to another NEWEPOCH than mine: one this server sent on the
            // same stream before it restarted, held in the network meanwhile.
            return;
        }
        h.phase = LearnerPhase::EpochAcked;
        h.peer_last = last_zxid;
        let phase = l.phase;
        if counts && is_voter && phase == LeaderPhase::EpochProposed {
            if (current_epoch, last_zxid) > mine {
                // A quorum member knows a newer history: I must not lead.
                self.enter_looking();
                return;
            }
            l.epoch_acks.insert(from);
            self.check_epoch_quorum();
        } else if phase >= LeaderPhase::Syncing {
            self.start_sync(from);
        }
    }

    /// Once a quorum accepted the epoch (me included, durably): make it current and
    /// synchronize everyone who acked.
    pub(crate) fn check_epoch_quorum(&mut self) {
        let quorum = self.cfg.quorum();
        let durable_accepted = self.durable.accepted_epoch;
        let State::Leading(l) = &mut self.state else {
            return;
        };
        if l.phase != LeaderPhase::EpochProposed || durable_accepted < l.epoch {
            return;
        }
        if 1 + l.epoch_acks.len() < quorum {
            return;
        }
        l.phase = LeaderPhase::Syncing;
        let epoch = l.epoch;
        let ready: Vec<ServerId> = l
            .learners
            .values()
            .filter(|h| h.phase == LearnerPhase::EpochAcked)
            .map(|h| h.id)
            .collect();
        self.persist_current_epoch(epoch);
        for id in ready {
            self.start_sync(id);
        }
        self.check_newleader_quorum();
    }

    /// Learner: NEWEPOCH from the leader I registered with.
    pub(crate) fn on_new_epoch(&mut self, epoch: u32) -> bool {
        // Observers never vote, so they promise nothing and their ack never counts;
        // but neither follows a leader of an epoch older than the history it has
        // (one paused or cut off while later epochs went on would TRUNC what it
        // applied since).
        let observer = matches!(&self.state, State::Learning(f) if f.observer);
        let floor = if observer {
            self.current_epoch
        } else {
            self.accepted_epoch
        };
        if epoch < floor {
            // That leader is behind what I promised or follow already: elect again.
            self.enter_looking();
            return true;
        }
        // A server that must resync promises nothing either: its ack must not help a
        // leader whose history lacks what this server acknowledged before.
        let counts = !observer && !self.resyncing && epoch > self.accepted_epoch;
        if counts {
            self.persist_accepted_epoch(epoch);
        }
        if let State::Learning(f) = &mut self.state {
            f.epoch = epoch;
        }
        self.set_learner_phase(FollowPhase::EpochAcked);
        let ack = LearnerMsg::AckEpoch {
            epoch,
            current_epoch: self.current_epoch,
            last_zxid: self.log.last_zxid(),
            counts,
        };
        self.send_leader(ack);
        true
    }

    /// Newly durable state may complete a quorum the leader counts itself in.
    pub(crate) fn leader_after_durable(&mut self) {
        self.check_epoch_quorum();
        self.check_newleader_quorum();
        self.try_commit();
    }

    /// Whether the leader may count itself as acking everything up to `zxid`.
    pub(crate) fn self_durable_at(&self, zxid: u64) -> bool {
        self.cfg.bug(PlantedBug::AckBeforeFsync) || self.durable.log_zxid >= zxid
    }
}
