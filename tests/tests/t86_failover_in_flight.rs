//! Failover for calls in flight, on 3-server ensembles of real processes: writes
//! through a follower when the leader is frozen (SIGSTOP), writes to a server that
//! has no leader, and writes to a follower whose links to the leader are cut one way
//! (it still hears the leader). Each write succeeds, fails with NOT_LEADER (nothing
//! done: safe to retry, elsewhere) or fails with OUTCOME_UNKNOWN, and answers within
//! the server's `leader_wait_ms_max` (asserted with a 5x margin) — never at the
//! client's deadline; once a server has been without a leader for that long, its
//! writes fail at once. And a leader cut off from both followers stops claiming a
//! quorum in `Cluster/Status` before they have elected another.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use concord_proto::v1 as pb;
use concord_tests::{code_of, create_at, eventually, tree_at, Ensemble, ServerOptions};
use tokio::sync::watch;

const WAIT: Duration = Duration::from_secs(20);
/// The servers' `leader_wait_ms_max` in these tests.
const LEADER_WAIT_MS: u64 = 1000;
/// What a write may take here: 5x the bound, well under the client's deadline.
const ANSWER_MAX: Duration = Duration::from_millis(5 * LEADER_WAIT_MS);
/// The client's deadline: a write that waits this long failed the test.
const CLIENT_DEADLINE: Duration = Duration::from_secs(15);

fn options() -> ServerOptions {
    let mut o = ServerOptions::default();
    o.extra.extend([
        "--leader-wait-ms-max".to_owned(),
        LEADER_WAIT_MS.to_string(),
    ]);
    o
}

/// One write and how it ended.
#[derive(Debug)]
struct Attempt {
    path: String,
    started: Instant,
    took: Duration,
    /// Ok, or the Concord code and message.
    result: Result<(), (String, String)>,
    /// The leader a NOT_LEADER named (id, client address), if any.
    hint: Option<(String, String)>,
}

async fn create_timed(endpoint: &str, path: &str) -> Attempt {
    let started = Instant::now();
    let reply = tree_at(endpoint, CLIENT_DEADLINE)
        .create(pb::CreateRequest {
            path: path.into(),
            data: path.to_owned().into(),
            ..Default::default()
        })
        .await;
    let took = started.elapsed();
    let (result, hint) = match reply {
        Ok(_) => (Ok(()), None),
        Err(status) => {
            let header = |k: &str| {
                status
                    .metadata()
                    .get(k)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            let hint = header("concord-leader-id").zip(header("concord-leader-addr"));
            let code = code_of(&status);
            (Err((code, status.message().to_owned())), hint)
        }
    };
    Attempt {
        path: path.to_owned(),
        started,
        took,
        result,
        hint,
    }
}

/// Writes `/{prefix}{task}-{n}` through `endpoint` one after another until `stop`.
async fn writer(
    endpoint: String,
    prefix: &'static str,
    task: usize,
    mut stop: watch::Receiver<bool>,
) -> Vec<Attempt> {
    let mut attempts = Vec::new();
    for n in 0..10_000 {
        if *stop.borrow_and_update() {
            break;
        }
        let attempt = create_timed(&endpoint, &format!("/{prefix}{task}-{n}")).await;
        let failed = attempt.result.is_err();
        attempts.push(attempt);
        if failed {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
                _ = stop.changed() => {}
            }
        }
    }
    attempts
}

