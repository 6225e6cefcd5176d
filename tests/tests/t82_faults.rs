//! Faults on a 3-server ensemble of real processes: a leader frozen past the
//! election timeout, followers restarted behind (DIFF) and with an empty disk (SNAP),
//! and an old leader whose uncommitted tail must be cut when it rejoins.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use concord_proto::v1 as pb;
use concord_tests::{
    children_at, code_of, create_at, eventually, tree_at, Ensemble, ServerOptions,
};

const WAIT: Duration = Duration::from_secs(20);

fn tree(endpoint: &str) -> pb::tree_client::TreeClient<tonic::transport::Channel> {
    tree_at(endpoint, WAIT)
}

fn zxid_epoch(zxid: u64) -> u64 {
    zxid >> 40
}

/// Creates `/{prefix}{n}` for n in 0..count through `endpoint`, 8 at a time;
/// returns the newest zxid.
async fn write_many(endpoint: &str, prefix: &str, count: usize) -> u64 {
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let (endpoint, prefix) = (endpoint.to_owned(), prefix.to_owned());
            tokio::spawn(async move {
                let mut newest = 0;
                for n in (t..count).step_by(8) {
                    let zxid = create_at(&endpoint, &format!("/{prefix}{n}")).await;
                    newest = newest.max(zxid.unwrap());
                }
                newest
            })
        })
        .collect();
    let mut newest = 0;
    for t in tasks {
        newest = newest.max(t.await.unwrap());
    }
    newest
}

