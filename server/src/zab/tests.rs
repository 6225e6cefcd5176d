//! Unit tests of the Zab phases on a perfect in-process network with instant disks.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::node::State;
use super::*;
use crate::txn::{zxid_epoch, Txn, TxnOp, Zxid};

fn txn(n: u64) -> Txn {
    Txn {
        zxid: 0,
        time_ms: 0,
        session_id: 0,
        request_id: n,
        fence: None,
        op: TxnOp::Reap {
            path: format!("/n{n}"),
        },
    }
}

/// Nodes, a FIFO network that can cut links, and what each applied and persisted.
struct Harness {
    nodes: BTreeMap<ServerId, Node>,
    net: VecDeque<(ServerId, Envelope)>,
    applied: BTreeMap<ServerId, Vec<Zxid>>,
    persisted: BTreeMap<ServerId, Vec<PersistOp>>,
    down: Vec<ServerId>,
    /// Links that drop every message: (from, to).
    blocked: BTreeSet<(ServerId, ServerId)>,
    /// Hold persistence of these nodes (their Readies' ops are not acknowledged).
    slow_disk: Vec<ServerId>,
    held: BTreeMap<ServerId, Vec<u64>>,
    /// Each node's newest snapshot, as its storage holds it: a SNAP it sends is
    /// filled from here (the core sends it without its bytes, as the transport
    /// fills it from storage).
    stored: BTreeMap<ServerId, Snapshot>,
}

impl Harness {
    fn new(voters: &[ServerId], observers: &[ServerId]) -> Harness {
        let mut nodes = BTreeMap::new();
        for &id in voters.iter().chain(observers) {
            let cfg = Config::new(id, voters.to_vec(), observers.to_vec());
            nodes.insert(id, Node::new(cfg, Restored::default(), id).unwrap());
        }
        Harness {
            nodes,
            net: VecDeque::new(),
            applied: BTreeMap::new(),
            persisted: BTreeMap::new(),
            down: vec![],
            blocked: BTreeSet::new(),
            slow_disk: vec![],
            held: BTreeMap::new(),
            stored: BTreeMap::new(),
        }
    }

    /// Node `id` wrote `snapshot` to its storage and compacts its log behind it.
    fn compact(&mut self, id: ServerId, snapshot: Snapshot) {
        let zxid = snapshot.zxid;
        self.stored.insert(id, snapshot);
        self.nodes.get_mut(&id).unwrap().compact(zxid);
    }

    /// Drains every node until none has anything left to do.
    fn drain(&mut self) {
        for _ in 0..100 {
            if !self.drain_once() {
                return;
            }
        }
        panic!("readies never ran dry");
    }

    fn drain_once(&mut self) -> bool {
        let mut any = false;
        let ids: Vec<ServerId> = self.nodes.keys().copied().collect();
        for id in ids {
            let node = self.nodes.get_mut(&id).unwrap();
            let r = node.ready();
            any |= !r.is_empty();
            assert!(r.fatal.is_none(), "{id}: {:?}", r.fatal);
            for env in r.messages {
                self.net.push_back((id, env));
            }
            if !r.persist.is_empty() {
                for op in &r.persist {
                    if let PersistOp::Snapshot(s) = op {
                        self.stored.insert(id, s.clone());
                    }
                }
                self.persisted.entry(id).or_default().extend(r.persist);
                if self.slow_disk.contains(&id) {
                    self.held.entry(id).or_default().push(r.number);
                } else {
                    node.persisted(r.number);
                }
            }
            let applied = self.applied.entry(id).or_default();
            applied.extend(r.committed.iter().map(|t| t.zxid));
        }
        any
    }

    /// The disk of `id` makes durable every Ready it was holding.
    fn persist_held(&mut self, id: ServerId) {
        let n = *self.held[&id].last().unwrap();
        self.nodes.get_mut(&id).unwrap().persisted(n);
    }

    /// The voters of `voters` other than `leader`.
    fn followers(voters: &[ServerId], leader: ServerId) -> Vec<ServerId> {
        voters.iter().copied().filter(|&id| id != leader).collect()
    }

