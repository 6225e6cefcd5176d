//! A server that stalls for less than a session's TTL (SIGSTOP, a frozen VM, a
//! starved process) loses no session whose client kept trying: ZooKeeper's promise
//! is that a session lives while its client is heard within the timeout, and a
//! stalled server hears nobody. Measured at 0.5, 0.75 and 0.9 of the TTL, on one
//! server (its client pinging it throughout, as an SDK does) and on the leader of
//! three (the client's SDK moves to the others), and through the Rust SDK on one
//! server, whose client cannot move and must not call the session lost by its own
//! clock while the server keeps it (it waits for the give-up time, twice the TTL;
//! the Python SDK's twin is sdk-python/tests/test_t97_stall.py).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use concord::{Client, ConnectionState};
use concord_proto::v1 as pb;
use concord_tests::{Ensemble, Server, ServerOptions};
use tokio::sync::mpsc;
use tokio::time::{sleep, timeout, Instant};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;

const TTL_MS: u64 = 2_000;
/// The stalls, as shares of the TTL.
const STALLS: [f64; 3] = [0.5, 0.75, 0.9];
const LEADER_WAIT: Duration = Duration::from_secs(20);

fn options() -> ServerOptions {
    ServerOptions {
        session_ttl_ms: Some((100, 10_000)),
        ..ServerOptions::default()
    }
}

fn stall_of(share: f64) -> Duration {
    Duration::from_millis(TTL_MS).mul_f64(share)
}

/// One server stalls in the worst phase of its client's pings: just before the
/// next one is due, so that the session was last heard a third of its TTL before
/// the stall. The client pings every third of the TTL throughout, as the SDKs do;
/// its pings wait in the socket. Before the fix the server, once resumed, expired
/// the session (its deadline had passed while it was stopped) before it read them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t21_one_server_stalled_for_less_than_the_ttl_keeps_the_session() {
    let server = Server::start(options());
    let ping_every = Duration::from_millis(TTL_MS / 3);
    for share in STALLS {
        let r = pb::OpenSessionRequest {
            ttl_ms: TTL_MS as i64,
        };
        let opened = server.session().await.open(r).await.unwrap().into_inner();
        let session_id = opened.session_id;
        let (pings, rx) = mpsc::channel(16);
        let mut answers = server
            .session()
            .await
            .keep_alive(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        let ping = pb::KeepAliveRequest {
            session_id,
            min_zxid: session_id,
        };
        pings.send(ping).await.unwrap();
        let first = timeout(Duration::from_secs(5), answers.next()).await;
        assert!(!first.unwrap().unwrap().unwrap().expired);

        // Stopped just before the next ping is due; the client goes on pinging.
        sleep(ping_every - Duration::from_millis(20)).await;
        server.signal("STOP");
        let stall = stall_of(share);
        let resume_at = Instant::now() + stall;
        let mut next_ping = Instant::now() + Duration::from_millis(20);
        while next_ping < resume_at {
            tokio::time::sleep_until(next_ping).await;
            pings.send(ping).await.unwrap();
            next_ping += ping_every;
        }
        tokio::time::sleep_until(resume_at).await;
        server.signal("CONT");
        pings.send(ping).await.unwrap();

        // Every ping is answered, none as expired, each with the full TTL.
        let sent_during_stall = answers_due(stall, ping_every);
        for n in 0..sent_during_stall + 1 {
            let answer = timeout(Duration::from_secs(5), answers.next()).await;
            let answer = answer
                .unwrap_or_else(|_| panic!("stall {share}: no answer {n} within 5 s"))
                .unwrap()
                .unwrap();
            assert!(
                !answer.expired,
                "stall {share} of the TTL: the session expired (answer {n})"
            );
            assert_eq!(answer.ttl_ms, TTL_MS as i64);
        }
        let r = pb::GetSessionRequest {
            session_id,
            min_zxid: 0,
        };
        let info = server.session().await.get(r).await;
        assert!(info.is_ok(), "stall {share}: {info:?}");
        let r = pb::CloseSessionRequest { session_id };
        server.session().await.close(r).await.unwrap();
    }
}

