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
//! A server that did not run for a whole sync limit (paused by SIGSTOP, a frozen
//! VM, starved) is the exception the core cannot see: it counts the ticks it runs,
//! so it would notice only `sync_limit_ticks` after it resumes that the others went
//! on without it, and serve its state from before the pause meanwhile. So the
//! core's word is not taken after such a gap until it has run that many ticks and
//! two more (`Gaps`), and a read finds the server in touch only if it ticked
//! within the last sync limit. A follower that stops reading its peers
//! (back-pressure: its disk behind, or its log full while its snapshot is written)
//! lets its core's clock stand the same way, so its ticks count only while it reads
//! them.
//!
//! ```text
//!   core status, ticks ─▶ pipeline's Shell ─▶ Shared::contact (Leader | LostAt)
//!                           (Gaps: no Leader after a gap until the core ran sync_limit + 2 ticks)
//!   read ─▶ in_touch(): Leader and ticked lately? serve ─ else wait, at most until
//!           LostAt + leader_wait ─▶ NotLeader
//!   stream ─▶ select { .., cut_off() } ─▶ ends with NotLeader
//! ```

use super::{Replica, ReplicaError};
use crate::zab::{Role, Status};

/// This server's contact with a leader. Times are in ms on the replica's clock
/// (`Replica::now_ms`; the simulator's own time there), as in `Gaps`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Contact {
    /// It leads an established epoch, or has synced with the leader it follows.
    Leader,
    /// It has had no leader since this time (lost it, or started).
    LostAt(u64),
}

impl Contact {
    /// The contact at `now`, `previous` the one before it (a stretch without a
    /// leader keeps its start): a leader if the core's `status` has one and its
    /// word is `trusted` (`Gaps::trusted`).
    pub(crate) fn after(previous: Contact, status: &Status, trusted: bool, now: u64) -> Contact {
        let has_leader = status.role != Role::Looking && status.leader.is_some() && status.serving;
        match (has_leader && trusted, previous) {
            (true, _) => Contact::Leader,
            (false, Contact::LostAt(at)) => Contact::LostAt(at),
            (false, Contact::Leader) => Contact::LostAt(now),
        }
    }
}

/// This server's core's ticks, to tell when it did not run for a whole sync limit
/// (times in ms on the replica's clock).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Gaps {
    last_tick: Option<u64>,
    /// Ticks the core must still run before its word is taken again.
    distrusted_ticks: u64,
}

impl Gaps {
    /// A tick of the core at `now`. One more than `sync_limit` after the last means
    /// the core did not run meanwhile: its word on its leader is not taken until it
    /// has run `sync_limit` and two ticks more, what it needs to notice that its
    /// leader went. Counted in its ticks, not in time: a core that stops again
    /// before (a follower that stops reading its peers once more) has not had them.
    pub(crate) fn tick(&mut self, now: u64, sync_limit: u64, tick: u64) {
        if let Some(last) = self.last_tick.replace(now) {
            if now.saturating_sub(last) > sync_limit {
                self.distrusted_ticks = sync_limit.div_ceil(tick.max(1)) + 2;
            } else {
                self.distrusted_ticks = self.distrusted_ticks.saturating_sub(1);
            }
        }
    }

    /// Whether the core's word on its leader is taken at `now`: not after a gap
    /// until the core has run its ticks, nor while it has not ticked for more than
    /// `sync_limit` (before its first tick it is).
    pub(crate) fn trusted(&self, now: u64, sync_limit: u64) -> bool {
        self.distrusted_ticks == 0
            && self
                .last_tick
                .is_none_or(|last| now.saturating_sub(last) <= sync_limit)
    }

    /// Whether the server ticked within `sync_limit` of `now` (it runs): the
    /// simulator's check; a replica keeps its last tick in `Shared::ticked_ms`.
    #[cfg(test)]
    pub(crate) fn ticked_lately(&self, now: u64, sync_limit: u64) -> bool {
        self.last_tick
            .is_some_and(|last| now.saturating_sub(last) <= sync_limit)
    }
}

