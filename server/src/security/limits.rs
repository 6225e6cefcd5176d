//! The quotas one server enforces on its own, per team: open watches and request
//! rate. Neither is replicated: a watch lives on the server it was opened on, and
//! each server keeps its own token bucket, so a team's limits hold per server.
//!
//! ```text
//!   Authenticated::call ─▶ caller's team ─▶ TeamLimits::admit (token bucket)
//!        empty? ─▶ RESOURCE_EXHAUSTED (QUOTA_EXCEEDED), the handler never runs
//!        else ─▶ Arc<TeamLimits> in the request's extensions ─▶ handler
//!   Watch handler ─▶ TeamLimits::open_watch ─▶ WatchPermit (held by the stream's
//!        task; dropped, it gives the watch back)
//! ```
//!
//! Time is tokio's (`tokio::time::Instant`), so tests can pause it.
//!
//! What it must not do: block (the bucket's lock is held for a few arithmetic
//! operations), or count anything for admins and unmapped callers (no team).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::time::Instant;

use super::quota::{REQUESTS_PER_SECOND, WATCHES};
use crate::config::QuotaConfig;

/// A quota a request would exceed. For the request rate, `used` is the bucket's
/// burst (all of it taken) and `limit` the rate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exceeded {
    pub team: String,
    pub resource: &'static str,
    pub used: u64,
    pub limit: u64,
}

impl std::fmt::Display for Exceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Exceeded {
            team,
            resource,
            used,
            limit,
        } = self;
        if *resource == REQUESTS_PER_SECOND {
            write!(
                f,
                "team {team:?} is over its {resource} quota on this server: {limit} per second, bursts of {used}"
            )
        } else {
            write!(
                f,
                "team {team:?} would exceed its {resource} quota on this server: {used} used of {limit}"
            )
        }
    }
}

impl std::error::Error for Exceeded {}

/// One team's per-server counters.
#[derive(Debug)]
pub struct TeamLimits {
    team: String,
    quota: QuotaConfig,
    /// Watches open on this server by the team's callers.
    watches: AtomicU64,
    /// Request tokens (None: no rate quota).
    bucket: Option<Mutex<Bucket>>,
}

/// A token bucket: `capacity` tokens, refilled at `rate` per second.
#[derive(Debug)]
struct Bucket {
    rate: f64,
    capacity: f64,
    tokens: f64,
    /// When `tokens` was last brought up to date.
    at: Instant,
}

impl TeamLimits {
    /// The counters of team `team` under `quota`, the bucket full.
    pub fn new(team: &str, quota: QuotaConfig) -> TeamLimits {
        let bucket = (quota.requests_per_second > 0).then(|| {
            let capacity = match quota.requests_burst {
                0 => quota.requests_per_second,
                burst => burst,
            } as f64;
            Mutex::new(Bucket {
                rate: quota.requests_per_second as f64,
                capacity,
                tokens: capacity,
                at: Instant::now(),
            })
        });
        TeamLimits {
            team: team.to_owned(),
            quota,
            watches: AtomicU64::new(0),
            bucket,
        }
    }

