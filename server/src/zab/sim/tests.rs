//! The simulator's tests: many seeds (CI), one seed (replay), determinism, and the
//! planted bugs each being caught.

use super::*;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn env_bug() -> Option<PlantedBug> {
    match std::env::var("ZAB_BUG").ok().as_deref() {
        Some("ack") => Some(PlantedBug::AckBeforeFsync),
        Some("commit") => Some(PlantedBug::CommitWithoutQuorum),
        Some("epoch") => Some(PlantedBug::SkipEpochPersist),
        _ => None,
    }
}

/// Runs seeds first..first+count; returns the first failure as (seed, message).
fn sweep(first: u64, count: u64, bug: Option<PlantedBug>) -> Result<u64, (u64, String)> {
    let mut committed = 0u64;
    for seed in first..first + count {
        let mut opts = SimOptions::from_seed(seed);
        opts.bug = bug;
        match run(opts) {
            Ok(report) => committed += report.stats.committed as u64,
            Err(e) => return Err((seed, e)),
        }
    }
    Ok(committed)
}

#[test]
fn zab_sim_seeds() {
    let first = env_u64("ZAB_SIM_FIRST", 0);
    let count = env_u64("ZAB_SIM_SEEDS", 200);
    let started = std::time::Instant::now();
    match sweep(first, count, env_bug()) {
        Ok(committed) => eprintln!(
            "zab sim: {count} seeds from {first} passed ({committed} txns committed) in {:?}",
            started.elapsed()
        ),
        Err((seed, e)) => panic!(
            "zab sim seed {seed} failed: {e}\nreplay: {}",
            replay_command(seed, env_bug())
        ),
    }
}

#[test]
fn zab_sim_replay() {
    let Ok(seed) = std::env::var("ZAB_SEED") else {
        return; // nothing to replay
    };
    let seed: u64 = seed.parse().expect("ZAB_SEED is a number");
    let mut opts = SimOptions::from_seed(seed);
    opts.bug = env_bug();
    opts.verbose = std::env::var("ZAB_SIM_VERBOSE").is_ok();
    match run(opts) {
        Ok(report) => eprintln!("seed {seed} passed: {report:?}"),
        Err(e) => panic!("seed {seed} failed: {e}"),
    }
}

#[test]
fn same_seed_same_trace() {
    for seed in [3, 4, 5] {
        let a = run(SimOptions::from_seed(seed)).expect("seed passes");
        let b = run(SimOptions::from_seed(seed)).expect("seed passes");
        assert_eq!(a, b, "seed {seed}");
        assert!(a.stats.committed > 0 && a.stats.acked > 0, "{a:?}");
    }
    let a = run(SimOptions::from_seed(6)).expect("seed passes");
    let b = run(SimOptions::from_seed(7)).expect("seed passes");
    assert_ne!(a.trace, b.trace);
}

/// Runs seeds with `bug` until one fails; asserts one does within `max` seeds.
fn caught(bug: PlantedBug, max: u64) {
    match sweep(0, max, Some(bug)) {
        Ok(_) => panic!("planted bug {bug:?} not caught in {max} seeds"),
        Err((seed, e)) => eprintln!(
            "planted bug {bug:?} caught by seed {seed}: {e}\nreplay: {}",
            replay_command(seed, Some(bug))
        ),
    }
}

#[test]
fn planted_bug_commit_without_quorum_is_caught() {
    caught(PlantedBug::CommitWithoutQuorum, 300);
}

#[test]
fn planted_bug_ack_before_fsync_is_caught() {
    caught(PlantedBug::AckBeforeFsync, 300);
}

#[test]
fn planted_bug_skip_epoch_persist_is_caught() {
    caught(PlantedBug::SkipEpochPersist, 300);
}
