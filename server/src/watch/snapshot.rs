//! `SnapshotWalk`: the nodes of a watched node (or subtree) as of one zxid, one at a
//! time, for a watch's initial snapshot.
//!
//! The walk owns a clone of the tree (O(1): the tree is a persistent structure), so it
//! stays consistent at the zxid it was taken at while the live tree moves on, and it
//! never builds the list of nodes: it keeps a depth-first stack of (directory, last
//! child returned) and finds the next child by a range query on the ordered children.
//! Memory: the stack (one entry per level) and whatever old node versions the clone
//! keeps alive while it runs.
//!
//! ```text
//!   tree.clone() at z ─▶ SnapshotWalk ─next()─▶ (path, NodeView) ─▶ one SnapshotNode
//! ```
//!
//! What it must not do: collect the subtree, or look at the live tree.

use crate::tree::{path, DataTree, NodeView};

/// A depth-first walk (parents before children, children in name order) of one node
/// and, when recursive, everything below it.
pub struct SnapshotWalk {
    /// The tree as of the snapshot's zxid.
    tree: DataTree,
    recursive: bool,
    /// The watched path, until it is returned.
    root: Option<String>,
    /// Directories being walked, with the name of the last child returned from each.
    stack: Vec<(String, Option<String>)>,
}

impl std::fmt::Debug for SnapshotWalk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotWalk")
            .field("zxid", &self.tree.last_zxid())
            .field("depth", &self.stack.len())
            .finish_non_exhaustive()
    }
}

impl SnapshotWalk {
    /// Walks `path` (and its subtree if `recursive`) in `tree`, which the walk keeps.
    pub fn new(tree: DataTree, path: &str, recursive: bool) -> Self {
        SnapshotWalk {
            tree,
            recursive,
            root: Some(path.to_owned()),
            stack: Vec::new(),
        }
    }

    /// The next child of the directory on top of the stack, or None (and the
    /// directory is popped) when it has no more.
    fn next_child(&mut self) -> Option<Option<(String, NodeView)>> {
        let (dir, last) = self.stack.last_mut()?;
        let after = last.as_deref().unwrap_or("");
        let Some((name, child)) = self.tree.nodes.children(dir, after).next() else {
            self.stack.pop();
            return Some(None);
        };
        let child_path = path::join(dir, name);
        *last = Some(name.to_string());
        let view = child.view();
        if child.has_children() {
            self.stack.push((child_path.clone(), None));
        }
        Some(Some((child_path, view)))
    }
}

impl Iterator for SnapshotWalk {
    type Item = (String, NodeView);

    fn next(&mut self) -> Option<(String, NodeView)> {
        if let Some(root) = self.root.take() {
            let node = self.tree.nodes.get(root.as_str())?;
            let view = node.view();
            if self.recursive && node.has_children() {
                self.stack.push((root.clone(), None));
            }
            return Some((root, view));
        }
        // Each round returns a node or pops a level / skips a missing child; the
        // tree is finite, so this ends.
        loop {
            if let Some(found) = self.next_child()? {
                return Some(found);
            }
        }
    }
}
