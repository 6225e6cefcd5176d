//! What each quota root holds: nodes below it and bytes of data in its subtree, kept
//! up to date by every create, set and delete (never a subtree scan per write).
//!
//! The roots to count (the teams' namespace roots) come from the configuration, not
//! from the log: `track_usage` sets them and counts once over the whole tree (at
//! start, and after a snapshot from the leader replaced the tree). The counters are
//! derived state, not in snapshots and not in the digest; every server with the
//! same roots counts the same. Roots never nest (the config is refused otherwise),
//! so each node counts toward at most one root.
//!
//! ```text
//!   insert_node / set / remove_node ─▶ root_of(path) ─▶ usage[root] ± (node, bytes)
//! ```
//!
//! What it must not do: decide whether a write may happen (the leader does, in
//! `security::quota`), or count anything outside the tracked roots.

use super::path;
use super::*;

/// What one root holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Nodes below the root (the root itself, which its team sees as `/`, not counted).
    pub nodes: u64,
    /// Bytes of data of the root and every node below it.
    pub data_bytes: u64,
}

impl DataTree {
    /// Counts usage under each of `roots` from now on (any earlier roots forgotten),
    /// starting from one pass over the tree.
    pub fn track_usage<I: IntoIterator<Item = String>>(&mut self, roots: I) {
        self.usage = roots.into_iter().map(|r| (r, Usage::default())).collect();
        if self.usage.is_empty() {
            return;
        }
        let mut counted = std::mem::take(&mut self.usage);
        for (node_path, node) in self.nodes.iter() {
            let Some(root) = root_of(&counted, node_path) else {
                continue;
            };
            if let Some(usage) = counted.get_mut(&root) {
                add(usage, root.len(), node_path, node.data.len(), 1);
            }
        }
        self.usage = counted;
    }

    /// Bytes of data of every node together.
    pub fn data_bytes(&self) -> u64 {
        self.data_bytes
    }

    /// Ephemeral nodes, all sessions' together.
    pub fn ephemeral_count(&self) -> usize {
        self.sessions.values().map(|s| s.ephemerals.len()).sum()
    }

    /// The usage of tracked root `root`, if it is one.
    pub fn usage(&self, root: &str) -> Option<Usage> {
        self.usage.get(root).copied()
    }

    /// The tracked root whose subtree holds `path`, if any.
    pub fn usage_root_of(&self, path: &str) -> Option<&str> {
        let mut p = path;
        loop {
            if let Some((root, _)) = self.usage.get_key_value(p) {
                return Some(root.as_str());
            }
            if p == "/" {
                return None;
            }
            p = path::parent(p);
        }
    }

    /// Whether a write of (`session_id`, `request_id`) would be answered from the
    /// session's retry cache, or refused as a different request under a used id:
    /// either way it changes nothing, and no quota applies to it.
    pub fn remembers(&self, session_id: u64, request_id: u64) -> bool {
        if session_id == 0 || request_id == 0 {
            return false;
        }
        self.sessions
            .get(&session_id)
            .is_some_and(|s| s.recent.iter().any(|r| r.request_id == request_id))
    }

    /// A node with `data_bytes` of data appeared (`sign` 1) or went (-1) at `path`.
    pub(crate) fn count_node(&mut self, node_path: &str, data_bytes: usize, sign: i8) {
        let bytes = data_bytes as u64;
        self.data_bytes = if sign > 0 {
            self.data_bytes.saturating_add(bytes)
        } else {
            self.data_bytes.saturating_sub(bytes)
        };
        if self.usage.is_empty() {
            return;
        }
        let Some(root) = root_of(&self.usage, node_path) else {
            return;
        };
        if let Some(usage) = self.usage.get_mut(&root) {
            add(usage, root.len(), node_path, data_bytes, sign);
        }
    }

    /// The data at `path` changed from `before` to `after` bytes.
    pub(crate) fn count_data(&mut self, node_path: &str, before: usize, after: usize) {
        self.data_bytes = self
            .data_bytes
            .saturating_sub(before as u64)
            .saturating_add(after as u64);
        if self.usage.is_empty() || before == after {
            return;
        }
        let Some(root) = root_of(&self.usage, node_path) else {
            return;
        };
        if let Some(usage) = self.usage.get_mut(&root) {
            let (before, after) = (before as u64, after as u64);
            usage.data_bytes = usage
                .data_bytes
                .saturating_sub(before)
                .saturating_add(after);
        }
    }
}

/// The tracked root holding `node_path`, owned (the map is borrowed mutably next).
fn root_of(usage: &imbl::OrdMap<String, Usage>, node_path: &str) -> Option<String> {
    let mut p = node_path;
    loop {
        if usage.contains_key(p) {
            return Some(p.to_owned());
        }
        if p == "/" {
            return None;
        }
        p = path::parent(p);
    }
}

/// Adds (`sign` 1) or takes away (-1) one node of `data_bytes` at `node_path` under
/// a root `root_len` bytes long; the root itself adds its data but is no node.
fn add(usage: &mut Usage, root_len: usize, node_path: &str, data_bytes: usize, sign: i8) {
    let node = u64::from(node_path.len() != root_len);
    let bytes = data_bytes as u64;
    if sign > 0 {
        usage.nodes = usage.nodes.saturating_add(node);
        usage.data_bytes = usage.data_bytes.saturating_add(bytes);
    } else {
        usage.nodes = usage.nodes.saturating_sub(node);
        usage.data_bytes = usage.data_bytes.saturating_sub(bytes);
    }
}
