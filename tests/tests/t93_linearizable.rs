//! Linearizability on real processes (issue 15 point 4, a first nemesis): six
//! clients, two on each server of a 3-server ensemble with a proxy on every peer
//! link, set, compare-and-set (a set naming the version last seen) and read
//! linearizably three keys, recording each call and its outcome, while the leader,
//! round after round, is killed with -9, frozen with SIGSTOP, isolated both ways, or
//! cut off one way (the followers' bytes to it dropped), until the others elect a
//! new leader, then restarted, thawed or healed; or a follower loses its disk (kill
//! -9, `--discard-local-state`, restart empty).
//! The history must be linearizable key by key (`concord_tests::linearizability`):
//! every acknowledged set in order, no read older than a write acknowledged before
//! it was called, no two sets taking the same version. The clients are the Rust
//! SDK's, writing with a session and request ids, so a write whose outcome the SDK
//! does not know is retried and answered with its first outcome; one still unknown
//! when the SDK gives up may have happened or not, and an error the SDK calls
//! retry-safe (nothing was done) never happened.
//!
//! A third of the reads are default reads (any server's applied state): not in the
//! history, but like every answer never older than what their client had seen.
//! Three watchers, one starting on each server, watch every data change under the
//! keys, resumed after every break: each delivers every acknowledged set exactly
//! once, in zxid order, and (when no write stayed unknown) nothing else.
//!
//! A failing run writes its history to a file and prints where it is.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use concord::{
    Client, Error, ErrorCode, EventKind, ReadOptions, RetryPolicy, Session, Watch, WatchMessage,
    WatchOptions, WriteOptions,
};
use concord_proto::v1 as pb;
use concord_server::zab::rng::Rng;
use concord_tests::linearizability::{check_keys, NodeInput, NodeModel, NodeOutput, Op, Outcome};
use concord_tests::{eventually, tree_at, Ensemble, Proxies, ServerOptions};
use tokio::sync::watch;

const LEADER_WAIT: Duration = Duration::from_secs(20);
/// A call's deadline: past it the outcome of a write is unknown.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
const KEYS: usize = 3;
const CLIENTS: usize = 6;
/// Ops per client and round at most, so the history (and the check) stays bounded.
const OPS_PER_ROUND_MAX: usize = 1_000;
/// Ops the clients record after each round before the next.
const OPS_BETWEEN_ROUNDS: usize = 200;
/// Rounds of the nemesis in CI: each of its five faults twice. The long run:
/// `T93_ROUNDS=200 cargo test -p concord-tests --test t93_linearizable -- --nocapture`.
const ROUNDS_DEFAULT: usize = 10;

fn rounds() -> usize {
    std::env::var("T93_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(ROUNDS_DEFAULT)
}

/// What the clients recorded: each op with its key, and the zxid of each set that
/// took (what the watchers must deliver).
#[derive(Default)]
struct Recorded {
    ops: Vec<(usize, Op<NodeInput, NodeOutput>)>,
    set_zxids: Vec<u64>,
    /// Answers older than something their client had seen before it asked.
    went_back: Vec<String>,
}

type History = Arc<Mutex<Recorded>>;

fn key_path(key: usize) -> String {
    format!("/lin/k{key}")
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

/// One client: random ops on random keys until `stop` or `ops_max`. Its writes carry
/// its session and a request id each, so the SDK retries one whose outcome it does
/// not know (the server applies it at most once and answers the retry with the
/// first outcome): few stay unknown.
async fn client(
    (client, session): (Client, Session),
    id: usize,
    start: Instant,
    history: History,
    stop: watch::Receiver<bool>,
    ops_max: usize,
) {
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
            // A default read: served by any server from what it has applied, so not
            // linearizable, but never older than what this client has seen.
            if let Ok(node) = client.get(&key_path(key), ReadOptions::default()).await {
                went_back(&history, id, "a default read", node.zxid, &mut seen_zxid);
            }
            continue;
        }
        let call = now(start);
        let outcome = match &input {
            NodeInput::Set { value, version } => {
                let write = WriteOptions {
                    session_id: session.id(),
                    request_id: n as u64 + 1,
                    ..WriteOptions::default()
                };
                let path = key_path(key);
                let set = client.set_with(&path, value.to_string(), version.unwrap_or(-1), &write);
                match set.await {
                    Ok(updated) => {
                        seen[key] = updated.stat.version;
                        went_back(&history, id, "a set", updated.zxid, &mut seen_zxid);
                        history.lock().unwrap().set_zxids.push(updated.zxid);
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
                        went_back(&history, id, "a read", node.zxid, &mut seen_zxid);
                        let value = std::str::from_utf8(&node.data).unwrap().parse().unwrap();
                        Outcome::Ok(NodeOutput::Value(Some((value, node.stat.version))))
                    }
                    Err(e) => outcome_of(&e, &input),
                }
            }
        };
        history.lock().unwrap().ops.push((
            key,
            Op {
                input,
                outcome,
                call,
                ret: now(start),
            },
        ));
    }
}

