//! The write pipeline: one task owns the Zab core (`zab::Node`) and drives it. Client
//! writes become proposals (the core assigns their zxids), linearizable reads ask it
//! for a read index, ticks keep its time; every output (`Ready`) is handled in order:
//! persist ops go to the persister (group commit, off this loop), committed txns are
//! applied to the tree in zxid order, their events published and their callers
//! answered.
//!
//! ```text
//!   proposals, reads, ticks, persisted(n), compactions ─▶ Node ─ready()─▶
//!     persist ops ─▶ persister ─▶ persisted(n) ─▶ Node
//!     committed   ─▶ tree.apply ─▶ watch hub ─▶ callers waiting on those zxids
//!     status / reads / fatal ─▶ serving flag, read waiters, stop
//! ```
//!
//! Snapshots are asked for by txns and by bytes applied (`SnapshotPolicy`), which
//! bounds the core's in-memory log in bytes; a leader whose log is full holds new
//! proposals back until the snapshot being written compacts it, and any other server
//! whose log is full stops reading its peers (and lets its clock stand) until its own
//! snapshot does.
//!
//! Back-pressure, in bytes: a caller takes its write's share of
//! `proposal_queue_bytes_max` before queueing it and keeps it until answered; a
//! batch closes at `batch_bytes_max`; while the persister holds more than
//! `persist_queue_bytes_max`, the loop takes no writes and, unless it leads, no
//! peer messages and no ticks (the peer streams wait; its clock stands), only
//! reads and the persister's progress.
//!
//! What it must not do: await storage itself (the persister does), or apply a txn
//! the core has not handed out as committed.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::forward::Write;
use super::persist::{Done, PersistJob, Persister};
use super::{Committed, Proposal, ReadWaiter, ReplicaError, Shared};
use crate::peer::{Inbound, InboundRx, PeerHandle};
use crate::security::quota::Ledger;
use crate::telemetry::trace::WriteTrace;
use crate::tree::{DataTree, TreeError, TxnResult};
use crate::txn::{Txn, TxnOp, Zxid};
use crate::zab::log::txn_bytes;
use crate::zab::{Node, ReadState, Ready, Role, Snapshot, Status};

/// A snapshot request: the tree as of one zxid (an O(1) clone).
pub(super) type SnapshotJob = DataTree;

/// When the pipeline asks for a snapshot, and how much the Zab core's in-memory log
/// may hold. The core keeps every txn after its newest snapshot (for DIFF and for
/// handing out committed txns), so snapshots are what bound its memory: one is asked
/// for once `every_txns` txns or `every_bytes` bytes were applied since the last
/// request, one at a time. While a snapshot is being written the log keeps growing;
/// once it holds `log_bytes_max`, the leader takes no new proposals (they wait in
/// the bounded proposal queue) and a learner reads no peer message (the leader's
/// proposals wait in the peer stream) until the snapshot has compacted it.
///
/// ```text
///   apply ─▶ txns/bytes since the last request ≥ every_*? ─▶ snapshotter (one pending)
///   snapshotter ─▶ compacted ─▶ node.compact (log drops what it covers) ─▶ due again?
///   node.log_bytes() ≥ log_bytes_max ─▶ the leader holds new proposals back;
///     a learner with a snapshot pending stops reading its peers
/// ```
#[derive(Debug)]
pub(super) struct SnapshotPolicy {
    /// Ask for a snapshot after this many applied txns.
    pub(super) every_txns: u64,
    /// Ask for a snapshot after this many applied bytes (`zab::log::txn_bytes`).
    pub(super) every_bytes: u64,
    /// The leader takes no new proposal, and a learner with a snapshot pending
    /// reads no peer message, while the core's log holds this much.
    pub(super) log_bytes_max: u64,
    /// Txns applied since the last snapshot request.
    pub(super) txns: u64,
    /// Bytes applied since the last snapshot request.
    pub(super) bytes: u64,
    /// A snapshot was requested and has not come back compacted yet.
    pub(super) pending: bool,
}

