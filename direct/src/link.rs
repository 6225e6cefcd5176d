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
//! What it must not do: report a call that may have reached a server as never sent
//! (only a failed dial is), dial more than one connection at a time, or give up a
//! connection other than the one its caller found unresponsive.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use tonic::body::Body;

use crate::{BoxError, Direct, Received, ResponseFuture};

/// What a `Link` runs to make a connection.
type DialFuture = Pin<Box<dyn Future<Output = Result<Direct, BoxError>> + Send>>;

/// A connection made when needed. Clones share it.
#[derive(Clone)]
pub struct Link {
    inner: Arc<Inner>,
}

struct Inner {
    /// Makes a connection; bounded in time by its owner.
    dial: Box<dyn Fn() -> DialFuture + Send + Sync>,
    /// The connection, once made; replaced when closed or given up. Held only to
    /// read or swap it, never across an await.
    connection: Mutex<Option<Direct>>,
    /// Held while dialling, so calls meanwhile wait for the same dial.
    dialling: tokio::sync::Mutex<()>,
    /// Connections made so far: the current one's number. Changed only with
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
    /// `dial` bounds its own time.
    pub fn new<F, Fut>(dial: F) -> Link
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Direct, BoxError>> + Send + 'static,
    {
        Link {
            inner: Arc::new(Inner {
                dial: Box::new(move || Box::pin(dial())),
                connection: Mutex::new(None),
                dialling: tokio::sync::Mutex::new(()),
                generation: AtomicU64::new(0),
            }),
        }
    }

    /// The open connection, dialled first if there is none. A failed dial is a
    /// `tonic::ConnectError`: a call that met it was never sent.
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
        *connection = Some(dialled.clone());
        self.inner.generation.fetch_add(1, Ordering::AcqRel);
        Ok(dialled)
    }

    /// Stops using `unresponsive` for new calls (its server keeps the connection
    /// open but stopped answering): the next call dials again. Calls already on it
    /// go on. Does nothing when the link has already moved to another connection,
    /// and never waits for a dial in progress.
    pub fn abandon(&self, unresponsive: &Direct) {
        let mut connection = self.connection();
        if connection.as_ref().is_some_and(|c| c.same(unresponsive)) {
            *connection = None;
        }
    }

    /// Which connection the link holds: read before a call, it names the one the
    /// call goes out on (or, if the link dials first, the one before it).
    pub fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::Acquire)
    }

    /// Stops using connection `generation` for new calls (its server refused to
    /// serve, having no leader): the next call dials the next server. Does nothing
    /// when the link has moved to another connection since.
    pub fn give_up(&self, generation: u64) {
        let mut connection = self.connection();
        if self.inner.generation.load(Ordering::Acquire) == generation {
            *connection = None;
        }
    }

    /// The connection if it is still open.
    fn open(&self) -> Option<Direct> {
        self.connection()
            .as_ref()
            .filter(|c| !c.is_closed())
            .cloned()
    }

    fn connection(&self) -> MutexGuard<'_, Option<Direct>> {
        // Nothing panics while holding it; a poisoned lock still holds a valid value.
        self.inner
            .connection
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
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
            let mut direct = link.connected().await?;
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
