//! The SDK against an in-process fake server: error parsing over the wire, paging,
//! session keep-alives (reconnect, expiry, close), watch resumption, and the client's
//! retries and deadlines.

mod fake;

use std::time::Duration;

use concord::proto::{EventKind, WatchEvent};
use concord::{
    ChildrenOptions, Client, ConnectionState, CreateOptions, ErrorCode, ReadOptions, RetryPolicy,
    WatchMessage, WatchOptions,
};
use fake::{concord_status, Shared};

/// Waits until `cond` holds on the fake's state, failing after five seconds.
async fn wait_until(state: &Shared, what: &str, cond: impl Fn(&fake::State) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        if cond(&state.lock().expect("lock")) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn event(zxid: u64, path: &str) -> WatchEvent {
    WatchEvent {
        zxid,
        kind: EventKind::Created as i32,
        path: path.to_string(),
        ..WatchEvent::default()
    }
}

#[tokio::test]
async fn t10_create_get_and_errors_over_the_wire() {
    let (endpoint, _state) = fake::start().await;
    let client = Client::connect(endpoint).await.expect("connect");
    let created = client
        .create("/a", "one", CreateOptions::default())
        .await
        .expect("create");
    assert_eq!((created.path.as_str(), created.zxid), ("/a", 1));
    let node = client
        .get("/a", ReadOptions::at_least(created.zxid))
        .await
        .expect("get");
    assert_eq!(node.data, b"one");

    let err = client
        .create("/a", "two", CreateOptions::default())
        .await
        .expect_err("exists");
    assert_eq!(err.code(), ErrorCode::NodeExists);
    assert_eq!(err.to_string(), "NODE_EXISTS: /a already exists");
    assert!(!err.is_retry_safe() && !err.is_indeterminate());

    let err = client
        .get("/nope", ReadOptions::default())
        .await
        .expect_err("missing");
    assert_eq!(err.code(), ErrorCode::NoNode);
    assert_eq!(err.message(), "/nope does not exist");
}

#[tokio::test]
async fn t11_children_follows_pages() {
    let (endpoint, _state) = fake::start().await;
    let client = Client::connect(endpoint).await.expect("connect");
    let options = ChildrenOptions {
        page_size: 2,
        ..ChildrenOptions::default()
    };
    let first = client.children_page("/", &options).await.expect("page");
    assert_eq!(first.children.len(), 2);
    assert_eq!(first.next_page_token, "2");
    let all = client.children("/", &options).await.expect("all pages");
    let names: Vec<&str> = all.children.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["c0", "c1", "c2", "c3", "c4"]);
    assert!(all.next_page_token.is_empty());
    assert_eq!(all.zxid, 104, "zxid of the last page");
}

#[tokio::test]
async fn t20_session_pings_and_reconnects_its_stream() {
    let (endpoint, state) = fake::start().await;
    state.lock().expect("lock").break_first_keep_alive = true;
    let client = Client::connect(endpoint).await.expect("connect");
    let session = client.open_session(300).await.expect("open");
    assert_eq!((session.id(), session.ttl_ms()), (0x42, 300));
    wait_until(&state, "pings on a second stream", |s| {
        s.keep_alive_streams >= 2 && s.pings >= 4
    })
    .await;
    assert_eq!(session.state(), ConnectionState::Connected);
    session.close().await.expect("close");
    assert_eq!(state.lock().expect("lock").closed, vec![0x42]);
}

#[tokio::test]
async fn t21_session_learns_it_expired() {
    let (endpoint, state) = fake::start().await;
    let client = Client::connect(endpoint).await.expect("connect");
    let session = client.open_session(150).await.expect("open");
    wait_until(&state, "a ping", |s| s.pings >= 1).await;
    state.lock().expect("lock").expire_sessions = true;
    let ended = tokio::time::timeout(Duration::from_secs(5), session.ended())
        .await
        .expect("expiry seen in time");
    assert_eq!(ended, ConnectionState::Lost);
    assert_eq!(session.state(), ConnectionState::Lost);
}

