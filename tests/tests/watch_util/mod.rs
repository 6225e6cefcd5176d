//! Helpers shared by the watch tests (t30, t31): open a raw `concord.v1.Watch` stream,
//! read it with deadlines, and write nodes while recording the events each write must
//! produce, so a test can compare what a watch delivered with what it should have.
//!
//! The model of events per write is written here from the watch contract, not from
//! the server's code: create P → CREATED P, CHILDREN_CHANGED parent(P); set P →
//! DATA_CHANGED P; delete P → DELETED P, CHILDREN_CHANGED parent(P); a Multi → its
//! ops' events in order, all at one zxid.

#![allow(dead_code, clippy::unwrap_used)]

use std::time::Duration;

use concord_proto::v1 as pb;
use concord_tests::Server;
use pb::watch_response::Msg;
use tonic::transport::Channel;

/// A raw watch stream.
pub type Stream = tonic::Streaming<pb::WatchResponse>;

/// Longest wait for any single watch message or condition.
pub const WAIT: Duration = Duration::from_secs(10);

/// Most messages any read loop here will consume before giving up.
const MESSAGES_MAX: usize = 100_000;

/// An event as the tests compare it: (zxid, kind, path).
pub type Key = (u64, pb::EventKind, String);

/// A watch request with a 50 ms progress interval (so `events_through` ends fast).
pub fn request(path: &str, recursive: bool) -> pb::WatchRequest {
    pb::WatchRequest {
        path: path.into(),
        recursive,
        progress_interval_ms: 50,
        ..Default::default()
    }
}

/// Opens a watch; panics if the server refuses it.
pub async fn open(server: &Server, req: pb::WatchRequest) -> Stream {
    let path = req.path.clone();
    match server.watch().await.watch(req).await {
        Ok(r) => r.into_inner(),
        Err(status) => panic!("watch {path:?} refused: {status:?}"),
    }
}

/// Opens a watch that must be refused; returns the refusal.
pub async fn refused(server: &Server, req: pb::WatchRequest) -> tonic::Status {
    let mut client = server.watch().await;
    match client.watch(req).await {
        Err(status) => status,
        Ok(r) => {
            // The refusal may also come as the stream's first item.
            let mut s = r.into_inner();
            match next(&mut s).await {
                Err(status) => status,
                Ok(msg) => panic!("watch accepted, first message {msg:?}"),
            }
        }
    }
}

/// The next message (None at the stream's clean end), or the stream's error.
/// Panics if nothing comes within `WAIT`.
pub async fn next(s: &mut Stream) -> Result<Option<Msg>, tonic::Status> {
    match tokio::time::timeout(WAIT, s.message()).await {
        Err(_) => panic!("no watch message within {WAIT:?}"),
        Ok(Err(status)) => Err(status),
        Ok(Ok(None)) => Ok(None),
        Ok(Ok(Some(r))) => Ok(Some(r.msg.expect("a WatchResponse without msg"))),
    }
}

/// The next message; panics on an error.
pub async fn next_msg(s: &mut Stream) -> Option<Msg> {
    next(s)
        .await
        .unwrap_or_else(|status| panic!("watch failed: {status:?}"))
}

/// Reads the `Started` message that opens every stream.
pub async fn started(s: &mut Stream) -> pb::WatchStarted {
    match next_msg(s).await {
        Some(Msg::Started(st)) => st,
        other => panic!("expected Started, got {other:?}"),
    }
}

/// Every event until a Progress at or past `zxid` proves the stream complete through
/// it (needs a short progress interval). Panics on anything else than Event/Progress.
pub async fn events_through(s: &mut Stream, zxid: u64) -> Vec<pb::WatchEvent> {
    let mut events = Vec::new();
    for _ in 0..MESSAGES_MAX {
        match next_msg(s).await {
            Some(Msg::Event(e)) => events.push(e),
            Some(Msg::Progress(p)) if p.zxid >= zxid => return events,
            Some(Msg::Progress(_)) => {}
            other => panic!("while reading events through {zxid:#x}: got {other:?}"),
        }
    }
    panic!("more than {MESSAGES_MAX} messages before {zxid:#x}");
}

/// Exactly `n` events (Progress skipped); panics on anything else.
pub async fn take_events(s: &mut Stream, n: usize) -> Vec<pb::WatchEvent> {
    let mut events = Vec::new();
    for _ in 0..MESSAGES_MAX {
        if events.len() == n {
            return events;
        }
        match next_msg(s).await {
            Some(Msg::Event(e)) => events.push(e),
            Some(Msg::Progress(_)) => {}
            other => panic!("after {} of {n} events: got {other:?}", events.len()),
        }
    }
    panic!("more than {MESSAGES_MAX} messages for {n} events");
}

