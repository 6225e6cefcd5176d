//! The leader's state: its phase, the learners it talks to (one logical FIFO stream
//! each), proposals not yet sent, pending read-index requests. The protocol steps
//! that use it are in discovery.rs, sync.rs and broadcast.rs.
//!
//! What it must not do: touch learners' streams except through `LearnerHandle::send`
//! (sequence numbers must stay gap-free).

use std::collections::{BTreeMap, BTreeSet};

use super::message::{LeaderMsg, LearnerMsg, Message, ServerId};
use super::ready::{Outbox, ReadState};
use super::stream::Inbox;
use super::ZabError;
use crate::txn::{Txn, Zxid};

/// Where the leader is in establishing its epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum LeaderPhase {
    /// Gathering FollowerInfo from a quorum to choose the epoch.
    Discovery,
    /// NEWEPOCH sent; gathering a quorum of counting ACKEPOCHs.
    EpochProposed,
    /// Synchronizing learners; gathering a quorum of NEWLEADER acks.
    Syncing,
    /// Established: serving writes.
    Broadcast,
}

/// Where one learner is, as the leader sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum LearnerPhase {
    /// Registered; NEWEPOCH not sent yet (epoch not chosen).
    Registered,
    /// NEWEPOCH sent.
    EpochSent,
    /// ACKEPOCH received; waiting for the epoch to be established to sync.
    EpochAcked,
    /// Sync and NEWLEADER sent; proposals are forwarded from now on.
    Syncing,
    /// NEWLEADER acked: its acks count.
    Synced,
    /// UPTODATE sent.
    UpToDate,
}

/// The leader's end of one learner's stream.
#[derive(Debug)]
pub(crate) struct LearnerHandle {
    pub(crate) id: ServerId,
    /// The session the learner registered with; messages of others are stale.
    pub(crate) session: u64,
    pub(crate) observer: bool,
    /// Sequence number of the last message sent to it.
    pub(crate) seq_out: u64,
    /// The epoch its NEWEPOCH proposed (0 before), named by every message sent.
    pub(crate) epoch: u32,
    /// Its messages, put back in order.
    pub(crate) inbox: Inbox<LearnerMsg>,
    pub(crate) phase: LearnerPhase,
    /// The learner's last zxid, from ACKEPOCH.
    pub(crate) peer_last: Zxid,
    /// The leader's last zxid when NEWLEADER was sent.
    pub(crate) sync_last: Zxid,
    /// Highest zxid it acked (durable there).
    pub(crate) acked: Zxid,
    /// Highest heartbeat round it answered.
    pub(crate) ping_acked: u64,
    /// Tick of the last message from it.
    pub(crate) last_heard: u64,
    /// Observers: the last zxid sent to it (sync or INFORM).
    pub(crate) sent_up_to: Zxid,
}

impl LearnerHandle {
    pub(crate) fn new(id: ServerId, session: u64, observer: bool, now: u64) -> LearnerHandle {
        LearnerHandle {
            id,
            session,
            observer,
            seq_out: 0,
            epoch: 0,
            inbox: Inbox::new(),
            phase: LearnerPhase::Registered,
            peer_last: 0,
            sync_last: 0,
            acked: 0,
            ping_acked: 0,
            last_heard: now,
            sent_up_to: 0,
        }
    }

    /// Sends the next message of this learner's stream.
    pub(crate) fn send(&mut self, out: &mut Outbox, body: LeaderMsg) {
        if let LeaderMsg::NewEpoch { epoch } = body {
            self.epoch = epoch;
        }
        self.seq_out += 1;
        out.send(
            self.id,
            Message::ToLearner {
                session: self.session,
                epoch: self.epoch,
                seq: self.seq_out,
                body,
            },
        );
    }

    /// Whether proposals and commits are forwarded to it.
    pub(crate) fn forwarding(&self) -> bool {
        self.phase >= LearnerPhase::Syncing
    }

    /// Whether its acks count (a voter that acked NEWLEADER).
    pub(crate) fn voting(&self) -> bool {
        !self.observer && self.phase >= LearnerPhase::Synced
    }
}

/// A read-index request waiting for a quorum heartbeat round.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PendingRead {
    pub(crate) id: u64,
    /// The commit point when it was asked.
    pub(crate) zxid: Zxid,
    /// The heartbeat round that must be acknowledged by a quorum.
    pub(crate) round: u64,
}

/// State of a leading server.
#[derive(Debug)]
pub(crate) struct Leader {
    pub(crate) phase: LeaderPhase,
    /// The epoch being established (0 until chosen).
    pub(crate) epoch: u32,
    /// Tick when leadership began (discovery + sync must end by init_limit).
    pub(crate) started: u64,
    /// Voters' accepted epochs reported in FollowerInfo (the leader's own included).
    pub(crate) infos: BTreeMap<ServerId, u32>,
    /// Voters whose counting ACKEPOCH arrived.
    pub(crate) epoch_acks: BTreeSet<ServerId>,
    /// Voters whose NEWLEADER ack arrived.
    pub(crate) newleader_acks: BTreeSet<ServerId>,
    pub(crate) learners: BTreeMap<ServerId, LearnerHandle>,
    /// Counter of the last zxid proposed in `epoch`.
    pub(crate) counter: u64,
    /// Proposals made since the last `ready()`, sent as one batch.
    pub(crate) unsent: Vec<Txn>,
    /// Heartbeat round (grows every tick and every read-index request).
    pub(crate) ping_round: u64,
    pub(crate) reads: Vec<PendingRead>,
}

impl Leader {
    pub(crate) fn new(now: u64) -> Leader {
        Leader {
            phase: LeaderPhase::Discovery,
            epoch: 0,
            started: now,
            infos: BTreeMap::new(),
            epoch_acks: BTreeSet::new(),
            newleader_acks: BTreeSet::new(),
            learners: BTreeMap::new(),
            counter: 0,
            unsent: Vec::new(),
            ping_round: 0,
            reads: Vec::new(),
        }
    }

    pub(crate) fn serving(&self) -> bool {
        self.phase == LeaderPhase::Broadcast
    }

    /// Answers every pending read with NotLeader (the leader is stepping down).
    pub(crate) fn fail_reads(&mut self) -> Vec<ReadState> {
        self.reads
            .drain(..)
            .map(|r| ReadState {
                id: r.id,
                result: Err(ZabError::NotLeader { hint: None }),
            })
            .collect()
    }
}
