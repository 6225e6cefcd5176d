//! The replica engine: what a server does with its Zab core's output, with no IO and
//! no awaits of its own, its clocks the host's, so that the tokio pipeline
//! (`pipeline.rs`) runs it in production and the simulator (`sim`) runs the very
//! same code in tests.
//!
//! It owns the Zab core (`zab::Node`), the table of callers waiting for their
//! writes, the read-index requests, the snapshot policy that bounds the core's log,
//! the quota ledger checked before each proposal, and the session deadlines kept in
//! step with the applied tree. It applies committed txns to the tree in zxid order and
//! installs a snapshot sent by the leader. Everything that leaves it goes through its
//! `Host`: messages to peers, persist jobs, snapshot requests, answers, the events and
//! status that readers see, and the clocks. The production host hands them to tasks
//! and channels (none of its calls blocks); the simulator's records them for its event
//! queue and checker. (TigerBeetle's replica is built the same way: one state machine,
//! generic over its message bus, storage and time.)
//!
//! ```text
//!   propose / read_index / tick / step / persisted / compacted ─▶ Node
//!   drain: Node.ready() ─▶ host.send (messages), install (SNAP), host.persist,
//!          apply (tree, quota, sessions) ─▶ host.publish per txn, host.answer,
//!          host.snapshot when due, host.status, host.answer_read
//! ```
//!
//! What it must not do: wait for anything (the host's calls return at once), decide
//! by a clock other than the host's (only the spans of sampled traces read the wall
//! clock), or apply a txn the core has not handed out as committed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::SystemTime;

use super::forward::Write;
use super::{Committed, ReplicaError};
use crate::security::quota::Ledger;
use crate::session::SessionTracker;
use crate::telemetry::trace::WriteTrace;
use crate::telemetry::Metrics;
use crate::tree::{DataTree, Event, TreeError, TxnResult};
use crate::txn::{Txn, TxnOp, Zxid};
use crate::zab::log::{txn_bytes, Covered};
use crate::zab::{Envelope, Message, Node, PersistOp, Ready, Role, ServerId, Snapshot, Status};

/// A caller waiting for its write; told when its write is proposed.
pub(crate) trait Caller {
    /// The core gave the write its zxid.
    fn proposed(&mut self) {}
}

impl Caller for () {}

/// Where the engine's effects go: IO in production, the event queue in the simulator.
/// No call may block or await.
pub(crate) trait Host {
    /// Who waits for a write's outcome.
    type Caller: Caller;
    /// Who waits for a read index.
    type Reader;
    /// Logical milliseconds (session deadlines).
    fn now_ms(&self) -> u64;
    /// Wall-clock milliseconds since the Unix epoch (a leader's txn times).
    fn wall_ms(&self) -> i64;
    /// Sends a message to a peer now (its preconditions are durable).
    fn send(&mut self, envelope: Envelope);
    /// Makes a Ready's persist ops durable, in order, then reports `number` to
    /// `Engine::persisted`; `traced` are the sampled writes among them. False if it
    /// cannot (the server must stop).
    fn persist(
        &mut self,
        number: u64,
        ops: Vec<PersistOp>,
        traced: Vec<(WriteTrace, Zxid)>,
    ) -> bool;
    /// Writes a snapshot of `tree` and then reports its zxid to `Engine::compacted`;
    /// false if one is still being written (the engine asks again later).
    fn snapshot(&mut self, tree: DataTree) -> bool;
    /// The tree was replaced by a snapshot at `zxid` (under the tree's write lock).
    fn installed(&mut self, zxid: Zxid, tree: &DataTree);
    /// `txn` was applied, with `events`, leaving `tree` (under the tree's write lock).
    fn publish(&mut self, txn: &Txn, events: &[Event], tree: &DataTree);
    /// A batch was applied up to `zxid` (under the tree's write lock).
    fn applied(&mut self, zxid: Zxid);
    /// A write's outcome. `Ok` with zxid 0 was refused before it was proposed.
    fn answer(&mut self, caller: Self::Caller, outcome: Result<Committed, ReplicaError>);
    /// A read index, or why there is none.
    fn answer_read(&mut self, reader: Self::Reader, index: Result<Zxid, ReplicaError>);
    /// The core's status changed; `serving`: it leads an established epoch.
    fn status(&mut self, status: &Status, serving: bool);
    /// What the core has committed and its log holds now (after each drain).
    fn progress(&mut self, committed: Zxid, log_bytes: u64);
    /// Something broke: the server must stop.
    fn fatal(&mut self, reason: String);
    /// Txns the core no longer keeps (the log a snapshot covers), to be freed
    /// where it delays nobody: a snapshot interval's worth takes milliseconds.
    fn discard(&mut self, txns: Covered);
}

