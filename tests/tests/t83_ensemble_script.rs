//! `scripts/ensemble.sh`, as docs/operations.md tells users to run it: start three
//! servers, write through one, read through another, stop them all.

#![allow(clippy::unwrap_used)]

use std::process::Command;

use concord_tests::bin;
use concord_tests::script::{free_base_port, run, script, Stop};

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
