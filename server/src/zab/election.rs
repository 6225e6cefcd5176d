//! Fast leader election (ZooKeeper's FLE) on votes (current_epoch, last_zxid, id).
//!
//! A looking voter proposes itself, adopts better votes of its round, jumps to
//! higher rounds, and decides when a quorum of voters agrees with its vote and no
//! better vote came for `finalize_ticks` (at once when every voter agrees). Servers
//! already following or leading answer with the vote they decided; a looker (voter
//! or observer) joins the leader a quorum of them names (a voter's own vote of the
//! round counting), if that leader itself says it leads, and a looker that a quorum
//! (with itself) has decided on leads. A learner still registering with the leader
//! it chose registers again when that leader says it leads (its first FollowerInfo
//! may have come while the leader was still looking). So after a leader dies the
//! survivors have a new one as soon as the first of them finalizes its vote.
//! Notifications are re-sent with randomised exponential back-off.
//!
//! A voter that must resync (its history was discarded) abstains: it sends the
//! lowest vote, (0, 0, 0), which no server adopts or agrees with, counts no votes,
//! never leads, does not report a decided vote to lookers, and only joins a leader
//! that a quorum of decided voters reports (as observers do).
//!
//! Shunned leaders: a learner that gives up on its leader (silent for
//! `sync_limit_ticks`, not synced within `init_limit_ticks`, its stream lost, or
//! saying it does not lead) ranks every vote for that leader below every other
//! vote, its own included, until it syncs with some leader or leads, or
//! `SHUN_SYNC_LIMITS` sync limits pass (then it votes afresh in a new round, so that
//! the servers, whose shuns differ meanwhile and may keep any vote from a quorum,
//! agree on one order again). So a candidate with the best vote that a quorum
//! cannot reach (it hears a quorum's votes through a server in the middle, but the
//! quorum never hears from it) stops winning once its would-be followers have timed
//! out on it, and the servers that can reach each other elect one of their own. A
//! quorum that follows a shunned leader is still joined (`on_decided_vote`): what
//! was shunned is this server's path to it, not its leadership.
//!
//! What it must not do: decide safety; any leader it picks still has to win
//! discovery (a quorum of epoch acks, none with a newer history).

use std::collections::{BTreeMap, BTreeSet};

use super::leader::{Leader, LeaderPhase};
use super::learner::{FollowPhase, Learner};
use super::message::{Message, Notification, PeerState, ServerId, Vote};
use super::node::{Node, State};

/// How long a shunned leader stays shunned, in sync limits: long enough for the
/// others to elect a leader they all reach; bounded, so that no set of shuns can
/// keep an ensemble from ever electing one.
const SHUN_SYNC_LIMITS: u64 = 4;

/// Election state of a looking server.
#[derive(Debug, Default)]
pub(crate) struct Looking {
    /// This server's current proposal (voters only).
    vote: Vote,
    /// Votes of voters in this round (looking, or already decided in it).
    votes: BTreeMap<ServerId, Vote>,
    /// Voters of this round sent my vote in answer to a worse one (once each).
    answered: BTreeSet<ServerId>,
    /// Votes reported by servers already following or leading: (vote with the
    /// leadership's epoch, round, state).
    decided: BTreeMap<ServerId, (Vote, u64, PeerState)>,
    /// When to decide, once a quorum agrees with `vote`.
    finalize_at: Option<u64>,
    /// When to re-send notifications next.
    resend_at: u64,
    /// The current re-send interval (doubles up to the max).
    resend_ticks: u64,
}

impl Node {
    /// This server's own vote: its history's recency and its id; the abstaining
    /// lowest vote while it must resync.
    fn own_vote(&self) -> Vote {
        if self.resyncing {
            return Vote::default();
        }
        Vote {
            epoch: self.current_epoch,
            zxid: self.log.last_zxid(),
            leader: self.cfg.id,
        }
    }

    /// Gives up on `leader` for a while (module docs, "Shunned leaders").
    pub(crate) fn shun(&mut self, leader: ServerId) {
        if leader != self.cfg.id {
            let until = self.now + SHUN_SYNC_LIMITS * self.cfg.sync_limit_ticks.max(1);
            self.shunned.insert(leader, until);
        }
    }

    /// Starts a new election round (from start-up, or after leading or following).
    pub(crate) fn enter_looking(&mut self) {
        if let State::Leading(leader) = &mut self.state {
            let reads = leader.fail_reads();
            self.out.building().reads.extend(reads);
        }
        self.round += 1;
        let vote = self.own_vote();
        self.state = State::Looking(Looking {
            vote,
            resend_ticks: self.cfg.election_resend_ticks.max(1),
            resend_at: self.now + self.cfg.election_resend_ticks.max(1),
            ..Looking::default()
        });
        self.report_status();
        self.broadcast_vote();
        self.check_votes();
    }