#[tokio::test]
async fn t22_dropping_a_session_stops_pinging_without_closing() {
    let (endpoint, state) = fake::start().await;
    let client = Client::connect(endpoint).await.expect("connect");
    let session = client.open_session(60).await.expect("open");
    wait_until(&state, "pings", |s| s.pings >= 2).await;
    drop(session);
    // The session's stream ends (every ping sent on it has landed by then)...
    wait_until(&state, "the KeepAlive stream to end", |s| {
        s.keep_alive_streams_ended == s.keep_alive_streams
    })
    .await;
    let (pings, streams) = {
        let s = state.lock().expect("lock");
        (s.pings, s.keep_alive_streams)
    };
    // ...and no new one opens: a live session would reconnect within its ping
    // interval (20 ms for a 60 ms TTL), so ten intervals without one is an absence.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let state = state.lock().expect("lock");
    assert_eq!(state.pings, pings, "pings after drop");
    assert_eq!(state.keep_alive_streams, streams, "a stream after drop");
    assert!(state.closed.is_empty());
}

fn resuming(path: &str) -> WatchOptions {
    WatchOptions {
        start_zxid: Some(0),
        resume: Some(RetryPolicy {
            attempts_max: 5,
            elapsed_max_ms: 5_000,
            delay_initial_ms: 5,
            delay_max_ms: 50,
        }),
        ..WatchOptions::path(path)
    }
}

async fn next_events(watch: &mut concord::Watch, n: usize) -> Vec<(u64, String)> {
    let mut seen = Vec::new();
    while seen.len() < n {
        let event = tokio::time::timeout(Duration::from_secs(5), watch.next_event())
            .await
            .expect("event in time")
            .expect("stream open")
            .expect("no error");
        seen.push((event.zxid, event.path));
    }
    seen
}

#[tokio::test]
async fn t30_watch_resumes_mid_txn_without_loss_or_duplicates() {
    let (endpoint, state) = fake::start().await;
    {
        let mut s = state.lock().expect("lock");
        // zxid 2 is one txn with three events (a multi).
        s.log = vec![
            event(1, "/a"),
            event(2, "/m1"),
            event(2, "/m2"),
            event(2, "/m3"),
            event(3, "/b"),
        ];
        // The first stream breaks after two of zxid 2's three events...
        let reset = tonic::Status::unavailable("connection reset");
        s.watch_breaks.insert(0, (3, reset));
        // ...and the second before it replays anything.
        let slow = concord_status(ErrorCode::SlowConsumer, tonic::Code::ResourceExhausted, "2");
        s.watch_breaks.insert(1, (0, slow));
    }
    let client = Client::connect(endpoint).await.expect("connect");
    let mut watch = client.watch(resuming("/")).await.expect("watch");
    let seen = next_events(&mut watch, 5).await;
    let want: Vec<(u64, String)> = [(1, "/a"), (2, "/m1"), (2, "/m2"), (2, "/m3"), (3, "/b")]
        .iter()
        .map(|(z, p)| (*z, p.to_string()))
        .collect();
    assert_eq!(seen, want);
    assert_eq!(watch.resumes(), 2);
    assert_eq!(watch.last_zxid(), Some(3));
    let starts = state.lock().expect("lock").watch_starts.clone();
    assert_eq!(starts, vec![Some(0), Some(1), Some(1)]);
}

#[tokio::test]
async fn t31_watch_resumes_after_a_complete_txn_from_its_zxid() {
    let (endpoint, state) = fake::start().await;
    {
        let mut s = state.lock().expect("lock");
        s.log = vec![event(1, "/a"), event(2, "/b"), event(3, "/c")];
        s.watch_breaks
            .insert(0, (2, tonic::Status::unavailable("gone")));
    }
    let client = Client::connect(endpoint).await.expect("connect");
    let mut watch = client.watch(resuming("/")).await.expect("watch");
    let seen = next_events(&mut watch, 3).await;
    let zxids: Vec<u64> = seen.iter().map(|(z, _)| *z).collect();
    assert_eq!(zxids, [1, 2, 3]);
    // The events' zxids are seen: later reads ask for at least them.
    assert_eq!(client.last_seen_zxid(), 3);
    // Zxid 2 had one event and may have had more: resume from 1 and skip it.
    assert_eq!(
        state.lock().expect("lock").watch_starts,
        vec![Some(0), Some(1)]
    );
}

