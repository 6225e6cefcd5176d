//! One ZooKeeper connection's watches, with ZooKeeper 3.9's server-side rules
//! (`DataTree` and `watch/WatchManager`), so that a ZooKeeper client sees exactly the
//! notifications a ZooKeeper server would send it.
//!
//! ```text
//!   requests ──add / remove / has / set_watches──▶ Watches ──▶ notifications
//!   tree events (zxid order) ──on_event(kind, path)──▶ Watches ──▶ Option<EventType>
//! ```
//!
//! ZooKeeper keeps two tables per server, data watches and child watches, each mapping
//! (path, connection) to a set of modes: standard (one-shot), persistent and
//! persistent recursive. Here one connection's two tables are one map from a path to
//! bits, because the modes always land in the tables the same way:
//! - `DATA`: a standard watch in the data table (getData, exists; exists whether or
//!   not the node exists);
//! - `CHILD`: a standard watch in the child table (getChildren, getChildren2);
//! - `PERSISTENT` (addWatch mode 0): in both tables; ZooKeeper adds and removes it in
//!   both together, so one bit says both;
//! - `RECURSIVE` (addWatch mode 1): in the data table only, so it never sees
//!   NodeChildrenChanged.
//!
//! A trigger (`DataTree.createNode/deleteNode/setData`) notifies the connection once
//! if any of its modes at exactly the path is in the triggered table, or a recursive
//! watch is on a proper ancestor (path-segment aware: `/ab` is not under `/a`); it then
//! clears the standard bit at exactly the path and nothing else (ZOOKEEPER-4466, 3.9: a
//! one-shot watch is consumed even when a persistent one on the same path fired with
//! it, and a standard watch on an ancestor is not touched by a descendant's event).
//!
//! | tree event at p         | notifies if                          | clears at p  |
//! |-------------------------|--------------------------------------|--------------|
//! | Created                 | DATA/PERSISTENT/RECURSIVE at p, or RECURSIVE above | DATA |
//! | Deleted                 | any bit at p, or RECURSIVE above     | DATA, CHILD  |
//! | DataChanged             | DATA/PERSISTENT/RECURSIVE at p, or RECURSIVE above | DATA |
//! | ChildrenChanged (p = parent) | CHILD/PERSISTENT at p           | CHILD        |
//!
//! Deleted is one notification although ZooKeeper triggers both tables: the child
//! table's trigger skips watchers the data table's already notified.
//!
//! Paths are opaque strings here: the caller maps namespaces (chroot) before calling.
//! Memory is bounded by `Limits`: the number of registrations and the bytes of the
//! distinct paths held. Nothing here knows the network or the tree; what a
//! notification carries on the wire (the zxid that fired it, -1 for those
//! `set_watches` returns, as ZooKeeper's `WatchedEvent` without a zxid) is the caller's.

use std::collections::HashMap;

pub use super::proto::{EventType, WatcherType};
use crate::tree::{EventKind, Stat};
use crate::txn::Zxid;

/// A standard watch in ZooKeeper's data table (getData, exists).
const DATA: u8 = 1;
/// A standard watch in ZooKeeper's child table (getChildren, getChildren2).
const CHILD: u8 = 2;
/// A persistent watch (addWatch mode 0), in both of ZooKeeper's tables.
const PERSISTENT: u8 = 4;
/// A persistent recursive watch (addWatch mode 1), in the data table only.
const RECURSIVE: u8 = 8;

/// The bits ZooKeeper's data table holds at a path.
const DATA_TABLE: u8 = DATA | PERSISTENT | RECURSIVE;
/// The bits ZooKeeper's child table holds at a path.
const CHILD_TABLE: u8 = CHILD | PERSISTENT;

/// What a request registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WatchKind {
    /// getData, or exists (whether or not the node exists).
    Data,
    /// getChildren or getChildren2.
    Child,
    /// addWatch mode 0.
    Persistent,
    /// addWatch mode 1.
    PersistentRecursive,
}

impl WatchKind {
    /// addWatch's mode (`ZooDefs.AddWatchModes`): 0 persistent, 1 persistent
    /// recursive; any other is not a mode (ZooKeeper's server fails such a request).
    pub fn from_add_watch_mode(mode: i32) -> Option<Self> {
        match mode {
            0 => Some(Self::Persistent),
            1 => Some(Self::PersistentRecursive),
            _ => None,
        }
    }

