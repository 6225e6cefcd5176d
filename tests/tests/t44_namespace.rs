//! Namespaces and grants end to end, on a plain-text server whose local identity is
//! a team member (one identity per process; cross-team tests need TLS): the seed
//! creates the team's root and its grant, the team sees its root as `/` through the
//! SDK, grpc and concordctl (paths, sequential names, watch events, lock keys), a
//! revocation acts at once and outlives a restart, and a revoked seed grant is not
//! seeded again.

#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;

use concord::{
    ChildrenOptions, Client, CreateMode, CreateOptions, Grant, Grantee, LockOptions, ReadOptions,
    WatchMessage, WatchOptions,
};
use concord_tests::{bin, eventually, Background, Server, ServerOptions};

const WAIT: Duration = Duration::from_secs(20);

const CONFIG: &str = r#"
local_identity = "pay-1"
admins = ["ops"]

[[teams]]
name = "pay"
root = "/teams/pay"
identities = ["pay-*"]

[[teams]]
name = "search"
root = "/teams/search"
identities = ["search-*"]

[[grants]]
path = "/teams/pay"
identity = "pay-1"
perms = "r"
"#;

fn start(dir: &std::path::Path) -> Server {
    let config = dir.join("concord.toml");
    std::fs::write(&config, CONFIG).unwrap();
    Server::start(ServerOptions {
        extra: vec!["--config".into(), config.display().to_string()],
        ..ServerOptions::default()
    })
}

async fn ctl(server: &Server, args: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(bin("concordctl"));
    cmd.arg("--endpoint").arg(server.endpoint()).args(args);
    let mut child = Background::spawn(&mut cmd);
    let status = child.wait_exit(WAIT).await;
    (status.code(), child.stdout(), child.stderr())
}

/// Waits until the bootstrap seed has been applied (the team's grant is there).
async fn seeded(client: &Client) -> Vec<Grant> {
    eventually("the seed", WAIT, || async {
        let me = client.who_am_i().await.ok()?;
        (me.grants.len() == 2).then_some(me.grants)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_member_sees_its_namespace_root_as_slash() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(dir.path());
    let client = Client::connect(server.endpoint()).await.unwrap();
    let grants = seeded(&client).await;
    let me = client.who_am_i().await.unwrap();
    assert_eq!(me.identity, "pay-1");
    assert!(!me.admin);
    assert_eq!(
        (me.team.as_str(), me.namespace_root.as_str()),
        ("pay", "/teams/pay")
    );
    let team_grant = Grant {
        path: "/".into(),
        to: Grantee::Team("pay".into()),
        perms: "rwcda".into(),
    };
    assert!(grants.contains(&team_grant), "{grants:?}");

    // The root exists at once; paths, names and events are relative to it.
    let top = client
        .children("/", &ChildrenOptions::default())
        .await
        .unwrap();
    assert!(top.children.is_empty(), "{top:?}");
    let mut options = WatchOptions::path("/");
    options.recursive = true;
    let mut watch = client.watch(options).await.unwrap();
    let created = client
        .create("/jobs", "", CreateOptions::default())
        .await
        .unwrap();
    assert_eq!(created.path, "/jobs");
    let seq = client
        .create(
            "/jobs/j-",
            "x",
            CreateOptions::mode(CreateMode::PersistentSequential),
        )
        .await
        .unwrap();
    assert_eq!(seq.path, "/jobs/j-0000000000");
    // The first event is the first create, named as the team sees it.
    let event = tokio::time::timeout(WAIT, async {
        loop {
            if let Some(Ok(WatchMessage::Event(e))) = watch.next().await {
                return e;
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(event.path, "/jobs");
    let err = client.get("/teams/pay/jobs", ReadOptions::default()).await;
    assert_eq!(err.unwrap_err().code(), concord::ErrorCode::NoNode);

    // Locks are named in the namespace too.
    let session = client.open_session(5_000).await.unwrap();
    let hold = client
        .try_acquire("l", session.id(), &LockOptions::default())
        .await
        .unwrap();
    assert_eq!(hold.key, "/concord/locks/l/0000000000");
    let holders = client.lock_holders("l").await.unwrap();
    assert_eq!(holders[0].key, hold.key);
    session.close().await.unwrap();

    // concordctl: whoami, acl ls, and a revocation that acts on the next request.
    let (code, out, err) = ctl(&server, &["whoami"]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("namespace_root = /teams/pay"), "{out}");
    assert!(out.contains("grant / team pay rwcda"), "{out}");
    assert!(out.contains("quota sessions 0 of unlimited"), "{out}");
    let (code, out, err) = ctl(&server, &["acl", "ls", "/", "-R"]).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "/ identity pay-1 r\n/ team pay rwcda\n");
    let (code, _, err) = ctl(&server, &["acl", "revoke", "/", "w", "--team", "pay"]).await;
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = ctl(&server, &["set", "/jobs", "v"]).await;
    assert_ne!(code, Some(0));
    assert!(err.contains("PERMISSION_DENIED"), "{err}");
    assert!(err.contains("no write permission on /jobs"), "{err}");
    let (code, out, _) = ctl(&server, &["ls", "/"]).await;
    assert_eq!((code, out.as_str()), (Some(0), "jobs\n"));

    // The grant table is replicated state: a restart keeps the revocation, and the
    // seed does not grant it again.
    assert!(server.terminate());
    server.restart();
    let client = Client::connect(server.endpoint()).await.unwrap();
    let me = eventually("the restarted server", WAIT, || async {
        client.who_am_i().await.ok()
    })
    .await;
    let perms: Vec<_> = me.grants.iter().map(|g| g.perms.as_str()).collect();
    assert_eq!(perms, ["r", "rcda"], "{:?}", me.grants);
    assert!(client.get("/jobs", ReadOptions::default()).await.is_ok());
}

/// On an ensemble every server seeds at start (idempotently): each answers with the
/// same grants, and a grant changed through one server holds on the others once
/// they have applied it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_server_of_an_ensemble_seeds_the_same_grants_once() {
    let ensemble = concord_tests::Ensemble::start_with_config(
        3,
        ServerOptions::default(),
        CONFIG.trim_start(),
    );
    ensemble.leader(WAIT).await;
    let clients: Vec<Client> = ensemble
        .servers
        .iter()
        .map(|s| Client::connect_lazy(s.endpoint()).unwrap())
        .collect();
    for client in &clients {
        let grants = seeded(client).await;
        assert!(grants.iter().any(|g| g.perms == "rwcda"), "{grants:?}");
    }
    let created = clients[0]
        .create("/x", "", CreateOptions::default())
        .await
        .unwrap();
    assert_eq!(created.path, "/x");
    let zxid = clients[1]
        .revoke("/", &Grantee::Team("pay".into()), "c")
        .await
        .unwrap();
    for client in &clients {
        let read = ReadOptions::at_least(zxid.max(created.zxid));
        assert!(client.get("/x", read).await.is_ok());
        let top = client
            .children("/", &ChildrenOptions::default())
            .await
            .unwrap();
        let names: Vec<_> = top.children.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["x"]);
        let me = client.who_am_i().await.unwrap();
        let perms: Vec<_> = me.grants.iter().map(|g| g.perms.as_str()).collect();
        assert_eq!(perms, ["r", "rwda"]);
        let denied = client.create("/y", "", CreateOptions::default()).await;
        assert_eq!(
            denied.unwrap_err().code(),
            concord::ErrorCode::PermissionDenied
        );
    }
    let status = ensemble.status(2).await.unwrap();
    // The root, /teams, the two team roots and /x: the roots were created once.
    assert_eq!(status.node_count, 5);
}
