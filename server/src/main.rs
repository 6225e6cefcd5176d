//! `concord`: run one Concord server. Parses flags over an optional TOML config file,
//! binds the client address, and calls `concord_server::run` until SIGTERM or ctrl-c.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use concord_server::Config;

/// mimalloc: the write path allocates many small buffers per request, and glibc's
/// malloc showed up as the top user-space cost in profiles of 64-writer runs.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Flags override the config file, which overrides the defaults.
#[derive(Parser, Debug)]
#[command(name = "concord", version, about = "Concord coordination server")]
struct Args {
    /// TOML config file (keys as in `Config`: server_id, client_addr, data_dir, ...).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// This server's id.
    #[arg(long)]
    server_id: Option<u64>,
    /// Client address to listen on (port 0 picks a free port; the chosen address is
    /// printed on stdout as `listening ADDR` once the server serves).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Folder for the log, epochs and snapshots.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The tick: Zab heartbeats, session expiry and keep-alive report cadence.
    #[arg(long)]
    tick_ms: Option<u64>,
    /// Shortest session TTL granted (at least 2 ticks).
    #[arg(long)]
    session_ttl_min_ms: Option<u64>,
    /// Longest session TTL granted.
    #[arg(long)]
    session_ttl_max_ms: Option<u64>,
    /// TTL granted when a client asks for 0.
    #[arg(long)]
    session_ttl_default_ms: Option<u64>,
    /// Take a snapshot every this many txns.
    #[arg(long)]
    snapshot_every_txns: Option<u64>,
    /// Take a snapshot every this many bytes of txns (or txns, whichever first).
    #[arg(long)]
    snapshot_every_bytes: Option<u64>,
    /// Most bytes the in-memory log holds before a leader makes writers wait (and
    /// a follower stops reading its leader) for the snapshot in progress.
    #[arg(long)]
    log_memory_bytes_max: Option<u64>,
    /// Largest node data, in bytes.
    #[arg(long)]
    node_data_bytes_max: Option<usize>,
    /// Per-watch queue, in bytes of events; a consumer this far behind is cut off.
    #[arg(long)]
    watch_queue_bytes_max: Option<usize>,
    /// All watch streams' queued events and read-ahead together, in bytes.
    #[arg(long)]
    watch_memory_bytes_max: Option<usize>,
    /// Allow plain text on a non-loopback address.
    #[arg(long)]
    insecure: bool,
    /// Discard this server's local state and exit: moves DATA_DIR/concord.redb aside
    /// (renamed concord.redb.discarded-<unix seconds>, never deleted) and leaves an
    /// empty store that keeps the epochs. Started again as usual, an ensemble member
    /// rejoins by SNAP from the leader and does not vote until it has; a single
    /// server starts EMPTY (its data is lost unless restored from a backup). See
    /// docs/operations.md, "Corruption and recovery".
    #[arg(long)]
    discard_local_state: bool,

    // Connections (client port).
    /// Open client connections at most (lowered to fit under the open-file limit).
    #[arg(long)]
    client_connections_max: Option<usize>,
    /// Concurrent HTTP/2 streams per client connection.
    #[arg(long)]
    client_streams_per_connection_max: Option<u32>,
    /// Close a client connection from which nothing was read for this long.
    #[arg(long)]
    connection_idle_timeout_ms: Option<u64>,
    /// Ping a client connection after this long without input (HTTP/2 keep-alive).
    #[arg(long)]
    http2_keepalive_interval_ms: Option<u64>,
    /// Close a connection whose keep-alive ping is unanswered for this long.
    #[arg(long)]
    http2_keepalive_timeout_ms: Option<u64>,

    // Metrics.
    /// Serve /metrics (Prometheus text), /healthz and /readyz here (off when unset):
    /// HTTPS with the client port's certificate when it serves TLS, any address;
    /// plain HTTP otherwise, loopback only unless --insecure.
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
    /// Serve only /healthz and /readyz here, plain HTTP, any address (for probes
    /// without a certificate; off when unset).
    #[arg(long)]
    health_addr: Option<SocketAddr>,
    /// Serve ZooKeeper's client protocol here, for ZooKeeper's own clients (off when
    /// unset): TLS as the client port when it serves TLS; plain text otherwise,
    /// loopback only unless --insecure. Prints `zookeeper listening ADDR` once bound.
    #[arg(long)]
    zookeeper_addr: Option<SocketAddr>,
    /// Warn (and count) when a durable log append takes longer than this.
    #[arg(long)]
    fsync_warn_threshold_ms: Option<u64>,

