//! [`Semaphore`] (Curator's InterProcessSemaphoreV2): `permits` leases of one name
//! at a time, handed out in queue order; each [`Lease`] is a hold of its own, with its
//! own fencing token, released on drop or by [`Semaphore::return_lease`].
//!
//! ```text
//!   Semaphore::acquire ─▶ Lock.Acquire(name, session, fresh owner_id, permits) ─▶ Lease
//!   acquire_many(n)    ─▶ n acquires in turn; on failure or timeout the ones got are returned
//!   Lease drop / return_lease ─▶ Lock.Release(key, token) ─▶ the next waiter holds
//! ```
//!
//! What it must not do: hand out a lease the server did not grant, or keep one past
//! the end of its session.

use std::sync::Arc;
use std::time::Duration;

use concord_proto::v1::ErrorCode;
use tokio::time::Instant;

use super::{release_in_background, LockCore};
use crate::error::Error;
use crate::recipes::LockHold;
use crate::session::Session;
use crate::types::{Fence, LockEntry};

/// Curator's InterProcessSemaphoreV2: at most `permits` leases of lock `name` are
/// held at once, across every process; waiters are served in queue order.
///
/// Every user of a name must give the same `permits` (the server refuses an acquire
/// with another number: BAD_ARGUMENTS). Each acquire queues on its own, so leases
/// taken through one handle count like anyone else's.
///
/// Connection states: leases survive `Suspended` and `Reconnected` (stop unfenced
/// writes while suspended); on `Lost` (or `Closed`, or when the Session handle is
/// dropped) they are gone: `Lease::is_valid()` is false, and an acquire, or one still
/// waiting, fails with SESSION_EXPIRED.
#[derive(Debug)]
pub struct Semaphore {
    core: Arc<LockCore>,
}

impl Semaphore {
    /// A handle on semaphore `name` with `permits` permits, owned by `session`.
    pub fn new(session: &Session, name: &str, permits: u32) -> Semaphore {
        Semaphore {
            core: Arc::new(LockCore::new(session, name, "semaphore", permits.max(1))),
        }
    }

    /// The number of permits.
    pub fn permits(&self) -> u32 {
        self.core.permits
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        self.core.name()
    }

    /// Waits for one lease. Errors: SESSION_EXPIRED once the session has ended;
    /// BAD_ARGUMENTS when the name has other permits; the client's errors.
    pub async fn acquire(&self) -> Result<Lease, Error> {
        match self.core.acquire(None).await? {
            Some(hold) => Ok(self.lease(hold)),
            None => Err(Error::client(ErrorCode::Timeout, "acquire gave up")),
        }
    }

    /// Waits at most `timeout` for one lease; `None` if none was granted in time.
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<Lease>, Error> {
        Ok(self
            .core
            .acquire(Some(timeout))
            .await?
            .map(|h| self.lease(h)))
    }

    /// Waits for `n` leases, taken one after the other (so two handles that each
    /// want more than half the permits can wait for each other for ever, as in
    /// Curator: prefer a timeout). On an error the leases already taken are returned.
    /// Errors: BAD_ARGUMENTS when `n` exceeds the permits.
    pub async fn acquire_many(&self, n: u32) -> Result<Vec<Lease>, Error> {
        match self.acquire_many_until(n, None).await? {
            Some(leases) => Ok(leases),
            None => Err(Error::client(ErrorCode::Timeout, "acquire gave up")),
        }
    }

    /// Waits at most `timeout` for `n` leases; `None` (having returned those taken)
    /// if they were not all granted in time.
    pub async fn acquire_many_timeout(
        &self,
        n: u32,
        timeout: Duration,
    ) -> Result<Option<Vec<Lease>>, Error> {
        self.acquire_many_until(n, Some(Instant::now() + timeout))
            .await
    }

    async fn acquire_many_until(
        &self,
        n: u32,
        deadline: Option<Instant>,
    ) -> Result<Option<Vec<Lease>>, Error> {
        if n > self.permits() {
            return Err(Error::client(
                ErrorCode::BadArguments,
                format!("{n} leases asked of {} permits", self.permits()),
            ));
        }
        let mut leases = Vec::with_capacity(n as usize);
        while leases.len() < n as usize {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let got = match self.core.acquire(left).await {
                Ok(Some(hold)) => self.lease(hold),
                Ok(None) => {
                    self.return_all(leases).await?;
                    return Ok(None);
                }
                Err(e) => {
                    // The first error is the one to report.
                    let _ = self.return_all(leases).await;
                    return Err(e);
                }
            };
            leases.push(got);
        }
        Ok(Some(leases))
    }

    /// Releases a lease and waits for the server.
    pub async fn return_lease(&self, lease: Lease) -> Result<(), Error> {
        lease.release().await
    }

    /// Releases every lease given; the first failure is returned after trying all.
    pub async fn return_all(&self, leases: impl IntoIterator<Item = Lease>) -> Result<(), Error> {
        let mut first = Ok(());
        for lease in leases {
            let done = lease.release().await;
            if first.is_ok() {
                first = done;
            }
        }
        first
    }

    /// The current holders of the semaphore's leases, in queue order.
    pub async fn holders(&self) -> Result<Vec<LockEntry>, Error> {
        self.core.client().lock_holders(self.core.name()).await
    }

    fn lease(&self, hold: LockHold) -> Lease {
        Lease {
            core: Arc::clone(&self.core),
            hold,
            released: false,
        }
    }
}

/// One permit of a [`Semaphore`]: a hold with its own key and fencing token.
///
/// `Drop` cannot wait, so a dropped lease spawns its release on the current tokio
/// runtime (outside one, nothing is sent and the lease ends with the session); use
/// [`Semaphore::return_lease`] or [`Lease::release`] to know it is done.
#[derive(Debug)]
#[must_use = "dropping the lease releases it"]
pub struct Lease {
    core: Arc<LockCore>,
    hold: LockHold,
    released: bool,
}

impl Lease {
    /// The holder key of this lease.
    pub fn key(&self) -> &str {
        &self.hold.key
    }

    /// The lease's fencing token: the zxid that created its node.
    pub fn token(&self) -> u64 {
        self.hold.token
    }

    /// The fence for writes made under this lease: `WriteOptions { fence: Some(..) }`.
    pub fn fence(&self) -> Fence {
        self.hold.fence()
    }

    /// False once the session has ended (the lease is gone with it).
    pub fn is_valid(&self) -> bool {
        !self.core.session_ended()
    }

    /// Asks the server whether this lease still holds (for after `Reconnected`).
    pub async fn validate(&self) -> Result<bool, Error> {
        self.core
            .client()
            .validate(&self.hold.key, self.hold.token)
            .await
    }

    /// Releases the lease and waits for the server (nothing to do once the session
    /// has ended).
    pub async fn release(mut self) -> Result<(), Error> {
        self.released = true;
        if self.core.session_ended() {
            return Ok(());
        }
        self.core.release(&self.hold).await
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.released && !self.core.session_ended() {
            release_in_background(Arc::clone(&self.core), self.hold.clone());
        }
    }
}
