//! The real grpcurl against the real server: reflection (list, describe with the
//! proto comments), JSON calls, errors, a streaming watch, and every grpcurl command
//! line of README.md exactly as written (only the port changes), so the README stays
//! true.
//!
//! grpcurl comes from `$CONCORD_GRPCURL` (scripts/test.sh sets it), else from
//! `<workspace>/.venv/bin/grpcurl`; without either these tests fail and say so.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use concord_tests::{workspace_dir, Background, Server, ServerOptions};

/// Longest any single grpcurl run or wait may take.
const WAIT: Duration = Duration::from_secs(20);

/// The address README.md uses.
const README_ADDR: &str = "127.0.0.1:7181";
/// The session id README.md shows (what a fresh server running exactly its commands
/// assigns); replaced by the id the test's own Session/Open returns.
const README_SESSION_ID: &str = "1099511627779";

fn grpcurl_path() -> PathBuf {
    let path = match std::env::var_os("CONCORD_GRPCURL") {
        Some(p) => PathBuf::from(p),
        None => workspace_dir().join(".venv/bin/grpcurl"),
    };
    assert!(
        path.exists(),
        "grpcurl not found at {} (taken from $CONCORD_GRPCURL, else \
         <workspace>/.venv/bin/grpcurl): run scripts/test.sh, which installs it into \
         .venv and sets CONCORD_GRPCURL",
        path.display()
    );
    path
}

