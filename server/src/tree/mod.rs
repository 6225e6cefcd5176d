//! The data tree: ZooKeeper's model of small nodes, kept in memory, changed only by
//! applying committed txns in zxid order.
//!
//! `DataTree::apply(txn) -> Applied { result, events }` is a pure, deterministic
//! function of (tree, txn): no IO, no clock, no randomness. Every server applying the
//! same txns reaches the same tree (`digest()` proves it). It never panics on any
//! txn: a txn that cannot apply yields a `TreeError` and changes nothing but
//! `last_zxid` (a failed txn still consumed its zxid; see apply.rs).
//!
//! The replicated session table lives here too, because ephemeral nodes and retry
//! de-duplication depend on it at apply time. Deadlines (liveness) do not: they are
//! in `session/`. The grant table lives here too (`security::Grants`, changed only by
//! `TxnOp::Access`, see access.rs), so that every server checks permissions against
//! the same state at the same zxid.
//!
//! Nodes are kept in persistent (structurally shared) maps, so `clone()` is O(1):
//! a snapshot is a clone taken between two applies and serialized off the write path.
//!
//! What it must not do: touch the network, the disk, or Zab.

pub mod path;

mod access;
mod apply;
mod digest;
mod nodes;
mod ops;
pub mod queue;
mod read;
mod sessions;
mod snapshot;
mod stored;
#[cfg(test)]
mod tests;
mod usage;

pub use snapshot::SnapshotError;
pub use usage::Usage;

use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::security::Grants;
use crate::txn::{CreateMode, Zxid};
use nodes::Nodes;
use path::clip;

/// Node metadata with ZooKeeper's meaning (see `concord.v1.Stat`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Stat {
    pub czxid: Zxid,
    pub mzxid: Zxid,
    pub pzxid: Zxid,
    pub ctime_ms: i64,
    pub mtime_ms: i64,
    pub version: i32,
    /// Child changes (creates and deletes); also the source of sequence numbers.
    pub cversion: i64,
    pub aversion: i32,
    pub ephemeral_owner: u64,
    pub data_length: u32,
    pub num_children: u32,
}

/// What changed (mirrors `concord.v1.EventKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventKind {
    Created,
    Deleted,
    DataChanged,
    ChildrenChanged,
}

/// One change produced by applying a txn. The watch layer filters and strips these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub zxid: Zxid,
    pub kind: EventKind,
    /// The node changed (the parent, for ChildrenChanged).
    pub path: Arc<str>,
    /// Data after the change (empty for Deleted and ChildrenChanged).
    pub data: Bytes,
    /// Data before the change (DataChanged and Deleted; else empty).
    pub prev_data: Bytes,
    /// Stat after the change (before it, for Deleted).
    pub stat: Stat,
}

/// A node as a read sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeView {
    pub data: Bytes,
    pub stat: Stat,
    /// The data is null, not empty: the ZooKeeper port answers null; gRPC, which has
    /// no null bytes, answers empty.
    pub null_data: bool,
}

/// Outcome of one op inside a Multi.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpResult {
    Created { path: String, stat: Stat },
    Set { stat: Stat },
    Deleted,
    Checked,
}

/// Outcome of a txn that applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnResult {
    Created {
        path: String,
        stat: Stat,
    },
    Set {
        stat: Stat,
    },
    Deleted,
    Multi(Vec<OpResult>),
    SessionOpened {
        session_id: u64,
        ttl_ms: i64,
    },
    /// The ephemeral paths the close deleted, sorted.
    SessionClosed {
        ephemerals: Vec<String>,
    },
    /// A housekeeping delete happened.
    Reaped,
    /// The grant table changed (or was already as asked).
    AccessChanged,
}

/// Why a txn did not apply. Deterministic: every server gets the same error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum TreeError {
    #[error("{} already exists", clip(.path))]
    NodeExists { path: String },
    #[error("{} does not exist", clip(.path))]
    NoNode { path: String },
    #[error("{} is at version {actual}, not {expected}", clip(.path))]
    BadVersion {
        path: String,
        expected: i32,
        actual: i32,
    },
    #[error("{} has children", clip(.path))]
    NotEmpty { path: String },
    #[error("{} is ephemeral and cannot have children", clip(.path))]
    NoChildrenForEphemerals { path: String },
    #[error("bad path \"{}\": {}", clip(.path), clip(.reason))]
    BadPath { path: String, reason: String },
    #[error("session {session_id} does not exist")]
    SessionExpired { session_id: u64 },
    #[error("{0}")]
    BadArguments(String),
    /// A housekeeping delete found the node no longer qualifies.
    #[error("{} no longer qualifies for reaping", clip(.path))]
    NotReapable { path: String },
    /// The txn's fence no longer holds its lock or leadership; nothing was applied.
    #[error("fence {} token {token} no longer holds its lock or leadership", clip(.key))]
    Fenced { key: String, token: u64 },
    /// A plain write touched the reserved prefix of the Lock and Election services.
    #[error("{} is reserved for the Lock and Election services", clip(.path))]
    Reserved { path: String },
    /// A join that asked to be a holder at once found every permit taken.
    #[error("{} is held", clip(.queue))]
    LockHeld { queue: String },
    /// Op `index` of a Multi failed; nothing was applied.
    #[error("op {index}: {source}")]
    MultiOp {
        index: usize,
        source: Box<TreeError>,
    },
    /// Refused by the leader before it proposed the write (never the outcome of
    /// applying a txn, so never remembered for retries): it would take team `team`
    /// over its `resource` quota. `used` counts what is applied and what the leader
    /// has proposed but not applied yet.
    #[error("team {team:?} would exceed its {resource} quota: {used} used of {limit}, the write adds {adds}")]
    QuotaExceeded {
        team: String,
        resource: String,
        used: u64,
        limit: u64,
        adds: u64,
    },
    /// Refused by the leader before it proposed the write (never the outcome of
    /// applying a txn): the write's permissions were checked against the grant table
    /// as of a zxid before `zxid`, the leader's last change to it. Nothing was done;
    /// the server that checked it checks it again once it has applied `zxid`.
    #[error("the grant table changed at zxid {zxid:#x}, after this write was checked; retry")]
    GrantsChanged { zxid: Zxid },
}

