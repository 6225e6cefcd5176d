//! Applying txns. Stub: the tree helper fills this in.

use super::*;
use crate::txn::Txn;

impl Default for DataTree {
    fn default() -> Self {
        Self::new()
    }
}

impl DataTree {
    /// A tree holding only the root "/".
    pub fn new() -> Self {
        todo!("tree helper")
    }

    /// Applies one committed txn (zxid must be above `last_zxid()`).
    pub fn apply(&mut self, txn: &Txn) -> Applied {
        let _ = txn;
        todo!("tree helper")
    }

    pub fn last_zxid(&self) -> Zxid {
        self.last_zxid
    }

    pub fn get(&self, path: &str) -> Option<NodeView> {
        let _ = path;
        todo!("tree helper")
    }

    /// Up to `limit` (0: all) children of `path` with names > `after`, sorted, with stats.
    /// None if `path` does not exist.
    pub fn children(&self, path: &str, after: &str, limit: usize) -> Option<Vec<(String, Stat)>> {
        let _ = (path, after, limit);
        todo!("tree helper")
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    pub fn session(&self, session_id: u64) -> Option<&SessionEntry> {
        self.sessions.get(&session_id)
    }

    /// Live sessions in id order.
    pub fn sessions(&self) -> impl Iterator<Item = (u64, &SessionEntry)> {
        self.sessions.iter().map(|(id, s)| (*id, s))
    }

    /// `path` and, if `recursive`, every node below it, parents before children,
    /// siblings sorted. Empty if `path` does not exist.
    pub fn walk(&self, path: &str, recursive: bool) -> Vec<(String, NodeView)> {
        let _ = (path, recursive);
        todo!("tree helper")
    }

    /// Paths the leader should reap at `now_ms`: empty containers that have had a
    /// child, and empty TTL nodes unmodified for their TTL. Sorted.
    pub fn reapable(&self, now_ms: i64) -> Vec<String> {
        let _ = now_ms;
        todo!("tree helper")
    }

    /// A deterministic digest of the whole replicated state (nodes, sessions,
    /// last_zxid): equal trees have equal digests on every server.
    pub fn digest(&self) -> u64 {
        todo!("tree helper")
    }
}
