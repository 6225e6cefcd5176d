//! Failover: after bench/peers.sh kill -9s the leader of a 3-node ensemble, `probe`
//! tries a write through the ensemble again and again (each attempt on a fresh
//! client, bounded in time, so a client stuck on the dead server does not count
//! against the system) until one is acknowledged, and reports the time since the kill.
//! It must not start or kill servers: the script does.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::drivers::{BenchError, Driver, Result};
use crate::report::Record;
use crate::workloads::{base_record, RunConfig};

/// Longest one attempt (connect + write) may take before the next one starts.
const ATTEMPT_MAX: Duration = Duration::from_millis(250);

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// One write attempt on a fresh client.
async fn attempt<D: Driver>(endpoints: &str, key: &str) -> Result<()> {
    let mut driver = D::connect(endpoints).await?;
    driver.create(key, b"failover").await
}

/// Writes until one is acknowledged (up to `timeout`); reports the time from
/// `killed_unix_ms` (when the script killed the leader) and the attempts it took.
pub async fn probe<D: Driver>(
    cfg: &RunConfig,
    killed_unix_ms: u128,
    timeout: Duration,
) -> Result<Record> {
    let deadline = Instant::now() + timeout;
    let mut attempts = 0u64;
    loop {
        attempts += 1;
        let key = format!("/bench-failover-{}-{attempts}", cfg.run_id);
        let outcome = tokio::time::timeout(ATTEMPT_MAX, attempt::<D>(&cfg.endpoints, &key)).await;
        if let Ok(Ok(())) = outcome {
            break;
        }
        if Instant::now() >= deadline {
            return Err(BenchError::Workload(format!(
                "no write acknowledged {timeout:?} after the kill"
            )));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut record = base_record::<D>(cfg, "failover", 1);
    record.duration_s = 0.0;
    record.ops = 1;
    let failover_ms = unix_ms().saturating_sub(killed_unix_ms) as f64;
    record.extra.push(("failover_ms", failover_ms));
    record.extra.push(("attempts", attempts as f64));
    Ok(record)
}
