//! A histogram of durations built from atomics only: observing is a bucket search
//! and two relaxed `fetch_add`s, with no lock, so the write path and every RPC can
//! afford it. (prometheus-client's own `Histogram` takes a mutex per observation.)
//!
//! ```text
//!   observe(d) ─▶ counts[first bound ≥ d] += 1, sum_nanos += d
//!   scrape     ─▶ buckets (made cumulative by the encoder), count = their sum,
//!                 sum in seconds
//! ```
//!
//! A scrape that runs beside observations may see a count without its sum (or the
//! other way round) for an instant; each value on its own only grows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// etcd's buckets for disk latency (`wal_fsync_duration_seconds`,
/// `backend_commit_duration_seconds`): 1 ms doubling to 8.192 s.
pub const DISK_BUCKETS: &[f64] = &[
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096,
    8.192,
];

/// Buckets for RPC latency: 100 µs doubling to about 13 s (reads on loopback take
/// well under a millisecond; a watch or keep-alive stream lives much longer, and
/// lands in the last buckets or beyond).
pub const RPC_BUCKETS: &[f64] = &[
    0.0001, 0.0002, 0.0004, 0.0008, 0.0016, 0.0032, 0.0064, 0.0128, 0.0256, 0.0512, 0.1024, 0.2048,
    0.4096, 0.8192, 1.6384, 3.2768, 6.5536, 13.1072,
];

/// Buckets for snapshots (encode and write): 10 ms doubling to about 82 s.
pub const SNAPSHOT_BUCKETS: &[f64] = &[
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

/// A histogram of durations, in seconds. Cheap to clone (one Arc).
#[derive(Clone, Debug)]
pub struct Seconds {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Upper bounds in seconds, ascending; +Inf is implicit.
    bounds: &'static [f64],
    /// Observations per bucket (not cumulative); one more than `bounds` (+Inf).
    counts: Box<[AtomicU64]>,
    /// The sum of every observation, in nanoseconds (585 years fit).
    sum_nanos: AtomicU64,
}

impl Seconds {
    /// An empty histogram with `bounds` (ascending, in seconds).
    pub fn new(bounds: &'static [f64]) -> Seconds {
        let counts = (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect();
        Seconds {
            inner: Arc::new(Inner {
                bounds,
                counts,
                sum_nanos: AtomicU64::new(0),
            }),
        }
    }

    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = self.inner.bounds.partition_point(|&b| b < secs);
        if let Some(c) = self.inner.counts.get(i) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.inner.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.inner
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// The sum of the observations, in seconds.
    pub fn sum_seconds(&self) -> f64 {
        self.inner.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9
    }

    /// (upper bound, observations in that bucket alone) pairs, +Inf last, and
    /// their total. The encoder makes them cumulative (`le`).
    fn buckets(&self) -> (Vec<(f64, u64)>, u64) {
        let mut total = 0u64;
        let bounds = self.inner.bounds.iter().copied().chain([f64::INFINITY]);
        let buckets = bounds
            .zip(self.inner.counts.iter())
            .map(|(bound, c)| {
                let n = c.load(Ordering::Relaxed);
                total = total.saturating_add(n);
                (bound, n)
            })
            .collect();
        (buckets, total)
    }
}

impl TypedMetric for Seconds {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Seconds {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (buckets, count) = self.buckets();
        encoder.encode_histogram::<NoLabelSet>(self.sum_seconds(), count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_that_holds_them() {
        let h = Seconds::new(&[0.001, 0.01]);
        h.observe(Duration::from_micros(500));
        h.observe(Duration::from_millis(1)); // on the bound: that bucket (le)
        h.observe(Duration::from_millis(5));
        h.observe(Duration::from_secs(3));
        let (buckets, count) = h.buckets();
        assert_eq!(buckets, vec![(0.001, 2), (0.01, 1), (f64::INFINITY, 1)]);
        assert_eq!((count, h.count()), (4, 4));
        assert!(
            (h.sum_seconds() - 3.0065).abs() < 1e-9,
            "{}",
            h.sum_seconds()
        );
    }

    #[test]
    fn the_bucket_lists_ascend() {
        for b in [DISK_BUCKETS, RPC_BUCKETS, SNAPSHOT_BUCKETS] {
            assert!(b.windows(2).all(|w| w[0] < w[1]));
        }
    }
}
