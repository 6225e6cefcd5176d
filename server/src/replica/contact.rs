//! Whether this server is in touch with a leader, for what it serves from its own
//! state: reads, watch streams, election observers. ZooKeeper promises timeliness
//! ("a client's view is up to date within a bound, or it detects an outage"), which
//! its servers keep by closing their clients' connections when they lose their
//! leader. Here a server that has a leader (it leads an established epoch, or has
//! synced with the leader it follows or observes) serves at once. One without —
//! looking for a leader during an election, cut off from its ensemble, or just
//! started — holds a read until it has one, for at most `leader_wait` counted from
//! when it lost its leader (or started), then answers NotLeader, and ends its
//! streams the same way: the client moves to another server, and a watch resumes
//! there from its last zxid. A follower leaves its leader after `sync_limit_ticks`
//! without hearing it, so what a server serves is at most that plus `leader_wait`
//! behind the ensemble.
//!
//! ```text
//!   core status ─▶ pipeline's Host::status ─▶ Shared::contact (Leader | LostAt)
//!   read ─▶ in_touch(): Leader? serve ─ else wait until LostAt + leader_wait ─▶ NotLeader
//!   stream ─▶ select { .., cut_off() } ─▶ ends with NotLeader
//! ```

use tokio::time::Instant;

use super::{Replica, ReplicaError};
use crate::zab::{Role, Status};

/// This server's contact with a leader (`T`: the clock's instants; the simulator
/// keeps its own time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Contact<T = Instant> {
    /// It leads an established epoch, or has synced with the leader it follows.
    Leader,
    /// It has had no leader since this instant (lost it, or started).
    LostAt(T),
}

impl<T: Copy> Contact<T> {
    /// The contact a core status gives at `now`, `previous` the one before it (a
    /// stretch without a leader keeps its start across statuses without one).
    pub(crate) fn after(previous: Contact<T>, status: &Status, now: T) -> Contact<T> {
        let has_leader = status.role != Role::Looking && status.leader.is_some() && status.serving;
        match (has_leader, previous) {
            (true, _) => Contact::Leader,
            (false, Contact::LostAt(at)) => Contact::LostAt(at),
            (false, Contact::Leader) => Contact::LostAt(now),
        }
    }
}

impl Replica {
    /// Waits until this server is in touch with a leader (module docs), for at most
    /// `leader_wait` from when it lost one. Err(NotLeader) after that: what it has
    /// may be stale. Err(Unavailable) once the server stops.
    pub async fn in_touch(&self) -> Result<(), ReplicaError> {
        if *self.shared.contact.borrow() == Contact::Leader {
            return Ok(());
        }
        let mut contact = self.shared.contact.subscribe();
        let mut stop = self.shared.stop.subscribe();
        loop {
            if stop.borrow_and_update().is_some() {
                return Err(ReplicaError::Unavailable("the server is stopping".into()));
            }
            let Contact::LostAt(at) = *contact.borrow_and_update() else {
                return Ok(());
            };
            let until = at + self.shared.leader_wait;
            tokio::select! {
                _ = contact.changed() => {}
                _ = stop.changed() => {}
                () = tokio::time::sleep_until(until) => return Err(self.out_of_touch()),
            }
        }
    }

    /// Resolves once this server has been without a leader for `leader_wait`, with
    /// the error to end a stream with; never while it has one.
    pub async fn cut_off(&self) -> ReplicaError {
        let mut contact = self.shared.contact.subscribe();
        loop {
            let lost = *contact.borrow_and_update();
            match lost {
                Contact::Leader => {
                    if contact.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                Contact::LostAt(at) => tokio::select! {
                    _ = contact.changed() => {}
                    () = tokio::time::sleep_until(at + self.shared.leader_wait) => {
                        return self.out_of_touch();
                    }
                },
            }
        }
    }

    fn out_of_touch(&self) -> ReplicaError {
        self.hinted(ReplicaError::NotLeader {
            leader: None,
            client_addr: None,
            why: format!(
                "no leader for {} ms: this server may be cut off from its ensemble, and \
                 what it holds may be stale; ask another server",
                self.shared.leader_wait.as_millis()
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(role: Role, leader: Option<u64>, serving: bool) -> Status {
        Status {
            role,
            leader,
            epoch: 1,
            serving,
        }
    }

    #[test]
    fn a_stretch_without_a_leader_keeps_its_start_until_one_is_synced() {
        let start: Contact<u64> = Contact::LostAt(0);
        // Elected, or following, but not synced yet: still without a leader.
        let leading = status(Role::Leading, Some(1), false);
        assert_eq!(Contact::after(start, &leading, 10), start);
        let syncing = status(Role::Following, Some(2), false);
        assert_eq!(Contact::after(start, &syncing, 10), start);
        let synced = status(Role::Following, Some(2), true);
        assert_eq!(Contact::after(start, &synced, 10), Contact::Leader);
        let observing = status(Role::Observing, Some(2), true);
        assert_eq!(Contact::after(start, &observing, 10), Contact::Leader);
        // Lost: the stretch starts now, and a second status without one keeps it.
        let looking = status(Role::Looking, None, false);
        let lost = Contact::after(Contact::Leader, &looking, 20);
        assert_eq!(lost, Contact::LostAt(20));
        assert_eq!(Contact::after(lost, &syncing, 30), lost);
    }
}
