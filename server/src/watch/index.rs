//! The index from paths to watch ids, so that finding the watches an event may concern
//! costs O(depth of the event's path), not O(number of watches).
//!
//! Exact watches are keyed by their path; recursive ones by their subtree root. An
//! event on "/a/b" looks up exact["/a/b"] and recursive["/a/b"], ["/a"], ["/"].
//! The index only narrows: the caller still checks `WatchSpec::matches` (kinds).
//!
//! What it must not do: hold specs or queues (the hub owns those).

use std::collections::{HashMap, HashSet};

use super::self_and_ancestors;

/// Watch ids by the path they are registered at.
#[derive(Debug, Default)]
pub(super) struct WatchIndex {
    /// Non-recursive watches, by watched path.
    exact: HashMap<String, HashSet<u64>>,
    /// Recursive watches, by subtree root.
    recursive: HashMap<String, HashSet<u64>>,
}

impl WatchIndex {
    pub(super) fn insert(&mut self, id: u64, path: &str, recursive: bool) {
        self.map_mut(recursive)
            .entry(path.to_owned())
            .or_default()
            .insert(id);
    }

    pub(super) fn remove(&mut self, id: u64, path: &str, recursive: bool) {
        let map = self.map_mut(recursive);
        if let Some(ids) = map.get_mut(path) {
            ids.remove(&id);
            if ids.is_empty() {
                map.remove(path);
            }
        }
    }

    /// Appends to `out` the id of every watch whose path could cover an event on
    /// `path`. Each id appears at most once (a watch is indexed at one path).
    pub(super) fn candidates(&self, path: &str, out: &mut Vec<u64>) {
        if let Some(ids) = self.exact.get(path) {
            out.extend(ids.iter().copied());
        }
        if self.recursive.is_empty() {
            return;
        }
        for p in self_and_ancestors(path) {
            if let Some(ids) = self.recursive.get(p) {
                out.extend(ids.iter().copied());
            }
        }
    }

    fn map_mut(&mut self, recursive: bool) -> &mut HashMap<String, HashSet<u64>> {
        if recursive {
            &mut self.recursive
        } else {
            &mut self.exact
        }
    }
}
