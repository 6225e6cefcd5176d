//! [`LeaderLatch`] (Curator's LeaderLatch): one candidacy in a server election, owned
//! by a session, that says whether it leads and tells a listener when that changes.
//!
//! ```text
//!   start() ─▶ task: Campaign(name, session, id) ······ the server queues and waits
//!                      │ answered: first in line
//!                      ▼
//!     Connected ─▶ IsLeader ──Suspended──▶ NotLeader ──Reconnected──▶ Leader(name)?
//!                     ▲                                   │ still our key and term
//!                     └───────────────────────────────────┘ else: Campaign again
//!     Lost (or the Session handle dropped) ─▶ NotLeader if leading, state Closed
//!   close(mode) ─▶ stop the task, Resign our candidacy (NotLeader only with NotifyLeader)
//!                  (a Campaign stopped in flight is sent again with a 1 ms timeout and
//!                  resigned if it leads: crate::reclaim)
//! ```
//!
//! The decisions are made by [`Core`], which does no IO (unit-tested below); the task
//! around it runs the calls it asks for. What it must not do: queue by itself (the
//! server's Election service queues and fences), poll, or open a new session (after
//! `Lost` the latch ends; make a new one on a new session).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use crate::client::Client;
use crate::error::Error;
use crate::lock;
use crate::proto::ErrorCode;
use crate::reclaim::{Reclaim, Reclaims};
use crate::session::{ConnectionState, Session, StateListener};
use crate::types::{Fence, Participant};

/// Events a latch listener may fall behind by before it skips to the current one.
const EVENT_BACKLOG: usize = 16;

/// First delay before a failed Campaign or Leader check is sent again.
const RETRY_DELAY_MIN_MS: u64 = 20;

/// Longest delay between retries of a failed Campaign or Leader check.
const RETRY_DELAY_MAX_MS: u64 = 1_000;

/// Where a latch is in its life (Curator's LeaderLatch.State).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LatchState {
    /// Made, not started.
    Latent,
    /// Started: campaigning, or leading.
    Started,
    /// Closed by `close`, or ended because its session was lost (or its campaign
    /// failed for good): it never leads again.
    Closed,
}

/// A change of a latch's leadership, as its listener reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LatchEvent {
    /// The latch leads (Curator's isLeader).
    IsLeader,
    /// The latch no longer leads (Curator's notLeader).
    NotLeader,
}

/// How `close` ends a latch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CloseMode {
    /// Listeners are not told (Curator's SILENT).
    #[default]
    Silent,
    /// Listeners hear `NotLeader` if the latch was leading (Curator's NOTIFY_LEADER).
    NotifyLeader,
}

/// What the latch's task asks its runtime to do (the output of [`Core`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Send Campaign (again): our place is not known to lead.
    Campaign,
    /// Ask the server whether this candidacy still leads.
    Check(Participant),
    /// The latch leads as this candidacy: publish it and tell listeners.
    Lead(Participant),
    /// The latch no longer leads: publish it and tell listeners.
    Unlead,
    /// The session is gone: the latch ends.
    End,
}

/// The latch's decisions, from what the server answered and the connection states;
/// no IO, no clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Core {
    /// The last connection state seen.
    conn: ConnectionState,
    /// The candidacy the server last said leads (it may no longer, after a suspension).
    won: Option<Participant>,
    /// Whether the latch currently says it leads.
    leading: bool,
    /// A Leader check is in flight.
    checking: bool,
}

impl Core {
    /// A latch started while the session is in `conn`: it campaigns.
    pub(crate) fn new(conn: ConnectionState) -> (Core, Vec<Step>) {
        let core = Core {
            conn,
            won: None,
            leading: false,
            checking: false,
        };
        let steps = if conn.is_ended() {
            vec![Step::End]
        } else {
            vec![Step::Campaign]
        };
        (core, steps)
    }

    /// Campaign answered: `p` is first in line. It leads only while connected; a win
    /// seen while suspended is checked again after `Reconnected`.
    pub(crate) fn on_won(&mut self, p: Participant) -> Vec<Step> {
        self.won = Some(p.clone());
        if self.conn.is_connected() {
            self.leading = true;
            vec![Step::Lead(p)]
        } else {
            Vec::new()
        }
    }

