//! kill -9 of the leader under concurrent writes, again and again, on ensembles of
//! real processes with the server's default timing: no acknowledged write is lost,
//! and writes resume (within `LEADER_WAIT`, a deadline, not a figure). How fast is
//! measured in bench/ (`concord-bench failover`, the failover table of
//! docs/benchmarks.md); the times here are only printed.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use concord_tests::{children_at, code_of, create_at, Ensemble, ServerOptions};
use tokio::sync::{watch, Mutex};

/// These tests run ensembles under load: one at a time.
static SERIAL: Mutex<()> = Mutex::const_new(());

const LEADER_WAIT: Duration = Duration::from_secs(20);

/// Creates `/w{task}/{n}` for n = 0, 1, ... through the servers in turn (moving on
/// after an error), until `stop`; returns the acknowledged paths and the newest zxid.
async fn writer(
    endpoints: Vec<String>,
    task: usize,
    mut stop: watch::Receiver<bool>,
) -> (Vec<String>, u64) {
    let mut target = task % endpoints.len();
    let mut acked = Vec::new();
    let mut newest = 0;
    for n in 0.. {
        if *stop.borrow() {
            break;
        }
        let path = format!("/w{task}/{n}");
        match create_at(&endpoints[target], &path).await {
            Ok(zxid) => {
                newest = newest.max(zxid);
                acked.push(path);
            }
            Err(_) => {
                target = (target + 1) % endpoints.len();
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(10)) => {}
                    _ = stop.changed() => {}
                }
            }
        }
    }
    (acked, newest)
}

/// Kills the leader `rounds` times while `writers` tasks write; restarts it each
/// time. Returns the failover times.
async fn kill_leaders(size: usize, rounds: usize, writers: usize) -> Vec<Duration> {
    let mut ensemble = Ensemble::start(size, ServerOptions::server_defaults());
    let endpoints: Vec<String> = ensemble.servers.iter().map(|s| s.endpoint()).collect();
    ensemble.leader(LEADER_WAIT).await;
    for task in 0..writers {
        create_at(&endpoints[0], &format!("/w{task}"))
            .await
            .unwrap();
    }
    create_at(&endpoints[0], "/probe").await.unwrap();
    let (stop, stopped) = watch::channel(false);
    let tasks: Vec<_> = (0..writers)
        .map(|task| tokio::spawn(writer(endpoints.clone(), task, stopped.clone())))
        .collect();
    let mut failovers = Vec::new();
    for round in 0..rounds {
        let leader = ensemble.leader(LEADER_WAIT).await;
        ensemble.servers[leader].kill9();
        let killed = Instant::now();
        // Probe through the survivors until a write is acknowledged again.
        let survivors: Vec<usize> = (0..size).filter(|&i| i != leader).collect();
        let mut k = 0;
        let zxid = loop {
            let i = survivors[k % survivors.len()];
            let path = format!("/probe/{round}-{k}");
            match create_at(&endpoints[i], &path).await {
                Ok(zxid) => break zxid,
                Err(e) => {
                    if killed.elapsed() >= LEADER_WAIT {
                        print_log_tails(&ensemble, leader);
                        panic!(
                            "no write succeeded {LEADER_WAIT:?} after the leader died: {e} ({})",
                            code_of(&e)
                        );
                    }
                    k += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        };
        failovers.push(killed.elapsed());
        // Bring the old leader back and let it catch up before the next kill, so
        // each kill leaves a quorum.
        ensemble.servers[leader].restart();
        ensemble.leader(LEADER_WAIT).await;
        ensemble.caught_up(leader, zxid, LEADER_WAIT).await;
    }
    stop.send_replace(true);
    let mut acked = Vec::new();
    let mut newest = 0;
    for task in tasks {
        let (paths, zxid) = task.await.unwrap();
        acked.push(paths);
        newest = newest.max(zxid);
    }
    // Every acknowledged write is on every server, and the servers agree.
    for (task, paths) in acked.iter().enumerate() {
        assert!(!paths.is_empty(), "writer {task} never got a write through");
        let parent = format!("/w{task}");
        let first = children_at(&endpoints[0], &parent, newest).await;
        for endpoint in &endpoints[1..] {
            assert_eq!(
                children_at(endpoint, &parent, newest).await,
                first,
                "servers disagree on {parent}"
            );
        }
        for path in paths {
            let name = path.rsplit('/').next().unwrap();
            assert!(first.contains(name), "acknowledged write {path} was lost");
        }
    }
    failovers
}

/// What each server went through, for a failing run.
fn print_log_tails(ensemble: &Ensemble, killed: usize) {
    for (i, server) in ensemble.servers.iter().enumerate() {
        let log = server.log();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        println!("--- server {} (killed: {}) ---", i + 1, i == killed);
        for line in tail.iter().rev() {
            println!("{line}");
        }
    }
}

/// Prints the failover times (informational: bench/ measures them).
fn report(size: usize, failovers: &[Duration]) {
    let mut sorted = failovers.to_vec();
    sorted.sort();
    let p50 = sorted[sorted.len() / 2];
    let max = *sorted.last().unwrap();
    println!(
        "failover, {size} servers, {} kills: p50 {p50:?}, max {max:?}, each {failovers:?}",
        failovers.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t81_three_servers_lose_their_leader_ten_times_and_no_write() {
    let _serial = SERIAL.lock().await;
    let failovers = kill_leaders(3, 10, 4).await;
    report(3, &failovers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t81_five_servers_lose_their_leader_three_times_and_no_write() {
    let _serial = SERIAL.lock().await;
    let failovers = kill_leaders(5, 3, 4).await;
    report(5, &failovers);
}
