//! gRPC calls over one HTTP/2 connection, driven through the h2 crate (the one
//! hyper is built on), for tonic's generated clients.
//!
//! hyper's HTTP/2 client, under tonic's `Channel`, opens a request's stream in its
//! connection task and sends the body from a task of its own once the stream has a
//! flow-control window: every unary call goes out as two writes (HEADERS, then
//! DATA), the server wakes for each, and the client spawns a task per call. Here a
//! call's body, ready when the call is made (a unary request is one message), is
//! handed to h2 together with the headers, so HEADERS and DATA leave in one write. A
//! body that is not ready at once (a client stream) is sent from a task, as hyper
//! does.
//!
//! ```text
//!   tonic client ──call──▶ Direct: headers + the body's ready frames ──h2──▶ one write
//!                                  the rest of a streaming body ──task──┘
//!   connection task (spawned by `over`): drives h2; pings every `keepalive` and
//!   drops the connection when a ping goes unanswered that long; `is_closed` after
//! ```
//!
//! A `Direct` is one connection, never reconnected: the bench's clients each hold
//! one; a [`Link`] (the Rust SDK's client, a follower's forwarding to its leader)
//! makes a new one once it `is_closed`.
//!
//! What it must not do: hold more of a streaming body than one frame, or buffer a
//! call's frames past what h2's windows allow (h2 holds what waits for a window).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use http::uri::{Authority, Scheme, Uri};
use http_body::Frame;
use http_body_util::BodyExt;
use rustls::pki_types::ServerName;
use tonic::body::Body;

mod link;
mod target;
mod tls;

pub use link::{Link, CONNECTIONS_MAX, STREAMS_PER_CONNECTION};
pub use target::target;
pub use tls::client_tls;

/// Frames of a request body sent with its headers at most; the rest follow from a
/// task (a unary request is one frame).
const READY_FRAMES_MAX: usize = 16;
/// A stream's and the connection's receive windows: hyper's client defaults.
const STREAM_WINDOW_BYTES: u32 = 2 << 20;
const CONNECTION_WINDOW_BYTES: u32 = 5 << 20;

/// Any error of a call: h2's, or the request body's.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One HTTP/2 connection, as tonic's generated clients call it. Clones share it.
#[derive(Clone, Debug)]
pub struct Direct {
    send: h2::client::SendRequest<Bytes>,
    scheme: Scheme,
    authority: Authority,
    /// Set once the connection's task ended (closed by either side, broken, or a
    /// keep-alive ping unanswered), or a call found it going away.
    closed: Arc<AtomicBool>,
    /// Calls on the connection whose response has not ended yet (open streams,
    /// unary or long-lived): counted from the call until its response body ends or
    /// is dropped.
    streams: Arc<AtomicUsize>,
}

/// One call counted in its connection's open streams until dropped.
struct StreamCount(Arc<AtomicUsize>);

impl StreamCount {
    fn new(streams: &Arc<AtomicUsize>) -> StreamCount {
        streams.fetch_add(1, Ordering::AcqRel);
        StreamCount(streams.clone())
    }
}

