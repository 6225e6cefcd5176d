use super::*;
use crate::types::Stat;

fn node(path: &str, data: &str, mzxid: u64) -> Node {
    Node {
        path: path.to_owned(),
        data: data.as_bytes().to_vec(),
        stat: Stat {
            czxid: 1,
            mzxid,
            ..Stat::default()
        },
    }
}

fn ev(zxid: u64, kind: EventKind, path: &str, data: &str) -> WatchMessage {
    WatchMessage::Event(Event {
        zxid,
        kind,
        path: path.to_owned(),
        data: data.as_bytes().to_vec(),
        prev_data: Vec::new(),
        stat: Stat {
            czxid: 1,
            mzxid: zxid,
            ..Stat::default()
        },
    })
}

fn snapshot(state: &mut CacheState, nodes: &[Node], zxid: u64) -> Vec<CacheEvent> {
    state.begin_snapshot();
    for n in nodes {
        assert!(state
            .on_message(WatchMessage::SnapshotNode(n.clone()))
            .is_empty());
    }
    state.on_message(WatchMessage::SnapshotDone { zxid })
}

fn paths(state: &CacheState) -> Vec<String> {
    state.nodes().map(|n| n.path.clone()).collect()
}

#[test]
fn scopes_hold_what_they_name() {
    let tree = Scope::Tree("/a".into());
    assert!(tree.contains("/a") && tree.contains("/a/b/c"));
    assert!(!tree.contains("/ab") && !tree.contains("/") && !tree.contains("/b"));
    let children = Scope::Children("/a".into());
    assert!(children.contains("/a/b"));
    assert!(!children.contains("/a") && !children.contains("/a/b/c") && !children.contains("/ab"));
    let root_children = Scope::Children("/".into());
    assert!(
        root_children.contains("/a")
            && !root_children.contains("/")
            && !root_children.contains("/a/b")
    );
    let everything = Scope::Tree("/".into());
    assert!(everything.contains("/") && everything.contains("/x/y"));
    let one = Scope::Node("/a".into());
    assert!(one.contains("/a") && !one.contains("/a/b"));
    assert!(!one.recursive() && children.recursive() && tree.recursive());
}

#[test]
fn parent_of_paths() {
    assert_eq!(parent("/"), None);
    assert_eq!(parent("/a"), Some("/"));
    assert_eq!(parent("/a/b"), Some("/a"));
}

#[test]
fn first_snapshot_creates_every_node_then_initialized_once() {
    let mut state = CacheState::new(Scope::Tree("/a".into()));
    let nodes = [
        node("/a", "1", 2),
        node("/a/b", "2", 3),
        node("/x", "no", 4),
    ];
    let events = snapshot(&mut state, &nodes, 9);
    assert_eq!(
        events,
        vec![
            CacheEvent::Created(nodes[0].clone()),
            CacheEvent::Created(nodes[1].clone()),
            CacheEvent::Initialized,
        ]
    );
    assert_eq!(state.zxid(), 9);
    assert!(state.is_initialized());
    // A rebuild with the same contents changes nothing and is not Initialized again.
    assert!(snapshot(&mut state, &nodes, 12).is_empty());
    assert_eq!(state.zxid(), 12);
}

#[test]
fn events_apply_in_order() {
    let mut state = CacheState::new(Scope::Tree("/a".into()));
    snapshot(&mut state, &[], 5);
    let created = state.on_message(ev(6, EventKind::Created, "/a", "x"));
    assert!(matches!(&created[..], [CacheEvent::Created(n)] if n.data == b"x"));
    let changed = state.on_message(ev(7, EventKind::DataChanged, "/a", "y"));
    assert!(matches!(&changed[..],
        [CacheEvent::Changed { old, node }] if old.data == b"x" && node.data == b"y"));
    // Outside the scope: nothing, but the zxid moves on.
    assert!(state
        .on_message(ev(8, EventKind::Created, "/b", ""))
        .is_empty());
    assert_eq!(state.zxid(), 8);
    let deleted = state.on_message(ev(9, EventKind::Deleted, "/a", ""));
    assert!(matches!(&deleted[..], [CacheEvent::Deleted(n)] if n.data == b"y"));
    assert!(state.get("/a").is_none());
    // A delete of something not cached changes nothing.
    assert!(state
        .on_message(ev(10, EventKind::Deleted, "/a", ""))
        .is_empty());
    assert!(state
        .on_message(WatchMessage::Progress { zxid: 20 })
        .is_empty());
    assert_eq!(state.zxid(), 20);
}

#[test]
fn children_changed_updates_the_stat_silently() {
    let mut state = CacheState::new(Scope::Node("/a".into()));
    snapshot(&mut state, &[node("/a", "v", 2)], 5);
    let WatchMessage::Event(mut event) = ev(6, EventKind::ChildrenChanged, "/a", "") else {
        unreachable!()
    };
    event.stat.num_children = 3;
    event.stat.mzxid = 2;
    assert!(state.on_message(WatchMessage::Event(event)).is_empty());
    let cached = state.get("/a").cloned().unwrap_or_default();
    assert_eq!(cached.stat.num_children, 3);
    assert_eq!(cached.data, b"v");
}

