//! Tests of the runtime around the Zab core: group commit through the persister, and
//! restarts that rebuild the tree from a snapshot plus the log the core hands out.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::persist::{self, PersistJob, Persister};
use super::{Replica, ReplicaError};
use crate::config::Config;
use crate::storage::{storage_but_append_from, MemStorage, Storage, StorageError};
use crate::txn::{zxid_epoch, CreateMode, CreateOp, Txn, TxnOp, Zxid};
use crate::zab::PersistOp;

/// A storage that counts appends (each is one durable commit), or panics in them;
/// an append waits while the test holds `gate` (a stalled disk).
struct Counting {
    inner: MemStorage,
    appends: AtomicUsize,
    panics: bool,
    gate: std::sync::Mutex<()>,
}

impl Counting {
    fn new(panics: bool) -> Counting {
        Counting {
            inner: MemStorage::new(),
            appends: AtomicUsize::new(0),
            panics,
            gate: std::sync::Mutex::new(()),
        }
    }
}

impl Storage for Counting {
    fn append(&self, txns: &[Txn]) -> Result<(), StorageError> {
        drop(self.gate.lock());
        assert!(!self.panics, "a storage engine bug");
        self.appends.fetch_add(1, Ordering::SeqCst);
        self.inner.append(txns)
    }
    storage_but_append_from!(inner);
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
    let (done_tx, mut done_rx) = tokio::sync::watch::channel(Ok(0));
    for number in 1..=3u64 {
        let ops = vec![PersistOp::Append(vec![txn(number)])];
        assert!(jobs_tx.send(PersistJob::new(number, ops)).is_ok());
    }
    let metrics = Arc::new(crate::telemetry::Metrics::default());
    let thread = std::thread::spawn({
        let storage = storage.clone();
        let metrics = metrics.clone();
        let backlog = persist::Backlog::new(1 << 20);
        // Every append counts as slow with a threshold of 0.
        let observe = persist::Observe {
            metrics: metrics.clone(),
            slow: Duration::ZERO,
        };
        move || persist::run(storage, jobs_rx, done_tx, &backlog, &observe)
    });
    let done = done_rx.wait_for(|d| d != &Ok(0));
    let done = tokio::time::timeout(Duration::from_secs(10), done).await;
    assert_eq!(*done.unwrap().unwrap(), Ok(3));
    assert_eq!(storage.appends.load(Ordering::SeqCst), 1);
    assert_eq!(
        metrics.wal_fsync.count(),
        1,
        "one append, one fsync observed"
    );
    assert_eq!(metrics.wal_fsync_slow.get(), 1, "and over the threshold");
    assert_eq!(storage.read_after(0, 10).unwrap().len(), 3);
    drop(jobs_tx);
    assert!(thread.join().is_ok());
}

#[test]
fn a_panic_in_storage_is_a_reported_failure_and_dropping_the_persister_joins_it() {
    let storage = Arc::new(Counting::new(true));
    let (persister, mut done_rx) = Persister::start(storage.clone(), 1 << 20).unwrap();
    let ops = vec![PersistOp::Append(vec![txn(1)])];
    assert!(persister.send(PersistJob::new(1, ops)));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let reported = rt.block_on(async {
        let done = done_rx.wait_for(|d| d != &Ok(0));
        tokio::time::timeout(Duration::from_secs(10), done)
            .await
            .unwrap()
            .unwrap()
            .clone()
    });
    assert!(
        matches!(&reported, Err(e) if e.contains("panicked")),
        "{reported:?}"
    );
    drop(persister);
    assert_eq!(
        Arc::strong_count(&storage),
        1,
        "the thread let go of the storage"
    );
}

/// A txn carrying `data_bytes` of node data.
fn heavy_txn(zxid: Zxid, data_bytes: usize) -> Txn {
    Txn {
        op: TxnOp::Create(CreateOp {
            path: format!("/n{zxid}"),
            data: Bytes::from(vec![7u8; data_bytes]),
            mode: CreateMode::Persistent,
            ttl_ms: 0,
            null_data: false,
        }),
        ..txn(zxid)
    }
}

