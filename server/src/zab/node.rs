//! `Node`: one server's Zab state machine. This file holds the state, the inputs'
//! entry points and the helpers every phase shares; the phases live in their own
//! files (election, discovery, sync, broadcast).
//!
//! What it must not do: IO of any kind; panic on any input.

use std::collections::{BTreeMap, VecDeque};

use super::election::Looking;
use super::leader::Leader;
use super::learner::Learner;
use super::log::{Covered, Log, Snapshot};
use super::message::{Message, ServerId};
use super::ready::{Durable, Outbox, PersistOp, Ready, Role, Status};
use super::rng::Rng;
use super::{Config, ConfigError, PlantedBug, ZabError};
use crate::txn::{Txn, Zxid};

/// What a server finds on its disk at start-up.
#[derive(Clone, Debug, Default)]
pub struct Restored {
    pub accepted_epoch: u32,
    pub current_epoch: u32,
    /// The zxid of the newest snapshot, in storage; the runtime's tree starts as
    /// exactly that state.
    pub snapshot: Option<Zxid>,
    /// Log entries above the snapshot, ascending (committed or not: Zab decides).
    pub log: Vec<Txn>,
    /// The operator discarded this server's history (`concord --discard-local-state`):
    /// what it acknowledged before may be gone, so until it has synced from an
    /// established leader it neither votes nor leads, and its epoch acks do not count
    /// (else an empty member could help a leader that lacks committed txns win, the
    /// ZooKeeper disk-wipe hazard). Cleared with `PersistOp::Resynced`.
    pub must_resync: bool,
}

/// The phase-specific state.
#[derive(Debug)]
pub(crate) enum State {
    Looking(Looking),
    Learning(Learner),
    Leading(Leader),
}

/// One server's Zab core. See the module docs for the protocol and the driving loop.
#[derive(Debug)]
pub struct Node {
    pub(crate) cfg: Config,
    /// Seeded randomness (election jitter, session ids).
    pub(crate) rng: Rng,
    /// Ticks since start.
    pub(crate) now: u64,
    /// The epoch this server promised to follow (NEWEPOCH acked); in memory it may
    /// be ahead of `durable` until persisted.
    pub(crate) accepted_epoch: u32,
    /// The epoch whose NEWLEADER this server acked (or led).
    pub(crate) current_epoch: u32,
    /// Snapshot + log, as this server believes its history is.
    pub(crate) log: Log,
    /// What the runtime has confirmed durable.
    pub(crate) durable: Durable,
    /// The highest zxid known committed.
    pub(crate) committed: Zxid,
    /// The highest zxid handed out in `Ready::committed` (or installed by snapshot).
    pub(crate) applied_out: Zxid,
    /// Hand out committed txns only up to what this server's own log has durable
    /// (`hold_applies_at_durable`): set while the runtime waits to snapshot.
    pub(crate) applies_held_at_durable: bool,
    /// The highest accepted epoch a voter reported: a new epoch must exceed it, or
    /// that voter could never join.
    pub(crate) epoch_floor: u32,
    /// The election round (ZooKeeper's logical clock); grows on every new election.
    pub(crate) round: u64,
    /// The vote this server acted on and its round, reported to lookers.
    pub(crate) decided: (super::Vote, u64),
    pub(crate) state: State,
    pub(crate) out: Outbox,
    /// The status last reported.
    pub(crate) reported: Option<Status>,
    /// Set once an invariant broke; the node then ignores every input.
    pub(crate) failed: bool,
    /// From `Restored::must_resync` until UPTODATE from a leader: no vote, no lead,
    /// no counting epoch ack, no report of a decided vote to lookers.
    pub(crate) resyncing: bool,
    /// Leader side: the sessions this server opened a stream on, per learner, newest
    /// last (at most `SESSIONS_REMEMBERED` each), kept across leaderships. A session
    /// is opened once: a repeated FollowerInfo for it after its stream was dropped
    /// (a later leadership, or a broken stream) gets Reset, since a second stream on
    /// it would restart its numbers and the learner could take the first stream's
    /// late messages in place of the second's.
    pub(crate) opened_sessions: BTreeMap<ServerId, VecDeque<u64>>,
    /// Leaders this server gave up on as their learner (silent, too slow, the
    /// stream lost, or saying they do not lead), with the tick until which it votes for none of them
    /// (`election.rs`, "Shunned leaders"). Cleared once it syncs with a leader or
    /// establishes its own epoch; at most one entry per voter.
    pub(crate) shunned: BTreeMap<ServerId, u64>,
}