impl SnapshotPolicy {
    pub(super) fn new(every_txns: u64, every_bytes: u64, log_bytes_max: u64) -> SnapshotPolicy {
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

    /// A snapshot was handed to the snapshotter.
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

/// Bytes counted for a write besides its op (the caller, the txn's header).
const WRITE_OVERHEAD_BYTES: usize = 64;

/// The byte budget of writes queued for the pipeline or in flight there
/// (`proposal_queue_bytes_max`): a caller takes its write's share before queueing
/// it and gives it back once answered, so a flood of large writes waits in its
/// callers instead of in memory here.
pub(super) struct ProposalBytes {
    permits: Arc<Semaphore>,
    /// The budget; a write heavier than it takes all of it.
    bytes_max: usize,
}

impl ProposalBytes {
    pub(super) fn new(bytes_max: usize) -> ProposalBytes {
        let bytes_max = bytes_max.clamp(1, Semaphore::MAX_PERMITS);
        ProposalBytes {
            permits: Arc::new(Semaphore::new(bytes_max)),
            bytes_max,
        }
    }

    /// Bytes of the budget in use now (writes queued or in flight), and the budget.
    pub(super) fn in_use(&self) -> (usize, usize) {
        let free = self.permits.available_permits().min(self.bytes_max);
        (self.bytes_max - free, self.bytes_max)
    }

    /// Bytes of the budget free now.
    #[cfg(test)]
    pub(super) fn available(&self) -> usize {
        self.permits.available_permits()
    }
}

/// A write's share of the proposal byte budget, given back when dropped.
pub(super) struct Admitted {
    permit: OwnedSemaphorePermit,
}

impl Admitted {
    /// The write's weight.
    fn bytes(&self) -> usize {
        self.permit.num_permits()
    }
}

/// Waits for `write`'s share of the budget; None once the pipeline has stopped.
pub(super) async fn admit(budget: &ProposalBytes, write: &Write) -> Option<Admitted> {
    let bytes = crate::zab::log::op_bytes(&write.op)
        .saturating_add(WRITE_OVERHEAD_BYTES)
        .min(budget.bytes_max);
    let n = u32::try_from(bytes).unwrap_or(u32::MAX);
    let permit = budget.permits.clone().acquire_many_owned(n).await.ok()?;
    Some(Admitted { permit })
}

/// A caller waiting for its write.
pub(super) struct Waiter {
    reply: oneshot::Sender<Result<Committed, ReplicaError>>,
    /// The write's share of the byte budget, given back when it is answered.
    _bytes: Admitted,
    /// When it was proposed (`concord_server_proposal_commit_duration_seconds`).
    proposed_at: Instant,
    /// Its trace and when it was proposed, if it is in a sampled trace.
    trace: Option<(WriteTrace, SystemTime)>,
}

/// A batch of traced writes being made durable here, for their `fsync` spans.
pub(super) struct Fsync {
    /// The Ready whose persist ops hold them (`Node::persisted` reports it).
    number: u64,
    started: SystemTime,
    writes: Vec<(WriteTrace, Zxid)>,
}

/// Most batches of traced writes waiting for their `fsync` spans; more go untraced
/// (the persister's queue holds fewer batches than this in practice).
const FSYNCS_TRACED_MAX: usize = 1024;

/// What the pipeline listens to besides the clock.
pub(super) struct Inputs {
    pub(super) proposals: mpsc::Receiver<Proposal>,
    pub(super) reads: mpsc::Receiver<ReadWaiter>,
    /// `Ok(number)`: Readies up to `number` are durable; `Err`: storage failed.
    pub(super) persisted: Done,
    /// The zxids of snapshots written by the snapshotter, for `Node::compact`.
    pub(super) compacted: mpsc::Receiver<Zxid>,
    /// Messages from the other servers (None: an ensemble of one).
    pub(super) peers: Option<InboundRx>,
}

/// The task's state.
pub(super) struct Pipeline {
    pub(super) shared: Arc<Shared>,
    pub(super) node: Node,
    /// Callers of this server's proposals, by the zxid the core gave them.
    pub(super) waiting: HashMap<Zxid, Waiter>,
    /// Batches of traced writes sent to the persister and not yet durable, oldest
    /// first (at most `FSYNCS_TRACED_MAX`).
    pub(super) fsyncs: VecDeque<Fsync>,
    /// Callers of read-index requests, by request id.
    pub(super) reading: HashMap<u64, ReadWaiter>,
    pub(super) next_read_id: u64,
    /// The last wall time stamped, so txn times never go backwards.
    pub(super) last_time_ms: i64,
    /// Where persist ops go (the persister thread).
    pub(super) persist: Persister,
    /// Where snapshot requests go (the snapshotter task; one at a time).
    pub(super) snapshots: mpsc::Sender<SnapshotJob>,
    /// When a snapshot is due, and how the core's in-memory log is bounded.
    pub(super) snapshot_policy: SnapshotPolicy,
    pub(super) batch_txns_max: usize,
    /// A group-commit batch closes once its writes weigh this much.
    pub(super) batch_bytes_max: usize,
    /// Most proposals in flight (proposed, not yet answered). Bounds the callers
    /// waiting here and, with them, the persist queue: a flood of writes waits in
    /// the bounded proposal queue instead.
    pub(super) inflight_max: usize,
    pub(super) tick_ms: u64,
    /// Where messages to the other servers go (None: an ensemble of one).
    pub(super) peers: Option<PeerHandle>,
    /// The teams' nodes and data quotas, and what this leader's proposed, unapplied
    /// writes reserve of them (checked before each proposal; `security::quota`).
    pub(super) quota: Ledger,
    /// The last established leadership (leader, epoch) counted in
    /// `concord_server_leader_changes_seen_total`.
    pub(super) leadership_seen: Option<(u64, u32)>,
}

impl Pipeline {
    /// Runs until the server stops (`Shared::stop` is set) or storage fails.
    pub(super) async fn run(mut self, mut inputs: Inputs) {
        let mut interval = tokio::time::interval(Duration::from_millis(self.tick_ms.max(1)));
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut stop = self.shared.stop.subscribe();
        let mut batch = Vec::with_capacity(self.batch_txns_max);
        let mut running = self.handle_readies();
        while running {
            // A server that does not lead takes writes to answer NOT_LEADER at once
            // (the caller waits for a leader, bounded, and sends them there); a
            // leader establishing its epoch lets them wait until it serves. (The
            // role is the one the core last reported, kept in `Shared`.)
            let role = *self.shared.role.borrow();
            let leading = role == Role::Leading;
            let serving = *self.shared.serving.borrow();
            let log_room = self.snapshot_policy.has_room(self.node.log_bytes());
            // Proposals held back while the log was full go first, once it has room
            // (or at once, refused, if this server no longer leads).
            if !batch.is_empty() && (log_room || !serving) {
                self.propose(&mut batch);
                running = self.handle_readies();
                continue;
            }
            let room = self.inflight_max.saturating_sub(self.waiting.len());
            // Back-pressure: while the persister is over its byte budget, no new
            // writes come in (their callers wait). A server that does not lead also
            // stops reading its peers (the leader's PROPOSALs: its stream waits) and
            // lets its clock stand, so it does not call a leader it cannot hear
            // dead; its leader counts it absent meanwhile. A leader keeps hearing
            // acks and keeps its heartbeats going: its input from peers is small.
            let open = !self.persist.over_budget();
            // The same for a server that does not lead while its in-memory log is
            // full and a snapshot of its own is being written: that snapshot will
            // compact the log, and reading resumes once it is back. Meanwhile the
            // leader's proposals wait in this server's bounded inbound channel, the
            // peer stream, and the leader's queue for this server, which never
            // blocks the leader: full, it drops its oldest message, and this server,
            // seeing the gap once it reads again, registers anew and is synced by
            // DIFF or SNAP as after any outage (its leader counts it absent
            // meanwhile, as above). Never without a snapshot pending: the policy
            // asks for one as soon as `snapshot_every_*` went by since its last
            // request, so a full log with none pending holds less than that applied
            // and the rest is proposals not yet committed, which no snapshot can
            // drop; only the leader's COMMITs (peer messages) free them, so waiting
            // then would never end. Reading goes on instead: those proposals are
            // bounded by the leader's own log, held back at the same size.
            let hear_peers = self.hears_peers();
            let take = open && batch.is_empty() && ((serving && room > 0 && log_room) || !leading);
            let take_max = self.batch_txns_max.min(room.max(1));
            tokio::select! {
                _ = stop.wait_for(Option::is_some) => break,
                _ = interval.tick() => if hear_peers {
                    if !self.hear_waiting(&mut inputs.peers) {
                        break;
                    }
                    self.tick(&inputs.peers);
                },
                first = inputs.proposals.recv(), if take => {
                    let Some(first) = first else { break };
                    batch.push(first);
                    fill_batch(&mut inputs.proposals, &mut batch, take_max, self.batch_bytes_max);
                    self.propose(&mut batch);
                }
                Some(waiter) = inputs.reads.recv() => self.read_index(waiter),
                Ok(()) = inputs.persisted.changed() => {
                    let done = inputs.persisted.borrow_and_update().clone();
                    match done {
                        Ok(number) => {
                            self.fsynced(number);
                            self.node.persisted(number);
                        }
                        Err(e) => {
                            self.shared.set_fatal(format!("log append failed: {e}"));
                            break;
                        }
                    }
                }
                Some(zxid) = inputs.compacted.recv() => self.compacted(zxid),
                Some(inbound) = recv_peer(&mut inputs.peers), if hear_peers => self.hear(inbound),
            }
            running = self.handle_readies();
        }
        // Stopping: waiting callers and queued proposals are dropped unanswered,
        // so callers see Unavailable.
        self.fail_waiting("the write pipeline has stopped");
        self.shared.proposal_bytes.permits.close();
        if let Some(peers) = &self.peers {
            peers.shutdown().await;
        }
    }

    /// One message from a peer, or the end of its stream.
    fn hear(&mut self, inbound: Inbound) {
        match inbound {
            Inbound::Message(from, msg) => self.node.step(from, msg),
            Inbound::StreamLost(from) => self.node.peer_lost(from),
        }
    }

    /// Before a tick: every peer message already waiting is heard (as many as were
    /// queued when it began), each with its outputs handled, so the tick never counts
    /// a peer silent whose message has arrived. (The loop takes one input per
    /// iteration, and a tick may win the race against a queue of them.) False once
    /// storage failed.
    fn hear_waiting(&mut self, peers: &mut Option<InboundRx>) -> bool {
        let Some(rx) = peers else { return true };
        for _ in 0..rx.waiting() {
            if !self.hears_peers() {
                break;
            }
            let Ok(inbound) = rx.try_recv() else { break };
            self.hear(inbound);
            if !self.handle_readies() {
                return false;
            }
        }
        true
    }

    /// Whether peer input is read now (the back-pressure rules in `run`): always on
    /// a leader; on another server, not while its persister is over budget, nor
    /// while its log is full and a snapshot of its own is pending.
    fn hears_peers(&self) -> bool {
        let leading = *self.shared.role.borrow() == Role::Leading;
        let log_room = self.snapshot_policy.has_room(self.node.log_bytes());
        let log_wait = !log_room && self.snapshot_policy.pending;
        leading || (!self.persist.over_budget() && !log_wait)
    }

    /// One tick of the core's clock. A leader that steps down for want of a quorum
    /// says which learners it last heard from how many ticks before, and how many
    /// peer messages were waiting unread.
    fn tick(&mut self, peers: &Option<InboundRx>) {
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
                unread_peer_messages = peers.as_ref().map_or(0, InboundRx::waiting),
                "stepped down on a tick: no quorum heard from in time (learner, ticks since heard)"
            );
        }
        super::members::publish(&self.shared, &self.node);
    }

