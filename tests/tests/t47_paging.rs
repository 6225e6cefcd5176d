//! Listings are always paged: `Children` and `Session.List` give at most the
//! server's cap per page (also to a client that asks for no limit) and a page
//! token, and the SDK and `concordctl` follow the tokens to the end.

#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;

use concord::{ChildrenOptions, Client};
use concord_proto::v1 as pb;
use concord_tests::{bin, code_of, config_file, config_flags, Background, Server, ServerOptions};

const WAIT: Duration = Duration::from_secs(20);

/// A server whose pages hold at most 3 children and 3 sessions.
fn server() -> (Server, tempfile::TempPath) {
    let cfg = config_file("children_page_max = 3\nsession_list_page_max = 3\n");
    let server = Server::start(ServerOptions {
        extra: config_flags(&cfg),
        session_ttl_ms: Some((100, 60_000)),
        ..ServerOptions::default()
    });
    (server, cfg)
}

async fn concordctl(server: &Server, args: &[&str]) -> String {
    let mut cmd = Command::new(bin("concordctl"));
    cmd.arg("--endpoint").arg(server.endpoint()).args(args);
    let mut child = Background::spawn(&mut cmd);
    let status = child.wait_exit(WAIT).await;
    assert!(status.success(), "concordctl {args:?}: {}", child.stderr());
    child.stdout()
}

#[tokio::test]
async fn t47_children_without_a_page_size_get_the_cap_and_a_token() {
    let (server, _cfg) = server();
    let mut tree = server.tree().await;
    let names = ["a", "b", "c", "d", "e", "f", "g"];
    for path in std::iter::once("/p".to_string()).chain(names.iter().map(|n| format!("/p/{n}"))) {
        let create = pb::CreateRequest {
            path,
            mode: pb::CreateMode::Persistent.into(),
            ..Default::default()
        };
        tree.create(create).await.unwrap();
    }
    let page = |page_size, page_token: &str| pb::ChildrenRequest {
        path: "/p".into(),
        page_size,
        page_token: page_token.into(),
        ..Default::default()
    };
    // An old client asks for everything: it gets the cap and a token.
    let first = tree.children(page(0, "")).await.unwrap().into_inner();
    let got: Vec<&str> = first.children.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(got, ["a", "b", "c"]);
    assert_eq!(first.next_page_token, "c");
    // More than the cap is the cap too.
    let second = tree.children(page(100, "c")).await.unwrap().into_inner();
    assert_eq!(second.children.len(), 3);
    assert_eq!(second.next_page_token, "f");
    let last = tree.children(page(0, "f")).await.unwrap().into_inner();
    assert_eq!(last.children.len(), 1);
    assert!(last.next_page_token.is_empty());
    // The SDK and concordctl follow the tokens.
    let client = Client::connect(server.endpoint()).await.unwrap();
    let all = client
        .children("/p", &ChildrenOptions::default())
        .await
        .unwrap();
    let got: Vec<&str> = all.children.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(got, names);
    let listed = concordctl(&server, &["ls", "/p"]).await;
    assert_eq!(listed.lines().count(), names.len(), "{listed}");
}

/// With the server's default cap (1,000 a page), a node of 5,000 children is listed
/// whole by the SDK's `children` and by `concordctl ls`: neither stops at a page.
#[tokio::test]
async fn t47_five_thousand_children_are_listed_whole() {
    let server = Server::start(ServerOptions::default());
    let mut tree = server.tree().await;
    let create = |path: String| pb::Op {
        op: Some(pb::op::Op::Create(pb::CreateOp {
            path,
            mode: pb::CreateMode::Persistent.into(),
            ..Default::default()
        })),
    };
    tree.create(pb::CreateRequest {
        path: "/many".into(),
        mode: pb::CreateMode::Persistent.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    for batch in 0..10 {
        let ops = (0..500)
            .map(|i| create(format!("/many/c{:05}", batch * 500 + i)))
            .collect();
        let multi = pb::MultiRequest {
            ops,
            ..Default::default()
        };
        tree.multi(multi).await.unwrap();
    }
    let client = Client::connect(server.endpoint()).await.unwrap();
    let all = client
        .children("/many", &ChildrenOptions::default())
        .await
        .unwrap();
    assert_eq!(all.children.len(), 5_000);
    assert!(all.next_page_token.is_empty());
    let names: Vec<String> = all.children.into_iter().map(|c| c.name).collect();
    let expected: Vec<String> = (0..5_000).map(|i| format!("c{i:05}")).collect();
    assert_eq!(names, expected);
    let listed = concordctl(&server, &["ls", "/many"]).await;
    assert_eq!(listed.lines().count(), 5_000);
}

#[tokio::test]
async fn t47_session_list_is_paged() {
    let (server, _cfg) = server();
    let mut sessions = server.session().await;
    let mut ids = Vec::new();
    for _ in 0..7 {
        let open = pb::OpenSessionRequest { ttl_ms: 60_000 };
        ids.push(sessions.open(open).await.unwrap().into_inner().session_id);
    }
    ids.sort_unstable();
    let page = |page_size, page_token: &str| pb::ListSessionsRequest {
        page_size,
        page_token: page_token.into(),
        ..Default::default()
    };
    let first = sessions.list(page(0, "")).await.unwrap().into_inner();
    let got: Vec<u64> = first.sessions.iter().map(|s| s.session_id).collect();
    assert_eq!(got, ids[..3]);
    assert_eq!(first.next_page_token, ids[2].to_string());
    let two = sessions
        .list(page(2, &first.next_page_token))
        .await
        .unwrap()
        .into_inner();
    let got: Vec<u64> = two.sessions.iter().map(|s| s.session_id).collect();
    assert_eq!(got, ids[3..5]);
    let bad = sessions.list(page(0, "/x")).await.unwrap_err();
    assert_eq!(code_of(&bad), "BAD_ARGUMENTS");
    // The SDK and concordctl follow the tokens.
    let client = Client::connect(server.endpoint()).await.unwrap();
    let all: Vec<u64> = client
        .list_sessions()
        .await
        .unwrap()
        .iter()
        .map(|s| s.session_id)
        .collect();
    assert_eq!(all, ids);
    let listed = concordctl(&server, &["session", "ls"]).await;
    assert_eq!(listed.lines().count(), ids.len(), "{listed}");
}
