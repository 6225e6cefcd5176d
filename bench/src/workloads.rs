//! The workloads, written once and generic over `Driver`: closed-loop write / read /
//! create-ephemeral-sequential, watch fan-out, lock hand-off, and the fill + probe pair
//! behind the memory and restart measurements. Every run has the same warm-up and
//! measured window for every system. It must not know which system it drives.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use hdrhistogram::Histogram;
use tokio::sync::Notify;

use crate::drivers::{BenchError, Driver, Result};
use crate::report::{self, Record};

/// What every run shares.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Comma-separated endpoints of the system under test.
    pub endpoints: String,
    /// Cluster size, for the report.
    pub nodes: usize,
    /// Measured window.
    pub duration: Duration,
    /// Unmeasured warm-up before the window.
    pub warmup: Duration,
    /// Value size in bytes.
    pub value_bytes: usize,
    /// Server pids whose CPU (and RSS) is read.
    pub server_pids: Vec<String>,
    /// Makes key prefixes unique across runs against the same servers.
    pub run_id: String,
}

/// The closed-loop operations.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    /// Set on one existing key per client.
    Write,
    /// Get of one existing key per client, default or linearizable.
    Read {
        /// Use the system's linearizable read.
        linearizable: bool,
    },
    /// Create-ephemeral-sequential under one shared parent.
    CreateEphemeralSequential,
}

impl Op {
    /// The workload's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Read {
                linearizable: false,
            } => "read",
            Op::Read { linearizable: true } => "read-linearizable",
            Op::CreateEphemeralSequential => "create-ephemeral-seq",
        }
    }
}

pub(crate) fn new_histogram() -> Histogram<u64> {
    // Three significant digits over the default range is always a valid configuration.
    Histogram::new(3).unwrap_or_else(|_| unreachable!("3 significant digits is valid"))
}

pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

pub(crate) fn base_record<D: Driver>(cfg: &RunConfig, workload: &str, clients: usize) -> Record {
    Record {
        system: D::NAME.to_owned(),
        nodes: cfg.nodes,
        workload: workload.to_owned(),
        clients,
        duration_s: cfg.duration.as_secs_f64(),
        ..Default::default()
    }
}

/// Reads client and server CPU at `start` and `end` in a background task.
pub(crate) fn sample_cpu(
    pids: Vec<String>,
    start: Instant,
    end: Instant,
) -> tokio::task::JoinHandle<(Option<f64>, Option<f64>)> {
    tokio::spawn(async move {
        tokio::time::sleep_until(start.into()).await;
        let (c0, s0) = (report::cpu_ticks("self"), report::cpu_ticks_sum(&pids));
        let t0 = Instant::now();
        tokio::time::sleep_until(end.into()).await;
        let (c1, s1) = (report::cpu_ticks("self"), report::cpu_ticks_sum(&pids));
        let elapsed = t0.elapsed();
        (
            report::cpu_pct(c0, c1, elapsed),
            report::cpu_pct(s0, s1, elapsed),
        )
    })
}

pub(crate) async fn connect_all<D: Driver>(cfg: &RunConfig, n: usize) -> Result<Vec<D>> {
    let mut drivers = Vec::with_capacity(n);
    for _ in 0..n {
        drivers.push(D::connect(&cfg.endpoints).await?);
    }
    Ok(drivers)
}

