//! Tests of the runtime around the Zab core: group commit through the persister, and
//! restarts that rebuild the tree from a snapshot plus the log the core hands out.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::persist::{self, PersistJob, Persister};
use super::Replica;
use crate::config::Config;
use crate::storage::{MemStorage, Storage, StorageError};
use crate::txn::{zxid_epoch, CreateMode, CreateOp, Txn, TxnOp, Zxid};
use crate::zab::PersistOp;

/// A storage that counts appends (each is one durable commit), or panics in them.
struct Counting {
    inner: MemStorage,
    appends: AtomicUsize,
    panics: bool,
}

impl Counting {
    fn new(panics: bool) -> Counting {
        Counting {
            inner: MemStorage::new(),
            appends: AtomicUsize::new(0),
            panics,
        }
    }
}

impl Storage for Counting {
    fn append(&self, txns: &[Txn]) -> Result<(), StorageError> {
        assert!(!self.panics, "a storage engine bug");
        self.appends.fetch_add(1, Ordering::SeqCst);
        self.inner.append(txns)
    }
    fn last_zxid(&self) -> Result<Zxid, StorageError> {
        self.inner.last_zxid()
    }
    fn read_after(&self, after: Zxid, max: usize) -> Result<Vec<Txn>, StorageError> {
        self.inner.read_after(after, max)
    }
    fn truncate_after(&self, zxid: Zxid) -> Result<(), StorageError> {
        self.inner.truncate_after(zxid)
    }
    fn save_snapshot(&self, zxid: Zxid, data: &[u8]) -> Result<(), StorageError> {
        self.inner.save_snapshot(zxid, data)
    }
    fn snapshots(&self) -> Result<Vec<Zxid>, StorageError> {
        self.inner.snapshots()
    }
    fn load_snapshot(&self, zxid: Zxid) -> Result<Vec<u8>, StorageError> {
        self.inner.load_snapshot(zxid)
    }
    fn purge(&self, keep: usize) -> Result<(), StorageError> {
        self.inner.purge(keep)
    }
    fn log_start(&self) -> Result<Zxid, StorageError> {
        self.inner.log_start()
    }
    fn get_u64(&self, key: &str) -> Result<Option<u64>, StorageError> {
        self.inner.get_u64(key)
    }
    fn set_u64(&self, key: &str, value: u64) -> Result<(), StorageError> {
        self.inner.set_u64(key, value)
    }
}

fn txn(zxid: Zxid) -> Txn {
    Txn {
        zxid,
        time_ms: 0,
        session_id: 0,
        request_id: 0,
        fence: None,
        op: TxnOp::Reap { path: "/a".into() },
    }
}

#[tokio::test]
async fn readies_queued_during_a_write_share_one_append() {
    let storage = Arc::new(Counting::new(false));
    let (jobs_tx, jobs_rx) = mpsc::unbounded_channel();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel();
    for number in 1..=3u64 {
        let ops = vec![PersistOp::Append(vec![txn(number)])];
        assert!(jobs_tx.send(PersistJob { number, ops }).is_ok());
    }
    let thread = std::thread::spawn({
        let storage = storage.clone();
        move || persist::run(storage, jobs_rx, done_tx)
    });
    assert_eq!(done_rx.recv().await, Some(Ok(3)));
    assert_eq!(storage.appends.load(Ordering::SeqCst), 1);
    assert_eq!(storage.read_after(0, 10).unwrap().len(), 3);
    drop(jobs_tx);
    assert!(thread.join().is_ok());
}

#[test]
fn a_panic_in_storage_is_a_reported_failure_and_dropping_the_persister_joins_it() {
    let storage = Arc::new(Counting::new(true));
    let (done_tx, mut done_rx) = mpsc::unbounded_channel();
    let persister = Persister::start(storage.clone(), done_tx).unwrap();
    let ops = vec![PersistOp::Append(vec![txn(1)])];
    assert!(persister.send(PersistJob { number: 1, ops }));
    let reported = done_rx.blocking_recv();
    assert!(
        matches!(&reported, Some(Err(e)) if e.contains("panicked")),
        "{reported:?}"
    );
    drop(persister);
    assert_eq!(
        Arc::strong_count(&storage),
        1,
        "the thread let go of the storage"
    );
}

fn config(dir: &std::path::Path) -> Config {
    Config {
        data_dir: dir.to_path_buf(),
        snapshot_every_txns: 3,
        ..Config::default()
    }
}

fn create(path: &str) -> TxnOp {
    TxnOp::Create(CreateOp {
        path: path.into(),
        data: Bytes::from_static(b"x"),
        mode: CreateMode::Persistent,
        ttl_ms: 0,
    })
}

