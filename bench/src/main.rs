//! `concord-bench`: a load generator for Concord.
//!
//! Workloads (each run at every concurrency asked for, with 100-byte values by default):
//! - `write`: Set on distinct existing keys (one key per client);
//! - `read`: Get of existing keys (`--linearizable` for the read-index path);
//! - `create`: create-ephemeral-sequential under one parent;
//! - `lock`: every client acquires and releases one shared lock in a loop; ops/s is
//!   the hand-off rate (run with `--clients 8` for the 8 contending clients).
//!
//! Each client is a task with its own gRPC connection, issuing one request at a time.
//! Reports ops/s and latency p50/p99/p99.9/max as a Markdown table row.

use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use concord_proto::v1 as pb;
use futures::StreamExt;
use hdrhistogram::Histogram;
use tonic::transport::Channel;

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
enum Workload {
    Write,
    Read,
    Create,
    Lock,
}

#[derive(Parser, Debug)]
#[command(about = "Load generator for Concord")]
struct Args {
    /// Server to load.
    #[arg(long, default_value = "http://127.0.0.1:7181")]
    endpoint: String,
    /// Workloads to run, in order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "write,read,create"
    )]
    workloads: Vec<Workload>,
    /// Concurrent clients, one run per value.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    clients: Vec<usize>,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 10)]
    duration_s: u64,
    /// Warm-up seconds per run (not measured).
    #[arg(long, default_value_t = 2)]
    warmup_s: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// Reads go through the read index (linearizable).
    #[arg(long)]
    linearizable: bool,
}

/// One client's measurements.
struct ClientResult {
    ops: u64,
    errors: u64,
    latency_us: Histogram<u64>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    println!("| workload | clients | ops/s | p50 ms | p99 ms | p99.9 ms | max ms | errors |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for &workload in &args.workloads {
        for &clients in &args.clients {
            run(&args, workload, clients).await?;
        }
    }
    Ok(())
}

async fn connect(endpoint: &str) -> Result<Channel, BoxError> {
    Ok(Channel::from_shared(endpoint.to_owned())?.connect().await?)
}

async fn run(args: &Args, workload: Workload, clients: usize) -> Result<(), BoxError> {
    let prefix = format!(
        "/bench-{}-{clients}-{}",
        workload_name(workload),
        std::process::id()
    );
    let setup = connect(&args.endpoint).await?;
    let mut tree = pb::tree_client::TreeClient::new(setup.clone());
    let value: bytes::Bytes = vec![b'x'; args.value_bytes].into();
    tree.create(pb::CreateRequest {
        path: prefix.clone(),
        ..Default::default()
    })
    .await?;
    let session_id = if matches!(workload, Workload::Create | Workload::Lock) {
        let mut s = pb::session_client::SessionClient::new(setup.clone());
        let session_id = s
            .open(pb::OpenSessionRequest { ttl_ms: 0 })
            .await?
            .into_inner()
            .session_id;
        tokio::spawn(keep_alive(s, session_id));
        session_id
    } else {
        0
    };
    let lock_name = prefix.trim_start_matches('/').to_owned();
    for c in 0..clients {
        tree.create(pb::CreateRequest {
            path: format!("{prefix}/k{c}"),
            data: value.clone(),
            ..Default::default()
        })
        .await?;
    }
    let start = Instant::now() + Duration::from_secs(args.warmup_s);
    let end = start + Duration::from_secs(args.duration_s);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let channel = connect(&args.endpoint).await?;
        let key = format!("{prefix}/k{c}");
        let parent = prefix.clone();
        let value = value.clone();
        let linearizable = args.linearizable;
        let lock_name = lock_name.clone();
        tasks.push(tokio::spawn(async move {
            let mut lock = pb::lock_client::LockClient::new(channel.clone());
            let mut tree = pb::tree_client::TreeClient::new(channel);
            let mut r = ClientResult {
                ops: 0,
                errors: 0,
                latency_us: Histogram::new(3).unwrap_or_else(|_| unreachable!()),
            };
            loop {
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                let ok = match workload {
                    Workload::Write => tree
                        .set(pb::SetRequest {
                            path: key.clone(),
                            data: value.clone(),
                            version: -1,
                            ..Default::default()
                        })
                        .await
                        .is_ok(),
                    Workload::Read => tree
                        .get(pb::GetRequest {
                            path: key.clone(),
                            linearizable,
                            ..Default::default()
                        })
                        .await
                        .is_ok(),
                    Workload::Create => tree
                        .create(pb::CreateRequest {
                            path: format!("{parent}/e-"),
                            data: value.clone(),
                            mode: pb::CreateMode::EphemeralSequential.into(),
                            session_id,
                            ..Default::default()
                        })
                        .await
                        .is_ok(),
                    Workload::Lock => lock_cycle(&mut lock, &lock_name, session_id, c).await,
                };
                if t0 < start {
                    continue;
                }
                if ok {
                    r.ops += 1;
                    let us = u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX);
                    let _ = r.latency_us.record(us.max(1));
                } else {
                    r.errors += 1;
                }
            }
            r
        }));
    }
    let mut ops = 0;
    let mut errors = 0;
    let mut hist = Histogram::<u64>::new(3)?;
    for t in tasks {
        let r = t.await?;
        ops += r.ops;
        errors += r.errors;
        hist.add(&r.latency_us)?;
    }
    let ms = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "| {} | {clients} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {errors} |",
        workload_name(workload),
        ops as f64 / args.duration_s as f64,
        ms(0.5),
        ms(0.99),
        ms(0.999),
        hist.max() as f64 / 1000.0,
    );
    Ok(())
}

fn workload_name(w: Workload) -> &'static str {
    match w {
        Workload::Write => "write",
        Workload::Read => "read",
        Workload::Create => "create",
        Workload::Lock => "lock",
    }
}

/// One acquire and release of the shared lock; true if both succeeded.
async fn lock_cycle(
    lock: &mut pb::lock_client::LockClient<Channel>,
    name: &str,
    session_id: u64,
    client: usize,
) -> bool {
    let acquired = lock
        .acquire(pb::AcquireRequest {
            name: name.to_owned(),
            session_id,
            owner_id: format!("bench-{client}"),
            ..Default::default()
        })
        .await;
    let Ok(held) = acquired.map(|r| r.into_inner()) else {
        return false;
    };
    lock.release(pb::ReleaseRequest {
        key: held.key,
        token: held.token,
    })
    .await
    .is_ok()
}

/// Keeps the bench's session alive for the whole run (pings every second).
async fn keep_alive(mut sessions: pb::session_client::SessionClient<Channel>, session_id: u64) {
    let pings = futures::stream::unfold((), move |()| async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        Some((pb::KeepAliveRequest { session_id }, ()))
    });
    let first = futures::stream::once(async move { pb::KeepAliveRequest { session_id } });
    if let Ok(replies) = sessions.keep_alive(first.chain(pings)).await {
        let mut replies = replies.into_inner();
        while let Ok(Some(_)) = replies.message().await {}
    }
}
