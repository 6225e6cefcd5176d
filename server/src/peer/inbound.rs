//! The inbound side: serves `concord.peer.v1.PeerTransport/Deliver` on the peer
//! listener, checks every frame's header (a known member, addressed to this server,
//! in this cluster), decodes its message and hands it to the runtime's channel.
//!
//! ```text
//!   peer ──TLS: certificate──▶ PeerAuthorizer (every route: Deliver, Forward, ...)
//!        ──Frame{from,to,cluster_id,payload,more}──▶ check ──▶ pieces put together
//!        (refused: PERMISSION_DENIED, ...)        ──decode──▶ mpsc ──▶ runtime
//! ```
//!
//! On a TLS peer port the sender is the member the certificate names
//! (`security::peers`): a connection whose certificate is no other member's is
//! refused before any request is read, and a frame whose `from` is not the
//! certificate's member ends its stream with PERMISSION_DENIED.
//!
//! A frame carries at most `frame_bytes_max` (tonic refuses a longer one); a message
//! in pieces is held until its last piece, at most `message_bytes_max`.
//!
//! What it must not do: accept a frame from a server that is not a member, or keep
//! a stream open after shutdown (graceful shutdown waits for open streams).

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use concord_proto::peer::v1::peer_transport_server::{
    PeerTransport as PeerTransportService, PeerTransportServer,
};
use concord_proto::peer::v1::{DeliverReply, Frame};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Semaphore};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Routes;
use tonic::{Request, Response, Status, Streaming};

use super::{codec, Counters, Inbound as Delivery, Shared};
use crate::listen::{self, ListenLimits};
use crate::security::peers::{self, PeerAuthorizer};
use crate::zab::{Message, ServerId};

/// Longest pause between the listener's HTTP/2 keep-alive pings on a quiet peer
/// connection (the ping's answer is what a live but idle member is read from).
const PEER_KEEPALIVE_INTERVAL_MAX: Duration = Duration::from_secs(5);
/// A connection whose ping stays unanswered this long is closed (a stopped peer
/// reconnects when it runs again).
const PEER_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// The listener's keep-alive interval for `idle_timeout`: a quarter of it, so a
/// live member answers at least three pings before the idle timer could fire.
fn keepalive_interval(idle_timeout: Duration) -> Duration {
    (idle_timeout / 4).clamp(Duration::from_millis(1), PEER_KEEPALIVE_INTERVAL_MAX)
}

/// The `Deliver` handler's state.
struct Inbound {
    shared: Arc<Shared>,
    /// Ids allowed to send: every member but this server.
    senders: HashSet<ServerId>,
    /// Where received messages go (the runtime's inbound channel), each with the
    /// bytes it took from `bytes`.
    tx: mpsc::Sender<(Delivery, u32)>,
    /// The inbound byte budget: a message takes its size before it is queued, and
    /// the runtime's `InboundRx` gives it back.
    bytes: Arc<Semaphore>,
}

/// The server task: serves until shutdown, then drains.
pub(super) async fn serve(
    shared: Arc<Shared>,
    listener: TcpListener,
    tx: mpsc::Sender<(Delivery, u32)>,
    bytes: Arc<Semaphore>,
    beside: Routes,
    authorizer: PeerAuthorizer,
) {
    let service = routes(shared.clone(), tx, bytes, beside, authorizer);
    let mut stop = shared.stop.subscribe();
    let limits = ListenLimits {
        connections_max: shared.config.connections_max.max(1),
        idle_timeout: Duration::from_millis(shared.config.connection_idle_timeout_ms.max(1)),
    };
    let router = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(keepalive_interval(limits.idle_timeout)))
        .http2_keepalive_timeout(Some(PEER_KEEPALIVE_TIMEOUT));
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let served = match shared.config.server_tls.clone() {
        Some(tls) => {
            let conns = listen::incoming_tls(listener, limits, "peer", tls);
            router
                .serve_with_incoming_shutdown(service, conns, stopped)
                .await
        }
        None => {
            let conns = listen::incoming(listener, limits, "peer");
            router
                .serve_with_incoming_shutdown(service, conns, stopped)
                .await
        }
    };
    if let Err(e) = served {
        tracing::error!(error = %e, "peer transport server failed");
    }
}

/// Everything the peer port serves: `Deliver` (handing what it receives to `tx`
/// within the `bytes` budget) and the services `beside` it, every one behind
/// `authorizer`, which runs before routing (an unknown path is covered too).
pub(super) fn routes(
    shared: Arc<Shared>,
    tx: mpsc::Sender<(Delivery, u32)>,
    bytes: Arc<Semaphore>,
    beside: Routes,
    authorizer: PeerAuthorizer,
) -> InterceptedService<Routes, PeerAuthorizer> {
    let senders = shared.peers.keys().copied().collect();
    let frame_bytes_max = shared.config.frame_bytes_max;
    let deliver = PeerTransportServer::new(Inbound {
        shared,
        senders,
        tx,
        bytes,
    })
    .max_decoding_message_size(frame_bytes_max.saturating_add(64));
    InterceptedService::new(beside.add_service(deliver).prepare(), authorizer)
}

