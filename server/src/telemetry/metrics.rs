//! The metrics recorded as things happen: counters and histograms that the write
//! path, the disk and the RPC layer bump (atomics only), gathered in one `Metrics`
//! per server. Gauges of state (sessions, queues, roles) are not here: they are read
//! at scrape time from what the server already tracks, by a `Collector` registered
//! beside these (see `replica::observe`).
//!
//! ```text
//!   api (Coded layer, api/measure.rs) ─▶ rpc_requests / rpc_duration {method, code}
//!   pipeline ─▶ proposals_* , proposal_commit, leader_changes
//!   persister ─▶ wal_fsync (+ threshold count)   redb ─▶ backend_commit
//!   snapshotter ─▶ snapshot_duration, snapshot_size,
//!                  disk_file_bytes, disk_in_use_bytes, disk_compact
//!   Metrics::register(registry) ─▶ /metrics (telemetry::http)
//! ```
//!
//! Labels are bounded sets only: an RPC's method (a method of Concord's services,
//! or `unknown`) and its Concord code. Never a path, a session id or an identity.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::histogram::{Seconds, DISK_BUCKETS, RPC_BUCKETS, SNAPSHOT_BUCKETS};

/// The labels of an RPC's metrics: `/concord.v1.Tree/Create` (or `unknown`), and the
/// Concord code it ended with (`OK`, `NO_NODE`, ...).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RpcLabels {
    pub method: &'static str,
    pub code: &'static str,
}

fn rpc_histogram() -> Seconds {
    Seconds::new(RPC_BUCKETS)
}

/// Everything recorded as it happens, for one server. Shared by reference (`Arc`).
#[derive(Debug)]
pub struct Metrics {
    /// RPCs answered, by method and code (a stream counts when it ends).
    pub rpc_requests: Family<RpcLabels, Counter>,
    /// How long each RPC took, from its request to its last frame.
    pub rpc_duration: Family<RpcLabels, Seconds, fn() -> Seconds>,
    /// Established leaderships this server saw begin (its own or another's).
    pub leader_changes: Counter,
    /// Txns the Zab core handed out as committed here.
    pub proposals_committed: Counter,
    /// Txns applied to this server's tree (a snapshot from the leader counts none).
    pub proposals_applied: Counter,
    /// Writes this server proposed, or had queued to propose, that failed: refused by
    /// the core, in flight when leadership was lost, or dropped when the server stops.
    pub proposals_failed: Counter,
    /// This leader's proposals not yet committed (its callers waiting); 0 elsewhere.
    pub proposals_pending: Gauge,
    /// From a leader's proposal to its commit (quorum durable), per txn.
    pub proposal_commit: Seconds,
    /// One durable append of a group-commit batch to the log (write and fsync).
    pub wal_fsync: Seconds,
    /// Durable appends slower than `fsync_warn_threshold_ms`.
    pub wal_fsync_slow: Counter,
    /// Every redb write transaction's commit (appends, epochs, snapshots, purges).
    pub backend_commit: Seconds,
    /// Encoding, writing and purging one snapshot.
    pub snapshot_duration: Seconds,
    /// The newest snapshot's size in bytes (0 before the first).
    pub snapshot_size: Gauge,
    /// The redb file's size in bytes, as measured at start and after each snapshot
    /// and its purge (and compaction).
    pub disk_file_bytes: Gauge,
    /// The bytes of the redb file that hold live data (its tables' pages), measured
    /// with `disk_file_bytes`; the rest is free.
    pub disk_in_use_bytes: Gauge,
    /// One compaction of the redb file: every write waits for it.
    pub disk_compact: Seconds,
    /// ZooKeeper-protocol requests answered, by opcode and ZooKeeper code.
    pub zk_requests: Family<ZkLabels, Counter>,
    /// How long each ZooKeeper-protocol request took, by opcode and code.
    pub zk_duration: Family<ZkLabels, Seconds, fn() -> Seconds>,
    /// Open connections on the ZooKeeper port.
    pub zk_connections: Gauge,
    /// Connections on the ZooKeeper port that hold a session (ZooKeeper-protocol
    /// sessions served here).
    pub zk_sessions: Gauge,
    /// ZooKeeper connections closed for a malformed or oversized frame.
    pub zk_frames_refused: Counter,
}