/// Result and events of applying one txn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub result: Result<TxnResult, TreeError>,
    /// In the order they happened; all carry the txn's zxid. Empty on error and for a
    /// de-duplicated retry.
    pub events: Vec<Event>,
}

/// A live session as the replicated state knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionEntry {
    /// The granted TTL.
    pub ttl_ms: i64,
    /// The identity that opened the session: only it (or an admin) may keep it
    /// alive, close it, or write with its id. Empty for a session opened by an older
    /// server (`TxnOp::OpenSession`), which only admins may use.
    pub owner: String,
    /// Paths of the ephemeral nodes the session owns.
    pub ephemerals: imbl::OrdSet<String>,
    /// Outcomes of the session's most recent writes that carried a request id, newest
    /// last, at most `RECENT_REQUESTS_MAX`: what makes retries safe.
    pub recent: imbl::Vector<Recent>,
}

/// A remembered outcome of a write that carried a request id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recent {
    pub request_id: u64,
    /// A hash of the request (its op and fence; see `digest::fingerprint`): a retry
    /// with the same request id but another fingerprint is a different request, and
    /// is refused rather than answered with this outcome. 0: unknown (remembered by
    /// an older server, read from a format 1 snapshot); such an entry is matched by
    /// request id alone.
    pub fingerprint: u64,
    pub result: Result<TxnResult, TreeError>,
}

/// How many request outcomes each session remembers for retries.
pub const RECENT_REQUESTS_MAX: usize = 64;

/// Longest session owner (an identity) a txn may record, in bytes.
pub const SESSION_OWNER_BYTES_MAX: usize = 1024;

/// A stored node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Node {
    pub(crate) data: Bytes,
    pub(crate) stat: Stat,
    pub(crate) mode: CreateMode,
    /// The data is null, not empty (ZooKeeper's null data; `data` is then empty).
    pub(crate) null_data: bool,
}

/// The whole replicated state: nodes, sessions, and the last applied zxid.
#[derive(Clone, Debug)]
pub struct DataTree {
    /// Every node by full path, each node's children adjacent in the map (nodes.rs);
    /// the root "/" always exists. Each node is behind an `Arc`, so the map's entries
    /// are small; a write changes a node in place (`Arc::make_mut`) unless a
    /// snapshot's clone still shares it.
    pub(crate) nodes: Nodes,
    /// Live sessions by id.
    pub(crate) sessions: imbl::OrdMap<u64, SessionEntry>,
    /// The zxid of the last txn applied (0 for an empty tree).
    pub(crate) last_zxid: Zxid,
    /// Every Container and TTL node by path, with its TTL (0 for a container): the
    /// only nodes `reapable` must look at, so housekeeping does not scan the whole tree
    /// (ZooKeeper keeps the same sets). It is the only place a node's TTL is kept:
    /// most nodes have none, and a `Node` without one fits a smaller allocation
    /// (docs/benchmarks.md, "Reads, failover, memory"). Rebuilt from the snapshot's
    /// node records; not a section of its own.
    pub(crate) reap_candidates: imbl::OrdMap<String, i64>,
    /// Who may do what where (`security::acl`); changed only by `TxnOp::Access`.
    pub(crate) grants: Grants,
    /// The zxid of the last txn that changed `grants` (`grants_zxid`). Not in
    /// snapshots: a decoded tree takes the snapshot's zxid, which is never below it.
    pub(crate) grants_zxid: Zxid,
    /// Nodes and data bytes under each quota root (`track_usage`; usage.rs).
    /// Derived from `nodes`; not in snapshots.
    pub(crate) usage: imbl::OrdMap<String, Usage>,
    /// Bytes of data of every node together (`data_bytes`, for the metrics).
    /// Derived from `nodes`; not in snapshots.
    pub(crate) data_bytes: u64,
}
