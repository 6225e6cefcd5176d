//! The grant table as replicated state: seeds, grants and revocations applied as
//! txns, kept in snapshots (format 2; format 1 still reads) and in the digest.

use super::*;
use crate::security::{Grant, Grantee, Perms};
use crate::txn::AccessOp;

fn team_grant(path: &str, team: &str, perms: Perms) -> Grant {
    Grant {
        path: path.into(),
        to: Grantee::Team(team.into()),
        perms,
    }
}

fn seed(grants: Vec<Grant>, roots: &[&str]) -> TxnOp {
    TxnOp::Access(AccessOp::Seed {
        grants,
        roots: roots.iter().map(|r| r.to_string()).collect(),
    })
}

#[test]
fn a_seed_creates_roots_and_grants_once_and_a_second_changes_nothing() {
    let mut d = Driver::new();
    let g = team_grant("/teams/pay", "pay", Perms::ALL);
    let applied = d.run(seed(vec![g.clone()], &["/teams/pay"]));
    assert_eq!(applied.result, Ok(TxnResult::AccessChanged));
    assert!(d.tree.get("/teams").is_some() && d.tree.get("/teams/pay").is_some());
    assert_eq!(applied.events.len(), 4, "two creates, two child changes");
    assert!(d.tree.grants().is_seeded(&g));
    // Revoked, then seeded again: stays revoked; the roots stay as they are.
    d.run(TxnOp::Access(AccessOp::Revoke(g.clone())))
        .result
        .unwrap();
    let before = d.tree.clone();
    let again = d.run(seed(vec![g], &["/teams/pay"]));
    assert!(again.result.is_ok() && again.events.is_empty());
    assert_eq!(d.tree.grants(), before.grants());
    assert_eq!(d.tree.node_count(), before.node_count());
    check_invariants(&d.tree);
}

#[test]
fn bad_grants_fail_and_change_nothing() {
    let mut d = Driver::new();
    let before = d.tree.digest();
    let bad_path = team_grant("nope", "pay", Perms::READ);
    let r = d.run(TxnOp::Access(AccessOp::Grant(bad_path))).result;
    assert!(matches!(r, Err(TreeError::BadPath { .. })), "{r:?}");
    let empty = team_grant("/a", "pay", Perms::NONE);
    let r = d.run(TxnOp::Access(AccessOp::Grant(empty))).result;
    assert!(matches!(r, Err(TreeError::BadArguments(_))), "{r:?}");
    let nobody = team_grant("/a", "", Perms::READ);
    let r = d.run(TxnOp::Access(AccessOp::Grant(nobody))).result;
    assert!(matches!(r, Err(TreeError::BadArguments(_))), "{r:?}");
    assert!(d.tree.grants().is_empty());
    // Only last_zxid moved.
    let mut fresh = DataTree::new();
    fresh.last_zxid = d.tree.last_zxid();
    assert_eq!(d.tree.digest(), fresh.digest());
    assert_ne!(before, d.tree.digest());
}

#[test]
fn grants_survive_a_snapshot_and_count_in_the_digest() {
    let mut d = Driver::new();
    d.mk("/a", CreateMode::Persistent);
    let plain = d.tree.digest();
    let g = team_grant("/a", "pay", Perms::READ.union(Perms::WRITE));
    let who = Grant {
        path: "/a/b".into(),
        to: Grantee::Identity("pay-*".into()),
        perms: Perms::ADMIN,
    };
    d.run(seed(vec![g], &[])).result.unwrap();
    d.run(TxnOp::Access(AccessOp::Grant(who))).result.unwrap();
    let bytes = d.tree.encode_snapshot().unwrap();
    assert_eq!(bytes[8], 2, "format 2");
    let back = DataTree::decode_snapshot(&bytes).unwrap();
    assert_eq!(back.grants(), d.tree.grants());
    assert_eq!(back.digest(), d.tree.digest());
    // The grants are in the digest: the same nodes without them differ.
    let mut bare = d.tree.clone();
    bare.grants = crate::security::Grants::new();
    assert_ne!(bare.digest(), d.tree.digest());
    assert_ne!(plain, d.tree.digest());
}

#[test]
fn a_format_1_snapshot_still_loads_with_no_grants() {
    let mut d = Driver::new();
    d.mk("/a", CreateMode::Persistent);
    let v2 = d.tree.encode_snapshot().unwrap();
    // Format 1 is format 2 without the (here empty) grant table record.
    let empty_table =
        postcard::to_allocvec(&(Vec::<Grant>::new(), Vec::<(String, Grantee)>::new())).unwrap();
    let zxid = postcard::to_allocvec(&d.tree.last_zxid()).unwrap();
    let sessions_at = 9 + zxid.len();
    let sessions_len = postcard::to_allocvec(&Vec::<u8>::new()).unwrap().len();
    let table_at = sessions_at + sessions_len;
    assert_eq!(
        &v2[table_at..table_at + empty_table.len()],
        &empty_table[..]
    );
    let mut v1 = v2[..table_at].to_vec();
    v1[8] = 1;
    v1.extend_from_slice(&v2[table_at + empty_table.len()..v2.len() - 4]);
    let crc = crc32fast::hash(&v1);
    v1.extend_from_slice(&crc.to_le_bytes());
    let back = DataTree::decode_snapshot(&v1).unwrap();
    assert!(back.grants().is_empty());
    assert_eq!(back.digest(), d.tree.digest());
    let mut v9 = v2.clone();
    v9[8] = 9;
    let e = DataTree::decode_snapshot(&v9).unwrap_err().to_string();
    assert!(e.contains("unknown format 9"), "{e}");
}
