//! A seeded random walk over txns: apply never panics, invariants always hold, and
//! replaying the same txns (or resuming from a snapshot) gives the same tree.

use super::*;

/// xorshift64*: small, seeded, deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

const PATHS: &[&str] = &[
    "/", "/a", "/a/b", "/a/b/c", "/a/", "/b", "/b/x", "/b/y", "/b/", "/c", "/c/d", "/c/d/",
    "/a/b/", "a", "/a//b", "/a/.", "/\u{1}",
];
const MODES: &[CreateMode] = &[
    CreateMode::Persistent,
    CreateMode::Ephemeral,
    CreateMode::PersistentSequential,
    CreateMode::EphemeralSequential,
    CreateMode::Container,
    CreateMode::PersistentWithTtl,
    CreateMode::PersistentSequentialWithTtl,
];

fn random_create(rng: &mut Rng) -> CreateOp {
    let mode = *rng.pick(MODES);
    let ttl_ms = match rng.below(4) {
        0 => 0,
        1 => -1,
        _ => rng.below(50) as i64 + 1,
    };
    CreateOp {
        path: rng.pick(PATHS).to_string(),
        data: Bytes::from(vec![rng.below(256) as u8; rng.below(4) as usize]),
        mode,
        ttl_ms,
        null_data: false,
    }
}

fn version(rng: &mut Rng) -> i32 {
    rng.below(4) as i32 - 1
}

fn random_multi_op(rng: &mut Rng) -> MultiOp {
    // Biased towards ops that succeed, so multis of several ops do apply.
    let path = if rng.below(2) == 0 {
        "/".to_string()
    } else {
        rng.pick(PATHS).to_string()
    };
    match rng.below(4) {
        0 => MultiOp::Create(random_create(rng)),
        1 => MultiOp::Set(SetOp {
            path,
            data: Bytes::from_static(b"m"),
            version: -1,
            null_data: false,
        }),
        2 => MultiOp::Delete(DeleteOp {
            path,
            version: version(rng),
        }),
        _ => MultiOp::Check(CheckOp {
            path,
            version: version(rng),
        }),
    }
}

fn random_op(rng: &mut Rng, sessions: &[u64]) -> TxnOp {
    let path = rng.pick(PATHS).to_string();
    match rng.below(20) {
        0..=6 => TxnOp::Create(random_create(rng)),
        7..=9 => TxnOp::Set(SetOp {
            path,
            data: Bytes::from_static(b"s"),
            version: version(rng),
            null_data: false,
        }),
        10..=11 => TxnOp::Delete(DeleteOp {
            path,
            version: version(rng),
        }),
        12..=14 => TxnOp::Multi((0..rng.below(5)).map(|_| random_multi_op(rng)).collect()),
        15 => TxnOp::OpenSession {
            ttl_ms: rng.below(3) as i64 * 1000,
        },
        16 => TxnOp::OpenOwnedSession {
            ttl_ms: rng.below(3) as i64 * 1000,
            owner: rng.pick(&["alice", "bob", ""]).to_string(),
        },
        17 => TxnOp::CloseSession {
            session_id: random_session(rng, sessions),
            reason: CloseReason::Expired,
        },
        _ => TxnOp::Reap { path },
    }
}

fn random_session(rng: &mut Rng, sessions: &[u64]) -> u64 {
    if sessions.is_empty() || rng.below(5) == 0 {
        rng.below(3)
    } else {
        *rng.pick(sessions)
    }
}

