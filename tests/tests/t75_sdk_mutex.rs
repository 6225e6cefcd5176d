//! The SDK's lock recipes (Mutex, SemaphoreMutex, Semaphore) against a real server:
//! re-entrancy, release on drop, fair order, timeouts that leave no waiter, fenced
//! writes after release and expiry, leases, and holds that end with the session.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use concord::{
    Client, ConnectionState, ErrorCode, Fence, Mutex, Semaphore, SemaphoreMutex, WriteOptions,
    ANY_VERSION,
};
use concord_tests::{eventually, Server, ServerOptions};

const WAIT: Duration = Duration::from_secs(10);
const SHORT: Duration = Duration::from_millis(200);

/// Waits until lock `name` has `n` members (holders and waiters).
async fn wait_members(c: &Client, name: &str, n: usize) {
    eventually(&format!("{name} has {n} members"), WAIT, || async {
        (c.lock_waiters(name).await.unwrap().len() == n).then_some(())
    })
    .await;
}

async fn fenced_set(
    c: &Client,
    path: &str,
    data: &str,
    fence: Fence,
) -> Result<u64, concord::Error> {
    let options = WriteOptions {
        fence: Some(fence),
        ..Default::default()
    };
    c.set_with(path, data, ANY_VERSION, &options)
        .await
        .map(|u| u.zxid)
}

#[tokio::test]
async fn t75_mutex_is_reentrant_through_its_handle() {
    let server = Server::start(ServerOptions::default());
    let c = server.sdk().await;
    let session = c.open_session(1000).await.unwrap();
    let (m, other) = (Mutex::new(&session, "re"), Mutex::new(&session, "re"));
    let first = m.acquire().await.unwrap();
    let second = m.acquire_timeout(SHORT).await.unwrap().expect("re-entered");
    assert_eq!(first.token(), second.token(), "one hold, two levels");
    assert_eq!(m.hold_count(), 2);
    assert_eq!(c.lock_waiters("re").await.unwrap().len(), 1, "queued once");
    first.release().await.unwrap();
    assert!(m.is_acquired(), "one level is still held");
    assert!(other.acquire_timeout(SHORT).await.unwrap().is_none());
    second.release().await.unwrap();
    assert!(!m.is_acquired());
    let got = other
        .acquire_timeout(WAIT)
        .await
        .unwrap()
        .expect("free now");
    assert!(got.token() > m.fence().map_or(0, |f| f.token));
    // Curator's style: keep the level, release through the handle.
    other.acquire().await.unwrap().keep();
    got.keep();
    other.release().await.unwrap();
    other.release().await.unwrap();
    assert_eq!(
        other.release().await.unwrap_err().code(),
        ErrorCode::BadArguments
    );
    wait_members(&c, "re", 0).await;
}