    fn bit(self) -> u8 {
        match self {
            Self::Data => DATA,
            Self::Child => CHILD,
            Self::Persistent => PERSISTENT,
            Self::PersistentRecursive => RECURSIVE,
        }
    }
}

/// The watch bits a removeWatches or checkWatches type names.
fn bits(watcher_type: WatcherType) -> u8 {
    match watcher_type {
        WatcherType::Children => CHILD,
        WatcherType::Data => DATA,
        WatcherType::Any => DATA | CHILD | PERSISTENT | RECURSIVE,
        WatcherType::Persistent => PERSISTENT,
        WatcherType::PersistentRecursive => RECURSIVE,
    }
}

/// How much one connection's watches may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Registrations (one per path and kind; a persistent watch is one).
    pub watches_max: usize,
    /// Bytes of the distinct watched paths.
    pub path_bytes_max: usize,
}

/// A registration refused because the connection's watches are full. Nothing changed.
/// ZooKeeper has no such bound; the caller answers the request with QUOTAEXCEEDED
/// (`code()`), ZooKeeper's code for a hard limit reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WatchError {
    #[error("this connection already holds {max} watches, the most it may")]
    TooMany { max: usize },
    #[error("this connection's watched paths already hold {max} bytes, the most they may")]
    PathBytes { max: usize },
}

impl WatchError {
    /// ZooKeeper's QUOTAEXCEEDED (`KeeperException.Code`).
    pub fn code(&self) -> i32 {
        -125
    }
}

/// One connection's watches: ZooKeeper's two tables for this connection only.
#[derive(Debug)]
pub struct Watches {
    /// Watched path -> bits (`DATA`, `CHILD`, `PERSISTENT`, `RECURSIVE`); no entry
    /// holds 0.
    by_path: HashMap<Box<str>, u8>,
    /// Registrations held: the bits set over all paths.
    registrations: usize,
    /// Bytes of the keys of `by_path`.
    path_bytes: usize,
    /// Paths with `RECURSIVE`, so events skip the walk up the path when there is none.
    recursive_paths: usize,
    limits: Limits,
}

impl Watches {
    pub fn new(limits: Limits) -> Self {
        Self {
            by_path: HashMap::new(),
            registrations: 0,
            path_bytes: 0,
            recursive_paths: 0,
            limits,
        }
    }

    /// Registers a watch. Registering one the connection holds already changes
    /// nothing and succeeds, as in ZooKeeper.
    pub fn add(&mut self, kind: WatchKind, path: &str) -> Result<(), WatchError> {
        let bit = kind.bit();
        let held = self.by_path.get(path).copied().unwrap_or(0);
        if held & bit != 0 {
            return Ok(());
        }
        let new_bytes = if held == 0 { path.len() } else { 0 };
        self.check_room(1, new_bytes)?;
        self.set_bits(path, held | bit);
        Ok(())
    }

    /// removeWatches (`DataTree.removeWatch`): true when a watch of that type was on
    /// exactly that path (the caller answers false with NOWATCHER, -121).
    pub fn remove(&mut self, path: &str, watcher_type: WatcherType) -> bool {
        let held = self.by_path.get(path).copied().unwrap_or(0);
        let gone = held & bits(watcher_type);
        if gone == 0 {
            return false;
        }
        self.set_bits(path, held & !gone);
        true
    }

    /// checkWatches (`DataTree.containsWatcher`): whether a watch of that type is on
    /// exactly that path.
    pub fn has(&self, path: &str, watcher_type: WatcherType) -> bool {
        let held = self.by_path.get(path).copied().unwrap_or(0);
        held & bits(watcher_type) != 0
    }

    /// Registrations held (one per path and kind).
    pub fn len(&self) -> usize {
        self.registrations
    }

    pub fn is_empty(&self) -> bool {
        self.registrations == 0
    }

    /// Bytes of the distinct watched paths.
    pub fn path_bytes(&self) -> usize {
        self.path_bytes
    }

    /// This connection's part of ZooKeeper's watch count (`DataTree.getWatchCount`,
    /// mntr's zk_watch_count): paths in the data table plus paths in the child table,
    /// so a persistent watch counts twice, as in ZooKeeper.
    pub fn zk_watch_count(&self) -> usize {
        self.by_path
            .values()
            .map(|bits| usize::from(bits & DATA_TABLE != 0) + usize::from(bits & CHILD_TABLE != 0))
            .sum()
    }

