//! Locks against a real server: mutual exclusion with fenced writes, the paused
//! holder, herd-free hand-off, waiters that die, time out or are cancelled, retries.

#![allow(clippy::unwrap_used)]

mod lock_util;

use std::time::Duration;

use concord::{ReadOptions, Session};
use concord_proto::v1 as pb;
use concord_proto::v1::lock_client::LockClient;
use concord_tests::{code_of, eventually, Server, ServerOptions};
use lock_util::{acquire, acquire_req, client, lock_client, release, PauseRound};
use tonic::transport::Channel;

async fn members(l: &mut LockClient<Channel>, name: &str) -> Vec<pb::LockEntry> {
    l.waiters(pb::WaitersRequest { name: name.into() })
        .await
        .unwrap()
        .into_inner()
        .entries
}

async fn wakeups(server: &Server) -> u64 {
    server
        .cluster()
        .await
        .status(pb::StatusRequest {})
        .await
        .unwrap()
        .into_inner()
        .queue_wakeups
}

/// Waits until lock `name` has exactly `n` members.
async fn wait_members(server: &Server, name: &str, n: usize) -> Vec<pb::LockEntry> {
    let mut l = lock_client(server).await;
    eventually(
        &format!("{name} has {n} members"),
        Duration::from_secs(10),
        || {
            let mut l = l.clone();
            async move {
                let m = members(&mut l, name).await;
                (m.len() == n).then_some(m)
            }
        },
    )
    .await;
    members(&mut l, name).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t70_mutual_exclusion_with_fenced_counter() {
    const CLIENTS: usize = 16;
    const CYCLES: usize = 128;
    let server = Server::start(ServerOptions::default());
    let c = client(&server).await;
    c.create("/counter", "0", Default::default()).await.unwrap();
    let mut contenders = Vec::new();
    for _ in 0..CLIENTS {
        contenders.push((client(&server).await, lock_client(&server).await));
    }
    lock_util::fenced_counter(contenders, CYCLES, 1000).await;
    let node = c.get("/counter", ReadOptions::default()).await.unwrap();
    let total = CLIENTS * CYCLES;
    assert_eq!(
        String::from_utf8(node.data).unwrap(),
        total.to_string(),
        "lost update"
    );
}

#[tokio::test]
async fn t70_paused_holder_is_fenced() {
    const ROUNDS: usize = 50;
    let server = Server::start(ServerOptions::default());
    let c = client(&server).await;
    c.create("/res", "", Default::default()).await.unwrap();
    let b_session = c.open_session(1000).await.unwrap();
    let (mut la, mut lb) = (lock_client(&server).await, lock_client(&server).await);
    for round in 0..ROUNDS {
        let r = PauseRound {
            a: &c,
            a_locks: &mut la,
            b: &c,
            b_locks: &mut lb,
            b_session: b_session.id(),
            late: &c,
        };
        lock_util::paused_holder_round(r, round).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t70_one_release_wakes_one_waiter() {
    const WAITERS: usize = 100;
    const HAND_OFFS: usize = 10;
    let server = Server::start(ServerOptions::default());
    let c = client(&server).await;
    let session = c.open_session(1000).await.unwrap();
    let sid = session.id();
    let mut l = lock_client(&server).await;
    let (first_key, first_token) = acquire(&mut l, "herd", sid, "holder").await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..WAITERS {
        let mut l = lock_client(&server).await;
        let tx = tx.clone();
        tokio::spawn(async move {
            let r = l
                .acquire(acquire_req("herd", sid, &format!("w{i:03}"), 0))
                .await;
            let _ = tx.send(r.map(|r| r.into_inner()));
        });
    }
    let queued = wait_members(&server, "herd", WAITERS + 1).await;
    let before = wakeups(&server).await;
    let (mut key, mut token) = (first_key, first_token);
    for (n, successor) in queued.iter().enumerate().skip(1).take(HAND_OFFS) {
        release(&mut l, &key, token).await;
        let next = rx.recv().await.unwrap().unwrap();
        assert_eq!(next.key, successor.key, "FIFO hand-off");
        assert_eq!(
            wakeups(&server).await - before,
            n as u64,
            "one release, one wake-up"
        );
        (key, token) = (next.key, next.token);
    }
    assert_eq!(members(&mut l, "herd").await.len(), WAITERS + 1 - HAND_OFFS);
    assert!(rx.try_recv().is_err(), "nobody else got the lock");
    session.close().await.unwrap();
}

#[tokio::test]
async fn t70_dead_waiter_leaves_and_order_holds() {
    let server = Server::start(ServerOptions::default());
    let c = client(&server).await;
    let alive = c.open_session(1000).await.unwrap();
    let mut l = lock_client(&server).await;
    let (h_key, h_token) = acquire(&mut l, "q", alive.id(), "h").await;
    let spawn_waiter = |owner: &'static str, sid: u64| {
        let mut l = l.clone();
        tokio::spawn(async move { l.acquire(acquire_req("q", sid, owner, 0)).await })
    };
    let w1 = spawn_waiter("w1", alive.id());
    wait_members(&server, "q", 2).await;
    let doomed = c.open_session(100).await.unwrap();
    let w2 = spawn_waiter("w2", doomed.id());
    wait_members(&server, "q", 3).await;
    let w3 = spawn_waiter("w3", alive.id());
    wait_members(&server, "q", 4).await;
    // w2's session stops its keep-alives and expires: it leaves the queue.
    drop(doomed);
    let err = w2.await.unwrap().unwrap_err();
    assert_eq!(code_of(&err), "SESSION_EXPIRED", "{err}");
    let left: Vec<String> = wait_members(&server, "q", 3)
        .await
        .into_iter()
        .map(|e| e.owner_id)
        .collect();
    assert_eq!(left, ["h", "w1", "w3"]);
    release(&mut l, &h_key, h_token).await;
    let got1 = w1.await.unwrap().unwrap().into_inner();
    assert_eq!(members(&mut l, "q").await[0].owner_id, "w1");
    release(&mut l, &got1.key, got1.token).await;
    let got3 = w3.await.unwrap().unwrap().into_inner();
    assert!(got3.token > got1.token);
    assert_eq!(members(&mut l, "q").await.len(), 1);
}

#[tokio::test]
async fn t70_timeout_and_cancel_leave_no_node() {
    let server = Server::start(ServerOptions::default());
    let c = client(&server).await;
    let session = c.open_session(1000).await.unwrap();
    let mut l = lock_client(&server).await;
    acquire(&mut l, "t", session.id(), "h").await;
    let err = l
        .acquire(acquire_req("t", session.id(), "w", 200))
        .await
        .unwrap_err();
    assert_eq!(code_of(&err), "TIMEOUT");
    assert_eq!(members(&mut l, "t").await.len(), 1, "timed-out waiter left");
    // A call the client gives up on (the gRPC call is cancelled).
    let mut l2 = l.clone();
    let call =
        tokio::spawn(async move { l2.acquire(acquire_req("t", session.id(), "x", 0)).await });
    wait_members(&server, "t", 2).await;
    call.abort();
    let _ = call.await;
    wait_members(&server, "t", 1).await;
}

/// Regression: an Acquire cancelled while its join was still being committed left
/// its node in the queue until the session ended.
#[tokio::test]
async fn t70_a_call_cancelled_during_its_join_leaves_no_node() {
    let server = Server::start(ServerOptions::default());
    let c = client(&server).await;
    let session = c.open_session(10_000).await.unwrap();
    let mut l = lock_client(&server).await;
    acquire(&mut l, "j", session.id(), "h").await;
    // Cancel calls at every point of their first milliseconds: some before they are
    // sent, some while their join is committed, some while they wait.
    for i in 0..40u64 {
        let mut l2 = l.clone();
        let owner = format!("w{i}");
        let id = session.id();
        let call = tokio::spawn(async move { l2.acquire(acquire_req("j", id, &owner, 0)).await });
        tokio::time::sleep(Duration::from_micros(100 * (i % 20))).await;
        call.abort();
        let _ = call.await;
    }
    wait_members(&server, "j", 1).await;
}

#[tokio::test]
async fn t70_retry_adopts_try_acquire_validate_and_reserved_prefix() {
    let server = Server::start(ServerOptions::default());
    let c = client(&server).await;
    let a = c.open_session(1000).await.unwrap();
    let b = c.open_session(1000).await.unwrap();
    let mut l = lock_client(&server).await;
    let first = acquire(&mut l, "r", a.id(), "me").await;
    assert_eq!(
        acquire(&mut l, "r", a.id(), "me").await,
        first,
        "retry adopts"
    );
    assert_eq!(members(&mut l, "r").await.len(), 1);
    let err = l
        .try_acquire(acquire_req("r", b.id(), "b", 0))
        .await
        .unwrap_err();
    assert_eq!(code_of(&err), "LOCK_HELD");
    assert_eq!(members(&mut l, "r").await.len(), 1, "try queues nothing");
    let holder = l
        .holder(pb::HolderRequest { name: "r".into() })
        .await
        .unwrap()
        .into_inner()
        .holders;
    assert_eq!((holder.len(), holder[0].session_id), (1, a.id()));
    let valid = |l: &mut LockClient<Channel>, key: String, token| {
        let mut l = l.clone();
        async move {
            l.validate(pb::ValidateRequest { key, token })
                .await
                .unwrap()
                .into_inner()
                .valid
        }
    };
    assert!(valid(&mut l, first.0.clone(), first.1).await);
    assert!(!valid(&mut l, first.0.clone(), first.1 + 1).await);
    // Nobody forges a holder with plain writes; everybody may read.
    let err = c.set(&first.0, "forged", -1).await.unwrap_err();
    assert_eq!(err.code(), pb::ErrorCode::PermissionDenied);
    let err = c
        .create("/concord/locks/r/9", "", Default::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), pb::ErrorCode::PermissionDenied);
    assert!(c.get(&first.0, ReadOptions::default()).await.is_ok());
    release(&mut l, &first.0, first.1).await;
    assert!(!valid(&mut l, first.0.clone(), first.1).await);
    let got = l
        .try_acquire(acquire_req("r", b.id(), "b", 0))
        .await
        .unwrap()
        .into_inner();
    assert!(got.token > first.1);
}

#[tokio::test]
async fn t70_semaphore_has_permits_holders() {
    let server = Server::start(ServerOptions::default());
    let c = client(&server).await;
    let s: Session = c.open_session(1000).await.unwrap();
    let mut l = lock_client(&server).await;
    let req = |owner: &str| pb::AcquireRequest {
        permits: 2,
        ..acquire_req("sem", s.id(), owner, 0)
    };
    let a = l.acquire(req("a")).await.unwrap().into_inner();
    let b = l.acquire(req("b")).await.unwrap().into_inner();
    assert_ne!(a.token, b.token);
    let err = l.try_acquire(req("c")).await.unwrap_err();
    assert_eq!(code_of(&err), "LOCK_HELD");
    let err = l
        .acquire(pb::AcquireRequest {
            permits: 3,
            ..req("d")
        })
        .await
        .unwrap_err();
    assert_eq!(code_of(&err), "BAD_ARGUMENTS");
    let mut l2 = l.clone();
    let req_c = req("c");
    let c_call = tokio::spawn(async move { l2.acquire(req_c).await });
    wait_members(&server, "sem", 3).await;
    release(&mut l, &a.key, a.token).await;
    let got = c_call.await.unwrap().unwrap().into_inner();
    let holders = l
        .holder(pb::HolderRequest { name: "sem".into() })
        .await
        .unwrap()
        .into_inner()
        .holders;
    let keys: Vec<&str> = holders.iter().map(|h| h.key.as_str()).collect();
    assert_eq!(keys, [b.key.as_str(), got.key.as_str()]);
}