    /// The session's state changed.
    pub(crate) fn on_state(&mut self, state: ConnectionState) -> Vec<Step> {
        self.conn = state;
        let mut steps = Vec::new();
        match state {
            ConnectionState::Suspended => {
                if self.leading {
                    self.leading = false;
                    steps.push(Step::Unlead);
                }
            }
            ConnectionState::Connected | ConnectionState::Reconnected => {
                if let Some(p) = self.won.clone() {
                    if !self.leading && !self.checking {
                        self.checking = true;
                        steps.push(Step::Check(p));
                    }
                }
            }
            ConnectionState::Lost | ConnectionState::Closed => {
                if self.leading {
                    self.leading = false;
                    steps.push(Step::Unlead);
                }
                steps.push(Step::End);
            }
        }
        steps
    }

    /// The server answered a check: whether our candidacy is still the leader.
    pub(crate) fn on_checked(&mut self, still_leader: bool) -> Vec<Step> {
        self.checking = false;
        let Some(p) = self.won.clone() else {
            return Vec::new();
        };
        if !still_leader {
            // Our place is gone (it was first, so nothing else can have moved it).
            self.won = None;
            return vec![Step::Campaign];
        }
        if self.conn.is_connected() {
            self.leading = true;
            vec![Step::Lead(p)]
        } else {
            // Suspended again meanwhile: the next Reconnected checks again.
            Vec::new()
        }
    }

    /// While it leads, the election showed another leader (someone resigned our
    /// candidacy, or its node is gone): it stops leading and campaigns again.
    pub(crate) fn on_deposed(&mut self) -> Vec<Step> {
        if !self.leading {
            return Vec::new();
        }
        self.leading = false;
        self.won = None;
        vec![Step::Unlead, Step::Campaign]
    }

    /// A check failed (no answer): ask again if still connected.
    pub(crate) fn on_check_failed(&mut self) -> Vec<Step> {
        self.checking = false;
        match (&self.won, self.conn.is_connected()) {
            (Some(p), true) => {
                self.checking = true;
                vec![Step::Check(p.clone())]
            }
            _ => Vec::new(),
        }
    }
}

/// What a latch publishes for its handle and listeners.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Status {
    state: LatchState,
    /// The candidacy while the latch leads.
    leading: Option<Participant>,
    /// Why the latch ended, if it ended by itself.
    ended: Option<(ErrorCode, String)>,
}

/// The latch's side shared with its task.
#[derive(Debug)]
struct Shared {
    client: Client,
    session_id: u64,
    name: String,
    id: String,
    status: watch::Sender<Status>,
    events: broadcast::Sender<LatchEvent>,
    /// Reclaims of Campaigns dropped in flight, which `close` waits for.
    reclaims: Arc<Reclaims>,
}

impl Shared {
    fn lead(&self, p: Participant) {
        self.status.send_modify(|s| s.leading = Some(p));
        let _ = self.events.send(LatchEvent::IsLeader);
    }

    /// Stops leading; tells listeners if `notify` and it was leading.
    fn unlead(&self, notify: bool) {
        let mut was = false;
        self.status
            .send_modify(|s| was = s.leading.take().is_some());
        if was && notify {
            let _ = self.events.send(LatchEvent::NotLeader);
        }
    }

    fn end(&self, code: ErrorCode, why: String) {
        self.unlead(true);
        self.status.send_modify(|s| {
            if s.state != LatchState::Closed {
                s.state = LatchState::Closed;
                s.ended = Some((code, why));
            }
        });
    }

    /// One Campaign, after `delay`. Dropped in flight (the task aborted), its place
    /// is reclaimed: it may have been answered leader as it was dropped.
    async fn campaign(self: Arc<Self>, delay: Duration) -> Result<Participant, Error> {
        tokio::time::sleep(delay).await;
        let reclaim = Reclaim::candidacy(&self.client, self.session_id, &self.name, &self.id);
        let call = self
            .client
            .campaign(&self.name, self.session_id, &self.id, Vec::new(), 0);
        reclaim.guard(Some(Arc::clone(&self.reclaims)), call).await
    }

    /// Whether `p` still leads, after `delay`.
    async fn check(self: Arc<Self>, p: Participant, delay: Duration) -> Result<bool, Error> {
        tokio::time::sleep(delay).await;
        let leader = self.client.leader(&self.name).await?;
        Ok(leader.is_some_and(|l| l.key == p.key && l.term == p.term))
    }

