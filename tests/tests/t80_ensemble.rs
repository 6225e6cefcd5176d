//! A 3-server ensemble of real processes: every server takes writes (followers
//! forward them), serves reads that honour min_zxid and linearizable reads, and keeps
//! sessions alive wherever their keep-alives arrive.

#![allow(clippy::unwrap_used)]

mod watch_util;

use std::time::Duration;

use concord_proto::v1 as pb;
use concord_tests::{create_at, eventually, get_req, Ensemble, ServerOptions};
use tokio::sync::mpsc;
use tokio_stream::StreamExt;

const LEADER_WAIT: Duration = Duration::from_secs(20);

fn create_req(path: &str, data: &str) -> pb::CreateRequest {
    pb::CreateRequest {
        path: path.into(),
        data: data.to_owned().into(),
        ..Default::default()
    }
}

/// Members named by host name (`localhost:PORT`, as deploy/k8s names pods by DNS
/// name) elect a leader, forward writes to it and replicate; a restarted member is
/// dialled by name again and catches up.
#[tokio::test]
async fn t80_members_named_by_host_name_form_an_ensemble() {
    let mut ensemble = Ensemble::start_named(3, ServerOptions::default());
    let leader = ensemble.leader(LEADER_WAIT).await;
    let mut last = 0;
    for i in 0..3 {
        last = create_at(&ensemble.servers[i].endpoint(), &format!("/named{i}"))
            .await
            .unwrap_or_else(|e| panic!("write through server {}: {e}", i + 1));
    }
    for server in &ensemble.servers {
        let names = concord_tests::children_at(&server.endpoint(), "/", last).await;
        assert!((0..3).all(|i| names.contains(&format!("named{i}"))));
    }
    // A restarted follower is found again by name and catches up.
    let follower = (leader + 1) % 3;
    assert!(ensemble.servers[follower].terminate());
    let zxid = create_at(&ensemble.servers[leader].endpoint(), "/while-down")
        .await
        .unwrap();
    ensemble.servers[follower].restart();
    ensemble.caught_up(follower, zxid, LEADER_WAIT).await;
}

/// The same over mTLS peer links with `concord certs`' peer certificates, as in
/// deploy/k8s: a member dialled by name is verified by its identity
/// (`concord-peer-N`), not by the name it was dialled at.
#[tokio::test]
async fn t80_members_named_by_host_name_over_peer_mtls() {
    let certs = concord_tests::Certs::generate(3, &["admin"]);
    let options = ServerOptions {
        extra: certs.peer_flags(),
        ..ServerOptions::default()
    };
    let ensemble = Ensemble::start_named(3, options);
    let leader = ensemble.leader(LEADER_WAIT).await;
    let follower = (leader + 1) % 3;
    let zxid = create_at(&ensemble.servers[follower].endpoint(), "/named-tls")
        .await
        .unwrap();
    for i in 0..3 {
        ensemble.caught_up(i, zxid, LEADER_WAIT).await;
    }
}

/// Servers on tokio's multi-thread scheduler (`--runtime-threads 2`; the default
/// on this suite's 2-CPU machines is one thread, the current-thread scheduler)
/// form an ensemble and replicate writes made through any of them.
#[tokio::test]
async fn t80_members_with_two_runtime_threads_form_an_ensemble() {
    let options = ServerOptions {
        extra: vec!["--runtime-threads".into(), "2".into()],
        ..ServerOptions::default()
    };
    let ensemble = Ensemble::start(3, options);
    ensemble.leader(LEADER_WAIT).await;
    let mut last = 0;
    for (i, server) in ensemble.servers.iter().enumerate() {
        // The log is a file: plain `key=value` fields, no colour codes.
        let log = server.log();
        assert!(log.contains("runtime_threads=2"), "server {}: {log}", i + 1);
        last = create_at(&server.endpoint(), &format!("/threads{i}"))
            .await
            .unwrap_or_else(|e| panic!("write through server {}: {e}", i + 1));
    }
    for i in 0..3 {
        ensemble.caught_up(i, last, LEADER_WAIT).await;
    }
}

