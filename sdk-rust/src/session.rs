//! [`Session`]: an open session kept alive by a background task, and its
//! [`ConnectionState`] as Curator names it.
//!
//! ```text
//!  Session (handle) ◄── watch + broadcast of ConnectionState ◄── keep-alive task
//!                                                                 │ KeepAlive stream: ping every TTL/3
//!    Connected ──(no answer for suspend_share × TTL)──▶ Suspended │ answer → Reconnected
//!    Suspended ──(the server says expired, or no answer for give_up_share × TTL)──▶ Lost
//!    close() ──▶ Closed                                           ├ broken stream → back off, reopen
//!                                                                 └ silent stream → reopen at once
//! ```
//!
//! Only a server decides that a session expired. A whole TTL without an answer is
//! not `Lost` by itself: a server that stalled (SIGSTOP, a frozen VM) charges no
//! session for its own silence and may answer again with the session alive, so the
//! session stays `Suspended` until the give-up time (by default twice the TTL). That
//! time bounds how long a client cut off from every server believes its session may
//! still hold what it holds (the server may have expired it meanwhile: fences guard
//! the writes).
//!
//! A stream is silent when its first ping is not answered within a quarter of the
//! ping interval, or no answer comes for half the TTL: a stalled server keeps its
//! connection open and never answers, so the client gives that connection up (its
//! next call dials the next server of the list) and the next stream is opened at
//! once, several times within the TTL.
//!
//! The task only pings; it never opens a replacement session (a new session would not
//! own the old one's ephemerals, so that is the caller's decision: recipes that must
//! outlive a session, such as a service registration, open a new one after `Lost`).
//! Dropping the handle stops the task but does not close the session on the server:
//! the server expires it one TTL later. Call [`Session::close`] to end it at once.

use std::time::Duration;

use concord_proto::v1::session_client::SessionClient;
use concord_proto::v1::{ErrorCode, KeepAliveRequest, KeepAliveResponse};
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant, MissedTickBehavior};
use tokio_stream::wrappers::ReceiverStream;

use crate::client::{read_err, Client};
use crate::error::Error;
use crate::options::RetryPolicy;

/// Shortest ping interval, whatever the TTL.
const PING_INTERVAL_MIN_MS: u64 = 10;

/// Shortest wait for a new keep-alive stream's first answer.
const FIRST_ANSWER_MIN_MS: u64 = 20;

/// State changes a listener may fall behind by before it skips to the current state.
const LISTENER_BACKLOG: usize = 16;

/// The share of the TTL without an answer after which a session is `Suspended`,
/// unless the client was built with another.
pub const SUSPEND_SHARE_DEFAULT: f64 = 0.5;

/// The smallest suspend share: below it a session would be suspended between pings.
const SUSPEND_SHARE_MIN: f64 = 0.1;

/// The share of the TTL without an answer after which the client gives its session
/// up (`Lost`) unless a server said so first, unless the client was built with
/// another.
pub const GIVE_UP_SHARE_DEFAULT: f64 = 2.0;

/// The give-up share's bounds: never before the server could expire the session,
/// never unbounded.
const GIVE_UP_SHARE_MIN: f64 = 1.0;
const GIVE_UP_SHARE_MAX: f64 = 10.0;

/// What this client knows of its session's standing with the ensemble (Curator's
/// connection states, plus `Closed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnectionState {
    /// Pings are answered: the session is alive (the state a session starts in).
    Connected,
    /// No ping has been answered for the suspend share of the TTL (and, past the TTL,
    /// not yet for the give-up time). The session may still live and its ephemerals
    /// may still exist, but this client cannot tell:
    /// recipes stop acting as leader or holder until it is `Reconnected`.
    Suspended,
    /// A ping was answered again after `Suspended`: the same session lives on, with
    /// its ephemerals (recipes check whether they still lead or hold).
    Reconnected,
    /// The session is gone and its ephemerals with it: the server said it expired, or
    /// no ping was answered for the give-up time (by default twice the TTL: a server
    /// heard from meanwhile would have expired it). The session never leaves this
    /// state; open a new one.
    Lost,
    /// [`Session::close`] closed it. The session never leaves this state.
    Closed,
}

