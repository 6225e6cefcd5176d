//! The SDK's connection states against real servers: a short stall of the server
//! (SIGSTOP for less than the TTL) suspends the session and reconnects it with its
//! ephemerals; a long one, or the server's word, loses it; and a session whose
//! client knows every server of a 3-server ensemble outlives the leader's death and
//! moves off a stalled server.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use concord::{Client, ConnectionState, CreateOptions, ErrorCode, ReadOptions, StateListener};
use concord_tests::{eventually, Ensemble, Server, ServerOptions};
use tokio::time::{timeout, Instant};

use ConnectionState::{Lost, Reconnected, Suspended};

const LEADER_WAIT: Duration = Duration::from_secs(20);

/// A server whose TTL range admits the TTLs used here.
fn server(ttl_max_ms: u64) -> Server {
    Server::start(ServerOptions {
        session_ttl_ms: Some((100, ttl_max_ms)),
        ..ServerOptions::default()
    })
}

/// The listener's next state, or a panic naming `what` after `within`.
async fn next_state(listener: &mut StateListener, within: Duration, what: &str) -> ConnectionState {
    match timeout(within, listener.next()).await {
        Ok(Some(state)) => state,
        Ok(None) => panic!("the listener ended while waiting for {what}"),
        Err(_) => panic!("no state change within {within:?} while waiting for {what}"),
    }
}

/// Asserts that the listener yields nothing for `quiet`.
async fn no_more_states(listener: &mut StateListener, quiet: Duration) {
    if let Ok(state) = timeout(quiet, listener.next()).await {
        panic!("unexpected state change {state:?}");
    }
}