    /// Delivers until quiet.
    fn settle(&mut self) {
        for _ in 0..10_000 {
            self.drain();
            let Some((from, mut env)) = self.net.pop_front() else {
                return;
            };
            if self.down.contains(&from)
                || self.down.contains(&env.to)
                || self.blocked.contains(&(from, env.to))
                || !env.msg.fill_snap_from(self.stored.get(&from))
            {
                continue;
            }
            if let Some(n) = self.nodes.get_mut(&env.to) {
                n.step(from, env.msg);
            }
        }
        panic!("network never settled");
    }

    fn ticks(&mut self, n: usize) {
        for _ in 0..n {
            for (id, node) in self.nodes.iter_mut() {
                if !self.down.contains(id) {
                    node.tick();
                }
            }
            self.settle();
        }
    }

    fn leader(&self) -> Option<ServerId> {
        self.nodes
            .iter()
            .find(|(id, n)| {
                !self.down.contains(id) && n.status().role == Role::Leading && n.status().serving
            })
            .map(|(id, _)| *id)
    }
}

#[test]
fn single_server_is_an_ensemble_of_one() {
    let mut h = Harness::new(&[1], &[]);
    h.settle();
    assert_eq!(h.leader(), Some(1));
    let z = h.nodes.get_mut(&1).unwrap().propose(txn(1)).unwrap();
    assert_eq!(zxid_epoch(z), 1);
    h.settle();
    assert_eq!(h.applied[&1], vec![z]);
    h.nodes.get_mut(&1).unwrap().read_index(7).unwrap();
    let r = h.nodes.get_mut(&1).unwrap().ready();
    assert_eq!(
        r.reads,
        vec![ReadState {
            id: 7,
            result: Ok(z)
        }]
    );
}

#[test]
fn three_servers_elect_commit_and_observer_learns() {
    let mut h = Harness::new(&[1, 2, 3], &[4]);
    h.ticks(3);
    let leader = h.leader().expect("a leader");
    assert_eq!(leader, 3, "highest id wins among equal histories");
    let mut zs = vec![];
    for i in 0..5 {
        zs.push(h.nodes.get_mut(&leader).unwrap().propose(txn(i)).unwrap());
    }
    h.settle();
    for id in [1, 2, 3, 4] {
        assert_eq!(h.applied[&id], zs, "server {id}");
    }
    let follower = h.nodes.get_mut(&1).unwrap();
    assert_eq!(
        follower.propose(txn(9)),
        Err(ZabError::NotLeader { hint: Some(3) })
    );
    assert_eq!(follower.status().role, Role::Following);
    assert_eq!(h.nodes[&4].status().role, Role::Observing);
}

#[test]
fn acks_wait_for_fsync_and_commit_waits_for_a_quorum() {
    let mut h = Harness::new(&[1, 2, 3], &[]);
    h.ticks(3);
    let leader = h.leader().unwrap();
    h.slow_disk = vec![1, 2];
    let z = h.nodes.get_mut(&leader).unwrap().propose(txn(1)).unwrap();
    h.settle();
    assert!(h.applied[&leader].is_empty(), "no quorum durable yet");
    assert!(h.nodes[&leader].committed_zxid() < z);
    h.persist_held(1);
    h.settle();
    assert_eq!(h.applied[&leader], vec![z]);
}

