//! The replicated state machine: the `Replica` handle the API calls, and the runtime
//! behind it.
//!
//! ```text
//!  api ─submit()─▶ route.rs: this server leads? ─▶ [proposal queue, bounded] ─▶ pipeline
//!                            follows? ─▶ forward.rs ─▶ the leader's Forward service
//!  pipeline.rs (tokio shell) ─▶ engine.rs (no IO): node.propose (zxid) ─▶ Ready
//!       Ready.persist ─▶ persist.rs: one storage.append per batch of Readies (fsync)
//!                        ─▶ engine.persisted(n) ─▶ Ready.committed ─▶ apply to tree
//!                        ─▶ watch hub ─▶ reply to callers
//!  api ─read_index()─▶ node.read_index ─▶ Ready.reads; read()/wait_applied(): tree, applied zxid
//!  housekeeping.rs: session expiry, reaping, snapshots; recovery.rs: start-up and wiring
//! ```
//!
//! A single server is a Zab ensemble of one (quorum = 1) on the same code path.
//!
//! What it must not do: speak gRPC, or know how txns change the tree (`tree/` does).

pub(crate) mod contact;
pub(crate) mod engine;
mod forward;
mod forward_link;
pub(crate) mod housekeeping;
mod members;
pub mod observe;
pub(crate) mod persist;
mod pipeline;
pub(crate) mod recovery;
mod restore;
mod route;
mod supervise;

#[cfg(test)]
mod grants_tests;
#[cfg(test)]
mod quota_tests;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use crate::config::Config;
use crate::session::SessionTracker;
use crate::storage::Storage;
use crate::telemetry::trace::WriteTrace;
use crate::tree::{DataTree, TreeError, TxnResult};
use crate::txn::{Fence, TxnOp, Zxid};
use crate::watch::WatchHub;
use forward::Forwarder;
pub(crate) use forward::Write;

pub use members::Progress;
pub use recovery::{discard_local_state, StartError};
pub use restore::{restore, RestoreError, RestoreReport};
#[cfg(test)]
pub(crate) use supervise::crash;

/// Why a request could not be carried out (as opposed to a deterministic tree error).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplicaError {
    /// The server is stopping, or its storage failed: it serves no more writes.
    #[error("server unavailable: {0}")]
    Unavailable(String),
    /// This server does not lead and could not hand the request to a leader, and
    /// did nothing with it: safe to retry, here later or elsewhere. `leader` is the
    /// one it follows, if known, and `client_addr` where that leader's clients
    /// connect; `why` says what went wrong.
    #[error("{}", not_leader_message(*leader, client_addr.as_ref(), why))]
    NotLeader {
        leader: Option<u64>,
        client_addr: Option<crate::address::Address>,
        why: String,
    },
    /// A write was handed to a leader and no outcome came back (the leader stopped,
    /// or lost its quorum, or the path to it broke with the write in flight): it may
    /// or may not commit. Retry with the same (session_id, request_id), or read first.
    #[error("the write's outcome is unknown: {0}")]
    Indeterminate(String),
    /// The wait for a zxid to be applied ran out of time.
    #[error("timed out waiting for zxid {zxid:#x} (applied {applied:#x})")]
    Timeout { zxid: Zxid, applied: Zxid },
}

fn not_leader_message(
    leader: Option<u64>,
    addr: Option<&crate::address::Address>,
    why: &str,
) -> String {
    let hint = match (leader, addr) {
        (Some(id), Some(addr)) => format!("the leader is server {id} at {addr}"),
        (Some(id), None) => format!("the leader is server {id}"),
        (None, _) => "no leader is known".to_owned(),
    };
    if why.is_empty() {
        format!("this server does not lead; {hint}")
    } else {
        format!("this server does not lead ({why}); {hint}")
    }
}

/// How many times `submit_checked` checks one write again after the leader's grant
/// table changed under it.
const GRANT_RECHECKS_MAX: usize = 4;
/// How long `submit_checked` waits for this server to apply the leader's grant change.
const GRANTS_CHANGE_WAIT_MAX: Duration = Duration::from_secs(5);