impl ConnectionState {
    /// True for the states the session never leaves (`Lost`, `Closed`).
    pub fn is_ended(self) -> bool {
        matches!(self, ConnectionState::Lost | ConnectionState::Closed)
    }

    /// True while pings are answered (`Connected`, `Reconnected`).
    pub fn is_connected(self) -> bool {
        matches!(
            self,
            ConnectionState::Connected | ConnectionState::Reconnected
        )
    }
}

/// How the keep-alive task times its pings and states, from the TTL the server
/// granted and the client's suspend and give-up shares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Timing {
    /// Time between pings: a third of the TTL.
    pub(crate) ping: Duration,
    /// Time without an answer after which the session is `Suspended`.
    pub(crate) suspend_after: Duration,
    /// Time without an answer after which the session is `Lost` (the give-up time):
    /// the give-up share of the TTL, at least the TTL.
    pub(crate) give_up_after: Duration,
    /// Time an answered stream may go without an answer before it is given up for
    /// another (perhaps to another server): half the TTL, one and a half pings.
    pub(crate) stream_silence_max: Duration,
    /// Time a new stream has to answer its first ping: a quarter of a ping interval,
    /// so that several servers can be tried before the session is lost (a stalled
    /// server keeps its connection open but never answers).
    pub(crate) first_answer_max: Duration,
}

impl Timing {
    pub(crate) fn new(ttl_ms: i64, suspend_share: f64, give_up_share: f64) -> Timing {
        let ttl = Duration::from_millis(u64::try_from(ttl_ms).unwrap_or(0));
        let share = if suspend_share.is_finite() {
            suspend_share.clamp(SUSPEND_SHARE_MIN, 1.0)
        } else {
            SUSPEND_SHARE_DEFAULT
        };
        let give_up = if give_up_share.is_finite() {
            give_up_share.clamp(GIVE_UP_SHARE_MIN, GIVE_UP_SHARE_MAX)
        } else {
            GIVE_UP_SHARE_DEFAULT
        };
        let ping = ping_interval(ttl_ms);
        Timing {
            ping,
            suspend_after: ttl.mul_f64(share),
            give_up_after: ttl.mul_f64(give_up),
            stream_silence_max: ping.mul_f64(1.5),
            first_answer_max: (ping / 4).max(Duration::from_millis(FIRST_ANSWER_MIN_MS)),
        }
    }
}

/// The keep-alive task's side of the state: the current value for `state()`, and a
/// broadcast of every change for listeners.
#[derive(Debug, Clone)]
struct StatePublisher {
    current: watch::Sender<ConnectionState>,
    changes: broadcast::Sender<ConnectionState>,
}

impl StatePublisher {
    fn new() -> StatePublisher {
        StatePublisher {
            current: watch::channel(ConnectionState::Connected).0,
            changes: broadcast::channel(LISTENER_BACKLOG).0,
        }
    }

    fn get(&self) -> ConnectionState {
        *self.current.borrow()
    }

    /// Publishes `new` if it differs from the current state and the session has not
    /// ended, so listeners wake on changes, not on pings.
    fn publish(&self, new: ConnectionState) {
        let changed = self.current.send_if_modified(|current| {
            if *current == new || current.is_ended() {
                false
            } else {
                *current = new;
                true
            }
        });
        if changed {
            // No listener is not an error.
            let _ = self.changes.send(new);
        }
    }
}

/// A listener of a session's state changes, in order (Curator's
/// ConnectionStateListener as a stream). Made by [`Session::listen`].
#[derive(Debug)]
pub struct StateListener {
    changes: broadcast::Receiver<ConnectionState>,
    current: watch::Receiver<ConnectionState>,
    /// Set once `Lost` or `Closed` was yielded: nothing follows.
    done: bool,
}

impl StateListener {
    /// The next change of state; `None` once the session's end (`Lost` or `Closed`)
    /// has been yielded, or the session handle is gone. A listener that falls more
    /// than 16 changes behind skips to the current state: it never sees a stale one
    /// last.
    pub async fn next(&mut self) -> Option<ConnectionState> {
        if self.done {
            return None;
        }
        let state = match self.changes.recv().await {
            Ok(state) => state,
            Err(broadcast::error::RecvError::Lagged(_)) => {
                self.changes = self.changes.resubscribe();
                *self.current.borrow()
            }
            Err(broadcast::error::RecvError::Closed) => return None,
        };
        self.done = state.is_ended();
        Some(state)
    }
}

