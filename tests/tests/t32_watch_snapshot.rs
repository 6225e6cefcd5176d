//! A watch with `initial_snapshot` taken while a writer keeps writing: the snapshot
//! nodes, then the events after its zxid, rebuild exactly the subtree the server ends
//! with (data and every stat field): a cache with no gap and no race.

#![allow(clippy::unwrap_used)]

mod watch_util;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use concord_proto::v1 as pb;
use concord_tests::{eventually, Server, ServerOptions};
use pb::watch_response::Msg;
use pb::EventKind as K;
use watch_util::*;

/// A deterministic writer of creates, sets and deletes under /s (and a few outside),
/// counting its writes.
async fn churn(server_endpoint: String, ops: usize, done: Arc<AtomicUsize>) -> u64 {
    let channel = tonic::transport::Channel::from_shared(server_endpoint)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut tree = pb::tree_client::TreeClient::new(channel);
    let names: Vec<String> = (0..6)
        .flat_map(|i| {
            let top = format!("/s/k{i}");
            [top.clone(), format!("{top}/c0"), format!("{top}/c1")]
        })
        .collect();
    let mut exists: BTreeMap<String, bool> = names.iter().map(|n| (n.clone(), false)).collect();
    for n in ["/s/k0", "/s/k0/c0", "/s/k1"] {
        exists.insert(n.into(), true); // pre-populated by the test
    }
    let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut last = 0;
    for step in 0..ops {
        rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let name = &names[(rng >> 33) as usize % names.len()];
        let has_children = exists.iter().any(|(p, e)| *e && parent(p) == name);
        let parent_exists = exists.get(parent(name)).copied().unwrap_or(true);
        let header = if !exists[name] && parent_exists {
            let req = pb::CreateRequest {
                path: name.clone(),
                data: format!("c{step}").into_bytes().into(),
                ..Default::default()
            };
            exists.insert(name.clone(), true);
            tree.create(req).await.unwrap().into_inner().header
        } else if exists[name] && (rng >> 20).is_multiple_of(3) && !has_children {
            let req = pb::DeleteRequest {
                path: name.clone(),
                version: -1,
                ..Default::default()
            };
            exists.insert(name.clone(), false);
            tree.delete(req).await.unwrap().into_inner().header
        } else if exists[name] {
            let req = pb::SetRequest {
                path: name.clone(),
                data: format!("s{step}").into_bytes().into(),
                version: -1,
                ..Default::default()
            };
            tree.set(req).await.unwrap().into_inner().header
        } else {
            let req = pb::SetRequest {
                path: "/t".into(),
                data: format!("t{step}").into_bytes().into(),
                version: -1,
                ..Default::default()
            };
            tree.set(req).await.unwrap().into_inner().header
        };
        last = header.unwrap().zxid;
        done.fetch_add(1, Ordering::Release);
    }
    last
}

type Cache = BTreeMap<String, (Vec<u8>, pb::Stat)>;

/// The subtree at `root` as Children + Get see it at `min_zxid` or later.
async fn read_subtree(server: &Server, root: &str, min_zxid: u64) -> Cache {
    let mut tree = server.tree().await;
    let mut out = Cache::new();
    let mut stack = vec![root.to_owned()];
    for _ in 0..10_000 {
        let Some(path) = stack.pop() else {
            return out;
        };
        let got = tree
            .get(pb::GetRequest {
                path: path.clone(),
                min_zxid,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        out.insert(path.clone(), (got.data.to_vec(), got.stat.unwrap()));
        let children = tree
            .children(pb::ChildrenRequest {
                path: path.clone(),
                min_zxid,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(children.next_page_token.is_empty());
        stack.extend(
            children
                .children
                .iter()
                .map(|c| format!("{path}/{}", c.name)),
        );
    }
    panic!("subtree too large");
}

#[tokio::test]
async fn t32_initial_snapshot_then_events_rebuild_the_subtree_exactly() {
    let server = Server::start(ServerOptions::default());
    let mut w = Writer::new(&server).await;
    for p in ["/s", "/s/k0", "/s/k0/c0", "/s/k1", "/t"] {
        w.create(p, p).await;
    }
    const OPS: usize = 400;
    let done = Arc::new(AtomicUsize::new(0));
    let writer = tokio::spawn(churn(server.endpoint(), OPS, Arc::clone(&done)));
    eventually("the writer is under way", WAIT, || async {
        (done.load(Ordering::Acquire) >= 40).then_some(())
    })
    .await;

    let req = pb::WatchRequest {
        initial_snapshot: true,
        with_data: true,
        ..request("/s", true)
    };
    let mut s = open(&server, req).await;
    let st = started(&mut s).await;
    let mut cache = Cache::new();
    let snapshot_zxid = loop {
        match next_msg(&mut s).await {
            Some(Msg::SnapshotNode(n)) => {
                assert!(n.path == "/s" || n.path.starts_with("/s/"), "{}", n.path);
                let old = cache.insert(n.path.clone(), (n.data.to_vec(), n.stat.unwrap()));
                assert!(old.is_none(), "{} twice in the snapshot", n.path);
            }
            Some(Msg::SnapshotDone(d)) => break d.zxid,
            other => panic!("during the snapshot: {other:?}"),
        }
        assert!(cache.len() < 10_000);
    };
    assert_eq!(snapshot_zxid, st.zxid);
    assert!(cache.contains_key("/s"));
    let last = writer.await.unwrap();
    assert!(
        done.load(Ordering::Acquire) == OPS && last > snapshot_zxid,
        "the writer must still be writing when the snapshot is taken"
    );
    let events = events_through(&mut s, last).await;
    assert!(!events.is_empty());
    for e in &events {
        assert!(
            e.zxid > snapshot_zxid,
            "event at {:#x} not after the snapshot",
            e.zxid
        );
        let stat = e.stat.unwrap();
        match key(e).1 {
            K::Created => {
                let old = cache.insert(e.path.clone(), (e.data.to_vec(), stat));
                assert!(old.is_none(), "CREATED {} which the cache has", e.path);
            }
            K::DataChanged => {
                let node = cache
                    .get_mut(&e.path)
                    .expect("DATA_CHANGED of an unknown node");
                assert_eq!(node.0, e.prev_data.to_vec());
                *node = (e.data.to_vec(), stat);
            }
            K::ChildrenChanged => {
                let node = cache
                    .get_mut(&e.path)
                    .expect("CHILDREN_CHANGED of an unknown node");
                node.1 = stat;
            }
            K::Deleted => {
                let old = cache.remove(&e.path).expect("DELETED of an unknown node");
                assert_eq!(old.0, e.prev_data.to_vec());
            }
            K::Unspecified => panic!("unspecified event kind"),
        }
    }
    assert_eq!(cache, read_subtree(&server, "/s", last).await);
}