    /// Resigns every candidacy of this latch (its session and id) the server lists.
    async fn resign_all(&self) -> Result<(), Error> {
        self.client
            .resign_candidacies(&self.name, self.session_id, &self.id)
            .await
    }
}

/// A leader latch on election `name`; see the module doc.
#[derive(Debug)]
pub struct LeaderLatch {
    shared: Arc<Shared>,
    /// The session's states since the latch was made, handed to the task at start.
    states: Mutex<Option<(ConnectionState, StateListener)>>,
    /// The campaigning task; aborted on close and on drop.
    task: Mutex<Option<JoinHandle<()>>>,
    /// This latch's participant id, held from start to close.
    claim: Mutex<Option<Claim>>,
    /// Set by the first `close` (the state alone cannot tell: a latch whose session
    /// ended is `Closed` too, and closing it is no error).
    closed: AtomicBool,
}

impl LeaderLatch {
    /// A latch for election `name` on `session`, as participant `id` (its
    /// `participant_id` on the server: unique among the latches of one session, or a
    /// retried Campaign of one would adopt the other's place; empty: one is made up).
    pub fn new(session: &Session, name: impl Into<String>, id: impl Into<String>) -> LeaderLatch {
        let mut id = id.into();
        if id.is_empty() {
            id = unique_id("latch", session.id());
        }
        let status = Status {
            state: LatchState::Latent,
            leading: None,
            ended: None,
        };
        LeaderLatch {
            shared: Arc::new(Shared {
                client: session.client().clone(),
                session_id: session.id(),
                name: name.into(),
                id,
                status: watch::channel(status).0,
                events: broadcast::channel(EVENT_BACKLOG).0,
                reclaims: Arc::default(),
            }),
            states: Mutex::new(Some((session.state(), session.listen()))),
            task: Mutex::new(None),
            claim: Mutex::new(None),
            closed: AtomicBool::new(false),
        }
    }

    /// Starts campaigning in a background task. Errors: BAD_STATE if already started;
    /// NODE_EXISTS if another recipe of this process uses the same session, election
    /// and id.
    pub fn start(&self) -> Result<(), Error> {
        let mut states = lock(&self.states);
        if states.is_none() {
            return Err(Error::client(ErrorCode::BadState, "the latch was started"));
        }
        let shared = &self.shared;
        let claim = Claim::take(shared.session_id, &shared.name, &shared.id)?;
        let Some((state, listener)) = states.take() else {
            return Err(Error::client(ErrorCode::BadState, "the latch was started"));
        };
        drop(states);
        *lock(&self.claim) = Some(claim);
        self.shared
            .status
            .send_modify(|s| s.state = LatchState::Started);
        let task = tokio::spawn(run(Arc::clone(&self.shared), state, listener));
        *lock(&self.task) = Some(task);
        Ok(())
    }

    /// The participant id the latch campaigns with.
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Where the latch is in its life.
    pub fn state(&self) -> LatchState {
        self.shared.status.borrow().state
    }

    /// Whether the latch leads now (connected, and first in line).
    pub fn has_leadership(&self) -> bool {
        self.shared.status.borrow().leading.is_some()
    }

    /// While the latch leads: its fence (key and term) for writes that only the
    /// leader may make.
    pub fn fence(&self) -> Option<Fence> {
        self.shared.status.borrow().leading.as_ref().map(|p| Fence {
            key: p.key.clone(),
            token: p.term,
        })
    }

    /// Waits until the latch leads. Errors: BAD_STATE if not started or closed;
    /// SESSION_EXPIRED (or the campaign's error) if it ends meanwhile.
    pub async fn wait(&self) -> Result<(), Error> {
        let mut status = self.shared.status.subscribe();
        let seen = status
            .wait_for(|s| s.leading.is_some() || s.state != LatchState::Started)
            .await
            .map_err(|_| Error::client(ErrorCode::BadState, "the latch is gone"))?
            .clone();
        if seen.leading.is_some() {
            return Ok(());
        }
        Err(match (seen.state, seen.ended) {
            (LatchState::Latent, _) => {
                Error::client(ErrorCode::BadState, "the latch was not started")
            }
            (_, Some((code, why))) => Error::client(code, why),
            _ => Error::client(ErrorCode::BadState, "the latch is closed"),
        })
    }

    /// Waits up to `timeout` for the latch to lead; returns whether it does.
    pub async fn wait_timeout(&self, timeout: Duration) -> Result<bool, Error> {
        match tokio::time::timeout(timeout, self.wait()).await {
            Ok(result) => result.map(|()| true),
            Err(_) => Ok(false),
        }
    }

