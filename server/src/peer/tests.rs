//! The transport on real loopback sockets: two and three servers exchanging
//! messages, a peer that starts late, a peer restarted, full queues, refused senders.
//! Waits are on conditions with deadlines, never fixed sleeps.

use std::net::SocketAddr;
use std::time::Duration;
use tonic::service::Routes;

use bytes::Bytes;
use concord_proto::peer::v1::peer_transport_client::PeerTransportClient;
use concord_proto::peer::v1::Frame;
use tokio::net::TcpListener;
use tokio::time::{timeout, Instant};

use super::*;
use crate::config::Role;

/// Upper bound for anything that should happen "soon" on loopback.
const DEADLINE: Duration = Duration::from_secs(10);

type Inbox = InboundRx;

fn member(id: ServerId, peer_addr: SocketAddr) -> Member {
    Member {
        id,
        client_addr: SocketAddr::from(([127, 0, 0, 1], 1)).into(),
        peer_addr: peer_addr.into(),
        role: Role::Voter,
        peer_identity: None,
        zookeeper_addr: None,
    }
}

/// Binds `addr`, retrying until the deadline (a just-released port may lag).
async fn bind(addr: SocketAddr) -> TcpListener {
    let start = Instant::now();
    loop {
        match TcpListener::bind(addr).await {
            Ok(l) => return l,
            Err(e) if start.elapsed() > DEADLINE => panic!("bind {addr}: {e}"),
            Err(_) => tokio::task::yield_now().await,
        }
    }
}

fn config(id: ServerId, members: &[Member]) -> PeerConfig {
    PeerConfig {
        backoff_ms: 10,
        backoff_ms_max: 100,
        ..PeerConfig::new(id, 7, members.to_vec())
    }
}

/// Starts one transport per member on its own address; listeners bound first.
async fn ensemble(n: u64) -> (Vec<Member>, Vec<(PeerHandle, Inbox)>) {
    ensemble_with(n, |c| c).await
}

/// `ensemble`, each config changed by `tweak`.
async fn ensemble_with(
    n: u64,
    tweak: impl Fn(PeerConfig) -> PeerConfig,
) -> (Vec<Member>, Vec<(PeerHandle, Inbox)>) {
    ensemble_stored(n, tweak, |_| SnapshotStore::default()).await
}

