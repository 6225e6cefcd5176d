//! Quotas through the real pipeline: the leader checks each write before it
//! proposes it, so concurrent creates (proposed together, applied later) never pass
//! the limit, and a refused write is never proposed.

use std::time::Duration;

use bytes::Bytes;

use super::Replica;
use crate::config::{Config, QuotaConfig, TeamConfig};
use crate::tree::TreeError;
use crate::txn::{CreateMode, CreateOp, SetOp, TxnOp};

fn config(dir: &std::path::Path, quota: QuotaConfig) -> Config {
    Config {
        data_dir: dir.to_path_buf(),
        snapshot_every_txns: 7,
        teams: vec![TeamConfig {
            name: "a".into(),
            root: "/teams/a".into(),
            identities: vec!["a".into()],
            quota,
        }],
        ..Config::default()
    }
}

fn create(path: &str, data: &[u8]) -> TxnOp {
    TxnOp::Create(CreateOp {
        path: path.into(),
        data: Bytes::copy_from_slice(data),
        mode: CreateMode::Persistent,
        ttl_ms: 0,
        null_data: false,
    })
}

async fn ok(r: &Replica, op: TxnOp) {
    let c = r.submit(0, 0, op).await.unwrap();
    assert!(c.result.is_ok(), "{:?}", c.result);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_never_pass_the_nodes_quota() {
    let dir = tempfile::tempdir().unwrap();
    let quota = QuotaConfig {
        nodes_max: 5,
        ..QuotaConfig::default()
    };
    let r = Replica::start(&config(dir.path(), quota)).await.unwrap();
    ok(&r, create("/teams", b"")).await;
    ok(&r, create("/teams/a", b"")).await;
    let zxid_before = r.applied_zxid();
    // All submitted at once: most are proposed before any is applied.
    let writes = (0..40).map(|i| {
        let r = r.clone();
        tokio::spawn(async move { r.submit(0, 0, create(&format!("/teams/a/n{i}"), b"")).await })
    });
    let mut created = 0;
    let mut refused = 0;
    for w in writes.collect::<Vec<_>>() {
        let c = w.await.unwrap().unwrap();
        match c.result {
            Ok(_) => created += 1,
            Err(TreeError::QuotaExceeded {
                ref resource,
                limit,
                ..
            }) => {
                assert_eq!((resource.as_str(), limit), ("nodes", 5));
                assert_eq!(c.zxid, 0, "a refused write is not proposed");
                refused += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!((created, refused), (5, 35));
    let usage = r.read(|t| t.usage("/teams/a")).unwrap();
    assert_eq!(usage.nodes, 5);
    let children = r.read(|t| t.children("/teams/a", "", 0).unwrap().len());
    assert_eq!(children, 5);
    // Only the five creates took zxids.
    assert_eq!(r.applied_zxid() - zxid_before, 5);
    r.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_that_grows_data_is_hit_at_the_byte_limit_and_a_restart_recounts() {
    let dir = tempfile::tempdir().unwrap();
    let quota = QuotaConfig {
        data_bytes_max: 100,
        ..QuotaConfig::default()
    };
    let config = config(dir.path(), quota);
    let r = Replica::start(&config).await.unwrap();
    ok(&r, create("/teams", b"")).await;
    ok(&r, create("/teams/a", b"")).await;
    ok(&r, create("/teams/a/x", &[1; 40])).await;
    let set = |n: usize| {
        TxnOp::Set(SetOp {
            path: "/teams/a/x".into(),
            data: Bytes::from(vec![2; n]),
            version: -1,
            null_data: false,
        })
    };
    ok(&r, set(100)).await;
    let c = r.submit(0, 0, set(101)).await.unwrap();
    assert!(
        matches!(
            c.result,
            Err(TreeError::QuotaExceeded {
                used: 100,
                limit: 100,
                adds: 1,
                ..
            })
        ),
        "{:?}",
        c.result
    );
    assert_eq!(r.read(|t| t.get("/teams/a/x").unwrap().data.len()), 100);
    // Enough writes for a snapshot, so the restart loads one and replays the rest.
    for i in 0..10 {
        ok(&r, create(&format!("/outside{i}"), b"free")).await;
    }
    let storage = r.storage();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while storage.snapshots().unwrap().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no snapshot written"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    r.shutdown();
    drop(r);
    drop(storage);
    let r = restart(&config).await;
    let usage = r.read(|t| t.usage("/teams/a")).unwrap();
    assert_eq!((usage.nodes, usage.data_bytes), (1, 100));
    let c = r.submit(0, 0, create("/teams/a/y", b"z")).await.unwrap();
    assert!(
        matches!(c.result, Err(TreeError::QuotaExceeded { .. })),
        "{:?}",
        c.result
    );
    ok(&r, create("/teams/a/y", b"")).await;
    r.shutdown();
}

/// Starts a replica on `config`'s data folder once the previous one let go of it.
async fn restart(config: &Config) -> Replica {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match Replica::start(config).await {
            Ok(r) => return r,
            Err(e) => {
                assert!(tokio::time::Instant::now() < deadline, "restart: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_forwards_a_write_and_hears_the_leaders_refusal() {
    use super::tests::{leader_of, member_config, three_voters};
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let members = three_voters();
    let quota = QuotaConfig {
        nodes_max: 2,
        ..QuotaConfig::default()
    };
    let mut replicas = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        let config = member_config(&members, i, config(dir.path(), quota));
        replicas.push(Replica::start(&config).await.unwrap());
    }
    let leader = leader_of(&replicas).await;
    ok(&leader, create("/teams", b"")).await;
    ok(&leader, create("/teams/a", b"")).await;
    let follower = replicas.iter().find(|r| !r.is_leader()).unwrap().clone();
    ok(&follower, create("/teams/a/x", b"")).await;
    ok(&follower, create("/teams/a/y", b"")).await;
    let c = follower
        .submit(0, 0, create("/teams/a/z", b""))
        .await
        .unwrap();
    assert!(
        matches!(
            c.result,
            Err(TreeError::QuotaExceeded {
                used: 2,
                limit: 2,
                ..
            })
        ),
        "{:?}",
        c.result
    );
    let last = leader.applied_zxid();
    for r in &replicas {
        r.wait_applied(last, Duration::from_secs(10)).await.unwrap();
        assert_eq!(r.read(|t| t.usage("/teams/a")).unwrap().nodes, 2);
        assert!(r.read(|t| t.get("/teams/a/z").is_none()));
    }
    for r in &replicas {
        r.shutdown();
    }
}

fn open(owner: &str) -> TxnOp {
    TxnOp::OpenOwnedSession {
        ttl_ms: 60_000,
        owner: owner.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_hit_at_their_limit_and_a_close_frees_one() {
    let dir = tempfile::tempdir().unwrap();
    let quota = QuotaConfig {
        sessions_max: 2,
        ..QuotaConfig::default()
    };
    let config = config(dir.path(), quota);
    let r = Replica::start(&config).await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..2 {
        let c = r.submit(0, 0, open("a")).await.unwrap();
        let Ok(crate::tree::TxnResult::SessionOpened { session_id, .. }) = c.result else {
            panic!("{:?}", c.result);
        };
        ids.push(session_id);
    }
    let c = r.submit(0, 0, open("a")).await.unwrap();
    let Err(e @ TreeError::QuotaExceeded { .. }) = c.result else {
        panic!("{:?}", c.result);
    };
    assert_eq!(
        e.to_string(),
        "team \"a\" would exceed its sessions quota: 2 used of 2, the write adds 1"
    );
    assert_eq!(r.read(|t| t.sessions().count()), 2);
    // Admins (and identities in no team) are not limited.
    for owner in ["admin", "stranger"] {
        assert!(r.submit(0, 0, open(owner)).await.unwrap().result.is_ok());
    }
    let close = TxnOp::CloseSession {
        session_id: ids[0],
        reason: crate::txn::CloseReason::Closed,
    };
    ok(&r, close).await;
    assert!(r.submit(0, 0, open("a")).await.unwrap().result.is_ok());
    assert!(r.submit(0, 0, open("a")).await.unwrap().result.is_err());
    r.shutdown();
    drop(r);
    // A restart counts the team's sessions again from the tree.
    let r = restart(&config).await;
    let c = r.submit(0, 0, open("a")).await.unwrap();
    assert!(
        matches!(c.result, Err(TreeError::QuotaExceeded { .. })),
        "{:?}",
        c.result
    );
    r.shutdown();
}
