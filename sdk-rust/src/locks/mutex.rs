//! [`Mutex`] (Curator's InterProcessMutex: re-entrant through its handle) and
//! [`SemaphoreMutex`] (InterProcessSemaphoreMutex: not re-entrant), both giving a
//! [`LockGuard`] that releases on drop.
//!
//! ```text
//!   Mutex::acquire ─▶ held by this handle? ── yes ─▶ count += 1 ─▶ LockGuard
//!        │ no (one acquire at a time per handle)
//!        ▼
//!   Lock.Acquire(name, session, owner_id) ─▶ LockHold { key, token } ─▶ count = 1 ─▶ LockGuard
//!   guard.release() / drop / Mutex::release ─▶ count -= 1 ── 0 ─▶ Lock.Release(key, token)
//!
//!   SemaphoreMutex::acquire ─▶ always Lock.Acquire with a fresh owner_id: a second
//!   acquire through the same handle queues behind the first, like anyone else's
//! ```
//!
//! What it must not do: release on the server before the last level of a hold is
//! released, or report a hold after the session ended.

use std::sync::Arc;
use std::time::Duration;

use concord_proto::v1::ErrorCode;
use tokio::time::Instant;

use super::{release_in_background, session_ended, LockCore};
use crate::error::Error;
use crate::recipes::LockHold;
use crate::session::Session;
use crate::types::Fence;

/// The hold of one handle and how many acquires of it are not yet released.
#[derive(Debug, Default)]
struct Holds {
    held: Option<(LockHold, u32)>,
}

/// What releasing one level left.
#[derive(Debug, PartialEq, Eq)]
enum Left {
    /// Nothing was held (or the level belonged to an earlier hold).
    NotHeld,
    /// Still held, by this many acquires.
    Still(u32),
    /// The last level: release this hold on the server.
    Released(LockHold),
}

impl Holds {
    /// One more level of the current hold, if there is one.
    fn reenter(&mut self) -> Option<LockHold> {
        let (hold, count) = self.held.as_mut()?;
        *count = count.saturating_add(1);
        Some(hold.clone())
    }

    /// A new hold from the server, replacing any earlier one (which is gone).
    fn start(&mut self, hold: LockHold) {
        self.held = Some((hold, 1));
    }

    /// Releases one level of the hold with `token` (None: of the current hold).
    fn leave(&mut self, token: Option<u64>) -> Left {
        let Some((hold, count)) = self.held.as_mut() else {
            return Left::NotHeld;
        };
        if token.is_some_and(|t| t != hold.token) {
            return Left::NotHeld;
        }
        *count -= 1;
        if *count > 0 {
            return Left::Still(*count);
        }
        match self.held.take() {
            Some((hold, _)) => Left::Released(hold),
            None => Left::NotHeld,
        }
    }

    fn hold(&self) -> Option<&LockHold> {
        self.held.as_ref().map(|(hold, _)| hold)
    }
}

/// The state shared by a mutex handle and its guards.
#[derive(Debug)]
struct Exclusive {
    core: Arc<LockCore>,
    holds: std::sync::Mutex<Holds>,
    /// Re-entrant handles acquire one at a time, so that a second acquire waits for
    /// the first and then re-enters.
    turn: tokio::sync::Mutex<()>,
    reentrant: bool,
}

impl Exclusive {
    fn new(session: &Session, name: &str, kind: &str, reentrant: bool) -> Arc<Exclusive> {
        Arc::new(Exclusive {
            core: Arc::new(LockCore::new(session, name, kind, 1)),
            holds: std::sync::Mutex::new(Holds::default()),
            turn: tokio::sync::Mutex::new(()),
            reentrant,
        })
    }