    /// My notification as others should see it.
    fn my_notification(&self) -> Notification {
        match &self.state {
            State::Looking(l) => Notification {
                vote: l.vote,
                round: self.round,
                state: PeerState::Looking,
            },
            State::Leading(l) => Notification {
                vote: Vote {
                    epoch: l.epoch,
                    ..self.decided.0
                },
                round: self.decided.1,
                state: PeerState::Leading,
            },
            State::Learning(f) => Notification {
                vote: Vote {
                    epoch: f.epoch,
                    leader: f.leader,
                    ..self.decided.0
                },
                round: self.decided.1,
                state: if f.observer {
                    PeerState::Observing
                } else {
                    PeerState::Following
                },
            },
        }
    }

    fn broadcast_vote(&mut self) {
        let n = self.my_notification();
        let peers: Vec<ServerId> = self.cfg.peers().collect();
        for to in peers {
            self.out.send(to, Message::Notification(n));
        }
    }

    pub(crate) fn on_notification(&mut self, from: ServerId, n: Notification) {
        let State::Looking(_) = &self.state else {
            // Decided servers answer lookers with what they decided (not one that
            // must resync: it backs no one before it has synced).
            if n.state == PeerState::Looking && !self.resyncing {
                let mine = self.my_notification();
                self.out.send(from, Message::Notification(mine));
            } else if n.state == PeerState::Leading && self.registering_with(from) {
                // The leader I chose has just decided to lead: a registration I
                // sent while it was still looking went unheard, so send it again
                // now rather than at my next tick.
                self.send_follower_info();
            } else if self.yields_to(from, &n) {
                // A leader I was about to follow that says it does not lead is
                // shunned as one that went silent would be.
                if matches!(&self.state, State::Learning(f) if f.leader == from) {
                    self.shun(from);
                }
                self.enter_looking();
            }
            return;
        };
        if !self.cfg.is_voter(from) {
            return;
        }
        match n.state {
            PeerState::Looking => self.on_looking_vote(from, n),
            PeerState::Following | PeerState::Leading => self.on_decided_vote(from, n),
            PeerState::Observing => {}
        }
    }

    /// Whether this server lost an election race and should look again, rather
    /// than hold out for `init_limit_ticks` and keep its vote from the others:
    /// - it leads an epoch not yet established, and voter `from` has decided on a
    ///   better leader (the better vote wins, so two such leaders never knock each
    ///   other out);
    /// - it waits for its chosen leader's first answer, and that server says it
    ///   does not lead.
    fn yields_to(&self, from: ServerId, n: &Notification) -> bool {
        let decided = matches!(n.state, PeerState::Leading | PeerState::Following);
        match &self.state {
            State::Leading(l) => {
                l.phase != LeaderPhase::Broadcast
                    && self.cfg.is_voter(from)
                    && decided
                    && n.vote.leader != self.cfg.id
                    && n.vote > self.my_notification().vote
            }
            State::Learning(_) => self.registering_with(from) && n.state != PeerState::Leading,
            State::Looking(_) => false,
        }
    }

    /// Whether this server waits for `leader`'s first answer to its registration.
    fn registering_with(&self, leader: ServerId) -> bool {
        matches!(&self.state, State::Learning(f) if f.phase == FollowPhase::Registering && f.leader == leader)
    }

    /// A looking voter's vote.
    fn on_looking_vote(&mut self, from: ServerId, n: Notification) {
        if self.cfg.is_observer(self.cfg.id) || self.resyncing {
            return;
        }
        let own = self.own_vote();
        let round = self.round;
        let State::Looking(l) = &mut self.state else {
            return;
        };
        let newer = n.round > round;
        let better = prefers(&self.shunned, n.vote, if newer { own } else { l.vote });
        let mut changed = false;
        if newer {
            self.round = n.round;
            l.votes.clear();
            l.answered.clear();
            l.vote = if better { n.vote } else { own };
            changed = true;
        } else if n.round < round {
            let mine = self.my_notification();
            self.out.send(from, Message::Notification(mine));
            return;
        } else if better {
            l.vote = n.vote;
            changed = true;
        }
        l.votes.insert(from, n.vote);
        if changed {
            l.finalize_at = None;
            self.broadcast_vote();
        } else if n.vote != l.vote && l.answered.insert(from) {
            // Its vote is worse than mine, and it may never have seen mine: it was
            // still following when my broadcast came, and answered with its leader.
            // Tell it now rather than at my next re-send; once a round, so two
            // servers whose shuns rank each other's vote lower cannot ping-pong.
            let mine = self.my_notification();
            self.out.send(from, Message::Notification(mine));
        }
        self.check_votes();
    }

