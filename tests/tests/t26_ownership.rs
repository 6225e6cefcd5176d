//! Session ownership against real processes, without TLS: each server's plain-text
//! callers are its configured `local_identity`, so an ensemble whose members have
//! different local identities gives a client one identity per server. A stranger
//! (another identity, even of the same team) cannot close, keep alive, write with,
//! release, resign or proclaim for another's session, and changes nothing (a session
//! it may not use is answered as one that does not exist); an admin can; owners and
//! request fingerprints survive a restart.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use concord_proto::v1 as pb;
use concord_proto::v1::election_client::ElectionClient;
use concord_proto::v1::lock_client::LockClient;
use concord_tests::{code_of, config_file, config_flags, Ensemble, Server, ServerOptions};
use tokio_stream::StreamExt;

const LEADER_WAIT: Duration = Duration::from_secs(20);

/// One team that sees the whole tree, so paths are the same for every identity.
const TEAM: &str = "[[teams]]\nname = \"payments\"\nroot = \"/\"\nidentities = [\"pay-*\"]\n";

fn options() -> ServerOptions {
    ServerOptions {
        session_ttl_ms: Some((1_000, 60_000)),
        ..ServerOptions::default()
    }
}

async fn open(server: &Server) -> u64 {
    let r = pb::OpenSessionRequest { ttl_ms: 60_000 };
    let reply = server.session().await.open(r).await.unwrap().into_inner();
    reply.session_id
}

fn create_req(path: &str, data: &str, session_id: u64, request_id: u64) -> pb::CreateRequest {
    pb::CreateRequest {
        path: path.into(),
        data: data.to_owned().into(),
        mode: pb::CreateMode::Persistent.into(),
        session_id,
        request_id,
        ..Default::default()
    }
}

#[track_caller]
fn denied<T: std::fmt::Debug>(what: &str, result: Result<T, tonic::Status>) {
    match result {
        Err(status) => assert_eq!(code_of(&status), "PERMISSION_DENIED", "{what}: {status:?}"),
        Ok(v) => panic!("{what}: allowed: {v:?}"),
    }
}

/// Refused as a session that does not exist (SESSION_EXPIRED), as `session_id` of
/// another identity must be, live or not.
#[track_caller]
fn unknown<T: std::fmt::Debug>(what: &str, session_id: u64, result: Result<T, tonic::Status>) {
    match result {
        Err(status) => {
            assert_eq!(code_of(&status), "SESSION_EXPIRED", "{what}: {status:?}");
            let words = format!("session {session_id} does not exist, or is not the caller's");
            assert!(status.message().contains(&words), "{what}: {status:?}");
        }
        Ok(v) => panic!("{what}: allowed: {v:?}"),
    }
}

async fn exists(server: &Server, path: &str, min_zxid: u64) -> bool {
    let r = pb::ExistsRequest {
        path: path.into(),
        min_zxid,
        ..Default::default()
    };
    server
        .tree()
        .await
        .exists(r)
        .await
        .unwrap()
        .into_inner()
        .exists
}

async fn session_info(server: &Server, session_id: u64, min_zxid: u64) -> pb::SessionInfo {
    let r = pb::GetSessionRequest {
        session_id,
        min_zxid,
    };
    let reply = server.session().await.get(r).await.unwrap().into_inner();
    reply.session.unwrap()
}

