//! Every node of the tree, by path, in one persistent ordered map whose order puts
//! each node's children next to each other, sorted by name: a node's children are a
//! range of the map, so no node keeps a set of its children's names.
//!
//! A key is the path preceded by one character that encodes its depth (the number
//! of segments: 0 for the root). Keys compare as strings, so the map is ordered by
//! depth, then by path; among the paths of one depth, those that start with
//! `parent/` are adjacent and ordered by the rest, the child's name (UTF-8 keeps the
//! order of code points, and so of depths, in the bytes).
//!
//! Memory, measured with a million nodes (docs/benchmarks.md, "Reads, failover,
//! memory"): a persistent hash map keyed by path plus a sorted name set in each
//! parent took about 300 bytes a node; this map takes about 100. A key of up to 24
//! bytes (a path of up to 23) is stored inline, with no allocation of its own.
//!
//! What it must not do: allocate to look a node up (a short path's key is built on
//! the stack), or scan beyond a range it was asked for.

use std::ops::Bound;
use std::sync::Arc;

use compact_str::CompactString;

use super::Node;

/// The nodes of a tree; cloning shares the whole map (it is persistent).
#[derive(Clone, Debug, Default)]
pub(crate) struct Nodes {
    map: imbl::OrdMap<CompactString, Arc<Node>>,
}

/// Bytes of a key built on the stack for a lookup; longer keys are built on the heap.
const STACK_KEY_BYTES: usize = 128;

impl Nodes {
    /// The node at `path`.
    pub(crate) fn get(&self, path: &str) -> Option<&Arc<Node>> {
        with_key(path, |key| self.map.get(key))
    }

    /// The node at `path`, to change: copied first if a clone of the tree shares it.
    pub(crate) fn get_mut(&mut self, path: &str) -> Option<&mut Node> {
        with_key(path, |key| self.map.get_mut(key)).map(Arc::make_mut)
    }

    pub(crate) fn contains(&self, path: &str) -> bool {
        self.get(path).is_some()
    }

    /// Puts `node` at `path`; returns the node it replaced.
    pub(crate) fn insert(&mut self, path: &str, node: Arc<Node>) -> Option<Arc<Node>> {
        self.map.insert(key_of(path), node)
    }

    pub(crate) fn remove(&mut self, path: &str) -> Option<Arc<Node>> {
        with_key(path, |key| self.map.remove(key))
    }

    /// How many nodes there are, the root included.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Every node with its path, in the map's order (by depth, then path).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &Arc<Node>)> {
        self.map.iter().map(|(key, node)| (path_of(key), node))
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &Arc<Node>> {
        self.map.values()
    }

    /// The children of `parent` with names after `after` ("": all), sorted by name,
    /// each with its name.
    pub(crate) fn children<'a>(
        &'a self,
        parent: &str,
        after: &str,
    ) -> impl Iterator<Item = (&'a str, &'a Arc<Node>)> + 'a {
        self.children_between(parent, after, None)
    }

    /// The children of `parent` with names before `before`, last first.
    pub(crate) fn children_before<'a>(
        &'a self,
        parent: &str,
        before: &str,
    ) -> impl Iterator<Item = (&'a str, &'a Arc<Node>)> + 'a {
        self.children_between(parent, "", Some(before)).rev()
    }

    /// The children of `parent` with names after `after` ("": all) and before
    /// `before` (None: all), in name order.
    fn children_between<'a>(
        &'a self,
        parent: &str,
        after: &str,
        before: Option<&str>,
    ) -> impl DoubleEndedIterator<Item = (&'a str, &'a Arc<Node>)> + 'a {
        let prefix = children_prefix(parent);
        let from = format!("{prefix}{after}");
        let to = match before {
            Some(name) => format!("{prefix}{name}"),
            // The prefix ends in '/': raised to '0', the next byte, it is above the
            // key of every child and below any other key.
            None => format!("{}0", &prefix[..prefix.len() - 1]),
        };
        let prefix_len = prefix.len();
        self.map
            .range::<_, str>((Bound::Excluded(from.as_str()), Bound::Excluded(to.as_str())))
            .map(move |(key, node)| (&key[prefix_len..], node))
    }
}

/// How many segments `path` has: 0 for the root.
fn depth(path: &str) -> usize {
    if path == "/" {
        0
    } else {
        path.bytes().filter(|&b| b == b'/').count()
    }
}

/// A depth as the character that starts a key. A node's path is at most
/// `path::PATH_BYTES_MAX` bytes, so its depth is far below the first code point that is not
/// a character (0xD800). A read may ask for a longer path: its key is still unique
/// (the path is in it), and no node has it.
fn depth_mark(depth: usize) -> char {
    u32::try_from(depth)
        .ok()
        .and_then(char::from_u32)
        .unwrap_or(char::MAX)
}

/// The part of a key that is the path.
fn path_of(key: &str) -> &str {
    let mark = key.chars().next().map_or(0, char::len_utf8);
    &key[mark..]
}

/// What the key of every child of `parent` starts with: their depth, and
/// `parent/`.
fn children_prefix(parent: &str) -> String {
    let mut prefix = String::with_capacity(parent.len() + 8);
    prefix.push(depth_mark(depth(parent) + 1));
    prefix.push_str(parent);
    if parent != "/" {
        prefix.push('/');
    }
    prefix
}

