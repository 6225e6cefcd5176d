//! Memory and restart: `fill` creates N nodes of `value_bytes` under one parent with 64
//! concurrent clients and reports the servers' RSS; `overwrite` Sets one node N times
//! with `value_bytes` and reports the servers' RSS before, at its peak (sampled every
//! 50 ms) and after, to show memory does not grow with bytes written; `probe` waits
//! until a key can be read (after the script restarts a server) and reports how long
//! the restart took, counted from a wall-clock instant the script passes in. It must
//! not start or stop servers: bench/peers.sh and bench/overwrite.sh do that.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::drivers::{BenchError, Driver, Result};
use crate::report::{self, Record};
use crate::workloads::{base_record, connect_all, RunConfig};

/// Concurrent clients used to fill.
const FILL_CLIENTS: usize = 64;

/// The parent all fill nodes go under, and the key `probe` should read afterwards.
pub fn fill_paths(count: u64) -> (String, String) {
    let parent = "/bench-memory".to_owned();
    let last = format!("{parent}/n{}", count.saturating_sub(1));
    (parent, last)
}

/// Creates `count` nodes and reports the servers' RSS (sum, MiB) and the fill rate.
pub async fn fill<D: Driver>(cfg: &RunConfig, count: u64) -> Result<Record> {
    let (parent, _) = fill_paths(count);
    let value = vec![b'x'; cfg.value_bytes];
    let mut setup = D::connect(&cfg.endpoints).await?;
    setup.ensure_parent(&parent).await?;
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(FILL_CLIENTS);
    for (c, mut driver) in connect_all::<D>(cfg, FILL_CLIENTS)
        .await?
        .into_iter()
        .enumerate()
    {
        let (parent, value) = (parent.clone(), value.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = c as u64;
            while i < count {
                driver.create(&format!("{parent}/n{i}"), &value).await?;
                i += FILL_CLIENTS as u64;
            }
            Ok::<(), BenchError>(())
        }));
    }
    for task in tasks {
        task.await
            .map_err(|e| BenchError::Workload(e.to_string()))??;
    }
    let mut record = base_record::<D>(cfg, "memory", FILL_CLIENTS);
    record.ops = count;
    record.duration_s = started.elapsed().as_secs_f64();
    let rss: Option<f64> = cfg.server_pids.iter().map(|p| report::rss_mib(p)).sum();
    record.extra.push(("nodes_count", count as f64));
    record.extra.push(("rss_mib", rss.unwrap_or(f64::NAN)));
    Ok(record)
}

/// The node `overwrite` Sets.
const OVERWRITE_KEY: &str = "/bench-overwrite";

/// Sets one node `count` times with `value_bytes` from `clients` concurrent clients,
/// and reports the servers' RSS (sum, MiB): idle before the first write, the peak
/// while writing, and at the end.
pub async fn overwrite<D: Driver>(cfg: &RunConfig, count: u64, clients: usize) -> Result<Record> {
    let clients = clients.max(1);
    let value = vec![b'x'; cfg.value_bytes];
    let mut setup = D::connect(&cfg.endpoints).await?;
    setup.ensure_parent(OVERWRITE_KEY).await?;
    let rss = |pids: &[String]| -> f64 {
        let sum: Option<f64> = pids.iter().map(|p| report::rss_mib(p)).sum();
        sum.unwrap_or(f64::NAN)
    };
    let idle = rss(&cfg.server_pids);
    let pids = cfg.server_pids.clone();
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let sampler = tokio::spawn(async move {
        let mut peak = f64::NAN;
        loop {
            peak = peak.max(rss(&pids));
            tokio::select! {
                _ = &mut stop_rx => return peak.max(rss(&pids)),
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
    });
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(clients);
    for (c, mut driver) in connect_all::<D>(cfg, clients)
        .await?
        .into_iter()
        .enumerate()
    {
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = c as u64;
            while i < count {
                driver.write(OVERWRITE_KEY, &value).await?;
                i += clients as u64;
            }
            Ok::<(), BenchError>(())
        }));
    }
    for task in tasks {
        task.await
            .map_err(|e| BenchError::Workload(e.to_string()))??;
    }
    let duration_s = started.elapsed().as_secs_f64();
    let _ = stop_tx.send(());
    let peak = sampler
        .await
        .map_err(|e| BenchError::Workload(e.to_string()))?;
    let mut record = base_record::<D>(cfg, "overwrite", clients);
    record.ops = count;
    record.duration_s = duration_s;
    record.extra.push(("value_bytes", cfg.value_bytes as f64));
    record.extra.push(("rss_idle_mib", idle));
    record.extra.push(("rss_peak_mib", peak));
    record.extra.push(("rss_end_mib", rss(&cfg.server_pids)));
    record.extra.push(("rss_growth_mib", peak - idle));
    Ok(record)
}

/// Waits (up to `timeout`) until `key` can be read, and reports the time since
/// `since_unix_ms` (when the script began restarting the server) and the new RSS.
pub async fn probe<D: Driver>(
    cfg: &RunConfig,
    key: &str,
    since_unix_ms: u128,
    timeout: Duration,
) -> Result<Record> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(mut driver) = D::connect(&cfg.endpoints).await {
            if driver.read(key, false).await.is_ok() {
                break;
            }
        }
        if Instant::now() >= deadline {
            return Err(BenchError::Workload(format!(
                "{key} unreadable after {timeout:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let mut record = base_record::<D>(cfg, "restart", 1);
    record.duration_s = 0.0;
    let restart_ms = now_ms.saturating_sub(since_unix_ms) as f64;
    record.extra.push(("restart_ms", restart_ms));
    let rss: Option<f64> = cfg.server_pids.iter().map(|p| report::rss_mib(p)).sum();
    record.extra.push(("rss_mib", rss.unwrap_or(f64::NAN)));
    Ok(record)
}
