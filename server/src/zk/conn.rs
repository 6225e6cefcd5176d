//! One connection of the ZooKeeper port: a four-letter word or the connect
//! handshake, then requests answered one at a time in the order sent, with the
//! notifications of the connection's watches in between.
//!
//! ```text
//!   first 4 bytes a four-letter word? ── yes ─▶ words::answer, close
//!        │ no
//!        ▼
//!   ConnectRequest ─▶ open a session (id 0), or reattach (id + password, the
//!        │            caller's own live session) ─▶ ConnectResponse
//!        ▼
//!   loop: frame ─▶ touch the session ─▶ ops::answer ─▶ drain the feed through the
//!         answer's zxid (notifications first) ─▶ reply
//!       | hub batch ─▶ notifications of this connection's watches
//!       | no leader for long ─▶ close (the client moves on, as from a ZooKeeper
//!         server that lost its quorum)
//! ```
//!
//! Watches: the first watch a connection sets registers one hub feed over its
//! namespace root; each batch is matched against the connection's own ZooKeeper
//! watch table (`watches`), so a notification goes out once per change, as
//! ZooKeeper's. A reply at zxid Z goes out only after every batch up to Z has been
//! matched: a client sees the event before any data that reflects it.
//!
//! What it must not do: answer out of order, hold more than one request at a time,
//! or keep a connection whose frames it cannot read (it closes it, counted).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use futures::FutureExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::api::shared::{Filter, View};
use crate::security::{ConnInfo, TeamLimits, WatchPermit};
use crate::txn::Zxid;
use crate::watch::{lock, WatchBatch, WatchReceiver, WatchSpec};

use super::door::Door;
use super::jute::{FrameDecoder, Jute, Writer};
use super::ops::Outcome;
use super::proto::{self, ConnectRequest, ConnectResponse, ReplyHeader};
use super::track::Tracked;
use super::watches::{self, Watches};

/// How long a new connection may take to send its connect request.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a reply waits for the hub to publish the zxid it reflects.
const PUBLISH_WAIT_MAX: Duration = Duration::from_secs(5);
/// What the watched paths of a connection may weigh, per watch it may hold.
const PATH_BYTES_PER_WATCH: usize = 256;

/// Why a connection ends (logged at debug: clients come and go).
#[derive(Debug)]
pub(super) enum End {
    /// The client closed it, or the socket failed.
    Gone,
    /// The session was closed (closeSession) or is gone.
    SessionOver,
    /// A frame the port refuses (counted in `concord_zookeeper_frames_refused`).
    BadFrame(String),
    /// This server cannot serve now (no leader); the client should move.
    Unavailable(String),
}

/// One connection's state once its session is set up.
pub(super) struct Conn {
    pub(super) door: Arc<Door>,
    /// Who the client is and what it sees as `/`.
    pub(super) view: View,
    /// The caller's team's per-server counters (rate, watches), if in a team.
    pub(super) limits: Option<Arc<TeamLimits>>,
    pub(super) session_id: u64,
    /// Whether the connection is TLS (whoAmI's scheme).
    pub(super) tls: bool,
    /// The highest zxid this connection has answered with: reads wait for it, so a
    /// client reads its own writes.
    pub(super) last_zxid: Zxid,
    /// The connection's ZooKeeper watches (shared with `Door`'s registry, for wchs).
    pub(super) track: Arc<Tracked>,
    /// The hub feed behind them, from the first watch on.
    feed: Option<Feed>,
    /// Requests answered (for the per-connection average in cons).
    requests: u64,
}

/// A connection's hub feed: every event under its namespace root.
struct Feed {
    rx: WatchReceiver,
    /// A batch read from the feed that a reply must not yet see (its zxid is above
    /// the reply's).
    held: Option<WatchBatch>,
    /// Counts the feed under the team's `watches_max` until the connection ends.
    _permit: Option<WatchPermit>,
    /// Maps event paths out and hides what the caller may not read.
    filter: Filter,
}

