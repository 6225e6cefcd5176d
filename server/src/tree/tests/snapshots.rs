//! Snapshot round trips and rejection of bad bytes.

use super::*;
use CreateMode::*;

/// A tree with every kind of node, sessions with remembered outcomes, and data.
pub(super) fn rich_tree() -> Driver {
    let mut d = Driver::new();
    let s1 = d.open_as("alice");
    let s2 = d.open();
    d.mk("/app", Persistent);
    d.mk("/app/cfg", Persistent);
    d.ok(set("/app/cfg", "payload \u{e9}", -1));
    d.mk("/app/q-", PersistentSequential);
    d.mk("/c", Container);
    d.mk("/c/x", Persistent);
    d.ok(create_ttl("/t", PersistentWithTtl, 1_000));
    d.ok(create_ttl("/app/ts-", PersistentSequentialWithTtl, 50));
    d.run_as(s1, 1, create("/app/e1", "", Ephemeral))
        .result
        .unwrap();
    d.run_as(s2, 1, create("/app/e-", "x", EphemeralSequential))
        .result
        .unwrap();
    // Remembered failures, including a multi error.
    assert!(d
        .run_as(s1, 2, create("/nope/x", "", Persistent))
        .result
        .is_err());
    let multi = TxnOp::Multi(vec![check_op("/app", 9)]);
    assert!(d.run_as(s2, 2, multi).result.is_err());
    d.run_as(s2, 3, TxnOp::Multi(vec![check_op("/app", -1)]))
        .result
        .unwrap();
    d
}

fn assert_same(a: &DataTree, b: &DataTree) {
    assert_eq!(a.digest(), b.digest());
    assert_eq!(a.last_zxid(), b.last_zxid());
    assert_eq!(a.walk("/", true), b.walk("/", true));
    assert_eq!(
        a.sessions().collect::<Vec<_>>(),
        b.sessions().collect::<Vec<_>>()
    );
    assert_eq!(a.reap_candidates, b.reap_candidates);
    assert_eq!(a.reapable(i64::MAX), b.reapable(i64::MAX));
    for (path, _) in a.walk("/", true) {
        assert_eq!(a.nodes.get(&path), b.nodes.get(&path), "{path}");
    }
}

#[test]
fn round_trip_keeps_everything() {
    let mut d = rich_tree();
    let bytes = d.tree.encode_snapshot().unwrap();
    let mut back = DataTree::decode_snapshot(&bytes).unwrap();
    assert_same(&d.tree, &back);
    check_invariants(&back);
    // Deterministic bytes: re-encoding gives the same snapshot.
    assert_eq!(back.encode_snapshot().unwrap(), bytes);
    // Both continue identically, retries included.
    let s = d.tree.sessions().next().unwrap().0;
    let txns = [
        d.txn(s, 2, create("/nope/x", "", Persistent)),
        d.txn(0, 0, create("/app/q-", "", PersistentSequential)),
        d.txn(0, 0, close(s)),
        d.txn(0, 0, delete("/c/x", -1)),
        d.txn(0, 0, TxnOp::Reap { path: "/c".into() }),
    ];
    for txn in &txns {
        assert_eq!(d.tree.apply(txn), back.apply(txn));
    }
    assert_same(&d.tree, &back);
}

#[test]
fn round_trip_of_a_new_tree() {
    let tree = DataTree::new();
    let back = DataTree::decode_snapshot(&tree.encode_snapshot().unwrap()).unwrap();
    assert_same(&tree, &back);
}

#[test]
fn garbage_is_rejected() {
    let bytes = rich_tree().tree.encode_snapshot().unwrap();
    for cut in 0..bytes.len() {
        assert!(
            DataTree::decode_snapshot(&bytes[..cut]).is_err(),
            "cut {cut}"
        );
    }
    for i in 0..bytes.len() {
        for bit in [0x01u8, 0x80] {
            let mut bad = bytes.clone();
            bad[i] ^= bit;
            assert!(DataTree::decode_snapshot(&bad).is_err(), "flip at {i}");
        }
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(DataTree::decode_snapshot(&longer).is_err());
    let mut rng = 0x9e37_79b9_u64;
    for len in 0..300 {
        let junk: Vec<u8> = (0..len)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng as u8
            })
            .collect();
        assert!(DataTree::decode_snapshot(&junk).is_err());
    }
}

/// Re-seals `tree`'s snapshot so only the content checks can reject it.
fn decode_err(tree: &DataTree) -> String {
    match DataTree::decode_snapshot(&tree.encode_snapshot().unwrap()) {
        Ok(_) => panic!("decoded an inconsistent tree"),
        Err(SnapshotError::Malformed(reason)) => reason,
        Err(e) => panic!("not a decoding error: {e}"),
    }
}

