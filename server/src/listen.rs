//! Accepting TCP connections for a gRPC server (the client port and the peer port):
//! a cap on open connections, an idle timeout, and a back-off when the process is
//! out of file descriptors, so a flood of idle sockets neither locks clients out for
//! good nor makes the accept loop spin.
//!
//! ```text
//!   listener.accept() ─ok─▶ permit free? ─yes─▶ Conn { socket, permit, idle timer } ─▶ tonic
//!        │                      └─no──▶ closed at once (counted, logged now and then)
//!        └─EMFILE/ENFILE/...──▶ sleep ACCEPT_BACKOFF, retry (the socket waits in the backlog)
//! ```
//!
//! A `Conn` reports a timeout error to hyper when nothing has been read from it for
//! `idle_timeout`; hyper then closes it, which frees the fd and the permit. A live
//! HTTP/2 peer always reads as busy: the server's keep-alive pings (sent after
//! `keepalive_interval` without input, shorter than the idle timeout) are answered.
//!
//! With TLS (`incoming_tls`), each accepted connection's handshake runs in a task
//! of its own, bounded by the handshake timeout and holding the connection's
//! permit, so a slow or silent client never holds up the accept loop:
//!
//! ```text
//!   accept ─▶ Conn ─spawn─▶ handshake (≤ tls_handshake_timeout_ms) ─ok─▶ TlsConn ─▶ tonic
//!                                 └─failed/timed out──▶ closed (logged now and then)
//! ```
//!
//! What it must not do: block the runtime, or hold a permit past a connection's close.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tonic::transport::server::Connected;

use crate::security::ConnInfo;

/// Pause before accepting again after an error that is not one connection's own
/// (out of file descriptors, out of memory): the pending socket stays in the
/// backlog, so retrying at once would spin.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Least time between two warnings about refused connections or accept errors.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// File descriptors kept for everything but client connections (storage, the
/// runtime, the peer port, logs) when the connection cap is fitted to the
/// open-file limit.
pub const FDS_RESERVED: u64 = 64;

/// Connections the kernel queues for `accept` (tokio's default is 128: a burst of
/// reconnecting clients, after a failover, would see SYNs dropped and a 1 s retry).
pub const LISTEN_BACKLOG: u32 = 1024;

/// Binds `addr` for a listener with `LISTEN_BACKLOG` (and SO_REUSEADDR on Unix, so a
/// restart can bind the port of connections still in TIME_WAIT, as tokio does).
pub fn bind(addr: std::net::SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// The bounds a listener enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenLimits {
    /// Open connections at most; more are accepted and closed at once.
    pub connections_max: usize,
    /// A connection from which nothing was read for this long is closed.
    pub idle_timeout: Duration,
}

/// Raises the soft open-file limit to the hard one; returns the soft limit in force.
pub fn raise_open_files_limit() -> io::Result<u64> {
    // On Linux an unlimited hard limit cannot be the soft one (nr_open caps it):
    // fall back to the kernel's default nr_open.
    rlimit::increase_nofile_limit(u64::MAX).or_else(|_| rlimit::increase_nofile_limit(1 << 20))
}

/// `wanted`, lowered so that the connections and `reserved` other files fit under
/// the soft open-file limit (`None`: the limit is unknown, keep `wanted`).
pub fn fit_to_open_files(wanted: usize, soft_limit: Option<u64>, reserved: u64) -> usize {
    match soft_limit {
        Some(limit) => {
            let room = usize::try_from(limit.saturating_sub(reserved)).unwrap_or(usize::MAX);
            wanted.min(room.max(1))
        }
        None => wanted,
    }
}

/// The soft open-file limit, if the platform tells.
pub fn open_files_limit() -> Option<u64> {
    rlimit::Resource::NOFILE.get().ok().map(|(soft, _)| soft)
}

/// The accepted connections of `listener`, as a stream for tonic's
/// `serve_with_incoming_shutdown`. It never yields an error: errors are handled
/// (logged, backed off) here. `what` names the port in logs.
pub fn incoming(
    listener: TcpListener,
    limits: ListenLimits,
    what: &'static str,
) -> impl Stream<Item = Result<Conn, io::Error>> + Send {
    let acceptor = Acceptor::new(listener, limits, what);
    futures::stream::unfold(acceptor, |mut acceptor| async move {
        let conn = acceptor.next().await;
        Some((Ok(conn), acceptor))
    })
}

/// Handshakes done and not yet taken by the server (each holds its permit, so the
/// connection cap bounds them anyway).
const HANDSHAKES_DONE_MAX: usize = 64;

