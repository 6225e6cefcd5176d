//! Unit tests of a voter that must resync (its history was discarded by the
//! operator): it must not help elect a leader that lacks committed txns, and votes
//! again once it has synced from an established leader.

use super::*;

/// Replaces `id` by a restarted node whose history was discarded: empty, with the
/// epochs it had (the discard keeps them) and the must-resync marker.
fn discard(h: &mut Harness, id: ServerId, voters: &[ServerId]) {
    let old = &h.nodes[&id];
    let restored = Restored {
        accepted_epoch: old.accepted_epoch(),
        current_epoch: old.current_epoch(),
        must_resync: true,
        ..Restored::default()
    };
    let cfg = Config::new(id, voters.to_vec(), vec![]);
    h.nodes.insert(id, Node::new(cfg, restored, id).unwrap());
    h.persisted.remove(&id);
}

#[test]
fn a_discarded_voter_does_not_help_a_leader_that_lacks_committed_txns() {
    let voters = [1, 2, 3];
    let mut h = Harness::new(&voters, &[]);
    h.ticks(3);
    assert_eq!(h.leader(), Some(3));
    // z is committed by 3 and 2; 1 is down and never sees it.
    h.down = vec![1];
    let z = h.nodes.get_mut(&3).unwrap().propose(txn(1)).unwrap();
    h.settle();
    assert!(h.applied[&2].contains(&z) && h.applied[&3].contains(&z));
    // 2's state is discarded; 3 (the only other copy of z) goes down; 1 comes back.
    discard(&mut h, 2, &voters);
    h.down = vec![3];
    h.ticks(40);
    // 1 and 2 are a majority by count, but 2 abstains: no leader without z.
    assert_eq!(h.leader(), None, "a leader was elected without z");
    for id in [1, 2] {
        assert_ne!(h.nodes[&id].status().role, Role::Leading, "server {id}");
        assert!(h.nodes[&id].committed_zxid() < z || h.nodes[&id].last_zxid() >= z);
    }
    assert!(h.nodes[&2].resyncing());
    // 3 returns: a leader with z is established, and 2 syncs from it and votes again.
    h.down.clear();
    h.ticks(40);
    let leader = h.leader().expect("a leader once 3 is back");
    assert_ne!(leader, 2);
    let two = &h.nodes[&2];
    assert!(!two.resyncing());
    assert_eq!(two.status().role, Role::Following);
    assert!(two.last_zxid() >= z);
    assert!(h.applied[&2].contains(&z) || h.nodes[&2].committed_zxid() >= z);
    assert!(
        h.persisted[&2].contains(&PersistOp::Resynced),
        "{:?}",
        h.persisted[&2]
    );
    // Synced, it counts again: with 1 down, 2 and the leader still commit.
    h.down = vec![1];
    let z2 = h.nodes.get_mut(&leader).unwrap().propose(txn(2)).unwrap();
    h.settle();
    assert!(h.applied[&2].contains(&z2));
}

#[test]
fn a_discarded_voter_never_leads_even_with_the_best_vote() {
    // 3 would win every tie by id; after a discard it must not lead, even with a
    // fresh ensemble where nobody has history.
    let voters = [1, 2, 3];
    let mut h = Harness::new(&voters, &[]);
    discard(&mut h, 3, &voters);
    h.ticks(10);
    let leader = h.leader().expect("1 and 2 elect a leader");
    assert_eq!(leader, 2);
    assert_eq!(h.nodes[&3].status().role, Role::Following);
    assert!(!h.nodes[&3].resyncing(), "synced from 2");
}

#[test]
fn a_discarded_voter_does_not_count_for_an_epoch() {
    // Only 3 (resyncing) and 2 are up: 2 may become leader in name, but 3's epoch
    // ack does not count, so 2 never establishes.
    let voters = [1, 2, 3];
    let mut h = Harness::new(&voters, &[]);
    discard(&mut h, 3, &voters);
    h.down = vec![1];
    h.ticks(40);
    assert_eq!(h.leader(), None);
    assert!(h.nodes[&3].resyncing());
    assert!(!h
        .persisted
        .get(&3)
        .is_some_and(|ops| ops.contains(&PersistOp::Resynced)));
}

#[test]
fn an_ensemble_of_one_ignores_the_marker_and_clears_it() {
    let mut h = Harness::new(&[1], &[]);
    discard(&mut h, 1, &[1]);
    assert!(!h.nodes[&1].resyncing());
    h.settle();
    assert_eq!(h.leader(), Some(1));
    assert!(h.persisted[&1].contains(&PersistOp::Resynced));
}