/// Sessions remembered per learner in `Node::opened_sessions`. A learner uses one
/// session per registration; only its newest matters (older ones it ignores).
pub(crate) const SESSIONS_REMEMBERED: usize = 8;

impl Node {
    /// A node restarted from its durable state (`Restored::default()` for a new
    /// server). `seed` fixes its randomness. It starts looking for a leader.
    pub fn new(cfg: Config, restored: Restored, seed: u64) -> Result<Node, ConfigError> {
        cfg.validate()?;
        let log = Log::restore(restored.snapshot, restored.log).map_err(ConfigError::BadLog)?;
        let durable = Durable {
            log_zxid: log.last_zxid(),
            accepted_epoch: restored.accepted_epoch,
            current_epoch: restored.current_epoch,
        };
        let start = log.start();
        // Alone, there is no one to sync from: this server's history is the history.
        let alone = cfg.voters.iter().all(|&v| v == cfg.id);
        let resyncing = restored.must_resync && !alone && !cfg.bug(PlantedBug::IgnoreResync);
        let mut node = Node {
            cfg,
            rng: Rng::new(seed),
            now: 0,
            accepted_epoch: restored.accepted_epoch,
            current_epoch: restored.current_epoch,
            log,
            durable,
            committed: start,
            applied_out: start,
            applies_held_at_durable: false,
            epoch_floor: 0,
            round: 0,
            decided: (super::Vote::default(), 0),
            state: State::Looking(Looking::default()),
            out: Outbox::new(),
            reported: None,
            failed: false,
            resyncing,
            opened_sessions: BTreeMap::new(),
            shunned: BTreeMap::new(),
        };
        if restored.must_resync && alone {
            node.persist(PersistOp::Resynced);
        }
        node.enter_looking();
        Ok(node)
    }

    /// Advances time by one tick: heartbeats, timeouts, election resends.
    pub fn tick(&mut self) {
        if self.failed {
            return;
        }
        self.now += 1;
        match &self.state {
            State::Looking(_) => self.tick_looking(),
            State::Learning(_) => self.tick_learner(),
            State::Leading(_) => self.tick_leader(),
        }
    }

    /// The transport lost its stream from `id` (its process died or stopped, or
    /// the connection broke). A learner whose leader it is looks for a new one at
    /// once instead of waiting `sync_limit_ticks`; if the leader is in fact alive,
    /// the election finds it again. Anything else ignores it: quorums are counted
    /// from messages heard, never from connections.
    pub fn peer_lost(&mut self, id: ServerId) {
        if self.failed {
            return;
        }
        if matches!(&self.state, State::Learning(f) if f.leader == id) {
            self.shun(id);
            self.enter_looking();
        }
    }

    /// Handles one message from `from`. Messages from unknown servers are ignored.
    pub fn step(&mut self, from: ServerId, msg: Message) {
        if self.failed || from == self.cfg.id {
            return;
        }
        if !self.cfg.is_voter(from) && !self.cfg.is_observer(from) {
            return;
        }
        match msg {
            Message::Notification(n) => self.on_notification(from, n),
            Message::FollowerInfo {
                session,
                accepted_epoch,
                observer,
            } => self.on_follower_info(from, session, accepted_epoch, observer),
            Message::ToLeader { session, seq, body } => {
                self.on_learner_msg(from, session, seq, body)
            }
            Message::ToLearner {
                session,
                epoch,
                seq,
                body,
            } => self.on_leader_msg(from, session, Some(epoch), seq, body),
            Message::ToLearnerV1 { session, seq, body } => {
                self.on_leader_msg(from, session, None, seq, body)
            }
            Message::Reset { session } => self.on_reset(from, session),
            Message::Alive { session } => self.on_alive(from, session),
        }
    }

    /// Proposes a txn (its `zxid` is overwritten). Ok: the zxid it will commit at, if
    /// it commits. Only an established leader holding its quorum accepts.
    pub fn propose(&mut self, txn: Txn) -> Result<Zxid, ZabError> {
        self.propose_txn(txn)
    }