#[tokio::test]
async fn t32_non_retryable_watch_error_ends_the_watch() {
    let (endpoint, state) = fake::start().await;
    {
        let mut s = state.lock().expect("lock");
        s.log = vec![event(1, "/a"), event(2, "/b")];
        let compacted =
            concord_status(ErrorCode::ZxidCompacted, tonic::Code::OutOfRange, "too old");
        s.watch_breaks.insert(0, (1, compacted));
    }
    let client = Client::connect(endpoint).await.expect("connect");
    let mut watch = client.watch(resuming("/")).await.expect("watch");
    assert!(matches!(
        watch.next().await,
        Some(Ok(WatchMessage::Started { .. }))
    ));
    assert!(matches!(
        watch.next().await,
        Some(Ok(WatchMessage::Event(_)))
    ));
    let err = watch.next().await.expect("an item").expect_err("the error");
    assert_eq!(err.code(), ErrorCode::ZxidCompacted);
    assert!(watch.next().await.is_none());
    assert_eq!(watch.resumes(), 0);
}

#[tokio::test]
async fn t33_plain_watch_ends_on_the_first_error() {
    let (endpoint, state) = fake::start().await;
    {
        let mut s = state.lock().expect("lock");
        s.log = vec![event(1, "/a"), event(2, "/b")];
        s.watch_breaks
            .insert(0, (1, tonic::Status::unavailable("gone")));
    }
    let client = Client::connect(endpoint).await.expect("connect");
    let options = WatchOptions {
        start_zxid: Some(0),
        ..WatchOptions::path("/")
    };
    let mut watch = client.watch(options).await.expect("watch");
    let first = watch.next_event().await.expect("item").expect("event");
    assert_eq!(first.zxid, 1);
    let err = watch.next_event().await.expect("item").expect_err("error");
    assert_eq!(err.code(), ErrorCode::Unavailable);
    assert!(watch.next_event().await.is_none());
    assert_eq!(state.lock().expect("lock").watch_starts.len(), 1);
}

fn unavailable() -> tonic::Status {
    concord_status(
        ErrorCode::Unavailable,
        tonic::Code::Unavailable,
        "no quorum",
    )
}

fn quick_retries() -> RetryPolicy {
    RetryPolicy {
        attempts_max: 5,
        elapsed_max_ms: 5_000,
        delay_initial_ms: 5,
        delay_max_ms: 20,
    }
}

#[tokio::test]
async fn t40_reads_are_retried_within_the_policy_and_sent_once_without_one() {
    let (endpoint, state) = fake::start().await;
    state
        .lock()
        .expect("lock")
        .nodes
        .insert("/a".into(), b"x".to_vec());
    let once = Client::connect(endpoint.clone()).await.expect("connect");
    state
        .lock()
        .expect("lock")
        .fail_next
        .push_back(unavailable());
    let err = once
        .get("/a", ReadOptions::default())
        .await
        .expect_err("failed once");
    assert_eq!(err.code(), ErrorCode::Unavailable);
    assert_eq!(state.lock().expect("lock").calls, 1);

    let retrying = Client::builder()
        .endpoint(endpoint.clone())
        .retry(quick_retries())
        .connect()
        .await
        .expect("connect");
    state
        .lock()
        .expect("lock")
        .fail_next
        .extend([unavailable(), unavailable()]);
    let node = retrying
        .get("/a", ReadOptions::default())
        .await
        .expect("third try");
    assert_eq!(node.data, b"x");
    assert_eq!(state.lock().expect("lock").calls, 4);
    // The policy's attempts bound the retries: the sixth failure is returned.
    state
        .lock()
        .expect("lock")
        .fail_next
        .extend((0..10).map(|_| unavailable()));
    let err = retrying
        .get("/a", ReadOptions::default())
        .await
        .expect_err("gave up");
    assert_eq!(err.code(), ErrorCode::Unavailable);
    assert_eq!(state.lock().expect("lock").calls, 4 + 6);
}

