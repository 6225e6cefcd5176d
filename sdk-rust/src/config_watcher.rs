//! [`ConfigWatcher`]: the current value of a config node and its changes, on a
//! [`NodeCache`], optionally parsed into a type by a closure.
//!
//! ```text
//!  NodeCache(path) ─▶ CacheListener ─▶ task: parse(data) ─▶ tokio watch<ConfigValue<T>>
//!                                                      ├─▶ current(), config()
//!                                                      └─▶ ConfigListener::next()
//! ```
//!
//! A config is a latest-value thing: a listener that is slow skips to the newest value
//! (it never sees a stale value last), so no queue grows. The node need not exist: its
//! absence is a value too (`None`). Needs no session; across reconnects and server
//! moves the NodeCache's watch resumes, and the watcher sees every value it missed
//! only if it kept up (intermediate values may be skipped, the last one never is).
//! What it must not do: write the node, or parse the same version twice.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cache::{CacheEvent, CacheListener, NodeCache, NodeReader};
use crate::client::Client;
use crate::error::Error;

/// One value of a config node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigValue<T> {
    /// The parsed value; `None` while the node does not exist.
    pub value: Option<T>,
    /// The node's data version (`-1` while it does not exist).
    pub version: i32,
    /// The zxid of the change that made this value (its mzxid; 0 while absent).
    pub zxid: u64,
}

impl<T> ConfigValue<T> {
    fn absent() -> ConfigValue<T> {
        ConfigValue {
            value: None,
            version: -1,
            zxid: 0,
        }
    }
}

/// The parse closure of a watcher.
type Parse<T> = Arc<dyn Fn(&[u8]) -> T + Send + Sync>;

/// The value of one config node, kept current. `T` is what the parse closure makes of
/// the bytes (`Vec<u8>` for [`ConfigWatcher::start`]; a `Result` is a good `T` when
/// parsing can fail).
pub struct ConfigWatcher<T> {
    cache: NodeCache,
    values: watch::Receiver<ConfigValue<T>>,
    /// Turns true once the first value is in `values`.
    initialized: watch::Receiver<bool>,
    task: JoinHandle<()>,
}

impl<T> std::fmt::Debug for ConfigWatcher<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigWatcher")
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}

impl ConfigWatcher<Vec<u8>> {
    /// Watches the config node at `path` as raw bytes.
    pub async fn start(
        client: &Client,
        path: impl Into<String>,
    ) -> Result<ConfigWatcher<Vec<u8>>, Error> {
        ConfigWatcher::start_with(client, path, |data: &[u8]| data.to_vec()).await
    }
}

impl<T: Clone + Send + Sync + 'static> ConfigWatcher<T> {
    /// Watches the config node at `path`, making each value with `parse`. Returns once
    /// the watch is open (the first value follows: see [`ConfigWatcher::wait_initialized`]).
    pub async fn start_with(
        client: &Client,
        path: impl Into<String>,
        parse: impl Fn(&[u8]) -> T + Send + Sync + 'static,
    ) -> Result<ConfigWatcher<T>, Error> {
        let mut cache = NodeCache::new(client, path);
        let events = cache.listen();
        cache.start().await?;
        let (sender, values) = watch::channel(ConfigValue::absent());
        let parse: Parse<T> = Arc::new(parse);
        let (ready, initialized) = watch::channel(false);
        let task = tokio::spawn(follow(events, cache.reader(), sender, ready, parse));
        Ok(ConfigWatcher {
            cache,
            values,
            initialized,
            task,
        })
    }

    /// The current value: `None` while the node does not exist (or before the first
    /// value is known).
    pub fn current(&self) -> Option<T> {
        self.values.borrow().value.clone()
    }

    /// The current value with its version and zxid.
    pub fn config(&self) -> ConfigValue<T> {
        self.values.borrow().clone()
    }

    /// A listener of the values from now on.
    pub fn listen(&self) -> ConfigListener<T> {
        let mut values = self.values.clone();
        values.mark_unchanged();
        ConfigListener { values }
    }

    /// Waits until the node's first value is known: true, or false if the watcher was
    /// closed first.
    pub async fn wait_initialized(&self) -> bool {
        let mut initialized = self.initialized.clone();
        let done = initialized.wait_for(|ready| *ready).await.is_ok();
        done
    }

    /// The watched path.
    pub fn path(&self) -> String {
        self.cache.path()
    }

    /// Stops watching: listeners end; the last value stays readable.
    pub fn close(&mut self) {
        self.cache.close();
        self.task.abort();
    }
}

impl<T> Drop for ConfigWatcher<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Turns the node's cache events into values: on each event it reads the cached
/// node (the newest), so a lagged listener loses nothing that matters.
async fn follow<T>(
    mut events: CacheListener,
    reader: NodeReader,
    sender: watch::Sender<ConfigValue<T>>,
    initialized: watch::Sender<bool>,
    parse: Parse<T>,
) {
    let mut last: Option<(i32, u64)> = None;
    while let Some(event) = events.next().await {
        if event == CacheEvent::Initialized {
            // The value (or its absence) is in the channel already.
            initialized.send_replace(true);
            continue;
        }
        let node = reader.current();
        let seen = node.as_ref().map(|n| (n.stat.version, n.stat.mzxid));
        if seen == last {
            continue;
        }
        last = seen;
        let config = match node {
            Some(node) => ConfigValue {
                value: Some(parse(&node.data)),
                version: node.stat.version,
                zxid: node.stat.mzxid,
            },
            None => ConfigValue::absent(),
        };
        sender.send_replace(config);
    }
}

/// A listener of a config's values (latest value wins). Made by
/// [`ConfigWatcher::listen`].
#[derive(Debug)]
pub struct ConfigListener<T> {
    values: watch::Receiver<ConfigValue<T>>,
}

impl<T: Clone> ConfigListener<T> {
    /// The next value (the newest, if several came since the last call); `None` once
    /// the watcher is closed or dropped.
    pub async fn next(&mut self) -> Option<ConfigValue<T>> {
        self.values.changed().await.ok()?;
        let value = self.values.borrow_and_update().clone();
        Some(value)
    }
}