/// The labels of a ZooKeeper-protocol request's metrics: its opcode's name
/// (`create`, `getData`, ..., `unknown`) and the ZooKeeper code it ended with
/// (`OK`, `NONODE`, ...).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ZkLabels {
    pub op: &'static str,
    pub code: &'static str,
}

impl Metrics {
    /// Fresh metrics; `backend_commit` is the histogram the storage records into.
    pub fn new(backend_commit: Seconds) -> Metrics {
        Metrics {
            rpc_requests: Family::default(),
            rpc_duration: Family::new_with_constructor(rpc_histogram),
            leader_changes: Counter::default(),
            proposals_committed: Counter::default(),
            proposals_applied: Counter::default(),
            proposals_failed: Counter::default(),
            proposals_pending: Gauge::default(),
            proposal_commit: Seconds::new(DISK_BUCKETS),
            wal_fsync: Seconds::new(DISK_BUCKETS),
            wal_fsync_slow: Counter::default(),
            backend_commit,
            snapshot_duration: Seconds::new(SNAPSHOT_BUCKETS),
            snapshot_size: Gauge::default(),
            disk_file_bytes: Gauge::default(),
            disk_in_use_bytes: Gauge::default(),
            disk_compact: Seconds::new(DISK_BUCKETS),
            zk_requests: Family::default(),
            zk_duration: Family::new_with_constructor(rpc_histogram),
            zk_connections: Gauge::default(),
            zk_sessions: Gauge::default(),
            zk_frames_refused: Counter::default(),
        }
    }

    /// Counts one ZooKeeper-protocol request that ended with `code` after `elapsed`.
    pub fn zk_request(&self, op: &'static str, code: &'static str, elapsed: std::time::Duration) {
        let labels = ZkLabels { op, code };
        self.zk_requests.get_or_create(&labels).inc();
        self.zk_duration.get_or_create(&labels).observe(elapsed);
    }

    /// Counts one RPC that ended with `code` after `elapsed`.
    pub fn rpc(&self, method: &'static str, code: &'static str, elapsed: std::time::Duration) {
        let labels = RpcLabels { method, code };
        self.rpc_requests.get_or_create(&labels).inc();
        self.rpc_duration.get_or_create(&labels).observe(elapsed);
    }

