//! One simulated server: the replica engine that runs in production
//! (`replica::engine`: the Zab core, the tree it applies to, the waiter table, the
//! snapshot policy), a host that records the engine's effects for the world's event
//! queue and checker, and a disk: a `MemStorage` written by the persister's own
//! `persist::write` and the snapshotter's `write_snapshot`, and read at each restart
//! by recovery's `recover_from`, as a server's redb file is.
//!
//! Crash semantics: writes still queued for the disk are lost, except that the first
//! may be torn (a prefix of its ops landed, as separate redb commits would).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard};
use std::time::Duration;

use super::world::TICK;
use crate::replica::contact::{Contact, Gaps};
use crate::replica::engine::{Caller, Engine, Host, Readable, SnapshotPolicy};
use crate::replica::housekeeping::{save_snapshot, write_snapshot};
use crate::replica::persist::{self, Observe};
use crate::replica::recovery::{recover_from, ACCEPTED_EPOCH, CURRENT_EPOCH, MUST_RESYNC};
use crate::replica::{Committed, ReplicaError};
use crate::security::quota::Ledger;
use crate::session::SessionTracker;
use crate::storage::{MemStorage, Storage};
use crate::telemetry::trace::WriteTrace;
use crate::telemetry::{Metrics, Seconds};
use crate::tree::{DataTree, Event};
use crate::txn::{Txn, Zxid};
use crate::zab::log::Covered;
use crate::zab::{Config, Envelope, Node, PersistOp, Snapshot, Status};

/// Metrics for a simulated server (recorded, never read).
fn metrics() -> Arc<Metrics> {
    Arc::new(Metrics::new(Seconds::new(&[1.0])))
}

/// Tree digests are compared at the zxids that are multiples of this.
const DIGEST_EVERY: u64 = 4;

/// Snapshots each simulated server keeps (`snapshots_keep`).
const SNAPSHOTS_KEEP: usize = 2;

/// A write handed to the disk, not yet durable.
#[derive(Debug)]
pub(crate) struct PendingWrite {
    pub(crate) number: u64,
    pub(crate) ops: Vec<PersistOp>,
}

/// What applying did to a server's tree, in order, for the checker.
#[derive(Debug)]
pub(crate) enum TreeChange {
    /// `txn` was applied to a tree at `prev`, leaving `digest` (taken at one zxid in
    /// `DIGEST_EVERY`, the same ones on every server: a digest costs O(tree)).
    Applied {
        prev: Zxid,
        txn: Txn,
        digest: Option<u64>,
    },
    /// A snapshot from the leader replaced the tree.
    Installed { zxid: Zxid, digest: u64 },
}

/// The engine's effects since the world last took them.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    pub(crate) messages: Vec<Envelope>,
    pub(crate) writes: Vec<PendingWrite>,
    /// The snapshot the engine asked for (one at a time; the world writes it
    /// after a while).
    pub(crate) snapshot: Option<DataTree>,
    pub(crate) changes: Vec<TreeChange>,
    /// Writes answered as committed: (request id, outcome).
    pub(crate) acked: Vec<(u64, Committed)>,
    /// Writes answered with an error (not acknowledged): request ids.
    pub(crate) failed: Vec<u64>,
    /// Read indexes answered: (request id, the index or None if refused).
    pub(crate) reads: Vec<(u64, Option<Zxid>)>,
    pub(crate) statuses: Vec<(Status, bool)>,
    pub(crate) fatal: Option<String>,
    /// Invariants broken by what was applied (`check::applied_state`).
    pub(crate) violations: Vec<String>,
}

/// The simulator's host: records the engine's effects; its clocks are the world's.
pub(crate) struct SimHost {
    /// World time (units), set by the world before each call into the engine.
    pub(crate) now: u64,
    pub(crate) out: Outbox,
    /// Where the tree was before the next apply.
    last_applied: Zxid,
}

/// A simulated client's write, named by its request id.
#[derive(Debug)]
pub(crate) struct SimCaller(pub(crate) u64);

impl Caller for SimCaller {}

impl Host for SimHost {
    type Caller = SimCaller;
    type Reader = u64;

    fn now_ms(&self) -> u64 {
        self.now
    }

    fn wall_ms(&self) -> i64 {
        i64::try_from(self.now).unwrap_or(i64::MAX)
    }

    fn send(&mut self, envelope: Envelope) {
        self.out.messages.push(envelope);
    }

    fn discard(&mut self, _txns: Covered) {}

    fn persist(&mut self, number: u64, ops: Vec<PersistOp>, _: Vec<(WriteTrace, Zxid)>) -> bool {
        self.out.writes.push(PendingWrite { number, ops });
        true
    }

