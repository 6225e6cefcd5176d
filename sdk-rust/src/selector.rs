//! [`LeaderSelector`] (Curator's LeaderSelector): runs an async take-leadership
//! closure while its candidacy leads an election, resigns when the closure returns,
//! and queues again if asked to.
//!
//! ```text
//!   start() ─▶ task: queued? ─▶ Campaign(name, session, id) ─▶ first in line, connected
//!                 ▲                                               │
//!                 │                          take(Leadership) runs ◀┘
//!                 │        returns ─────────────┐    Suspended / Lost / close:
//!                 │                             ▼    Leadership::cancelled() fires and
//!                 └── auto_requeue or requeue() ◀─ Resign    the closure's future is dropped
//!   Lost (or the Session handle dropped) ─▶ the closure is cancelled, state Closed
//!   a Campaign dropped in flight (close, drop) ─▶ sent again with a 1 ms timeout and
//!     resigned if it leads (crate::reclaim); close waits for it
//! ```
//!
//! What it must not do: run the closure while suspended, or while another candidacy
//! may lead; queue by itself (the server's Election service queues and fences); open a
//! new session after `Lost`.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::client::Client;
use crate::error::Error;
use crate::latch::{is_transient, retry_delay, unique_id, Claim, LatchState};
use crate::lock;
use crate::proto::ErrorCode;
use crate::reclaim::{Reclaim, Reclaims};
use crate::session::{ConnectionState, Session, StateListener};
use crate::types::{Fence, Participant};

/// The take-leadership closure, boxed.
type Take = Arc<dyn Fn(Leadership) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// What the take-leadership closure gets: the leading candidacy, and a signal that
/// fires when leadership must end (Curator's interruption).
#[derive(Debug, Clone)]
pub struct Leadership {
    participant: Participant,
    cancel: watch::Receiver<bool>,
}

impl Leadership {
    /// The leading candidacy (key, term, participant id).
    pub fn participant(&self) -> &Participant {
        &self.participant
    }

    /// The term: the fencing token of this leadership.
    pub fn term(&self) -> u64 {
        self.participant.term
    }

    /// The fence (key and term) for writes only the leader may make: the server
    /// rejects them (FENCED) once this leadership is over.
    pub fn fence(&self) -> Fence {
        Fence {
            key: self.participant.key.clone(),
            token: self.participant.term,
        }
    }

    /// Whether leadership must end (suspended, lost, or closed).
    pub fn is_cancelled(&self) -> bool {
        *self.cancel.borrow()
    }

    /// Resolves when leadership must end. The selector also drops the closure's
    /// future then; this is for work the closure handed to other tasks.
    pub async fn cancelled(&self) {
        let mut cancel = self.cancel.clone();
        // A dropped sender (the selector stopped) is a cancellation too.
        let _ = cancel.wait_for(|c| *c).await;
    }
}

/// A candidate of a selector's election, and whether it leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The candidate as the server lists it.
    pub participant: Participant,
    /// Whether it is first in line.
    pub is_leader: bool,
}

/// The selector's side shared with its task.
struct Shared {
    client: Client,
    session_id: u64,
    name: String,
    id: String,
    take: Take,
    /// Queue again after each leadership.
    auto_requeue: AtomicBool,
    /// Whether the selector wants a place in line (set by start, requeue and
    /// auto-requeue; cleared when a leadership starts).
    queued: watch::Sender<bool>,
    /// The candidacy while its closure runs.
    leading: watch::Sender<Option<Participant>>,
    state: watch::Sender<LatchState>,
    /// Reclaims of Campaigns dropped in flight, which `close` waits for.
    reclaims: Arc<Reclaims>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("name", &self.name)
            .field("id", &self.id)
            .field("session_id", &self.session_id)
            .finish_non_exhaustive()
    }
}

/// Runs a take-leadership closure whenever it leads election `name`; see the
/// module doc.
#[derive(Debug)]
pub struct LeaderSelector {
    shared: Arc<Shared>,
    /// The session's states since the selector was made, handed to the task at start.
    states: Mutex<Option<(ConnectionState, StateListener)>>,
    /// The selector's task (it runs the closure); aborted on close and on drop.
    task: Mutex<Option<JoinHandle<()>>>,
    /// This selector's participant id, held from start to close.
    claim: Mutex<Option<Claim>>,
    /// Set by the first `close` (the state alone cannot tell: a selector whose
    /// session ended is `Closed` too, and closing it is no error).
    closed: AtomicBool,
}

