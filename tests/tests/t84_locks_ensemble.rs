//! Locks and elections on a 3-server ensemble: clients on every server contend for one
//! lock (fenced counter, FIFO tokens), a holder whose session dies is fenced while its
//! lock passes to a waiter on another server, and an election fails over with
//! Observe on a third server seeing every change in order.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use concord::{Client, ReadOptions, WriteOptions};
use concord_proto::v1 as pb;
use concord_proto::v1::election_client::ElectionClient;
use concord_proto::v1::lock_client::LockClient;
use concord_tests::{Ensemble, Server, ServerOptions};
use tokio_stream::StreamExt;
use tonic::transport::Channel;

const LEADER_WAIT: Duration = Duration::from_secs(20);

async fn client(server: &Server) -> Client {
    Client::connect(server.endpoint()).await.unwrap()
}

async fn acquire(l: &mut LockClient<Channel>, name: &str, sid: u64, owner: &str) -> (String, u64) {
    let r = l
        .acquire(pb::AcquireRequest {
            name: name.into(),
            session_id: sid,
            owner_id: owner.into(),
            ..Default::default()
        })
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

fn fenced(key: &str, token: u64) -> WriteOptions {
    WriteOptions {
        fence: Some(pb::Fence {
            key: key.into(),
            token,
        }),
        ..WriteOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t84_mutual_exclusion_with_clients_on_every_server() {
    const CLIENTS: usize = 12;
    const CYCLES: usize = 100;
    let ensemble = Ensemble::start(3, ServerOptions::default());
    ensemble.leader(LEADER_WAIT).await;
    let c = client(&ensemble.servers[0]).await;
    c.create("/counter", "0", Default::default()).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..CLIENTS {
        let server = &ensemble.servers[i % 3];
        let c = client(server).await;
        let mut l = LockClient::new(server.channel().await);
        tasks.push(tokio::spawn(async move {
            let session = c.open_session(1000).await.unwrap();
            let mut held = Vec::new();
            for _ in 0..CYCLES {
                let (key, token) = acquire(&mut l, "counter", session.id(), &format!("c{i}")).await;
                // A plain read on this server: it applied the grant, so it applied
                // every write made under the lock before it.
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
    let total = (CLIENTS * CYCLES) as u64;
    let linearizable = ReadOptions {
        linearizable: true,
        ..ReadOptions::default()
    };
    for server in &ensemble.servers {
        let node = client(server)
            .await
            .get("/counter", linearizable)
            .await
            .unwrap();
        assert_eq!(
            String::from_utf8(node.data).unwrap(),
            total.to_string(),
            "lost update"
        );
    }
    all.sort();
    let values: Vec<u64> = all.iter().map(|(v, _)| *v).collect();
    assert_eq!(values, (1..=total).collect::<Vec<_>>());
    assert!(
        all.windows(2).all(|w| w[0].1 < w[1].1),
        "tokens not increasing in lock order"
    );
}

#[tokio::test]
async fn t84_a_dead_holder_is_fenced_and_its_lock_passes_across_servers() {
    const ROUNDS: usize = 10;
    let ensemble = Ensemble::start(3, ServerOptions::default());
    ensemble.leader(LEADER_WAIT).await;
    let [s1, s2, s3] = [0, 1, 2].map(|i| &ensemble.servers[i]);
    let (c1, c2, c3) = (client(s1).await, client(s2).await, client(s3).await);
    c1.create("/res", "", Default::default()).await.unwrap();
    let b_session = c2.open_session(1000).await.unwrap();
    let (mut l1, mut l2) = (
        LockClient::new(s1.channel().await),
        LockClient::new(s2.channel().await),
    );
    for round in 0..ROUNDS {
        // A holds the lock through server 1 and writes with its token.
        let a_session = c1.open_session(100).await.unwrap();
        let (a_key, a_token) = acquire(&mut l1, "res", a_session.id(), "a").await;
        c1.set_with("/res", format!("a{round}"), -1, &fenced(&a_key, a_token))
            .await
            .unwrap();
        // A stops (no more keep-alives); B, waiting through server 2, gets the lock
        // once the leader expires A's session.
        drop(a_session);
        let (b_key, b_token) = acquire(&mut l2, "res", b_session.id(), "b").await;
        assert!(b_token > a_token);
        c2.set_with("/res", format!("b{round}"), -1, &fenced(&b_key, b_token))
            .await
            .unwrap();
        // A comes back through server 3 with its old token: refused, B's data stays.
        let fresh = c3.open_session(1000).await.unwrap();
        let stale = WriteOptions {
            session_id: fresh.id(),
            ..fenced(&a_key, a_token)
        };
        let err = c3.set_with("/res", "a-late", -1, &stale).await.unwrap_err();
        assert_eq!(err.code(), pb::ErrorCode::Fenced, "{err}");
        let data = c3.get("/res", ReadOptions::default()).await.unwrap().data;
        assert_eq!(String::from_utf8(data).unwrap(), format!("b{round}"));
        release(&mut l2, &b_key, b_token).await;
        fresh.close().await.unwrap();
    }
}

#[tokio::test]
async fn t84_an_election_fails_over_across_servers_and_observe_sees_it_all() {
    let ensemble = Ensemble::start(3, ServerOptions::default());
    ensemble.leader(LEADER_WAIT).await;
    let campaign = |server: usize, sid: u64, who: &'static str| {
        let endpoint = ensemble.servers[server].endpoint();
        async move {
            let channel = Channel::from_shared(endpoint)
                .unwrap()
                .connect()
                .await
                .unwrap();
            ElectionClient::new(channel)
                .campaign(pb::CampaignRequest {
                    election: "e".into(),
                    session_id: sid,
                    participant_id: who.into(),
                    value: who.as_bytes().to_vec().into(),
                    timeout_ms: 0,
                })
                .await
                .unwrap()
                .into_inner()
                .leader
                .unwrap()
        }
    };
    let mut observe = ElectionClient::new(ensemble.servers[2].channel().await)
        .observe(pb::ObserveRequest {
            election: "e".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = observe.next().await.unwrap().unwrap();
    assert!(first.leader.is_none());
    let a = client(&ensemble.servers[0])
        .await
        .open_session(100)
        .await
        .unwrap();
    let b = client(&ensemble.servers[1])
        .await
        .open_session(1000)
        .await
        .unwrap();
    let la = campaign(0, a.id(), "a").await;
    let b_wins = tokio::spawn(campaign(1, b.id(), "b"));
    // a's client dies: the leader expires its session and b, waiting through
    // server 1, leads with a higher term.
    drop(a);
    let lb = tokio::time::timeout(Duration::from_secs(10), b_wins)
        .await
        .expect("b never took over")
        .unwrap();
    assert!(lb.term > la.term);
    let mut last = first.header.unwrap().zxid;
    for who in ["a", "b"] {
        let got = tokio::time::timeout(Duration::from_secs(10), observe.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let zxid = got.header.unwrap().zxid;
        assert!(zxid > last, "Observe out of zxid order");
        last = zxid;
        assert_eq!(got.leader.unwrap().participant_id, who);
    }
}

/// Lock `name`'s queue as server `i` sees it.
async fn queue(ensemble: &Ensemble, i: usize, name: &str) -> Vec<pb::LockEntry> {
    LockClient::new(ensemble.servers[i].channel().await)
        .waiters(pb::WaitersRequest { name: name.into() })
        .await
        .unwrap()
        .into_inner()
        .entries
}

/// Waiters woken by a predecessor's removal, summed over the servers.
async fn wakeups(ensemble: &Ensemble) -> u64 {
    let mut sum = 0;
    for i in 0..ensemble.servers.len() {
        sum += ensemble.status(i).await.unwrap().queue_wakeups;
    }
    sum
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t84_waiters_on_every_server_are_woken_one_at_a_time_in_order() {
    const WAITERS: usize = 60;
    const HAND_OFFS: usize = 6;
    let ensemble = Ensemble::start(3, ServerOptions::default());
    ensemble.leader(LEADER_WAIT).await;
    let c = client(&ensemble.servers[0]).await;
    let session = c.open_session(1000).await.unwrap();
    let sid = session.id();
    let mut l = LockClient::new(ensemble.servers[0].channel().await);
    let (mut key, mut token) = acquire(&mut l, "herd", sid, "holder").await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..WAITERS {
        let mut l = LockClient::new(ensemble.servers[i % 3].channel().await);
        let tx = tx.clone();
        tokio::spawn(async move {
            let got = acquire(&mut l, "herd", sid, &format!("w{i:03}")).await;
            let _ = tx.send(got);
        });
    }
    let queued = concord_tests::eventually("every waiter queued", LEADER_WAIT, || async {
        let q = queue(&ensemble, 1, "herd").await;
        (q.len() == WAITERS + 1).then_some(q)
    })
    .await;
    let before = wakeups(&ensemble).await;
    for (n, successor) in queued.iter().enumerate().skip(1).take(HAND_OFFS) {
        release(&mut l, &key, token).await;
        let next = rx.recv().await.unwrap();
        assert_eq!(next.0, successor.key, "FIFO hand-off");
        assert!(next.1 > token);
        // Exactly one waiter in the whole ensemble woke for each release.
        assert_eq!(wakeups(&ensemble).await - before, n as u64, "herd");
        (key, token) = next;
    }
    assert!(rx.try_recv().is_err(), "nobody else got the lock");
    // A waiter whose session expires leaves the queue; the others keep their order.
    let doomed = client(&ensemble.servers[2])
        .await
        .open_session(100)
        .await
        .unwrap();
    let mut l3 = LockClient::new(ensemble.servers[2].channel().await);
    let doomed_call = tokio::spawn({
        let id = doomed.id();
        async move {
            l3.acquire(pb::AcquireRequest {
                name: "herd".into(),
                session_id: id,
                owner_id: "doomed".into(),
                ..Default::default()
            })
            .await
        }
    });
    let before: Vec<String> =
        concord_tests::eventually("the doomed waiter queued", LEADER_WAIT, || async {
            let q = queue(&ensemble, 0, "herd").await;
            q.iter().any(|e| e.owner_id == "doomed").then_some(q)
        })
        .await
        .into_iter()
        .map(|e| e.owner_id)
        .filter(|o| o != "doomed")
        .collect();
    drop(doomed);
    let err = doomed_call.await.unwrap().unwrap_err();
    assert_eq!(concord_tests::code_of(&err), "SESSION_EXPIRED", "{err}");
    for i in 0..3 {
        let what = format!("server {} sees the rest of the queue in order", i + 1);
        concord_tests::eventually(&what, LEADER_WAIT, || async {
            let after: Vec<String> = queue(&ensemble, i, "herd")
                .await
                .into_iter()
                .map(|e| e.owner_id)
                .collect();
            (after == before).then_some(())
        })
        .await;
    }
    session.close().await.unwrap();
}
