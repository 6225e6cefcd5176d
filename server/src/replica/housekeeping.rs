//! Background duties of the replica: every tick, on the leader, propose the expiry of
//! sessions whose deadline passed and the reaping of empty containers and expired TTL
//! nodes; on a follower, report the sessions its clients kept alive to the leader; and
//! write snapshots handed over by the pipeline, purge what they make obsolete, and
//! hand them back so the Zab core drops the log they cover.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::mpsc;

use super::pipeline::SnapshotJob;
use super::{lock, Replica, Shared};
use crate::tree::TreeError;
use crate::txn::{CloseReason, TxnOp};
use crate::zab::Snapshot;

/// Most reap proposals started per tick (the rest wait for later ticks).
const REAPS_PER_TICK_MAX: usize = 256;

/// Proposes session expiries and reaps once per tick until the server stops.
pub(super) async fn ticker(shared: Weak<Shared>, tick_ms: u64) {
    let mut interval = tokio::time::interval(Duration::from_millis(tick_ms.max(1)));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let reaping: Arc<Mutex<HashSet<String>>> = Arc::default();
    loop {
        interval.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if shared.stop.borrow().is_some() {
            return;
        }
        let replica = Replica { shared };
        // Only the leader expires sessions and reaps nodes.
        if replica.is_leader() {
            expire_sessions(&replica);
            reap_nodes(&replica, &reaping);
        } else {
            report_touched(&replica).await;
        }
    }
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

fn expire_sessions(replica: &Replica) {
    let now = replica.now_ms();
    let expired = replica.shared.lock_sessions().take_expired(now);
    for session_id in expired {
        let replica = replica.clone();
        tokio::spawn(async move {
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
                }
                Err(e) => {
                    tracing::warn!(session_id, error = %e, "expiry not proposed; will retry");
                    replica.shared.lock_sessions().retry_expiry(session_id);
                }
            }
        });
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
/// before them, and hands each written snapshot back for `Node::compact`. A storage
/// failure here stops the server like any other.
pub(super) async fn snapshotter(
    shared: Weak<Shared>,
    mut jobs: mpsc::Receiver<SnapshotJob>,
    compacted: mpsc::Sender<Snapshot>,
    keep: usize,
) {
    while let Some(tree) = jobs.recv().await {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let storage = shared.storage.clone();
        let zxid = tree.last_zxid();
        let written = tokio::task::spawn_blocking(move || {
            let bytes = tree.encode_snapshot();
            storage.save_snapshot(zxid, &bytes)?;
            storage.purge(keep)?;
            Ok::<Vec<u8>, crate::storage::StorageError>(bytes)
        })
        .await;
        match written {
            Ok(Ok(bytes)) => {
                tracing::info!(
                    zxid = format_args!("{zxid:#x}"),
                    bytes = bytes.len(),
                    "snapshot written"
                );
                let snapshot = Snapshot {
                    zxid,
                    data: bytes.into(),
                };
                // The pipeline gone means the server is stopping.
                let _ = compacted.send(snapshot).await;
            }
            Ok(Err(e)) => return shared.set_fatal(format!("snapshot at {zxid:#x} failed: {e}")),
            Err(e) => return shared.set_fatal(format!("snapshot task failed: {e}")),
        }
    }
}