    /// Asks for a read index; the answer comes in `Ready::reads` with this `id`.
    pub fn read_index(&mut self, id: u64) -> Result<(), ZabError> {
        self.request_read(id)
    }

    /// The persist ops of Ready `number` (and every earlier one) are durable.
    pub fn persisted(&mut self, number: u64) {
        if self.failed {
            return;
        }
        let Some(durable) = self.out.persisted(number) else {
            return;
        };
        self.durable = Durable {
            log_zxid: durable.log_zxid.min(self.log.last_zxid()),
            ..durable
        };
        self.after_durable();
        self.release_committed();
    }

    /// The runtime wrote a snapshot of its applied state at `zxid` to storage: older
    /// log entries are no longer kept here (learners behind it get SNAP, whose bytes
    /// the transport reads from storage). Ignored unless `zxid` has been applied.
    /// Returns the entries taken out (`Log::compact`), for the caller to free.
    pub fn compact(&mut self, zxid: Zxid) -> Covered {
        if zxid > self.applied_out {
            return Covered::default();
        }
        self.log.compact(zxid).unwrap_or_default()
    }

    /// The log is durable here up to this zxid. Committed txns are handed out before
    /// it reaches them (a quorum has them durable), so a snapshot of the applied
    /// state must wait for it: storage takes a snapshot above the log's durable end
    /// for one installed over an emptied log.
    pub fn durable_log_zxid(&self) -> Zxid {
        self.durable.log_zxid
    }

    /// While `hold` is true, committed txns are handed out only up to the log's
    /// durable end, so that it catches up with the applied state (the runtime holds
    /// them so while a snapshot waits for it; under a steady load the applied state
    /// could otherwise stay ahead of it at every turn).
    pub fn hold_applies_at_durable(&mut self, hold: bool) {
        let lifted = self.applies_held_at_durable && !hold;
        self.applies_held_at_durable = hold;
        if lifted {
            self.release_committed();
        }
    }

    /// Everything to do since the last call.
    pub fn ready(&mut self) -> Ready {
        self.flush_proposals();
        self.out.take()
    }

    /// Where this server stands now.
    pub fn status(&self) -> Status {
        let (role, leader, epoch, serving) = match &self.state {
            State::Looking(_) => (Role::Looking, None, 0, false),
            State::Leading(l) => (Role::Leading, Some(self.cfg.id), l.epoch, l.serving()),
            State::Learning(f) => {
                let role = if f.observer {
                    Role::Observing
                } else {
                    Role::Following
                };
                (role, Some(f.leader), f.epoch, f.serving())
            }
        };
        Status {
            role,
            leader,
            epoch,
            serving,
        }
    }

    pub fn id(&self) -> ServerId {
        self.cfg.id
    }

    /// The highest zxid known committed.
    pub fn committed_zxid(&self) -> Zxid {
        self.committed
    }

    /// The newest zxid in this server's history.
    pub fn last_zxid(&self) -> Zxid {
        self.log.last_zxid()
    }

    /// The memory the in-memory log's entries hold (`log::txn_bytes`): everything
    /// after the newest snapshot handed to `compact`. The runtime snapshots to keep
    /// it under its budget.
    pub fn log_bytes(&self) -> usize {
        self.log.bytes()
    }

    /// The entries the in-memory log holds after the newest snapshot.
    pub fn log_txns(&self) -> usize {
        self.log.len()
    }

    pub fn accepted_epoch(&self) -> u32 {
        self.accepted_epoch
    }

    pub fn current_epoch(&self) -> u32 {
        self.current_epoch
    }

    /// Whether this server waits to sync from an established leader before it votes
    /// (see `Restored::must_resync`).
    pub fn resyncing(&self) -> bool {
        self.resyncing
    }

    /// Whether an invariant broke (see `Ready::fatal`).
    pub fn failed(&self) -> bool {
        self.failed
    }

    // ---- helpers shared by the phases ----

    /// Reports the status if it changed.
    pub(crate) fn report_status(&mut self) {
        let now = self.status();
        if self.reported != Some(now) {
            self.reported = Some(now);
            self.out.building().status = Some(now);
        }
    }

