//! Background duties of the replica: every tick, on the leader, propose the expiry of
//! sessions whose deadline passed and the reaping of empty containers and expired TTL
//! nodes; on a follower, report the sessions its clients kept alive to the leader; and
//! write snapshots handed over by the pipeline, purge what they make obsolete, hand
//! them back so the Zab core drops the log they cover, and then compact the redb file
//! when most of it is free (`tidy_file`).
//!
//! Expiry is one task at a time: it proposes the expiries of every session found
//! expired, at most `EXPIRIES_IN_FLIGHT_MAX` at once (those in flight together share
//! a proposal batch); sessions that expire meanwhile wait for the next tick after
//! it ends. A thousand sessions expiring together cost one task, not a thousand.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::stream::{self, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::pipeline::SnapshotJob;
use super::{lock, Replica, Shared};
use crate::storage::{DiskUsage, Storage, StorageError};
use crate::telemetry::Metrics;
use crate::tree::{DataTree, TreeError};
use crate::txn::{CloseReason, TxnOp, Zxid};

/// Most reap proposals started per tick (the rest wait for later ticks).
const REAPS_PER_TICK_MAX: usize = 256;
/// Most session expiries proposed and not yet answered at once.
pub(super) const EXPIRIES_IN_FLIGHT_MAX: usize = 64;

/// Proposes session expiries and reaps once per tick until the server stops.
pub(super) async fn ticker(shared: Weak<Shared>, tick_ms: u64) {
    let mut interval = tokio::time::interval(Duration::from_millis(tick_ms.max(1)));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let reaping: Arc<Mutex<HashSet<String>>> = Arc::default();
    // The expiry task, while it runs (one at a time).
    let mut expiring: Option<JoinHandle<()>> = None;
    let mut last_tick_ms = None;
    loop {
        interval.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if shared.stop.borrow().is_some() {
            return;
        }
        let replica = Replica { shared };
        let now = replica.now_ms();
        if let Some(stalled_ms) = stall_ms(last_tick_ms.replace(now), now, tick_ms) {
            tracing::info!(
                stalled_ms,
                "the server did not run; session deadlines postponed"
            );
            replica.shared.lock_sessions().postpone_all(stalled_ms);
        }
        // Only the leader expires sessions and reaps nodes.
        if replica.is_leader() {
            if expiring.as_ref().is_none_or(JoinHandle::is_finished) {
                expiring = expire_sessions(&replica);
            }
            reap_nodes(&replica, &reaping);
        } else {
            report_touched(&replica).await;
        }
    }
}

/// How long the server did not run between two ticks at `last` and `now` (ms), if
/// longer than one more tick: a session is not charged for the time its server
/// could not hear it (ZooKeeper's promise: a session lives while its client is heard
/// within the timeout), so a stall shorter than the TTL expires nothing by itself.
fn stall_ms(last: Option<u64>, now: u64, tick_ms: u64) -> Option<u64> {
    let late = now.saturating_sub(last?).saturating_sub(tick_ms);
    (late > tick_ms).then_some(late)
}

/// Tells the leader which sessions were kept alive here since the last report; on
/// failure they are kept for the next tick. Sent every tick, even with none: the
/// answer shows the forwarder that the path to the leader works.
async fn report_touched(replica: &Replica) {
    let Some((forwarder, leader)) = replica.forward_target() else {
        return;
    };
    let touched: Vec<u64> = lock(&replica.shared.touched).drain().collect();
    if let Err(e) = forwarder.touch(leader, touched.clone()).await {
        tracing::debug!(leader, error = %e, "keep-alive report failed; retrying next tick");
        lock(&replica.shared.touched).extend(touched);
    }
}

/// Starts the task that proposes the expiry of every session now expired; None
/// when there is none.
fn expire_sessions(replica: &Replica) -> Option<JoinHandle<()>> {
    let now = replica.now_ms();
    let expired = replica.shared.lock_sessions().take_expired(now);
    if expired.is_empty() {
        return None;
    }
    let replica = replica.clone();
    Some(tokio::spawn(async move {
        let close = |session_id| expire_one(&replica, session_id);
        let failed = propose_expiries(expired, EXPIRIES_IN_FLIGHT_MAX, close).await;
        let mut sessions = replica.shared.lock_sessions();
        for session_id in failed {
            sessions.retry_expiry(session_id);
        }
    }))
}

