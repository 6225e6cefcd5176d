//! The leader's quota book against a real tree: usage counted incrementally (and
//! equal to a recount), each quota hit exactly at its limit, growth in flight
//! reserved, space freed only once applied.

use bytes::Bytes;

use super::*;
use crate::txn::{CloseReason, CreateMode, CreateOp, DeleteOp, SetOp, Txn};

const ROOT: &str = "/teams/a";

fn team(quota: QuotaConfig) -> TeamConfig {
    TeamConfig {
        name: "a".into(),
        root: ROOT.into(),
        identities: vec!["a-*".into()],
        quota,
    }
}

/// A tree and a ledger, with the team root and a node outside it.
struct Leader {
    tree: DataTree,
    ledger: Ledger,
    counter: u64,
}

impl Leader {
    fn new(quota: QuotaConfig) -> Leader {
        let ledger = Ledger::new(&[team(quota)]);
        let mut tree = DataTree::new();
        tree.track_usage(ledger.roots());
        let mut l = Leader {
            tree,
            ledger,
            counter: 0,
        };
        for p in ["/teams", ROOT, "/other"] {
            l.apply(&create(p, b"")).unwrap();
        }
        l
    }

    fn next(&mut self) -> Zxid {
        self.counter += 1;
        crate::txn::make_zxid(1, self.counter)
    }

    /// Applies `op` (no check), as a committed txn.
    fn apply_as(&mut self, session_id: u64, request_id: u64, op: &TxnOp) -> Result<(), TreeError> {
        let zxid = self.next();
        let txn = Txn {
            zxid,
            time_ms: 1_000,
            session_id,
            request_id,
            fence: None,
            op: op.clone(),
        };
        let applied = self.tree.apply(&txn);
        self.ledger.settle(zxid);
        applied.result.map(|_| ())
    }

    fn apply(&mut self, op: &TxnOp) -> Result<(), TreeError> {
        self.apply_as(0, 0, op)
    }

    /// Checks and reserves `op` as the leader would, without applying it: its zxid.
    fn propose(&mut self, op: &TxnOp) -> Result<Zxid, TreeError> {
        let reservation = self.ledger.check(&self.tree, 0, 0, op)?;
        let zxid = self.next();
        self.ledger.reserve(zxid, reservation);
        Ok(zxid)
    }

    /// Checks, then applies.
    fn write(&mut self, op: &TxnOp) -> Result<(), TreeError> {
        self.ledger.check(&self.tree, 0, 0, op)?;
        self.apply(op)
    }

    fn usage(&self) -> Usage {
        self.tree.usage(ROOT).unwrap()
    }

    /// The incremental counters equal a count from scratch.
    fn assert_recount(&self) {
        let mut fresh = self.tree.clone();
        fresh.track_usage(self.ledger.roots());
        assert_eq!(fresh.usage(ROOT), self.tree.usage(ROOT));
    }
}

fn create(path: &str, data: &[u8]) -> TxnOp {
    TxnOp::Create(create_op(path, data, CreateMode::Persistent))
}

fn create_op(path: &str, data: &[u8], mode: CreateMode) -> CreateOp {
    CreateOp {
        path: path.into(),
        data: Bytes::copy_from_slice(data),
        mode,
        ttl_ms: if mode.is_ttl() { 60_000 } else { 0 },
        null_data: false,
    }
}

fn set(path: &str, data: &[u8]) -> TxnOp {
    TxnOp::Set(set_op(path, data))
}

fn set_op(path: &str, data: &[u8]) -> SetOp {
    SetOp {
        path: path.into(),
        data: Bytes::copy_from_slice(data),
        version: -1,
        null_data: false,
    }
}

fn delete(path: &str) -> TxnOp {
    TxnOp::Delete(delete_op(path))
}

fn delete_op(path: &str) -> DeleteOp {
    DeleteOp {
        path: path.into(),
        version: -1,
    }
}

fn nodes_max(n: u64) -> QuotaConfig {
    QuotaConfig {
        nodes_max: n,
        ..QuotaConfig::default()
    }
}

fn bytes_max(n: u64) -> QuotaConfig {
    QuotaConfig {
        data_bytes_max: n,
        ..QuotaConfig::default()
    }
}

fn refused(result: Result<impl std::fmt::Debug, TreeError>) -> TreeError {
    match result {
        Err(e @ TreeError::QuotaExceeded { .. }) => e,
        other => panic!("expected QuotaExceeded, got {other:?}"),
    }
}

