//! The driver trait: the few operations every workload needs, implemented once per system
//! (Concord always; ZooKeeper and etcd behind the `zookeeper` and `etcd` features).
//!
//! A driver is one client connection (one session where the system has sessions). The
//! workloads open one driver per simulated client, so every system sees the same number
//! of connections. A driver must not measure anything: timing is the workloads' job.

use std::future::Future;

use futures::stream::BoxStream;

pub mod concord;
pub mod concord_sdk;
pub mod direct;
#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;

/// Why a driver call failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The system answered with an error, or the connection failed.
    #[error("{system}: {message}")]
    Backend {
        /// Which system.
        system: &'static str,
        /// Its error, as text.
        message: String,
    },
    /// The operation is not available on this system yet (for example Concord's Lock RPC
    /// before the locks issue lands).
    #[error("not yet: {0}")]
    NotYet(String),
    /// A workload's own failure (bad arguments, a watcher that never saw its event).
    #[error("{0}")]
    Workload(String),
}

/// The server of the comma-separated `endpoints` that the next connection goes to:
/// each in turn, so that clients spread over an ensemble as ZooKeeper's and etcd's do
/// (followers forward writes).
pub fn next_endpoint(endpoints: &str) -> &str {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let list: Vec<&str> = endpoints.split(',').collect();
    list[NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % list.len()]
}

/// Shorthand for driver results.
pub type Result<T> = std::result::Result<T, BenchError>;

/// A stream with one item per change event of a watched key.
pub type EventStream = BoxStream<'static, Result<()>>;

/// One client of one system. Keys are slash-separated paths (`/prefix/k3`); systems
/// without a tree (etcd) use them as flat keys.
pub trait Driver: Sized + Send + Sync + 'static {
    /// The system's name in reports: `concord`, `concord-sdk`, `zookeeper`,
    /// `concord-zookeeper` (the ZooKeeper driver against Concord's ZooKeeper port) or
    /// `etcd`.
    const NAME: &'static str;

    /// Opens one client to the comma-separated `endpoints`.
    fn connect(endpoints: &str) -> impl Future<Output = Result<Self>> + Send;

    /// Makes sure `path` exists as an empty persistent node (no-op where keys are flat).
    fn ensure_parent(&mut self, path: &str) -> impl Future<Output = Result<()>> + Send;

    /// Creates a persistent `key` holding `value` (setup; the parent exists).
    fn create(&mut self, key: &str, value: &[u8]) -> impl Future<Output = Result<()>> + Send;

    /// Overwrites an existing `key` with `value`, any version.
    fn write(&mut self, key: &str, value: &[u8]) -> impl Future<Output = Result<()>> + Send;

    /// Reads `key`: the system's default (sequential) read, or its linearizable one.
    fn read(&mut self, key: &str, linearizable: bool) -> impl Future<Output = Result<()>> + Send;

    /// Creates an ephemeral sequential node under `parent`, owned by this client's
    /// session (etcd: a put with this client's lease, under a unique key).
    fn create_ephemeral_sequential(
        &mut self,
        parent: &str,
        value: &[u8],
    ) -> impl Future<Output = Result<()>> + Send;

    /// Starts watching `key` for data changes; returns once the watch is registered.
    fn watch(&mut self, key: &str) -> impl Future<Output = Result<EventStream>> + Send;

    /// Acquires the lock `name`, runs `critical` while holding it, then releases it.
    fn with_lock<F>(&mut self, name: &str, critical: F) -> impl Future<Output = Result<()>> + Send
    where
        F: Future<Output = ()> + Send;

    /// What a leader needs to resign: Concord's key and term, etcd's leader key,
    /// ZooKeeper's candidate node.
    type Leadership: Send + 'static;

    /// Campaigns in `election` (one path segment) with this client's session (lease) and
    /// returns once this client leads.
    fn campaign(&mut self, election: &str)
        -> impl Future<Output = Result<Self::Leadership>> + Send;

    /// Candidates queued in `election` right now, the leader included.
    fn candidates(&mut self, election: &str) -> impl Future<Output = Result<usize>> + Send;

    /// Gives up the leadership won by `campaign`.
    fn resign(&mut self, leadership: Self::Leadership) -> impl Future<Output = Result<()>> + Send;

    /// Ends this client's session (Concord Session.Close, ZooKeeper closeSession, etcd
    /// lease revoke): its ephemerals and candidacies go with it. Returns once the
    /// server has acknowledged, where the system acknowledges.
    fn end_session(self) -> impl Future<Output = Result<()>> + Send;
}