/// Starts a replica on its own runtime, runs `f`, and drops the runtime (every task
/// and the storage with it), as a process exit would.
fn with_replica<R>(dir: &std::path::Path, f: impl AsyncFnOnce(Replica) -> R) -> R {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let config = config(dir);
    let out = rt.block_on(async {
        let replica = Replica::start(&config).await.unwrap();
        let out = f(replica.clone()).await;
        replica.shutdown();
        out
    });
    drop(rt);
    out
}

#[test]
fn restart_rebuilds_the_tree_from_snapshot_and_log() {
    let dir = tempfile::tempdir().unwrap();
    let written = with_replica(dir.path(), async |r| {
        assert_eq!(r.epoch(), 1);
        let mut zxids = Vec::new();
        for i in 0..8 {
            let c = r.submit(0, 0, create(&format!("/n{i}"))).await.unwrap();
            assert!(c.result.is_ok(), "{:?}", c.result);
            zxids.push(c.zxid);
        }
        // zxids come from the core: epoch 1, counters in order.
        assert!(zxids.windows(2).all(|w| w[0] < w[1]));
        assert!(zxids.iter().all(|z| zxid_epoch(*z) == 1));
        // Wait until a snapshot exists, so the restart uses snapshot + log.
        let storage = r.storage();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while storage.snapshots().unwrap().is_empty() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no snapshot written"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        zxids
    });
    let last = *written.last().unwrap();
    with_replica(dir.path(), async |r| {
        assert_eq!(r.epoch(), 2, "a restart starts a new epoch");
        assert_eq!(
            r.applied_zxid(),
            last,
            "start waits until the log is applied"
        );
        let count = r.read(|t| {
            (0..8)
                .filter(|i| t.get(&format!("/n{i}")).is_some())
                .count()
        });
        assert_eq!(count, 8);
        assert_eq!(r.linearize(Duration::from_secs(5)).await.unwrap(), last);
        let c = r.submit(0, 0, create("/after")).await.unwrap();
        assert!(c.result.is_ok());
        assert_eq!(zxid_epoch(c.zxid), 2);
        assert!(c.zxid > last);
    });
}

