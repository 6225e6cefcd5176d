//! Sessions, ephemerals and retry de-duplication.

use super::*;
use CreateMode::*;

#[test]
fn open_session_uses_zxid_as_id() {
    let mut d = Driver::new();
    let z = d.next_zxid();
    let (result, events) = d.ok(TxnOp::OpenSession { ttl_ms: 6_000 });
    assert_eq!(
        result,
        TxnResult::SessionOpened {
            session_id: z,
            ttl_ms: 6_000
        }
    );
    assert!(events.is_empty());
    let s = d.tree.session(z).unwrap();
    assert_eq!(s.ttl_ms, 6_000);
    assert!(s.ephemerals.is_empty() && s.recent.is_empty());
    for ttl_ms in [0, -1] {
        assert!(matches!(
            d.err(TxnOp::OpenSession { ttl_ms }),
            TreeError::BadArguments(_)
        ));
    }
    assert_eq!(d.tree.sessions().map(|(id, _)| id).collect::<Vec<_>>(), [z]);
}

#[test]
fn ephemeral_owned_by_session_and_deleted_on_close() {
    let mut d = Driver::new();
    let s = d.open();
    let other = d.open();
    d.mk("/d", Persistent);
    for p in ["/d/z", "/d/a", "/top"] {
        d.run_as(s, 0, create(p, "v", Ephemeral)).result.unwrap();
    }
    d.run_as(other, 0, create("/d/o", "", Ephemeral))
        .result
        .unwrap();
    assert_eq!(d.stat("/d/a").ephemeral_owner, s);
    let owned: Vec<&String> = d.tree.session(s).unwrap().ephemerals.iter().collect();
    assert_eq!(owned, ["/d/a", "/d/z", "/top"]);
    // Deleting one by hand removes it from the session.
    d.ok(delete("/top", -1));
    assert!(!d.tree.session(s).unwrap().ephemerals.contains("/top"));
    d.run_as(s, 0, create("/top", "v", Ephemeral))
        .result
        .unwrap();
    check_invariants(&d.tree);

    let old_a = d.stat("/d/a");
    let old_z = d.stat("/d/z");
    let old_top = d.stat("/top");
    let z = d.next_zxid();
    let (result, events) = d.ok(close(s));
    assert_eq!(
        result,
        TxnResult::SessionClosed {
            ephemerals: vec!["/d/a".into(), "/d/z".into(), "/top".into()]
        }
    );
    assert!(d.tree.session(s).is_none());
    assert!(d.tree.get("/d/a").is_none() && d.tree.get("/top").is_none());
    assert!(d.tree.get("/d/o").is_some());
    let dstat = d.stat("/d");
    assert_eq!((dstat.num_children, dstat.pzxid), (1, z));
    let kinds: Vec<(EventKind, &str)> = events.iter().map(|e| (e.kind, &*e.path)).collect();
    assert_eq!(
        kinds,
        [
            (EventKind::Deleted, "/d/a"),
            (EventKind::ChildrenChanged, "/d"),
            (EventKind::Deleted, "/d/z"),
            (EventKind::ChildrenChanged, "/d"),
            (EventKind::Deleted, "/top"),
            (EventKind::ChildrenChanged, "/"),
        ]
    );
    assert_eq!(events[0].stat, old_a);
    assert_eq!(events[0].prev_data, Bytes::from_static(b"v"));
    assert_eq!(events[2].stat, old_z);
    assert_eq!(events[4].stat, old_top);
    assert_eq!(events[5].stat, d.stat("/"));
    assert!(events.iter().all(|e| e.zxid == z));
    // Gone sessions cannot close twice or create ephemerals.
    assert_eq!(d.err(close(s)), TreeError::SessionExpired { session_id: s });
    let applied = d.run_as(s, 0, create("/again", "", Ephemeral));
    assert_eq!(
        applied.result,
        Err(TreeError::SessionExpired { session_id: s })
    );
    check_invariants(&d.tree);
}

#[test]
fn retry_returns_first_outcome_without_change() {
    let mut d = Driver::new();
    let s = d.open();
    d.mk("/q", Persistent);
    let first = d.run_as(s, 7, create("/q/n-", "", PersistentSequential));
    assert_eq!(first.events.len(), 2);
    let digest_nodes = d.tree.walk("/", true);
    let z = d.next_zxid();
    let retry = d.run_as(s, 7, create("/q/n-", "", PersistentSequential));
    assert_eq!(retry.result, first.result);
    assert!(retry.events.is_empty());
    assert_eq!(d.tree.walk("/", true), digest_nodes);
    assert_eq!(d.tree.last_zxid(), z);
    // A different request id is a new write.
    let second = d.run_as(s, 8, create("/q/n-", "", PersistentSequential));
    assert!(
        matches!(second.result, Ok(TxnResult::Created { ref path, .. }) if path == "/q/n-0000000001")
    );
    // Errors are remembered too: the retry gets the same error even though it would
    // now succeed.
    let failed = d.run_as(s, 9, create("/late/x", "", Persistent));
    assert_eq!(failed.result, Err(no_node("/late")));
    d.mk("/late", Persistent);
    let again = d.run_as(s, 9, create("/late/x", "", Persistent));
    assert_eq!(again.result, Err(no_node("/late")));
    assert!(d.tree.get("/late/x").is_none());
    // No request id or no session: never remembered.
    d.run_as(s, 0, create("/n0", "", Persistent))
        .result
        .unwrap();
    assert!(d
        .run_as(s, 0, create("/n0", "", Persistent))
        .result
        .is_err());
    d.run_as(0, 5, create("/n1", "", Persistent))
        .result
        .unwrap();
    assert!(d
        .run_as(0, 5, create("/n1", "", Persistent))
        .result
        .is_err());
    let recent: Vec<u64> = d
        .tree
        .session(s)
        .unwrap()
        .recent
        .iter()
        .map(|r| r.request_id)
        .collect();
    assert_eq!(recent, [7, 8, 9]);
}