/// A watch of every data change under /lin after `after`, on `endpoints` (the first
/// tried first), resumed after every break for as long as it takes.
async fn watch_from(endpoints: Vec<String>, after: u64) -> Watch {
    let client = Client::builder()
        .endpoints(endpoints)
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
            path: "/lin".into(),
            recursive: true,
            kinds: vec![EventKind::DataChanged],
            start_zxid: Some(after),
            progress_interval_ms: 200,
            resume: Some(forever),
            ..WatchOptions::default()
        })
        .await
        .unwrap()
}

/// The zxids `watch` delivers, until it has passed the zxid `until` is given, and
/// how often it resumed.
async fn watcher(mut watch: Watch, until: watch::Receiver<Option<u64>>) -> (Vec<u64>, u64) {
    let mut zxids = Vec::new();
    loop {
        if let (Some(last), Some(at)) = (*until.borrow(), watch.last_zxid()) {
            if at >= last {
                return (zxids, watch.resumes());
            }
        }
        // Progress every 200 ms when idle, so `until` is looked at again.
        match watch.next().await {
            Some(Ok(WatchMessage::Event(e))) => zxids.push(e.zxid),
            Some(Ok(_)) => {}
            Some(Err(e)) => panic!("the watch failed: {e}"),
            None => panic!("the watch ended"),
        }
    }
}

/// Cuts (or heals, `cut` false) the links from `others` to `leader`, and the links
/// back too when `both_ways`.
fn cut_off(proxies: &Proxies, leader: usize, others: &[usize], both_ways: bool, cut: bool) {
    for &j in others {
        proxies.cut(j, leader, cut);
        if both_ways {
            proxies.cut(leader, j, cut);
        }
    }
}