#[tokio::test]
async fn the_persister_queue_is_bounded_in_bytes_and_drains_as_the_disk_catches_up() {
    let storage = Arc::new(Counting::new(false));
    let (persister, mut done) = Persister::start(storage.clone(), 10_000).unwrap();
    let stalled = storage.gate.lock().unwrap();
    // Under the budget: input keeps coming.
    assert!(persister.send(PersistJob::new(
        1,
        vec![PersistOp::Append(vec![heavy_txn(1, 4000)])]
    )));
    assert!(!persister.over_budget(), "{}", persister.queued_bytes());
    // The disk is stalled; the next jobs take the queue over its budget, and the
    // pipeline must take no more input (it asks `over_budget` before each).
    for n in 2..=3 {
        let ops = vec![PersistOp::Append(vec![heavy_txn(n, 4000)])];
        assert!(persister.send(PersistJob::new(n, ops)));
    }
    assert!(persister.over_budget());
    assert!(
        persister.queued_bytes() >= 12_000,
        "{}",
        persister.queued_bytes()
    );
    drop(stalled);
    let written = tokio::time::timeout(Duration::from_secs(10), done.wait_for(|d| d == &Ok(3)));
    assert!(written.await.is_ok(), "the jobs were written");
    assert_eq!(persister.queued_bytes(), 0);
    assert!(!persister.over_budget());
    assert_eq!(storage.read_after(0, 10).unwrap().len(), 3);
}

#[tokio::test]
async fn writes_wait_for_their_share_of_the_proposal_byte_budget() {
    use super::forward::Write;
    use super::pipeline::{admit, ProposalBytes};
    let budget = ProposalBytes::new(10_000);
    let write = |bytes| Write {
        session_id: 0,
        request_id: 0,
        fence: None,
        op: heavy_txn(1, bytes).op,
        checked_at: 0,
        trace: None,
    };
    let first = admit(&budget, &write(6000)).await.unwrap();
    assert!(budget.available() < 4000, "{}", budget.available());
    // The second does not fit beside the first: it waits until the first is answered.
    let (w2, w3) = (write(6000), write(50_000));
    let second = admit(&budget, &w2);
    tokio::pin!(second);
    let polled = futures::FutureExt::now_or_never(&mut second);
    assert!(polled.is_none(), "a write over the budget was admitted");
    drop(first);
    let second = tokio::time::timeout(Duration::from_secs(10), second).await;
    assert!(second.unwrap().is_some());
    // A write heavier than the whole budget still goes, alone.
    let huge = admit(&budget, &w3);
    assert!(tokio::time::timeout(Duration::from_secs(10), huge)
        .await
        .is_ok());
}

fn config(dir: &std::path::Path) -> Config {
    Config {
        data_dir: dir.to_path_buf(),
        snapshot_every_txns: 3,
        ..Config::default()
    }
}