/// A write for the engine to propose, and who waits for it.
pub(crate) struct Request<C> {
    pub(crate) write: Write,
    pub(crate) caller: C,
}

/// A caller of a proposed write.
struct Waiting<C> {
    caller: C,
    /// Its trace and when it was proposed, if it is in a sampled trace.
    trace: Option<(WriteTrace, SystemTime)>,
}

/// When the engine asks for a snapshot, and how much the Zab core's in-memory log
/// may hold. The core keeps every txn after its newest snapshot (for DIFF and for
/// handing out committed txns), so snapshots are what bound its memory: one is asked
/// for once `every_txns` txns or `every_bytes` bytes were applied since the last
/// request, one at a time. While a snapshot is being written the log keeps growing;
/// once it holds `log_bytes_max`, the leader takes no new proposals (they wait in
/// the bounded proposal queue) and a learner reads no peer message (the leader's
/// proposals wait in the peer stream) until the snapshot has compacted it.
///
/// ```text
///   apply ─▶ txns/bytes since the last request ≥ every_*? ─▶ host.snapshot (one pending)
///   compacted ─▶ node.compact (log drops what it covers) ─▶ due again?
///   node.log_bytes() ≥ log_bytes_max ─▶ the leader holds new proposals back;
///     a learner with a snapshot pending stops reading its peers
/// ```
#[derive(Debug)]
pub(crate) struct SnapshotPolicy {
    /// Ask for a snapshot after this many applied txns.
    every_txns: u64,
    /// Ask for a snapshot after this many applied bytes (`zab::log::txn_bytes`).
    every_bytes: u64,
    /// The leader takes no new proposal, and a learner with a snapshot pending
    /// reads no peer message, while the core's log holds this much.
    log_bytes_max: u64,
    /// Txns applied since the last snapshot request.
    txns: u64,
    /// Bytes applied since the last snapshot request.
    bytes: u64,
    /// A snapshot was requested and has not come back compacted yet.
    pending: bool,
}

impl SnapshotPolicy {
    pub(crate) fn new(every_txns: u64, every_bytes: u64, log_bytes_max: u64) -> SnapshotPolicy {
        SnapshotPolicy {
            every_txns,
            every_bytes,
            log_bytes_max,
            txns: 0,
            bytes: 0,
            pending: false,
        }
    }

    /// Counts applied txns.
    fn applied(&mut self, txns: &[Txn]) {
        self.txns += txns.len() as u64;
        let bytes: usize = txns.iter().map(txn_bytes).sum();
        self.bytes = self.bytes.saturating_add(bytes as u64);
    }

    /// Whether to ask for a snapshot now.
    fn due(&self) -> bool {
        !self.pending && (self.txns >= self.every_txns || self.bytes >= self.every_bytes)
    }

    /// A snapshot was handed to the host.
    fn requested(&mut self) {
        self.txns = 0;
        self.bytes = 0;
        self.pending = true;
    }

    /// Whether a log holding `log_bytes` may take another proposal.
    fn has_room(&self, log_bytes: usize) -> bool {
        (log_bytes as u64) < self.log_bytes_max
    }
}

/// The state the engine shares with the server's readers (the API reads the tree
/// and the session deadlines under these locks; the engine is their only writer).
#[derive(Clone)]
pub(crate) struct Readable {
    pub(crate) tree: Arc<RwLock<DataTree>>,
    pub(crate) sessions: Arc<Mutex<SessionTracker>>,
    pub(crate) metrics: Arc<Metrics>,
}

