//! Tenancy over mTLS with real certificates and a real process (issue 11, point 9):
//! identities come from the client certificates `concord certs` makes; team `pay`
//! and team `search` each see their own namespace as `/`. A `search` client tries
//! every RPC against what a `pay` client holds — its nodes, its session, its
//! ephemerals, its request ids, its lock and its leadership — and none of it
//! reaches or changes `pay`'s state. A teammate is refused the session it does not
//! own, and an identity in no team may only ask who it is.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use concord_proto::v1 as pb;
use concord_tests::{code_of, config_file, config_flags, Certs, Server, ServerOptions};
use tokio_stream::StreamExt;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

const WAIT: Duration = Duration::from_secs(20);

const TEAMS: &str = r#"
admins = ["admin"]
[[teams]]
name = "pay"
root = "/teams/pay"
identities = ["pay-*"]
[[teams]]
name = "search"
root = "/teams/search"
identities = ["search-*"]
"#;

/// An mTLS server with the two teams; its certificates, and the config file (kept
/// alive as long as the server).
fn start() -> (Server, Certs, tempfile::TempPath) {
    let certs = Certs::generate(1, &["admin", "pay-1", "pay-2", "search-1", "stranger"]);
    let config = config_file(TEAMS);
    let mut extra = certs.server_flags(1, true);
    extra.extend(config_flags(&config));
    let server = Server::start(ServerOptions {
        extra,
        ..ServerOptions::default()
    });
    (server, certs, config)
}

/// A channel to `server` presenting client `who`'s certificate.
async fn channel(server: &Server, certs: &Certs, who: &str) -> Channel {
    let read = |name: &str| std::fs::read(certs.path(name)).unwrap();
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read("ca.pem")))
        .identity(Identity::from_pem(
            read(&format!("{who}.pem")),
            read(&format!("{who}-key.pem")),
        ))
        .domain_name("localhost");
    Endpoint::from_shared(format!("https://{}", server.addr))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// Every client of one identity.
struct As {
    tree: pb::tree_client::TreeClient<Channel>,
    session: pb::session_client::SessionClient<Channel>,
    watch: pb::watch_client::WatchClient<Channel>,
    lock: pb::lock_client::LockClient<Channel>,
    election: pb::election_client::ElectionClient<Channel>,
    cluster: pb::cluster_client::ClusterClient<Channel>,
    access: pb::access_client::AccessClient<Channel>,
}

async fn as_(server: &Server, certs: &Certs, who: &str) -> As {
    let c = channel(server, certs, who).await;
    As {
        tree: pb::tree_client::TreeClient::new(c.clone()),
        session: pb::session_client::SessionClient::new(c.clone()),
        watch: pb::watch_client::WatchClient::new(c.clone()),
        lock: pb::lock_client::LockClient::new(c.clone()),
        election: pb::election_client::ElectionClient::new(c.clone()),
        cluster: pb::cluster_client::ClusterClient::new(c.clone()),
        access: pb::access_client::AccessClient::new(c),
    }
}

impl As {
    async fn whoami(&mut self) -> pb::WhoAmIResponse {
        self.cluster
            .who_am_i(pb::WhoAmIRequest {})
            .await
            .unwrap()
            .into_inner()
    }

    async fn data(&mut self, path: &str) -> Result<Vec<u8>, String> {
        let r = pb::GetRequest {
            path: path.into(),
            ..Default::default()
        };
        match self.tree.get(r).await {
            Ok(r) => Ok(r.into_inner().data.to_vec()),
            Err(s) => Err(code_of(&s)),
        }
    }

    async fn open(&mut self) -> u64 {
        let r = pb::OpenSessionRequest { ttl_ms: 30_000 };
        self.session.open(r).await.unwrap().into_inner().session_id
    }

    async fn holders(&mut self, name: &str) -> Vec<(String, u64)> {
        let r = pb::HolderRequest { name: name.into() };
        let holders = self.lock.holder(r).await.unwrap().into_inner().holders;
        holders.into_iter().map(|h| (h.key, h.token)).collect()
    }

    async fn leader(&mut self, election: &str) -> Option<(String, u64, Vec<u8>)> {
        let r = pb::LeaderRequest {
            election: election.into(),
        };
        let leader = self.election.leader(r).await.unwrap().into_inner().leader;
        leader.map(|l| (l.key, l.term, l.value.to_vec()))
    }
}

fn create(path: &str, data: &str, session_id: u64, request_id: u64) -> pb::CreateRequest {
    let mode = if session_id == 0 {
        pb::CreateMode::Persistent
    } else {
        pb::CreateMode::Ephemeral
    };
    pb::CreateRequest {
        path: path.into(),
        data: data.as_bytes().to_vec().into(),
        mode: mode.into(),
        session_id,
        request_id,
        ..Default::default()
    }
}

