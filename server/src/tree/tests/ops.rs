//! Create, set, delete: results, Stat fields, events and every error.

use super::*;
use CreateMode::*;

#[test]
fn new_tree_holds_only_the_root() {
    let tree = DataTree::new();
    assert_eq!(tree.node_count(), 1);
    assert_eq!(tree.last_zxid(), 0);
    let root = tree.get("/").unwrap();
    assert_eq!(root.stat, Stat::default());
    assert!(root.data.is_empty());
    assert_eq!(tree.children("/", "", 0), Some(vec![]));
    assert_eq!(tree.sessions().count(), 0);
}

#[test]
fn create_sets_stat_and_parent_and_events() {
    let mut d = Driver::new();
    d.time_ms = 5_000;
    let z = d.next_zxid();
    let (result, events) = d.ok(create("/a", "hello", Persistent));
    let stat = Stat {
        czxid: z,
        mzxid: z,
        pzxid: z,
        ctime_ms: 5_000,
        mtime_ms: 5_000,
        data_length: 5,
        ..Stat::default()
    };
    assert_eq!(
        result,
        TxnResult::Created {
            path: "/a".into(),
            stat
        }
    );
    let root = d.stat("/");
    assert_eq!((root.cversion, root.pzxid, root.num_children), (1, z, 1));
    assert_eq!((root.version, root.mzxid), (0, 0));
    let mut created = ev(z, EventKind::Created, "/a", stat);
    created.data = Bytes::from_static(b"hello");
    assert_eq!(
        events,
        vec![created, ev(z, EventKind::ChildrenChanged, "/", root)]
    );
    assert_eq!(d.tree.get("/a").unwrap().data, Bytes::from_static(b"hello"));
    assert_eq!(d.tree.last_zxid(), z);
}

#[test]
fn create_errors() {
    let mut d = Driver::new();
    d.mk("/a", Persistent);
    let s = d.open();
    d.run_as(s, 0, create("/eph", "", Ephemeral))
        .result
        .unwrap();
    let before = d.tree.digest();

    assert_eq!(
        d.err(create("/a", "", Persistent)),
        TreeError::NodeExists { path: "/a".into() }
    );
    assert_eq!(
        d.err(create("/", "", Persistent)),
        TreeError::NodeExists { path: "/".into() }
    );
    assert_eq!(d.err(create("/x/y", "", Persistent)), no_node("/x"));
    assert_eq!(
        d.err(create("/x/y", "", PersistentSequential)),
        no_node("/x")
    );
    assert_eq!(
        d.err(create("/eph/c", "", Persistent)),
        TreeError::NoChildrenForEphemerals {
            path: "/eph".into()
        }
    );
    for bad in ["a", "/a/", "/a//b", "/a/.", "/a/..", "/a\u{1}", ""] {
        assert!(
            matches!(d.err(create(bad, "", Persistent)), TreeError::BadPath { path, .. } if path == bad),
            "{bad:?}"
        );
    }
    // Ephemeral without a live session.
    assert_eq!(
        d.err(create("/e2", "", Ephemeral)),
        TreeError::SessionExpired { session_id: 0 }
    );
    let applied = d.run_as(999, 0, create("/e2", "", EphemeralSequential));
    assert_eq!(
        applied.result,
        Err(TreeError::SessionExpired { session_id: 999 })
    );
    // TTL rules.
    assert!(matches!(
        d.err(create_ttl("/t", PersistentWithTtl, 0)),
        TreeError::BadArguments(_)
    ));
    assert!(matches!(
        d.err(create_ttl("/t", PersistentSequentialWithTtl, -5)),
        TreeError::BadArguments(_)
    ));
    assert!(matches!(
        d.err(create_ttl("/t", Persistent, 100)),
        TreeError::BadArguments(_)
    ));
    // Only last_zxid moved.
    d.tree.last_zxid = make_zxid(1, 3);
    assert_eq!(d.tree.digest(), before);
}

#[test]
fn sequential_names_use_parent_cversion() {
    let mut d = Driver::new();
    d.mk("/q", Persistent);
    assert_eq!(d.mk("/q/n-", PersistentSequential), "/q/n-0000000000");
    assert_eq!(d.mk("/q/n-", PersistentSequential), "/q/n-0000000001");
    d.mk("/q/plain", Persistent); // cversion 3 now
    assert_eq!(d.mk("/q/", PersistentSequential), "/q/0000000003");
    d.ok(delete("/q/plain", -1)); // deletes bump cversion too
    let s = d.open();
    let applied = d.run_as(s, 0, create("/q/e-", "", EphemeralSequential));
    match applied.result.unwrap() {
        TxnResult::Created { path, stat } => {
            assert_eq!(path, "/q/e-0000000005");
            assert_eq!(stat.ephemeral_owner, s);
        }
        other => panic!("{other:?}"),
    }
    // Sequential under the root, and a counter beyond 10 digits keeps growing.
    assert_eq!(d.mk("/", PersistentSequential), "/0000000001");
    d.tree.nodes.get_mut("/q").unwrap().stat.cversion = 12_345_678_901;
    assert_eq!(d.mk("/q/big", PersistentSequential), "/q/big12345678901");
    assert_eq!(d.stat("/q").cversion, 12_345_678_902);
    check_invariants(&d.tree);
}

