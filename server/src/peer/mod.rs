//! The transport between the servers of an ensemble: gRPC streams
//! (`concord.peer.v1.PeerTransport/Deliver`) on each server's peer address, never on
//! the client address. It carries `zab::Message`s and nothing else; it knows nothing
//! of the tree, sessions or storage.
//!
//! ```text
//!   runtime ──send(Envelope)──▶ DropOldest queue (per peer) ──▶ outbound task ──gRPC──┐
//!      ▲                        never blocks; full: drop oldest  reconnect w/ back-off │
//!      └── inbound: InboundRx ◀────────────────── Deliver handler ◀──────────────────┘
//!          (messages; a stream's end)           (checks the sender is a member: on
//!                                                TLS, the one its certificate names)
//! ```
//!
//! Delivery is best effort, by design: Zab's logical streams tolerate loss,
//! duplication and reordering. A message may be dropped when its peer's queue is full
//! (the oldest goes, counted in `dropped`), when the stream breaks with frames in
//! flight (lost, not counted), or when the transport is shut down. One outbound
//! stream per peer, opened on the first message to it, reopened with capped
//! exponential back-off plus jitter after it breaks. Both sides are bounded in
//! messages and in bytes: when the runtime falls behind, the inbound streams wait
//! (HTTP/2 flow control) and the senders' queues drop their oldest messages.
//!
//! Frames are bounded (`frame_bytes_max`): a message whose encoding is longer, a
//! SNAP with the whole tree say, is cut into pieces sent as consecutive frames on
//! the same stream, and the receiver puts them together (at most
//! `message_bytes_max`) before it decodes the message. A broken stream loses the
//! pieces of a message in flight, like any frame.
//!
//! What it must not do: block the caller of `send`, interpret messages, or accept
//! frames from a server that is not a member (on a TLS peer port, from a connection
//! whose certificate is not that member's: `security::peers`).

mod codec;
mod inbound;
mod outbound;
mod queue;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinHandle;

pub use codec::{decode, downgrade, encode, DecodeError, FORMAT_V1, NULL_DATA_PROTOCOL, PROTOCOL};

use crate::config::Member;
use crate::txn::Zxid;
use crate::zab::{Envelope, Message, ServerId};
use queue::DropOldest;

/// What the transport needs to know: who it is and who the others are.
#[derive(Clone, Debug)]
pub struct PeerConfig {
    /// This server's id; frames carry it as `from`.
    pub id: ServerId,
    /// The ensemble's id; frames with another one are refused.
    pub cluster_id: u64,
    /// Every server of the ensemble (this one may be listed; it is never dialled).
    pub members: Vec<Member>,
    /// Messages waiting per destination; beyond it the oldest is dropped.
    pub queue_messages_max: usize,
    /// Bytes (encoded) of messages waiting per destination; beyond it the oldest
    /// are dropped (the newest is always kept).
    pub queue_bytes_max: usize,
    /// Received messages waiting for the runtime; beyond it the streams wait.
    pub inbound_messages_max: usize,
    /// Bytes (encoded) of received messages waiting for the runtime; beyond it the
    /// streams wait. A message larger than all of it waits until it has it all.
    pub inbound_bytes_max: usize,
    /// First pause before reopening a broken stream (it doubles, with jitter).
    pub backoff_ms: u64,
    /// Cap of that pause; a stream that stayed up this long resets it.
    pub backoff_ms_max: u64,
    /// Give up on a TCP connect after this long.
    pub connect_timeout_ms: u64,
    /// HTTP/2 keep-alive: ping an idle connection this often, and call it dead when
    /// a ping is unanswered for as long (detects a stopped peer).
    pub keepalive_ms: u64,
    /// Largest frame payload sent or accepted: a longer encoded message (a SNAP
    /// carries the whole tree) travels as consecutive frames of at most this much,
    /// all but the last marked `more`, put together again by the receiver.
    pub frame_bytes_max: usize,
    /// Largest encoded message sent or accepted, once put together: a larger one is
    /// dropped by the sender, and ends the stream at the receiver.
    pub message_bytes_max: usize,
    /// Open connections on the peer listener at most (members' streams, their
    /// `Forward` channels, reconnects under way); more are accepted and closed at
    /// once.
    pub connections_max: usize,
    /// A peer connection from which nothing was read for this long is closed. The
    /// listener pings a connection quiet for a quarter of it (at most 5 s), and a
    /// live member answers, so only a silent or stopped one ever reaches it.
    pub connection_idle_timeout_ms: u64,
    /// mTLS on the peer listener (client certificates required); None: plain text.
    pub server_tls: Option<crate::security::ServerTls>,
    /// This server's certificate and the peer CAs for its own streams to the
    /// others (read again at every reconnect); None: plain text.
    pub client_tls: Option<crate::security::PeerClientTls>,
}