/// A txn durable on a quorum is applied on every server at its COMMIT, also on one
/// whose own disk has not made it durable yet (as in ZooKeeper): the leader when its
/// two followers made the quorum, a follower when the leader and the other one did.
/// While applies are held at the log's durable end (`hold_applies_at_durable`, as
/// when a snapshot waits for the log), a committed txn waits for the disk again.
#[test]
fn a_committed_txn_is_applied_before_this_servers_own_fsync() {
    let mut h = Harness::new(&[1, 2, 3], &[]);
    h.ticks(3);
    let leader = h.leader().unwrap();
    let followers = Harness::followers(&[1, 2, 3], leader);
    h.slow_disk = vec![leader];
    let z1 = h.nodes.get_mut(&leader).unwrap().propose(txn(1)).unwrap();
    h.settle();
    assert!(h.nodes[&leader].durable_log_zxid() < z1);
    for id in [1, 2, 3] {
        assert_eq!(h.applied[&id], vec![z1], "server {id}");
    }
    h.persist_held(leader);
    let slow = followers[0];
    h.slow_disk = vec![slow];
    let z2 = h.nodes.get_mut(&leader).unwrap().propose(txn(2)).unwrap();
    h.settle();
    assert!(h.nodes[&slow].durable_log_zxid() < z2);
    assert_eq!(h.applied[&slow], vec![z1, z2]);

    h.nodes
        .get_mut(&slow)
        .unwrap()
        .hold_applies_at_durable(true);
    let z3 = h.nodes.get_mut(&leader).unwrap().propose(txn(3)).unwrap();
    h.settle();
    assert_eq!(h.applied[&leader], vec![z1, z2, z3], "committed");
    assert_eq!(h.applied[&slow], vec![z1, z2], "held at the durable end");
    h.persist_held(slow);
    h.settle();
    assert_eq!(h.applied[&slow], vec![z1, z2, z3]);
}

/// Followers whose disks stall for longer than the sync limit still answer their
/// leader's pings at once (`Message::Alive`, outside their streams, where the
/// PingAck waits behind the append as every message does): the leader keeps its
/// quorum and its leadership, and the write commits once a disk catches up.
#[test]
fn a_leader_keeps_followers_whose_disks_stall_past_the_sync_limit() {
    let mut h = Harness::new(&[1, 2, 3], &[]);
    h.ticks(3);
    let leader = h.leader().unwrap();
    let followers = Harness::followers(&[1, 2, 3], leader);
    h.slow_disk = followers.clone();
    let z = h.nodes.get_mut(&leader).unwrap().propose(txn(1)).unwrap();
    let limit = Config::new(leader, vec![1, 2, 3], vec![]).sync_limit_ticks as usize;
    h.ticks(3 * limit);
    assert_eq!(h.leader(), Some(leader), "the leader stepped down");
    for &f in &followers {
        assert_eq!(h.nodes[&f].status().role, Role::Following);
    }
    assert!(h.applied[&leader].is_empty(), "no quorum durable yet");
    h.slow_disk.clear();
    h.persist_held(followers[0]);
    h.settle();
    assert_eq!(h.applied[&leader], vec![z]);
}

/// The leader reports each learner's sync state and lag (`learner_progress`): none
/// behind once settled, a follower with a slow disk behind by what it has not made
/// durable.
#[test]
fn the_leader_reports_learners_lag() {
    let mut h = Harness::new(&[1, 2, 3], &[4]);
    h.ticks(3);
    let leader = h.leader().unwrap();
    let progress = |h: &Harness| {
        let mut l = h.nodes[&leader].learner_progress();
        l.sort_by_key(|p| p.id);
        l.into_iter()
            .map(|p| (p.id, p.observer, p.synced, p.lag_txns))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        progress(&h),
        [(1, false, true, 0), (2, false, true, 0), (4, true, true, 0)]
    );
    assert!(
        h.nodes[&1].learner_progress().is_empty(),
        "only a leader reports"
    );
    h.slow_disk = vec![1];
    for i in 0..3 {
        h.nodes.get_mut(&leader).unwrap().propose(txn(i)).unwrap();
    }
    h.settle();
    assert_eq!(
        progress(&h),
        [(1, false, true, 3), (2, false, true, 0), (4, true, true, 0)]
    );
}

/// Five voters led by 5 (the best vote: logs tie, highest id); then `blocked`
/// links drop everything and 5 dies. 4 has the best vote left but no quorum hears
/// it: a leader must serve among {1, 2, 3}, which hear each other, within 300 ticks
/// (a few sync limits). Returns the harness and that leader.
fn best_vote_cut_off(blocked: &[(ServerId, ServerId)]) -> (Harness, ServerId) {
    let mut h = Harness::new(&[1, 2, 3, 4, 5], &[]);
    h.ticks(3);
    assert_eq!(h.leader(), Some(5));
    h.blocked.extend(blocked.iter().copied());
    h.down = vec![5];
    for _ in 0..300 {
        h.ticks(1);
        if let Some(l) = h.leader().filter(|l| [1, 2, 3].contains(l)) {
            return (h, l);
        }
    }
    let statuses: Vec<Status> = h.nodes.values().map(|n| n.status()).collect();
    panic!("no leader among 1, 2, 3: {statuses:?}");
}

