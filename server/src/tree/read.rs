//! Reads of the tree: one node, a page of children, a subtree walk, reap candidates.
//!
//! Reads never change the tree and never validate paths: an invalid path simply does
//! not exist. Each costs what it returns (plus O(log n) lookups), never a tree scan.
//!
//! What it must not do: mutate, allocate beyond what it returns.

use std::ops::Bound;

use super::ops::qualifies_for_reap;
use super::path;
use super::*;

impl DataTree {
    /// The node at `path`, if any.
    pub fn get(&self, path: &str) -> Option<NodeView> {
        self.nodes.get(path).map(|n| n.view())
    }

    /// Up to `limit` (0: all) children of `path` with names > `after`, sorted, with stats.
    /// None if `path` does not exist.
    pub fn children(&self, path: &str, after: &str, limit: usize) -> Option<Vec<(String, Stat)>> {
        let node = self.nodes.get(path)?;
        let limit = if limit == 0 { usize::MAX } else { limit };
        let mut out = Vec::with_capacity((node.stat.num_children as usize).min(limit));
        for (name, child) in self.nodes.children(path, after).take(limit) {
            out.push((name.to_string(), child.stat));
        }
        Some(out)
    }

    /// Every child name of `path`, sorted, and whether they all fit: the list stops
    /// once the names (4 bytes of length each, as jute counts them) pass
    /// `bytes_max`. None if `path` does not exist.
    pub fn child_names(&self, path: &str, bytes_max: usize) -> Option<(Vec<String>, bool)> {
        let node = self.nodes.get(path)?;
        let mut out = Vec::with_capacity(node.stat.num_children as usize);
        let mut bytes = 0usize;
        for (name, _) in self.nodes.children(path, "") {
            bytes = bytes.saturating_add(4 + name.len());
            if bytes > bytes_max {
                return Some((out, false));
            }
            out.push(name.to_string());
        }
        Some((out, true))
    }

    /// How many nodes are below `path` (not counting it); None if it does not exist.
    pub fn descendant_count(&self, path: &str) -> Option<u64> {
        self.nodes.get(path)?;
        let mut count = 0u64;
        let mut stack = vec![path.to_string()];
        while let Some(dir) = stack.pop() {
            for (name, child) in self.nodes.children(&dir, "") {
                count += 1;
                if child.has_children() {
                    stack.push(path::join(&dir, name));
                }
            }
        }
        Some(count)
    }

    /// How many nodes the tree holds, the root included.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// A live session, if `session_id` is one.
    pub fn session(&self, session_id: u64) -> Option<&SessionEntry> {
        self.sessions.get(&session_id)
    }

    /// Live sessions in id order.
    pub fn sessions(&self) -> impl Iterator<Item = (u64, &SessionEntry)> {
        self.sessions.iter().map(|(id, s)| (*id, s))
    }

    /// Live sessions with an id above `after`, in id order (a page of a listing).
    pub fn sessions_after(&self, after: u64) -> impl Iterator<Item = (u64, &SessionEntry)> {
        let range = (Bound::Excluded(after), Bound::Unbounded);
        self.sessions.range(range).map(|(id, s)| (*id, s))
    }

    /// `path` and, if `recursive`, every node below it, parents before children,
    /// siblings sorted. Empty if `path` does not exist.
    pub fn walk(&self, path: &str, recursive: bool) -> Vec<(String, NodeView)> {
        let Some(node) = self.nodes.get(path) else {
            return Vec::new();
        };
        let mut out = vec![(path.to_string(), node.view())];
        if !recursive {
            return out;
        }
        // Depth-first with an explicit stack (paths may be ~2000 levels deep).
        let mut stack = vec![(path.to_string(), self.nodes.children(path, ""))];
        while let Some((dir, children)) = stack.last_mut() {
            let Some((name, child)) = children.next() else {
                stack.pop();
                continue;
            };
            let child_path = path::join(dir, name);
            out.push((child_path.clone(), child.view()));
            if child.has_children() {
                let grandchildren = self.nodes.children(&child_path, "");
                stack.push((child_path, grandchildren));
            }
        }
        out
    }

    /// Paths the leader should reap at `now_ms`: empty containers that have had a
    /// child, and empty TTL nodes unmodified for their TTL. Sorted.
    ///
    /// Looks only at Container and TTL nodes (kept in an index), not the whole tree.
    pub fn reapable(&self, now_ms: i64) -> Vec<String> {
        self.reap_candidates
            .iter()
            .filter(|(path, ttl_ms)| {
                self.nodes
                    .get(path.as_str())
                    .is_some_and(|node| qualifies_for_reap(node, **ttl_ms, now_ms))
            })
            .map(|(path, _)| path.clone())
            .collect()
    }

    /// The TTL of `node`, at `path`: 0 unless it is a TTL node.
    pub(crate) fn ttl_of(&self, path: &str, node: &Node) -> i64 {
        if !node.mode.is_ttl() {
            return 0;
        }
        self.reap_candidates.get(path).copied().unwrap_or(0)
    }
}

impl Node {
    /// Whether the node has children (counted in its stat, as the tree keeps them).
    pub(crate) fn has_children(&self) -> bool {
        self.stat.num_children > 0
    }

    /// The node as a read sees it.
    pub(crate) fn view(&self) -> NodeView {
        NodeView {
            data: self.data.clone(),
            stat: self.stat,
            null_data: self.null_data,
        }
    }
}