    /// A vote from a server that already follows or leads.
    fn on_decided_vote(&mut self, from: ServerId, n: Notification) {
        let round = self.round;
        let own = self.own_vote();
        let State::Looking(l) = &mut self.state else {
            return;
        };
        if n.round == round && !self.cfg.observers.contains(&self.cfg.id) {
            // A decided server reports its leadership's epoch in place of the vote's
            // (for lookers joining late), so it agrees with my vote if it names the
            // same leader and history.
            let agrees = n.vote.leader == l.vote.leader && n.vote.zxid == l.vote.zxid;
            l.votes.insert(from, if agrees { l.vote } else { n.vote });
        }
        l.decided.insert(from, (n.vote, n.round, n.state));
        let quorum = self.cfg.quorum();
        // As ZooKeeper: decided servers agree if they name the same leader and epoch;
        // a quorum of them decides for me too once that leader says it leads. If the
        // leader they name is me, they are registering with me and wait for me to
        // lead, so I back it and say so myself, even if a later round pulled me on
        // after they decided (else they vote again only after 2 x sync_limit). My
        // own vote of this round backs the leader it names as well: once that leader
        // says it leads, I need not wait out `finalize_ticks` to follow it.
        // Discovery still decides whether that leader really leads.
        let same = |v: &Vote| v.leader == n.vote.leader && v.epoch == n.vote.epoch;
        let votes = self.cfg.is_voter(self.cfg.id) && !self.resyncing;
        let me = n.vote.leader == own.leader && n.vote.zxid == own.zxid && votes;
        let mine_agrees = n.round == round
            && n.vote.leader == l.vote.leader
            && n.vote.zxid == l.vote.zxid
            && votes;
        let backers = l
            .decided
            .iter()
            .filter(|(s, (v, _, _))| self.cfg.is_voter(**s) && same(v))
            .count()
            + usize::from(me || mine_agrees);
        let leader_says = me
            || l.decided
                .get(&n.vote.leader)
                .is_some_and(|(v, _, st)| same(v) && *st == PeerState::Leading);
        if backers >= quorum && leader_says {
            if me {
                self.decide(own, self.round);
            } else {
                self.round = self.round.max(n.round);
                self.decide(n.vote, n.round);
            }
            return;
        }
        self.check_votes();
    }

    /// Arms (or disarms) the decision when a quorum agrees with my vote.
    fn check_votes(&mut self) {
        if self.cfg.is_observer(self.cfg.id) || self.resyncing {
            return;
        }
        let me = self.cfg.id;
        let now = self.now;
        let finalize = self.cfg.finalize_ticks;
        let voters = self.cfg.voters.len();
        let quorum = self.cfg.quorum();
        let round = self.round;
        let State::Looking(l) = &mut self.state else {
            return;
        };
        let agree = 1 + l
            .votes
            .iter()
            .filter(|(s, v)| **s != me && **v == l.vote)
            .count();
        if agree >= voters {
            let vote = l.vote;
            self.decide(vote, round);
        } else if agree >= quorum {
            l.finalize_at.get_or_insert(now + finalize);
        } else {
            l.finalize_at = None;
        }
    }

    /// Leaves the election: lead if the vote names me, else follow (or observe).
    fn decide(&mut self, vote: Vote, round: u64) {
        if self.resyncing && (vote.leader == self.cfg.id || vote == Vote::default()) {
            return; // never lead (nor follow the abstaining vote) before syncing
        }
        self.decided = (vote, round);
        if vote.leader == self.cfg.id {
            self.state = State::Leading(Leader::new(self.now));
            self.report_status();
            self.leader_started();
        } else {
            let session = self.new_session();
            let observer = self.cfg.is_observer(self.cfg.id);
            self.state = State::Learning(Learner::new(vote.leader, session, observer, self.now));
            self.report_status();
            self.send_follower_info();
        }
        // Tell lookers at once, so they can join.
        self.broadcast_vote();
    }

    pub(crate) fn tick_looking(&mut self) {
        let now = self.now;
        // A shun that ends changes how this server ranks votes: it votes afresh,
        // in a new round, so that every server ranks by the same order again.
        let shunned = self.shunned.len();
        self.shunned.retain(|_, until| *until > now);
        if self.shunned.len() < shunned {
            self.enter_looking();
            return;
        }
        let State::Looking(l) = &mut self.state else {
            return;
        };
        if l.finalize_at.is_some_and(|t| now >= t) {
            let (vote, round) = (l.vote, self.round);
            self.decide(vote, round);
            return;
        }
        if now >= l.resend_at {
            l.resend_ticks = (l.resend_ticks * 2).min(self.cfg.election_resend_ticks_max.max(1));
            let jitter = self.rng.below(l.resend_ticks + 1);
            l.resend_at = now + l.resend_ticks + jitter;
            self.broadcast_vote();
        }
    }
}

/// Whether `a` is a better vote than `b` for a server shunning `shunned`: any vote
/// beats one for a shunned leader; otherwise the higher (epoch, zxid, id).
fn prefers(shunned: &BTreeMap<ServerId, u64>, a: Vote, b: Vote) -> bool {
    let rank = |v: Vote| (!shunned.contains_key(&v.leader), v);
    rank(a) > rank(b)
}
