//! Namespaces and ACLs at the service level: a real single-server replica, the
//! services called directly with a `Caller` in each request's extensions (as the
//! `Authenticated` layer puts it there).
//!
//! Teams: `pay` (root /teams/pay, identities pay-*) and `search` (root
//! /teams/search, identities search-*); `admin` is the admin; `stranger` is unmapped.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use concord_proto::v1 as pb;
use concord_proto::v1::access_server::Access as _;
use concord_proto::v1::cluster_server::Cluster as _;
use concord_proto::v1::election_server::Election as _;
use concord_proto::v1::lock_server::Lock as _;
use concord_proto::v1::session_server::Session as _;
use concord_proto::v1::tree_server::Tree as _;
use concord_proto::v1::watch_server::Watch as _;
use tokio_stream::StreamExt;
use tonic::{Request, Status};

use super::access::AccessService;
use super::cluster::ClusterService;
use super::election::ElectionService;
use super::lock::LockService;
use super::session::SessionService;
use super::tree::TreeService;
use super::watch::WatchService;
use super::Limits;
use crate::config::{Config, TeamConfig};
use crate::recipes::Recipes;
use crate::replica::Replica;
use crate::security::{Caller, Security};

const LIMITS: Limits = Limits {
    node_data_bytes_max: 1 << 20,
};
const WAIT: Duration = Duration::from_secs(10);

struct Services {
    replica: Replica,
    security: Security,
    tree: TreeService,
    watch: WatchService,
    lock: LockService,
    election: ElectionService,
    session: SessionService,
    access: AccessService,
    cluster: ClusterService,
    _dir: tempfile::TempDir,
}

fn team(name: &str) -> TeamConfig {
    TeamConfig {
        name: name.into(),
        root: format!("/teams/{name}"),
        identities: vec![format!("{name}-*")],
        quota: Default::default(),
    }
}

/// A started single server with teams pay and search, seeded.
async fn start() -> Services {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        data_dir: dir.path().to_path_buf(),
        teams: vec![team("pay"), team("search")],
        ..Config::default()
    };
    let security = Security::new(&config).unwrap();
    let replica = Replica::start(&config).await.unwrap();
    tokio::time::timeout(WAIT, super::access::seed(&replica, &security))
        .await
        .unwrap();
    let recipes = Recipes::new(replica.clone());
    Services {
        tree: TreeService::new(replica.clone(), LIMITS),
        watch: WatchService::new(replica.clone()),
        lock: LockService::new(recipes.clone()),
        election: ElectionService::new(recipes.clone(), LIMITS),
        session: SessionService::new(replica.clone(), security.clone(), (1_000, 60_000), 10_000),
        access: AccessService::new(replica.clone()),
        cluster: ClusterService::new(
            replica.clone(),
            recipes,
            security.clone(),
            config.ensemble(),
        ),
        replica,
        security,
        _dir: dir,
    }
}

impl Services {
    fn caller(&self, identity: &str) -> Caller {
        self.security.policy().caller(Arc::from(identity))
    }

    async fn create(&self, who: &Caller, path: &str) -> Result<String, Status> {
        let r = pb::CreateRequest {
            path: path.into(),
            data: Bytes::from_static(b"d"),
            ..Default::default()
        };
        Ok(self.tree.create(req(who, r)).await?.into_inner().path)
    }

    async fn get(&self, who: &Caller, path: &str) -> Result<pb::GetResponse, Status> {
        let r = pb::GetRequest {
            path: path.into(),
            ..Default::default()
        };
        Ok(self.tree.get(req(who, r)).await?.into_inner())
    }

    async fn children(&self, who: &Caller, path: &str) -> Result<Vec<String>, Status> {
        let r = pb::ChildrenRequest {
            path: path.into(),
            ..Default::default()
        };
        let children = self.tree.children(req(who, r)).await?.into_inner().children;
        Ok(children.into_iter().map(|c| c.name).collect())
    }

    async fn grant(&self, who: &Caller, path: &str, to: To<'_>, perms: &str) -> Result<(), Status> {
        let r = pb::GrantRequest {
            grant: Some(grant(path, to, perms)),
        };
        self.access.grant(req(who, r)).await.map(|_| ())
    }