    /// Hands a batch of client writes to the core, remembering each caller. On a
    /// serving leader whose log is full (`SnapshotPolicy::log_bytes_max`), the rest
    /// of the batch stays in `batch` until a snapshot makes room. A write that would
    /// exceed its team's quota is answered QuotaExceeded and never proposed, and so is
    /// one checked on a tree older than the last grant change (GrantsChanged).
    fn propose(&mut self, batch: &mut Vec<Proposal>) {
        self.last_time_ms = self.last_time_ms.max(super::wall_ms());
        let serving = *self.shared.serving.borrow();
        let mut held = Vec::new();
        let shared = self.shared.clone();
        // The pipeline is the tree's only writer: this is the applied tree, and
        // nothing is applied while the batch is proposed.
        let tree = shared.tree.read().unwrap_or_else(PoisonError::into_inner);
        let proposed_at = Instant::now();
        for p in batch.drain(..) {
            if !held.is_empty()
                || (serving && !self.snapshot_policy.has_room(self.node.log_bytes()))
            {
                held.push(p);
                continue;
            }
            let w = &p.write;
            if w.checked_at != 0 && tree.grants_zxid() > w.checked_at {
                let committed = Committed {
                    zxid: 0,
                    result: Err(TreeError::GrantsChanged {
                        zxid: tree.grants_zxid(),
                    }),
                };
                let _ = p.reply.send(Ok(committed));
                continue;
            }
            let reservation = match self.quota.check(&tree, w.session_id, w.request_id, &w.op) {
                Ok(reservation) => reservation,
                Err(refused) => {
                    let committed = Committed {
                        zxid: 0,
                        result: Err(refused),
                    };
                    let _ = p.reply.send(Ok(committed));
                    continue;
                }
            };
            let txn = Txn {
                zxid: 0,
                time_ms: self.last_time_ms,
                session_id: p.write.session_id,
                request_id: p.write.request_id,
                fence: p.write.fence,
                op: p.write.op,
            };
            let trace = p.write.trace;
            match self.node.propose(txn) {
                Ok(zxid) => {
                    self.quota.reserve(zxid, reservation);
                    let trace = trace.map(|t| {
                        let now = SystemTime::now();
                        t.record("propose", t.handed_on_at(), now, Some(zxid));
                        (t, now)
                    });
                    let waiter = Waiter {
                        reply: p.reply,
                        _bytes: p.bytes,
                        proposed_at,
                        trace,
                    };
                    self.waiting.insert(zxid, waiter);
                }
                Err(e) => {
                    self.shared.metrics.proposals_failed.inc();
                    let _ = p.reply.send(Err(e.into()));
                }
            }
        }
        *batch = held;
    }

