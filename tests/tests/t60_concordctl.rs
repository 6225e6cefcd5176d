//! The real `concordctl` against the real server: every everyday command, its output
//! and exit status, an ephemeral node that lives exactly as long as the command, a
//! recursive watch that keeps going across a kill -9 and restart of the server, a watch
//! whose reader goes away (it ends quietly, with status 0), and the concordctl lines of
//! README.md as written.

#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;

use concord_proto::v1 as pb;
use concord_tests::{bin, eventually, workspace_dir, Background, Server, ServerOptions};

/// Longest any single command or wait may take.
const WAIT: Duration = Duration::from_secs(20);

struct Output {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn concordctl_command(server: &Server, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin("concordctl"));
    cmd.arg("--endpoint").arg(server.endpoint()).args(args);
    cmd
}

async fn ctl(server: &Server, args: &[&str]) -> Output {
    let mut child = Background::spawn(&mut concordctl_command(server, args));
    let status = child.wait_exit(WAIT).await;
    Output {
        code: status.code(),
        stdout: child.stdout(),
        stderr: child.stderr(),
    }
}

/// Runs a command that must succeed; returns its stdout.
async fn ctl_ok(server: &Server, args: &[&str]) -> String {
    let out = ctl(server, args).await;
    assert_eq!(
        out.code,
        Some(0),
        "concordctl {args:?} failed:\n{}\n{}",
        out.stdout,
        out.stderr
    );
    out.stdout
}

async fn exists(server: &Server, path: &str) -> Option<pb::Stat> {
    let req = pb::ExistsRequest {
        path: path.into(),
        ..Default::default()
    };
    let r = server.tree().await.exists(req).await.unwrap().into_inner();
    r.stat
}

#[tokio::test]
async fn t60_everyday_commands() {
    let server = Server::start(ServerOptions::default());
    assert_eq!(ctl_ok(&server, &["create", "/app", "v0"]).await, "/app\n");
    assert_eq!(
        ctl_ok(&server, &["create", "-s", "/app/job-", "w"]).await,
        "/app/job-0000000000\n"
    );
    assert_eq!(
        ctl_ok(&server, &["create", "--sequential", "/app/job-"]).await,
        "/app/job-0000000001\n"
    );
    ctl_ok(&server, &["create", "/app/job-0000000000/sub", "deep"]).await;
    assert_eq!(ctl_ok(&server, &["get", "/app"]).await, "v0\n");
    assert_eq!(ctl_ok(&server, &["set", "/app", "v1"]).await, "");
    let got = ctl_ok(&server, &["get", "--stat", "/app"]).await;
    assert!(got.starts_with("v1\n"), "{got}");
    for want in ["version = 1", "num_children = 2", "data_length = 2"] {
        assert!(got.lines().any(|l| l == want), "no {want:?} in\n{got}");
    }
    let stat = ctl_ok(&server, &["stat", "/app/job-0000000000"]).await;
    assert!(stat.lines().any(|l| l == "num_children = 1"), "{stat}");
    let s = exists(&server, "/app/job-0000000000").await.unwrap();
    assert!(
        stat.lines().any(|l| l == format!("czxid = {:#x}", s.czxid)),
        "{stat}"
    );

    assert_eq!(
        ctl_ok(&server, &["ls", "/app"]).await,
        "job-0000000000\njob-0000000001\n"
    );
    // Every path once (the order is checked in t60_ls_recursive_is_depth_first).
    let mut listed: Vec<String> = ctl_ok(&server, &["ls", "-R", "/"])
        .await
        .lines()
        .map(str::to_owned)
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        [
            "/app",
            "/app/job-0000000000",
            "/app/job-0000000000/sub",
            "/app/job-0000000001"
        ]
    );
    // A wrong version is refused, the right one works.
    let bad = ctl(&server, &["delete", "-v", "5", "/app/job-0000000001"]).await;
    assert_eq!(bad.code, Some(1));
    assert!(
        bad.stderr.starts_with("error: BAD_VERSION"),
        "{}",
        bad.stderr
    );
    ctl_ok(&server, &["delete", "-v", "0", "/app/job-0000000001"]).await;
    assert!(exists(&server, "/app/job-0000000001").await.is_none());

    for args in [
        &["get", "/app/job-0000000001"][..],
        &["stat", "/nope"],
        &["set", "/nope", "x"],
        &["delete", "/nope"],
        &["ls", "/nope"],
    ] {
        let out = ctl(&server, args).await;
        assert_eq!(out.code, Some(1), "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.starts_with("error: NO_NODE"),
            "{args:?}: {}",
            out.stderr
        );
        assert_eq!(out.stdout, "", "{args:?}");
    }

    let status = ctl_ok(&server, &["status"]).await;
    let applied = server
        .cluster()
        .await
        .status(pb::StatusRequest::default())
        .await
        .unwrap()
        .into_inner();
    for want in [
        "role = LEADER".to_owned(),
        "server_id = 1".to_owned(),
        format!("zxid = {:#x}", applied.zxid),
        format!("node_count = {}", applied.node_count),
    ] {
        assert!(
            status.lines().any(|l| l == want),
            "no {want:?} in\n{status}"
        );
    }
}

