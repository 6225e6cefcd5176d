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
        "concord.v1.Access",
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
/// The grpcurl commands of README.md's first grpcurl section (up to the lock
/// walkthrough, which `t50_readme_lock_walkthrough_works_as_written` runs), with
/// backslash continuations joined.
fn readme_grpcurl_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(workspace_dir().join("README.md")).unwrap();
    let mut commands = Vec::new();
    let mut pending = String::new();
    for line in readme.lines() {
        let line = line.trim_end();
        if line.starts_with(LOCK_SECTION) {
            break;
        }
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

/// The heading of README.md's lock walkthrough.
const LOCK_SECTION: &str = "### A lock held from two grpcurl sessions";

/// The commands of README.md's lock walkthrough, as the shell would read them: a
/// command runs from a `grpcurl -plaintext` line to the next blank, comment or grpcurl
/// line (quoted JSON may span lines). The `grpcurl ...` shorthand is left out.
fn readme_lock_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(workspace_dir().join("README.md")).unwrap();
    let section = readme.split(LOCK_SECTION).nth(1).unwrap();
    let block = section
        .split("```sh")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap();
    let mut commands: Vec<String> = Vec::new();
    let mut open = false;
    for line in block.lines() {
        if line.starts_with("grpcurl -plaintext") {
            commands.push(line.to_owned());
            open = true;
        } else if line.trim().is_empty() || line.starts_with('#') || line.starts_with("grpcurl") {
            open = false;
        } else if open {
            let last = commands.last_mut().unwrap();
            last.push('\n');
            last.push_str(line);
        }
    }
    commands
}

#[tokio::test]
async fn t50_readme_lock_walkthrough_works_as_written() {
    // A fresh server with the defaults: the session ids and tokens in the README
    // are the ones such a server hands out.
    let server = Server::start(ServerOptions::server_defaults());
    let grpcurl = grpcurl_path().display().to_string();
    let addr = server.addr.to_string();
    let commands = readme_lock_commands();
    assert_eq!(commands.len(), 10, "{commands:#?}");
    let mut bob: Option<Background> = None;
    for text in &commands {
        let line = text
            .replacen("grpcurl", &grpcurl, 1)
            .replace(README_ADDR, &addr);
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(format!("exec {line}"));
        if text.contains(r#""owner_id":"bob""#) {
            // Shell 2: bob waits in the server.
            bob = Some(Background::spawn(&mut cmd));
            continue;
        }
        let mut out = run(&mut cmd).await;
        if text.contains("Lock/Waiters") {
            // Bob's Acquire runs in "another shell": wait until he has queued.
            let deadline = tokio::time::Instant::now() + WAIT;
            while !out.stdout.contains("bob") && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                out = run(&mut cmd).await;
            }
        }
        let expect = |want: &str| {
            assert!(
                out.stdout.contains(want) || out.stderr.contains(want),
                "{text}: no {want:?} in\n{}\n{}",
                out.stdout,
                out.stderr
            )
        };
        if text.contains("/concord/locks/demo\"") {
            assert!(!out.ok, "a plain write into the reserved prefix succeeded");
            expect("PERMISSION_DENIED");
            continue;
        }
        assert!(out.ok, "{text}\n{}\n{}", out.stdout, out.stderr);
        if text.contains("Session/Open") {
            expect(r#""ttlMs": "20000""#);
        } else if text.contains(r#""owner_id":"alice""#) {
            expect(r#""key": "/concord/locks/demo/0000000000""#);
            expect(r#""token": "1099511627779""#);
        } else if text.contains("Lock/Waiters") {
            expect("alice");
            expect("bob");
        } else if text.contains("Lock/Release") {
            let bob = bob.as_mut().unwrap();
            bob.wait_stdout("bob's Acquire returns", WAIT, |o| {
                o.contains(r#""key": "/concord/locks/demo/0000000001""#)
                    && o.contains(r#""token": "1099511627780""#)
            })
            .await;
        } else if text.contains("Lock/Validate") {
            assert!(!out.stdout.contains(r#""valid": true"#), "{}", out.stdout);
        }
    }
    // The fenced Set again, with alice's dead token: FENCED, as the README says.
    let fenced = commands
        .iter()
        .find(|c| c.contains("Tree/Set") && c.contains("fence"))
        .unwrap()
        .replacen("grpcurl", &grpcurl, 1)
        .replace(README_ADDR, &addr);
    let out = run(Command::new("sh").arg("-c").arg(format!("exec {fenced}"))).await;
    assert!(!out.ok && out.stderr.contains("FENCED"), "{}", out.stderr);
}

#[tokio::test]
async fn t50_readme_grpcurl_commands_work_as_written() {
    // The README runs a server with the defaults, so a 10 s TTL is granted.
    let server = Server::start(ServerOptions::server_defaults());
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
        // The granted TTL is the one asked for (within the default [2 s, 20 s] range).
        let asked = command
            .split(r#""ttl_ms":"#)
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .unwrap_or_else(|| panic!("no ttl_ms in {command}"));
        expect(&format!(r#""ttlMs": "{asked}""#));
    } else if command.contains(r#""path":"/me""#) {
        expect(r#""path": "/me""#);
    } else if command.contains("Session/KeepAlive") {
        expect(&format!(r#""sessionId": "{session_id}""#));
        assert!(!stdout.contains(r#""expired": true"#), "{stdout}");
    } else if command.contains("Cluster/Status") {
        expect(r#""role": "LEADER""#);
    }
}
