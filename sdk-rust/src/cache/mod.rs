//! Caches of the tree kept current by one watch each: [`NodeCache`] (one node),
//! [`ChildrenCache`] (a node's direct children, Curator's PathChildrenCache) and
//! [`TreeCache`] (a whole subtree, Curator's CuratorCache).
//!
//! ```text
//!  Client::watch(initial_snapshot, with_data, resume: never give up)
//!     │ SnapshotNode… SnapshotDone z, then Event… (resumed from the last zxid)
//!     ▼
//!  cache task ──▶ CacheState (pure: state.rs) ──▶ CacheEvents ──▶ broadcast ──▶ CacheListener::next()
//!     │                 ▲ read by current()/get()/snapshot()/zxid()
//!     └ watch ended with an error (snapshot broke, ZXID_COMPACTED, ...):
//!       back off, open a new watch with a fresh snapshot, emit the differences
//! ```
//!
//! There is never a gap: the snapshot reflects zxid z and the watch delivers every
//! change after z, and `watch.rs` resumes a broken stream from its last zxid without
//! loss or duplicates (across reconnects, server restarts and moves to another
//! server). When the watch cannot be resumed the cache rebuilds from a new snapshot and
//! tells its listeners only what changed, so it still converges on the server's tree.
//! Caches need no session. Memory: the cache holds what the server holds in its scope
//! (the server bounds node sizes and counts); a rebuild holds the old and the new
//! contents for a moment; each listener's queue is bounded (`LISTENER_BACKLOG`): a
//! listener that falls behind gets [`CacheEvent::Lagged`] and continues. What this
//! module must not do: poll, or read the tree outside the watch.

mod state;

use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use crate::client::Client;
use crate::error::Error;
use crate::options::{RetryPolicy, WatchOptions};
use crate::types::Node;
use crate::watch::Watch;

pub use state::CacheEvent;
use state::{CacheState, Scope};

/// Events a listener may fall behind by before it is told it [lagged](CacheEvent::Lagged).
pub const LISTENER_BACKLOG: usize = 1024;

/// How a cache's watch resumes and how it backs off between rebuilds: it never gives
/// up while the cache is open.
const RESUME: RetryPolicy = RetryPolicy {
    attempts_max: 0,
    elapsed_max_ms: 0,
    delay_initial_ms: 50,
    delay_max_ms: 2_000,
};

/// A stream of a cache's events, in the order the cache applied them. Made by
/// `listen()` on a cache.
#[derive(Debug)]
pub struct CacheListener {
    events: broadcast::Receiver<CacheEvent>,
}

