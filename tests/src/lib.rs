//! Test harness: start real `concord` server processes on 127.0.0.1, talk to them,
//! kill them (-9 or SIGTERM), restart them on the same data folder and port.
//!
//! The binaries come from the same target folder as the test executable; build them
//! first with `cargo build --bins` (the project's test script does).

#![allow(clippy::unwrap_used)]

mod ensemble;
pub mod fencing;
pub mod histories;
pub mod linearizability;
mod proxy;
pub mod script;
pub use ensemble::{channel_at, children_at, create_at, tree_at, Ensemble};
pub use proxy::Proxies;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use concord_proto::v1 as pb;
use tonic::transport::Channel;

/// How long a server may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The number in environment variable `name`, or `default` if it is unset or not a
/// number: the knobs of the long runs (`T93_ROUNDS`, `T94_SEED`, ...).
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Path of a binary built in this workspace (`concord`, `concordctl`).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<test-exe> -> target/<profile>/<name>
    let dir = exe.parent().unwrap().parent().unwrap();
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --bins` first",
        path.display()
    );
    path
}

/// Flags for a server under test.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    pub tick_ms: u64,
    /// The range session TTLs are clamped to (None: the server's default).
    pub session_ttl_ms: Option<(u64, u64)>,
    pub snapshot_every_txns: u64,
    /// Extra flags passed as they are.
    pub extra: Vec<String>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            tick_ms: 50,
            session_ttl_ms: Some((100, 1000)),
            snapshot_every_txns: 100_000,
            extra: Vec::new(),
        }
    }
}

impl ServerOptions {
    /// The server's own defaults for the tick and session TTLs, as a user who
    /// passes no flags gets them.
    pub fn server_defaults() -> ServerOptions {
        ServerOptions {
            tick_ms: 100,
            session_ttl_ms: None,
            ..ServerOptions::default()
        }
    }
}

/// A running server process; killed when dropped.
pub struct Server {
    child: Option<Child>,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    options: ServerOptions,
    /// Where the server's stderr (its log) goes, kept across restarts.
    pub log_path: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Server {
    /// Starts a server on a fresh data folder and a free port.
    pub fn start(options: ServerOptions) -> Server {
        Server::start_on(options, "127.0.0.1:0")
    }

    /// Starts a server on a fresh data folder, listening for clients on `listen`.
    pub fn start_on(options: ServerOptions, listen: &str) -> Server {
        let tmp = tempfile::tempdir().unwrap();
        let data_dir = tmp.path().join("data");
        let log_path = tmp.path().join("server.log");
        let (child, addr) = spawn(&data_dir, listen, &options, &log_path);
        Server {
            child: Some(child),
            addr,
            data_dir,
            options,
            log_path,
            _tmp: tmp,
        }
    }

    /// `http://127.0.0.1:PORT`
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// An SDK client of the server, with a 2 s deadline per call (so a test that
    /// goes wrong fails instead of hanging).
    pub async fn sdk(&self) -> concord::Client {
        concord::Client::builder()
            .endpoint(self.endpoint())
            .call_timeout(Duration::from_secs(2))
            .connect()
            .await
            .unwrap()
    }

    /// A gRPC channel to the server.
    pub async fn channel(&self) -> Channel {
        Channel::from_shared(self.endpoint())
            .unwrap()
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await
            .unwrap()
    }

    pub async fn tree(&self) -> pb::tree_client::TreeClient<Channel> {
        pb::tree_client::TreeClient::new(self.channel().await)
    }

    pub async fn session(&self) -> pb::session_client::SessionClient<Channel> {
        pb::session_client::SessionClient::new(self.channel().await)
    }

    pub async fn watch(&self) -> pb::watch_client::WatchClient<Channel> {
        pb::watch_client::WatchClient::new(self.channel().await)
    }

    pub async fn cluster(&self) -> pb::cluster_client::ClusterClient<Channel> {
        pb::cluster_client::ClusterClient::new(self.channel().await)
    }

    /// `Cluster/Status` of this server.
    pub async fn status(&self) -> pb::StatusResponse {
        let mut cluster = self.cluster().await;
        cluster
            .status(pb::StatusRequest {})
            .await
            .unwrap()
            .into_inner()
    }

    /// Waits until this server logged that the bootstrap seed (each team's root and
    /// grants) is in place: before, team members are refused everything. Costs no
    /// request (a team's request rate is not touched).
    pub async fn wait_seeded(&self) {
        eventually("the access seed", Duration::from_secs(20), || async {
            self.log()
                .contains(concord_server::api::SEEDED)
                .then_some(())
        })
        .await;
    }

    /// `Cluster/Status` of this server, or None if it does not answer within a
    /// second (down, or refusing plain text).
    pub async fn try_status(&self) -> Option<pb::StatusResponse> {
        let channel = Channel::from_shared(self.endpoint())
            .unwrap()
            .connect_timeout(Duration::from_secs(1))
            .timeout(Duration::from_secs(1))
            .connect()
            .await
            .ok()?;
        let mut client = pb::cluster_client::ClusterClient::new(channel);
        let reply = client.status(pb::StatusRequest {}).await.ok()?;
        Some(reply.into_inner())
    }

    /// kill -9: no chance to flush anything.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether the process runs (it was not killed or terminated here).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The process id, while it runs (for `/proc` measurements).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends a signal by name (`STOP`, `CONT`, ...) with `kill`.
    pub fn signal(&self, name: &str) {
        let pid = self.child.as_ref().expect("the server is not running").id();
        let ok = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{name} {pid} failed");
    }

    /// SIGTERM, then wait (bounded) for a clean exit; returns whether it exited 0.
    pub fn terminate(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return false;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }

    /// Starts the server again on the same data folder and port.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop the server before restarting it");
        let (child, addr) = spawn(
            &self.data_dir,
            &self.addr.to_string(),
            &self.options,
            &self.log_path,
        );
        assert_eq!(addr, self.addr);
        self.child = Some(child);
    }

    /// Discards the stopped server's data as an operator would after losing its disk
    /// (`concord --discard-local-state` with its own flags): it rejoins empty, from
    /// the leader, when restarted. Panics if the command fails.
    pub fn discard_local_state(&self) {
        assert!(
            self.child.is_none(),
            "stop the server before discarding its data"
        );
        let out = command(&self.data_dir, &self.addr.to_string(), &self.options)
            .arg("--discard-local-state")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "--discard-local-state failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The server's log so far (all runs).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The redb file of this server.
    pub fn redb_path(&self) -> PathBuf {
        self.data_dir.join("concord.redb")
    }

    /// The options it was started with (`extra` holds e.g. its `--config` flags).
    pub fn options(&self) -> &ServerOptions {
        &self.options
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// `concord` with the flags of a server on `data_dir`, listening on `listen`.
fn command(data_dir: &Path, listen: &str, o: &ServerOptions) -> Command {
    let mut command = Command::new(bin("concord"));
    command
        .arg("--listen")
        .arg(listen)
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--tick-ms")
        .arg(o.tick_ms.to_string())
        .arg("--snapshot-every-txns")
        .arg(o.snapshot_every_txns.to_string())
        .args(o.session_ttl_ms.iter().flat_map(|(lo, hi)| {
            [
                "--session-ttl-min-ms".to_owned(),
                lo.to_string(),
                "--session-ttl-max-ms".to_owned(),
                hi.to_string(),
            ]
        }))
        .args(&o.extra);
    command
}

fn spawn(data_dir: &Path, listen: &str, o: &ServerOptions, log: &Path) -> (Child, SocketAddr) {
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut child = command(data_dir, listen, o)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(addr) = line.strip_prefix("listening ") {
                let _ = tx.send(addr.trim().to_owned());
            }
        }
    });
    match rx.recv_timeout(START_TIMEOUT) {
        Ok(addr) => (child, addr.parse().unwrap()),
        Err(_) => {
            let _ = child.kill();
            let log = std::fs::read_to_string(log).unwrap_or_default();
            panic!("the server did not start listening in {START_TIMEOUT:?}; its log:\n{log}");
        }
    }
}