impl LeaderSelector {
    /// A selector for election `name` on `session` as participant `id` (unique among
    /// the recipes of one session; empty: one is made up), running `take` while it
    /// leads. Auto-requeue is off.
    pub fn new<F, Fut>(
        session: &Session,
        name: impl Into<String>,
        id: impl Into<String>,
        take: F,
    ) -> LeaderSelector
    where
        F: Fn(Leadership) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let mut id = id.into();
        if id.is_empty() {
            id = unique_id("selector", session.id());
        }
        let take: Take = Arc::new(move |l| Box::pin(take(l)));
        LeaderSelector {
            shared: Arc::new(Shared {
                client: session.client().clone(),
                session_id: session.id(),
                name: name.into(),
                id,
                take,
                auto_requeue: AtomicBool::new(false),
                queued: watch::channel(false).0,
                leading: watch::channel(None).0,
                state: watch::channel(LatchState::Latent).0,
                reclaims: Arc::default(),
            }),
            states: Mutex::new(Some((session.state(), session.listen()))),
            task: Mutex::new(None),
            claim: Mutex::new(None),
            closed: AtomicBool::new(false),
        }
    }

    /// Whether to queue again after each leadership (Curator's autoRequeue).
    pub fn auto_requeue(&self, on: bool) {
        self.shared.auto_requeue.store(on, Ordering::Relaxed);
    }

    /// Starts: queues for leadership. Errors: BAD_STATE if already started;
    /// NODE_EXISTS if another recipe of this process uses the same session, election
    /// and id.
    pub fn start(&self) -> Result<(), Error> {
        let mut states = lock(&self.states);
        if states.is_none() {
            return Err(Error::client(
                ErrorCode::BadState,
                "the selector was started",
            ));
        }
        let shared = &self.shared;
        let claim = Claim::take(shared.session_id, &shared.name, &shared.id)?;
        let Some((state, listener)) = states.take() else {
            return Err(Error::client(
                ErrorCode::BadState,
                "the selector was started",
            ));
        };
        drop(states);
        *lock(&self.claim) = Some(claim);
        self.shared.state.send_replace(LatchState::Started);
        self.shared.queued.send_replace(true);
        let task = tokio::spawn(run(Arc::clone(&self.shared), state, listener));
        *lock(&self.task) = Some(task);
        Ok(())
    }

    /// Queues again once the current leadership (if any) ends; returns false if the
    /// selector was already queued or is not started.
    pub fn requeue(&self) -> bool {
        if self.state() != LatchState::Started {
            return false;
        }
        !self.shared.queued.send_replace(true)
    }

    /// The participant id the selector campaigns with.
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// Where the selector is in its life.
    pub fn state(&self) -> LatchState {
        *self.shared.state.borrow()
    }

    /// Whether the closure runs now (this selector leads).
    pub fn has_leadership(&self) -> bool {
        self.shared.leading.borrow().is_some()
    }

    /// The current leader of the election (this selector or another).
    pub async fn leader(&self) -> Result<Option<Participant>, Error> {
        self.shared.client.leader(&self.shared.name).await
    }

    /// The election's candidates in line, the leader first.
    pub async fn participants(&self) -> Result<Vec<Candidate>, Error> {
        let all = self.shared.client.participants(&self.shared.name).await?;
        Ok(all
            .into_iter()
            .enumerate()
            .map(|(i, participant)| Candidate {
                participant,
                is_leader: i == 0,
            })
            .collect())
    }

    /// Stops the selector: the closure is cancelled (its future dropped) and the
    /// candidacy resigned. The state is `Closed` even if the resign fails (the
    /// candidacy then ends with the session). A Campaign the stop dropped in flight
    /// is sent again with a 1 ms timeout and resigned if it leads, before this
    /// returns. A selector whose session has ended (it is `Closed` already, or about
    /// to be) closes quietly: its candidacy went with the session, so nothing is
    /// resigned. Errors: BAD_STATE if `close` was called before.
    pub async fn close(&self) -> Result<(), Error> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Err(Error::client(ErrorCode::BadState, "the selector is closed"));
        }
        let was = self.state();
        lock(&self.states).take();
        let task = lock(&self.task).take();
        if let Some(task) = task {
            task.abort();
            // Wait for it to stop, so that nothing is published after Closed.
            let _ = task.await;
        }
        // A Campaign the abort dropped in flight may have been answered leader.
        self.shared.reclaims.wait().await;
        self.shared.leading.send_replace(None);
        self.shared.state.send_replace(LatchState::Closed);
        if was == LatchState::Latent || self.shared.client.session_ended() {
            lock(&self.claim).take();
            return Ok(());
        }
        let resigned = match self.shared.resign_all().await {
            // The session ended meanwhile, and the candidacy with it.
            Err(e) if e.code() == ErrorCode::SessionExpired => Ok(()),
            other => other,
        };
        lock(&self.claim).take();
        resigned
    }
}

