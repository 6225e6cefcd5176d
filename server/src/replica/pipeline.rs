//! The write pipeline: the tokio shell around the replica engine (`engine.rs`, which
//! owns the Zab core and applies what it commits). One task feeds the engine: client
//! writes become proposals (the core assigns their zxids), linearizable reads ask it
//! for a read index, ticks keep its time, peer messages and the persister's progress
//! come in; the engine's effects (`Shell`, its `Host`) go out: persist ops to the
//! persister (group commit, off this loop), messages to the peer transport,
//! snapshots to the snapshotter, answers to the callers, events to the watch hub.
//!
//! ```text
//!   proposals, reads, ticks, peer messages, persisted(n), compacted ─▶ Engine
//!   Engine ─▶ Shell (its Host):
//!     persist ─▶ persister ─▶ persisted(n) ─▶ Engine
//!     send ─▶ peer transport;   snapshot ─▶ snapshotter ─▶ compacted ─▶ Engine
//!     publish / applied / installed ─▶ watch hub, applied zxid
//!     answer / answer_read ─▶ callers;   status / fatal ─▶ role, serving, stop
//! ```
//!
//! Snapshots are asked for by txns and by bytes applied (`engine::SnapshotPolicy`), which
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
//! What it must not do: await storage itself (the persister does), or decide anything
//! the engine decides (the simulator runs the engine without this shell).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::contact::{Contact, Gaps};
use super::engine::{Caller, Engine, Host, Request};
use super::forward::Write;
use super::persist::{Done, PersistJob, Persister};
use super::{Committed, ReadWaiter, ReplicaError, Shared};
use crate::peer::{Inbound, InboundRx, PeerHandle};
use crate::telemetry::trace::WriteTrace;
use crate::tree::{DataTree, Event};
use crate::txn::{Txn, Zxid};
use crate::zab::log::Covered;
use crate::zab::{Envelope, PersistOp, Role, Status};

/// A snapshot request: the tree as of one zxid (an O(1) clone).
pub(super) type SnapshotJob = DataTree;

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

/// Why a write fails once the pipeline has stopped (callers see Unavailable).
const STOPPED: &str = "the write pipeline has stopped";

