//! Linearizability on real processes (issue 15 point 4, a first nemesis): six
//! clients, two on each server of a 3-server ensemble, set, compare-and-set (a set
//! naming the version last seen) and read linearizably three keys, recording each
//! call and its outcome, while the leader is killed with -9 and restarted, or frozen
//! with SIGSTOP until the others elect a new one and then thawed, round after round.
//! The history must be linearizable key by key (`concord_tests::linearizability`):
//! every acknowledged set in order, no read older than a write acknowledged before
//! it was called, no two sets taking the same version. A write whose outcome is not
//! known (a timeout, a dropped connection, OUTCOME_UNKNOWN) may have happened or
//! not; NOT_LEADER promises nothing was done.
//!
//! A failing run writes its history to a file and prints where it is.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use concord_proto::v1 as pb;
use concord_server::zab::rng::Rng;
use concord_tests::linearizability::{check_keys, NodeInput, NodeModel, NodeOutput, Op, Outcome};
use concord_tests::{code_of, tree_at, Ensemble, ServerOptions};
use tokio::sync::watch;

const LEADER_WAIT: Duration = Duration::from_secs(20);
/// A call's deadline: past it the outcome of a write is unknown.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
const KEYS: usize = 3;
const CLIENTS: usize = 6;
/// Ops per client at most, so the history (and the check) stays bounded.
const OPS_MAX: usize = 3_000;
const ROUNDS: usize = 4;

type History = Arc<Mutex<Vec<(usize, Op<NodeInput, NodeOutput>)>>>;

fn key_path(key: usize) -> String {
    format!("/lin/k{key}")
}

/// Nanoseconds since `start`, the history's clock.
fn now(start: Instant) -> u64 {
    start.elapsed().as_nanos() as u64
}

/// What an error says about a call: a definite answer, nothing done, or unknown.
fn outcome_of(status: &tonic::Status, input: &NodeInput) -> Outcome<NodeOutput> {
    match (code_of(status).as_str(), input) {
        ("BAD_VERSION", _) => Outcome::Ok(NodeOutput::BadVersion),
        ("NOT_LEADER", _) | (_, NodeInput::Get) => Outcome::Failed,
        _ => Outcome::Unknown,
    }
}

/// One client on `endpoint`: random ops on random keys until `stop` or `OPS_MAX`.
async fn client(
    endpoint: String,
    id: usize,
    start: Instant,
    history: History,
    stop: watch::Receiver<bool>,
) {
    let mut rng = Rng::new(id as u64);
    let mut tree = tree_at(&endpoint, CALL_TIMEOUT);
    // The version this client last saw of each key, for its compare-and-sets.
    let mut seen = [0i32; KEYS];
    for n in 0..OPS_MAX {
        if *stop.borrow() {
            break;
        }
        let key = rng.below(KEYS as u64) as usize;
        let value = (id * OPS_MAX + n + 1) as u64;
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
        let call = now(start);
        let outcome = match &input {
            NodeInput::Set { value, version } => {
                let reply = tree
                    .set(pb::SetRequest {
                        path: key_path(key),
                        data: value.to_string().into(),
                        version: version.unwrap_or(-1),
                        ..Default::default()
                    })
                    .await;
                match reply {
                    Ok(r) => {
                        let version = r.into_inner().stat.unwrap().version;
                        seen[key] = version;
                        Outcome::Ok(NodeOutput::Set { version })
                    }
                    Err(e) => outcome_of(&e, &input),
                }
            }
            _ => {
                let reply = tree
                    .get(pb::GetRequest {
                        path: key_path(key),
                        linearizable: true,
                        ..Default::default()
                    })
                    .await;
                match reply {
                    Ok(r) => {
                        let r = r.into_inner();
                        let version = r.stat.unwrap().version;
                        seen[key] = version;
                        let value = std::str::from_utf8(&r.data).unwrap().parse().unwrap();
                        Outcome::Ok(NodeOutput::Value(Some((value, version))))
                    }
                    Err(e) => outcome_of(&e, &input),
                }
            }
        };
        let failed = !matches!(outcome, Outcome::Ok(_));
        history.lock().unwrap().push((
            key,
            Op {
                input,
                outcome,
                call,
                ret: now(start),
            },
        ));
        if failed {
            // A server down or between leaders: try again a little later.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Waits until a leader other than `old` serves a write, through the others.
async fn new_leader_serves(ensemble: &Ensemble, old: usize) -> usize {
    let others: Vec<usize> = (0..ensemble.servers.len()).filter(|&i| i != old).collect();
    ensemble.leader_among(&others, LEADER_WAIT).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t93_histories_stay_linearizable_across_kills_and_pauses_of_the_leader() {
    let mut ensemble = Ensemble::start(3, ServerOptions::server_defaults());
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
    for key in 0..KEYS {
        let call = now(start);
        admin
            .create(pb::CreateRequest {
                path: key_path(key),
                data: "0".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        history.lock().unwrap().push((
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
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| {
            let endpoint = endpoints[id % endpoints.len()].clone();
            tokio::spawn(client(
                endpoint,
                id,
                start,
                history.clone(),
                stopped.clone(),
            ))
        })
        .collect();
    for round in 0..ROUNDS {
        let leader = ensemble.leader(LEADER_WAIT).await;
        if round % 2 == 0 {
            ensemble.servers[leader].kill9();
            new_leader_serves(&ensemble, leader).await;
            ensemble.servers[leader].restart();
        } else {
            ensemble.servers[leader].signal("STOP");
            new_leader_serves(&ensemble, leader).await;
            ensemble.servers[leader].signal("CONT");
        }
        // Every server back and caught up before the next round.
        let leader = ensemble.leader(LEADER_WAIT).await;
        let zxid = ensemble.status(leader).await.map_or(0, |s| s.zxid);
        for i in 0..endpoints.len() {
            ensemble.caught_up(i, zxid, LEADER_WAIT).await;
        }
    }
    stop.send_replace(true);
    for c in clients {
        c.await.unwrap();
    }
    let history = std::mem::take(&mut *history.lock().unwrap());
    let count = |f: fn(&Outcome<NodeOutput>) -> bool| {
        history.iter().filter(|(_, op)| f(&op.outcome)).count()
    };
    let acked = count(|o| matches!(o, Outcome::Ok(_)));
    let unknown = count(|o| matches!(o, Outcome::Unknown));
    eprintln!(
        "t93: {} ops, {acked} acknowledged, {unknown} unknown, {} failed",
        history.len(),
        history.len() - acked - unknown
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