#[tokio::test]
async fn t75_dropped_guard_releases_and_another_handle_gets_it() {
    let server = Server::start(ServerOptions::default());
    let c = server.sdk().await;
    let a = c.open_session(1000).await.unwrap();
    let b = c.open_session(1000).await.unwrap();
    let (ma, mb) = (Mutex::new(&a, "drop"), Mutex::new(&b, "drop"));
    let guard = ma.acquire().await.unwrap();
    let waiter = tokio::spawn(async move {
        let g = mb.acquire().await.unwrap();
        (g.token(), g.key().to_string(), mb)
    });
    wait_members(&c, "drop", 2).await;
    let token = guard.token();
    drop(guard);
    let (next, key, mb) = tokio::time::timeout(WAIT, waiter).await.unwrap().unwrap();
    assert!(next > token);
    assert!(!ma.is_acquired());
    // The guard returned to the task was dropped there: released too.
    wait_members(&c, "drop", 0).await;
    assert!(!mb.is_acquired());
    assert!(!c.validate(&key, next).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t75_waiters_get_the_mutex_in_queue_order() {
    const WAITERS: usize = 5;
    let server = Server::start(ServerOptions::default());
    let c = server.sdk().await;
    let session = Arc::new(c.open_session(1000).await.unwrap());
    let holder = Mutex::new(&session, "fair");
    let first = holder.acquire().await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(WAITERS);
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let (session, tx) = (Arc::clone(&session), tx.clone());
        tasks.push(tokio::spawn(async move {
            let m = Mutex::new(&session, "fair");
            let g = m.acquire().await.unwrap();
            tx.send((i, g.token())).await.unwrap();
            g.release().await.unwrap();
        }));
        // Each queues before the next starts.
        wait_members(&c, "fair", i + 2).await;
    }
    first.release().await.unwrap();
    let mut order = Vec::new();
    for _ in 0..WAITERS {
        order.push(
            tokio::time::timeout(WAIT, rx.recv())
                .await
                .unwrap()
                .unwrap(),
        );
    }
    let indices: Vec<usize> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(indices, (0..WAITERS).collect::<Vec<_>>(), "FIFO");
    assert!(order.windows(2).all(|w| w[0].1 < w[1].1), "tokens grow");
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test]
async fn t75_acquire_timeout_leaves_no_waiter() {
    let server = Server::start(ServerOptions::default());
    let c = server.sdk().await;
    let session = c.open_session(1000).await.unwrap();
    let holder = Mutex::new(&session, "t");
    let _held = holder.acquire().await.unwrap();
    for m in [Mutex::new(&session, "t"), Mutex::new(&session, "t")] {
        assert!(m.acquire_timeout(SHORT).await.unwrap().is_none());
        assert!(m.acquire_timeout(Duration::ZERO).await.unwrap().is_none());
        assert!(!m.is_acquired());
    }
    let waiters = c.lock_waiters("t").await.unwrap();
    assert_eq!(waiters.len(), 1, "only the holder: {waiters:?}");
}

#[tokio::test]
async fn t75_fenced_writes_fail_after_release_and_after_expiry() {
    let server = Server::start(ServerOptions::default());
    let c = server.sdk().await;
    c.create("/res", "", Default::default()).await.unwrap();
    let session = c.open_session(1000).await.unwrap();
    let m = Mutex::new(&session, "fence");
    let guard = m.acquire().await.unwrap();
    let fence = guard.fence();
    assert_eq!(m.fence(), Some(fence.clone()));
    fenced_set(&c, "/res", "held", fence.clone()).await.unwrap();
    guard.release().await.unwrap();
    let err = fenced_set(&c, "/res", "stale", fence).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Fenced, "{err}");

    // A holder whose session expires (its keep-alives stop) is fenced too.
    let doomed = c.open_session(300).await.unwrap();
    let m = Mutex::new(&doomed, "fence");
    let guard = m.acquire().await.unwrap();
    let fence = guard.fence();
    drop(doomed);
    // The Session handle is gone (its keep-alive task ends): treated as Lost.
    eventually("the hold is not reported", WAIT, || async {
        (!m.is_acquired()).then_some(())
    })
    .await;
    eventually("the hold expires", WAIT, || async {
        (!c.validate(&fence.key, fence.token).await.unwrap()).then_some(())
    })
    .await;
    let err = fenced_set(&c, "/res", "late", fence).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Fenced, "{err}");
    assert_eq!(
        c.get("/res", Default::default()).await.unwrap().data,
        b"held"
    );
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t75_semaphore_mutex_is_not_reentrant() {
    let server = Server::start(ServerOptions::default());
    let c = server.sdk().await;
    let session = c.open_session(1000).await.unwrap();
    let m = Arc::new(SemaphoreMutex::new(&session, "sm"));
    let first = m.acquire().await.unwrap();
    assert!(m.is_acquired());
    assert!(
        m.acquire_timeout(SHORT).await.unwrap().is_none(),
        "not re-entrant"
    );
    wait_members(&c, "sm", 1).await;
    // A second acquire through the handle (another task) queues behind the first.
    let again = {
        let m = Arc::clone(&m);
        tokio::spawn(async move { m.acquire().await.unwrap().token() })
    };
    wait_members(&c, "sm", 2).await;
    let token = first.token();
    first.release().await.unwrap();
    let next = tokio::time::timeout(WAIT, again).await.unwrap().unwrap();
    assert!(next > token);
    // Its guard was dropped in the task: released.
    wait_members(&c, "sm", 0).await;
    assert!(!m.is_acquired());
    assert_eq!(
        m.release().await.unwrap_err().code(),
        ErrorCode::BadArguments
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t75_semaphore_admits_exactly_its_permits() {
    const PERMITS: u32 = 3;
    let server = Server::start(ServerOptions::default());
    let c = server.sdk().await;
    let a = c.open_session(1000).await.unwrap();
    let b = c.open_session(1000).await.unwrap();
    let (sa, sb) = (
        Semaphore::new(&a, "sem", PERMITS),
        Semaphore::new(&b, "sem", PERMITS),
    );
    let mut leases = sa.acquire_many(PERMITS).await.unwrap();
    let mut tokens: Vec<u64> = leases.iter().map(|l| l.token()).collect();
    tokens.dedup();
    assert_eq!(tokens.len(), PERMITS as usize, "a token per lease");
    assert_eq!(sa.holders().await.unwrap().len(), PERMITS as usize);
    assert!(
        sb.acquire_timeout(SHORT).await.unwrap().is_none(),
        "no fourth"
    );
    assert!(sb.acquire_many_timeout(2, SHORT).await.unwrap().is_none());
    wait_members(&c, "sem", PERMITS as usize).await;
    let other = Semaphore::new(&b, "sem", PERMITS + 1);
    assert_eq!(
        other.acquire().await.unwrap_err().code(),
        ErrorCode::BadArguments,
        "users of a name agree on its permits"
    );
    // A waiter gets the permit a dropped lease frees.
    let waiting = tokio::spawn(async move { sb.acquire().await.unwrap().token() });
    wait_members(&c, "sem", PERMITS as usize + 1).await;
    drop(leases.pop());
    let token = tokio::time::timeout(WAIT, waiting).await.unwrap().unwrap();
    assert!(tokens.iter().all(|t| *t < token));
    sa.return_all(leases).await.unwrap();
    wait_members(&c, "sem", 0).await;
    assert_eq!(
        sa.acquire_many(PERMITS + 1).await.unwrap_err().code(),
        ErrorCode::BadArguments
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t75_lost_session_ends_holds_and_waits() {
    let server = Server::start(ServerOptions::default());
    let c = server.sdk().await;
    c.create("/res", "", Default::default()).await.unwrap();
    let session = c.open_session(1000).await.unwrap();
    let held = Mutex::new(&session, "lost");
    let guard = held.acquire().await.unwrap();
    let sem = Semaphore::new(&session, "lost-sem", 2);
    let lease = sem.acquire().await.unwrap();
    let waiting = {
        let m = Mutex::new(&session, "lost");
        tokio::spawn(async move { m.acquire().await.map(|g| g.token()) })
    };
    wait_members(&c, "lost", 2).await;
    // The session ends on the server (closed by someone else): the client sees Lost.
    c.close_session(session.id()).await.unwrap();
    assert_eq!(session.ended().await, ConnectionState::Lost);
    let err = tokio::time::timeout(WAIT, waiting).await.unwrap().unwrap();
    assert_eq!(err.unwrap_err().code(), ErrorCode::SessionExpired);
    assert!(!held.is_acquired() && !guard.is_acquired() && !lease.is_valid());
    let err = held.acquire().await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::SessionExpired);
    let err = fenced_set(&c, "/res", "x", guard.fence())
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Fenced);
    // Releasing after the end is a no-op, not an error.
    guard.release().await.unwrap();
    held.release().await.unwrap();
    sem.return_lease(lease).await.unwrap();
    // Others get it at once.
    let fresh = c.open_session(1000).await.unwrap();
    let m = Mutex::new(&fresh, "lost");
    assert!(m.acquire_timeout(Duration::ZERO).await.unwrap().is_some());
}

#[tokio::test]
async fn t75_a_hold_survives_suspended() {
    let server = Server::start(ServerOptions::default());
    let c = server.sdk().await;
    let session = c.open_session(1000).await.unwrap();
    let m = Mutex::new(&session, "stall");
    let guard = m.acquire().await.unwrap();
    let mut states = session.listen();
    // A stall shorter than the TTL: Suspended (at half of it), then Reconnected.
    server.signal("STOP");
    let suspended = tokio::time::timeout(WAIT, states.next()).await.unwrap();
    server.signal("CONT");
    assert_eq!(suspended, Some(ConnectionState::Suspended));
    assert!(m.is_acquired(), "a hold survives Suspended");
    let back = tokio::time::timeout(WAIT, states.next()).await.unwrap();
    assert_eq!(back, Some(ConnectionState::Reconnected));
    assert!(guard.is_acquired() && guard.validate().await.unwrap());
    guard.release().await.unwrap();
}

/// How long an acquire and a release of a free lock take here (the median of five):
/// about twice the time the server takes to answer an acquire.
async fn round_time<F, Fut>(mut acquire_and_release: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut rounds = Vec::new();
    for _ in 0..5 {
        let start = std::time::Instant::now();
        acquire_and_release().await;
        rounds.push(start.elapsed());
    }
    rounds.sort();
    rounds[2]
}

/// When the `n`th of every `count` cancelled acquires is dropped: every point from 0
/// to `round` (about twice an answer's time), so that some are dropped just as the
/// server answers them.
fn cancel_after(n: u32, count: u32, round: Duration) -> Duration {
    round * (n % count) / count
}

/// Drops acquires of a free lock at every point of their first milliseconds, the
/// moment the server answers them included: none of them may leave the lock held
/// (an answered Acquire whose answer is dropped holds it until the session ends,
/// unless the SDK sends it once more and releases it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t75_dropped_acquires_leave_the_lock_free() {
    let server = Server::start(ServerOptions::default());
    let c = server.sdk().await;
    let a = c.open_session(5000).await.unwrap();
    let b = c.open_session(5000).await.unwrap();
    let mutex = Mutex::new(&a, "dropped");
    let semaphore_mutex = SemaphoreMutex::new(&a, "dropped");
    let round =
        round_time(|| async { mutex.acquire().await.unwrap().release().await.unwrap() }).await;
    let (mut got, mut dropped) = (0, 0);
    // Until 80 were dropped (at most 1000 tries: answers vary in time here).
    for n in 0..1000 {
        if dropped >= 80 {
            break;
        }
        let acquire = async {
            if n % 2 == 0 {
                mutex.acquire().await
            } else {
                semaphore_mutex.acquire().await
            }
        };
        match tokio::time::timeout(cancel_after(n, 41, round), acquire).await {
            Ok(guard) => {
                guard.unwrap().release().await.unwrap();
                got += 1;
            }
            Err(_) => dropped += 1,
        }
    }
    assert!(
        dropped >= 30,
        "only {dropped} of {} acquires were dropped",
        got + dropped
    );
    eprintln!("round {round:?}: {got} acquires held, {dropped} dropped");
    wait_members(&c, "dropped", 0).await;
    let other = Mutex::new(&b, "dropped");
    let guard = other
        .acquire_timeout(WAIT)
        .await
        .unwrap()
        .expect("another session takes the lock at once");
    guard.release().await.unwrap();
}

/// The same for a semaphore's leases (two permits, one held throughout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t75_dropped_lease_acquires_leave_their_permits_free() {
    let server = Server::start(ServerOptions::default());
    let c = server.sdk().await;
    let a = c.open_session(5000).await.unwrap();
    let b = c.open_session(5000).await.unwrap();
    let pool = Semaphore::new(&a, "dropped-pool", 2);
    let kept = pool.acquire().await.unwrap();
    let round =
        round_time(|| async { pool.acquire().await.unwrap().release().await.unwrap() }).await;
    let (mut got, mut dropped) = (0, 0);
    for n in 0..1000 {
        if dropped >= 80 {
            break;
        }
        match tokio::time::timeout(cancel_after(n, 41, round), pool.acquire()).await {
            Ok(lease) => {
                lease.unwrap().release().await.unwrap();
                got += 1;
            }
            Err(_) => dropped += 1,
        }
    }
    assert!(
        dropped >= 30,
        "only {dropped} of {} acquires were dropped",
        got + dropped
    );
    eprintln!("round {round:?}: {got} leases held, {dropped} dropped");
    // One snapshot of the queue: the kept lease, and nothing else (a reclaim still
    // under way may add a place for a moment, which it then removes).
    eventually("only the kept lease is left", WAIT, || async {
        let members = c.lock_waiters("dropped-pool").await.unwrap();
        (members.len() == 1 && members[0].key == kept.key()).then_some(())
    })
    .await;
    let other = Semaphore::new(&b, "dropped-pool", 2);
    let lease = other
        .acquire_timeout(WAIT)
        .await
        .unwrap()
        .expect("another session gets the free permit at once");
    lease.release().await.unwrap();
    kept.release().await.unwrap();
}