/// Runs `close` for every id, at most `in_flight_max` at once, in this task;
/// returns the ids whose close failed (to be retried).
pub(super) async fn propose_expiries<F, Fut>(
    ids: Vec<u64>,
    in_flight_max: usize,
    close: F,
) -> Vec<u64>
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = bool>,
{
    stream::iter(ids)
        .map(|id| {
            let closed = close(id);
            async move { (id, closed.await) }
        })
        .buffer_unordered(in_flight_max.max(1))
        .filter_map(|(id, closed)| async move { (!closed).then_some(id) })
        .collect()
        .await
}

/// Proposes one session's expiry; false if it was not proposed (retry later).
async fn expire_one(replica: &Replica, session_id: u64) -> bool {
    let op = TxnOp::CloseSession {
        session_id,
        reason: CloseReason::Expired,
    };
    match replica.submit(0, 0, op).await {
        Ok(c) => {
            if let Err(e) = c.result {
                tracing::debug!(session_id, error = %e, "expiry found the session gone");
            } else {
                tracing::info!(session_id, "session expired");
            }
            true
        }
        Err(e) => {
            tracing::warn!(session_id, error = %e, "expiry not proposed; will retry");
            false
        }
    }
}

fn reap_nodes(replica: &Replica, reaping: &Arc<Mutex<HashSet<String>>>) {
    let wall_ms = super::wall_ms();
    let candidates = replica.read(|tree| tree.reapable(wall_ms));
    let mut started = 0;
    for path in candidates {
        if started == REAPS_PER_TICK_MAX {
            break;
        }
        if !lock(reaping).insert(path.clone()) {
            continue;
        }
        started += 1;
        let replica = replica.clone();
        let reaping = reaping.clone();
        tokio::spawn(async move {
            let op = TxnOp::Reap { path: path.clone() };
            match replica.submit(0, 0, op).await.map(|c| c.result) {
                Ok(Ok(_)) => tracing::debug!(%path, "reaped"),
                Ok(Err(TreeError::NotReapable { .. } | TreeError::NoNode { .. })) => {}
                Ok(Err(e)) => tracing::warn!(%path, error = %e, "reap failed"),
                Err(e) => tracing::warn!(%path, error = %e, "reap not proposed"),
            }
            lock(&reaping).remove(&path);
        });
    }
}

/// Writes snapshots handed over by the pipeline, then purges old ones and the log
/// before them, and hands each written snapshot back for `Node::compact`; then, off
/// the pipeline's way, measures the redb file and compacts it if most of it is free
/// (`tidy_file`, at most once per snapshot; the file is measured at start too). A
/// storage failure here stops the server like any other.
pub(super) async fn snapshotter(
    shared: Weak<Shared>,
    mut jobs: mpsc::Receiver<SnapshotJob>,
    compacted: mpsc::Sender<Zxid>,
    keep: usize,
    compact_free_bytes_min: u64,
) {
    if let Some(shared) = shared.upgrade() {
        if let Err(e) = tidy_file(&shared, 0).await {
            return shared.set_fatal(e);
        }
    }
    while let Some(tree) = jobs.recv().await {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let storage = shared.storage.clone();
        let zxid = tree.last_zxid();
        let started = std::time::Instant::now();
        let written =
            tokio::task::spawn_blocking(move || write_snapshot(storage.as_ref(), &tree, keep))
                .await;
        match written {
            Ok(Ok(bytes)) => {
                let took = started.elapsed();
                shared.readable.metrics.snapshot_duration.observe(took);
                let size = i64::try_from(bytes).unwrap_or(i64::MAX);
                shared.readable.metrics.snapshot_size.set(size);
                tracing::info!(
                    took_ms = took.as_millis() as u64,
                    zxid = format_args!("{zxid:#x}"),
                    bytes,
                    "snapshot written"
                );
                // The pipeline gone means the server is stopping.
                let _ = compacted.send(zxid).await;
            }
            Ok(Err(e)) => return shared.set_fatal(format!("snapshot at {zxid:#x} failed: {e}")),
            Err(e) => return shared.set_fatal(format!("snapshot task failed: {e}")),
        }
        if let Err(e) = tidy_file(&shared, compact_free_bytes_min).await {
            return shared.set_fatal(e);
        }
    }
}

