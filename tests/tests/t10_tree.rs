//! The tree API against a real server: every node type, every error case, Stat
//! fields, Multi atomicity, Children pagination, read options.

#![allow(clippy::unwrap_used)]

use concord_proto::v1 as pb;
use concord_tests::{code_of, delete_req, exists_req, get_req, Server, ServerOptions};

fn create(path: &str, data: &str, mode: pb::CreateMode) -> pb::CreateRequest {
    pb::CreateRequest {
        path: path.into(),
        data: data.as_bytes().to_vec().into(),
        mode: mode.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn t10_create_get_set_delete_with_stats() {
    let server = Server::start(ServerOptions::default());
    let mut tree = server.tree().await;
    let created = tree
        .create(create("/app", "v0", pb::CreateMode::Persistent))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(created.path, "/app");
    let zxid = created.header.unwrap().zxid;
    let stat = created.stat.unwrap();
    assert_eq!((stat.czxid, stat.mzxid, stat.pzxid), (zxid, zxid, zxid));
    assert_eq!(
        (stat.version, stat.data_length, stat.num_children),
        (0, 2, 0)
    );

    let set = tree
        .set(pb::SetRequest {
            path: "/app".into(),
            data: b"v1".to_vec().into(),
            version: 0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let s = set.stat.unwrap();
    assert_eq!(s.version, 1);
    assert_eq!(s.czxid, zxid);
    assert!(s.mzxid > zxid);

    let got = tree
        .get(pb::GetRequest {
            path: "/app".into(),
            min_zxid: set.header.unwrap().zxid,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(&got.data[..], b"v1");

    // Stale version, then any version.
    let err = tree.delete(delete_req("/app", 0)).await.unwrap_err();
    assert_eq!(code_of(&err), "BAD_VERSION");
    tree.delete(delete_req("/app", -1)).await.unwrap();
    let exists = tree
        .exists(pb::ExistsRequest {
            path: "/app".into(),
            linearizable: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!exists.exists && exists.stat.is_none());
}

#[tokio::test]
async fn t10_error_cases_change_nothing() {
    let server = Server::start(ServerOptions::default());
    let mut tree = server.tree().await;
    tree.create(create("/p", "", pb::CreateMode::Persistent))
        .await
        .unwrap();
    tree.create(create("/p/c", "", pb::CreateMode::Persistent))
        .await
        .unwrap();
    let before = tree
        .get(get_req("/p"))
        .await
        .unwrap()
        .into_inner()
        .stat
        .unwrap();

    let cases: Vec<(pb::CreateRequest, &str)> = vec![
        (create("/p", "", pb::CreateMode::Persistent), "NODE_EXISTS"),
        (
            create("/missing/x", "", pb::CreateMode::Persistent),
            "NO_NODE",
        ),
        (
            create("relative", "", pb::CreateMode::Persistent),
            "BAD_PATH",
        ),
        (create("/p/", "", pb::CreateMode::Persistent), "BAD_PATH"),
        (create("/p//c", "", pb::CreateMode::Persistent), "BAD_PATH"),
        (create("/p/./c", "", pb::CreateMode::Persistent), "BAD_PATH"),
        (
            create("/p/../c", "", pb::CreateMode::Persistent),
            "BAD_PATH",
        ),
        (
            create("/p/\u{1}", "", pb::CreateMode::Persistent),
            "BAD_PATH",
        ),
        (
            create("/p/e", "", pb::CreateMode::Ephemeral),
            "BAD_ARGUMENTS",
        ),
    ];
    for (req, want) in cases {
        let path = req.path.clone();
        let err = tree.create(req).await.unwrap_err();
        assert_eq!(code_of(&err), want, "create {path:?}: {err:?}");
    }
    let big = pb::CreateRequest {
        path: "/p/big".into(),
        data: vec![0u8; (1 << 20) + 1].into(),
        ..Default::default()
    };
    assert_eq!(
        code_of(&tree.create(big).await.unwrap_err()),
        "DATA_TOO_LARGE"
    );
    let err = tree.delete(delete_req("/p", -1)).await.unwrap_err();
    assert_eq!(code_of(&err), "NOT_EMPTY");
    let err = tree.delete(delete_req("/", -1)).await.unwrap_err();
    assert_eq!(code_of(&err), "BAD_PATH");
    let err = tree.get(get_req("/nope")).await.unwrap_err();
    assert_eq!(code_of(&err), "NO_NODE");
    let err = tree
        .set(pb::SetRequest {
            path: "/p".into(),
            version: 7,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(code_of(&err), "BAD_VERSION");

    let after = tree
        .get(get_req("/p"))
        .await
        .unwrap()
        .into_inner()
        .stat
        .unwrap();
    assert_eq!(before.num_children, after.num_children);
    assert_eq!(before.version, after.version);
    assert_eq!(before.cversion, after.cversion);
}

#[tokio::test]
async fn t10_sequential_and_ephemeral_nodes() {
    let server = Server::start(ServerOptions::default());
    let mut tree = server.tree().await;
    let mut sessions = server.session().await;
    tree.create(create("/q", "", pb::CreateMode::Persistent))
        .await
        .unwrap();
    let mut names = Vec::new();
    for _ in 0..3 {
        let r = tree
            .create(create("/q/job-", "", pb::CreateMode::PersistentSequential))
            .await
            .unwrap()
            .into_inner();
        names.push(r.path);
    }
    assert_eq!(
        names,
        [
            "/q/job-0000000000",
            "/q/job-0000000001",
            "/q/job-0000000002"
        ]
    );
    let sid = sessions
        .open(pb::OpenSessionRequest { ttl_ms: 1000 })
        .await
        .unwrap()
        .into_inner()
        .session_id;
    let mut eph = create("/q/lock-", "", pb::CreateMode::EphemeralSequential);
    eph.session_id = sid;
    let e = tree.create(eph).await.unwrap().into_inner();
    assert_eq!(e.path, "/q/lock-0000000003");
    assert_eq!(e.stat.unwrap().ephemeral_owner, sid);
    let mut child = create("/q/lock-0000000003/x", "", pb::CreateMode::Persistent);
    child.session_id = sid;
    let err = tree.create(child).await.unwrap_err();
    assert_eq!(code_of(&err), "NO_CHILDREN_FOR_EPHEMERALS");
    let mut dead = create("/q/ghost", "", pb::CreateMode::Ephemeral);
    dead.session_id = 12345;
    assert_eq!(
        code_of(&tree.create(dead).await.unwrap_err()),
        "SESSION_EXPIRED"
    );
}

#[tokio::test]
async fn t10_multi_is_all_or_nothing() {
    let server = Server::start(ServerOptions::default());
    let mut tree = server.tree().await;
    tree.create(create("/m", "", pb::CreateMode::Persistent))
        .await
        .unwrap();
    let op = |op: pb::op::Op| pb::Op { op: Some(op) };
    let failing = pb::MultiRequest {
        ops: vec![
            op(pb::op::Op::Create(pb::CreateOp {
                path: "/m/a".into(),
                ..Default::default()
            })),
            op(pb::op::Op::Check(pb::CheckOp {
                path: "/m".into(),
                version: 5,
            })),
        ],
        ..Default::default()
    };
    let err = tree.multi(failing).await.unwrap_err();
    assert_eq!(code_of(&err), "BAD_VERSION");
    assert!(err.message().contains("op 1"), "{}", err.message());
    let exists = tree.exists(exists_req("/m/a")).await.unwrap().into_inner();
    assert!(!exists.exists, "a failed multi applied its first op");

    let ok = pb::MultiRequest {
        ops: vec![
            op(pb::op::Op::Create(pb::CreateOp {
                path: "/m/a".into(),
                ..Default::default()
            })),
            op(pb::op::Op::Set(pb::SetOp {
                path: "/m/a".into(),
                data: b"x".to_vec().into(),
                version: 0,
            })),
            op(pb::op::Op::Check(pb::CheckOp {
                path: "/m".into(),
                version: 0,
            })),
        ],
        ..Default::default()
    };
    let r = tree.multi(ok).await.unwrap().into_inner();
    assert_eq!(r.results.len(), 3);
    let got = tree.get(get_req("/m/a")).await.unwrap().into_inner();
    assert_eq!((&got.data[..], got.stat.unwrap().version), (&b"x"[..], 1));
}

#[tokio::test]
async fn t10_children_sorted_and_paginated() {
    let server = Server::start(ServerOptions::default());
    let mut tree = server.tree().await;
    tree.create(create("/c", "", pb::CreateMode::Persistent))
        .await
        .unwrap();
    for name in ["d", "a", "c", "b", "e"] {
        tree.create(create(
            &format!("/c/{name}"),
            name,
            pb::CreateMode::Persistent,
        ))
        .await
        .unwrap();
    }
    let mut seen = Vec::new();
    let mut token = String::new();
    for _ in 0..10 {
        let page = tree
            .children(pb::ChildrenRequest {
                path: "/c".into(),
                page_size: 2,
                page_token: token.clone(),
                with_stats: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(page.children.len() <= 2);
        for c in &page.children {
            assert_eq!(c.stat.unwrap().data_length, 1);
            seen.push(c.name.clone());
        }
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(seen, ["a", "b", "c", "d", "e"]);
}

#[tokio::test]
async fn t10_container_and_ttl_nodes_are_reaped() {
    use std::time::Duration;
    let server = Server::start(ServerOptions::default());
    let mut tree = server.tree().await;
    tree.create(create("/ct", "", pb::CreateMode::Container))
        .await
        .unwrap();
    tree.create(create("/ct/a", "", pb::CreateMode::Persistent))
        .await
        .unwrap();
    let mut ttl = create("/ttl", "", pb::CreateMode::PersistentWithTtl);
    ttl.ttl_ms = 200;
    tree.create(ttl).await.unwrap();
    let mut no_ttl = create("/ttl2", "", pb::CreateMode::PersistentWithTtl);
    no_ttl.ttl_ms = 0;
    assert_eq!(
        code_of(&tree.create(no_ttl).await.unwrap_err()),
        "BAD_ARGUMENTS"
    );

    // A container with a child stays; once the child goes, the server reaps it.
    assert!(server.exists("/ct").await);
    tree.delete(delete_req("/ct/a", -1)).await.unwrap();
    concord_tests::eventually(
        "the empty container is reaped",
        Duration::from_secs(5),
        || async { (!server.exists("/ct").await).then_some(()) },
    )
    .await;
    concord_tests::eventually("the TTL node is reaped", Duration::from_secs(5), || async {
        (!server.exists("/ttl").await).then_some(())
    })
    .await;
}

#[tokio::test]
async fn t10_a_retried_write_is_applied_once() {
    let server = Server::start(ServerOptions::default());
    let mut tree = server.tree().await;
    let sid = server
        .session()
        .await
        .open(pb::OpenSessionRequest { ttl_ms: 1000 })
        .await
        .unwrap()
        .into_inner()
        .session_id;
    tree.create(create("/r", "", pb::CreateMode::Persistent))
        .await
        .unwrap();
    let mut req = create("/r/job-", "", pb::CreateMode::PersistentSequential);
    req.session_id = sid;
    req.request_id = 7;
    let first = tree.create(req.clone()).await.unwrap().into_inner();
    let retry = tree.create(req).await.unwrap().into_inner();
    assert_eq!(first.path, retry.path);
    // The retry is answered with the write's own zxid, as the first answer was (not
    // the zxid at which the retry found it done).
    let zxid = |h: Option<pb::ResponseHeader>| h.unwrap().zxid;
    assert_eq!(zxid(retry.header), zxid(first.header));
    let set = pb::SetRequest {
        path: "/r".into(),
        data: b"x".to_vec().into(),
        version: -1,
        session_id: sid,
        request_id: 8,
        ..Default::default()
    };
    let first = tree.set(set.clone()).await.unwrap().into_inner();
    let retry = tree.set(set).await.unwrap().into_inner();
    assert_eq!(retry.stat, first.stat);
    assert_eq!(zxid(retry.header), zxid(first.header));
    let children = tree
        .children(pb::ChildrenRequest {
            path: "/r".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .children;
    assert_eq!(children.len(), 1, "the retry created a second node");
}

#[tokio::test]
async fn t10_a_read_waits_for_min_zxid() {
    let server = Server::start(ServerOptions::default());
    let mut tree = server.tree().await;
    let z = tree
        .create(create("/w", "a", pb::CreateMode::Persistent))
        .await
        .unwrap()
        .into_inner()
        .header
        .unwrap()
        .zxid;
    // A read asking for the next zxid waits until a write makes it exist.
    let mut reader = server.tree().await;
    let read = tokio::spawn(async move {
        reader
            .get(pb::GetRequest {
                path: "/w".into(),
                min_zxid: z + 1,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
    });
    let set = tree
        .set(pb::SetRequest {
            path: "/w".into(),
            data: b"b".to_vec().into(),
            version: -1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(set.header.unwrap().zxid, z + 1);
    let got = tokio::time::timeout(std::time::Duration::from_secs(10), read)
        .await
        .unwrap()
        .unwrap();
    assert!(got.header.unwrap().zxid > z);
    assert_eq!(&got.data[..], b"b", "the read did not wait for min_zxid");
}
