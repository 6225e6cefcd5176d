//! A learner's (follower's or observer's) side of its stream with the leader:
//! registration, sequence checks, dispatch to the phase handlers, timeouts.
//!
//! ```text
//!   Registering ─NEWEPOCH─▶ EpochAcked ─SYNC─▶ Syncing ─NEWLEADER─▶ Synced ─UPTODATE─▶ UpToDate
//!        ▲ gap / Reset / protocol error: register again (new session)
//! ```
//!
//! What it must not do: send to the leader except through `send_leader` (acks must
//! wait for durability, and the stream must stay in order).

use super::message::{LeaderMsg, LearnerMsg, Message, ServerId};
use super::node::{Node, State};
use super::stream::Inbox;

/// Where a learner is with its leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum FollowPhase {
    /// FollowerInfo sent (repeated every tick), waiting for NEWEPOCH.
    Registering,
    /// ACKEPOCH sent, waiting for the sync.
    EpochAcked,
    /// Receiving the sync history.
    Syncing,
    /// NEWLEADER acked (once durable), waiting for UPTODATE.
    Synced,
    /// Serving.
    UpToDate,
}

/// State of a following or observing server.
#[derive(Debug)]
pub(crate) struct Learner {
    pub(crate) leader: ServerId,
    pub(crate) observer: bool,
    /// The stream's session (chosen here, fresh on every registration).
    pub(crate) session: u64,
    /// The leader's messages, put back in order, each with the epoch it names
    /// (None from a leader that speaks only peer protocol 1).
    pub(crate) inbox: Inbox<(Option<u32>, LeaderMsg)>,
    /// The epoch the stream's first message named: any other is from another
    /// leadership's stream on the same session.
    pub(crate) stream_epoch: Option<u32>,
    /// Sequence number of the last message sent to the leader.
    pub(crate) seq_out: u64,
    pub(crate) phase: FollowPhase,
    /// The leader's epoch, from NEWEPOCH (0 before).
    pub(crate) epoch: u32,
    /// Tick of the last message from the leader.
    pub(crate) last_heard: u64,
    /// Tick of the registration (sync must finish by init_limit).
    pub(crate) started: u64,
}

impl Learner {
    pub(crate) fn new(leader: ServerId, session: u64, observer: bool, now: u64) -> Learner {
        Learner {
            leader,
            observer,
            session,
            inbox: Inbox::new(),
            stream_epoch: None,
            seq_out: 0,
            phase: FollowPhase::Registering,
            epoch: 0,
            last_heard: now,
            started: now,
        }
    }

    pub(crate) fn serving(&self) -> bool {
        self.phase == FollowPhase::UpToDate
    }
}

impl Node {
    /// Registers (again) with the leader.
    pub(crate) fn send_follower_info(&mut self) {
        let accepted_epoch = self.accepted_epoch;
        let State::Learning(f) = &self.state else {
            return;
        };
        let msg = Message::FollowerInfo {
            session: f.session,
            accepted_epoch,
            observer: f.observer,
        };
        let leader = f.leader;
        self.out.send(leader, msg);
    }

    /// Drops the stream and registers with the same leader on a new one.
    pub(crate) fn reregister(&mut self) {
        let session = self.new_session();
        let now = self.now;
        let State::Learning(f) = &mut self.state else {
            return;
        };
        *f = Learner::new(f.leader, session, f.observer, now);
        self.report_status();
        self.send_follower_info();
    }

    /// Sends on the stream to the leader once everything persisted so far is
    /// durable (acks vouch for durability; later messages keep their order).
    pub(crate) fn send_leader(&mut self, body: LearnerMsg) {
        let State::Learning(f) = &mut self.state else {
            return;
        };
        f.seq_out += 1;
        let msg = Message::ToLeader {
            session: f.session,
            seq: f.seq_out,
            body,
        };
        let leader = f.leader;
        if self.cfg.bug(super::PlantedBug::AckBeforeFsync) {
            self.out.send(leader, msg);
        } else {
            self.out.send_after_persist(leader, msg);
        }
    }