#[test]
fn recent_keeps_only_the_newest() {
    let mut d = Driver::new();
    let s = d.open();
    let extra = 5;
    for i in 0..(RECENT_REQUESTS_MAX as u64 + extra) {
        d.run_as(s, i + 1, create(&format!("/n{i}"), "", Persistent))
            .result
            .unwrap();
    }
    let recent = &d.tree.session(s).unwrap().recent;
    assert_eq!(recent.len(), RECENT_REQUESTS_MAX);
    assert_eq!(recent.front().unwrap().request_id, extra + 1);
    // The forgotten request 1 is applied again (and fails: the node exists).
    let replay = d.run_as(s, 1, create("/n0", "", Persistent));
    assert_eq!(
        replay.result,
        Err(TreeError::NodeExists { path: "/n0".into() })
    );
}

#[test]
fn close_is_not_remembered_and_open_with_ids_works() {
    let mut d = Driver::new();
    let s = d.open();
    d.run_as(s, 3, create("/e", "", Ephemeral)).result.unwrap();
    let closed = d.run_as(s, 4, close(s));
    assert!(closed.result.is_ok());
    assert!(d.tree.session(s).is_none());
    let retry = d.run_as(s, 4, close(s));
    assert_eq!(
        retry.result,
        Err(TreeError::SessionExpired { session_id: s })
    );
}

#[test]
fn a_session_records_its_owner() {
    let mut d = Driver::new();
    let owned = d.open_as("spiffe://example.org/payments/app");
    let legacy = d.open();
    assert_eq!(
        d.tree.session(owned).unwrap().owner,
        "spiffe://example.org/payments/app"
    );
    assert_eq!(d.tree.session(legacy).unwrap().owner, "");
    // The owner is part of the replicated state.
    let mut other = Driver::new();
    other.open_as("spiffe://example.org/payments/other");
    other.open();
    assert_ne!(d.tree.digest(), other.tree.digest());
    // An owner longer than the bound is refused, and opens nothing.
    let before = d.tree.sessions().count();
    let op = TxnOp::OpenOwnedSession {
        ttl_ms: 1_000,
        owner: "x".repeat(SESSION_OWNER_BYTES_MAX + 1),
    };
    assert!(matches!(d.err(op), TreeError::BadArguments(_)));
    assert_eq!(d.tree.sessions().count(), before);
}

/// A second request under a remembered (session, request id) that is not the same
/// request gets an error, never the first request's outcome, and changes nothing;
/// the true retry still gets the first outcome.
#[test]
fn a_reused_request_id_with_another_request_is_refused() {
    let mut d = Driver::new();
    let s = d.open_as("alice");
    let first = d.run_as(s, 7, create("/mine", "v1", Persistent));
    assert!(first.result.is_ok());
    let nodes = d.tree.node_count();
    let recent = d.tree.session(s).unwrap().recent.clone();
    for other in [
        create("/theirs", "v1", Persistent),
        create("/mine", "v2", Persistent),
        delete("/mine", -1),
        set("/mine", "v1", -1),
    ] {
        let applied = d.run_as(s, 7, other);
        match &applied.result {
            Err(TreeError::BadArguments(m)) => {
                assert!(m.contains("used by a different request"), "{m}")
            }
            r => panic!("a different request under request id 7 got {r:?}"),
        }
        assert!(applied.events.is_empty());
        assert!(d.tree.get("/theirs").is_none());
        assert_eq!(d.tree.get("/mine").unwrap().data, "v1");
        assert_eq!(d.tree.node_count(), nodes);
        assert_eq!(d.tree.session(s).unwrap().recent, recent);
    }
    // The same op with another fence is another request too.
    let mut fenced = d.txn(s, 7, create("/mine", "v1", Persistent));
    fenced.fence = Some(crate::txn::Fence {
        key: "/concord/locks/l/0000000000".into(),
        token: 3,
    });
    assert!(matches!(
        d.tree.apply(&fenced).result,
        Err(TreeError::BadArguments(_))
    ));
    // The real retry still gets the first outcome, without applying again.
    let retry = d.run_as(s, 7, create("/mine", "v1", Persistent));
    assert_eq!(retry.result, first.result);
    assert!(retry.events.is_empty());
    assert_eq!(d.tree.session(s).unwrap().recent, recent);
}

/// An outcome remembered without a fingerprint (from a format 1 snapshot) is matched
/// by request id alone, as before.
#[test]
fn an_unknown_fingerprint_matches_by_request_id() {
    let mut d = Driver::new();
    let s = d.open();
    let first = d.run_as(s, 3, create("/a", "", Persistent));
    d.tree
        .sessions
        .get_mut(&s)
        .unwrap()
        .recent
        .iter_mut()
        .for_each(|r| r.fingerprint = 0);
    let retry = d.run_as(s, 3, create("/b", "", Persistent));
    assert_eq!(retry.result, first.result);
    assert!(d.tree.get("/b").is_none());
}
