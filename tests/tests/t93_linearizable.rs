//! Linearizability on real processes (issue 15 point 4, the leader's faults): the
//! clients, lockers and watchers of `concord_tests::histories` on a 3-server
//! ensemble with a proxy on every peer link, while the leader, round after round, is
//! killed with -9, frozen with SIGSTOP, isolated both ways, or cut off one way (the
//! followers' bytes to it dropped), until the others elect a new leader, then
//! restarted, thawed or healed; or a follower loses its disk (kill -9,
//! `--discard-local-state`, restart empty). Then every check of `histories` runs:
//! linearizable keys, no answer older than its client had seen, watchers complete
//! and in order, fenced writes never overlapping.
//!
//! A failing run keeps its history, the servers' logs and data folders, and prints
//! where they are and the command that runs it again.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use concord_tests::histories::{Workload, WorkloadOptions};
use concord_tests::{env_u64, Ensemble, Proxies, ServerOptions};

const LEADER_WAIT: Duration = Duration::from_secs(20);
/// Ops per client and round at most, so the history (and the check) stays bounded.
const OPS_PER_ROUND_MAX: usize = 1_000;
/// Ops the clients record after each round before the next.
const OPS_BETWEEN_ROUNDS: usize = 200;
/// Rounds of the nemesis in CI: each of its five faults twice. The long run:
/// `T93_ROUNDS=200 cargo test -p concord-tests --test t93_linearizable -- --nocapture`.
const ROUNDS_DEFAULT: u64 = 10;

/// Cuts (or heals, `cut` false) the links from `others` to `leader`, and the links
/// back too when `both_ways`.
fn cut_off(proxies: &Proxies, leader: usize, others: &[usize], both_ways: bool, cut: bool) {
    for &j in others {
        proxies.cut(j, leader, cut);
        if both_ways {
            proxies.cut(leader, j, cut);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t93_histories_stay_linearizable_across_kills_pauses_and_partitions_of_the_leader() {
    let mut ensemble = Ensemble::start_proxied(3, ServerOptions::server_defaults());
    let servers = ensemble.servers.len();
    let rounds = env_u64("T93_ROUNDS", ROUNDS_DEFAULT) as usize;
    let options = WorkloadOptions {
        clients: 6,
        lockers: 2,
        ops_max: OPS_PER_ROUND_MAX * rounds,
    };
    let replay = format!(
        "T93_ROUNDS={rounds} cargo test -p concord-tests --test t93_linearizable -- --nocapture"
    );
    let (workload, proxies) = Workload::start_kept(&mut ensemble, options, "t93", replay).await;
    for round in 0..rounds {
        let old = ensemble.leader(LEADER_WAIT).await;
        let others: Vec<usize> = (0..servers).filter(|&i| i != old).collect();
        match round % 5 {
            0 => {
                ensemble.servers[old].kill9();
                ensemble.leader_among(&others, LEADER_WAIT).await;
                ensemble.servers[old].restart();
            }
            1 => {
                ensemble.servers[old].signal("STOP");
                ensemble.leader_among(&others, LEADER_WAIT).await;
                ensemble.servers[old].signal("CONT");
            }
            2 => {
                // The leader isolated: no byte either way between it and the others.
                cut_off(&proxies, old, &others, true, true);
                ensemble.leader_among(&others, LEADER_WAIT).await;
                cut_off(&proxies, old, &others, true, false);
            }
            3 => {
                // A follower loses its disk: killed, its data discarded, restarted
                // empty (it rejoins by SNAP from the leader).
                let f = others[0];
                ensemble.servers[f].kill9();
                ensemble.servers[f].discard_local_state();
                ensemble.servers[f].restart();
            }
            _ => {
                // One way: the followers' links to the leader drop what they send,
                // so it hears no ack while they still hear it.
                cut_off(&proxies, old, &others, false, true);
                ensemble.leader_among(&others, LEADER_WAIT).await;
                cut_off(&proxies, old, &others, false, false);
            }
        }
        // Every server back and caught up, and the clients busy again, before the
        // next round.
        ensemble.all_caught_up(LEADER_WAIT).await;
        workload.wait_ops(OPS_BETWEEN_ROUNDS).await;
    }
    workload.finish().await;
}