impl Inbound {
    /// Checks a frame's header; `from` is the sender seen so far on this stream,
    /// `authenticated` the member its certificate names (TLS only).
    fn check(
        &self,
        frame: &Frame,
        from: Option<ServerId>,
        authenticated: Option<ServerId>,
    ) -> Result<ServerId, Status> {
        let config = &self.shared.config;
        peers::check_claim(authenticated, frame.from)?;
        if !self.senders.contains(&frame.from) {
            return Err(Status::permission_denied(format!(
                "server {} is not a member of this ensemble",
                frame.from
            )));
        }
        if frame.to != config.id || frame.cluster_id != config.cluster_id {
            return Err(Status::failed_precondition(format!(
                "this is server {} of cluster {}, not server {} of cluster {}",
                config.id, config.cluster_id, frame.to, frame.cluster_id
            )));
        }
        if from.is_some_and(|f| f != frame.from) {
            return Err(Status::invalid_argument("the sender changed mid-stream"));
        }
        Ok(frame.from)
    }

    /// Checks one frame and decodes the message it completes (with its encoded
    /// size): None for a hello or a piece of a message still incomplete (kept in
    /// `pieces`).
    fn accept(
        &self,
        frame: Frame,
        from: Option<ServerId>,
        authenticated: Option<ServerId>,
        pieces: &mut Vec<u8>,
    ) -> Result<(ServerId, Option<(Message, usize)>), Status> {
        let sender = self.check(&frame, from, authenticated)?;
        let whole = if frame.more || !pieces.is_empty() {
            let total = pieces.len().saturating_add(frame.payload.len());
            let max = self.shared.config.message_bytes_max;
            if total > max {
                return Err(Status::resource_exhausted(format!(
                    "a message of more than {max} bytes (peer_message_bytes_max)"
                )));
            }
            pieces.extend_from_slice(&frame.payload);
            if frame.more {
                return Ok((sender, None));
            }
            bytes::Bytes::from(std::mem::take(pieces))
        } else {
            frame.payload
        };
        if whole.is_empty() {
            return Ok((sender, None));
        }
        let msg = codec::decode::<Message>(&whole)
            .map_err(|e| Status::invalid_argument(format!("bad payload: {e}")))?;
        Ok((sender, Some((msg, whole.len()))))
    }
}

#[tonic::async_trait]
impl PeerTransportService for Inbound {
    async fn deliver(
        &self,
        request: Request<Streaming<Frame>>,
    ) -> Result<Response<DeliverReply>, Status> {
        let authenticated = peers::authenticated(&request);
        let mut frames = request.into_inner();
        let mut from = None;
        let mut frames_received = 0;
        let ended = self
            .pump(&mut frames, authenticated, &mut from, &mut frames_received)
            .await;
        // Unless this server is stopping, tell the runtime the sender went quiet
        // (a kill -9 of the peer ends up here at once, through the reset socket).
        if let (Some(sender), false) = (from, *self.shared.stop.borrow()) {
            let _ = self.tx.try_send((Delivery::StreamLost(sender), 0));
        }
        ended.map(|()| Response::new(DeliverReply { frames_received }))
    }
}

impl Inbound {
    /// Takes `bytes` of the inbound budget (all of it, for a larger message), then
    /// queues the message for the runtime; false once the runtime stopped listening.
    async fn deliver(&self, delivery: Delivery, bytes: usize) -> bool {
        let n = u32::try_from(bytes)
            .unwrap_or(u32::MAX)
            .min(u32::try_from(self.shared.config.inbound_bytes_max).unwrap_or(u32::MAX))
            .max(1);
        let Ok(permit) = self.bytes.acquire_many(n).await else {
            return false;
        };
        // The runtime's InboundRx gives the bytes back when it takes the message.
        permit.forget();
        if self.tx.send((delivery, n)).await.is_err() {
            self.bytes.add_permits(n as usize);
            return false;
        }
        true
    }

    /// Hands the stream's messages to the runtime until the stream ends, this
    /// server stops, or the runtime stops listening; `from` is the sender once known,
    /// `authenticated` the member the connection's certificate names (TLS only).
    async fn pump(
        &self,
        frames: &mut Streaming<Frame>,
        authenticated: Option<ServerId>,
        from: &mut Option<ServerId>,
        frames_received: &mut u64,
    ) -> Result<(), Status> {
        let mut stop = self.shared.stop.subscribe();
        // The pieces of a message whose last piece has not come yet.
        let mut pieces = Vec::new();
        loop {
            let frame = tokio::select! {
                _ = stop.wait_for(|s| *s) => return Ok(()),
                frame = frames.message() => frame?,
            };
            let Some(frame) = frame else { return Ok(()) };
            let (frame_from, protocol) = (frame.from, frame.protocol);
            let (sender, msg) = self
                .accept(frame, *from, authenticated, &mut pieces)
                .inspect_err(|status| {
                    tracing::warn!(from = frame_from, %status, "peer stream refused");
                    Counters::add(&self.shared.counters.rejected, 1);
                })?;
            if from.is_none() {
                if let Some(peer) = self.shared.peers.get(&sender) {
                    // The stream's first frame (its hello) comes before any message
                    // this server could answer, so answers go in its protocol.
                    peer.protocol.store(protocol, Ordering::Relaxed);
                    peer.back.notify_one();
                }
            }
            *from = Some(sender);
            *frames_received += 1;
            let Some((msg, bytes)) = msg else { continue };
            let delivered = tokio::select! {
                _ = stop.wait_for(|s| *s) => return Ok(()),
                sent = self.deliver(Delivery::Message(sender, msg), bytes) => sent,
            };
            if !delivered {
                // The runtime dropped its receiver: nobody listens any more.
                return Ok(());
            }
            Counters::add(&self.shared.counters.received, 1);
        }
    }
}
