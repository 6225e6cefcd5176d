//! Call options and their conversion into proto requests.
//!
//! Each options struct is plain data with a `Default` that means "the server's
//! defaults": building a request from options is a pure function, tested here, so the
//! client methods only send and convert answers. Nothing here does IO.

use std::time::Duration;

use concord_proto::v1::{
    ChildrenRequest, CreateMode, CreateRequest, DeleteRequest, EventKind, ExistsRequest,
    GetRequest, MultiRequest, SetRequest, WatchRequest,
};

use crate::op::Op;
use crate::types::Fence;

/// The version that matches any version in `set`, `delete` and check ops.
pub const ANY_VERSION: i32 = -1;

/// How fresh a read must be.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Wait until the server has applied at least this zxid (read-your-writes); 0: no wait.
    pub min_zxid: u64,
    /// Read at the leader's quorum-confirmed commit point.
    pub linearizable: bool,
}

impl ReadOptions {
    /// Read from a server that has applied at least `zxid`.
    pub fn at_least(zxid: u64) -> ReadOptions {
        ReadOptions {
            min_zxid: zxid,
            linearizable: false,
        }
    }

    /// Read at the leader's quorum-confirmed commit point.
    pub fn linearizable() -> ReadOptions {
        ReadOptions {
            min_zxid: 0,
            linearizable: true,
        }
    }
}

/// Who is writing, for retries and fencing. The default is an unfenced write as the
/// client's session if it is a session's client ([`Client::session_id`]), else as
/// no session.
///
/// [`Client::session_id`]: crate::Client::session_id
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// Session that scopes `request_id` (and owns ephemerals created by a multi); 0:
    /// the client's session, if it has one, else none.
    pub session_id: u64,
    /// Retry id, unique within the session: the server applies a write with the same
    /// `(session_id, request_id)` at most once. 0: a fresh one when the write has a
    /// session, else none.
    pub request_id: u64,
    /// Fencing token checked when the write is applied.
    pub fence: Option<Fence>,
}

/// How to create a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateOptions {
    /// Persistent, ephemeral, sequential, container or TTL.
    pub mode: CreateMode,
    /// Owner session of an ephemeral node; also scopes `request_id`. 0: the client's
    /// session, if it has one ([`Client::session_id`](crate::Client::session_id)),
    /// else none.
    pub session_id: u64,
    /// For the TTL modes: idle milliseconds after which an empty node is deleted.
    pub ttl_ms: i64,
    /// Retry id (see [`WriteOptions::request_id`]); 0: a fresh one when the create
    /// has a session, else none.
    pub request_id: u64,
    /// Fencing token checked when the write is applied.
    pub fence: Option<Fence>,
    /// Create the missing parents first, as empty persistent nodes (Curator's
    /// `creatingParentsIfNeeded`, kazoo's `makepath`; see
    /// [`Client::ensure_path`](crate::Client::ensure_path)).
    pub create_parents: bool,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            mode: CreateMode::Persistent,
            session_id: 0,
            ttl_ms: 0,
            request_id: 0,
            fence: None,
            create_parents: false,
        }
    }
}

impl CreateOptions {
    /// Options for a node of `mode`, with everything else defaulted.
    pub fn mode(mode: CreateMode) -> CreateOptions {
        CreateOptions {
            mode,
            ..CreateOptions::default()
        }
    }

    /// Options for an ephemeral (optionally sequential) node owned by `session_id`.
    pub fn ephemeral(session_id: u64, sequential: bool) -> CreateOptions {
        let mode = if sequential {
            CreateMode::EphemeralSequential
        } else {
            CreateMode::Ephemeral
        };
        CreateOptions {
            mode,
            session_id,
            ..CreateOptions::default()
        }
    }

    /// These options, creating the missing parents first (see
    /// [`CreateOptions::create_parents`]).
    pub fn with_parents(self) -> CreateOptions {
        CreateOptions {
            create_parents: true,
            ..self
        }
    }
}

/// How to list children.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChildrenOptions {
    /// Also return each child's stat.
    pub with_stats: bool,
    /// At most this many children per page; 0 (or more than the server's cap,
    /// `children_page_max`, 1,000 by default) means the cap. `Client::children`
    /// follows every page whatever the size; `Client::children_page` reads one.
    pub page_size: u32,
    /// Continue from a previous page's `next_page_token`; empty for the first page.
    pub page_token: String,
    /// Freshness of each page read.
    pub read: ReadOptions,
}

/// What to watch. `Default` watches nothing useful: set `path`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchOptions {
    /// The node (or subtree root) to watch; it need not exist.
    pub path: String,
    /// Watch the whole subtree, `path` included.
    pub recursive: bool,
    /// The kinds wanted; empty means all.
    pub kinds: Vec<EventKind>,
    /// End after the first event (one-shot watch).
    pub once: bool,
    /// Events carry the new (and previous) data.
    pub with_data: bool,
    /// Replay events after this zxid first.
    pub start_zxid: Option<u64>,
    /// Start with the current nodes, then every change after them.
    pub initial_snapshot: bool,
    /// Milliseconds without events before the server sends Progress; 0: server default.
    pub progress_interval_ms: u32,
    /// Reconnect and resume after a broken stream; `None` ends the watch on the first
    /// error.
    pub resume: Option<RetryPolicy>,
}