/// The outcome of a committed write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    /// The write's own zxid.
    pub zxid: Zxid,
    /// What applying it did (a deterministic error is still a committed txn).
    pub result: Result<TxnResult, TreeError>,
}

/// A linearizable read waiting for its read index.
type ReadWaiter = oneshot::Sender<Result<Zxid, ReplicaError>>;

/// Handle to the running replica; cheap to clone.
#[derive(Clone)]
pub struct Replica {
    shared: Arc<Shared>,
}

/// State shared by the handle and the runtime's tasks.
struct Shared {
    server_id: u64,
    tick_ms: u64,
    /// Longest writes wait for a leader to hand them to (this server looking, or
    /// unable to reach the leader it follows), counted from when it lost its leader,
    /// before they fail with NotLeader.
    leader_wait: Duration,
    /// Since when this server has had no leader to hand writes to, as its writes
    /// last saw it: the stretch's start and its newest sighting. Every write's wait
    /// ends `leader_wait` after the stretch began, so once it has lasted that long
    /// writes fail at once (as a looking ZooKeeper server or etcd's ErrNoLeader do)
    /// instead of each holding its client for the whole wait.
    leaderless: Mutex<Option<route::Leaderless>>,
    /// Whether this server has a leader, or since when it has had none: what it
    /// serves from its own state waits for one, for at most `leader_wait` from then
    /// (`contact.rs`).
    contact: watch::Sender<contact::Contact>,
    /// When the pipeline last ticked (`now_ms`), for `in_touch`.
    ticked_ms: AtomicU64,
    /// `sync_limit_ticks` in ms.
    sync_limit_ms: u64,
    /// The applied tree, the session deadlines and the metrics, which the engine
    /// writes (one txn batch at a time) and the API reads.
    readable: engine::Readable,
    /// The newest applied zxid, for `wait_applied` and progress.
    applied: watch::Sender<Zxid>,
    /// The newest zxid known committed (durable on a quorum).
    committed: AtomicU64,
    /// The memory the Zab core's in-memory log holds now (`Node::log_bytes`).
    log_bytes: AtomicU64,
    /// The most it has held since start (its bound is `log_memory_bytes_max` plus
    /// one txn on a leader, plus one peer message on a follower or observer).
    log_bytes_peak: AtomicU64,
    /// The epoch this server leads or follows (0 while looking).
    epoch: AtomicU32,
    /// Whether this server leads an established epoch (accepts writes and reads).
    serving: watch::Sender<bool>,
    /// Whether the core reports its leadership established here: a leader's epoch
    /// established, or a learner's sync with its leader done (UPTODATE received).
    synced: AtomicBool,
    /// The bytes queued for the persister (its queue's depth).
    persist_backlog: Arc<persist::Backlog>,
    /// The peer transport, for its queues' depths (None: an ensemble of one).
    peer_transport: Option<crate::peer::PeerHandle>,
    /// The server this one follows or leads, as the core last reported it (0: none).
    leader: AtomicU64,
    /// Hands requests to the leader when this server follows (None: an ensemble of one).
    forwarder: Option<Forwarder>,
    /// Sessions kept alive here since the last report to the leader (followers).
    touched: Mutex<HashSet<u64>>,
    /// This server's part in the ensemble, as the core last reported it.
    role: watch::Sender<crate::zab::Role>,
    /// Writes waiting for the pipeline (bounded: callers wait when it is full).
    proposals: mpsc::Sender<pipeline::Proposal>,
    /// Bytes of writes queued for the pipeline or in flight there: a caller waits
    /// for its write's share before it queues it (see `pipeline::admit`).
    proposal_bytes: pipeline::ProposalBytes,
    /// Linearizable reads waiting for the pipeline to ask the core for a read index.
    reads: mpsc::Sender<ReadWaiter>,
    /// Watch registrations and recent events.
    hub: WatchHub,
    storage: Arc<dyn Storage>,
    /// The logical clock's origin: `now_ms()` counts from here.
    started: tokio::time::Instant,
    /// Set once when the runtime stops: a fatal error, or `shutdown()`. Every task
    /// watches it and ends.
    stop: watch::Sender<Option<String>>,
    /// The learners' progress and this server's newest zxid, as the core reported
    /// them at its last tick (`members::publish`), for `Cluster/Members`.
    progress: Mutex<members::Progress>,
}

