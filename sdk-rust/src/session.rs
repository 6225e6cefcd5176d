//! [`Session`]: an open session kept alive by a background task.
//!
//! ```text
//!  Session (handle) ── watch::Receiver<SessionState> ◄── keep-alive task
//!                                                         │ KeepAlive stream: ping every TTL/3
//!                                                         │ reply `expired` → Expired, stop
//!                                                         └ stream broken / silent → Reconnecting,
//!                                                           back off, open a new stream
//! ```
//!
//! The task only pings; it never opens a replacement session (a new session would not
//! own the old one's ephemerals, so that is the caller's decision). Dropping the
//! handle stops the task but does not close the session on the server: the server
//! expires it one TTL later. Call [`Session::close`] to end it at once.

use std::time::Duration;

use concord_proto::v1::{ErrorCode, KeepAliveRequest, KeepAliveResponse};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_stream::wrappers::ReceiverStream;

use crate::client::{read_err, Client};
use crate::error::Error;
use crate::options::RetryPolicy;

/// Shortest ping interval, whatever the TTL.
const PING_INTERVAL_MIN_MS: u64 = 10;

/// What the keep-alive task knows of the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// The last ping was answered: the session was alive then.
    Alive,
    /// The keep-alive stream broke; the task is opening a new one. The session lives
    /// on if a ping gets through within its TTL. The SDK reports `Expired` only when a
    /// server says so: a session `Reconnecting` for longer than its TTL has most likely
    /// expired already, and its ephemerals with it.
    Reconnecting,
    /// The server said the session no longer exists. Its ephemerals are gone.
    Expired,
    /// [`Session::close`] closed it.
    Closed,
}

impl SessionState {
    /// True for the states the session never leaves (Expired, Closed).
    pub fn is_ended(self) -> bool {
        matches!(self, SessionState::Expired | SessionState::Closed)
    }
}

/// An open session whose keep-alives run in a background task.
#[derive(Debug)]
pub struct Session {
    /// The client the session was opened with (for close).
    client: Client,
    /// The session id.
    id: u64,
    /// The TTL the server granted.
    ttl_ms: i64,
    /// The keep-alive task's view of the session.
    state: watch::Receiver<SessionState>,
    /// Lets `close` publish `Closed`.
    state_tx: watch::Sender<SessionState>,
    /// The keep-alive task; aborted on drop and on close.
    task: JoinHandle<()>,
}

impl Client {
    /// Opens a session with the requested TTL (0: the server's default) and starts
    /// keeping it alive in a background task.
    pub async fn open_session(&self, ttl_ms: i64) -> Result<Session, Error> {
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
    /// or by [`Client::open_session_raw`]). The state starts as `Alive` and turns
    /// `Expired` on the first ping if the server no longer knows the session.
    pub fn attach(client: Client, id: u64, ttl_ms: i64) -> Session {
        let (state_tx, state) = watch::channel(SessionState::Alive);
        let task = tokio::spawn(keep_alive_loop(
            client.clone(),
            id,
            ttl_ms,
            state_tx.clone(),
        ));
        Session {
            client,
            id,
            ttl_ms,
            state,
            state_tx,
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

    /// The current state.
    pub fn state(&self) -> SessionState {
        *self.state.borrow()
    }

    /// A receiver of state changes (`changed().await`, `wait_for(...)`).
    pub fn state_watch(&self) -> watch::Receiver<SessionState> {
        self.state.clone()
    }

    /// Waits until the session has ended (expired or closed) and returns how.
    pub async fn ended(&self) -> SessionState {
        let mut state = self.state.clone();
        let ended = match state.wait_for(|s| s.is_ended()).await {
            Ok(s) => *s,
            // The sender lives in `self`, so this cannot happen while `self` exists.
            Err(_) => SessionState::Closed,
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
        if result.is_ok() {
            self.state_tx.send_replace(SessionState::Closed);
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

async fn keep_alive_loop(client: Client, id: u64, ttl_ms: i64, state: watch::Sender<SessionState>) {
    let interval = ping_interval(ttl_ms);
    let policy = reconnect_policy(interval);
    let mut failures = 0u32;
    loop {
        match run_stream(&client, id, interval, &state).await {
            StreamEnd::Expired => {
                state.send_replace(SessionState::Expired);
                return;
            }
            StreamEnd::Broken { answered } => {
                failures = if answered {
                    1
                } else {
                    failures.saturating_add(1)
                };
                set_state(&state, SessionState::Reconnecting);
                tokio::time::sleep(policy.delay(failures)).await;
            }
        }
    }
}

/// Runs one KeepAlive stream until it ends: pings every `interval`, publishes `Alive`
/// on every answer, and gives up on a stream silent for two intervals.
async fn run_stream(
    client: &Client,
    id: u64,
    interval: Duration,
    state: &watch::Sender<SessionState>,
) -> StreamEnd {
    let (tx, rx) = mpsc::channel(4);
    // Each ping carries the newest zxid this client has seen (the session's Open at
    // least), so a server still catching up waits instead of calling it expired.
    let ping = || KeepAliveRequest {
        session_id: id,
        min_zxid: client.last_seen_zxid(),
    };
    // Queued before the call so that the server sees a ping at once.
    if tx.send(ping()).await.is_err() {
        return StreamEnd::Broken { answered: false };
    }
    let mut responses = match client.sessions().keep_alive(ReceiverStream::new(rx)).await {
        Ok(resp) => resp.into_inner(),
        Err(status) => return end_of(read_err(status), false),
    };
    let mut ticker = tokio::time::interval_at(Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut answered = false;
    let mut last_answer = Instant::now();
    loop {
        tokio::select! {
            _ = ticker.tick() => {
                if last_answer.elapsed() > interval * 2 || tx.send(ping()).await.is_err() {
                    return StreamEnd::Broken { answered };
                }
            }
            msg = responses.message() => match msg {
                Ok(Some(resp)) => {
                    if is_expired(&resp, id) {
                        return StreamEnd::Expired;
                    }
                    answered = true;
                    last_answer = Instant::now();
                    set_state(state, SessionState::Alive);
                }
                Ok(None) => return StreamEnd::Broken { answered },
                Err(status) => return end_of(read_err(status), answered),
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

/// Publishes `new` only when it differs, so watchers wake on changes, not on pings.
fn set_state(state: &watch::Sender<SessionState>, new: SessionState) {
    state.send_if_modified(|current| {
        if *current == new || current.is_ended() {
            false
        } else {
            *current = new;
            true
        }
    });
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
    fn ended_states_are_sticky() {
        let (tx, rx) = watch::channel(SessionState::Alive);
        set_state(&tx, SessionState::Reconnecting);
        assert_eq!(*rx.borrow(), SessionState::Reconnecting);
        tx.send_replace(SessionState::Expired);
        set_state(&tx, SessionState::Alive);
        assert_eq!(*rx.borrow(), SessionState::Expired);
    }
}
