//! `Cluster/Members` on real ensembles: on a 3-server ensemble the leader shows one
//! leader and two followers, a follower SIGSTOPped falls behind by the writes made
//! meanwhile and, once continued, its lag returns to 0; a follower knows itself and
//! its leader only, and `concordctl members` asked there answers with the leader's
//! view. On 3 voters and 1 observer: the observer is listed as one, serves reads and
//! watches, and does not count toward the quorum.

#![allow(clippy::unwrap_used)]

mod watch_util;

use std::process::Command;
use std::time::Duration;

use concord_proto::v1 as pb;
use concord_tests::{
    bin, create_at, eventually, get_req, Background, Ensemble, Server, ServerOptions,
};

/// Longest any election, catch-up or command may take.
const WAIT: Duration = Duration::from_secs(20);

/// `Cluster/Members` of `server`, or None if it does not answer.
async fn members(server: &Server) -> Option<pb::MembersResponse> {
    let mut cluster = server.cluster().await;
    let call = cluster.members(pb::MembersRequest {});
    let r = tokio::time::timeout(Duration::from_secs(2), call)
        .await
        .ok()?;
    Some(r.ok()?.into_inner())
}

fn member(m: &pb::MembersResponse, index: usize) -> &pb::MemberStatus {
    let id = index as u64 + 1;
    m.members.iter().find(|s| s.id == id).unwrap()
}

/// Every member of the leader's answer: its role and lag as (role, lag, zxid).
fn view(m: &pb::MembersResponse) -> Vec<(pb::Role, u64, u64)> {
    m.members
        .iter()
        .map(|s| (s.role(), s.lag_txns, s.zxid))
        .collect()
}

/// Waits until the leader `leader` lists every other member in `expected` roles,
/// all known, with no lag and at the leader's own zxid.
async fn all_caught_up(
    ensemble: &Ensemble,
    leader: usize,
    roles: &[pb::Role],
) -> pb::MembersResponse {
    eventually("every member listed caught up", WAIT, || async {
        let m = members(&ensemble.servers[leader]).await?;
        let top = member(&m, leader).zxid;
        let ok = top > 0
            && m.members.len() == roles.len()
            && m.members
                .iter()
                .zip(roles)
                .all(|(s, &role)| s.role() == role && s.known && s.lag_txns == 0 && s.zxid == top);
        ok.then_some(m)
    })
    .await
}

#[tokio::test]
async fn t87_members_of_three_show_a_leader_two_followers_and_lag_that_returns_to_zero() {
    let mut ensemble = Ensemble::start(3, ServerOptions::default());
    let leader = ensemble.leader(WAIT).await;
    create_at(&ensemble.servers[leader].endpoint(), "/first")
        .await
        .unwrap();
    let roles: Vec<pb::Role> = (0..3)
        .map(|i| {
            if i == leader {
                pb::Role::Leader
            } else {
                pb::Role::Follower
            }
        })
        .collect();
    let m = all_caught_up(&ensemble, leader, &roles).await;
    assert_eq!(
        (m.server_id, m.leader_id),
        (leader as u64 + 1, leader as u64 + 1)
    );
    for (i, s) in m.members.iter().enumerate() {
        assert_eq!(s.id, i as u64 + 1);
        assert_eq!(s.client_addr, ensemble.servers[i].addr.to_string());
        assert!(s.voter);
    }
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let (stopped, other) = (followers[0], followers[1]);

    // A stopped follower falls behind by what is written meanwhile.
    ensemble.servers[stopped].signal("STOP");
    let endpoint = ensemble.servers[leader].endpoint();
    let mut last = 0;
    for n in 0..20 {
        last = create_at(&endpoint, &format!("/n{n}")).await.unwrap();
    }
    let behind = eventually("the stopped follower shown behind", WAIT, || async {
        let m = members(&ensemble.servers[leader]).await?;
        let s = member(&m, stopped).clone();
        let gone = s.role() != pb::Role::Follower;
        (gone || s.lag_txns >= 20).then_some(s)
    })
    .await;
    assert!(behind.zxid < last, "{behind:?}");
    // The other follower keeps up (the view is the leader's as of its last tick).
    eventually("the running follower caught up", WAIT, || async {
        let m = members(&ensemble.servers[leader]).await?;
        let s = member(&m, other);
        (s.role() == pb::Role::Follower && s.lag_txns == 0 && s.zxid >= last).then_some(())
    })
    .await;
    let o = members(&ensemble.servers[leader]).await.unwrap();
    assert_ne!(
        view(&o)[stopped],
        (pb::Role::Follower, 0, last),
        "caught up while stopped"
    );
    ensemble.servers[stopped].signal("CONT");
    let m = all_caught_up(&ensemble, leader, &roles).await;
    assert!(member(&m, stopped).zxid >= last);

    // A follower knows itself and its leader only.
    let m = eventually("the follower's view", WAIT, || async {
        let m = members(&ensemble.servers[other]).await?;
        (member(&m, other).zxid >= last).then_some(m)
    })
    .await;
    assert_eq!(
        (m.server_id, m.leader_id),
        (other as u64 + 1, leader as u64 + 1)
    );
    let me = member(&m, other);
    assert_eq!(
        (me.role(), me.known, me.lag_txns),
        (pb::Role::Follower, true, 0)
    );
    let lead = member(&m, leader);
    assert_eq!(lead.role(), pb::Role::Leader);
    assert!(lead.known && lead.zxid >= last);
    let unknown = member(&m, stopped);
    assert_eq!(
        (unknown.role(), unknown.known),
        (pb::Role::Unspecified, false)
    );

    // concordctl asked at the follower answers with the leader's view.
    let mut cmd = Command::new(bin("concordctl"));
    cmd.args(["--endpoint", &ensemble.servers[other].endpoint(), "members"]);
    let mut child = Background::spawn(&mut cmd);
    let status = child.wait_exit(WAIT).await;
    let out = child.stdout();
    assert!(status.success(), "{out}\n{}", child.stderr());
    let first = format!("# answered by server {0}; leader {0}", leader + 1);
    assert!(out.starts_with(&first), "{out}");
    assert_eq!(out.lines().count(), 2 + 3, "{out}");
    for i in 0..3 {
        let want = if i == leader { "leader" } else { "follower" };
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{}\t", i + 1)))
            .unwrap();
        assert!(line.contains(&format!("\t{want}\tvoter\t")), "{line}");
    }
    // Killed: the leader lists it as unknown once it goes silent.
    ensemble.servers[stopped].kill9();
    eventually("the killed follower shown unknown", WAIT, || async {
        let m = members(&ensemble.servers[leader]).await?;
        (member(&m, stopped).role() == pb::Role::Unspecified).then_some(())
    })
    .await;
}