#[tokio::test]
async fn t41_a_write_of_unknown_outcome_is_retried_only_when_deduplicated() {
    let (endpoint, state) = fake::start().await;
    let client = Client::builder()
        .endpoint(endpoint)
        .retry(quick_retries())
        .connect()
        .await
        .expect("connect");
    // UNAVAILABLE from the server after a write was sent: it may have been applied.
    state
        .lock()
        .expect("lock")
        .fail_next
        .push_back(unavailable());
    let err = client
        .create("/plain", "", CreateOptions::default())
        .await
        .expect_err("not retried");
    assert!(err.is_indeterminate(), "{err:?}");
    assert_eq!(state.lock().expect("lock").calls, 1);
    state
        .lock()
        .expect("lock")
        .fail_next
        .push_back(unavailable());
    let deduplicated = CreateOptions {
        session_id: 7,
        request_id: 1,
        ..CreateOptions::default()
    };
    client
        .create("/retried", "", deduplicated)
        .await
        .expect("retried with the same request id");
    assert_eq!(state.lock().expect("lock").calls, 3);
}

#[tokio::test]
async fn t42_a_call_past_its_deadline_fails_with_timeout() {
    let (endpoint, state) = fake::start().await;
    {
        let mut s = state.lock().expect("lock");
        s.nodes.insert("/slow".into(), Vec::new());
        s.get_delay = Duration::from_secs(5);
    }
    let client = Client::builder()
        .endpoint(endpoint)
        .call_timeout(Duration::from_millis(100))
        .connect()
        .await
        .expect("connect");
    let started = tokio::time::Instant::now();
    let err = client
        .get("/slow", ReadOptions::default())
        .await
        .expect_err("past the deadline");
    assert_eq!(err.code(), ErrorCode::Timeout, "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the deadline did not apply"
    );
}

/// A NOT_LEADER naming the leader's client address, as a server without a leader
/// of its own to serve from may answer.
fn not_leader_naming(leader_addr: &str) -> tonic::Status {
    let mut status = concord_status(
        ErrorCode::NotLeader,
        tonic::Code::Unavailable,
        "no leader for 2000 ms: ask another server",
    );
    let metadata = status.metadata_mut();
    metadata.insert("concord-leader-id", "3".parse().expect("ascii"));
    metadata.insert("concord-leader-addr", leader_addr.parse().expect("ascii"));
    status
}

#[tokio::test]
async fn t43_a_not_leader_sends_the_retry_to_the_leader_it_names_when_listed() {
    let (a, state_a) = fake::start().await;
    let (b, state_b) = fake::start().await;
    let (c, state_c) = fake::start().await;
    state_c
        .lock()
        .expect("lock")
        .nodes
        .insert("/a".into(), b"x".to_vec());
    let named = c.trim_start_matches("http://");
    let client = Client::builder()
        .endpoints([a.clone(), b, c.clone()])
        .randomize_hosts(false)
        .retry(quick_retries())
        .connect()
        .await
        .expect("connect");
    state_a
        .lock()
        .expect("lock")
        .fail_next
        .push_back(not_leader_naming(named));
    let node = client
        .get("/a", ReadOptions::default())
        .await
        .expect("retried on the leader named");
    assert_eq!(node.data, b"x");
    let calls = |s: &fake::Shared| s.lock().expect("lock").calls;
    assert_eq!(
        (calls(&state_a), calls(&state_b), calls(&state_c)),
        (1, 0, 1),
        "the retry went to the named leader, not to the next server of the list"
    );
    // A name that is not in the list: on down the list, to the server after C.
    state_c
        .lock()
        .expect("lock")
        .fail_next
        .push_back(not_leader_naming("10.0.0.1:7181"));
    let err = client
        .get("/a", ReadOptions::default())
        .await
        .expect_err("A has no /a");
    assert_eq!(err.code(), ErrorCode::NoNode);
    assert_eq!(
        (calls(&state_a), calls(&state_b), calls(&state_c)),
        (2, 0, 2)
    );
}
