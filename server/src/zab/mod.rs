//! Zab, sans-IO: the state machine that makes an ensemble of servers agree on one
//! sequence of txns. Messages, ticks, proposals and "persisted" acknowledgements go
//! in; `Ready` batches (messages to send, durable changes to make, committed txns to
//! apply, status, read-index answers) come out. No sockets, disk, clock or OS
//! randomness here: time is `tick()`, randomness is a seed handed to `Node::new`.
//!
//! ```text
//!             step(from, Message) / tick() / propose(txn) / read_index(id)
//!   runtime ─────────────────────────────────────────────────────────────▶ Node
//!      ▲  ready(): messages, persist ops, committed txns, status, reads     │
//!      └────────────────────────────────────────────────────────────────────┘
//!      persisted(ready.number) once the persist ops are durable ──▶ Node
//! ```
//!
//! # Driving it (what `replica/` must do)
//!
//! Start: load accepted/current epochs, the newest snapshot and the log after it;
//! set the tree to the snapshot **only** (log entries above it are applied when the
//! core hands them out as committed); `Node::new(config, Restored{..}, seed)`.
//! Then one task owns the node and loops:
//! - every `tick_ms`: `node.tick()`;
//! - a peer message arrives: `node.step(from, msg)`;
//! - a client write (leader only): `node.propose(txn)` → Ok(zxid): remember the caller
//!   under that zxid; Err(NotLeader{hint}): forward to `hint` or fail retryably;
//! - a linearizable read: `node.read_index(id)`; the answer comes in `Ready::reads`;
//!   wait until applied ≥ the zxid, then read;
//! - after any of these, handle `node.ready()` until `is_empty()`, in order:
//!   1. send `messages` (the transport may drop them; never block the loop on it);
//!   2. do `persist` in order (epochs: `set_u64`; `Append`: `Storage::append`;
//!      `Truncate`: `truncate_after`; `Snapshot`: drop the log, `save_snapshot`, and
//!      replace the tree with the decoded snapshot), make them durable, then call
//!      `node.persisted(ready.number)`. This may run on a blocking thread while the
//!      loop continues, as long as Readies are persisted in order and
//!      `persisted` is called in order;
//!   3. apply `committed` in order to the tree; answer the callers waiting on those
//!      zxids (the leader: its own proposals), fire watches. Committed txns come
//!      out as soon as a quorum has them durable, also above this server's own
//!      durable log end, as in ZooKeeper (but see snapshots below);
//!   4. `status`: the role changed. A leader that stops serving must fail its
//!      waiting callers as "outcome unknown" (their txns may still commit);
//!   5. `fatal`: stop serving.
//! - a snapshot of the applied tree at zxid z is taken only once
//!   `node.durable_log_zxid()` ≥ z (meanwhile `node.hold_applies_at_durable(true)`
//!   lets the log catch up); after saving it:
//!   `node.compact(z)` (learners behind z then get SNAP, which the core sends
//!   without its bytes: the transport reads them from storage as it sends it).
//!
//! The core keeps the log after the snapshot in memory (for DIFF and for handing
//! out committed txns), and the zxid of the snapshot before it (its bytes stay in
//! storage). It counts what that log
//! holds (`Node::log_bytes`, `Node::log_txns`); the runtime bounds it by compacting
//! (snapshots by txns and by bytes) and by holding proposals back while it is full.
//! A learner behind the newest compaction gets SNAP.
//!
//! # The protocol as implemented (Zab, DSN 2011, as ZooKeeper runs it)
//!
//! 1. **Election** (`election.rs`, ZooKeeper's fast leader election): a looking voter
//!    proposes itself as (current_epoch, last_zxid, id), adopts any higher vote it
//!    hears in its round, moves to any higher round it hears of, and decides once a
//!    quorum of voters agree on its vote and no better vote arrives for
//!    `finalize_ticks` (at once if every voter agrees). Servers that already follow or
//!    lead answer lookers with their decided vote; a looker joins a leader that a
//!    quorum reports (its own vote counting) and that itself reports leading.
//!    Notifications are re-sent with randomised exponential back-off. Observers
//!    never vote; they join a leader the same way lookers join an established one.
//! 2. **Discovery** (`discovery.rs`): learners register (`FollowerInfo` with their
//!    accepted_epoch); once a quorum of voters (the leader included) has, the leader
//!    picks `max(accepted) + 1`, persists it as its accepted_epoch and sends
//!    NEWEPOCH. A learner accepts a strictly newer epoch durably before it answers
//!    ACKEPOCH(current_epoch, last_zxid); an epoch it had already accepted is acked
//!    with `counts: false` (Zab forbids acking one epoch twice). The leader gives up
//!    if a counting learner's history is newer than its own.
//! 3. **Synchronization** (`sync.rs`): after a quorum of counting ACKEPOCHs the
//!    leader persists current_epoch and, per learner, sends DIFF (the learner's last
//!    zxid is in the leader's history), TRUNC (the learner has entries the leader
//!    does not: cut back to the newest common zxid) or SNAP (the learner is behind
//!    the leader's snapshot), then the missing proposals, the commit point, and
//!    NEWLEADER. The learner acknowledges NEWLEADER once the history and
//!    current_epoch are durable. A quorum of acks (the leader's own included, once
//!    durable) establishes the leader: its whole history is committed, UPTODATE goes
//!    out, and learners start serving.
//! 4. **Broadcast** (`broadcast.rs`): PROPOSAL / ACK / COMMIT on one FIFO stream per
//!    follower; proposals are pipelined, and those made between two `ready()` calls
//!    travel in one message (batching). Commits go in zxid order on a quorum of
//!    durable acks. Observers get INFORM (committed txns) and never ack. Heartbeats
//!    every tick; a learner that hears nothing for `sync_limit_ticks` goes back to
//!    election; a leader that cannot count a quorum heard from within
//!    `sync_limit_ticks` steps down at once (no writes, no read index).
//! 5. **Read index** (`Node::read_index`): the leader notes its commit point, then a
//!    heartbeat round acknowledged by a quorum confirms it was still the leader.
//!
//! # Departures from the paper and from ZooKeeper
//!
//! - Streams are logical (session + sequence numbers, see `message.rs`) rather than
//!   TCP connections, so the transport may lose, duplicate and reorder; a gap makes
//!   the learner register again and be re-synchronized.
//! - The leader commits its history at establishment.
//! - A restarted server's tree is its snapshot only; log entries above it are
//!   applied when a leader says they are committed (ZooKeeper replays the whole log
//!   and relies on TRUNC to fix it).
//! - A SNAP sends the leader's newest snapshot plus the log after it (ZooKeeper
//!   serializes its live tree).
//! - A leader that hears from a voter whose accepted epoch is above its own epoch
//!   steps down and picks its next epoch above that (ZooKeeper leaves such a voter
//!   unable to join until the next election). Observers promise no epoch: they
//!   follow any leader's epoch, since they never vote.
//! - A learner told by the transport that its leader's stream broke (`peer_lost`:
//!   the process died) goes looking at once, as a ZooKeeper follower does when its
//!   leader's socket closes; silence for `sync_limit_ticks` remains the rule for a
//!   leader that is alive but mute.
//! - A learner gives the leader it chose twice `sync_limit_ticks` to first answer
//!   (it may still be finishing its own election), then holds it to
//!   `sync_limit_ticks` of silence. ZooKeeper waits `initLimit` instead, which
//!   stalls an election for that long when the chosen leader is dead.
//! - A looker answers a worse vote of its round with its own, once per voter and
//!   round: the voter may have been following when the better vote came (and
//!   answered it with its old leader). ZooKeeper leaves that to the next re-send of
//!   notifications, which costs a failover a re-send interval.
//! - Elections do not time out into new rounds on their own; a leader that is not
//!   established within `init_limit_ticks`, or a learner not synchronized within it,
//!   goes back to looking with a higher round.
//! - A learner that gives up on its leader (silence, too slow, stream lost, or the
//!   leader saying it does not lead) shuns it: it ranks votes for it below all
//!   others until it syncs with a leader, leads, or `4 x sync_limit_ticks` pass
//!   (then it votes afresh in a new round). In ZooKeeper a candidate with the best
//!   vote that a quorum cannot reach (it reaches one server, which relays its vote
//!   to the rest) wins every round and never leads, for as long as the partition
//!   lasts; here its would-be followers stop voting for it once they time out, and
//!   the servers that reach each other elect one of their own (`election.rs`).
//!
//! What it must not do: touch the network, the disk, a clock, or the tree.

