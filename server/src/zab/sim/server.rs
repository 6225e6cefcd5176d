//! One simulated server: a Zab core, a disk that keeps only what was made durable,
//! and the data tree that applies committed txns (what the runtime will do).
//!
//! Crash semantics: writes still queued for the disk are lost, except that the first
//! may be torn (a prefix of its ops landed, as separate redb commits would).

use std::collections::{BTreeSet, VecDeque};

use crate::tree::DataTree;
use crate::txn::{Txn, Zxid};
use crate::zab::{Config, Node, PersistOp, Restored, Snapshot};

/// What survives a crash.
#[derive(Clone, Debug, Default)]
pub(crate) struct SimDisk {
    pub(crate) accepted_epoch: u32,
    pub(crate) current_epoch: u32,
    pub(crate) snapshot: Option<Snapshot>,
    /// Entries above the snapshot, ascending.
    pub(crate) log: Vec<Txn>,
    /// The history was discarded (`Restored::must_resync`).
    pub(crate) must_resync: bool,
}

impl SimDisk {
    fn last_zxid(&self) -> Zxid {
        let snap = self.snapshot.as_ref().map_or(0, |s| s.zxid);
        self.log.last().map_or(snap, |t| t.zxid).max(snap)
    }

    /// Applies one durable op; a snapshot also replaces `tree`.
    pub(crate) fn apply(&mut self, op: &PersistOp, tree: &mut DataTree) -> Result<(), String> {
        match op {
            PersistOp::AcceptedEpoch(e) => self.accepted_epoch = *e,
            PersistOp::Resynced => self.must_resync = false,
            PersistOp::CurrentEpoch(e) => self.current_epoch = *e,
            PersistOp::Truncate { after } => self.log.retain(|t| t.zxid <= *after),
            PersistOp::Append(txns) => {
                for t in txns {
                    if t.zxid <= self.last_zxid() {
                        return Err(format!("disk append out of order at {:#x}", t.zxid));
                    }
                    self.log.push(t.clone());
                }
            }
            PersistOp::Snapshot(s) => {
                if tree.last_zxid() > s.zxid {
                    return Err(format!(
                        "snapshot at {:#x} would roll back applied {:#x}",
                        s.zxid,
                        tree.last_zxid()
                    ));
                }
                *tree = DataTree::decode_snapshot(&s.data).map_err(|e| e.to_string())?;
                self.log.clear();
                self.snapshot = Some(s.clone());
            }
        }
        Ok(())
    }
}

/// A write handed to the disk, not yet durable.
#[derive(Debug)]
pub(crate) struct PendingWrite {
    pub(crate) number: u64,
    pub(crate) ops: Vec<PersistOp>,
}

#[derive(Debug)]
pub(crate) struct SimServer {
    pub(crate) cfg: Config,
    /// None while crashed.
    pub(crate) node: Option<Node>,
    /// Bumped on every crash, so stale disk completions are ignored.
    pub(crate) incarnation: u64,
    pub(crate) disk: SimDisk,
    pub(crate) pending: VecDeque<PendingWrite>,
    /// When the disk is free again (writes complete in order).
    pub(crate) disk_free_at: u64,
    pub(crate) tree: DataTree,
    /// Zxids this incarnation proposed as leader: acked to the client once applied here.
    pub(crate) proposed: BTreeSet<Zxid>,
    pub(crate) applied_since_snapshot: u64,
}

impl SimServer {
    pub(crate) fn new(cfg: Config, seed: u64) -> Result<SimServer, String> {
        let node = Node::new(cfg.clone(), Restored::default(), seed).map_err(|e| e.to_string())?;
        Ok(SimServer {
            cfg,
            node: Some(node),
            incarnation: 0,
            disk: SimDisk::default(),
            pending: VecDeque::new(),
            disk_free_at: 0,
            tree: DataTree::new(),
            proposed: BTreeSet::new(),
            applied_since_snapshot: 0,
        })
    }

    pub(crate) fn up(&self) -> bool {
        self.node.is_some()
    }

    /// Loses everything not durable; `torn` ops of the first pending write land.
    pub(crate) fn crash(&mut self, torn: usize) -> Result<(), String> {
        self.node = None;
        if let Some(first) = self.pending.pop_front() {
            for op in first.ops.iter().take(torn) {
                self.disk.apply(op, &mut self.tree)?;
            }
        }
        self.pending.clear();
        self.proposed.clear();
        self.incarnation += 1;
        Ok(())
    }

    /// Restarts from the disk: the tree is the snapshot, the core gets the rest.
    pub(crate) fn restart(&mut self, seed: u64) -> Result<(), String> {
        self.tree = match &self.disk.snapshot {
            Some(s) => DataTree::decode_snapshot(&s.data).map_err(|e| e.to_string())?,
            None => DataTree::new(),
        };
        let restored = Restored {
            accepted_epoch: self.disk.accepted_epoch,
            current_epoch: self.disk.current_epoch,
            snapshot: self.disk.snapshot.as_ref().map(|s| s.zxid),
            log: self.disk.log.clone(),
            must_resync: self.disk.must_resync,
        };
        let node = Node::new(self.cfg.clone(), restored, seed).map_err(|e| e.to_string())?;
        self.node = Some(node);
        self.applied_since_snapshot = 0;
        Ok(())
    }

    /// The operator discards this (crashed) server's history: an empty disk that
    /// keeps the epochs and carries the must-resync marker.
    pub(crate) fn discard(&mut self) {
        self.disk = SimDisk {
            accepted_epoch: self.disk.accepted_epoch,
            current_epoch: self.disk.current_epoch,
            must_resync: true,
            ..SimDisk::default()
        };
    }

    /// Takes a snapshot of the applied tree: durable at once, and the core compacts.
    pub(crate) fn snapshot(&mut self) {
        let zxid = self.tree.last_zxid();
        if zxid == 0 || zxid <= self.disk.snapshot.as_ref().map_or(0, |s| s.zxid) {
            return;
        }
        let snap = Snapshot {
            zxid,
            data: bytes::Bytes::from(
                self.tree
                    .encode_snapshot()
                    .expect("the simulated tree encodes"),
            ),
        };
        self.disk.log.retain(|t| t.zxid > zxid);
        self.disk.snapshot = Some(snap);
        if let Some(node) = self.node.as_mut() {
            node.compact(zxid);
        }
        self.applied_since_snapshot = 0;
    }
}
