//! [`Link`]: a [`Direct`] connection made on the first call, and made again on the
//! next call after it closed or was given up. The Rust SDK's client and a follower's
//! calls to its leader each go through one.
//!
//! ```text
//!   call ──▶ open connection? ──no──▶ dial (the owner's: which server, TLS, time limit)
//!              │ yes                    │ failed: tonic::ConnectError (never sent)
//!              ▼                        ▼
//!           Direct::call ◀──────── kept until closed, `abandon`ed, or given up by
//!                                  its `generation` (its server refused to serve)
//! ```
//!
//! A link made with [`Link::pooled`] holds more than one connection to its server
//! when it needs them: a call goes on the first connection with fewer than
//! [`STREAMS_PER_CONNECTION`] streams open (fewer still when the server allows
//! less), and when every one is that full the link dials one more to the same
//! server, up to [`CONNECTIONS_MAX`]. So a client may hold far more streams
//! (watches) than one connection allows, and a unary call never waits behind them.
//! The connections go as one: when the first closes, or any is abandoned or given
//! up, the next call dials a new first one and the others take no more calls
//! (their streams go on until they end).
//!
//! What it must not do: report a call that may have reached a server as never sent
//! (only a failed dial is), dial more than one connection at a time, or give up a
//! connection other than the one its caller found unresponsive (and those it holds
//! to the same server).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use tonic::body::Body;

use crate::{BoxError, Direct, Received, ResponseFuture};

/// Open streams a pooled link puts on one connection at most before it dials
/// another: below the 1,024 a Concord server allows by default, so that calls made
/// past the link (a session's keep-alive on its first connection) and calls chosen
/// at the same moment on other threads still fit.
pub const STREAMS_PER_CONNECTION: usize = 1000;
/// Connections a pooled link holds to its server at most (so about 64,000 open
/// streams); past that a call goes on the least busy one and waits there, in h2,
/// until one of its streams ends.
pub const CONNECTIONS_MAX: usize = 64;

/// What a `Link` runs to make a connection.
type DialFuture = Pin<Box<dyn Future<Output = Result<Direct, BoxError>> + Send>>;
/// What a pooled `Link` runs to make one more connection to the server of the one given.
type DialAgain = Box<dyn Fn(&Direct) -> DialFuture + Send + Sync>;

/// A connection made when needed. Clones share it.
#[derive(Clone)]
pub struct Link {
    inner: Arc<Inner>,
}

struct Inner {
    /// Makes a connection; bounded in time by its owner.
    dial: Box<dyn Fn() -> DialFuture + Send + Sync>,
    /// Makes one more connection to the server of the first (pooled links only).
    dial_again: Option<DialAgain>,
    /// The connections, once made: the first one dialled by `dial`, then those made
    /// by `dial_again` to its server. All are replaced when the first is closed or
    /// any is given up. Held only to read or swap them, never across an await.
    connection: Mutex<Vec<Direct>>,
    /// Held while dialling, so calls meanwhile wait for the same dial.
    dialling: tokio::sync::Mutex<()>,
    /// First connections made so far: the current one's number. Changed only with
    /// `connection` held.
    generation: AtomicU64,
}

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Link").finish_non_exhaustive()
    }
}

impl Link {
    /// A link that runs `dial` for each connection it needs (never two at once).
    /// `dial` bounds its own time. Every call goes on its one connection.
    pub fn new<F, Fut>(dial: F) -> Link
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Direct, BoxError>> + Send + 'static,
    {
        Link::make(Box::new(move || Box::pin(dial())), None)
    }

    /// A link that dials its first connection with `dial` and, when every
    /// connection it holds has [`STREAMS_PER_CONNECTION`] streams open, one more
    /// with `dial_again` (given the first: dial its server), up to
    /// [`CONNECTIONS_MAX`]. Both bound their own time. A failed `dial_again` fails
    /// no call: the call goes on the least busy connection.
    pub fn pooled<F, Fut, G, Gut>(dial: F, dial_again: G) -> Link
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Direct, BoxError>> + Send + 'static,
        G: Fn(&Direct) -> Gut + Send + Sync + 'static,
        Gut: Future<Output = Result<Direct, BoxError>> + Send + 'static,
    {
        Link::make(
            Box::new(move || Box::pin(dial())),
            Some(Box::new(move |first: &Direct| Box::pin(dial_again(first)))),
        )
    }