/// {4,5} x {1,2} cut both ways, so 3 alone hears everyone (ZooKeeper stalls here
/// for as long as the cut lasts: 4 wins every round and never hears a quorum).
#[test]
fn a_candidate_that_a_quorum_cannot_reach_stops_winning() {
    let both_ways = [
        (4, 1),
        (4, 2),
        (5, 1),
        (5, 2),
        (1, 4),
        (2, 4),
        (1, 5),
        (2, 5),
    ];
    let (mut h, leader) = best_vote_cut_off(&both_ways);
    // Healed, 4 joins that leader rather than taking over.
    h.blocked.clear();
    h.ticks(50);
    assert_eq!(h.leader(), Some(leader));
    assert_eq!(h.nodes[&4].status().leader, Some(leader));
}

/// One-way cuts: 4 hears 1 and 2, but they never hear 4.
#[test]
fn a_candidate_heard_by_no_quorum_stops_winning_on_one_way_cuts() {
    best_vote_cut_off(&[(4, 1), (4, 2), (5, 1), (5, 2)]);
}

#[test]
fn a_leader_without_quorum_steps_down_and_refuses() {
    let mut h = Harness::new(&[1, 2, 3], &[]);
    h.ticks(3);
    let leader = h.leader().unwrap();
    h.nodes.get_mut(&leader).unwrap().read_index(1).unwrap();
    h.down = h.nodes.keys().copied().filter(|&i| i != leader).collect();
    h.ticks(10);
    let node = h.nodes.get_mut(&leader).unwrap();
    assert_ne!(node.status().role, Role::Leading);
    assert!(node.propose(txn(1)).is_err());
    assert!(node.read_index(2).is_err());
}

/// A 3-server ensemble whose leader has just died, before any survivor is told: the
/// harness, the dead leader, and the survivors as (worse vote, better vote), which
/// is (lower id, higher id) since their histories are equal.
fn leader_down() -> (Harness, ServerId, (ServerId, ServerId)) {
    let mut h = Harness::new(&[1, 2, 3], &[]);
    h.ticks(3);
    let dead = h.leader().unwrap();
    h.down = vec![dead];
    let survivors: Vec<ServerId> = [1, 2, 3].into_iter().filter(|&i| i != dead).collect();
    (h, dead, (survivors[0], survivors[1]))
}

#[test]
fn a_follower_whose_leader_stream_is_lost_elects_a_new_leader_at_once() {
    let (mut h, leader, _) = leader_down();
    // No tick passes: only the lost streams tell the followers.
    for id in [1, 2, 3].into_iter().filter(|&i| i != leader) {
        let node = h.nodes.get_mut(&id).unwrap();
        node.peer_lost(9); // not its leader: ignored
        assert_eq!(node.status().role, Role::Following);
        node.peer_lost(leader);
        assert_eq!(node.status().role, Role::Looking);
    }
    // The vote finalizes after one tick; discovery and sync need no more.
    h.ticks(2);
    let new = h.leader().expect("a new leader within two ticks");
    assert_ne!(new, leader);
    // A follower told of a lost stream from its live leader costs an election, not
    // the ensemble: a leader serves again and it follows.
    let other = [1, 2, 3]
        .into_iter()
        .find(|&i| i != leader && i != new)
        .unwrap();
    h.nodes.get_mut(&other).unwrap().peer_lost(new);
    h.ticks(30);
    let again = h.leader().expect("a leader again");
    assert_eq!(h.nodes[&other].status().leader, Some(again));
}

