//! `concordctl` as a user runs it, against the in-process fake server: output, exit
//! status, error format, stdin data and a resumed watch.

#[path = "../../sdk-rust/tests/fake/mod.rs"]
mod fake;

use std::process::Stdio;
use std::time::Duration;

use concord::proto::{EventKind, WatchEvent};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn concordctl(endpoint: &str, args: &[&str], stdin: Option<&[u8]>) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_concordctl"))
        .arg("--endpoint")
        .arg(endpoint)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn concordctl");
    let mut pipe = child.stdin.take().expect("stdin pipe");
    if let Some(data) = stdin {
        pipe.write_all(data).await.expect("write stdin");
    }
    drop(pipe);
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("concordctl finished in time")
        .expect("concordctl output");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[tokio::test]
async fn t40_create_get_and_error_exit() {
    let (endpoint, _state) = fake::start().await;
    let run = concordctl(&endpoint, &["create", "/x", "hello"], None).await;
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (0, "/x\n"),
        "{}",
        run.stderr
    );
    let run = concordctl(&endpoint, &["get", "/x"], None).await;
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (0, "hello\n"),
        "{}",
        run.stderr
    );

    let run = concordctl(&endpoint, &["create", "/y", "-"], Some(b"from stdin")).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let run = concordctl(&endpoint, &["get", "/y"], None).await;
    assert_eq!(run.stdout, "from stdin\n");

    let run = concordctl(&endpoint, &["get", "/nope"], None).await;
    assert_eq!(run.code, 1);
    assert_eq!(run.stderr, "error: NO_NODE: /nope does not exist\n");
    let run = concordctl(&endpoint, &["create", "/x"], None).await;
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.starts_with("error: NODE_EXISTS: "),
        "{}",
        run.stderr
    );
}

#[tokio::test]
async fn t41_unreachable_server_is_unavailable() {
    let run = concordctl("http://127.0.0.1:1", &["get", "/a"], None).await;
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.starts_with("error: UNAVAILABLE: "),
        "{}",
        run.stderr
    );
}

#[tokio::test]
async fn t42_ls_lists_every_page() {
    let (endpoint, _state) = fake::start().await;
    let run = concordctl(&endpoint, &["ls", "/"], None).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "c0\nc1\nc2\nc3\nc4\n");
}

#[tokio::test]
async fn t43_watch_prints_events_across_a_broken_stream() {
    let (endpoint, state) = fake::start().await;
    {
        let mut s = state.lock().expect("lock");
        for (zxid, path, data) in [(1, "/a", "1"), (2, "/b", "2"), (3, "/c", "3")] {
            s.log.push(WatchEvent {
                zxid,
                kind: EventKind::DataChanged as i32,
                path: path.into(),
                data: data.into(),
                ..WatchEvent::default()
            });
        }
        s.watch_breaks
            .insert(0, (1, tonic::Status::unavailable("connection reset")));
    }
    let args = ["watch", "/", "-r", "--data", "--from", "0", "--count", "3"];
    let run = concordctl(&endpoint, &args, None).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stdout,
        "1 DATA_CHANGED /a 1\n2 DATA_CHANGED /b 2\n3 DATA_CHANGED /c 3\n"
    );
    assert_eq!(
        state.lock().expect("lock").watch_starts,
        vec![Some(0), Some(0)]
    );
}

#[tokio::test]
async fn t44_ephemeral_create_holds_its_session_until_ctrl_c() {
    use tokio::io::AsyncBufReadExt;

    let (endpoint, state) = fake::start().await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_concordctl"))
        .args(["--endpoint", &endpoint, "create", "-e", "/eph", "x"])
        .args(["--session-ttl", "300"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn concordctl");
    let stdout = child.stdout.take().expect("stdout pipe");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let first = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("path printed in time")
        .expect("read stdout");
    assert_eq!(first.as_deref(), Some("/eph"));
    // The session is kept alive while the command runs...
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while state.lock().expect("lock").pings < 3 {
        assert!(tokio::time::Instant::now() < deadline, "no keep-alives");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(state.lock().expect("lock").closed.is_empty());
    // ...and closed on ctrl-c.
    let pid = child.id().expect("running").to_string();
    let kill = Command::new("kill").args(["-INT", &pid]).status().await;
    assert!(kill.expect("run kill").success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("exited in time")
        .expect("wait");
    assert_eq!(status.code(), Some(0));
    assert_eq!(state.lock().expect("lock").closed, vec![0x42]);
}
