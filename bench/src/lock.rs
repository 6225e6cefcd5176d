//! Lock hand-off: `clients` clients contend on one lock for the measured window. Reports
//! acquisitions per second, hand-off latency (from the holder starting its release to
//! the next holder getting the lock), and a mutual-exclusion check: the number of times
//! two clients believed they held the lock at once (must be 0). It must not know which
//! system it drives.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use hdrhistogram::Histogram;

use crate::drivers::{BenchError, Driver, Result};
use crate::report::Record;
use crate::workloads::{base_record, connect_all, micros, new_histogram, sample_cpu, RunConfig};

/// State shared by the contenders.
struct Shared {
    /// Clients inside the critical section right now.
    holders: AtomicUsize,
    /// Times a client entered while another was inside.
    overlaps: AtomicU64,
    /// When the last holder started releasing.
    released_at: Mutex<Option<Instant>>,
    /// Hand-off latencies in the measured window, microseconds.
    handoff_us: Mutex<Histogram<u64>>,
    /// Acquisitions in the measured window.
    acquired: AtomicU64,
}

async fn critical(shared: Arc<Shared>, start: Instant) {
    let now = Instant::now();
    if shared.holders.fetch_add(1, Ordering::SeqCst) != 0 {
        shared.overlaps.fetch_add(1, Ordering::SeqCst);
    }
    let released = shared.released_at.lock().ok().and_then(|mut r| r.take());
    if now >= start {
        shared.acquired.fetch_add(1, Ordering::Relaxed);
        if let (Some(at), Ok(mut h)) = (released, shared.handoff_us.lock()) {
            let _ = h.record(micros(now.saturating_duration_since(at)));
        }
    }
    // Hold across an await point, so that a second holder would be seen.
    tokio::task::yield_now().await;
    shared.holders.fetch_sub(1, Ordering::SeqCst);
    if let Ok(mut r) = shared.released_at.lock() {
        *r = Some(Instant::now());
    }
}

/// Runs the lock hand-off workload with `clients` contenders.
pub async fn lock_handoff<D: Driver>(cfg: &RunConfig, clients: usize) -> Result<Record> {
    let name = format!("/bench-{}-lock-{clients}", cfg.run_id);
    let mut record = base_record::<D>(cfg, "lock-handoff", clients);
    let mut setup = D::connect(&cfg.endpoints).await?;
    setup.ensure_parent(&name).await?;
    // One probe acquisition: a system without locks yet says so here.
    match setup.with_lock(&name, async {}).await {
        Err(BenchError::NotYet(why)) => {
            record.note = format!("not yet: {why}");
            return Ok(record);
        }
        other => other?,
    }
    let shared = Arc::new(Shared {
        holders: AtomicUsize::new(0),
        overlaps: AtomicU64::new(0),
        released_at: Mutex::new(None),
        handoff_us: Mutex::new(new_histogram()),
        acquired: AtomicU64::new(0),
    });
    let start = Instant::now() + cfg.warmup;
    let end = start + cfg.duration;
    let cpu = sample_cpu(cfg.server_pids.clone(), start, end);
    let mut tasks = Vec::with_capacity(clients);
    for mut driver in connect_all::<D>(cfg, clients).await? {
        let (shared, name) = (Arc::clone(&shared), name.clone());
        tasks.push(tokio::spawn(async move {
            let mut errors = 0u64;
            while Instant::now() < end {
                let section = critical(Arc::clone(&shared), start);
                if driver.with_lock(&name, section).await.is_err() && Instant::now() >= start {
                    errors += 1;
                }
            }
            errors
        }));
    }
    for task in tasks {
        record.errors += task
            .await
            .map_err(|e| BenchError::Workload(e.to_string()))?;
    }
    record.ops = shared.acquired.load(Ordering::Relaxed);
    record.latency_us = shared.handoff_us.lock().ok().map(|h| h.clone());
    let overlaps = shared.overlaps.load(Ordering::SeqCst);
    record.extra.push(("overlaps", overlaps as f64));
    (record.client_cpu_pct, record.server_cpu_pct) =
        cpu.await.map_err(|e| BenchError::Workload(e.to_string()))?;
    Ok(record)
}