pub(crate) fn create(path: &str) -> TxnOp {
    TxnOp::Create(CreateOp {
        path: path.into(),
        data: Bytes::from_static(b"x"),
        mode: CreateMode::Persistent,
        ttl_ms: 0,
        null_data: false,
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

/// Three voters on free loopback ports.
pub(super) fn three_voters() -> Vec<crate::config::Member> {
    (1..=3u64)
        .map(|id| crate::config::Member {
            id,
            client_addr: crate::test_env::free_addr().into(),
            peer_addr: crate::test_env::free_addr().into(),
            role: crate::config::Role::Voter,
            peer_identity: None,
            zookeeper_addr: None,
        })
        .collect()
}

/// `base` as member `i` of `members`.
pub(super) fn member_config(members: &[crate::config::Member], i: usize, base: Config) -> Config {
    Config {
        server_id: members[i].id,
        client_addr: members[i].client_addr.socket_addr().unwrap(),
        peer_addr: members[i].peer_addr.socket_addr().unwrap(),
        members: members.to_vec(),
        ..base
    }
}

/// Three voters, each on its folder of `dirs`, with the tests' `config`.
pub(crate) async fn start_three(dirs: &[tempfile::TempDir]) -> Vec<Replica> {
    let members = three_voters();
    let mut replicas = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        let config = member_config(&members, i, config(dir.path()));
        replicas.push(Replica::start(&config).await.unwrap());
    }
    replicas
}

/// The one of `replicas` that leads, once one does (20 s at most).
pub(crate) async fn leader_of(replicas: &[Replica]) -> Replica {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(r) = replicas.iter().find(|r| r.is_leader()) {
            return r.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "no leader elected");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_elect_a_leader_and_replicate_its_writes() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let replicas = start_three(&dirs).await;
    let leader = leader_of(&replicas).await;
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
    // Some of the TTL runs out first, so that a keep-alive shows.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while leader.session_remaining_ms(session_id).unwrap() > 59_700 {
        assert!(tokio::time::Instant::now() < deadline, "the TTL never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = leader.session_remaining_ms(session_id).unwrap();
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
        null_data: false,
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
pub(super) async fn write_big(r: &Replica, writers: usize, per_writer: usize) -> Zxid {
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

/// Three voters with small byte budgets (`byte_budget`), patient with a machine busy
/// with other builds: no election mid-test.
pub(crate) fn patient_byte_budgets(dirs: &[tempfile::TempDir]) -> Vec<Config> {
    let members = three_voters();
    (0..3)
        .map(|i| {
            let base = Config {
                sync_limit_ticks: 20,
                init_limit_ticks: 100,
                ..byte_budget(dirs[i].path())
            };
            member_config(&members, i, base)
        })
        .collect()
}

/// `configs`, each with `leader_wait_ms_max` set to `ms`.
pub(crate) fn with_leader_wait(configs: Vec<Config>, ms: u64) -> Vec<Config> {
    configs
        .into_iter()
        .map(|c| Config {
            leader_wait_ms_max: ms,
            ..c
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_joins_after_many_large_writes_syncs_by_snap() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let configs = patient_byte_budgets(&dirs);
    // Two of three are a quorum; the third starts after the writes.
    let mut replicas = Vec::new();
    for config in &configs[..2] {
        replicas.push(Replica::start(config).await.unwrap());
    }
    let leader = leader_of(&replicas).await;
    leader.submit(0, 0, create("/big")).await.unwrap();
    let last = write_big(&leader, 8, 16).await;
    let cap = configs[0].log_memory_bytes_max;
    let (_, peak) = leader.log_bytes();
    assert!(peak <= cap + (129 << 10), "leader peak {peak}");
    let late = Replica::start(&configs[2]).await.unwrap();
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

/// Two replicas, and a third whose snapshots are held back until `stall` sends false,
/// with 8 MiB written (four times its log's bound, by two writers: a proposal
/// carries at most two txns of 128 KiB) and its in-memory log full.
pub(crate) struct StalledFollower {
    pub(crate) replicas: Vec<Replica>,
    pub(crate) leader: Replica,
    pub(crate) slow: Replica,
    pub(crate) stall: tokio::sync::watch::Sender<bool>,
    /// The zxid of the last write.
    pub(crate) last: Zxid,
}

pub(crate) async fn stalled_follower(configs: &[Config]) -> StalledFollower {
    let SlowFollower {
        replicas,
        leader,
        slow,
        stall,
    } = slow_follower(configs, Stall::Snapshots, true).await;
    let last = write_big(&leader, 2, 32).await;
    let cap = configs[2].log_memory_bytes_max;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while slow.log_bytes().0 < cap {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the follower's log never filled: {:?}",
            slow.log_bytes()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    StalledFollower {
        replicas,
        leader,
        slow,
        stall,
        last,
    }
}

/// What a slow follower's disk stalls (`housekeeping::stall`).
pub(crate) enum Stall {
    Snapshots,
    Fsyncs,
}

/// Three replicas: two that elected a leader and created `/big`, and a third that
/// has applied it, started with `stall` (closed at first when `closed`).
pub(crate) struct SlowFollower {
    pub(crate) replicas: Vec<Replica>,
    pub(crate) leader: Replica,
    pub(crate) slow: Replica,
    pub(crate) stall: tokio::sync::watch::Sender<bool>,
}

pub(crate) async fn slow_follower(configs: &[Config], what: Stall, closed: bool) -> SlowFollower {
    use super::housekeeping::stall::{FSYNCS, SNAPSHOTS};
    let mut replicas = Vec::new();
    for config in &configs[..2] {
        replicas.push(Replica::start(config).await.unwrap());
    }
    let leader = leader_of(&replicas).await;
    // The node `write_big` sets.
    let c = leader.submit(0, 0, create("/big")).await.unwrap();
    let (stall, gate) = tokio::sync::watch::channel(closed);
    let start = Replica::start(&configs[2]);
    let slow = match what {
        Stall::Snapshots => SNAPSHOTS.scope(gate, start).await,
        Stall::Fsyncs => FSYNCS.scope(gate, start).await,
    }
    .unwrap();
    slow.wait_applied(c.zxid, Duration::from_secs(20))
        .await
        .unwrap();
    // Synced with its leader too (its ack of NEWLEADER waits for its fsync): a
    // learner still synchronizing serves no reads.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !super::observe::Standing::of(&slow).synced {
        assert!(tokio::time::Instant::now() < deadline, "not synced");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    SlowFollower {
        replicas,
        leader,
        slow,
        stall,
    }
}

/// A follower applies committed txns before its own fsync of them ends, but a
/// snapshot of its applied state must not be above its log's durable end (storage
/// would take it for one installed over an emptied log, and refuse the appends still
/// in flight). With its fsyncs stalled and a snapshot due every 3 txns, it holds
/// its applies at the durable end instead of snapshotting; once the disk goes on,
/// it applies everything, snapshots, and keeps following.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_waits_for_the_log_to_be_durable_up_to_it() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let configs: Vec<Config> = patient_byte_budgets(&dirs)
        .into_iter()
        .map(|c| Config {
            snapshot_every_txns: 3,
            ..c
        })
        .collect();
    let SlowFollower {
        replicas,
        leader,
        slow,
        stall,
    } = slow_follower(&configs, Stall::Fsyncs, false).await;
    stall.send_replace(true);
    let mut last = 0;
    for i in 0..10 {
        last = leader
            .submit(0, 0, create(&format!("/n{i}")))
            .await
            .unwrap()
            .zxid;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while slow.committed_zxid() < last {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the follower never heard of the commits"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        slow.applied_zxid() < last,
        "applies were not held while a snapshot waited for the log"
    );
    assert_eq!(
        slow.role(),
        crate::zab::Role::Following,
        "the follower stopped"
    );
    stall.send_replace(false);
    slow.wait_applied(last, Duration::from_secs(20))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while slow.storage().snapshots().unwrap().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no snapshot written"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let after = leader.submit(0, 0, create("/after")).await.unwrap();
    slow.wait_applied(after.zxid, Duration::from_secs(20))
        .await
        .unwrap();
    for r in replicas.iter().chain([&slow]) {
        r.shutdown();
    }
}

/// A follower whose own snapshot is stalled (a slow disk) stops reading its leader
/// once its in-memory log is full, instead of appending every proposal it is sent;
/// the leader and the other follower go on meanwhile, and once the snapshot is
/// written the follower catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_whose_snapshot_is_stalled_keeps_its_log_within_the_bound() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let configs = patient_byte_budgets(&dirs);
    let StalledFollower {
        replicas,
        leader,
        slow,
        stall,
        last,
    } = stalled_follower(&configs).await;
    let cap = configs[2].log_memory_bytes_max;
    let bound = cap + 2 * (129 << 10);
    // Every proposal is queued for it by now: without the bound it takes them all
    // in within moments. Give it a bounded while to do so (this only makes the test
    // able to fail; with the bound nothing changes until the snapshot is released).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while tokio::time::Instant::now() < deadline && slow.applied_zxid() < last {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (now, peak) = slow.log_bytes();
    assert!(
        peak <= bound,
        "follower peak {peak} (now {now}), bound {bound}"
    );
    assert!(slow.applied_zxid() < last, "it stopped reading its leader");
    assert!(
        leader.log_bytes().1 <= bound,
        "leader {:?}",
        leader.log_bytes()
    );
    // Released: the snapshot compacts the log, and the follower reads on.
    stall.send_replace(false);
    slow.wait_applied(last, Duration::from_secs(30))
        .await
        .unwrap();
    let data = |r: &Replica| r.read(|t| t.get("/big").map(|n| n.data.clone()));
    assert_eq!(data(&slow), data(&leader));
    assert!(!slow.storage().snapshots().unwrap().is_empty());
    for r in replicas.iter().chain([&slow]) {
        r.shutdown();
    }
}

/// The same follower, no longer reading its leader while its snapshot is stalled,
/// stops serving from its tree once that has lasted a sync limit: its core's clock
/// stands meanwhile, so the core cannot notice that its leader went, and what the
/// follower holds falls further behind with every write. Reads then answer
/// NotLeader after `leader_wait` and its streams end; once the snapshot is written
/// it catches up and serves again. (It went on serving reads that lagged by as
/// long as the snapshot took.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_stops_reading_its_leader_stops_serving_reads() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let configs = with_leader_wait(patient_byte_budgets(&dirs), 300);
    let StalledFollower {
        replicas,
        leader,
        slow,
        stall,
        last: _,
    } = stalled_follower(&configs).await;
    let fresh = leader.submit(0, 0, create("/fresh")).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        match slow.in_touch().await {
            Err(ReplicaError::NotLeader { .. }) => break,
            other => {
                assert!(other.is_ok(), "{other:?}");
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the follower kept serving reads without /fresh for 15 s"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(slow.read(|t| t.get("/fresh").is_none()), "it is behind");
    let ended = tokio::time::timeout(Duration::from_secs(5), slow.cut_off()).await;
    assert!(
        matches!(ended, Ok(ReplicaError::NotLeader { .. })),
        "its streams go on: {ended:?}"
    );
    // Released: it catches up, then serves again.
    stall.send_replace(false);
    slow.wait_applied(fresh.zxid, Duration::from_secs(30))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while slow.in_touch().await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "it never served again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(slow.read(|t| t.get("/fresh").is_some()));
    for r in replicas.iter().chain([&slow]) {
        r.shutdown();
    }
}

#[tokio::test]
async fn expiries_are_proposed_with_a_bounded_number_in_flight() {
    use super::housekeeping::propose_expiries;
    let in_flight = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let close = |id: u64| {
        let in_flight = in_flight.clone();
        let peak = peak.clone();
        async move {
            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            tokio::task::yield_now().await;
            in_flight.fetch_sub(1, Ordering::SeqCst);
            !id.is_multiple_of(10)
        }
    };
    let failed = propose_expiries((1..=5000).collect(), 64, close).await;
    let mut failed = failed;
    failed.sort_unstable();
    assert_eq!(failed, (1..=500).map(|i| i * 10).collect::<Vec<u64>>());
    let peak = peak.load(Ordering::SeqCst);
    assert!((2..=64).contains(&peak), "peak {peak}");
}

#[test]
fn many_sessions_expiring_at_once_cost_a_bounded_number_of_tasks() {
    let dir = tempfile::tempdir().unwrap();
    with_replica(dir.path(), async |r| {
        let alive = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        let before = alive();
        let opens = (0..1000).map(|_| r.submit(0, 0, TxnOp::OpenSession { ttl_ms: 200 }));
        for opened in futures::future::join_all(opens).await {
            assert!(opened.unwrap().result.is_ok());
        }
        // Sample the runtime's tasks until every session is gone.
        let mut peak = 0;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while r.read(|t| t.sessions().count()) > 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "sessions not expired"
            );
            peak = peak.max(alive());
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(
            peak <= before + 4,
            "{peak} tasks alive at the peak, {before} before"
        );
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_far_behind_gets_a_snapshot_larger_than_a_peer_frame() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let members = three_voters();
    let config_of = |i: usize| {
        let base = Config {
            peer_frame_bytes_max: 4096,
            // Server 3 takes no snapshot of its own: one in its storage came from the leader.
            snapshot_every_txns: if i == 2 { 100_000 } else { 3 },
            ..config(dirs[i].path())
        };
        member_config(&members, i, base)
    };
    let mut replicas = Vec::new();
    for i in 0..2 {
        replicas.push(Replica::start(&config_of(i)).await.unwrap());
    }
    let leader = leader_of(&replicas).await;
    // About 300 KB of tree, in batches of concurrent writes.
    let mut last = 0;
    for batch in 0..10 {
        let writes = (0..30).map(|i| {
            let op = TxnOp::Create(CreateOp {
                path: format!("/n{batch}-{i}"),
                data: Bytes::from(vec![b'x'; 1000]),
                mode: CreateMode::Persistent,
                ttl_ms: 0,
                null_data: false,
            });
            leader.submit(0, 0, op)
        });
        for c in futures::future::join_all(writes).await {
            let c = c.unwrap();
            assert!(c.result.is_ok(), "{:?}", c.result);
            last = last.max(c.zxid);
        }
    }
    // Wait until the leader's Zab log no longer reaches back to the first write
    // (its storage purges before the core compacts, so the storage's log start says
    // less): the 300 writes hold at least 300,000 bytes until a snapshot covers one.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while leader.log_bytes().0 >= 300 * 1000 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the log was never compacted"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let late = Replica::start(&config_of(2)).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    late.wait_applied(last, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(
        late.read(|t| t.get("/n9-29").map(|n| n.data.len())),
        Some(1000)
    );
    // The SNAP is applied while it is written (it is durable before server 3 acks
    // NEWLEADER, not before it applies): wait for it in storage.
    let storage = late.storage();
    while storage.snapshots().unwrap().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "server 3 was not sent a snapshot"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    late.shutdown();
    for r in &replicas {
        r.shutdown();
    }
}

#[tokio::test]
async fn a_group_commit_batch_closes_at_its_byte_bound() {
    use super::forward::Write;
    use super::pipeline::{admit, fill_batch, ProposalBytes};
    let budget = ProposalBytes::new(1 << 20);
    let (tx, mut rx) = mpsc::channel(16);
    for _ in 0..10 {
        let write = Write {
            session_id: 0,
            request_id: 0,
            fence: None,
            op: heavy_txn(1, 1000).op,
            checked_at: 0,
            trace: None,
        };
        let bytes = admit(&budget, &write).await.unwrap();
        let (reply, _) = tokio::sync::oneshot::channel();
        let queued = super::pipeline::Proposal {
            write,
            caller: super::pipeline::Reply::new(reply, bytes),
        };
        assert!(tx.send(queued).await.is_ok());
    }
    let mut batch = vec![rx.recv().await.unwrap()];
    // About 1100 bytes each: the third crosses 2500 and is the last one in.
    fill_batch(&mut rx, &mut batch, 1024, 2500);
    assert_eq!(batch.len(), 3);
    // The count bound still holds on its own.
    let mut batch = vec![rx.recv().await.unwrap()];
    fill_batch(&mut rx, &mut batch, 2, 1 << 20);
    assert_eq!(batch.len(), 2);
}

#[tokio::test]
async fn a_forwarded_batch_is_answered_in_its_order() {
    use super::forward::Write;
    let dir = tempfile::tempdir().unwrap();
    let r = Replica::start(&config(dir.path())).await.unwrap();
    let write = |path: &str| Write {
        session_id: 0,
        request_id: 0,
        fence: None,
        op: create(path),
        checked_at: 0,
        trace: None,
    };
    let before = r.read(|t| t.last_zxid());
    let batch = vec![write("/a"), write("/a"), write("/b")];
    let outcomes = tokio::time::timeout(Duration::from_secs(10), r.submit_local_batch(batch))
        .await
        .unwrap();
    let committed: Vec<super::Committed> = outcomes.into_iter().map(Result::unwrap).collect();
    let zxids: Vec<Zxid> = committed.iter().map(|c| c.zxid).collect();
    assert!(zxids[0] > before, "{zxids:?}");
    assert_eq!(zxids, vec![zxids[0], zxids[0] + 1, zxids[0] + 2]);
    assert!(committed[0].result.is_ok());
    assert!(
        matches!(
            committed[1].result,
            Err(crate::tree::TreeError::NodeExists { .. })
        ),
        "{:?}",
        committed[1].result
    );
    assert!(committed[2].result.is_ok());
    r.shutdown();
}

/// A server keeps sessions alive only where a leader hears it: the leader and its
/// followers have one at once; a follower whose leader and other follower are gone
/// waits (its touches would reach no one) until it stops. It serves reads from its
/// own state until `leader_wait` after it lost its leader, and refuses them then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_a_leader_that_hears_it_waits_for_one() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let replicas = start_three(&dirs).await;
    let leader = leader_of(&replicas).await;
    let c = leader.submit(0, 0, create("/x")).await.unwrap();
    for r in &replicas {
        r.wait_applied(c.zxid, Duration::from_secs(10))
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(10), r.wait_for_leader())
            .await
            .expect("a leader that hears this server")
            .unwrap();
        r.in_touch().await.unwrap();
    }
    let survivor = replicas.iter().find(|r| !r.is_leader()).unwrap().clone();
    for r in replicas
        .iter()
        .filter(|r| r.server_id() != survivor.server_id())
    {
        r.shutdown();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while survivor.role() != crate::zab::Role::Looking {
        assert!(tokio::time::Instant::now() < deadline, "still following");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let waited = tokio::time::timeout(Duration::from_millis(500), survivor.wait_for_leader()).await;
    assert!(
        waited.is_err(),
        "a leader, with no other server up: {waited:?}"
    );
    // Its own state serves reads only for `leader_wait` after it lost its leader.
    let lost = tokio::time::timeout(Duration::from_secs(10), survivor.cut_off())
        .await
        .expect("a server alone is cut off once leader_wait has passed");
    assert!(
        matches!(lost, super::ReplicaError::NotLeader { .. }),
        "{lost:?}"
    );
    let read = tokio::time::timeout(Duration::from_secs(1), survivor.in_touch())
        .await
        .expect("refused at once, the wait having passed");
    assert!(
        matches!(read, Err(super::ReplicaError::NotLeader { .. })),
        "{read:?}"
    );
    survivor.shutdown();
    let stopped = tokio::time::timeout(Duration::from_secs(10), survivor.wait_for_leader())
        .await
        .expect("the wait ends when the server stops");
    assert!(
        matches!(stopped, Err(super::ReplicaError::Unavailable(_))),
        "{stopped:?}"
    );
}