impl Readable {
    /// The session deadlines (keep-alives touch them; the leader's expiry takes from
    /// them).
    pub(crate) fn sessions(&self) -> std::sync::MutexGuard<'_, SessionTracker> {
        super::lock(&self.sessions)
    }
}

/// The engine's state.
pub(crate) struct Engine<H: Host> {
    pub(crate) host: H,
    node: Node,
    readable: Readable,
    /// Callers of this server's proposals, by the zxid the core gave them.
    waiting: HashMap<Zxid, Waiting<H::Caller>>,
    /// Callers of read-index requests, by request id.
    reading: HashMap<u64, H::Reader>,
    next_read_id: u64,
    /// The last wall time stamped, so txn times never go backwards.
    last_time_ms: i64,
    /// When a snapshot is due, and how the core's in-memory log is bounded.
    snapshot_policy: SnapshotPolicy,
    /// The teams' nodes and data quotas, and what this leader's proposed, unapplied
    /// writes reserve of them (checked before each proposal; `security::quota`).
    quota: Ledger,
    /// Whether this server leads an established epoch, as the core last said.
    serving: bool,
    /// The last established leadership (leader, epoch) counted in
    /// `concord_server_leader_changes_seen_total`.
    leadership_seen: Option<(u64, u32)>,
}

impl<H: Host> Engine<H> {
    pub(crate) fn new(
        host: H,
        node: Node,
        readable: Readable,
        snapshot_policy: SnapshotPolicy,
        quota: Ledger,
    ) -> Engine<H> {
        Engine {
            host,
            node,
            readable,
            waiting: HashMap::new(),
            reading: HashMap::new(),
            next_read_id: 0,
            last_time_ms: 0,
            snapshot_policy,
            quota,
            serving: false,
            leadership_seen: None,
        }
    }

    /// The Zab core (for status and progress reports).
    pub(crate) fn node(&self) -> &Node {
        &self.node
    }

    /// Whether this server leads an established epoch (takes writes).
    pub(crate) fn serving(&self) -> bool {
        self.serving
    }

    /// Proposed writes not yet answered.
    pub(crate) fn in_flight(&self) -> usize {
        self.waiting.len()
    }

    /// Whether the core's log may take another proposal.
    pub(crate) fn log_has_room(&self) -> bool {
        self.snapshot_policy.has_room(self.node.log_bytes())
    }

    /// Whether the core's log is full and a snapshot that will compact it is being
    /// written (a learner then stops reading its peers: see `pipeline.rs`).
    pub(crate) fn waits_for_snapshot(&self) -> bool {
        !self.log_has_room() && self.snapshot_policy.pending
    }

    /// One message from a peer.
    pub(crate) fn step(&mut self, from: ServerId, msg: Message) {
        self.node.step(from, msg);
    }

    /// A peer's stream ended.
    pub(crate) fn peer_lost(&mut self, from: ServerId) {
        self.node.peer_lost(from);
    }

    /// Readies up to `number` are durable (a snapshot waiting for the log may go).
    pub(crate) fn persisted(&mut self, number: u64) {
        self.node.persisted(number);
        self.maybe_snapshot();
    }

    /// One tick of the core's clock. A leader that steps down for want of a quorum
    /// says which learners it last heard from how many ticks before, and how many
    /// peer messages were waiting unread (`unread`, from the host).
    pub(crate) fn tick(&mut self, unread: usize) {
        let heard = if self.node.status().role == Role::Leading {
            self.node.learner_progress()
        } else {
            Vec::new()
        };
        self.node.tick();
        if !heard.is_empty() && self.node.status().role != Role::Leading {
            let heard: Vec<_> = heard
                .iter()
                .map(|p| (p.id, p.heard_ticks_ago + 1))
                .collect();
            tracing::warn!(
                ?heard,
                unread_peer_messages = unread,
                "stepped down on a tick: no quorum heard from in time (learner, ticks since heard)"
            );
        }
    }