mod broadcast;
mod discovery;
mod election;
mod leader;
mod learner;
pub mod log;
pub mod message;
mod node;
mod progress;
pub mod ready;
pub mod rng;
mod stream;
mod sync;

#[cfg(test)]
mod tests;

pub use log::Snapshot;
pub use message::{
    Envelope, LeaderMsg, LearnerMsg, Message, Notification, PeerState, ServerId, SyncKind, Vote,
};
pub use node::{Node, Restored};
pub use progress::LearnerProgress;
pub use ready::{PersistOp, ReadState, Ready, Role, Status};

/// What a caller of the core can act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ZabError {
    /// This server does not lead an established epoch; `hint` is the leader it
    /// follows, if any (forward there).
    #[error("not the leader (leader: {hint:?})")]
    NotLeader { hint: Option<ServerId> },
    /// The epoch's zxid counter is used up; the leader stepped down so a new epoch
    /// starts. Retry.
    #[error("zxid counter of the epoch exhausted; a new epoch is being elected")]
    EpochExhausted,
}

/// Why a configuration cannot run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("server {0} is neither a voter nor an observer")]
    UnknownSelf(ServerId),
    #[error("no voters")]
    NoVoters,
    #[error("server {0} is listed twice")]
    Duplicate(ServerId),
    #[error("restored log: {0}")]
    BadLog(String),
}