/// `ensemble_with`, server `id` reading stored snapshots from `snapshots(id)`.
async fn ensemble_stored(
    n: u64,
    tweak: impl Fn(PeerConfig) -> PeerConfig,
    snapshots: impl Fn(u64) -> SnapshotStore,
) -> (Vec<Member>, Vec<(PeerHandle, Inbox)>) {
    let mut listeners = Vec::new();
    for _ in 0..n {
        listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let members: Vec<Member> = (1..=n)
        .zip(&listeners)
        .map(|(id, l)| member(id, l.local_addr().unwrap()))
        .collect();
    let started = (1..=n)
        .zip(listeners)
        .map(|(id, l)| {
            let config = tweak(config(id, &members));
            PeerTransport::start(config, l, Routes::default(), snapshots(id)).unwrap()
        })
        .collect();
    (members, started)
}

/// One transport with no routes beside Deliver and no stored snapshots.
fn start(config: PeerConfig, listener: TcpListener) -> (PeerHandle, Inbox) {
    PeerTransport::start(
        config,
        listener,
        Routes::default(),
        SnapshotStore::default(),
    )
    .unwrap()
}

fn reset(session: u64) -> Message {
    Message::Reset { session }
}

fn envelope(to: ServerId, session: u64) -> Envelope {
    Envelope {
        to,
        msg: reset(session),
    }
}

/// The next message (lost streams are skipped).
async fn recv(inbox: &mut Inbox) -> (ServerId, Message) {
    loop {
        match timeout(DEADLINE, inbox.recv()).await {
            Ok(Some(Inbound::Message(from, msg))) => return (from, msg),
            Ok(Some(Inbound::StreamLost(_))) => continue,
            Ok(None) => panic!("inbox closed"),
            Err(_) => panic!("nothing received within {DEADLINE:?}"),
        }
    }
}

/// Polls `cond` until it holds or the deadline passes.
async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn t10_two_servers_exchange_in_order() {
    let (_, mut s) = ensemble(2).await;
    for n in 0..50 {
        s[0].0.send(envelope(2, n));
    }
    s[1].0.send(envelope(1, 99));
    for n in 0..50 {
        assert_eq!(recv(&mut s[1].1).await, (1, reset(n)));
    }
    assert_eq!(recv(&mut s[0].1).await, (2, reset(99)));
    let (a, b) = (s[0].0.metrics(), s[1].0.metrics());
    assert_eq!((a.sent, a.dropped, a.received), (50, 0, 1));
    assert_eq!((b.sent, b.dropped, b.received), (1, 0, 50));
    for (h, _) in &s {
        h.shutdown().await;
    }
}

#[tokio::test]
async fn t10_three_servers_every_pair() {
    let (_, mut s) = ensemble(3).await;
    for from in 1..=3u64 {
        for to in (1..=3u64).filter(|&to| to != from) {
            s[from as usize - 1].0.send(envelope(to, from * 10 + to));
        }
    }
    for to in 1..=3u64 {
        let inbox = &mut s[to as usize - 1].1;
        let mut got = vec![recv(inbox).await, recv(inbox).await];
        got.sort_by_key(|(from, _)| *from);
        let want: Vec<_> = (1..=3u64)
            .filter(|&from| from != to)
            .map(|from| (from, reset(from * 10 + to)))
            .collect();
        assert_eq!(got, want);
    }
    for (h, _) in &s {
        h.shutdown().await;
    }
}

#[tokio::test]
async fn t20_full_queue_drops_oldest_and_late_peer_gets_the_newest() {
    let b_addr = crate::test_env::free_addr();
    let a_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let members = [
        member(1, a_listener.local_addr().unwrap()),
        member(2, b_addr),
    ];
    let a_config = PeerConfig {
        queue_messages_max: 4,
        ..config(1, &members)
    };
    let (a, _a_inbox) = start(a_config, a_listener);
    for n in 1..=100 {
        a.send(envelope(2, n));
    }
    a.send(envelope(42, 0));
    a.send(envelope(1, 0));
    let m = a.metrics();
    assert_eq!((m.dropped, m.queued, m.sent), (96 + 2, 4, 0));
    wait_until("a failed connect", || a.metrics().reconnects >= 2).await;
    assert_eq!(a.metrics().sent, 0, "nothing sent while the peer is down");

    let (b, mut b_inbox) = start(config(2, &members), bind(b_addr).await);
    for n in 97..=100 {
        assert_eq!(recv(&mut b_inbox).await, (1, reset(n)));
    }
    assert_eq!(a.metrics().sent, 4);
    a.shutdown().await;
    b.shutdown().await;
    assert!(b_inbox.try_recv().is_err(), "only the four newest arrived");
}

#[tokio::test]
async fn t30_restarted_peer_is_reached_again() {
    let (members, mut s) = ensemble(2).await;
    let (b, mut b_inbox) = s.pop().unwrap();
    let (a, mut a_inbox) = s.pop().unwrap();
    a.send(envelope(2, 1));
    assert_eq!(recv(&mut b_inbox).await, (1, reset(1)));
    b.send(envelope(1, 1));
    assert_eq!(recv(&mut a_inbox).await, (2, reset(1)));

    b.shutdown().await;
    // a hears that b's stream to it ended (b itself, stopping, reports nothing).
    let lost = timeout(DEADLINE, a_inbox.recv()).await.unwrap();
    assert_eq!(lost, Some(Inbound::StreamLost(2)));
    b.send(envelope(1, 0));
    assert_eq!(b.metrics().dropped, 1, "send after shutdown is dropped");
    wait_until("a notices b is gone", || a.metrics().reconnects >= 1).await;

    let b_addr = members[1].peer_addr.socket_addr().unwrap();
    let (b2, mut b2_inbox) = start(config(2, &members), bind(b_addr).await);
    // Messages sent into the dying stream may be lost; keep sending until one lands.
    let start = Instant::now();
    let mut n = 1;
    let got = loop {
        assert!(start.elapsed() < DEADLINE, "restarted peer never reached");
        n += 1;
        a.send(envelope(2, n));
        match timeout(Duration::from_millis(50), b2_inbox.recv()).await {
            Ok(Some(Inbound::Message(from, msg))) => break (from, msg),
            Ok(Some(Inbound::StreamLost(_))) | Err(_) => continue,
            Ok(None) => panic!("inbox closed"),
        }
    };
    assert_eq!(got.0, 1);
    assert!(matches!(got.1, Message::Reset { session } if (2..=n).contains(&session)));
    a.shutdown().await;
    b2.shutdown().await;
}

/// Sends `frames` on a raw client stream to `addr`, as a stranger would.
async fn raw_deliver(addr: SocketAddr, frames: Vec<Frame>) -> Result<u64, tonic::Status> {
    let mut client = PeerTransportClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let reply = client.deliver(tokio_stream::iter(frames)).await?;
    Ok(reply.into_inner().frames_received)
}

#[tokio::test]
async fn t40_strangers_and_garbage_are_refused() {
    let (_, mut s) = ensemble(2).await;
    let (b, mut b_inbox) = s.pop().unwrap();
    let addr = b.local_addr();
    let frame = |from, to, cluster_id, payload: &[u8]| Frame {
        from,
        to,
        cluster_id,
        payload: Bytes::copy_from_slice(payload),
        more: false,
        protocol: PROTOCOL,
    };
    let hello = frame(1, 2, 7, b"");
    let cases = [
        (frame(99, 2, 7, b""), tonic::Code::PermissionDenied),
        (frame(2, 2, 7, b""), tonic::Code::PermissionDenied),
        (frame(1, 3, 7, b""), tonic::Code::FailedPrecondition),
        (frame(1, 2, 8, b""), tonic::Code::FailedPrecondition),
        (
            frame(1, 2, 7, b"\x01\xff\xff"),
            tonic::Code::InvalidArgument,
        ),
        (frame(3, 2, 7, b""), tonic::Code::PermissionDenied),
    ];
    for (bad, code) in cases {
        let err = raw_deliver(addr, vec![hello.clone(), bad.clone()]).await;
        assert_eq!(err.map_err(|e| e.code()), Err(code), "{bad:?}");
    }
    assert_eq!(b.metrics().rejected, 6);
    // A member's well-formed stream is accepted and its message delivered.
    let good = frame(1, 2, 7, &codec::encode(&reset(5)));
    assert_eq!(raw_deliver(addr, vec![hello, good]).await.unwrap(), 2);
    assert_eq!(recv(&mut b_inbox).await, (1, reset(5)));
    assert_eq!(b.metrics().received, 1);
    b.shutdown().await;
    s[0].0.shutdown().await;
}

/// `msg` as a member receives it that has opened no stream to its sender, so has
/// announced no protocol: in protocol 1's form (`codec::downgrade`).
fn unannounced(msg: Message) -> Message {
    codec::downgrade(msg, 0).expect("a message protocol 1 has")
}

/// A SNAP carrying `bytes` of snapshot.
fn snap(bytes: usize) -> Message {
    let data: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
    Message::ToLearner {
        session: 1,
        epoch: 1,
        seq: 1,
        body: crate::zab::LeaderMsg::Sync(crate::zab::SyncKind::Snap {
            zxid: 9,
            data: Bytes::from(data),
        }),
    }
}

#[tokio::test]
async fn t50_a_message_longer_than_a_frame_travels_in_pieces() {
    let small = |c: PeerConfig| PeerConfig {
        frame_bytes_max: 4096,
        message_bytes_max: 1 << 20,
        ..c
    };
    let (_, mut s) = ensemble_with(2, small).await;
    // A tree 50 frames long, then a message that fits one, then one too long.
    let big = snap(200_000);
    s[0].0.send(Envelope {
        to: 2,
        msg: big.clone(),
    });
    s[0].0.send(envelope(2, 5));
    s[0].0.send(Envelope {
        to: 2,
        msg: snap(2 << 20),
    });
    s[0].0.send(envelope(2, 6));
    assert_eq!(recv(&mut s[1].1).await, (1, unannounced(big)));
    assert_eq!(recv(&mut s[1].1).await, (1, reset(5)));
    assert_eq!(recv(&mut s[1].1).await, (1, reset(6)));
    let a = s[0].0.metrics();
    assert_eq!((a.sent, a.dropped), (3, 1), "the one too long was dropped");
    for (h, _) in &s {
        h.shutdown().await;
    }
}

/// A SNAP at `zxid` with `data` (empty: the core's SNAP of a stored snapshot).
fn snap_of(zxid: u64, data: &'static [u8]) -> Message {
    Message::ToLearner {
        session: 1,
        epoch: 1,
        seq: 1,
        body: crate::zab::LeaderMsg::Sync(crate::zab::SyncKind::Snap {
            zxid,
            data: Bytes::from_static(data),
        }),
    }
}

#[tokio::test]
async fn t53_a_snap_of_a_stored_snapshot_is_sent_with_the_bytes_read_from_storage() {
    use crate::storage::{MemStorage, Storage};
    let storage = Arc::new(MemStorage::new());
    storage.save_snapshot(9, b"the tree at 9").unwrap();
    let store = SnapshotStore(Some(storage.clone()));
    let (_, mut s) = ensemble_stored(
        2,
        |c| c,
        |id| match id {
            1 => store.clone(),
            _ => SnapshotStore::default(),
        },
    )
    .await;
    s[0].0.send(Envelope {
        to: 2,
        msg: snap_of(9, b""),
    });
    assert_eq!(
        recv(&mut s[1].1).await,
        (1, unannounced(snap_of(9, b"the tree at 9")))
    );
    // A snapshot gone from storage (never at 8): nothing is sent for it, the
    // stream ends, and the next stream carries what is queued after.
    s[0].0.send(Envelope {
        to: 2,
        msg: snap_of(8, b""),
    });
    let first = timeout(DEADLINE, s[1].1.recv())
        .await
        .expect("the stream ends");
    assert_eq!(
        first,
        Some(Inbound::StreamLost(1)),
        "sent without its snapshot"
    );
    s[0].0.send(envelope(2, 6));
    assert_eq!(recv(&mut s[1].1).await, (1, reset(6)));
    for (h, _) in &s {
        h.shutdown().await;
    }
}

#[tokio::test]
async fn t51_pieces_beyond_the_message_bound_end_the_stream() {
    let small = |c: PeerConfig| PeerConfig {
        frame_bytes_max: 4096,
        message_bytes_max: 10_000,
        ..c
    };
    let (_, mut s) = ensemble_with(2, small).await;
    let (b, _inbox) = s.pop().unwrap();
    let piece = |more| Frame {
        from: 1,
        to: 2,
        cluster_id: 7,
        payload: Bytes::from(vec![1u8; 4000]),
        more,
        protocol: PROTOCOL,
    };
    // Three pieces of 4000 bytes: 12,000 > 10,000.
    let frames = vec![piece(true), piece(true), piece(true), piece(false)];
    let err = raw_deliver(b.local_addr(), frames).await;
    assert_eq!(
        err.map_err(|e| e.code()),
        Err(tonic::Code::ResourceExhausted)
    );
    // A frame longer than frame_bytes_max is refused by the gRPC layer itself.
    let long = Frame {
        payload: Bytes::from(vec![1u8; 8192]),
        ..piece(false)
    };
    let err = raw_deliver(b.local_addr(), vec![long]).await;
    assert!(err.is_err(), "{err:?}");
    b.shutdown().await;
    s[0].0.shutdown().await;
}

#[tokio::test]
async fn t52_received_messages_wait_within_the_inbound_byte_bound() {
    let small = |c: PeerConfig| PeerConfig {
        inbound_bytes_max: 5000,
        ..c
    };
    let (_, mut s) = ensemble_with(2, small).await;
    for _ in 0..10 {
        s[0].0.send(Envelope {
            to: 2,
            msg: snap(2000),
        });
    }
    // Nobody reads server 2's inbox: two messages of about 2000 bytes fit its
    // 5000, the rest wait in the stream (and the sender's queue).
    let b = s[1].0.clone();
    wait_until("two received", || b.metrics().received >= 2).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(b.metrics().received, 2, "received past the byte bound");
    for _ in 0..10 {
        assert_eq!(recv(&mut s[1].1).await, (1, unannounced(snap(2000))));
    }
    for (h, _) in &s {
        h.shutdown().await;
    }
}

/// Whether the peer closed `socket` (EOF or an error) without waiting.
fn closed_now(socket: &tokio::net::TcpStream) -> bool {
    let mut byte = [0u8; 1];
    match socket.try_read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// Waits until the peer closed `socket`; returns the bytes it sent before.
async fn wait_closed(socket: &mut tokio::net::TcpStream) -> usize {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 256];
    let mut got = 0;
    let start = Instant::now();
    loop {
        let left = DEADLINE.saturating_sub(start.elapsed());
        match timeout(left, socket.read(&mut buf)).await {
            Err(_) => panic!("the listener never closed the connection"),
            Ok(Ok(0)) | Ok(Err(_)) => return got,
            Ok(Ok(n)) => got += n,
        }
    }
}

/// Waits until the listener sent something on `socket` (its HTTP/2 settings: the
/// connection was accepted and handed to the server).
async fn wait_served(socket: &tokio::net::TcpStream) {
    let start = Instant::now();
    loop {
        timeout(DEADLINE, socket.readable())
            .await
            .expect("never served")
            .unwrap();
        let mut byte = [0u8; 1];
        match socket.peek(&mut byte).await {
            Ok(n) if n > 0 => return,
            _ => assert!(start.elapsed() < DEADLINE, "never served"),
        }
    }
}

/// The peer listener's bounds: connections over `connections_max` are closed at
/// once, silent ones after `connection_idle_timeout_ms`; the members' own streams,
/// quiet for several idle timeouts (their own keep-alive turned off, so only the
/// listener's pings are read from them), stay up and carry messages.
#[tokio::test]
async fn t10_strangers_are_capped_and_idle_ones_closed_but_members_stay() {
    let idle = Duration::from_millis(800);
    let (_, mut s) = ensemble_with(2, |c| PeerConfig {
        connections_max: 4,
        connection_idle_timeout_ms: idle.as_millis() as u64,
        keepalive_ms: 600_000,
        ..c
    })
    .await;
    s[1].0.send(envelope(1, 1));
    assert_eq!(recv(&mut s[0].1).await, (2, reset(1)));
    s[0].0.send(envelope(2, 2));
    assert_eq!(recv(&mut s[1].1).await, (1, reset(2)));
    let reconnects = (s[0].0.metrics().reconnects, s[1].0.metrics().reconnects);

    // Member 2's stream holds one of server 1's four permits: three strangers fit,
    // the fourth is closed while the others are still open.
    let addr = s[0].0.local_addr();
    let mut strangers = Vec::new();
    for _ in 0..3 {
        let stranger = tokio::net::TcpStream::connect(addr).await.unwrap();
        wait_served(&stranger).await;
        strangers.push(stranger);
    }
    let mut extra = tokio::net::TcpStream::connect(addr).await.unwrap();
    let opened = Instant::now();
    assert_eq!(wait_closed(&mut extra).await, 0, "the extra was served");
    for stranger in &strangers {
        assert!(!closed_now(stranger), "a stranger under the cap was closed");
    }
    // Silent strangers are closed once the idle timeout passed.
    for stranger in &mut strangers {
        wait_closed(stranger).await;
    }
    assert!(opened.elapsed() >= idle, "{:?}", opened.elapsed());

    // The members' streams were quiet all along, longer than the idle timeout; they
    // were never closed and still carry messages.
    tokio::time::sleep(idle * 2).await;
    s[1].0.send(envelope(1, 3));
    assert_eq!(recv(&mut s[0].1).await, (2, reset(3)));
    s[0].0.send(envelope(2, 4));
    assert_eq!(recv(&mut s[1].1).await, (1, reset(4)));
    assert_eq!(
        (s[0].0.metrics().reconnects, s[1].0.metrics().reconnects),
        reconnects,
        "a member's stream was closed"
    );
    for (h, _) in &s {
        h.shutdown().await;
    }
}

/// A request body of gRPC-framed `Frame`s that records whether anything read it.
struct Probe {
    frames: std::collections::VecDeque<Bytes>,
    read: Arc<AtomicBool>,
}

impl Probe {
    fn new(frames: &[Frame]) -> (Probe, Arc<AtomicBool>) {
        let read = Arc::new(AtomicBool::new(false));
        let frames = frames
            .iter()
            .map(|f| {
                let message = prost::Message::encode_to_vec(f);
                let mut framed = vec![0u8];
                framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
                framed.extend_from_slice(&message);
                Bytes::from(framed)
            })
            .collect();
        let probe = Probe {
            frames,
            read: read.clone(),
        };
        (probe, read)
    }
}

impl http_body::Body for Probe {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        self.read.store(true, Ordering::SeqCst);
        let next = self
            .frames
            .pop_front()
            .map(|b| Ok(http_body::Frame::data(b)));
        std::task::Poll::Ready(next)
    }
}

