//! The pure core of the caches: a map of nodes fed with watch messages, returning the
//! [`CacheEvent`]s each message causes. No IO, no clock, no locks.
//!
//! ```text
//!   WatchMessage ─▶ CacheState::on_message ─▶ Vec<CacheEvent>
//!     SnapshotNode  → pending snapshot (filtered by scope)
//!     SnapshotDone  → diff(nodes, pending): Deleted…, Created/Changed… (+ Initialized once)
//!     Event         → Created / Changed / Deleted (ChildrenChanged: the stat only, silently)
//!     Progress      → zxid only
//! ```
//!
//! A first snapshot is diffed against an empty map (every node is `Created`); a
//! rebuild after a watch that could not be resumed is diffed against what the cache
//! held, so listeners see exactly the differences. What it must not do: keep anything
//! outside its scope, or emit an event for a message that changed nothing.

use std::collections::BTreeMap;

use concord_proto::v1::EventKind;

use crate::types::{Event, Node, WatchMessage};

/// What a cache holds, relative to its root path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The root node only.
    Node(String),
    /// The root's direct children (not the root).
    Children(String),
    /// The root and everything below it.
    Tree(String),
}

impl Scope {
    /// The watched path.
    pub(crate) fn root(&self) -> &str {
        match self {
            Scope::Node(root) | Scope::Children(root) | Scope::Tree(root) => root,
        }
    }

    /// Whether the watch must be recursive to see what the scope holds.
    pub(crate) fn recursive(&self) -> bool {
        !matches!(self, Scope::Node(_))
    }

    /// True when `path` belongs in the cache.
    pub(crate) fn contains(&self, path: &str) -> bool {
        match self {
            Scope::Node(root) => path == root,
            Scope::Children(root) => path != root && parent(path) == Some(root.as_str()),
            Scope::Tree(root) => path == root || is_below(path, root),
        }
    }
}

/// The parent of an absolute path (`None` for `/`).
pub(crate) fn parent(path: &str) -> Option<&str> {
    if path == "/" {
        return None;
    }
    match path.rfind('/') {
        Some(0) => Some("/"),
        Some(i) => Some(&path[..i]),
        None => None,
    }
}

/// True when `path` is strictly below `root`.
fn is_below(path: &str, root: &str) -> bool {
    if root == "/" {
        return path != "/" && path.starts_with('/');
    }
    path.len() > root.len() && path.starts_with(root) && path.as_bytes()[root.len()] == b'/'
}

/// A change the cache made, as its listeners see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheEvent {
    /// A node entered the cache (created, or present in the initial snapshot).
    Created(Node),
    /// A node's data changed (or it was deleted and re-created while the cache was
    /// rebuilding).
    Changed {
        /// The node as the cache held it before.
        old: Node,
        /// The node now.
        node: Node,
    },
    /// A node left the cache; the node as the cache last held it.
    Deleted(Node),
    /// The initial snapshot has been delivered (as `Created` events): sent once.
    Initialized,
    /// This listener fell behind and `missed` events were dropped for it; the cache
    /// itself is complete (read it again). Events continue after the gap.
    Lagged {
        /// How many events this listener missed.
        missed: u64,
    },
}

/// The nodes of a cache and the zxid they reflect.
#[derive(Debug, Clone)]
pub(crate) struct CacheState {
    /// What belongs in the cache.
    scope: Scope,
    /// The cached nodes by full path (path order: parents before children).
    nodes: BTreeMap<String, Node>,
    /// The zxid the nodes reflect (0 before the first snapshot is done).
    zxid: u64,
    /// The nodes of a snapshot being received; applied whole at SnapshotDone.
    pending: BTreeMap<String, Node>,
    /// A snapshot is being received: the nodes are older than the stream, so a
    /// Progress must not move `zxid` until it is done.
    snapshot_pending: bool,
    /// The first snapshot is done (Initialized was emitted).
    initialized: bool,
}

impl CacheState {
    pub(crate) fn new(scope: Scope) -> CacheState {
        CacheState {
            scope,
            nodes: BTreeMap::new(),
            zxid: 0,
            pending: BTreeMap::new(),
            snapshot_pending: false,
            initialized: false,
        }
    }