#[test]
fn usage_is_counted_incrementally_and_matches_a_recount() {
    let mut l = Leader::new(QuotaConfig::default());
    assert_eq!(
        l.usage(),
        Usage::default(),
        "the root is no node of its own"
    );
    let session = {
        let zxid = l.counter + 1;
        l.apply(&TxnOp::OpenSession { ttl_ms: 10_000 }).unwrap();
        crate::txn::make_zxid(1, zxid)
    };
    l.apply(&set(ROOT, b"rootdata")).unwrap();
    l.apply(&create("/teams/a/x", b"12345")).unwrap();
    l.apply(&create("/other/y", b"outside")).unwrap();
    let seq = TxnOp::Create(create_op(
        "/teams/a/q-",
        b"abc",
        CreateMode::PersistentSequential,
    ));
    l.apply(&seq).unwrap();
    l.apply(&seq).unwrap();
    let ttl = TxnOp::Create(create_op(
        "/teams/a/t",
        b"tt",
        CreateMode::PersistentWithTtl,
    ));
    l.apply(&ttl).unwrap();
    let eph = TxnOp::Create(create_op("/teams/a/e", b"eeee", CreateMode::Ephemeral));
    l.apply_as(session, 0, &eph).unwrap();
    assert_eq!(
        l.usage(),
        Usage {
            nodes: 5,
            data_bytes: 8 + 5 + 3 + 3 + 2 + 4
        }
    );
    l.assert_recount();
    l.apply(&set("/teams/a/x", b"1")).unwrap();
    l.apply(&delete("/teams/a/t")).unwrap();
    // A failed Multi changes nothing, counters included.
    let multi = TxnOp::Multi(vec![
        MultiOp::Create(create_op("/teams/a/m", b"mm", CreateMode::Persistent)),
        MultiOp::Delete(delete_op("/teams/a/missing")),
    ]);
    assert!(l.apply(&multi).is_err());
    assert_eq!(
        l.usage(),
        Usage {
            nodes: 4,
            data_bytes: 8 + 1 + 3 + 3 + 4
        }
    );
    // Closing the session deletes its ephemeral.
    let close = TxnOp::CloseSession {
        session_id: session,
        reason: CloseReason::Closed,
    };
    l.apply(&close).unwrap();
    assert_eq!(l.usage().nodes, 3);
    l.assert_recount();
    // A snapshot does not carry the counters; tracking recounts them.
    let mut back = DataTree::decode_snapshot(&l.tree.encode_snapshot().unwrap()).unwrap();
    assert_eq!(back.usage(ROOT), None);
    back.track_usage(l.ledger.roots());
    assert_eq!(back.usage(ROOT), Some(l.usage()));
    assert_eq!(back.digest(), l.tree.digest());
}

#[test]
fn the_nth_create_succeeds_and_the_next_is_refused_changing_nothing() {
    let mut l = Leader::new(nodes_max(3));
    for i in 0..3 {
        l.write(&create(&format!("/teams/a/n{i}"), b"")).unwrap();
    }
    let before = l.tree.digest();
    let e = refused(l.write(&create("/teams/a/n3", b"")));
    assert_eq!(
        e.to_string(),
        "team \"a\" would exceed its nodes quota: 3 used of 3, the write adds 1"
    );
    assert_eq!(l.tree.digest(), before);
    // Outside the team's root, and a sequential or ephemeral create inside it.
    l.write(&create("/other/free", b"")).unwrap();
    let seq = TxnOp::Create(create_op(
        "/teams/a/s",
        b"",
        CreateMode::PersistentSequential,
    ));
    refused(l.write(&seq));
    // A deeper create counts as well; a delete frees once applied.
    refused(l.write(&create("/teams/a/n0/child", b"")));
    l.write(&delete("/teams/a/n2")).unwrap();
    l.write(&create("/teams/a/n0/child", b"")).unwrap();
    refused(l.write(&create("/teams/a/n9", b"")));
}