/// As `incoming`, but each connection is a TLS server connection with `tls`'s
/// configuration as of its handshake. Each handshake runs in a task of its own
/// (the accept loop never waits for one), holding the connection's permit, and is
/// closed when it fails or takes longer than the handshake timeout (logged, at most
/// every `WARN_EVERY`).
pub fn incoming_tls(
    listener: TcpListener,
    limits: ListenLimits,
    what: &'static str,
    tls: crate::security::ServerTls,
) -> impl Stream<Item = Result<TlsConn, io::Error>> + Send {
    let (done_tx, done_rx) = tokio::sync::mpsc::channel(HANDSHAKES_DONE_MAX);
    let state = TlsIncoming {
        acceptor: Acceptor::new(listener, limits, what),
        tls,
        done_tx,
        done_rx,
        failed: Arc::new(std::sync::Mutex::new(Throttled::default())),
    };
    futures::stream::unfold(state, |mut state| async move {
        loop {
            tokio::select! {
                Some(conn) = state.done_rx.recv() => return Some((Ok(conn), state)),
                conn = state.acceptor.next() => state.handshake(conn),
            }
        }
    })
}

/// The TLS accept loop's state.
struct TlsIncoming {
    acceptor: Acceptor,
    tls: crate::security::ServerTls,
    /// Where handshake tasks hand over their connections.
    done_tx: tokio::sync::mpsc::Sender<TlsConn>,
    done_rx: tokio::sync::mpsc::Receiver<TlsConn>,
    /// Failed handshakes, for the next warning.
    failed: Arc<std::sync::Mutex<Throttled>>,
}

impl TlsIncoming {
    /// Starts `conn`'s handshake in a task of its own.
    fn handshake(&self, conn: Conn) {
        let tls = self.tls.clone();
        let done = self.done_tx.clone();
        let failed = self.failed.clone();
        let what = self.acceptor.what;
        tokio::spawn(async move {
            let remote_addr = conn.socket.peer_addr().ok();
            let timeout = tls.handshake_timeout();
            let why = match tokio::time::timeout(timeout, tls.acceptor().accept(conn)).await {
                Ok(Ok(stream)) => {
                    let cert_identity = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|chain| chain.first())
                        .and_then(|leaf| tls.identity(leaf));
                    let info = ConnInfo {
                        remote_addr,
                        tls: true,
                        cert_identity,
                    };
                    // Err: the server stopped; the connection closes with the task.
                    let _ = done.send(TlsConn { stream, info }).await;
                    return;
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no handshake within {timeout:?}"),
            };
            let due = failed.lock().ok().and_then(|mut t| t.count());
            if let Some(n) = due {
                tracing::warn!(
                    port = what,
                    peer = ?remote_addr,
                    error = %why,
                    failed = n,
                    "TLS handshake failed; connection closed"
                );
            }
        });
    }
}

/// The accept loop's state.
struct Acceptor {
    listener: TcpListener,
    /// One permit per open connection; a `Conn` returns its permit when dropped.
    permits: Arc<Semaphore>,
    limits: ListenLimits,
    what: &'static str,
    /// Connections refused over the cap, for the next warning.
    refused: Throttled,
    /// Accept errors, for the next warning.
    failed: Throttled,
}

impl Acceptor {
    fn new(listener: TcpListener, limits: ListenLimits, what: &'static str) -> Acceptor {
        Acceptor {
            listener,
            permits: Arc::new(Semaphore::new(limits.connections_max)),
            limits,
            what,
            refused: Throttled::default(),
            failed: Throttled::default(),
        }
    }

    /// The next connection that fits under the cap. Cancel-safe (a `select!` may
    /// drop it): once a socket is accepted, the rest does not wait.
    async fn next(&mut self) -> Conn {
        loop {
            let listener = &self.listener;
            let failed = &mut self.failed;
            let what = self.what;
            let (socket, peer) = accept_with_backoff(
                || listener.accept(),
                |e| {
                    if let Some(n) = failed.count() {
                        tracing::warn!(port = what, error = %e, errors = n, "accept failed; backing off");
                    }
                },
            )
            .await;
            let Ok(permit) = self.permits.clone().try_acquire_owned() else {
                drop(socket);
                if let Some(n) = self.refused.count() {
                    tracing::warn!(
                        port = self.what,
                        %peer,
                        refused = n,
                        connections_max = self.limits.connections_max,
                        "connection cap reached; refusing connections"
                    );
                }
                continue;
            };
            // Small responses must leave at once, not wait for the peer's delayed
            // ACK (a 40 ms stall otherwise).
            let _ = socket.set_nodelay(true);
            return Conn::new(socket, permit, self.limits.idle_timeout);
        }
    }
}

