//! The connection a follower's `Forward` calls take to one leader: one HTTP/2
//! connection driven through h2 itself (`concord_direct`), so that a call's HEADERS
//! and DATA reach the leader in one write, where tonic's `Channel` sends them in two
//! (and wakes the leader twice). Made on the first call, and again on the next call
//! after it broke; pings every `KEEPALIVE`, so a leader that went silent without
//! closing it is found out and the next call dials again.
//!
//! ```text
//!   ForwardClient<ForwardLink> ──call──▶ connected? ──no──▶ dial (TCP, TLS, h2) ≤ CONNECT_TIMEOUT
//!                                          │ yes                 │ failed: ConnectError (never sent)
//!                                          ▼                     ▼
//!                                       Direct::call ──────▶ one write to the leader
//! ```
//!
//! What it must not do: report a call that may have reached the leader as never
//! sent (only a failed dial is), or dial more than one connection at a time.

use std::sync::Arc;
use std::time::Duration;

use concord_direct::{BoxError, Direct, Received, ResponseFuture};
use http::uri::Authority;
use tonic::body::Body;

use crate::config::Address;
use crate::security::PeerClientTls;
use crate::zab::ServerId;

/// Longest a dial (TCP, TLS, HTTP/2 handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// A ping this often; the connection is dropped when one goes unanswered as long.
const KEEPALIVE: Duration = Duration::from_secs(1);

/// The path to one leader's peer port. Clones share the connection.
#[derive(Clone)]
pub(super) struct ForwardLink {
    inner: Arc<Inner>,
}

struct Inner {
    leader: ServerId,
    addr: Address,
    /// mTLS with this server's peer certificate; None: plain text.
    tls: Option<PeerClientTls>,
    /// The connection, once made; replaced when closed. The lock is held while
    /// dialling, so calls meanwhile wait for the same dial.
    connection: tokio::sync::Mutex<Option<Direct>>,
}

impl ForwardLink {
    pub(super) fn new(leader: ServerId, addr: Address, tls: Option<PeerClientTls>) -> ForwardLink {
        ForwardLink {
            inner: Arc::new(Inner {
                leader,
                addr,
                tls,
                connection: tokio::sync::Mutex::new(None),
            }),
        }
    }
}

impl Inner {
    /// The open connection, dialled first if there is none. A failed dial is a
    /// `tonic::ConnectError`: the call was never sent.
    async fn connected(&self) -> Result<Direct, BoxError> {
        let mut connection = self.connection.lock().await;
        if let Some(open) = connection.as_ref().filter(|c| !c.is_closed()) {
            return Ok(open.clone());
        }
        let dialled = tokio::time::timeout(CONNECT_TIMEOUT, self.dial())
            .await
            .unwrap_or_else(|_| Err(format!("no connection within {CONNECT_TIMEOUT:?}").into()))
            .map_err(|e| -> BoxError { Box::new(tonic::ConnectError(e)) })?;
        *connection = Some(dialled.clone());
        Ok(dialled)
    }

    async fn dial(&self) -> Result<Direct, BoxError> {
        let authority: Authority = self.addr.to_string().parse()?;
        // The peer files are read at every dial: one after a rotation presents the
        // new certificate.
        let tls = match &self.tls {
            Some(tls) => Some(tls.rustls_config(self.leader)?),
            None => None,
        };
        Direct::connect(authority, tls, Some(KEEPALIVE)).await
    }
}

impl tower_service::Service<http::Request<Body>> for ForwardLink {
    type Response = http::Response<Received>;
    type Error = BoxError;
    type Future = ResponseFuture;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        // Each call dials, or waits for the dial in progress, itself.
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let inner = self.inner.clone();
        Box::pin(async move {
            let mut direct = inner.connected().await?;
            tower_service::Service::call(&mut direct, request).await
        })
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use concord_proto::peer::v1 as pb;
    use pb::forward_client::ForwardClient;
    use tokio::sync::mpsc;

    use super::*;

    /// A bare HTTP/2 server on 127.0.0.1 that answers one call per connection (an
    /// empty message, status OK), then closes that connection; it reports each
    /// connection it accepts.
    async fn one_call_per_connection() -> (SocketAddr, mpsc::UnboundedReceiver<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (accepted, reports) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = accepted.send(());
                tokio::spawn(async move {
                    let mut conn = h2::server::handshake(tcp).await.unwrap();
                    if let Some(Ok((_request, mut respond))) = conn.accept().await {
                        concord_direct::testing::answer_ok(&mut respond);
                    }
                    // Sends what is queued, then closes.
                    conn.graceful_shutdown();
                    while conn.accept().await.is_some() {}
                });
            }
        });
        (addr, reports)
    }

    /// A link whose connection the leader closed dials a new one for the next call
    /// (a call made before the close is noticed may fail: the forwarder counts it
    /// as unknown and the write goes on from there).
    #[tokio::test]
    async fn a_link_dials_again_once_its_connection_closed() {
        let (addr, mut accepted) = one_call_per_connection().await;
        let mut client = ForwardClient::new(ForwardLink::new(1, addr.into(), None));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut answered = 0;
        while answered < 3 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{answered} of 3 calls answered in 10 s"
            );
            if client.touch(pb::TouchRequest::default()).await.is_ok() {
                answered += 1;
            } else {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        let mut connections = 0;
        while accepted.try_recv().is_ok() {
            connections += 1;
        }
        assert_eq!(connections, 3, "one connection per answered call");
    }
}