#[test]
fn set_updates_stat_and_emits_data_changed() {
    let mut d = Driver::new();
    let z0 = d.next_zxid();
    d.ok(create("/a", "one", Persistent));
    d.time_ms = 7_000;
    let z = d.next_zxid();
    let (result, events) = d.ok(set("/a", "second", 0));
    let stat = d.stat("/a");
    assert_eq!(result, TxnResult::Set { stat });
    assert_eq!(
        (stat.version, stat.mzxid, stat.czxid, stat.pzxid),
        (1, z, z0, z0)
    );
    assert_eq!(
        (stat.mtime_ms, stat.ctime_ms, stat.data_length),
        (7_000, 1_000, 6)
    );
    let mut changed = ev(z, EventKind::DataChanged, "/a", stat);
    changed.data = Bytes::from_static(b"second");
    changed.prev_data = Bytes::from_static(b"one");
    assert_eq!(events, vec![changed]);
    // -1 matches any version; the parent is untouched.
    d.ok(set("/a", "", -1));
    assert_eq!(d.stat("/a").version, 2);
    assert_eq!(d.stat("/").cversion, 1);
}

#[test]
fn set_errors() {
    let mut d = Driver::new();
    d.mk("/a", Persistent);
    assert_eq!(d.err(set("/b", "", -1)), no_node("/b"));
    assert_eq!(
        d.err(set("/a", "", 3)),
        TreeError::BadVersion {
            path: "/a".into(),
            expected: 3,
            actual: 0
        }
    );
    assert!(matches!(d.err(set("a", "", -1)), TreeError::BadPath { .. }));
    assert_eq!(d.tree.get("/a").unwrap().stat.version, 0);
}

#[test]
fn delete_updates_parent_and_emits_events() {
    let mut d = Driver::new();
    d.ok(create("/a", "", Persistent));
    d.ok(create("/a/b", "bye", Persistent));
    let old = d.stat("/a/b");
    let z = d.next_zxid();
    let (result, events) = d.ok(delete("/a/b", 0));
    assert_eq!(result, TxnResult::Deleted);
    assert!(d.tree.get("/a/b").is_none());
    let parent = d.stat("/a");
    assert_eq!(
        (parent.cversion, parent.pzxid, parent.num_children),
        (2, z, 0)
    );
    let mut deleted = ev(z, EventKind::Deleted, "/a/b", old);
    deleted.prev_data = Bytes::from_static(b"bye");
    assert_eq!(
        events,
        vec![deleted, ev(z, EventKind::ChildrenChanged, "/a", parent)]
    );
    check_invariants(&d.tree);
}

#[test]
fn delete_errors() {
    let mut d = Driver::new();
    d.mk("/a", Persistent);
    d.mk("/a/b", Persistent);
    assert_eq!(d.err(delete("/x", -1)), no_node("/x"));
    assert_eq!(
        d.err(delete("/a", 1)),
        TreeError::BadVersion {
            path: "/a".into(),
            expected: 1,
            actual: 0
        }
    );
    assert_eq!(
        d.err(delete("/a", -1)),
        TreeError::NotEmpty { path: "/a".into() }
    );
    match d.err(delete("/", -1)) {
        TreeError::BadPath { path, reason } => {
            assert_eq!(path, "/");
            assert!(reason.contains("root"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        d.err(delete("/a/", -1)),
        TreeError::BadPath { .. }
    ));
    assert_eq!(d.tree.node_count(), 3);
}

#[test]
fn stale_zxid_is_refused_and_changes_nothing() {
    let mut d = Driver::new();
    d.mk("/a", Persistent);
    let last = d.tree.last_zxid();
    let digest = d.tree.digest();
    for zxid in [0, last] {
        let txn = Txn {
            zxid,
            time_ms: 0,
            session_id: 0,
            request_id: 0,
            fence: None,
            op: create("/b", "", Persistent),
        };
        let applied = d.tree.apply(&txn);
        assert!(matches!(applied.result, Err(TreeError::BadArguments(_))));
        assert!(applied.events.is_empty());
        assert_eq!(d.tree.last_zxid(), last);
        assert_eq!(d.tree.digest(), digest);
    }
}

#[test]
fn reads_children_pages_and_walk() {
    let mut d = Driver::new();
    for p in ["/b", "/a", "/c", "/a/y", "/a/x", "/a/x/deep"] {
        d.mk(p, Persistent);
    }
    let names = |v: Vec<(String, Stat)>| v.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
    assert_eq!(names(d.tree.children("/", "", 0).unwrap()), ["a", "b", "c"]);
    assert_eq!(names(d.tree.children("/", "a", 0).unwrap()), ["b", "c"]);
    assert_eq!(names(d.tree.children("/", "", 2).unwrap()), ["a", "b"]);
    assert_eq!(names(d.tree.children("/", "b", 1).unwrap()), ["c"]);
    assert_eq!(
        names(d.tree.children("/", "c", 0).unwrap()),
        Vec::<String>::new()
    );
    let kids = d.tree.children("/a", "", 0).unwrap();
    assert_eq!(kids[0], ("x".to_string(), d.stat("/a/x")));
    assert_eq!(d.tree.children("/nope", "", 0), None);

    let walked: Vec<String> = d.tree.walk("/", true).into_iter().map(|(p, _)| p).collect();
    assert_eq!(walked, ["/", "/a", "/a/x", "/a/x/deep", "/a/y", "/b", "/c"]);
    let one = d.tree.walk("/a", false);
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].1.stat, d.stat("/a"));
    assert!(d.tree.walk("/nope", true).is_empty());
}