    /// A listener of this latch's leadership changes from now on.
    pub fn listen(&self) -> LatchListener {
        LatchListener {
            events: self.shared.events.subscribe(),
            status: self.shared.status.subscribe(),
        }
    }

    /// The current leader of the election (this latch or another).
    pub async fn leader(&self) -> Result<Option<Participant>, Error> {
        self.shared.client.leader(&self.shared.name).await
    }

    /// The election's candidates, leader first.
    pub async fn participants(&self) -> Result<Vec<Participant>, Error> {
        self.shared.client.participants(&self.shared.name).await
    }

    /// Stops the latch and resigns its candidacy (leader or waiting). With
    /// `NotifyLeader` listeners hear `NotLeader` if it was leading. The state is
    /// `Closed` even if the resign fails (the candidacy then ends with the session);
    /// the error says why. A Campaign the stop dropped in flight is sent again with
    /// a 1 ms timeout and resigned if it leads, before this returns. A latch whose
    /// session has ended (it is `Closed` already, or about to be) closes quietly:
    /// its candidacy went with the session, so nothing is resigned. Errors:
    /// BAD_STATE if `close` was called before.
    pub async fn close(&self, mode: CloseMode) -> Result<(), Error> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Err(Error::client(ErrorCode::BadState, "the latch is closed"));
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
        self.shared.unlead(mode == CloseMode::NotifyLeader);
        self.shared
            .status
            .send_modify(|s| s.state = LatchState::Closed);
        if was == LatchState::Latent || self.shared.client.session_ended() {
            return Ok(());
        }
        match self.shared.resign_all().await {
            // The session ended meanwhile, and the candidacy with it.
            Err(e) if e.code() == ErrorCode::SessionExpired => Ok(()),
            other => other,
        }
    }
}

impl Drop for LeaderLatch {
    /// Stops the task. A waiting candidacy leaves with its cancelled Campaign (one
    /// answered as it was cancelled is reclaimed and resigned from a task on the
    /// current runtime); a leading one stays until its session ends: call `close`
    /// to resign at once.
    fn drop(&mut self) {
        if let Some(task) = lock(&self.task).take() {
            task.abort();
        }
    }
}

/// A listener of a latch's leadership changes (Curator's LeaderLatchListener as a
/// stream). Made by [`LeaderLatch::listen`].
#[derive(Debug)]
pub struct LatchListener {
    events: broadcast::Receiver<LatchEvent>,
    status: watch::Receiver<Status>,
}

impl LatchListener {
    /// The next change; `None` once the latch is closed (or gone) and every change
    /// before that was yielded. A listener that falls more than 16 changes behind
    /// skips to the current one.
    pub async fn next(&mut self) -> Option<LatchEvent> {
        loop {
            match self.events.try_recv() {
                Ok(event) => return Some(event),
                Err(broadcast::error::TryRecvError::Lagged(_)) => {
                    self.events = self.events.resubscribe();
                    return Some(match self.status.borrow().leading {
                        Some(_) => LatchEvent::IsLeader,
                        None => LatchEvent::NotLeader,
                    });
                }
                Err(broadcast::error::TryRecvError::Closed) => return None,
                Err(broadcast::error::TryRecvError::Empty) => {}
            }
            if self.status.borrow().state == LatchState::Closed {
                return None;
            }
            tokio::select! {
                biased;
                event = self.events.recv() => match event {
                    Ok(event) => return Some(event),
                    Err(broadcast::error::RecvError::Closed) => return None,
                    // Handled by try_recv on the next turn.
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                },
                changed = self.status.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                }
            }
        }
    }
}