    fn snapshot(&mut self, tree: DataTree) -> bool {
        self.out.snapshot = Some(tree);
        true
    }

    fn installed(&mut self, zxid: Zxid, tree: &DataTree) {
        if zxid < self.last_applied {
            // Readers of this server would see its state go back in time.
            self.out.violations.push(format!(
                "MonotonicReads: a snapshot at {zxid:#x} replaced a tree at {:#x}",
                self.last_applied
            ));
        }
        self.last_applied = zxid;
        let digest = tree.digest();
        self.out
            .changes
            .push(TreeChange::Installed { zxid, digest });
    }

    fn publish(&mut self, txn: &Txn, events: &[Event], tree: &DataTree) {
        if let Err(broken) = super::check::applied_state(txn, events, tree) {
            self.out.violations.push(broken);
        }
        let prev = std::mem::replace(&mut self.last_applied, txn.zxid);
        self.out.changes.push(TreeChange::Applied {
            prev,
            txn: txn.clone(),
            digest: txn.zxid.is_multiple_of(DIGEST_EVERY).then(|| tree.digest()),
        });
    }

    fn applied(&mut self, _zxid: Zxid) {}

    fn answer(&mut self, caller: SimCaller, outcome: Result<Committed, ReplicaError>) {
        // A write refused or failed is simply not acknowledged.
        match outcome {
            Ok(c) if c.zxid != 0 => self.out.acked.push((caller.0, c)),
            _ => self.out.failed.push(caller.0),
        }
    }

    fn answer_read(&mut self, reader: u64, index: Result<Zxid, ReplicaError>) {
        self.out.reads.push((reader, index.ok()));
    }

    fn status(&mut self, status: &Status, serving: bool) {
        self.out.statuses.push((*status, serving));
    }

    fn progress(&mut self, _committed: Zxid, _log_bytes: u64) {}

    fn fatal(&mut self, reason: String) {
        self.out.fatal.get_or_insert(reason);
    }
}

pub(crate) struct SimServer {
    pub(crate) cfg: Config,
    /// None while crashed.
    pub(crate) engine: Option<Engine<SimHost>>,
    /// The tree the engine applies to (replaced at each restart).
    tree: Arc<RwLock<DataTree>>,
    /// Bumped on every crash, so stale disk completions are ignored.
    pub(crate) incarnation: u64,
    /// What survives a crash.
    disk: MemStorage,
    /// What the persister records (nothing is read back here).
    observe: Observe,
    /// Writes handed to the disk and not yet durable, oldest first.
    pub(crate) pending: VecDeque<PendingWrite>,
    /// When the disk is free again (writes complete in order).
    pub(crate) disk_free_at: u64,
    /// The engine asks for a snapshot after this many applied txns.
    snapshot_every_txns: u64,
    /// The snapshot being written (lost if the server crashes first).
    pub(crate) snapshotting: Option<DataTree>,
    /// The next disk write fails (the server then stops).
    pub(crate) fail_next_write: bool,
    /// Its contact with a leader, from its statuses and ticks (a read is served only
    /// with one, and only while it ticks, as `Replica::in_touch` serves it).
    pub(crate) contact: Contact,
    gaps: Gaps,
}

impl SimServer {
    pub(crate) fn new(
        cfg: Config,
        seed: u64,
        snapshot_every_txns: u64,
    ) -> Result<SimServer, String> {
        let mut s = SimServer {
            cfg,
            engine: None,
            tree: Arc::default(),
            incarnation: 0,
            disk: MemStorage::new(),
            observe: Observe {
                metrics: metrics(),
                slow: Duration::MAX,
            },
            pending: VecDeque::new(),
            disk_free_at: 0,
            snapshot_every_txns,
            snapshotting: None,
            fail_next_write: false,
            contact: Contact::LostAt(0),
            gaps: Gaps::default(),
        };
        s.restart(seed, 0)?;
        Ok(s)
    }

    pub(crate) fn up(&self) -> bool {
        self.engine.is_some()
    }

    /// `sync_limit_ticks` in time units.
    pub(crate) fn sync_limit(&self) -> u64 {
        self.cfg.sync_limit_ticks * TICK
    }

    /// A tick at `now`, before the core's if `core_ticks` (as the pipeline's
    /// `Shell::ticked`: one that does not read its peers does not count it).
    pub(crate) fn ticked(&mut self, now: u64, core_ticks: bool) {
        if core_ticks {
            self.gaps.tick(now, self.sync_limit(), TICK);
        }
        if let Some(status) = self.engine.as_ref().map(|e| e.node().status()) {
            self.note_contact(&status, now);
        }
    }

    /// Recomputes its contact with a leader at `now` from the core's `status`.
    pub(crate) fn note_contact(&mut self, status: &Status, now: u64) {
        self.contact = Contact::after(
            self.contact,
            status,
            self.gaps.trusted(now, self.sync_limit()),
            now,
        );
    }

