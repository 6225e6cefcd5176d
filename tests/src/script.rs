//! Running `scripts/ensemble.sh` from a test: a free range of ports, the script's
//! command with its folder and ports, a run that must succeed, and a guard that
//! stops the ensemble however the test ends.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::{bin, workspace_dir, Background};

/// Longest one run of the script may take.
const WAIT: Duration = Duration::from_secs(60);

/// A base port whose three servers' client, peer, metrics and ZooKeeper ports
/// (base + 10i to base + 10i + 3) are all free right now.
pub fn free_base_port() -> u16 {
    crate::free_ports(24)
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