    /// A message on the leader's stream, naming the epoch of the leadership that
    /// opened it (None from a leader that speaks only peer protocol 1).
    pub(crate) fn on_leader_msg(
        &mut self,
        from: ServerId,
        session: u64,
        epoch: Option<u32>,
        seq: u64,
        body: LeaderMsg,
    ) {
        let now = self.now;
        let State::Learning(f) = &mut self.state else {
            return;
        };
        if f.leader != from || f.session != session {
            return;
        }
        let Ok(bodies) = f.inbox.accept(seq, (epoch, body), now) else {
            // A message was lost: the stream is broken.
            self.reregister();
            return;
        };
        f.last_heard = now;
        for (epoch, body) in bodies {
            let State::Learning(f) = &mut self.state else {
                return;
            };
            if f.session != session || self.failed {
                return; // the stream was dropped by an earlier message
            }
            if let Some(epoch) = epoch {
                if *f.stream_epoch.get_or_insert(epoch) != epoch {
                    // Two leaderships' messages on one session: the leader restarted
                    // and opened this session again while messages of its earlier
                    // stream were still coming. Neither stream can be trusted.
                    self.reregister();
                    return;
                }
            }
            self.on_leader_body(body);
        }
    }

    fn on_leader_body(&mut self, body: LeaderMsg) {
        let State::Learning(f) = &self.state else {
            return;
        };
        let phase = f.phase;
        let ok = match body {
            LeaderMsg::NewEpoch { epoch } if phase == FollowPhase::Registering => {
                self.on_new_epoch(epoch)
            }
            LeaderMsg::Sync(kind) if phase == FollowPhase::EpochAcked => self.on_sync(kind),
            LeaderMsg::Proposal { txns } if phase >= FollowPhase::Syncing => self.on_proposal(txns),
            LeaderMsg::Commit { zxid } if phase >= FollowPhase::Syncing => self.on_commit(zxid),
            LeaderMsg::NewLeader { epoch } if phase == FollowPhase::Syncing => {
                self.on_new_leader(epoch)
            }
            LeaderMsg::UpToDate { committed } if phase == FollowPhase::Synced => {
                self.on_up_to_date(committed)
            }
            LeaderMsg::Inform { txns, committed } if phase >= FollowPhase::Syncing => {
                self.on_inform(txns, committed)
            }
            LeaderMsg::Ping { round } => {
                if phase > FollowPhase::Registering {
                    let (leader, session) = (f.leader, f.session);
                    self.out.send(leader, Message::Alive { session });
                    self.send_leader(LearnerMsg::PingAck { round });
                }
                true
            }
            _ => false,
        };
        if !ok && !self.failed {
            self.reregister();
        }
    }

    pub(crate) fn on_reset(&mut self, from: ServerId, session: u64) {
        if let State::Learning(f) = &self.state {
            if f.leader == from && f.session == session {
                self.reregister();
            }
        }
    }

    pub(crate) fn tick_learner(&mut self) {
        let now = self.now;
        let State::Learning(f) = &self.state else {
            return;
        };
        // Until the leader first answers, it may still be finishing its own
        // election: give it twice as long (a dead one costs no more than that).
        let patience = if f.phase == FollowPhase::Registering {
            2 * self.cfg.sync_limit_ticks
        } else {
            self.cfg.sync_limit_ticks
        };
        let silent = now.saturating_sub(f.last_heard) > patience;
        let slow = f.phase < FollowPhase::UpToDate
            && now.saturating_sub(f.started) > self.cfg.init_limit_ticks;
        if silent || slow {
            let leader = f.leader;
            self.shun(leader);
            self.enter_looking();
            return;
        }
        if f.inbox.check(now).is_err() {
            self.reregister();
            return;
        }
        if f.phase == FollowPhase::Registering {
            self.send_follower_info();
        }
    }

    pub(crate) fn set_learner_phase(&mut self, phase: FollowPhase) {
        if let State::Learning(f) = &mut self.state {
            f.phase = phase;
        }
        self.report_status();
    }
}