/// The gRPC status a response carries, in its headers or its trailers.
async fn status_of<B>(response: http::Response<B>) -> tonic::Status
where
    B: http_body::Body + Unpin,
    B::Error: std::fmt::Display,
{
    if let Some(status) = tonic::Status::from_header_map(response.headers()) {
        return status;
    }
    let mut body = response.into_body();
    loop {
        let frame = std::future::poll_fn(|cx| {
            http_body::Body::poll_frame(std::pin::Pin::new(&mut body), cx)
        });
        match timeout(DEADLINE, frame).await.expect("the response ends") {
            Some(Ok(frame)) => {
                if let Some(status) = frame
                    .trailers_ref()
                    .and_then(tonic::Status::from_header_map)
                {
                    return status;
                }
            }
            Some(Err(e)) => panic!("response body: {e}"),
            None => panic!("a response without a gRPC status"),
        }
    }
}

/// Server 2's peer routes exactly as its listener serves them (the authorizer in
/// front of `Deliver`), on a connection described by `info`; what they hand the
/// runtime arrives on the returned channel.
struct Served {
    service: tonic::service::interceptor::InterceptedService<
        Routes,
        crate::security::peers::PeerAuthorizer,
    >,
    delivered: mpsc::Receiver<(Inbound, u32)>,
    handle: PeerHandle,
}