impl PeerConfig {
    /// Defaults for a loopback ensemble with a 100 ms-ish tick.
    pub fn new(id: ServerId, cluster_id: u64, members: Vec<Member>) -> PeerConfig {
        let members_len = members.len();
        PeerConfig {
            id,
            cluster_id,
            members,
            queue_messages_max: 4096,
            queue_bytes_max: 64 << 20,
            inbound_messages_max: 4096,
            inbound_bytes_max: 64 << 20,
            backoff_ms: 50,
            backoff_ms_max: 2000,
            connect_timeout_ms: 1000,
            keepalive_ms: 1000,
            frame_bytes_max: 1 << 20,
            message_bytes_max: 2 << 30,
            connections_max: peer_connections_max(members_len),
            connection_idle_timeout_ms: 30_000,
            server_tls: None,
            client_tls: None,
        }
    }
}

/// The peer listener's connection cap for an ensemble of `members`: each member
/// opens a few connections (its message stream, its forwarding channel, one being
/// reopened), never dozens.
pub fn peer_connections_max(members: usize) -> usize {
    members.saturating_mul(4).saturating_add(16)
}

/// Why the transport could not start.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("server {0} is listed twice")]
    Duplicate(ServerId),
    #[error("peer listener: {0}")]
    Listener(std::io::Error),
    #[error("peer identities: {0}")]
    Identity(crate::config::ConfigError),
}

/// What the transport hands the runtime.
#[derive(Clone, Debug, PartialEq)]
pub enum Inbound {
    /// A message from a member.
    Message(ServerId, Message),
    /// The stream from this member ended or broke (its process died, stopped, or
    /// the connection failed): the runtime may stop waiting for it to speak.
    /// Best effort, like everything here: it may come late or not at all.
    StreamLost(ServerId),
}

/// Where received messages arrive: a channel bounded in messages, and in bytes by
/// a budget that each message takes from on its way in and gives back here.
#[derive(Debug)]
pub struct InboundRx {
    rx: mpsc::Receiver<(Inbound, u32)>,
    /// The inbound byte budget, shared with the Deliver handler.
    bytes: Arc<Semaphore>,
}

impl InboundRx {
    /// The next message or stream end; None once the transport has stopped.
    pub async fn recv(&mut self) -> Option<Inbound> {
        let (inbound, bytes) = self.rx.recv().await?;
        self.bytes.add_permits(bytes as usize);
        Some(inbound)
    }

    /// Messages and stream ends waiting to be taken.
    pub fn waiting(&self) -> usize {
        self.rx.len()
    }

    /// The next message or stream end if one is waiting now.
    pub fn try_recv(&mut self) -> Result<Inbound, mpsc::error::TryRecvError> {
        let (inbound, bytes) = self.rx.try_recv()?;
        self.bytes.add_permits(bytes as usize);
        Ok(inbound)
    }
}

/// Counters since start, for tests and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Metrics {
    /// Messages handed to an open outbound stream.
    pub sent: u64,
    /// Messages dropped before sending: queue full (oldest dropped), unknown or own
    /// destination, too large, or sent after shutdown.
    pub dropped: u64,
    /// Times an outbound stream failed to open or broke and was retried.
    pub reconnects: u64,
    /// Messages received from peers and handed to the inbound channel.
    pub received: u64,
    /// Inbound streams refused: unknown sender (or, on TLS, another than the
    /// certificate's member), wrong destination or cluster, or a payload that does
    /// not decode. Connections refused for their certificate before any request is
    /// read are not counted here (see `security::peers::PeerAuthorizer::refused`).
    pub rejected: u64,
    /// Messages waiting in the outbound queues now (a gauge, not a counter).
    pub queued: u64,
}

