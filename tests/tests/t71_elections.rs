//! Elections against a real server: failover on session expiry, Observe, Resign,
//! Proclaim fenced by the term, Participants.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use concord::Client;
use concord_proto::v1 as pb;
use concord_proto::v1::election_client::ElectionClient;
use concord_tests::{code_of, Server, ServerOptions};
use tokio_stream::StreamExt;
use tonic::transport::Channel;

async fn election(server: &Server) -> ElectionClient<Channel> {
    ElectionClient::new(server.channel().await)
}

fn campaign_req(sid: u64, who: &str, value: &str) -> pb::CampaignRequest {
    pb::CampaignRequest {
        election: "e".into(),
        session_id: sid,
        participant_id: who.into(),
        value: value.as_bytes().to_vec().into(),
        timeout_ms: 0,
    }
}

async fn campaign(e: &mut ElectionClient<Channel>, sid: u64, who: &str) -> pb::LeaderInfo {
    e.campaign(campaign_req(sid, who, who))
        .await
        .unwrap()
        .into_inner()
        .leader
        .unwrap()
}

/// Waits until election "e" has `n` participants.
async fn wait_participants(e: &ElectionClient<Channel>, n: usize) {
    concord_tests::eventually("participants", Duration::from_secs(10), || {
        let mut e = e.clone();
        async move {
            let p = e
                .participants(pb::ParticipantsRequest {
                    election: "e".into(),
                })
                .await
                .unwrap()
                .into_inner()
                .participants;
            (p.len() == n).then_some(())
        }
    })
    .await
}

#[tokio::test]
async fn t71_leader_session_expiry_elects_the_next_within_tick_plus_ttl() {
    let options = ServerOptions::default();
    let tick_ms = options.tick_ms;
    let server = Server::start(options);
    let c = Client::connect(server.endpoint()).await.unwrap();
    let mut e = election(&server).await;
    for _ in 0..3 {
        let a = c.open_session(500).await.unwrap();
        let b = c.open_session(1000).await.unwrap();
        let leader_a = campaign(&mut e, a.id(), "a").await;
        let mut e2 = e.clone();
        let b_id = b.id();
        let b_call = tokio::spawn(async move {
            let r = campaign(&mut e2, b_id, "b").await;
            (Instant::now(), r)
        });
        wait_participants(&e, 2).await;
        let ttl_ms = a.ttl_ms() as u64;
        let stopped = Instant::now();
        drop(a); // A's keep-alives stop.
        let (elected, leader_b) = b_call.await.unwrap();
        let took = elected - stopped;
        // The last ping was at most `stopped`; expiry is found within a tick; allow
        // the fsyncs and scheduling of a loaded test machine on top.
        let bound = Duration::from_millis(ttl_ms + tick_ms + 400);
        assert!(took <= bound, "failover took {took:?}, more than {bound:?}");
        assert!(leader_b.term > leader_a.term);
        e.resign(pb::ResignRequest {
            key: leader_b.key,
            term: leader_b.term,
        })
        .await
        .unwrap();
        b.close().await.unwrap();
    }
}

/// With progress_interval_ms, a quiet Observe stream carries progress messages that
/// repeat the last leader sent, flagged `progress`, with zxids that never go back;
/// changes still come as changes.
#[tokio::test]
async fn t71_observe_sends_progress_on_a_quiet_election_when_asked() {
    let server = Server::start(ServerOptions::default());
    let c = Client::connect(server.endpoint()).await.unwrap();
    let mut e = election(&server).await;
    let mut stream = e
        .observe(pb::ObserveRequest {
            election: "e".into(),
            progress_interval_ms: 20,
        })
        .await
        .unwrap()
        .into_inner();
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("a message within 10 s")
            .unwrap()
            .unwrap()
    };
    let first = next().await;
    assert!(!first.progress && first.leader.is_none(), "{first:?}");
    let quiet = next().await;
    assert!(quiet.progress && quiet.leader.is_none(), "{quiet:?}");
    let zxid = |r: &pb::LeaderResponse| r.header.as_ref().unwrap().zxid;
    assert!(zxid(&quiet) >= zxid(&first));

    let a = c.open_session(10_000).await.unwrap();
    let led = campaign(&mut e, a.id(), "a").await;
    // Progress sent before the campaign applied may come first; then the change.
    let change = loop {
        let m = next().await;
        if !m.progress {
            break m;
        }
        assert!(
            m.leader.is_none(),
            "progress repeats the last leader sent: {m:?}"
        );
    };
    assert_eq!(change.leader.as_ref().unwrap().key, led.key);
    let after = next().await;
    assert!(after.progress, "{after:?}");
    assert_eq!(after.leader.as_ref().unwrap().key, led.key);
    assert!(zxid(&after) >= zxid(&change));
}