/// The wall clock in milliseconds since the Unix epoch (leader txn times, TTL reaping).
fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Deadlines for every session in `tree`, each a full TTL from `now_ms` (after a
/// restart, or a snapshot from the leader).
fn deadlines_of(tree: &DataTree, now_ms: u64) -> SessionTracker {
    let mut sessions = SessionTracker::new();
    for (id, entry) in tree.sessions() {
        sessions.add(id, u64::try_from(entry.ttl_ms).unwrap_or(0), now_ms);
    }
    sessions
}

/// Locks a std mutex; a poisoned one is still consistent (no critical section here
/// can panic midway).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl From<crate::zab::ZabError> for ReplicaError {
    fn from(e: crate::zab::ZabError) -> ReplicaError {
        match e {
            crate::zab::ZabError::NotLeader { hint } => ReplicaError::NotLeader {
                leader: hint,
                client_addr: None,
                why: String::new(),
            },
            crate::zab::ZabError::EpochExhausted => ReplicaError::Unavailable(e.to_string()),
        }
    }
}

impl Replica {
    /// Recovers state from `config.data_dir` and starts the pipeline and housekeeping
    /// tasks. They run until `shutdown()` or a fatal error (see `fatal()`).
    pub async fn start(config: &Config) -> Result<Replica, StartError> {
        recovery::start(config).await
    }

    pub fn server_id(&self) -> u64 {
        self.shared.server_id
    }

    /// Submits a write and waits until it is committed and applied here.
    pub async fn submit(
        &self,
        session_id: u64,
        request_id: u64,
        op: TxnOp,
    ) -> Result<Committed, ReplicaError> {
        self.submit_fenced(session_id, request_id, None, op).await
    }

    /// Submits a write that must still hold `fence` when it is applied (checked by the
    /// tree, in zxid order), and waits until it is committed and applied here. A
    /// follower forwards it to its leader. A server with no leader to hand it to
    /// (looking, or following a leader it cannot reach) holds it until
    /// `leader_wait_ms_max` after it lost its leader, then fails it with NotLeader
    /// (so after that long without one, at once); a write the leader
    /// certainly did not apply goes to the next leader; one sent with no answer
    /// fails as Indeterminate.
    pub async fn submit_fenced(
        &self,
        session_id: u64,
        request_id: u64,
        fence: Option<Fence>,
        op: TxnOp,
    ) -> Result<Committed, ReplicaError> {
        let write = Write {
            session_id,
            request_id,
            fence,
            op,
            checked_at: 0,
            trace: WriteTrace::current(),
        };
        self.submit_write(write).await
    }

    /// Submits a write whose caller's permissions `check` decides, on this server's
    /// applied tree, so that a grant or revocation is in force for it whichever
    /// server it came through: the write carries the zxid of the tree it was checked
    /// on, and the leader refuses it unproposed if its grant table changed after
    /// that zxid (`TreeError::GrantsChanged`). It is then checked again here once
    /// this server has applied the change, and sent again (at most
    /// `GRANT_RECHECKS_MAX` times, then the client hears GrantsChanged: retry-safe).
    pub async fn submit_checked<E>(
        &self,
        session_id: u64,
        request_id: u64,
        fence: Option<Fence>,
        op: TxnOp,
        check: impl Fn(&DataTree) -> Result<(), E>,
    ) -> Result<Committed, E>
    where
        E: From<ReplicaError>,
    {
        let mut rechecks = 0;
        let mut trace = WriteTrace::current();
        loop {
            let checked_at = self.read(|t| check(t).map(|()| t.last_zxid()))?;
            let write = Write {
                session_id,
                request_id,
                fence: fence.clone(),
                op: op.clone(),
                checked_at,
                trace: trace.clone(),
            };
            let c = self.submit_write(write).await?;
            // Checked again, it is sent again: one api span is enough.
            if let Some(trace) = trace.as_mut() {
                trace.api_recorded();
            }
            match c.result {
                Err(TreeError::GrantsChanged { zxid }) if rechecks < GRANT_RECHECKS_MAX => {
                    self.wait_applied(zxid, GRANTS_CHANGE_WAIT_MAX).await?;
                    rechecks += 1;
                }
                _ => return Ok(c),
            }
        }
    }

