//! `concord-bench`: a load generator for Concord.
//!
//! Workloads (each run at every concurrency asked for, with 100-byte values by default):
//! - `write`: Set on distinct existing keys (one key per client);
//! - `read`: Get of existing keys (`--linearizable` for the read-index path);
//! - `create`: create-ephemeral-sequential under one parent.
//!
//! Each client is a task with its own gRPC connection, issuing one request at a time.
//! Reports ops/s and latency p50/p99/p99.9/max as a Markdown table row.

use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use concord_proto::v1 as pb;
use hdrhistogram::Histogram;
use tonic::transport::Channel;

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
enum Workload {
    Write,
    Read,
    Create,
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
    let session_id = if workload == Workload::Create {
        let mut s = pb::session_client::SessionClient::new(setup.clone());
        s.open(pb::OpenSessionRequest { ttl_ms: 0 })
            .await?
            .into_inner()
            .session_id
    } else {
        0
    };
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
        tasks.push(tokio::spawn(async move {
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
    }
}