    /// The paths in this connection's part of ZooKeeper's data table, the table the
    /// wchs word summarises (`DataTree.dumpWatchesSummary`).
    pub fn data_table_paths(&self) -> impl Iterator<Item = &str> {
        self.by_path
            .iter()
            .filter(|(_, bits)| **bits & DATA_TABLE != 0)
            .map(|(path, _)| &**path)
    }

    /// One tree event (in zxid order; ChildrenChanged at the parent's path): the
    /// notification to send this connection, if any. At most one per event, as
    /// ZooKeeper's `WatchManager.triggerWatch` notifies a watcher once.
    pub fn on_event(&mut self, kind: EventKind, path: &str) -> Option<EventType> {
        let (event_type, matching, consumed, recursive_above) = match kind {
            EventKind::Created => (EventType::NodeCreated, DATA_TABLE, DATA, true),
            EventKind::Deleted => (
                EventType::NodeDeleted,
                DATA_TABLE | CHILD_TABLE,
                DATA | CHILD,
                true,
            ),
            EventKind::DataChanged => (EventType::NodeDataChanged, DATA_TABLE, DATA, true),
            EventKind::ChildrenChanged => {
                (EventType::NodeChildrenChanged, CHILD_TABLE, CHILD, false)
            }
        };
        let held = self.by_path.get(path).copied().unwrap_or(0);
        let mut fired = held & matching != 0;
        if held & consumed != 0 {
            self.set_bits(path, held & !consumed);
        }
        if !fired && recursive_above && self.recursive_paths > 0 {
            fired = ancestors(path).any(|above| {
                self.by_path
                    .get(above)
                    .is_some_and(|bits| bits & RECURSIVE != 0)
            });
        }
        fired.then_some(event_type)
    }

    /// setWatches and setWatches2 after a reconnect (`DataTree.setWatches`): the
    /// notifications for what changed since `relative_zxid`, in ZooKeeper's order,
    /// and the rest registered:
    /// - data: a missing node -> NodeDeleted; mzxid > relative_zxid -> NodeDataChanged;
    ///   else registered;
    /// - exist: a node that exists -> NodeCreated; else registered;
    /// - child: a missing node -> NodeDeleted; pzxid > relative_zxid ->
    ///   NodeChildrenChanged; else registered;
    /// - persistent and persistent recursive: registered, never a notification
    ///   (3.9: their client re-reads what it needs).
    ///
    /// All or nothing: when the registrations would pass `Limits`, nothing changes and
    /// the error says which bound.
    #[allow(clippy::too_many_arguments)]
    pub fn set_watches(
        &mut self,
        relative_zxid: Zxid,
        data: &[String],
        exist: &[String],
        child: &[String],
        persistent: &[String],
        recursive: &[String],
        lookup: impl Fn(&str) -> Option<Stat>,
    ) -> Result<Vec<(EventType, String)>, WatchError> {
        let mut events = Vec::new();
        let mut adds: Vec<(&str, u8)> = Vec::new();
        for path in data {
            match lookup(path) {
                None => events.push((EventType::NodeDeleted, path.clone())),
                Some(stat) if stat.mzxid > relative_zxid => {
                    events.push((EventType::NodeDataChanged, path.clone()))
                }
                Some(_) => adds.push((path, DATA)),
            }
        }
        for path in exist {
            match lookup(path) {
                Some(_) => events.push((EventType::NodeCreated, path.clone())),
                None => adds.push((path, DATA)),
            }
        }
        for path in child {
            match lookup(path) {
                None => events.push((EventType::NodeDeleted, path.clone())),
                Some(stat) if stat.pzxid > relative_zxid => {
                    events.push((EventType::NodeChildrenChanged, path.clone()))
                }
                Some(_) => adds.push((path, CHILD)),
            }
        }
        adds.extend(persistent.iter().map(|p| (p.as_str(), PERSISTENT)));
        adds.extend(recursive.iter().map(|p| (p.as_str(), RECURSIVE)));
        self.add_all(&adds)?;
        Ok(events)
    }

    /// Adds every (path, bit) or, if they would pass `Limits`, none.
    fn add_all(&mut self, adds: &[(&str, u8)]) -> Result<(), WatchError> {
        let mut pending: HashMap<&str, u8> = HashMap::new();
        for &(path, bit) in adds {
            *pending.entry(path).or_insert(0) |= bit;
        }
        let (mut more, mut more_bytes) = (0, 0);
        for (path, bits) in &pending {
            let held = self.by_path.get(*path).copied().unwrap_or(0);
            more += (bits & !held).count_ones() as usize;
            if held == 0 {
                more_bytes += path.len();
            }
        }
        self.check_room(more, more_bytes)?;
        for (path, bits) in pending {
            let held = self.by_path.get(path).copied().unwrap_or(0);
            self.set_bits(path, held | bits);
        }
        Ok(())
    }