impl Drop for LeaderSelector {
    /// Stops the task (cancelling the closure). A Campaign in flight is reclaimed
    /// from a task on the current runtime; a leading candidacy stays until its
    /// session ends: call `close` to resign at once.
    fn drop(&mut self) {
        if let Some(task) = lock(&self.task).take() {
            task.abort();
        }
    }
}

impl Shared {
    /// Resigns every candidacy of this selector (its session and id) the server lists.
    async fn resign_all(&self) -> Result<(), Error> {
        self.client
            .resign_candidacies(&self.name, self.session_id, &self.id)
            .await
    }

    async fn resign(&self, p: &Participant) -> Result<(), Error> {
        match self.client.resign(&p.key, p.term).await {
            Ok(_) => Ok(()),
            Err(e) if e.code() == ErrorCode::NoNode => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn end(&self) {
        self.leading.send_replace(None);
        self.state.send_replace(LatchState::Closed);
    }
}

/// The session's state as the task follows it.
struct Conn {
    state: ConnectionState,
    listener: StateListener,
}

/// The session ended: the selector ends.
struct Ended;

impl Conn {
    /// The next state (a dropped Session handle counts as Lost).
    async fn next(&mut self) -> ConnectionState {
        self.state = self.listener.next().await.unwrap_or(ConnectionState::Lost);
        self.state
    }

    /// Waits until connected; `Ended` if the session ends first.
    async fn connected(&mut self) -> Result<(), Ended> {
        loop {
            if self.state.is_ended() {
                return Err(Ended);
            }
            if self.state.is_connected() {
                return Ok(());
            }
            self.next().await;
        }
    }
}

/// The selector's task: queue, lead, resign, and again.
async fn run(shared: Arc<Shared>, state: ConnectionState, listener: StateListener) {
    let mut conn = Conn { state, listener };
    let _ = lead_forever(&shared, &mut conn).await;
    shared.end();
}

async fn lead_forever(shared: &Shared, conn: &mut Conn) -> Result<(), Ended> {
    let mut queued = shared.queued.subscribe();
    loop {
        // Not in line: wait for requeue().
        while !*queued.borrow_and_update() {
            tokio::select! {
                _ = queued.changed() => {}
                _ = conn.next() => if conn.state.is_ended() { return Err(Ended) },
            }
        }
        let p = won(shared, conn).await?;
        shared.queued.send_replace(false);
        lead(shared, conn, p.clone()).await;
        // Leadership is over: give up the place (once connected), then queue again
        // if asked to.
        resign(shared, conn, &p).await?;
        if shared.auto_requeue.load(Ordering::Relaxed) {
            shared.queued.send_replace(true);
        }
    }
}

/// Campaigns until this selector's candidacy leads while the session is connected.
async fn won(shared: &Shared, conn: &mut Conn) -> Result<Participant, Ended> {
    let mut failures = 0u32;
    loop {
        let delay = retry_delay(failures);
        let campaign = async {
            tokio::time::sleep(delay).await;
            // Dropped in flight (the task aborted, or the session ended), the
            // Campaign's place is reclaimed: it may have been answered leader.
            let reclaim =
                Reclaim::candidacy(&shared.client, shared.session_id, &shared.name, &shared.id);
            let call =
                shared
                    .client
                    .campaign(&shared.name, shared.session_id, &shared.id, Vec::new(), 0);
            reclaim
                .guard(Some(Arc::clone(&shared.reclaims)), call)
                .await
        };
        tokio::pin!(campaign);
        let answer = loop {
            tokio::select! {
                answer = &mut campaign => break answer,
                _ = conn.next() => if conn.state.is_ended() { return Err(Ended) },
            }
        };
        let p = match answer {
            Ok(p) => p,
            Err(e) if e.code() == ErrorCode::SessionExpired => return Err(Ended),
            Err(e) if is_transient(&e) => {
                failures = failures.saturating_add(1);
                continue;
            }
            // Nothing to retry (permission, bad name): the selector ends.
            Err(_) => return Err(Ended),
        };
        if conn.state.is_connected() {
            return Ok(p);
        }
        // Won while suspended: lead only if still first once reconnected.
        conn.connected().await?;
        match shared.client.leader(&shared.name).await {
            Ok(Some(l)) if l.key == p.key && l.term == p.term => return Ok(p),
            // Gone, or unknown: Campaign again (a retry adopts the place if it lives).
            _ => failures = failures.saturating_add(1),
        }
    }
}

/// Runs the closure until it returns, or until the session is suspended or ends.
async fn lead(shared: &Shared, conn: &mut Conn, p: Participant) {
    let (cancel, cancelled) = watch::channel(false);
    let leadership = Leadership {
        participant: p.clone(),
        cancel: cancelled,
    };
    let since = shared.client.last_seen_zxid();
    shared.leading.send_replace(Some(p.clone()));
    let take = (shared.take)(leadership);
    tokio::pin!(take);
    // Someone else resigned our candidacy, or its node is gone: leadership is over.
    let deposed = shared.client.deposed(&shared.name, &p, since);
    tokio::pin!(deposed);
    loop {
        tokio::select! {
            () = &mut take => break,
            () = &mut deposed => {
                let _ = cancel.send(true);
                break;
            }
            state = conn.next() => {
                if !state.is_connected() {
                    let _ = cancel.send(true);
                    break;
                }
            }
        }
    }
    shared.leading.send_replace(None);
}

/// Resigns `p`, waiting for the connection when suspended.
async fn resign(shared: &Shared, conn: &mut Conn, p: &Participant) -> Result<(), Ended> {
    let mut failures = 0u32;
    loop {
        conn.connected().await?;
        let delay = retry_delay(failures);
        let attempt = async {
            tokio::time::sleep(delay).await;
            shared.resign(p).await
        };
        tokio::select! {
            done = attempt => match done {
                Ok(()) => return Ok(()),
                Err(e) if e.code() == ErrorCode::SessionExpired => return Err(Ended),
                Err(e) if is_transient(&e) => failures = failures.saturating_add(1),
                // Refused for good (FENCED, PERMISSION_DENIED): the place is not ours.
                Err(_) => return Ok(()),
            },
            _ = conn.next() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leadership() -> (watch::Sender<bool>, Leadership) {
        let (cancel, cancelled) = watch::channel(false);
        let participant = Participant {
            key: "/e/m1".into(),
            term: 42,
            ..Participant::default()
        };
        (
            cancel,
            Leadership {
                participant,
                cancel: cancelled,
            },
        )
    }

    #[test]
    fn a_leadership_fences_with_its_key_and_term() {
        let (_cancel, lead) = leadership();
        assert_eq!(lead.term(), 42);
        assert_eq!(
            lead.fence(),
            Fence {
                key: "/e/m1".into(),
                token: 42
            }
        );
        assert!(!lead.is_cancelled());
    }

    #[tokio::test]
    async fn cancelled_resolves_when_told_or_when_the_selector_is_gone() {
        let (cancel, lead) = leadership();
        let copy = lead.clone();
        cancel.send_replace(true);
        lead.cancelled().await;
        assert!(copy.is_cancelled());
        let (cancel, lead) = leadership();
        drop(cancel);
        lead.cancelled().await;
    }

    #[tokio::test(start_paused = true)]
    async fn cancelled_waits_while_leadership_lasts() {
        let (_cancel, lead) = leadership();
        let waited =
            tokio::time::timeout(std::time::Duration::from_millis(20), lead.cancelled()).await;
        assert!(waited.is_err());
    }
}