async fn serve_two() -> Served {
    let (members, mut s) = ensemble(3).await;
    let (handle, _) = s.remove(1);
    let (tx, delivered) = mpsc::channel(16);
    let bytes = Arc::new(Semaphore::new(1 << 20));
    let authorizer = crate::security::peers::PeerAuthorizer::new(&members, 2).unwrap();
    let beside = Routes::default();
    Served {
        service: inbound::routes(handle.shared.clone(), tx, bytes, beside, authorizer),
        delivered,
        handle,
    }
}

impl Served {
    /// Sends `frames` on one `Deliver` stream from a connection described by `info`;
    /// the stream's status and whether its body was read at all.
    async fn deliver(
        &mut self,
        info: crate::security::ConnInfo,
        frames: &[Frame],
    ) -> (tonic::Status, bool) {
        use tower_service::Service;
        let (body, read) = Probe::new(frames);
        let mut request = http::Request::builder()
            .method("POST")
            .uri("http://peer/concord.peer.v1.PeerTransport/Deliver")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(tonic::body::Body::new(body))
            .unwrap();
        request.extensions_mut().insert(info);
        std::future::poll_fn(|cx| {
            Service::<http::Request<tonic::body::Body>>::poll_ready(&mut self.service, cx)
        })
        .await
        .unwrap();
        let response = self.service.call(request).await.unwrap();
        let status = status_of(response).await;
        (status, read.load(Ordering::SeqCst))
    }