/// Certificates made by `concord certs` in a temporary folder (removed on drop).
pub struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    /// `concord certs DIR --members MEMBERS --clients CLIENTS` into a fresh folder.
    pub fn generate(members: u64, clients: &[&str]) -> Certs {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new(bin("concord"))
            .arg("certs")
            .arg(dir.path())
            .args(["--members", &members.to_string()])
            .args(["--clients", &clients.join(",")])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "concord certs failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Certs { dir }
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A file in the folder (`ca.pem`, `admin-key.pem`, ...).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Server flags for member `id`'s client port: TLS with `server-ID.pem`, and
    /// with `mtls` client certificates signed by the CA required.
    pub fn server_flags(&self, id: u64, mtls: bool) -> Vec<String> {
        let mut flags = vec![
            "--cert-file".to_owned(),
            self.path(&format!("server-{id}.pem")).display().to_string(),
            "--key-file".to_owned(),
            self.path(&format!("server-{id}-key.pem"))
                .display()
                .to_string(),
        ];
        if mtls {
            flags.push("--trusted-ca-file".to_owned());
            flags.push(self.path("ca.pem").display().to_string());
        }
        flags
    }

    /// Server flags for mTLS on the peer port, with `{id}` for the member's id
    /// (`Ensemble::start` fills it in).
    pub fn peer_flags(&self) -> Vec<String> {
        vec![
            "--peer-cert-file".to_owned(),
            self.path("peer-{id}.pem").display().to_string(),
            "--peer-key-file".to_owned(),
            self.path("peer-{id}-key.pem").display().to_string(),
            "--peer-trusted-ca-file".to_owned(),
            self.path("ca.pem").display().to_string(),
        ]
    }

    /// SDK TLS options trusting the CA, presenting client certificate `client`.
    pub fn tls_options(&self, client: Option<&str>) -> concord::TlsOptions {
        let tls = concord::TlsOptions::with_ca(self.path("ca.pem"));
        match client {
            Some(name) => tls.identity(
                self.path(&format!("{name}.pem")),
                self.path(&format!("{name}-key.pem")),
            ),
            None => tls,
        }
    }

    /// concordctl's flags for client certificate `client`.
    pub fn ctl_flags(&self, client: &str) -> Vec<String> {
        vec![
            "--cacert".to_owned(),
            self.path("ca.pem").display().to_string(),
            "--cert".to_owned(),
            self.path(&format!("{client}.pem")).display().to_string(),
            "--key".to_owned(),
            self.path(&format!("{client}-key.pem"))
                .display()
                .to_string(),
        ]
    }
}