    fn holds(&self) -> std::sync::MutexGuard<'_, Holds> {
        crate::lock(&self.holds)
    }

    /// Waits without a time limit (only the session's end stops it).
    async fn acquire_without_limit(self: &Arc<Self>) -> Result<LockGuard, Error> {
        self.acquire(None)
            .await?
            .ok_or_else(|| Error::client(ErrorCode::Timeout, "acquire gave up"))
    }

    async fn acquire(
        self: &Arc<Self>,
        timeout: Option<Duration>,
    ) -> Result<Option<LockGuard>, Error> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let _turn = if self.reentrant {
            let turn = match deadline {
                None => self.turn.lock().await,
                Some(d) => match tokio::time::timeout_at(d, self.turn.lock()).await {
                    Ok(turn) => turn,
                    Err(_) => return Ok(None),
                },
            };
            if let Some(hold) = self.reenter()? {
                return Ok(Some(self.guard(hold)));
            }
            Some(turn)
        } else {
            None
        };
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let Some(hold) = self.core.acquire(left).await? else {
            return Ok(None);
        };
        self.holds().start(hold.clone());
        Ok(Some(self.guard(hold)))
    }

    /// Re-enters the current hold if the session still lives.
    fn reenter(&self) -> Result<Option<LockHold>, Error> {
        let mut holds = self.holds();
        if self.core.session_ended() {
            holds.held = None;
            return Err(session_ended());
        }
        Ok(holds.reenter())
    }

    fn guard(self: &Arc<Self>, hold: LockHold) -> LockGuard {
        LockGuard {
            lock: Arc::clone(self),
            hold,
            released: false,
        }
    }

    /// Releases one level; the last one on the server (unless the session ended,
    /// which took the hold already).
    async fn release(&self, token: Option<u64>) -> Result<bool, Error> {
        let left = self.holds().leave(token);
        match left {
            Left::NotHeld => Ok(false),
            Left::Still(_) => Ok(true),
            Left::Released(_) if self.core.session_ended() => Ok(true),
            Left::Released(hold) => self.core.release(&hold).await.map(|()| true),
        }
    }

    fn is_acquired(&self) -> bool {
        self.holds().hold().is_some() && !self.core.session_ended()
    }

    fn fence(&self) -> Option<Fence> {
        self.holds().hold().map(LockHold::fence)
    }

    fn count(&self) -> u32 {
        self.holds().held.as_ref().map_or(0, |(_, count)| *count)
    }
}

/// Curator's InterProcessMutex: a fair, re-entrant lock shared by every process that
/// names it, held by a [`Session`].
///
/// Re-entrant through the handle: an acquire while this handle holds the lock
/// succeeds at once and counts; only the last release releases it on the server. A
/// handle is one owner, so tasks that must exclude each other use a handle each
/// (clones of an `Arc<Mutex>` re-enter each other's hold).
///
/// Connection states: the hold survives `Suspended` and `Reconnected` (the session
/// still owns it; stop unfenced writes while suspended, as another process may be
/// given the lock if the session expires unseen); on `Lost` (or `Closed`, or when
/// the Session handle is dropped) the hold is gone: `is_acquired()` is false, and an
/// acquire, or one still waiting, fails with SESSION_EXPIRED.
#[derive(Debug)]
pub struct Mutex {
    lock: Arc<Exclusive>,
}

impl Mutex {
    /// A handle on lock `name`, owned by `session` (nothing is sent yet).
    pub fn new(session: &Session, name: &str) -> Mutex {
        Mutex {
            lock: Exclusive::new(session, name, "mutex", true),
        }
    }

    /// Waits until the lock is held by this handle (at once if it already is).
    /// Errors: SESSION_EXPIRED once the session has ended; the client's errors.
    pub async fn acquire(&self) -> Result<LockGuard, Error> {
        self.lock.acquire_without_limit().await
    }

    /// Waits at most `timeout`; `None` when the lock was not acquired in time (the
    /// server removed the waiter). A zero timeout only takes a free lock.
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>, Error> {
        self.lock.acquire(Some(timeout)).await
    }

    /// Releases one level of the hold (Curator's `release`); the last one releases
    /// the lock on the server. For holds whose guard was given up with
    /// [`LockGuard::keep`]. Errors: BAD_ARGUMENTS when this handle holds nothing (and
    /// its session lives).
    pub async fn release(&self) -> Result<(), Error> {
        release_level(&self.lock, None).await
    }

    /// True while this handle holds the lock and its session has not ended.
    pub fn is_acquired(&self) -> bool {
        self.lock.is_acquired()
    }

    /// How many acquires of the current hold are not yet released (0: not held).
    pub fn hold_count(&self) -> u32 {
        self.lock.count()
    }

    /// The current hold's fence for writes (`WriteOptions { fence: Some(..) }`).
    pub fn fence(&self) -> Option<Fence> {
        self.lock.fence()
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.lock.core.name()
    }
}

/// Curator's InterProcessSemaphoreMutex: a fair lock that is not re-entrant.
///
/// Every acquire queues on the server with a place of its own, so a second acquire
/// through a handle that holds the lock waits (like anyone else's) until the hold is
/// released, through its guard or [`SemaphoreMutex::release`] from another task; with
/// a timeout it returns `None`. Awaiting it in the task that holds the lock therefore
/// waits for ever, as Curator's does.
///
/// Connection states: as [`Mutex`]'s.
#[derive(Debug)]
pub struct SemaphoreMutex {
    lock: Arc<Exclusive>,
}