/// The code a refused call failed with.
fn refused<T: std::fmt::Debug>(result: Result<tonic::Response<T>, tonic::Status>) -> String {
    match result {
        Err(status) => code_of(&status),
        Ok(r) => panic!("allowed: {:?}", r.into_inner()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_team_reaches_nothing_and_changes_nothing() {
    let (server, certs, _config) = start();
    let mut pay = as_(&server, &certs, "pay-1").await;
    let mut search = as_(&server, &certs, "search-1").await;
    let mut admin = as_(&server, &certs, "admin").await;
    server.wait_seeded().await;

    // Identities from the certificates; each team rooted in its namespace.
    let me = pay.whoami().await;
    assert_eq!(
        (
            me.identity.as_str(),
            me.team.as_str(),
            me.namespace_root.as_str()
        ),
        ("pay-1", "pay", "/teams/pay")
    );
    assert!(admin.whoami().await.admin);

    // What pay holds: a node, a session with an ephemeral (written with request id
    // 7), a lock, and a leadership.
    pay.tree
        .create(create("/secret", "pay", 0, 0))
        .await
        .unwrap();
    let session = pay.open().await;
    pay.tree
        .create(create("/eph", "mine", session, 7))
        .await
        .unwrap();
    let acquire = pb::AcquireRequest {
        name: "l".into(),
        session_id: session,
        timeout_ms: 5_000,
        ..Default::default()
    };
    let held = pay
        .lock
        .acquire(acquire.clone())
        .await
        .unwrap()
        .into_inner();
    let campaign = pb::CampaignRequest {
        election: "e".into(),
        session_id: session,
        participant_id: "p".into(),
        value: b"pay-leader".to_vec().into(),
        timeout_ms: 5_000,
    };
    let leader = pay.election.campaign(campaign.clone()).await.unwrap();
    let leader = leader.into_inner().leader.unwrap();
    assert_eq!(admin.data("/teams/pay/secret").await.unwrap(), b"pay");

    // A watch of search's whole namespace, open while pay writes.
    let watch = pb::WatchRequest {
        path: "/".into(),
        recursive: true,
        ..Default::default()
    };
    let mut events = search.watch.watch(watch).await.unwrap().into_inner();

    // Search names pay's paths: they land in its own namespace, where nothing is.
    assert_eq!(search.data("/secret").await, Err("NO_NODE".into()));
    assert_eq!(
        search.data("/teams/pay/secret").await,
        Err("NO_NODE".into())
    );
    let set = pb::SetRequest {
        path: "/secret".into(),
        data: b"search".to_vec().into(),
        version: -1,
        ..Default::default()
    };
    assert_eq!(refused(search.tree.set(set.clone()).await), "NO_NODE");
    let delete = pb::DeleteRequest {
        path: "/secret".into(),
        version: -1,
        ..Default::default()
    };
    assert_eq!(refused(search.tree.delete(delete).await), "NO_NODE");
    let children = pb::ChildrenRequest {
        path: "/".into(),
        ..Default::default()
    };
    let seen = search.tree.children(children).await.unwrap().into_inner();
    assert!(seen.children.is_empty(), "{:?}", seen.children);

    // Pay's session: not listed, not shown, not kept alive, not closed, not used
    // for ephemerals or request ids; answered as a session that does not exist.
    let listed = search
        .session
        .list(pb::ListSessionsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .sessions;
    assert!(listed.iter().all(|s| s.session_id != session), "{listed:?}");
    let get = pb::GetSessionRequest {
        session_id: session,
        min_zxid: 0,
    };
    assert_eq!(refused(search.session.get(get).await), "SESSION_EXPIRED");
    let ping = pb::KeepAliveRequest {
        session_id: session,
        min_zxid: 0,
    };
    let mut pongs = search
        .session
        .keep_alive(tokio_stream::iter([ping]))
        .await
        .unwrap()
        .into_inner();
    let answer = tokio::time::timeout(WAIT, pongs.next()).await.unwrap();
    match answer {
        Some(Ok(pong)) => assert!(pong.expired, "a stranger's keep-alive: {pong:?}"),
        other => panic!("a stranger's keep-alive: {other:?}"),
    }
    let close = pb::CloseSessionRequest {
        session_id: session,
    };
    assert_eq!(
        refused(search.session.close(close).await),
        "SESSION_EXPIRED"
    );
    let theirs = create("/theirs", "search", session, 0);
    assert_eq!(refused(search.tree.create(theirs).await), "SESSION_EXPIRED");
    let reuse = create("/eph2", "search", session, 7);
    assert_eq!(refused(search.tree.create(reuse).await), "SESSION_EXPIRED");
    assert_eq!(
        refused(search.lock.acquire(acquire).await),
        "SESSION_EXPIRED"
    );
    assert_eq!(
        refused(search.election.campaign(campaign).await),
        "SESSION_EXPIRED"
    );

    // Pay's lock and leadership: search sees none, and cannot release or resign
    // them with the key and token pay's own answers carry (nor force with token 0).
    assert!(search.holders("l").await.is_empty());
    assert_eq!(search.leader("e").await, None);
    let release = |token| pb::ReleaseRequest {
        key: held.key.clone(),
        token,
    };
    assert_eq!(
        refused(search.lock.release(release(0)).await),
        "PERMISSION_DENIED"
    );
    let with_token = refused(search.lock.release(release(held.token)).await);
    assert!(
        ["NO_NODE", "PERMISSION_DENIED"].contains(&with_token.as_str()),
        "{with_token}"
    );
    let resign = pb::ResignRequest {
        key: leader.key.clone(),
        term: leader.term,
    };
    let resigned = refused(search.election.resign(resign).await);
    assert!(
        ["NO_NODE", "FENCED", "PERMISSION_DENIED"].contains(&resigned.as_str()),
        "{resigned}"
    );

    // Grants: search's own (its `a` on its root) land in its namespace; it lists
    // none of pay's, and granting itself pay's root path gives it nothing of pay's.
    let mine = pb::Grant {
        path: "/teams/pay".into(),
        to: Some(pb::grant::To::Team("search".into())),
        perms: "rwcda".into(),
    };
    let granted = search
        .access
        .grant(pb::GrantRequest { grant: Some(mine) })
        .await;
    assert!(
        granted.is_ok() || code_of(granted.as_ref().unwrap_err()) == "PERMISSION_DENIED",
        "{granted:?}"
    );
    assert_eq!(
        search.data("/teams/pay/secret").await,
        Err("NO_NODE".into())
    );
    let list = pb::ListGrantsRequest {
        path: "/".into(),
        recursive: true,
    };
    let listed = search.access.list_grants(list).await.unwrap().into_inner();
    assert!(
        listed
            .grants
            .iter()
            .all(|g| g.to != Some(pb::grant::To::Team("pay".into()))),
        "{:?}",
        listed.grants
    );

    // A teammate is refused the session it does not own, as one that does not exist.
    let mut pay2 = as_(&server, &certs, "pay-2").await;
    let close = pb::CloseSessionRequest {
        session_id: session,
    };
    assert_eq!(refused(pay2.session.close(close).await), "SESSION_EXPIRED");

    // Nothing changed: pay's node, session, ephemeral, lock and leadership stand.
    pay.tree
        .set(pb::SetRequest {
            path: "/secret".into(),
            data: b"pay-2".to_vec().into(),
            version: -1,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(pay.data("/secret").await.unwrap(), b"pay-2");
    assert_eq!(pay.data("/eph").await.unwrap(), b"mine");
    assert_eq!(
        admin.data("/teams/search/secret").await,
        Err("NO_NODE".into())
    );
    assert_eq!(
        admin.data("/teams/search/theirs").await,
        Err("NO_NODE".into())
    );
    assert_eq!(admin.data("/teams/pay/eph2").await, Err("NO_NODE".into()));
    assert_eq!(pay.holders("l").await, [(held.key.clone(), held.token)]);
    let expect = (leader.key.clone(), leader.term, b"pay-leader".to_vec());
    assert_eq!(pay.leader("e").await, Some(expect));
    let get = pb::GetSessionRequest {
        session_id: session,
        min_zxid: 0,
    };
    let info = pay.session.get(get).await.unwrap().into_inner();
    assert_eq!(info.session.unwrap().owner, "pay-1");

    // Search's open watch saw none of pay's writes: its first event is its own.
    search
        .tree
        .create(create("/own", "search", 0, 0))
        .await
        .unwrap();
    let first_event = tokio::time::timeout(WAIT, async {
        loop {
            match events.next().await {
                Some(Ok(pb::WatchResponse {
                    msg: Some(pb::watch_response::Msg::Event(e)),
                })) => return e,
                Some(Ok(_)) => continue,
                other => panic!("the watch ended: {other:?}"),
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(first_event.path, "/own");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_in_no_team_may_only_ask_who_it_is() {
    let (server, certs, _config) = start();
    server.wait_seeded().await;
    let mut stranger = as_(&server, &certs, "stranger").await;
    let me = stranger.whoami().await;
    assert_eq!(me.identity, "stranger");
    assert!(!me.admin && me.team.is_empty() && me.namespace_root.is_empty());
    assert_eq!(stranger.data("/").await, Err("PERMISSION_DENIED".into()));
    let r = pb::OpenSessionRequest { ttl_ms: 30_000 };
    assert_eq!(refused(stranger.session.open(r).await), "PERMISSION_DENIED");
    let r = create("/x", "", 0, 0);
    assert_eq!(refused(stranger.tree.create(r).await), "PERMISSION_DENIED");
    let r = pb::HolderRequest { name: "l".into() };
    assert_eq!(refused(stranger.lock.holder(r).await), "PERMISSION_DENIED");
    let mut admin = as_(&server, &certs, "admin").await;
    assert_eq!(admin.data("/x").await, Err("NO_NODE".into()));
}
