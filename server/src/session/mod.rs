//! Session liveness: when each live session must next hear a keep-alive.
//!
//! The session table itself (ids, TTLs, ephemerals) is replicated state in `tree/`.
//! This tracker holds only deadlines, which are local: every server tracks the
//! sessions whose clients ping it, and only the leader turns a passed deadline into
//! a `CloseSession { reason: Expired }` proposal. It is a pure structure on logical
//! milliseconds (the caller passes `now_ms`), so tests drive it without a clock.
//!
//! What it must not do: propose, apply, or read the clock.

use std::collections::{BTreeSet, HashMap};

/// Deadlines of the live sessions.
#[derive(Debug, Default)]
pub struct SessionTracker {
    /// Session id -> (granted TTL, deadline in logical ms).
    sessions: HashMap<u64, Tracked>,
    /// (deadline, id), ordered, so expired sessions are found without a scan.
    by_deadline: BTreeSet<(u64, u64)>,
}

#[derive(Debug, Clone, Copy)]
struct Tracked {
    ttl_ms: u64,
    deadline_ms: u64,
    /// An expiry close has been proposed and not applied yet: do not propose again.
    closing: bool,
}

impl SessionTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts tracking a session with a full TTL from `now_ms` (a new session, or
    /// every recovered session after a restart or a leader change).
    pub fn add(&mut self, session_id: u64, ttl_ms: u64, now_ms: u64) {
        self.remove(session_id);
        let deadline_ms = now_ms.saturating_add(ttl_ms);
        self.sessions.insert(
            session_id,
            Tracked {
                ttl_ms,
                deadline_ms,
                closing: false,
            },
        );
        self.by_deadline.insert((deadline_ms, session_id));
    }

    /// Stops tracking a session (it was closed or expired).
    pub fn remove(&mut self, session_id: u64) {
        if let Some(t) = self.sessions.remove(&session_id) {
            self.by_deadline.remove(&(t.deadline_ms, session_id));
        }
    }

    /// A keep-alive arrived: the session gets a full TTL from `now_ms`. Returns the
    /// granted TTL, or None if the session is not tracked (it no longer exists).
    pub fn touch(&mut self, session_id: u64, now_ms: u64) -> Option<u64> {
        let t = self.sessions.get_mut(&session_id)?;
        self.by_deadline.remove(&(t.deadline_ms, session_id));
        t.deadline_ms = now_ms.saturating_add(t.ttl_ms);
        self.by_deadline.insert((t.deadline_ms, session_id));
        Some(t.ttl_ms)
    }

    /// Every session gets a full TTL from `now_ms` and may be expired again (a new
    /// leader does this before it expires any: it cannot know which clients kept
    /// their sessions alive through other servers while there was no leader).
    pub fn refresh_all(&mut self, now_ms: u64) {
        self.by_deadline.clear();
        for (&id, t) in &mut self.sessions {
            t.deadline_ms = now_ms.saturating_add(t.ttl_ms);
            t.closing = false;
            self.by_deadline.insert((t.deadline_ms, id));
        }
    }

    /// Every deadline moves `by_ms` later: this server did not run for that long (a
    /// SIGSTOP, a frozen VM, a starved process), so it heard no keep-alive then, and
    /// a session whose client kept trying must not expire for the server's silence.
    pub fn postpone_all(&mut self, by_ms: u64) {
        if by_ms == 0 {
            return;
        }
        self.by_deadline.clear();
        for (&id, t) in &mut self.sessions {
            t.deadline_ms = t.deadline_ms.saturating_add(by_ms);
            self.by_deadline.insert((t.deadline_ms, id));
        }
    }

    /// Milliseconds left before the session's deadline (0 once passed).
    pub fn remaining_ms(&self, session_id: u64, now_ms: u64) -> Option<u64> {
        let t = self.sessions.get(&session_id)?;
        Some(t.deadline_ms.saturating_sub(now_ms))
    }

    /// Sessions whose deadline has passed and whose expiry has not been proposed yet;
    /// marks them as closing, so each is returned once. Ascending by deadline.
    pub fn take_expired(&mut self, now_ms: u64) -> Vec<u64> {
        let mut out = Vec::new();
        for &(deadline_ms, id) in &self.by_deadline {
            if deadline_ms > now_ms {
                break;
            }
            if let Some(t) = self.sessions.get_mut(&id) {
                if !t.closing {
                    t.closing = true;
                    out.push(id);
                }
            }
        }
        out
    }

    /// The expiry proposal for a session failed: let `take_expired` offer it again.
    pub fn retry_expiry(&mut self, session_id: u64) {
        if let Some(t) = self.sessions.get_mut(&session_id) {
            t.closing = false;
        }
    }

    /// Number of tracked sessions.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keepalive_postpones_expiry() {
        let mut t = SessionTracker::new();
        t.add(1, 1000, 0);
        t.add(2, 1000, 0);
        assert!(t.take_expired(999).is_empty());
        assert_eq!(t.touch(1, 900), Some(1000));
        assert_eq!(t.take_expired(1000), vec![2]);
        // Offered once only, until retried.
        assert!(t.take_expired(1500).is_empty());
        t.retry_expiry(2);
        assert_eq!(t.take_expired(1500), vec![2]);
        assert_eq!(t.remaining_ms(1, 1500), Some(400));
        assert_eq!(t.take_expired(1900), vec![1]);
    }

    #[test]
    fn removed_and_unknown_sessions() {
        let mut t = SessionTracker::new();
        t.add(7, 500, 10);
        t.remove(7);
        assert_eq!(t.touch(7, 20), None);
        assert_eq!(t.remaining_ms(7, 20), None);
        assert!(t.take_expired(10_000).is_empty());
        assert!(t.is_empty());
    }

    #[test]
    fn refresh_all_gives_every_session_a_full_ttl() {
        let mut t = SessionTracker::new();
        t.add(1, 1000, 0);
        t.add(2, 300, 0);
        assert_eq!(t.take_expired(500), vec![2]);
        t.refresh_all(2000);
        assert!(t.take_expired(2299).is_empty());
        assert_eq!(t.take_expired(2300), vec![2], "closing marks are cleared");
        assert_eq!(t.remaining_ms(1, 2000), Some(1000));
        assert_eq!(t.take_expired(3000), vec![1]);
    }

    #[test]
    fn postpone_all_moves_every_deadline() {
        let mut t = SessionTracker::new();
        t.add(1, 1000, 0);
        t.add(2, 300, 0);
        t.postpone_all(500);
        assert!(t.take_expired(799).is_empty());
        assert_eq!(t.take_expired(800), vec![2]);
        assert_eq!(t.remaining_ms(1, 800), Some(700));
        assert_eq!(t.take_expired(1500), vec![1]);
    }

    #[test]
    fn re_adding_resets_the_deadline() {
        let mut t = SessionTracker::new();
        t.add(3, 100, 0);
        t.add(3, 100, 1000);
        assert!(t.take_expired(1099).is_empty());
        assert_eq!(t.take_expired(1100), vec![3]);
        assert_eq!(t.len(), 1);
    }
}
