//! `concord-bench`: one set of workloads, three systems. Concord is always built;
//! ZooKeeper and etcd drivers come with the `zookeeper` and `etcd` features (both:
//! `peers`); the ZooKeeper driver also runs against Concord's ZooKeeper-protocol port
//! (`--system concord-zookeeper`). bench/peers.sh starts the servers and calls this once
//! per system and cluster size; this binary never starts or stops servers.
//!
//! Workloads (see `workloads`, `lock`, `memory`): write, read, read-linearizable,
//! create (ephemeral-sequential), watch (fan-out), lock (hand-off), election (failover
//! after the leader's session closes or it resigns); `fill`, `overwrite` and `probe`
//! for memory and restart time; `failover` for the time writes take to resume after
//! the script kills an ensemble's leader. Results print as Markdown rows and append as JSON lines
//! to `--out` for bench/report.py.

mod drivers;
mod election;
mod failover;
mod lock;
mod memory;
mod report;
mod workloads;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use drivers::{BenchError, Driver};
use report::Record;
use workloads::{Op, RunConfig};

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
enum System {
    Concord,
    /// Concord through its Rust SDK (write, read and create workloads).
    ConcordSdk,
    Zookeeper,
    /// The ZooKeeper driver against Concord's ZooKeeper-protocol port.
    ConcordZookeeper,
    Etcd,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
enum Workload {
    Write,
    Read,
    ReadLinearizable,
    Create,
    Watch,
    Lock,
    Election,
}

#[derive(Parser, Debug)]
#[command(about = "Side-by-side load generator: Concord, ZooKeeper, etcd")]
struct Args {
    /// The system under test.
    #[arg(long, value_enum, default_value = "concord")]
    system: System,
    /// Comma-separated endpoints (Concord and etcd: http://host:port; ZooKeeper and
    /// Concord's ZooKeeper port: host:port).
    #[arg(long, default_value = "http://127.0.0.1:7181")]
    endpoints: String,
    /// Cluster size, for the report only.
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 10)]
    duration_s: u64,
    /// Warm-up seconds per run (not measured).
    #[arg(long, default_value_t = 2)]
    warmup_s: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// Server pids (comma-separated) whose CPU and RSS are read from /proc.
    #[arg(long, value_delimiter = ',')]
    server_pids: Vec<String>,
    /// Append JSON lines here (for bench/report.py).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Workloads to run, in order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "write,read,read-linearizable,create,watch,lock,election"
    )]
    workloads: Vec<Workload>,
    /// Concurrent clients for the closed-loop workloads, one run per value.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    clients: Vec<usize>,
    /// Watchers for the fan-out workload, one run per value.
    #[arg(long, value_delimiter = ',', default_value = "1,100")]
    watchers: Vec<usize>,
    /// Contenders for the lock workload.
    #[arg(long, default_value_t = 8)]
    lock_clients: usize,
    /// Measured rounds per variant of the election workload (one more is a warm-up).
    #[arg(long, default_value_t = 50)]
    election_rounds: usize,
    /// Concord over TLS: CA certificates (PEM) the server's must be signed by (the
    /// endpoints must then be https://).
    #[arg(long)]
    cacert: Option<PathBuf>,
    /// Concord over mTLS: the client certificate (PEM), with --key.
    #[arg(long, requires_all = ["cacert", "key"])]
    cert: Option<PathBuf>,
    /// The private key of --cert (PEM).
    #[arg(long, requires = "cert")]
    key: Option<PathBuf>,
    /// Without a subcommand: run the workloads.
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create N nodes and report the servers' RSS.
    Fill {
        /// Nodes to create.
        #[arg(long, default_value_t = 1_000_000)]
        count: u64,
    },
    /// Set one node N times (with --value-bytes) and report the servers' RSS: idle,
    /// peak while writing, and at the end.
    Overwrite {
        /// Sets to make.
        #[arg(long, default_value_t = 10_000)]
        count: u64,
        /// Concurrent clients.
        #[arg(long, default_value_t = 16)]
        clients: usize,
    },
    /// Wait until the last filled node is readable; report the time since --since-ms.
    Probe {
        /// The `count` given to `fill`.
        #[arg(long, default_value_t = 1_000_000)]
        count: u64,
        /// Unix time in ms when the restart began.
        #[arg(long)]
        since_ms: u128,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 300)]
        timeout_s: u64,
    },
    /// Write until one write is acknowledged; report the time since --since-ms.
    Failover {
        /// Unix time in ms when the leader was killed.
        #[arg(long)]
        since_ms: u128,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 60)]
        timeout_s: u64,
    },
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args = Args::parse();
    if let Some(ca) = &args.cacert {
        let identity = args.cert.as_deref().zip(args.key.as_deref());
        drivers::direct::use_tls(ca, identity)?;
    }
    match args.system {
        System::Concord => run::<drivers::concord::Concord>(&args).await?,
        System::ConcordSdk => run::<drivers::concord_sdk::ConcordSdk>(&args).await?,
        #[cfg(feature = "zookeeper")]
        System::Zookeeper => run::<drivers::zookeeper::ZooKeeper>(&args).await?,
        #[cfg(feature = "zookeeper")]
        System::ConcordZookeeper => run::<drivers::zookeeper::ConcordZooKeeper>(&args).await?,
        #[cfg(feature = "etcd")]
        System::Etcd => run::<drivers::etcd::Etcd>(&args).await?,
        #[allow(unreachable_patterns)]
        other => {
            return Err(format!(
                "{other:?} support is not compiled in: build with --features peers"
            )
            .into())
        }
    }
    Ok(())
}