/// An open session whose keep-alives run in a background task.
#[derive(Debug)]
pub struct Session {
    /// The client the session was opened with, bound to the session (for close,
    /// recipes, and writes as the session).
    client: Client,
    /// The session id.
    id: u64,
    /// The TTL the server granted.
    ttl_ms: i64,
    /// The state, shared with the keep-alive task.
    state: StatePublisher,
    /// The keep-alive task; aborted on drop and on close.
    task: JoinHandle<()>,
}

impl Client {
    /// Opens a session with the requested TTL (0: the client's configured TTL, else
    /// the server's default) and starts keeping it alive in a background task.
    pub async fn open_session(&self, ttl_ms: i64) -> Result<Session, Error> {
        let ttl_ms = if ttl_ms == 0 {
            self.settings().session_ttl_ms
        } else {
            ttl_ms
        };
        let grant = self.open_session_raw(ttl_ms).await?;
        Ok(Session::attach(
            self.clone(),
            grant.session_id,
            grant.ttl_ms,
        ))
    }
}

impl Session {
    /// Starts keeping alive a session opened elsewhere (for example by another process,
    /// or by [`Client::open_session_raw`]). The state starts as `Connected` and turns
    /// `Lost` on the first ping if the server no longer knows the session.
    pub fn attach(client: Client, id: u64, ttl_ms: i64) -> Session {
        let state = StatePublisher::new();
        let settings = client.settings();
        let timing = Timing::new(ttl_ms, settings.suspend_share, settings.give_up_share);
        let task = tokio::spawn(keep_alive_loop(client.clone(), id, timing, state.clone()));
        Session {
            client: client.bound_to(id, state.current.subscribe()),
            id,
            ttl_ms,
            state,
            task,
        }
    }

    /// The session id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The TTL the server granted, in milliseconds.
    pub fn ttl_ms(&self) -> i64 {
        self.ttl_ms
    }

    /// The client the session was opened with, writing as this session: an
    /// ephemeral create through it belongs to the session unless its options name
    /// another, and every write carries the session and a fresh request id, so
    /// that the client's retry policy retries one whose outcome is unknown safely
    /// (see [`Client::session_id`]).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The current state.
    pub fn state(&self) -> ConnectionState {
        self.state.get()
    }

    /// A receiver of the current state (`changed().await`, `wait_for(...)`): for
    /// waiting on a condition; it may skip states that came and went. Use
    /// [`Session::listen`] to see every change.
    pub fn state_watch(&self) -> watch::Receiver<ConnectionState> {
        self.state.current.subscribe()
    }

    /// A listener of every state change from now on, in order.
    pub fn listen(&self) -> StateListener {
        StateListener {
            changes: self.state.changes.subscribe(),
            current: self.state.current.subscribe(),
            done: self.state().is_ended(),
        }
    }

    /// Waits until the session has ended (lost or closed) and returns how.
    pub async fn ended(&self) -> ConnectionState {
        let mut state = self.state_watch();
        let ended = match state.wait_for(|s| s.is_ended()).await {
            Ok(s) => *s,
            // The sender lives in `self`, so this cannot happen while `self` exists.
            Err(_) => ConnectionState::Closed,
        };
        ended
    }

    /// Closes the session on the server (deleting its ephemerals) and stops the
    /// keep-alives. Errors: SESSION_EXPIRED when it had already ended. Whatever the
    /// outcome, the keep-alives stop: after a failed close the server expires the
    /// session one TTL later.
    pub async fn close(self) -> Result<(), Error> {
        let result = self.client.close_session(self.id).await;
        self.task.abort();
        match &result {
            Ok(_) => self.state.publish(ConnectionState::Closed),
            Err(e) if e.code() == ErrorCode::SessionExpired => {
                self.state.publish(ConnectionState::Lost)
            }
            Err(_) => {}
        }
        result.map(|_| ())
    }
}