    fn check_room(&self, more: usize, more_bytes: usize) -> Result<(), WatchError> {
        let max = self.limits.watches_max;
        if self.registrations.saturating_add(more) > max {
            return Err(WatchError::TooMany { max });
        }
        let max = self.limits.path_bytes_max;
        if self.path_bytes.saturating_add(more_bytes) > max {
            return Err(WatchError::PathBytes { max });
        }
        Ok(())
    }

    /// Sets a path's bits, keeping the counters true; 0 drops the entry.
    fn set_bits(&mut self, path: &str, bits: u8) {
        let held = self.by_path.get(path).copied().unwrap_or(0);
        if held == bits {
            return;
        }
        self.registrations =
            self.registrations + bits.count_ones() as usize - held.count_ones() as usize;
        match (held & RECURSIVE != 0, bits & RECURSIVE != 0) {
            (false, true) => self.recursive_paths += 1,
            (true, false) => self.recursive_paths -= 1,
            _ => {}
        }
        if bits == 0 {
            self.by_path.remove(path);
            self.path_bytes -= path.len();
        } else if held == 0 {
            self.by_path.insert(path.into(), bits);
            self.path_bytes += path.len();
        } else if let Some(entry) = self.by_path.get_mut(path) {
            *entry = bits;
        }
    }
}