/// The exit code and stderr of a `concord` started with `flags` (on a fresh data
/// folder, clients on port 0) that must refuse to start, waited for at most 30 s.
pub async fn start_refused(flags: &[String]) -> (Option<i32>, String) {
    let data = tempfile::tempdir().unwrap();
    let mut child = Background::spawn(
        Command::new(bin("concord"))
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data.path())
            .args(flags),
    );
    let code = child.wait_exit(Duration::from_secs(30)).await.code();
    (code, child.stderr())
}

/// Polls `check` until it returns Some, or panics after `timeout` naming `what`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The machine-readable code of a failed call.
pub fn code_of(status: &tonic::Status) -> String {
    status
        .metadata()
        .get("concord-error-code")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

/// Writes `toml` to a temporary file, for `ServerOptions::extra`
/// (`--config PATH`, keys of the server's `Config`). The file is removed when the
/// returned path is dropped: keep it alive as long as the server (restarts read it
/// again).
pub fn config_file(toml: &str) -> tempfile::TempPath {
    let file = tempfile::Builder::new()
        .prefix("concord-")
        .suffix(".toml")
        .tempfile()
        .unwrap();
    std::fs::write(file.path(), toml).unwrap();
    file.into_temp_path()
}

/// `ServerOptions::extra` flags that load the config file at `path`.
pub fn config_flags(path: &Path) -> Vec<String> {
    vec!["--config".into(), path.display().to_string()]
}

/// The workspace's root folder (the parent of this crate).
pub fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A child process (a CLI under test) whose stdout and stderr are collected as they
/// come, so a test can wait for a line while it runs. Killed when dropped.
pub struct Background {
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Background {
    /// Spawns `command` with stdin closed and stdout/stderr captured.
    pub fn spawn(command: &mut Command) -> Background {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {command:?}: {e}"));
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let readers = vec![
            collect(child.stdout.take().unwrap(), Arc::clone(&stdout)),
            collect(child.stderr.take().unwrap(), Arc::clone(&stderr)),
        ];
        Background {
            child,
            stdout,
            stderr,
            readers,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything printed on stdout so far.
    pub fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// Everything printed on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until `check(stdout so far)` holds; panics after `timeout` with both
    /// outputs.
    pub async fn wait_stdout(&self, what: &str, timeout: Duration, check: impl Fn(&str) -> bool) {
        let deadline = tokio::time::Instant::now() + timeout;
        while !check(&self.stdout()) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out after {timeout:?} waiting for {what}; stdout:\n{}\nstderr:\n{}",
                self.stdout(),
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits (30 s at most) for a `concord` process's `listening ADDR` line and
    /// returns ADDR.
    pub async fn listening_addr(&self) -> String {
        let addr = |out: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix("listening "))
                .map(|a| a.trim().to_owned())
        };
        self.wait_stdout("listening", Duration::from_secs(30), |o| addr(o).is_some())
            .await;
        addr(&self.stdout()).unwrap()
    }

    /// Sends a signal by name (`INT`, `TERM`, ...) with `kill`.
    pub fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{name} {} failed", self.pid());
    }

    /// Waits (bounded) for the process to exit, then for its output to be read in
    /// full; returns the exit status. Panics after `timeout`.
    pub async fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                for reader in self.readers.drain(..) {
                    let _ = reader.join();
                }
                return status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the process did not exit in {timeout:?}; stdout:\n{}\nstderr:\n{}",
                self.stdout(),
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// kill -9 and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Appends everything `pipe` yields to `into`, on a thread, until it closes.
fn collect(
    mut pipe: impl std::io::Read + Send + 'static,
    into: Arc<Mutex<String>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => into
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n])),
            }
        }
    })
}