/// A deliberately broken behaviour, to prove the simulator catches it.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlantedBug {
    /// Learners ack proposals (and the leader counts itself) before they are durable.
    AckBeforeFsync,
    /// The leader commits on its own ack alone.
    CommitWithoutQuorum,
    /// Accepted and current epochs are never persisted.
    SkipEpochPersist,
    /// The must-resync marker of a discarded history is ignored: the empty server
    /// votes, leads and counts at once.
    IgnoreResync,
}

/// Static membership and timing. Times are in ticks.
#[derive(Clone, Debug)]
pub struct Config {
    /// This server.
    pub id: ServerId,
    /// Servers that vote (elections, epochs, acks).
    pub voters: Vec<ServerId>,
    /// Servers that only learn committed txns.
    pub observers: Vec<ServerId>,
    /// A learner that hears nothing from its leader, or a leader that cannot count
    /// a quorum heard from, for this long gives up.
    pub sync_limit_ticks: u64,
    /// Discovery plus synchronization must finish within this.
    pub init_limit_ticks: u64,
    /// First interval between re-sent election notifications (it doubles).
    pub election_resend_ticks: u64,
    /// Cap of that interval.
    pub election_resend_ticks_max: u64,
    /// How long an agreed vote waits for a better one before deciding.
    pub finalize_ticks: u64,
    /// Txns per PROPOSAL message during synchronization.
    pub sync_batch_txns_max: usize,
    #[cfg(test)]
    pub planted_bug: Option<PlantedBug>,
}

impl Config {
    /// A configuration with default timing: with a 100 ms tick, a learner gives up
    /// after 0.5 s of silence and synchronization has 1 s.
    pub fn new(id: ServerId, voters: Vec<ServerId>, observers: Vec<ServerId>) -> Config {
        Config {
            id,
            voters,
            observers,
            sync_limit_ticks: 5,
            init_limit_ticks: 10,
            election_resend_ticks: 1,
            election_resend_ticks_max: 8,
            finalize_ticks: 1,
            sync_batch_txns_max: 256,
            #[cfg(test)]
            planted_bug: None,
        }
    }

    /// Checks membership.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.voters.is_empty() {
            return Err(ConfigError::NoVoters);
        }
        let mut all: Vec<ServerId> = self.voters.iter().chain(&self.observers).copied().collect();
        all.sort_unstable();
        if let Some(w) = all.windows(2).find(|w| w[0] == w[1]) {
            return Err(ConfigError::Duplicate(w[0]));
        }
        if !all.contains(&self.id) {
            return Err(ConfigError::UnknownSelf(self.id));
        }
        Ok(())
    }

    /// Votes needed for a quorum: a strict majority of voters.
    pub fn quorum(&self) -> usize {
        self.voters.len() / 2 + 1
    }

    pub fn is_voter(&self, id: ServerId) -> bool {
        self.voters.contains(&id)
    }

    pub fn is_observer(&self, id: ServerId) -> bool {
        self.observers.contains(&id)
    }

    /// Every other server in the ensemble.
    pub fn peers(&self) -> impl Iterator<Item = ServerId> + '_ {
        let me = self.id;
        self.voters
            .iter()
            .chain(&self.observers)
            .copied()
            .filter(move |&s| s != me)
    }

    #[cfg(test)]
    pub(crate) fn bug(&self, bug: PlantedBug) -> bool {
        self.planted_bug == Some(bug)
    }

    #[cfg(not(test))]
    pub(crate) fn bug(&self, _bug: PlantedBug) -> bool {
        false
    }
}

/// Stand-in so `Config::bug` type-checks outside tests (never constructed there).
#[cfg(not(test))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PlantedBug {
    AckBeforeFsync,
    CommitWithoutQuorum,
    SkipEpochPersist,
    IgnoreResync,
}