    /// Asks the core for a read index (answered in a later Ready).
    fn read_index(&mut self, waiter: ReadWaiter) {
        self.next_read_id += 1;
        let id = self.next_read_id;
        match self.node.read_index(id) {
            Ok(()) => {
                self.reading.insert(id, waiter);
            }
            Err(e) => {
                let _ = waiter.send(Err(e.into()));
            }
        }
    }

    /// Handles Readies until the core has nothing more; false once it must stop.
    fn handle_readies(&mut self) -> bool {
        loop {
            let ready = self.node.ready();
            let log_bytes = self.node.log_bytes() as u64;
            self.shared.log_bytes.store(log_bytes, Ordering::Relaxed);
            self.shared
                .log_bytes_peak
                .fetch_max(log_bytes, Ordering::Relaxed);
            let pending = i64::try_from(self.waiting.len()).unwrap_or(i64::MAX);
            self.shared.metrics.proposals_pending.set(pending);
            if ready.is_empty() {
                return true;
            }
            if !self.handle(ready) {
                return false;
            }
        }
    }

    /// One Ready, in the order the core requires.
    fn handle(&mut self, ready: Ready) -> bool {
        if let Some(peers) = &self.peers {
            for env in ready.messages {
                peers.send(env);
            }
        }
        if let Some(snapshot) = ready.persist.iter().rev().find_map(|op| match op {
            crate::zab::PersistOp::Snapshot(s) => Some(s.clone()),
            _ => None,
        }) {
            self.install(&snapshot);
        }
        if !ready.persist.is_empty() {
            self.trace_fsync(ready.number, &ready.persist);
            let job = PersistJob::new(ready.number, ready.persist);
            if !self.persist.send(job) {
                self.shared.set_fatal("the persister has stopped".into());
                return false;
            }
        }
        let committed = ready.committed.len() as u64;
        self.shared.metrics.proposals_committed.inc_by(committed);
        self.apply(ready.committed);
        self.shared
            .committed
            .store(self.node.committed_zxid(), Ordering::Release);
        if let Some(status) = ready.status {
            self.on_status(status);
        }
        self.answer_reads(ready.reads);
        if let Some(why) = ready.fatal {
            self.shared.set_fatal(format!("zab: {why}"));
            return false;
        }
        true
    }

