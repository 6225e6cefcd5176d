//! Curator's lock recipes on the server's Lock service: [`Mutex`] (InterProcessMutex,
//! re-entrant), [`SemaphoreMutex`] (InterProcessSemaphoreMutex, not re-entrant) and
//! [`Semaphore`] (InterProcessSemaphoreV2, n permits, leases).
//!
//! ```text
//!   Mutex / SemaphoreMutex / Semaphore ──▶ LockCore ──▶ Client::acquire / try_acquire / release
//!        │ handle state (hold, count)          │ owner_id = "<kind>-<pid>-<handle>-<attempt>"
//!        ▼                                     ▼
//!   LockGuard / Lease  ── fence() ──▶ WriteOptions { fence: Some(..) } ──▶ FENCED once gone
//!        └─ drop ──▶ release spawned on the current tokio runtime
//!   acquire future dropped in flight ──▶ crate::reclaim: the Acquire sent again (same
//!        owner id, 1 ms), released if it holds (it may have been granted as it was dropped)
//! ```
//!
//! The server queues, wakes in order and fences; these objects only ask it, keep what
//! they hold, and watch the session's state (a hold ends with the session: `Lost`).
//! They must not poll, create queue nodes of their own, or open sessions.
//!
//! ```no_run
//! # async fn demo(client: concord::Client) -> Result<(), concord::Error> {
//! use std::time::Duration;
//! use concord::{Mutex, Semaphore, WriteOptions, ANY_VERSION};
//! let session = client.open_session(0).await?;
//! let lock = Mutex::new(&session, "orders");
//! let guard = lock.acquire().await?;
//! let fenced = WriteOptions { fence: Some(guard.fence()), ..Default::default() };
//! client.set_with("/orders/next", "42", ANY_VERSION, &fenced).await?;
//! guard.release().await?; // or drop it: the release is spawned
//!
//! let pool = Semaphore::new(&session, "db-connections", 3);
//! if let Some(lease) = pool.acquire_timeout(Duration::from_secs(1)).await? {
//!     pool.return_lease(lease).await?;
//! }
//! # Ok(()) }
//! ```

mod mutex;
mod semaphore;

pub use mutex::{LockGuard, Mutex, SemaphoreMutex};
pub use semaphore::{Lease, Semaphore};

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use concord_proto::v1::ErrorCode;
use tokio::sync::watch;

use crate::client::Client;
use crate::error::Error;
use crate::recipes::{LockHold, LockOptions};
use crate::reclaim::Reclaim;
use crate::session::{ConnectionState, Session};

/// Handles made in this process, for unique owner ids.
static HANDLES: AtomicU64 = AtomicU64::new(0);

/// Attempts a failed background release is tried.
const RELEASE_ATTEMPTS_MAX: u32 = 3;

/// What every lock recipe shares: the lock's name, the session that owns its holds,
/// the session's state, and the owner ids it acquires with.
#[derive(Debug)]
pub(crate) struct LockCore {
    client: Client,
    session_id: u64,
    /// The session's state; closed when the Session handle is dropped (then: Lost).
    state: watch::Receiver<ConnectionState>,
    name: String,
    /// 1 for the mutexes.
    permits: u32,
    /// `<kind>-<pid>-<handle>`: unique per handle within the process.
    owner_prefix: String,
    /// Acquire calls made through this handle (the owner id's last part).
    attempts: AtomicU64,
}