#[test]
fn bytes_are_hit_exactly_with_a_set_that_grows_data() {
    let mut l = Leader::new(bytes_max(10));
    l.write(&create("/teams/a/x", b"1234")).unwrap();
    l.write(&set("/teams/a/x", b"1234567890")).unwrap();
    assert_eq!(l.usage().data_bytes, 10);
    let e = refused(l.write(&set("/teams/a/x", b"12345678901")));
    assert!(
        e.to_string()
            .contains("data_bytes quota: 10 used of 10, the write adds 1"),
        "{e}"
    );
    refused(l.write(&create("/teams/a/y", b"1")));
    // An empty node fits, a shrinking set always does, and then the room is there.
    l.write(&create("/teams/a/y", b"")).unwrap();
    l.write(&set("/teams/a/x", b"12")).unwrap();
    l.write(&set("/teams/a/y", b"12345678")).unwrap();
    refused(l.write(&set("/teams/a/y", b"123456789")));
    assert_eq!(l.usage().data_bytes, 10);
    // The root's own data counts.
    refused(l.write(&set(ROOT, b"r")));
}

#[test]
fn a_multi_counts_its_net_effect() {
    let mut l = Leader::new(QuotaConfig {
        nodes_max: 2,
        data_bytes_max: 6,
        ..QuotaConfig::default()
    });
    l.write(&create("/teams/a/a", b"aaa")).unwrap();
    l.write(&create("/teams/a/b", b"bbb")).unwrap();
    // At both limits: replacing a node by one as large fits, in one Multi.
    let swap = TxnOp::Multi(vec![
        MultiOp::Delete(delete_op("/teams/a/a")),
        MultiOp::Create(create_op("/teams/a/c", b"ccc", CreateMode::Persistent)),
    ]);
    l.write(&swap).unwrap();
    // One node more in total is refused, whatever the order.
    let grow = TxnOp::Multi(vec![
        MultiOp::Create(create_op("/teams/a/d", b"", CreateMode::Persistent)),
        MultiOp::Create(create_op("/teams/a/e", b"", CreateMode::Persistent)),
        MultiOp::Delete(delete_op("/teams/a/b")),
    ]);
    let before = l.tree.digest();
    let e = refused(l.write(&grow));
    assert!(
        e.to_string()
            .contains("nodes quota: 2 used of 2, the write adds 1"),
        "{e}"
    );
    assert_eq!(l.tree.digest(), before);
    // Sets within one Multi: the last one counts, from the node's applied size.
    let sets = TxnOp::Multi(vec![
        MultiOp::Set(set_op("/teams/a/c", b"cccccccccc")),
        MultiOp::Set(set_op("/teams/a/c", b"c")),
        MultiOp::Set(set_op("/teams/a/b", b"bbbbb")),
    ]);
    l.write(&sets).unwrap();
    assert_eq!(l.usage().data_bytes, 6);
    // A node created and deleted in the same Multi adds nothing.
    let both = TxnOp::Multi(vec![
        MultiOp::Create(create_op("/teams/a/t", b"t", CreateMode::Persistent)),
        MultiOp::Delete(delete_op("/teams/a/t")),
    ]);
    l.write(&both).unwrap();
    l.assert_recount();
}

#[test]
fn growth_in_flight_is_reserved_and_deletes_free_only_once_applied() {
    let mut l = Leader::new(QuotaConfig {
        nodes_max: 3,
        data_bytes_max: 100,
        ..QuotaConfig::default()
    });
    // Three creates proposed, none applied: the fourth is refused.
    let ops: Vec<TxnOp> = (0..3)
        .map(|i| create(&format!("/teams/a/n{i}"), b""))
        .collect();
    let zxids: Vec<Zxid> = ops.iter().map(|op| l.propose(op).unwrap()).collect();
    assert_eq!(l.ledger.reserved(ROOT).nodes, 3);
    let e = refused(l.propose(&create("/teams/a/n3", b"")));
    assert!(e.to_string().contains("3 used of 3"), "{e}");
    // Applying them moves the count from the reservation to the tree.
    for (op, zxid) in ops.iter().zip(&zxids) {
        let txn = Txn {
            zxid: *zxid,
            time_ms: 1_000,
            session_id: 0,
            request_id: 0,
            fence: None,
            op: op.clone(),
        };
        assert!(l.tree.apply(&txn).result.is_ok());
        l.ledger.settle(*zxid);
    }
    assert_eq!(l.ledger.reserved(ROOT), Usage::default());
    assert_eq!(l.usage().nodes, 3);
    // A delete in flight frees nothing yet.
    let zxid = l.propose(&delete("/teams/a/n0")).unwrap();
    refused(l.propose(&create("/teams/a/n3", b"")));
    let txn = Txn {
        zxid,
        time_ms: 1_000,
        session_id: 0,
        request_id: 0,
        fence: None,
        op: delete("/teams/a/n0"),
    };
    assert!(l.tree.apply(&txn).result.is_ok());
    l.ledger.settle(zxid);
    l.propose(&create("/teams/a/n3", b"")).unwrap();
    // Bytes too: a set's growth is reserved against the applied size.
    l.counter = crate::txn::zxid_counter(l.tree.last_zxid()) + 10;
    l.propose(&set("/teams/a/n1", &[7; 60])).unwrap();
    let e = refused(l.propose(&set("/teams/a/n2", &[7; 41])));
    assert!(
        e.to_string().contains("data_bytes quota: 60 used of 100"),
        "{e}"
    );
    l.propose(&set("/teams/a/n2", &[7; 40])).unwrap();
    // Leadership changed hands: nothing is in flight any more.
    l.ledger.clear();
    assert_eq!(l.ledger.reserved(ROOT), Usage::default());
}

