//! `scripts/ensemble.sh`, as docs/operations.md tells users to run it: start three
//! servers, write through one, read through another, stop them all.

#![allow(clippy::unwrap_used)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use concord_tests::{bin, workspace_dir, Background};

const WAIT: Duration = Duration::from_secs(60);

/// A base port whose three client and peer ports are all free right now.
fn free_base_port() -> u16 {
    for _ in 0..100 {
        let probe = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = probe.local_addr().unwrap().port();
        drop(probe);
        if base > 60_000 {
            continue;
        }
        let free = (0..3)
            .flat_map(|i| [base + 10 * i, base + 10 * i + 1])
            .all(|port| TcpListener::bind(("127.0.0.1", port)).is_ok());
        if free {
            return base;
        }
    }
    panic!("no free port range found");
}

fn script(dir: &Path, base: u16, args: &[&str]) -> Command {
    let mut cmd = Command::new(workspace_dir().join("scripts/ensemble.sh"));
    cmd.args(args)
        .env("ENSEMBLE_DIR", dir)
        .env("BASE_PORT", base.to_string())
        .env("CONCORD_BIN", bin("concord").parent().unwrap());
    cmd
}

async fn run(mut cmd: Command) -> String {
    let mut child = Background::spawn(&mut cmd);
    let status = child.wait_exit(WAIT).await;
    assert!(
        status.success(),
        "{cmd:?} failed:\n{}\n{}",
        child.stdout(),
        child.stderr()
    );
    child.stdout()
}

/// Stops the ensemble even when the test fails halfway.
struct Stop(PathBuf, u16);

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = script(&self.0, self.1, &["stop"]).status();
    }
}

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
