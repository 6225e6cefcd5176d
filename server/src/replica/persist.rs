//! The persister: makes the Zab core's persist ops durable, in order, off the
//! pipeline's loop, and reports `persisted(number)` back to it.
//!
//! ```text
//!   pipeline ─(Ready number, ops)─▶ [queue] ─▶ persister thread: take every queued
//!      job, merge adjacent appends, write them (one storage.append, one fsync)
//!      ─▶ highest number done ─▶ pipeline: node.persisted(number)
//! ```
//!
//! The persister is a thread of its own, not a task: each batch would otherwise hop
//! from a task to a blocking thread and back, and every hop is on the latency of
//! every write (on the leader and on each follower).
//!
//! Group commit: while one batch's fsync runs, the Readies produced meanwhile queue
//! up and are written together next, so throughput grows with concurrency.
//!
//! What it must not do: reorder ops, report a number before every op up to it is
//! durable, or touch the tree.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use super::recovery::{ACCEPTED_EPOCH, CURRENT_EPOCH, MUST_RESYNC};
use crate::storage::{Storage, StorageError};
use crate::telemetry::Metrics;
use crate::txn::Txn;
use crate::zab::PersistOp;

/// What the persister reports: `Ok(number)` once every Ready up to `number` is
/// durable (numbers only grow, so the newest value says it all), or `Err` once
/// storage failed (then it stops). A watch holds one value: this channel cannot
/// grow however far the pipeline falls behind.
pub(super) type Done = watch::Receiver<Result<u64, String>>;

/// Bytes counted for a job besides its txns and snapshot (its ops, the queue slot).
const JOB_OVERHEAD_BYTES: usize = 64;

/// The persist ops of one Ready.
pub(super) struct PersistJob {
    /// The Ready's number, for `Node::persisted`.
    pub(super) number: u64,
    pub(super) ops: Vec<PersistOp>,
    /// What the job weighs in the queue's byte budget (see `PersistJob::new`).
    bytes: usize,
}

impl PersistJob {
    /// A job, weighed: the encoded size of its txns, the size of its snapshot, and
    /// a small overhead per job.
    pub(super) fn new(number: u64, ops: Vec<PersistOp>) -> PersistJob {
        let bytes = ops.iter().map(op_bytes).sum::<usize>() + JOB_OVERHEAD_BYTES;
        PersistJob { number, ops, bytes }
    }
}

/// About what `op` weighs in memory (`zab::log::txn_bytes` for txns).
fn op_bytes(op: &PersistOp) -> usize {
    match op {
        PersistOp::Append(txns) => txns.iter().map(crate::zab::log::txn_bytes).sum(),
        PersistOp::Snapshot(s) => s.data.len(),
        PersistOp::AcceptedEpoch(_)
        | PersistOp::CurrentEpoch(_)
        | PersistOp::Truncate { .. }
        | PersistOp::Resynced => 8,
    }
}

/// The bytes queued for the persister and not yet written: the pipeline adds a
/// job's weight when it queues it, the persister takes it off once the job is
/// durable. The pipeline takes no new input while it is over `bytes_max`, so the
/// queue holds at most `bytes_max` plus what one input produces.
#[derive(Debug)]
pub(super) struct Backlog {
    /// Bytes queued or being written now.
    bytes: AtomicUsize,
    /// The budget.
    bytes_max: usize,
}

impl Backlog {
    /// An empty backlog with a budget of `bytes_max`.
    pub(super) fn new(bytes_max: usize) -> Backlog {
        Backlog {
            bytes: AtomicUsize::new(0),
            bytes_max,
        }
    }

    fn add(&self, n: usize) {
        self.bytes.fetch_add(n, Ordering::AcqRel);
    }

    fn sub(&self, n: usize) {
        // Never below zero, even if a caller's arithmetic were off.
        let _ = self
            .bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                Some(b.saturating_sub(n))
            });
    }

    /// Bytes queued or being written now.
    pub(super) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Acquire)
    }

    /// Bytes queued or being written now, and the budget.
    pub(super) fn depth(&self) -> (usize, usize) {
        (self.bytes(), self.bytes_max)
    }

    /// Whether the queue holds more than its budget.
    pub(super) fn over(&self) -> bool {
        self.bytes() > self.bytes_max
    }
}