#[test]
fn children_scope_ignores_the_parent_and_grandchildren() {
    let mut state = CacheState::new(Scope::Children("/s".into()));
    let events = snapshot(
        &mut state,
        &[
            node("/s", "", 1),
            node("/s/a", "1", 2),
            node("/s/a/deep", "", 3),
        ],
        4,
    );
    assert_eq!(events.len(), 2);
    assert_eq!(paths(&state), vec!["/s/a"]);
    assert!(state
        .on_message(ev(5, EventKind::Created, "/s/a/x", ""))
        .is_empty());
    assert_eq!(
        state
            .on_message(ev(6, EventKind::Created, "/s/b", ""))
            .len(),
        1
    );
}

#[test]
fn a_rebuild_emits_only_the_differences() {
    let mut state = CacheState::new(Scope::Tree("/".into()));
    let before = [
        node("/", "", 1),
        node("/a", "1", 2),
        node("/a/b", "", 3),
        node("/c", "same", 4),
        node("/d", "old", 5),
    ];
    snapshot(&mut state, &before, 5);
    let mut root = node("/", "", 1);
    root.stat.num_children = 7; // children bookkeeping only: silent
    let after = [
        root,
        node("/c", "same", 4),
        node("/d", "new", 8),
        node("/e", "", 9),
    ];
    let events = snapshot(&mut state, &after, 9);
    assert_eq!(
        events,
        vec![
            CacheEvent::Deleted(before[2].clone()),
            CacheEvent::Deleted(before[1].clone()),
            CacheEvent::Changed {
                old: before[4].clone(),
                node: after[2].clone()
            },
            CacheEvent::Created(after[3].clone()),
        ]
    );
    assert_eq!(paths(&state), vec!["/", "/c", "/d", "/e"]);
    assert_eq!(state.get("/").map(|n| n.stat.num_children), Some(7));
}

#[test]
fn progress_during_a_rebuild_does_not_advance_the_zxid() {
    let mut state = CacheState::new(Scope::Tree("/a".into()));
    snapshot(&mut state, &[node("/a", "", 1)], 3);
    state.begin_snapshot();
    state.on_message(WatchMessage::Progress { zxid: 50 });
    assert_eq!(state.zxid(), 3, "the old contents do not reflect zxid 50");
    state.on_message(WatchMessage::SnapshotDone { zxid: 60 });
    state.on_message(WatchMessage::Progress { zxid: 70 });
    assert_eq!(state.zxid(), 70);
}

#[test]
fn a_broken_snapshot_is_forgotten_by_the_next() {
    let mut state = CacheState::new(Scope::Tree("/a".into()));
    state.begin_snapshot();
    state.on_message(WatchMessage::SnapshotNode(node("/a/stale", "", 1)));
    let events = snapshot(&mut state, &[node("/a", "", 1)], 3);
    assert_eq!(events.len(), 2);
    assert_eq!(paths(&state), vec!["/a"]);
}

/// Random events applied to a cache equal a model map; a rebuild from the model's
/// contents at any point then emits nothing.
#[test]
fn random_events_match_a_model() {
    let mut seed: u64 = 0x5eed;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut state = CacheState::new(Scope::Tree("/r".into()));
    snapshot(&mut state, &[], 1);
    let mut model: BTreeMap<String, Node> = BTreeMap::new();
    for zxid in 2..2_000u64 {
        let path = format!("/r/{}", next(20));
        let data = format!("{}", next(5));
        let msg = if model.contains_key(&path) {
            if next(2) == 0 {
                model.remove(&path);
                ev(zxid, EventKind::Deleted, &path, "")
            } else {
                let n = model.entry(path.clone()).or_default();
                n.data = data.clone().into_bytes();
                n.stat.mzxid = zxid;
                ev(zxid, EventKind::DataChanged, &path, &data)
            }
        } else {
            model.insert(path.clone(), node(&path, &data, zxid));
            ev(zxid, EventKind::Created, &path, &data)
        };
        assert_eq!(state.on_message(msg).len(), 1);
        let cached: BTreeMap<String, Vec<u8>> = state
            .nodes()
            .map(|n| (n.path.clone(), n.data.clone()))
            .collect();
        let wanted: BTreeMap<String, Vec<u8>> = model
            .iter()
            .map(|(p, n)| (p.clone(), n.data.clone()))
            .collect();
        assert_eq!(cached, wanted, "after zxid {zxid}");
    }
    let contents: Vec<Node> = state.nodes().cloned().collect();
    assert!(snapshot(&mut state, &contents, 3_000).is_empty());
}
