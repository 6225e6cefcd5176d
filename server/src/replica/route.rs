//! Where a write goes: this server's own pipeline when it leads an established epoch,
//! else the leader it follows (forwarded over the peer port); while it has no leader
//! to hand writes to, they wait, bounded by `leader_wait_ms_max` counted from when the
//! leaderless stretch began, then fail with NotLeader (at once once the stretch has
//! lasted that long). A write the leader certainly did not apply goes to the next
//! leader; one sent with no answer fails as Indeterminate. `wait_for_leader` waits
//! the same way, unbounded, for a leader that hears this server (a keep-alive is
//! answered only then).
//!
//! ```text
//!   submit_routed ─▶ route (wait for a leader, bounded) ─▶ Local: submit_local ─▶ pipeline
//!                                                     └▶ Forward: forwarder ─▶ leader
//! ```

use std::time::Duration;

use tokio::sync::{oneshot, watch};

use super::forward::{Forwarder, Write};
use super::{lock, pipeline, Committed, Replica, ReplicaError, Shared};

/// How many times one write is handed to a leader before the caller hears NotLeader
/// (each time it was certainly not applied).
const ROUTE_ATTEMPTS_MAX: usize = 8;

/// Where a write goes now.
enum Route<'a> {
    /// This server leads an established epoch.
    Local,
    /// This server follows `ServerId`, and the path to it answers.
    Forward(&'a Forwarder, u64),
}

