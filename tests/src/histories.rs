//! Clients that record histories while a nemesis breaks an ensemble, and the checks
//! run on what they recorded (issue 15 point 4). Shared by t93 (three servers,
//! faults of the leader) and t94 (five servers, partitions).
//!
//! - **Clients** (`clients`, each first on its own server, then the others): set,
//!   compare-and-set (a set naming the version last seen) and read linearizably
//!   three keys, recording each call and its outcome. They are the Rust SDK's,
//!   writing with a session and request ids, so a write whose outcome the SDK does
//!   not know is retried and answered with its first outcome; one still unknown when
//!   the SDK gives up may have happened or not, and an error the SDK calls
//!   retry-safe (nothing was done) never happened. A third of the reads are default
//!   reads (any server's applied state): not in the history, but like every answer
//!   never older than what their client had seen.
//! - **Lockers** (`lockers`): take one mutex in turn and write a key fenced by their
//!   token, while a stealer releases the holder's node behind its back as an admin
//!   (so the holder goes on writing with a token that no longer holds).
//! - **Watchers**, one starting on each server, watch every change from before the
//!   first write, resumed after every break.
//!
//! What `finish` checks:
//! - the history is linearizable key by key (`linearizability::check_keys`);
//! - no answer is older than what its client had already been answered with;
//! - each watcher delivers every acknowledged set exactly once, in zxid order, and
//!   (when no write stayed unknown) nothing else;
//! - in what each watcher delivers, the fenced writes never overlap
//!   (`fencing::check_fenced`), and every acknowledged fenced write is there;
//! - holders lost their lock while writing and were refused (FENCED), so the fence
//!   was tried.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use concord::{
    Client, Error, ErrorCode, EventKind, ReadOptions, RetryPolicy, Session, Watch, WatchMessage,
    WatchOptions, WriteOptions,
};
use concord_proto::v1 as pb;
use concord_server::zab::rng::Rng;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::fencing::{check_fenced, FenceEvent};
use crate::linearizability::{check_keys, NodeInput, NodeModel, NodeOutput, Op, Outcome};
use crate::{channel_at, eventually, tree_at, Ensemble, Proxies};

/// A call's deadline: past it the outcome of a write is unknown.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the workload waits for the clients or the watchers to get on.
const PROGRESS_WAIT: Duration = Duration::from_secs(20);
const KEYS: usize = 3;
/// The lock the lockers take, and the key they write with its fence.
const LOCK: &str = "fence";
const LOCK_QUEUE: &str = "/concord/locks/fence/";
const FENCED_KEY: &str = "/fenced";
/// Fenced writes per hold.
const WRITES_PER_HOLD: u64 = 3;

/// How many of each and for how long at most.
#[derive(Clone, Copy, Debug)]
pub struct WorkloadOptions {
    pub clients: usize,
    pub lockers: usize,
    /// Ops per client at most, so the history (and the check) stays bounded.
    pub ops_max: usize,
}

/// What the clients recorded.
#[derive(Clone, Default)]
struct Recorded {
    /// Each op with its key.
    ops: Vec<(usize, Op<NodeInput, NodeOutput>)>,
    /// The zxid of each set that took (what the watchers must deliver).
    set_zxids: Vec<u64>,
    /// Answers older than something their client had seen before it asked.
    went_back: Vec<String>,
    /// Each acknowledged fenced write: (token, zxid).
    fenced: Vec<(u64, u64)>,
    /// Fenced writes refused with FENCED.
    refused: usize,
    /// Holders whose node the stealer released.
    stolen: usize,
}

/// The clients, lockers and watchers of one run.
pub struct Workload {
    recorded: Arc<Mutex<Recorded>>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    /// Set to the zxid the watchers must reach before they return.
    until: watch::Sender<Option<u64>>,
    watchers: Vec<JoinHandle<(Vec<Delivered>, u64)>>,
}