impl Replica {
    /// Waits until this server is in touch with a leader (module docs), for at most
    /// `leader_wait` from when it lost one. Err(NotLeader) after that: what it has
    /// may be stale. Err(Unavailable) once the server stops.
    pub async fn in_touch(&self) -> Result<(), ReplicaError> {
        if *self.shared.contact.borrow() == Contact::Leader && self.ticked_lately() {
            return Ok(());
        }
        let mut contact = self.shared.contact.subscribe();
        let mut stop = self.shared.stop.subscribe();
        let wait = self.leader_wait_ms();
        // A leader whose ticks stopped (the server did not run) is waited for as
        // long as a lost one.
        let stalled_until = self.shared.now_ms().saturating_add(wait);
        loop {
            if stop.borrow_and_update().is_some() {
                return Err(ReplicaError::Unavailable("the server is stopping".into()));
            }
            let until = match *contact.borrow_and_update() {
                Contact::Leader if self.ticked_lately() => return Ok(()),
                Contact::Leader => stalled_until,
                Contact::LostAt(at) => at.saturating_add(wait),
            };
            let now = self.shared.now_ms();
            if now >= until {
                return Err(self.out_of_touch());
            }
            let wake = until.min(now.saturating_add(self.shared.tick_ms.max(1)));
            tokio::select! {
                _ = contact.changed() => {}
                _ = stop.changed() => {}
                () = tokio::time::sleep_until(self.shared.instant_at(wake)) => {}
            }
        }
    }

    fn leader_wait_ms(&self) -> u64 {
        u64::try_from(self.shared.leader_wait.as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether the pipeline ticked within the last sync limit (the server runs).
    fn ticked_lately(&self) -> bool {
        let ticked = self
            .shared
            .ticked_ms
            .load(std::sync::atomic::Ordering::Acquire);
        self.shared.now_ms().saturating_sub(ticked) <= self.shared.sync_limit_ms
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
                Contact::LostAt(at) => {
                    let until = self
                        .shared
                        .instant_at(at.saturating_add(self.leader_wait_ms()));
                    tokio::select! {
                        _ = contact.changed() => {}
                        () = tokio::time::sleep_until(until) => return self.out_of_touch(),
                    }
                }
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
        let start = Contact::LostAt(0);
        // Elected, or following, but not synced yet: still without a leader.
        let leading = status(Role::Leading, Some(1), false);
        assert_eq!(Contact::after(start, &leading, true, 10), start);
        let syncing = status(Role::Following, Some(2), false);
        assert_eq!(Contact::after(start, &syncing, true, 10), start);
        let synced = status(Role::Following, Some(2), true);
        assert_eq!(Contact::after(start, &synced, true, 10), Contact::Leader);
        let observing = status(Role::Observing, Some(2), true);
        assert_eq!(Contact::after(start, &observing, true, 10), Contact::Leader);
        // Synced, but the core's word is not taken (after a gap).
        assert_eq!(Contact::after(start, &synced, false, 10), start);
        assert_eq!(
            Contact::after(Contact::Leader, &synced, false, 15),
            Contact::LostAt(15)
        );
        // Lost: the stretch starts now, and a second status without one keeps it.
        let looking = status(Role::Looking, None, false);
        let lost = Contact::after(Contact::Leader, &looking, true, 20);
        assert_eq!(lost, Contact::LostAt(20));
        assert_eq!(Contact::after(lost, &syncing, true, 30), lost);
    }

    #[test]
    fn a_gap_in_the_ticks_distrusts_the_core_for_a_sync_limit_and_two_of_its_ticks() {
        let (limit, tick) = (500, 100);
        let mut gaps = Gaps::default();
        assert!(!gaps.ticked_lately(0, limit) && gaps.trusted(0, limit));
        for now in (0..=1000).step_by(100) {
            gaps.tick(now, limit, tick);
            assert!(gaps.trusted(now, limit) && gaps.ticked_lately(now, limit));
        }
        // Late ticks, but within the limit: still trusted.
        gaps.tick(1500, limit, tick);
        assert!(gaps.trusted(1500, limit) && gaps.trusted(2000, limit));
        // No tick for longer than the limit: not trusted meanwhile, nor after the
        // next until seven more have run.
        assert!(!gaps.ticked_lately(2100, limit) && !gaps.trusted(2100, limit));
        gaps.tick(3600, limit, tick);
        assert!(gaps.ticked_lately(3600, limit) && !gaps.trusted(3600, limit));
        for now in (3700..=4200).step_by(100) {
            gaps.tick(now, limit, tick);
            assert!(!gaps.trusted(now, limit), "{now}");
        }
        gaps.tick(4300, limit, tick);
        assert!(gaps.trusted(4300, limit));
        // A core that stops again soon after a gap (found by the simulator): three
        // ticks, a stop shorter than the limit, and time alone does not restore it.
        gaps.tick(6000, limit, tick);
        for now in [6100, 6200, 6300] {
            gaps.tick(now, limit, tick);
        }
        assert!(!gaps.trusted(6700, limit) && !gaps.trusted(6800, limit));
        for now in (6700..=7000).step_by(100) {
            gaps.tick(now, limit, tick);
        }
        assert!(gaps.trusted(7000, limit));
    }
}
