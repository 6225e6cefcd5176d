//! The messages Zab servers exchange. The core produces and consumes them; the peer
//! transport only carries them (it may lose, delay, duplicate or reorder them: the
//! core copes, see "streams" below).
//!
//! Streams: after a learner registers (`FollowerInfo` with a fresh `session`), the
//! leader and that learner talk over one logical FIFO stream per direction. Every
//! stream message carries the session and a sequence number; a receiver takes only
//! the next number, drops duplicates, and treats a gap as a broken connection (the
//! learner registers again and is synchronized again). So the core needs no reliable
//! transport, only one that usually delivers.
//!
//! A leader opens a stream on a session at most once, across its leaderships: a
//! repeated FollowerInfo for a session whose stream it dropped gets Reset. A second
//! stream on the same session would number from 1 again, and the learner could take
//! late messages of the first stream in place of the second's (skipping sync
//! proposals, then acking NEWLEADER without them). A leader that restarted does not
//! remember the sessions it opened, so every message on a stream also names the
//! epoch of the leadership that opened it (the one its NEWEPOCH proposed): a
//! learner that finds two epochs on one stream registers again on a new session.
//!
//! ```text
//!   learner ──FollowerInfo{session}──▶ leader        (repeated until answered)
//!   leader  ──ToLearner{session, epoch, seq, LeaderMsg}──▶ learner
//!   learner ──ToLeader{session, seq, LearnerMsg}──▶ leader
//!   leader  ──Reset{session}──▶ learner              (unknown or closed session: register again)
//! ```

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::txn::{Txn, Zxid};

/// A server's id in the ensemble (from the static configuration).
pub type ServerId = u64;

/// A vote in fast leader election. Ordered by (epoch, zxid, leader): the highest
/// vote is the server with the most recent history, ties broken by the larger id.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Vote {
    /// The voted-for server's current epoch (the last epoch it acknowledged).
    pub epoch: u32,
    /// The voted-for server's last logged zxid.
    pub zxid: Zxid,
    /// The server voted for.
    pub leader: ServerId,
}

/// What a server is doing, as reported in election notifications.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PeerState {
    Looking,
    Following,
    Leading,
    Observing,
}

/// An election notification: the sender's vote, in its election round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Notification {
    pub vote: Vote,
    /// The sender's election round (ZooKeeper's "logical clock"); a looking server
    /// moves to the highest round it hears of.
    pub round: u64,
    pub state: PeerState,
}

/// How a learner is brought in line with the leader's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SyncKind {
    /// The learner's log is a prefix of the leader's: proposals after `from` follow.
    Diff { from: Zxid },
    /// The learner has entries the leader does not: cut everything after `to`,
    /// then proposals after `to` follow.
    Trunc { to: Zxid },
    /// The learner is too far behind (or diverged before the leader's log starts):
    /// install this snapshot of the state at `zxid`, then proposals after it follow.
    /// The core sends it with `data` empty: the snapshot is in its storage, and
    /// the peer transport reads the bytes from there as it sends
    /// (`peer/outbound.rs`), so an empty SNAP never goes over the wire.
    Snap { zxid: Zxid, data: Bytes },
}

/// Leader to learner, on the learner's stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaderMsg {
    /// The epoch the leader will lead (discovery).
    NewEpoch { epoch: u32 },
    /// How the synchronization starts.
    Sync(SyncKind),
    /// Txns to log, in zxid order (sync history or broadcast; batched).
    Proposal { txns: Vec<Txn> },
    /// Everything at or below `zxid` is committed.
    Commit { zxid: Zxid },
    /// Synchronization is complete; acknowledge once the history and `epoch` are durable.
    NewLeader { epoch: u32 },
    /// A quorum acknowledged NEWLEADER: start serving; everything at or below
    /// `committed` is committed.
    UpToDate { committed: Zxid },
    /// For observers: committed txns to log and apply (no ack expected).
    Inform { txns: Vec<Txn>, committed: Zxid },
    /// Heartbeat; `round` is echoed back (read-index confirmation).
    Ping { round: u64 },
}