/// The persister thread and its job queue. Dropping it closes the queue and waits for
/// the thread to finish the batch in hand, so the storage is released by the time
/// the pipeline that owns it is gone (a restart may open the same file at once).
///
/// The queue is a channel without a count limit, bounded in bytes by `Backlog`:
/// the pipeline stops taking proposals and peer input while it is over budget (a
/// follower whose disk is slow makes its leader's stream wait, instead of growing
/// this queue without limit).
pub(super) struct Persister {
    jobs: Option<mpsc::UnboundedSender<PersistJob>>,
    thread: Option<JoinHandle<()>>,
    /// The bytes queued, shared with the thread.
    backlog: Arc<Backlog>,
}

impl Persister {
    /// Starts the thread with a queue budget of `bytes_max`, recording into fresh
    /// metrics with the default fsync warning threshold.
    #[cfg(test)]
    pub(super) fn start(
        storage: Arc<dyn Storage>,
        bytes_max: usize,
    ) -> std::io::Result<(Persister, Done)> {
        let observe = Observe {
            metrics: Arc::default(),
            slow: std::time::Duration::from_secs(1),
        };
        Persister::start_observed(storage, bytes_max, observe)
    }

    /// Starts the thread with a queue budget of `bytes_max`; it reports on the
    /// returned channel as `run` does, and records each append's duration.
    pub(super) fn start_observed(
        storage: Arc<dyn Storage>,
        bytes_max: usize,
        observe: Observe,
    ) -> std::io::Result<(Persister, Done)> {
        let (jobs, queue) = mpsc::unbounded_channel();
        let (done, done_rx) = watch::channel(Ok(0));
        let backlog = Arc::new(Backlog::new(bytes_max));
        let thread = std::thread::Builder::new()
            .name("concord-persist".into())
            .spawn({
                let backlog = backlog.clone();
                move || {
                    // Any panic left (storage panics are caught in `run`) is reported
                    // too: the pipeline must stop, not wait for numbers that never come.
                    let report = done.clone();
                    let ran = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        run(storage, queue, done, &backlog, &observe)
                    }));
                    if ran.is_err() {
                        let _ = report.send(Err("the persister thread panicked".into()));
                    }
                }
            })?;
        let persister = Persister {
            jobs: Some(jobs),
            thread: Some(thread),
            backlog,
        };
        Ok((persister, done_rx))
    }

    /// Queues a job; false if the thread has stopped (storage failed).
    pub(super) fn send(&self, job: PersistJob) -> bool {
        let bytes = job.bytes;
        self.backlog.add(bytes);
        let sent = self
            .jobs
            .as_ref()
            .is_some_and(|jobs| jobs.send(job).is_ok());
        if !sent {
            self.backlog.sub(bytes);
        }
        sent
    }

    /// The queue's byte count, shared (for the metrics).
    pub(super) fn backlog(&self) -> Arc<Backlog> {
        self.backlog.clone()
    }

    /// Whether the queue holds more than its byte budget: take no new input.
    pub(super) fn over_budget(&self) -> bool {
        self.backlog.over()
    }

    /// Bytes queued or being written now.
    #[cfg(test)]
    pub(super) fn queued_bytes(&self) -> usize {
        self.backlog.bytes()
    }
}

impl Drop for Persister {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            // The thread catches storage panics; any other panic in it was already
            // reported by the panic hook.
            let _ = thread.join();
        }
    }
}

/// Most Readies written in one batch.
const JOBS_PER_BATCH_MAX: usize = 4096;

/// Runs on its own thread until the job queue closes. Reports `Ok(number)` once
/// every job up to `number` is durable (and takes their bytes off `backlog`), or
/// `Err` once (then stops): storage failed.
pub(super) fn run(
    storage: Arc<dyn Storage>,
    mut jobs: mpsc::UnboundedReceiver<PersistJob>,
    done: watch::Sender<Result<u64, String>>,
    backlog: &Backlog,
    observe: &Observe,
) {
    let mut batch = Vec::new();
    while let Some(first) = jobs.blocking_recv() {
        let mut number = first.number;
        let mut bytes = first.bytes;
        batch.push(first);
        while batch.len() < JOBS_PER_BATCH_MAX {
            let Ok(job) = jobs.try_recv() else { break };
            number = job.number;
            bytes += job.bytes;
            batch.push(job);
        }
        let ops = merge(std::mem::take(&mut batch));
        // A panic in the storage engine is a storage failure, reported like one: the
        // pipeline must hear of it rather than wait for a number that never comes.
        let written =
            std::panic::catch_unwind(AssertUnwindSafe(|| write(storage.as_ref(), ops, observe)))
                .map_err(|_| "storage panicked".to_string())
                .and_then(|r| r.map_err(|e| format!("storage failed: {e}")));
        let failed = written.is_err();
        backlog.sub(bytes);
        if done.send(written.map(|()| number)).is_err() || failed {
            return;
        }
    }
}

