//! The `concord.v1.Watch` service: fix a watch's start point, then stream its events
//! (with an optional initial snapshot or a replay from a zxid) and progress messages,
//! ending with an error that says where to resume.
//!
//! ```text
//!  request ─▶ start point z (the applied zxid, or start_zxid); with initial_snapshot,
//!             an O(1) clone of the tree at z taken under the tree's read lock
//!          ─▶ task: Started, [SnapshotNode.. one node at a time, SnapshotDone],
//!                   WatchFeed from z (storage replay / history ring in bounded chunks,
//!                   then live), Progress when idle ─▶ small channel ─▶ client
//! ```
//!
//! Namespaces and ACLs: a team's watch path is mapped into its root, registering
//! needs `r` on it, and every event and snapshot node is checked at delivery against
//! the grant table of that moment (a revoked grant silences an open watch at once)
//! and mapped out; one the caller may not read is never sent.
//!
//! Memory per stream: the feed's one chunk and queue (both charged to the watch
//! budget), the batch being sent, and `STREAM_BUFFER_MAX` messages. The task ends as
//! soon as the client's stream is gone (the channel's `closed()`), whatever the
//! progress interval: that drops the watch's registration at once (and gives the
//! watch back to its team's `watches_max` on this server).

use std::pin::Pin;
use std::time::Duration;

use concord_proto::v1 as pb;
use concord_proto::v1::watch_server::Watch;
use concord_proto::v1::ErrorCode;
use futures::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::authz::View;
use super::convert::{check_path, stat};
use super::error::{bad_arguments, error};
use super::READ_WAIT_MAX;
use crate::replica::Replica;
use crate::security::{Grants, Perms};
use crate::tree::{Event, EventKind};
use crate::txn::Zxid;
use crate::watch::{self, SnapshotWalk, WatchBatch, WatchError, WatchFeed, WatchSpec};

/// Messages buffered between a watch's task and its gRPC stream: few, since each may
/// carry a node's data twice; the feed's bounded, budgeted queue is what holds a slow
/// consumer's backlog.
const STREAM_BUFFER_MAX: usize = 4;
/// Progress interval when the request leaves it at 0.
const PROGRESS_DEFAULT: Duration = Duration::from_millis(1000);
/// Shortest progress interval accepted (also for Election.Observe).
pub(super) const PROGRESS_MIN: Duration = Duration::from_millis(10);

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
    feed: WatchFeed,
    /// The zxid the watch reports in `Started`.
    zxid: Zxid,
    /// The initial snapshot's walk (initial_snapshot only).
    snapshot: Option<SnapshotWalk>,
}