async fn exists(endpoint: &str, path: &str, min_zxid: u64) -> bool {
    tree(endpoint)
        .exists(pb::ExistsRequest {
            path: path.into(),
            min_zxid,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .exists
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t82_a_frozen_leader_acknowledges_nothing_from_its_old_epoch() {
    let ensemble = Ensemble::start(3, ServerOptions::default());
    let old = ensemble.leader(WAIT).await;
    let endpoints: Vec<String> = ensemble.servers.iter().map(|s| s.endpoint()).collect();
    create_at(&endpoints[old], "/before").await.unwrap();
    ensemble.servers[old].signal("STOP");
    let others: Vec<usize> = (0..3).filter(|&i| i != old).collect();
    let new = ensemble.leader_among(&others, WAIT).await;
    let after = create_at(&endpoints[new], "/after").await.unwrap();
    // Requests reach the frozen server, which sees them only once it runs again.
    let stale_write = tokio::spawn({
        let endpoint = endpoints[old].clone();
        async move { create_at(&endpoint, "/stale").await }
    });
    let read = |linearizable| {
        let endpoint = endpoints[old].clone();
        tokio::spawn(async move {
            tree(&endpoint)
                .exists(pb::ExistsRequest {
                    path: "/after".into(),
                    linearizable,
                    ..Default::default()
                })
                .await
        })
    };
    let stale_read = read(true);
    // A default read too: the server was stopped for longer than its sync limit
    // (the others' election took that long), so it does not take its core's word
    // that it still leads (which the core keeps for sync_limit_ticks of the time it
    // runs) and serves nothing from before its pause (it answered this one so).
    let stale_default_read = read(false);
    tokio::time::sleep(Duration::from_millis(200)).await;
    ensemble.servers[old].signal("CONT");
    // Each answers: correctly, or with a failure that claims nothing (never an
    // acknowledgement from the old epoch, never a read that missed /after).
    match stale_write.await.unwrap() {
        Ok(zxid) => {
            assert!(
                zxid_epoch(zxid) > zxid_epoch(after) || zxid > after,
                "the old leader acknowledged a write at {zxid:#x}, not after {after:#x}"
            );
            assert!(
                exists(&endpoints[new], "/stale", zxid).await,
                "acknowledged, yet not on the new leader"
            );
        }
        Err(e) => assert!(
            claims_nothing(
                &e,
                &["NOT_LEADER", "UNAVAILABLE", "OUTCOME_UNKNOWN", "TIMEOUT"]
            ),
            "the stale write failed with {e}"
        ),
    }
    for (read, kind) in [
        (stale_read, "linearizable"),
        (stale_default_read, "default"),
    ] {
        match read.await.unwrap() {
            Ok(reply) => assert!(
                reply.into_inner().exists,
                "a {kind} read on the old leader missed /after"
            ),
            Err(e) => assert!(
                claims_nothing(&e, &["NOT_LEADER", "UNAVAILABLE", "TIMEOUT"]),
                "the stale {kind} read failed with {e}"
            ),
        }
    }
    // It rejoins as a follower of the new leader.
    eventually("the old leader follows the new one", WAIT, || async {
        let status = ensemble.status(old).await?;
        (status.leader_id == new as u64 + 1 && status.zxid >= after).then_some(())
    })
    .await;
    assert!(exists(&endpoints[old], "/before", after).await);
    // And it serves: a write through it lands in the new epoch, and a linearizable
    // read through it sees /after.
    let rejoined = eventually("a write through the old leader", WAIT, || async {
        create_at(&endpoints[old], "/rejoined").await.ok()
    })
    .await;
    assert!(zxid_epoch(rejoined) > zxid_epoch(after) || rejoined > after);
    let seen = tree(&endpoints[old])
        .exists(pb::ExistsRequest {
            path: "/after".into(),
            linearizable: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .exists;
    assert!(
        seen,
        "a linearizable read through the old leader missed /after"
    );
}

/// A failure that says nothing happened or that nothing is known: one of `codes`, or
/// the client's own deadline.
fn claims_nothing(e: &tonic::Status, codes: &[&str]) -> bool {
    e.code() == tonic::Code::DeadlineExceeded || codes.contains(&code_of(e).as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t82_a_follower_catches_up_by_diff_and_by_snapshot() {
    let options = ServerOptions {
        snapshot_every_txns: 1000,
        ..ServerOptions::default()
    };
    let mut ensemble = Ensemble::start(3, options);
    let leader = ensemble.leader(WAIT).await;
    let f = (leader + 1) % 3;
    let endpoints: Vec<String> = ensemble.servers.iter().map(|s| s.endpoint()).collect();
    write_many(&endpoints[leader], "a", 50).await;

    // DIFF: behind by a few hundred txns, all still in the leader's log.
    ensemble.servers[f].kill9();
    let newest = write_many(&endpoints[leader], "b", 600).await;
    let log_before = ensemble.servers[f].log().len();
    ensemble.servers[f].restart();
    ensemble.caught_up(f, newest, WAIT).await;
    let log = ensemble.servers[f].log();
    assert!(
        !log[log_before..].contains("installing a snapshot"),
        "expected DIFF:\n{log}"
    );
    let want = children_at(&endpoints[leader], "/", newest).await;
    assert_eq!(want.len(), 650);
    assert_eq!(children_at(&endpoints[f], "/", newest).await, want);

    // SNAP: an empty disk, and the leader's log no longer reaches back to zero.
    ensemble.servers[f].kill9();
    std::fs::remove_dir_all(&ensemble.servers[f].data_dir).unwrap();
    let newest = write_many(&endpoints[leader], "c", 1500).await;
    let log_before = ensemble.servers[f].log().len();
    ensemble.servers[f].restart();
    ensemble.caught_up(f, newest, WAIT).await;
    // The follower serves the leader's tree as soon as it has it; its persister
    // logs the install as it stores the snapshot, which may come a moment later.
    let server = &ensemble.servers[f];
    eventually("the follower logs that it installs a SNAP", WAIT, || {
        let log = server.log();
        std::future::ready(
            log[log_before..]
                .contains("installing a snapshot")
                .then_some(()),
        )
    })
    .await;
    let want = children_at(&endpoints[leader], "/", newest).await;
    assert_eq!(want.len(), 2150);
    assert_eq!(children_at(&endpoints[f], "/", newest).await, want);

    // It restarts from the installed snapshot and keeps up.
    ensemble.servers[f].kill9();
    let newest = write_many(&endpoints[leader], "d", 100).await;
    ensemble.servers[f].restart();
    ensemble.caught_up(f, newest, WAIT).await;
    assert_eq!(
        children_at(&endpoints[f], "/", newest).await,
        children_at(&endpoints[leader], "/", newest).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t82_an_uncommitted_tail_is_truncated_when_the_old_leader_rejoins() {
    let mut ensemble = Ensemble::start(3, ServerOptions::default());
    let old = ensemble.leader(WAIT).await;
    let endpoints: Vec<String> = ensemble.servers.iter().map(|s| s.endpoint()).collect();
    create_at(&endpoints[old], "/base").await.unwrap();
    let followers: Vec<usize> = (0..3).filter(|&i| i != old).collect();
    // Killed, not stopped: a stopped follower would still find the proposals in
    // its socket buffers when it resumes, and they would rightly commit.
    for &i in &followers {
        ensemble.servers[i].kill9();
    }
    // The leader logs these but can never commit them: it steps down and tells
    // their callers the outcome is unknown.
    let lost: Vec<_> = (0..5)
        .map(|n| {
            let endpoint = endpoints[old].clone();
            tokio::spawn(async move { create_at(&endpoint, &format!("/lost{n}")).await })
        })
        .collect();
    for write in lost {
        let e = write
            .await
            .unwrap()
            .expect_err("committed without a quorum");
        assert!(e.message().contains("outcome is unknown"), "{e}");
    }
    ensemble.servers[old].kill9();
    for &i in &followers {
        ensemble.servers[i].restart();
    }
    let new = ensemble.leader_among(&followers, WAIT).await;
    let zxid = create_at(&endpoints[new], "/new").await.unwrap();
    let log_before = ensemble.servers[old].log().len();
    ensemble.servers[old].restart();
    ensemble.leader(WAIT).await;
    ensemble.caught_up(old, zxid, WAIT).await;
    let log = ensemble.servers[old].log();
    assert!(
        log[log_before..].contains("truncating the log"),
        "no TRUNC:\n{log}"
    );
    for endpoint in &endpoints {
        assert!(exists(endpoint, "/new", zxid).await);
        assert!(exists(endpoint, "/base", zxid).await);
        for n in 0..5 {
            assert!(
                !exists(endpoint, &format!("/lost{n}"), zxid).await,
                "/lost{n} on {endpoint}"
            );
        }
    }
}