    /// Hands a batch of client writes to the core, remembering each caller. On a
    /// serving leader whose log is full (`SnapshotPolicy::log_bytes_max`), the rest
    /// of the batch stays in `batch` until a snapshot makes room. A write that would
    /// exceed its team's quota is answered QuotaExceeded and never proposed, and so is
    /// one checked on a tree older than the last grant change (GrantsChanged).
    pub(crate) fn propose(&mut self, batch: &mut Vec<Request<H::Caller>>) {
        self.last_time_ms = self.last_time_ms.max(self.host.wall_ms());
        let mut held = Vec::new();
        let readable = self.readable.clone();
        // The engine is the tree's only writer: this is the applied tree, and
        // nothing is applied while the batch is proposed.
        let tree = readable.tree.read().unwrap_or_else(PoisonError::into_inner);
        for r in batch.drain(..) {
            if !held.is_empty() || (self.serving && !self.log_has_room()) {
                held.push(r);
                continue;
            }
            let w = &r.write;
            let refused = if w.checked_at != 0 && tree.grants_zxid() > w.checked_at {
                Err(TreeError::GrantsChanged {
                    zxid: tree.grants_zxid(),
                })
            } else {
                self.quota.check(&tree, w.session_id, w.request_id, &w.op)
            };
            let reservation = match refused {
                Ok(reservation) => reservation,
                Err(refused) => {
                    let committed = Committed {
                        zxid: 0,
                        result: Err(refused),
                    };
                    self.host.answer(r.caller, Ok(committed));
                    continue;
                }
            };
            let Request { write, mut caller } = r;
            let txn = Txn {
                zxid: 0,
                time_ms: self.last_time_ms,
                session_id: write.session_id,
                request_id: write.request_id,
                fence: write.fence,
                op: write.op,
            };
            match self.node.propose(txn) {
                Ok(zxid) => {
                    self.quota.reserve(zxid, reservation);
                    caller.proposed();
                    let trace = write.trace.map(|t| {
                        let now = SystemTime::now();
                        t.record("propose", t.handed_on_at(), now, Some(zxid));
                        (t, now)
                    });
                    self.waiting.insert(zxid, Waiting { caller, trace });
                }
                Err(e) => {
                    self.readable.metrics.proposals_failed.inc();
                    self.host.answer(caller, Err(e.into()));
                }
            }
        }
        *batch = held;
    }

    /// Asks the core for a read index (answered in a later Ready).
    pub(crate) fn read_index(&mut self, reader: H::Reader) {
        self.next_read_id += 1;
        let id = self.next_read_id;
        match self.node.read_index(id) {
            Ok(()) => {
                self.reading.insert(id, reader);
            }
            Err(e) => self.host.answer_read(reader, Err(e.into())),
        }
    }

    /// Handles Readies until the core has nothing more; false once it must stop.
    pub(crate) fn drain(&mut self) -> bool {
        let running = loop {
            let ready = self.node.ready();
            if ready.is_empty() {
                break true;
            }
            if !self.handle(ready) {
                break false;
            }
        };
        let pending = i64::try_from(self.waiting.len()).unwrap_or(i64::MAX);
        self.readable.metrics.proposals_pending.set(pending);
        let (committed, log_bytes) = (self.node.committed_zxid(), self.node.log_bytes());
        self.host.progress(committed, log_bytes as u64);
        running
    }

    /// One Ready, in the order the core requires.
    fn handle(&mut self, ready: Ready) -> bool {
        for env in ready.messages {
            self.host.send(env);
        }
        if let Some(snapshot) = ready.persist.iter().rev().find_map(|op| match op {
            PersistOp::Snapshot(s) => Some(s.clone()),
            _ => None,
        }) {
            if !self.install(&snapshot) {
                return false;
            }
        }
        if !ready.persist.is_empty() {
            let traced = self.traced(&ready.persist);
            if !self.host.persist(ready.number, ready.persist, traced) {
                self.host.fatal("the persister has stopped".into());
                return false;
            }
        }
        let committed = ready.committed.len() as u64;
        self.readable.metrics.proposals_committed.inc_by(committed);
        self.apply(ready.committed);
        if let Some(status) = ready.status {
            self.on_status(status);
        }
        for read in ready.reads {
            if let Some(reader) = self.reading.remove(&read.id) {
                self.host
                    .answer_read(reader, read.result.map_err(ReplicaError::from));
            }
        }
        if let Some(why) = ready.fatal {
            self.host.fatal(format!("zab: {why}"));
            return false;
        }
        true
    }