#[tonic::async_trait]
impl Watch for WatchService {
    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<WatchStream>, Status> {
        let view = View::of(&request)?;
        // The caller's team may hold `watches_max` watches on this server; the
        // permit goes with the stream's task and is given back when it ends.
        let permit = crate::security::team_limits(&request)
            .map(|limits| limits.open_watch())
            .transpose()
            .map_err(|e| error(ErrorCode::QuotaExceeded, e))?;
        let r = request.into_inner();
        check_path(&r.path)?;
        let at = view.path_in(&r.path)?;
        self.replica
            .read(|t| view.check(t.grants(), &at, Perms::READ))?;
        let spec = WatchSpec {
            path: at,
            recursive: r.recursive,
            kinds: kinds(&r.kinds)?,
            // A team caller's one-shot watch stays registered until an event it may
            // read is sent (this stream then ends it): a hidden first event must not
            // use it up.
            once: r.once && view.is_admin(),
            with_data: r.with_data,
        };
        let interval = match r.progress_interval_ms {
            0 => PROGRESS_DEFAULT,
            ms => Duration::from_millis(u64::from(ms)).max(PROGRESS_MIN),
        };
        if r.start_zxid.is_some() && r.initial_snapshot {
            return Err(bad_arguments(
                "start_zxid and initial_snapshot cannot be combined",
            ));
        }
        self.replica.in_touch().await?;
        let start = match r.start_zxid {
            Some(after) => self.resume(spec, after).await?,
            None => self.start_at_current(spec, r.initial_snapshot),
        };
        let (tx, rx) = mpsc::channel(STREAM_BUFFER_MAX);
        let filter = Filter {
            view: (!view.is_admin()).then_some(view),
            replica: self.replica.clone(),
        };
        let replica = self.replica.clone();
        tokio::spawn(async move {
            let _permit = permit;
            // The client may go at any time, also while the task waits on an idle
            // watch: end (and unregister) at once, not at the next send. A server
            // without a leader for long ends the stream (what it sends may be stale):
            // the client resumes on another server from the last zxid it got.
            tokio::select! {
                () = stream_watch(start, &filter, r.once, r.with_data, interval, &tx) => {}
                () = tx.closed() => {}
                lost = replica.cut_off() => {
                    tokio::select! {
                        _ = tx.send(Err(lost.into())) => {}
                        () = tx.closed() => {}
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

impl WatchService {
    /// Starts at the applied zxid; with `snapshot`, also keeps the tree as of that
    /// zxid (an O(1) clone, walked later outside the lock).
    fn start_at_current(&self, spec: WatchSpec, snapshot: bool) -> Start {
        let (path, recursive) = (spec.path.clone(), spec.recursive);
        let (zxid, tree) = self
            .replica
            .read(|t| (t.last_zxid(), snapshot.then(|| t.clone())));
        Start {
            feed: self.feed(spec, zxid),
            zxid,
            snapshot: tree.map(|t| SnapshotWalk::new(t, &path, recursive)),
        }
    }

    /// Starts after `after`: the feed replays from the history or the log what the
    /// client has not seen. A point neither reaches back to fails the call at once.
    async fn resume(&self, spec: WatchSpec, after: Zxid) -> Result<Start, Status> {
        let mut committed = self.replica.committed_zxid();
        if after > committed {
            // This server may be behind its leader (a client moving to it after a
            // failover has seen more): the leader's commit point decides, and this
            // server catches up to it first. No leader: a retry-safe error.
            committed = committed.max(self.replica.linearize(READ_WAIT_MAX).await?);
        }
        if after > committed {
            return Err(bad_arguments(format!(
                "start_zxid {after:#x} is ahead of the commit point {committed:#x}"
            )));
        }
        // Known committed is not yet applied (and published to the hub) when this
        // server heard of the commit before its own fsync of the txn ended: the feed
        // starts from `after` once it is.
        self.replica.wait_applied(after, READ_WAIT_MAX).await?;
        watch::check_resumable(self.replica.hub(), self.replica.storage(), after)
            .await
            .map_err(watch_status)?;
        Ok(Start {
            feed: self.feed(spec, after),
            zxid: after,
            snapshot: None,
        })
    }

    fn feed(&self, spec: WatchSpec, after: Zxid) -> WatchFeed {
        WatchFeed::new(self.replica.hub(), self.replica.storage(), spec, after)
    }
}

/// What a stream may deliver: everything (an admin), or what a team caller may read,
/// checked against the grants at delivery and mapped into its namespace.
pub(crate) struct Filter {
    /// None for an admin.
    pub(crate) view: Option<View>,
    pub(crate) replica: Replica,
}

impl Filter {
    /// The grant table now: one O(1) clone for a whole batch, outside the tree's lock.
    pub(crate) fn grants(&self) -> Grants {
        match self.view {
            Some(_) => self.replica.read(|t| t.grants().clone()),
            None => Grants::new(),
        }
    }

    /// The client's path of tree path `path` if the caller may read it under
    /// `grants` (None: hidden).
    pub(crate) fn visible(&self, grants: &Grants, path: &str) -> Option<String> {
        let Some(view) = &self.view else {
            return Some(path.to_string());
        };
        let out = view.ns.path_out(path)?;
        grants
            .effective(&view.caller, path)
            .contains(Perms::READ)
            .then_some(out)
    }
}

/// Feeds one watch's stream until it ends or the server stops (the caller also ends
/// it when the client goes).
async fn stream_watch(
    start: Start,
    filter: &Filter,
    once: bool,
    with_data: bool,
    interval: Duration,
    tx: &Tx,
) {
    let Start {
        mut feed,
        zxid,
        snapshot,
    } = start;
    let started = pb::watch_response::Msg::Started(pb::WatchStarted {
        zxid,
        watch_id: feed.id(),
    });
    if !send(tx, started).await {
        return;
    }
    if let Some(walk) = snapshot {
        if !send_snapshot(tx, filter, walk, with_data).await {
            return;
        }
        let done = pb::watch_response::Msg::SnapshotDone(pb::SnapshotDone { zxid });
        if !send(tx, done).await {
            return;
        }
    }
    loop {
        // `next` is cancel-safe (a storage read in flight is kept for the next call);
        // Progress goes out only once the feed is live and idle.
        match tokio::time::timeout(interval, feed.next()).await {
            Ok(Some(Ok(batch))) => match send_batch(tx, filter, &batch, once).await {
                Sent::Gone => return,
                Sent::Some if once => return,
                _ => {}
            },
            Ok(Some(Err(e))) => {
                let _ = tx.send(Err(watch_status(e))).await;
                return;
            }
            // A once watch fired, or the hub shut down: the server is stopping.
            Ok(None) => return,
            Err(_idle) => {
                if let Some(progress) = feed.idle_progress() {
                    let msg = pb::watch_response::Msg::Progress(pb::Progress { zxid: progress });
                    if !send(tx, msg).await {
                        return;
                    }
                }
            }
        }
    }
}

/// Sends the initial snapshot one node per message as the walk finds them (never
/// the whole list); false once the client has gone.
async fn send_snapshot(tx: &Tx, filter: &Filter, walk: SnapshotWalk, with_data: bool) -> bool {
    // Checked against the grants when the walk starts.
    let grants = filter.grants();
    for (path, node) in walk {
        let Some(path) = filter.visible(&grants, &path) else {
            continue;
        };
        let msg = pb::watch_response::Msg::SnapshotNode(pb::SnapshotNode {
            path,
            data: if with_data {
                node.data
            } else {
                Default::default()
            },
            stat: Some(stat(&node.stat)),
        });
        if !send(tx, msg).await {
            return false;
        }
    }
    true
}

/// Sends one message; false once the client has gone.
async fn send(tx: &Tx, msg: pb::watch_response::Msg) -> bool {
    tx.send(Ok(pb::WatchResponse { msg: Some(msg) }))
        .await
        .is_ok()
}

/// What `send_batch` did.
enum Sent {
    /// The client has gone.
    Gone,
    /// Every event was hidden from the caller.
    None,
    /// At least one event went out.
    Some,
}

/// Sends a txn's events the caller may read (only the first, for a one-shot watch).
async fn send_batch(tx: &Tx, filter: &Filter, batch: &WatchBatch, once: bool) -> Sent {
    let grants = filter.grants();
    let mut sent = Sent::None;
    for e in batch.events.iter() {
        let Some(path) = filter.visible(&grants, &e.path) else {
            continue;
        };
        let mut msg = event(e);
        msg.path = path;
        if !send(tx, pb::watch_response::Msg::Event(msg)).await {
            return Sent::Gone;
        }
        sent = Sent::Some;
        if once {
            break;
        }
    }
    sent
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
        WatchError::Busy { .. } => error(
            ErrorCode::Unavailable,
            format!("{e}; retry later, or start with initial_snapshot"),
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
