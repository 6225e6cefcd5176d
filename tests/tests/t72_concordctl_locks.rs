//! `concordctl lock` and `concordctl elect` against a real server.

#![allow(clippy::unwrap_used)]

use std::process::Stdio;
use std::time::Duration;

use concord::Client;
use concord_tests::{bin, Server, ServerOptions};
use tokio::io::{AsyncBufReadExt, BufReader};

#[tokio::test]
async fn t72_lock_runs_the_command_with_the_token_and_releases() {
    let server = Server::start(ServerOptions::default());
    let out = tokio::process::Command::new(bin("concordctl"))
        .args(["--endpoint", &server.endpoint(), "lock", "job", "--"])
        .args([
            "sh",
            "-c",
            "echo $CONCORD_LOCK_KEY $CONCORD_LOCK_TOKEN; exit 3",
        ])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let mut words = stdout.split_whitespace();
    let key = words.next().unwrap();
    let token: u64 = words.next().unwrap().parse().unwrap();
    assert!(key.starts_with("/concord/locks/job/"), "{stdout}");
    assert!(token > 0);
    let c = Client::connect(server.endpoint()).await.unwrap();
    assert!(c.lock_waiters("job").await.unwrap().is_empty(), "released");
    assert!(!c.validate(key, token).await.unwrap());
}

#[tokio::test]
async fn t72_elect_prints_leadership_and_resigns_on_ctrl_c() {
    let server = Server::start(ServerOptions::default());
    let mut child = tokio::process::Command::new(bin("concordctl"))
        .args(["--endpoint", &server.endpoint(), "elect", "e", "--id", "me"])
        .args(["--value", "hello"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let found = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let leads = line.ends_with(" me hello");
            seen.push(line);
            if leads {
                return;
            }
        }
    })
    .await;
    assert!(found.is_ok(), "never led: {seen:?}");
    let c = Client::connect(server.endpoint()).await.unwrap();
    let leader = c.leader("e").await.unwrap().unwrap();
    assert_eq!(leader.participant_id, "me");
    let pid = child.id().unwrap().to_string();
    std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
    assert!(c.leader("e").await.unwrap().is_none(), "resigned");
}