    /// A snapshot from the leader replaces the tree (learners far behind): watches
    /// are told the history jumped, and session deadlines start afresh from it.
    fn install(&mut self, snapshot: &Snapshot) {
        match DataTree::decode_snapshot(&snapshot.data) {
            Ok(mut tree) => {
                tree.track_usage(self.quota.roots());
                self.quota.recount_sessions_of(&tree);
                *self.shared.lock_sessions() = super::deadlines_of(&tree, self.shared.now_ms());
                *self
                    .shared
                    .tree
                    .write()
                    .unwrap_or_else(PoisonError::into_inner) = tree;
                self.shared.hub.resynchronize(snapshot.zxid);
                self.shared.applied.send_replace(snapshot.zxid);
            }
            Err(e) => self.shared.set_fatal(format!(
                "snapshot at {:#x} does not decode: {e}",
                snapshot.zxid
            )),
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
            let mut tree = self
                .shared
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
                self.shared.hub.publish(txn.zxid, &applied.events);
                track_sessions(&self.shared, txn, &applied.result);
                if let Some(waiter) = waiter {
                    let metrics = &self.shared.metrics;
                    metrics
                        .proposal_commit
                        .observe(waiter.proposed_at.elapsed());
                    let committed = Committed {
                        zxid: txn.zxid,
                        result: applied.result,
                    };
                    let trace = waiter.trace.map(|(t, _)| t).zip(applied_at);
                    replies.push((waiter.reply, committed, trace));
                }
            }
            self.shared.applied.send_replace(last);
        }
        self.snapshot_policy.applied(&txns);
        let applied = txns.len() as u64;
        self.shared.metrics.proposals_applied.inc_by(applied);
        for (reply, committed, trace) in replies {
            let zxid = committed.zxid;
            // The caller may have gone (cancelled); the write stands regardless.
            let _ = reply.send(Ok(committed));
            if let Some((trace, applied_at)) = trace {
                trace.record("reply", applied_at, SystemTime::now(), Some(zxid));
            }
        }
        self.maybe_snapshot();
    }

    /// Asks the snapshotter for a snapshot of the applied tree if one is due (and
    /// none is being written: that one's compaction asks again).
    fn maybe_snapshot(&mut self) {
        if !self.snapshot_policy.due() {
            return;
        }
        // The pipeline is the tree's only writer: this is the applied state.
        let tree = self
            .shared
            .tree
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if self.snapshots.try_send(tree).is_ok() {
            self.snapshot_policy.requested();
        }
    }

    /// A requested snapshot is written: the core drops the log it covers, and the
    /// next snapshot may be asked for.
    fn compacted(&mut self, zxid: Zxid) {
        self.node.compact(zxid);
        self.snapshot_policy.pending = false;
        self.maybe_snapshot();
    }

    /// The role changed: a leader that stops serving fails its waiting callers as
    /// "outcome unknown" (their txns may still commit).
    fn on_status(&mut self, status: Status) {
        let serving = status.role == Role::Leading && status.serving;
        tracing::info!(role = ?status.role, leader = ?status.leader, epoch = status.epoch, serving, "zab status");
        self.count_leadership(status);
        // Epoch and leader before the role: those woken by the role read them.
        self.shared.epoch.store(status.epoch, Ordering::Release);
        self.shared.synced.store(status.serving, Ordering::Release);
        self.shared
            .leader
            .store(status.leader.unwrap_or(0), Ordering::Release);
        self.shared.role.send_replace(status.role);
        if let Some(forwarder) = &self.shared.forwarder {
            let learner = matches!(status.role, Role::Following | Role::Observing);
            let leader = status.leader.filter(|&l| l != self.shared.server_id);
            forwarder.follow(leader.filter(|_| learner));
        }
        if serving && !*self.shared.serving.borrow() {
            // A new leader cannot know which sessions were kept alive elsewhere
            // while there was none: each gets a full TTL before any expires.
            let now = self.shared.now_ms();
            self.shared.lock_sessions().refresh_all(now);
        }
        let was = self.shared.serving.send_replace(serving);
        if was != serving {
            // Whatever this server proposed before is applied, or gone, by the time
            // it serves again.
            self.quota.clear();
        }
        if was && !serving {
            self.fail_waiting_unknown("leadership lost with the write proposed");
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
            self.shared.metrics.leader_changes.inc();
        }
    }

    /// Remembers the traced writes among the txns of Ready `number`'s persist ops,
    /// for their `fsync` spans.
    fn trace_fsync(&mut self, number: u64, persist: &[crate::zab::PersistOp]) {
        if self.fsyncs.len() >= FSYNCS_TRACED_MAX {
            return;
        }
        let writes: Vec<(WriteTrace, Zxid)> = persist
            .iter()
            .filter_map(|op| match op {
                crate::zab::PersistOp::Append(txns) => Some(txns),
                _ => None,
            })
            .flatten()
            .filter_map(|txn| {
                let (trace, _) = self.waiting.get(&txn.zxid)?.trace.as_ref()?;
                Some((trace.clone(), txn.zxid))
            })
            .collect();
        if !writes.is_empty() {
            self.fsyncs.push_back(Fsync {
                number,
                started: SystemTime::now(),
                writes,
            });
        }
    }

    /// Readies up to `number` are durable here: records their traced writes'
    /// `fsync` spans.
    fn fsynced(&mut self, number: u64) {
        let now = SystemTime::now();
        while self.fsyncs.front().is_some_and(|f| f.number <= number) {
            if let Some(fsync) = self.fsyncs.pop_front() {
                for (trace, zxid) in fsync.writes {
                    trace.record("fsync", fsync.started, now, Some(zxid));
                }
            }
        }
    }

    fn answer_reads(&mut self, reads: Vec<ReadState>) {
        for read in reads {
            if let Some(waiter) = self.reading.remove(&read.id) {
                let answer = read.result.map_err(ReplicaError::from);
                let _ = waiter.send(answer);
            }
        }
    }

    /// Leadership lost: proposed writes may still commit under the next leader (their
    /// outcome is unknown); reads may simply be retried.
    fn fail_waiting_unknown(&mut self, why: &str) {
        let failed = self.waiting.len() as u64;
        self.shared.metrics.proposals_failed.inc_by(failed);
        for (_, waiter) in self.waiting.drain() {
            let _ = waiter
                .reply
                .send(Err(ReplicaError::Indeterminate(why.into())));
        }
        for (_, waiter) in self.reading.drain() {
            let _ = waiter.send(Err(ReplicaError::Unavailable(why.into())));
        }
    }

    fn fail_waiting(&mut self, why: &str) {
        let failed = self.waiting.len() as u64;
        self.shared.metrics.proposals_failed.inc_by(failed);
        for (_, waiter) in self.waiting.drain() {
            let _ = waiter
                .reply
                .send(Err(ReplicaError::Unavailable(why.into())));
        }
        for (_, waiter) in self.reading.drain() {
            let _ = waiter.send(Err(ReplicaError::Unavailable(why.into())));
        }
    }
}

