//! Writes are checked against the grant table the leader has when it proposes them
//! (`Replica::submit_checked`), whichever server they came through.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::forward::Write;
use super::tests::{create, patient_byte_budgets, stalled_follower, StalledFollower};
use super::Replica;
use crate::security::{Grant, Grantee, Perms};
use crate::tree::TreeError;
use crate::txn::{AccessOp, TxnOp, Zxid};

fn grant(team: &str) -> TxnOp {
    TxnOp::Access(AccessOp::Grant(Grant {
        path: "/".into(),
        to: Grantee::Team(team.into()),
        perms: Perms::READ,
    }))
}

fn checked(op: TxnOp, checked_at: Zxid) -> Write {
    Write {
        session_id: 0,
        request_id: 0,
        fence: None,
        op,
        checked_at,
        trace: None,
    }
}

#[tokio::test]
async fn the_leader_refuses_a_write_checked_before_its_last_grant_change() {
    let dir = tempfile::tempdir().unwrap();
    let config = crate::config::Config {
        data_dir: dir.path().to_path_buf(),
        ..crate::config::Config::default()
    };
    let r = Replica::start(&config).await.unwrap();
    let before = r.submit(0, 0, create("/a")).await.unwrap().zxid;
    let changed = r.submit(0, 0, grant("pay")).await.unwrap().zxid;
    assert_eq!(r.read(|t| t.grants_zxid()), changed);

    let stale = r.submit_write(checked(create("/b"), before)).await.unwrap();
    assert_eq!(
        stale.result,
        Err(TreeError::GrantsChanged { zxid: changed }),
        "checked on the tree before the grant"
    );
    assert_eq!(stale.zxid, 0, "never proposed");
    assert!(r.read(|t| t.get("/b").is_none()));

    // Checked on a tree that has the change, or not checked at all: proposed.
    let fresh = r
        .submit_write(checked(create("/b"), changed))
        .await
        .unwrap();
    assert!(fresh.result.is_ok(), "{:?}", fresh.result);
    let unchecked = r.submit_write(checked(create("/c"), 0)).await.unwrap();
    assert!(unchecked.result.is_ok(), "{:?}", unchecked.result);
    r.shutdown();
}

/// A follower that has not yet applied the leader's grant change checks a write on
/// its older tree; the leader refuses it, and the follower checks it again once it
/// has applied the change (the test holds the follower back with a stalled snapshot
/// and a full in-memory log, as `a_follower_whose_snapshot_is_stalled_...` does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_follower_checks_a_write_again_after_the_leaders_grant_change() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let StalledFollower {
        replicas,
        leader,
        slow,
        stall,
        last,
    } = stalled_follower(&patient_byte_budgets(&dirs)).await;
    let changed = leader.submit(0, 0, grant("pay")).await.unwrap().zxid;
    assert!(slow.applied_zxid() < last, "the follower is behind");

    // Each check records the grant table's zxid on the tree it ran on.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let write = tokio::spawn({
        let (slow, seen) = (slow.clone(), seen.clone());
        async move {
            slow.submit_checked(0, 0, None, create("/after"), |t| {
                seen.lock().unwrap().push(t.grants_zxid());
                Ok::<(), super::ReplicaError>(())
            })
            .await
        }
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while seen.lock().unwrap().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "never checked");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        seen.lock().unwrap()[0] < changed,
        "{:?}",
        seen.lock().unwrap()
    );

    stall.send_replace(false);
    let c = write.await.unwrap().unwrap();
    assert!(c.result.is_ok(), "{:?}", c.result);
    assert!(c.zxid > changed);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.len(),
        2,
        "checked once more after the change: {seen:?}"
    );
    assert_eq!(seen[1], changed);
    for r in replicas.iter().chain([&slow]) {
        r.shutdown();
    }
}