    /// Takes a request token, or says the team sends faster than its rate.
    pub fn admit(&self) -> Result<(), Exceeded> {
        let Some(bucket) = &self.bucket else {
            return Ok(());
        };
        let mut b = bucket.lock().unwrap_or_else(PoisonError::into_inner);
        b.refill();
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            return Ok(());
        }
        Err(self.exceeded(
            REQUESTS_PER_SECOND,
            b.capacity as u64,
            self.quota.requests_per_second,
        ))
    }

    /// Counts one more open watch, or refuses it at `watches_max`.
    pub fn open_watch(self: &Arc<Self>) -> Result<WatchPermit, Exceeded> {
        let limit = self.quota.watches_max;
        let taken = self
            .watches
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (limit == 0 || n < limit).then_some(n + 1)
            });
        match taken {
            Ok(_) => Ok(WatchPermit(self.clone())),
            Err(used) => Err(self.exceeded(WATCHES, used, limit)),
        }
    }

    /// Watches open on this server.
    pub fn watches(&self) -> u64 {
        self.watches.load(Ordering::Acquire)
    }

    /// Requests taken from the bucket and not yet refilled (what the team used of
    /// its burst), if it has a rate quota.
    pub fn requests_used(&self) -> Option<u64> {
        let bucket = self.bucket.as_ref()?;
        let mut b = bucket.lock().unwrap_or_else(PoisonError::into_inner);
        b.refill();
        Some((b.capacity - b.tokens).max(0.0).ceil() as u64)
    }

    /// The team's quotas.
    pub fn quota(&self) -> &QuotaConfig {
        &self.quota
    }

    fn exceeded(&self, resource: &'static str, used: u64, limit: u64) -> Exceeded {
        Exceeded {
            team: self.team.clone(),
            resource,
            used,
            limit,
        }
    }
}

impl Bucket {
    fn refill(&mut self) {
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.capacity);
        self.at = now;
    }
}

/// One open watch of a team; dropping it gives the watch back.
#[derive(Debug)]
pub struct WatchPermit(Arc<TeamLimits>);

impl Drop for WatchPermit {
    fn drop(&mut self) {
        self.0.watches.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn quota(f: impl FnOnce(&mut QuotaConfig)) -> Arc<TeamLimits> {
        let mut q = QuotaConfig::default();
        f(&mut q);
        Arc::new(TeamLimits::new("a", q))
    }

    #[test]
    fn the_nth_watch_opens_and_the_next_is_refused_until_one_closes() {
        let limits = quota(|q| q.watches_max = 3);
        let open: Vec<WatchPermit> = (0..3).map(|_| limits.open_watch().unwrap()).collect();
        let e = limits.open_watch().unwrap_err();
        assert_eq!(
            e.to_string(),
            "team \"a\" would exceed its watches quota on this server: 3 used of 3"
        );
        assert_eq!(limits.watches(), 3);
        drop(open);
        assert_eq!(limits.watches(), 0);
        let _again = limits.open_watch().unwrap();
        // Unlimited: counted, never refused.
        let free = quota(|_| {});
        let many: Vec<WatchPermit> = (0..100).map(|_| free.open_watch().unwrap()).collect();
        assert_eq!(free.watches(), 100);
        drop(many);
    }

    #[tokio::test(start_paused = true)]
    async fn the_bucket_admits_its_burst_then_its_rate() {
        let limits = quota(|q| {
            q.requests_per_second = 10;
            q.requests_burst = 5;
        });
        for _ in 0..5 {
            limits.admit().unwrap();
        }
        let e = limits.admit().unwrap_err();
        assert_eq!(e.resource, REQUESTS_PER_SECOND);
        assert_eq!(e.limit, 10);
        assert_eq!(
            e.to_string(),
            "team \"a\" is over its requests_per_second quota on this server: 10 per second, bursts of 5"
        );
        assert_eq!(limits.requests_used(), Some(5));
        // A tenth of a second later, one more token.
        tokio::time::advance(Duration::from_millis(100)).await;
        limits.admit().unwrap();
        assert!(limits.admit().is_err());
        // A long pause refills only up to the burst.
        tokio::time::advance(Duration::from_secs(60)).await;
        for _ in 0..5 {
            limits.admit().unwrap();
        }
        assert!(limits.admit().is_err());
        // Without a burst, the bucket holds one second's worth.
        let limits = quota(|q| q.requests_per_second = 3);
        for _ in 0..3 {
            limits.admit().unwrap();
        }
        assert!(limits.admit().is_err());
        // No rate quota: never refused.
        let free = quota(|_| {});
        for _ in 0..1000 {
            free.admit().unwrap();
        }
        assert_eq!(free.requests_used(), None);
    }
}
