//! Connection bounds (issue 10, point 6) against real server processes: a flood of
//! idle sockets under a low open-file limit neither locks clients out nor makes the
//! accept loop spin; sockets that never send are closed after the idle timeout,
//! while a live client that only answers keep-alive pings is kept; the stream cap
//! is announced to clients; the soft open-file limit is raised to the hard one.

#![allow(clippy::unwrap_used)]

mod watch_util;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use concord_proto::v1 as pb;
use concord_tests::{bin, eventually, Background, Server, ServerOptions};
use tonic::transport::Channel;

/// Idle timeout and keep-alive interval the tests run with (the idle timeout must be
/// at least two intervals).
const IDLE_MS: u64 = 1500;
const KEEPALIVE_MS: u64 = 400;

fn connection_flags() -> Vec<String> {
    [
        "--connection-idle-timeout-ms",
        &IDLE_MS.to_string(),
        "--http2-keepalive-interval-ms",
        &KEEPALIVE_MS.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A server started through `sh -c 'ulimit ARGS && exec concord ...'`, so it runs
/// under the given open-file limit.
struct Limited {
    process: Background,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

async fn start_limited(ulimit: &str, flags: &[String]) -> Limited {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(format!("ulimit {ulimit} && exec \"$0\" \"$@\""))
        .arg(bin("concord"))
        .args(["--listen", "127.0.0.1:0", "--tick-ms", "50", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(flags);
    let process = Background::spawn(&mut command);
    let addr = process.listening_addr().await.parse().unwrap();
    Limited {
        process,
        addr,
        _dir: dir,
    }
}

/// User plus system CPU time of a process so far, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which ends with the last ')'): state is the
    // 3rd field of the whole line, utime the 14th and stime the 15th.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    let per_second = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .unwrap_or(100.0);
    ticks / per_second
}

/// Whether the server closed `socket` before `deadline` (it may first send its
/// HTTP/2 settings; anything up to EOF is read and dropped).
fn closed_by(socket: &mut TcpStream, deadline: Instant) -> bool {
    socket
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut buf = [0u8; 4096];
    let mut total = 0;
    while Instant::now() < deadline && total < 1 << 20 {
        match socket.read(&mut buf) {
            Ok(0) => return true,
            Ok(n) => total += n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

/// One Exists call on a fresh connection, bounded in time; whether it was served.
async fn served(addr: SocketAddr) -> bool {
    let attempt = async {
        let channel = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_timeout(Duration::from_secs(1))
            .connect()
            .await
            .ok()?;
        let mut tree = pb::tree_client::TreeClient::new(channel);
        tree.exists(concord_tests::exists_req("/")).await.ok()
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), attempt).await,
        Ok(Some(_))
    )
}

/// The scenario: open-file limit 128, 300 idle sockets. The cap (fitted
/// under the limit) refuses the extras at once, the idle timeout closes the rest,
/// a real client gets served, and the server's CPU stays low meanwhile (before:
/// every client locked out for good, and the accept loop spinning at 75-99%).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t42_idle_flood_under_a_low_file_limit_neither_locks_out_nor_spins() {
    let server = start_limited("-n 128", &connection_flags()).await;
    let pid = server.process.pid();
    let cpu_before = cpu_seconds(pid);
    let started = Instant::now();
    let mut idle: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(server.addr).unwrap())
        .collect();
    eventually(
        "a real client is served despite 300 idle sockets",
        Duration::from_secs(20),
        || async { served(server.addr).await.then_some(()) },
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let open = tokio::task::block_in_place(|| {
        idle.iter_mut()
            .map(|s| closed_by(s, deadline))
            .filter(|closed| !closed)
            .count()
    });
    assert_eq!(open, 0, "idle sockets still open after the idle timeout");
    let wall = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid) - cpu_before;
    assert!(
        cpu < 0.25 * wall,
        "the server used {cpu:.2} s of CPU in {wall:.2} s; log:\n{}",
        server.process.stderr()
    );
    assert!(
        server
            .process
            .stderr()
            .contains("connection cap does not fit under the open-file limit"),
        "the cap was not fitted under the limit"
    );
    // And it still serves afterwards.
    assert!(served(server.addr).await);
}

/// A socket that never sends (no HTTP/2 preface), or stops half-way through the
/// preface, is closed after the idle timeout; a live client whose only traffic is
/// answering keep-alive pings keeps its connection and its watch stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t42_silent_sockets_are_closed_and_live_clients_kept() {
    let server = Server::start(ServerOptions {
        extra: connection_flags(),
        ..ServerOptions::default()
    });
    let mut watch = watch_util::open(
        &server,
        pb::WatchRequest {
            path: "/w".into(),
            progress_interval_ms: 600_000,
            ..Default::default()
        },
    )
    .await;
    watch_util::started(&mut watch).await;
    let opened = Instant::now();
    let addr = server.addr;
    // Blocking reads off the runtime, so the watch's connection keeps answering pings.
    let (silent, partial) = tokio::task::spawn_blocking(move || {
        let mut silent = TcpStream::connect(addr).unwrap();
        let mut partial = TcpStream::connect(addr).unwrap();
        partial.write_all(b"PRI * HTTP/2.0\r\n").unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        (
            closed_by(&mut silent, deadline),
            closed_by(&mut partial, deadline),
        )
    })
    .await
    .unwrap();
    assert!(silent, "a silent socket was kept");
    assert!(partial, "a half preface was kept");
    assert!(
        opened.elapsed() >= Duration::from_millis(IDLE_MS),
        "closed before the idle timeout: {:?}",
        opened.elapsed()
    );
    // Well past the idle timeout: the watch's connection is still up.
    let quiet_until = opened + Duration::from_millis(2 * IDLE_MS);
    tokio::time::sleep(quiet_until.saturating_duration_since(Instant::now())).await;
    let mut tree = server.tree().await;
    tree.create(pb::CreateRequest {
        path: "/w".into(),
        data: b"x".to_vec().into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let events = watch_util::take_events(&mut watch, 1).await;
    assert_eq!(events[0].path, "/w");
}

/// The stream cap reaches clients as HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS.
#[tokio::test]
async fn t42_the_stream_cap_is_announced() {
    let mut extra = connection_flags();
    extra.extend(["--client-streams-per-connection-max".into(), "7".into()]);
    let server = Server::start(ServerOptions {
        extra,
        ..ServerOptions::default()
    });
    let mut socket = TcpStream::connect(server.addr).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // Client preface, then an empty SETTINGS frame.
    socket
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .unwrap();
    socket.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).unwrap();
    let mut announced = None;
    for _ in 0..8 {
        let mut header = [0u8; 9];
        socket.read_exact(&mut header).unwrap();
        let len =
            usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
        let mut payload = vec![0u8; len];
        socket.read_exact(&mut payload).unwrap();
        let (kind, flags) = (header[3], header[4]);
        if kind == 4 && flags & 1 == 0 {
            announced = payload.chunks_exact(6).find_map(|s| {
                (u16::from_be_bytes([s[0], s[1]]) == 3)
                    .then(|| u32::from_be_bytes([s[2], s[3], s[4], s[5]]))
            });
            break;
        }
    }
    assert_eq!(announced, Some(7));
}

/// The soft open-file limit is raised to the hard one at start-up.
#[tokio::test]
async fn t42_the_soft_open_file_limit_is_raised_to_the_hard_one() {
    let (_, hard) = open_files("self");
    if hard.is_some_and(|h| h <= 100) {
        eprintln!("skipped: the hard open-file limit is {hard:?}");
        return;
    }
    let server = start_limited("-S -n 100", &[]).await;
    let (soft, hard_there) = open_files(&server.process.pid().to_string());
    assert_eq!(hard_there, hard);
    assert!(
        soft != Some(100) && (soft == hard || soft == Some(1 << 20)),
        "soft {soft:?}, hard {hard:?}"
    );
}

/// (soft, hard) "Max open files" of a process (None: unlimited).
fn open_files(pid: &str) -> (Option<u64>, Option<u64>) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let values: Vec<Option<u64>> = line["Max open files".len()..]
        .split_whitespace()
        .take(2)
        .map(|v| v.parse().ok())
        .collect();
    (values[0], values[1])
}