/// After the leader dies, each survivor decides on the first tick it takes; whichever
/// of them ticks first, the new leader is established then, with no tick more (the
/// follower joins a leader that says it leads, and registers again if its first
/// registration reached that leader while it was still looking).
#[test]
fn survivors_establish_a_leader_on_the_first_tick_of_either() {
    for follower_ticks_first in [true, false] {
        let (mut h, dead, (follower, next)) = leader_down();
        for id in [follower, next] {
            h.nodes.get_mut(&id).unwrap().peer_lost(dead);
        }
        h.settle();
        assert_eq!(h.leader(), None, "no leader before a tick finalizes a vote");
        let first = if follower_ticks_first { follower } else { next };
        h.nodes.get_mut(&first).unwrap().tick();
        h.settle();
        assert_eq!(
            h.leader(),
            Some(next),
            "follower ticked first: {follower_ticks_first}"
        );
        let status = h.nodes[&follower].status();
        assert_eq!((status.role, status.leader), (Role::Following, Some(next)));
        assert!(
            status.serving,
            "follower ticked first: {follower_ticks_first}"
        );
    }
}

/// The survivor with the better vote learns of the leader's death first: its vote
/// reaches the other while that one still follows (and answers with its leader), so
/// the other's own vote comes later and is worse. The better one answers it at once,
/// and both have agreed before any tick: one tick decides.
#[test]
fn a_survivor_that_looked_first_answers_the_worse_vote_of_the_one_that_followed() {
    let (mut h, dead, (worse, better)) = leader_down();
    h.nodes.get_mut(&better).unwrap().peer_lost(dead);
    h.settle();
    assert_eq!(h.nodes[&worse].status().role, Role::Following);
    h.nodes.get_mut(&worse).unwrap().peer_lost(dead);
    h.settle();
    h.ticks(1);
    assert_eq!(h.leader(), Some(better));
    assert!(h.nodes[&worse].status().serving);
}

#[test]
fn uncommitted_tail_is_truncated_and_lagging_server_gets_snap() {
    let mut h = Harness::new(&[1, 2, 3], &[]);
    h.ticks(3);
    let old = h.leader().unwrap();
    let z1 = h.nodes.get_mut(&old).unwrap().propose(txn(1)).unwrap();
    h.settle();
    // Cut the leader off, then it proposes a txn nobody else sees.
    h.down = vec![old];
    let ghost = h.nodes.get_mut(&old).unwrap().propose(txn(2));
    let _ = h.nodes.get_mut(&old).unwrap().ready();
    h.ticks(12);
    let new = h.leader().expect("new leader");
    assert_ne!(new, old);
    let z3 = h.nodes.get_mut(&new).unwrap().propose(txn(3)).unwrap();
    h.settle();
    // The new leader compacts behind a snapshot: the old one rejoins by TRUNC or SNAP.
    let snap = Snapshot {
        zxid: z3,
        data: bytes::Bytes::from_static(b"state"),
    };
    h.compact(new, snap);
    h.persisted.clear();
    h.down.clear();
    h.ticks(15);
    let node = &h.nodes[&old];
    assert_eq!(node.status().role, Role::Following);
    assert_eq!(node.last_zxid(), z3);
    assert!(ghost.is_ok());
    let ops = &h.persisted[&old];
    assert!(
        ops.iter()
            .any(|op| matches!(op, PersistOp::Snapshot(s) if s.zxid == z3 && s.data == "state")),
        "{ops:?}"
    );
    // The core keeps only the snapshot's zxid: its bytes are for storage.
    assert_eq!(node.log.snapshot(), Some(z3));
    assert!(h.applied[&old].contains(&z1));
}

#[test]
fn a_looker_that_a_quorum_decided_on_leads_even_from_a_later_round() {
    // Voters 1 and 2 decided on 4 in an earlier round and wait for it (they follow,
    // registering); 4 has since moved to a later round (a third looker's round pulled
    // it on). With 4 itself they are 3 of 5: 4 leads instead of waiting for them to
    // give up and vote again.
    let voters = [1, 2, 3, 4, 5];
    let mut four = Node::new(
        Config::new(4, voters.to_vec(), vec![]),
        Restored::default(),
        4,
    )
    .unwrap();
    four.ready();
    four.round = 7;
    let decided = |round| {
        Message::Notification(Notification {
            vote: Vote {
                epoch: 0,
                zxid: 0,
                leader: 4,
            },
            round,
            state: PeerState::Following,
        })
    };
    four.step(1, decided(5));
    assert_eq!(
        four.status().role,
        Role::Looking,
        "one backer and me are not 3 of 5"
    );
    four.step(2, decided(5));
    assert_eq!(four.status().role, Role::Leading);
}

