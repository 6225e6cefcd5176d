//! A rolling restart of a 3-server ensemble under write load, the way a StatefulSet
//! rolls (deploy/k8s, docs/operations.md "Rolling upgrade"): each server in turn,
//! highest id first, gets SIGTERM, starts again on the same data folder and ports,
//! and the next goes only once it is ready. Writers on the Rust SDK (every server
//! given, retries on) keep writing throughout.
//!
//! Checked: the SDK hides every failure (none reaches a writer, and any that did
//! would have to be retry-safe), the writers make progress during each restart,
//! and every acknowledged write is there with its data, on every server, at the end.
//!
//! ```text
//!   writers ──create /roll/wW-N (session, request id)──▶ SDK ──▶ any server
//!   roller:  for i in 3, 2, 1: SIGTERM i ─▶ exited 0 ─▶ start i ─▶ ready(i)?
//! ```

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use concord::{Client, CreateOptions, Error, ReadOptions, RetryPolicy};
use concord_tests::{children_at, eventually, free_addr, http_get, Ensemble, ServerOptions};
use futures::StreamExt;

const WRITERS: usize = 4;
/// Longest a restarted server may take to be ready again.
const READY_WAIT: Duration = Duration::from_secs(20);
/// Writes before the first restart, and after the last.
const WARM_UP: Duration = Duration::from_millis(500);

/// What the writers saw.
#[derive(Default)]
struct Load {
    /// Every acknowledged write: its path and zxid.
    acked: Mutex<Vec<(String, u64)>>,
    /// Acknowledged writes so far (for progress per restart).
    acked_count: AtomicU64,
    /// Failures that reached a writer although the SDK retries: retry-safe ones
    /// (tolerated, counted), and the others (each one fails the test).
    retry_safe_errors: AtomicU64,
    other_errors: Mutex<Vec<String>>,
    stop: AtomicBool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t89_rolling_restart_under_load_loses_no_acknowledged_write() {
    let started = Instant::now();
    let options = ServerOptions {
        tick_ms: 100,
        session_ttl_ms: Some((2000, 30_000)),
        // Restarted servers come back behind snapshots, as in production.
        snapshot_every_txns: 1000,
        ..ServerOptions::default()
    };
    // Each member serves /readyz on a metrics port of its own, as in deploy/k8s.
    let metrics: Vec<std::net::SocketAddr> = (0..3).map(|_| free_addr()).collect();
    let mut ensemble = Ensemble::start_with_toml(3, options, &|i| {
        format!("metrics_addr = \"{}\"", metrics[i])
    });
    ensemble.leader(READY_WAIT).await;
    let endpoints: Vec<String> = ensemble.servers.iter().map(|s| s.endpoint()).collect();
    let client = Client::builder()
        .endpoints(endpoints)
        .call_timeout(Duration::from_secs(2))
        .retry(RetryPolicy::default())
        .connect()
        .await
        .unwrap();
    client
        .create("/roll", "", CreateOptions::default())
        .await
        .unwrap();

    let load = Arc::new(Load::default());
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| tokio::spawn(writer(client.clone(), w, load.clone())))
        .collect();
    tokio::time::sleep(WARM_UP).await;

    let mut progress = Vec::new();
    for i in (0..3).rev() {
        let was_leader = ensemble.leader(READY_WAIT).await == i;
        let before = load.acked_count.load(Ordering::SeqCst);
        let round = Instant::now();
        let exited_cleanly = tokio::task::block_in_place(|| ensemble.servers[i].terminate());
        assert!(exited_cleanly, "server {} did not exit 0 on SIGTERM", i + 1);
        tokio::task::block_in_place(|| ensemble.servers[i].restart());
        wait_ready(metrics[i], i).await;
        let during = load.acked_count.load(Ordering::SeqCst) - before;
        println!(
            "server {} ({}): restarted and ready in {:?}, {during} writes acknowledged meanwhile",
            i + 1,
            if was_leader {
                "the leader"
            } else {
                "a follower"
            },
            round.elapsed()
        );
        progress.push((i + 1, during));
    }
    tokio::time::sleep(WARM_UP).await;
    load.stop.store(true, Ordering::SeqCst);
    for w in writers {
        w.await.unwrap();
    }

