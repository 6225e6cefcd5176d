//! Watches against a real server, live: one-shot and persistent watches, what a node
//! watch and a subtree watch see (and do not see), kind filters, data, progress,
//! ephemerals deleted by a session's end, and the requests a server must refuse.
//! Resume, snapshots and slow consumers are in t31.

#![allow(clippy::unwrap_used)]

mod watch_util;

use concord_proto::v1 as pb;
use concord_tests::{code_of, Server, ServerOptions};
use pb::watch_response::Msg;
use pb::EventKind as K;
use watch_util::*;

#[tokio::test]
async fn t30_once_fires_exactly_once_then_ends() {
    let server = Server::start(ServerOptions::default());
    let mut w = Writer::new(&server).await;
    let mut once = open(
        &server,
        pb::WatchRequest {
            path: "/o".into(),
            once: true,
            ..Default::default()
        },
    )
    .await;
    let st = started(&mut once).await;
    let z_created = w.create("/o", "a").await;
    let z_set = w.set("/o", "b").await;
    w.set("/o", "c").await;
    w.delete("/o").await;

    let mut events = Vec::new();
    for _ in 0..100 {
        match next_msg(&mut once).await {
            Some(Msg::Event(e)) => events.push(key(&e)),
            Some(Msg::Progress(_)) => {}
            Some(other) => panic!("unexpected {other:?}"),
            None => break,
        }
    }
    assert_eq!(events, [(z_created, K::Created, "/o".to_owned())]);

    // A one-shot watch with a kind filter, replayed from history: the first matching
    // change after start_zxid, and nothing after it.
    let mut replayed = open(
        &server,
        pb::WatchRequest {
            path: "/o".into(),
            once: true,
            kinds: vec![K::DataChanged.into()],
            start_zxid: Some(st.zxid),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(started(&mut replayed).await.zxid, st.zxid);
    match next_msg(&mut replayed).await {
        Some(Msg::Event(e)) => assert_eq!(key(&e), (z_set, K::DataChanged, "/o".into())),
        other => panic!("expected the first DATA_CHANGED, got {other:?}"),
    }
    assert_eq!(
        next_msg(&mut replayed).await,
        None,
        "a once watch fired twice"
    );
}

#[tokio::test]
async fn t30_node_watch_sees_its_node_and_children_not_grandchildren() {
    let server = Server::start(ServerOptions::default());
    let mut w = Writer::new(&server).await;
    let mut s = open(&server, request("/n", false)).await;
    let st = started(&mut s).await;
    w.create("/n", "0").await;
    for v in ["1", "2", "3"] {
        w.set("/n", v).await;
    }
    w.create("/n/c1", "").await;
    w.create("/n/c1/g", "").await;
    w.set("/n/c1", "x").await;
    w.set("/n/c1/g", "y").await;
    w.delete("/n/c1/g").await;
    w.delete("/n/c1").await;
    w.create("/n2", "").await;
    w.create("/other", "").await;
    w.delete("/n").await;

    let got = events_through(&mut s, w.last_zxid).await;
    let expected = w.expected("/n", false, st.zxid);
    assert_eq!(keys(&got), expected);
    let kinds: Vec<K> = expected.iter().map(|k| k.1).collect();
    assert_eq!(
        kinds,
        [
            K::Created,
            K::DataChanged,
            K::DataChanged,
            K::DataChanged,
            K::ChildrenChanged,
            K::ChildrenChanged,
            K::Deleted
        ]
    );
    assert!(got.windows(2).all(|p| p[0].zxid < p[1].zxid));
    // Each event carries the node's stat after the change (before it, for DELETED).
    let versions: Vec<i32> = got.iter().map(|e| e.stat.unwrap().version).collect();
    assert_eq!(versions, [0, 1, 2, 3, 3, 3, 3]);
    for e in &got[..4] {
        assert_eq!(e.stat.unwrap().mzxid, e.zxid, "{e:?}");
    }
    let children: Vec<u32> = got.iter().map(|e| e.stat.unwrap().num_children).collect();
    assert_eq!(children, [0, 0, 0, 0, 1, 0, 0]);
}

#[tokio::test]
async fn t30_recursive_watch_sees_the_subtree_only() {
    let server = Server::start(ServerOptions::default());
    let mut w = Writer::new(&server).await;
    let mut sub = open(&server, request("/a", true)).await;
    let mut all = open(&server, request("/", true)).await;
    let st = started(&mut sub).await;
    let st_all = started(&mut all).await;
    w.create("/a", "").await;
    w.create("/a/b", "").await;
    w.create("/a/b/c", "").await;
    w.set("/a/b/c", "1").await;
    w.create("/ab", "").await;
    w.create("/ab/x", "").await;
    w.set("/ab", "2").await;
    w.create("/b", "").await;
    let z_multi = w.multi_create(&["/a/m1", "/ab/m2", "/a/m3"]).await;
    w.delete("/a/b/c").await;
    w.set("/a", "3").await;

    let got = events_through(&mut sub, w.last_zxid).await;
    assert_eq!(keys(&got), w.expected("/a", true, st.zxid));
    assert!(
        got.iter()
            .all(|e| e.path == "/a" || e.path.starts_with("/a/")),
        "an event outside /a: {got:?}"
    );
    // The multi's events inside /a share its zxid, in op order.
    let in_multi: Vec<Key> = keys(&got).into_iter().filter(|k| k.0 == z_multi).collect();
    assert_eq!(
        in_multi,
        [
            (z_multi, K::Created, "/a/m1".into()),
            (z_multi, K::ChildrenChanged, "/a".into()),
            (z_multi, K::Created, "/a/m3".into()),
            (z_multi, K::ChildrenChanged, "/a".into()),
        ]
    );
    // A watch on the root sees every event, the root's own CHILDREN_CHANGED included.
    let everything = events_through(&mut all, w.last_zxid).await;
    assert_eq!(keys(&everything), w.expected("/", true, st_all.zxid));
    assert_eq!(everything.len(), w.log.len());
}

#[tokio::test]
async fn t30_kinds_filter_and_with_data() {
    let server = Server::start(ServerOptions::default());
    let mut w = Writer::new(&server).await;
    let filtered = pb::WatchRequest {
        kinds: vec![K::DataChanged.into(), K::Deleted.into()],
        with_data: true,
        ..request("/k", false)
    };
    let mut data_watch = open(&server, filtered).await;
    let mut plain = open(&server, request("/k", false)).await;
    let mut created_only = open(
        &server,
        pb::WatchRequest {
            kinds: vec![K::Created.into()],
            with_data: true,
            ..request("/k", true)
        },
    )
    .await;
    for s in [&mut data_watch, &mut plain, &mut created_only] {
        started(s).await;
    }
    let z0 = w.create("/k", "v0").await;
    let z1 = w.set("/k", "v1").await;
    let zc = w.create("/k/c", "child").await;
    let z2 = w.set("/k", "v2").await;
    w.delete("/k/c").await;
    let z3 = w.delete("/k").await;
    let last = w.last_zxid;

    let got = events_through(&mut data_watch, last).await;
    let seen: Vec<(u64, K, &[u8], &[u8])> = got
        .iter()
        .map(|e| (e.zxid, key(e).1, &e.data[..], &e.prev_data[..]))
        .collect();
    assert_eq!(
        seen,
        [
            (z1, K::DataChanged, &b"v1"[..], &b"v0"[..]),
            (z2, K::DataChanged, b"v2", b"v1"),
            (z3, K::Deleted, b"", b"v2"),
        ]
    );

    let got = events_through(&mut plain, last).await;
    assert_eq!(keys(&got), w.expected("/k", false, 0));
    for e in &got {
        assert!(
            e.data.is_empty() && e.prev_data.is_empty(),
            "data without with_data: {e:?}"
        );
    }

    let got = events_through(&mut created_only, last).await;
    let created: Vec<(u64, &str, &[u8])> = got
        .iter()
        .map(|e| {
            assert_eq!(key(e).1, K::Created);
            (e.zxid, e.path.as_str(), &e.data[..])
        })
        .collect();
    assert_eq!(created, [(z0, "/k", &b"v0"[..]), (zc, "/k/c", b"child")]);
}

#[tokio::test]
async fn t30_idle_watch_gets_progress_with_the_applied_zxid() {
    let server = Server::start(ServerOptions::default());
    let mut w = Writer::new(&server).await;
    w.create("/before", "").await;
    let mut s = open(&server, request("/quiet", true)).await;
    let st = started(&mut s).await;
    let applied = status(&server).await.zxid;
    assert_eq!(st.zxid, applied);
    match next_msg(&mut s).await {
        Some(Msg::Progress(p)) => assert_eq!(p.zxid, applied),
        other => panic!("expected Progress, got {other:?}"),
    }
    // Writes elsewhere move the progress zxid, without any event.
    let z = w.create("/elsewhere", "").await;
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut last = applied;
    while last < z {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no Progress at {z:#x}"
        );
        match next_msg(&mut s).await {
            Some(Msg::Progress(p)) => {
                assert!(p.zxid >= last, "progress went back");
                last = p.zxid;
            }
            other => panic!("expected Progress, got {other:?}"),
        }
    }
    assert_eq!(last, z);
}

async fn open_session(server: &Server, ttl_ms: i64) -> u64 {
    let mut sessions = server.session().await;
    let r = sessions
        .open(pb::OpenSessionRequest { ttl_ms })
        .await
        .unwrap();
    r.into_inner().session_id
}

async fn create_ephemeral(server: &Server, path: &str, session_id: u64) {
    let mut tree = server.tree().await;
    let req = pb::CreateRequest {
        path: path.into(),
        mode: pb::CreateMode::Ephemeral.into(),
        session_id,
        ..Default::default()
    };
    tree.create(req).await.unwrap();
}

#[tokio::test]
async fn t30_session_end_fires_deleted_for_its_ephemerals() {
    let server = Server::start(ServerOptions::default());
    let mut w = Writer::new(&server).await;
    w.create("/e", "").await;
    let sid = open_session(&server, 1000).await;
    create_ephemeral(&server, "/e/a", sid).await;
    create_ephemeral(&server, "/e/b", sid).await;
    let mut s = open(&server, request("/e", true)).await;
    let st = started(&mut s).await;

    let closed = server
        .session()
        .await
        .close(pb::CloseSessionRequest { session_id: sid })
        .await
        .unwrap()
        .into_inner();
    let z_close = closed.header.unwrap().zxid;
    w.record_deletes(z_close, &["/e/a", "/e/b"]);
    let got = events_through(&mut s, z_close).await;
    assert_eq!(keys(&got), w.expected("/e", true, st.zxid));
    assert!(got.iter().all(|e| e.zxid == z_close));

    // An expired session (no keep-alives) takes its ephemeral the same way.
    let sid = open_session(&server, 100).await;
    create_ephemeral(&server, "/e/short", sid).await;
    let mut deleted = None;
    for _ in 0..1000 {
        match next_msg(&mut s).await {
            Some(Msg::Event(e)) if key(&e).1 == K::Deleted => {
                deleted = Some(e);
                break;
            }
            Some(Msg::Event(_) | Msg::Progress(_)) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    let deleted = deleted.expect("no DELETED for the expired session's node");
    assert_eq!(deleted.path, "/e/short");
    assert_eq!(deleted.stat.unwrap().ephemeral_owner, sid);
    assert!(deleted.zxid > z_close);
}

#[tokio::test]
async fn t30_bad_watch_requests_are_refused() {
    let server = Server::start(ServerOptions::default());
    let mut w = Writer::new(&server).await;
    w.create("/x", "").await;
    let committed = status(&server).await.commit_zxid;
    assert_eq!(committed, w.last_zxid);

    let ahead = pb::WatchRequest {
        start_zxid: Some(committed + 1000),
        ..request("/x", false)
    };
    assert_eq!(code_of(&refused(&server, ahead).await), "BAD_ARGUMENTS");
    let both = pb::WatchRequest {
        start_zxid: Some(0),
        initial_snapshot: true,
        ..request("/x", false)
    };
    assert_eq!(code_of(&refused(&server, both).await), "BAD_ARGUMENTS");
    let kind = pb::WatchRequest {
        kinds: vec![99],
        ..request("/x", false)
    };
    assert_eq!(code_of(&refused(&server, kind).await), "BAD_ARGUMENTS");
    for path in ["x", "/x/", "/x//y", ""] {
        let status = refused(&server, request(path, true)).await;
        assert_eq!(code_of(&status), "BAD_PATH", "{path:?}: {status:?}");
    }
    // At the commit point exactly is fine, and goes live from there.
    let at = pb::WatchRequest {
        start_zxid: Some(committed),
        ..request("/x", false)
    };
    let mut s = open(&server, at).await;
    assert_eq!(started(&mut s).await.zxid, committed);
    let z = w.set("/x", "1").await;
    assert_eq!(
        keys(&events_through(&mut s, z).await),
        w.expected("/x", false, committed)
    );
}