/// A Set of `data_bytes` bytes (the core never looks inside).
fn big(n: u64, data_bytes: usize) -> Txn {
    Txn {
        op: TxnOp::Set(crate::txn::SetOp {
            path: "/big".into(),
            data: bytes::Bytes::from(vec![n as u8; data_bytes]),
            version: -1,
            null_data: false,
        }),
        ..txn(n)
    }
}

#[test]
fn snapshots_by_bytes_bound_the_log_and_a_lagging_follower_still_syncs() {
    // The runtime's rule, played here: snapshot the applied state once the log holds
    // `budget` bytes. Every server's log then stays within the budget plus the txns
    // of one round, whatever the total written; a follower that was down for all of
    // it is behind every leader snapshot and catches up by SNAP.
    const DATA: usize = 64 << 10;
    const BUDGET: usize = 1 << 20;
    let mut h = Harness::new(&[1, 2, 3], &[]);
    h.ticks(3);
    let leader = h.leader().unwrap();
    let lagging = if leader == 1 { 2 } else { 1 };
    h.down = vec![lagging];
    let per_round = 4;
    let round_bytes = per_round * log::txn_bytes(&big(0, DATA));
    let mut last = 0;
    let mut peak = 0;
    for round in 0..64u64 {
        for i in 0..per_round as u64 {
            let n = round * 100 + i;
            last = h
                .nodes
                .get_mut(&leader)
                .unwrap()
                .propose(big(n, DATA))
                .unwrap();
        }
        h.settle();
        let ids: Vec<ServerId> = h.nodes.keys().copied().collect();
        for id in ids {
            let log_bytes = h.nodes[&id].log_bytes();
            peak = peak.max(log_bytes);
            let applied = h.applied.get(&id).and_then(|a| a.last().copied());
            if let (true, Some(zxid)) = (log_bytes >= BUDGET, applied) {
                let data = bytes::Bytes::from(format!("state at {zxid:#x}"));
                h.compact(id, Snapshot { zxid, data });
            }
        }
    }
    let written = 64 * round_bytes;
    assert!(written > 10 * BUDGET);
    assert!(
        peak < BUDGET + round_bytes,
        "peak {peak} over {BUDGET} + {round_bytes}"
    );
    assert!(h.nodes[&leader].log_bytes() < BUDGET);
    h.down.clear();
    h.persisted.clear();
    h.ticks(15);
    let node = &h.nodes[&lagging];
    assert_eq!(node.status().role, Role::Following);
    assert_eq!(node.last_zxid(), last);
    let ops = &h.persisted[&lagging];
    assert!(
        ops.iter().any(|op| matches!(op, PersistOp::Snapshot(_))),
        "behind every snapshot: SNAP"
    );
    assert!(node.log_bytes() < BUDGET + round_bytes);
    // It takes part in the next writes like any other.
    let z = h
        .nodes
        .get_mut(&leader)
        .unwrap()
        .propose(big(9999, DATA))
        .unwrap();
    h.settle();
    assert_eq!(h.applied[&lagging].last(), Some(&z));
}