/// The proper ancestors of a path, nearest first: `/a/b/c` -> `/a/b`, `/a`, `/`.
fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    let mut rest = path;
    std::iter::from_fn(move || {
        if rest.len() <= 1 {
            return None;
        }
        let cut = rest.rfind('/')?;
        rest = if cut == 0 { "/" } else { &rest[..cut] };
        Some(rest)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use EventKind::{ChildrenChanged, Created, DataChanged, Deleted};
    use EventType::{NodeChildrenChanged, NodeCreated, NodeDataChanged, NodeDeleted};

    fn roomy() -> Watches {
        Watches::new(Limits {
            watches_max: 1_000,
            path_bytes_max: 100_000,
        })
    }

    fn with(watches: &[(WatchKind, &str)]) -> Watches {
        let mut w = roomy();
        for (kind, path) in watches {
            w.add(*kind, path).expect("room");
        }
        w
    }

    #[test]
    fn created_fires_a_data_watch_once_and_consumes_it() {
        let mut w = with(&[(WatchKind::Data, "/a")]);
        assert_eq!(w.on_event(Created, "/a"), Some(NodeCreated));
        assert!(w.is_empty());
        assert_eq!(w.on_event(Created, "/a"), None);
    }

    #[test]
    fn events_on_other_paths_do_not_fire_or_consume_standard_watches() {
        let mut w = with(&[(WatchKind::Data, "/a"), (WatchKind::Child, "/a")]);
        for kind in [Created, Deleted, DataChanged, ChildrenChanged] {
            assert_eq!(w.on_event(kind, "/a/b"), None);
            assert_eq!(w.on_event(kind, "/ab"), None);
            assert_eq!(w.on_event(kind, "/"), None);
        }
        assert_eq!(w.len(), 2);
    }

    #[test]
    fn data_changed_fires_a_data_watch_and_not_a_child_watch() {
        let mut w = with(&[(WatchKind::Child, "/a")]);
        assert_eq!(w.on_event(DataChanged, "/a"), None);
        assert!(w.has("/a", WatcherType::Children));
        w.add(WatchKind::Data, "/a").expect("room");
        assert_eq!(w.on_event(DataChanged, "/a"), Some(NodeDataChanged));
        assert!(!w.has("/a", WatcherType::Data));
        assert!(w.has("/a", WatcherType::Children));
    }

    #[test]
    fn children_changed_fires_a_child_watch_and_not_a_data_watch() {
        let mut w = with(&[(WatchKind::Data, "/a")]);
        assert_eq!(w.on_event(ChildrenChanged, "/a"), None);
        assert!(w.has("/a", WatcherType::Data));
        w.add(WatchKind::Child, "/a").expect("room");
        assert_eq!(w.on_event(ChildrenChanged, "/a"), Some(NodeChildrenChanged));
        assert!(!w.has("/a", WatcherType::Children));
        assert!(w.has("/a", WatcherType::Data));
    }

    #[test]
    fn created_does_not_fire_a_child_watch_on_the_node_itself() {
        let mut w = with(&[(WatchKind::Child, "/a")]);
        assert_eq!(w.on_event(Created, "/a"), None);
        assert!(w.has("/a", WatcherType::Children));
    }

    #[test]
    fn deleted_fires_data_and_child_watches_as_one_notification_and_consumes_both() {
        let mut w = with(&[(WatchKind::Data, "/a"), (WatchKind::Child, "/a")]);
        assert_eq!(w.on_event(Deleted, "/a"), Some(NodeDeleted));
        assert!(w.is_empty());
        assert_eq!(w.path_bytes(), 0);
    }

    #[test]
    fn deleted_fires_a_child_watch_alone() {
        let mut w = with(&[(WatchKind::Child, "/a")]);
        assert_eq!(w.on_event(Deleted, "/a"), Some(NodeDeleted));
        assert!(w.is_empty());
    }

    #[test]
    fn persistent_fires_every_event_at_its_path_including_children_changed_and_stays() {
        let mut w = with(&[(WatchKind::Persistent, "/a")]);
        assert_eq!(w.on_event(Created, "/a"), Some(NodeCreated));
        assert_eq!(w.on_event(DataChanged, "/a"), Some(NodeDataChanged));
        assert_eq!(w.on_event(ChildrenChanged, "/a"), Some(NodeChildrenChanged));
        assert_eq!(w.on_event(Deleted, "/a"), Some(NodeDeleted));
        assert_eq!(w.on_event(Created, "/a"), Some(NodeCreated));
        assert!(w.has("/a", WatcherType::Persistent));
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn persistent_does_not_fire_for_descendants() {
        let mut w = with(&[(WatchKind::Persistent, "/a")]);
        for kind in [Created, Deleted, DataChanged, ChildrenChanged] {
            assert_eq!(w.on_event(kind, "/a/b"), None);
        }
    }

    #[test]
    fn recursive_fires_created_deleted_data_changed_at_its_path_and_below_but_not_children_changed()
    {
        let mut w = with(&[(WatchKind::PersistentRecursive, "/a")]);
        for path in ["/a", "/a/b", "/a/b/c"] {
            assert_eq!(w.on_event(Created, path), Some(NodeCreated));
            assert_eq!(w.on_event(DataChanged, path), Some(NodeDataChanged));
            assert_eq!(w.on_event(ChildrenChanged, path), None);
            assert_eq!(w.on_event(Deleted, path), Some(NodeDeleted));
        }
        assert!(w.has("/a", WatcherType::PersistentRecursive));
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn recursive_is_path_segment_aware() {
        let mut w = with(&[(WatchKind::PersistentRecursive, "/a")]);
        assert_eq!(w.on_event(Created, "/ab"), None);
        assert_eq!(w.on_event(Created, "/ab/c"), None);
        assert_eq!(w.on_event(Created, "/"), None);
        assert_eq!(w.on_event(Created, "/a/b"), Some(NodeCreated));
    }

    #[test]
    fn recursive_at_the_root_sees_every_node() {
        let mut w = with(&[(WatchKind::PersistentRecursive, "/")]);
        assert_eq!(w.on_event(Created, "/x"), Some(NodeCreated));
        assert_eq!(w.on_event(DataChanged, "/"), Some(NodeDataChanged));
        assert_eq!(w.on_event(Deleted, "/x/y/z"), Some(NodeDeleted));
        assert_eq!(w.on_event(ChildrenChanged, "/"), None);
    }

    #[test]
    fn one_notification_when_standard_persistent_and_recursive_watches_all_match() {
        let mut w = with(&[
            (WatchKind::Data, "/a/b"),
            (WatchKind::Child, "/a/b"),
            (WatchKind::Persistent, "/a/b"),
            (WatchKind::PersistentRecursive, "/a/b"),
            (WatchKind::PersistentRecursive, "/a"),
            (WatchKind::PersistentRecursive, "/"),
        ]);
        assert_eq!(w.on_event(Deleted, "/a/b"), Some(NodeDeleted));
        assert_eq!(w.len(), 4);
    }

    #[test]
    fn a_one_shot_watch_is_consumed_when_a_persistent_watch_on_its_path_fires_with_it() {
        // ZOOKEEPER-4466 (3.9): the modes at one path are kept apart; a trigger clears
        // the standard one and keeps the persistent ones.
        let mut w = with(&[(WatchKind::Data, "/a"), (WatchKind::Persistent, "/a")]);
        assert_eq!(w.on_event(DataChanged, "/a"), Some(NodeDataChanged));
        assert!(!w.has("/a", WatcherType::Data));
        assert!(w.has("/a", WatcherType::Persistent));
        assert_eq!(w.on_event(DataChanged, "/a"), Some(NodeDataChanged));

        let mut w = with(&[
            (WatchKind::Child, "/a"),
            (WatchKind::PersistentRecursive, "/a"),
        ]);
        assert_eq!(w.on_event(Deleted, "/a"), Some(NodeDeleted));
        assert!(!w.has("/a", WatcherType::Children));
        assert!(w.has("/a", WatcherType::PersistentRecursive));
    }

    #[test]
    fn a_descendants_event_leaves_a_standard_watch_on_the_recursive_ancestor() {
        let mut w = with(&[
            (WatchKind::Data, "/a"),
            (WatchKind::PersistentRecursive, "/a"),
        ]);
        assert_eq!(w.on_event(Created, "/a/b"), Some(NodeCreated));
        assert!(w.has("/a", WatcherType::Data));
        assert_eq!(w.on_event(DataChanged, "/a"), Some(NodeDataChanged));
        assert!(!w.has("/a", WatcherType::Data));
    }

    #[test]
    fn adding_a_watch_twice_holds_it_once() {
        let mut w = with(&[(WatchKind::Data, "/a"), (WatchKind::Data, "/a")]);
        assert_eq!(w.len(), 1);
        assert_eq!(w.path_bytes(), 2);
        assert_eq!(w.on_event(DataChanged, "/a"), Some(NodeDataChanged));
        assert!(w.is_empty());
    }

    #[test]
    fn has_answers_check_watches_per_type_at_exactly_the_path() {
        let w = with(&[(WatchKind::Data, "/d"), (WatchKind::Child, "/c")]);
        assert!(w.has("/d", WatcherType::Data));
        assert!(!w.has("/d", WatcherType::Children));
        assert!(w.has("/c", WatcherType::Children));
        assert!(!w.has("/c", WatcherType::Data));
        assert!(w.has("/c", WatcherType::Any));
        assert!(!w.has("/c", WatcherType::Persistent));
        assert!(!w.has("/c/x", WatcherType::Any));
        let w = with(&[
            (WatchKind::Persistent, "/p"),
            (WatchKind::PersistentRecursive, "/r"),
        ]);
        assert!(w.has("/p", WatcherType::Persistent));
        assert!(!w.has("/p", WatcherType::Data));
        assert!(!w.has("/p", WatcherType::Children));
        assert!(!w.has("/p", WatcherType::PersistentRecursive));
        assert!(w.has("/r", WatcherType::PersistentRecursive));
        assert!(!w.has("/r", WatcherType::Persistent));
        assert!(w.has("/r", WatcherType::Any));
        assert!(!w.has("/r/x", WatcherType::PersistentRecursive));
    }

    #[test]
    fn remove_takes_only_the_named_type_and_says_whether_one_was_there() {
        let mut w = with(&[
            (WatchKind::Data, "/a"),
            (WatchKind::Child, "/a"),
            (WatchKind::Persistent, "/a"),
            (WatchKind::PersistentRecursive, "/a"),
        ]);
        assert!(!w.remove("/b", WatcherType::Any));
        assert!(w.remove("/a", WatcherType::Children));
        assert!(!w.remove("/a", WatcherType::Children));
        assert!(w.has("/a", WatcherType::Data));
        assert!(w.remove("/a", WatcherType::Persistent));
        assert!(!w.has("/a", WatcherType::Persistent));
        assert!(w.has("/a", WatcherType::PersistentRecursive));
        assert!(w.remove("/a", WatcherType::Data));
        assert!(w.remove("/a", WatcherType::PersistentRecursive));
        assert!(w.is_empty());
        assert_eq!(w.path_bytes(), 0);
        assert!(!w.remove("/a", WatcherType::Any));
    }

    #[test]
    fn remove_any_takes_every_type_on_the_path_and_nothing_elsewhere() {
        let mut w = with(&[
            (WatchKind::Data, "/a"),
            (WatchKind::Child, "/a"),
            (WatchKind::PersistentRecursive, "/a"),
            (WatchKind::Data, "/a/b"),
        ]);
        assert!(w.remove("/a", WatcherType::Any));
        assert_eq!(w.len(), 1);
        assert!(w.has("/a/b", WatcherType::Data));
        assert_eq!(w.on_event(Created, "/a/c"), None);
    }

    #[test]
    fn removed_recursive_watch_no_longer_fires_for_descendants() {
        let mut w = with(&[(WatchKind::PersistentRecursive, "/a")]);
        assert!(w.remove("/a", WatcherType::PersistentRecursive));
        assert_eq!(w.on_event(Created, "/a/b"), None);
    }

    #[test]
    fn add_past_the_watch_bound_is_refused_and_changes_nothing() {
        let mut w = Watches::new(Limits {
            watches_max: 2,
            path_bytes_max: 1_000,
        });
        w.add(WatchKind::Data, "/a").expect("room");
        w.add(WatchKind::Child, "/a").expect("room");
        let err = w.add(WatchKind::Data, "/b");
        assert_eq!(err, Err(WatchError::TooMany { max: 2 }));
        assert_eq!(err.map_err(|e| e.code()), Err(-125));
        assert_eq!(w.len(), 2);
        assert!(!w.has("/b", WatcherType::Any));
        // One the connection holds already is no new registration.
        assert_eq!(w.add(WatchKind::Data, "/a"), Ok(()));
        // A fired one-shot watch frees its room.
        assert_eq!(w.on_event(DataChanged, "/a"), Some(NodeDataChanged));
        assert_eq!(w.add(WatchKind::Data, "/b"), Ok(()));
    }

    #[test]
    fn add_past_the_path_bytes_bound_is_refused_and_changes_nothing() {
        let mut w = Watches::new(Limits {
            watches_max: 100,
            path_bytes_max: 6,
        });
        w.add(WatchKind::Data, "/abc").expect("room");
        assert_eq!(
            w.add(WatchKind::Data, "/xyz"),
            Err(WatchError::PathBytes { max: 6 })
        );
        assert_eq!(w.path_bytes(), 4);
        // Another kind on a path already held costs no path bytes.
        assert_eq!(w.add(WatchKind::Persistent, "/abc"), Ok(()));
        assert!(w.remove("/abc", WatcherType::Any));
        assert_eq!(w.add(WatchKind::Data, "/xyz"), Ok(()));
    }

    #[test]
    fn zk_watch_count_counts_the_data_and_child_tables_as_zookeeper_does() {
        let w = with(&[
            (WatchKind::Data, "/d"),
            (WatchKind::Child, "/c"),
            (WatchKind::Data, "/both"),
            (WatchKind::Child, "/both"),
            (WatchKind::Persistent, "/p"),
            (WatchKind::PersistentRecursive, "/r"),
        ]);
        // data table: /d, /both, /p, /r; child table: /c, /both, /p.
        assert_eq!(w.zk_watch_count(), 7);
        let mut data: Vec<&str> = w.data_table_paths().collect();
        data.sort_unstable();
        assert_eq!(data, ["/both", "/d", "/p", "/r"]);
    }

    fn stat(mzxid: Zxid, pzxid: Zxid) -> Stat {
        Stat {
            mzxid,
            pzxid,
            ..Stat::default()
        }
    }

    fn paths(list: &[&str]) -> Vec<String> {
        list.iter().map(|p| p.to_string()).collect()
    }

    /// A tree of /old (mzxid 5, pzxid 5) and /new (mzxid 20, pzxid 20).
    fn lookup(path: &str) -> Option<Stat> {
        match path {
            "/old" => Some(stat(5, 5)),
            "/new" => Some(stat(20, 20)),
            _ => None,
        }
    }

    #[test]
    fn set_watches_answers_what_changed_since_relative_zxid_and_registers_the_rest() {
        let mut w = roomy();
        let events = w
            .set_watches(
                10,
                &paths(&["/gone", "/new", "/old"]),
                &paths(&["/new", "/absent"]),
                &paths(&["/gone", "/new", "/old"]),
                &[],
                &[],
                lookup,
            )
            .expect("room");
        assert_eq!(
            events,
            vec![
                (NodeDeleted, "/gone".to_string()),
                (NodeDataChanged, "/new".to_string()),
                (NodeCreated, "/new".to_string()),
                (NodeDeleted, "/gone".to_string()),
                (NodeChildrenChanged, "/new".to_string()),
            ]
        );
        // Registered: data /old, exist /absent (a data watch), child /old.
        assert_eq!(w.len(), 3);
        assert!(w.has("/old", WatcherType::Data));
        assert!(w.has("/old", WatcherType::Children));
        assert!(w.has("/absent", WatcherType::Data));
        assert!(!w.has("/new", WatcherType::Any));
        assert!(!w.has("/gone", WatcherType::Any));
        assert_eq!(w.on_event(Created, "/absent"), Some(NodeCreated));
        assert_eq!(w.on_event(DataChanged, "/old"), Some(NodeDataChanged));
        assert_eq!(
            w.on_event(ChildrenChanged, "/old"),
            Some(NodeChildrenChanged)
        );
        assert!(w.is_empty());
    }

    #[test]
    fn set_watches_at_the_nodes_own_zxid_is_no_change() {
        let mut w = roomy();
        let events = w
            .set_watches(
                20,
                &paths(&["/new"]),
                &[],
                &paths(&["/new"]),
                &[],
                &[],
                lookup,
            )
            .expect("room");
        assert!(events.is_empty());
        assert!(w.has("/new", WatcherType::Data));
        assert!(w.has("/new", WatcherType::Children));
    }

    #[test]
    fn set_watches_registers_persistent_watches_with_no_notification() {
        let mut w = roomy();
        let events = w
            .set_watches(
                0,
                &[],
                &[],
                &[],
                &paths(&["/new", "/gone"]),
                &paths(&["/new", "/gone"]),
                lookup,
            )
            .expect("room");
        assert!(events.is_empty());
        assert!(w.has("/gone", WatcherType::Persistent));
        assert!(w.has("/gone", WatcherType::PersistentRecursive));
        assert!(w.has("/new", WatcherType::Persistent));
        assert_eq!(w.len(), 4);
        assert_eq!(w.on_event(Created, "/gone/x"), Some(NodeCreated));
    }

    #[test]
    fn set_watches_past_the_bound_registers_nothing() {
        let mut w = Watches::new(Limits {
            watches_max: 2,
            path_bytes_max: 1_000,
        });
        w.add(WatchKind::Data, "/held").expect("room");
        let result = w.set_watches(
            10,
            &paths(&["/old"]),
            &paths(&["/absent"]),
            &[],
            &[],
            &[],
            lookup,
        );
        assert_eq!(result, Err(WatchError::TooMany { max: 2 }));
        assert_eq!(w.len(), 1);
        assert!(!w.has("/old", WatcherType::Any));
        assert!(!w.has("/absent", WatcherType::Any));
        // Watches already held and repeats count once, so these fit.
        let events = w
            .set_watches(
                10,
                &paths(&["/held", "/old", "/old"]),
                &[],
                &[],
                &[],
                &[],
                lookup,
            )
            .expect("room");
        assert_eq!(events, vec![(NodeDeleted, "/held".to_string())]);
        assert_eq!(w.len(), 2);
    }

    #[test]
    fn wire_numbers_are_zookeepers() {
        assert_eq!(i32::from(NodeCreated), 1);
        assert_eq!(i32::from(NodeDeleted), 2);
        assert_eq!(i32::from(NodeDataChanged), 3);
        assert_eq!(i32::from(NodeChildrenChanged), 4);
        assert_eq!(
            WatchKind::from_add_watch_mode(0),
            Some(WatchKind::Persistent)
        );
        assert_eq!(
            WatchKind::from_add_watch_mode(1),
            Some(WatchKind::PersistentRecursive)
        );
        assert_eq!(WatchKind::from_add_watch_mode(2), None);
        assert_eq!(WatchKind::from_add_watch_mode(-1), None);
        for (n, t) in [
            (1, WatcherType::Children),
            (2, WatcherType::Data),
            (3, WatcherType::Any),
            (4, WatcherType::Persistent),
            (5, WatcherType::PersistentRecursive),
        ] {
            assert_eq!(WatcherType::try_from(n), Ok(t));
            assert_eq!(t as i32, n);
        }
        assert!(WatcherType::try_from(0).is_err());
        assert!(WatcherType::try_from(6).is_err());
    }

    #[test]
    fn ancestors_walk_up_by_whole_segments() {
        assert_eq!(ancestors("/a/b/c").collect::<Vec<_>>(), ["/a/b", "/a", "/"]);
        assert_eq!(ancestors("/a").collect::<Vec<_>>(), ["/"]);
        assert_eq!(ancestors("/").count(), 0);
    }
}