impl Drop for Session {
    /// Stops the keep-alive task; the session itself lives until the server expires it.
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Why one keep-alive stream ended.
enum StreamEnd {
    /// The server says the session is gone.
    Expired,
    /// The stream broke; `answered` tells whether any ping was answered on it.
    Broken { answered: bool },
    /// The stream went unanswered for too long (a stalled server): try another at
    /// once, without back-off (the wait was the back-off).
    Silent,
}

/// The ping interval for a TTL: a third of it, at least `PING_INTERVAL_MIN_MS`.
pub(crate) fn ping_interval(ttl_ms: i64) -> Duration {
    let third = u64::try_from(ttl_ms / 3).unwrap_or(0);
    Duration::from_millis(third.max(PING_INTERVAL_MIN_MS))
}

/// Reconnect back-off: fast at first, never longer than one ping interval, so a
/// reconnect is tried several times within one TTL.
fn reconnect_policy(interval: Duration) -> RetryPolicy {
    let interval_ms = interval.as_millis() as u64;
    RetryPolicy {
        attempts_max: 0,
        elapsed_max_ms: 0,
        delay_initial_ms: (interval_ms / 8).max(5),
        delay_max_ms: interval_ms,
    }
}

/// When a ping was last answered, and the states that follow from the time since:
/// the clock half of the state machine (answers are the other half).
struct Contact {
    /// When the last ping was answered (at first: when the session was attached).
    last: std::sync::Mutex<Instant>,
    timing: Timing,
    state: StatePublisher,
}

impl Contact {
    fn last(&self) -> Instant {
        *crate::lock(&self.last)
    }

    /// A ping was answered: the session lives.
    fn answered(&self) {
        *crate::lock(&self.last) = Instant::now();
        if self.state.get() == ConnectionState::Suspended {
            self.state.publish(ConnectionState::Reconnected);
        }
    }

