//! Start-up: open storage, load the newest good snapshot and the log after it, hand
//! them to a Zab core (`Restored`), and start the runtime's tasks. The tree starts as
//! the snapshot only: the core hands the log entries above it out as committed once
//! an epoch is established (on an ensemble of one, at once), and `start` waits for
//! that so a restarted server never serves reads from behind its own log.
//!
//! A torn or corrupt log tail is cut by the storage layer when it opens, and reported
//! here; a corrupt snapshot is skipped for an older one if the log still reaches it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, watch};
use tonic::service::Routes;

use super::forward::{ForwardService, Forwarder};
use super::persist::Persister;
use super::pipeline::{Inputs, Pipeline};
use super::{housekeeping, Replica, Shared};
use crate::config::{Config, Role};
use crate::peer::{Inbound, PeerConfig, PeerHandle, PeerTransport};
use crate::storage::{RedbStorage, Storage, StorageError};
use crate::tree::DataTree;
use crate::txn::{zxid_epoch, Txn, Zxid};
use crate::watch::{WatchConfig, WatchHub};
use crate::zab::{self, Node, Restored, Snapshot};

/// The transport's handle and the channel its messages arrive on.
type Peers = (PeerHandle, mpsc::Receiver<Inbound>);

/// Keys of the durable epochs (Zab's accepted and current epoch).
pub(crate) const ACCEPTED_EPOCH: &str = "accepted_epoch";
pub(crate) const CURRENT_EPOCH: &str = "current_epoch";

/// How many log entries recovery reads at a time.
const REPLAY_CHUNK_TXNS: usize = 10_000;

/// How long an ensemble of one may take to re-establish itself at start-up.
const ESTABLISH_WAIT_MAX: Duration = Duration::from_secs(60);

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

/// What recovery found on disk.
struct Recovered {
    storage: RedbStorage,
    /// The newest good snapshot's state (empty without one).
    tree: DataTree,
    restored: Restored,
}

pub(super) async fn start(config: &Config) -> Result<Replica, StartError> {
    let dir = config.data_dir.clone();
    std::fs::create_dir_all(&dir).map_err(|source| StartError::DataDir {
        path: dir.clone(),
        source,
    })?;
    let file = dir.join("concord.redb");
    let recovered = tokio::task::spawn_blocking(move || recover(&file))
        .await
        .map_err(|e| StartError::Recovery(e.to_string()))??;
    let last_zxid = recovered
        .restored
        .log
        .last()
        .map_or(recovered.tree.last_zxid(), |t| t.zxid);
    tracing::info!(
        snapshot_zxid = format_args!("{:#x}", recovered.tree.last_zxid()),
        last_zxid = format_args!("{last_zxid:#x}"),
        log_txns = recovered.restored.log.len(),
        accepted_epoch = recovered.restored.accepted_epoch,
        "recovered"
    );
    let ensemble = config.ensemble();
    if ensemble.iter().all(|m| m.id == config.server_id) {
        let replica = launch(config, recovered, None)?;
        wait_established(&replica, last_zxid).await?;
        return Ok(replica);
    }
    let (service, slot) = ForwardService::new(config.server_id, config.cluster_id, &ensemble);
    let peers = start_peers(config, Routes::new(service)).await?;
    let replica = launch(config, recovered, Some(peers))?;
    let _ = slot.set(Arc::downgrade(&replica.shared));
    Ok(replica)
}

/// The transport to the other members, listening on `config.peer_addr`, with the
/// `Forward` service beside it.
async fn start_peers(config: &Config, forward: Routes) -> Result<Peers, StartError> {
    let listener = tokio::net::TcpListener::bind(config.peer_addr)
        .await
        .map_err(|e| StartError::Recovery(format!("peer address {}: {e}", config.peer_addr)))?;
    let peer_config = PeerConfig::new(config.server_id, config.cluster_id, config.ensemble());
    PeerTransport::start(peer_config, listener, forward)
        .map_err(|e| StartError::Recovery(format!("peer transport: {e}")))
}