impl Drop for StreamCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// TLS for a connection: the client configuration (ALPN h2) and the name the
/// server's certificate must carry.
pub type Tls = (Arc<rustls::ClientConfig>, ServerName<'static>);

impl Direct {
    /// Dials `authority` (`host:port`) over TCP without Nagle's delay (a small
    /// frame, a ping say, would otherwise wait for the ack of the one before), with
    /// TLS when `tls` is given, then runs `over` on it.
    pub async fn connect(
        authority: Authority,
        tls: Option<Tls>,
        keepalive: Option<Duration>,
    ) -> Result<Direct, BoxError> {
        let tcp = tokio::net::TcpStream::connect(authority.as_str()).await?;
        tcp.set_nodelay(true)?;
        let Some((config, name)) = tls else {
            return Ok(Direct::over(tcp, Scheme::HTTP, authority, keepalive).await?);
        };
        let stream = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await?;
        Ok(Direct::over(stream, Scheme::HTTPS, authority, keepalive).await?)
    }

    /// The HTTP/2 handshake on a connection made (`io`, plain or TLS: `scheme`
    /// says which), with hyper's client windows; spawns the connection's task,
    /// which ends when every clone is dropped, the connection breaks, or (with
    /// `keepalive`) a ping sent every `keepalive` goes unanswered that long.
    pub async fn over<IO>(
        io: IO,
        scheme: Scheme,
        authority: Authority,
        keepalive: Option<Duration>,
    ) -> Result<Direct, h2::Error>
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (send, mut conn) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW_BYTES)
            .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
            .handshake(io)
            .await?;
        let closed = Arc::new(AtomicBool::new(false));
        let pings = keepalive.zip(conn.ping_pong());
        let ended = closed.clone();
        tokio::spawn(async move {
            match pings {
                Some((every, mut ping_pong)) => {
                    tokio::select! {
                        _ = &mut conn => {}
                        () = keep_alive(&mut ping_pong, every) => {}
                    }
                }
                None => {
                    let _ = conn.await;
                }
            }
            ended.store(true, Ordering::Release);
        });
        Ok(Direct {
            send,
            scheme,
            authority,
            closed,
            streams: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Whether the connection takes no more calls (it ended, or a call found it told
    /// to go away while its streams finish): make a new one.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Whether `other` is a clone of this same connection.
    pub fn same(&self, other: &Direct) -> bool {
        Arc::ptr_eq(&self.closed, &other.closed)
    }

    /// The server dialled (`host:port`).
    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// Calls made on the connection whose response has not ended yet: the streams
    /// it holds open, long-lived ones (watches, keep-alives) and unary calls alike.
    pub fn open_streams(&self) -> usize {
        self.streams.load(Ordering::Acquire)
    }

    /// The most streams the server lets this connection hold open at once (its
    /// SETTINGS_MAX_CONCURRENT_STREAMS; unbounded until its settings arrive). h2
    /// holds a call beyond it until a stream ends.
    pub fn stream_limit(&self) -> usize {
        self.send.current_max_send_streams()
    }
}

/// Pings every `every`; returns once a ping goes unanswered for `every` (or pings
/// can no longer be sent).
async fn keep_alive(ping_pong: &mut h2::PingPong, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let answered = tokio::time::timeout(every, ping_pong.ping(h2::Ping::opaque())).await;
        if !matches!(answered, Ok(Ok(_))) {
            return;
        }
    }
}

/// What a call returns (`Direct`'s, and a service's that calls through one).
pub type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<http::Response<Received>, BoxError>> + Send>>;

impl tower_service::Service<http::Request<Body>> for Direct {
    type Response = http::Response<Received>;
    type Error = BoxError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Each call waits for its own clone of the handle to be ready (`call`).
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let (mut head, mut body) = request.into_parts();
        // tonic's generated clients send the path alone; HTTP/2 needs :scheme and
        // :authority too.
        let mut parts = head.uri.clone().into_parts();
        parts.scheme = Some(self.scheme.clone());
        parts.authority = Some(self.authority.clone());
        if let Ok(uri) = Uri::from_parts(parts) {
            head.uri = uri;
        }
        let send = self.send.clone();
        let closed = self.closed.clone();
        // Counted at once, so that a `Link` choosing a connection for the next call
        // sees this one.
        let counted = StreamCount::new(&self.streams);
        Box::pin(async move {
            // The frames of the body that are ready now (a few at most) go out with
            // the headers.
            let mut ready_now = Vec::new();
            let mut ended = false;
            while ready_now.len() < READY_FRAMES_MAX {
                let Some(frame) = body.frame().now_or_never() else {
                    break;
                };
                match frame {
                    None => {
                        ended = true;
                        break;
                    }
                    // A request has no trailers, and nothing else is defined.
                    Some(frame) => {
                        if let Ok(data) = frame?.into_data() {
                            ready_now.push(data);
                        }
                    }
                }
            }
            // Until h2 has taken the headers nothing of the request has left: a
            // connection that no longer takes requests (closed, or told to go away
            // while its streams finish) fails the call as never sent, which a caller
            // may safely try again, and is closed for new calls from then on, so that
            // a `Link` dials another at once.
            let refused = |e: h2::Error| {
                if e.is_go_away() || e.is_io() {
                    closed.store(true, Ordering::Release);
                }
                never_sent(e)
            };
            let mut send = send.ready().await.map_err(refused)?;
            let eos_with_headers = ended && ready_now.is_empty();
            let (response, mut stream) = send
                .send_request(http::Request::from_parts(head, ()), eos_with_headers)
                .map_err(refused)?;
            let last = ready_now.len().saturating_sub(1);
            for (i, data) in ready_now.into_iter().enumerate() {
                stream.send_data(data, ended && i == last)?;
            }
            if !ended {
                tokio::spawn(send_rest(body, stream));
            }
            Ok(response.await?.map(|recv| Received {
                recv,
                data_done: false,
                counted: Some(counted),
            }))
        })
    }
}

/// A call's failure before any of it left (a failed dial, or a connection that no
/// longer took it), as tonic's mark of a request that never left
/// (`tonic::ConnectError`): see `was_never_sent`.
pub(crate) fn never_sent(e: impl Into<BoxError>) -> BoxError {
    Box::new(tonic::ConnectError(e.into()))
}

/// Whether a failed call certainly never left this process: a `tonic::ConnectError`
/// in its source chain (a failed dial, or a connection that no longer took calls).
/// The SDK's and the forwarder's error classes read it as "not sent".
pub fn was_never_sent(status: &tonic::Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(err) = source {
        if err.downcast_ref::<tonic::ConnectError>().is_some() {
            return true;
        }
        source = err.source();
    }
    false
}

/// Sends the rest of a body that was not ready when its call was made (a client
/// stream), frame by frame as it comes, each once the stream has room for some of it.
async fn send_rest(mut body: Body, mut stream: h2::SendStream<Bytes>) {
    loop {
        match body.frame().await {
            None => {
                let _ = stream.send_data(Bytes::new(), true);
                return;
            }
            Some(Err(_)) => {
                stream.send_reset(h2::Reason::CANCEL);
                return;
            }
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                // h2 sends what the window allows and keeps the rest of this frame
                // until it allows more: at most one frame waits here.
                stream.reserve_capacity(data.len());
                while stream.capacity() == 0 {
                    match std::future::poll_fn(|cx| stream.poll_capacity(cx)).await {
                        Some(Ok(_)) => {}
                        _ => return,
                    }
                }
                if stream.send_data(data, false).is_err() {
                    return;
                }
            }
        }
    }
}