    /// The traced writes among the txns of persist ops, for their `fsync` spans.
    fn traced(&self, persist: &[PersistOp]) -> Vec<(WriteTrace, Zxid)> {
        persist
            .iter()
            .filter_map(|op| match op {
                PersistOp::Append(txns) => Some(txns),
                _ => None,
            })
            .flatten()
            .filter_map(|txn| {
                let (trace, _) = self.waiting.get(&txn.zxid)?.trace.as_ref()?;
                Some((trace.clone(), txn.zxid))
            })
            .collect()
    }

    /// A snapshot from the leader replaces the tree (learners far behind): watches
    /// are told the history jumped, and session deadlines start afresh from it.
    /// False if it does not decode (the server must stop).
    fn install(&mut self, snapshot: &Snapshot) -> bool {
        match DataTree::decode_snapshot(&snapshot.data) {
            Ok(mut tree) => {
                tree.track_usage(self.quota.roots());
                self.quota.recount_sessions_of(&tree);
                *self.sessions() = super::deadlines_of(&tree, self.host.now_ms());
                let mut applied = self
                    .readable
                    .tree
                    .write()
                    .unwrap_or_else(PoisonError::into_inner);
                *applied = tree;
                self.host.installed(snapshot.zxid, &applied);
                true
            }
            Err(e) => {
                let zxid = snapshot.zxid;
                self.host
                    .fatal(format!("snapshot at {zxid:#x} does not decode: {e}"));
                false
            }
        }
    }

    /// Applies committed txns in order, publishes events, answers callers; asks for a
    /// snapshot when enough txns or bytes went by.
    fn apply(&mut self, txns: Vec<Txn>) {
        let Some(last) = txns.last().map(|t| t.zxid) else {
            return;
        };
        let mut replies = Vec::new();
        {
            let readable = self.readable.clone();
            let mut tree = readable
                .tree
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            for txn in &txns {
                let closing_owner = match &txn.op {
                    TxnOp::CloseSession { session_id, .. } => {
                        tree.session(*session_id).map(|s| s.owner.clone())
                    }
                    _ => None,
                };
                let waiter = self.waiting.remove(&txn.zxid);
                // A traced write's quorum span ends, and its apply span begins, here.
                let traced = waiter.as_ref().and_then(|w| w.trace.as_ref());
                let apply_started = traced.map(|(trace, proposed)| {
                    let now = SystemTime::now();
                    trace.record("quorum", *proposed, now, Some(txn.zxid));
                    now
                });
                let applied = tree.apply(txn);
                self.quota.settle(txn.zxid);
                self.quota
                    .applied(&txn.op, &applied.result, closing_owner.as_deref());
                let applied_at = traced.zip(apply_started).map(|((trace, _), started)| {
                    let now = SystemTime::now();
                    trace.record("apply", started, now, Some(txn.zxid));
                    now
                });
                self.host.publish(txn, &applied.events, &tree);
                self.track_sessions(txn, &applied.result);
                if let Some(waiter) = waiter {
                    let committed = Committed {
                        zxid: txn.zxid,
                        result: applied.result,
                    };
                    let trace = waiter.trace.map(|(t, _)| t).zip(applied_at);
                    replies.push((waiter.caller, committed, trace));
                }
            }
            self.host.applied(last);
        }
        self.snapshot_policy.applied(&txns);
        let applied = txns.len() as u64;
        self.readable.metrics.proposals_applied.inc_by(applied);
        for (caller, committed, trace) in replies {
            let zxid = committed.zxid;
            // The caller may have gone (cancelled); the write stands regardless.
            self.host.answer(caller, Ok(committed));
            if let Some((trace, applied_at)) = trace {
                trace.record("reply", applied_at, SystemTime::now(), Some(zxid));
            }
        }
        self.maybe_snapshot();
    }