/// One event a watcher delivered.
struct Delivered {
    zxid: u64,
    kind: EventKind,
    path: String,
    data: Vec<u8>,
}

impl Workload {
    /// Starts the workload on a proxied `ensemble` and has a failing run keep its
    /// history and the servers' configs, logs and data folders (`name`), printing
    /// `replay`, the command that runs it again. Returns the proxies, for the
    /// nemesis.
    pub async fn start_kept(
        ensemble: &mut Ensemble,
        options: WorkloadOptions,
        name: &str,
        replay: String,
    ) -> (Workload, Proxies) {
        let endpoints: Vec<String> = ensemble.servers.iter().map(|s| s.endpoint()).collect();
        let leader = ensemble.leader(PROGRESS_WAIT).await;
        let workload = Workload::start(&endpoints, leader, options).await;
        ensemble.keep_on_failure(name, replay, workload.dump());
        let proxies = ensemble.proxies.take().expect("a proxied ensemble");
        (workload, proxies)
    }

    /// Creates the keys through `endpoints[leader]`, then starts the watchers and
    /// connects every client before returning.
    async fn start(endpoints: &[String], leader: usize, options: WorkloadOptions) -> Workload {
        let start = Instant::now();
        let recorded: Arc<Mutex<Recorded>> = Arc::default();
        let mut admin = tree_at(&endpoints[leader], CALL_TIMEOUT);
        let create = |path: String| pb::CreateRequest {
            path,
            data: "0".into(),
            ..Default::default()
        };
        let first = admin.create(create("/lin".into())).await.unwrap();
        let first = first.into_inner().header.unwrap().zxid;
        admin.create(create(FENCED_KEY.into())).await.unwrap();
        for key in 0..KEYS {
            let call = now(start);
            admin.create(create(key_path(key))).await.unwrap();
            recorded.lock().unwrap().ops.push((
                key,
                Op {
                    input: NodeInput::Create(0),
                    outcome: Outcome::Ok(NodeOutput::Created),
                    call,
                    ret: now(start),
                },
            ));
        }
        let (until, until_rx) = watch::channel(None);
        let mut watchers = Vec::new();
        for id in 0..endpoints.len() {
            let w = watch_from(rotated(endpoints, id), first).await;
            watchers.push(tokio::spawn(watcher(w, until_rx.clone())));
        }
        let (stop, stopped) = watch::channel(false);
        let mut tasks = Vec::new();
        for id in 0..options.clients {
            let connected = connect(rotated(endpoints, id)).await;
            let client = Recorder {
                recorded: recorded.clone(),
                start,
                id,
            };
            let stopped = stopped.clone();
            tasks.push(tokio::spawn(client.run(
                connected,
                stopped,
                options.ops_max,
            )));
        }
        for id in 0..options.lockers {
            let connected = connect(rotated(endpoints, id + 1)).await;
            let recorded = recorded.clone();
            let stopped = stopped.clone();
            tasks.push(tokio::spawn(locker(
                connected,
                recorded,
                stopped,
                options.ops_max,
            )));
        }
        if options.lockers > 0 {
            let (recorded, stopped) = (recorded.clone(), stopped.clone());
            tasks.push(tokio::spawn(stealer(endpoints.to_vec(), recorded, stopped)));
        }
        Workload {
            recorded,
            stop,
            tasks,
            until,
            watchers,
        }
    }

    /// Waits until the clients have recorded `more` ops beyond what they had.
    pub async fn wait_ops(&self, more: usize) {
        let recorded = self.recorded.lock().unwrap().ops.len();
        eventually("the clients record ops again", PROGRESS_WAIT, || async {
            (self.recorded.lock().unwrap().ops.len() >= recorded + more).then_some(())
        })
        .await;
    }

