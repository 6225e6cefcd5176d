//! Multi atomicity, Check, containers, TTL nodes and reaping.

use super::*;
use CreateMode::*;

#[test]
fn multi_applies_in_order_and_later_ops_see_earlier_ones() {
    let mut d = Driver::new();
    d.mk("/old", Persistent);
    let z = d.next_zxid();
    let (result, events) = d.ok(TxnOp::Multi(vec![
        MultiOp::Create(create_op("/a", "1", Persistent)),
        MultiOp::Set(set_op("/a", "2", 0)),
        check_op("/a", 1),
        MultiOp::Delete(DeleteOp {
            path: "/old".into(),
            version: -1,
        }),
        MultiOp::Create(create_op("/s-", "", PersistentSequential)),
    ]));
    let a = d.stat("/a");
    let TxnResult::Multi(results) = result else {
        panic!("{result:?}")
    };
    assert_eq!(results.len(), 5);
    assert!(matches!(&results[0], OpResult::Created { path, .. } if path == "/a"));
    assert_eq!(results[1], OpResult::Set { stat: a });
    assert_eq!(results[2], OpResult::Checked);
    assert_eq!(results[3], OpResult::Deleted);
    // Root cversion: /old (1), /a (2), delete /old (3) -> suffix 3.
    assert!(matches!(&results[4], OpResult::Created { path, .. } if path == "/s-0000000003"));
    assert_eq!((a.version, a.czxid, a.mzxid), (1, z, z));
    let kinds: Vec<(EventKind, &str)> = events.iter().map(|e| (e.kind, &*e.path)).collect();
    assert_eq!(
        kinds,
        [
            (EventKind::Created, "/a"),
            (EventKind::ChildrenChanged, "/"),
            (EventKind::DataChanged, "/a"),
            (EventKind::Deleted, "/old"),
            (EventKind::ChildrenChanged, "/"),
            (EventKind::Created, "/s-0000000003"),
            (EventKind::ChildrenChanged, "/"),
        ]
    );
    assert!(events.iter().all(|e| e.zxid == z));
    assert_eq!(d.stat("/").num_children, 2);
    check_invariants(&d.tree);
}

#[test]
fn failing_third_op_applies_nothing() {
    let mut d = Driver::new();
    d.mk("/keep", Persistent);
    let nodes = d.tree.walk("/", true);
    let digest = d.tree.digest();
    let last = d.tree.last_zxid();
    let e = d.err(TxnOp::Multi(vec![
        MultiOp::Create(create_op("/a", "", Persistent)),
        MultiOp::Set(set_op("/keep", "x", -1)),
        check_op("/keep", 0), // version is 1 after the set
        MultiOp::Create(create_op("/b", "", Persistent)),
    ]));
    assert_eq!(
        e,
        TreeError::MultiOp {
            index: 2,
            source: Box::new(TreeError::BadVersion {
                path: "/keep".into(),
                expected: 0,
                actual: 1
            })
        }
    );
    assert_eq!(d.tree.walk("/", true), nodes);
    d.tree.last_zxid = last;
    assert_eq!(d.tree.digest(), digest);
    assert!(d.tree.get("/a").is_none());
}

#[test]
fn multi_errors_name_the_op() {
    let mut d = Driver::new();
    d.mk("/a", Persistent);
    let err = |d: &mut Driver, ops: Vec<MultiOp>| d.err(TxnOp::Multi(ops));
    let e = err(&mut d, vec![check_op("/a", -1), check_op("/nope", -1)]);
    assert_eq!(
        e,
        TreeError::MultiOp {
            index: 1,
            source: Box::new(no_node("/nope"))
        }
    );
    let e = err(&mut d, vec![check_op("/a", 5)]);
    assert!(
        matches!(e, TreeError::MultiOp { index: 0, source } if matches!(*source, TreeError::BadVersion { .. }))
    );
    let e = err(
        &mut d,
        vec![
            MultiOp::Create(create_op("/a/b", "", Persistent)),
            MultiOp::Delete(DeleteOp {
                path: "/a".into(),
                version: -1,
            }),
        ],
    );
    assert!(
        matches!(e, TreeError::MultiOp { index: 1, source } if *source == TreeError::NotEmpty { path: "/a".into() })
    );
    let e = err(&mut d, vec![check_op("bad", -1)]);
    assert!(
        matches!(e, TreeError::MultiOp { index: 0, source } if matches!(*source, TreeError::BadPath { .. }))
    );
    assert_eq!(d.tree.node_count(), 2);
}

