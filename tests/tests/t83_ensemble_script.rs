//! `scripts/ensemble.sh`, as docs/operations.md tells users to run it: start three
//! servers, write through one, read through another, stop them all.

#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;

use concord_tests::script::{free_base_port, run, script, Stop};
use concord_tests::{bin, eventually};

#[tokio::test]
async fn t83_the_ensemble_script_starts_a_working_ensemble_and_stops_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ensemble");
    let base = free_base_port();
    let stop = Stop(dir.clone(), base);
    let started = run(script(&dir, base, &["start", "3"])).await;
    assert!(started.contains("ensemble of 3"), "{started}");
    let pids: Vec<u32> = (1..=3)
        .map(|i| {
            let pid = std::fs::read_to_string(dir.join(format!("server-{i}.pid"))).unwrap();
            pid.trim().parse().unwrap()
        })
        .collect();
    let ctl = |port: u16, args: &[&str]| {
        let mut cmd = Command::new(bin("concordctl"));
        cmd.arg("--endpoint")
            .arg(format!("http://127.0.0.1:{port}"))
            .args(args);
        cmd
    };
    run(ctl(base + 10, &["create", "/hello", "world"])).await;
    let got = run(ctl(base + 20, &["get", "/hello"])).await;
    assert_eq!(got.trim(), "world");
    let status = run(script(&dir, base, &["status"])).await;
    assert_eq!(
        status.matches("leader_serving = true").count(),
        1,
        "{status}"
    );
    // One member restarted alone (a rolling restart's step): a new process, which
    // rejoins and serves what was written while it was down.
    let pid_of = |i: u32| {
        let pid = std::fs::read_to_string(dir.join(format!("server-{i}.pid"))).unwrap();
        pid.trim().parse::<u32>().unwrap()
    };
    let stopped = run(script(&dir, base, &["stop", "2"])).await;
    assert!(!dir.join("server-2.pid").exists(), "{stopped}");
    run(ctl(base, &["create", "/while-down", "x"])).await;
    let restarted = run(script(&dir, base, &["restart", "2"])).await;
    assert!(restarted.contains("server 2 restarted"), "{restarted}");
    assert_ne!(pid_of(2), pids[1], "server 2 was not restarted");
    // It may still be applying what it missed: asked until it has (bounded).
    let caught_up = eventually(
        "server 2 serves /while-down",
        Duration::from_secs(20),
        || {
            let out = ctl(base + 10, &["get", "/while-down"]).output().unwrap();
            let got = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            async move { (got == "x").then_some(()) }
        },
    );
    caught_up.await;
    let restarted = run(script(&dir, base, &["restart", "3"])).await;
    assert!(restarted.contains("server 3 restarted"), "{restarted}");
    let mut refused = script(&dir, base, &["restart", "9"]);
    let refused = refused.output().unwrap();
    assert!(!refused.status.success());
    let pids: Vec<u32> = (1..=3).map(pid_of).collect();
    drop(stop);
    for pid in pids {
        let alive = Command::new("kill")
            .args(["-0", &pid.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(!alive, "server pid {pid} still runs after stop");
    }
}