    // Traces.
    /// Export OpenTelemetry spans over OTLP/gRPC to this collector, as
    /// http://HOST:PORT (plain text: loopback only unless --insecure) or
    /// https://HOST:PORT (TLS, with --otlp-ca-file); off when unset.
    #[arg(long)]
    otlp_endpoint: Option<String>,
    /// CA certificates (PEM) that sign the https:// collector's certificate.
    #[arg(long)]
    otlp_ca_file: Option<PathBuf>,
    /// A client certificate (PEM) for a collector that asks for one.
    #[arg(long)]
    otlp_cert_file: Option<PathBuf>,
    /// The private key of --otlp-cert-file (PEM).
    #[arg(long)]
    otlp_key_file: Option<PathBuf>,
    /// Share of traces no caller started that are sampled, 0 to 1 (default 0.01).
    #[arg(long)]
    otlp_sample_ratio: Option<f64>,

    // Failover for calls in flight.
    /// Longest a write waits for a leader (election, unreachable leader) before it
    /// fails with NOT_LEADER.
    #[arg(long)]
    leader_wait_ms_max: Option<u64>,

    // Threads.
    /// Threads that run the server's tasks (0: one on at most 2 CPUs, one per CPU
    /// above that); the disk has threads of its own besides.
    #[arg(long)]
    runtime_threads: Option<usize>,

    // TLS (docs/security.md, "TLS and certificates").
    #[command(flatten)]
    tls: TlsArgs,

    #[command(subcommand)]
    command: Option<Command>,
}

/// The TLS flags, named as etcd's.
#[derive(clap::Args, Debug)]
struct TlsArgs {
    /// Client port certificate (PEM); with --key-file the client port serves TLS only.
    #[arg(long)]
    cert_file: Option<PathBuf>,
    /// Private key of --cert-file (PEM).
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// CA certificates (PEM): clients must present a certificate signed by one.
    #[arg(long)]
    trusted_ca_file: Option<PathBuf>,
    /// This server's peer certificate (PEM): mTLS on the peer port and on its links
    /// to the other members (with --peer-key-file and --peer-trusted-ca-file).
    #[arg(long)]
    peer_cert_file: Option<PathBuf>,
    /// Private key of --peer-cert-file (PEM).
    #[arg(long)]
    peer_key_file: Option<PathBuf>,
    /// CA certificates (PEM) that sign the members' peer certificates.
    #[arg(long)]
    peer_trusted_ca_file: Option<PathBuf>,
    /// Close a TLS handshake not done after this long.
    #[arg(long)]
    tls_handshake_timeout_ms: Option<u64>,
    /// Check the TLS files for changes this often (SIGHUP reloads at once).
    #[arg(long)]
    tls_reload_interval_ms: Option<u64>,
}

impl TlsArgs {
    fn apply(&self, c: &mut Config) {
        let files = [
            (&self.cert_file, &mut c.cert_file),
            (&self.key_file, &mut c.key_file),
            (&self.trusted_ca_file, &mut c.trusted_ca_file),
            (&self.peer_cert_file, &mut c.peer_cert_file),
            (&self.peer_key_file, &mut c.peer_key_file),
            (&self.peer_trusted_ca_file, &mut c.peer_trusted_ca_file),
        ];
        for (flag, setting) in files {
            if let Some(v) = flag {
                *setting = Some(v.clone());
            }
        }
        if let Some(v) = self.tls_handshake_timeout_ms {
            c.tls_handshake_timeout_ms = v;
        }
        if let Some(v) = self.tls_reload_interval_ms {
            c.tls_reload_interval_ms = v;
        }
    }
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Write a development CA and certificates for an ensemble and its clients.
    ///
    /// Into DIR: ca.pem, ca-key.pem; per member N server-N.pem/-key.pem (client port,
    /// SANs 127.0.0.1, ::1, localhost and every --dns and --ip) and peer-N.pem/-key.pem
    /// (DNS SAN concord-peer-N); per client NAME.pem/-key.pem (CN = NAME). Keys are
    /// 0600. A bad name or address: exit status 2, nothing written.
    Certs(CertsArgs),
    /// Make a new data folder from a backup file (`concordctl snapshot save`).
    ///
    /// Checks the file whole first (checksums, and every check of the tree) and
    /// refuses a DIR that is not empty. A server started on DIR serves the
    /// restored tree; for an ensemble, restore every member from the same file.
    /// Exit status: 0 done, 1 reading or writing failed, 2 usage, 3 the file is not
    /// a good backup (damaged, truncated, not a backup), 4 DIR is not empty. See
    /// docs/operations.md, "Backup and restore".
    Restore(RestoreArgs),
}