/// Serves one accepted connection until it ends.
pub(super) async fn run<S>(stream: S, info: ConnInfo, door: Arc<Door>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let metrics = door.replica.metrics().clone();
    metrics.zk_connections.inc();
    let (mut rd, mut wr) = tokio::io::split(stream);
    let mut buf = BytesMut::with_capacity(4096);
    let remote = info.remote_addr;
    let end = serve(&mut rd, &mut wr, &mut buf, info, door).await;
    metrics.zk_connections.dec();
    match end {
        End::BadFrame(why) => {
            metrics.zk_frames_refused.inc();
            tracing::info!(?remote, %why, "zookeeper connection closed: bad frame");
        }
        End::Unavailable(why) => {
            tracing::debug!(?remote, %why, "zookeeper connection closed: unavailable")
        }
        end => tracing::debug!(?remote, ?end, "zookeeper connection closed"),
    }
    let _ = wr.shutdown().await;
}

async fn serve<R, W>(
    rd: &mut R,
    wr: &mut W,
    buf: &mut BytesMut,
    info: ConnInfo,
    door: Arc<Door>,
) -> End
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let track = Arc::new(Tracked::new(
        info.remote_addr,
        Watches::new(watches::Limits {
            watches_max: door.watches_max,
            path_bytes_max: door.watches_max.saturating_mul(PATH_BYTES_PER_WATCH),
        }),
    ));
    let _registered = door.registry.add(track.clone());
    let first = tokio::time::timeout(CONNECT_TIMEOUT, read_at_least(rd, buf, 4)).await;
    match first {
        Ok(Ok(())) => {}
        Ok(Err(end)) => return end,
        Err(_) => return End::BadFrame("no connect request in time".into()),
    }
    if let Some(text) = door.four_letter_answer(&buf[..4]) {
        let _ = wr.write_all(text.as_bytes()).await;
        return End::Gone;
    }
    let mut decoder = FrameDecoder::new(door.frame_bytes_max);
    let frame = match tokio::time::timeout(CONNECT_TIMEOUT, next_frame(rd, buf, &mut decoder)).await
    {
        Ok(Ok(frame)) => frame,
        Ok(Err(end)) => return end,
        Err(_) => return End::BadFrame("no connect request in time".into()),
    };
    door.received(&track);
    let request = match super::jute::decode_all::<ConnectRequest>(&frame, "ConnectRequest") {
        Ok(r) => r,
        Err(e) => return End::BadFrame(e.to_string()),
    };
    let tls = info.tls;
    let caller = door.security.caller_on(Some(&info));
    let Ok(view) = View::for_caller(caller) else {
        // An identity no rule names: as a refused session, nothing more.
        let _ = send(wr, &door, &track, refused(&request)).await;
        return End::SessionOver;
    };
    let limits = view
        .caller
        .team()
        .and_then(|t| door.security.limits(&t.name).cloned());
    let (session_id, response) = match super::session::connect(&door, &view, &request).await {
        Ok(accepted) => accepted,
        Err(super::session::Refusal::Expired) => {
            let _ = send(wr, &door, &track, refused(&request)).await;
            return End::SessionOver;
        }
        Err(super::session::Refusal::Unavailable(why)) => return End::Unavailable(why),
    };
    let mut w = Writer::framed();
    response.encode(&mut w);
    if send(wr, &door, &track, w.into_frame()).await.is_err() {
        return End::Gone;
    }
    track.session_made(session_id, response.timeout_ms);
    let mut conn = Conn {
        track,
        requests: 0,
        tls,
        door: door.clone(),
        view,
        limits,
        session_id,
        last_zxid: Zxid::try_from(request.last_zxid_seen).unwrap_or(0),
        feed: None,
    };
    door.replica.metrics().zk_sessions.inc();
    let end = conn.serve(rd, wr, buf, &mut decoder).await;
    door.replica.metrics().zk_sessions.dec();
    end
}

/// The ConnectResponse that tells a client its session is gone (timeout 0, id 0),
/// as ZooKeeper answers a reattach it refuses.
fn refused(request: &ConnectRequest) -> Vec<u8> {
    let response = ConnectResponse {
        protocol_version: 0,
        timeout_ms: 0,
        session_id: 0,
        passwd: vec![0; 16].into(),
        read_only: request.read_only.map(|_| false),
    };
    let mut w = Writer::framed();
    response.encode(&mut w);
    w.into_frame()
}

