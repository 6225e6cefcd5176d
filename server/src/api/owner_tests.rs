//! Session ownership at the service level: two (or more) identities, each request
//! carrying its `Caller` as `Authenticated` would put it there. Every attack of
//! issue 11's first paragraph fails and changes nothing (a session the caller may
//! not use is answered as one that does not exist, so that another identity's
//! sessions cannot be counted), and the real owner's request then works as usual.

use std::time::Duration;

use concord_proto::v1 as pb;
use concord_proto::v1::election_server::Election;
use concord_proto::v1::lock_server::Lock;
use concord_proto::v1::session_server::Session;
use concord_proto::v1::tree_server::Tree;
use concord_proto::v1::ErrorCode;
use tonic::{Request, Status};

use super::convert::Limits;
use super::election::ElectionService;
use super::error::code_of;
use super::lock::LockService;
use super::owner::{check_session, no_session};
use super::session::{answer_ping, SessionService};
use super::tree::TreeService;
use crate::config::{Config, TeamConfig};
use crate::recipes::Recipes;
use crate::replica::Replica;
use crate::security::{Caller, Security};

const LIMITS: Limits = Limits {
    node_data_bytes_max: 1 << 20,
};

/// One server and every service, with two teams and an admin.
struct Env {
    _dir: tempfile::TempDir,
    replica: Replica,
    security: Security,
    sessions: SessionService,
    tree: TreeService,
    lock: LockService,
    election: ElectionService,
}

impl Env {
    async fn new() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let team = |name: &str, ids: &[&str]| TeamConfig {
            name: name.into(),
            root: format!("/teams/{name}"),
            identities: ids.iter().map(|s| (*s).into()).collect(),
            quota: Default::default(),
        };
        let config = Config {
            data_dir: dir.path().to_path_buf(),
            admins: vec!["admin".into()],
            teams: vec![team("payments", &["pay-*"]), team("search", &["search-*"])],
            ..Config::default()
        };
        let security = Security::new(&config).unwrap();
        let replica = Replica::start(&config).await.unwrap();
        // The teams' default grants on their roots (and the roots themselves).
        tokio::time::timeout(
            Duration::from_secs(10),
            super::access::seed(&replica, &security),
        )
        .await
        .unwrap();
        let recipes = Recipes::new(replica.clone());
        Env {
            _dir: dir,
            sessions: SessionService::new(
                replica.clone(),
                security.clone(),
                (1_000, 60_000),
                10_000,
            ),
            tree: TreeService::new(replica.clone(), LIMITS),
            lock: LockService::new(recipes.clone()),
            election: ElectionService::new(recipes, LIMITS),
            replica,
            security,
        }
    }

    fn caller(&self, identity: &str) -> Caller {
        self.security.policy().caller(identity.into())
    }

    async fn open(&self, who: &Caller) -> u64 {
        let r = pb::OpenSessionRequest { ttl_ms: 30_000 };
        self.sessions
            .open(as_(who, r))
            .await
            .unwrap()
            .into_inner()
            .session_id
    }

    fn owner(&self, session_id: u64) -> Option<String> {
        self.replica
            .read(|t| t.session(session_id).map(|s| s.owner.clone()))
    }

    /// Whether `path` (as a team member names it) exists in either team's namespace.
    fn exists(&self, path: &str) -> bool {
        self.replica.read(|t| {
            ["/teams/payments", "/teams/search"]
                .iter()
                .any(|root| t.get(&format!("{root}{path}")).is_some())
        })
    }

    async fn create(
        &self,
        who: &Caller,
        session_id: u64,
        request_id: u64,
        path: &str,
        data: &str,
        mode: pb::CreateMode,
    ) -> Result<String, Status> {
        let r = pb::CreateRequest {
            path: path.into(),
            data: data.to_string().into_bytes().into(),
            mode: mode as i32,
            session_id,
            request_id,
            ..Default::default()
        };
        Ok(self.tree.create(as_(who, r)).await?.into_inner().path)
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        self.replica.shutdown();
    }
}

/// A request from `who`.
fn as_<T>(who: &Caller, message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.extensions_mut().insert(who.clone());
    request
}

