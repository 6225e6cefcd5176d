//! Lock and election queues: join, adopt, leave, update, fences, the reserved prefix.

use super::*;
use crate::tree::queue::{decode_entry, QueueEntry};
use crate::txn::{CreateMode::*, Fence, QueueOp};

const Q: &str = "/concord/locks/job";

fn join(queue: &str, owner: &str, permits: u32) -> TxnOp {
    TxnOp::Queue(QueueOp::Join {
        queue: queue.into(),
        owner_id: owner.into(),
        value: Bytes::from_static(b"v"),
        permits,
        only_if_free: false,
    })
}

fn leave(path: &str, token: u64) -> TxnOp {
    TxnOp::Queue(QueueOp::Leave {
        path: path.into(),
        token,
    })
}

impl Driver {
    /// Joins as `session_id`, returns (key, token).
    fn join_as(&mut self, session_id: u64, op: TxnOp) -> (String, u64) {
        match self.run_as(session_id, 0, op).result {
            Ok(TxnResult::Created { path, stat }) => (path, stat.czxid),
            other => panic!("join failed: {other:?}"),
        }
    }

    fn fenced(&mut self, session_id: u64, fence: Fence, op: TxnOp) -> Applied {
        let mut txn = self.txn(session_id, 0, op);
        txn.fence = Some(fence);
        self.tree.apply(&txn)
    }
}

fn fence(key: &str, token: u64) -> Fence {
    Fence {
        key: key.into(),
        token,
    }
}

#[test]
fn join_creates_folders_and_queues_in_order() {
    let mut d = Driver::new();
    let (a, b) = (d.open(), d.open());
    let (ka, ta) = d.join_as(a, join(Q, "a", 1));
    let (kb, tb) = d.join_as(b, join(Q, "b", 1));
    assert_eq!(ka, format!("{Q}/0000000000"));
    assert_eq!(kb, format!("{Q}/0000000001"));
    assert!(tb > ta);
    assert_eq!(d.tree.get(Q).unwrap().data, Bytes::from_static(b"1"));
    assert_eq!(d.tree.get("/concord").unwrap().stat.ephemeral_owner, 0);
    let entries = d.tree.queue_entries(Q, 0);
    let owners: Vec<_> = entries.iter().map(|e| e.owner_id.as_str()).collect();
    assert_eq!(owners, ["a", "b"]);
    assert_eq!(
        entries[0],
        QueueEntry {
            key: ka.clone(),
            token: ta,
            session_id: a,
            owner_id: "a".into(),
            value: Bytes::from_static(b"v"),
        }
    );
    assert!(d.tree.queue_place(&ka).unwrap().is_holder());
    let place_b = d.tree.queue_place(&kb).unwrap();
    assert!(!place_b.is_holder());
    assert_eq!(place_b.window, vec![ka.clone()]);
    check_invariants(&d.tree);
}

#[test]
fn fence_holds_only_for_the_current_holder() {
    let mut d = Driver::new();
    d.mk("/data", Persistent);
    let (a, b) = (d.open(), d.open());
    let (ka, ta) = d.join_as(a, join(Q, "a", 1));
    let (kb, tb) = d.join_as(b, join(Q, "b", 1));
    assert!(d.tree.fence_holds(&fence(&ka, ta)));
    assert!(!d.tree.fence_holds(&fence(&ka, ta + 1)), "wrong token");
    assert!(!d.tree.fence_holds(&fence(&kb, tb)), "a waiter");
    assert!(d
        .fenced(0, fence(&ka, ta), set("/data", "a", -1))
        .result
        .is_ok());
    let stale = d.fenced(0, fence(&kb, tb), set("/data", "b", -1));
    assert_eq!(
        stale.result,
        Err(TreeError::Fenced {
            key: kb.clone(),
            token: tb
        })
    );
    assert!(stale.events.is_empty());
    // The holder's session expires: the lock passes to b, a's token is dead.
    d.ok(close(a));
    assert!(d.tree.fence_holds(&fence(&kb, tb)));
    let zxid = d.next_zxid();
    let stale = d.fenced(0, fence(&ka, ta), set("/data", "a-late", -1));
    assert!(matches!(stale.result, Err(TreeError::Fenced { .. })));
    assert_eq!(
        d.tree.last_zxid(),
        zxid,
        "a fenced txn still consumes its zxid"
    );
    assert_eq!(d.tree.get("/data").unwrap().data, Bytes::from_static(b"a"));
    // A fenced multi changes nothing at all.
    let multi = TxnOp::Multi(vec![
        MultiOp::Create(create_op("/data/x", "", Persistent)),
        MultiOp::Set(set_op("/data", "m", -1)),
    ]);
    assert!(d.fenced(0, fence(&ka, ta), multi.clone()).result.is_err());
    assert!(d.tree.get("/data/x").is_none());
    assert!(d.fenced(0, fence(&kb, tb), multi).result.is_ok());
    assert!(d.tree.get("/data/x").is_some());
}