    fn make(
        dial: Box<dyn Fn() -> DialFuture + Send + Sync>,
        dial_again: Option<DialAgain>,
    ) -> Link {
        Link {
            inner: Arc::new(Inner {
                dial,
                dial_again,
                connection: Mutex::new(Vec::new()),
                dialling: tokio::sync::Mutex::new(()),
                generation: AtomicU64::new(0),
            }),
        }
    }

    /// The open (first) connection, dialled first if there is none. A failed dial
    /// is a `tonic::ConnectError`: a call that met it was never sent.
    pub async fn connected(&self) -> Result<Direct, BoxError> {
        if let Some(open) = self.open() {
            return Ok(open);
        }
        let _dialling = self.inner.dialling.lock().await;
        // A dial that ended while this call waited for it serves this call too.
        if let Some(open) = self.open() {
            return Ok(open);
        }
        let dialled = (self.inner.dial)().await.map_err(crate::never_sent)?;
        let mut connection = self.connection();
        *connection = vec![dialled.clone()];
        self.inner.generation.fetch_add(1, Ordering::AcqRel);
        Ok(dialled)
    }

    /// The connection the next call goes on: the first with room for one more
    /// stream, or (pooled, every one full) one more dialled to the same server.
    async fn for_call(&self) -> Result<Direct, BoxError> {
        let first = self.connected().await?;
        let Some(dial_again) = &self.inner.dial_again else {
            return Ok(first);
        };
        if let Some(roomy) = self.with_room() {
            return Ok(roomy);
        }
        let _dialling = self.inner.dialling.lock().await;
        // Another call may have dialled one, or streams ended, meanwhile.
        if let Some(roomy) = self.with_room() {
            return Ok(roomy);
        }
        let held = self.connection().len();
        if held == 0 || held >= CONNECTIONS_MAX || !self.is_first(&first) {
            return Ok(self.least_busy().unwrap_or(first));
        }
        let Ok(another) = dial_again(&first).await else {
            return Ok(self.least_busy().unwrap_or(first));
        };
        let mut connection = self.connection();
        // Kept only while the first it joins is still the link's.
        if connection.first().is_some_and(|c| c.same(&first)) {
            connection.push(another.clone());
        }
        Ok(another)
    }

    /// Whether `direct` is the link's first connection now.
    fn is_first(&self, direct: &Direct) -> bool {
        self.connection().first().is_some_and(|c| c.same(direct))
    }

    /// The first open connection with fewer streams open than it should hold;
    /// closed ones other than the first are let go.
    fn with_room(&self) -> Option<Direct> {
        let mut connection = self.connection();
        let mut i = 1;
        while i < connection.len() {
            if connection[i].is_closed() {
                connection.remove(i);
            } else {
                i += 1;
            }
        }
        connection
            .iter()
            .find(|c| !c.is_closed() && c.open_streams() < streams_per_connection(c))
            .cloned()
    }

    /// The open connection with the fewest streams open.
    fn least_busy(&self) -> Option<Direct> {
        self.connection()
            .iter()
            .filter(|c| !c.is_closed())
            .min_by_key(|c| c.open_streams())
            .cloned()
    }

    /// How many connections the link holds now (the first and those dialled to its
    /// server for room).
    pub fn connections(&self) -> usize {
        self.connection().len()
    }

    /// Stops using `unresponsive` for new calls (its server keeps the connection
    /// open but stopped answering), and the others to its server: the next call
    /// dials again. Calls already on them go on. Does nothing when the link has
    /// already moved to another connection, and never waits for a dial in progress.
    pub fn abandon(&self, unresponsive: &Direct) {
        let mut connection = self.connection();
        if connection.iter().any(|c| c.same(unresponsive)) {
            connection.clear();
        }
    }

    /// Which connection the link holds: read before a call, it names the one the
    /// call goes out on (or, if the link dials first, the one before it).
    pub fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::Acquire)
    }

    /// Stops using connection `generation` (and the others to its server) for new
    /// calls (its server refused to serve, having no leader): the next call dials
    /// the next server. Does nothing when the link has moved to another connection
    /// since.
    pub fn give_up(&self, generation: u64) {
        let mut connection = self.connection();
        if self.inner.generation.load(Ordering::Acquire) == generation {
            connection.clear();
        }
    }

    /// The first connection if it is still open.
    fn open(&self) -> Option<Direct> {
        self.connection()
            .first()
            .filter(|c| !c.is_closed())
            .cloned()
    }

    fn connection(&self) -> MutexGuard<'_, Vec<Direct>> {
        // Nothing panics while holding it; a poisoned lock still holds a valid value.
        self.inner
            .connection
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Streams a pooled link puts on `connection` before it looks for another:
/// [`STREAMS_PER_CONNECTION`], or less when its server allows less (then all but a
/// thirty-second of what it allows, and at least one).
fn streams_per_connection(connection: &Direct) -> usize {
    let allowed = connection.stream_limit();
    STREAMS_PER_CONNECTION.min(allowed - allowed / 32).max(1)
}

