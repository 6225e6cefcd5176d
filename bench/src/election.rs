//! Election failover: how long a waiting candidate takes to lead once the leader goes.
//!
//! One round, with two fresh clients A and B on a fresh election:
//!
//! ```text
//!   A: campaign ──> leader
//!   B: campaign ─────────── waits in the server ──────────────> leader  (led_at)
//!   bench: poll candidates until 2 ─> t0: A closes its session
//!                                         (or A resigns)
//!   failover = led_at - t0
//! ```
//!
//! The first round is a warm-up and not measured. A failed round (a campaign error, B
//! leading before t0, no leader within `ROUND_TIMEOUT`) counts as an error. It must not
//! know which system it drives.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::drivers::{BenchError, Driver, Result};
use crate::report::Record;
use crate::workloads::{base_record, micros, new_histogram, RunConfig};

/// Longest wait for any one step of a round (a campaign, B being queued, B leading).
const ROUND_TIMEOUT: Duration = Duration::from_secs(10);

/// Pause between two looks at the candidate queue while waiting for B to be queued.
const QUEUE_POLL: Duration = Duration::from_millis(1);

/// How the leader goes away.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Handover {
    /// The leader's session is closed (etcd: its lease revoked).
    CloseSession,
    /// The leader resigns, its session stays open.
    Resign,
}

impl Handover {
    /// The workload's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Handover::CloseSession => "election-close",
            Handover::Resign => "election-resign",
        }
    }
}

/// The failover time of one round: from the hand-over starting (`t0`) to B leading.
/// None if B led before the hand-over started, which means the round measured nothing.
pub fn failover_time(t0: Instant, led_at: Instant) -> Option<Duration> {
    led_at.checked_duration_since(t0)
}

/// Runs `rounds` measured rounds (plus one warm-up round) of `handover`.
pub async fn failover<D: Driver>(
    cfg: &RunConfig,
    handover: Handover,
    rounds: usize,
) -> Result<Record> {
    let mut record = base_record::<D>(cfg, handover.name(), 2);
    let mut hist: Histogram<u64> = new_histogram();
    let began = Instant::now();
    for round in 0..=rounds {
        let election = format!("bench-{}-{}-r{round}", cfg.run_id, handover.name());
        let outcome = one_round::<D>(cfg, &election, handover).await;
        if round == 0 {
            // A system without elections says so on the warm-up round.
            if let Err(BenchError::NotYet(why)) = &outcome {
                record.note = format!("not yet: {why}");
                return Ok(record);
            }
            continue;
        }
        match outcome {
            Ok(took) => {
                record.ops += 1;
                let _ = hist.record(micros(took));
            }
            Err(e) => {
                record.errors += 1;
                record.note = format!("last error: {e}");
            }
        }
    }
    record.duration_s = began.elapsed().as_secs_f64();
    record.latency_us = Some(hist);
    record.extra.push(("rounds", rounds as f64));
    Ok(record)
}

async fn within<T>(what: &str, f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    tokio::time::timeout(ROUND_TIMEOUT, f)
        .await
        .map_err(|_| BenchError::Workload(format!("{what}: no answer in {ROUND_TIMEOUT:?}")))?
}

/// One round on a fresh `election`; returns the failover time.
async fn one_round<D: Driver>(
    cfg: &RunConfig,
    election: &str,
    handover: Handover,
) -> Result<Duration> {
    let mut a = D::connect(&cfg.endpoints).await?;
    let b = D::connect(&cfg.endpoints).await?;
    let leadership = within("A's campaign", a.campaign(election)).await?;
    let name = election.to_owned();
    let mut waiter = tokio::spawn(async move {
        let mut b = b;
        let won = b.campaign(&name).await;
        (Instant::now(), won, b)
    });
    let queued = within("B queued", wait_queued(&mut a, election)).await;
    if let Err(e) = queued {
        waiter.abort();
        return Err(e);
    }
    let t0 = Instant::now();
    let a = match handover {
        Handover::CloseSession => {
            a.end_session().await?;
            None
        }
        Handover::Resign => {
            a.resign(leadership).await?;
            Some(a)
        }
    };
    let led = tokio::time::timeout(ROUND_TIMEOUT, &mut waiter).await;
    waiter.abort();
    if let Some(a) = a {
        a.end_session().await?;
    }
    let (led_at, won, b) = match led {
        Ok(Ok(done)) => done,
        Ok(Err(e)) => return Err(BenchError::Workload(format!("B's task: {e}"))),
        Err(_) => return Err(BenchError::Workload("B did not lead in time".into())),
    };
    won?;
    b.end_session().await?;
    failover_time(t0, led_at)
        .ok_or_else(|| BenchError::Workload("B led before the leader went".into()))
}

/// Waits until the election holds two candidates: A leading and B queued behind it.
async fn wait_queued<D: Driver>(a: &mut D, election: &str) -> Result<()> {
    while a.candidates(election).await? < 2 {
        tokio::time::sleep(QUEUE_POLL).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failover_is_measured_from_the_handover() {
        let t0 = Instant::now();
        let led_at = t0 + Duration::from_millis(3);
        assert_eq!(failover_time(t0, led_at), Some(Duration::from_millis(3)));
    }

    #[test]
    fn leading_before_the_handover_is_no_measurement() {
        let led_at = Instant::now();
        let t0 = led_at + Duration::from_millis(1);
        assert_eq!(failover_time(t0, led_at), None);
    }

    #[test]
    fn variants_have_distinct_report_names() {
        assert_eq!(Handover::CloseSession.name(), "election-close");
        assert_eq!(Handover::Resign.name(), "election-resign");
    }
}