#[tokio::test]
async fn t80_any_server_takes_writes_and_serves_consistent_reads() {
    let ensemble = Ensemble::start(3, ServerOptions::default());
    let leader = ensemble.leader(LEADER_WAIT).await;
    let mut last = 0;
    for (i, server) in ensemble.servers.iter().enumerate() {
        let path = format!("/via{i}");
        let reply = server
            .tree()
            .await
            .create(create_req(&path, "x"))
            .await
            .unwrap_or_else(|e| panic!("write through server {}: {e}", i + 1))
            .into_inner();
        let zxid = reply.header.unwrap().zxid;
        assert!(zxid > last, "zxids grow across servers");
        last = zxid;
        // Answered only once applied where it was sent: a plain read there sees it.
        assert!(
            server.exists(&path).await,
            "server {} answered early",
            i + 1
        );
        // Every other server, asked with min_zxid, waits for it.
        for other in &ensemble.servers {
            let got = other
                .tree()
                .await
                .get(pb::GetRequest {
                    min_zxid: zxid,
                    ..get_req(&path)
                })
                .await
                .unwrap()
                .into_inner();
            assert_eq!(got.data, "x");
            assert!(got.header.unwrap().zxid >= zxid);
        }
    }
    // A linearizable read on a follower sees a write made through the leader.
    let follower = (leader + 1) % 3;
    let mut through_leader = ensemble.servers[leader].tree().await;
    let mut on_follower = ensemble.servers[follower].tree().await;
    for n in 0..20 {
        let path = format!("/lin{n}");
        through_leader.create(create_req(&path, "")).await.unwrap();
        let read = on_follower
            .exists(pb::ExistsRequest {
                path: path.clone(),
                linearizable: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(read.exists, "linearizable read on a follower missed {path}");
    }
}

/// Sends a keep-alive for `session_id` (opened at `min_zxid`) to whichever server the
/// channel names last, every `every`, until the sender is dropped.
fn keep_alive(
    ensemble: &Ensemble,
    session_id: u64,
    min_zxid: u64,
    every: Duration,
) -> mpsc::UnboundedSender<usize> {
    let endpoints: Vec<String> = ensemble.servers.iter().map(|s| s.endpoint()).collect();
    let (switch, mut to) = mpsc::unbounded_channel::<usize>();
    tokio::spawn(async move {
        let Some(mut target) = to.recv().await else {
            return;
        };
        'servers: loop {
            let channel = tonic::transport::Channel::from_shared(endpoints[target].clone())
                .unwrap()
                .connect_lazy();
            let mut client = pb::session_client::SessionClient::new(channel);
            let (tx, rx) = mpsc::channel(4);
            let Ok(replies) = client
                .keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx))
                .await
            else {
                tokio::time::sleep(every).await;
                continue;
            };
            let mut replies = replies.into_inner();
            loop {
                tokio::select! {
                    next = to.recv() => match next {
                        Some(t) => { target = t; continue 'servers; }
                        None => return,
                    },
                    _ = tokio::time::sleep(every) => {
                        if tx.send(pb::KeepAliveRequest { session_id, min_zxid }).await.is_err() {
                            continue 'servers;
                        }
                    }
                    reply = replies.next() => match reply {
                        Some(Ok(r)) => assert!(!r.expired, "session {session_id:#x} expired"),
                        _ => continue 'servers,
                    },
                }
            }
        }
    });
    switch
}

