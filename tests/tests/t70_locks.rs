//! Locks against a real server: mutual exclusion with fenced writes, the paused
//! holder, herd-free hand-off, waiters that die, time out or are cancelled, retries.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use concord::{Client, ReadOptions, Session, WriteOptions};
use concord_proto::v1 as pb;
use concord_proto::v1::lock_client::LockClient;
use concord_tests::{code_of, eventually, Server, ServerOptions};
use tonic::transport::Channel;

async fn lock_client(server: &Server) -> LockClient<Channel> {
    LockClient::new(server.channel().await)
}

fn acquire_req(name: &str, session_id: u64, owner: &str, timeout_ms: i64) -> pb::AcquireRequest {
    pb::AcquireRequest {
        name: name.into(),
        session_id,
        timeout_ms,
        owner_id: owner.into(),
        permits: 0,
    }
}

async fn acquire(l: &mut LockClient<Channel>, name: &str, sid: u64, owner: &str) -> (String, u64) {
    let r = l
        .acquire(acquire_req(name, sid, owner, 0))
        .await
        .unwrap()
        .into_inner();
    (r.key, r.token)
}

async fn release(l: &mut LockClient<Channel>, key: &str, token: u64) {
    l.release(pb::ReleaseRequest {
        key: key.into(),
        token,
    })
    .await
    .unwrap();
}

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

fn fenced(key: &str, token: u64) -> WriteOptions {
    WriteOptions {
        fence: Some(pb::Fence {
            key: key.into(),
            token,
        }),
        ..WriteOptions::default()
    }
}

async fn client(server: &Server) -> Client {
    Client::connect(server.endpoint()).await.unwrap()
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
    let mut tasks = Vec::new();
    for i in 0..CLIENTS {
        let c = client(&server).await;
        let mut l = lock_client(&server).await;
        tasks.push(tokio::spawn(async move {
            let session = c.open_session(1000).await.unwrap();
            let mut held = Vec::new();
            for _ in 0..CYCLES {
                let (key, token) = acquire(&mut l, "counter", session.id(), &format!("c{i}")).await;
                let node = c.get("/counter", ReadOptions::default()).await.unwrap();
                let n: u64 = String::from_utf8(node.data).unwrap().parse().unwrap();
                c.set_with("/counter", (n + 1).to_string(), -1, &fenced(&key, token))
                    .await
                    .unwrap();
                held.push((n + 1, token));
                release(&mut l, &key, token).await;
            }
            held
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let node = c.get("/counter", ReadOptions::default()).await.unwrap();
    let total = (CLIENTS * CYCLES) as u64;
    assert_eq!(
        String::from_utf8(node.data).unwrap(),
        total.to_string(),
        "lost update"
    );
    // Each value was written once, and tokens grow in the order the lock was held:
    // holders were served in the order they queued (FIFO).
    all.sort();
    let values: Vec<u64> = all.iter().map(|(v, _)| *v).collect();
    assert_eq!(values, (1..=total).collect::<Vec<_>>());
    assert!(
        all.windows(2).all(|w| w[0].1 < w[1].1),
        "tokens not increasing"
    );
}

#[tokio::test]
async fn t70_paused_holder_is_fenced() {
    const ROUNDS: usize = 50;
    let server = Server::start(ServerOptions::default());
    let c = client(&server).await;
    c.create("/res", "", Default::default()).await.unwrap();
    let b_session = c.open_session(1000).await.unwrap();
    let mut l = lock_client(&server).await;
    let mut rejections = 0;
    for round in 0..ROUNDS {
        // A holds the lock and writes through its fence.
        let a_session = c.open_session(100).await.unwrap();
        let (a_key, a_token) = acquire(&mut l, "res", a_session.id(), "a").await;
        c.set_with("/res", format!("a{round}"), -1, &fenced(&a_key, a_token))
            .await
            .unwrap();
        // A freezes: its keep-alives stop. B waits in line and gets the lock once A's
        // session expires.
        drop(a_session);
        let (b_key, b_token) = acquire(&mut l, "res", b_session.id(), "b").await;
        assert!(b_token > a_token);
        c.set_with("/res", format!("b{round}"), -1, &fenced(&b_key, b_token))
            .await
            .unwrap();
        // A wakes up and writes with its old token over a fresh session.
        let fresh = c.open_session(1000).await.unwrap();
        let stale = WriteOptions {
            session_id: fresh.id(),
            ..fenced(&a_key, a_token)
        };
        let err = c.set_with("/res", "a-late", -1, &stale).await.unwrap_err();
        assert_eq!(err.code(), pb::ErrorCode::Fenced, "{err}");
        rejections += 1;
        let data = c.get("/res", ReadOptions::default()).await.unwrap().data;
        assert_eq!(String::from_utf8(data).unwrap(), format!("b{round}"));
        release(&mut l, &b_key, b_token).await;
        fresh.close().await.unwrap();
    }
    assert_eq!(rejections, ROUNDS);
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