    /// The messages handed to the runtime so far (stream ends skipped).
    fn messages(&mut self) -> Vec<(ServerId, Message)> {
        let mut got = Vec::new();
        while let Ok((inbound, _)) = self.delivered.try_recv() {
            if let Inbound::Message(from, msg) = inbound {
                got.push((from, msg));
            }
        }
        got
    }
}

fn tls_conn(identity: &str) -> crate::security::ConnInfo {
    crate::security::ConnInfo {
        remote_addr: None,
        tls: true,
        cert_identity: Some(identity.into()),
    }
}

fn frame_to_2(from: ServerId, msg: Option<Message>) -> Frame {
    Frame {
        from,
        to: 2,
        cluster_id: 7,
        payload: msg.map_or_else(Bytes::new, |m| Bytes::from(codec::encode(&m))),
        more: false,
        protocol: PROTOCOL,
    }
}

/// On a TLS peer port the sender is the member its certificate names: a stranger's
/// certificate (the ensemble's CA, no member's identity) is refused before a byte
/// of its stream is read, and a member's certificate cannot speak for another
/// member; the member itself gets through.
#[tokio::test]
async fn t60_on_tls_the_certificate_names_the_sender() {
    let mut two = serve_two().await;
    let from_3 = [frame_to_2(3, None), frame_to_2(3, Some(reset(1)))];
    let (status, read) = two.deliver(tls_conn("concord-peer-9"), &from_3).await;
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    assert!(!read, "the stranger's stream was read");
    let (status, read) = two.deliver(tls_conn("concord-peer-2"), &from_3).await;
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "own identity");
    assert!(!read);
    // Member 1's certificate, frames claiming member 3: refused at the hello.
    let (status, _) = two.deliver(tls_conn("concord-peer-1"), &from_3).await;
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    assert!(status.message().contains("server 1's"), "{status:?}");
    // ... or mid-stream, after an honest hello.
    let switch = [frame_to_2(1, None), frame_to_2(3, Some(reset(2)))];
    let (status, _) = two.deliver(tls_conn("concord-peer-1"), &switch).await;
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    assert_eq!(two.messages(), [], "a refused frame reached the runtime");
    // Member 3's own certificate: delivered, as from 3.
    let (status, _) = two.deliver(tls_conn("concord-peer-3"), &from_3).await;
    assert_eq!(status.code(), tonic::Code::Ok, "{status:?}");
    assert_eq!(two.messages(), [(3, reset(1))]);
    two.handle.shutdown().await;
}