/// The live counters behind `Metrics`.
#[derive(Debug, Default)]
struct Counters {
    sent: AtomicU64,
    dropped: AtomicU64,
    reconnects: AtomicU64,
    received: AtomicU64,
    rejected: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn snapshot(&self) -> Metrics {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Metrics {
            sent: get(&self.sent),
            dropped: get(&self.dropped),
            reconnects: get(&self.reconnects),
            received: get(&self.received),
            rejected: get(&self.rejected),
            queued: 0,
        }
    }
}

/// One other member: where it listens and what waits to go there.
#[derive(Debug)]
struct Peer {
    /// Its id.
    id: ServerId,
    /// Its peer address.
    addr: crate::address::Address,
    /// Messages waiting for its stream.
    queue: DropOldest,
    /// Whether its outbound task runs (started on the first message).
    started: AtomicBool,
    /// Signalled when a stream from this peer opens: it is back, so a reconnect
    /// waiting out its back-off tries at once.
    back: tokio::sync::Notify,
    /// The peer protocol it announced on its latest stream to this server (0 until
    /// one opens, read as 1): what is sent to it is downgraded to that
    /// (`codec::downgrade`).
    protocol: AtomicU32,
}

/// State shared by the handle and every task.
#[derive(Debug)]
struct Shared {
    config: PeerConfig,
    /// The other members, by id.
    peers: HashMap<ServerId, Arc<Peer>>,
    counters: Counters,
    /// The runtime the transport was started on: `send` may be called from anywhere.
    runtime: tokio::runtime::Handle,
    /// Set once by `shutdown`; every task watches it.
    stop: watch::Sender<bool>,
    /// Every task spawned, joined by `shutdown`.
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Where the inbound side listens.
    local_addr: SocketAddr,
    /// The inbound byte budget (`inbound_bytes_max`), for its depth.
    in_bytes: Arc<Semaphore>,
    /// Where a SNAP's stored snapshot is read as it is sent.
    snapshots: SnapshotStore,
}

/// Where the transport reads the bytes of a SNAP (the core sends it without them):
/// this server's storage. None in tests of the transport alone, where a SNAP ends
/// its stream as a snapshot gone from storage does.
#[derive(Clone, Default)]
pub struct SnapshotStore(pub Option<Arc<dyn crate::storage::Storage>>);

impl std::fmt::Debug for SnapshotStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "SnapshotStore(storage)"
        } else {
            "SnapshotStore(none)"
        })
    }
}

impl SnapshotStore {
    /// The bytes of the stored snapshot at `zxid`, read off the runtime's threads.
    async fn load(&self, zxid: Zxid) -> Result<Bytes, String> {
        let Some(storage) = self.0.clone() else {
            return Err("no storage to read snapshots from".into());
        };
        match tokio::task::spawn_blocking(move || storage.load_snapshot(zxid)).await {
            Ok(Ok(bytes)) => Ok(Bytes::from(bytes)),
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(format!("snapshot read task: {e}")),
        }
    }
}

/// The transport: `start` it, then use the handle it gives back.
pub struct PeerTransport;

impl PeerTransport {
    /// Serves `Deliver` on `listener`, with `beside` (other server-to-server
    /// services, e.g. the replica's `Forward`), and returns the handle to send with
    /// and the channel received messages arrive on. A SNAP without its bytes is
    /// filled from `snapshots` as it is sent. Must be called within a tokio runtime.
    pub fn start(
        config: PeerConfig,
        listener: TcpListener,
        beside: tonic::service::Routes,
        snapshots: SnapshotStore,
    ) -> Result<(PeerHandle, InboundRx), PeerError> {
        let local_addr = listener.local_addr().map_err(PeerError::Listener)?;
        let authorizer = crate::security::peers::PeerAuthorizer::new(&config.members, config.id)
            .map_err(PeerError::Identity)?;
        let mut peers = HashMap::new();
        for m in &config.members {
            let peer = Arc::new(Peer {
                id: m.id,
                addr: m.peer_addr.clone(),
                queue: DropOldest::new(config.queue_messages_max, config.queue_bytes_max),
                started: AtomicBool::new(false),
                back: tokio::sync::Notify::new(),
                protocol: AtomicU32::new(0),
            });
            if peers.insert(m.id, peer).is_some() {
                return Err(PeerError::Duplicate(m.id));
            }
        }
        peers.remove(&config.id);
        let (in_tx, in_rx) = mpsc::channel(config.inbound_messages_max.max(1));
        let in_bytes = Arc::new(Semaphore::new(
            config.inbound_bytes_max.clamp(1, u32::MAX as usize),
        ));
        let in_rx = InboundRx {
            rx: in_rx,
            bytes: in_bytes.clone(),
        };
        let (stop, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            config,
            peers,
            counters: Counters::default(),
            runtime: tokio::runtime::Handle::current(),
            stop,
            tasks: Mutex::new(Vec::new()),
            local_addr,
            in_bytes: in_bytes.clone(),
            snapshots,
        });
        let server = inbound::serve(
            shared.clone(),
            listener,
            in_tx,
            in_bytes,
            beside,
            authorizer,
        );
        let handle = PeerHandle { shared };
        handle.track(handle.shared.runtime.spawn(server));
        Ok((handle, in_rx))
    }
}

