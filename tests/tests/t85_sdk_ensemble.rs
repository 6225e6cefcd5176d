//! The Rust SDK against a 3-server ensemble, given every server's address: calls are
//! spread over the servers, reads never go back in time, a session outlives the
//! server its keep-alives went to, clients leave a server cut off from its leader,
//! a write a follower refuses goes to the leader that follower names, and a
//! session's writes go through the leader's death once each.

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use concord::{
    Client, CreateMode, CreateOptions, ErrorCode, ReadOptions, RetryPolicy, WatchOptions,
};
use concord_tests::{code_of, create_at, eventually, Ensemble, ServerOptions};
use futures::StreamExt;

const LEADER_WAIT: Duration = Duration::from_secs(20);

fn endpoints(ensemble: &Ensemble) -> String {
    let all: Vec<String> = ensemble.servers.iter().map(|s| s.endpoint()).collect();
    all.join(",")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t85_reads_through_any_server_never_go_back_in_time() {
    let ensemble = Ensemble::start(3, ServerOptions::default());
    ensemble.leader(LEADER_WAIT).await;
    let client = Client::connect(endpoints(&ensemble)).await.unwrap();
    for n in 0..100 {
        let path = format!("/n{n}");
        let created = client
            .create(&path, "x", CreateOptions::default())
            .await
            .unwrap();
        assert!(client.last_seen_zxid() >= created.zxid);
        // Whichever server answers, it has applied this client's own write.
        let got = client.get(&path, ReadOptions::default()).await.unwrap();
        assert!(got.zxid >= created.zxid);
        let listed = client.children("/", &Default::default()).await.unwrap();
        assert_eq!(listed.children.len(), n + 1, "a read went back in time");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t85_a_session_outlives_the_servers_it_talked_to() {
    let mut ensemble = Ensemble::start(3, ServerOptions::server_defaults());
    let leader = ensemble.leader(LEADER_WAIT).await;
    let client = Client::connect(endpoints(&ensemble)).await.unwrap();
    let session = client.open_session(2000).await.unwrap();
    let options = CreateOptions {
        session_id: session.id(),
        ..CreateOptions::mode(CreateMode::Ephemeral)
    };
    client.create("/eph", "mine", options).await.unwrap();
    // The leader dies; once a new one leads, the old one comes back and the new
    // one dies too (a quorum always remains).
    ensemble.servers[leader].kill9();
    let survivors: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    ensemble.leader_among(&survivors, LEADER_WAIT).await;
    ensemble.servers[leader].restart();
    let next = ensemble.leader(LEADER_WAIT).await;
    ensemble.servers[next].kill9();
    // For three TTLs the ephemeral stays: the SDK's keep-alives find a live server.
    let until = Instant::now() + Duration::from_millis(3 * 2000);
    while Instant::now() < until {
        let read = client.exists("/eph", ReadOptions::default()).await;
        match read {
            Ok(exists) => assert!(exists.stat.is_some(), "the session's ephemeral vanished"),
            // A call that reached the dead server fails; the next goes elsewhere.
            Err(e) => assert!(e.is_retry_safe(), "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Closing it takes the ephemeral (calls that reach the dead server fail before
    // they are sent, and are retried, as the SDK's errors say they safely can be).
    let id = session.id();
    drop(session);
    retried(|| client.close_session(id)).await;
    let gone = retried(|| client.exists("/eph", ReadOptions::default())).await;
    assert!(gone.stat.is_none());
}

/// A client whose server is cut off from the other two (both ways, so the server
/// has no leader) moves to another within its silence limit: the cut-off server
/// holds its keep-alive answers while no leader hears it. Its session lives on, its
/// ephemeral with it, and its writes go through again. (The server answered the
/// pings from its own table: the client stayed, and its session expired on the
/// leader's clock; found by t94's Bridge fault, with every client on a server of
/// the cut-off pair.) A client with no session moves at the server's first
/// NOT_LEADER (it stayed, and every write failed so, for as long as the cut lasted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t85_a_client_leaves_a_server_cut_off_from_its_leader() {
    const TTL_MS: i64 = 4000;
    let to_cut = ToCut::start().await;
    let client = to_cut.connect().await;
    let plain = to_cut.connect().await;
    plain.exists("/", ReadOptions::default()).await.unwrap();
    let session = client.open_session(TTL_MS).await.unwrap();
    let options = CreateOptions {
        session_id: session.id(),
        ..CreateOptions::mode(CreateMode::Ephemeral)
    };
    client.create("/eph", "mine", options).await.unwrap();
    let cut_at = to_cut.cut();
    // Writes go through once each client has moved (before, they fail retry-safe,
    // or with their outcome unknown when the cut came while one was on its way).
    for (name, c) in [("with_session", &client), ("without", &plain)] {
        let mut n = 0;
        loop {
            n += 1;
            let path = format!("/{name}{n}");
            match c.create(&path, "x", CreateOptions::default()).await {
                Ok(_) => break,
                Err(e) => assert!(e.is_retry_safe() || e.is_indeterminate(), "{e}"),
            }
            assert!(
                cut_at.elapsed() < Duration::from_millis(3 * TTL_MS as u64),
                "no write of the client {name} a session went through in three TTLs"
            );
        }
    }
    // Two TTLs on, the session still holds its ephemeral, as the leader sees it.
    tokio::time::sleep_until((cut_at + Duration::from_millis(2 * TTL_MS as u64)).into()).await;
    let witness = Client::connect(to_cut.ensemble.servers[to_cut.leader].endpoint())
        .await
        .unwrap();
    let eph = witness
        .exists("/eph", ReadOptions::default())
        .await
        .unwrap();
    assert!(
        eph.stat.is_some(),
        "the session expired while its client stayed on the cut-off server"
    );
    drop(session);
}

/// A server cut off from the other two stops serving what it holds once it has
/// had no leader for `leader_wait_ms_max` (ZooKeeper's timeliness: a client's view
/// is current within a bound, or it sees an outage): its default reads, its watch
/// streams and its election observers end with NOT_LEADER, and the client goes on
/// at another server, where it reads the writes made since and its watch resumes
/// with the event it missed. (The server went on answering from its stale tree for
/// as long as the cut lasted, and its watch streams sent progress with no events.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t85_reads_and_watches_leave_a_server_cut_off_from_its_leader() {
    let to_cut = ToCut::start().await;
    let servers = &to_cut.ensemble.servers;
    let client = to_cut.connect().await;
    let only_cut = Client::connect(servers[to_cut.cut].endpoint())
        .await
        .unwrap();
    let witness = Client::connect(servers[to_cut.leader].endpoint())
        .await
        .unwrap();
    let first = witness
        .create("/cfg", "v1", CreateOptions::default())
        .await
        .unwrap();
    let read = ReadOptions {
        min_zxid: first.zxid,
        ..ReadOptions::default()
    };
    let got = client.get("/cfg", read).await.unwrap();
    assert_eq!(got.data, b"v1");
    let mut watch = client
        .watch(WatchOptions {
            with_data: true,
            resume: Some(RetryPolicy::default()),
            ..WatchOptions::path("/cfg")
        })
        .await
        .unwrap();
    let mut observe = Box::pin(only_cut.observe("e").await.unwrap());
    assert!(observe.next().await.unwrap().unwrap().leader.is_none());

    let cut_at = to_cut.cut();
    let changed = witness
        .set("/cfg", "v2", concord::ANY_VERSION)
        .await
        .unwrap();
    let within = Duration::from_secs(15);
    // The client's reads see the change once it has left the cut-off server.
    loop {
        match client.get("/cfg", ReadOptions::default()).await {
            Ok(got) if got.data == b"v2" => break,
            Ok(_) => {}
            Err(e) => assert!(e.is_retry_safe(), "{e}"),
        }
        assert!(
            cut_at.elapsed() < within,
            "reads still served from the cut-off server's stale tree"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Its watch resumes elsewhere and delivers the change it missed.
    let event = tokio::time::timeout_at((cut_at + within).into(), watch.next_event())
        .await
        .expect("the watch still waits on the cut-off server")
        .unwrap()
        .unwrap();
    assert_eq!(
        (event.zxid, event.data.as_slice()),
        (changed.zxid, &b"v2"[..])
    );
    assert!(watch.resumes() >= 1);
    // The cut-off server itself refuses, and ends its observer's stream.
    let ended = tokio::time::timeout_at((cut_at + within).into(), observe.next())
        .await
        .expect("the observer still follows the cut-off server")
        .unwrap();
    let e = ended.expect_err("a change seen on a server without a leader");
    assert_eq!(e.code(), ErrorCode::NotLeader, "{e}");
    let e = only_cut
        .exists("/cfg", ReadOptions::default())
        .await
        .expect_err("a read served by a server without a leader");
    assert_eq!(e.code(), ErrorCode::NotLeader, "{e}");
}

/// A follower cut off from its leader one way (its bytes to the leader dropped, the
/// leader's still arriving) stays in touch but refuses writes with NOT_LEADER, naming
/// the leader's client address. A client whose list holds that address retries the
/// write there (NOT_LEADER changed nothing), not at the next server of its list
/// (the other follower, which would forward it too), and sends its later calls
/// there as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t85_a_write_refused_by_a_follower_goes_to_the_leader_it_names() {
    let ensemble = Ensemble::start_proxied(3, ServerOptions::server_defaults());
    let leader = ensemble.leader(LEADER_WAIT).await;
    let cut = (0..3).find(|&i| i != leader).unwrap();
    let other = (0..3).find(|&i| i != leader && i != cut).unwrap();
    let servers = &ensemble.servers;
    ensemble.proxies.as_ref().unwrap().cut(cut, leader, true);
    // Writes sent before the follower gives up the silent path may still try it.
    let probes = AtomicU32::new(0);
    eventually("the cut follower refusing writes", LEADER_WAIT, || async {
        let n = probes.fetch_add(1, Ordering::Relaxed);
        let refused = create_at(&servers[cut].endpoint(), &format!("/probe{n}")).await;
        refused
            .is_err_and(|s| code_of(&s) == "NOT_LEADER")
            .then_some(())
    })
    .await;
    let list: Vec<String> = [cut, other, leader]
        .iter()
        .map(|&i| servers[i].endpoint())
        .collect();
    let client = Client::builder()
        .endpoints(list)
        .randomize_hosts(false)
        .retry(RetryPolicy::default())
        .connect()
        .await
        .unwrap();
    client
        .create("/through-the-hint", "v", CreateOptions::default())
        .await
        .unwrap();
    let answering = client.status().await.unwrap();
    assert_eq!(
        answering.server_id,
        leader as u64 + 1,
        "the client went to server {} instead of the leader, server {}",
        answering.server_id,
        leader + 1
    );
}

/// Three servers behind proxies, and the follower `cut` to cut off from the others.
struct ToCut {
    ensemble: Ensemble,
    leader: usize,
    cut: usize,
}

impl ToCut {
    async fn start() -> ToCut {
        let ensemble = Ensemble::start_proxied(3, ServerOptions::server_defaults());
        let leader = ensemble.leader(LEADER_WAIT).await;
        let cut = (0..3).find(|&i| i != leader).unwrap();
        ToCut {
            ensemble,
            leader,
            cut,
        }
    }

    fn others(&self) -> impl Iterator<Item = usize> + '_ {
        (0..3).filter(|&i| i != self.cut)
    }

    /// A client of every server, the one to cut first in its list and taken first.
    async fn connect(&self) -> Client {
        let list: Vec<String> = std::iter::once(self.cut)
            .chain(self.others())
            .map(|i| self.ensemble.servers[i].endpoint())
            .collect();
        Client::builder()
            .endpoints(list)
            .randomize_hosts(false)
            .connect()
            .await
            .unwrap()
    }

    /// Cuts the server off from the other two, both ways; when it did.
    fn cut(&self) -> Instant {
        let proxies = self.ensemble.proxies.as_ref().unwrap();
        for j in self.others() {
            proxies.cut(self.cut, j, true);
            proxies.cut(j, self.cut, true);
        }
        Instant::now()
    }
}

/// Runs `call` until it succeeds or fails in a way that is not safe to retry.
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

/// What the writers of the failover test share.
#[derive(Default)]
struct Writes {
    /// Values whose create was answered.
    acked: std::sync::Mutex<Vec<u64>>,
    /// Errors that reached a writer.
    errors: std::sync::Mutex<Vec<concord::Error>>,
    stop: std::sync::atomic::AtomicBool,
}

/// Writes through a session's client (`Session::client`) carry the session and a
/// fresh request id by default, so the client's retry policy retries one whose
/// outcome the leader's death left unknown, and the server applies it once: four
/// writers of sequential nodes through a kill -9 of the leader see no error, and
/// every value is in exactly one node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t85_a_sessions_writes_go_through_the_leaders_death_once_each() {
    let mut ensemble = Ensemble::start(
        3,
        ServerOptions {
            session_ttl_ms: Some((100, 20_000)),
            ..ServerOptions::default()
        },
    );
    let leader = ensemble.leader(LEADER_WAIT).await;
    let client = Client::builder()
        .endpoints(ensemble.servers.iter().map(|s| s.endpoint()))
        .call_timeout(Duration::from_secs(1))
        .retry(RetryPolicy {
            attempts_max: 0,
            elapsed_max_ms: 30_000,
            delay_initial_ms: 50,
            delay_max_ms: 500,
        })
        .connect()
        .await
        .unwrap();
    let session = client.open_session(10_000).await.unwrap();
    let mine = session.client().clone();
    mine.create("/w", "", CreateOptions::default())
        .await
        .unwrap();
    let writes = std::sync::Arc::new(Writes::default());
    let next = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut writers = Vec::new();
    for _ in 0..4 {
        let (mine, writes, next) = (mine.clone(), writes.clone(), next.clone());
        writers.push(tokio::spawn(async move {
            let sequential = CreateOptions::mode(CreateMode::PersistentSequential);
            while !writes.stop.load(Ordering::SeqCst) {
                let value = next.fetch_add(1, Ordering::SeqCst);
                match mine
                    .create("/w/n-", value.to_string(), sequential.clone())
                    .await
                {
                    Ok(_) => writes.acked.lock().unwrap().push(value),
                    Err(e) => writes.errors.lock().unwrap().push(e),
                }
            }
        }));
    }
    let acked = |n: usize| {
        let writes = writes.clone();
        move || {
            let writes = writes.clone();
            async move { (writes.acked.lock().unwrap().len() >= n).then_some(()) }
        }
    };
    eventually("writes before the kill", LEADER_WAIT, acked(100)).await;
    ensemble.servers[leader].kill9();
    let survivors: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    ensemble.leader_among(&survivors, LEADER_WAIT).await;
    let so_far = writes.acked.lock().unwrap().len();
    eventually("writes after the kill", LEADER_WAIT, acked(so_far + 100)).await;
    writes.stop.store(true, Ordering::SeqCst);
    for writer in writers {
        writer.await.unwrap();
    }
    let errors = writes.errors.lock().unwrap().clone();
    assert!(errors.is_empty(), "errors reached the writers: {errors:?}");
    // Every value acknowledged is in exactly one node, and no node holds a value
    // twice.
    let listed = mine.children("/w", &Default::default()).await.unwrap();
    let mut values = Vec::new();
    for child in &listed.children {
        let node = mine
            .get(&format!("/w/{}", child.name), ReadOptions::default())
            .await
            .unwrap();
        values.push(
            String::from_utf8(node.data)
                .unwrap()
                .parse::<u64>()
                .unwrap(),
        );
    }
    values.sort_unstable();
    let mut acked = writes.acked.lock().unwrap().clone();
    acked.sort_unstable();
    assert_eq!(values, acked, "a write applied twice, or not at all");
    session.close().await.unwrap();
}