    /// What was recorded so far, a line an op, for a failing run's folder.
    fn dump(&self) -> impl Fn() -> String + Send + Sync + 'static {
        let recorded = self.recorded.clone();
        move || {
            let recorded = recorded.lock().unwrap_or_else(|e| e.into_inner());
            let mut lines: Vec<String> = recorded
                .ops
                .iter()
                .map(|(k, op)| format!("{k} {op:?}"))
                .collect();
            lines.extend(
                recorded
                    .fenced
                    .iter()
                    .map(|(token, zxid)| format!("fenced write by {token:#x} at {zxid:#x}")),
            );
            lines.join("\n")
        }
    }

    /// Stops the clients and runs every check (see the module's comment); panics on
    /// the first that fails.
    pub async fn finish(self) {
        self.stop.send_replace(true);
        for task in self.tasks {
            task.await.unwrap();
        }
        // A copy: the original stays for `dump` if a check fails.
        let recorded = self.recorded.lock().unwrap().clone();
        let history = &recorded.ops;
        assert!(
            recorded.went_back.is_empty(),
            "answers older than their client had seen: {:?}",
            recorded.went_back
        );
        let count = |f: fn(&Outcome<NodeOutput>) -> bool| {
            history.iter().filter(|(_, op)| f(&op.outcome)).count()
        };
        let acked = count(|o| matches!(o, Outcome::Ok(_)));
        let unknown = count(|o| matches!(o, Outcome::Unknown));
        let last = recorded
            .set_zxids
            .iter()
            .chain(recorded.fenced.iter().map(|f| &f.1));
        self.until.send_replace(last.max().copied());
        for (i, w) in self.watchers.into_iter().enumerate() {
            let (delivered, resumes) = tokio::time::timeout(PROGRESS_WAIT, w)
                .await
                .unwrap_or_else(|_| panic!("watcher {i} never caught up"))
                .unwrap();
            // One txn may make several events (a session's end deletes its
            // ephemerals), each once.
            assert!(
                delivered.windows(2).all(|d| d[0].zxid <= d[1].zxid),
                "watcher {i} delivered events out of zxid order"
            );
            let mut seen = HashSet::new();
            for d in &delivered {
                let twice = !seen.insert((d.zxid, d.kind, d.path.as_str()));
                assert!(
                    !twice,
                    "watcher {i} delivered {:?} {} at {:#x} twice",
                    d.kind, d.path, d.zxid
                );
            }
            check_sets(i, &delivered, &recorded.set_zxids, unknown == 0);
            check_fences(i, &delivered, &recorded);
            eprintln!(
                "histories: watcher {i} delivered {} events, resumed {resumes} times",
                delivered.len()
            );
        }
        let mut took: Vec<u64> = history.iter().map(|(_, op)| op.ret - op.call).collect();
        took.sort_unstable();
        let ms = |q: usize| {
            took.get(q * took.len().saturating_sub(1) / 100)
                .map_or(0, |ns| ns / 1_000_000)
        };
        eprintln!(
            "histories: {} ops, {acked} acknowledged, {unknown} unknown, {} failed; each took {} ms at the median, {} at p99; {} fenced writes acknowledged, {} refused, {} holders stolen from",
            history.len(),
            history.len() - acked - unknown,
            ms(50),
            ms(99),
            recorded.fenced.len(),
            recorded.refused,
            recorded.stolen,
        );
        assert!(acked > 100, "only {acked} ops were acknowledged");
        if let Err((key, verdict)) = check_keys(&NodeModel, history.iter().cloned()) {
            panic!("{} is not linearizable: {verdict:?}", key_path(key));
        }
    }
}

/// Every acknowledged set delivered once, and (`exact`) nothing else under /lin.
fn check_sets(i: usize, delivered: &[Delivered], set_zxids: &[u64], exact: bool) {
    let sets: BTreeSet<u64> = delivered
        .iter()
        .filter(|d| d.kind == EventKind::DataChanged && d.path.starts_with("/lin/"))
        .map(|d| d.zxid)
        .collect();
    let missed: Vec<&u64> = set_zxids.iter().filter(|z| !sets.contains(z)).collect();
    assert!(missed.is_empty(), "watcher {i} missed sets at {missed:x?}");
    if exact {
        assert_eq!(sets.len(), set_zxids.len(), "watcher {i} made up events");
    }
}