impl WatchOptions {
    /// A persistent watch of one node.
    pub fn path(path: impl Into<String>) -> WatchOptions {
        WatchOptions {
            path: path.into(),
            ..WatchOptions::default()
        }
    }
}

/// How long to keep retrying, and how fast. Delays double from `delay_initial_ms` up to
/// `delay_max_ms`; retrying stops after `attempts_max` attempts in a row or once
/// `elapsed_max_ms` have passed since the first failure, whichever comes first (with
/// both at 0 it never gives up).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in a row before giving up (0: only the time bound applies).
    pub attempts_max: u32,
    /// Time since the first failure after which no new attempt starts (0: no bound).
    pub elapsed_max_ms: u64,
    /// Delay before the first retry.
    pub delay_initial_ms: u64,
    /// Largest delay between retries.
    pub delay_max_ms: u64,
}

impl Default for RetryPolicy {
    /// Up to one minute of retries, 50 ms to 2 s apart.
    fn default() -> Self {
        RetryPolicy {
            attempts_max: 0,
            elapsed_max_ms: 60_000,
            delay_initial_ms: 50,
            delay_max_ms: 2_000,
        }
    }
}

impl RetryPolicy {
    /// The delay before retry number `attempt` (1-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let shift = attempt.saturating_sub(1).min(32);
        let delay_ms = self
            .delay_initial_ms
            .saturating_mul(1u64 << shift)
            .min(self.delay_max_ms);
        Duration::from_millis(delay_ms)
    }

    /// The delay before retry number `attempt` with "equal jitter": a random point in
    /// the upper half of [`RetryPolicy::delay`], so that clients failing together do
    /// not retry together.
    pub fn jittered_delay(&self, attempt: u32) -> Duration {
        use std::hash::{BuildHasher, RandomState};
        let full = self.delay(attempt).as_millis() as u64;
        let half = full / 2;
        let draw = RandomState::new().hash_one(attempt) % (full - half + 1);
        Duration::from_millis(half + draw)
    }

    /// True when attempt number `attempt` (1-based) may start `elapsed` after the first
    /// failure.
    pub fn allows(&self, attempt: u32, elapsed: Duration) -> bool {
        let attempts_ok = self.attempts_max == 0 || attempt <= self.attempts_max;
        let time_ok = self.elapsed_max_ms == 0 || elapsed.as_millis() < self.elapsed_max_ms as u128;
        attempts_ok && time_ok
    }
}

pub(crate) fn create_request(path: &str, data: Vec<u8>, options: &CreateOptions) -> CreateRequest {
    CreateRequest {
        path: path.to_string(),
        data: data.into(),
        mode: options.mode as i32,
        session_id: options.session_id,
        ttl_ms: options.ttl_ms,
        request_id: options.request_id,
        fence: options.fence.clone().map(Into::into),
    }
}

pub(crate) fn get_request(path: &str, read: ReadOptions) -> GetRequest {
    GetRequest {
        path: path.to_string(),
        min_zxid: read.min_zxid,
        linearizable: read.linearizable,
    }
}

pub(crate) fn exists_request(path: &str, read: ReadOptions) -> ExistsRequest {
    ExistsRequest {
        path: path.to_string(),
        min_zxid: read.min_zxid,
        linearizable: read.linearizable,
    }
}

pub(crate) fn set_request(
    path: &str,
    data: Vec<u8>,
    version: i32,
    write: &WriteOptions,
) -> SetRequest {
    SetRequest {
        path: path.to_string(),
        data: data.into(),
        version,
        session_id: write.session_id,
        request_id: write.request_id,
        fence: write.fence.clone().map(Into::into),
    }
}

pub(crate) fn delete_request(path: &str, version: i32, write: &WriteOptions) -> DeleteRequest {
    DeleteRequest {
        path: path.to_string(),
        version,
        session_id: write.session_id,
        request_id: write.request_id,
        fence: write.fence.clone().map(Into::into),
    }
}

pub(crate) fn children_request(path: &str, options: &ChildrenOptions) -> ChildrenRequest {
    ChildrenRequest {
        path: path.to_string(),
        with_stats: options.with_stats,
        page_size: options.page_size,
        page_token: options.page_token.clone(),
        min_zxid: options.read.min_zxid,
        linearizable: options.read.linearizable,
    }
}

pub(crate) fn multi_request(ops: Vec<Op>, write: &WriteOptions) -> MultiRequest {
    MultiRequest {
        ops: ops.into_iter().map(|op| op.0).collect(),
        session_id: write.session_id,
        request_id: write.request_id,
        fence: write.fence.clone().map(Into::into),
    }
}

pub(crate) fn watch_request(options: &WatchOptions) -> WatchRequest {
    WatchRequest {
        path: options.path.clone(),
        recursive: options.recursive,
        kinds: options.kinds.iter().map(|kind| *kind as i32).collect(),
        once: options.once,
        with_data: options.with_data,
        start_zxid: options.start_zxid,
        initial_snapshot: options.initial_snapshot,
        progress_interval_ms: options.progress_interval_ms,
    }
}

#[cfg(test)]
#[path = "options_tests.rs"]
mod tests;
