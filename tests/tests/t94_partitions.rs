//! Partitions on real processes (issue 15 point 4): the clients, lockers and
//! watchers of `concord_tests::histories` on a 5-server ensemble with a proxy on
//! every peer link, while a seeded nemesis, round after round, does one of:
//! - **minority leader**: the leader and one follower cut off both ways from the
//!   other three, which elect a leader of their own;
//! - **bridge**: two halves, {leader, a} and {b, c}, cut off from each other both
//!   ways, with the fifth server seeing everyone; the clients write through it, then
//!   the leader is killed with -9, and {bridge, b, c} must elect a leader (a fully
//!   connected quorum), though a, which reaches only the bridge, may have the best
//!   vote;
//! - **one way out**: nobody hears the leader, which still hears everyone;
//! - **delays**: every link delayed by its own 0-150 ms while the clients go on;
//! - **drops**: every connection to and from the leader closed, again and again;
//! - **pause**: the leader frozen with SIGSTOP until the others elect a leader;
//! - **two down**: two followers killed with -9 at once, one of them restarted empty
//!   (`--discard-local-state`).
//!
//! Each fault is healed (and every server caught up) before the next round. Then
//! every check of `histories` runs: linearizable keys, no answer older than its
//! client had seen, watchers complete and in order, fenced writes never
//! overlapping.
//!
//! The rounds take the faults in an order the seed shuffles, every fault once per
//! seven rounds. A failing run keeps its history, the servers' logs and data
//! folders, and prints where they are and the command that runs it again (the same
//! seed gives the same faults in the same order, with the same delays). The long
//! run: `T94_ROUNDS=70 T94_SEED=N cargo test -p concord-tests --test t94_partitions
//! -- --nocapture`.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use concord_server::zab::rng::Rng;
use concord_tests::histories::{Workload, WorkloadOptions};
use concord_tests::{env_u64, Ensemble, Proxies, ServerOptions};

const SERVERS: usize = 5;
const LEADER_WAIT: Duration = Duration::from_secs(30);
/// Ops per client and round at most, so the history (and the check) stays bounded.
const OPS_PER_ROUND_MAX: usize = 1_000;
/// Ops the clients record after each round before the next, and during a fault
/// that keeps a quorum.
const OPS_BETWEEN_ROUNDS: usize = 150;

#[derive(Clone, Copy, Debug)]
enum Fault {
    MinorityLeader,
    Bridge,
    OneWayOut,
    Delays,
    Drops,
    Pause,
    TwoDown,
}

const FAULTS: [Fault; 7] = [
    Fault::MinorityLeader,
    Fault::Bridge,
    Fault::OneWayOut,
    Fault::Delays,
    Fault::Drops,
    Fault::Pause,
    Fault::TwoDown,
];

/// `rounds` faults: each block of seven is every fault once, in an order `rng`
/// shuffles.
fn schedule(rng: &mut Rng, rounds: usize) -> Vec<Fault> {
    let mut faults = Vec::new();
    while faults.len() < rounds {
        let mut block = FAULTS.to_vec();
        for i in (1..block.len()).rev() {
            block.swap(i, rng.below(i as u64 + 1) as usize);
        }
        faults.extend(block);
    }
    faults.truncate(rounds);
    faults
}

/// Cuts (or heals, `cut` false) every link between a server of `a` and one of
/// `b`, both ways.
fn cut_between(proxies: &Proxies, a: &[usize], b: &[usize], cut: bool) {
    for &i in a {
        for &j in b {
            proxies.cut(i, j, cut);
            proxies.cut(j, i, cut);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t94_histories_stay_linearizable_across_partitions_of_five_servers() {
    let seed = env_u64("T94_SEED", 1);
    let rounds = env_u64("T94_ROUNDS", FAULTS.len() as u64) as usize;
    let mut rng = Rng::new(seed);
    let faults = schedule(&mut rng, rounds);
    let mut ensemble = Ensemble::start_proxied(SERVERS, ServerOptions::server_defaults());
    let options = WorkloadOptions {
        clients: SERVERS,
        lockers: 2,
        ops_max: OPS_PER_ROUND_MAX * rounds,
    };
    let replay = format!(
        "T94_SEED={seed} T94_ROUNDS={rounds} cargo test -p concord-tests --test t94_partitions -- --nocapture"
    );
    let (workload, proxies) = Workload::start_kept(&mut ensemble, options, "t94", replay).await;
    for (round, fault) in faults.into_iter().enumerate() {
        let old = ensemble.leader(LEADER_WAIT).await;
        let others: Vec<usize> = (0..SERVERS).filter(|&i| i != old).collect();
        eprintln!("t94: round {round}: {fault:?}, leader {}", old + 1);
        match fault {
            Fault::MinorityLeader => {
                let (minority, majority) = ([old, others[0]], &others[1..]);
                cut_between(&proxies, &minority, majority, true);
                ensemble.leader_among(majority, LEADER_WAIT).await;
                cut_between(&proxies, &minority, majority, false);
            }
            Fault::Bridge => {
                let (a, bridge, b) = ([old, others[0]], others[1], [others[2], others[3]]);
                cut_between(&proxies, &a, &b, true);
                // The leader still has a quorum (itself, a and the bridge).
                workload.wait_ops(OPS_BETWEEN_ROUNDS).await;
                ensemble.servers[old].kill9();
                ensemble
                    .leader_among(&[bridge, b[0], b[1]], LEADER_WAIT)
                    .await;
                ensemble.servers[old].restart();
                cut_between(&proxies, &a, &b, false);
            }
            Fault::OneWayOut => {
                for &j in &others {
                    proxies.cut(old, j, true);
                }
                ensemble.leader_among(&others, LEADER_WAIT).await;
                for &j in &others {
                    proxies.cut(old, j, false);
                }
            }
            Fault::Delays => {
                for i in 0..SERVERS {
                    for j in (0..SERVERS).filter(|&j| j != i) {
                        let ms = rng.below(151);
                        proxies.delay(i, j, Duration::from_millis(ms));
                    }
                }
                workload.wait_ops(OPS_BETWEEN_ROUNDS).await;
                proxies.heal_all();
            }
            Fault::Drops => {
                for _ in 0..5 {
                    for &j in &others {
                        proxies.sever(old, j);
                        proxies.sever(j, old);
                    }
                    workload.wait_ops(OPS_BETWEEN_ROUNDS / 5).await;
                }
            }
            Fault::Pause => {
                ensemble.servers[old].signal("STOP");
                ensemble.leader_among(&others, LEADER_WAIT).await;
                ensemble.servers[old].signal("CONT");
            }
            Fault::TwoDown => {
                let (wiped, killed) = (others[0], others[1]);
                ensemble.servers[wiped].kill9();
                ensemble.servers[killed].kill9();
                // The other three still make a quorum.
                workload.wait_ops(OPS_BETWEEN_ROUNDS).await;
                ensemble.servers[wiped].discard_local_state();
                ensemble.servers[wiped].restart();
                ensemble.servers[killed].restart();
            }
        }
        // Every server back and caught up, and the clients busy again, before the
        // next round.
        ensemble.all_caught_up(LEADER_WAIT).await;
        workload.wait_ops(OPS_BETWEEN_ROUNDS).await;
    }
    workload.finish().await;
}