/// Learner to leader, on the learner's stream.
///
/// The variants' order is their wire encoding (`peer::codec`): new ones go last.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LearnerMsg {
    /// ACKEPOCH as peer protocol 1 sends it, without the epoch it answers. A
    /// learner never makes it: the transport turns an `AckEpoch` into it for a
    /// leader that speaks only protocol 1, and a leader takes it as before (it
    /// cannot tell a stale one from a fresh one; see `AckEpoch`).
    AckEpochV1 {
        current_epoch: u32,
        last_zxid: Zxid,
        counts: bool,
    },
    /// The synchronized history and the epoch are durable.
    AckNewLeader { epoch: u32 },
    /// Every proposal at or below `zxid` is durable here (cumulative).
    Ack { zxid: Zxid },
    /// Answer to `Ping { round }`.
    PingAck { round: u64 },
    /// The learner accepted `epoch`, the one NEWEPOCH proposed (durably).
    /// `counts` is false when it had already accepted that epoch before (it may not
    /// vote for it twice: Zab). The leader counts it only for that epoch: an ack
    /// held in the network while the leader restarted must not count for the next
    /// epoch it proposes on the same learner stream.
    AckEpoch {
        epoch: u32,
        current_epoch: u32,
        last_zxid: Zxid,
        counts: bool,
    },
}

/// One message between two servers.
///
/// The variants' order is their wire encoding (`peer::codec`): new ones go last.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Message {
    /// Fast leader election.
    Notification(Notification),
    /// A learner registers with the leader it elected (repeated until answered).
    FollowerInfo {
        session: u64,
        accepted_epoch: u32,
        observer: bool,
    },
    /// A leader's stream message as peer protocol 1 sends it, without its epoch. A
    /// leader never makes it: the transport turns a `ToLearner` into it for a
    /// learner that speaks only protocol 1, and a learner takes it unchecked.
    ToLearnerV1 {
        session: u64,
        seq: u64,
        body: LeaderMsg,
    },
    ToLeader {
        session: u64,
        seq: u64,
        body: LearnerMsg,
    },
    /// The leader does not know this session: register again.
    Reset { session: u64 },
    /// A message on the leader's stream to a learner. `epoch` is the one the
    /// stream's NEWEPOCH proposed (the leadership that opened it).
    ToLearner {
        session: u64,
        epoch: u32,
        seq: u64,
        body: LeaderMsg,
    },
    /// A learner heard its leader's `Ping` on stream `session` (peer protocol 3).
    /// Sent at once, outside the stream's sequence: its `PingAck` (which carries the
    /// read-index round) waits, as everything on the stream does, until the log is
    /// durable up to what the learner was sent, and a stalled disk must not make a
    /// live learner look silent to its leader.
    Alive { session: u64 },
}

impl Message {
    /// The zxid and the (empty) bytes of a SNAP still to be filled from its sender's
    /// storage: the core sends every SNAP without its bytes. None for any other
    /// message, and for a SNAP already filled.
    pub fn snap_to_fill(&mut self) -> Option<(Zxid, &mut Bytes)> {
        match self {
            Message::ToLearner {
                body: LeaderMsg::Sync(SyncKind::Snap { zxid, data }),
                ..
            } if data.is_empty() => Some((*zxid, data)),
            _ => None,
        }
    }

    /// Fills a SNAP from the snapshot its sender's storage holds (the simulator's
    /// disk, the unit tests' record), as the peer transport does from redb. False
    /// if that is not the snapshot the SNAP names: the message is then lost, as the
    /// transport ends its stream there.
    #[cfg(test)]
    pub(crate) fn fill_snap_from(&mut self, stored: Option<&super::Snapshot>) -> bool {
        let Some((zxid, data)) = self.snap_to_fill() else {
            return true;
        };
        match stored {
            Some(s) if s.zxid == zxid => {
                *data = s.data.clone();
                true
            }
            _ => false,
        }
    }
}

/// A message with its destination.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    pub to: ServerId,
    pub msg: Message,
}
