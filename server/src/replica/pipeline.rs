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
//! What it must not do: await storage itself (the persister does), or apply a txn
//! the core has not handed out as committed.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::persist::{PersistJob, Persister};
use super::{Committed, Proposal, ReadWaiter, ReplicaError, Shared};
use crate::peer::{Inbound, PeerHandle};
use crate::tree::{DataTree, TreeError, TxnResult};
use crate::txn::{Txn, TxnOp, Zxid};
use crate::zab::{Node, ReadState, Ready, Role, Snapshot, Status};

/// A snapshot request: the tree as of one zxid (an O(1) clone).
pub(super) type SnapshotJob = DataTree;

/// What the pipeline listens to besides the clock.
pub(super) struct Inputs {
    pub(super) proposals: mpsc::Receiver<Proposal>,
    pub(super) reads: mpsc::Receiver<ReadWaiter>,
    /// `Ok(number)`: Readies up to `number` are durable; `Err`: storage failed.
    pub(super) persisted: mpsc::UnboundedReceiver<Result<u64, String>>,
    /// Snapshots written by the snapshotter, for `Node::compact`.
    pub(super) compacted: mpsc::Receiver<Snapshot>,
    /// Messages from the other servers (None: an ensemble of one).
    pub(super) peers: Option<mpsc::Receiver<Inbound>>,
}

