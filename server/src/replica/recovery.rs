//! Start-up: open storage, load the newest good snapshot and the log after it, hand
//! them to a Zab core (`Restored`), and start the runtime's tasks. The tree starts as
//! the snapshot only: the core hands the log entries above it out as committed once
//! an epoch is established (on an ensemble of one, at once), and `start` waits for
//! that so a restarted server never serves reads from behind its own log.
//!
//! A damaged history is never shortened: a log entry that fails its check (the
//! storage layer refuses to open with it), or a newest snapshot that cannot be read
//! when the log does not reach back to an older good one, stops the start with
//! `StartError::Damaged`, naming the zxid and the way out (`discard_local_state`,
//! run by `concord --discard-local-state`). A store so discarded carries a durable
//! must-resync marker: the Zab core neither votes nor leads until it has synced
//! from an established leader (see `zab::Restored::must_resync`).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, watch};
use tonic::service::Routes;

use super::engine::{Engine, Readable, SnapshotPolicy};
use super::forward::{ForwardService, Forwarder};
use super::persist::Persister;
use super::pipeline::{Inputs, Pipeline, Shell};
use super::supervise::spawn_essential;
use super::{housekeeping, Replica, Shared};
use crate::config::{Config, Role};
use crate::peer::{InboundRx, PeerConfig, PeerHandle, PeerTransport, SnapshotStore};
use crate::storage::{RedbStorage, Storage, StorageError};
use crate::tree::DataTree;
use crate::txn::{zxid_epoch, Txn, Zxid};
use crate::watch::{WatchConfig, WatchHub};
use crate::zab::{self, Node, Restored};

/// The transport's handle and the channel its messages arrive on.
type Peers = (PeerHandle, InboundRx);

/// Keys of the durable epochs (Zab's accepted and current epoch).
pub(crate) const ACCEPTED_EPOCH: &str = "accepted_epoch";
pub(crate) const CURRENT_EPOCH: &str = "current_epoch";
/// Key of the durable must-resync marker (1: set by `discard_local_state`, cleared
/// once the core has synced from an established leader).
pub(crate) const MUST_RESYNC: &str = "must_resync";

/// The store's file in the data folder.
pub(crate) const STORE_FILE: &str = "concord.redb";

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
    /// The history on disk is damaged (a log entry or snapshot fails its check) and
    /// cannot be used whole: the server refuses it rather than lose what follows.
    #[error("damaged history in {}: {detail}; this server will not start with it, and nothing was removed. {}", .file.display(), way_out(*.ensemble))]
    Damaged {
        file: std::path::PathBuf,
        /// What is wrong, naming the zxid.
        detail: String,
        /// Whether this server is a member of a larger ensemble (the way out differs).
        ensemble: bool,
    },
}

/// What an operator can do about a damaged history.
fn way_out(ensemble: bool) -> &'static str {
    if ensemble {
        "The way out (the rest of the ensemble keeps running): run `concord \
         --discard-local-state` with this server's usual flags and config; it moves \
         concord.redb aside (renamed concord.redb.discarded-<unix seconds>, never \
         deleted) and exits. Then start the server as usual: it rejoins by SNAP from \
         the leader, and neither votes nor leads until it has. See \
         docs/operations.md, \"Corruption and recovery\"."
    } else {
        "The way out on a single server: restore the data folder from a backup; or run \
         `concord --discard-local-state` with the same flags (it moves concord.redb \
         aside as concord.redb.discarded-<unix seconds>) and start again EMPTY: every \
         write in the damaged file is then lost unless restored. See \
         docs/operations.md, \"Corruption and recovery\"."
    }
}

/// What recovery found on disk.
struct Recovered {
    storage: Arc<RedbStorage>,
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
    let file = dir.join(STORE_FILE);
    let ensemble = config.ensemble().iter().any(|m| m.id != config.server_id);
    let recovered = tokio::task::spawn_blocking(move || recover(&file, ensemble))
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
    let (service, slot) = ForwardService::new(
        config.server_id,
        config.cluster_id,
        &ensemble,
        super::forward::message_bytes_max(config.request_bytes_max()),
    );
    let snapshots = SnapshotStore(Some(recovered.storage.clone()));
    let peers = start_peers(config, Routes::new(service), snapshots).await?;
    let replica = launch(config, recovered, Some(peers))?;
    let _ = slot.set(Arc::downgrade(&replica.shared));
    Ok(replica)
}