#[tokio::test]
async fn t60_ls_recursive_is_depth_first() {
    let server = Server::start(ServerOptions::default());
    // Pre-order: each node before its children, siblings by name (a regression test:
    // concordctl once printed every child before descending).
    for path in ["/a", "/a/x", "/a/x/1", "/b", "/b/z"] {
        ctl_ok(&server, &["create", path]).await;
    }
    assert_eq!(
        ctl_ok(&server, &["ls", "-R", "/"]).await,
        "/a\n/a/x\n/a/x/1\n/b\n/b/z\n"
    );
}

#[tokio::test]
async fn t60_ephemeral_create_lives_until_sigint() {
    let server = Server::start(ServerOptions::default());
    let mut holder = Background::spawn(&mut concordctl_command(
        &server,
        &["create", "-e", "--session-ttl", "300", "/eph", "mine"],
    ));
    holder
        .wait_stdout("the created path", WAIT, |o| o == "/eph\n")
        .await;
    let stat = exists(&server, "/eph").await.expect("the ephemeral exists");
    assert_ne!(stat.ephemeral_owner, 0);
    // It outlives its session's TTL several times over: the command keeps it alive.
    let until = tokio::time::Instant::now() + Duration::from_millis(1200);
    while tokio::time::Instant::now() < until {
        assert!(
            exists(&server, "/eph").await.is_some(),
            "the ephemeral expired"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    holder.signal("INT");
    let status = holder.wait_exit(WAIT).await;
    assert!(status.success(), "exit {status:?}: {}", holder.stderr());
    // Closed on the way out, not left to expire.
    assert!(exists(&server, "/eph").await.is_none());
    let sessions = server
        .session()
        .await
        .list(pb::ListSessionsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(sessions.sessions.is_empty(), "{sessions:?}");

    // -e -s: an ephemeral sequential node, same life.
    let mut seq = Background::spawn(&mut concordctl_command(
        &server,
        &["create", "-e", "-s", "/lock-"],
    ));
    seq.wait_stdout("the created path", WAIT, |o| o.ends_with('\n'))
        .await;
    // The root's cversion is 2 after /eph came and went.
    assert_eq!(seq.stdout(), "/lock-0000000002\n");
    let stat = exists(&server, "/lock-0000000002").await.expect("created");
    assert_ne!(stat.ephemeral_owner, 0);
    seq.signal("INT");
    assert!(seq.wait_exit(WAIT).await.success());
    assert!(exists(&server, "/lock-0000000002").await.is_none());
}

/// `zxid KIND path` lines of `concordctl watch`.
fn parse_events(stdout: &str) -> Vec<(u64, String, String)> {
    stdout
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            assert_eq!(f.len(), 3, "bad watch line {line:?}");
            (f[0].parse().unwrap(), f[1].to_owned(), f[2].to_owned())
        })
        .collect()
}

/// Creates (or, if it exists, sets) `path`; returns the events a recursive watch on
/// its parent's subtree sees.
async fn write(server: &Server, path: &str, create: bool) -> Vec<(u64, String, String)> {
    let mut tree = server.tree().await;
    if create {
        let req = pb::CreateRequest {
            path: path.into(),
            ..Default::default()
        };
        let z = tree
            .create(req)
            .await
            .unwrap()
            .into_inner()
            .header
            .unwrap()
            .zxid;
        let parent = &path[..path.rfind('/').unwrap()];
        vec![
            (z, "CREATED".into(), path.into()),
            (z, "CHILDREN_CHANGED".into(), parent.into()),
        ]
    } else {
        let req = pb::SetRequest {
            path: path.into(),
            version: -1,
            ..Default::default()
        };
        let z = tree
            .set(req)
            .await
            .unwrap()
            .into_inner()
            .header
            .unwrap()
            .zxid;
        vec![(z, "DATA_CHANGED".into(), path.into())]
    }
}

#[tokio::test]
async fn t60_watch_keeps_going_across_a_server_restart() {
    let mut server = Server::start(ServerOptions::default());
    write(&server, "/w", true).await;
    let mut expected = Vec::new();
    let count = 2 * 3 + 2 + 2 * 3 + 2;
    let mut watch = Background::spawn(&mut concordctl_command(
        &server,
        &["watch", "-r", "/w", "--count", &count.to_string()],
    ));
    eventually("the watch is registered", WAIT, || async {
        let s = server
            .cluster()
            .await
            .status(pb::StatusRequest::default())
            .await;
        (s.unwrap().into_inner().watch_count == 1).then_some(())
    })
    .await;
    for i in 0..3 {
        expected.extend(write(&server, &format!("/w/a{i}"), true).await);
    }
    expected.extend(write(&server, "/w/a0", false).await);
    expected.extend(write(&server, "/w/a1", false).await);
    let seen = expected.len();
    watch
        .wait_stdout("the events before the kill", WAIT, |o| {
            o.lines().count() >= seen
        })
        .await;

    server.kill9();
    server.restart();
    // Right after the restart, likely before the watch has reconnected.
    for i in 0..3 {
        expected.extend(write(&server, &format!("/w/b{i}"), true).await);
    }
    expected.extend(write(&server, "/w", false).await);
    expected.extend(write(&server, "/w/b2", false).await);
    assert_eq!(expected.len(), count);

    let status = watch.wait_exit(WAIT).await;
    assert!(status.success(), "exit {status:?}: {}", watch.stderr());
    let got = parse_events(&watch.stdout());
    assert_eq!(got, expected, "stderr: {}", watch.stderr());
    assert!(got.windows(2).all(|p| p[0].0 <= p[1].0));
}

/// The concordctl command lines of README.md, in order.
/// Watch count on the server (one per open Watch stream).
async fn watch_count(server: &Server) -> u64 {
    let s = server
        .cluster()
        .await
        .status(pb::StatusRequest::default())
        .await;
    s.unwrap().into_inner().watch_count
}

#[tokio::test]
async fn t60_a_watch_whose_reader_goes_away_ends_quietly() {
    let server = Server::start(ServerOptions::default());
    write(&server, "/gone", true).await;
    // `true` reads nothing and exits: the first event concordctl prints meets a closed
    // pipe. Under pipefail the pipeline's status is concordctl's.
    let line = format!(
        "set -o pipefail; {} --endpoint {} watch /gone | true",
        bin("concordctl").display(),
        server.endpoint()
    );
    let mut pipeline = Background::spawn(Command::new("bash").arg("-c").arg(&line));
    eventually("the watch is registered", WAIT, || async {
        (watch_count(&server).await == 1).then_some(())
    })
    .await;
    eventually("concordctl stops at the closed pipe", WAIT, || async {
        write(&server, "/gone", false).await;
        (watch_count(&server).await == 0).then_some(())
    })
    .await;
    let status = pipeline.wait_exit(WAIT).await;
    assert!(status.success(), "exit {status:?}: {}", pipeline.stderr());
    assert_eq!(pipeline.stderr(), "", "nothing on stderr");
}

fn readme_concordctl_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(workspace_dir().join("README.md")).unwrap();
    readme
        .lines()
        .filter(|l| l.starts_with("concordctl "))
        .map(|l| l.to_owned())
        .collect()
}

