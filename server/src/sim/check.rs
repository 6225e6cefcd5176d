//! The simulator's invariants, checked as events happen, named after the Zab
//! specification's (ZooKeeper's TLA+ spec) where they are its:
//! - Leadership: at most one established leader per epoch;
//! - Agreement: every server applies the same txn at each zxid, and holds the same
//!   tree (digest) at the same zxid, after applies and snapshot installs;
//! - TotalOrder: a server applies zxids in increasing order;
//! - PrefixConsistency: what a server applies extends the one committed sequence
//!   with no gap (each apply follows the canonical predecessor, and a new zxid
//!   follows the sequence's last);
//! - PrimaryOrder: one leader's txns are committed in the order it proposed them,
//!   with none missing (within an epoch the counters run 1, 2, 3, ...);
//! - Integrity: every committed txn is a write some client (or leader's expiry)
//!   handed to a server, as it was handed; no server holds state at a zxid that
//!   was never committed;
//! - Durability: no acknowledged write is lost (an acked zxid is in the sequence,
//!   and any later apply anywhere follows it);
//! - ReadIndex: a read index is never below a write acknowledged before the read
//!   was asked;
//! - MonotonicReads: a server's applied state never goes back while it is up (a
//!   snapshot from the leader never replaces a newer tree; `server.rs`);
//! - SessionReads: a session's read, served once the server has applied its
//!   `min_zxid`, sees committed state (Agreement at the read's zxid) no older than
//!   what the session has seen (`workload.rs`);
//! - Timeliness (ZooKeeper's): a read, served only by a server in touch with a
//!   leader (`replica/contact.rs`), sees every write acknowledged more than
//!   `TIMELINESS_TICKS` before it, also on a server resumed from a pause;
//! - FencedWrite and EphemeralLifetime, as `applied_state` says.

use std::collections::{BTreeMap, BTreeSet};

use crate::tree::{DataTree, Event, EventKind};
use crate::txn::{zxid_counter, zxid_epoch, MultiOp, QueueOp, Txn, TxnOp, Zxid};
use crate::zab::ServerId;

/// FNV-1a over bytes: a stable hash for txns and traces.
pub(crate) fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

pub(crate) const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// How far behind the acknowledged writes a read may be, in ticks: a learner gives
/// its leader up after `sync_limit_ticks` (5) without hearing it, and stops
/// serving reads then; the rest is room for message and disk delays.
pub(crate) const TIMELINESS_TICKS: u64 = 10;

/// The same with followers that stop reading their peers
/// (`SimOptions::deaf_followers`): one may stop when its leader has been silent
/// for nearly a sync limit that its core has counted, and serves for a sync limit
/// more before its stopped ticks put it out of touch, so its reads may be two sync
/// limits behind, and room for delays (a paused server's, likewise; ZooKeeper's
/// servers are as far behind in both cases). docs/api.md gives the bound.
pub(crate) const TIMELINESS_TICKS_DEAF: u64 = 15;

/// What the whole ensemble has done so far, for checking.
#[derive(Debug, Default)]
pub(crate) struct Checker {
    /// Established leader of each epoch.
    leaders: BTreeMap<u32, ServerId>,
    /// The committed sequence: zxid → hash of the txn.
    canon: BTreeMap<Zxid, u64>,
    /// Tree digest after each zxid.
    digests: BTreeMap<Zxid, u64>,
    /// Writes acknowledged to clients.
    pub(crate) acked: BTreeSet<Zxid>,
    /// The newest acknowledged write after each time a newer one was acked:
    /// (time, zxid), both increasing.
    acked_by_time: Vec<(u64, Zxid)>,
    /// Every write handed to a server, by request id (all distinct but the
    /// liveness marker's, which is the same write each time).
    proposed: BTreeMap<u64, TxnOp>,
}

impl Checker {
    pub(crate) fn on_established(&mut self, epoch: u32, id: ServerId) -> Result<(), String> {
        match self.leaders.insert(epoch, id) {
            Some(other) if other != id => Err(format!(
                "Leadership: two leaders established in epoch {epoch}: {other} and {id}"
            )),
            _ => Ok(()),
        }
    }