#[tokio::test]
async fn t87_an_observer_is_listed_serves_reads_and_watches_and_is_no_quorum() {
    let mut ensemble = Ensemble::start_with_observers(3, 1, ServerOptions::default());
    let observer = 3;
    let voters = [0, 1, 2];
    let leader = ensemble.leader_among(&voters, WAIT).await;
    let leader_endpoint = ensemble.servers[leader].endpoint();
    create_at(&leader_endpoint, "/w").await.unwrap();
    let roles: Vec<pb::Role> = (0..4)
        .map(|i| match i {
            3 => pb::Role::Observer,
            i if i == leader => pb::Role::Leader,
            _ => pb::Role::Follower,
        })
        .collect();
    let m = all_caught_up(&ensemble, leader, &roles).await;
    assert!(!member(&m, observer).voter);
    assert!(m.members.iter().take(3).all(|s| s.voter));

    // A watch on the observer sees a write made on the leader; reads there too.
    let obs_endpoint = ensemble.servers[observer].endpoint();
    let obs = &ensemble.servers[observer];
    let mut watch = watch_util::open(obs, watch_util::request("/w", true)).await;
    watch_util::started(&mut watch).await;
    let zxid = create_at(&leader_endpoint, "/w/a").await.unwrap();
    let events = watch_util::events_through(&mut watch, zxid).await;
    assert!(
        events.iter().any(|e| e.path == "/w/a" && e.zxid == zxid),
        "the observer's watch missed /w/a: {events:?}"
    );
    let read = pb::GetRequest {
        min_zxid: zxid,
        ..get_req("/w/a")
    };
    let got = obs.tree().await.get(read).await.unwrap().into_inner();
    assert!(got.header.unwrap().zxid >= zxid);

    // Two voters gone: no quorum, whatever the observer does.
    let down: Vec<usize> = voters.iter().copied().filter(|&v| v != leader).collect();
    for &v in &down {
        ensemble.servers[v].kill9();
    }
    let obs_tree = || concord_tests::tree_at(&obs_endpoint, Duration::from_secs(3));
    eventually("the lone voter stops leading", WAIT, || async {
        let s = ensemble.status(leader).await?;
        (!s.leader_serving).then_some(())
    })
    .await;
    let refused = obs_tree()
        .create(pb::CreateRequest {
            path: "/w/no-quorum".into(),
            ..Default::default()
        })
        .await;
    assert!(
        refused.is_err(),
        "a write committed with 1 voter and an observer"
    );
    // It still serves what it has applied.
    let got = obs_tree().get(get_req("/w/a")).await.unwrap().into_inner();
    assert!(got.stat.is_some());
    // One voter back: a quorum again, and writes through the observer go through.
    ensemble.servers[down[0]].restart();
    eventually("writes through the observer resume", WAIT, || async {
        create_at(&obs_endpoint, "/w/again").await.ok()
    })
    .await;
}
