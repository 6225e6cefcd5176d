//! Running `scripts/ensemble.sh` from a test: a free range of ports, the script's
//! command with its folder and ports, a run that must succeed, and a guard that
//! stops the ensemble however the test ends.

#![allow(clippy::unwrap_used)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::{bin, workspace_dir, Background};

/// Longest one run of the script may take.
const WAIT: Duration = Duration::from_secs(60);

/// A base port whose three client and peer ports are all free right now.
///
/// The base is drawn at random below the kernel's ephemeral range (32768 and up on
/// Linux): every `bind(":0")` in this or another test takes its port from that range,
/// so a base taken from it can be grabbed by one between this check and the script's
/// servers binding (a TLS client once met a plain-text listener there).
pub fn free_base_port() -> u16 {
    use std::hash::{BuildHasher, RandomState};
    let random = RandomState::new();
    for attempt in 0..100u32 {
        let draw = random.hash_one((attempt, std::process::id()));
        // 20000..32000, leaving room above the base for the three servers' ports.
        let base = 20_000 + (draw % 11_900) as u16;
        let free = (0..3)
            .flat_map(|i| [base + 10 * i, base + 10 * i + 1])
            .all(|port| TcpListener::bind(("127.0.0.1", port)).is_ok());
        if free {
            return base;
        }
    }
    panic!("no free port range found");
}

pub fn script(dir: &Path, base: u16, args: &[&str]) -> Command {
    let mut cmd = Command::new(workspace_dir().join("scripts/ensemble.sh"));
    cmd.args(args)
        .env("ENSEMBLE_DIR", dir)
        .env("BASE_PORT", base.to_string())
        .env("CONCORD_BIN", bin("concord").parent().unwrap());
    cmd
}

pub async fn run(mut cmd: Command) -> String {
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
pub struct Stop(pub PathBuf, pub u16);

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = script(&self.0, self.1, &["stop"]).status();
    }
}