/// Sends messages to peers and reads the counters. Cheap to clone.
#[derive(Clone, Debug)]
pub struct PeerHandle {
    shared: Arc<Shared>,
}

impl PeerHandle {
    /// Queues `env.msg` for `env.to`; never blocks. Dropped (and counted) when the
    /// destination is unknown or this server, or after shutdown; when the queue is
    /// full its oldest message is dropped instead.
    pub fn send(&self, env: Envelope) {
        let counters = &self.shared.counters;
        let Some(peer) = self.shared.peers.get(&env.to) else {
            Counters::add(&counters.dropped, 1);
            return;
        };
        if *self.shared.stop.borrow() {
            Counters::add(&counters.dropped, 1);
            return;
        }
        Counters::add(&counters.dropped, peer.queue.push(env.msg));
        if !peer.started.swap(true, Ordering::AcqRel) {
            let task = outbound::run(self.shared.clone(), peer.clone());
            self.track(self.shared.runtime.spawn(task));
        }
    }

    /// The counters so far.
    pub fn metrics(&self) -> Metrics {
        let queued = self.shared.peers.values().map(|p| p.queue.waiting());
        Metrics {
            queued: queued.sum::<usize>() as u64,
            ..self.shared.counters.snapshot()
        }
    }

    /// Bytes waiting in the outbound queues (all peers together; each is bounded
    /// by `queue_bytes_max`), and bytes received and not yet taken by the runtime
    /// (bounded by `inbound_bytes_max`).
    pub fn queued_bytes(&self) -> (usize, usize) {
        let outbound = self.shared.peers.values().map(|p| p.queue.waiting_bytes());
        let budget = self
            .shared
            .config
            .inbound_bytes_max
            .clamp(1, u32::MAX as usize);
        let inbound = budget.saturating_sub(self.shared.in_bytes.available_permits());
        (outbound.sum(), inbound)
    }

    /// The lowest peer protocol among the other members, each as it announced on its
    /// latest stream to this server (1 for one not heard from yet); None without
    /// other members.
    pub fn lowest_protocol(&self) -> Option<u32> {
        let announced = self.shared.peers.values();
        announced
            .map(|p| p.protocol.load(Ordering::Relaxed).max(1))
            .min()
    }

    /// Where the inbound side listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr
    }

    /// Stops every task (inbound streams end, outbound streams close, the listener
    /// is released) and waits for them, up to a few seconds.
    pub async fn shutdown(&self) {
        self.shared.stop.send_replace(true);
        let tasks: Vec<JoinHandle<()>> = std::mem::take(&mut *self.lock_tasks());
        for mut task in tasks {
            let waited = tokio::time::timeout(Duration::from_secs(5), &mut task).await;
            if waited.is_err() {
                tracing::warn!("peer transport task did not stop in time; aborting it");
                task.abort();
            }
        }
    }

    fn track(&self, task: JoinHandle<()>) {
        self.lock_tasks().push(task);
    }

    /// A poisoned lock only means a task list push panicked; the list is still usable.
    fn lock_tasks(&self) -> std::sync::MutexGuard<'_, Vec<JoinHandle<()>>> {
        self.shared.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }
}