/// The fenced writes in what a watcher delivered never overlap, and every
/// acknowledged one is there with its token; if there were lockers, some holder
/// lost its lock while writing and was refused.
fn check_fences(i: usize, delivered: &[Delivered], recorded: &Recorded) {
    let events: Vec<(u64, FenceEvent)> = delivered
        .iter()
        .filter_map(|d| {
            let event = match d.kind {
                EventKind::DataChanged if d.path == FENCED_KEY => {
                    let token = std::str::from_utf8(&d.data).ok()?.parse().ok()?;
                    FenceEvent::Write(token)
                }
                EventKind::Created => FenceEvent::Queued(queue_node(&d.path)?.to_owned()),
                EventKind::Deleted => FenceEvent::Left(queue_node(&d.path)?.to_owned()),
                _ => return None,
            };
            Some((d.zxid, event))
        })
        .collect();
    let stats = check_fenced(&events)
        .unwrap_or_else(|e| panic!("watcher {i}: fenced writes overlapped: {e}"));
    let writes: HashSet<(u64, u64)> = events
        .iter()
        .filter_map(|(zxid, e)| match e {
            FenceEvent::Write(token) => Some((*token, *zxid)),
            _ => None,
        })
        .collect();
    for &(token, zxid) in &recorded.fenced {
        assert!(
            writes.contains(&(token, zxid)),
            "watcher {i} missed the fenced write by {token:#x} acknowledged at {zxid:#x}"
        );
    }
    if !recorded.fenced.is_empty() {
        assert!(stats.holds > 1, "watcher {i}: one holder wrote: {stats:?}");
        assert!(
            recorded.refused > 0,
            "no holder that lost its lock wrote after it"
        );
    }
}

/// The name of a node of the lock's queue at `path`, if it is one.
fn queue_node(path: &str) -> Option<&str> {
    path.strip_prefix(LOCK_QUEUE).filter(|n| !n.contains('/'))
}

fn key_path(key: usize) -> String {
    format!("/lin/k{key}")
}

/// `endpoints`, starting at the `id % len`-th.
fn rotated(endpoints: &[String], id: usize) -> Vec<String> {
    let mut mine = endpoints.to_vec();
    mine.rotate_left(id % endpoints.len());
    mine
}

/// Nanoseconds since `start`, the history's clock.
fn now(start: Instant) -> u64 {
    start.elapsed().as_nanos() as u64
}

/// What an error says about a call: a definite answer, nothing done, or unknown.
fn outcome_of(e: &Error, input: &NodeInput) -> Outcome<NodeOutput> {
    match (e.code(), input) {
        (ErrorCode::BadVersion, _) => Outcome::Ok(NodeOutput::BadVersion),
        (_, NodeInput::Get) => Outcome::Failed,
        _ if e.is_retry_safe() => Outcome::Failed,
        _ => Outcome::Unknown,
    }
}

/// A Rust SDK client of `endpoints` (the first is tried first) and its session.
async fn connect(endpoints: Vec<String>) -> (Client, Session) {
    let client = Client::builder()
        .endpoints(endpoints)
        .randomize_hosts(false)
        .call_timeout(CALL_TIMEOUT)
        .retry(RetryPolicy {
            elapsed_max_ms: 10_000,
            ..RetryPolicy::default()
        })
        .connect()
        .await
        .unwrap();
    let session = client.open_session(10_000).await.unwrap();
    (client, session)
}

/// One client's recording of the history.
struct Recorder {
    recorded: Arc<Mutex<Recorded>>,
    start: Instant,
    id: usize,
}