    /// Whether it would serve a read now (`Replica::in_touch`).
    pub(crate) fn in_touch(&self, now: u64) -> bool {
        self.contact == Contact::Leader && self.gaps.ticked_lately(now, self.sync_limit())
    }

    /// The applied tree.
    pub(crate) fn tree(&self) -> RwLockReadGuard<'_, DataTree> {
        self.tree.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes the oldest pending write durable; None if there is none.
    pub(crate) fn write_pending(&mut self) -> Result<Option<u64>, String> {
        let Some(write) = self.pending.pop_front() else {
            return Ok(None);
        };
        self.write(write.ops)?;
        Ok(Some(write.number))
    }

    /// Writes `ops` to the disk, as the persister does.
    fn write(&self, ops: Vec<PersistOp>) -> Result<(), String> {
        persist::write(&self.disk, ops, &self.observe).map_err(|e| e.to_string())
    }

    /// The snapshot at `zxid` on the disk, for a SNAP (None if it is not there).
    pub(crate) fn stored_snapshot(&self, zxid: Zxid) -> Option<Snapshot> {
        let data = self.disk.load_snapshot(zxid).ok()?;
        Some(Snapshot {
            zxid,
            data: data.into(),
        })
    }

    /// Whether the disk carries the must-resync marker (its history was discarded).
    pub(crate) fn must_resync(&self) -> bool {
        self.disk.get_u64(MUST_RESYNC).ok().flatten().unwrap_or(0) != 0
    }

    /// Loses everything not durable; `torn` ops of the first pending write land.
    pub(crate) fn crash(&mut self, torn: usize) -> Result<(), String> {
        self.engine = None;
        if let Some(first) = self.pending.pop_front() {
            self.write(first.ops.into_iter().take(torn).collect())?;
        }
        self.pending.clear();
        self.snapshotting = None;
        self.fail_next_write = false;
        self.incarnation += 1;
        Ok(())
    }

    /// Starts from the disk at `now`, as recovery does: the tree is the snapshot,
    /// the core gets the rest.
    pub(crate) fn restart(&mut self, seed: u64, now: u64) -> Result<(), String> {
        self.contact = Contact::LostAt(now);
        self.gaps = Gaps::default();
        let (tree, restored) = recover_from(&self.disk, true).map_err(|e| format!("{e:?}"))?;
        let node = Node::new(self.cfg.clone(), restored, seed).map_err(|e| e.to_string())?;
        let host = SimHost {
            now: 0,
            out: Outbox::default(),
            last_applied: tree.last_zxid(),
        };
        self.tree = Arc::new(RwLock::new(tree));
        let readable = Readable {
            tree: self.tree.clone(),
            sessions: Arc::new(Mutex::new(SessionTracker::new())),
            metrics: self.observe.metrics.clone(),
        };
        let policy = SnapshotPolicy::new(self.snapshot_every_txns, u64::MAX, u64::MAX);
        let engine = Engine::new(host, node, readable, policy, Ledger::new(&[]));
        self.engine = Some(engine);
        Ok(())
    }

    /// The operator discards this (crashed) server's history, as
    /// `concord --discard-local-state` does: an empty disk that keeps the epochs and
    /// carries the must-resync marker.
    pub(crate) fn discard(&mut self) -> Result<(), String> {
        let empty = MemStorage::new();
        for key in [ACCEPTED_EPOCH, CURRENT_EPOCH] {
            let value = self.disk.get_u64(key).map_err(|e| e.to_string())?;
            if let Some(value) = value {
                empty.set_u64(key, value).map_err(|e| e.to_string())?;
            }
        }
        empty.set_u64(MUST_RESYNC, 1).map_err(|e| e.to_string())?;
        self.disk = empty;
        Ok(())
    }

    /// Saves the snapshot being written, as the snapshotter does first, without the
    /// purge it does next (a crash comes between them).
    pub(crate) fn save_snapshot_only(&mut self) -> Result<(), String> {
        match self.snapshotting.take() {
            Some(tree) => save_snapshot(&self.disk, &tree).map(|_| ()),
            None => Ok(()),
        }
    }

    /// Finishes the snapshot the engine asked for, as the snapshotter does, and the
    /// engine compacts its log.
    pub(crate) fn finish_snapshot(&mut self) -> Result<(), String> {
        let Some(tree) = self.snapshotting.take() else {
            return Ok(());
        };
        write_snapshot(&self.disk, &tree, SNAPSHOTS_KEEP)?;
        if let Some(engine) = self.engine.as_mut() {
            engine.compacted(tree.last_zxid());
        }
        Ok(())
    }
}