/// Calls `accept` until it succeeds. An error of one connection (aborted or reset
/// before it was accepted) is retried at once; any other (EMFILE, ENFILE, ENOBUFS,
/// ENOMEM, ...) is reported to `on_error` and retried after `ACCEPT_BACKOFF`.
pub async fn accept_with_backoff<S, F, Fut>(
    mut accept: F,
    mut on_error: impl FnMut(&io::Error),
) -> S
where
    F: FnMut() -> Fut,
    Fut: Future<Output = io::Result<S>>,
{
    loop {
        match accept().await {
            Ok(accepted) => return accepted,
            Err(e) if is_connection_error(&e) => {}
            Err(e) => {
                on_error(&e);
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// Errors that concern the one connection being accepted, not the listener.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}

/// Counts events and says when to warn: at the first, then at most every
/// `WARN_EVERY`, with the count since the last warning.
#[derive(Default)]
struct Throttled {
    last: Option<Instant>,
    since: u64,
}

impl Throttled {
    /// Counts one event; Some(count since the last warning) when one is due.
    fn count(&mut self) -> Option<u64> {
        self.since += 1;
        let now = Instant::now();
        if self
            .last
            .is_some_and(|at| now.duration_since(at) < WARN_EVERY)
        {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.since))
    }
}

/// An accepted connection: the socket, its permit under the cap, and the idle timer.
pub struct Conn {
    socket: TcpStream,
    /// Released when the connection is dropped (hyper closed it).
    _permit: OwnedSemaphorePermit,
    idle_timeout: Duration,
    /// When something was last read.
    last_read: Instant,
    /// Fires at `last_read + idle_timeout` or later; re-armed when reads came since.
    idle: Pin<Box<Sleep>>,
}

impl Conn {
    fn new(socket: TcpStream, permit: OwnedSemaphorePermit, idle_timeout: Duration) -> Conn {
        let now = Instant::now();
        Conn {
            socket,
            _permit: permit,
            idle_timeout,
            last_read: now,
            idle: Box::pin(tokio::time::sleep_until(now + idle_timeout)),
        }
    }

    /// Whether the idle timeout ran out (re-arms the timer if reads came meanwhile);
    /// registers the waker while it has not.
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            if self.idle.as_mut().poll(cx).is_pending() {
                return false;
            }
            let deadline = self.last_read + self.idle_timeout;
            if Instant::now() >= deadline {
                return true;
            }
            self.idle.as_mut().reset(deadline);
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.socket).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.last_read = Instant::now();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending if this.poll_idle(cx) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("nothing received for {:?}", this.idle_timeout),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().socket).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().socket).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.socket.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().socket).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().socket).poll_shutdown(cx)
    }
}

impl Connected for Conn {
    type ConnectInfo = ConnInfo;

    /// A plain-text connection: no certificate, so no identity of its own.
    fn connect_info(&self) -> ConnInfo {
        ConnInfo {
            remote_addr: self.socket.peer_addr().ok(),
            tls: false,
            cert_identity: None,
        }
    }
}

/// A TLS server connection over a `Conn` (its permit and idle timer), with what
/// its handshake told about the client.
pub struct TlsConn {
    stream: tokio_rustls::server::TlsStream<Conn>,
    /// Reported to tonic for every request on the connection.
    info: ConnInfo,
}

