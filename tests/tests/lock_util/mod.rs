//! Helpers shared by the lock tests on one server (t70) and on an ensemble (t84):
//! raw Lock RPCs, fenced writes, and the two scenarios both run — contention on a
//! fenced counter, and the holder that pauses past its session's expiry.

#![allow(dead_code, clippy::unwrap_used)]

use concord::{Client, ReadOptions, WriteOptions};
use concord_proto::v1 as pb;
use concord_proto::v1::lock_client::LockClient;
use concord_tests::Server;
use tonic::transport::Channel;

pub async fn client(server: &Server) -> Client {
    Client::connect(server.endpoint()).await.unwrap()
}

pub async fn lock_client(server: &Server) -> LockClient<Channel> {
    LockClient::new(server.channel().await)
}

pub fn acquire_req(
    name: &str,
    session_id: u64,
    owner: &str,
    timeout_ms: i64,
) -> pb::AcquireRequest {
    pb::AcquireRequest {
        name: name.into(),
        session_id,
        timeout_ms,
        owner_id: owner.into(),
        permits: 0,
    }
}

/// Acquires lock `name` (waiting as long as it takes); returns (key, token).
pub async fn acquire(
    l: &mut LockClient<Channel>,
    name: &str,
    sid: u64,
    owner: &str,
) -> (String, u64) {
    let r = l
        .acquire(acquire_req(name, sid, owner, 0))
        .await
        .unwrap()
        .into_inner();
    (r.key, r.token)
}

pub async fn release(l: &mut LockClient<Channel>, key: &str, token: u64) {
    l.release(pb::ReleaseRequest {
        key: key.into(),
        token,
    })
    .await
    .unwrap();
}

/// Write options carrying a lock fence.
pub fn fenced(key: &str, token: u64) -> WriteOptions {
    WriteOptions {
        fence: Some(concord::Fence {
            key: key.into(),
            token,
        }),
        ..WriteOptions::default()
    }
}

/// Each contender (a data client and a lock client, possibly on different servers)
/// increments `/counter` `cycles` times, reading it and writing it back fenced
/// while it holds lock "counter". Checks: no lost update, each value written once,
/// tokens growing in the order the lock was held (FIFO). Each contender's session
/// has a TTL of `session_ttl_ms`.
pub async fn fenced_counter(
    contenders: Vec<(Client, LockClient<Channel>)>,
    cycles: usize,
    session_ttl_ms: i64,
) {
    let total = (contenders.len() * cycles) as u64;
    let mut tasks = Vec::new();
    for (i, (c, mut l)) in contenders.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let session = c.open_session(session_ttl_ms).await.unwrap();
            let mut held = Vec::new();
            for _ in 0..cycles {
                let (key, token) = acquire(&mut l, "counter", session.id(), &format!("c{i}")).await;
                // Its server applied the grant, so every write made under the lock
                // before it: a plain read there is current.
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
    all.sort();
    let values: Vec<u64> = all.iter().map(|(v, _)| *v).collect();
    assert_eq!(
        values,
        (1..=total).collect::<Vec<_>>(),
        "lost or repeated update"
    );
    assert!(
        all.windows(2).all(|w| w[0].1 < w[1].1),
        "tokens not increasing in lock order"
    );
}

/// The clients of one paused-holder round: A holds and pauses, B waits and takes
/// over, A comes back late (each may talk to a different server).
pub struct PauseRound<'a> {
    pub a: &'a Client,
    pub a_locks: &'a mut LockClient<Channel>,
    pub b: &'a Client,
    pub b_locks: &'a mut LockClient<Channel>,
    pub b_session: u64,
    pub late: &'a Client,
}

/// A holds lock "res" and writes `/res` with its token, then stops its keep-alives;
/// B, queued behind it, gets the lock once A's session expires and writes; A comes
/// back over a fresh session with its old token and is refused as FENCED, leaving
/// B's data. `/res` must exist.
pub async fn paused_holder_round(r: PauseRound<'_>, round: usize) {
    let a_session = r.a.open_session(100).await.unwrap();
    let (a_key, a_token) = acquire(r.a_locks, "res", a_session.id(), "a").await;
    r.a.set_with("/res", format!("a{round}"), -1, &fenced(&a_key, a_token))
        .await
        .unwrap();
    drop(a_session);
    let (b_key, b_token) = acquire(r.b_locks, "res", r.b_session, "b").await;
    assert!(b_token > a_token);
    r.b.set_with("/res", format!("b{round}"), -1, &fenced(&b_key, b_token))
        .await
        .unwrap();
    let fresh = r.late.open_session(1000).await.unwrap();
    let stale = WriteOptions {
        session_id: fresh.id(),
        ..fenced(&a_key, a_token)
    };
    let err = r
        .late
        .set_with("/res", "a-late", -1, &stale)
        .await
        .unwrap_err();
    assert_eq!(err.code(), pb::ErrorCode::Fenced, "{err}");
    let data = r
        .late
        .get("/res", ReadOptions::default())
        .await
        .unwrap()
        .data;
    assert_eq!(String::from_utf8(data).unwrap(), format!("b{round}"));
    release(r.b_locks, &b_key, b_token).await;
    fresh.close().await.unwrap();
}
