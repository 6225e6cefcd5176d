//! What the tree of the benchmark's memory workload costs: 1,000,000 nodes of 100
//! bytes under one parent (`bench/src/memory.rs`), and the size of its snapshot,
//! which the Zab core keeps in memory for SNAP. The breakdown in docs/benchmarks
//! comes from here. Ignored by default (it is a measurement, and slow in debug):
//!
//!   cargo test --release -p concord-server tree::tests::memory -- --ignored --nocapture
//!
//! The test binary uses the system allocator, the server mimalloc, so per-node
//! figures differ a little from the server's.

use super::*;

/// This process's resident set, MiB (Linux).
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

#[test]
#[ignore = "a measurement of RSS; run it alone, in release"]
fn a_million_nodes_of_100_bytes() {
    const NODES: usize = 1_000_000;
    let mut d = Driver::new();
    let before = rss_mib();
    d.mk("/bench-memory", CreateMode::Persistent);
    let data = "x".repeat(100);
    for i in 0..NODES {
        d.ok(create(
            &format!("/bench-memory/n{i}"),
            &data,
            CreateMode::Persistent,
        ));
    }
    let tree = rss_mib() - before;
    let snapshot = d.tree.encode_snapshot().unwrap();
    let snapshot_mib = snapshot.len() as f64 / (1 << 20) as f64;
    println!(
        "{NODES} nodes: tree {tree:.0} MiB of RSS ({:.0} bytes a node); snapshot {snapshot_mib:.0} MiB",
        tree * (1 << 20) as f64 / NODES as f64
    );
    assert!(d
        .tree
        .get(&format!("/bench-memory/n{}", NODES - 1))
        .is_some());
    assert!(tree > 0.0 && snapshot_mib > 0.0, "nothing measured");
}
