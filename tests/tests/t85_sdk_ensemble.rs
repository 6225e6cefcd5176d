//! The Rust SDK against a 3-server ensemble, given every server's address: calls are
//! spread over the servers, reads never go back in time, and a session outlives the
//! server its keep-alives went to.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use concord::{Client, CreateMode, CreateOptions, ReadOptions};
use concord_tests::{Ensemble, ServerOptions};

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
        let listed = client.children_all("/", &Default::default()).await.unwrap();
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
    let ensemble = Ensemble::start_proxied(3, ServerOptions::server_defaults());
    let leader = ensemble.leader(LEADER_WAIT).await;
    let cut = (0..3).find(|&i| i != leader).unwrap();
    let others: Vec<usize> = (0..3).filter(|&i| i != cut).collect();
    // The cut-off server first in the list, and taken first.
    let list: Vec<String> = [cut]
        .iter()
        .chain(&others)
        .map(|&i| ensemble.servers[i].endpoint())
        .collect();
    let connect = || {
        Client::builder()
            .endpoints(list.clone())
            .randomize_hosts(false)
            .connect()
    };
    let client = connect().await.unwrap();
    let plain = connect().await.unwrap();
    plain.exists("/", ReadOptions::default()).await.unwrap();
    let session = client.open_session(TTL_MS).await.unwrap();
    let options = CreateOptions {
        session_id: session.id(),
        ..CreateOptions::mode(CreateMode::Ephemeral)
    };
    client.create("/eph", "mine", options).await.unwrap();
    let proxies = ensemble.proxies.as_ref().unwrap();
    for &j in &others {
        proxies.cut(cut, j, true);
        proxies.cut(j, cut, true);
    }
    let cut_at = Instant::now();
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
    let witness = Client::connect(ensemble.servers[leader].endpoint())
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