#[tokio::test]
async fn t60_readme_concordctl_commands_work_as_written() {
    let server = Server::start(ServerOptions::default());
    let commands = readme_concordctl_commands();
    assert!(commands.len() >= 6, "{commands:?}");
    let ctl = bin("concordctl");
    for text in &commands {
        // The README's own comments (`# ...`) are not part of the command.
        let line = text.split(" #").next().unwrap().trim();
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!(
                "exec {}",
                line.replacen("concordctl", &ctl.display().to_string(), 1)
            ))
            .env("CONCORD_ENDPOINT", server.endpoint());
        if line.starts_with("concordctl watch") {
            let mut watch = Background::spawn(&mut cmd);
            eventually("the watch is registered", WAIT, || async {
                let s = server
                    .cluster()
                    .await
                    .status(pb::StatusRequest::default())
                    .await;
                (s.unwrap().into_inner().watch_count == 1).then_some(())
            })
            .await;
            let events = write(&server, "/app/readme", true).await;
            let want = format!("{} CREATED /app/readme", events[0].0);
            watch
                .wait_stdout("the README watch's event", WAIT, |o| o.contains(&want))
                .await;
            watch.kill();
            continue;
        }
        let mut child = Background::spawn(&mut cmd);
        let status = child.wait_exit(WAIT).await;
        assert!(
            status.success(),
            "README command failed: {text}\n{}\n{}",
            child.stdout(),
            child.stderr()
        );
        let out = child.stdout();
        if let Some(comment) = text.split("# prints ").nth(1) {
            assert_eq!(out.trim(), comment.trim(), "{text}");
        }
        if line.starts_with("concordctl get --stat") {
            assert!(out.starts_with("{\"replicas\":3}\n"), "{out}");
        }
        if line.starts_with("concordctl ls -R /") {
            assert!(out.contains("/app/job-0000000000"), "{out}");
        }
    }
}
