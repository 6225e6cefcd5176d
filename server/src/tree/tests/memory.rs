//! What the tree of the benchmark's memory workload costs: 1,000,000 nodes of 100
//! bytes under one parent (`bench/src/memory.rs`), and the size of its snapshot,
//! which the Zab core keeps in memory for SNAP; and what a read and an apply cost on
//! that tree. The breakdown in docs/benchmarks comes from here. Ignored by default
//! (they are measurements, and slow in debug):
//!
//!   cargo test --release -p concord-server tree::tests::memory -- --ignored --nocapture --test-threads 1
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

const NODES: usize = 1_000_000;

/// A tree with the benchmark's nodes: NODES of 100 bytes under /bench-memory.
fn filled() -> Driver {
    let mut d = Driver::new();
    d.mk("/bench-memory", CreateMode::Persistent);
    let data = "x".repeat(100);
    for i in 0..NODES {
        d.ok(create(
            &format!("/bench-memory/n{i}"),
            &data,
            CreateMode::Persistent,
        ));
    }
    d
}

#[test]
#[ignore = "a measurement of RSS; run it alone, in release"]
fn a_million_nodes_of_100_bytes() {
    let before = rss_mib();
    let d = filled();
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

/// What a read and the apply of a Set cost on that tree, with the nodes taken in an
/// order that defeats the caches (the worst case for the map's layout): the other
/// side of the memory figures when the map changes.
#[test]
#[ignore = "a measurement of time; run it alone, in release"]
fn gets_and_sets_on_a_million_nodes() {
    let mut d = filled();
    let paths: Vec<String> = (0..NODES)
        .map(|i| format!("/bench-memory/n{}", (i * 7919) % NODES))
        .collect();
    let start = std::time::Instant::now();
    let found = paths.iter().filter(|p| d.tree.get(p).is_some()).count();
    let get_ns = start.elapsed().as_nanos() as f64 / NODES as f64;
    const SETS: usize = 100_000;
    let start = std::time::Instant::now();
    for path in &paths[..SETS] {
        d.ok(set(path, "y", -1));
    }
    let set_ns = start.elapsed().as_nanos() as f64 / SETS as f64;
    println!("{NODES} nodes: a get {get_ns:.0} ns, a Set's apply {set_ns:.0} ns");
    assert_eq!(found, NODES);
}