#[test]
fn a_leader_never_opens_a_second_stream_on_one_session() {
    // Found by the simulator (seed 5640 with one more draw per restart). Server 1
    // registers with leader 3 on session S (it repeats FollowerInfo{S} until
    // answered). 3's first leadership opens S: NEWEPOCH (lost), pings 2-4; 1 holds
    // pings 3 and 4 past the gap. 3 steps down, leads again, and gets the repeated
    // FollowerInfo{S}. Were S opened again, its numbers would restart at 1: 1 would
    // take the new NEWEPOCH (1) and SYNC (2), then the held old pings as 3 and 4,
    // drop the new stream's proposal of z (3) and commit (4) as duplicates, and ack
    // NEWLEADER (5) without z: a follower whose ack vouches for a history it lacks,
    // which then applies z2 right after its own last txn, skipping z.
    let mut h = Harness::new(&[1, 2, 3], &[]);
    h.ticks(3);
    assert_eq!(h.leader(), Some(3));
    h.down = vec![1];
    let z = h.nodes.get_mut(&3).unwrap().propose(txn(1)).unwrap();
    h.settle();
    assert!(h.applied[&2].contains(&z) && !h.applied[&1].contains(&z));
    // 1 (still cut off) registers with 3 on session S.
    let session = 0x5e55_1011;
    let n1 = h.nodes.get_mut(&1).unwrap();
    n1.state = State::Learning(learner::Learner::new(3, session, false, n1.now));
    let info = Message::FollowerInfo {
        session,
        accepted_epoch: n1.accepted_epoch(),
        observer: false,
    };
    let to_1 = |h: &mut Harness| -> Vec<Message> {
        let mut out = vec![];
        h.drain();
        h.net.retain(|(from, env)| {
            let mine = *from == 3 && env.to == 1;
            if mine {
                out.push(env.msg.clone());
            }
            !mine
        });
        out
    };
    h.nodes.get_mut(&3).unwrap().step(1, info.clone());
    let mut old = to_1(&mut h); // NEWEPOCH: lost
    for _ in 0..3 {
        for id in [2, 3] {
            h.nodes.get_mut(&id).unwrap().tick();
        }
        old.extend(to_1(&mut h));
        h.settle();
    }
    let held: Vec<Message> = old
        .into_iter()
        .filter(|m| {
            matches!(
                m,
                Message::ToLearner {
                    seq: 3 | 4,
                    body: LeaderMsg::Ping { .. },
                    ..
                }
            )
        })
        .collect();
    assert_eq!(held.len(), 2, "pings 3 and 4 of the first stream");
    for m in held {
        h.nodes.get_mut(&1).unwrap().step(3, m);
    }
    // 3 steps down and leads again (with 2), 1 still cut off.
    h.nodes.get_mut(&3).unwrap().enter_looking();
    for _ in 0..40 {
        if h.leader() == Some(3) {
            break;
        }
        h.ticks(1);
    }
    assert_eq!(h.leader(), Some(3));
    // The repeated FollowerInfo{S} reaches the new leadership.
    h.down.clear();
    h.nodes.get_mut(&3).unwrap().step(1, info);
    h.settle();
    h.ticks(3);
    let z2 = h.nodes.get_mut(&3).unwrap().propose(txn(2)).unwrap();
    h.settle();
    assert_eq!(h.nodes[&1].status().role, Role::Following);
    let tail: Vec<Zxid> = h.applied[&1].iter().copied().filter(|&x| x >= z).collect();
    assert_eq!(tail, vec![z, z2], "server 1 skipped committed history");
}

#[test]
fn an_ackepoch_answering_another_epoch_does_not_count() {
    // Found by the simulator (seed 111024 with 1000 chaos ticks). Leader 3 sent
    // NEWEPOCH on learner 1's session S, 1 acked it, and 3 restarted before the ack
    // arrived. Led again, 3 got 1's FollowerInfo{S} and that ack, both held in the
    // network, and proposed the next epoch on S. Counted, the ack (for the epoch
    // before) made that epoch current on 3 with 1 never having accepted it.
    let session = 0x5e55_1011;
    let ack = |epoch| Message::ToLeader {
        session,
        seq: 1,
        body: LearnerMsg::AckEpoch {
            epoch,
            current_epoch: 2,
            last_zxid: 0,
            counts: true,
        },
    };
    // Server 3, restarted with epoch 3 accepted and current, leading again with S
    // registered and epoch 4 proposed on it (durably on its own side).
    let proposed = || {
        let cfg = Config::new(3, vec![1, 2, 3], vec![]);
        let restored = Restored {
            accepted_epoch: 3,
            current_epoch: 3,
            ..Restored::default()
        };
        let mut n = Node::new(cfg, restored, 3).unwrap();
        n.state = State::Leading(leader::Leader::new(n.now));
        n.leader_started();
        n.step(
            1,
            Message::FollowerInfo {
                session,
                accepted_epoch: 3,
                observer: false,
            },
        );
        let r = n.ready();
        assert!(r.messages.iter().any(|e| matches!(
            e.msg,
            Message::ToLearner {
                body: LeaderMsg::NewEpoch { epoch: 4 },
                ..
            }
        )));
        n.persisted(r.number);
        n
    };
    let mut stale = proposed();
    stale.step(1, ack(3));
    let _ = stale.ready();
    assert_eq!(
        stale.current_epoch(),
        3,
        "an ack of epoch 3 made epoch 4 current"
    );
    // The ack of the epoch proposed counts.
    let mut fresh = proposed();
    fresh.step(1, ack(4));
    let r = fresh.ready();
    assert!(r
        .persist
        .iter()
        .any(|op| matches!(op, PersistOp::CurrentEpoch(4))));
}