/// Whether `path` exists, read linearizably through `endpoint`.
async fn exists(endpoint: &str, path: &str) -> bool {
    tree_at(endpoint, WAIT)
        .exists(pb::ExistsRequest {
            path: path.into(),
            linearizable: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .exists
}

/// Every attempt answered in time with an allowed code; a NOT_LEADER write was not
/// applied and an acknowledged one was, as read through `endpoint`.
async fn check(attempts: &[Attempt], endpoint: &str) {
    for a in attempts {
        assert!(
            a.took < ANSWER_MAX,
            "{} took {:?} (bound {ANSWER_MAX:?}): {:?}",
            a.path,
            a.took,
            a.result
        );
        match &a.result {
            Ok(()) => assert!(
                exists(endpoint, &a.path).await,
                "{} acknowledged, lost",
                a.path
            ),
            Err((code, _)) if code == "NOT_LEADER" => assert!(
                !exists(endpoint, &a.path).await,
                "{} failed NOT_LEADER (retry-safe) yet was applied",
                a.path
            ),
            Err((code, _)) if code == "OUTCOME_UNKNOWN" => {}
            Err((code, message)) => panic!("{}: {code}: {message}", a.path),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t86_writes_in_flight_through_a_follower_when_the_leader_freezes() {
    let ensemble = Ensemble::start(3, options());
    let old = ensemble.leader(WAIT).await;
    let endpoints: Vec<String> = ensemble.servers.iter().map(|s| s.endpoint()).collect();
    let follower = (0..3).find(|&i| i != old).unwrap();
    let (stop_tx, stop) = watch::channel(false);
    let writers: Vec<_> = (0..16)
        .map(|t| tokio::spawn(writer(endpoints[follower].clone(), "w", t, stop.clone())))
        .collect();
    // Writes flow through the follower first.
    let first = Instant::now();
    eventually("a write through the follower", WAIT, || async {
        let a = create_timed(
            &endpoints[follower],
            &format!("/probe{:?}", first.elapsed()),
        )
        .await;
        a.result.is_ok().then_some(())
    })
    .await;
    ensemble.servers[old].signal("STOP");
    let stopped = Instant::now();
    let others: Vec<usize> = (0..3).filter(|&i| i != old).collect();
    let new = ensemble.leader_among(&others, WAIT).await;
    // Writes resume through the same follower under the new leader.
    eventually(
        "a write through the follower after failover",
        WAIT,
        || async {
            let a = create_timed(
                &endpoints[follower],
                &format!("/after{:?}", first.elapsed()),
            )
            .await;
            a.result.is_ok().then_some(())
        },
    )
    .await;
    stop_tx.send(true).unwrap();
    let mut attempts = Vec::new();
    for w in writers {
        attempts.extend(w.await.unwrap());
    }
    let in_flight: Vec<&Attempt> = attempts
        .iter()
        .filter(|a| a.started < stopped && a.started + a.took > stopped)
        .collect();
    let slowest = in_flight.iter().map(|a| a.started + a.took - stopped).max();
    let in_flight = in_flight.len();
    assert!(
        in_flight > 0,
        "no write was in flight when the leader froze"
    );
    let outcome = |code: &str| {
        attempts
            .iter()
            .filter(|a| matches!(&a.result, Err((c, _)) if c == code))
            .count()
    };
    eprintln!(
        "{} writes, {in_flight} in flight at the freeze (the last answered {slowest:?} after it): {} NOT_LEADER, {} OUTCOME_UNKNOWN",
        attempts.len(),
        outcome("NOT_LEADER"),
        outcome("OUTCOME_UNKNOWN")
    );
    check(&attempts, &endpoints[new]).await;
    ensemble.servers[old].signal("CONT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t86_a_server_with_no_leader_answers_within_the_bound() {
    let mut ensemble = Ensemble::start(3, options());
    let leader = ensemble.leader(WAIT).await;
    let endpoints: Vec<String> = ensemble.servers.iter().map(|s| s.endpoint()).collect();
    let alone = (0..3).find(|&i| i != leader).unwrap();
    for i in (0..3).filter(|&i| i != alone) {
        ensemble.servers[i].kill9();
    }
    eventually("the survivor looks for a leader", WAIT, || async {
        let status = ensemble.status(alone).await?;
        (status.leader_id == 0).then_some(())
    })
    .await;
    let first_held = Instant::now();
    for n in 0..3 {
        let a = create_timed(&endpoints[alone], &format!("/lonely{n}")).await;
        assert!(a.took < ANSWER_MAX, "took {:?}: {:?}", a.took, a.result);
        let (code, message) = a.result.unwrap_err();
        assert_eq!(code, "NOT_LEADER", "{message}");
        if n == 0 {
            assert!(
                a.took >= Duration::from_millis(LEADER_WAIT_MS / 2),
                "held for the election first: {:?}",
                a.took
            );
        } else {
            // The server has had no leader for a whole wait already: the next writes
            // fail at once instead of holding their clients again.
            assert!(
                a.took < Duration::from_millis(LEADER_WAIT_MS / 2),
                "write {n} held again after {:?} without a leader: {:?}",
                first_held.elapsed(),
                a.took
            );
        }
    }
    // A linearizable read there fails quickly too (a read is always safe to retry).
    let started = Instant::now();
    let read = tree_at(&endpoints[alone], CLIENT_DEADLINE)
        .exists(pb::ExistsRequest {
            path: "/x".into(),
            linearizable: true,
            ..Default::default()
        })
        .await;
    assert!(started.elapsed() < ANSWER_MAX, "{:?}", started.elapsed());
    assert!(read.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t86_a_follower_cut_off_from_its_leader_sends_its_clients_elsewhere() {
    let ensemble = Ensemble::start_proxied(3, options());
    let leader = ensemble.leader(WAIT).await;
    let endpoints: Vec<String> = ensemble.servers.iter().map(|s| s.endpoint()).collect();
    let cut = (0..3).find(|&i| i != leader).unwrap();
    create_at(&endpoints[cut], "/before").await.unwrap();
    let proxies = ensemble.proxies.as_ref().unwrap();
    // The follower's bytes to the leader are dropped; the leader's still arrive.
    proxies.cut(cut, leader, true);
    let cut_at = Instant::now();
    let mut attempts = Vec::new();
    // Writes sent before the follower notices may end OUTCOME_UNKNOWN; then it
    // sends nothing more on the silent path.
    for n in 0..20 {
        let a = create_timed(&endpoints[cut], &format!("/cut{n}")).await;
        let refused = matches!(&a.result, Err((c, _)) if c == "NOT_LEADER");
        attempts.push(a);
        if refused {
            break;
        }
        assert!(cut_at.elapsed() < WAIT, "no NOT_LEADER during the cut");
    }
    let refused_from = attempts.len();
    for n in 0..5 {
        attempts.push(create_timed(&endpoints[cut], &format!("/refused{n}")).await);
    }
    for a in &attempts[refused_from - 1..] {
        let (code, message) = a.result.as_ref().unwrap_err();
        assert_eq!(code, "NOT_LEADER", "{}: {message}", a.path);
        if let Some((id, addr)) = &a.hint {
            assert_eq!(id, &(leader + 1).to_string(), "{message}");
            assert_eq!(
                addr,
                &ensemble.servers[leader].addr.to_string(),
                "{message}"
            );
        }
    }
    assert!(
        attempts.iter().any(|a| a.hint.is_some()),
        "no NOT_LEADER named the leader: {attempts:?}"
    );
    // The leader itself still serves.
    create_at(&endpoints[leader], "/during").await.unwrap();
    proxies.cut(cut, leader, false);
    eventually(
        "writes through the follower after the cut heals",
        WAIT,
        || async {
            let a = create_timed(&endpoints[cut], &format!("/healed{:?}", cut_at.elapsed())).await;
            a.result.is_ok().then_some(())
        },
    )
    .await;
    check(&attempts, &endpoints[leader]).await;
}

/// A leader cut off from both followers stops claiming a quorum in `Cluster/Status`
/// (`leader_serving`) before they have elected another leader, and stays so while
/// the cut lasts; once healed, the ensemble has one leader again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t86_a_leader_cut_off_stops_claiming_its_quorum_before_another_is_elected() {
    let ensemble = Ensemble::start_proxied(3, options());
    let old = ensemble.leader(WAIT).await;
    let old_epoch = ensemble.status(old).await.unwrap().epoch;
    let others: Vec<usize> = (0..3).filter(|&i| i != old).collect();
    let proxies = ensemble.proxies.as_ref().unwrap();
    for &j in &others {
        proxies.cut(old, j, true);
        proxies.cut(j, old, true);
    }
    let claimed_after_cut = std::sync::Mutex::new(Vec::new());
    let new = eventually("another leader serving a later epoch", WAIT, || async {
        let status = ensemble.status(old).await?;
        claimed_after_cut
            .lock()
            .unwrap()
            .push(status.leader_serving);
        for &j in &others {
            let s = ensemble.status(j).await?;
            if s.leader_serving && s.epoch > old_epoch {
                return Some(j);
            }
        }
        None
    })
    .await;
    let claimed_after_cut = claimed_after_cut.into_inner().unwrap();
    // Polled after the new leader was seen serving: the old one no longer claims.
    let status = ensemble.status(old).await.unwrap();
    assert!(
        !status.leader_serving,
        "server {} claims a quorum while server {} leads: {status:?}",
        old + 1,
        new + 1
    );
    assert!(
        claimed_after_cut.contains(&false),
        "never seen giving up before the election: {claimed_after_cut:?}"
    );
    for &j in &others {
        proxies.cut(old, j, false);
        proxies.cut(j, old, false);
    }
    let leader = ensemble.leader(WAIT).await;
    assert_ne!(leader, old, "the old leader, behind, does not win back");
}

/// Five servers: the leader L and B, the best vote after it (highest id), are cut
/// off both ways from two others, X and Y; M, the fifth, reaches everyone. Then L
/// is killed. B reaches only M, so it must stop winning elections, and M, X and Y
/// (a quorum that reaches itself) elect a leader: writes through X succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t86_a_candidate_a_quorum_cannot_reach_does_not_stall_the_election() {
    let mut ensemble = Ensemble::start_proxied(5, options());
    let leader = ensemble.leader(WAIT).await;
    let endpoints: Vec<String> = ensemble.servers.iter().map(|s| s.endpoint()).collect();
    let last = create_at(&endpoints[leader], "/before").await.unwrap();
    for i in 0..5 {
        ensemble.caught_up(i, last, WAIT).await;
    }
    let best = (0..5).rev().find(|&i| i != leader).unwrap();
    let rest: Vec<usize> = (0..5).filter(|&i| i != leader && i != best).collect();
    let (middle, cut_off) = (rest[0], [rest[1], rest[2]]);
    let proxies = ensemble.proxies.as_ref().unwrap();
    for a in [leader, best] {
        for b in cut_off {
            proxies.cut(a, b, true);
            proxies.cut(b, a, true);
        }
    }
    ensemble.servers[leader].kill9();
    let started = Instant::now();
    eventually(
        "a write through a server cut off from the best vote",
        WAIT,
        || async {
            create_at(
                &endpoints[cut_off[0]],
                &format!("/after{}", started.elapsed().as_millis()),
            )
            .await
            .ok()
        },
    )
    .await;
    let new = ensemble
        .leader_among(&[middle, cut_off[0], cut_off[1]], WAIT)
        .await;
    assert_ne!(
        new,
        best,
        "server {} leads without reaching a quorum",
        best + 1
    );
}
