//! The Rust SDK's calls over many nodes against a real server: `ensure_path` and
//! `CreateOptions::create_parents` (Curator's `creatingParentsIfNeeded`) make every
//! missing ancestor as an empty persistent node and leave existing ones alone, also
//! when several clients race; `delete_recursive` (Curator's
//! `deletingChildrenIfNeeded`) deletes a subtree depth first, following pages of
//! children, and skips what another client deleted first. A session's client
//! (`Session::client`) writes as its session: its ephemerals are the session's, and
//! every write carries the session and a fresh request id, so the retry policy
//! retries a write whose outcome is unknown and the server applies it once; a
//! client with no session writes as it always did.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use concord::{
    op, ChildrenOptions, Client, CreateMode, CreateOptions, ErrorCode, ReadOptions, RetryPolicy,
    WriteOptions, ANY_VERSION,
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
        .children(path, &ChildrenOptions::default())
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t73_a_sessions_client_writes_as_the_session_and_a_plain_client_as_before() {
    let server = Server::start(ServerOptions::default());
    let client = server.sdk().await;
    let session = client.open_session(1_000).await.unwrap();
    let mine = session.client().clone();
    assert_eq!(mine.session_id(), Some(session.id()));
    assert_eq!(client.session_id(), None);
    // An ephemeral create with no session named is the session's.
    let ephemeral = CreateOptions::mode(CreateMode::Ephemeral);
    let created = mine.create("/e", "", ephemeral.clone()).await.unwrap();
    assert_eq!(created.stat.ephemeral_owner, session.id());
    // Unless told otherwise.
    let other = client.open_session(1_000).await.unwrap();
    let theirs = CreateOptions::ephemeral(other.id(), false);
    let created = mine.create("/o", "", theirs).await.unwrap();
    assert_eq!(created.stat.ephemeral_owner, other.id());
    // Persistent writes through it are ordinary nodes.
    let created = mine
        .create("/p", "", CreateOptions::default())
        .await
        .unwrap();
    assert_eq!(created.stat.ephemeral_owner, 0);
    mine.set("/p", "1", ANY_VERSION).await.unwrap();
    mine.delete("/p", ANY_VERSION).await.unwrap();
    let ops = vec![op::create("/m", "", CreateMode::Ephemeral)];
    mine.multi(ops, &WriteOptions::default()).await.unwrap();
    assert_eq!(
        stat_of(&client, "/m").await.unwrap().ephemeral_owner,
        session.id()
    );

    // A client with no session writes as before; an ephemeral needs one.
    client
        .create("/q", "", CreateOptions::default())
        .await
        .unwrap();
    client.set("/q", "1", ANY_VERSION).await.unwrap();
    client.delete("/q", ANY_VERSION).await.unwrap();
    let err = client
        .create("/x", "", ephemeral.clone())
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::BadArguments, "{err:?}");
    assert!(err.message().contains("need a session"), "{err:?}");

    // Once the session is closed, its client writes as one with no session, and an
    // ephemeral create through it is told the session is gone.
    session.close().await.unwrap();
    assert!(stat_of(&client, "/e").await.is_none());
    let created = mine
        .create("/after", "", CreateOptions::default())
        .await
        .unwrap();
    assert_eq!(created.stat.ephemeral_owner, 0);
    let err = mine.create("/late", "", ephemeral).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::SessionExpired, "{err:?}");
    other.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t73_a_sessions_writes_are_retried_through_a_stall_and_applied_once() {
    let server = Server::start(ServerOptions {
        session_ttl_ms: Some((100, 60_000)),
        ..ServerOptions::default()
    });
    let client = Client::builder()
        .endpoint(server.endpoint())
        .call_timeout(Duration::from_millis(250))
        .retry(RetryPolicy {
            attempts_max: 0,
            elapsed_max_ms: 30_000,
            delay_initial_ms: 50,
            delay_max_ms: 200,
        })
        .connect()
        .await
        .unwrap();
    // A TTL far longer than the stall: the session outlives it.
    let session = client.open_session(30_000).await.unwrap();
    let mine = session.client().clone();
    for path in ["/seq", "/multi", "/set", "/gone"] {
        mine.create(path, "", CreateOptions::default())
            .await
            .unwrap();
    }
    server.signal("STOP");
    // Each write is sent while the server is stopped; each attempt times out after
    // 250 ms, and the next goes with the same session and request id.
    let seq = CreateOptions::mode(CreateMode::PersistentSequential);
    let w = mine.clone();
    let create = tokio::spawn(async move { w.create("/seq/n-", "", seq).await });
    let w = mine.clone();
    let set = tokio::spawn(async move { w.set("/set", "1", ANY_VERSION).await });
    let w = mine.clone();
    let delete = tokio::spawn(async move { w.delete("/gone", ANY_VERSION).await });
    let w = mine.clone();
    let multi = tokio::spawn(async move {
        let ops = vec![op::create(
            "/multi/n-",
            "",
            CreateMode::PersistentSequential,
        )];
        w.multi(ops, &WriteOptions::default()).await
    });
    let w = mine.clone();
    let ephemeral = CreateOptions::mode(CreateMode::Ephemeral);
    let eph = tokio::spawn(async move { w.create("/eph", "", ephemeral).await });
    // Several attempts' worth of stall (a call's deadline is 250 ms).
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    server.signal("CONT");
    // No error reaches the writer...
    let created = create.await.unwrap().unwrap();
    let updated = set.await.unwrap().unwrap();
    delete.await.unwrap().unwrap();
    let multi = multi.await.unwrap().unwrap();
    let eph = eph.await.unwrap().unwrap();
    // ...and each write was applied once.
    assert_eq!(names(&client, "/seq").await, [&created.path[5..]]);
    assert_eq!(names(&client, "/multi").await.len(), 1, "{multi:?}");
    assert_eq!(updated.stat.version, 1);
    assert_eq!(stat_of(&client, "/set").await.unwrap().version, 1);
    assert!(stat_of(&client, "/gone").await.is_none());
    assert_eq!(eph.stat.ephemeral_owner, session.id());
    session.close().await.unwrap();
}