/// The error of a write handed to a pipeline that has stopped.
pub(super) fn stopped() -> ReplicaError {
    ReplicaError::Unavailable(STOPPED.into())
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

/// A caller waiting for its write, in production.
pub(super) struct Reply {
    tx: oneshot::Sender<Result<Committed, ReplicaError>>,
    /// The write's share of the byte budget, given back when it is answered.
    bytes: Admitted,
    /// When it was proposed (`concord_server_proposal_commit_duration_seconds`).
    proposed_at: Option<Instant>,
}

impl Reply {
    pub(super) fn new(
        tx: oneshot::Sender<Result<Committed, ReplicaError>>,
        bytes: Admitted,
    ) -> Reply {
        Reply {
            tx,
            bytes,
            proposed_at: None,
        }
    }
}

impl Caller for Reply {
    fn proposed(&mut self) {
        self.proposed_at = Some(Instant::now());
    }
}

/// A write waiting for the pipeline.
pub(super) type Proposal = Request<Reply>;

/// A batch of traced writes being made durable here, for their `fsync` spans.
struct Fsync {
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
    /// The zxids of snapshots written by the snapshotter, for `Engine::compacted`.
    pub(super) compacted: mpsc::Receiver<Zxid>,
    /// Messages from the other servers (None: an ensemble of one).
    pub(super) peers: Option<InboundRx>,
}

/// The engine's host in production: where its effects go.
pub(super) struct Shell {
    pub(super) shared: Arc<Shared>,
    /// Where persist ops go (the persister thread).
    pub(super) persist: Persister,
    /// Where snapshot requests go (the snapshotter task; one at a time).
    pub(super) snapshots: mpsc::Sender<SnapshotJob>,
    /// Where messages to the other servers go (None: an ensemble of one).
    pub(super) peers: Option<PeerHandle>,
    /// Batches of traced writes sent to the persister and not yet durable, oldest
    /// first (at most `FSYNCS_TRACED_MAX`).
    fsyncs: VecDeque<Fsync>,
    /// This server's ticks, for when its core's word on its leader is taken.
    gaps: Gaps,
}

impl Shell {
    pub(super) fn new(
        shared: Arc<Shared>,
        persist: Persister,
        snapshots: mpsc::Sender<SnapshotJob>,
        peers: Option<PeerHandle>,
    ) -> Shell {
        Shell {
            shared,
            persist,
            snapshots,
            peers,
            fsyncs: VecDeque::new(),
            gaps: Gaps::default(),
        }
    }

    /// A tick of the pipeline's clock, before the core's if `core_ticks`. A server
    /// that does not hear its peers (back-pressure, in `Pipeline::run`) lets its
    /// core's clock stand, so it cannot notice that its leader went: its ticks are
    /// not counted then. Longer than a sync limit without them, it is out of touch
    /// (reads wait, streams end after `leader_wait`); and a gap since the last one
    /// (that, or the server did not run) makes the core's word on its leader
    /// distrusted for a while after (`contact.rs`).
    fn ticked(&mut self, status: &Status, core_ticks: bool) {
        let shared = &self.shared;
        if core_ticks {
            let now = shared.now_ms();
            self.gaps.tick(now, shared.sync_limit_ms, shared.tick_ms);
            shared.ticked_ms.store(now, Ordering::Release);
        }
        self.publish_contact(status);
    }

    /// Publishes this server's contact with a leader, from the core's `status`. An
    /// ensemble of one takes its core's word after a gap too: no other server can
    /// have been elected meanwhile.
    fn publish_contact(&self, status: &Status) {
        let now = self.shared.now_ms();
        let alone = self.peers.is_none();
        let trusted = alone || self.gaps.trusted(now, self.shared.sync_limit_ms);
        self.shared.contact.send_if_modified(|contact| {
            let next = Contact::after(*contact, status, trusted, now);
            std::mem::replace(contact, next) != next
        });
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
}

impl Host for Shell {
    type Caller = Reply;
    type Reader = ReadWaiter;

    fn now_ms(&self) -> u64 {
        self.shared.now_ms()
    }

    fn wall_ms(&self) -> i64 {
        super::wall_ms()
    }

    fn send(&mut self, envelope: Envelope) {
        if let Some(peers) = &self.peers {
            peers.send(envelope);
        }
    }

    fn persist(
        &mut self,
        number: u64,
        ops: Vec<PersistOp>,
        traced: Vec<(WriteTrace, Zxid)>,
    ) -> bool {
        if !traced.is_empty() && self.fsyncs.len() < FSYNCS_TRACED_MAX {
            self.fsyncs.push_back(Fsync {
                number,
                started: SystemTime::now(),
                writes: traced,
            });
        }
        self.persist.send(PersistJob::new(number, ops))
    }

    fn snapshot(&mut self, tree: DataTree) -> bool {
        self.snapshots.try_send(tree).is_ok()
    }

    fn installed(&mut self, zxid: Zxid, _tree: &DataTree) {
        self.shared.hub.resynchronize(zxid);
        self.shared.applied.send_replace(zxid);
    }

    fn publish(&mut self, txn: &Txn, events: &[Event], _tree: &DataTree) {
        self.shared.hub.publish(txn.zxid, events);
    }

    fn applied(&mut self, zxid: Zxid) {
        self.shared.applied.send_replace(zxid);
    }

    fn answer(&mut self, caller: Reply, outcome: Result<Committed, ReplicaError>) {
        if let (Ok(c), Some(at)) = (&outcome, caller.proposed_at) {
            if c.zxid != 0 {
                self.shared
                    .readable
                    .metrics
                    .proposal_commit
                    .observe(at.elapsed());
            }
        }
        let _ = caller.tx.send(outcome);
    }

    fn answer_read(&mut self, reader: ReadWaiter, index: Result<Zxid, ReplicaError>) {
        let _ = reader.send(index);
    }

    fn status(&mut self, status: &Status, serving: bool) {
        let shared = &self.shared;
        // Epoch and leader before the role: those woken by the role read them.
        shared.epoch.store(status.epoch, Ordering::Release);
        shared.synced.store(status.serving, Ordering::Release);
        shared
            .leader
            .store(status.leader.unwrap_or(0), Ordering::Release);
        shared.role.send_replace(status.role);
        if let Some(forwarder) = &shared.forwarder {
            let learner = matches!(status.role, Role::Following | Role::Observing);
            let leader = status.leader.filter(|&l| l != shared.server_id);
            forwarder.follow(leader.filter(|_| learner), status.serving);
        }
        shared.serving.send_replace(serving);
        self.publish_contact(status);
    }

    fn progress(&mut self, committed: Zxid, log_bytes: u64) {
        let shared = &self.shared;
        shared.committed.store(committed, Ordering::Release);
        shared.log_bytes.store(log_bytes, Ordering::Relaxed);
        shared
            .log_bytes_peak
            .fetch_max(log_bytes, Ordering::Relaxed);
    }

    fn fatal(&mut self, reason: String) {
        self.shared.set_fatal(reason);
    }

    fn discard(&mut self, txns: Covered) {
        free_elsewhere(txns);
    }
}

/// Fewest txns freed on the blocking pool rather than in place: below it, handing
/// them over costs more than freeing them.
const FREE_ELSEWHERE_MIN: usize = 1024;

/// Frees `txns` off this thread when there are many: a compacted log of 100,000
/// txns takes 3-9 ms to free (`examples/log_compact.rs`), and on one runtime thread
/// every client of the server would wait that long.
fn free_elsewhere(txns: Covered) {
    if txns.len() >= FREE_ELSEWHERE_MIN {
        tokio::task::spawn_blocking(move || drop(txns));
    }
}

/// The task's state.
pub(super) struct Pipeline {
    pub(super) engine: Engine<Shell>,
    pub(super) batch_txns_max: usize,
    /// A group-commit batch closes once its writes weigh this much.
    pub(super) batch_bytes_max: usize,
    /// Most proposals in flight (proposed, not yet answered). Bounds the callers
    /// waiting here and, with them, the persist queue: a flood of writes waits in
    /// the bounded proposal queue instead.
    pub(super) inflight_max: usize,
    pub(super) tick_ms: u64,
}

impl Pipeline {
    /// Runs until the server stops (`Shared::stop` is set) or storage fails.
    pub(super) async fn run(mut self, mut inputs: Inputs) {
        let shared = self.engine.host.shared.clone();
        let mut interval = tokio::time::interval(Duration::from_millis(self.tick_ms.max(1)));
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut stop = shared.stop.subscribe();
        let mut batch = Vec::with_capacity(self.batch_txns_max);
        let mut running = self.engine.drain();
        while running {
            // A server that does not lead takes writes to answer NOT_LEADER at once
            // (the caller waits for a leader, bounded, and sends them there); a
            // leader establishing its epoch lets them wait until it serves. (The
            // role is the one the core last reported, kept in `Shared`.)
            let leading = *shared.role.borrow() == Role::Leading;
            let serving = self.engine.serving();
            let log_room = self.engine.log_has_room();
            // Proposals held back while the log was full go first, once it has room
            // (or at once, refused, if this server no longer leads).
            if !batch.is_empty() && (log_room || !serving) {
                self.engine.propose(&mut batch);
                running = self.engine.drain();
                continue;
            }
            let room = self.inflight_max.saturating_sub(self.engine.in_flight());
            // Back-pressure: while the persister is over its byte budget, no new
            // writes come in (their callers wait). A server that does not lead also
            // stops reading its peers (the leader's PROPOSALs: its stream waits) and
            // lets its clock stand, so it does not call a leader it cannot hear
            // dead; its leader counts it absent meanwhile, and after a sync limit
            // so does the server itself (`Shell::ticked`). A leader keeps hearing
            // acks and keeps its heartbeats going: its input from peers is small.
            let open = !self.engine.host.persist.over_budget();
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
                _ = interval.tick() => {
                    let status = self.engine.node().status();
                    self.engine.host.ticked(&status, hear_peers);
                    if hear_peers {
                        if !self.hear_waiting(&mut inputs.peers) {
                            break;
                        }
                        let unread = inputs.peers.as_ref().map_or(0, InboundRx::waiting);
                        self.engine.tick(unread);
                        super::members::publish(&shared, self.engine.node());
                    }
                },
                first = inputs.proposals.recv(), if take => {
                    let Some(first) = first else { break };
                    batch.push(first);
                    fill_batch(&mut inputs.proposals, &mut batch, take_max, self.batch_bytes_max);
                    self.engine.propose(&mut batch);
                }
                Some(waiter) = inputs.reads.recv() => self.engine.read_index(waiter),
                Ok(()) = inputs.persisted.changed() => {
                    let done = inputs.persisted.borrow_and_update().clone();
                    match done {
                        Ok(number) => {
                            self.engine.host.fsynced(number);
                            self.engine.persisted(number);
                            shared.hub.note_log_durable(self.engine.node().durable_log_zxid());
                        }
                        Err(e) => {
                            shared.set_fatal(format!("log append failed: {e}"));
                            break;
                        }
                    }
                }
                Some(zxid) = inputs.compacted.recv() => self.engine.compacted(zxid),
                Some(inbound) = recv_peer(&mut inputs.peers), if hear_peers => self.hear(inbound),
            }
            running = self.engine.drain();
        }
        // Stopping: waiting callers and queued proposals are dropped unanswered,
        // so callers see Unavailable.
        self.engine.stop(STOPPED);
        shared.proposal_bytes.permits.close();
        if let Some(peers) = &self.engine.host.peers {
            peers.shutdown().await;
        }
    }

    /// One message from a peer, or the end of its stream.
    fn hear(&mut self, inbound: Inbound) {
        match inbound {
            Inbound::Message(from, msg) => self.engine.step(from, msg),
            Inbound::StreamLost(from) => self.engine.peer_lost(from),
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
            if !self.engine.drain() {
                return false;
            }
        }
        true
    }

    /// Whether peer input is read now (the back-pressure rules in `run`): always on
    /// a leader; on another server, not while its persister is over budget, nor
    /// while its log is full and a snapshot of its own is pending.
    fn hears_peers(&self) -> bool {
        let leading = *self.engine.host.shared.role.borrow() == Role::Leading;
        leading || (!self.engine.host.persist.over_budget() && !self.engine.waits_for_snapshot())
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
    let mut bytes: usize = batch.iter().map(|p| p.caller.bytes.bytes()).sum();
    while batch.len() < count_max && bytes < bytes_max {
        let Ok(p) = queue.try_recv() else { return };
        bytes = bytes.saturating_add(p.caller.bytes.bytes());
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

#[cfg(test)]
mod free_tests {
    use std::sync::{Arc, Mutex};
    use std::thread::ThreadId;

    use bytes::Bytes;

    use super::*;
    use crate::txn::{SetOp, TxnOp};
    use crate::zab::log::tests::txn;
    use crate::zab::log::Log;

    /// Data whose drop records the thread that freed it.
    struct Owner(Arc<Mutex<Vec<ThreadId>>>, [u8; 1]);

    impl AsRef<[u8]> for Owner {
        fn as_ref(&self) -> &[u8] {
            &self.1
        }
    }

    impl Drop for Owner {
        fn drop(&mut self) {
            let mut freed_on = self.0.lock().unwrap_or_else(|e| e.into_inner());
            freed_on.push(std::thread::current().id());
        }
    }

    /// What compacting a log of `count` such txns and one more gives.
    fn covered(count: usize, freed_on: &Arc<Mutex<Vec<ThreadId>>>) -> Covered {
        let mut log = Log::default();
        for zxid in 1..=count as Zxid {
            log.append(Txn {
                op: TxnOp::Set(SetOp {
                    path: "/k".into(),
                    data: Bytes::from_owner(Owner(freed_on.clone(), [0])),
                    version: -1,
                    null_data: false,
                }),
                ..txn(zxid)
            });
        }
        log.append(txn(count as Zxid + 1));
        let covered = log.compact(count as Zxid).expect("a newer snapshot");
        assert_eq!(covered.len(), count);
        covered
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_compacted_log_is_freed_off_the_runtime_thread_and_a_few_txns_in_place() {
        let here = std::thread::current().id();
        let freed_on = Arc::new(Mutex::new(Vec::new()));
        free_elsewhere(covered(FREE_ELSEWHERE_MIN, &freed_on));
        let deadline = Instant::now() + Duration::from_secs(10);
        while freed_on.lock().unwrap().len() < FREE_ELSEWHERE_MIN {
            assert!(Instant::now() < deadline, "the txns were never freed");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(freed_on.lock().unwrap().iter().all(|&t| t != here));

        freed_on.lock().unwrap().clear();
        free_elsewhere(covered(FREE_ELSEWHERE_MIN - 1, &freed_on));
        let freed = freed_on.lock().unwrap();
        assert_eq!(freed.len(), FREE_ELSEWHERE_MIN - 1);
        assert!(freed.iter().all(|&t| t == here));
    }
}