impl CacheListener {
    /// The next event; `None` once the cache is closed (or dropped). A listener more
    /// than [`LISTENER_BACKLOG`] events behind gets one [`CacheEvent::Lagged`] for the
    /// events it missed, then the rest in order; the cache itself misses nothing, so
    /// read it again after a `Lagged`.
    pub async fn next(&mut self) -> Option<CacheEvent> {
        match self.events.recv().await {
            Ok(event) => Some(event),
            Err(broadcast::error::RecvError::Lagged(missed)) => Some(CacheEvent::Lagged { missed }),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

/// What the cache task and the handles share.
#[derive(Debug)]
struct Shared {
    /// The cached nodes and the sender of events, under one lock so that a listener
    /// made together with a read sees every later change and no earlier one.
    inner: RwLock<Inner>,
    /// Initialized / closed, for `wait_initialized`.
    status: watch::Sender<Status>,
}

#[derive(Debug)]
struct Inner {
    state: CacheState,
    /// `None` once closed: dropping it ends every listener.
    events: Option<broadcast::Sender<CacheEvent>>,
    /// The latest error of the cache's watch (kept for diagnostics; the cache retries).
    last_error: Option<Error>,
    /// How many times the cache rebuilt from a fresh snapshot.
    rebuilds: u64,
    /// How many streams the cache's watches have started (one `Started` each).
    streams: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Status {
    initialized: bool,
    closed: bool,
}

impl Shared {
    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Applies one message and publishes its events, under the lock.
    fn feed(&self, msg: crate::types::WatchMessage) {
        let mut inner = self.write();
        if matches!(msg, crate::types::WatchMessage::Started { .. }) {
            inner.streams += 1;
        }
        let events = inner.state.on_message(msg);
        let initialized = inner.state.is_initialized();
        if let Some(sender) = &inner.events {
            for event in events {
                // No receivers is fine: nobody listens yet.
                let _ = sender.send(event);
            }
        }
        drop(inner);
        if initialized {
            self.status.send_if_modified(|status| {
                let changed = !status.initialized;
                status.initialized = true;
                changed
            });
        }
    }
}

/// The machinery shared by the three caches: the watch task and the shared state.
#[derive(Debug)]
struct Core {
    client: Client,
    shared: Arc<Shared>,
    task: Option<JoinHandle<()>>,
}

impl Core {
    fn new(client: &Client, scope: Scope) -> Core {
        let (events, _) = broadcast::channel(LISTENER_BACKLOG);
        Core {
            client: client.clone(),
            shared: Arc::new(Shared {
                inner: RwLock::new(Inner {
                    state: CacheState::new(scope),
                    events: Some(events),
                    last_error: None,
                    rebuilds: 0,
                    streams: 0,
                }),
                status: watch::Sender::new(Status::default()),
            }),
            task: None,
        }
    }

    fn options(&self) -> WatchOptions {
        let inner = self.shared.read();
        let scope = inner.state.scope();
        WatchOptions {
            path: scope.root().to_owned(),
            recursive: scope.recursive(),
            with_data: true,
            initial_snapshot: true,
            resume: Some(RESUME),
            ..WatchOptions::default()
        }
    }

    async fn start(&mut self) -> Result<(), Error> {
        if self.task.is_some() || self.shared.status.borrow().closed {
            return Ok(());
        }
        let options = self.options();
        let watch = self.client.watch(options.clone()).await?;
        self.shared.write().state.begin_snapshot();
        let task = tokio::spawn(run(
            self.client.clone(),
            options,
            watch,
            Arc::clone(&self.shared),
        ));
        self.task = Some(task);
        Ok(())
    }

    fn listen(&self) -> CacheListener {
        let inner = self.shared.read();
        let events = match &inner.events {
            Some(sender) => sender.subscribe(),
            // Closed: a receiver whose sender is already gone yields None at once.
            None => broadcast::channel(1).1,
        };
        CacheListener { events }
    }

    async fn wait_initialized(&self) -> bool {
        let mut status = self.shared.status.subscribe();
        let initialized = match status.wait_for(|s| s.initialized || s.closed).await {
            Ok(s) => s.initialized,
            Err(_) => false,
        };
        initialized
    }

    fn close(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.shared.write().events = None;
        self.shared.status.send_modify(|s| s.closed = true);
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        self.close();
    }
}

/// The cache task: feeds the watch's messages into the state; when the watch ends
/// (it never gives up on a resumable break, so only on an error a resume cannot fix),
/// opens a new one with a fresh snapshot, backing off while that fails.
async fn run(client: Client, options: WatchOptions, mut watch: Watch, shared: Arc<Shared>) {
    let mut failures: u32 = 0;
    loop {
        match watch.next().await {
            Some(Ok(msg)) => {
                if matches!(msg, crate::types::WatchMessage::SnapshotDone { .. }) {
                    failures = 0;
                }
                shared.feed(msg);
                continue;
            }
            Some(Err(err)) => shared.write().last_error = Some(err),
            None => {}
        }
        loop {
            failures = failures.saturating_add(1);
            tokio::time::sleep(RESUME.jittered_delay(failures)).await;
            match client.watch(options.clone()).await {
                Ok(fresh) => {
                    watch = fresh;
                    let mut inner = shared.write();
                    inner.state.begin_snapshot();
                    inner.rebuilds += 1;
                    break;
                }
                Err(err) => shared.write().last_error = Some(err),
            }
        }
    }
}

/// The methods every cache has, written once.
macro_rules! cache_methods {
    () => {
        /// Opens the cache's watch and starts applying it in a background task. Fails
        /// if the server refuses the watch (BAD_PATH, PERMISSION_DENIED, unreachable);
        /// after that the cache keeps itself current until closed. Listeners made
        /// before `start` see the initial contents as `Created` events, then
        /// `Initialized`. Starting a started or closed cache does nothing.
        pub async fn start(&mut self) -> Result<(), Error> {
            self.core.start().await
        }

        /// A listener of the cache's events from now on. To see a consistent picture,
        /// listen first, then read the cache: later events may already be reflected in
        /// the read.
        pub fn listen(&self) -> CacheListener {
            self.core.listen()
        }

        /// Waits until the initial snapshot is in the cache: true, or false if the
        /// cache was closed first. Wrap it in `tokio::time::timeout` to bound it.
        pub async fn wait_initialized(&self) -> bool {
            self.core.wait_initialized().await
        }

        /// True once the initial snapshot is in the cache.
        pub fn is_initialized(&self) -> bool {
            self.core.shared.read().state.is_initialized()
        }

        /// The zxid the cache reflects: every change up to it is applied (0 before the
        /// initial snapshot). Read with `ReadOptions::at_least(zxid)` to read no older.
        pub fn zxid(&self) -> u64 {
            self.core.shared.read().state.zxid()
        }

        /// The watched path.
        pub fn path(&self) -> String {
            self.core.shared.read().state.scope().root().to_owned()
        }

        /// The latest error of the cache's watch, if any (the cache retries by itself).
        pub fn last_error(&self) -> Option<Error> {
            self.core.shared.read().last_error.clone()
        }

        /// How many times the cache rebuilt from a fresh snapshot because its watch
        /// could not be resumed.
        pub fn rebuilds(&self) -> u64 {
            self.core.shared.read().rebuilds
        }

        /// How many times the cache's watch stream was reopened after a break (resumed
        /// from its last zxid, or rebuilt).
        pub fn reconnects(&self) -> u64 {
            self.core.shared.read().streams.saturating_sub(1)
        }

        /// Stops the cache: the task ends and every listener's `next` returns `None`.
        /// The cached data stays readable. Dropping the cache closes it too.
        pub fn close(&mut self) {
            self.core.close()
        }
    };
}

/// One node, kept current: Curator's NodeCache. The node need not exist.
///
/// ```no_run
/// # async fn demo(client: &concord::Client) -> Result<(), concord::Error> {
/// let mut cache = concord::NodeCache::new(client, "/app/config");
/// let mut events = cache.listen();
/// cache.start().await?;
/// while let Some(event) = events.next().await {
///     println!("{event:?} -> now {:?}", cache.current().map(|n| n.data));
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct NodeCache {
    core: Core,
}

impl NodeCache {
    /// A cache of the node at `path`, not started yet.
    pub fn new(client: &Client, path: impl Into<String>) -> NodeCache {
        NodeCache {
            core: Core::new(client, Scope::Node(path.into())),
        }
    }

    /// The node as cached; `None` if it does not exist (or before initialization).
    pub fn current(&self) -> Option<Node> {
        self.reader().current()
    }

    /// A handle that reads the cached node from another task.
    pub(crate) fn reader(&self) -> NodeReader {
        NodeReader(Arc::clone(&self.core.shared))
    }

    cache_methods!();
}

/// Reads a [`NodeCache`]'s node without owning the cache.
#[derive(Debug, Clone)]
pub(crate) struct NodeReader(Arc<Shared>);

impl NodeReader {
    /// The node as cached.
    pub(crate) fn current(&self) -> Option<Node> {
        let inner = self.0.read();
        let node = inner.state.nodes().next().cloned();
        node
    }
}

/// The direct children of a node, kept current: Curator's PathChildrenCache. The
/// parent need not exist; it is not itself in the cache.
///
/// It runs on a recursive watch of the parent and keeps depth 1 only: deeper nodes
/// are read and dropped, so prefer it for flat directories (services, members).
#[derive(Debug)]
pub struct ChildrenCache {
    core: Core,
}

impl ChildrenCache {
    /// A cache of the children of `path`, not started yet.
    pub fn new(client: &Client, path: impl Into<String>) -> ChildrenCache {
        ChildrenCache {
            core: Core::new(client, Scope::Children(path.into())),
        }
    }

    /// The children as cached, in name order.
    pub fn current(&self) -> Vec<Node> {
        self.core.shared.read().state.nodes().cloned().collect()
    }

    /// The child at the full path `path`, if cached.
    pub fn get(&self, path: &str) -> Option<Node> {
        self.core.shared.read().state.get(path).cloned()
    }

    cache_methods!();
}

/// A whole subtree (its root included), kept current: Curator's CuratorCache.
#[derive(Debug)]
pub struct TreeCache {
    core: Core,
}

impl TreeCache {
    /// A cache of the subtree at `path`, not started yet.
    pub fn new(client: &Client, path: impl Into<String>) -> TreeCache {
        TreeCache {
            core: Core::new(client, Scope::Tree(path.into())),
        }
    }

    /// The node at `path`, if cached.
    pub fn get(&self, path: &str) -> Option<Node> {
        self.core.shared.read().state.get(path).cloned()
    }

    /// Every cached node in path order (parents before children), with the zxid they
    /// reflect, read at once.
    pub fn snapshot(&self) -> (u64, Vec<Node>) {
        let inner = self.core.shared.read();
        (inner.state.zxid(), inner.state.nodes().cloned().collect())
    }

    /// The number of cached nodes.
    pub fn len(&self) -> usize {
        self.core.shared.read().state.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    cache_methods!();
}