/// One closed-loop run: `clients` tasks, each with its own connection, one request at a
/// time, for warm-up + duration.
pub async fn closed_loop<D: Driver>(cfg: &RunConfig, op: Op, clients: usize) -> Result<Record> {
    let prefix = format!("/bench-{}-{}-{clients}", cfg.run_id, op.name());
    let value = vec![b'x'; cfg.value_bytes];
    let mut setup = D::connect(&cfg.endpoints).await?;
    setup.ensure_parent(&prefix).await?;
    if op != Op::CreateEphemeralSequential {
        for c in 0..clients {
            setup.create(&format!("{prefix}/k{c}"), &value).await?;
        }
    }
    let drivers = connect_all::<D>(cfg, clients).await?;
    let start = Instant::now() + cfg.warmup;
    let end = start + cfg.duration;
    let cpu = sample_cpu(cfg.server_pids.clone(), start, end);
    let mut tasks = Vec::with_capacity(clients);
    for (c, mut driver) in drivers.into_iter().enumerate() {
        let key = format!("{prefix}/k{c}");
        let (parent, value) = (prefix.clone(), value.clone());
        tasks.push(tokio::spawn(async move {
            let (mut ops, mut errors, mut hist) = (0u64, 0u64, new_histogram());
            loop {
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                let outcome = match op {
                    Op::Write => driver.write(&key, &value).await,
                    Op::Read { linearizable } => driver.read(&key, linearizable).await,
                    Op::CreateEphemeralSequential => {
                        driver.create_ephemeral_sequential(&parent, &value).await
                    }
                };
                if t0 < start {
                    continue;
                }
                match outcome {
                    Ok(()) => {
                        ops += 1;
                        let _ = hist.record(micros(t0.elapsed()));
                    }
                    Err(_) => errors += 1,
                }
            }
            (ops, errors, hist)
        }));
    }
    let mut record = base_record::<D>(cfg, op.name(), clients);
    let mut hist = new_histogram();
    for task in tasks {
        let (ops, errors, h) = task
            .await
            .map_err(|e| BenchError::Workload(e.to_string()))?;
        record.ops += ops;
        record.errors += errors;
        let _ = hist.add(&h);
    }
    record.latency_us = Some(hist);
    (record.client_cpu_pct, record.server_cpu_pct) =
        cpu.await.map_err(|e| BenchError::Workload(e.to_string()))?;
    Ok(record)
}

/// Counts the watchers that saw the current round's event.
struct Round {
    /// Watchers that have seen the current write.
    seen: AtomicUsize,
    /// When the last of them saw it.
    last_at: Mutex<Option<Instant>>,
    /// Wakes the writer when all have seen it.
    done: Notify,
}

/// Watch fan-out: one writer sets one key; `watchers` clients watch it. Latency is from
/// just before the write is sent to the moment the last watcher receives its event.
pub async fn watch_fanout<D: Driver>(cfg: &RunConfig, watchers: usize) -> Result<Record> {
    let prefix = format!("/bench-{}-watch-{watchers}", cfg.run_id);
    let key = format!("{prefix}/w");
    let value = vec![b'x'; cfg.value_bytes];
    let mut writer = D::connect(&cfg.endpoints).await?;
    writer.ensure_parent(&prefix).await?;
    writer.create(&key, &value).await?;
    let round = Arc::new(Round {
        seen: AtomicUsize::new(0),
        last_at: Mutex::new(None),
        done: Notify::new(),
    });
    let mut tasks = Vec::with_capacity(watchers);
    for mut driver in connect_all::<D>(cfg, watchers).await? {
        let mut events = driver.watch(&key).await?;
        let round = Arc::clone(&round);
        tasks.push(tokio::spawn(async move {
            let _keep = driver;
            while let Some(Ok(())) = events.next().await {
                let now = Instant::now();
                if round.seen.fetch_add(1, Ordering::SeqCst) + 1 == watchers {
                    if let Ok(mut last) = round.last_at.lock() {
                        *last = Some(now);
                    }
                    round.done.notify_one();
                }
            }
        }));
    }
    let start = Instant::now() + cfg.warmup;
    let end = start + cfg.duration;
    let cpu = sample_cpu(cfg.server_pids.clone(), start, end);
    let mut record = base_record::<D>(cfg, &format!("watch-{watchers}"), 1);
    let mut hist = new_histogram();
    while Instant::now() < end {
        round.seen.store(0, Ordering::SeqCst);
        let t0 = Instant::now();
        let wrote = writer.write(&key, &value).await;
        let all_seen = tokio::time::timeout(Duration::from_secs(5), round.done.notified()).await;
        let last = round.last_at.lock().ok().and_then(|mut l| l.take());
        if t0 < start {
            continue;
        }
        match (wrote, all_seen, last) {
            (Ok(()), Ok(()), Some(at)) if at >= t0 => {
                record.ops += 1;
                let _ = hist.record(micros(at.saturating_duration_since(t0)));
            }
            _ => {
                record.errors += 1;
                // Let stragglers of this round arrive before the next one starts.
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    for task in tasks {
        task.abort();
    }
    record.latency_us = Some(hist);
    (record.client_cpu_pct, record.server_cpu_pct) =
        cpu.await.map_err(|e| BenchError::Workload(e.to_string()))?;
    Ok(record)
}