impl TlsConn {
    /// What the connection reports: TLS, and the client certificate's identity.
    pub fn info(&self) -> &ConnInfo {
        &self.info
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

impl Connected for TlsConn {
    type ConnectInfo = ConnInfo;

    /// TLS, with the identity of the client's certificate (if it sent one).
    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

/// For tests: the connections `conns` yields, through a channel (the accept loop
/// runs in a task of its own until the receiver is dropped).
#[cfg(test)]
pub(crate) fn accepted<C: Send + 'static>(
    conns: impl Stream<Item = Result<C, io::Error>> + Send + 'static,
) -> tokio::sync::mpsc::Receiver<C> {
    use futures::StreamExt;
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        futures::pin_mut!(conns);
        while let Some(Ok(conn)) = conns.next().await {
            if tx.send(conn).await.is_err() {
                return;
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn emfile() -> io::Error {
        io::Error::from_raw_os_error(24)
    }

    /// Out of file descriptors, the loop sleeps between tries instead of spinning.
    #[tokio::test(start_paused = true)]
    async fn out_of_files_backs_off() {
        let mut calls = 0;
        let mut reported = 0;
        let started = Instant::now();
        let got = accept_with_backoff(
            || {
                calls += 1;
                let n = calls;
                async move {
                    if n <= 5 {
                        Err(emfile())
                    } else {
                        Ok(n)
                    }
                }
            },
            |_| reported += 1,
        )
        .await;
        assert_eq!((got, reported), (6, 5));
        assert!(
            started.elapsed() >= ACCEPT_BACKOFF * 5,
            "{:?}",
            started.elapsed()
        );
    }

    /// One connection's own failure is retried at once.
    #[tokio::test(start_paused = true)]
    async fn an_aborted_connection_is_retried_at_once() {
        let mut calls = 0;
        let started = Instant::now();
        let got = accept_with_backoff(
            || {
                calls += 1;
                let n = calls;
                async move {
                    if n == 1 {
                        Err(io::Error::from(io::ErrorKind::ConnectionAborted))
                    } else {
                        Ok(n)
                    }
                }
            },
            |e| panic!("reported {e}"),
        )
        .await;
        assert_eq!(got, 2);
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    /// The listener queues `LISTEN_BACKLOG` connections, not tokio's 128: 300
    /// connects complete while nothing accepts.
    #[tokio::test]
    async fn the_backlog_holds_a_burst() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let connected = tokio::task::spawn_blocking(move || {
            (0..300)
                .map(|_| std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)))
                .filter(Result::is_ok)
                .count()
        })
        .await
        .unwrap();
        assert_eq!(connected, 300);
        drop(listener);
    }

    #[test]
    fn the_cap_fits_under_the_open_file_limit() {
        assert_eq!(fit_to_open_files(4096, Some(256), 64), 192);
        assert_eq!(fit_to_open_files(100, Some(256), 64), 100);
        assert_eq!(fit_to_open_files(100, Some(10), 64), 1);
        assert_eq!(fit_to_open_files(100, None, 64), 100);
    }

    #[test]
    fn warnings_are_throttled() {
        let mut t = Throttled::default();
        assert_eq!(t.count(), Some(1));
        assert_eq!(t.count(), None);
        assert_eq!(t.count(), None);
        t.last = Some(Instant::now() - WARN_EVERY);
        assert_eq!(t.count(), Some(3));
    }

    async fn listen(
        limits: ListenLimits,
    ) -> (std::net::SocketAddr, tokio::sync::mpsc::Receiver<Conn>) {
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        (addr, accepted(incoming(listener, limits, "test")))
    }

    /// Over the cap, a connection is closed at once; closing one frees its permit.
    #[tokio::test]
    async fn the_cap_refuses_extras_until_one_closes() {
        let limits = ListenLimits {
            connections_max: 2,
            idle_timeout: Duration::from_secs(60),
        };
        let (addr, mut accepted) = listen(limits).await;
        let _a = TcpStream::connect(addr).await.unwrap();
        let _b = TcpStream::connect(addr).await.unwrap();
        let first = accepted.recv().await.unwrap();
        let _second = accepted.recv().await.unwrap();
        let mut extra = TcpStream::connect(addr).await.unwrap();
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), extra.read(&mut byte))
            .await
            .expect("the extra connection was not closed");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        drop(first);
        let _c = TcpStream::connect(addr).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), accepted.recv())
            .await
            .expect("a freed permit lets a connection in")
            .unwrap();
    }

    /// A connection that sends nothing reads as timed out after the idle timeout; one
    /// that keeps sending does not.
    #[tokio::test]
    async fn silence_times_out_and_input_resets_the_timer() {
        let idle = Duration::from_millis(1000);
        let limits = ListenLimits {
            connections_max: 4,
            idle_timeout: idle,
        };
        let (addr, mut accepted) = listen(limits).await;
        let _quiet = TcpStream::connect(addr).await.unwrap();
        let mut quiet = accepted.recv().await.unwrap();
        let started = std::time::Instant::now();
        let mut buf = [0u8; 16];
        let err = tokio::time::timeout(Duration::from_secs(5), quiet.read(&mut buf))
            .await
            .expect("the idle timeout never fired")
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= idle);

        let mut talker = TcpStream::connect(addr).await.unwrap();
        let mut busy = accepted.recv().await.unwrap();
        for _ in 0..8 {
            tokio::time::sleep(idle / 5).await;
            talker.write_all(b"x").await.unwrap();
            let n = busy.read(&mut buf).await.unwrap();
            assert_eq!(n, 1, "a connection that sends is not idle");
        }
    }
}
