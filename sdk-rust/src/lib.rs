//! `concord`: the Rust SDK for Concord, a coordination service with ZooKeeper's data
//! model (a tree of small nodes, sessions, ephemerals, watches) over gRPC.
//!
//! ```text
//!  Client::builder() ─ endpoints, TLS, call deadline, retry policy, session TTL
//!  Client ─ tree calls (create/get/exists/set/delete/children/multi/sync), status
//!    ├── ensure_path, delete_recursive          (paths.rs: many nodes, one call each)
//!    ├── open_session → Session  (keep-alive task; ConnectionState and its listener)
//!    │     ├── Session::client      (writes as the session, request ids: writer.rs)
//!    │     ├── Mutex, SemaphoreMutex, Semaphore      (locks/: server-side fair queues)
//!    │     ├── LeaderLatch, LeaderSelector           (latch.rs, selector.rs: elections)
//!    │     └── IdGenerator::for_session              (naming.rs)
//!    ├── watch        → Watch    (stream of messages, optional resume)
//!    │     └── NodeCache, ChildrenCache, TreeCache   (cache/) ─▶ ConfigWatcher, ServiceDiscovery
//!    ├── ServiceRegistration     (registration.rs: its own sessions, re-registered after Lost)
//!    ├── acquire/release/campaign/... → the thin Lock and Election calls (recipes.rs)
//!    └── who_am_i, grant/revoke/list_grants → identity and ACLs (access.rs)
//!  Error ─ code (ErrorCode), is_retry_safe(), is_indeterminate()
//! ```
//!
//! ```no_run
//! # async fn demo() -> Result<(), concord::Error> {
//! use concord::{Client, CreateOptions, ReadOptions};
//! let client = Client::connect("http://127.0.0.1:7181").await?;
//! let created = client.create("/app", "hello", CreateOptions::default()).await?;
//! let node = client.get("/app", ReadOptions::at_least(created.zxid)).await?;
//! assert_eq!(node.data, b"hello");
//! # Ok(()) }
//! ```
//!
//! A client built without a retry policy sends each call once; the SDK always
//! retries where it owns a stream (keep-alives, resumed watches, caches). Calls take
//! and return the SDK's own types (`types.rs`); the generated messages stay reachable
//! as [`proto`] for the services not wrapped here. docs/sdk.md is the guide.

#![deny(missing_docs)]

pub mod access;
pub mod backup;
pub mod builder;
pub mod cache;
mod call;
pub mod client;
pub mod config_watcher;
mod connection;
pub mod discovery;
pub mod error;
pub mod latch;
pub mod locks;
pub mod members;
pub mod naming;
pub mod op;
pub mod options;
mod paths;
pub mod recipes;
mod reclaim;
pub mod registration;
pub mod selector;
pub mod session;
pub mod tls;
pub mod types;
pub mod watch;
mod writer;

/// Locks `m`, going on past a panic of another holder: the SDK's shared state stays
/// consistent under its locks (each critical section is a few assignments).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The generated `concord.v1` messages and clients.
pub use concord_proto::v1 as proto;

/// The connection a client's calls take ([`Client::link`]): give a clone of it to the
/// generated clients of services not wrapped here.
pub use concord_direct::Link;

pub use access::{Grant, Grantee, QuotaUsage, WhoAmI};
pub use builder::ClientBuilder;
pub use cache::{CacheEvent, CacheListener, ChildrenCache, NodeCache, TreeCache};
pub use client::{
    Children, Client, Created, Exists, MultiResult, NodeData, SessionGrant, Updated,
    DEFAULT_ENDPOINT,
};
pub use config_watcher::{ConfigListener, ConfigValue, ConfigWatcher};
pub use discovery::{ServiceDiscovery, ServiceEvent, ServiceInstance, ServiceListener};
pub use error::{CallKind, Error, LeaderHint, Origin};
pub use latch::{CloseMode, LatchEvent, LatchListener, LatchState, LeaderLatch};
pub use locks::{Lease, LockGuard, Mutex, Semaphore, SemaphoreMutex};
pub use members::{MemberStatus, Members};
pub use naming::{IdGenerator, IdOptions};
pub use op::Op;
pub use options::{
    ChildrenOptions, CreateOptions, ReadOptions, RetryPolicy, WatchOptions, WriteOptions,
    ANY_VERSION,
};
pub use proto::{CreateMode, ErrorCode, EventKind};
pub use recipes::{LeaderChange, LockHold, LockOptions};
pub use registration::{RegistrationOptions, RegistrationStatus, ServiceRegistration};
pub use selector::{Candidate, LeaderSelector, Leadership};
pub use session::{ConnectionState, Session, StateListener};
pub use tls::{ConnectOptions, TlsOptions};
pub use types::{
    Child, Event, Fence, LockEntry, Node, OpResult, Participant, Role, ServerStatus, SessionInfo,
    Stat, WatchMessage,
};
pub use watch::Watch;