#[test]
fn a_retry_the_tree_remembers_is_not_checked() {
    let mut l = Leader::new(nodes_max(1));
    let zxid = l.counter + 1;
    l.apply(&TxnOp::OpenSession { ttl_ms: 10_000 }).unwrap();
    let session = crate::txn::make_zxid(1, zxid);
    let op = create("/teams/a/once", b"");
    l.ledger.check(&l.tree, session, 7, &op).unwrap();
    l.apply_as(session, 7, &op).unwrap();
    // At the limit: the retry (same request id) gets its outcome from the cache,
    // another request is refused.
    assert!(l.ledger.check(&l.tree, session, 7, &op).is_ok());
    refused(l.ledger.check(&l.tree, session, 8, &op));
}

#[test]
fn queue_nodes_count_when_they_live_in_the_namespace() {
    // The reserved lock folder is outside every team root today: joins there cost
    // the team nothing. A queue below a team root counts its member and the missing
    // folders above it (how much `join` reserves, against the applied tree).
    let l = Leader::new(nodes_max(10));
    let join = |queue: &str| {
        TxnOp::Queue(QueueOp::Join {
            queue: queue.into(),
            owner_id: "me".into(),
            value: Bytes::from_static(b"v"),
            permits: 1,
            only_if_free: false,
        })
    };
    let outside = l
        .ledger
        .check(&l.tree, 0, 0, &join("/concord/locks/x"))
        .unwrap();
    assert!(outside.taken.is_empty());
    let inside = l
        .ledger
        .check(&l.tree, 0, 0, &join("/teams/a/concord/locks/x"))
        .unwrap();
    let total = inside.taken.iter().map(|(_, u)| *u).next().unwrap();
    // The member, and /teams/a/concord, .../locks, .../locks/x (holding "1").
    assert_eq!(
        total,
        Usage {
            nodes: 4,
            data_bytes: "me\nv".len() as u64 + 1
        }
    );
}

#[test]
fn unlimited_teams_and_writes_outside_any_root_are_never_refused() {
    let mut l = Leader::new(QuotaConfig::default());
    for i in 0..20 {
        l.write(&create(&format!("/teams/a/n{i}"), &[1; 100]))
            .unwrap();
    }
    assert_eq!(l.usage().nodes, 20);
    let mut l = Leader::new(nodes_max(1));
    for i in 0..5 {
        l.write(&create(&format!("/other/n{i}"), b"")).unwrap();
    }
    assert_eq!(l.usage().nodes, 0);
}

#[test]
fn usage_lists_every_quota_with_what_is_used() {
    let quota = QuotaConfig {
        nodes_max: 10,
        data_bytes_max: 100,
        sessions_max: 3,
        watches_max: 4,
        requests_per_second: 5,
        requests_burst: 0,
    };
    let mut l = Leader::new(quota);
    l.write(&create("/teams/a/x", b"abc")).unwrap();
    let team = crate::security::Team {
        name: "a".into(),
        root: ROOT.into(),
        identities: vec![],
        quota,
    };
    let limits = std::sync::Arc::new(crate::security::TeamLimits::new("a", quota));
    let _watch = limits.open_watch().unwrap();
    let got: Vec<(&str, u64, u64)> = usage(&team, &l.tree, 2, Some(&limits))
        .into_iter()
        .map(|u| (u.resource, u.used, u.limit))
        .collect();
    assert_eq!(
        got,
        [
            (NODES, 1, 10),
            (DATA_BYTES, 3, 100),
            (SESSIONS, 2, 3),
            (WATCHES, 1, 4),
            (REQUESTS_PER_SECOND, 0, 5),
        ]
    );
}