/// Adds queued writes to `batch` (which holds one) while it has fewer than
/// `count_max` and weighs less than `bytes_max`; the write that reaches the weight
/// is the last one in.
pub(super) fn fill_batch(
    queue: &mut mpsc::Receiver<Proposal>,
    batch: &mut Vec<Proposal>,
    count_max: usize,
    bytes_max: usize,
) {
    let mut bytes: usize = batch.iter().map(|p| p.bytes.bytes()).sum();
    while batch.len() < count_max && bytes < bytes_max {
        let Ok(p) = queue.try_recv() else { return };
        bytes = bytes.saturating_add(p.bytes.bytes());
        batch.push(p);
    }
}

/// The next message from a peer; never resolves without peers.
async fn recv_peer(inbox: &mut Option<InboundRx>) -> Option<Inbound> {
    match inbox {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Keeps the deadline tracker in step with the replicated session table.
fn track_sessions(shared: &Shared, txn: &Txn, result: &Result<TxnResult, TreeError>) {
    match (&txn.op, result) {
        (
            TxnOp::OpenSession { .. } | TxnOp::OpenOwnedSession { .. },
            Ok(TxnResult::SessionOpened { session_id, ttl_ms }),
        ) => {
            let now = shared.now_ms();
            let ttl = u64::try_from(*ttl_ms).unwrap_or(0);
            shared.lock_sessions().add(*session_id, ttl, now);
        }
        (TxnOp::CloseSession { session_id, .. }, _) => {
            shared.lock_sessions().remove(*session_id);
        }
        _ => {}
    }
}