/// The pings sent while stalled for `stall` (the first 20 ms in, then every
/// `every`).
fn answers_due(stall: Duration, every: Duration) -> u32 {
    let mut at = Duration::from_millis(20);
    let mut n = 0;
    while at < stall {
        n += 1;
        at += every;
    }
    n
}

/// The same stalls seen through the Rust SDK on one server: its client cannot move,
/// and must not call the session lost while the server, once resumed, keeps it.
/// Each round stalls the server just before the session's next ping is due (the
/// SDK pings at open, then every third of the TTL), so that the client hears
/// nothing for the stall and most of a ping interval: at 0.9 of the TTL, longer
/// than the TTL in all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t21_the_sdk_keeps_a_session_through_a_stall_of_its_only_server() {
    let server = Server::start(options());
    for share in STALLS {
        let client = Client::connect(server.endpoint()).await.unwrap();
        let session = client.open_session(TTL_MS as i64).await.unwrap();
        let mut states = session.state_watch();
        sleep(Duration::from_millis(TTL_MS / 3 - 50)).await;
        server.signal("STOP");
        let during = timeout(stall_of(share), ended(&mut states)).await;
        server.signal("CONT");
        assert!(during.is_err(), "stall {share}: {:?}", session.state());
        let until = Instant::now() + Duration::from_millis(TTL_MS * 3 / 2);
        let after = tokio::time::timeout_at(until, ended(&mut states)).await;
        assert!(after.is_err(), "stall {share}: {:?}", session.state());
        assert!(
            session.state().is_connected(),
            "stall {share}: {:?}",
            session.state()
        );
        let info = client.session_info(session.id()).await.unwrap();
        assert_eq!(info.session_id, session.id());
        client.close_session(session.id()).await.unwrap();
    }
}

/// Waits until the session has ended (Lost or Closed).
async fn ended(states: &mut tokio::sync::watch::Receiver<ConnectionState>) {
    let _ = states.wait_for(|s| s.is_ended()).await;
}

/// The leader of three stalls with the client's session on it: the client moves to
/// the others (after half the TTL without an answer), which elect a leader that
/// gives every session a full TTL. The session is never lost, and it stays on the
/// ensemble after the old leader resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t21_the_leader_of_three_stalled_for_less_than_the_ttl_loses_no_session() {
    let ensemble = Ensemble::start(3, options());
    for share in STALLS {
        let leader = ensemble.leader(LEADER_WAIT).await;
        let mut endpoints: Vec<String> = ensemble.servers.iter().map(|s| s.endpoint()).collect();
        endpoints.rotate_left(leader);
        let client = Client::builder()
            .endpoints(endpoints)
            .randomize_hosts(false)
            .connect()
            .await
            .unwrap();
        let session = client.open_session(TTL_MS as i64).await.unwrap();
        let mut states = session.state_watch();

        ensemble.servers[leader].signal("STOP");
        let during = timeout(stall_of(share), ended(&mut states)).await;
        ensemble.servers[leader].signal("CONT");
        assert!(during.is_err(), "stall {share}: {:?}", session.state());
        // Watched until well past a TTL after the resume: never lost.
        let until = Instant::now() + Duration::from_millis(TTL_MS * 3 / 2);
        let after = tokio::time::timeout_at(until, ended(&mut states)).await;
        assert!(after.is_err(), "stall {share}: {:?}", session.state());
        let connected = timeout(LEADER_WAIT, states.wait_for(|s| s.is_connected())).await;
        assert!(connected.is_ok(), "stall {share}: {:?}", session.state());
        assert_ne!(session.state(), ConnectionState::Lost);
        let info = client.session_info(session.id()).await.unwrap();
        assert_eq!(info.session_id, session.id());
        client.close_session(session.id()).await.unwrap();
    }
}