impl Recorder {
    /// Random ops on random keys until `stop` or `ops_max`. Its writes carry its
    /// session and a request id each, so the SDK retries one whose outcome it does
    /// not know (the server applies it at most once and answers the retry with the
    /// first outcome): few stay unknown.
    async fn run(
        self,
        (client, session): (Client, Session),
        stop: watch::Receiver<bool>,
        ops_max: usize,
    ) {
        let id = self.id;
        let mut rng = Rng::new(id as u64);
        // The version this client last saw of each key, for its compare-and-sets.
        let mut seen = [0i32; KEYS];
        // The newest zxid this client has been answered with.
        let mut seen_zxid = 0;
        for n in 0..ops_max {
            if *stop.borrow() {
                break;
            }
            let key = rng.below(KEYS as u64) as usize;
            let value = (id * ops_max + n + 1) as u64;
            let input = match rng.below(10) {
                0..4 => NodeInput::Set {
                    value,
                    version: None,
                },
                4..6 => NodeInput::Set {
                    value,
                    version: Some(seen[key]),
                },
                _ => NodeInput::Get,
            };
            if input == NodeInput::Get && rng.chance(333) {
                // A default read: served by any server from what it has applied, so
                // not linearizable, but never older than what this client has seen.
                if let Ok(node) = client.get(&key_path(key), ReadOptions::default()).await {
                    self.went_back("a default read", node.zxid, &mut seen_zxid);
                }
                continue;
            }
            let call = now(self.start);
            let outcome = match &input {
                NodeInput::Set { value, version } => {
                    let write = WriteOptions {
                        session_id: session.id(),
                        request_id: n as u64 + 1,
                        ..WriteOptions::default()
                    };
                    let path = key_path(key);
                    let set =
                        client.set_with(&path, value.to_string(), version.unwrap_or(-1), &write);
                    match set.await {
                        Ok(updated) => {
                            seen[key] = updated.stat.version;
                            self.went_back("a set", updated.zxid, &mut seen_zxid);
                            self.recorded.lock().unwrap().set_zxids.push(updated.zxid);
                            Outcome::Ok(NodeOutput::Set {
                                version: updated.stat.version,
                            })
                        }
                        Err(e) => outcome_of(&e, &input),
                    }
                }
                _ => {
                    let read = ReadOptions {
                        linearizable: true,
                        ..ReadOptions::default()
                    };
                    match client.get(&key_path(key), read).await {
                        Ok(node) => {
                            seen[key] = node.stat.version;
                            self.went_back("a read", node.zxid, &mut seen_zxid);
                            let data = std::str::from_utf8(&node.data).unwrap();
                            let value = data.parse().unwrap();
                            Outcome::Ok(NodeOutput::Value(Some((value, node.stat.version))))
                        }
                        Err(e) => outcome_of(&e, &input),
                    }
                }
            };
            let op = Op {
                input,
                outcome,
                call,
                ret: now(self.start),
            };
            self.recorded.lock().unwrap().ops.push((key, op));
        }
    }

    /// Records an answer at `zxid` older than `seen` (what this client had seen
    /// before it asked), and moves `seen` on.
    fn went_back(&self, what: &str, zxid: u64, seen: &mut u64) {
        if zxid < *seen {
            self.recorded.lock().unwrap().went_back.push(format!(
                "client {}: {what} answered at {zxid:#x} after it had seen {:#x}",
                self.id, *seen
            ));
        }
        *seen = (*seen).max(zxid);
    }
}

/// One locker: takes the lock, writes `FENCED_KEY` (its token) with the lock's
/// fence `WRITES_PER_HOLD` times, releases it; again until `stop` or `holds_max`.
async fn locker(
    (client, session): (Client, Session),
    recorded: Arc<Mutex<Recorded>>,
    stop: watch::Receiver<bool>,
    holds_max: usize,
) {
    let mutex = concord::Mutex::new(&session, LOCK);
    let mut request_id = 0;
    for _ in 0..holds_max {
        if *stop.borrow() {
            break;
        }
        let Ok(Some(guard)) = mutex.acquire_timeout(CALL_TIMEOUT).await else {
            continue;
        };
        for _ in 0..WRITES_PER_HOLD {
            request_id += 1;
            let write = WriteOptions {
                session_id: session.id(),
                request_id,
                fence: Some(guard.fence()),
            };
            let token = guard.token();
            match client
                .set_with(FENCED_KEY, token.to_string(), -1, &write)
                .await
            {
                Ok(updated) => recorded.lock().unwrap().fenced.push((token, updated.zxid)),
                Err(e) if e.code() == ErrorCode::Fenced => recorded.lock().unwrap().refused += 1,
                Err(_) => {}
            }
        }
        let _ = guard.release().await;
    }
}

