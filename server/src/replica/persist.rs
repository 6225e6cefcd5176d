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
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::mpsc;

use super::recovery::{ACCEPTED_EPOCH, CURRENT_EPOCH};
use crate::storage::{Storage, StorageError};
use crate::txn::Txn;
use crate::zab::PersistOp;

/// The persist ops of one Ready.
pub(super) struct PersistJob {
    /// The Ready's number, for `Node::persisted`.
    pub(super) number: u64,
    pub(super) ops: Vec<PersistOp>,
}

/// The persister thread and its job queue. Dropping it closes the queue and waits for
/// the thread to finish the batch in hand, so the storage is released by the time
/// the pipeline that owns it is gone (a restart may open the same file at once).
pub(super) struct Persister {
    jobs: Option<mpsc::UnboundedSender<PersistJob>>,
    thread: Option<JoinHandle<()>>,
}

impl Persister {
    /// Starts the thread; it reports to `done` as `run` does.
    pub(super) fn start(
        storage: Arc<dyn Storage>,
        done: mpsc::UnboundedSender<Result<u64, String>>,
    ) -> std::io::Result<Persister> {
        let (jobs, queue) = mpsc::unbounded_channel();
        let thread = std::thread::Builder::new()
            .name("concord-persist".into())
            .spawn(move || {
                // Any panic left (storage panics are caught in `run`) is reported
                // too: the pipeline must stop, not wait for numbers that never come.
                let report = done.clone();
                let ran = std::panic::catch_unwind(AssertUnwindSafe(|| run(storage, queue, done)));
                if ran.is_err() {
                    let _ = report.send(Err("the persister thread panicked".into()));
                }
            })?;
        Ok(Persister {
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }

    /// Queues a job; false if the thread has stopped (storage failed).
    pub(super) fn send(&self, job: PersistJob) -> bool {
        self.jobs
            .as_ref()
            .is_some_and(|jobs| jobs.send(job).is_ok())
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

/// Runs on its own thread until the job queue closes. Sends `Ok(number)` once every
/// job up to `number` is durable, or `Err` once (then stops): storage failed.
pub(super) fn run(
    storage: Arc<dyn Storage>,
    mut jobs: mpsc::UnboundedReceiver<PersistJob>,
    done: mpsc::UnboundedSender<Result<u64, String>>,
) {
    let mut batch = Vec::new();
    while let Some(first) = jobs.blocking_recv() {
        let mut number = first.number;
        batch.push(first);
        while batch.len() < JOBS_PER_BATCH_MAX {
            let Ok(job) = jobs.try_recv() else { break };
            number = job.number;
            batch.push(job);
        }
        let ops = merge(std::mem::take(&mut batch));
        // A panic in the storage engine is a storage failure, reported like one: the
        // pipeline must hear of it rather than wait for a number that never comes.
        let written = std::panic::catch_unwind(AssertUnwindSafe(|| write(storage.as_ref(), ops)))
            .map_err(|_| "storage panicked".to_string())
            .and_then(|r| r.map_err(|e| format!("storage failed: {e}")));
        let failed = written.is_err();
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

/// Does the ops in order; each storage call is durable when it returns.
fn write(storage: &dyn Storage, ops: Vec<PersistOp>) -> Result<(), StorageError> {
    for op in ops {
        match op {
            PersistOp::AcceptedEpoch(e) => storage.set_u64(ACCEPTED_EPOCH, u64::from(e))?,
            PersistOp::CurrentEpoch(e) => storage.set_u64(CURRENT_EPOCH, u64::from(e))?,
            PersistOp::Truncate { after } => {
                // TRUNC: entries past the leader's history (never committed) go.
                tracing::info!(after = format_args!("{after:#x}"), "truncating the log");
                storage.truncate_after(after)?;
            }
            PersistOp::Append(txns) => append(storage, &txns)?,
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
            PersistJob {
                number: 1,
                ops: vec![PersistOp::AcceptedEpoch(2), PersistOp::Append(vec![txn(1)])],
            },
            PersistJob {
                number: 2,
                ops: vec![PersistOp::Append(vec![txn(2), txn(3)])],
            },
            PersistJob {
                number: 3,
                ops: vec![PersistOp::CurrentEpoch(2), PersistOp::Append(vec![txn(4)])],
            },
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