    /// An invariant broke: stop, and tell the runtime.
    pub(crate) fn fail(&mut self, why: String) {
        self.failed = true;
        self.out.building().fatal = Some(why);
    }

    /// What is durable once every op emitted so far is done.
    fn durable_after(&self) -> Durable {
        Durable {
            log_zxid: self.log.last_zxid(),
            accepted_epoch: self.accepted_epoch,
            current_epoch: self.current_epoch,
        }
    }

    /// Queues a durable change reflecting the in-memory state.
    pub(crate) fn persist(&mut self, op: PersistOp) {
        let after = self.durable_after();
        self.out.persist(op, after);
    }

    /// Sets and persists accepted_epoch.
    pub(crate) fn persist_accepted_epoch(&mut self, epoch: u32) {
        self.accepted_epoch = epoch;
        if self.cfg.bug(PlantedBug::SkipEpochPersist) {
            self.durable.accepted_epoch = epoch;
            return;
        }
        self.persist(PersistOp::AcceptedEpoch(epoch));
    }

    /// Sets and persists current_epoch.
    pub(crate) fn persist_current_epoch(&mut self, epoch: u32) {
        self.current_epoch = epoch;
        if self.cfg.bug(PlantedBug::SkipEpochPersist) {
            self.durable.current_epoch = epoch;
            return;
        }
        self.persist(PersistOp::CurrentEpoch(epoch));
    }

    /// Appends txns above the log's last to the log and persists them.
    pub(crate) fn append(&mut self, txns: Vec<Txn>) {
        let mut fresh = Vec::with_capacity(txns.len());
        for txn in txns {
            if self.log.append(txn.clone()) {
                fresh.push(txn);
            }
        }
        if !fresh.is_empty() {
            self.persist(PersistOp::Append(fresh));
        }
    }

    /// Cuts the log after `zxid` (never below what is committed).
    pub(crate) fn truncate(&mut self, zxid: Zxid) -> bool {
        if zxid < self.applied_out || zxid < self.committed.min(self.log.last_zxid()) {
            self.fail(format!(
                "TRUNC to {zxid:#x} would cut committed history (committed {:#x})",
                self.committed
            ));
            return false;
        }
        self.log.truncate_after(zxid);
        self.durable.log_zxid = self.durable.log_zxid.min(zxid);
        self.out.clamp_log(zxid);
        self.persist(PersistOp::Truncate { after: zxid });
        true
    }

    /// Replaces the history by a snapshot (never one older than what was applied).
    pub(crate) fn install_snapshot(&mut self, snapshot: Snapshot) -> bool {
        if snapshot.zxid < self.applied_out {
            self.fail(format!(
                "SNAP at {:#x} is older than applied {:#x}",
                snapshot.zxid, self.applied_out
            ));
            return false;
        }
        let zxid = snapshot.zxid;
        // The bytes go to storage only: a SNAP this server sends later is read from
        // there (one sent before they are durable finds nothing, ends its stream,
        // and the learner syncs again).
        self.log.install(zxid);
        self.durable.log_zxid = self.durable.log_zxid.min(self.applied_out);
        self.out.clamp_log(self.applied_out);
        self.persist(PersistOp::Snapshot(snapshot));
        self.out.building().committed.retain(|t| t.zxid > zxid);
        self.applied_out = zxid;
        self.committed = self.committed.max(zxid);
        true
    }

    /// Hands out committed txns, in order. Committed means durable on a quorum, so,
    /// as in ZooKeeper, they are applied whether or not this server's own log has
    /// them durable yet, unless applies are held (`hold_applies_at_durable`).
    pub(crate) fn release_committed(&mut self) {
        let mut up_to = self.committed.min(self.log.last_zxid());
        if self.applies_held_at_durable {
            up_to = up_to.min(self.durable.log_zxid);
        }
        if up_to <= self.applied_out {
            return;
        }
        let txns = self.log.range(self.applied_out, up_to).cloned();
        self.applied_out = up_to;
        self.out.building().committed.extend(txns);
    }

    /// Reacts to newly durable state (the leader counts itself).
    fn after_durable(&mut self) {
        if matches!(self.state, State::Leading(_)) {
            self.leader_after_durable();
        }
    }

    /// A fresh random learner session id.
    pub(crate) fn new_session(&mut self) -> u64 {
        self.rng.next_u64() | 1
    }
}