#[test]
fn plain_writes_cannot_touch_the_reserved_prefix() {
    let mut d = Driver::new();
    let s = d.open();
    let (k, _) = d.join_as(s, join(Q, "a", 1));
    for op in [
        create("/concord", "", Persistent),
        create("/concord/locks/job/", "", EphemeralSequential),
        create("/concord/x", "", Persistent),
        set(&k, "forged", -1),
        delete(&k, -1),
        TxnOp::Multi(vec![MultiOp::Set(set_op(Q, "5", -1))]),
    ] {
        assert!(
            matches!(d.err(op.clone()), TreeError::Reserved { .. }),
            "{op:?}"
        );
    }
    // Checks and writes beside the prefix are fine.
    d.ok(TxnOp::Multi(vec![check_op(&k, -1)]));
    d.mk("/concordx", Persistent);
}

#[test]
fn retry_by_the_same_session_and_owner_adopts_its_node() {
    let mut d = Driver::new();
    let (a, b) = (d.open(), d.open());
    let first = d.join_as(a, join(Q, "w1", 1));
    assert_eq!(d.join_as(a, join(Q, "w1", 1)), first, "adopted");
    let other_owner = d.join_as(a, join(Q, "w2", 1));
    assert_ne!(other_owner, first);
    let other_session = d.join_as(b, join(Q, "w1", 1));
    assert_ne!(other_session, first);
    let anonymous = d.join_as(a, join(Q, "", 1));
    assert_ne!(
        d.join_as(a, join(Q, "", 1)),
        anonymous,
        "no id: no adoption"
    );
    assert_eq!(d.tree.queue_entries(Q, 0).len(), 5);
}

#[test]
fn leave_update_and_only_if_free() {
    let mut d = Driver::new();
    let (a, b) = (d.open(), d.open());
    let (ka, ta) = d.join_as(a, join(Q, "a", 1));
    let try_b = TxnOp::Queue(QueueOp::Join {
        queue: Q.into(),
        owner_id: "b".into(),
        value: Bytes::new(),
        permits: 1,
        only_if_free: true,
    });
    assert!(matches!(
        d.run_as(b, 0, try_b.clone()).result,
        Err(TreeError::LockHeld { .. })
    ));
    assert_eq!(d.tree.queue_entries(Q, 0).len(), 1, "nothing queued");
    assert_eq!(d.err(leave(&ka, ta + 1)), no_node(&ka));
    let update = TxnOp::Queue(QueueOp::Update {
        path: ka.clone(),
        token: ta,
        value: Bytes::from_static(b"new"),
    });
    d.ok(update);
    let (owner, value) = decode_entry(&d.tree.get(&ka).unwrap().data);
    assert_eq!((owner.as_str(), &value[..]), ("a", &b"new"[..]));
    d.ok(leave(&ka, ta));
    assert!(d.tree.get(&ka).is_none());
    let (kb, _) = d.join_as(b, try_b);
    assert!(d.tree.queue_place(&kb).unwrap().is_holder());
    assert!(matches!(
        d.err(join("/concord/other/x", "a", 1)),
        TreeError::BadArguments(_)
    ));
}

#[test]
fn semaphore_has_permits_holders_and_a_window() {
    let mut d = Driver::new();
    let s = d.open();
    let keys: Vec<(String, u64)> = (0..5)
        .map(|i| d.join_as(s, join(Q, &format!("o{i}"), 3)))
        .collect();
    let holders: Vec<bool> = keys
        .iter()
        .map(|(k, _)| d.tree.queue_place(k).unwrap().is_holder())
        .collect();
    assert_eq!(holders, [true, true, true, false, false]);
    let place = d.tree.queue_place(&keys[4].0).unwrap();
    assert_eq!(place.permits, 3);
    assert_eq!(
        place.window,
        [keys[1].0.clone(), keys[2].0.clone(), keys[3].0.clone()]
    );
    assert!(matches!(
        d.run_as(s, 0, join(Q, "x", 2)).result,
        Err(TreeError::BadArguments(_))
    ));
    // A waiter leaving does not promote anyone; a holder leaving promotes one.
    d.ok(leave(&keys[3].0, 0));
    assert!(!d.tree.queue_place(&keys[4].0).unwrap().is_holder());
    d.ok(leave(&keys[0].0, keys[0].1));
    assert!(d.tree.queue_place(&keys[4].0).unwrap().is_holder());
    assert!(d.tree.fence_holds(&fence(&keys[4].0, keys[4].1)));
}

#[test]
fn queues_survive_a_snapshot_and_the_empty_queue_is_reapable() {
    let mut d = Driver::new();
    let s = d.open();
    let (k, t) = d.join_as(s, join(Q, "a", 2));
    let back = DataTree::decode_snapshot(&d.tree.encode_snapshot().unwrap()).unwrap();
    assert!(back.fence_holds(&fence(&k, t)));
    assert_eq!(back.queue_permits(Q), Some(2));
    assert_eq!(back.digest(), d.tree.digest());
    d.ok(close(s));
    assert_eq!(d.tree.reapable(i64::MAX), vec![Q.to_string()]);
    check_invariants(&d.tree);
}