fn config(args: &Args) -> RunConfig {
    let run_id = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() % 100_000_000)
        .unwrap_or(0);
    RunConfig {
        endpoints: args.endpoints.clone(),
        nodes: args.nodes,
        duration: Duration::from_secs(args.duration_s),
        warmup: Duration::from_secs(args.warmup_s),
        value_bytes: args.value_bytes,
        server_pids: args.server_pids.clone(),
        run_id: format!("{}-{run_id}", std::process::id()),
    }
}

async fn run<D: Driver>(args: &Args) -> Result<(), BenchError> {
    let cfg = config(args);
    let out = args.out.as_deref();
    println!("{}", report::HEADER);
    let emit = |r: Record| r.emit(out).map_err(|e| BenchError::Workload(e.to_string()));
    match &args.command {
        None => {
            for &w in &args.workloads {
                for r in run_one::<D>(&cfg, w, args).await {
                    emit(r)?;
                }
            }
        }
        Some(Command::Fill { count }) => emit(memory::fill::<D>(&cfg, *count).await?)?,
        Some(Command::Overwrite { count, clients }) => {
            emit(memory::overwrite::<D>(&cfg, *count, *clients).await?)?
        }
        Some(Command::Probe {
            count,
            since_ms,
            timeout_s,
        }) => {
            let (_, key) = memory::fill_paths(*count);
            let timeout = Duration::from_secs(*timeout_s);
            emit(memory::probe::<D>(&cfg, &key, *since_ms, timeout).await?)?;
        }
        Some(Command::Failover {
            since_ms,
            timeout_s,
        }) => {
            let timeout = Duration::from_secs(*timeout_s);
            emit(failover::probe::<D>(&cfg, *since_ms, timeout).await?)?;
        }
    }
    Ok(())
}

/// Runs one workload at every size asked for; a failed run becomes a record with a note
/// so that one system's failure does not hide the others' numbers.
async fn run_one<D: Driver>(cfg: &RunConfig, w: Workload, args: &Args) -> Vec<Record> {
    if w == Workload::Election {
        return run_election::<D>(cfg, args.election_rounds).await;
    }
    let mut records = Vec::new();
    let op = match w {
        Workload::Write => Some(Op::Write),
        Workload::Read => Some(Op::Read {
            linearizable: false,
        }),
        Workload::ReadLinearizable => Some(Op::Read { linearizable: true }),
        Workload::Create => Some(Op::CreateEphemeralSequential),
        Workload::Watch | Workload::Lock | Workload::Election => None,
    };
    let sizes = match w {
        Workload::Watch => args.watchers.clone(),
        Workload::Lock => vec![args.lock_clients],
        _ => args.clients.clone(),
    };
    for n in sizes {
        let outcome = match (op, w) {
            (Some(op), _) => workloads::closed_loop::<D>(cfg, op, n).await,
            (None, Workload::Watch) => workloads::watch_fanout::<D>(cfg, n).await,
            (None, _) => lock::lock_handoff::<D>(cfg, n).await,
        };
        let name = format!("{w:?}").to_lowercase();
        records.push(outcome.unwrap_or_else(|e| failed::<D>(cfg, &name, n, &e)));
    }
    records
}

/// Both election variants: the leader's session closed, then the leader resigning.
async fn run_election<D: Driver>(cfg: &RunConfig, rounds: usize) -> Vec<Record> {
    let mut records = Vec::new();
    for handover in [election::Handover::CloseSession, election::Handover::Resign] {
        let outcome = election::failover::<D>(cfg, handover, rounds).await;
        records.push(outcome.unwrap_or_else(|e| failed::<D>(cfg, handover.name(), 2, &e)));
    }
    records
}

/// The record of a run that failed as a whole.
fn failed<D: Driver>(cfg: &RunConfig, workload: &str, clients: usize, e: &BenchError) -> Record {
    Record {
        system: D::NAME.to_owned(),
        nodes: cfg.nodes,
        workload: workload.to_owned(),
        clients,
        note: format!("failed: {e}"),
        ..Default::default()
    }
}