/// The ops of several Readies in order, consecutive appends joined into one.
fn merge(jobs: Vec<PersistJob>) -> Vec<PersistOp> {
    let mut ops: Vec<PersistOp> = Vec::new();
    for op in jobs.into_iter().flat_map(|j| j.ops) {
        match (ops.last_mut(), op) {
            (Some(PersistOp::Append(prev)), PersistOp::Append(more)) => prev.extend(more),
            (_, op) => ops.push(op),
        }
    }
    ops
}

/// Does the ops in order; each storage call is durable when it returns. (The
/// simulator makes its servers' writes durable with this too.)
pub(crate) fn write(
    storage: &dyn Storage,
    ops: Vec<PersistOp>,
    observe: &Observe,
) -> Result<(), StorageError> {
    for op in ops {
        match op {
            PersistOp::AcceptedEpoch(e) => storage.set_u64(ACCEPTED_EPOCH, u64::from(e))?,
            PersistOp::CurrentEpoch(e) => storage.set_u64(CURRENT_EPOCH, u64::from(e))?,
            PersistOp::Truncate { after } => {
                // TRUNC: entries past the leader's history (never committed) go.
                tracing::info!(after = format_args!("{after:#x}"), "truncating the log");
                storage.truncate_after(after)?;
            }
            PersistOp::Append(txns) => {
                let started = Instant::now();
                append(storage, &txns)?;
                observe.appended(started.elapsed(), txns.len());
            }
            PersistOp::Resynced => {
                tracing::info!("synced from an established leader after a discard: voting again");
                storage.set_u64(MUST_RESYNC, 0)?;
            }
            PersistOp::Snapshot(s) => {
                // SNAP: this server was too far behind; the leader's snapshot
                // replaces its log and state.
                tracing::info!(
                    zxid = format_args!("{:#x}", s.zxid),
                    bytes = s.data.len(),
                    "installing a snapshot from the leader"
                );
                storage.truncate_after(0)?;
                storage.save_snapshot(s.zxid, &s.data)?;
            }
        }
    }
    Ok(())
}

/// What the persister records: each durable append's duration, and those slower
/// than `slow` (counted, and logged as a warning: at most one line per `slow` of
/// disk time, since the thread writes one batch at a time).
pub(crate) struct Observe {
    pub(crate) metrics: Arc<Metrics>,
    /// `fsync_warn_threshold_ms`.
    pub(crate) slow: Duration,
}

impl Observe {
    fn appended(&self, took: Duration, txns: usize) {
        self.metrics.wal_fsync.observe(took);
        if took > self.slow {
            self.metrics.wal_fsync_slow.inc();
            tracing::warn!(
                took_ms = took.as_millis() as u64,
                txns,
                fsync_warn_threshold_ms = self.slow.as_millis() as u64,
                "a durable log append (fsync) took longer than fsync_warn_threshold_ms; the disk is slow"
            );
        }
    }
}

fn append(storage: &dyn Storage, txns: &[Txn]) -> Result<(), StorageError> {
    if txns.is_empty() {
        return Ok(());
    }
    storage.append(txns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::{Txn, TxnOp};

    fn txn(zxid: u64) -> Txn {
        Txn {
            zxid,
            time_ms: 0,
            session_id: 0,
            request_id: 0,
            fence: None,
            op: TxnOp::Reap { path: "/a".into() },
        }
    }

    #[test]
    fn merge_joins_consecutive_appends_only() {
        let jobs = vec![
            PersistJob::new(
                1,
                vec![PersistOp::AcceptedEpoch(2), PersistOp::Append(vec![txn(1)])],
            ),
            PersistJob::new(2, vec![PersistOp::Append(vec![txn(2), txn(3)])]),
            PersistJob::new(
                3,
                vec![PersistOp::CurrentEpoch(2), PersistOp::Append(vec![txn(4)])],
            ),
        ];
        let ops = merge(jobs);
        assert_eq!(
            ops,
            vec![
                PersistOp::AcceptedEpoch(2),
                PersistOp::Append(vec![txn(1), txn(2), txn(3)]),
                PersistOp::CurrentEpoch(2),
                PersistOp::Append(vec![txn(4)]),
            ]
        );
    }
}