/// Resolves when `rx` changes; never without one.
async fn changed(rx: Option<&mut watch::Receiver<u64>>) {
    match rx {
        Some(rx) => {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

/// What may give this server a leader to hand work to, or take it away: its role,
/// whether it leads an established epoch, and its forwarder's path to the leader.
struct LeaderChanges {
    role: watch::Receiver<crate::zab::Role>,
    serving: watch::Receiver<bool>,
    heard: Option<watch::Receiver<u64>>,
    tick: Duration,
}

impl LeaderChanges {
    fn of(shared: &Shared) -> LeaderChanges {
        LeaderChanges {
            role: shared.role.subscribe(),
            serving: shared.serving.subscribe(),
            heard: shared.forwarder.as_ref().map(Forwarder::heard),
            tick: Duration::from_millis(shared.tick_ms.max(1)),
        }
    }

    /// Takes the current values as seen, before they are looked at.
    fn seen(&mut self) {
        self.role.borrow_and_update();
        self.serving.borrow_and_update();
        if let Some(heard) = self.heard.as_mut() {
            heard.borrow_and_update();
        }
    }

    /// Returns on a change, at the next tick (the leader id may change with no role
    /// change), or at `until`, whichever comes first.
    async fn next(&mut self, until: Option<tokio::time::Instant>) {
        let tick = tokio::time::Instant::now() + self.tick;
        let wake = until.map_or(tick, |until| until.min(tick));
        tokio::select! {
            _ = self.role.changed() => {}
            _ = self.serving.changed() => {}
            _ = changed(self.heard.as_mut()) => {}
            () = tokio::time::sleep_until(wake) => {}
        }
    }
}

/// A stretch with no leader to hand writes to (`Shared::leaderless`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Leaderless {
    since: tokio::time::Instant,
    seen: tokio::time::Instant,
    /// The epoch this server knew when the stretch began: a newer one means a leader
    /// took office since, so a new stretch begins.
    epoch: u32,
}

impl Shared {
    /// When a write that found no leader at `now`, in `epoch`, stops waiting for one:
    /// the end of the current leaderless stretch, or of a new one from `now` if a
    /// leader took office since or the last sighting is older than a whole wait (a
    /// leader may have come and gone unseen).
    fn leaderless_until(&self, now: tokio::time::Instant, epoch: u32) -> tokio::time::Instant {
        let mut stretch = lock(&self.leaderless);
        let since = match *stretch {
            Some(s)
                if s.epoch == epoch
                    && now.saturating_duration_since(s.seen) <= self.leader_wait =>
            {
                s.since
            }
            _ => now,
        };
        *stretch = Some(Leaderless {
            since,
            seen: now,
            epoch,
        });
        since + self.leader_wait
    }

    /// A write found a leader: the leaderless stretch, if any, is over.
    fn leader_found(&self) {
        lock(&self.leaderless).take();
    }
}

impl Replica {
    /// `submit_write`, once the write is handed on.
    pub(super) async fn submit_routed(&self, write: Write) -> Result<Committed, ReplicaError> {
        let mut deadline = None;
        let mut avoid = None;
        let mut why = String::new();
        for _ in 0..ROUTE_ATTEMPTS_MAX {
            let route = self.route(&mut deadline, avoid, &why).await?;
            let epoch = self.epoch();
            match route {
                Route::Local => match self.submit_local(write.clone()).await {
                    // Refused before it was proposed: this server stopped leading.
                    Err(ReplicaError::NotLeader { .. }) => {
                        why = "this server stopped leading".into();
                    }
                    done => return done.map_err(|e| self.hinted(e)),
                },
                Route::Forward(forwarder, leader) => {
                    match self.forward(forwarder, leader, write.clone()).await {
                        Ok(committed) => return Ok(committed),
                        Err(Ok(not_sent)) => {
                            tracing::debug!(leader, why = %not_sent, "write not delivered; sending it to the next leader");
                            avoid = Some((leader, epoch));
                            why = not_sent;
                        }
                        Err(Err(e)) => return Err(e),
                    }
                }
            }
        }
        Err(self.hinted(ReplicaError::NotLeader {
            leader: None,
            client_addr: None,
            why,
        }))
    }

    /// Waits for a leader to hand a write to: this server leading an established
    /// epoch, or a leader it follows whose path answers (other than `avoid`, a
    /// (leader, epoch) that just failed to take it). The wait sets `deadline` on
    /// its first need — `leader_wait` after this server lost its leader, or after
    /// now when only this write's leader failed it — and ends at it with NotLeader
    /// (the write was not applied).
    async fn route(
        &self,
        deadline: &mut Option<tokio::time::Instant>,
        avoid: Option<(u64, u32)>,
        why: &str,
    ) -> Result<Route<'_>, ReplicaError> {
        let mut changes = LeaderChanges::of(&self.shared);
        loop {
            if self.shared.stop.borrow().is_some() {
                return Err(ReplicaError::Unavailable("the server is stopping".into()));
            }
            changes.seen();
            if self.is_leader() {
                self.shared.leader_found();
                return Ok(Route::Local);
            }
            let target = self.forward_target();
            // Only this write's leader failed it (the server may still have one for
            // other writes): its own wait, not the server's leaderless stretch.
            let avoided = target
                .as_ref()
                .is_some_and(|(_, leader)| avoid == Some((*leader, self.epoch())));
            let mut why = why.to_owned();
            if let Some((forwarder, leader)) = target.filter(|_| !avoided) {
                if forwarder.reaches(leader) {
                    self.shared.leader_found();
                    return Ok(Route::Forward(forwarder, leader));
                }
                why = format!("cannot reach leader {leader}");
            }
            let now = tokio::time::Instant::now();
            // Called on every wake, so the stretch stays seen while writes wait in it.
            let stretch_end = (!avoided).then(|| self.shared.leaderless_until(now, self.epoch()));
            let until =
                *deadline.get_or_insert(stretch_end.unwrap_or(now + self.shared.leader_wait));
            if now >= until {
                if why.is_empty() {
                    why = format!("no leader for {} ms", self.shared.leader_wait.as_millis());
                } else {
                    why = format!(
                        "{why}; no other leader for {} ms",
                        self.shared.leader_wait.as_millis()
                    );
                }
                let leader = target.map(|(_, l)| l);
                return Err(self.hinted(ReplicaError::NotLeader {
                    leader,
                    client_addr: None,
                    why,
                }));
            }
            changes.next(Some(until)).await;
        }
    }

    /// Waits until this server has a leader that hears from it: it leads an
    /// established epoch, or it follows a leader whose path answers (so the session
    /// touches it forwards arrive). Err(Unavailable) once the server stops.
    pub async fn wait_for_leader(&self) -> Result<(), ReplicaError> {
        let mut changes = LeaderChanges::of(&self.shared);
        loop {
            if self.shared.stop.borrow().is_some() {
                return Err(ReplicaError::Unavailable("the server is stopping".into()));
            }
            changes.seen();
            if self.is_leader() {
                return Ok(());
            }
            if let Some((forwarder, leader)) = self.forward_target() {
                if forwarder.reaches(leader) {
                    return Ok(());
                }
            }
            changes.next(None).await;
        }
    }

    /// Fills in NotLeader's leader hint (the leader this server follows, and where
    /// its clients connect) where it is missing.
    pub(super) fn hinted(&self, e: ReplicaError) -> ReplicaError {
        let ReplicaError::NotLeader {
            leader,
            client_addr,
            why,
        } = e
        else {
            return e;
        };
        let leader = leader
            .or_else(|| self.leader_id())
            .filter(|&l| l != self.shared.server_id);
        let client_addr = client_addr.or_else(|| {
            let forwarder = self.shared.forwarder.as_ref()?;
            forwarder.client_addr(leader?)
        });
        ReplicaError::NotLeader {
            leader,
            client_addr,
            why,
        }
    }

    /// Hands a write to this server's own pipeline (Zab proposes it if this server
    /// leads; otherwise it is refused as NotLeader).
    pub(super) async fn submit_local(&self, write: Write) -> Result<Committed, ReplicaError> {
        self.queue_local(write).await?.await
    }

    /// Hands every write of a batch to this server's own pipeline before awaiting any
    /// outcome, so that they share a proposal batch; their outcomes in order. Only
    /// the outcomes' small futures wait together, not a `submit_local` future each
    /// (over a KiB apiece: a forwarded batch of 256 put hundreds of KiB on the heap).
    pub(super) async fn submit_local_batch(
        &self,
        writes: Vec<Write>,
    ) -> Vec<Result<Committed, ReplicaError>> {
        let mut queued = Vec::with_capacity(writes.len());
        for write in writes {
            queued.push(self.queue_local(write).await);
        }
        let mut outcomes = Vec::with_capacity(queued.len());
        for outcome in queued {
            outcomes.push(match outcome {
                Ok(outcome) => outcome.await,
                Err(e) => Err(e),
            });
        }
        outcomes
    }

    /// Queues `write` for the pipeline once it has its share of the byte budget;
    /// gives its outcome to await.
    async fn queue_local(
        &self,
        write: Write,
    ) -> Result<impl std::future::Future<Output = Result<Committed, ReplicaError>>, ReplicaError>
    {
        let (reply, rx) = oneshot::channel();
        let bytes = pipeline::admit(&self.shared.proposal_bytes, &write)
            .await
            .ok_or_else(pipeline::stopped)?;
        let proposal = pipeline::Proposal {
            write,
            caller: pipeline::Reply::new(reply, bytes),
        };
        self.shared
            .proposals
            .send(proposal)
            .await
            .map_err(|_| pipeline::stopped())?;
        Ok(async move { rx.await.map_err(|_| pipeline::stopped())? })
    }
}