    /// Returns once no ping has been answered for the give-up time, having published
    /// `Suspended` on the way (at the suspend share). A whole TTL without an answer
    /// is not `Lost` by itself: only a server says the session expired.
    async fn until_lost(&self) {
        loop {
            let since = self.last();
            let next = if self.state.get() == ConnectionState::Suspended {
                since + self.timing.give_up_after
            } else {
                since + self.timing.suspend_after
            };
            sleep_until(next).await;
            let silent_for = self.last().elapsed();
            if silent_for >= self.timing.give_up_after {
                return;
            }
            if silent_for >= self.timing.suspend_after {
                self.state.publish(ConnectionState::Suspended);
            }
        }
    }
}

async fn keep_alive_loop(client: Client, id: u64, timing: Timing, state: StatePublisher) {
    let policy = reconnect_policy(timing.ping);
    let contact = Contact {
        last: std::sync::Mutex::new(Instant::now()),
        timing,
        state,
    };
    let mut failures = 0u32;
    loop {
        let end = tokio::select! {
            end = run_stream(&client, id, &contact) => Some(end),
            () = contact.until_lost() => None,
        };
        let answered = match end {
            Some(StreamEnd::Broken { answered }) => answered,
            Some(StreamEnd::Silent) => continue,
            Some(StreamEnd::Expired) | None => break,
        };
        failures = if answered {
            1
        } else {
            failures.saturating_add(1)
        };
        tokio::select! {
            () = tokio::time::sleep(policy.delay(failures)) => {}
            () = contact.until_lost() => break,
        }
    }
    contact.state.publish(ConnectionState::Lost);
}

/// Runs one KeepAlive stream until it ends: pings every interval, records every
/// answer, and gives up on a stream that does not answer its first ping within
/// `first_answer_max` or then goes `stream_silence_max` without an answer.
async fn run_stream(client: &Client, id: u64, contact: &Contact) -> StreamEnd {
    let timing = contact.timing;
    let (tx, rx) = mpsc::channel(4);
    // Each ping carries the newest zxid this client has seen (the session's Open at
    // least), so a server still catching up waits instead of calling it expired.
    let ping = || KeepAliveRequest {
        session_id: id,
        min_zxid: client.last_seen_zxid(),
    };
    // Queued before the call so that the server sees a ping at once.
    if tx.try_send(ping()).is_err() {
        return StreamEnd::Broken { answered: false };
    }
    let mut deadline = Instant::now() + timing.first_answer_max;
    // The stream's own connection, dialled first if need be (a dial cut short by the
    // deadline has moved the list on), so that a silent one is given up, and only it.
    let link = client.link();
    let connection = match tokio::time::timeout_at(deadline, link.connected()).await {
        Ok(Ok(connection)) => connection,
        Ok(Err(e)) => return end_of(read_err(tonic::Status::from_error(e)), false),
        Err(_) => return StreamEnd::Silent,
    };
    let mut sessions = SessionClient::new(connection.clone());
    let call = sessions.keep_alive(ReceiverStream::new(rx));
    let mut responses = match tokio::time::timeout_at(deadline, call).await {
        Ok(Ok(resp)) => resp.into_inner(),
        Ok(Err(status)) => return broken(read_err(status), false, client, &connection),
        Err(_) => {
            link.abandon(&connection);
            return StreamEnd::Silent;
        }
    };
    let mut ticker = tokio::time::interval_at(Instant::now() + timing.ping, timing.ping);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut answered = false;
    loop {
        tokio::select! {
            _ = ticker.tick() => {
                // A full queue means the stream does not move: the deadline decides.
                if let Err(mpsc::error::TrySendError::Closed(_)) = tx.try_send(ping()) {
                    return StreamEnd::Broken { answered };
                }
            }
            () = sleep_until(deadline) => {
                link.abandon(&connection);
                return StreamEnd::Silent;
            }
            msg = responses.message() => match msg {
                Ok(Some(resp)) => {
                    if is_expired(&resp, id) {
                        return StreamEnd::Expired;
                    }
                    answered = true;
                    deadline = Instant::now() + timing.stream_silence_max;
                    contact.answered();
                }
                Ok(None) => return StreamEnd::Broken { answered },
                Err(status) => return broken(read_err(status), answered, client, &connection),
            },
        }
    }
}

fn is_expired(resp: &KeepAliveResponse, id: u64) -> bool {
    resp.expired && (resp.session_id == id || resp.session_id == 0)
}

fn end_of(err: Error, answered: bool) -> StreamEnd {
    if err.code() == ErrorCode::SessionExpired {
        StreamEnd::Expired
    } else {
        StreamEnd::Broken { answered }
    }
}

/// How a stream on `connection` ended with `err`. A server that says it cannot
/// serve (it has had no leader for a while, or is stopping) is given up, so the
/// next stream goes to another server: the leader it named, if listed.
fn broken(
    err: Error,
    answered: bool,
    client: &Client,
    connection: &concord_direct::Direct,
) -> StreamEnd {
    if err.server_cannot_serve() {
        client.aim_at_named_leader(&err);
        client.link().abandon(connection);
    }
    end_of(err, answered)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_interval_is_a_third_of_the_ttl() {
        assert_eq!(ping_interval(3_000), Duration::from_millis(1_000));
        assert_eq!(
            ping_interval(0),
            Duration::from_millis(PING_INTERVAL_MIN_MS)
        );
        assert_eq!(
            ping_interval(-5),
            Duration::from_millis(PING_INTERVAL_MIN_MS)
        );
    }

    #[test]
    fn reconnect_backoff_stays_within_an_interval() {
        let policy = reconnect_policy(Duration::from_millis(1_000));
        assert_eq!(policy.delay(1), Duration::from_millis(125));
        assert_eq!(policy.delay(10), Duration::from_millis(1_000));
        assert!(policy.allows(u32::MAX, Duration::from_secs(3_600)));
    }

    #[test]
    fn timing_follows_the_ttl_and_the_share() {
        let t = Timing::new(3_000, 0.5, GIVE_UP_SHARE_DEFAULT);
        assert_eq!(t.ping, Duration::from_millis(1_000));
        assert_eq!(t.suspend_after, Duration::from_millis(1_500));
        // Lost only after twice the TTL without an answer, unless a server says so.
        assert_eq!(t.give_up_after, Duration::from_millis(6_000));
        assert_eq!(t.stream_silence_max, Duration::from_millis(1_500));
        assert_eq!(t.first_answer_max, Duration::from_millis(250));
        assert_eq!(
            Timing::new(0, 0.5, 2.0).first_answer_max,
            Duration::from_millis(FIRST_ANSWER_MIN_MS)
        );
        assert_eq!(
            Timing::new(3_000, 7.0, 2.0).suspend_after,
            Duration::from_millis(3_000)
        );
        assert_eq!(
            Timing::new(3_000, f64::NAN, 2.0).suspend_after,
            Duration::from_millis(1_500)
        );
        // The give-up share: 1 to 10 (never before the server could expire the session).
        let give_up = |share| Timing::new(3_000, 0.5, share).give_up_after;
        assert_eq!(give_up(3.0), Duration::from_millis(9_000));
        assert_eq!(give_up(0.2), Duration::from_millis(3_000));
        assert_eq!(give_up(99.0), Duration::from_millis(30_000));
        assert_eq!(give_up(f64::INFINITY), Duration::from_millis(6_000));
    }

    #[test]
    fn ended_states_are_sticky_and_repeats_are_not_changes() {
        let state = StatePublisher::new();
        let mut changes = state.changes.subscribe();
        state.publish(ConnectionState::Connected);
        state.publish(ConnectionState::Suspended);
        state.publish(ConnectionState::Suspended);
        state.publish(ConnectionState::Lost);
        state.publish(ConnectionState::Reconnected);
        assert_eq!(state.get(), ConnectionState::Lost);
        assert_eq!(changes.try_recv(), Ok(ConnectionState::Suspended));
        assert_eq!(changes.try_recv(), Ok(ConnectionState::Lost));
        assert!(changes.try_recv().is_err());
    }

    fn contact(ttl_ms: i64) -> Contact {
        Contact {
            last: std::sync::Mutex::new(Instant::now()),
            timing: Timing::new(ttl_ms, 0.5, GIVE_UP_SHARE_DEFAULT),
            state: StatePublisher::new(),
        }
    }

    /// Before issue 46 a session was lost after one TTL of silence; a server that
    /// stalled for less than the TTL kept it, so the client now waits for the give-up
    /// time (twice the TTL by default), suspended from the share on.
    #[tokio::test(start_paused = true)]
    async fn silence_suspends_at_the_share_and_loses_at_the_give_up_time() {
        let contact = contact(3_000);
        let start = Instant::now();
        let mut listener = StateListener {
            changes: contact.state.changes.subscribe(),
            current: contact.state.current.subscribe(),
            done: false,
        };
        let past_the_ttl = async {
            tokio::time::sleep(Duration::from_millis(5_900)).await;
            assert_eq!(contact.state.get(), ConnectionState::Suspended);
        };
        tokio::join!(contact.until_lost(), past_the_ttl);
        assert_eq!(start.elapsed(), Duration::from_millis(6_000));
        contact.state.publish(ConnectionState::Lost);
        assert_eq!(listener.next().await, Some(ConnectionState::Suspended));
        assert_eq!(listener.next().await, Some(ConnectionState::Lost));
        assert_eq!(listener.next().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_while_suspended_reconnects_and_restarts_the_clock() {
        let contact = contact(3_000);
        let start = Instant::now();
        let mut states = contact.state.current.subscribe();
        let answered_at = async {
            states
                .wait_for(|s| *s == ConnectionState::Suspended)
                .await
                .expect("publisher alive");
            assert_eq!(start.elapsed(), Duration::from_millis(1_500));
            tokio::time::sleep(Duration::from_millis(1_000)).await;
            contact.answered();
            assert_eq!(contact.state.get(), ConnectionState::Reconnected);
            Instant::now()
        };
        let (answered_at, ()) = tokio::join!(answered_at, contact.until_lost());
        // Lost the give-up time after the answer, not after the first silence.
        assert_eq!(answered_at.elapsed(), Duration::from_millis(6_000));
    }

    #[test]
    fn a_lagging_listener_skips_to_the_current_state() {
        let state = StatePublisher::new();
        let mut listener = StateListener {
            changes: state.changes.subscribe(),
            current: state.current.subscribe(),
            done: false,
        };
        for _ in 0..LISTENER_BACKLOG {
            state.publish(ConnectionState::Suspended);
            state.publish(ConnectionState::Reconnected);
        }
        state.publish(ConnectionState::Suspended);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        assert_eq!(
            runtime.block_on(listener.next()),
            Some(ConnectionState::Suspended)
        );
    }
}