/// The voters and observers of the ensemble, for the Zab core.
fn zab_config(config: &Config) -> zab::Config {
    let ensemble = config.ensemble();
    let ids = |role| {
        ensemble
            .iter()
            .filter(|m| m.role == role)
            .map(|m| m.id)
            .collect::<Vec<_>>()
    };
    zab::Config {
        sync_limit_ticks: config.sync_limit_ticks,
        init_limit_ticks: config.init_limit_ticks,
        ..zab::Config::new(config.server_id, ids(Role::Voter), ids(Role::Observer))
    }
}

/// Waits until the core leads and has applied the whole recovered log.
async fn wait_established(replica: &Replica, last_zxid: Zxid) -> Result<(), StartError> {
    let mut serving = replica.shared.serving.subscribe();
    let mut stop = replica.shared.stop.subscribe();
    let ready = async {
        let _ = serving.wait_for(|s| *s).await;
        replica.wait_applied(last_zxid, ESTABLISH_WAIT_MAX).await
    };
    tokio::select! {
        r = tokio::time::timeout(ESTABLISH_WAIT_MAX, ready) => match r {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(StartError::Recovery(e.to_string())),
            Err(_) => Err(StartError::Recovery("the ensemble of one did not establish an epoch".into())),
        },
        _ = stop.wait_for(Option::is_some) => {
            Err(StartError::Recovery(replica.stopped().await))
        }
    }
}

/// Loads the newest good snapshot, the log after it and the epochs.
fn recover(file: &std::path::Path) -> Result<Recovered, StartError> {
    let (storage, report) = RedbStorage::open(file)?;
    if let Some(cut) = &report.tail_cut {
        tracing::warn!(
            first_bad_zxid = format_args!("{:#x}", cut.first_bad_zxid),
            removed = cut.entries_removed,
            reason = %cut.reason,
            "cut a torn or corrupt log tail"
        );
    }
    let (tree, snapshot) = load_snapshot(&storage)?;
    let log = read_log(&storage, tree.last_zxid())?;
    let last = log.last().map_or(tree.last_zxid(), |t| t.zxid);
    let stored = storage.last_zxid()?;
    if last != stored {
        return Err(StartError::Recovery(format!(
            "the log reaches zxid {last:#x} but storage holds up to {stored:#x}"
        )));
    }
    let epoch = |key| -> Result<u32, StartError> {
        let value = storage.get_u64(key)?.unwrap_or(0);
        u32::try_from(value).map_err(|_| StartError::Recovery(format!("{key} {value} is too big")))
    };
    // A new epoch must be above every zxid's epoch in the history.
    let accepted_epoch = epoch(ACCEPTED_EPOCH)?.max(zxid_epoch(last));
    let current_epoch = epoch(CURRENT_EPOCH)?;
    let restored = Restored {
        accepted_epoch,
        current_epoch,
        snapshot,
        log,
    };
    Ok(Recovered {
        storage,
        tree,
        restored,
    })
}

/// Every log entry above `after`, ascending.
fn read_log(storage: &RedbStorage, after: Zxid) -> Result<Vec<Txn>, StartError> {
    let mut log: Vec<Txn> = Vec::new();
    loop {
        let from = log.last().map_or(after, |t| t.zxid);
        let txns = storage.read_after(from, REPLAY_CHUNK_TXNS)?;
        if txns.is_empty() {
            return Ok(log);
        }
        log.extend(txns);
    }
}

/// The newest snapshot that loads and decodes, if the log reaches back to it.
fn load_snapshot(storage: &RedbStorage) -> Result<(DataTree, Option<Snapshot>), StartError> {
    let log_start = storage.log_start()?;
    for zxid in storage.snapshots()?.into_iter().rev() {
        if zxid < log_start {
            break;
        }
        let decoded = storage
            .load_snapshot(zxid)
            .map_err(|e| e.to_string())
            .and_then(|bytes| {
                let tree = DataTree::decode_snapshot(&bytes).map_err(|e| e.to_string())?;
                Ok((tree, bytes))
            });
        match decoded {
            Ok((tree, bytes)) => {
                let snapshot = Snapshot {
                    zxid,
                    data: bytes.into(),
                };
                return Ok((tree, Some(snapshot)));
            }
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
    Ok((DataTree::new(), None))
}

/// A seed for the core's randomness (election jitter): this server and the time.
fn seed(server_id: u64) -> u64 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| {
        u64::try_from(d.as_nanos() & u128::from(u64::MAX)).unwrap_or(0)
    });
    server_id.rotate_left(32) ^ nanos
}

