//! Unit tests of the data tree, with a small driver that stamps txns.

mod access;
mod fuzz;
mod memory;
mod multi;
mod ops;
mod paths;
mod queues;
mod sessions;
mod snapshots;

use bytes::Bytes;

use super::*;
use crate::txn::{make_zxid, CheckOp, CloseReason, CreateOp, DeleteOp, MultiOp, SetOp, Txn, TxnOp};

/// Drives a tree the way the leader would: growing zxids, a settable clock.
pub(super) struct Driver {
    pub(super) tree: DataTree,
    pub(super) counter: u64,
    pub(super) time_ms: i64,
}

impl Driver {
    pub(super) fn new() -> Driver {
        Driver {
            tree: DataTree::new(),
            counter: 0,
            time_ms: 1_000,
        }
    }

    /// The zxid the next txn will carry.
    pub(super) fn next_zxid(&self) -> Zxid {
        make_zxid(1, self.counter + 1)
    }

    pub(super) fn txn(&mut self, session_id: u64, request_id: u64, op: TxnOp) -> Txn {
        self.counter += 1;
        Txn {
            zxid: make_zxid(1, self.counter),
            time_ms: self.time_ms,
            session_id,
            request_id,
            fence: None,
            op,
        }
    }

    /// Applies `op` from `session_id` with `request_id`.
    pub(super) fn run_as(&mut self, session_id: u64, request_id: u64, op: TxnOp) -> Applied {
        let txn = self.txn(session_id, request_id, op);
        self.tree.apply(&txn)
    }

    pub(super) fn run(&mut self, op: TxnOp) -> Applied {
        self.run_as(0, 0, op)
    }

