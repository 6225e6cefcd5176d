//! Who a client's writes are from when the caller does not say: a [`Session`]'s
//! client (`Session::client`) writes as that session, and every write that names a
//! session gets a fresh request id, so that the client's retry policy may retry it
//! when its outcome is unknown: the server applies a write with the same
//! `(session_id, request_id)` at most once, and answers a retry with the first
//! outcome (Curator's default: every write of a CuratorFramework is its session's).
//!
//! ```text
//!   create/set/delete/multi(options) ─▶ Writer::stamp(session_id, request_id, ephemeral)
//!       session_id: the options' ─ else the client's session while it lives
//!                   (an ephemeral create takes it even after, to be told SESSION_EXPIRED)
//!       request_id: the options' ─ else a fresh one when there is a session, else none
//! ```
//!
//! Pure bookkeeping: no IO. A client with no session writes as before: no session,
//! no request id, and a write whose outcome is unknown is not retried.
//!
//! [`Session`]: crate::Session

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

use crate::session::ConnectionState;

/// A client's default writer: its session, if any, and its request ids.
#[derive(Debug, Clone)]
pub(crate) struct Writer {
    /// The session this client's writes carry unless the options name one.
    session: Option<Bound>,
    /// The next request id, shared by clones; from a random start, so that two
    /// clients writing as one session (two processes, or `Session::attach`) do not
    /// reuse each other's ids.
    request_ids: Arc<AtomicU64>,
}

/// The session a client is bound to, and its state as its keep-alive task sees it.
#[derive(Debug, Clone)]
struct Bound {
    id: u64,
    state: watch::Receiver<ConnectionState>,
}

impl Default for Writer {
    fn default() -> Self {
        let start = RandomState::new().hash_one(std::process::id());
        Writer {
            session: None,
            request_ids: Arc::new(AtomicU64::new(start)),
        }
    }
}

impl Writer {
    /// This writer, writing as session `id` (whose state `state` follows).
    pub(crate) fn bound_to(&self, id: u64, state: watch::Receiver<ConnectionState>) -> Writer {
        Writer {
            session: Some(Bound { id, state }),
            request_ids: Arc::clone(&self.request_ids),
        }
    }

    /// The session writes carry by default.
    pub(crate) fn session_id(&self) -> Option<u64> {
        self.session.as_ref().map(|b| b.id)
    }

    /// Whether the client is a session's whose session has ended (or whose handle
    /// is gone).
    pub(crate) fn session_ended(&self) -> bool {
        self.session.as_ref().is_some_and(|b| !b.lives())
    }

    /// The `(session_id, request_id)` a write goes with, from those its options give
    /// (0: not given). An `ephemeral` write takes the client's session even once it
    /// has ended, so that the server refuses it with SESSION_EXPIRED; any other
    /// write then goes without one, as a client with no session writes.
    pub(crate) fn stamp(&self, session_id: u64, request_id: u64, ephemeral: bool) -> (u64, u64) {
        let session_id = match &self.session {
            _ if session_id != 0 => session_id,
            Some(bound) if ephemeral || bound.lives() => bound.id,
            _ => 0,
        };
        let request_id = if request_id != 0 || session_id == 0 {
            request_id
        } else {
            self.next_request_id()
        };
        (session_id, request_id)
    }

    /// A request id this client has not used before, never 0.
    fn next_request_id(&self) -> u64 {
        loop {
            let id = self.request_ids.fetch_add(1, Ordering::Relaxed);
            if id != 0 {
                return id;
            }
        }
    }
}

impl Bound {
    /// False once the session has ended, or its `Session` handle (and keep-alive
    /// task) is gone: the server will expire it.
    fn lives(&self) -> bool {
        !self.state.borrow().is_ended() && self.state.has_changed().is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_without_a_session_writes_as_before() {
        let writer = Writer::default();
        assert_eq!(writer.session_id(), None);
        assert_eq!(writer.stamp(0, 0, false), (0, 0));
        assert_eq!(writer.stamp(0, 0, true), (0, 0));
        assert_eq!(writer.stamp(0, 9, false), (0, 9));
    }

    #[test]
    fn a_named_session_gets_a_fresh_request_id_unless_one_is_given() {
        let writer = Writer::default();
        let (s, first) = writer.stamp(7, 0, false);
        let (_, second) = writer.stamp(7, 0, true);
        assert_eq!(s, 7);
        assert!(first != 0 && second != 0 && first != second);
        assert_eq!(writer.stamp(7, 3, false), (7, 3));
    }

    #[test]
    fn a_sessions_client_writes_as_it_until_it_ends() {
        let (state, receiver) = watch::channel(ConnectionState::Connected);
        let writer = Writer::default().bound_to(5, receiver);
        assert_eq!(writer.session_id(), Some(5));
        assert!(!writer.session_ended() && !Writer::default().session_ended());
        let (s, r) = writer.stamp(0, 0, false);
        assert_eq!(s, 5);
        assert_ne!(r, 0);
        // Another session, named, wins.
        assert_eq!(writer.stamp(8, 4, true), (8, 4));
        state.send_replace(ConnectionState::Suspended);
        assert_eq!(writer.stamp(0, 0, false).0, 5, "suspended: it may live");
        state.send_replace(ConnectionState::Lost);
        assert!(writer.session_ended());
        assert_eq!(writer.stamp(0, 0, false), (0, 0));
        assert_eq!(writer.stamp(0, 0, true).0, 5, "told SESSION_EXPIRED");
        let (gone, receiver) = watch::channel(ConnectionState::Connected);
        let writer = Writer::default().bound_to(6, receiver);
        drop(gone);
        assert_eq!(writer.stamp(0, 0, false), (0, 0), "the handle is gone");
    }

    #[test]
    fn clones_share_request_ids_which_skip_zero() {
        let writer = Writer::default();
        writer.request_ids.store(u64::MAX, Ordering::Relaxed);
        let clone = writer.clone();
        assert_eq!(writer.next_request_id(), u64::MAX);
        assert_eq!(clone.next_request_id(), 1);
        let (_state, receiver) = watch::channel(ConnectionState::Connected);
        assert_eq!(writer.bound_to(1, receiver).next_request_id(), 2);
    }
}