/// The key of `path`: its depth mark, then the path.
fn key_of(path: &str) -> CompactString {
    let mut key = CompactString::with_capacity(path.len() + 4);
    key.push(depth_mark(depth(path)));
    key.push_str(path);
    key
}

/// Runs `f` on the key of `path`, built on the stack when it is short.
fn with_key<R>(path: &str, f: impl FnOnce(&str) -> R) -> R {
    let mark = depth_mark(depth(path));
    let mut buf = [0u8; STACK_KEY_BYTES];
    let mark_len = mark.len_utf8();
    let len = mark_len + path.len();
    if len <= STACK_KEY_BYTES {
        mark.encode_utf8(&mut buf[..mark_len]);
        buf[mark_len..len].copy_from_slice(path.as_bytes());
        if let Ok(key) = std::str::from_utf8(&buf[..len]) {
            return f(key);
        }
    }
    f(&key_of(path))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::tree::path;

    fn node(version: i32) -> Arc<Node> {
        let mut node = Node::root();
        node.stat.version = version;
        Arc::new(node)
    }

    /// Paths that test the order: names that are prefixes of each other, names
    /// around '/' in byte order ('.' below it, '0' above), multi-byte names, a path
    /// deeper than 127 segments (a two-byte depth mark) and one longer than a key
    /// built on the stack.
    fn paths() -> Vec<String> {
        let mut paths: Vec<String> = [
            "/", "/a", "/a0", "/a.b", "/a/b", "/a/b0", "/a/b.c", "/a/b/c", "/a/é", "/a/z", "/a/😀",
            "/b", "/b/a", "/é", "/é/x",
        ]
        .iter()
        .map(|p| p.to_string())
        .collect();
        let mut deep = String::new();
        for i in 0..140 {
            deep.push_str(&format!("/d{}", i % 3));
            paths.push(deep.clone());
        }
        let long = format!("/a/{}", "l".repeat(300));
        paths.push(long.clone());
        paths.push(format!("{long}/kid"));
        paths
    }

    /// What `children` must give, from the list of paths alone.
    fn model_children(all: &BTreeSet<String>, parent: &str, after: &str) -> Vec<String> {
        all.iter()
            .filter(|p| p.as_str() != "/" && path::parent(p) == parent)
            .map(|p| path::name(p).to_string())
            .filter(|name| name.as_str() > after)
            .collect()
    }

    #[test]
    fn a_nodes_children_are_its_range_sorted_by_name() {
        let all: BTreeSet<String> = paths().into_iter().collect();
        let mut nodes = Nodes::default();
        for (i, p) in all.iter().enumerate() {
            assert!(nodes.insert(p, node(i as i32)).is_none(), "{p}");
        }
        assert_eq!(nodes.len(), all.len());
        for (i, p) in all.iter().enumerate() {
            assert_eq!(nodes.get(p).map(|n| n.stat.version), Some(i as i32), "{p}");
            for after in ["", "a", "a0", "b", "d1", "é"] {
                let got: Vec<&str> = nodes.children(p, after).map(|(n, _)| n).collect();
                assert_eq!(got, model_children(&all, p, after), "{p} after {after:?}");
            }
            let names = model_children(&all, p, "");
            for (k, name) in names.iter().enumerate() {
                let before: Vec<&str> = nodes.children_before(p, name).map(|(n, _)| n).collect();
                let expected: Vec<&str> = names[..k].iter().rev().map(|n| n.as_str()).collect();
                assert_eq!(before, expected, "{p} before {name}");
            }
        }
        let iterated: BTreeSet<String> = nodes.iter().map(|(p, _)| p.to_string()).collect();
        assert_eq!(iterated, all);
    }

    #[test]
    fn paths_that_no_node_has_are_not_found() {
        let mut nodes = Nodes::default();
        nodes.insert("/a/b", node(1));
        let huge = format!("/{}", "x/".repeat(60_000));
        assert!(nodes.get("/a").is_none());
        for absent in ["", "a/b", "/a/b/", "/a//b", "/a/bc", huge.as_str()] {
            assert!(nodes.get(absent).is_none(), "{absent:?}");
            assert_eq!(nodes.children(absent, "").count(), 0, "{absent:?}");
        }
        assert!(nodes.contains("/a/b"));
        assert_eq!(nodes.children("/a", "").count(), 1);
        assert!(nodes.remove("/a/b").is_some());
        assert!(nodes.remove("/a/b").is_none());
        assert_eq!((nodes.len(), nodes.children("/a", "").count()), (0, 0));
    }

    #[test]
    fn a_change_through_a_clone_leaves_the_original_alone() {
        let mut nodes = Nodes::default();
        nodes.insert("/a", node(1));
        let before = nodes.clone();
        if let Some(n) = nodes.get_mut("/a") {
            n.stat.version = 2;
        }
        assert_eq!(before.get("/a").map(|n| n.stat.version), Some(1));
        assert_eq!(nodes.get("/a").map(|n| n.stat.version), Some(2));
    }
}