/// The latch's task: runs what [`Core`] asks, feeding it answers and states.
async fn run(shared: Arc<Shared>, state: ConnectionState, mut listener: StateListener) {
    type Pending<T> = Option<Pin<Box<dyn Future<Output = Result<T, Error>> + Send>>>;
    let (mut core, mut steps) = Core::new(state);
    let mut campaign: Pending<Participant> = None;
    let mut check: Pending<bool> = None;
    // While it leads: follows the election until someone else leads.
    let mut deposed: Option<Pin<Box<dyn Future<Output = ()> + Send>>> = None;
    let mut campaign_failures = 0u32;
    let mut check_failures = 0u32;
    loop {
        for step in steps.drain(..) {
            match step {
                Step::Campaign => {
                    deposed = None;
                    let delay = retry_delay(campaign_failures);
                    campaign = Some(Box::pin(Arc::clone(&shared).campaign(delay)));
                }
                Step::Check(p) => {
                    let delay = retry_delay(check_failures);
                    check = Some(Box::pin(Arc::clone(&shared).check(p, delay)));
                }
                Step::Lead(p) => {
                    let since = shared.client.last_seen_zxid();
                    let (follow, leader) = (Arc::clone(&shared), p.clone());
                    deposed = Some(Box::pin(async move {
                        follow.client.deposed(&follow.name, &leader, since).await
                    }));
                    shared.lead(p);
                }
                Step::Unlead => {
                    deposed = None;
                    shared.unlead(true);
                }
                Step::End => {
                    shared.end(
                        ErrorCode::SessionExpired,
                        "the latch's session was lost".into(),
                    );
                    return;
                }
            }
        }
        tokio::select! {
            state = listener.next() => {
                // A dropped Session handle counts as Lost.
                steps = core.on_state(state.unwrap_or(ConnectionState::Lost));
            }
            won = pending(&mut campaign) => {
                campaign = None;
                match won {
                    Ok(p) => {
                        campaign_failures = 0;
                        steps = core.on_won(p);
                    }
                    Err(e) if e.code() == ErrorCode::SessionExpired => steps = vec![Step::End],
                    Err(e) if is_transient(&e) => {
                        campaign_failures = campaign_failures.saturating_add(1);
                        steps = vec![Step::Campaign];
                    }
                    Err(e) => {
                        shared.end(e.code(), format!("campaign failed: {}", e.message()));
                        return;
                    }
                }
            }
            () = pending(&mut deposed) => {
                deposed = None;
                steps = core.on_deposed();
            }
            checked = pending(&mut check) => {
                check = None;
                match checked {
                    Ok(still) => {
                        check_failures = 0;
                        steps = core.on_checked(still);
                    }
                    Err(_) => {
                        check_failures = check_failures.saturating_add(1);
                        steps = core.on_check_failed();
                    }
                }
            }
        }
    }
}

/// Awaits the future in `slot`, or never if there is none.
pub(crate) async fn pending<T>(slot: &mut Option<Pin<Box<dyn Future<Output = T> + Send>>>) -> T {
    match slot {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

/// A failure worth sending the call again for (the place is adopted by a retry).
pub(crate) fn is_transient(e: &Error) -> bool {
    e.is_retry_safe() || e.is_indeterminate()
}

/// The delay before the next try after `failures` failures: none at first, then
/// doubling from `RETRY_DELAY_MIN_MS` to `RETRY_DELAY_MAX_MS`.
pub(crate) fn retry_delay(failures: u32) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let ms = RETRY_DELAY_MIN_MS.saturating_mul(1u64 << (failures - 1).min(16));
    Duration::from_millis(ms.min(RETRY_DELAY_MAX_MS))
}

/// A participant id no other recipe instance of this process uses on this session.
pub(crate) fn unique_id(kind: &str, session_id: u64) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{kind}-{session_id:x}-{}-{n}", std::process::id())
}

/// A (session, election, participant id) in use by one recipe instance of this
/// process: a second instance with the same would share its place in line (a
/// Campaign with the same session and id adopts it), so it is refused. Released on
/// drop.
#[derive(Debug)]
pub(crate) struct Claim {
    key: (u64, String, String),
}

/// The claims of this process.
static CLAIMS: Mutex<Vec<(u64, String, String)>> = Mutex::new(Vec::new());

impl Claim {
    /// Claims `id` in election `name` for `session_id`. Errors: NODE_EXISTS.
    pub(crate) fn take(session_id: u64, name: &str, id: &str) -> Result<Claim, Error> {
        let key = (session_id, name.to_owned(), id.to_owned());
        let mut claims = lock(&CLAIMS);
        if claims.contains(&key) {
            return Err(Error::client(
                ErrorCode::NodeExists,
                format!("participant id {id:?} of election {name:?} is in use by another recipe of this session"),
            ));
        }
        claims.push(key.clone());
        Ok(Claim { key })
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        lock(&CLAIMS).retain(|k| *k != self.key);
    }
}

#[cfg(test)]
#[path = "latch_tests.rs"]
mod tests;