    /// Hands `write` to the leader (itself, or forwarded) and waits until it is
    /// committed and applied here; a traced write's `api` span is recorded then,
    /// with its zxid.
    async fn submit_write(&self, mut write: Write) -> Result<Committed, ReplicaError> {
        let api = write.trace.as_mut().and_then(WriteTrace::handed_on);
        let submitted = self.submit_routed(write).await;
        if let Some(api) = api {
            let zxid = submitted.as_ref().ok().map(|c| c.zxid).filter(|&z| z != 0);
            api.record(zxid);
        }
        submitted
    }

    /// Runs `f` on the applied tree (under a read lock: keep it short).
    pub fn read<R>(&self, f: impl FnOnce(&DataTree) -> R) -> R {
        let tree = self
            .shared
            .readable
            .tree
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        f(&tree)
    }

    /// The newest applied zxid.
    pub fn applied_zxid(&self) -> Zxid {
        *self.shared.applied.borrow()
    }

    /// Whether a write may hold null data (a ZooKeeper client's): when every other
    /// member announced a peer protocol that decodes it. During a rolling upgrade,
    /// until then, the ZooKeeper port writes null data as empty.
    pub fn keeps_null_data(&self) -> bool {
        let lowest = self.shared.peer_transport.as_ref();
        lowest
            .and_then(|t| t.lowest_protocol())
            .is_none_or(|p| p >= crate::peer::NULL_DATA_PROTOCOL)
    }

    /// The memory the Zab core's in-memory log holds now, and the most it held
    /// since start, in bytes (see `Config::log_memory_bytes_max`).
    pub fn log_bytes(&self) -> (u64, u64) {
        (
            self.shared.log_bytes.load(Ordering::Relaxed),
            self.shared.log_bytes_peak.load(Ordering::Relaxed),
        )
    }

    /// The newest committed zxid.
    pub fn committed_zxid(&self) -> Zxid {
        self.shared.committed.load(Ordering::Acquire)
    }

    /// Whether this server leads an established epoch (it accepts writes).
    pub fn is_leader(&self) -> bool {
        *self.shared.serving.borrow()
    }

    /// The server this one follows or is, as the Zab core last reported it.
    pub fn leader_id(&self) -> Option<u64> {
        Some(self.shared.leader.load(Ordering::Acquire)).filter(|&l| l != 0)
    }

    /// This server's part in the ensemble (looking, leading, following, observing).
    pub fn role(&self) -> crate::zab::Role {
        *self.shared.role.borrow()
    }

    pub fn epoch(&self) -> u32 {
        self.shared.epoch.load(Ordering::Acquire)
    }

    /// A receiver of the applied zxid, for streams that report progress.
    pub fn subscribe_applied(&self) -> watch::Receiver<Zxid> {
        self.shared.applied.subscribe()
    }

    /// Waits until this server has applied `zxid`, for at most `timeout`.
    pub async fn wait_applied(&self, zxid: Zxid, timeout: Duration) -> Result<Zxid, ReplicaError> {
        let mut rx = self.shared.applied.subscribe();
        let waited = tokio::time::timeout(timeout, rx.wait_for(|applied| *applied >= zxid)).await;
        match waited {
            Ok(Ok(applied)) => Ok(*applied),
            Ok(Err(_)) => Err(ReplicaError::Unavailable("the replica has stopped".into())),
            Err(_) => Err(ReplicaError::Timeout {
                zxid,
                applied: self.applied_zxid(),
            }),
        }
    }