/// A response's body: its DATA frames (their flow-control window given back as
/// they are read), then its trailers (a gRPC status).
pub struct Received {
    recv: h2::RecvStream,
    data_done: bool,
    /// The call's place in its connection's open streams, given back once the body
    /// ended (or when it is dropped).
    counted: Option<StreamCount>,
}

impl http_body::Body for Received {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        if !self.data_done {
            match ready!(self.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = self.recv.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => {
                    self.counted = None;
                    return Poll::Ready(Some(Err(e)));
                }
                None => self.data_done = true,
            }
        }
        let trailers = ready!(self.recv.poll_trailers(cx));
        // The stream has ended either way.
        self.counted = None;
        match trailers {
            Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(e))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.recv.is_end_stream()
    }
}

/// For this crate's tests of gRPC clients against a bare h2 server.
#[cfg(test)]
mod testing {
    use bytes::Bytes;

    /// Answers a call with an empty message and status OK.
    pub fn answer_ok(respond: &mut h2::server::SendResponse<Bytes>) {
        let head = http::Response::builder()
            .header("content-type", "application/grpc")
            .body(())
            .expect("a valid response head");
        let Ok(mut send) = respond.send_response(head, false) else {
            return;
        };
        let _ = send.send_data(Bytes::from_static(&[0; 5]), false);
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
        let _ = send.send_trailers(trailers);
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use concord_proto::v1 as pb;
    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::mpsc;
    use tokio_stream::wrappers::UnboundedReceiverStream;

    use super::*;

    /// A TCP connection that counts the writes made on it.
    struct Counted {
        tcp: TcpStream,
        writes: Arc<AtomicUsize>,
    }

    impl AsyncRead for Counted {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Pin::new(&mut self.tcp).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for Counted {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            Pin::new(&mut self.tcp).poll_write(cx, buf)
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[io::IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
        }

        fn is_write_vectored(&self) -> bool {
            self.tcp.is_write_vectored()
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.tcp).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.tcp).poll_shutdown(cx)
        }
    }