    /// A write was handed to a server to propose.
    pub(crate) fn on_proposed(&mut self, request_id: u64, op: &TxnOp) {
        self.proposed.insert(request_id, op.clone());
    }

    /// Server `id`, whose tree was at `prev`, applies `txn`.
    pub(crate) fn on_apply(&mut self, id: ServerId, prev: Zxid, txn: &Txn) -> Result<(), String> {
        let z = txn.zxid;
        if z <= prev {
            return Err(format!(
                "TotalOrder: server {id} applied {z:#x} after {prev:#x}"
            ));
        }
        let hash = fnv(FNV_START, &txn.encode());
        match self.canon.get(&z) {
            Some(&h) if h != hash => {
                return Err(format!(
                    "Agreement: server {id} applied a different txn at {z:#x}"
                ))
            }
            Some(_) => {
                let pred = self.canon.range(..z).next_back().map_or(0, |(k, _)| *k);
                if pred != prev {
                    return Err(format!(
                        "PrefixConsistency: server {id} applied {z:#x} after {prev:#x}, but the committed sequence has {pred:#x} before it"
                    ));
                }
            }
            None => {
                if self.proposed.get(&txn.request_id) != Some(&txn.op) {
                    return Err(format!(
                        "Integrity: server {id} applied {z:#x}, request {} that no client or leader proposed",
                        txn.request_id
                    ));
                }
                let last = self.canon.keys().next_back().copied().unwrap_or(0);
                if last != prev {
                    return Err(format!(
                        "PrefixConsistency: server {id} applied new {z:#x} after {prev:#x}, but the committed sequence ends at {last:#x} (lost or forked history)"
                    ));
                }
                let next = if zxid_epoch(z) == zxid_epoch(last) {
                    zxid_counter(last) + 1
                } else {
                    1
                };
                if zxid_counter(z) != next {
                    return Err(format!(
                        "PrimaryOrder: {z:#x} committed after {last:#x}: its leader's counter {next} is missing"
                    ));
                }
                self.canon.insert(z, hash);
            }
        }
        Ok(())
    }

    /// Server `id`'s tree is at `zxid` with `digest` (after an apply or an install).
    pub(crate) fn on_digest(
        &mut self,
        id: ServerId,
        zxid: Zxid,
        digest: u64,
    ) -> Result<(), String> {
        if zxid != 0 && !self.canon.contains_key(&zxid) {
            return Err(format!(
                "Integrity: server {id} holds state at {zxid:#x}, never committed"
            ));
        }
        match self.digests.insert(zxid, digest) {
            Some(d) if d != digest => Err(format!(
                "Agreement: server {id} has tree digest {digest:#x} at {zxid:#x}, others {d:#x}"
            )),
            _ => Ok(()),
        }
    }

    pub(crate) fn on_ack(&mut self, zxid: Zxid, now: u64) {
        self.acked.insert(zxid);
        if self
            .acked_by_time
            .last()
            .is_none_or(|&(_, newest)| zxid > newest)
        {
            self.acked_by_time.push((now, zxid));
        }
    }

    /// Timeliness: server `id`'s read at `now` saw state at `zxid`, which holds
    /// every write acknowledged up to `ticks` before (`TIMELINESS_TICKS`, or
    /// `TIMELINESS_TICKS_DEAF`).
    pub(crate) fn on_timely_read(
        &self,
        id: ServerId,
        now: u64,
        zxid: Zxid,
        ticks: u64,
    ) -> Result<(), String> {
        let Some(until) = now.checked_sub(ticks * super::world::TICK) else {
            return Ok(());
        };
        let older = self.acked_by_time.partition_point(|&(at, _)| at <= until);
        match older.checked_sub(1).map(|i| self.acked_by_time[i]) {
            Some((at, acked)) if zxid < acked => Err(format!(
                "Timeliness: server {id} served a read at {now} at zxid {zxid:#x}, \
                 without write {acked:#x} acknowledged at {at}"
            )),
            _ => Ok(()),
        }
    }