impl LockCore {
    pub(crate) fn new(session: &Session, name: &str, kind: &str, permits: u32) -> LockCore {
        let handle = HANDLES.fetch_add(1, Ordering::Relaxed);
        LockCore {
            client: session.client().clone(),
            session_id: session.id(),
            state: session.state_watch(),
            name: name.to_string(),
            permits,
            owner_prefix: format!("{kind}-{}-{handle}", std::process::id()),
            attempts: AtomicU64::new(0),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// True once the session is `Lost` or `Closed`, or its handle is gone.
    pub(crate) fn session_ended(&self) -> bool {
        self.state.has_changed().is_err() || self.state.borrow().is_ended()
    }

    /// A fresh owner id: each acquire call gets its own place in the queue (a retry
    /// of that call, inside `Client::acquire`, adopts it).
    fn next_owner_id(&self) -> String {
        owner_id(
            &self.owner_prefix,
            self.attempts.fetch_add(1, Ordering::Relaxed),
        )
    }

    /// Queues for one permit and waits up to `timeout` (None: without limit; zero:
    /// only if one is free now). `Ok(None)` when the time ran out (the server removed
    /// the waiter). SESSION_EXPIRED when the session ends first.
    pub(crate) async fn acquire(
        &self,
        timeout: Option<Duration>,
    ) -> Result<Option<LockHold>, Error> {
        if self.session_ended() {
            return Err(session_ended());
        }
        let options = LockOptions {
            timeout_ms: timeout.map_or(0, timeout_ms),
            owner_id: self.next_owner_id(),
            permits: self.permits,
        };
        let asked = async {
            if timeout == Some(Duration::ZERO) {
                self.client
                    .try_acquire(&self.name, self.session_id, &options)
                    .await
            } else {
                self.client
                    .acquire(&self.name, self.session_id, &options)
                    .await
            }
        };
        // Dropped in flight (by our caller, or below), the call may have been granted
        // as it was dropped: its place is then reclaimed and released.
        let reclaim = Reclaim::lock(&self.client, self.session_id, &self.name, &options);
        let asked = reclaim.guard(None, asked);
        let mut state = self.state.clone();
        // Dropping the call when the session ends cancels it: the server removes the
        // waiter (and the session's end removes it anyway).
        let answer = tokio::select! {
            answer = asked => answer,
            _ = state.wait_for(|s| s.is_ended()) => return Err(session_ended()),
        };
        match answer {
            Ok(hold) => Ok(Some(hold)),
            Err(e) if timeout.is_some() && gave_up(e.code()) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Releases `hold` on the server. A hold already gone (released, or its session
    /// ended) is not an error; a failure that is safe to repeat is tried again a few
    /// times.
    pub(crate) async fn release(&self, hold: &LockHold) -> Result<(), Error> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let err = match self.client.release(&hold.key, hold.token).await {
                Ok(_) => return Ok(()),
                Err(e) if already_gone(e.code()) => return Ok(()),
                Err(e) => e,
            };
            // A repeat of a release that was applied answers NO_NODE: safe.
            let repeatable = err.is_retry_safe() || err.is_indeterminate();
            if !repeatable || attempt >= RELEASE_ATTEMPTS_MAX || self.session_ended() {
                return Err(err);
            }
            tokio::time::sleep(Duration::from_millis(20 << attempt)).await;
        }
    }
}

/// Releases `hold` from a task on the current tokio runtime (for `Drop`, which cannot
/// wait). Outside a runtime nothing is sent: the hold ends with the session.
pub(crate) fn release_in_background(core: std::sync::Arc<LockCore>, hold: LockHold) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            // Nobody is left to tell: the fence protects writes if it failed.
            let _ = core.release(&hold).await;
        });
    }
}

fn owner_id(prefix: &str, attempt: u64) -> String {
    format!("{prefix}-{attempt}")
}

/// A timeout as the server's `timeout_ms` (at least 1: 0 would mean "forever").
fn timeout_ms(timeout: Duration) -> i64 {
    i64::try_from(timeout.as_millis())
        .unwrap_or(i64::MAX)
        .max(1)
}

/// Codes of an acquire with a timeout that was not granted in time.
fn gave_up(code: ErrorCode) -> bool {
    matches!(code, ErrorCode::Timeout | ErrorCode::LockHeld)
}

/// Codes of a release whose hold is already gone.
fn already_gone(code: ErrorCode) -> bool {
    matches!(code, ErrorCode::NoNode | ErrorCode::SessionExpired)
}

/// The error of a call made (or waiting) after the session ended.
pub(crate) fn session_ended() -> Error {
    Error::client(
        ErrorCode::SessionExpired,
        "the lock's session has ended (lost or closed): its holds are gone",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_ids_are_unique_and_never_empty() {
        let ids: std::collections::HashSet<String> =
            (0..100).map(|n| owner_id("mutex-1-2", n)).collect();
        assert_eq!(ids.len(), 100);
        assert!(ids.iter().all(|id| id.starts_with("mutex-1-2-")));
    }

    #[test]
    fn timeouts_round_to_at_least_a_millisecond() {
        assert_eq!(timeout_ms(Duration::from_micros(10)), 1);
        assert_eq!(timeout_ms(Duration::from_millis(250)), 250);
        assert_eq!(timeout_ms(Duration::MAX), i64::MAX);
    }

    #[test]
    fn a_release_of_a_gone_hold_is_not_an_error() {
        assert!(already_gone(ErrorCode::NoNode));
        assert!(already_gone(ErrorCode::SessionExpired));
        assert!(!already_gone(ErrorCode::Unavailable));
    }
}