    /// A bare HTTP/2 server on 127.0.0.1 that reports the length of every DATA frame
    /// it receives (and 0 at each request's end), then answers with an empty gRPC
    /// message and status OK.
    async fn server() -> (Authority, mpsc::UnboundedReceiver<usize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let authority = listener.local_addr().unwrap().to_string().parse().unwrap();
        let (frames, received) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut conn = h2::server::handshake(tcp).await.unwrap();
            while let Some(Ok((request, mut respond))) = conn.accept().await {
                let frames = frames.clone();
                tokio::spawn(async move {
                    let mut body = request.into_body();
                    while let Some(Ok(data)) = body.data().await {
                        let _ = body.flow_control().release_capacity(data.len());
                        let _ = frames.send(data.len());
                    }
                    let _ = frames.send(0);
                    crate::testing::answer_ok(&mut respond);
                });
            }
        });
        (authority, received)
    }

    /// The regression test of this module's reason to be: hyper's client wrote a
    /// unary request's HEADERS and its DATA apart, two writes per call.
    #[tokio::test]
    async fn a_unary_call_leaves_in_one_write() {
        let (authority, _received) = server().await;
        let tcp = TcpStream::connect(authority.as_str()).await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let writes = Arc::new(AtomicUsize::new(0));
        let counted = Counted {
            tcp,
            writes: writes.clone(),
        };
        let direct = Direct::over(counted, Scheme::HTTP, authority, None)
            .await
            .unwrap();
        let mut tree = pb::tree_client::TreeClient::new(direct);
        let get = || pb::GetRequest {
            path: "/a".into(),
            ..Default::default()
        };
        // The first call also settles the connection (SETTINGS and their acks).
        tree.get(get()).await.unwrap();
        for _ in 0..5 {
            let before = writes.load(Ordering::SeqCst);
            tree.get(get()).await.unwrap();
            assert_eq!(
                writes.load(Ordering::SeqCst) - before,
                1,
                "writes for one call"
            );
        }
    }

    /// A client stream's messages that come after the call was made are sent as
    /// they come, and its end ends the request.
    #[tokio::test]
    async fn a_client_stream_sends_what_comes_later() {
        let (authority, mut received) = server().await;
        let direct = Direct::connect(authority, None, None).await.unwrap();
        let mut sessions = pb::session_client::SessionClient::new(direct);
        let (later, pings) = mpsc::unbounded_channel();
        let ping = pb::KeepAliveRequest {
            session_id: 7,
            min_zxid: 0,
        };
        later.send(ping).unwrap();
        let call = tokio::spawn(async move {
            sessions
                .keep_alive(UnboundedReceiverStream::new(pings))
                .await
                .map(|_| ())
        });
        // Each message is a DATA frame: 5 bytes of gRPC framing and the message.
        assert!(next(&mut received).await > 5);
        later.send(ping).unwrap();
        assert!(next(&mut received).await > 5);
        drop(later);
        assert_eq!(next(&mut received).await, 0, "the end of the request");
        call.await.unwrap().unwrap();
    }

    /// What the server reports next, waited for at most 10 s.
    async fn next(received: &mut mpsc::UnboundedReceiver<usize>) -> usize {
        tokio::time::timeout(Duration::from_secs(10), received.recv())
            .await
            .expect("a report within 10 s")
            .expect("the server runs")
    }

    /// A call on a connection the server has closed fails as never sent (tonic's
    /// `ConnectError` in its source chain), so that it is safe to send again.
    #[tokio::test]
    async fn a_call_on_a_closed_connection_is_never_sent() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let authority: Authority = listener.local_addr().unwrap().to_string().parse().unwrap();
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut conn = h2::server::handshake(tcp).await.unwrap();
            conn.graceful_shutdown();
            while conn.accept().await.is_some() {}
        });
        let direct = Direct::connect(authority, None, None).await.unwrap();
        assert!(closes(&direct).await, "the server's close was not seen");
        let mut cluster = pb::cluster_client::ClusterClient::new(direct);
        let status = cluster.status(pb::StatusRequest {}).await.unwrap_err();
        assert!(was_never_sent(&status), "{status:?}");
    }

    /// A connection told to go away while one of its calls goes on takes no more
    /// calls: the first it refuses marks it closed, so that a `Link` dials anew
    /// rather than waiting for the old one to drain.
    #[tokio::test]
    async fn a_connection_going_away_is_closed_for_new_calls() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let authority: Authority = listener.local_addr().unwrap().to_string().parse().unwrap();
        let (took, taken) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut conn = h2::server::handshake(tcp).await.unwrap();
            // The first call is held open, unanswered, while the server goes away
            // (so the connection stays up until the client gives that call up).
            let held = conn.accept().await;
            let _ = took.send(());
            conn.graceful_shutdown();
            while conn.accept().await.is_some() {}
            drop(held);
        });
        let direct = Direct::connect(authority, None, None).await.unwrap();
        let mut held = pb::cluster_client::ClusterClient::new(direct.clone());
        let pending = tokio::spawn(async move { held.status(pb::StatusRequest {}).await });
        tokio::time::timeout(Duration::from_secs(10), taken)
            .await
            .expect("the server took the first call within 10 s")
            .unwrap();
        let mut cluster = pb::cluster_client::ClusterClient::new(direct.clone());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no call refused in 10 s"
            );
            // A call sent before the going-away reached the client is refused by
            // the server (a reset stream): try again.
            let status = cluster.status(pb::StatusRequest {}).await.unwrap_err();
            if was_never_sent(&status) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            !pending.is_finished(),
            "the held call ended: the connection closed"
        );
        assert!(
            direct.is_closed(),
            "still open for calls after refusing one"
        );
    }

    /// Waits up to 10 s for `direct` to report its connection closed.
    async fn closes(direct: &Direct) -> bool {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !direct.is_closed() {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }

    /// A peer that stops answering (it accepted, then never reads nor writes) is
    /// found out by the keep-alive pings: the connection closes and says so.
    #[tokio::test]
    async fn an_unanswered_ping_closes_the_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let authority: Authority = listener.local_addr().unwrap().to_string().parse().unwrap();
        let silent = tokio::spawn(async move { listener.accept().await.unwrap() });
        let direct = Direct::connect(authority, None, Some(Duration::from_millis(50)))
            .await
            .unwrap();
        let _held = silent.await.unwrap();
        assert!(
            closes(&direct).await,
            "still open after 10 s of unanswered pings"
        );
    }

    /// A connection that answers its pings stays open; one the peer closes is
    /// reported closed.
    #[tokio::test]
    async fn an_answering_peer_keeps_the_connection_until_it_closes_it() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let authority: Authority = listener.local_addr().unwrap().to_string().parse().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut conn = h2::server::handshake(tcp).await.unwrap();
            // Serving the connection answers its pings; it closes when told to.
            tokio::select! {
                _ = conn.accept() => {}
                _ = stopped => {}
            }
        });
        let direct = Direct::connect(authority, None, Some(Duration::from_millis(250)))
            .await
            .unwrap();
        // Four pings' time, each answered.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!direct.is_closed(), "closed while its pings were answered");
        stop.send(()).unwrap();
        assert!(
            closes(&direct).await,
            "still open 10 s after the peer closed it"
        );
    }
}