/// `tidy_file_now` on a blocking thread; Err: a storage failure (fatal).
async fn tidy_file(shared: &Shared, compact_free_bytes_min: u64) -> Result<(), String> {
    let storage = shared.storage.clone();
    let metrics = shared.readable.metrics.clone();
    tokio::task::spawn_blocking(move || {
        tidy_file_now(storage.as_ref(), &metrics, compact_free_bytes_min).map(drop)
    })
    .await
    .map_err(|e| format!("the compaction task failed: {e}"))?
}

/// Measures the store's file into the disk gauges and compacts it when
/// `worth_compacting` (0: never); returns the compaction's before and after, if one
/// ran. Err: a storage failure. Writes wait while the compaction runs
/// (docs/operations.md, "Data and recovery", says how long).
pub(crate) fn tidy_file_now(
    storage: &dyn Storage,
    metrics: &Metrics,
    compact_free_bytes_min: u64,
) -> Result<Option<(DiskUsage, DiskUsage)>, String> {
    let failed = |e: StorageError| format!("measuring the store's file failed: {e}");
    let Some(before) = storage.disk_usage().map_err(failed)? else {
        return Ok(None);
    };
    show_usage(metrics, before);
    if !worth_compacting(before, compact_free_bytes_min) {
        return Ok(None);
    }
    let started = std::time::Instant::now();
    let after = match storage.compact_file() {
        Ok(Some(after)) => after,
        Ok(None) => return Ok(None),
        Err(e @ StorageError::Misuse(_)) => {
            // Nothing was moved (redb checks first): not worth stopping for.
            tracing::warn!(error = %e, "the store's file was not compacted");
            return Ok(None);
        }
        Err(e) => return Err(format!("compacting the store's file failed: {e}")),
    };
    let took = started.elapsed();
    metrics.disk_compact.observe(took);
    show_usage(metrics, after);
    tracing::info!(
        took_ms = took.as_millis() as u64,
        file_bytes_before = before.file_bytes,
        file_bytes = after.file_bytes,
        in_use_bytes = after.in_use_bytes,
        "store file compacted"
    );
    Ok(Some((before, after)))
}

/// Worth it when at least `free_bytes_min` bytes (0: never) of the file are free,
/// and they are over two thirds of it. Not at half: redb grows a file by doubling
/// it (up to 4 GiB), so a file compacted to its data is half free again after its
/// next growth, and compacting it then would only make it grow again.
fn worth_compacting(usage: DiskUsage, free_bytes_min: u64) -> bool {
    let free = usage.free_bytes();
    free_bytes_min > 0 && free >= free_bytes_min && free / 2 > usage.in_use_bytes
}

fn show_usage(metrics: &Metrics, usage: DiskUsage) {
    let gauge = |bytes: u64| i64::try_from(bytes).unwrap_or(i64::MAX);
    metrics.disk_file_bytes.set(gauge(usage.file_bytes));
    metrics.disk_in_use_bytes.set(gauge(usage.in_use_bytes));
}

/// Saves a snapshot of `tree` at its zxid (`save_snapshot`), then purges what it
/// makes obsolete, keeping the newest `keep`; returns its size in bytes. The
/// simulator writes its snapshots with this too.
pub(crate) fn write_snapshot(
    storage: &dyn Storage,
    tree: &DataTree,
    keep: usize,
) -> Result<usize, String> {
    let bytes = save_snapshot(storage, tree)?;
    storage.purge(keep).map_err(|e| e.to_string())?;
    Ok(bytes)
}

/// Saves a snapshot of `tree` at its zxid; returns its size in bytes. A tree that
/// cannot be encoded whole breaks an invariant: nothing is saved (an empty or
/// partial snapshot would lose state), and the caller stops.
pub(crate) fn save_snapshot(storage: &dyn Storage, tree: &DataTree) -> Result<usize, String> {
    let bytes = tree.encode_snapshot().map_err(|e| e.to_string())?;
    storage
        .save_snapshot(tree.last_zxid(), &bytes)
        .map_err(|e| e.to_string())?;
    // The bytes stay in storage only: the peer transport reads a SNAP there.
    Ok(bytes.len())
}