/// Random txns for `seed`, applied as they are generated; returns them all.
fn run_seed(seed: u64, steps: usize) -> (Vec<Txn>, Vec<Applied>, DataTree) {
    let mut rng = Rng(seed);
    let mut tree = DataTree::new();
    let (mut zxid, mut time_ms) = (0u64, 0i64);
    let (mut txns, mut outcomes) = (Vec::new(), Vec::new());
    let mut fresh_request_id = 100;
    for _ in 0..steps {
        let sessions: Vec<u64> = tree.sessions().map(|(id, _)| id).collect();
        // Mostly growing zxids, sometimes a stale one.
        zxid = if rng.below(20) == 0 {
            zxid.saturating_sub(rng.below(2))
        } else {
            zxid + 1 + rng.below(3)
        };
        time_ms += rng.below(20) as i64;
        let txn = Txn {
            zxid,
            time_ms,
            session_id: random_session(&mut rng, &sessions),
            // None, a fresh id, or (as a retry would) a small reused one.
            request_id: match rng.below(8) {
                0 => rng.below(3),
                1..=3 => {
                    fresh_request_id += 1;
                    fresh_request_id
                }
                _ => 0,
            },
            fence: None,
            op: random_op(&mut rng, &sessions),
        };
        let before = tree.clone();
        let applied = tree.apply(&txn);
        check_step(&before, &tree, &txn, &applied);
        check_invariants(&tree);
        txns.push(txn);
        outcomes.push(applied);
    }
    (txns, outcomes, tree)
}

/// What must hold for one apply.
fn check_step(before: &DataTree, after: &DataTree, txn: &Txn, applied: &Applied) {
    assert!(applied.events.iter().all(|e| e.zxid == txn.zxid));
    if txn.zxid <= before.last_zxid() {
        assert!(matches!(applied.result, Err(TreeError::BadArguments(_))));
        assert_eq!(after.last_zxid(), before.last_zxid());
        assert_eq!(after.digest(), before.digest());
        return;
    }
    assert_eq!(after.last_zxid(), txn.zxid);
    let remembered = txn.session_id != 0 && txn.request_id != 0;
    if applied.result.is_err() {
        assert!(applied.events.is_empty());
        if !remembered || before.session(txn.session_id).is_none() {
            let mut unchanged = before.clone();
            unchanged.last_zxid = txn.zxid;
            assert_eq!(after.digest(), unchanged.digest(), "{txn:?}");
        }
    }
}

#[test]
fn random_txns_keep_invariants_and_replay_identically() {
    for seed in [1, 0xdead_beef, 42_4242] {
        let (txns, outcomes, tree) = run_seed(seed, 2_500);
        assert!(tree.node_count() > 1, "seed {seed} built nothing");
        let mut replay = DataTree::new();
        for (txn, outcome) in txns.iter().zip(&outcomes) {
            assert_eq!(&replay.apply(txn), outcome, "seed {seed}: {txn:?}");
        }
        assert_eq!(replay.digest(), tree.digest(), "seed {seed}");
    }
}

#[test]
fn snapshot_mid_run_resumes_identically() {
    let (txns, outcomes, tree) = run_seed(7, 2_000);
    let mut resumed = DataTree::new();
    for (i, (txn, outcome)) in txns.iter().zip(&outcomes).enumerate() {
        if i % 250 == 0 {
            let bytes = resumed.encode_snapshot().unwrap();
            let decoded = DataTree::decode_snapshot(&bytes).unwrap();
            assert_eq!(decoded.digest(), resumed.digest(), "step {i}");
            check_invariants(&decoded);
            resumed = decoded;
        }
        assert_eq!(&resumed.apply(txn), outcome, "step {i}");
    }
    assert_eq!(resumed.digest(), tree.digest());
}

#[test]
fn digest_tells_trees_apart() {
    let mut a = Driver::new();
    let mut b = Driver::new();
    a.mk("/x", CreateMode::Persistent);
    b.mk("/x", CreateMode::Persistent);
    assert_eq!(a.tree.digest(), b.tree.digest());
    a.ok(set("/x", "1", -1));
    b.ok(set("/x", "2", -1));
    assert_ne!(a.tree.digest(), b.tree.digest());
    let mut c = Driver::new();
    c.mk("/y", CreateMode::Persistent);
    assert_ne!(c.tree.digest(), DataTree::new().digest());
    let mut e = DataTree::new();
    e.last_zxid = 1;
    assert_ne!(e.digest(), DataTree::new().digest());
}