/// Records an answer at `zxid` older than `seen` (what client `id` had seen before
/// it asked), and moves `seen` on.
fn went_back(history: &History, id: usize, what: &str, zxid: u64, seen: &mut u64) {
    if zxid < *seen {
        history.lock().unwrap().went_back.push(format!(
            "client {id}: {what} answered at {zxid:#x} after it had seen {:#x}",
            *seen
        ));
    }
    *seen = (*seen).max(zxid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t93_histories_stay_linearizable_across_kills_pauses_and_partitions_of_the_leader() {
    let mut ensemble = Ensemble::start_proxied(3, ServerOptions::server_defaults());
    let endpoints: Vec<String> = ensemble.servers.iter().map(|s| s.endpoint()).collect();
    let leader = ensemble.leader(LEADER_WAIT).await;
    let start = Instant::now();
    let history: History = Arc::default();
    let mut admin = tree_at(&endpoints[leader], CALL_TIMEOUT);
    admin
        .create(pb::CreateRequest {
            path: "/lin".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut created = 0;
    for key in 0..KEYS {
        let call = now(start);
        let reply = admin
            .create(pb::CreateRequest {
                path: key_path(key),
                data: "0".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        created = reply.into_inner().header.unwrap().zxid;
        history.lock().unwrap().ops.push((
            key,
            Op {
                input: NodeInput::Create(0),
                outcome: Outcome::Ok(NodeOutput::Created),
                call,
                ret: now(start),
            },
        ));
    }
    let (stop, stopped) = watch::channel(false);
    // Connected, with their sessions, before the first fault.
    let mut connected = Vec::new();
    for id in 0..CLIENTS {
        // Its own server first, then the others.
        let mut mine = endpoints.clone();
        mine.rotate_left(id % endpoints.len());
        connected.push(connect(mine).await);
    }
    let (done, until) = watch::channel(None);
    let mut watchers = Vec::new();
    for id in 0..endpoints.len() {
        let mut mine = endpoints.clone();
        mine.rotate_left(id);
        let w = watch_from(mine, created).await;
        watchers.push(tokio::spawn(watcher(w, until.clone())));
    }
    let rounds = rounds();
    let ops_max = OPS_PER_ROUND_MAX * rounds;
    let clients: Vec<_> = connected
        .into_iter()
        .enumerate()
        .map(|(id, c)| {
            let (history, stopped) = (history.clone(), stopped.clone());
            tokio::spawn(client(c, id, start, history, stopped, ops_max))
        })
        .collect();
    let proxies = ensemble.proxies.take().unwrap();
    for round in 0..rounds {
        let old = ensemble.leader(LEADER_WAIT).await;
        let others: Vec<usize> = (0..endpoints.len()).filter(|&i| i != old).collect();
        match round % 5 {
            0 => {
                ensemble.servers[old].kill9();
                ensemble.leader_among(&others, LEADER_WAIT).await;
                ensemble.servers[old].restart();
            }
            1 => {
                ensemble.servers[old].signal("STOP");
                ensemble.leader_among(&others, LEADER_WAIT).await;
                ensemble.servers[old].signal("CONT");
            }
            2 => {
                // The leader isolated: no byte either way between it and the others.
                cut_off(&proxies, old, &others, true, true);
                ensemble.leader_among(&others, LEADER_WAIT).await;
                cut_off(&proxies, old, &others, true, false);
            }
            3 => {
                // A follower loses its disk: killed, its data discarded, restarted
                // empty (it rejoins by SNAP from the leader).
                let f = others[0];
                ensemble.servers[f].kill9();
                ensemble.servers[f].discard_local_state();
                ensemble.servers[f].restart();
            }
            _ => {
                // One way: the followers' links to the leader drop what they send,
                // so it hears no ack while they still hear it.
                cut_off(&proxies, old, &others, false, true);
                ensemble.leader_among(&others, LEADER_WAIT).await;
                cut_off(&proxies, old, &others, false, false);
            }
        }
        // Every server back and caught up, and the clients busy again, before the
        // next round.
        let leader = ensemble.leader(LEADER_WAIT).await;
        let zxid = ensemble.status(leader).await.map_or(0, |s| s.zxid);
        for i in 0..endpoints.len() {
            ensemble.caught_up(i, zxid, LEADER_WAIT).await;
        }
        let recorded = history.lock().unwrap().ops.len();
        eventually("the clients record ops again", LEADER_WAIT, || async {
            (history.lock().unwrap().ops.len() >= recorded + OPS_BETWEEN_ROUNDS).then_some(())
        })
        .await;
    }
    stop.send_replace(true);
    for c in clients {
        c.await.unwrap();
    }
    let Recorded {
        ops: history,
        set_zxids,
        went_back,
    } = std::mem::take(&mut *history.lock().unwrap());
    assert!(
        went_back.is_empty(),
        "answers older than their client had seen: {went_back:?}"
    );
    let count = |f: fn(&Outcome<NodeOutput>) -> bool| {
        history.iter().filter(|(_, op)| f(&op.outcome)).count()
    };
    let acked = count(|o| matches!(o, Outcome::Ok(_)));
    let unknown = count(|o| matches!(o, Outcome::Unknown));
    // Every watcher delivers each set once, in zxid order, across its resumes.
    done.send_replace(set_zxids.iter().max().copied());
    for (i, w) in watchers.into_iter().enumerate() {
        let (delivered, resumes) = tokio::time::timeout(LEADER_WAIT, w)
            .await
            .unwrap_or_else(|_| panic!("watcher {i} never caught up"))
            .unwrap();
        assert!(
            delivered.windows(2).all(|z| z[0] < z[1]),
            "watcher {i} delivered events out of order or twice"
        );
        let delivered: BTreeSet<u64> = delivered.into_iter().collect();
        let missed: Vec<&u64> = set_zxids
            .iter()
            .filter(|z| !delivered.contains(z))
            .collect();
        assert!(missed.is_empty(), "watcher {i} missed sets at {missed:x?}");
        if unknown == 0 {
            assert_eq!(
                delivered.len(),
                set_zxids.len(),
                "watcher {i} made up events"
            );
        }
        eprintln!(
            "t93: watcher {i} delivered {} events, resumed {resumes} times",
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
        "t93: {} ops, {acked} acknowledged, {unknown} unknown, {} failed; each took {} ms at the median, {} at p99",
        history.len(),
        history.len() - acked - unknown,
        ms(50),
        ms(99)
    );
    assert!(acked > 100, "only {acked} ops were acknowledged");
    if let Err((key, verdict)) = check_keys(&NodeModel, history.iter().cloned()) {
        let file = std::env::temp_dir().join(format!("t93-history-{}.txt", std::process::id()));
        let lines: Vec<String> = history
            .iter()
            .map(|(k, op)| format!("{k} {op:?}"))
            .collect();
        std::fs::write(&file, lines.join("\n")).unwrap();
        panic!(
            "{} is not linearizable: {verdict:?}; history in {}",
            key_path(key),
            file.display()
        );
    }
}