/// Releases every other holder's node as an admin (token 0) behind its back, once
/// the holder has written, until `stop`; asks the servers of `endpoints` in turn.
async fn stealer(
    endpoints: Vec<String>,
    recorded: Arc<Mutex<Recorded>>,
    stop: watch::Receiver<bool>,
) {
    let mut servers = endpoints
        .iter()
        .map(|e| pb::lock_client::LockClient::new(channel_at(e, CALL_TIMEOUT)))
        .collect::<Vec<_>>()
        .into_iter()
        .cycle();
    let mut rng = Rng::new(u64::MAX);
    let mut last = 0;
    let written = || recorded.lock().unwrap().fenced.len();
    while !*stop.borrow() {
        // Wait for a fenced write beyond the last look (as long as faults stall
        // the lockers: `stop` ends the wait).
        let before = written();
        while !*stop.borrow() && written() == before {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if !rng.chance(500) {
            continue;
        }
        let Some(mut locks) = servers.next() else {
            return;
        };
        let holder = locks.holder(pb::HolderRequest { name: LOCK.into() }).await;
        let Some(entry) = holder
            .ok()
            .and_then(|h| h.into_inner().holders.into_iter().next())
        else {
            continue;
        };
        if entry.token == last {
            continue;
        }
        last = entry.token;
        let release = pb::ReleaseRequest {
            key: entry.key,
            token: 0,
        };
        if locks.release(release).await.is_ok() {
            recorded.lock().unwrap().stolen += 1;
        }
    }
}

/// A watch of every change after `after`, with data, on `endpoints` (the first
/// tried first), resumed after every break for as long as it takes.
async fn watch_from(endpoints: Vec<String>, after: u64) -> Watch {
    let client = Client::builder()
        .endpoints(endpoints)
        .randomize_hosts(false)
        .call_timeout(CALL_TIMEOUT)
        .connect()
        .await
        .unwrap();
    let forever = RetryPolicy {
        attempts_max: 0,
        elapsed_max_ms: 0,
        ..RetryPolicy::default()
    };
    client
        .watch(WatchOptions {
            path: "/".into(),
            recursive: true,
            kinds: vec![
                EventKind::Created,
                EventKind::Deleted,
                EventKind::DataChanged,
            ],
            with_data: true,
            start_zxid: Some(after),
            progress_interval_ms: 200,
            resume: Some(forever),
            ..WatchOptions::default()
        })
        .await
        .unwrap()
}

/// The events `watch` delivers, until it has passed the zxid `until` is given, and
/// how often it resumed.
async fn watcher(mut watch: Watch, until: watch::Receiver<Option<u64>>) -> (Vec<Delivered>, u64) {
    let mut delivered = Vec::new();
    loop {
        if let (Some(last), Some(at)) = (*until.borrow(), watch.last_zxid()) {
            if at >= last {
                return (delivered, watch.resumes());
            }
        }
        // Progress every 200 ms when idle, so `until` is looked at again.
        match watch.next().await {
            Some(Ok(WatchMessage::Event(e))) => delivered.push(Delivered {
                zxid: e.zxid,
                kind: e.kind,
                path: e.path,
                data: e.data,
            }),
            Some(Ok(_)) => {}
            Some(Err(e)) => panic!("the watch failed: {e}"),
            None => panic!("the watch ended"),
        }
    }
}
