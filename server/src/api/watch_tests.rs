//! Watch resumes on a server that is behind its leader, or behind its own commit
//! point; what a server without a leader serves.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use concord_proto::v1 as pb;
use concord_proto::v1::watch_server::Watch as _;
use tokio::task::JoinHandle;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status};

use super::watch::WatchService;
use crate::replica::tests::{
    create, leader_of, patient_byte_budgets, slow_follower, stalled_follower, start_three,
    with_leader_wait, SlowFollower, Stall, StalledFollower,
};
use crate::replica::Replica;
use crate::txn::Zxid;

type Opened = JoinHandle<Result<Response<WatchStream>, Status>>;
type WatchStream = <WatchService as pb::watch_server::Watch>::WatchStream;

/// Opens, in a task of its own, a watch of the whole tree on `replica` that resumes
/// after `zxid`.
fn resume_on(replica: &Replica, zxid: Zxid) -> Opened {
    let service = WatchService::new(replica.clone());
    let request = pb::WatchRequest {
        path: "/".into(),
        recursive: true,
        start_zxid: Some(zxid),
        ..Default::default()
    };
    tokio::spawn(async move { service.watch(Request::new(request)).await })
}

/// The stream of `opened`, once it has opened (30 s at most).
async fn stream_of(opened: Opened) -> WatchStream {
    tokio::time::timeout(Duration::from_secs(30), opened)
        .await
        .expect("the watch opened in time")
        .unwrap()
        .unwrap()
        .into_inner()
}

/// The next node creation the stream delivers: (path, zxid).
async fn next_created(stream: &mut WatchStream) -> (String, Zxid) {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(20), stream.next())
            .await
            .expect("an event in time")
            .expect("the stream goes on")
            .unwrap();
        match msg.msg {
            Some(pb::watch_response::Msg::Event(e)) if e.kind == pb::EventKind::Created as i32 => {
                return (e.path, e.zxid)
            }
            _ => {}
        }
    }
}

/// A client that saw the leader's newest zxid resumes its watch on a follower that
/// has not caught up (its in-memory log is full while its snapshot is stalled): the
/// follower asks its leader for the commit point and catches up before it answers,
/// instead of calling the client's zxid "ahead of the commit point" (BAD_ARGUMENTS,
/// which ends the watch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_resumes_on_a_follower_behind_what_the_client_has_seen() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    // Not reading its leader for longer than a sync limit, the follower is out of
    // touch: the open waits for it to be back, however long the stall took.
    let configs = with_leader_wait(patient_byte_budgets(&dirs), 60_000);
    let StalledFollower {
        replicas,
        leader,
        slow,
        stall,
        last,
    } = stalled_follower(&configs).await;
    assert!(slow.committed_zxid() < last, "the follower is behind");
    let opened = resume_on(&slow, last);
    // The open waits for the follower to catch up; let it.
    stall.send_replace(false);
    let mut stream = stream_of(opened).await;
    let after = leader.submit(0, 0, create("/after")).await.unwrap();
    assert_eq!(
        next_created(&mut stream).await,
        ("/after".into(), after.zxid)
    );
    for r in replicas.iter().chain([&slow]) {
        r.shutdown();
    }
}

/// A follower hears that a txn is committed before its own fsync of the txn ends: it
/// applies the txn (and publishes its events) at once, as ZooKeeper's followers do,
/// since a quorum has it durable. A client that saw that txn elsewhere resumes its
/// watch there while the fsync is still stalled: the stream starts from the ring at
/// once and goes on once the disk does. (Until it applied before its own fsync, the
/// follower's commit point ran ahead of what it had published, and such a resume
/// failed with BAD_ARGUMENTS, "ahead of the published zxid", ending the watch; found
/// by t94. The watch now waits for the txn to be applied in that case.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_resumes_on_a_follower_whose_fsync_is_stalled() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let SlowFollower {
        replicas,
        leader,
        slow,
        stall,
    } = slow_follower(&patient_byte_budgets(&dirs), Stall::Fsyncs, false).await;
    stall.send_replace(true);
    // The leader and the other follower make a quorum without the slow one.
    let seen = leader.submit(0, 0, create("/seen")).await.unwrap();
    let next = leader.submit(0, 0, create("/next")).await.unwrap();
    slow.wait_applied(next.zxid, Duration::from_secs(20))
        .await
        .expect("the follower applies what is committed while its disk is stalled");
    let mut stream = stream_of(resume_on(&slow, seen.zxid)).await;
    assert_eq!(next_created(&mut stream).await, ("/next".into(), next.zxid));
    stall.send_replace(false);
    let after = leader.submit(0, 0, create("/after")).await.unwrap();
    assert_eq!(
        next_created(&mut stream).await,
        ("/after".into(), after.zxid)
    );
    for r in replicas.iter().chain([&slow]) {
        r.shutdown();
    }
}

