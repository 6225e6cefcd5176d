//! The `concord.v1.Watch` service: register a watch at a consistent point, then
//! stream its events (with an optional initial snapshot or a replay from a zxid) and
//! progress messages, ending with an error that says where to resume.
//!
//! ```text
//!  request ─▶ register (under the tree's read lock: no txn can slip between
//!             the snapshot / start zxid and the live registration)
//!          ─▶ task: Started, [SnapshotNode.., SnapshotDone], [replayed events..],
//!                   live events / Progress when idle ─▶ bounded channel ─▶ client
//! ```

use std::pin::Pin;
use std::time::Duration;

use concord_proto::v1 as pb;
use concord_proto::v1::watch_server::Watch;
use concord_proto::v1::ErrorCode;
use futures::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::convert::{check_path, stat};
use super::error::{bad_arguments, error};
use crate::replica::Replica;
use crate::tree::{Event, EventKind, NodeView};
use crate::txn::Zxid;
use crate::watch::{self, WatchBatch, WatchError, WatchReceiver, WatchSpec};

/// Messages buffered between a watch's task and its gRPC stream. The hub's own queue
/// (`watch_queue_txns_max`) is what bounds a slow consumer.
const STREAM_BUFFER_MAX: usize = 64;
/// Progress interval when the request leaves it at 0.
const PROGRESS_DEFAULT: Duration = Duration::from_millis(1000);
/// Shortest progress interval accepted.
const PROGRESS_MIN: Duration = Duration::from_millis(10);

pub struct WatchService {
    replica: Replica,
}