    async fn revoke(
        &self,
        who: &Caller,
        path: &str,
        to: To<'_>,
        perms: &str,
    ) -> Result<(), Status> {
        let r = pb::RevokeRequest {
            grant: Some(grant(path, to, perms)),
        };
        self.access.revoke(req(who, r)).await.map(|_| ())
    }

    async fn open(&self, who: &Caller) -> u64 {
        let r = self
            .session
            .open(req(who, pb::OpenSessionRequest { ttl_ms: 30_000 }))
            .await
            .unwrap();
        r.into_inner().session_id
    }

    /// Every tree path below /teams, as an admin sees it.
    fn tree_paths(&self) -> Vec<String> {
        let mut paths: Vec<String> = self.replica.read(|t| {
            t.walk("/", true)
                .into_iter()
                .map(|(p, _)| p)
                .filter(|p| !p.starts_with("/concord"))
                .collect()
        });
        paths.sort();
        paths
    }
}

#[derive(Clone, Copy)]
enum To<'a> {
    Team(&'a str),
    Identity(&'a str),
}

fn grant(path: &str, to: To, perms: &str) -> pb::Grant {
    pb::Grant {
        path: path.into(),
        to: Some(match to {
            To::Team(t) => pb::grant::To::Team(t.into()),
            To::Identity(i) => pb::grant::To::Identity(i.into()),
        }),
        perms: perms.into(),
    }
}

fn req<T>(who: &Caller, message: T) -> Request<T> {
    let mut r = Request::new(message);
    r.extensions_mut().insert(who.clone());
    r
}

fn code(s: &Status) -> String {
    super::error::code_of(s)
        .map(|c| c.as_str_name().to_string())
        .unwrap_or_default()
}

fn denied<T>(r: Result<T, Status>) -> String {
    let Err(s) = r else {
        panic!("expected PERMISSION_DENIED, got a success")
    };
    assert_eq!(code(&s), "PERMISSION_DENIED", "{}", s.message());
    s.message().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_sees_its_root_as_slash_and_every_path_is_mapped() {
    let s = start().await;
    let pay = s.caller("pay-1");
    let admin = s.caller("admin");
    // The seed created the roots: `/` of a team works at once.
    assert!(s.get(&pay, "/").await.is_ok());
    assert_eq!(s.children(&pay, "/").await.unwrap(), Vec::<String>::new());
    assert_eq!(s.create(&pay, "/a").await.unwrap(), "/a");
    assert!(s.get(&admin, "/teams/pay/a").await.is_ok());
    // A sequential name lands inside the root, and comes back relative.
    let seq = pb::CreateRequest {
        path: "/".into(),
        mode: pb::CreateMode::PersistentSequential.into(),
        ..Default::default()
    };
    let name = s
        .tree
        .create(req(&pay, seq))
        .await
        .unwrap()
        .into_inner()
        .path;
    assert!(name.starts_with("/0000"), "{name}");
    assert!(s.get(&admin, &format!("/teams/pay{name}")).await.is_ok());
    // Errors name the caller's paths.
    let e = s.create(&pay, "/a").await.unwrap_err();
    assert_eq!(e.message(), "NODE_EXISTS: /a already exists");
    let e = s.create(&pay, "/missing/b").await.unwrap_err();
    assert_eq!(e.message(), "NO_NODE: /missing does not exist");
    // A Multi maps every op and every result.
    let op = |o| pb::Op { op: Some(o) };
    let multi = pb::MultiRequest {
        ops: vec![
            op(pb::op::Op::Check(pb::CheckOp {
                path: "/a".into(),
                version: -1,
            })),
            op(pb::op::Op::Create(pb::CreateOp {
                path: "/a/m".into(),
                ..Default::default()
            })),
        ],
        ..Default::default()
    };
    let results = s.tree.multi(req(&pay, multi)).await.unwrap().into_inner();
    let Some(pb::op_result::Result::Create(c)) = &results.results[1].result else {
        panic!("{results:?}");
    };
    assert_eq!(c.path, "/a/m");
    let bad = pb::MultiRequest {
        ops: vec![op(pb::op::Op::Delete(pb::DeleteOp {
            path: "/nope".into(),
            version: -1,
        }))],
        ..Default::default()
    };
    let e = s.tree.multi(req(&pay, bad)).await.unwrap_err();
    assert_eq!(e.message(), "NO_NODE: op 0: /nope does not exist");
    // The reserved folder is unreachable: /concord is a plain path in the namespace.
    assert!(s.create(&pay, "/concord").await.is_ok());
    assert!(s.get(&admin, "/teams/pay/concord").await.is_ok());
    // WhoAmI: identity, team, root, and the seeded grant seen as "/".
    let me = s
        .cluster
        .who_am_i(req(&pay, pb::WhoAmIRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (me.identity.as_str(), me.admin, me.team.as_str()),
        ("pay-1", false, "pay")
    );
    assert_eq!(me.namespace_root, "/teams/pay");
    assert_eq!(me.grants, vec![grant("/", To::Team("pay"), "rwcda")]);
    let me = s
        .cluster
        .who_am_i(req(&admin, pb::WhoAmIRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert!(me.admin && me.namespace_root == "/" && me.team.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmapped_identity_may_only_ask_who_it_is() {
    let s = start().await;
    let stranger = s.caller("stranger");
    let before = s.tree_paths();
    denied(s.get(&stranger, "/").await);
    denied(s.create(&stranger, "/x").await);
    denied(s.children(&stranger, "/").await);
    let exists = pb::ExistsRequest {
        path: "/".into(),
        ..Default::default()
    };
    denied(s.tree.exists(req(&stranger, exists)).await);
    denied(
        s.tree
            .sync(req(&stranger, pb::SyncRequest::default()))
            .await,
    );
    let open = pb::OpenSessionRequest { ttl_ms: 5_000 };
    denied(s.session.open(req(&stranger, open)).await);
    denied(s.session.list(req(&stranger, Default::default())).await);
    let watch = pb::WatchRequest {
        path: "/".into(),
        ..Default::default()
    };
    denied(s.watch.watch(req(&stranger, watch)).await);
    let holder = pb::HolderRequest { name: "x".into() };
    denied(s.lock.holder(req(&stranger, holder)).await);
    let leader = pb::LeaderRequest {
        election: "e".into(),
    };
    denied(s.election.leader(req(&stranger, leader)).await);
    denied(s.grant(&stranger, "/", To::Identity("stranger"), "r").await);
    let close = pb::CloseSessionRequest { session_id: 1 };
    denied(s.session.close(req(&stranger, close)).await);
    let me = s
        .cluster
        .who_am_i(req(&stranger, pb::WhoAmIRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(me.identity, "stranger");
    assert!(!me.admin && me.team.is_empty() && me.namespace_root.is_empty());
    assert!(s
        .cluster
        .status(req(&stranger, Default::default()))
        .await
        .is_ok());
    assert_eq!(s.tree_paths(), before, "nothing changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_are_checked_on_every_tree_op_inherited_and_revocable_at_once() {
    let s = start().await;
    let admin = s.caller("admin");
    let (pay1, pay2) = (s.caller("pay-1"), s.caller("pay-2"));
    assert!(s.create(&pay1, "/a").await.is_ok());
    // Take the team's default grant away: a revocation acts on the next request.
    s.revoke(&admin, "/teams/pay", To::Team("pay"), "rwcda")
        .await
        .unwrap();
    let m = denied(s.get(&pay1, "/a").await);
    assert_eq!(
        m,
        "PERMISSION_DENIED: \"pay-1\" has no read permission on /a"
    );
    // Read for pay-1 on the root, create and write on /a only: inherited below.
    s.grant(&admin, "/teams/pay", To::Identity("pay-1"), "r")
        .await
        .unwrap();
    s.grant(&admin, "/teams/pay/a", To::Identity("pay-1"), "cw")
        .await
        .unwrap();
    assert!(s.get(&pay1, "/a").await.is_ok());
    denied(s.get(&pay2, "/a").await);
    let m = denied(s.create(&pay1, "/b").await);
    assert!(m.ends_with("no create permission on /"), "{m}");
    assert!(s.create(&pay1, "/a/b").await.is_ok());
    assert!(s.create(&pay1, "/a/b/c").await.is_ok(), "inherited from /a");
    let set = |path: &str| pb::SetRequest {
        path: path.into(),
        version: -1,
        ..Default::default()
    };
    assert!(s.tree.set(req(&pay1, set("/a/b/c"))).await.is_ok());
    let m = denied(s.tree.set(req(&pay1, set("/"))).await);
    assert!(m.ends_with("no write permission on /"), "{m}");
    let delete = pb::DeleteRequest {
        path: "/a/b/c".into(),
        version: -1,
        ..Default::default()
    };
    let m = denied(s.tree.delete(req(&pay1, delete)).await);
    assert!(m.ends_with("no delete permission on /a/b"), "{m}");
    let exists = pb::ExistsRequest {
        path: "/a/zzz".into(),
        ..Default::default()
    };
    denied(s.tree.exists(req(&pay2, exists)).await);
    // A Multi fails at its first denied op, and applies nothing.
    let op = |o| pb::Op { op: Some(o) };
    let multi = pb::MultiRequest {
        ops: vec![
            op(pb::op::Op::Create(pb::CreateOp {
                path: "/a/ok".into(),
                ..Default::default()
            })),
            op(pb::op::Op::Create(pb::CreateOp {
                path: "/top".into(),
                ..Default::default()
            })),
        ],
        ..Default::default()
    };
    let before = s.tree_paths();
    let m = denied(s.tree.multi(req(&pay1, multi)).await);
    assert_eq!(
        m,
        "PERMISSION_DENIED: op 1: \"pay-1\" has no create permission on /"
    );
    assert_eq!(s.tree_paths(), before);
    // Locks need `w` on the namespace root, observing them `r`.
    let session = s.open(&pay1).await;
    let acquire = pb::AcquireRequest {
        name: "l".into(),
        session_id: session,
        ..Default::default()
    };
    denied(s.lock.try_acquire(req(&pay1, acquire)).await);
    let holder = pb::HolderRequest { name: "l".into() };
    assert!(s.lock.holder(req(&pay1, holder.clone())).await.is_ok());
    denied(s.lock.holder(req(&pay2, holder)).await);
    // A team member with `a` on a subtree manages grants inside it, not above.
    denied(s.grant(&pay1, "/a", To::Identity("pay-2"), "r").await);
    s.grant(&admin, "/teams/pay/a", To::Identity("pay-1"), "a")
        .await
        .unwrap();
    s.grant(&pay1, "/a/b", To::Identity("pay-2"), "r")
        .await
        .unwrap();
    assert!(s.get(&pay2, "/a/b/c").await.is_ok());
    denied(s.grant(&pay1, "/", To::Identity("pay-2"), "r").await);
    let list = pb::ListGrantsRequest {
        path: "/a".into(),
        recursive: true,
    };
    let grants = s.access.list_grants(req(&pay1, list)).await.unwrap();
    assert_eq!(
        grants.into_inner().grants,
        vec![
            grant("/a", To::Identity("pay-1"), "wca"),
            grant("/a/b", To::Identity("pay-2"), "r"),
        ]
    );
    let bad = s.grant(&admin, "/x", To::Identity("pay-1"), "rz").await;
    assert_eq!(code(&bad.unwrap_err()), "BAD_ARGUMENTS");
}

/// The next event of a watch stream, skipping other messages.
async fn next_event<S>(stream: &mut S) -> pb::WatchEvent
where
    S: tokio_stream::Stream<Item = Result<pb::WatchResponse, Status>> + Unpin,
{
    loop {
        let msg = tokio::time::timeout(WAIT, stream.next()).await;
        let msg = msg
            .expect("no event in time")
            .expect("stream ended")
            .unwrap();
        if let Some(pb::watch_response::Msg::Event(e)) = msg.msg {
            return e;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_deliver_only_what_the_caller_may_read_now() {
    let s = start().await;
    let admin = s.caller("admin");
    let pay1 = s.caller("pay-1");
    s.create(&admin, "/teams/pay/vis").await.unwrap();
    s.grant(&admin, "/teams/pay/vis", To::Identity("pay-1"), "r")
        .await
        .unwrap();
    let watch = pb::WatchRequest {
        path: "/".into(),
        recursive: true,
        kinds: vec![pb::EventKind::Created.into()],
        initial_snapshot: true,
        ..Default::default()
    };
    let mut stream = s.watch.watch(req(&pay1, watch)).await.unwrap().into_inner();
    // Events in other namespaces never reach it; its own come relative.
    s.create(&admin, "/teams/search/x").await.unwrap();
    s.create(&admin, "/teams/pay/a").await.unwrap();
    assert_eq!(next_event(&mut stream).await.path, "/a");
    // A one-shot watch, not to be used up by an event it may not see (below).
    let once = pb::WatchRequest {
        path: "/".into(),
        recursive: true,
        once: true,
        ..Default::default()
    };
    let mut once = s.watch.watch(req(&pay1, once)).await.unwrap().into_inner();
    // Revoked while open: the very next event is hidden.
    s.revoke(&admin, "/teams/pay", To::Team("pay"), "rwcda")
        .await
        .unwrap();
    s.create(&admin, "/teams/pay/hidden").await.unwrap();
    s.create(&admin, "/teams/pay/vis/child").await.unwrap();
    assert_eq!(next_event(&mut stream).await.path, "/vis/child");
    // Its first event was /hidden, which it may not see: it fires on /vis/child.
    assert_eq!(next_event(&mut once).await.path, "/vis/child");
    let end = tokio::time::timeout(WAIT, async {
        while let Some(msg) = once.next().await {
            if let Some(pb::watch_response::Msg::Event(e)) = msg.unwrap().msg {
                panic!("a one-shot watch sent a second event: {e:?}");
            }
        }
    });
    end.await.unwrap();
    // Registering needs `r` on the watched path.
    let watch = pb::WatchRequest {
        path: "/a".into(),
        ..Default::default()
    };
    let m = denied(s.watch.watch(req(&pay1, watch)).await);
    assert!(m.ends_with("no read permission on /a"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_cannot_reach_another_teams_tree_locks_elections_or_ephemerals() {
    let s = start().await;
    let (pay, search) = (s.caller("pay-1"), s.caller("search-1"));
    // search's state: a node, an ephemeral, a held lock, a leader.
    s.create(&search, "/x").await.unwrap();
    let search_session = s.open(&search).await;
    let eph = pb::CreateRequest {
        path: "/eph".into(),
        mode: pb::CreateMode::Ephemeral.into(),
        session_id: search_session,
        ..Default::default()
    };
    s.tree.create(req(&search, eph)).await.unwrap();
    let acquire = |session_id| pb::AcquireRequest {
        name: "l".into(),
        session_id,
        ..Default::default()
    };
    let held = s
        .lock
        .try_acquire(req(&search, acquire(search_session)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(held.key, "/concord/locks/l/0000000000");
    let campaign = |session_id| pb::CampaignRequest {
        election: "e".into(),
        session_id,
        participant_id: "p".into(),
        ..Default::default()
    };
    let leader = s
        .election
        .campaign(req(&search, campaign(search_session)))
        .await
        .unwrap()
        .into_inner()
        .leader
        .unwrap();
    assert_eq!(leader.key, "/concord/elections/e/0000000000");
    let before = s.tree_paths();
    let queues_before = s.replica.read(|t| t.walk("/concord", true).len());

    // pay tries: every path it names is inside its own root.
    for path in ["/x", "/teams/search/x", "/concord/locks"] {
        let e = s.get(&pay, path).await.unwrap_err();
        assert_eq!(code(&e), "NO_NODE", "{path}");
    }
    assert!(!s.children(&pay, "/").await.unwrap().contains(&"x".into()));
    let set = pb::SetRequest {
        path: "/x".into(),
        version: -1,
        ..Default::default()
    };
    assert_eq!(
        code(&s.tree.set(req(&pay, set)).await.unwrap_err()),
        "NO_NODE"
    );
    let delete = pb::DeleteRequest {
        path: "/teams/search/x".into(),
        version: -1,
        ..Default::default()
    };
    assert!(s.tree.delete(req(&pay, delete)).await.is_err());
    // Its locks and elections of the same names are other queues.
    let holders = s
        .lock
        .holder(req(&pay, pb::HolderRequest { name: "l".into() }))
        .await
        .unwrap()
        .into_inner();
    assert!(holders.holders.is_empty());
    let release = pb::ReleaseRequest {
        key: held.key.clone(),
        token: held.token,
    };
    assert!(s.lock.release(req(&pay, release)).await.is_err());
    let release0 = pb::ReleaseRequest {
        key: held.key.clone(),
        token: 0,
    };
    assert!(s.lock.release(req(&pay, release0)).await.is_err());
    let validate = pb::ValidateRequest {
        key: held.key.clone(),
        token: held.token,
    };
    let valid = s.lock.validate(req(&pay, validate.clone())).await.unwrap();
    assert!(!valid.into_inner().valid);
    let valid = s.lock.validate(req(&search, validate)).await.unwrap();
    assert!(valid.into_inner().valid);
    // A fence with search's key holds nothing for pay.
    let fenced = pb::CreateRequest {
        path: "/f".into(),
        fence: Some(pb::Fence {
            key: held.key.clone(),
            token: held.token,
        }),
        ..Default::default()
    };
    assert_eq!(
        code(&s.tree.create(req(&pay, fenced)).await.unwrap_err()),
        "FENCED"
    );
    let resign = pb::ResignRequest {
        key: leader.key.clone(),
        term: leader.term,
    };
    assert!(s.election.resign(req(&pay, resign)).await.is_err());
    let proclaim = pb::ProclaimRequest {
        key: leader.key.clone(),
        term: leader.term,
        value: Bytes::from_static(b"mine"),
    };
    assert!(s.election.proclaim(req(&pay, proclaim)).await.is_err());
    let who = s
        .election
        .leader(req(
            &pay,
            pb::LeaderRequest {
                election: "e".into(),
            },
        ))
        .await
        .unwrap();
    assert!(who.into_inner().leader.is_none());
    let parts = pb::ParticipantsRequest {
        election: "e".into(),
    };
    let parts = s.election.participants(req(&pay, parts)).await.unwrap();
    assert!(parts.into_inner().participants.is_empty());
    // search's session shows pay none of search's ephemerals or queue nodes.
    let get = pb::GetSessionRequest {
        session_id: search_session,
        min_zxid: 0,
    };
    if let Ok(info) = s.session.get(req(&pay, get)).await {
        assert!(info.into_inner().session.unwrap().ephemerals.is_empty());
    }
    let mine = s.session.get(req(&search, get)).await.unwrap().into_inner();
    let mut eph = mine.session.unwrap().ephemerals;
    eph.sort();
    assert_eq!(
        eph,
        [
            "/concord/elections/e/0000000000",
            "/concord/locks/l/0000000000",
            "/eph"
        ]
    );
    // pay's own lock "l" is its own queue: free, and named the same way.
    let pay_session = s.open(&pay).await;
    let mine = s
        .lock
        .try_acquire(req(&pay, acquire(pay_session)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(mine.key, "/concord/locks/l/0000000000");
    let admin = s.caller("admin");
    let all = s
        .lock
        .holder(req(
            &admin,
            pb::HolderRequest {
                name: "pay:l".into(),
            },
        ))
        .await
        .unwrap();
    assert_eq!(
        all.into_inner().holders[0].key,
        "/concord/locks/pay:l/0000000000"
    );
    // Nothing of search's changed.
    assert_eq!(s.tree_paths(), before);
    let queues = s.replica.read(|t| t.walk("/concord", true).len());
    assert_eq!(queues, queues_before + 2, "only pay's own queue was added");
    assert!(s.get(&search, "/x").await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_and_elections_need_w_to_act_and_r_to_observe_on_the_namespace_root() {
    let s = start().await;
    let admin = s.caller("admin");
    let (reader, nobody) = (s.caller("pay-1"), s.caller("pay-2"));
    let session = s.open(&reader).await;
    let admin_session = s.open(&admin).await;
    // An admin holds pay's lock "l" and leads pay's election "e" (by their full names).
    let acquire = |name: &str, session_id| pb::AcquireRequest {
        name: name.into(),
        session_id,
        ..Default::default()
    };
    let held = s
        .lock
        .acquire(req(&admin, acquire("pay:l", admin_session)))
        .await
        .unwrap()
        .into_inner();
    let campaign = |name: &str, session_id| pb::CampaignRequest {
        election: name.into(),
        session_id,
        ..Default::default()
    };
    let leader = s
        .election
        .campaign(req(&admin, campaign("pay:e", admin_session)))
        .await
        .unwrap()
        .into_inner()
        .leader
        .unwrap();
    s.revoke(&admin, "/teams/pay", To::Team("pay"), "rwcda")
        .await
        .unwrap();
    s.grant(&admin, "/teams/pay", To::Identity("pay-1"), "r")
        .await
        .unwrap();
    let team_key = "/concord/locks/l/0000000000";
    assert_eq!(held.key, "/concord/locks/pay:l/0000000000");
    // Acting needs `w`.
    denied(s.lock.acquire(req(&reader, acquire("l", session))).await);
    denied(
        s.lock
            .try_acquire(req(&reader, acquire("l", session)))
            .await,
    );
    let release = pb::ReleaseRequest {
        key: team_key.into(),
        token: held.token,
    };
    denied(s.lock.release(req(&reader, release)).await);
    denied(
        s.election
            .campaign(req(&reader, campaign("e", session)))
            .await,
    );
    let team_leader_key = "/concord/elections/e/0000000000";
    let proclaim = pb::ProclaimRequest {
        key: team_leader_key.into(),
        term: leader.term,
        value: Bytes::new(),
    };
    denied(s.election.proclaim(req(&reader, proclaim)).await);
    let resign = pb::ResignRequest {
        key: team_leader_key.into(),
        term: leader.term,
    };
    denied(s.election.resign(req(&reader, resign)).await);
    // Observing needs `r`, and answers in the team's names.
    for who in [&reader, &nobody] {
        let allowed = who == &reader;
        let waiters = s
            .lock
            .waiters(req(who, pb::WaitersRequest { name: "l".into() }))
            .await;
        let validate = pb::ValidateRequest {
            key: team_key.into(),
            token: held.token,
        };
        let valid = s.lock.validate(req(who, validate)).await;
        let led = s
            .election
            .leader(req(
                who,
                pb::LeaderRequest {
                    election: "e".into(),
                },
            ))
            .await;
        let parts = pb::ParticipantsRequest {
            election: "e".into(),
        };
        let parts = s.election.participants(req(who, parts)).await;
        if allowed {
            assert_eq!(waiters.unwrap().into_inner().entries[0].key, team_key);
            assert!(valid.unwrap().into_inner().valid);
            let led = led.unwrap().into_inner().leader.unwrap();
            assert_eq!(
                (led.key.as_str(), led.election.as_str()),
                (team_leader_key, "e")
            );
            assert_eq!(parts.unwrap().into_inner().participants.len(), 1);
        } else {
            denied(waiters);
            denied(valid);
            denied(led);
            denied(parts);
        }
    }
    // An open Observe ends with PERMISSION_DENIED once its `r` is revoked.
    let observe = pb::ObserveRequest {
        election: "e".into(),
        ..Default::default()
    };
    denied(s.election.observe(req(&nobody, observe.clone())).await);
    let mut stream = s
        .election
        .observe(req(&reader, observe))
        .await
        .unwrap()
        .into_inner();
    let first = tokio::time::timeout(WAIT, stream.next()).await.unwrap();
    let first = first.unwrap().unwrap().leader.unwrap();
    assert_eq!(first.key, team_leader_key);
    s.revoke(&admin, "/teams/pay", To::Identity("pay-1"), "r")
        .await
        .unwrap();
    let resign = pb::ResignRequest {
        key: leader.key.clone(),
        term: leader.term,
    };
    s.election.resign(req(&admin, resign)).await.unwrap();
    let next = tokio::time::timeout(WAIT, stream.next()).await.unwrap();
    denied(next.unwrap());
    // The admin's hold is untouched by all of it.
    let validate = pb::ValidateRequest {
        key: held.key,
        token: held.token,
    };
    assert!(
        s.lock
            .validate(req(&admin, validate))
            .await
            .unwrap()
            .into_inner()
            .valid
    );
}

/// A join carries what its caller needs when it is proposed (`recipes::Needs`), so a
/// permission lost after the service's own check still stops it: PERMISSION_DENIED
/// naming the root as the caller sees it, and no member joins.
#[tokio::test]
async fn a_join_is_checked_again_when_it_is_proposed() {
    use crate::api::authz::View;
    use crate::recipes::{lock_queue, JoinSpec, Needs, RecipeError};
    use crate::security::{Namespace, Perms};
    let s = start().await;
    let admin = s.caller("admin");
    let reader = s.caller("pay-1");
    let session = s.open(&reader).await;
    s.revoke(&admin, "/teams/pay", To::Team("pay"), "w")
        .await
        .unwrap();
    let spec = JoinSpec {
        queue: lock_queue("pay:l").unwrap(),
        session_id: session,
        owner_id: String::new(),
        value: Bytes::new(),
        permits: 1,
        needs: Some(Needs {
            caller: reader.clone(),
            path: "/teams/pay".into(),
            perms: Perms::WRITE,
        }),
    };
    let recipes = Recipes::new(s.replica.clone());
    let e = recipes.acquire(&spec, Some(WAIT)).await.unwrap_err();
    let RecipeError::Denied(d) = &e else {
        panic!("{e:?}")
    };
    assert_eq!((d.path.as_str(), d.missing), ("/teams/pay", Perms::WRITE));
    let view = View {
        ns: Namespace::of(&reader),
        caller: reader,
    };
    let status = view.recipe_status(e);
    assert_eq!(code(&status), "PERMISSION_DENIED");
    assert!(status.message().contains("on /"), "{}", status.message());
    assert!(!status.message().contains("/teams"), "{}", status.message());
    let members: Vec<String> = s.replica.read(|t| {
        t.walk("/concord", true)
            .into_iter()
            .map(|(p, _)| p)
            .filter(|p| p.starts_with("/concord/locks/pay:l/"))
            .collect()
    });
    assert!(members.is_empty(), "{members:?}");
}

/// Snapshot and Members expose the whole tree and the membership: a team member
/// and an unmapped identity are refused; an admin gets a snapshot that decodes to
/// the tree at the zxid its first message names, and the members.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_and_members_are_for_admins_only() {
    let s = start().await;
    let (pay, admin, stranger) = (s.caller("pay-1"), s.caller("admin"), s.caller("stranger"));
    s.create(&pay, "/a").await.unwrap();
    for who in [&pay, &stranger] {
        let m = denied(
            s.cluster
                .snapshot(req(who, pb::SnapshotRequest::default()))
                .await,
        );
        assert!(m.contains("Cluster/Snapshot is for admins only"), "{m}");
        denied(s.cluster.members(req(who, pb::MembersRequest {})).await);
    }
    let mut stream = s
        .cluster
        .snapshot(req(&admin, pb::SnapshotRequest::default()))
        .await
        .unwrap()
        .into_inner();
    let first = stream.next().await.unwrap().unwrap();
    let info = first.info.expect("the first message names the snapshot");
    assert!(first.data.is_empty());
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        assert!(chunk.info.is_none());
        assert!(chunk.data.len() <= super::backup::SNAPSHOT_CHUNK_BYTES);
        bytes.extend_from_slice(&chunk.data);
    }
    let tree = crate::tree::DataTree::decode_snapshot(&bytes).unwrap();
    assert_eq!(tree.last_zxid(), info.zxid);
    assert_eq!(tree.node_count() as u64, info.node_count);
    assert!(tree.get("/teams/pay/a").is_some());
    let at_zxid = s
        .replica
        .read(|t| (t.last_zxid() == info.zxid).then(|| t.digest()));
    if let Some(digest) = at_zxid {
        assert_eq!(tree.digest(), digest);
    }
    let members = s
        .cluster
        .members(req(&admin, pb::MembersRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(members.members.len(), 1);
    let me = &members.members[0];
    assert_eq!(
        (me.id, me.role(), me.voter, me.known),
        (1, pb::Role::Leader, true, true)
    );
    assert_eq!(me.zxid, s.replica.applied_zxid());
}