#[track_caller]
/// A key of another team's lock or election, named by a caller of a team of its own,
/// lands in the caller's own namespace, where it does not exist: NO_NODE, or FENCED
/// for a term that holds nothing there. Either way the other team's queue is safe.
fn out_of_reach<T: std::fmt::Debug>(result: Result<T, Status>) {
    match result {
        Err(status) => assert!(
            matches!(
                code_of(&status),
                Some(ErrorCode::NoNode | ErrorCode::Fenced)
            ),
            "{status:?}"
        ),
        Ok(v) => panic!("allowed: {v:?}"),
    }
}

fn denied<T: std::fmt::Debug>(result: Result<T, Status>) {
    match result {
        Err(status) => assert_eq!(
            code_of(&status),
            Some(ErrorCode::PermissionDenied),
            "{status:?}"
        ),
        Ok(v) => panic!("allowed: {v:?}"),
    }
}

/// The answer to a session that does not exist (or is not the caller's): the same
/// code and words whichever it is.
#[track_caller]
fn unknown<T: std::fmt::Debug>(result: Result<T, Status>, session_id: u64) {
    match result {
        Err(status) => {
            let expected = no_session(session_id);
            assert_eq!(
                (code_of(&status), status.code(), status.message()),
                (code_of(&expected), expected.code(), expected.message()),
                "{status:?}"
            );
        }
        Ok(v) => panic!("allowed: {v:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_belongs_to_the_identity_that_opened_it() {
    let env = Env::new().await;
    let alice = env.caller("pay-alice");
    let s = env.open(&alice).await;
    assert_eq!(env.owner(s).as_deref(), Some("pay-alice"));
    // Unmapped identities open nothing.
    let nobody = env.caller("nobody");
    let r = pb::OpenSessionRequest { ttl_ms: 0 };
    denied(env.sessions.open(as_(&nobody, r)).await);
    // An identity too long to record opens nothing.
    let long = env.caller(&format!("pay-{}", "x".repeat(1021)));
    let before = env.replica.read(|t| t.sessions().count());
    let status = env.sessions.open(as_(&long, r)).await.unwrap_err();
    assert_eq!(
        code_of(&status),
        Some(ErrorCode::BadArguments),
        "{status:?}"
    );
    assert_eq!(env.replica.read(|t| t.sessions().count()), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_cannot_close_a_session() {
    let env = Env::new().await;
    let (alice, bob, eve) = (
        env.caller("pay-alice"),
        env.caller("pay-bob"),
        env.caller("search-eve"),
    );
    let s = env.open(&alice).await;
    env.create(&alice, s, 0, "/e", "", pb::CreateMode::Ephemeral)
        .await
        .unwrap();
    // Another team, and even a teammate: sessions belong to identities.
    for stranger in [&eve, &bob] {
        let r = pb::CloseSessionRequest { session_id: s };
        unknown(env.sessions.close(as_(stranger, r)).await, s);
        assert!(env.owner(s).is_some() && env.exists("/e"));
    }
    let r = pb::CloseSessionRequest { session_id: s };
    env.sessions.close(as_(&alice, r)).await.unwrap();
    assert!(env.owner(s).is_none() && !env.exists("/e"));
    // An admin may close anyone's.
    let s = env.open(&eve).await;
    let r = pb::CloseSessionRequest { session_id: s };
    env.sessions
        .close(as_(&env.caller("admin"), r))
        .await
        .unwrap();
    assert!(env.owner(s).is_none());
}

/// Waits (bounded) until `session_id` has lost at least `ms` of its TTL.
async fn aged(env: &Env, session_id: u64, ttl_ms: u64, ms: u64) -> u64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let remaining = env.replica.session_remaining_ms(session_id).unwrap();
        if remaining + ms <= ttl_ms {
            return remaining;
        }
        assert!(tokio::time::Instant::now() < deadline, "time stands still");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_cannot_keep_a_session_alive() {
    let env = Env::new().await;
    let (alice, eve) = (env.caller("pay-alice"), env.caller("search-eve"));
    let s = env.open(&alice).await;
    let before = aged(&env, s, 30_000, 100).await;
    let ping = pb::KeepAliveRequest {
        session_id: s,
        min_zxid: s,
    };
    let reply = answer_ping(&env.replica, &eve, &ping).await.unwrap();
    assert!(reply.expired && reply.ttl_ms == 0, "{reply:?}");
    let after = env.replica.session_remaining_ms(s).unwrap();
    assert!(
        after <= before,
        "the stranger's ping renewed it: {before} -> {after}"
    );
    // The owner's ping renews it.
    let reply = answer_ping(&env.replica, &alice, &ping).await.unwrap();
    assert!(!reply.expired && reply.ttl_ms == 30_000);
    assert!(env.replica.session_remaining_ms(s).unwrap() > before);
    // So does an admin's.
    aged(&env, s, 30_000, 100).await;
    answer_ping(&env.replica, &env.caller("admin"), &ping)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_cannot_create_ephemerals_on_a_session_or_write_with_it() {
    let env = Env::new().await;
    let (alice, eve) = (env.caller("pay-alice"), env.caller("search-eve"));
    let s = env.open(&alice).await;
    unknown(
        env.create(&eve, s, 0, "/e", "", pb::CreateMode::Ephemeral)
            .await,
        s,
    );
    unknown(
        env.create(&eve, s, 0, "/p", "", pb::CreateMode::Persistent)
            .await,
        s,
    );
    let multi = pb::MultiRequest {
        ops: vec![pb::Op {
            op: Some(pb::op::Op::Create(pb::CreateOp {
                path: "/m".into(),
                mode: pb::CreateMode::Ephemeral as i32,
                ..Default::default()
            })),
        }],
        session_id: s,
        request_id: 0,
        ..Default::default()
    };
    unknown(env.tree.multi(as_(&eve, multi.clone())).await, s);
    assert!(!env.exists("/e") && !env.exists("/p") && !env.exists("/m"));
    let no_ephemerals = env
        .replica
        .read(|t| t.session(s).unwrap().ephemerals.is_empty());
    assert!(no_ephemerals);
    // The owner's writes go through.
    env.create(&alice, s, 0, "/e", "", pb::CreateMode::Ephemeral)
        .await
        .unwrap();
    env.tree.multi(as_(&alice, multi)).await.unwrap();
    assert!(env.exists("/e") && env.exists("/m"));
}

/// The retry-cache attack: a stranger's write under the owner's (session_id,
/// request_id) would have made the owner's real write return the stranger's outcome
/// and never apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_cannot_use_a_sessions_request_ids() {
    let env = Env::new().await;
    let (alice, eve) = (env.caller("pay-alice"), env.caller("search-eve"));
    let s = env.open(&alice).await;
    unknown(
        env.create(&eve, s, 5, "/theirs", "eve", pb::CreateMode::Persistent)
            .await,
        s,
    );
    let set = pb::SetRequest {
        path: "/".into(),
        version: -1,
        session_id: s,
        request_id: 5,
        ..Default::default()
    };
    unknown(env.tree.set(as_(&eve, set)).await, s);
    let delete = pb::DeleteRequest {
        path: "/x".into(),
        version: -1,
        session_id: s,
        request_id: 5,
        ..Default::default()
    };
    unknown(env.tree.delete(as_(&eve, delete)).await, s);
    assert!(!env.exists("/theirs"));
    let remembered = env.replica.read(|t| t.session(s).unwrap().recent.len());
    assert_eq!(remembered, 0);
    // Alice's real write under request id 5 applies, with her data.
    let path = env
        .create(&alice, s, 5, "/mine", "alice", pb::CreateMode::Persistent)
        .await
        .unwrap();
    assert_eq!(path, "/mine");
    let data = env
        .replica
        .read(|t| t.get("/teams/payments/mine").unwrap().data);
    assert_eq!(&data[..], b"alice");
    // Her retry gets the same answer; a different request under the same id is
    // refused, never given the first outcome.
    let again = env
        .create(&alice, s, 5, "/mine", "alice", pb::CreateMode::Persistent)
        .await;
    assert_eq!(again.unwrap(), "/mine");
    let other = env
        .create(&alice, s, 5, "/other", "alice", pb::CreateMode::Persistent)
        .await;
    let status = other.unwrap_err();
    assert_eq!(
        code_of(&status),
        Some(ErrorCode::BadArguments),
        "{status:?}"
    );
    assert!(
        status.message().contains("used by a different request"),
        "{status:?}"
    );
    assert!(!env.exists("/other"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_get_show_only_the_callers_team() {
    let env = Env::new().await;
    let (alice, bob, eve, admin) = (
        env.caller("pay-alice"),
        env.caller("pay-bob"),
        env.caller("search-eve"),
        env.caller("admin"),
    );
    let sa = env.open(&alice).await;
    let sb = env.open(&bob).await;
    let se = env.open(&eve).await;
    let sadmin = env.open(&admin).await;
    let list = |who: Caller, page_size: u32, page_token: String| {
        let r = pb::ListSessionsRequest {
            page_size,
            page_token,
            ..Default::default()
        };
        let sessions = &env.sessions;
        async move { sessions.list(as_(&who, r)).await }
    };
    // Every page, followed to the end.
    let all = |who: Caller, page_size: u32| async move {
        let (mut ids, mut owners, mut token) = (Vec::new(), Vec::new(), String::new());
        for _ in 0..20 {
            let page = list(who.clone(), page_size, token)
                .await
                .unwrap()
                .into_inner();
            for s in page.sessions {
                ids.push(s.session_id);
                owners.push(s.owner);
            }
            token = page.next_page_token;
            if token.is_empty() {
                return (ids, owners);
            }
        }
        panic!("the listing never ended");
    };
    for page_size in [0, 1] {
        let (ids, owners) = all(alice.clone(), page_size).await;
        assert_eq!(ids, [sa, sb]);
        // The owner is shown for one's own session only.
        assert_eq!(owners, ["pay-alice", ""]);
        assert_eq!(all(eve.clone(), page_size).await.0, [se]);
        let (ids, owners) = all(admin.clone(), page_size).await;
        assert_eq!(ids, [sa, sb, se, sadmin]);
        assert_eq!(owners, ["pay-alice", "pay-bob", "search-eve", "admin"]);
    }
    denied(list(env.caller("nobody"), 0, String::new()).await);
    let get = |who: &Caller, session_id: u64| {
        let r = pb::GetSessionRequest {
            session_id,
            min_zxid: 0,
        };
        env.sessions.get(as_(who, r))
    };
    unknown(get(&eve, sa).await, sa);
    denied(get(&env.caller("nobody"), se).await);
    let info = get(&bob, sa).await.unwrap().into_inner().session.unwrap();
    assert_eq!((info.session_id, info.owner.as_str()), (sa, ""));
    let info = get(&admin, sa).await.unwrap().into_inner().session.unwrap();
    assert_eq!(info.owner, "pay-alice");
}

/// A List page looks at a bounded number of sessions: a caller that sees few of
/// many gets short pages with a token, and still every one of its sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_of_few_among_many_is_paged_by_the_scan_bound() {
    let env = Env::new().await;
    let (alice, eve) = (env.caller("pay-alice"), env.caller("search-eve"));
    let mine = env.open(&alice).await;
    for _ in 0..40 {
        env.open(&eve).await;
    }
    let last = env.open(&alice).await;
    let (mut seen, mut token, mut pages) = (Vec::new(), String::new(), 0);
    loop {
        let r = pb::ListSessionsRequest {
            page_size: 1,
            page_token: token,
            ..Default::default()
        };
        let page = env
            .sessions
            .list(as_(&alice, r))
            .await
            .unwrap()
            .into_inner();
        pages += 1;
        assert!(pages < 50, "too many pages");
        seen.extend(page.sessions.iter().map(|s| s.session_id));
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(seen, [mine, last]);
    assert!(pages > 2, "the scan was not bounded: {pages} pages");
}

async fn acquire(env: &Env, who: &Caller, session_id: u64) -> Result<pb::AcquireResponse, Status> {
    let r = pb::AcquireRequest {
        name: "l".into(),
        session_id,
        owner_id: "w".into(),
        ..Default::default()
    };
    Ok(env.lock.acquire(as_(who, r)).await?.into_inner())
}

async fn holders(env: &Env) -> Vec<(String, u64)> {
    let r = pb::HolderRequest { name: "l".into() };
    let holders = env
        .lock
        .holder(as_(&env.caller("pay-alice"), r))
        .await
        .unwrap()
        .into_inner()
        .holders;
    holders.into_iter().map(|h| (h.key, h.token)).collect()
}

fn release(key: &str, token: u64) -> pb::ReleaseRequest {
    pb::ReleaseRequest {
        key: key.into(),
        token,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_cannot_release_a_lock() {
    let env = Env::new().await;
    let (alice, bob, eve) = (
        env.caller("pay-alice"),
        env.caller("pay-bob"),
        env.caller("search-eve"),
    );
    let s = env.open(&alice).await;
    let held = acquire(&env, &alice, s).await.unwrap();
    // Acquiring with someone else's session is creating an ephemeral on it.
    unknown(acquire(&env, &eve, s).await, s);
    // Token 0 (force) and the token Holder returns: both refused.
    let (key, token) = holders(&env).await.pop().unwrap();
    assert_eq!((key.as_str(), token), (held.key.as_str(), held.token));
    // Bob, a teammate, names Alice's lock: refused. Eve, of another team, cannot
    // even name it (her key lands in her own namespace).
    denied(env.lock.release(as_(&bob, release(&key, 0))).await);
    denied(env.lock.release(as_(&bob, release(&key, token))).await);
    assert_eq!(holders(&env).await, [(key.clone(), token)]);
    denied(env.lock.release(as_(&eve, release(&key, 0))).await);
    out_of_reach(env.lock.release(as_(&eve, release(&key, token))).await);
    assert_eq!(holders(&env).await, [(key.clone(), token)]);
    // Token 0 is for admins only, even for the holder.
    denied(env.lock.release(as_(&alice, release(&key, 0))).await);
    env.lock
        .release(as_(&alice, release(&key, token)))
        .await
        .unwrap();
    assert!(holders(&env).await.is_empty());
    // An admin may force a release (naming the queue by its full name).
    let held = acquire(&env, &alice, s).await.unwrap();
    let admin = env.caller("admin");
    let full_key = held
        .key
        .replace("/concord/locks/l/", "/concord/locks/payments:l/");
    env.lock
        .release(as_(&admin, release(&full_key, 0)))
        .await
        .unwrap();
    assert!(holders(&env).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_cannot_resign_or_proclaim_for_a_leader() {
    let env = Env::new().await;
    let (alice, eve) = (env.caller("pay-alice"), env.caller("search-eve"));
    let s = env.open(&alice).await;
    let campaign = |who: &Caller, session_id: u64| {
        let r = pb::CampaignRequest {
            election: "e".into(),
            session_id,
            participant_id: "p".into(),
            value: b"v1".to_vec().into(),
            timeout_ms: 0,
        };
        env.election.campaign(as_(who, r))
    };
    unknown(campaign(&eve, s).await, s);
    let leader = campaign(&alice, s)
        .await
        .unwrap()
        .into_inner()
        .leader
        .unwrap();
    let current = || async {
        let r = pb::LeaderRequest {
            election: "e".into(),
        };
        let as_alice = as_(&env.caller("pay-alice"), r);
        let leader = env.election.leader(as_alice).await.unwrap();
        leader.into_inner().leader.map(|l| (l.key, l.term, l.value))
    };
    let expect = Some((leader.key.clone(), leader.term, b"v1".to_vec().into()));
    assert_eq!(current().await, expect);
    // With the key and term Leader returns.
    let proclaim = |value: &'static [u8]| pb::ProclaimRequest {
        key: leader.key.clone(),
        term: leader.term,
        value: value.to_vec().into(),
    };
    let resign = pb::ResignRequest {
        key: leader.key.clone(),
        term: leader.term,
    };
    // A teammate is refused; another team cannot even name the key.
    let bob = env.caller("pay-bob");
    denied(env.election.proclaim(as_(&bob, proclaim(b"bob"))).await);
    denied(env.election.resign(as_(&bob, resign.clone())).await);
    out_of_reach(env.election.proclaim(as_(&eve, proclaim(b"eve"))).await);
    out_of_reach(env.election.resign(as_(&eve, resign.clone())).await);
    assert_eq!(current().await, expect);
    env.election
        .proclaim(as_(&alice, proclaim(b"v2")))
        .await
        .unwrap();
    let expect = Some((leader.key.clone(), leader.term, b"v2".to_vec().into()));
    assert_eq!(current().await, expect);
    env.election.resign(as_(&alice, resign)).await.unwrap();
    assert_eq!(current().await, None);
}

/// A server that has not applied a session's Open yet (a follower behind) must not
/// let a stranger through because it does not know the session, nor keep it waiting
/// for an id that was never issued: once the leader's commit point (here, this
/// server's own) is applied, an id above it does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_answers_an_id_never_issued_at_once() {
    let env = Env::new().await;
    let (alice, eve) = (env.caller("pay-alice"), env.caller("search-eve"));
    let s = env.open(&alice).await;
    let next = env.replica.applied_zxid() + 1;
    assert!(next > s);
    let quick = Duration::from_secs(5);
    for who in [&alice, &eve] {
        let checked = tokio::time::timeout(quick, check_session(&env.replica, who, next)).await;
        unknown(
            checked.expect("the check waited for an id never issued"),
            next,
        );
    }
    check_session(&env.replica, &alice, s).await.unwrap();
    unknown(check_session(&env.replica, &eve, s).await, s);
}

/// Every call that names a session answers a stranger (another team's, or a
/// teammate) the same for a live session of another identity, a closed one and
/// an id never issued, and at once: no answer tells which ids are live sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_identitys_session_is_answered_as_one_that_does_not_exist() {
    let env = Env::new().await;
    let alice = env.caller("pay-alice");
    let live = env.open(&alice).await;
    let closed = env.open(&alice).await;
    let r = pb::CloseSessionRequest { session_id: closed };
    env.sessions.close(as_(&alice, r)).await.unwrap();
    let never = env.replica.applied_zxid() + 1_000;
    for stranger in [env.caller("search-eve"), env.caller("pay-bob")] {
        for id in [live, closed, never] {
            let answers = tokio::time::timeout(Duration::from_secs(5), async {
                every_session_call(&env, &stranger, id).await
            })
            .await
            .unwrap_or_else(|_| panic!("a call about session {id} kept the caller waiting"));
            for (call, answer) in answers {
                match answer {
                    Answer::Status(result) => {
                        if stranger.identity.as_ref() == "pay-bob" && call == "Session/Get" {
                            // A teammate sees the live session (and not the others).
                            assert_eq!(result.is_ok(), id == live, "{call} {id}: {result:?}");
                        } else {
                            unknown(result, id);
                        }
                    }
                    Answer::Expired(expired) => assert!(expired, "{call} {id}"),
                }
            }
        }
    }
    // Nothing was done to the live session, and the owner still uses it.
    assert_eq!(env.owner(live).as_deref(), Some("pay-alice"));
    assert!(!env.exists("/by-stranger"));
    env.create(&alice, live, 0, "/e", "", pb::CreateMode::Ephemeral)
        .await
        .unwrap();
}

enum Answer {
    Status(Result<(), Status>),
    /// A keep-alive's `expired`.
    Expired(bool),
}

fn done<T>(result: Result<T, Status>) -> Answer {
    Answer::Status(result.map(|_| ()))
}

/// Every client call that takes a session id, made by `who` with `session_id`.
async fn every_session_call(
    env: &Env,
    who: &Caller,
    session_id: u64,
) -> Vec<(&'static str, Answer)> {
    let mut answers = Vec::new();
    let r = pb::GetSessionRequest {
        session_id,
        min_zxid: 0,
    };
    answers.push(("Session/Get", done(env.sessions.get(as_(who, r)).await)));
    let r = pb::CloseSessionRequest { session_id };
    answers.push(("Session/Close", done(env.sessions.close(as_(who, r)).await)));
    let ping = pb::KeepAliveRequest {
        session_id,
        min_zxid: 0,
    };
    let expired = answer_ping(&env.replica, who, &ping).await.unwrap().expired;
    answers.push(("Session/KeepAlive", Answer::Expired(expired)));
    for mode in [pb::CreateMode::Ephemeral, pb::CreateMode::Persistent] {
        let created = env
            .create(who, session_id, 7, "/by-stranger", "", mode)
            .await;
        answers.push(("Tree/Create", done(created)));
    }
    let set = pb::SetRequest {
        path: "/".into(),
        version: -1,
        session_id,
        request_id: 8,
        ..Default::default()
    };
    answers.push(("Tree/Set", done(env.tree.set(as_(who, set)).await)));
    answers.push(("Lock/Acquire", done(acquire(env, who, session_id).await)));
    let r = pb::CampaignRequest {
        election: "e".into(),
        session_id,
        participant_id: "p".into(),
        value: b"v".to_vec().into(),
        timeout_ms: 0,
    };
    answers.push((
        "Election/Campaign",
        done(env.election.campaign(as_(who, r)).await),
    ));
    answers
}