/// A free port on 127.0.0.1, for a listener a server binds itself (such as
/// `--metrics-addr`, or an ensemble member's client and peer ports).
pub fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_ports(1)))
}

/// The first of `span` consecutive ports on 127.0.0.1 that are all free right now,
/// and that no other call in this process has handed out.
///
/// A port is found free by binding it and letting it go, so something else may
/// take it before the server binds it. Two things make that unlikely: the ports are
/// drawn below the kernel's ephemeral range (32768 and up on Linux), which every
/// `bind(":0")` and every outgoing connection takes its port from (a proxy's
/// listener once took a port handed out for a server's peer port); and calls in one
/// process walk the range in turn from a random start, so parallel tests in one
/// binary never share a port, and processes seldom do.
pub fn free_ports(span: u16) -> u16 {
    use std::hash::{BuildHasher, RandomState};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::OnceLock;
    const FIRST: u32 = 20_000;
    const COUNT: u32 = 12_000;
    static NEXT: OnceLock<AtomicU32> = OnceLock::new();
    let next = NEXT.get_or_init(|| {
        let draw = RandomState::new().hash_one(std::process::id());
        AtomicU32::new((draw % u64::from(COUNT)) as u32)
    });
    let span = span.max(1);
    let span32 = u32::from(span);
    for _ in 0..COUNT / span32 {
        let at = next.fetch_add(span32, Ordering::Relaxed) % (COUNT - span32);
        let base = (FIRST + at) as u16;
        let free = (base..base + span)
            .all(|port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok());
        if free {
            return base;
        }
    }
    panic!(
        "no {span} free consecutive ports in {FIRST}..{}",
        FIRST + COUNT
    );
}

/// A plain HTTP/1.1 GET of `path` at `addr`, within `timeout`: the status code and
/// the body, or None if the connection fails (nothing listens yet, or it closed).
pub async fn http_get(addr: SocketAddr, path: &str, timeout: Duration) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.ok()?;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n")?;
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((status, body.to_owned()))
    };
    tokio::time::timeout(timeout, exchange).await.ok().flatten()
}

/// A Get of `path` with default read options.
pub fn get_req(path: impl Into<String>) -> pb::GetRequest {
    pb::GetRequest {
        path: path.into(),
        ..Default::default()
    }
}

/// An Exists of `path` with default read options.
pub fn exists_req(path: impl Into<String>) -> pb::ExistsRequest {
    pb::ExistsRequest {
        path: path.into(),
        ..Default::default()
    }
}

/// A Delete of `path` expecting `version` (-1: any).
pub fn delete_req(path: impl Into<String>, version: i32) -> pb::DeleteRequest {
    pb::DeleteRequest {
        path: path.into(),
        version,
        ..Default::default()
    }
}

impl Server {
    /// Whether `path` exists, read from this server.
    pub async fn exists(&self, path: &str) -> bool {
        self.tree()
            .await
            .exists(exists_req(path))
            .await
            .unwrap()
            .into_inner()
            .exists
    }
}