/// Without TLS on the peer port (a loopback ensemble) nothing changes: the
/// frames' ids are believed, a non-member's are refused as before.
#[tokio::test]
async fn t61_on_plain_text_the_frames_name_the_sender() {
    let mut two = serve_two().await;
    let plain = crate::security::ConnInfo::default();
    let from_3 = [frame_to_2(3, None), frame_to_2(3, Some(reset(4)))];
    let (status, _) = two.deliver(plain.clone(), &from_3).await;
    assert_eq!(status.code(), tonic::Code::Ok, "{status:?}");
    assert_eq!(two.messages(), [(3, reset(4))]);
    let (status, _) = two.deliver(plain, &[frame_to_2(9, None)]).await;
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    two.handle.shutdown().await;
}

/// An ACKEPOCH goes to each member in the protocol that member announced on its own
/// stream: without the epoch to one that announced nothing (a server older than
/// protocol 2, whose frames have no `protocol`), with it to one that announced 2.
#[tokio::test]
async fn t70_an_ackepoch_is_sent_in_the_protocol_its_receiver_announced() {
    let (_, mut s) = ensemble(2).await;
    let (b, _b_inbox) = s.pop().unwrap();
    let (a, mut a_inbox) = s.pop().unwrap();
    let ack = |epoch| Message::ToLeader {
        session: 3,
        seq: 1,
        body: crate::zab::LearnerMsg::AckEpoch {
            epoch,
            current_epoch: 2,
            last_zxid: 9,
            counts: true,
        },
    };
    let hello_from_1 = |protocol| Frame {
        protocol,
        ..frame_to_2(1, None)
    };
    // Server 1 as an older server: its hello carries no protocol.
    raw_deliver(b.local_addr(), vec![hello_from_1(0)])
        .await
        .unwrap();
    assert_eq!(b.lowest_protocol(), Some(1), "no protocol announced is 1");
    b.send(Envelope { to: 1, msg: ack(4) });
    let unnamed = Message::ToLeader {
        session: 3,
        seq: 1,
        body: crate::zab::LearnerMsg::AckEpochV1 {
            current_epoch: 2,
            last_zxid: 9,
            counts: true,
        },
    };
    assert_eq!(recv(&mut a_inbox).await, (2, unnamed));
    // Server 1 upgraded: it announces protocol 2 and gets the epoch.
    raw_deliver(b.local_addr(), vec![hello_from_1(PROTOCOL)])
        .await
        .unwrap();
    assert_eq!(b.lowest_protocol(), Some(PROTOCOL));
    b.send(Envelope { to: 1, msg: ack(5) });
    assert_eq!(recv(&mut a_inbox).await, (2, ack(5)));
    b.shutdown().await;
    a.shutdown().await;
}