#[tokio::test]
async fn t71_observe_sees_every_change_in_order() {
    let server = Server::start(ServerOptions::default());
    let c = Client::connect(server.endpoint()).await.unwrap();
    let mut e = election(&server).await;
    let mut stream = e
        .observe(pb::ObserveRequest {
            election: "e".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let first = stream.next().await.unwrap().unwrap();
    assert!(first.leader.is_none(), "no leader yet");
    let (a, b, cs) = (
        c.open_session(1000).await.unwrap(),
        c.open_session(1000).await.unwrap(),
        c.open_session(1000).await.unwrap(),
    );
    let la = campaign(&mut e, a.id(), "a").await;
    e.proclaim(pb::ProclaimRequest {
        key: la.key.clone(),
        term: la.term,
        value: b"a2".to_vec().into(),
    })
    .await
    .unwrap();
    let mut waiting = Vec::new();
    for (sid, who) in [(b.id(), "b"), (cs.id(), "c")] {
        let mut e2 = e.clone();
        waiting.push(tokio::spawn(
            async move { campaign(&mut e2, sid, who).await },
        ));
        wait_participants(&e, waiting.len() + 1).await;
    }
    e.resign(pb::ResignRequest {
        key: la.key.clone(),
        term: la.term,
    })
    .await
    .unwrap();
    b.close().await.unwrap(); // b led; c takes over
    let lc = waiting.pop().unwrap().await.unwrap();
    e.proclaim(pb::ProclaimRequest {
        key: lc.key.clone(),
        term: lc.term,
        value: b"c2".to_vec().into(),
    })
    .await
    .unwrap();
    let want = [("a", "a"), ("a", "a2"), ("b", "b"), ("c", "c"), ("c", "c2")];
    let mut last_zxid = first.header.unwrap().zxid;
    for (who, value) in want {
        let got = stream.next().await.unwrap().unwrap();
        let zxid = got.header.unwrap().zxid;
        assert!(zxid > last_zxid, "in zxid order");
        last_zxid = zxid;
        let leader = got.leader.unwrap();
        assert_eq!(
            (leader.participant_id.as_str(), &leader.value[..]),
            (who, value.as_bytes())
        );
    }
    drop(cs);
}

#[tokio::test]
async fn t71_resign_hands_over_at_once_and_old_term_is_fenced() {
    let server = Server::start(ServerOptions::default());
    let c = Client::connect(server.endpoint()).await.unwrap();
    let mut e = election(&server).await;
    let a = c.open_session(1000).await.unwrap();
    let b = c.open_session(1000).await.unwrap();
    let la = campaign(&mut e, a.id(), "a").await;
    // A retried campaign by the same participant adopts its candidacy.
    assert_eq!(campaign(&mut e, a.id(), "a").await.term, la.term);
    let mut e2 = e.clone();
    let b_id = b.id();
    let b_call = tokio::spawn(async move { campaign(&mut e2, b_id, "b").await });
    wait_participants(&e, 2).await;
    let parts = e
        .participants(pb::ParticipantsRequest {
            election: "e".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .participants;
    let ids: Vec<&str> = parts.iter().map(|p| p.participant_id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    let resigned = e
        .resign(pb::ResignRequest {
            key: la.key.clone(),
            term: la.term,
        })
        .await
        .unwrap()
        .into_inner();
    let lb = b_call.await.unwrap();
    assert!(lb.term > la.term);
    // The hand-over happened in the resign's own txn.
    let leader = e
        .leader(pb::LeaderRequest {
            election: "e".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(leader.leader.unwrap().key, lb.key);
    assert!(leader.header.unwrap().zxid >= resigned.header.unwrap().zxid);
    let err = e
        .proclaim(pb::ProclaimRequest {
            key: la.key.clone(),
            term: la.term,
            value: b"stale".to_vec().into(),
        })
        .await
        .unwrap_err();
    assert_eq!(code_of(&err), "FENCED", "{err}");
    // A term used as a fence on an ordinary write.
    c.create("/leader-data", "", Default::default())
        .await
        .unwrap();
    let write = |key: String, term| concord::WriteOptions {
        fence: Some(concord::Fence { key, token: term }),
        ..Default::default()
    };
    c.set_with("/leader-data", "b", -1, &write(lb.key.clone(), lb.term))
        .await
        .unwrap();
    let err = c
        .set_with("/leader-data", "a", -1, &write(la.key.clone(), la.term))
        .await
        .unwrap_err();
    assert_eq!(err.code(), pb::ErrorCode::Fenced);
}