impl WatchService {
    pub fn new(replica: Replica) -> Self {
        WatchService { replica }
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchResponse, Status>> + Send>>;
type Tx = mpsc::Sender<Result<pb::WatchResponse, Status>>;

/// Where a new watch starts.
struct Start {
    receiver: WatchReceiver,
    /// The zxid the watch reports in `Started`.
    zxid: Zxid,
    /// Initial snapshot nodes (initial_snapshot only).
    snapshot: Option<Vec<(String, NodeView)>>,
    /// Events replayed from storage before the live ones (start_zxid only).
    replayed: Vec<WatchBatch>,
}

#[tonic::async_trait]
impl Watch for WatchService {
    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<WatchStream>, Status> {
        let r = request.into_inner();
        check_path(&r.path)?;
        let spec = WatchSpec {
            path: r.path.clone(),
            recursive: r.recursive,
            kinds: kinds(&r.kinds)?,
            once: r.once,
            with_data: r.with_data,
        };
        let interval = match r.progress_interval_ms {
            0 => PROGRESS_DEFAULT,
            ms => Duration::from_millis(u64::from(ms)).max(PROGRESS_MIN),
        };
        let start = match (r.start_zxid, r.initial_snapshot) {
            (Some(_), true) => {
                return Err(bad_arguments(
                    "start_zxid and initial_snapshot cannot be combined",
                ))
            }
            (Some(after), false) => self.resume(spec, after).await?,
            (None, snapshot) => self.register_at_current(spec, snapshot)?,
        };
        let (tx, rx) = mpsc::channel(STREAM_BUFFER_MAX);
        tokio::spawn(stream_watch(start, r.once, r.with_data, interval, tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

impl WatchService {
    /// Registers at the applied zxid; with `snapshot`, also takes the watched nodes as
    /// of that zxid (from an O(1) clone, walked outside the lock).
    fn register_at_current(&self, spec: WatchSpec, snapshot: bool) -> Result<Start, Status> {
        let (path, recursive) = (spec.path.clone(), spec.recursive);
        let (registered, tree) = self.replica.read(|t| {
            let registered = self.replica.hub().register(spec, t.last_zxid());
            (registered, snapshot.then(|| t.clone()))
        });
        let receiver = registered.map_err(watch_status)?;
        Ok(Start {
            zxid: receiver.start_zxid(),
            snapshot: tree.map(|t| t.walk(&path, recursive)),
            replayed: Vec::new(),
            receiver,
        })
    }

    /// Registers after `after`, replaying from the log what the history no longer has.
    async fn resume(&self, spec: WatchSpec, after: Zxid) -> Result<Start, Status> {
        let committed = self.replica.committed_zxid();
        if after > committed {
            return Err(bad_arguments(format!(
                "start_zxid {after:#x} is ahead of the commit point {committed:#x}"
            )));
        }
        let (replayed, receiver) =
            watch::open(self.replica.hub(), self.replica.storage(), spec, after)
                .await
                .map_err(watch_status)?;
        Ok(Start {
            zxid: after,
            snapshot: None,
            replayed,
            receiver,
        })
    }
}

/// Feeds one watch's stream until it ends, the client goes, or the server stops.
async fn stream_watch(start: Start, once: bool, with_data: bool, interval: Duration, tx: Tx) {
    let Start {
        mut receiver,
        zxid,
        snapshot,
        replayed,
    } = start;
    let started = pb::watch_response::Msg::Started(pb::WatchStarted {
        zxid,
        watch_id: receiver.id(),
    });
    if !send(&tx, started).await {
        return;
    }
    if let Some(nodes) = snapshot {
        for (path, node) in nodes {
            let msg = pb::watch_response::Msg::SnapshotNode(pb::SnapshotNode {
                path,
                data: if with_data {
                    node.data
                } else {
                    Default::default()
                },
                stat: Some(stat(&node.stat)),
            });
            if !send(&tx, msg).await {
                return;
            }
        }
        let done = pb::watch_response::Msg::SnapshotDone(pb::SnapshotDone { zxid });
        if !send(&tx, done).await {
            return;
        }
    }
    for batch in &replayed {
        if !send_batch(&tx, batch, once).await || (once && !batch.events.is_empty()) {
            return;
        }
    }
    loop {
        match tokio::time::timeout(interval, receiver.next()).await {
            Ok(Some(Ok(batch))) => {
                if !send_batch(&tx, &batch, once).await || once {
                    return;
                }
            }
            Ok(Some(Err(e))) => {
                let _ = tx.send(Err(watch_status(e))).await;
                return;
            }
            // The hub shut down: the server is stopping.
            Ok(None) => return,
            Err(_idle) => {
                // Progress doubles as a heartbeat: a gone client is noticed here.
                if let Some(progress) = receiver.idle_progress() {
                    let msg = pb::watch_response::Msg::Progress(pb::Progress { zxid: progress });
                    if !send(&tx, msg).await {
                        return;
                    }
                }
            }
        }
    }
}

/// Sends one message; false once the client has gone.
async fn send(tx: &Tx, msg: pb::watch_response::Msg) -> bool {
    tx.send(Ok(pb::WatchResponse { msg: Some(msg) }))
        .await
        .is_ok()
}

/// Sends a txn's events (only the first, for a one-shot watch).
async fn send_batch(tx: &Tx, batch: &WatchBatch, once: bool) -> bool {
    let take = if once { 1 } else { batch.events.len() };
    for e in batch.events.iter().take(take) {
        if !send(tx, pb::watch_response::Msg::Event(event(e))).await {
            return false;
        }
    }
    true
}

fn event(e: &Event) -> pb::WatchEvent {
    let kind = match e.kind {
        EventKind::Created => pb::EventKind::Created,
        EventKind::Deleted => pb::EventKind::Deleted,
        EventKind::DataChanged => pb::EventKind::DataChanged,
        EventKind::ChildrenChanged => pb::EventKind::ChildrenChanged,
    };
    pb::WatchEvent {
        zxid: e.zxid,
        kind: kind.into(),
        path: e.path.to_string(),
        data: e.data.clone(),
        prev_data: e.prev_data.clone(),
        stat: Some(stat(&e.stat)),
    }
}

/// The event kinds asked for; empty means all.
fn kinds(raw: &[i32]) -> Result<Vec<EventKind>, Status> {
    raw.iter()
        .map(|&k| match pb::EventKind::try_from(k) {
            Ok(pb::EventKind::Created) => Ok(EventKind::Created),
            Ok(pb::EventKind::Deleted) => Ok(EventKind::Deleted),
            Ok(pb::EventKind::DataChanged) => Ok(EventKind::DataChanged),
            Ok(pb::EventKind::ChildrenChanged) => Ok(EventKind::ChildrenChanged),
            _ => Err(bad_arguments(format!("unknown event kind {k}"))),
        })
        .collect()
}

pub(super) fn watch_status(e: WatchError) -> Status {
    match &e {
        WatchError::Compacted { oldest_zxid } => error(
            ErrorCode::ZxidCompacted,
            format!("{e}; resume from {oldest_zxid:#x} or later, or start with initial_snapshot"),
        ),
        WatchError::ReplayTooLarge { .. } => error(
            ErrorCode::ZxidCompacted,
            format!("{e}; start again with initial_snapshot"),
        ),
        WatchError::Future { .. } => bad_arguments(e),
        WatchError::SlowConsumer {
            last_delivered_zxid,
        } => error(
            ErrorCode::SlowConsumer,
            format!("{e}; resume with start_zxid={last_delivered_zxid}"),
        ),
        WatchError::Resynchronized {
            last_delivered_zxid,
            ..
        } => error(
            ErrorCode::Unavailable,
            format!("{e}; resume with start_zxid={last_delivered_zxid} on another server, or start with initial_snapshot"),
        ),
        WatchError::BadPath(_) => error(ErrorCode::BadPath, e),
        WatchError::Storage(_) => error(ErrorCode::Internal, e),
        WatchError::Closed => error(ErrorCode::Unavailable, e),
    }
}