#[tokio::test]
async fn t80_sessions_live_on_any_server_and_survive_a_leader_change() {
    // The server's own defaults for timing: tick 100 ms, TTLs from 2 s.
    let mut ensemble = Ensemble::start(3, ServerOptions::server_defaults());
    let leader = ensemble.leader(LEADER_WAIT).await;
    let a = (leader + 1) % 3;
    let b = (leader + 2) % 3;
    let opened = ensemble.servers[a]
        .session()
        .await
        .open(pb::OpenSessionRequest { ttl_ms: 2000 })
        .await
        .unwrap()
        .into_inner();
    let session_id = opened.session_id;
    ensemble.servers[a]
        .tree()
        .await
        .create(pb::CreateRequest {
            mode: pb::CreateMode::Ephemeral.into(),
            session_id,
            ..create_req("/eph", "mine")
        })
        .await
        .unwrap();
    let opened_at = opened.header.map_or(0, |h| h.zxid);
    let pinger = keep_alive(&ensemble, session_id, opened_at, Duration::from_millis(300));
    pinger.send(a).unwrap();
    // Kill the leader: the new one gives every session a full TTL, and the
    // keep-alives that reach server a are reported to it.
    ensemble.servers[leader].kill9();
    let new_leader = ensemble.leader_among(&[a, b], LEADER_WAIT).await;
    let mut seen = 0;
    let hold = tokio::time::Instant::now() + Duration::from_millis(3 * 2000);
    while tokio::time::Instant::now() < hold {
        let got = ensemble.servers[new_leader]
            .tree()
            .await
            .get(get_req("/eph"))
            .await
            .expect("the ephemeral vanished while its session was kept alive");
        seen = seen.max(got.into_inner().header.unwrap().zxid);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The client moves to server b: its session goes with it, and it never reads
    // older than what it saw (min_zxid).
    pinger.send(b).unwrap();
    let hold = tokio::time::Instant::now() + Duration::from_millis(2 * 2000);
    while tokio::time::Instant::now() < hold {
        let got = ensemble.servers[b]
            .tree()
            .await
            .get(pb::GetRequest {
                min_zxid: seen,
                ..get_req("/eph")
            })
            .await
            .expect("the ephemeral vanished after the client moved");
        let zxid = got.into_inner().header.unwrap().zxid;
        assert!(zxid >= seen, "read at {zxid:#x} after seeing {seen:#x}");
        seen = zxid;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // No more keep-alives: the leader expires the session and its ephemeral goes.
    drop(pinger);
    for i in [a, b] {
        let server = &ensemble.servers[i];
        eventually(
            "the ephemeral goes with its expired session",
            Duration::from_secs(10),
            || async { (!server.exists("/eph").await).then_some(()) },
        )
        .await;
    }
}

#[tokio::test]
async fn t80_a_watch_resumes_on_another_server_without_a_gap() {
    let ensemble = Ensemble::start(3, ServerOptions::default());
    let leader = ensemble.leader(LEADER_WAIT).await;
    let (a, b) = ((leader + 1) % 3, (leader + 2) % 3);
    let endpoints: Vec<String> = ensemble.servers.iter().map(|s| s.endpoint()).collect();
    let parent = create_at(&endpoints[leader], "/w").await.unwrap();
    // Watches start at what their server applied: let a apply the parent first.
    ensemble.caught_up(a, parent, LEADER_WAIT).await;
    let mut request = watch_util::request("/w", true);
    request.kinds = vec![pb::EventKind::Created.into()];
    // On follower a: events of writes made through the leader and through b.
    let mut on_a = watch_util::open(&ensemble.servers[a], request.clone()).await;
    watch_util::started(&mut on_a).await;
    let mut written = Vec::new();
    for n in 0..6 {
        let through = if n % 2 == 0 { leader } else { b };
        written.push(
            create_at(&endpoints[through], &format!("/w/{n}"))
                .await
                .unwrap(),
        );
    }
    let got = watch_util::take_events(&mut on_a, 3).await;
    let seen: Vec<u64> = got.iter().map(|e| e.zxid).collect();
    assert_eq!(seen, written[..3]);
    // The client leaves a after three events and resumes on b from the last one.
    drop(on_a);
    for n in 6..9 {
        written.push(
            create_at(&endpoints[leader], &format!("/w/{n}"))
                .await
                .unwrap(),
        );
    }
    // A resume may not ask for a zxid the server has not applied yet.
    ensemble.caught_up(b, seen[2], LEADER_WAIT).await;
    request.start_zxid = Some(seen[2]);
    let mut on_b = watch_util::open(&ensemble.servers[b], request).await;
    watch_util::started(&mut on_b).await;
    let rest = watch_util::events_through(&mut on_b, *written.last().unwrap()).await;
    let rest: Vec<(u64, String)> = rest.into_iter().map(|e| (e.zxid, e.path)).collect();
    let want: Vec<(u64, String)> = (3..9).map(|n| (written[n], format!("/w/{n}"))).collect();
    assert_eq!(
        rest, want,
        "resumed on another server with a gap or a repeat"
    );
}

#[tokio::test]
async fn t80_an_observer_serves_but_never_counts_toward_a_quorum() {
    let mut ensemble = Ensemble::start_with_observers(3, 1, ServerOptions::default());
    let observer = 3;
    let voters = [0, 1, 2];
    let leader = ensemble.leader_among(&voters, LEADER_WAIT).await;
    let endpoint = ensemble.servers[observer].endpoint();
    let status = eventually("the observer joins", LEADER_WAIT, || async {
        let s = ensemble.status(observer).await?;
        (s.leader_id == leader as u64 + 1).then_some(s)
    })
    .await;
    assert_eq!(status.role, i32::from(pb::Role::Observer));
    // It takes writes (forwarded) and serves what it applied.
    let zxid = create_at(&endpoint, "/from-observer").await.unwrap();
    assert!(ensemble.servers[observer].exists("/from-observer").await);
    ensemble.caught_up(leader, zxid, LEADER_WAIT).await;
    // With two of three voters gone there is no quorum, observer or not.
    let down: Vec<usize> = voters.iter().copied().filter(|&v| v != leader).collect();
    for &v in &down {
        ensemble.servers[v].kill9();
    }
    eventually("the lone voter stops leading", LEADER_WAIT, || async {
        let s = ensemble.status(leader).await?;
        (!s.leader_serving).then_some(())
    })
    .await;
    let refused = concord_tests::tree_at(&endpoint, Duration::from_secs(2))
        .create(create_req("/no-quorum", ""))
        .await;
    assert!(
        refused.is_err(),
        "a write committed without a quorum of voters"
    );
    // One voter back: a quorum again, and the observer's writes go through.
    ensemble.servers[down[0]].restart();
    eventually(
        "writes through the observer resume",
        LEADER_WAIT,
        || async { create_at(&endpoint, "/quorum-again").await.ok() },
    )
    .await;
}