/// Whether `path` exists, read through `client`.
async fn exists(client: &Client, path: &str) -> bool {
    let read = client.exists(path, ReadOptions::default()).await.unwrap();
    read.stat.is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t78_a_short_stall_suspends_then_reconnects_with_the_ephemerals() {
    let ttl_ms = 2_000;
    let server = server(10_000);
    let client = Client::connect(server.endpoint()).await.unwrap();
    let session = client.open_session(ttl_ms).await.unwrap();
    assert_eq!(session.ttl_ms(), ttl_ms);
    let mut listener = session.listen();
    let options = CreateOptions::ephemeral(session.id(), false);
    client.create("/eph", "mine", options).await.unwrap();
    let ttl = Duration::from_millis(ttl_ms as u64);

    // Stalled: pings go unanswered. Suspended comes at half the TTL without an
    // answer; the server resumes as soon as the client says so, well within the TTL.
    server.signal("STOP");
    let stopped = Instant::now();
    let first = next_state(&mut listener, ttl, "Suspended").await;
    // (Read before the server resumes: its first answer reconnects.)
    let state = session.state();
    server.signal("CONT");
    let stalled_for = stopped.elapsed();
    assert_eq!(first, Suspended);
    assert_eq!(state, Suspended);
    assert!(stalled_for < ttl, "stalled for {stalled_for:?}");

    let second = next_state(&mut listener, ttl, "Reconnected").await;
    assert_eq!(second, Reconnected);
    assert_eq!(session.state(), Reconnected);
    // The same session, with its ephemeral.
    assert!(exists(&client, "/eph").await, "the ephemeral is gone");
    let info = client.session_info(session.id()).await.unwrap();
    assert_eq!(info.ephemerals, vec!["/eph".to_owned()]);
    // Exactly those two: pings are answered again, so nothing follows for a TTL.
    no_more_states(&mut listener, ttl).await;
    assert!(session.state().is_connected());
    session.close().await.unwrap();
    assert!(!exists(&client, "/eph").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t78_a_stall_longer_than_the_ttl_loses_the_session() {
    let ttl_ms = 1_000;
    let server = server(10_000);
    let client = Client::connect(server.endpoint()).await.unwrap();
    let session = client.open_session(ttl_ms).await.unwrap();
    let mut listener = session.listen();
    let options = CreateOptions::ephemeral(session.id(), false);
    client.create("/eph", "mine", options).await.unwrap();
    let ttl = Duration::from_millis(ttl_ms as u64);

    server.signal("STOP");
    let stopped = Instant::now();
    assert_eq!(
        next_state(&mut listener, ttl * 2, "Suspended").await,
        Suspended
    );
    assert_eq!(next_state(&mut listener, ttl * 2, "Lost").await, Lost);
    // No answer for the give-up time (twice the TTL), and the stall began at most a
    // ping interval after the last answer (before issue 46: a whole TTL).
    assert!(stopped.elapsed() >= ttl * 5 / 3, "lost too early");
    server.signal("CONT");
    assert_eq!(session.state(), Lost);
    assert_eq!(session.ended().await, Lost);
    assert_eq!(listener.next().await, None);

    // The server agrees: the session expires and its ephemeral goes with it.
    eventually("the ephemeral expires", Duration::from_secs(10), || async {
        (!exists(&client, "/eph").await).then_some(())
    })
    .await;
    let err = client.session_info(session.id()).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::SessionExpired);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t78_the_server_saying_expired_loses_the_session_before_the_ttl() {
    // A long TTL: Lost must come from the server's answer, not from silence.
    let ttl_ms = 9_000;
    let server = server(10_000);
    let client = Client::connect(server.endpoint()).await.unwrap();
    let session = client.open_session(ttl_ms).await.unwrap();
    let mut listener = session.listen();
    let admin = Client::connect(server.endpoint()).await.unwrap();
    admin.close_session(session.id()).await.unwrap();
    let closed = Instant::now();
    // The next ping (a third of the TTL at most) is answered "expired".
    let within = Duration::from_millis(ttl_ms as u64 / 2);
    assert_eq!(next_state(&mut listener, within, "Lost").await, Lost);
    assert!(closed.elapsed() < within);
    assert_eq!(session.state(), Lost);
    assert_eq!(listener.next().await, None);
    // A closed session cannot be closed again.
    let err = session.close().await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::SessionExpired);
}

/// Leader kills in the ensemble test (the killed server is restarted before the
/// next): the keep-alive stream may sit on the leader or on a follower.
const LEADER_KILLS: usize = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t78_a_session_outlives_the_leaders_death_in_an_ensemble() {
    // Tick 50 ms: a follower notices a dead leader after sync_limit (5 ticks) and an
    // election takes a few hundred milliseconds; a 3 s TTL leaves room for several.
    let ttl_ms = 3_000;
    let ttl = Duration::from_millis(ttl_ms as u64);
    let mut ensemble = Ensemble::start(
        3,
        ServerOptions {
            session_ttl_ms: Some((100, 10_000)),
            ..ServerOptions::default()
        },
    );
    ensemble.leader(LEADER_WAIT).await;
    let endpoints: Vec<String> = ensemble.servers.iter().map(|s| s.endpoint()).collect();
    let client = Client::connect(endpoints.join(",")).await.unwrap();
    let session = client.open_session(ttl_ms).await.unwrap();
    let mut listener = session.listen();
    let options = CreateOptions::ephemeral(session.id(), false);
    retried(|| client.create("/eph", "mine", options.clone())).await;

    for round in 0..LEADER_KILLS {
        let leader = ensemble.leader(LEADER_WAIT).await;
        ensemble.servers[leader].kill9();
        let survivors: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
        ensemble.leader_among(&survivors, LEADER_WAIT).await;
        let elected = Instant::now();
        // The new leader gave the session a fresh TTL when it took over: had no ping
        // reached it since, the session would expire within that TTL. Watch the
        // states until well past it.
        let mut states = Vec::new();
        let until = elected + ttl * 3 / 2;
        while let Ok(next) = tokio::time::timeout_at(until, listener.next()).await {
            let state = next.unwrap_or_else(|| panic!("the listener ended after {states:?}"));
            assert_ne!(
                state, Lost,
                "round {round}: the session was lost: {states:?}"
            );
            states.push(state);
        }
        eprintln!("round {round}: states across the failover: {states:?}");
        // Suspended possibly, then Reconnected: never Lost.
        let expected: Vec<ConnectionState> = [Suspended, Reconnected]
            .into_iter()
            .cycle()
            .take(states.len())
            .collect();
        assert_eq!(states, expected, "round {round}: states out of order");
        assert!(session.state().is_connected(), "{:?}", session.state());

        // The session lives on the new leader, with its ephemeral.
        let info = retried(|| client.session_info(session.id())).await;
        assert_eq!(info.ephemerals, vec!["/eph".to_owned()]);
        for &i in &survivors {
            let one = Client::connect(endpoints[i].clone()).await.unwrap();
            let read = ReadOptions::at_least(client.last_seen_zxid());
            let seen = one.exists("/eph", read).await.unwrap();
            assert!(seen.stat.is_some(), "server {} lost the ephemeral", i + 1);
        }
        ensemble.servers[leader].restart();
    }
    retried(|| client.close_session(session.id())).await;
}

/// Runs `call` until it succeeds or fails in a way that is not safe to retry (a call
/// that reached the dead server fails before it is sent; the next goes elsewhere).
async fn retried<T, F, Fut>(mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, concord::Error>>,
{
    for _ in 0..50 {
        match call().await {
            Ok(v) => return v,
            Err(e) if e.is_retry_safe() => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(e) => panic!("{e}"),
        }
    }
    panic!("still failing after 50 tries");
}

/// Sessions in the stalled-server test, all on one client: each finds the stall on
/// its own, and the client must move once, not once per session.
const STALL_SESSIONS: usize = 12;

/// Regression: a keep-alive stream reopened onto a stalled server (SIGSTOP: its
/// connection stays open, nothing is answered) used to wait there until the session
/// was lost, while the other servers of the list were fine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t78_sessions_move_off_a_stalled_server() {
    let ttl_ms = 2_000;
    let ensemble = Ensemble::start(
        3,
        ServerOptions {
            session_ttl_ms: Some((100, 10_000)),
            ..ServerOptions::default()
        },
    );
    let leader = ensemble.leader(LEADER_WAIT).await;
    // A follower: the other two remain a quorum with their leader.
    let stalled = (leader + 1) % 3;
    let endpoints: Vec<String> = ensemble.servers.iter().map(|s| s.endpoint()).collect();
    // The client starts on the server about to stall.
    let mut in_order = endpoints;
    in_order.rotate_left(stalled);
    let client = Client::builder()
        .endpoints(in_order)
        .randomize_hosts(false)
        .connect()
        .await
        .unwrap();
    let id_of = |client: Client| async move { client.status().await.unwrap().server_id };
    let stalled_id = id_of(client.clone()).await;
    let mut sessions = Vec::new();
    for _ in 0..STALL_SESSIONS {
        sessions.push(retried(|| client.open_session(ttl_ms)).await);
    }
    ensemble.servers[stalled].signal("STOP");
    // Every session either never noticed, or is suspended and reconnects; none is
    // lost, for twice the TTL.
    let until = Instant::now() + Duration::from_millis(2 * ttl_ms as u64);
    let mut watches: Vec<_> = sessions.iter().map(|s| s.state_watch()).collect();
    let lost = async {
        let any_lost = watches
            .iter_mut()
            .map(|w| Box::pin(async move { w.wait_for(|s| s.is_ended()).await.map(|s| *s) }));
        futures::future::select_all(any_lost).await.0
    };
    let outcome = tokio::time::timeout_at(until, lost).await;
    ensemble.servers[stalled].signal("CONT");
    let states: Vec<ConnectionState> = sessions.iter().map(|s| s.state()).collect();
    assert!(outcome.is_err(), "a session ended: {states:?}");
    assert!(states.iter().all(|s| s.is_connected()), "{states:?}");
    // The client's calls moved too.
    assert_ne!(
        id_of(client).await,
        stalled_id,
        "the client stayed on the stalled server"
    );
}