#[test]
fn empty_multi_is_ok() {
    let mut d = Driver::new();
    let (result, events) = d.ok(TxnOp::Multi(vec![]));
    assert_eq!(result, TxnResult::Multi(vec![]));
    assert!(events.is_empty());
}

#[test]
fn container_is_reapable_once_emptied() {
    let mut d = Driver::new();
    d.mk("/c", Container);
    assert!(d.tree.reapable(i64::MAX).is_empty(), "never had a child");
    assert_eq!(
        d.err(TxnOp::Reap { path: "/c".into() }),
        TreeError::NotReapable { path: "/c".into() }
    );
    d.mk("/c/x", Persistent);
    assert!(d.tree.reapable(0).is_empty(), "has a child");
    d.ok(delete("/c/x", -1));
    assert_eq!(d.tree.reapable(0), ["/c"]);
    let old = d.stat("/c");
    let z = d.next_zxid();
    let (result, events) = d.ok(TxnOp::Reap { path: "/c".into() });
    assert_eq!(result, TxnResult::Reaped);
    let root = d.stat("/");
    assert_eq!(
        events,
        vec![
            ev(z, EventKind::Deleted, "/c", old),
            ev(z, EventKind::ChildrenChanged, "/", root)
        ]
    );
    assert!(d.tree.reapable(0).is_empty());
    assert_eq!(
        d.err(TxnOp::Reap { path: "/c".into() }),
        TreeError::NotReapable { path: "/c".into() }
    );
    check_invariants(&d.tree);
}

#[test]
fn ttl_node_is_reapable_after_ttl_without_change() {
    let mut d = Driver::new();
    d.time_ms = 10_000;
    d.ok(create_ttl("/t", PersistentWithTtl, 500));
    let seq = match d.ok(create_ttl("/s-", PersistentSequentialWithTtl, 100)).0 {
        TxnResult::Created { path, .. } => path,
        other => panic!("{other:?}"),
    };
    assert_eq!(seq, "/s-0000000001");
    assert_eq!(d.tree.reapable(10_099), Vec::<String>::new());
    assert_eq!(d.tree.reapable(10_100), [seq.as_str()]);
    assert_eq!(d.tree.reapable(10_500), ["/s-0000000001", "/t"]);
    // A set resets the clock; a child blocks reaping.
    d.time_ms = 10_400;
    d.ok(set("/t", "x", -1));
    d.mk("/t/kid", Persistent);
    assert_eq!(d.tree.reapable(20_000), [seq.as_str()]);
    d.ok(delete("/t/kid", -1));
    d.time_ms = 10_899;
    assert_eq!(
        d.err(TxnOp::Reap { path: "/t".into() }),
        TreeError::NotReapable { path: "/t".into() }
    );
    d.time_ms = 10_900;
    assert_eq!(d.ok(TxnOp::Reap { path: "/t".into() }).0, TxnResult::Reaped);
    // Persistent nodes are never reaped; bad paths say so.
    d.mk("/p", Persistent);
    assert_eq!(
        d.err(TxnOp::Reap { path: "/p".into() }),
        TreeError::NotReapable { path: "/p".into() }
    );
    assert!(matches!(
        d.err(TxnOp::Reap { path: "p".into() }),
        TreeError::BadPath { .. }
    ));
    assert_eq!(d.tree.get(&seq).unwrap().stat.ephemeral_owner, 0);
    check_invariants(&d.tree);
}
