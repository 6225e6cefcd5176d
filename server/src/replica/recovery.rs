//! Start-up: open storage, load the newest good snapshot, replay the log after it,
//! begin a new epoch, and start the runtime's tasks.
//!
//! A torn or corrupt log tail is cut by the storage layer when it opens, and reported
//! here; a corrupt snapshot is skipped for an older one if the log still reaches it.

use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::{mpsc, watch};

use super::pipeline::{self, Sequencer};
use super::{housekeeping, Replica, Shared};
use crate::config::Config;
use crate::session::SessionTracker;
use crate::storage::{RedbStorage, Storage, StorageError};
use crate::tree::DataTree;
use crate::txn::{zxid_epoch, Zxid, EPOCH_MAX};
use crate::watch::{WatchConfig, WatchHub};

/// Keys of the durable epochs (Zab's accepted and current epoch).
pub(crate) const ACCEPTED_EPOCH: &str = "accepted_epoch";
pub(crate) const CURRENT_EPOCH: &str = "current_epoch";

/// How many log entries replay reads at a time.
const REPLAY_CHUNK_TXNS: usize = 10_000;

/// The server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot create data folder {path}: {source}")]
    DataDir {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("recovery failed: {0}")]
    Recovery(String),
}

pub(super) async fn start(config: &Config) -> Result<Replica, StartError> {
    let dir = config.data_dir.clone();
    std::fs::create_dir_all(&dir).map_err(|source| StartError::DataDir {
        path: dir.clone(),
        source,
    })?;
    let file = dir.join("concord.redb");
    let (storage, tree) = tokio::task::spawn_blocking(move || recover(&file))
        .await
        .map_err(|e| StartError::Recovery(e.to_string()))??;
    let storage: Arc<dyn Storage> = Arc::new(storage);
    let epoch = begin_epoch(storage.as_ref(), tree.last_zxid())?;
    tracing::info!(
        zxid = format_args!("{:#x}", tree.last_zxid()),
        epoch,
        nodes = tree.node_count(),
        "recovered"
    );
    Ok(launch(config, storage, tree, epoch))
}

/// Loads the newest good snapshot and replays the log after it.
fn recover(file: &std::path::Path) -> Result<(RedbStorage, DataTree), StartError> {
    let (storage, report) = RedbStorage::open(file)?;
    if let Some(cut) = &report.tail_cut {
        tracing::warn!(
            first_bad_zxid = format_args!("{:#x}", cut.first_bad_zxid),
            removed = cut.entries_removed,
            reason = %cut.reason,
            "cut a torn or corrupt log tail"
        );
    }
    let mut tree = load_snapshot(&storage)?;
    loop {
        let txns = storage.read_after(tree.last_zxid(), REPLAY_CHUNK_TXNS)?;
        let Some(last) = txns.last().map(|t| t.zxid) else {
            break;
        };
        for txn in &txns {
            // Results were decided when the txn first applied; replay repeats them.
            let _ = tree.apply(txn);
        }
        debug_assert_eq!(tree.last_zxid(), last);
    }
    let stored = storage.last_zxid()?;
    if tree.last_zxid() != stored {
        return Err(StartError::Recovery(format!(
            "replay reached zxid {:#x} but storage holds up to {stored:#x}",
            tree.last_zxid()
        )));
    }
    Ok((storage, tree))
}

/// The newest snapshot that loads and decodes, if the log reaches back to it.
fn load_snapshot(storage: &RedbStorage) -> Result<DataTree, StartError> {
    let log_start = storage.log_start()?;
    for zxid in storage.snapshots()?.into_iter().rev() {
        if zxid < log_start {
            break;
        }
        let decoded = storage
            .load_snapshot(zxid)
            .map_err(|e| e.to_string())
            .and_then(|bytes| DataTree::decode_snapshot(&bytes).map_err(|e| e.to_string()));
        match decoded {
            Ok(tree) => return Ok(tree),
            Err(e) => {
                tracing::warn!(zxid = format_args!("{zxid:#x}"), error = %e, "skipping a bad snapshot")
            }
        }
    }
    if log_start > 0 {
        return Err(StartError::Recovery(format!(
            "no usable snapshot, and the log starts after zxid {log_start:#x}"
        )));
    }
    Ok(DataTree::new())
}

/// Persists a new epoch above every one seen (as a Zab leader would) and returns it.
fn begin_epoch(storage: &dyn Storage, last_zxid: Zxid) -> Result<u32, StartError> {
    let accepted = storage.get_u64(ACCEPTED_EPOCH)?.unwrap_or(0);
    let seen = accepted.max(u64::from(zxid_epoch(last_zxid)));
    let epoch = seen + 1;
    if epoch > u64::from(EPOCH_MAX) {
        return Err(StartError::Recovery("epochs exhausted".into()));
    }
    storage.set_u64(ACCEPTED_EPOCH, epoch)?;
    storage.set_u64(CURRENT_EPOCH, epoch)?;
    u32::try_from(epoch).map_err(|e| StartError::Recovery(e.to_string()))
}

/// Builds the shared state and spawns the pipeline and housekeeping tasks.
fn launch(config: &Config, storage: Arc<dyn Storage>, tree: DataTree, epoch: u32) -> Replica {
    let last_zxid = tree.last_zxid();
    let hub = WatchHub::new(
        WatchConfig {
            queue_txns_max: config.watch_queue_txns_max,
            history_txns_max: config.watch_history_txns_max,
            ..WatchConfig::default()
        },
        last_zxid,
    );
    let (proposals_tx, proposals_rx) = mpsc::channel(config.proposal_queue_max);
    let started = tokio::time::Instant::now();
    // Every recovered session gets a fresh full TTL.
    let mut sessions = SessionTracker::new();
    for (id, entry) in tree.sessions() {
        sessions.add(id, u64::try_from(entry.ttl_ms).unwrap_or(0), 0);
    }
    let shared = Arc::new(Shared {
        server_id: config.server_id,
        tick_ms: config.tick_ms,
        tree: RwLock::new(tree),
        applied: watch::Sender::new(last_zxid),
        committed: AtomicU64::new(last_zxid),
        epoch: AtomicU32::new(epoch),
        proposals: proposals_tx,
        hub,
        storage,
        sessions: Mutex::new(sessions),
        started,
        stop: watch::Sender::new(None),
    });
    let (snap_tx, snap_rx) = mpsc::channel(1);
    let seq = Sequencer {
        counter: 0,
        last_time_ms: 0,
    };
    tokio::spawn(pipeline::run(
        shared.clone(),
        proposals_rx,
        seq,
        config.batch_txns_max,
        snap_tx,
        config.snapshot_every_txns,
    ));
    tokio::spawn(housekeeping::snapshotter(
        Arc::downgrade(&shared),
        snap_rx,
        config.snapshots_keep,
    ));
    tokio::spawn(housekeeping::ticker(
        Arc::downgrade(&shared),
        config.tick_ms,
    ));
    Replica { shared }
}