    /// Keeps the session deadlines in step with the replicated session table.
    fn track_sessions(&self, txn: &Txn, result: &Result<TxnResult, TreeError>) {
        match (&txn.op, result) {
            (
                TxnOp::OpenSession { .. } | TxnOp::OpenOwnedSession { .. },
                Ok(TxnResult::SessionOpened { session_id, ttl_ms }),
            ) => {
                let ttl = u64::try_from(*ttl_ms).unwrap_or(0);
                let now = self.host.now_ms();
                self.sessions().add(*session_id, ttl, now);
            }
            (TxnOp::CloseSession { session_id, .. }, _) => {
                self.sessions().remove(*session_id);
            }
            _ => {}
        }
    }

    /// The session deadlines (`Readable::sessions`).
    pub(crate) fn sessions(&self) -> std::sync::MutexGuard<'_, SessionTracker> {
        self.readable.sessions()
    }

    /// Asks the host for a snapshot of the applied tree if one is due (and none is
    /// being written: that one's compaction asks again). Committed txns are applied
    /// before this server's own log has them durable, and a snapshot must not be
    /// above the log's durable end (`Node::durable_log_zxid`): until the log reaches
    /// the applied state, applies are held at it, and the snapshot is taken once it
    /// has (`persisted` asks again).
    fn maybe_snapshot(&mut self) {
        if !self.snapshot_policy.due() {
            return;
        }
        // The engine is the tree's only writer: this is the applied state.
        let tree = {
            let tree = self
                .readable
                .tree
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            let durable = tree.last_zxid() <= self.node.durable_log_zxid();
            self.node.hold_applies_at_durable(!durable);
            if !durable {
                return;
            }
            tree.clone()
        };
        if self.host.snapshot(tree) {
            self.snapshot_policy.requested();
        }
    }

    /// A requested snapshot is written: the core lets go of the log it covers, which
    /// the host frees, and the next snapshot may be asked for.
    pub(crate) fn compacted(&mut self, zxid: Zxid) {
        let covered = self.node.compact(zxid);
        self.host.discard(covered);
        self.snapshot_policy.pending = false;
        self.maybe_snapshot();
    }

    /// The role changed: a leader that stops serving fails its waiting callers as
    /// "outcome unknown" (their txns may still commit).
    fn on_status(&mut self, status: Status) {
        let serving = status.role == Role::Leading && status.serving;
        tracing::info!(role = ?status.role, leader = ?status.leader, epoch = status.epoch, serving, "zab status");
        self.count_leadership(status);
        if serving && !self.serving {
            // A new leader cannot know which sessions were kept alive elsewhere
            // while there was none: each gets a full TTL before any expires.
            let now = self.host.now_ms();
            self.sessions().refresh_all(now);
        }
        self.host.status(&status, serving);
        let was = std::mem::replace(&mut self.serving, serving);
        if was != serving {
            // Whatever this server proposed before is applied, or gone, by the time
            // it serves again.
            self.quota.clear();
        }
        if was && !serving {
            const WHY: &str = "leadership lost with the write proposed";
            self.fail_all(ReplicaError::Indeterminate(WHY.into()), WHY);
        }
    }

    /// Counts a leadership this server sees established (it leads an established
    /// epoch, or its learner sync finished) that it had not counted before.
    fn count_leadership(&mut self, status: Status) {
        let Some(leader) = status.leader.filter(|_| status.serving) else {
            return;
        };
        let seen = Some((leader, status.epoch));
        if self.leadership_seen != seen {
            self.leadership_seen = seen;
            self.readable.metrics.leader_changes.inc();
        }
    }

    /// The server stops: every waiting caller and read hears Unavailable.
    pub(crate) fn stop(&mut self, why: &str) {
        self.fail_all(ReplicaError::Unavailable(why.into()), why);
    }

    /// Answers every waiting caller with `error` and every read with Unavailable
    /// (a read may simply be retried). On a lost leadership `error` is
    /// Indeterminate: proposed writes may still commit under the next leader.
    fn fail_all(&mut self, error: ReplicaError, why: &str) {
        let failed = self.waiting.len() as u64;
        self.readable.metrics.proposals_failed.inc_by(failed);
        for (_, waiter) in self.waiting.drain() {
            self.host.answer(waiter.caller, Err(error.clone()));
        }
        for (_, reader) in self.reading.drain() {
            let unavailable = ReplicaError::Unavailable(why.into());
            self.host.answer_read(reader, Err(unavailable));
        }
    }
}