/// A free loopback port (bound then released; good enough for a test).
fn free_addr() -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_elect_a_leader_and_replicate_its_writes() {
    use crate::config::{Member, Role};
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let members: Vec<Member> = (1..=3u64)
        .map(|id| Member {
            id,
            client_addr: free_addr(),
            peer_addr: free_addr(),
            role: Role::Voter,
        })
        .collect();
    let mut replicas = Vec::new();
    for (m, dir) in members.iter().zip(&dirs) {
        let config = Config {
            server_id: m.id,
            client_addr: m.client_addr,
            peer_addr: m.peer_addr,
            members: members.clone(),
            ..config(dir.path())
        };
        replicas.push(Replica::start(&config).await.unwrap());
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let leader = loop {
        if let Some(r) = replicas.iter().find(|r| r.is_leader()) {
            break r.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "no leader elected");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let c = leader.submit(0, 0, create("/x")).await.unwrap();
    assert!(c.result.is_ok(), "{:?}", c.result);
    for r in &replicas {
        r.wait_applied(c.zxid, Duration::from_secs(10))
            .await
            .unwrap();
        assert!(
            r.read(|t| t.get("/x").is_some()),
            "server {}",
            r.server_id()
        );
        let expected_role = if r.server_id() == leader.server_id() {
            crate::zab::Role::Leading
        } else {
            crate::zab::Role::Following
        };
        assert_eq!(r.role(), expected_role, "server {}", r.server_id());
    }
    // Followers forward writes and read indexes, and answer once applied locally.
    let mut last = c.zxid;
    for r in replicas.iter().filter(|r| !r.is_leader()) {
        let path = format!("/from{}", r.server_id());
        let c = r.submit(0, 0, create(&path)).await.unwrap();
        assert!(c.result.is_ok(), "{:?}", c.result);
        assert!(c.zxid > last);
        last = c.zxid;
        assert!(r.applied_zxid() >= c.zxid, "answered before applying");
        assert!(r.read(|t| t.get(&path).is_some()));
        assert!(r.linearize(Duration::from_secs(5)).await.unwrap() >= c.zxid);
    }
    // A keep-alive on a follower reaches the leader within a tick or so.
    let follower = replicas.iter().find(|r| !r.is_leader()).unwrap();
    let open = TxnOp::OpenSession { ttl_ms: 60_000 };
    let opened = follower.submit(0, 0, open).await.unwrap();
    let Ok(crate::tree::TxnResult::SessionOpened { session_id, .. }) = opened.result else {
        panic!("{:?}", opened.result);
    };
    leader
        .wait_applied(opened.zxid, Duration::from_secs(5))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = leader.session_remaining_ms(session_id).unwrap();
    assert!(before <= 59_700, "{before}");
    assert!(follower.keep_alive(session_id).is_some());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while leader.session_remaining_ms(session_id).unwrap() <= before {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the leader never heard the keep-alive"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for r in &replicas {
        r.shutdown();
    }
}

/// A Set of `data_bytes` bytes of `fill` to `path`.
fn set(path: &str, fill: u8, data_bytes: usize) -> TxnOp {
    TxnOp::Set(crate::txn::SetOp {
        path: path.into(),
        data: Bytes::from(vec![fill; data_bytes]),
        version: -1,
    })
}

/// Small byte budgets: snapshots every 1 MiB of txns, the log held under 2 MiB.
fn byte_budget(dir: &std::path::Path) -> Config {
    Config {
        snapshot_every_txns: 1_000_000,
        snapshot_every_bytes: 1 << 20,
        log_memory_bytes_max: 2 << 20,
        ..config(dir)
    }
}

/// `writers` concurrent writers each Set `/big` `per_writer` times with 128 KiB.
async fn write_big(r: &Replica, writers: usize, per_writer: usize) -> Zxid {
    let mut tasks = Vec::new();
    for w in 0..writers {
        let r = r.clone();
        tasks.push(tokio::spawn(async move {
            let mut last = 0;
            for i in 0..per_writer {
                let op = set("/big", (w * per_writer + i) as u8, 128 << 10);
                let c = r.submit(0, 0, op).await;
                let c = c.unwrap_or_else(|e| panic!("write {i} of writer {w}: {e}"));
                assert!(c.result.is_ok(), "{:?}", c.result);
                last = last.max(c.zxid);
            }
            last
        }));
    }
    let mut last = 0;
    for t in tasks {
        last = last.max(t.await.unwrap());
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_memory_log_stays_within_its_byte_budget() {
    let dir = tempfile::tempdir().unwrap();
    let config = byte_budget(dir.path());
    let r = Replica::start(&config).await.unwrap();
    r.submit(0, 0, create("/big")).await.unwrap();
    // 32 MiB written by 16 writers, 16 times the budget: without snapshots by
    // bytes the log would hold all of it (100,000 txns is the count rule).
    let last = write_big(&r, 16, 16).await;
    let (now, peak) = r.log_bytes();
    let txn_max = 129 << 10;
    assert!(
        peak <= config.log_memory_bytes_max + txn_max,
        "peak {peak}, now {now}"
    );
    assert!(
        r.storage().snapshots().unwrap().len() >= 2,
        "snapshots by bytes"
    );
    let data = r.read(|t| t.get("/big").map(|n| n.data.clone()));
    assert_eq!(data.map(|d| d.len()), Some(128 << 10));
    assert_eq!(r.applied_zxid(), last);
    r.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_joins_after_many_large_writes_syncs_by_snap() {
    use crate::config::{Member, Role};
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let members: Vec<Member> = (1..=3u64)
        .map(|id| Member {
            id,
            client_addr: free_addr(),
            peer_addr: free_addr(),
            role: Role::Voter,
        })
        .collect();
    let config_of = |i: usize| Config {
        server_id: members[i].id,
        client_addr: members[i].client_addr,
        peer_addr: members[i].peer_addr,
        members: members.clone(),
        // Patient with a machine busy with other builds: no election mid-test.
        sync_limit_ticks: 20,
        init_limit_ticks: 100,
        ..byte_budget(dirs[i].path())
    };
    // Two of three are a quorum; the third starts after the writes.
    let mut replicas = Vec::new();
    for i in 0..2 {
        replicas.push(Replica::start(&config_of(i)).await.unwrap());
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let leader = loop {
        if let Some(r) = replicas.iter().find(|r| r.is_leader()) {
            break r.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "no leader elected");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    leader.submit(0, 0, create("/big")).await.unwrap();
    let last = write_big(&leader, 8, 16).await;
    let cap = config_of(0).log_memory_bytes_max;
    let (_, peak) = leader.log_bytes();
    assert!(peak <= cap + (129 << 10), "leader peak {peak}");
    let late = Replica::start(&config_of(2)).await.unwrap();
    late.wait_applied(last, Duration::from_secs(20))
        .await
        .unwrap();
    let data = |r: &Replica| r.read(|t| t.get("/big").map(|n| n.data.clone()));
    assert_eq!(data(&late), data(&leader));
    // Behind the leader's snapshots: SNAP (the tree is installed at once, the
    // snapshot stored by the persister right after).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while late.storage().snapshots().unwrap().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "no SNAP stored");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(late.log_bytes().1 <= cap + (129 << 10));
    // And it follows the next writes.
    let c = leader.submit(0, 0, set("/big", 1, 10)).await.unwrap();
    late.wait_applied(c.zxid, Duration::from_secs(10))
        .await
        .unwrap();
    for r in replicas.iter().chain([&late]) {
        r.shutdown();
    }
}