impl SemaphoreMutex {
    /// A handle on lock `name`, owned by `session` (nothing is sent yet).
    pub fn new(session: &Session, name: &str) -> SemaphoreMutex {
        SemaphoreMutex {
            lock: Exclusive::new(session, name, "semaphore-mutex", false),
        }
    }

    /// Waits until the lock is free and held by this handle. Errors: as
    /// [`Mutex::acquire`]'s.
    pub async fn acquire(&self) -> Result<LockGuard, Error> {
        self.lock.acquire_without_limit().await
    }

    /// Waits at most `timeout`; `None` when the lock was not acquired in time.
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>, Error> {
        self.lock.acquire(Some(timeout)).await
    }

    /// Releases the hold. Errors: BAD_ARGUMENTS when this handle holds nothing.
    pub async fn release(&self) -> Result<(), Error> {
        release_level(&self.lock, None).await
    }

    /// True while this handle holds the lock and its session has not ended.
    pub fn is_acquired(&self) -> bool {
        self.lock.is_acquired()
    }

    /// The current hold's fence for writes.
    pub fn fence(&self) -> Option<Fence> {
        self.lock.fence()
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.lock.core.name()
    }
}

/// Releases one level through the handle; after the session's end there is nothing
/// left to release, which is not an error.
async fn release_level(lock: &Exclusive, token: Option<u64>) -> Result<(), Error> {
    if lock.release(token).await? || lock.core.session_ended() {
        Ok(())
    } else {
        Err(Error::client(
            ErrorCode::BadArguments,
            format!("lock {} is not held by this handle", lock.core.name()),
        ))
    }
}

/// One acquire of a [`Mutex`] or [`SemaphoreMutex`]: releases that level when
/// dropped or by [`LockGuard::release`].
///
/// `Drop` cannot wait, so a dropped guard whose level is the last spawns the release
/// on the current tokio runtime (outside one, nothing is sent and the hold ends with
/// the session); call `release().await` to know it is done. A guard of a hold that
/// has already ended (released through the handle, or its session lost) releases
/// nothing.
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock"]
pub struct LockGuard {
    lock: Arc<Exclusive>,
    hold: LockHold,
    released: bool,
}

impl LockGuard {
    /// The holder key.
    pub fn key(&self) -> &str {
        &self.hold.key
    }

    /// The fencing token: the zxid that created the holder's node; it only grows.
    pub fn token(&self) -> u64 {
        self.hold.token
    }

    /// The fence for writes made under this hold: `WriteOptions { fence: Some(..) }`.
    /// The server rejects them with FENCED once the hold is gone.
    pub fn fence(&self) -> Fence {
        self.hold.fence()
    }

    /// True while the handle holds this guard's hold and the session has not ended.
    pub fn is_acquired(&self) -> bool {
        self.lock.is_acquired()
            && self
                .lock
                .fence()
                .is_some_and(|f| f.token == self.hold.token)
    }

    /// Asks the server whether this hold still holds (for after `Reconnected`).
    pub async fn validate(&self) -> Result<bool, Error> {
        self.lock
            .core
            .client()
            .validate(&self.hold.key, self.hold.token)
            .await
    }

    /// Releases this level and waits for the server when it was the last.
    pub async fn release(mut self) -> Result<(), Error> {
        self.released = true;
        self.lock.release(Some(self.hold.token)).await.map(|_| ())
    }

    /// Gives up the guard without releasing: the level stays held until
    /// [`Mutex::release`] (Curator's acquire/release style).
    pub fn keep(mut self) {
        self.released = true;
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let left = self.lock.holds().leave(Some(self.hold.token));
        if let Left::Released(hold) = left {
            if !self.lock.core.session_ended() {
                release_in_background(Arc::clone(&self.lock.core), hold);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(token: u64) -> LockHold {
        LockHold {
            key: format!("k{token}"),
            token,
            zxid: token,
        }
    }

    #[test]
    fn only_the_last_level_releases() {
        let mut holds = Holds::default();
        assert_eq!(holds.reenter(), None);
        holds.start(hold(7));
        assert_eq!(holds.reenter(), Some(hold(7)));
        assert_eq!(holds.leave(Some(7)), Left::Still(1));
        assert_eq!(holds.leave(None), Left::Released(hold(7)));
        assert_eq!(holds.leave(None), Left::NotHeld);
    }

    #[test]
    fn a_level_of_an_earlier_hold_releases_nothing() {
        let mut holds = Holds::default();
        holds.start(hold(7));
        holds.start(hold(9));
        assert_eq!(holds.leave(Some(7)), Left::NotHeld);
        assert_eq!(holds.hold(), Some(&hold(9)));
        assert_eq!(holds.leave(Some(9)), Left::Released(hold(9)));
    }
}