/// The transport to the other members, listening on `config.peer_addr`, with the
/// `Forward` service beside it.
async fn start_peers(
    config: &Config,
    forward: Routes,
    snapshots: SnapshotStore,
) -> Result<Peers, StartError> {
    let listener = crate::listen::bind(config.peer_addr)
        .map_err(|e| StartError::Recovery(format!("peer address {}: {e}", config.peer_addr)))?;
    let tls = crate::security::ServerTls::peer_port(config)
        .map_err(|e| StartError::Recovery(format!("peer TLS: {e}")))?;
    let peer_config = PeerConfig {
        server_tls: tls,
        client_tls: crate::security::PeerClientTls::from_config(config),
        ..peer_config(config)
    };
    PeerTransport::start(peer_config, listener, forward, snapshots)
        .map_err(|e| StartError::Recovery(format!("peer transport: {e}")))
}

/// The peer transport's settings from the server's.
pub(super) fn peer_config(config: &Config) -> PeerConfig {
    let defaults = PeerConfig::new(config.server_id, config.cluster_id, config.ensemble());
    PeerConfig {
        frame_bytes_max: config.peer_frame_bytes_max,
        message_bytes_max: config.peer_message_bytes_max,
        queue_bytes_max: config.peer_queue_bytes_max,
        inbound_bytes_max: config.peer_inbound_bytes_max,
        connections_max: match config.peer_connections_max {
            0 => defaults.connections_max,
            n => n,
        },
        connection_idle_timeout_ms: config.peer_connection_idle_timeout_ms,
        ..defaults
    }
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

/// Opens the redb store at `file` and recovers from it (`recover_from`). A damaged
/// history is `StartError::Damaged`.
fn recover(file: &std::path::Path, ensemble: bool) -> Result<Recovered, StartError> {
    let damaged = |detail: String| StartError::Damaged {
        file: file.to_path_buf(),
        detail,
        ensemble,
    };
    let (storage, _) = RedbStorage::open(file).map_err(|e| match e {
        e @ StorageError::BadLogEntry { .. } => damaged(e.to_string()),
        e => StartError::Storage(e),
    })?;
    let (tree, restored) = recover_from(&storage, ensemble).map_err(|e| match e {
        RecoverError::Damaged(detail) => damaged(detail),
        RecoverError::Start(e) => e,
    })?;
    Ok(Recovered {
        storage: Arc::new(storage),
        tree,
        restored,
    })
}

/// Why a store cannot be recovered from.
#[derive(Debug)]
pub(crate) enum RecoverError {
    /// The history is damaged (names what): a log entry fails its check, or the
    /// snapshots that the log reaches back to are all unreadable.
    Damaged(String),
    Start(StartError),
}

impl From<StorageError> for RecoverError {
    fn from(e: StorageError) -> Self {
        match e {
            e @ StorageError::BadLogEntry { .. } => RecoverError::Damaged(e.to_string()),
            e => RecoverError::Start(e.into()),
        }
    }
}

impl From<StartError> for RecoverError {
    fn from(e: StartError) -> Self {
        RecoverError::Start(e)
    }
}

/// What any store holds, for a Zab core to start from: the newest good snapshot's
/// tree, and the log after it with the epochs and the must-resync marker. On an
/// ensemble of one a must-resync marker is cleared (there is no leader to sync
/// from). The simulator recovers its servers with this too.
pub(crate) fn recover_from(
    storage: &dyn Storage,
    ensemble: bool,
) -> Result<(DataTree, Restored), RecoverError> {
    let (tree, snapshot) = load_snapshot(storage)?;
    let log = read_log(storage, tree.last_zxid())?;
    let last = log.last().map_or(tree.last_zxid(), |t| t.zxid);
    let stored = storage.last_zxid()?;
    if last != stored {
        let why = format!("the log reaches zxid {last:#x} but storage holds up to {stored:#x}");
        return Err(StartError::Recovery(why).into());
    }
    let epoch = |key| -> Result<u32, RecoverError> {
        let value = storage.get_u64(key)?.unwrap_or(0);
        u32::try_from(value)
            .map_err(|_| StartError::Recovery(format!("{key} {value} is too big")).into())
    };
    // A new epoch must be above every zxid's epoch in the history.
    let accepted_epoch = epoch(ACCEPTED_EPOCH)?.max(zxid_epoch(last));
    let current_epoch = epoch(CURRENT_EPOCH)?;
    let mut must_resync = storage.get_u64(MUST_RESYNC)?.unwrap_or(0) != 0;
    if must_resync && !ensemble {
        // An ensemble of one has no leader to sync from: it starts from what it has.
        tracing::warn!(
            "local state was discarded: this single server starts from an empty history"
        );
        storage.set_u64(MUST_RESYNC, 0)?;
        must_resync = false;
    } else if must_resync {
        tracing::warn!("local state was discarded: this server neither votes nor leads until it has synced from an established leader");
    }
    let restored = Restored {
        accepted_epoch,
        current_epoch,
        snapshot,
        log,
        must_resync,
    };
    Ok((tree, restored))
}

/// Every log entry above `after`, ascending.
fn read_log(storage: &dyn Storage, after: Zxid) -> Result<Vec<Txn>, StorageError> {
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

/// The newest snapshot that loads and decodes, if the log reaches back to it. An
/// unreadable one is skipped for an older one only while the log covers the gap
/// (the snapshot is at or above `log_start`); with none left, starting from empty
/// needs the whole log (`log_start` 0). Otherwise: Damaged, naming the bad ones.
fn load_snapshot(storage: &dyn Storage) -> Result<(DataTree, Option<Zxid>), RecoverError> {
    let log_start = storage.log_start()?;
    let mut bad: Vec<String> = Vec::new();
    for zxid in storage.snapshots()?.into_iter().rev() {
        if zxid < log_start {
            break;
        }
        let decoded = storage
            .load_snapshot(zxid)
            .map_err(|e| e.to_string())
            .and_then(|bytes| DataTree::decode_snapshot(&bytes).map_err(|e| e.to_string()));
        match decoded {
            // The bytes stay in storage: the peer transport reads them for a SNAP.
            Ok(tree) => return Ok((tree, Some(zxid))),
            Err(e) => {
                tracing::warn!(zxid = format_args!("{zxid:#x}"), error = %e, "skipping a bad snapshot; the log covers the gap to an older one");
                bad.push(format!("snapshot at zxid {zxid:#x} is unreadable ({e})"));
            }
        }
    }
    if log_start > 0 {
        let what = if bad.is_empty() {
            "no snapshot".to_string()
        } else {
            bad.join(", ")
        };
        return Err(RecoverError::Damaged(format!(
            "{what}, and the log does not cover the gap to an older one (it holds only the txns after zxid {log_start:#x})"
        )));
    }
    Ok((DataTree::new(), None))
}

/// Discards this server's local state on the operator's explicit request
/// (`concord --discard-local-state`): the store is moved aside (renamed
/// `concord.redb.discarded-<unix seconds>`, never deleted) and replaced by an empty
/// one that keeps the old epochs (so promises made to leaders still hold) and
/// carries the must-resync marker. Returns what was done, for the operator.
pub fn discard_local_state(config: &Config) -> Result<String, StartError> {
    let dir = &config.data_dir;
    std::fs::create_dir_all(dir).map_err(|source| StartError::DataDir {
        path: dir.clone(),
        source,
    })?;
    let file = dir.join(STORE_FILE);
    let suffix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
        .to_string();
    let done = RedbStorage::discard(&file, &suffix, &[(MUST_RESYNC, 1)])?;
    let mut report = match &done.kept_at {
        Some(aside) => format!("moved {} to {}; ", file.display(), aside.display()),
        None => format!("{} did not exist; ", file.display()),
    };
    report.push_str(&format!("created an empty {}", file.display()));
    let epochs: Vec<String> = done
        .carried
        .iter()
        .filter(|(k, _)| k == ACCEPTED_EPOCH || k == CURRENT_EPOCH)
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    if !epochs.is_empty() {
        report.push_str(&format!(" keeping {}", epochs.join(", ")));
    }
    if let Some(why) = &done.unreadable {
        report.push_str(&format!(
            " (the old epochs could not be read: {why}; the server will not vote \
             before it has synced, but a leader of an older epoch could then sync it)"
        ));
    }
    let ensemble = config.ensemble().iter().any(|m| m.id != config.server_id);
    if ensemble {
        report.push_str(". Start the server as usual: it rejoins by SNAP from the leader and does not vote or lead until it has synced.");
    } else {
        report.push_str(". This is a single server: it starts EMPTY; every write in the old file is lost unless restored from a backup.");
    }
    Ok(report)
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
        mut tree,
        restored,
    } = recovered;
    // Usage under the teams' roots, and sessions per team, are derived state:
    // counted once here, then kept up to date by every apply.
    let policy = crate::security::Policy::from_config(config)
        .map_err(|e| StartError::Recovery(format!("config: {e}")))?;
    let mut quota = crate::security::quota::Ledger::with_policy(&policy);
    tree.track_usage(quota.roots());
    quota.recount_sessions_of(&tree);
    let node = Node::new(zab_config(config), restored, seed(config.server_id))
        .map_err(|e| StartError::Recovery(format!("zab: {e}")))?;
    let metrics = Arc::new(crate::telemetry::Metrics::new(storage.commit_seconds()));
    let storage: Arc<dyn Storage> = storage;
    #[cfg(test)]
    let storage = housekeeping::stall::appends(storage);
    let observe = super::persist::Observe {
        metrics: metrics.clone(),
        slow: Duration::from_millis(config.fsync_warn_threshold_ms),
    };
    let (persist, persisted_rx) =
        Persister::start_observed(storage.clone(), config.persist_queue_bytes_max, observe)
            .map_err(|e| StartError::Recovery(format!("cannot start the persister thread: {e}")))?;
    let snapshot_zxid = tree.last_zxid();
    let hub = WatchHub::new(
        WatchConfig {
            queue_txns_max: config.watch_queue_txns_max,
            queue_bytes_max: config.watch_queue_bytes_max,
            memory_bytes_max: config.watch_memory_bytes_max,
            history_txns_max: config.watch_history_txns_max,
            history_bytes_max: config.watch_history_bytes_max,
            replays_max: config.watch_replays_max,
        },
        snapshot_zxid,
    );
    let (proposals_tx, proposals_rx) = mpsc::channel(config.proposal_queue_max);
    let (reads_tx, reads_rx) = mpsc::channel(config.proposal_queue_max);
    let started = tokio::time::Instant::now();
    // Every recovered session gets a fresh full TTL (those opened in the log after
    // the snapshot are added as the log is applied).
    let sessions = super::deadlines_of(&tree, 0);
    let readable = Readable {
        tree: Arc::new(RwLock::new(tree)),
        sessions: Arc::new(Mutex::new(sessions)),
        metrics,
    };
    let shared = Arc::new(Shared {
        server_id: config.server_id,
        tick_ms: config.tick_ms,
        leader_wait: Duration::from_millis(config.leader_wait_ms_max),
        leaderless: Mutex::new(None),
        contact: watch::Sender::new(super::contact::Contact::LostAt(0)),
        ticked_ms: AtomicU64::new(0),
        sync_limit_ms: config.sync_limit_ticks.saturating_mul(config.tick_ms),
        applied: watch::Sender::new(snapshot_zxid),
        committed: AtomicU64::new(snapshot_zxid),
        log_bytes: AtomicU64::new(0),
        log_bytes_peak: AtomicU64::new(0),
        epoch: AtomicU32::new(0),
        serving: watch::Sender::new(false),
        synced: AtomicBool::new(false),
        persist_backlog: persist.backlog(),
        peer_transport: peers.as_ref().map(|(handle, _)| handle.clone()),
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
                super::forward::message_bytes_max(config.request_bytes_max()),
                crate::security::PeerClientTls::from_config(config),
            )
        }),
        touched: Mutex::new(HashSet::new()),
        role: watch::Sender::new(crate::zab::Role::Looking),
        proposals: proposals_tx,
        proposal_bytes: super::pipeline::ProposalBytes::new(config.proposal_queue_bytes_max),
        reads: reads_tx,
        hub,
        storage: storage.clone(),
        readable: readable.clone(),
        started,
        stop: watch::Sender::new(None),
        progress: Mutex::new(super::members::Progress::default()),
    });
    let (snap_tx, snap_rx) = mpsc::channel(1);
    #[cfg(test)]
    let snap_rx = housekeeping::stall::relay(snap_rx);
    let (compacted_tx, compacted_rx) = mpsc::channel(1);
    let shell = Shell::new(
        shared.clone(),
        persist,
        snap_tx,
        peers.as_ref().map(|(handle, _)| handle.clone()),
    );
    let snapshot_policy = SnapshotPolicy::new(
        config.snapshot_every_txns,
        config.snapshot_every_bytes,
        config.log_memory_bytes_max,
    );
    let pipeline = Pipeline {
        engine: Engine::new(shell, node, readable, snapshot_policy, quota),
        batch_txns_max: config.batch_txns_max,
        batch_bytes_max: config.batch_bytes_max,
        inflight_max: config.proposal_queue_max,
        tick_ms: config.tick_ms,
    };
    let inputs = Inputs {
        proposals: proposals_rx,
        reads: reads_rx,
        persisted: persisted_rx,
        compacted: compacted_rx,
        peers: peers.map(|(_, inbox)| inbox),
    };
    // Essential tasks: a panic in one, or an end before the server stops, is fatal.
    spawn_essential(&shared, "pipeline", pipeline.run(inputs));
    spawn_essential(
        &shared,
        "snapshotter",
        housekeeping::snapshotter(
            Arc::downgrade(&shared),
            snap_rx,
            compacted_tx,
            config.snapshots_keep,
            config.storage_compact_free_bytes_min,
        ),
    );
    spawn_essential(
        &shared,
        "ticker",
        housekeeping::ticker(Arc::downgrade(&shared), config.tick_ms),
    );
    Ok(Replica { shared })
}

#[cfg(test)]
#[path = "recovery_tests.rs"]
mod tests;