/// Test-only ways to stall a replica's disk. A replica started inside
/// `SNAPSHOTS.scope(gate, ..)` hands its snapshot requests to a relay that holds each
/// one while `gate` reads true (the pipeline sees the snapshot as pending, as with a
/// slow disk); one started inside `FSYNCS.scope(gate, ..)` has its log appends wait
/// while `gate` reads true (its fsyncs seem to take as long as the gate is closed).
/// Task-local, so tests running at once do not meet.
#[cfg(test)]
pub(super) mod stall {
    use std::sync::Arc;

    use tokio::sync::{mpsc, watch};

    use crate::replica::pipeline::SnapshotJob;
    use crate::storage::{storage_but_append_from, Storage, StorageError};
    use crate::txn::Txn;

    tokio::task_local! {
        /// While it reads true, snapshot requests wait before they are written.
        pub(in crate::replica) static SNAPSHOTS: watch::Receiver<bool>;
        /// While it reads true, log appends wait before they write.
        pub(in crate::replica) static FSYNCS: watch::Receiver<bool>;
    }

    /// `storage` itself outside a `FSYNCS` scope; inside one, the same storage whose
    /// appends wait while the gate reads true, before they write anything: the log
    /// neither has them nor says they are durable until the gate opens (or its
    /// sender is gone).
    pub(in crate::replica) fn appends(storage: Arc<dyn Storage>) -> Arc<dyn Storage> {
        let Ok(gate) = FSYNCS.try_with(Clone::clone) else {
            return storage;
        };
        Arc::new(StalledAppends {
            inner: storage,
            gate,
            runtime: tokio::runtime::Handle::current(),
        })
    }

    struct StalledAppends {
        inner: Arc<dyn Storage>,
        gate: watch::Receiver<bool>,
        /// The persister's thread is not a runtime's: it waits on the gate here.
        runtime: tokio::runtime::Handle,
    }

    impl Storage for StalledAppends {
        fn append(&self, txns: &[Txn]) -> Result<(), StorageError> {
            let mut gate = self.gate.clone();
            let _ = self.runtime.block_on(gate.wait_for(|stalled| !stalled));
            self.inner.append(txns)
        }
        storage_but_append_from!(inner);
    }