/// Server 1's callers are pay-alice, server 2's pay-bob (same team, another
/// identity), server 3's the default admin.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t26_a_stranger_cannot_use_another_identitys_session() {
    let identity = |i: usize| match i {
        0 => format!("local_identity = \"pay-alice\"\n{TEAM}"),
        1 => format!("local_identity = \"pay-bob\"\n{TEAM}"),
        _ => TEAM.to_owned(),
    };
    let ensemble = Ensemble::start_with_toml(3, options(), &identity);
    ensemble.leader(LEADER_WAIT).await;
    let [alice, bob, admin] = [0, 1, 2].map(|i| &ensemble.servers[i]);
    let s = open(alice).await;
    // Every request of Bob's right after the Open: server 2 may not have applied it
    // yet, and must wait before deciding.
    let r = pb::CloseSessionRequest { session_id: s };
    unknown("close", s, bob.session().await.close(r).await);
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let stream = bob
        .session()
        .await
        .keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await;
    let mut replies = stream.unwrap().into_inner();
    let ping = pb::KeepAliveRequest {
        session_id: s,
        min_zxid: s,
    };
    tx.send(ping).await.unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(15), replies.next()).await;
    let reply = reply.unwrap().unwrap().unwrap();
    assert!(reply.expired, "a stranger's keep-alive: {reply:?}");
    let mut ephemeral = create_req("/eph", "", s, 0);
    ephemeral.mode = pb::CreateMode::Ephemeral.into();
    unknown(
        "ephemeral",
        s,
        bob.tree().await.create(ephemeral.clone()).await,
    );
    let theirs = create_req("/theirs", "bob", s, 5);
    unknown("request id", s, bob.tree().await.create(theirs).await);
    // Nothing changed; Alice's own writes then apply normally.
    let created = alice.tree().await.create(ephemeral).await.unwrap();
    let zxid = created.into_inner().header.unwrap().zxid;
    let mine = alice
        .tree()
        .await
        .create(create_req("/mine", "alice", s, 5))
        .await;
    assert_eq!(mine.unwrap().into_inner().path, "/mine");
    assert!(!exists(admin, "/theirs", zxid).await);
    let info = session_info(admin, s, zxid).await;
    assert_eq!(info.owner, "pay-alice");
    assert_eq!(info.ephemerals, ["/eph"]);
    // Bob (same team) sees the session, not its owner.
    let info = session_info(bob, s, zxid).await;
    assert_eq!((info.session_id, info.owner.as_str()), (s, ""));

    // Locks: neither the Holder token nor token 0 lets Bob release Alice's lock.
    let mut alice_locks = LockClient::new(alice.channel().await);
    let mut bob_locks = LockClient::new(bob.channel().await);
    let acquire = pb::AcquireRequest {
        name: "l".into(),
        session_id: s,
        owner_id: "a".into(),
        ..Default::default()
    };
    unknown("acquire", s, bob_locks.acquire(acquire.clone()).await);
    let held = alice_locks.acquire(acquire).await.unwrap().into_inner();
    let holders = |mut c: LockClient<tonic::transport::Channel>| async move {
        let r = pb::HolderRequest { name: "l".into() };
        let holders = c.holder(r).await.unwrap().into_inner().holders;
        holders
            .into_iter()
            .map(|h| (h.key, h.token))
            .collect::<Vec<_>>()
    };
    let seen = holders(bob_locks.clone()).await;
    assert_eq!(seen, [(held.key.clone(), held.token)]);
    for token in [held.token, 0] {
        let r = pb::ReleaseRequest {
            key: held.key.clone(),
            token,
        };
        denied("release", bob_locks.release(r.clone()).await);
        if token == 0 {
            denied("force release by the holder", alice_locks.release(r).await);
        }
    }
    assert_eq!(holders(alice_locks.clone()).await, seen);

    // Elections: Bob cannot resign or proclaim with the key and term Leader shows.
    let mut alice_el = ElectionClient::new(alice.channel().await);
    let mut bob_el = ElectionClient::new(bob.channel().await);
    let campaign = pb::CampaignRequest {
        election: "e".into(),
        session_id: s,
        participant_id: "a".into(),
        value: b"v".to_vec().into(),
        timeout_ms: 0,
    };
    alice_el.campaign(campaign).await.unwrap();
    let leader = |mut c: ElectionClient<tonic::transport::Channel>| async move {
        let r = pb::LeaderRequest {
            election: "e".into(),
        };
        c.leader(r).await.unwrap().into_inner().leader.unwrap()
    };
    let l = leader(bob_el.clone()).await;
    let proclaim = pb::ProclaimRequest {
        key: l.key.clone(),
        term: l.term,
        value: b"bob".to_vec().into(),
    };
    denied("proclaim", bob_el.proclaim(proclaim).await);
    let resign = pb::ResignRequest {
        key: l.key.clone(),
        term: l.term,
    };
    denied("resign", bob_el.resign(resign.clone()).await);
    let now = leader(alice_el.clone()).await;
    assert_eq!(
        (now.key.as_str(), now.term, &now.value[..]),
        (l.key.as_str(), l.term, &b"v"[..])
    );
    alice_el.resign(resign).await.unwrap();

    // An admin may force a release (naming the team's queue by its full name) and
    // close anyone's session.
    let mut admin_locks = LockClient::new(admin.channel().await);
    let r = pb::ReleaseRequest {
        key: held
            .key
            .replace("/concord/locks/l/", "/concord/locks/payments:l/"),
        token: 0,
    };
    admin_locks.release(r).await.unwrap();
    let r = pb::CloseSessionRequest { session_id: s };
    admin.session().await.close(r).await.unwrap();
}

/// One server whose local identity is a team member: the owner and each request's
/// fingerprint are in the snapshot and the log, so after a restart the session is
/// still Alice's and a different request under a used request id is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t26_owners_and_request_fingerprints_survive_a_restart() {
    let config = config_file(&format!("local_identity = \"pay-alice\"\n{TEAM}"));
    let mut o = options();
    o.snapshot_every_txns = 3;
    o.extra = config_flags(&config);
    let mut server = Server::start(o);
    let s = open(&server).await;
    let first = server.tree().await.create(create_req("/a", "", s, 7)).await;
    assert_eq!(first.unwrap().into_inner().path, "/a");
    for i in 0..4 {
        let r = create_req(&format!("/n{i}"), "", s, 100 + i);
        server.tree().await.create(r).await.unwrap();
    }
    server.kill9();
    server.restart();
    let info = session_info(&server, s, 0).await;
    assert_eq!(info.owner, "pay-alice");
    let other = server.tree().await.create(create_req("/b", "", s, 7)).await;
    let status = other.unwrap_err();
    assert_eq!(code_of(&status), "BAD_ARGUMENTS", "{status:?}");
    assert!(status.message().contains("different request"), "{status:?}");
    assert!(!exists(&server, "/b", 0).await);
    let retry = server.tree().await.create(create_req("/a", "", s, 7)).await;
    assert_eq!(retry.unwrap().into_inner().path, "/a");
    // Not an admin: no force release, even of nothing.
    let r = pb::ReleaseRequest {
        key: "/concord/locks/l/0000000000".into(),
        token: 0,
    };
    denied(
        "force release",
        LockClient::new(server.channel().await).release(r).await,
    );
}