    /// Applies `op`, which must succeed.
    pub(super) fn ok(&mut self, op: TxnOp) -> (TxnResult, Vec<Event>) {
        let applied = self.run(op);
        match applied.result {
            Ok(r) => (r, applied.events),
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    /// Applies `op`, which must fail without events and consume its zxid.
    pub(super) fn err(&mut self, op: TxnOp) -> TreeError {
        let zxid = self.next_zxid();
        let applied = self.run(op);
        assert!(applied.events.is_empty(), "events on error: {applied:?}");
        assert_eq!(self.tree.last_zxid(), zxid);
        match applied.result {
            Ok(r) => panic!("unexpected success: {r:?}"),
            Err(e) => e,
        }
    }

    /// Creates a node, returns its final path.
    pub(super) fn mk(&mut self, path: &str, mode: CreateMode) -> String {
        match self.ok(create(path, "", mode)).0 {
            TxnResult::Created { path, .. } => path,
            other => panic!("not a create: {other:?}"),
        }
    }

    /// Opens a session with no recorded owner (as older servers did), returns its id.
    pub(super) fn open(&mut self) -> u64 {
        match self.ok(TxnOp::OpenSession { ttl_ms: 10_000 }).0 {
            TxnResult::SessionOpened { session_id, .. } => session_id,
            other => panic!("not a session: {other:?}"),
        }
    }

    /// Opens a session owned by `owner`, returns its id.
    pub(super) fn open_as(&mut self, owner: &str) -> u64 {
        let op = TxnOp::OpenOwnedSession {
            ttl_ms: 10_000,
            owner: owner.into(),
        };
        match self.ok(op).0 {
            TxnResult::SessionOpened { session_id, .. } => session_id,
            other => panic!("not a session: {other:?}"),
        }
    }

    pub(super) fn stat(&self, path: &str) -> Stat {
        self.tree.get(path).expect("node exists").stat
    }
}

pub(super) fn create(path: &str, data: &str, mode: CreateMode) -> TxnOp {
    TxnOp::Create(create_op(path, data, mode))
}

pub(super) fn create_op(path: &str, data: &str, mode: CreateMode) -> CreateOp {
    CreateOp {
        path: path.into(),
        data: Bytes::copy_from_slice(data.as_bytes()),
        mode,
        ttl_ms: 0,
        null_data: false,
    }
}

pub(super) fn create_ttl(path: &str, mode: CreateMode, ttl_ms: i64) -> TxnOp {
    TxnOp::Create(CreateOp {
        ttl_ms,
        ..create_op(path, "", mode)
    })
}

pub(super) fn set(path: &str, data: &str, version: i32) -> TxnOp {
    TxnOp::Set(set_op(path, data, version))
}

pub(super) fn set_op(path: &str, data: &str, version: i32) -> SetOp {
    SetOp {
        path: path.into(),
        data: Bytes::copy_from_slice(data.as_bytes()),
        version,
        null_data: false,
    }
}

pub(super) fn delete(path: &str, version: i32) -> TxnOp {
    TxnOp::Delete(DeleteOp {
        path: path.into(),
        version,
    })
}

pub(super) fn check_op(path: &str, version: i32) -> MultiOp {
    MultiOp::Check(CheckOp {
        path: path.into(),
        version,
    })
}

pub(super) fn close(session_id: u64) -> TxnOp {
    TxnOp::CloseSession {
        session_id,
        reason: CloseReason::Closed,
    }
}

pub(super) fn no_node(path: &str) -> TreeError {
    TreeError::NoNode { path: path.into() }
}

/// An event as the tests expect it.
pub(super) fn ev(zxid: Zxid, kind: EventKind, path: &str, stat: Stat) -> Event {
    Event {
        zxid,
        kind,
        path: path.into(),
        data: Bytes::new(),
        prev_data: Bytes::new(),
        stat,
    }
}

/// Checks the tree's structural invariants; panics with a description if broken.
pub(super) fn check_invariants(tree: &DataTree) {
    for (path, node) in tree.nodes.iter() {
        let children: Vec<&str> = tree.nodes.children(path, "").map(|(n, _)| n).collect();
        assert_eq!(node.stat.num_children as usize, children.len(), "{path}");
        assert!(children.is_sorted(), "{path}: {children:?}");
        assert_eq!(node.stat.data_length as usize, node.data.len(), "{path}");
        for name in children {
            let child = path::join(path, name);
            assert!(tree.nodes.contains(&child), "{child} missing");
        }
        if path != "/" {
            let parent = tree.nodes.get(path::parent(path)).expect("parent exists");
            assert!(
                tree.nodes
                    .children(path::parent(path), "")
                    .any(|(name, _)| name == path::name(path)),
                "{path} not among its parent's children"
            );
            assert!(!parent.mode.is_ephemeral(), "{path} under an ephemeral");
        }
        let owner = node.stat.ephemeral_owner;
        assert_eq!(node.mode.is_ephemeral(), owner != 0, "{path}");
        if owner != 0 {
            let session = tree.sessions.get(&owner).expect("owner session is live");
            assert!(
                session.ephemerals.contains(path),
                "{path} not in its session"
            );
        }
        assert_eq!(
            tree.reap_candidates.contains_key(path),
            ops_is_reap_candidate(node.mode),
            "{path}"
        );
    }
    for (id, session) in tree.sessions.iter() {
        assert!(session.recent.len() <= RECENT_REQUESTS_MAX);
        for path in session.ephemerals.iter() {
            let node = tree.nodes.get(path).expect("session ephemeral exists");
            assert_eq!(node.stat.ephemeral_owner, *id);
        }
    }
    for path in tree.reap_candidates.keys() {
        assert!(tree.nodes.contains(path), "stale reap candidate {path}");
    }
    let data_bytes: usize = tree.nodes.values().map(|n| n.data.len()).sum();
    assert_eq!(tree.data_bytes(), data_bytes as u64, "the data bytes total");
    let ephemerals = tree
        .nodes
        .values()
        .filter(|n| n.mode.is_ephemeral())
        .count();
    assert_eq!(tree.ephemeral_count(), ephemerals, "the ephemeral count");
}

fn ops_is_reap_candidate(mode: CreateMode) -> bool {
    super::ops::is_reap_candidate(mode)
}