#[test]
fn sessions_are_hit_exactly_at_their_limit_counting_opens_in_flight() {
    let config = crate::config::Config {
        admins: vec!["admin".into()],
        teams: vec![team(QuotaConfig {
            sessions_max: 2,
            ..QuotaConfig::default()
        })],
        ..crate::config::Config::default()
    };
    let policy = Policy::from_config(&config).unwrap();
    let mut ledger = Ledger::with_policy(&policy);
    // One open session found at start, one open proposed: the third is refused.
    ledger.recount_sessions(["a-1", "admin", "stranger"]);
    assert_eq!(ledger.sessions_of("a"), 1);
    let team = ledger.check_open("a-2").unwrap();
    assert_eq!(team.as_deref(), Some("a"));
    ledger.reserve(10, Reservation::open(team));
    let e = ledger.check_open("a-1").unwrap_err();
    assert_eq!(
        e.to_string(),
        "team \"a\" would exceed its sessions quota: 2 used of 2, the write adds 1"
    );
    // Applied: still two. A close frees a place once applied.
    ledger.settle(10);
    ledger.opened("a-2");
    assert!(ledger.check_open("a-3").is_err());
    ledger.closed("a-1");
    assert!(ledger.check_open("a-3").is_ok());
    // Admins and identities in no team are never limited.
    for _ in 0..5 {
        assert_eq!(ledger.check_open("admin").unwrap(), None);
        assert_eq!(ledger.check_open("stranger").unwrap(), None);
    }
    // Leadership changed hands: no open is in flight any more.
    let team = ledger.check_open("a-3").unwrap();
    ledger.reserve(11, Reservation::open(team));
    assert!(ledger.check_open("a-3").is_err());
    ledger.clear();
    assert!(ledger.check_open("a-3").is_ok());
}

#[test]
fn quotas_are_read_from_a_teams_quota_table_and_validated() {
    let parse = |text: &str| toml::from_str::<crate::config::Config>(text);
    let config = parse(
        "[[teams]]\nname = \"a\"\nroot = \"/teams/a\"\nidentities = [\"a-*\"]\n\
         [teams.quota]\nnodes_max = 10\ndata_bytes_max = 1000\nsessions_max = 3\n\
         watches_max = 4\nrequests_per_second = 5\nrequests_burst = 6\n\
         [[teams]]\nname = \"b\"\nroot = \"/teams/b\"\nidentities = [\"b\"]\n",
    )
    .unwrap();
    assert_eq!(
        config.teams[0].quota,
        QuotaConfig {
            nodes_max: 10,
            data_bytes_max: 1000,
            sessions_max: 3,
            watches_max: 4,
            requests_per_second: 5,
            requests_burst: 6,
        }
    );
    // Absent: unlimited.
    assert_eq!(config.teams[1].quota, QuotaConfig::default());
    config.validate().unwrap();
    // Unknown keys are refused; a burst needs a rate.
    let unknown = "[[teams]]\nname = \"a\"\nroot = \"/a\"\nidentities = [\"a\"]\n\
                   [teams.quota]\nnode_max = 1\n";
    assert!(parse(unknown).is_err());
    let burst = "[[teams]]\nname = \"a\"\nroot = \"/a\"\nidentities = [\"a\"]\n\
                 [teams.quota]\nrequests_burst = 10\n";
    let e = parse(burst).unwrap().validate().unwrap_err();
    assert!(e.to_string().contains("requests_burst needs"), "{e}");
}

#[test]
fn team_sessions_counts_the_sessions_owned_by_the_teams_identities() {
    let config = crate::config::Config {
        teams: vec![team(QuotaConfig::default())],
        ..crate::config::Config::default()
    };
    let policy = Policy::from_config(&config).unwrap();
    let mut l = Leader::new(QuotaConfig::default());
    for owner in ["a-1", "a-2", "admin", "b-1"] {
        let op = TxnOp::OpenOwnedSession {
            ttl_ms: 10_000,
            owner: owner.into(),
        };
        l.apply(&op).unwrap();
    }
    let team = policy.team("a").unwrap();
    assert_eq!(team_sessions(&policy, team, &l.tree), 2);
    // The ledger's own count, recounted from the same tree, agrees.
    let mut ledger = Ledger::with_policy(&policy);
    ledger.recount_sessions_of(&l.tree);
    assert_eq!(ledger.sessions_of("a"), 2);
}