pub fn key(e: &pb::WatchEvent) -> Key {
    let kind = pb::EventKind::try_from(e.kind).expect("a known event kind");
    (e.zxid, kind, e.path.clone())
}

pub fn keys(events: &[pb::WatchEvent]) -> Vec<Key> {
    events.iter().map(key).collect()
}

/// The parent of an absolute path ("/a" → "/").
pub fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// Whether a watch on `root` (recursive or not) concerns an event on `path`.
pub fn covers(root: &str, recursive: bool, path: &str) -> bool {
    if path == root {
        return true;
    }
    recursive && (root == "/" || path.starts_with(&format!("{root}/")))
}

/// Writes through a Tree client and records every event each write produces.
pub struct Writer {
    tree: pb::tree_client::TreeClient<Channel>,
    /// Every event of every write so far, in zxid order.
    pub log: Vec<Key>,
    /// The zxid of the newest write.
    pub last_zxid: u64,
}

impl Writer {
    pub async fn new(server: &Server) -> Writer {
        Writer {
            tree: server.tree().await,
            log: Vec::new(),
            last_zxid: 0,
        }
    }

    /// A new connection to `server` (after a restart), keeping the record.
    pub async fn reconnect(&mut self, server: &Server) {
        self.tree = server.tree().await;
    }

    fn record(&mut self, zxid: u64, events: Vec<(pb::EventKind, String)>) -> u64 {
        assert!(zxid > self.last_zxid, "zxids must grow");
        self.last_zxid = zxid;
        self.log
            .extend(events.into_iter().map(|(k, p)| (zxid, k, p)));
        zxid
    }

    /// Records the events of a change made elsewhere (a session close) at `zxid`.
    pub fn record_deletes(&mut self, zxid: u64, paths: &[&str]) {
        let events = paths.iter().flat_map(|p| delete_events(p)).collect();
        self.record(zxid, events);
    }

    pub async fn create(&mut self, path: &str, data: &str) -> u64 {
        let r = self
            .tree
            .create(pb::CreateRequest {
                path: path.into(),
                data: data.as_bytes().to_vec().into(),
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("create {path}: {e:?}"))
            .into_inner();
        self.record(r.header.unwrap().zxid, create_events(path))
    }

    pub async fn set(&mut self, path: &str, data: &str) -> u64 {
        let r = self
            .tree
            .set(pb::SetRequest {
                path: path.into(),
                data: data.as_bytes().to_vec().into(),
                version: -1,
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("set {path}: {e:?}"))
            .into_inner();
        let events = vec![(pb::EventKind::DataChanged, path.to_owned())];
        self.record(r.header.unwrap().zxid, events)
    }

    pub async fn delete(&mut self, path: &str) -> u64 {
        let r = self
            .tree
            .delete(pb::DeleteRequest {
                path: path.into(),
                version: -1,
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("delete {path}: {e:?}"))
            .into_inner();
        self.record(r.header.unwrap().zxid, delete_events(path))
    }

    /// Creates all `paths` in one Multi (one zxid).
    pub async fn multi_create(&mut self, paths: &[&str]) -> u64 {
        let ops = paths
            .iter()
            .map(|p| pb::Op {
                op: Some(pb::op::Op::Create(pb::CreateOp {
                    path: (*p).into(),
                    ..Default::default()
                })),
            })
            .collect();
        let r = self
            .tree
            .multi(pb::MultiRequest {
                ops,
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("multi {paths:?}: {e:?}"))
            .into_inner();
        let events = paths.iter().flat_map(|p| create_events(p)).collect();
        self.record(r.header.unwrap().zxid, events)
    }

    /// What a watch on `root` registered after `after` must deliver, in order.
    pub fn expected(&self, root: &str, recursive: bool, after: u64) -> Vec<Key> {
        self.log
            .iter()
            .filter(|(z, _, p)| *z > after && covers(root, recursive, p))
            .cloned()
            .collect()
    }
}

fn create_events(path: &str) -> Vec<(pb::EventKind, String)> {
    vec![
        (pb::EventKind::Created, path.to_owned()),
        (pb::EventKind::ChildrenChanged, parent(path).to_owned()),
    ]
}

fn delete_events(path: &str) -> Vec<(pb::EventKind, String)> {
    vec![
        (pb::EventKind::Deleted, path.to_owned()),
        (pb::EventKind::ChildrenChanged, parent(path).to_owned()),
    ]
}

/// The applied zxid and the ring's oldest resumable zxid, from Cluster.Status.
pub async fn status(server: &Server) -> pb::StatusResponse {
    server
        .cluster()
        .await
        .status(pb::StatusRequest::default())
        .await
        .unwrap()
        .into_inner()
}