#[derive(clap::Args, Debug)]
struct RestoreArgs {
    /// The backup file.
    file: PathBuf,
    /// The data folder to make (missing or empty).
    #[arg(long)]
    data_dir: PathBuf,
}

/// `concord restore`: makes the folder and says what it holds.
fn restore(args: &RestoreArgs) -> ExitCode {
    match concord_server::replica::restore(&args.file, &args.data_dir) {
        Ok(r) => {
            println!(
                "restored {} into {}: zxid {:#x}, {} nodes, {} sessions",
                args.file.display(),
                r.store.display(),
                r.zxid,
                r.node_count,
                r.session_count
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: restore failed: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

#[derive(clap::Args, Debug)]
struct CertsArgs {
    /// Where to write (created if missing).
    dir: PathBuf,
    /// Members of the ensemble (1..=N get certificates).
    #[arg(long, default_value_t = 3)]
    members: u64,
    /// Client certificates to make, comma-separated names.
    #[arg(long, value_delimiter = ',', default_value = "admin")]
    clients: Vec<String>,
    /// Overwrite existing files.
    #[arg(long)]
    force: bool,
    /// A DNS name every member's client-port certificate also carries (a host, a
    /// pod, a Service; `*.` for a wildcard); repeat or separate with commas.
    #[arg(long, value_name = "NAME", value_delimiter = ',', value_parser = dns_name)]
    dns: Vec<String>,
    /// An IP address every member's client-port certificate also carries; repeat or
    /// separate with commas.
    #[arg(long, value_name = "ADDR", value_delimiter = ',')]
    ip: Vec<std::net::IpAddr>,
}

/// `--dns`: a name a certificate can carry.
fn dns_name(name: &str) -> Result<String, String> {
    concord_server::security::certs::check_dns_name(name).map_err(|e| e.to_string())
}

/// `concord certs`: writes the files and lists them.
fn certs(args: &CertsArgs) -> ExitCode {
    let plan = concord_server::security::certs::Plan {
        members: args.members,
        clients: args.clients.clone(),
        force: args.force,
        dns: args.dns.clone(),
        ips: args.ip.clone(),
    };
    match concord_server::security::certs::write(&args.dir, &plan) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

impl Args {
    fn into_config(self) -> Result<Config, concord_server::config::ConfigError> {
        let mut c = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        self.connection_flags(&mut c);
        self.tls.apply(&mut c);
        if let Some(v) = self.server_id {
            c.server_id = v;
        }
        if let Some(v) = self.runtime_threads {
            c.runtime_threads = v;
        }
        if let Some(v) = self.listen {
            c.client_addr = v;
        }
        if let Some(v) = self.data_dir {
            c.data_dir = v;
        }
        if let Some(v) = self.tick_ms {
            c.tick_ms = v;
        }
        if let Some(v) = self.session_ttl_min_ms {
            c.session_ttl_min_ms = v;
        }
        if let Some(v) = self.session_ttl_max_ms {
            c.session_ttl_max_ms = v;
        }
        if self.session_ttl_min_ms.is_some() || self.session_ttl_max_ms.is_some() {
            // Keep the default TTL inside the new range unless set explicitly.
            let (lo, hi) = c.session_ttl_range_ms();
            c.session_ttl_default_ms = c.session_ttl_default_ms.clamp(lo, hi.max(lo));
        }
        if let Some(v) = self.session_ttl_default_ms {
            c.session_ttl_default_ms = v;
        }
        if let Some(v) = self.snapshot_every_txns {
            c.snapshot_every_txns = v;
        }
        if let Some(v) = self.snapshot_every_bytes {
            c.snapshot_every_bytes = v;
        }
        if let Some(v) = self.log_memory_bytes_max {
            c.log_memory_bytes_max = v;
        }
        if let Some(v) = self.node_data_bytes_max {
            c.node_data_bytes_max = v;
        }
        if let Some(v) = self.watch_queue_bytes_max {
            c.watch_queue_bytes_max = v;
        }
        if let Some(v) = self.watch_memory_bytes_max {
            c.watch_memory_bytes_max = v;
        }
        c.insecure |= self.insecure;
        if let Some(v) = self.leader_wait_ms_max {
            c.leader_wait_ms_max = v;
        }
        if let Some(v) = self.metrics_addr {
            c.metrics_addr = Some(v);
        }
        if let Some(v) = self.health_addr {
            c.health_addr = Some(v);
        }
        if let Some(v) = self.zookeeper_addr {
            c.zookeeper_addr = Some(v);
        }
        if let Some(v) = self.fsync_warn_threshold_ms {
            c.fsync_warn_threshold_ms = v;
        }
        if let Some(v) = self.otlp_endpoint {
            c.otlp_endpoint = Some(v);
        }
        if let Some(v) = self.otlp_ca_file {
            c.otlp_ca_file = Some(v);
        }
        if let Some(v) = self.otlp_cert_file {
            c.otlp_cert_file = Some(v);
        }
        if let Some(v) = self.otlp_key_file {
            c.otlp_key_file = Some(v);
        }
        if let Some(v) = self.otlp_sample_ratio {
            c.otlp_sample_ratio = v;
        }
        c.validate()?;
        Ok(c)
    }

    /// The connection flags over `c`.
    fn connection_flags(&self, c: &mut Config) {
        if let Some(v) = self.client_connections_max {
            c.client_connections_max = v;
        }
        if let Some(v) = self.client_streams_per_connection_max {
            c.client_streams_per_connection_max = v;
        }
        if let Some(v) = self.connection_idle_timeout_ms {
            c.connection_idle_timeout_ms = v;
        }
        if let Some(v) = self.http2_keepalive_interval_ms {
            c.http2_keepalive_interval_ms = v;
        }
        if let Some(v) = self.http2_keepalive_timeout_ms {
            c.http2_keepalive_timeout_ms = v;
        }
    }
}

fn main() -> ExitCode {
    concord_server::telemetry::init();
    // The one crypto provider (ring), for anything that asks rustls for the default.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse();
    if let Some(Command::Certs(certs_args)) = &args.command {
        return certs(certs_args);
    }
    if let Some(Command::Restore(restore_args)) = &args.command {
        return restore(restore_args);
    }
    let discard = args.discard_local_state;
    let config = match args.into_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if discard {
        return match concord_server::replica::discard_local_state(&config) {
            Ok(report) => {
                println!("discarded local state: {report}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: cannot discard local state: {e}");
                ExitCode::from(1)
            }
        };
    }
    match concord_server::runtime(&config) {
        Ok(runtime) => runtime.block_on(serve(config)),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// Binds the client address and runs the server until SIGTERM or ctrl-c.
async fn serve(config: Config) -> ExitCode {
    // Every connection is a file: use all the process may have.
    match concord_server::listen::raise_open_files_limit() {
        Ok(limit) => tracing::info!(open_files_limit = limit, "open-file limit"),
        Err(e) => tracing::warn!(error = %e, "cannot raise the open-file limit"),
    }
    let listener = match concord_server::listen::bind(config.client_addr) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: cannot listen on {}: {e}", config.client_addr);
            return ExitCode::from(1);
        }
    };
    // `listening ADDR` only once recovery is done and the server accepts: a
    // supervisor waiting for the line must not read a failing start as healthy.
    let serving = |s: concord_server::Serving| {
        if let Some(addr) = s.zookeeper {
            println!("zookeeper listening {addr}");
        }
        println!("listening {}", s.client);
        let _ = std::io::stdout().flush();
    };
    match concord_server::run(config, listener, shutdown_signal(), serving).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// Resolves on ctrl-c or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