    /// The scope of the cache.
    pub(crate) fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The zxid the cache reflects.
    pub(crate) fn zxid(&self) -> u64 {
        self.zxid
    }

    /// True once the first snapshot is done.
    pub(crate) fn is_initialized(&self) -> bool {
        self.initialized
    }

    /// The node at `path`, if cached.
    pub(crate) fn get(&self, path: &str) -> Option<&Node> {
        self.nodes.get(path)
    }

    /// The cached nodes in path order.
    pub(crate) fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.values()
    }

    /// The number of cached nodes.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// A new watch with an initial snapshot is starting: forget any half-received one.
    pub(crate) fn begin_snapshot(&mut self) {
        self.pending.clear();
        self.snapshot_pending = true;
    }

    /// Feeds one watch message; returns the events it caused, in order.
    pub(crate) fn on_message(&mut self, msg: WatchMessage) -> Vec<CacheEvent> {
        match msg {
            WatchMessage::Started { .. } => Vec::new(),
            WatchMessage::SnapshotNode(node) => {
                if self.scope.contains(&node.path) {
                    self.pending.insert(node.path.clone(), node);
                }
                Vec::new()
            }
            WatchMessage::SnapshotDone { zxid } => self.snapshot_done(zxid),
            WatchMessage::Event(event) => self.apply(event).into_iter().collect(),
            WatchMessage::Progress { zxid } => {
                if !self.snapshot_pending {
                    self.zxid = self.zxid.max(zxid);
                }
                Vec::new()
            }
        }
    }

    /// Replaces the nodes with the received snapshot; the differences as events.
    fn snapshot_done(&mut self, zxid: u64) -> Vec<CacheEvent> {
        self.snapshot_pending = false;
        let fresh = std::mem::take(&mut self.pending);
        let mut events = diff(&self.nodes, &fresh);
        self.nodes = fresh;
        self.zxid = zxid;
        if !self.initialized {
            self.initialized = true;
            events.push(CacheEvent::Initialized);
        }
        events
    }

    /// Applies one event; the cache event it causes, if any.
    fn apply(&mut self, event: Event) -> Option<CacheEvent> {
        self.zxid = self.zxid.max(event.zxid);
        if !self.scope.contains(&event.path) {
            return None;
        }
        let node = Node {
            path: event.path,
            data: event.data,
            stat: event.stat,
        };
        match event.kind {
            EventKind::Created | EventKind::DataChanged => {
                let old = self.nodes.insert(node.path.clone(), node.clone());
                Some(match old {
                    Some(old) => CacheEvent::Changed { old, node },
                    None => CacheEvent::Created(node),
                })
            }
            EventKind::Deleted => self.nodes.remove(&node.path).map(CacheEvent::Deleted),
            EventKind::ChildrenChanged => {
                if let Some(cached) = self.nodes.get_mut(&node.path) {
                    cached.stat = node.stat;
                }
                None
            }
            EventKind::Unspecified => None,
        }
    }
}

/// The events that turn `old` into `new`: deletions first (children before parents),
/// then creations and changes in path order. A node whose only difference is its
/// children's bookkeeping (pzxid, cversion, num_children) changes silently.
pub(crate) fn diff(old: &BTreeMap<String, Node>, new: &BTreeMap<String, Node>) -> Vec<CacheEvent> {
    let mut events: Vec<CacheEvent> = old
        .iter()
        .rev()
        .filter(|(path, _)| !new.contains_key(*path))
        .map(|(_, node)| CacheEvent::Deleted(node.clone()))
        .collect();
    for (path, node) in new {
        match old.get(path) {
            None => events.push(CacheEvent::Created(node.clone())),
            Some(before) if data_differs(before, node) => events.push(CacheEvent::Changed {
                old: before.clone(),
                node: node.clone(),
            }),
            Some(_) => {}
        }
    }
    events
}

/// True when the node's data (or its identity: a delete and re-create) changed.
fn data_differs(a: &Node, b: &Node) -> bool {
    a.data != b.data
        || a.stat.mzxid != b.stat.mzxid
        || a.stat.czxid != b.stat.czxid
        || a.stat.version != b.stat.version
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