/// A node the root does not reach would be left out of the snapshot: encoding fails
/// instead of writing a snapshot that loses it (it used to log and go on).
#[test]
fn unreachable_nodes_fail_encoding() {
    let mut tree = rich_tree().tree;
    let node = tree.nodes.get("/app/cfg").unwrap().clone();
    tree.nodes.insert("/lost/orphan", node);
    match tree.encode_snapshot() {
        Err(SnapshotError::Encode(reason)) => assert!(reason.contains("reachable"), "{reason}"),
        other => panic!("encoded a tree with an orphan: {other:?}"),
    }
    let mut tree = rich_tree().tree;
    tree.nodes.get_mut("/app").unwrap().stat.num_children = 0;
    assert!(
        tree.encode_snapshot().is_err(),
        "children their parent does not count"
    );
}

#[test]
fn inconsistent_content_with_good_crc_is_rejected() {
    let d = rich_tree();
    let mut tree = d.tree.clone();
    tree.nodes.get_mut("/app").unwrap().stat.num_children = 99;
    assert!(decode_err(&tree).contains("num_children"));

    let mut tree = d.tree.clone();
    let owner = tree.nodes.get("/app/e1").unwrap().stat.ephemeral_owner;
    tree.sessions.remove(&owner);
    assert!(decode_err(&tree).contains("not a session"));

    let mut tree = d.tree.clone();
    tree.nodes.get_mut("/app/cfg").unwrap().stat.ephemeral_owner = owner;
    assert!(decode_err(&tree).contains("owner"));

    let mut tree = d.tree.clone();
    let mut error = TreeError::NoNode { path: "/x".into() };
    for index in 0..10 {
        error = TreeError::MultiOp {
            index,
            source: Box::new(error),
        };
    }
    let session = tree.sessions.get_mut(&owner).unwrap();
    session.recent.push_back(Recent {
        request_id: 77,
        fingerprint: 1,
        result: Err(error),
    });
    assert!(decode_err(&tree).contains("nested"));

    let mut tree = d.tree.clone();
    let node = tree.nodes.get("/app/cfg").unwrap().clone();
    tree.nodes.insert("/app/e1/kid", node);
    tree.nodes.get_mut("/app/e1").unwrap().stat.num_children = 1;
    assert!(decode_err(&tree).contains("ephemeral"));
}

#[test]
fn a_clone_keeps_every_node_as_it_was_while_the_tree_changes() {
    // Nodes are shared between a tree and its clones (a snapshot is a clone) and
    // copied on write: no write through the tree may show in the clone.
    let mut d = Driver::new();
    d.mk("/a", CreateMode::Persistent);
    d.ok(create("/a/b", "one", CreateMode::Persistent));
    let clone = d.tree.clone();
    let digest = clone.digest();
    d.ok(set("/a/b", "two", -1));
    d.ok(create("/a/c", "", CreateMode::Persistent));
    d.ok(delete("/a/b", -1));
    assert_eq!(clone.get("/a/b").unwrap().data, "one");
    assert_eq!(clone.get("/a").unwrap().stat.num_children, 1);
    assert!(clone.get("/a/c").is_none());
    assert_eq!(clone.digest(), digest);
    assert_ne!(d.tree.digest(), digest);
}

/// Null data (ZooKeeper's) is kept apart from empty data by create, set, a Multi,
/// the digest and a snapshot; a tree without it is written in format 2, which
/// servers from before null data read.
#[test]
fn null_data_is_kept_apart_from_empty() {
    let null_create = |path: &str| {
        let mut op = create_op(path, "", Persistent);
        op.null_data = true;
        TxnOp::Create(op)
    };
    let mut d = Driver::new();
    d.mk("/empty", Persistent);
    let format = |tree: &DataTree| tree.encode_snapshot().unwrap()[b"CNCDSNAP".len()];
    assert_eq!(format(&d.tree), 2);
    assert_eq!(d.tree.snapshot_format(), 2);
    let mut twin = Driver::new();
    twin.mk("/empty", Persistent);
    d.ok(null_create("/null"));
    twin.mk("/null", Persistent);
    assert!(d.tree.get("/null").unwrap().null_data);
    assert!(!d.tree.get("/empty").unwrap().null_data);
    assert_eq!(d.stat("/null"), twin.stat("/null"));
    assert_ne!(d.tree.digest(), twin.tree.digest(), "null is not empty");

    let mut set_null = set_op("/empty", "", -1);
    set_null.null_data = true;
    d.ok(TxnOp::Multi(vec![MultiOp::Set(set_null)]));
    assert!(d.tree.get("/empty").unwrap().null_data);
    d.ok(set("/null", "x", -1));
    assert!(
        !d.tree.get("/null").unwrap().null_data,
        "bytes replace null"
    );

    let bytes = d.tree.encode_snapshot().unwrap();
    assert_eq!(bytes[b"CNCDSNAP".len()], 3);
    assert_eq!(d.tree.snapshot_format(), 3);
    let back = DataTree::decode_snapshot(&bytes).unwrap();
    assert_same(&d.tree, &back);
    check_invariants(&back);
    assert!(back.get("/empty").unwrap().null_data);
    assert!(!back.get("/null").unwrap().null_data);
    assert_eq!(back.encode_snapshot().unwrap(), bytes);
}
