//! Watch resumes on a server that is behind its leader.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use concord_proto::v1 as pb;
use concord_proto::v1::watch_server::Watch as _;
use tokio_stream::StreamExt;
use tonic::Request;

use super::watch::WatchService;
use crate::replica::tests::{create, patient_byte_budgets, stalled_follower, StalledFollower};

/// A client that saw the leader's newest zxid resumes its watch on a follower that
/// has not caught up (its in-memory log is full while its snapshot is stalled): the
/// follower asks its leader for the commit point and catches up before it answers,
/// instead of calling the client's zxid "ahead of the commit point" (BAD_ARGUMENTS,
/// which ends the watch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_resumes_on_a_follower_behind_what_the_client_has_seen() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let StalledFollower {
        replicas,
        leader,
        slow,
        stall,
        last,
    } = stalled_follower(&patient_byte_budgets(&dirs)).await;
    assert!(slow.committed_zxid() < last, "the follower is behind");
    let service = WatchService::new(slow.clone());
    let request = pb::WatchRequest {
        path: "/".into(),
        recursive: true,
        start_zxid: Some(last),
        ..Default::default()
    };
    let opened = tokio::spawn(async move { service.watch(Request::new(request)).await });
    // The open waits for the follower to catch up; let it.
    stall.send_replace(false);
    let mut stream = tokio::time::timeout(Duration::from_secs(30), opened)
        .await
        .expect("the watch opened in time")
        .unwrap()
        .unwrap()
        .into_inner();
    let after = leader.submit(0, 0, create("/after")).await.unwrap();
    let event = loop {
        let msg = tokio::time::timeout(Duration::from_secs(20), stream.next())
            .await
            .expect("an event in time")
            .expect("the stream goes on")
            .unwrap();
        if let Some(pb::watch_response::Msg::Event(e)) = msg.msg {
            break e;
        }
    };
    assert_eq!((event.path.as_str(), event.zxid), ("/after", after.zxid));
    for r in replicas.iter().chain([&slow]) {
        r.shutdown();
    }
}