    /// The newest acknowledged write.
    pub(crate) fn acked_max(&self) -> Zxid {
        self.acked.iter().next_back().copied().unwrap_or(0)
    }

    pub(crate) fn on_read(
        &self,
        id: ServerId,
        index: Zxid,
        acked_before: Zxid,
    ) -> Result<(), String> {
        if index < acked_before {
            return Err(format!(
                "ReadIndex: server {id} gave read index {index:#x} below acknowledged write {acked_before:#x}"
            ));
        }
        Ok(())
    }

    /// Every acknowledged write is in the committed sequence (the final check).
    pub(crate) fn check_acked(&self) -> Result<(), String> {
        match self.acked.iter().find(|z| !self.canon.contains_key(z)) {
            Some(z) => Err(format!(
                "Durability: acknowledged write {z:#x} is not committed"
            )),
            None => Ok(()),
        }
    }

    pub(crate) fn committed_count(&self) -> usize {
        self.canon.len()
    }
}

/// What the tree must show right after `txn` was applied with `events` (checked on
/// every server, for every txn, independently of how `apply` decides):
/// - FencedWrite: a fenced write that applied was made while its token held the
///   lock: the token's node is its queue's first member (the clients' mutex has
///   one permit);
/// - EphemeralLifetime: an ephemeral node is deleted only by its session's end or
///   by a delete that names it, and once a session has ended neither it nor any
///   ephemeral node it owned is left.
pub(crate) fn applied_state(txn: &Txn, events: &[Event], tree: &DataTree) -> Result<(), String> {
    if let Some(fence) = txn.fence.as_ref().filter(|_| !events.is_empty()) {
        let queue = crate::tree::path::parent(&fence.key);
        let holder = tree.queue_entries(queue, 1).into_iter().next();
        if !holder.is_some_and(|h| h.key == fence.key && h.token == fence.token) {
            return Err(format!(
                "FencedWrite: {:#x} applied under {} token {:#x}, which does not hold the lock",
                txn.zxid, fence.key, fence.token
            ));
        }
    }
    for ev in events {
        let owner = ev.stat.ephemeral_owner;
        if ev.kind == EventKind::Deleted && owner != 0 && !ends_or_names(&txn.op, owner, &ev.path) {
            return Err(format!(
                "EphemeralLifetime: {:#x} deleted {} of live session {owner:#x}",
                txn.zxid, ev.path
            ));
        }
    }
    if let TxnOp::CloseSession { session_id, .. } = txn.op {
        let left = tree.session(session_id).is_some()
            || ephemerals(tree).any(|(_, owner)| owner == session_id);
        if left {
            return Err(format!(
                "EphemeralLifetime: after {:#x} closed session {session_id:#x}, it or one of its ephemerals is left",
                txn.zxid
            ));
        }
    }
    Ok(())
}

/// Whether `op` ends session `owner` or deletes `path` by name.
fn ends_or_names(op: &TxnOp, owner: u64, path: &str) -> bool {
    match op {
        TxnOp::CloseSession { session_id, .. } => *session_id == owner,
        TxnOp::Delete(d) => d.path == path,
        TxnOp::Queue(QueueOp::Leave { path: p, .. }) => p == path,
        TxnOp::Multi(ops) => ops
            .iter()
            .any(|op| matches!(op, MultiOp::Delete(d) if d.path == path)),
        _ => false,
    }
}

/// The simulated clients' ephemeral nodes (at the root, in the lock queue and in the
/// election), with their owners.
fn ephemerals(tree: &DataTree) -> impl Iterator<Item = (String, u64)> + '_ {
    let roots = tree.children("/", "", 0).unwrap_or_default();
    let root = roots
        .into_iter()
        .filter(|(_, stat)| stat.ephemeral_owner != 0)
        .map(|(name, stat)| (format!("/{name}"), stat.ephemeral_owner));
    let queued = [super::workload::LOCK_QUEUE, super::workload::ELECTION_QUEUE]
        .into_iter()
        .flat_map(|queue| tree.queue_entries(queue, 0))
        .map(|e| (e.key, e.session_id));
    root.chain(queued)
}