impl Conn {
    async fn serve<R, W>(
        &mut self,
        rd: &mut R,
        wr: &mut W,
        buf: &mut BytesMut,
        decoder: &mut FrameDecoder,
    ) -> End
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let replica = self.door.replica.clone();
        loop {
            tokio::select! {
                frame = next_frame(rd, buf, decoder) => {
                    let frame = match frame {
                        Ok(f) => f,
                        Err(end) => return end,
                    };
                    self.door.received(&self.track);
                    if let Err(end) = self.request(wr, &frame).await {
                        return end;
                    }
                }
                batch = next_batch(&mut self.feed) => {
                    let frames = match batch {
                        Ok(batch) => self.notifications(&batch),
                        Err(end) => return end,
                    };
                    for frame in frames {
                        if send(wr, &self.door, &self.track, frame).await.is_err() {
                            return End::Gone;
                        }
                    }
                }
                lost = replica.cut_off() => return End::Unavailable(lost.to_string()),
            }
        }
    }

    /// Answers one request frame: the reply (after the notifications it must
    /// follow), or the end of the connection.
    async fn request<W: AsyncWrite + Unpin>(
        &mut self,
        wr: &mut W,
        frame: &[u8],
    ) -> Result<(), End> {
        let (header, request) = proto::decode_request(frame, super::ops::MULTI_OPS_MAX)
            .map_err(|e| End::BadFrame(e.to_string()))?;
        // Any request shows the client is there, as in ZooKeeper.
        if self.door.replica.keep_alive(self.session_id).is_none() {
            return Err(End::SessionOver);
        }
        let started = Instant::now();
        let answer = super::ops::answer(self, header.xid, header.op, request).await;
        let took = started.elapsed();
        self.door
            .replica
            .metrics()
            .zk_request(answer.op, answer.code.name(), took);
        self.requests += 1;
        self.door.registry.request_took(took);
        let (mut notes, reply, zxid, then) = match answer.outcome {
            Outcome::Reply { notes, frame, zxid } => (notes, frame, zxid, None),
            Outcome::ReplyThenEnd { frame, zxid, end } => (Vec::new(), frame, zxid, Some(end)),
            Outcome::End(end) => return Err(end),
        };
        self.last_zxid = self.last_zxid.max(zxid);
        self.track
            .answered(answer.op, header.xid, zxid, took, self.requests);
        notes.extend(self.drain_through(zxid).await?);
        for note in notes {
            send(wr, &self.door, &self.track, note)
                .await
                .map_err(|()| End::Gone)?;
        }
        send(wr, &self.door, &self.track, reply)
            .await
            .map_err(|()| End::Gone)?;
        match then {
            Some(end) => Err(end),
            None => Ok(()),
        }
    }

    /// The connection's ZooKeeper watches.
    pub(super) fn watches(&self) -> std::sync::MutexGuard<'_, Watches> {
        lock(&self.track.watches)
    }

    /// Makes sure the hub feed exists (before a read that sets a watch), so that
    /// every change after the read reaches the connection. Err: QUOTA_EXCEEDED
    /// (the team's `watches_max`) or the hub refused.
    pub(super) fn ensure_feed(&mut self) -> Result<(), String> {
        if self.feed.is_some() {
            return Ok(());
        }
        let permit = match &self.limits {
            Some(limits) => Some(limits.open_watch().map_err(|e| e.to_string())?),
            None => None,
        };
        let spec = WatchSpec {
            path: self.view.ns.root().to_string(),
            recursive: true,
            kinds: Vec::new(),
            once: false,
            with_data: false,
        };
        // From the tree's zxid (at most the hub's): a read made after this sees no
        // change the feed misses.
        let replica = &self.door.replica;
        let after = replica.read(|t| t.last_zxid());
        let rx = replica
            .hub()
            .register(spec, after)
            .map_err(|e| e.to_string())?;
        let filter = Filter {
            view: (!self.view.is_admin()).then(|| self.view.clone()),
            replica: replica.clone(),
        };
        self.feed = Some(Feed {
            rx,
            held: None,
            _permit: permit,
            filter,
        });
        Ok(())
    }

    /// Matches every batch up to `zxid` against the watches (the notifications to
    /// send first); a later batch is held for after the reply.
    pub(super) async fn drain_through(&mut self, zxid: Zxid) -> Result<Vec<Vec<u8>>, End> {
        let mut notes = Vec::new();
        let Some(feed) = self.feed.as_mut() else {
            return Ok(notes);
        };
        let hub = self.door.replica.hub().clone();
        let mut progress = hub.subscribe_progress();
        let deadline = tokio::time::Instant::now() + PUBLISH_WAIT_MAX;
        loop {
            let batch = match feed.held.take() {
                Some(b) => Some(b),
                None => match feed.rx.next().now_or_never() {
                    Some(Some(Ok(b))) => Some(b),
                    Some(Some(Err(e))) => return Err(End::Unavailable(e.to_string())),
                    Some(None) => return Err(End::Unavailable("the server is stopping".into())),
                    None => None,
                },
            };
            match batch {
                Some(b) if b.zxid <= zxid => {
                    notes.extend(notify(&mut lock(&self.track.watches), &feed.filter, &b));
                }
                Some(b) => {
                    feed.held = Some(b);
                    return Ok(notes);
                }
                None if hub.published_zxid() >= zxid => return Ok(notes),
                None => {
                    // The hub publishes right after the apply this reply reflects.
                    let waited = tokio::time::timeout_at(deadline, progress.changed()).await;
                    if !matches!(waited, Ok(Ok(()))) {
                        return Err(End::Unavailable("the watch hub fell behind".into()));
                    }
                }
            }
        }
    }

    /// The notifications of one batch from the feed.
    fn notifications(&mut self, batch: &WatchBatch) -> Vec<Vec<u8>> {
        match &self.feed {
            Some(feed) => notify(&mut lock(&self.track.watches), &feed.filter, batch),
            None => Vec::new(),
        }
    }
}