    /// Registers every metric here under its documented name (docs/operations.md,
    /// "Metrics"). Clones share the values.
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "concord_rpc_requests",
            "RPCs answered, by method and Concord code (a stream counts when it ends)",
            self.rpc_requests.clone(),
        );
        r.register(
            "concord_rpc_duration_seconds",
            "Time from an RPC's request to its last response frame, by method and code",
            self.rpc_duration.clone(),
        );
        r.register(
            "concord_server_leader_changes_seen",
            "Established leaderships this server saw begin",
            self.leader_changes.clone(),
        );
        r.register(
            "concord_server_proposals_committed",
            "Txns the Zab core handed out as committed on this server",
            self.proposals_committed.clone(),
        );
        r.register(
            "concord_server_proposals_applied",
            "Txns applied to this server's tree",
            self.proposals_applied.clone(),
        );
        r.register(
            "concord_server_proposals_failed",
            "Writes that failed once queued to be proposed here (not leader, leadership lost, stopping)",
            self.proposals_failed.clone(),
        );
        r.register(
            "concord_server_proposals_pending",
            "This leader's proposals not yet committed",
            self.proposals_pending.clone(),
        );
        r.register(
            "concord_server_proposal_commit_duration_seconds",
            "Time from a leader's proposal to its commit (durable on a quorum)",
            self.proposal_commit.clone(),
        );
        r.register(
            "concord_disk_wal_fsync_duration_seconds",
            "One durable append of a group-commit batch to the log (write and fsync)",
            self.wal_fsync.clone(),
        );
        r.register(
            "concord_disk_wal_fsync_threshold_exceeded",
            "Durable log appends slower than fsync_warn_threshold_ms",
            self.wal_fsync_slow.clone(),
        );
        r.register(
            "concord_disk_backend_commit_duration_seconds",
            "Commit of one redb write transaction (appends, epochs, snapshots, purges)",
            self.backend_commit.clone(),
        );
        r.register(
            "concord_snapshot_duration_seconds",
            "Encoding, writing and purging one snapshot",
            self.snapshot_duration.clone(),
        );
        r.register(
            "concord_snapshot_size_bytes",
            "Size of the newest snapshot written",
            self.snapshot_size.clone(),
        );
        r.register(
            "concord_disk_backend_size_bytes",
            "Size of the redb file (at start, and after each snapshot, purge and compaction)",
            self.disk_file_bytes.clone(),
        );
        r.register(
            "concord_disk_backend_size_in_use_bytes",
            "Bytes of the redb file that hold live data; the rest is free",
            self.disk_in_use_bytes.clone(),
        );
        r.register(
            "concord_disk_backend_compact_duration_seconds",
            "One compaction of the redb file (writes wait for it)",
            self.disk_compact.clone(),
        );
        r.register(
            "concord_zookeeper_requests",
            "ZooKeeper-protocol requests answered, by opcode and ZooKeeper code",
            self.zk_requests.clone(),
        );
        r.register(
            "concord_zookeeper_request_duration_seconds",
            "Time from a ZooKeeper-protocol request to its reply, by opcode and code",
            self.zk_duration.clone(),
        );
        r.register(
            "concord_zookeeper_connections",
            "Open connections on the ZooKeeper port",
            self.zk_connections.clone(),
        );
        r.register(
            "concord_zookeeper_sessions",
            "Sessions attached to this server's ZooKeeper port",
            self.zk_sessions.clone(),
        );
        r.register(
            "concord_zookeeper_frames_refused",
            "ZooKeeper connections closed for a malformed or oversized frame",
            self.zk_frames_refused.clone(),
        );
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new(Seconds::new(DISK_BUCKETS))
    }
}

/// The histogram a storage backend records its commits into.
pub fn backend_commit_histogram() -> Seconds {
    Seconds::new(DISK_BUCKETS)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Every registered name comes out with its TYPE, counters with `_total`.
    #[test]
    fn registered_metrics_encode_with_their_types() {
        let m = Metrics::default();
        m.rpc("/concord.v1.Tree/Get", "OK", Duration::from_millis(1));
        m.wal_fsync.observe(Duration::from_millis(3));
        let mut r = Registry::default();
        m.register(&mut r);
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &r).unwrap();
        for line in [
            "# TYPE concord_rpc_requests_total counter",
            "concord_rpc_requests_total{method=\"/concord.v1.Tree/Get\",code=\"OK\"} 1",
            "# TYPE concord_rpc_duration_seconds histogram",
            "concord_rpc_duration_seconds_bucket{method=\"/concord.v1.Tree/Get\",code=\"OK\",le=\"0.0016\"} 1",
            "concord_rpc_duration_seconds_bucket{method=\"/concord.v1.Tree/Get\",code=\"OK\",le=\"+Inf\"} 1",
            "# TYPE concord_disk_wal_fsync_duration_seconds histogram",
            "concord_disk_wal_fsync_duration_seconds_bucket{le=\"0.002\"} 0",
            "concord_disk_wal_fsync_duration_seconds_bucket{le=\"0.004\"} 1",
            "concord_disk_wal_fsync_duration_seconds_bucket{le=\"8.192\"} 1",
            "concord_disk_wal_fsync_duration_seconds_count 1",
            "# TYPE concord_server_proposals_pending gauge",
            "# TYPE concord_disk_backend_size_bytes gauge",
            "# TYPE concord_disk_backend_size_in_use_bytes gauge",
            "# TYPE concord_disk_backend_compact_duration_seconds histogram",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
    }
}
