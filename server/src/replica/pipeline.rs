//! The write pipeline: sequence proposals into txns, make them durable in one group
//! commit, apply them in zxid order, publish their events and answer their callers.
//!
//! Group commit: the pipeline takes every proposal already queued (up to
//! `batch_txns_max`) into one `Storage::append`, one fsync. While that fsync runs, new
//! proposals queue up for the next batch, so throughput grows with concurrency.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;

use super::{Committed, Proposal, ReplicaError, Shared};
use crate::tree::{DataTree, TxnResult};
use crate::txn::{make_zxid, Txn, TxnOp, ZXID_COUNTER_MAX};

/// Where the next zxid comes from.
pub(super) struct Sequencer {
    /// The counter of the last zxid handed out in the current epoch.
    pub(super) counter: u64,
    /// The last wall time stamped, so txn times never go backwards.
    pub(super) last_time_ms: i64,
}

/// A snapshot request: the tree as of one zxid (an O(1) clone).
pub(super) type SnapshotJob = DataTree;

/// Runs until the server stops (`Shared::fatal` is set) or storage fails.
pub(super) async fn run(
    shared: Arc<Shared>,
    mut proposals: mpsc::Receiver<Proposal>,
    mut seq: Sequencer,
    batch_txns_max: usize,
    snapshots: mpsc::Sender<SnapshotJob>,
    snapshot_every_txns: u64,
) {
    let mut since_snapshot = 0u64;
    let mut batch = Vec::with_capacity(batch_txns_max);
    let mut stop = shared.stop.subscribe();
    loop {
        let received = tokio::select! {
            n = proposals.recv_many(&mut batch, batch_txns_max) => n,
            _ = stop.wait_for(Option::is_some) => 0,
        };
        if received == 0 {
            // Stopping: queued proposals are dropped unanswered, so callers see
            // Unavailable and know the write was never sequenced.
            break;
        }
        let txns = match stamp(&shared, &mut seq, &batch) {
            Ok(txns) => txns,
            Err(e) => return fail_all(&shared, batch, e),
        };
        let storage = shared.storage.clone();
        let appended = tokio::task::spawn_blocking(move || storage.append(&txns).map(|()| txns))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()));
        let txns = match appended {
            Ok(txns) => txns,
            Err(e) => return fail_all(&shared, batch, format!("log append failed: {e}")),
        };
        if let Some(last) = txns.last() {
            shared.committed.store(last.zxid, Ordering::Release);
        }
        since_snapshot += txns.len() as u64;
        let want_snapshot = since_snapshot >= snapshot_every_txns;
        let tree = apply(&shared, txns, std::mem::take(&mut batch), want_snapshot);
        // A snapshot still being written makes this one wait for a later batch.
        if let Some(tree) = tree {
            if snapshots.try_send(tree).is_ok() {
                since_snapshot = 0;
            }
        }
    }
}

/// Gives each proposal its zxid and the leader's time.
fn stamp(shared: &Shared, seq: &mut Sequencer, batch: &[Proposal]) -> Result<Vec<Txn>, String> {
    let epoch = shared.epoch.load(Ordering::Acquire);
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    seq.last_time_ms = seq.last_time_ms.max(now_ms);
    let mut txns = Vec::with_capacity(batch.len());
    for p in batch {
        if seq.counter >= ZXID_COUNTER_MAX {
            // A new epoch starts through an election; an ensemble of one restarts.
            return Err("the zxid counter of this epoch is exhausted; restart the server".into());
        }
        seq.counter += 1;
        txns.push(Txn {
            zxid: make_zxid(epoch, seq.counter),
            time_ms: seq.last_time_ms,
            session_id: p.session_id,
            request_id: p.request_id,
            fence: p.fence.clone(),
            op: p.op.clone(),
        });
    }
    Ok(txns)
}

/// Applies committed txns in order, publishes events, answers callers; with
/// `want_snapshot`, returns the tree as it stands after the batch (an O(1) clone).
fn apply(
    shared: &Shared,
    txns: Vec<Txn>,
    batch: Vec<Proposal>,
    want_snapshot: bool,
) -> Option<DataTree> {
    let mut replies = Vec::with_capacity(batch.len());
    let snapshot = {
        let mut tree = shared.tree.write().unwrap_or_else(PoisonError::into_inner);
        for (txn, proposal) in txns.iter().zip(batch) {
            let applied = tree.apply(txn);
            shared.hub.publish(txn.zxid, &applied.events);
            track_sessions(shared, txn, &applied.result);
            let committed = Committed {
                zxid: txn.zxid,
                result: applied.result,
            };
            replies.push((proposal.reply, committed));
        }
        if let Some(last) = txns.last() {
            shared.applied.send_replace(last.zxid);
        }
        want_snapshot.then(|| tree.clone())
    };
    for (reply, committed) in replies {
        // The caller may have gone (cancelled); the write stands regardless.
        let _ = reply.send(Ok(committed));
    }
    snapshot
}

/// Keeps the deadline tracker in step with the replicated session table.
fn track_sessions(shared: &Shared, txn: &Txn, result: &Result<TxnResult, crate::tree::TreeError>) {
    match (&txn.op, result) {
        (TxnOp::OpenSession { .. }, Ok(TxnResult::SessionOpened { session_id, ttl_ms })) => {
            let now = shared.now_ms();
            let ttl = u64::try_from(*ttl_ms).unwrap_or(0);
            shared.lock_sessions().add(*session_id, ttl, now);
        }
        (TxnOp::CloseSession { session_id, .. }, _) => {
            shared.lock_sessions().remove(*session_id);
        }
        _ => {}
    }
}

/// Storage failed: nothing in `batch` is acknowledged, and the server stops.
fn fail_all(shared: &Shared, batch: Vec<Proposal>, reason: String) {
    shared.set_fatal(reason.clone());
    for p in batch {
        let _ = p.reply.send(Err(ReplicaError::Unavailable(reason.clone())));
    }
}