/// The notification frames `batch` sets off in `watches` (for the events the
/// caller may read, paths as it sees them).
fn notify(watches: &mut Watches, filter: &Filter, batch: &WatchBatch) -> Vec<Vec<u8>> {
    if watches.is_empty() {
        return Vec::new();
    }
    let grants = filter.grants();
    let mut out = Vec::new();
    for e in &batch.events {
        let Some(event_type) = watches.on_event(e.kind, &e.path) else {
            continue;
        };
        let Some(path) = filter.visible(&grants, &e.path) else {
            continue;
        };
        out.push(notification(batch.zxid, event_type.into(), &path));
    }
    out
}

/// One notification frame.
pub(super) fn notification(zxid: Zxid, event_type: i32, path: &str) -> Vec<u8> {
    let header = ReplyHeader {
        xid: proto::NOTIFICATION_XID,
        zxid: zxid as i64,
        err: 0,
    };
    let event = proto::WatcherEvent {
        event_type,
        state: i32::from(proto::KeeperState::SyncConnected),
        path: path.to_string(),
    };
    proto::reply_frame(&header, &event)
}

/// The next batch of the feed, or never if there is none (or one is held).
async fn next_batch(feed: &mut Option<Feed>) -> Result<WatchBatch, End> {
    match feed {
        Some(f) if f.held.is_none() => match f.rx.next().await {
            Some(Ok(b)) => Ok(b),
            Some(Err(e)) => Err(End::Unavailable(e.to_string())),
            None => Err(End::Unavailable("the server is stopping".into())),
        },
        Some(f) => {
            let held = f.held.take();
            held.ok_or(End::Gone)
        }
        None => std::future::pending().await,
    }
}

/// Reads until `buf` holds at least `n` bytes.
async fn read_at_least<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    n: usize,
) -> Result<(), End> {
    while buf.len() < n {
        match rd.read_buf(buf).await {
            Ok(0) | Err(_) => return Err(End::Gone),
            Ok(_) => {}
        }
    }
    Ok(())
}

/// The next whole frame's body. Cancel-safe: what was read stays in `buf`.
async fn next_frame<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    decoder: &mut FrameDecoder,
) -> Result<bytes::Bytes, End> {
    loop {
        match decoder.decode(buf) {
            Ok(Some(frame)) => return Ok(frame),
            Ok(None) => {}
            Err(e) => return Err(End::BadFrame(e.to_string())),
        }
        match rd.read_buf(buf).await {
            Ok(0) | Err(_) => return Err(End::Gone),
            Ok(_) => {}
        }
    }
}

/// Writes one frame; Err(()) once the client has gone.
async fn send<W: AsyncWrite + Unpin>(
    wr: &mut W,
    door: &Door,
    track: &Tracked,
    frame: Vec<u8>,
) -> Result<(), ()> {
    wr.write_all(&frame).await.map_err(|_| ())?;
    // A TLS stream holds what it was given until flushed.
    wr.flush().await.map_err(|_| ())?;
    door.sent(track);
    Ok(())
}