/// The same follower, with a history ring of two txns: what it applied while its
/// fsync was stalled left the ring before it was durable in its log, so a watch
/// resumed from before it replays from storage up to the log's durable end and then
/// waits for the disk, instead of ending ("replay stuck", which ended the watch with
/// an error before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_replayed_from_storage_waits_for_a_stalled_fsync() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut configs = patient_byte_budgets(&dirs);
    configs[2].watch_history_txns_max = 2;
    let SlowFollower {
        replicas,
        leader,
        slow,
        stall,
    } = slow_follower(&configs, Stall::Fsyncs, false).await;
    stall.send_replace(true);
    let seen = leader.submit(0, 0, create("/seen")).await.unwrap();
    let mut created = Vec::new();
    for path in ["/a", "/b", "/c", "/d"] {
        let c = leader.submit(0, 0, create(path)).await.unwrap();
        created.push((path.to_owned(), c.zxid));
    }
    let last = created[created.len() - 1].1;
    slow.wait_applied(last, Duration::from_secs(20))
        .await
        .expect("the follower applies what is committed while its disk is stalled");
    assert!(
        slow.hub().oldest_resumable_zxid() > seen.zxid,
        "the ring no longer reaches back to the resume point"
    );
    let mut stream = stream_of(resume_on(&slow, seen.zxid)).await;
    // Nothing can come while the disk is stalled; an error must not either.
    let stalled = tokio::time::timeout(Duration::from_millis(300), async {
        while let Some(msg) = stream.next().await {
            let msg = msg.expect("no error while the disk is stalled");
            if let Some(pb::watch_response::Msg::Event(e)) = msg.msg {
                panic!("an event before the disk went on: {e:?}");
            }
        }
    })
    .await;
    assert!(
        stalled.is_err(),
        "the stream ended while the disk was stalled"
    );
    stall.send_replace(false);
    for want in created {
        assert_eq!(next_created(&mut stream).await, want);
    }
    for r in replicas.iter().chain([&slow]) {
        r.shutdown();
    }
}

/// A follower whose leader and other follower stop serves from its own tree only
/// until `leader_wait_ms_max` after it lost its leader: then its watch stream ends
/// with NOT_LEADER (it sent progress, and nothing else, for as long as it stayed
/// alone), and reads, keep-alive pings and new watches are refused with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_a_leader_ends_its_watches_and_refuses_reads() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let replicas = start_three(&dirs).await;
    let leader = leader_of(&replicas).await;
    let c = leader.submit(0, 0, create("/x")).await.unwrap();
    let alone = replicas.iter().find(|r| !r.is_leader()).unwrap().clone();
    alone
        .wait_applied(c.zxid, Duration::from_secs(10))
        .await
        .unwrap();
    let mut stream = stream_of(resume_on(&alone, c.zxid)).await;
    for r in replicas
        .iter()
        .filter(|r| r.server_id() != alone.server_id())
    {
        r.shutdown();
    }
    let ended = loop {
        let msg = tokio::time::timeout(Duration::from_secs(20), stream.next())
            .await
            .expect("the stream ends in time")
            .expect("with an error");
        match msg {
            Ok(pb::WatchResponse {
                msg: Some(pb::watch_response::Msg::Event(e)),
            }) => panic!("an event with no leader: {e:?}"),
            Ok(_) => {}
            Err(status) => break status,
        }
    };
    let not_leader =
        |status: &Status| status.metadata().get("concord-error-code").unwrap() == "NOT_LEADER";
    assert!(not_leader(&ended), "{ended:?}");
    let read = super::ready_for_read(&alone, 0, false).await.unwrap_err();
    assert!(not_leader(&read), "{read:?}");
    let ping = pb::KeepAliveRequest {
        session_id: 1,
        min_zxid: 0,
    };
    let caller = crate::security::Caller {
        identity: "admin".into(),
        access: crate::security::Access::Admin,
    };
    let refused = super::session::answer_ping(&alone, &caller, &ping)
        .await
        .unwrap_err();
    assert!(not_leader(&refused), "{refused:?}");
    let opened = resume_on(&alone, c.zxid).await.unwrap();
    assert!(
        matches!(&opened, Err(status) if not_leader(status)),
        "{:?}",
        opened.map(|_| ())
    );
    alone.shutdown();
}