impl tower_service::Service<http::Request<Body>> for Link {
    type Response = http::Response<Received>;
    type Error = BoxError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Each call dials, or waits for the dial in progress, itself.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let link = self.clone();
        Box::pin(async move {
            let mut direct = link.for_call().await?;
            tower_service::Service::call(&mut direct, request).await
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use concord_proto::v1 as pb;
    use http::uri::Authority;
    use tokio::net::TcpListener;
    use tokio::sync::mpsc;

    use super::*;

    /// A bare HTTP/2 server on 127.0.0.1 that answers `calls_per_connection` calls
    /// on each connection (an empty message, status OK), then closes it; it
    /// reports each connection it accepts.
    async fn server(calls_per_connection: usize) -> (Authority, mpsc::UnboundedReceiver<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let authority = listener.local_addr().unwrap().to_string().parse().unwrap();
        let (accepted, reports) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = accepted.send(());
                tokio::spawn(async move {
                    let mut conn = h2::server::handshake(tcp).await.unwrap();
                    for _ in 0..calls_per_connection {
                        let Some(Ok((_request, mut respond))) = conn.accept().await else {
                            return;
                        };
                        crate::testing::answer_ok(&mut respond);
                    }
                    // Sends what is queued, then closes.
                    conn.graceful_shutdown();
                    while conn.accept().await.is_some() {}
                });
            }
        });
        (authority, reports)
    }

    fn link_to(authority: Authority) -> Link {
        Link::new(move || Direct::connect(authority.clone(), None, None))
    }

    fn connections(accepted: &mut mpsc::UnboundedReceiver<()>) -> usize {
        std::iter::from_fn(|| accepted.try_recv().ok()).count()
    }

    /// A link whose connection the server closed dials a new one for the next call
    /// (a call made before the close is noticed may fail).
    #[tokio::test]
    async fn a_link_dials_again_once_its_connection_closed() {
        let (authority, mut accepted) = server(1).await;
        let mut client = pb::cluster_client::ClusterClient::new(link_to(authority));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut answered = 0;
        while answered < 3 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{answered} of 3 calls answered in 10 s"
            );
            if client.status(pb::StatusRequest {}).await.is_ok() {
                answered += 1;
            } else {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        assert_eq!(
            connections(&mut accepted),
            3,
            "one connection per answered call"
        );
    }

    /// Calls share the open connection; one given up is replaced at the next call,
    /// and giving up a connection the link no longer uses changes nothing.
    #[tokio::test]
    async fn abandon_gives_up_only_the_connection_named() {
        let (authority, mut accepted) = server(usize::MAX).await;
        let link = link_to(authority);
        let first = link.connected().await.unwrap();
        assert!(link.connected().await.unwrap().same(&first));
        link.abandon(&first);
        let second = link.connected().await.unwrap();
        assert!(!second.same(&first), "the abandoned connection was reused");
        link.abandon(&first);
        assert!(link.connected().await.unwrap().same(&second));
        let mut client = pb::cluster_client::ClusterClient::new(link.clone());
        client.status(pb::StatusRequest {}).await.unwrap();
        assert_eq!(connections(&mut accepted), 2);
    }

    /// A connection given up by its generation is replaced at the next call; an
    /// older generation gives up nothing.
    #[tokio::test]
    async fn give_up_takes_only_the_generation_named() {
        let (authority, mut accepted) = server(usize::MAX).await;
        let link = link_to(authority);
        let first = link.connected().await.unwrap();
        let generation = link.generation();
        link.give_up(generation);
        let second = link.connected().await.unwrap();
        assert!(!second.same(&first), "the connection given up was reused");
        link.give_up(generation);
        assert!(link.connected().await.unwrap().same(&second));
        assert_eq!(connections(&mut accepted), 2);
    }

    /// Giving a connection up while the next one is being dialled (to a server
    /// that takes its time) returns at once; the dial goes on and serves the call.
    #[tokio::test]
    async fn abandon_does_not_wait_for_a_dial_in_progress() {
        let (authority, _accepted) = server(usize::MAX).await;
        let dials = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Notify::new());
        let link = {
            let (dials, gate) = (dials.clone(), gate.clone());
            Link::new(move || {
                let (authority, gate) = (authority.clone(), gate.clone());
                let nth = dials.fetch_add(1, Ordering::SeqCst);
                async move {
                    if nth > 0 {
                        gate.notified().await;
                    }
                    Direct::connect(authority, None, None).await
                }
            })
        };
        let first = link.connected().await.unwrap();
        link.abandon(&first);
        let call = tokio::spawn({
            let link = link.clone();
            async move { link.connected().await }
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while dials.load(Ordering::SeqCst) < 2 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the second dial never began"
            );
            tokio::task::yield_now().await;
        }
        link.abandon(&first);
        gate.notify_one();
        let second = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .expect("the dial ended")
            .unwrap()
            .unwrap();
        assert!(!second.same(&first));
        assert!(link.connected().await.unwrap().same(&second));
    }

    /// A bare HTTP/2 server on 127.0.0.1 that allows `streams` streams a connection
    /// and answers none of them (each call stays open); it reports each connection.
    async fn holding_server(streams: u32) -> (Authority, mpsc::UnboundedReceiver<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let authority = listener.local_addr().unwrap().to_string().parse().unwrap();
        let (accepted, reports) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = accepted.send(());
                tokio::spawn(async move {
                    let mut conn = h2::server::Builder::new()
                        .max_concurrent_streams(streams)
                        .handshake::<_, bytes::Bytes>(tcp)
                        .await
                        .unwrap();
                    let mut held = Vec::new();
                    while let Some(Ok(call)) = conn.accept().await {
                        held.push(call);
                    }
                });
            }
        });
        (authority, reports)
    }

    /// A pooled link puts calls on its first connection until it holds all but a
    /// thirty-second of the streams its server allows, then dials one more to the
    /// same server, and so on; calls that end give their room back.
    #[tokio::test]
    async fn a_pooled_link_dials_more_connections_as_streams_fill_them() {
        let (authority, mut accepted) = holding_server(4).await;
        let link = Link::pooled(
            move || Direct::connect(authority.clone(), None, None),
            move |first: &Direct| Direct::connect(first.authority().clone(), None, None),
        );
        let first = link.connected().await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while first.stream_limit() != 4 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no SETTINGS in 10 s"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // In two rounds, so that the second connection has the server's SETTINGS
        // (4 streams) before calls are put on it: one made before would take
        // calls the server refuses.
        let call = || {
            let mut client = pb::cluster_client::ClusterClient::new(link.clone());
            tokio::spawn(async move { client.status(pb::StatusRequest {}).await })
        };
        let mut calls: Vec<_> = (0..5).map(|_| call()).collect();
        let settled = |n: usize| {
            let held = link.connection();
            held.len() == n
                && held.iter().all(|c| c.stream_limit() == 4)
                && held.iter().map(Direct::open_streams).sum::<usize>() >= 4 * n - 3
        };
        while !settled(2) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "5 calls: {:?}",
                streams_held(&link)
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        calls.extend((0..5).map(|_| call()));
        while link.connections() < 3 || streams_held(&link).iter().sum::<usize>() < 10 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "10 calls: {:?}",
                streams_held(&link)
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(streams_held(&link), [4, 4, 2]);
        for call in &calls {
            call.abort();
        }
        while first.open_streams() > 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "aborted calls still counted"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(connections(&mut accepted), 3);
        // The first connection has room again: no fourth is dialled.
        link.connected().await.unwrap();
        assert!(link.for_call().await.unwrap().same(&first));
        assert_eq!(connections(&mut accepted), 0);
    }

    /// The streams open on each connection of `link`.
    fn streams_held(link: &Link) -> Vec<usize> {
        link.connection().iter().map(Direct::open_streams).collect()
    }

    /// A failed dial reaches the caller as a `tonic::ConnectError`, directly and
    /// through a generated client, and the next call dials again.
    #[tokio::test]
    async fn a_failed_dial_is_a_connect_error() {
        let dials = Arc::new(AtomicUsize::new(0));
        let counted = dials.clone();
        let link = Link::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Err::<Direct, BoxError>("refused".into()) }
        });
        let err = link.connected().await.expect_err("no server");
        assert!(err.downcast_ref::<tonic::ConnectError>().is_some(), "{err}");
        let mut client = pb::cluster_client::ClusterClient::new(link);
        let status = client
            .status(pb::StatusRequest {})
            .await
            .expect_err("no server");
        assert!(crate::was_never_sent(&status), "{status:?}");
        assert_eq!(dials.load(Ordering::SeqCst), 2);
    }
}