#[test]
fn a_learner_that_finds_two_leaderships_on_one_stream_registers_again() {
    // Found by the simulator (seed 129177 with 1000 chaos ticks). Learner 1
    // registered with leader 2 on session S; 2 opened S (epoch 13), then 1 was
    // paused, and 2 crashed and restarted meanwhile. On resuming, 1 got the late
    // pings of the first stream (numbers 3 to 11) and repeated FollowerInfo{S}; the
    // restarted 2, not remembering S, opened it again (epoch 14). Its NEWEPOCH and
    // SYNC (1 and 2) released the held pings as 3 to 11, and the new stream's own 3
    // to 11 (proposals, NEWLEADER, commits) were dropped as duplicates.
    let session = 0x5e55_1011;
    let mut n = Node::new(
        Config::new(1, vec![1, 2, 3], vec![]),
        Restored::default(),
        1,
    )
    .unwrap();
    n.state = State::Learning(learner::Learner::new(2, session, false, n.now));
    let on_s = |epoch, seq, body| Message::ToLearner {
        session,
        epoch,
        seq,
        body,
    };
    n.step(2, on_s(13, 3, LeaderMsg::Ping { round: 2 }));
    n.step(2, on_s(14, 1, LeaderMsg::NewEpoch { epoch: 14 }));
    let r = n.ready();
    n.persisted(r.number);
    n.step(2, on_s(14, 2, LeaderMsg::Sync(SyncKind::Diff { from: 0 })));
    let State::Learning(f) = &n.state else {
        panic!("not learning: {:?}", n.status());
    };
    let new_session = f.session;
    assert_ne!(new_session, session, "the spliced stream was kept");
    let r = n.ready();
    assert!(
        r.messages.iter().any(|e| matches!(
            e.msg,
            Message::FollowerInfo { session: s, .. } if s == new_session
        )),
        "no registration on the new session: {:?}",
        r.messages
    );
}

#[test]
fn an_observer_does_not_follow_a_leader_of_an_older_epoch() {
    // Found by the simulator (seed 26957 with 1000 chaos ticks). Leader 3 of epoch
    // 4 was paused for 54 ticks; meanwhile 2 led epochs 5 and 6, and observer 4
    // applied their commits. On resuming, 3 still said it led epoch 4; 4 registered
    // with it, took its NEWEPOCH (an observer promised nothing) and got a TRUNC
    // that would cut the txns of epoch 5 it had applied, and stopped.
    let session = 0xb5e4;
    let mut n = Node::new(
        Config::new(4, vec![1, 2, 3], vec![4]),
        Restored {
            current_epoch: 6,
            ..Restored::default()
        },
        4,
    )
    .unwrap();
    n.state = State::Learning(learner::Learner::new(3, session, true, n.now));
    n.step(
        3,
        Message::ToLearner {
            session,
            epoch: 4,
            seq: 1,
            body: LeaderMsg::NewEpoch { epoch: 4 },
        },
    );
    assert_eq!(n.status().role, Role::Looking, "it followed epoch 4");
    let r = n.ready();
    assert!(
        !r.messages
            .iter()
            .any(|e| matches!(e.msg, Message::ToLeader { .. })),
        "it acked epoch 4: {:?}",
        r.messages
    );
}

#[path = "resync_tests.rs"]
mod resync;
