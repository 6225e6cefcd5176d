//! Locks and elections on a 3-server ensemble: clients on every server contend for one
//! lock (fenced counter, FIFO tokens), a holder whose session dies is fenced while its
//! lock passes to a waiter on another server, and an election fails over with
//! Observe on a third server seeing every change in order.

#![allow(clippy::unwrap_used)]

mod lock_util;

use std::time::Duration;

use concord::ReadOptions;
use concord_proto::v1 as pb;
use concord_proto::v1::election_client::ElectionClient;
use concord_tests::{Ensemble, ServerOptions};
use lock_util::{acquire, acquire_req, client, lock_client, release, PauseRound};
use tokio_stream::StreamExt;
use tonic::transport::Channel;

const LEADER_WAIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t84_mutual_exclusion_with_clients_on_every_server() {
    const CLIENTS: usize = 12;
    const CYCLES: usize = 100;
    // Nothing here needs fast ticks or short sessions: the server's own tick (a
    // sync limit of 500 ms) and 4 s sessions keep a CPU-starved CI run from losing
    // its leader or a session mid-test, which this no-fault test does not expect.
    let options = ServerOptions {
        tick_ms: 100,
        session_ttl_ms: Some((200, 4000)),
        ..ServerOptions::default()
    };
    let mut ensemble = Ensemble::start(3, options);
    ensemble.keep_on_failure(
        "t84_mutual_exclusion",
        "cargo test -p concord-tests --test t84_locks_ensemble t84_mutual_exclusion".into(),
        String::new,
    );
    ensemble.leader(LEADER_WAIT).await;
    client(&ensemble.servers[0])
        .await
        .create("/counter", "0", Default::default())
        .await
        .unwrap();
    let mut contenders = Vec::new();
    for i in 0..CLIENTS {
        let server = &ensemble.servers[i % 3];
        contenders.push((client(server).await, lock_client(server).await));
    }
    lock_util::fenced_counter(contenders, CYCLES, 4000).await;
    let linearizable = ReadOptions {
        linearizable: true,
        ..ReadOptions::default()
    };
    let total = CLIENTS * CYCLES;
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
    let (mut l1, mut l2) = (lock_client(s1).await, lock_client(s2).await);
    for round in 0..ROUNDS {
        // A holds through server 1, B waits through server 2, A comes back late
        // through server 3.
        let r = PauseRound {
            a: &c1,
            a_locks: &mut l1,
            b: &c2,
            b_locks: &mut l2,
            b_session: b_session.id(),
            late: &c3,
        };
        lock_util::paused_holder_round(r, round).await;
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
            ..Default::default()
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
    lock_client(&ensemble.servers[i])
        .await
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
    let mut l = lock_client(&ensemble.servers[0]).await;
    let (mut key, mut token) = acquire(&mut l, "herd", sid, "holder").await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..WAITERS {
        let mut l = lock_client(&ensemble.servers[i % 3]).await;
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
    let mut l3 = lock_client(&ensemble.servers[2]).await;
    let doomed_call = tokio::spawn({
        let id = doomed.id();
        async move { l3.acquire(acquire_req("herd", id, "doomed", 0)).await }
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