    /// `jobs` itself outside a `SNAPSHOTS` scope; inside one, a channel fed from
    /// `jobs` by a relay that holds each job until the gate reads false (or its
    /// sender is gone).
    pub(in crate::replica) fn relay(
        jobs: mpsc::Receiver<SnapshotJob>,
    ) -> mpsc::Receiver<SnapshotJob> {
        let Ok(mut gate) = SNAPSHOTS.try_with(Clone::clone) else {
            return jobs;
        };
        let (tx, rx) = mpsc::channel(1);
        tokio::spawn(async move {
            let mut jobs = jobs;
            while let Some(job) = jobs.recv().await {
                let _ = gate.wait_for(|stalled| !stalled).await;
                if tx.send(job).await.is_err() {
                    return;
                }
            }
        });
        rx
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::mpsc;

    use super::{stall_ms, tidy_file_now, worth_compacting};
    use crate::config::Config;
    use crate::replica::Replica;
    use crate::storage::{DiskUsage, RedbStorage, Storage};
    use crate::telemetry::Metrics;

    #[test]
    fn a_stall_is_what_a_tick_came_late_by_past_one_more_tick() {
        assert_eq!(stall_ms(None, 5_000, 50), None);
        assert_eq!(stall_ms(Some(1_000), 1_050, 50), None);
        assert_eq!(
            stall_ms(Some(1_000), 1_100, 50),
            None,
            "a tick late by a tick"
        );
        assert_eq!(stall_ms(Some(1_000), 1_101, 50), Some(51));
        assert_eq!(stall_ms(Some(1_000), 3_550, 50), Some(2_500));
        assert_eq!(
            stall_ms(Some(1_000), 900, 50),
            None,
            "a clock read out of order"
        );
    }

    #[test]
    fn a_file_is_compacted_when_two_thirds_of_it_and_the_minimum_are_free() {
        const MIB: u64 = 1 << 20;
        let usage = |file_mib: u64, in_use_mib: u64| DiskUsage {
            file_bytes: file_mib * MIB,
            in_use_bytes: in_use_mib * MIB,
        };
        assert!(worth_compacting(usage(300, 99), 64 * MIB));
        assert!(!worth_compacting(usage(300, 100), 64 * MIB), "not over 2/3");
        assert!(
            !worth_compacting(usage(200, 100), 64 * MIB),
            "doubled: half free"
        );
        assert!(
            !worth_compacting(usage(60, 1), 64 * MIB),
            "under the minimum"
        );
        assert!(worth_compacting(usage(65, 1), 64 * MIB));
        assert!(!worth_compacting(usage(300, 1), 0), "0: never");
    }

    /// After a snapshot's large purge, the housekeeping compacts the file (once: the
    /// next look finds it small), and the gauges show its size and use.
    #[test]
    fn the_housekeeping_compacts_a_mostly_free_file_once_and_shows_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = RedbStorage::open(&dir.path().join("concord.redb")).unwrap();
        let data = bytes::Bytes::from(vec![7u8; 15 << 10]);
        for first in (1..=1_024u64).step_by(64) {
            let txns: Vec<crate::txn::Txn> = (first..first + 64)
                .map(|zxid| crate::txn::Txn {
                    zxid,
                    time_ms: 0,
                    session_id: 0,
                    request_id: 0,
                    fence: None,
                    op: crate::txn::TxnOp::Set(crate::txn::SetOp {
                        path: "/big".into(),
                        data: data.clone(),
                        version: -1,
                        null_data: false,
                    }),
                })
                .collect();
            store.append(&txns).unwrap();
        }
        store.save_snapshot(1_024, b"state").unwrap();
        let metrics = Metrics::default();
        let never = tidy_file_now(&store, &metrics, 0).unwrap();
        assert_eq!(never, None, "0: never compacted");
        store.purge(1).unwrap();
        let (before, after) = tidy_file_now(&store, &metrics, 1 << 20).unwrap().unwrap();
        assert!(
            after.file_bytes < before.file_bytes / 4,
            "{before:?} then {after:?}"
        );
        assert_eq!(metrics.disk_file_bytes.get(), after.file_bytes as i64);
        assert_eq!(metrics.disk_in_use_bytes.get(), after.in_use_bytes as i64);
        assert_eq!(tidy_file_now(&store, &metrics, 1 << 20).unwrap(), None);
        assert_eq!(store.snapshots().unwrap(), vec![1_024]);
    }

    /// A tree that cannot be encoded whole is not saved (an empty or partial snapshot
    /// would lose state at the next restart), and the server stops naming it.
    #[tokio::test]
    async fn a_snapshot_that_cannot_be_encoded_is_not_saved_and_is_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            data_dir: dir.path().to_path_buf(),
            ..Config::default()
        };
        let replica = Replica::start(&config).await.unwrap();
        let mut broken = replica.read(Clone::clone);
        let root = broken.nodes.get("/").unwrap().clone();
        broken.nodes.insert("/lost/orphan", root);
        let (jobs_tx, jobs_rx) = mpsc::channel(1);
        let (compacted_tx, mut compacted_rx) = mpsc::channel(1);
        let task = tokio::spawn(super::snapshotter(
            std::sync::Arc::downgrade(&replica.shared),
            jobs_rx,
            compacted_tx,
            3,
            0,
        ));
        jobs_tx.send(broken).await.unwrap();
        let reason = tokio::time::timeout(Duration::from_secs(10), replica.stopped())
            .await
            .expect("the encoding failure went unnoticed");
        assert!(reason.contains("reachable"), "{reason}");
        assert_eq!(replica.storage().snapshots().unwrap(), Vec::<u64>::new());
        assert!(compacted_rx.try_recv().is_err(), "no snapshot handed back");
        task.await.unwrap();
        replica.shutdown();
    }
}
