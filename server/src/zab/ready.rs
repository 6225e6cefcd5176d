//! What the core asks its runtime to do (`Ready`), and the bookkeeping that releases
//! messages only once what they vouch for is durable.
//!
//! ```text
//!   step/tick/propose ──▶ Outbox (building Ready #n) ──ready()──▶ runtime
//!   runtime: send messages; do persist ops in order, fsync; persisted(n); apply committed
//!   persisted(n) ──▶ gated messages of Ready ≤ n are released into the next Ready
//! ```
//!
//! What it must not do: decide protocol steps; it only orders and gates outputs.

use std::collections::VecDeque;

use super::log::Snapshot;
use super::message::{Envelope, ServerId};
use crate::txn::{Txn, Zxid};

/// One durable change, to be done in order (each Ready's ops, then the next's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PersistOp {
    /// Store accepted_epoch (the epoch this server promised to follow).
    AcceptedEpoch(u32),
    /// Store current_epoch (the epoch whose NEWLEADER this server acknowledged).
    CurrentEpoch(u32),
    /// Remove every log entry above `after`.
    Truncate { after: Zxid },
    /// Append txns (strictly increasing zxids, above the log's last).
    Append(Vec<Txn>),
    /// Replace the whole state by this snapshot: drop the log, store the snapshot,
    /// and install it into the tree (the runtime decodes it).
    Snapshot(Snapshot),
    /// Clear the must-resync marker (`Restored::must_resync`): this server has synced
    /// from an established leader and votes again.
    Resynced,
}

/// The role this server plays now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    Looking,
    Following,
    Leading,
    Observing,
}

/// Where this server stands; reported in `Ready::status` whenever it changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Status {
    pub role: Role,
    /// The leader this server follows or is (None while looking).
    pub leader: Option<ServerId>,
    /// The epoch of that leadership (0 while looking or before it is chosen).
    pub epoch: u32,
    /// Leader: established (NEWLEADER acked by a quorum) and holding its quorum, so
    /// it accepts writes and read-index requests. Learner: UPTODATE received.
    pub serving: bool,
}

/// The answer to a read-index request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadState {
    /// The caller's id from `Node::read_index`.
    pub id: u64,
    /// The leader's commit point at the request, confirmed by a quorum afterwards;
    /// a read that waits until this zxid is applied is linearizable.
    pub result: Result<Zxid, super::ZabError>,
}

/// Everything the runtime must do after a batch of inputs. Order of handling:
/// send `messages`; do `persist` in order and make it durable; call
/// `Node::persisted(number)` (if `persist` was not empty); apply `committed` in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ready {
    /// Identifies this Ready for `Node::persisted`.
    pub number: u64,
    /// Send now (their preconditions are already durable).
    pub messages: Vec<Envelope>,
    /// Durable changes, in order.
    pub persist: Vec<PersistOp>,
    /// Txns now committed (durable on a quorum), in zxid order: apply them.
    pub committed: Vec<Txn>,
    /// The new status, if it changed.
    pub status: Option<Status>,
    /// Answers to read-index requests.
    pub reads: Vec<ReadState>,
    /// Set when an invariant broke: the server must stop serving (and not restart
    /// without an operator).
    pub fatal: Option<String>,
}

impl Ready {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
            && self.persist.is_empty()
            && self.committed.is_empty()
            && self.status.is_none()
            && self.reads.is_empty()
            && self.fatal.is_none()
    }
}

/// What is durable after a Ready's persist ops complete.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Durable {
    /// The log is durable up to here.
    pub(crate) log_zxid: Zxid,
    pub(crate) accepted_epoch: u32,
    pub(crate) current_epoch: u32,
}

/// Builds Readies and holds messages until their Ready is persisted.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    /// The Ready being filled; `number` is already set.
    building: Ready,
    /// Messages waiting for `persisted(n)`, in emission order.
    gated: VecDeque<(u64, Envelope)>,
    /// For each Ready with persist ops not yet acknowledged: what becomes durable.
    marks: VecDeque<(u64, Durable)>,
    /// The highest Ready number the runtime said is durable.
    persisted_number: u64,
    /// The number of the last Ready that carried persist ops.
    last_ops_number: u64,
}

impl Outbox {
    pub(crate) fn new() -> Outbox {
        let mut out = Outbox::default();
        out.building.number = 1;
        out
    }

    pub(crate) fn send(&mut self, to: ServerId, msg: super::Message) {
        self.building.messages.push(Envelope { to, msg });
    }

    /// Sends once every persist op emitted so far is durable.
    pub(crate) fn send_after_persist(&mut self, to: ServerId, msg: super::Message) {
        if self.last_ops_number <= self.persisted_number {
            self.send(to, msg);
        } else {
            self.gated
                .push_back((self.last_ops_number, Envelope { to, msg }));
        }
    }

    /// Queues a durable change; `after` is what is durable once it is done.
    pub(crate) fn persist(&mut self, op: PersistOp, after: Durable) {
        let ops = &mut self.building.persist;
        match (ops.last_mut(), op) {
            (Some(PersistOp::Append(prev)), PersistOp::Append(more)) => prev.extend(more),
            (_, op) => ops.push(op),
        }
        let n = self.building.number;
        self.last_ops_number = n;
        match self.marks.back_mut() {
            Some((m, durable)) if *m == n => *durable = after,
            _ => self.marks.push_back((n, after)),
        }
    }

    /// Entries above `zxid` are gone: nothing pending may vouch for them.
    pub(crate) fn clamp_log(&mut self, zxid: Zxid) {
        for (_, durable) in self.marks.iter_mut() {
            durable.log_zxid = durable.log_zxid.min(zxid);
        }
    }

    /// Records that Ready `number` (and all before it) is durable. Returns what is
    /// durable now if that advanced, and releases gated messages.
    pub(crate) fn persisted(&mut self, number: u64) -> Option<Durable> {
        if number <= self.persisted_number || number >= self.building.number {
            return None;
        }
        self.persisted_number = number;
        let mut now = None;
        while let Some((n, durable)) = self.marks.front().copied() {
            if n > number {
                break;
            }
            now = Some(durable);
            self.marks.pop_front();
        }
        while let Some((n, _)) = self.gated.front() {
            if *n > number {
                break;
            }
            if let Some((_, env)) = self.gated.pop_front() {
                self.building.messages.push(env);
            }
        }
        now
    }

    /// The Ready being built (for outputs other than messages and persist ops).
    pub(crate) fn building(&mut self) -> &mut Ready {
        &mut self.building
    }

    /// Hands out the Ready being built and starts the next one.
    pub(crate) fn take(&mut self) -> Ready {
        let next = Ready {
            number: self.building.number + 1,
            ..Ready::default()
        };
        std::mem::replace(&mut self.building, next)
    }
}