    /// The read index: the leader's commit point, confirmed by a quorum (asked of
    /// the Zab core; on an ensemble of one it answers at once). A follower asks its
    /// leader.
    pub async fn read_index(&self) -> Result<Zxid, ReplicaError> {
        let index = match self.forward_target() {
            Some((forwarder, leader)) => forwarder.read_index(leader).await,
            None => self.local_read_index().await,
        };
        index.map_err(|e| self.hinted(e))
    }

    /// The read index from this server's own core (NotLeader unless it leads).
    async fn local_read_index(&self) -> Result<Zxid, ReplicaError> {
        let stopped = || ReplicaError::Unavailable("the server is stopping".into());
        if self.shared.stop.borrow().is_some() {
            return Err(stopped());
        }
        let (tx, rx) = oneshot::channel();
        self.shared.reads.send(tx).await.map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
    }

    /// Waits for the read index and returns the applied zxid (>= it).
    pub async fn linearize(&self, timeout: Duration) -> Result<Zxid, ReplicaError> {
        let index = self.read_index().await?;
        self.wait_applied(index, timeout).await
    }

    /// The watch hub (registrations and recent events).
    pub fn hub(&self) -> &WatchHub {
        &self.shared.hub
    }

    /// The storage, for watch resumes that reach back past the in-memory history.
    pub fn storage(&self) -> Arc<dyn Storage> {
        self.shared.storage.clone()
    }

    /// Logical milliseconds since the replica started (pausable in tests).
    pub fn now_ms(&self) -> u64 {
        self.shared.now_ms()
    }

    /// A keep-alive for `session_id`: returns (ttl_ms, remaining_ms), or None if the
    /// session does not exist. A follower also reports it to the leader (next tick).
    pub fn keep_alive(&self, session_id: u64) -> Option<(u64, u64)> {
        let now = self.now_ms();
        let ttl = self.shared.lock_sessions().touch(session_id, now)?;
        if !self.is_leader() {
            lock(&self.shared.touched).insert(session_id);
        }
        Some((ttl, ttl))
    }

    /// Milliseconds before `session_id` expires without a keep-alive.
    pub fn session_remaining_ms(&self, session_id: u64) -> Option<u64> {
        let now = self.now_ms();
        self.shared.lock_sessions().remaining_ms(session_id, now)
    }

    /// Resolves when the runtime stops — a fatal error (storage failure, broken
    /// invariant) or `shutdown()` — and yields the reason.
    pub async fn stopped(&self) -> String {
        let mut rx = self.shared.stop.subscribe();
        let reason = match rx.wait_for(|f| f.is_some()).await {
            Ok(reason) => reason.clone().unwrap_or_default(),
            Err(_) => "the replica was dropped".into(),
        };
        reason
    }

    /// Stops the runtime: queued writes are refused, tasks end.
    pub fn shutdown(&self) {
        self.shared.stop("the server is shutting down".into());
        self.shared.hub.shutdown();
    }

    /// The configured tick.
    pub fn tick_ms(&self) -> u64 {
        self.shared.tick_ms
    }

    /// What this server records as it goes (the RPC layer records into it too).
    pub fn metrics(&self) -> &Arc<crate::telemetry::Metrics> {
        &self.shared.readable.metrics
    }
}

impl Shared {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The instant `ms` is on the `now_ms` clock.
    fn instant_at(&self, ms: u64) -> tokio::time::Instant {
        self.started + Duration::from_millis(ms)
    }

    fn lock_sessions(&self) -> std::sync::MutexGuard<'_, SessionTracker> {
        self.readable.sessions()
    }

    /// Records that the server must stop because something broke.
    fn set_fatal(&self, reason: String) {
        tracing::error!(%reason, "fatal: the server stops serving");
        self.stop(reason);
    }

    /// Records that the server stops; the first reason wins.
    fn stop(&self, reason: String) {
        self.stop.send_if_modified(|f| {
            if f.is_none() {
                *f = Some(reason);
                true
            } else {
                false
            }
        });
    }
}