struct Output {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Runs a command to completion (bounded).
async fn run(command: &mut Command) -> Output {
    let mut child = Background::spawn(command);
    let status = child.wait_exit(WAIT).await;
    Output {
        ok: status.success(),
        stdout: child.stdout(),
        stderr: child.stderr(),
    }
}

/// `grpcurl -plaintext [-d DATA] ADDR METHOD...`
async fn grpcurl(server: &Server, data: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::new(grpcurl_path());
    cmd.arg("-plaintext");
    if let Some(d) = data {
        cmd.arg("-d").arg(d);
    }
    cmd.arg(server.addr.to_string()).args(args);
    run(&mut cmd).await
}

/// Like `grpcurl`, but the call must succeed; returns its stdout.
async fn grpcurl_ok(server: &Server, data: Option<&str>, args: &[&str]) -> String {
    let out = grpcurl(server, data, args).await;
    assert!(
        out.ok,
        "grpcurl {data:?} {args:?} failed:\n{}\n{}",
        out.stdout, out.stderr
    );
    out.stdout
}

#[tokio::test]
async fn t50_list_and_describe_through_reflection() {
    let server = Server::start(ServerOptions::default());
    let listed = grpcurl_ok(&server, None, &["list"]).await;
    let services: Vec<&str> = listed.lines().map(str::trim).collect();
    for want in [
        "concord.v1.Tree",
        "concord.v1.Session",
        "concord.v1.Watch",
        "concord.v1.Cluster",
        "concord.v1.Lock",
        "concord.v1.Election",
        "grpc.health.v1.Health",
    ] {
        assert!(services.contains(&want), "{want} not listed:\n{listed}");
    }
    let described = grpcurl_ok(&server, None, &["describe", "concord.v1.Tree"]).await;
    for want in [
        "concord.v1.Tree is a service:",
        "// The data tree: create, read, update and delete nodes.",
        "rpc Create ( .concord.v1.CreateRequest ) returns ( .concord.v1.CreateResponse );",
        "Errors: NODE_EXISTS, NO_NODE (parent missing)",
    ] {
        assert!(
            described.contains(want),
            "{want:?} missing from:\n{described}"
        );
    }
    let message = grpcurl_ok(&server, None, &["describe", "concord.v1.WatchRequest"]).await;
    assert!(
        message.contains("optional uint64 start_zxid = 6;")
            || message.contains("uint64 start_zxid = 6;"),
        "{message}"
    );
}

#[tokio::test]
async fn t50_create_get_and_error_in_json() {
    let server = Server::start(ServerOptions::default());
    // "aGVsbG8=" is base64 for "hello".
    let created = grpcurl_ok(
        &server,
        Some(r#"{"path":"/g","data":"aGVsbG8="}"#),
        &["concord.v1.Tree/Create"],
    )
    .await;
    assert!(created.contains(r#""path": "/g""#), "{created}");
    let got = grpcurl_ok(&server, Some(r#"{"path":"/g"}"#), &["concord.v1.Tree/Get"]).await;
    assert!(got.contains(r#""data": "aGVsbG8=""#), "{got}");
    assert!(got.contains(r#""dataLength": 5"#), "{got}");

    let missing = grpcurl(
        &server,
        Some(r#"{"path":"/nope"}"#),
        &["concord.v1.Tree/Get"],
    )
    .await;
    assert!(
        !missing.ok,
        "a Get of a missing node succeeded: {}",
        missing.stdout
    );
    assert!(missing.stderr.contains("NotFound"), "{}", missing.stderr);
    assert!(missing.stderr.contains("NO_NODE"), "{}", missing.stderr);
}

#[tokio::test]
async fn t50_streaming_watch_sees_a_create() {
    let server = Server::start(ServerOptions::default());
    let mut watch = Background::spawn(
        Command::new(grpcurl_path())
            .arg("-plaintext")
            .arg("-d")
            .arg(r#"{"path":"/w","recursive":true}"#)
            .arg(server.addr.to_string())
            .arg("concord.v1.Watch/Watch"),
    );
    watch
        .wait_stdout("the Started message", WAIT, |out| {
            out.contains(r#""started""#)
        })
        .await;
    grpcurl_ok(
        &server,
        Some(r#"{"path":"/w"}"#),
        &["concord.v1.Tree/Create"],
    )
    .await;
    watch
        .wait_stdout("a CREATED event for /w", WAIT, |out| {
            out.contains(r#""kind": "CREATED""#) && out.contains(r#""path": "/w""#)
        })
        .await;
    watch.kill();
}

/// The grpcurl command lines of README.md (a `\` continuation joined), in order.
fn readme_grpcurl_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(workspace_dir().join("README.md")).unwrap();
    let mut commands = Vec::new();
    let mut pending = String::new();
    for line in readme.lines() {
        let line = line.trim_end();
        if pending.is_empty() && !line.starts_with("grpcurl ") {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => pending.push_str(head),
            None => {
                pending.push_str(line);
                commands.push(std::mem::take(&mut pending));
            }
        }
    }
    commands
}

#[tokio::test]
async fn t50_readme_grpcurl_commands_work_as_written() {
    // The README runs a server with the default tick (1 s), so a 10 s TTL is granted.
    let server = Server::start(ServerOptions {
        tick_ms: 1000,
        ..ServerOptions::default()
    });
    let commands = readme_grpcurl_commands();
    assert!(
        commands.len() >= 10,
        "README grpcurl commands: {commands:?}"
    );
    let grpcurl = grpcurl_path();
    let addr = server.addr.to_string();
    let mut session_id = README_SESSION_ID.to_owned();
    for text in &commands {
        let line = text
            .replacen("grpcurl", &grpcurl.display().to_string(), 1)
            .replace(README_ADDR, &addr)
            .replace(README_SESSION_ID, &session_id);
        assert!(
            line.contains(&addr),
            "a README command without the address: {text}"
        );
        // `exec`: a streaming command is the shell itself, so killing it kills grpcurl.
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(format!("exec {line}"));
        if text.contains("Watch/Watch") {
            let mut watch = Background::spawn(&mut cmd);
            watch
                .wait_stdout("the Started message", WAIT, |o| o.contains(r#""started""#))
                .await;
            // The README created and set /demo before: the root watch sees new writes.
            grpcurl_ok(
                &server,
                Some(r#"{"path":"/readme"}"#),
                &["concord.v1.Tree/Create"],
            )
            .await;
            watch
                .wait_stdout("the event for /readme", WAIT, |o| o.contains("/readme"))
                .await;
            watch.kill();
            continue;
        }
        let out = run(&mut cmd).await;
        assert!(
            out.ok,
            "README command failed: {text}\nstdout:\n{}\nstderr:\n{}",
            out.stdout, out.stderr
        );
        check_readme_output(text, &out.stdout, &session_id);
        if text.contains("Session/Open") {
            session_id = json_string(&out.stdout, "sessionId");
        }
    }
}

/// The string value of `"key": "..."` in grpcurl's JSON output.
fn json_string(json: &str, key: &str) -> String {
    let start = format!("\"{key}\": \"");
    json.split(&start)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no {key} in {json}"))
        .to_owned()
}

/// What README.md says (or implies) each command prints.
fn check_readme_output(command: &str, stdout: &str, session_id: &str) {
    let expect = |want: &str| assert!(stdout.contains(want), "{command}: no {want:?} in\n{stdout}");
    if command.contains(" list") {
        expect("concord.v1.Tree");
    } else if command.contains("Tree/Get") {
        expect(r#""data": "djE=""#); // v1
    } else if command.contains("Tree/Set") {
        expect(r#""version": 1"#);
    } else if command.contains("Session/Open") {
        expect(r#""sessionId": ""#);
        expect(r#""ttlMs": "10000""#);
    } else if command.contains(r#""path":"/me""#) {
        expect(r#""path": "/me""#);
    } else if command.contains("Session/KeepAlive") {
        expect(&format!(r#""sessionId": "{session_id}""#));
        assert!(!stdout.contains(r#""expired": true"#), "{stdout}");
    } else if command.contains("Cluster/Status") {
        expect(r#""role": "LEADER""#);
    }
}