    let other = load.other_errors.lock().unwrap().clone();
    let retry_safe = load.retry_safe_errors.load(Ordering::SeqCst);
    let acked = load.acked.lock().unwrap().clone();
    println!(
        "{} writes acknowledged, {retry_safe} retry-safe errors reached the writers, {} others",
        acked.len(),
        other.len()
    );
    assert!(
        other.is_empty(),
        "errors the SDK should not surface: {other:?}"
    );
    for (id, during) in progress {
        assert!(
            during > 0,
            "no write was acknowledged while server {id} restarted"
        );
    }
    for i in 0..3 {
        check_every_write(&ensemble, i, &acked).await;
    }
    println!("t89 took {:?}", started.elapsed());
}

/// Creates `/roll/wW-N` for N = 0, 1, ... until told to stop, each with the
/// writer's session and request id N + 1 (so the SDK may retry one whose outcome
/// is unknown: the server applies it at most once).
async fn writer(client: Client, w: usize, load: Arc<Load>) {
    let session = client.open_session(10_000).await.unwrap();
    let mut n: u64 = 0;
    while !load.stop.load(Ordering::SeqCst) {
        let path = format!("/roll/w{w}-{n:06}");
        let options = CreateOptions {
            session_id: session.id(),
            request_id: n + 1,
            ..CreateOptions::default()
        };
        match client.create(&path, path.clone(), options).await {
            Ok(created) => {
                load.acked.lock().unwrap().push((path, created.zxid));
                load.acked_count.fetch_add(1, Ordering::SeqCst);
                n += 1;
            }
            // Tried again with the same request id: the server answers a retry of
            // a write it applied with the first outcome.
            Err(e) if e.is_retry_safe() => {
                load.retry_safe_errors.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => {
                record_other(&load, &path, &e);
                n += 1;
            }
        }
    }
}

fn record_other(load: &Load, path: &str, e: &Error) {
    load.other_errors
        .lock()
        .unwrap()
        .push(format!("{path}: {e} (code {:?})", e.code()));
}

/// Waits until server `i` is ready: its `/readyz` (at `addr`) answers 200, what the
/// StatefulSet's readiness probe waits for (a leader established or synced with,
/// its path answering, and this server caught up: docs/operations.md, "Metrics").
async fn wait_ready(addr: std::net::SocketAddr, i: usize) {
    let what = format!("server {} ready (/readyz answers 200)", i + 1);
    eventually(&what, READY_WAIT, || async {
        let (status, _) = http_get(addr, "/readyz", Duration::from_secs(2)).await?;
        (status == 200).then_some(())
    })
    .await;
}

/// Every acknowledged write is on server `i` with its data (read at or after the
/// newest acknowledged zxid, from that server alone).
async fn check_every_write(ensemble: &Ensemble, i: usize, acked: &[(String, u64)]) {
    let newest = acked.iter().map(|(_, z)| *z).max().unwrap_or(0);
    let server = &ensemble.servers[i];
    let names = children_at(&server.endpoint(), "/roll", newest).await;
    for (path, _) in acked {
        let name = path.trim_start_matches("/roll/");
        assert!(
            names.contains(name),
            "server {} lacks acknowledged {path}",
            i + 1
        );
    }
    let client = server.sdk().await;
    let wrong: Vec<String> = futures::stream::iter(acked.iter())
        .map(|(path, _)| {
            let client = client.clone();
            async move {
                let got = client.get(path, ReadOptions::at_least(newest)).await;
                match got {
                    Ok(node) if node.data == path.as_bytes() => None,
                    Ok(node) => Some(format!("{path}: data {:?}", node.data)),
                    Err(e) => Some(format!("{path}: {e}")),
                }
            }
        })
        .buffer_unordered(32)
        .filter_map(|x| async move { x })
        .collect()
        .await;
    assert!(
        wrong.is_empty(),
        "server {}: {} acknowledged writes wrong, e.g. {:?}",
        i + 1,
        wrong.len(),
        wrong.iter().take(5).collect::<Vec<_>>()
    );
}
