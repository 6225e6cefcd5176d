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
    /// printed on stdout as `listening ADDR`).
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
    /// Largest node data, in bytes.
    #[arg(long)]
    node_data_bytes_max: Option<usize>,
    /// Allow plain text on a non-loopback address.
    #[arg(long)]
    insecure: bool,

    // Failover for calls in flight.
    /// Longest a write waits for a leader (election, unreachable leader) before it
    /// fails with NOT_LEADER.
    #[arg(long)]
    leader_wait_ms_max: Option<u64>,
}

impl Args {
    fn into_config(self) -> Result<Config, concord_server::config::ConfigError> {
        let mut c = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        if let Some(v) = self.server_id {
            c.server_id = v;
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
        if let Some(v) = self.node_data_bytes_max {
            c.node_data_bytes_max = v;
        }
        c.insecure |= self.insecure;
        if let Some(v) = self.leader_wait_ms_max {
            c.leader_wait_ms_max = v;
        }
        c.validate()?;
        Ok(c)
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    concord_server::telemetry::init();
    let config = match Args::parse().into_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let listener = match tokio::net::TcpListener::bind(config.client_addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: cannot listen on {}: {e}", config.client_addr);
            return ExitCode::from(1);
        }
    };
    if let Ok(addr) = listener.local_addr() {
        println!("listening {addr}");
        let _ = std::io::stdout().flush();
    }
    match concord_server::run(config, listener, shutdown_signal()).await {
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