/// Builds the shared state and spawns the pipeline, persister and housekeeping tasks.
fn launch(
    config: &Config,
    recovered: Recovered,
    peers: Option<Peers>,
) -> Result<Replica, StartError> {
    let Recovered {
        storage,
        tree,
        restored,
    } = recovered;
    let node = Node::new(zab_config(config), restored, seed(config.server_id))
        .map_err(|e| StartError::Recovery(format!("zab: {e}")))?;
    let storage: Arc<dyn Storage> = Arc::new(storage);
    let snapshot_zxid = tree.last_zxid();
    let hub = WatchHub::new(
        WatchConfig {
            queue_txns_max: config.watch_queue_txns_max,
            history_txns_max: config.watch_history_txns_max,
            ..WatchConfig::default()
        },
        snapshot_zxid,
    );
    let (proposals_tx, proposals_rx) = mpsc::channel(config.proposal_queue_max);
    let (reads_tx, reads_rx) = mpsc::channel(config.proposal_queue_max);
    let started = tokio::time::Instant::now();
    // Every recovered session gets a fresh full TTL (those opened in the log after
    // the snapshot are added as the log is applied).
    let sessions = super::deadlines_of(&tree, 0);
    let shared = Arc::new(Shared {
        server_id: config.server_id,
        tick_ms: config.tick_ms,
        leader_wait: Duration::from_millis(config.leader_wait_ms_max),
        tree: RwLock::new(tree),
        applied: watch::Sender::new(snapshot_zxid),
        committed: AtomicU64::new(snapshot_zxid),
        epoch: AtomicU32::new(0),
        serving: watch::Sender::new(false),
        leader: AtomicU64::new(0),
        forwarder: peers.is_some().then(|| {
            // A path to the leader that answers no Touch (sent every tick) for two
            // of the core's own give-up periods counts as cut.
            let stale = 2 * config.sync_limit_ticks * config.tick_ms;
            let stale = Duration::from_millis(stale);
            Forwarder::new(
                config.server_id,
                config.cluster_id,
                &config.ensemble(),
                stale,
            )
        }),
        touched: Mutex::new(HashSet::new()),
        role: watch::Sender::new(crate::zab::Role::Looking),
        proposals: proposals_tx,
        reads: reads_tx,
        hub,
        storage: storage.clone(),
        sessions: Mutex::new(sessions),
        started,
        stop: watch::Sender::new(None),
    });
    let (snap_tx, snap_rx) = mpsc::channel(1);
    let (compacted_tx, compacted_rx) = mpsc::channel(1);
    let (persisted_tx, persisted_rx) = mpsc::unbounded_channel();
    let persist = Persister::start(storage, persisted_tx)
        .map_err(|e| StartError::Recovery(format!("cannot start the persister thread: {e}")))?;
    let pipeline = Pipeline {
        shared: shared.clone(),
        node,
        waiting: HashMap::new(),
        reading: HashMap::new(),
        next_read_id: 0,
        last_time_ms: 0,
        persist,
        snapshots: snap_tx,
        since_snapshot: 0,
        snapshot_every_txns: config.snapshot_every_txns,
        batch_txns_max: config.batch_txns_max,
        inflight_max: config.proposal_queue_max,
        tick_ms: config.tick_ms,
        peers: peers.as_ref().map(|(handle, _)| handle.clone()),
    };
    let inputs = Inputs {
        proposals: proposals_rx,
        reads: reads_rx,
        persisted: persisted_rx,
        compacted: compacted_rx,
        peers: peers.map(|(_, inbox)| inbox),
    };
    tokio::spawn(pipeline.run(inputs));
    tokio::spawn(housekeeping::snapshotter(
        Arc::downgrade(&shared),
        snap_rx,
        compacted_tx,
        config.snapshots_keep,
    ));
    tokio::spawn(housekeeping::ticker(
        Arc::downgrade(&shared),
        config.tick_ms,
    ));
    Ok(Replica { shared })
}
