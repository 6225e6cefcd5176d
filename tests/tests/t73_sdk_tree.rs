//! The Rust SDK's calls over many nodes against a real server: `ensure_path` and
//! `CreateOptions::create_parents` (Curator's `creatingParentsIfNeeded`) make every
//! missing ancestor as an empty persistent node and leave existing ones alone, also
//! when several clients race; `delete_recursive` (Curator's
//! `deletingChildrenIfNeeded`) deletes a subtree depth first, following pages of
//! children, and skips what another client deleted first.

#![allow(clippy::unwrap_used)]

use concord::{
    op, ChildrenOptions, Client, CreateMode, CreateOptions, ErrorCode, ReadOptions, ANY_VERSION,
};
use concord_tests::{Server, ServerOptions};

async fn stat_of(client: &Client, path: &str) -> Option<concord::Stat> {
    client
        .exists(path, ReadOptions::default())
        .await
        .unwrap()
        .stat
}

async fn names(client: &Client, path: &str) -> Vec<String> {
    let all = client
        .children_all(path, &ChildrenOptions::default())
        .await
        .unwrap();
    all.children.into_iter().map(|c| c.name).collect()
}

/// Creates `count` children `n00000`.. under `parent`, 200 to a multi.
async fn fill(client: &Client, parent: &str, count: usize) {
    let names: Vec<String> = (0..count).map(|i| format!("{parent}/n{i:05}")).collect();
    for chunk in names.chunks(200) {
        let ops = chunk
            .iter()
            .map(|p| op::create(p.as_str(), "", CreateMode::Persistent))
            .collect();
        client.multi(ops, &Default::default()).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t73_ensure_path_makes_the_missing_nodes_and_leaves_the_rest() {
    let server = Server::start(ServerOptions::default());
    let client = server.sdk().await;
    client
        .create("/a", "kept", CreateOptions::default())
        .await
        .unwrap();
    client.ensure_path("/a/b/c").await.unwrap();
    for path in ["/a/b", "/a/b/c"] {
        let stat = stat_of(&client, path).await.expect(path);
        assert_eq!((stat.ephemeral_owner, stat.data_length), (0, 0), "{path}");
    }
    let a = client.get("/a", ReadOptions::default()).await.unwrap();
    assert_eq!(a.data, b"kept");
    // Again: nothing to do, nothing changed.
    let before = (
        stat_of(&client, "/a").await,
        stat_of(&client, "/a/b/c").await,
    );
    client.ensure_path("/a/b/c").await.unwrap();
    client.ensure_path("/").await.unwrap();
    let after = (
        stat_of(&client, "/a").await,
        stat_of(&client, "/a/b/c").await,
    );
    assert_eq!(before, after);

    // A bad path is refused before anything is made.
    for bad in ["/x//y", "x/y", "/x/y/"] {
        let err = client.ensure_path(bad).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::BadPath, "{bad}: {err:?}");
    }
    assert_eq!(names(&client, "/").await, ["a"]);

    // No child under an ephemeral, as for a create.
    let session = client.open_session(1_000).await.unwrap();
    let ephemeral = CreateOptions::ephemeral(session.id(), false);
    client.create("/e", "", ephemeral).await.unwrap();
    let err = client.ensure_path("/e/f/g").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::NoChildrenForEphemerals, "{err:?}");
    session.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t73_clients_racing_to_ensure_overlapping_paths_all_succeed() {
    let server = Server::start(ServerOptions::default());
    let mut tasks = Vec::new();
    for i in 0..8 {
        let client = server.sdk().await;
        tasks.push(tokio::spawn(async move {
            // Every client makes /r/s/t/u, and a leaf of its own below it.
            client.ensure_path(&format!("/r/s/t/u/{i}")).await
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let client = server.sdk().await;
    let leaves = names(&client, "/r/s/t/u").await;
    assert_eq!(leaves, ["0", "1", "2", "3", "4", "5", "6", "7"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t73_a_create_with_parents_makes_them_persistent_and_empty() {
    let server = Server::start(ServerOptions::default());
    let client = server.sdk().await;
    let err = client
        .create("/p/q/r", "x", CreateOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::NoNode, "without the option: {err:?}");
    let created = client
        .create("/p/q/r", "x", CreateOptions::default().with_parents())
        .await
        .unwrap();
    assert_eq!(created.path, "/p/q/r");
    assert_eq!(
        client
            .get("/p/q/r", ReadOptions::default())
            .await
            .unwrap()
            .data,
        b"x"
    );
    // An ephemeral sequential node: its parents are persistent, it is the session's.
    let session = client.open_session(1_000).await.unwrap();
    let options = CreateOptions::ephemeral(session.id(), true).with_parents();
    let created = client.create("/s/t/n-", "", options).await.unwrap();
    assert_eq!(created.path, "/s/t/n-0000000000");
    assert_eq!(created.stat.ephemeral_owner, session.id());
    for parent in ["/s", "/s/t"] {
        let stat = stat_of(&client, parent).await.expect(parent);
        assert_eq!((stat.ephemeral_owner, stat.data_length), (0, 0), "{parent}");
    }
    // With a request id of the caller's, the parents are made first: the id is
    // used once.
    let options = CreateOptions {
        session_id: session.id(),
        request_id: 42,
        ..CreateOptions::default().with_parents()
    };
    client.create("/u/v", "w", options.clone()).await.unwrap();
    let again = client.create("/u/v", "w", options).await.unwrap();
    assert_eq!(
        again.path, "/u/v",
        "a retry is answered with the first outcome"
    );
    // A node that exists is still NODE_EXISTS.
    let err = client
        .create("/p/q/r", "", CreateOptions::default().with_parents())
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::NodeExists, "{err:?}");
    session.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t73_delete_recursive_deletes_a_deep_and_wide_subtree() {
    let server = Server::start(ServerOptions::default());
    let client = server.sdk().await;
    // Wider than one page of children (the server's cap is 1000), and deep.
    client.ensure_path("/d/wide").await.unwrap();
    fill(&client, "/d/wide", 1_200).await;
    client.ensure_path("/d/deep/1/2/3/4/5/6").await.unwrap();
    client
        .create("/keep", "", CreateOptions::default())
        .await
        .unwrap();
    let deleted = client.delete_recursive("/d", ANY_VERSION).await.unwrap();
    // /d, /d/wide and its 1,200 children, /d/deep and its 6 levels.
    assert_eq!(deleted, 1 + 1 + 1_200 + 1 + 6);
    assert!(stat_of(&client, "/d").await.is_none());
    assert_eq!(names(&client, "/").await, ["keep"]);
    // Nothing there: nothing to do.
    assert_eq!(client.delete_recursive("/d", ANY_VERSION).await.unwrap(), 0);
    let err = client
        .delete_recursive("/d//x", ANY_VERSION)
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::BadPath, "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t73_delete_recursive_checks_the_version_of_the_top_node_last() {
    let server = Server::start(ServerOptions::default());
    let client = server.sdk().await;
    client.ensure_path("/v/child").await.unwrap();
    let err = client.delete_recursive("/v", 5).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::BadVersion, "{err:?}");
    assert!(stat_of(&client, "/v").await.is_some(), "the top node stays");
    assert!(stat_of(&client, "/v/child").await.is_none());
    assert_eq!(client.delete_recursive("/v", 0).await.unwrap(), 1);
    // The root stays; everything under it goes.
    client.ensure_path("/w/x").await.unwrap();
    client.ensure_path("/y").await.unwrap();
    assert_eq!(client.delete_recursive("/", ANY_VERSION).await.unwrap(), 3);
    assert!(names(&client, "/").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t73_two_clients_deleting_one_subtree_skip_what_the_other_deleted() {
    let server = Server::start(ServerOptions::default());
    let client = server.sdk().await;
    for branch in 0..4 {
        let parent = format!("/t/b{branch}");
        client.ensure_path(&parent).await.unwrap();
        fill(&client, &parent, 150).await;
    }
    let total = 1 + 4 * (1 + 150);
    let (one, two) = (server.sdk().await, server.sdk().await);
    let (a, b) = tokio::join!(
        one.delete_recursive("/t", ANY_VERSION),
        two.delete_recursive("/t", ANY_VERSION)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a + b, total, "each node deleted once: {a} + {b}");
    assert!(stat_of(&client, "/t").await.is_none());
}