/// The task's state.
pub(super) struct Pipeline {
    pub(super) shared: Arc<Shared>,
    pub(super) node: Node,
    /// Callers of this server's proposals, by the zxid the core gave them.
    pub(super) waiting: HashMap<Zxid, oneshot::Sender<Result<Committed, ReplicaError>>>,
    /// Callers of read-index requests, by request id.
    pub(super) reading: HashMap<u64, ReadWaiter>,
    pub(super) next_read_id: u64,
    /// The last wall time stamped, so txn times never go backwards.
    pub(super) last_time_ms: i64,
    /// Where persist ops go (the persister thread).
    pub(super) persist: Persister,
    /// Where snapshot requests go (the snapshotter task; one at a time).
    pub(super) snapshots: mpsc::Sender<SnapshotJob>,
    pub(super) since_snapshot: u64,
    pub(super) snapshot_every_txns: u64,
    pub(super) batch_txns_max: usize,
    /// Most proposals in flight (proposed, not yet answered). Bounds the callers
    /// waiting here and, with them, the persist queue: a flood of writes waits in
    /// the bounded proposal queue instead.
    pub(super) inflight_max: usize,
    pub(super) tick_ms: u64,
    /// Where messages to the other servers go (None: an ensemble of one).
    pub(super) peers: Option<PeerHandle>,
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
            let leading = *self.shared.role.borrow() == Role::Leading;
            let room = self.inflight_max.saturating_sub(self.waiting.len());
            let take = (*self.shared.serving.borrow() && room > 0) || !leading;
            let take_max = self.batch_txns_max.min(room.max(1));
            tokio::select! {
                _ = stop.wait_for(Option::is_some) => break,
                _ = interval.tick() => self.node.tick(),
                n = inputs.proposals.recv_many(&mut batch, take_max), if take => {
                    if n == 0 {
                        break;
                    }
                    self.propose(&mut batch);
                }
                Some(waiter) = inputs.reads.recv() => self.read_index(waiter),
                Some(done) = inputs.persisted.recv() => match done {
                    Ok(number) => self.node.persisted(number),
                    Err(e) => {
                        self.shared.set_fatal(format!("log append failed: {e}"));
                        break;
                    }
                },
                Some(snapshot) = inputs.compacted.recv() => self.node.compact(snapshot),
                Some(inbound) = recv_peer(&mut inputs.peers) => match inbound {
                    Inbound::Message(from, msg) => self.node.step(from, msg),
                    Inbound::StreamLost(from) => self.node.peer_lost(from),
                },
            }
            running = self.handle_readies();
        }
        // Stopping: waiting callers and queued proposals are dropped unanswered,
        // so callers see Unavailable.
        self.fail_waiting("the write pipeline has stopped");
        if let Some(peers) = &self.peers {
            peers.shutdown().await;
        }
    }

    /// Hands a batch of client writes to the core, remembering each caller.
    fn propose(&mut self, batch: &mut Vec<Proposal>) {
        self.last_time_ms = self.last_time_ms.max(super::wall_ms());
        for p in batch.drain(..) {
            let txn = Txn {
                zxid: 0,
                time_ms: self.last_time_ms,
                session_id: p.write.session_id,
                request_id: p.write.request_id,
                fence: p.write.fence,
                op: p.write.op,
            };
            match self.node.propose(txn) {
                Ok(zxid) => {
                    self.waiting.insert(zxid, p.reply);
                }
                Err(e) => {
                    let _ = p.reply.send(Err(e.into()));
                }
            }
        }
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
            let job = PersistJob {
                number: ready.number,
                ops: ready.persist,
            };
            if !self.persist.send(job) {
                self.shared.set_fatal("the persister has stopped".into());
                return false;
            }
        }
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
            Ok(tree) => {
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
    /// snapshot when enough txns went by.
    fn apply(&mut self, txns: Vec<Txn>) {
        let Some(last) = txns.last().map(|t| t.zxid) else {
            return;
        };
        let mut replies = Vec::new();
        let snapshot = {
            let mut tree = self
                .shared
                .tree
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            for txn in &txns {
                let applied = tree.apply(txn);
                self.shared.hub.publish(txn.zxid, &applied.events);
                track_sessions(&self.shared, txn, &applied.result);
                if let Some(reply) = self.waiting.remove(&txn.zxid) {
                    let committed = Committed {
                        zxid: txn.zxid,
                        result: applied.result,
                    };
                    replies.push((reply, committed));
                }
            }
            self.shared.applied.send_replace(last);
            self.since_snapshot += txns.len() as u64;
            (self.since_snapshot >= self.snapshot_every_txns).then(|| tree.clone())
        };
        for (reply, committed) in replies {
            // The caller may have gone (cancelled); the write stands regardless.
            let _ = reply.send(Ok(committed));
        }
        // A snapshot still being written makes this one wait for a later batch.
        if let Some(tree) = snapshot {
            if self.snapshots.try_send(tree).is_ok() {
                self.since_snapshot = 0;
            }
        }
    }

    /// The role changed: a leader that stops serving fails its waiting callers as
    /// "outcome unknown" (their txns may still commit).
    fn on_status(&mut self, status: Status) {
        let serving = status.role == Role::Leading && status.serving;
        tracing::info!(role = ?status.role, leader = ?status.leader, epoch = status.epoch, serving, "zab status");
        // Epoch and leader before the role: those woken by the role read them.
        self.shared.epoch.store(status.epoch, Ordering::Release);
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
        if was && !serving {
            self.fail_waiting_unknown("leadership lost with the write proposed");
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
        for (_, reply) in self.waiting.drain() {
            let _ = reply.send(Err(ReplicaError::Indeterminate(why.into())));
        }
        for (_, waiter) in self.reading.drain() {
            let _ = waiter.send(Err(ReplicaError::Unavailable(why.into())));
        }
    }

    fn fail_waiting(&mut self, why: &str) {
        for (_, reply) in self.waiting.drain() {
            let _ = reply.send(Err(ReplicaError::Unavailable(why.into())));
        }
        for (_, waiter) in self.reading.drain() {
            let _ = waiter.send(Err(ReplicaError::Unavailable(why.into())));
        }
    }
}

/// The next message from a peer; never resolves without peers.
async fn recv_peer(inbox: &mut Option<mpsc::Receiver<Inbound>>) -> Option<Inbound> {
    match inbox {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Keeps the deadline tracker in step with the replicated session table.
fn track_sessions(shared: &Shared, txn: &Txn, result: &Result<TxnResult, TreeError>) {
    match (&txn.op, result) {
        (TxnOp::OpenSession { .. }, Ok(TxnResult::SessionOpened { session_id, ttl_ms })) => {
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
