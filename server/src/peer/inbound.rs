//! The inbound side: serves `concord.peer.v1.PeerTransport/Deliver` on the peer
//! listener, checks every frame's header (a known member, addressed to this server,
//! in this cluster), decodes its message and hands it to the runtime's channel.
//!
//! ```text
//!   peer ──Frame{from,to,cluster_id,payload}──▶ check ──decode──▶ mpsc ──▶ runtime
//!                                          (refused: PERMISSION_DENIED, ...)
//! ```
//!
//! What it must not do: accept a frame from a server that is not a member, or keep
//! a stream open after shutdown (graceful shutdown waits for open streams).

use std::collections::HashSet;
use std::sync::Arc;

use concord_proto::peer::v1::peer_transport_server::{
    PeerTransport as PeerTransportService, PeerTransportServer,
};
use concord_proto::peer::v1::{DeliverReply, Frame};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status, Streaming};

use super::{codec, Counters, Inbound as Delivery, Shared};
use crate::zab::{Message, ServerId};

/// The `Deliver` handler's state.
struct Inbound {
    shared: Arc<Shared>,
    /// Ids allowed to send: every member but this server.
    senders: HashSet<ServerId>,
    /// Where received messages go (the runtime's inbound channel).
    tx: mpsc::Sender<Delivery>,
}

/// The server task: serves until shutdown, then drains.
pub(super) async fn serve(
    shared: Arc<Shared>,
    listener: TcpListener,
    tx: mpsc::Sender<Delivery>,
    beside: tonic::service::Routes,
) {
    let senders = shared.peers.keys().copied().collect();
    let service = PeerTransportServer::new(Inbound {
        shared: shared.clone(),
        senders,
        tx,
    })
    .max_decoding_message_size(shared.config.frame_bytes_max.saturating_add(64));
    let mut stop = shared.stop.subscribe();
    let served = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_routes(beside)
        .add_service(service)
        .serve_with_incoming_shutdown(
            TcpIncoming::from(listener).with_nodelay(Some(true)),
            async move {
                let _ = stop.wait_for(|s| *s).await;
            },
        )
        .await;
    if let Err(e) = served {
        tracing::error!(error = %e, "peer transport server failed");
    }
}

impl Inbound {
    /// Checks a frame's header; `from` is the sender seen so far on this stream.
    fn check(&self, frame: &Frame, from: Option<ServerId>) -> Result<ServerId, Status> {
        let config = &self.shared.config;
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

    /// Checks and decodes one frame: None for a hello.
    fn accept(
        &self,
        frame: &Frame,
        from: Option<ServerId>,
    ) -> Result<(ServerId, Option<Message>), Status> {
        let sender = self.check(frame, from)?;
        if frame.payload.is_empty() {
            return Ok((sender, None));
        }
        let msg = codec::decode::<Message>(&frame.payload)
            .map_err(|e| Status::invalid_argument(format!("bad payload: {e}")))?;
        Ok((sender, Some(msg)))
    }
}

#[tonic::async_trait]
impl PeerTransportService for Inbound {
    async fn deliver(
        &self,
        request: Request<Streaming<Frame>>,
    ) -> Result<Response<DeliverReply>, Status> {
        let mut frames = request.into_inner();
        let mut from = None;
        let mut frames_received = 0;
        let ended = self
            .pump(&mut frames, &mut from, &mut frames_received)
            .await;
        // Unless this server is stopping, tell the runtime the sender went quiet
        // (a kill -9 of the peer ends up here at once, through the reset socket).
        if let (Some(sender), false) = (from, *self.shared.stop.borrow()) {
            let _ = self.tx.try_send(Delivery::StreamLost(sender));
        }
        ended.map(|()| Response::new(DeliverReply { frames_received }))
    }
}

impl Inbound {
    /// Hands the stream's messages to the runtime until the stream ends, this
    /// server stops, or the runtime stops listening; `from` is the sender once known.
    async fn pump(
        &self,
        frames: &mut Streaming<Frame>,
        from: &mut Option<ServerId>,
        frames_received: &mut u64,
    ) -> Result<(), Status> {
        let mut stop = self.shared.stop.subscribe();
        loop {
            let frame = tokio::select! {
                _ = stop.wait_for(|s| *s) => return Ok(()),
                frame = frames.message() => frame?,
            };
            let Some(frame) = frame else { return Ok(()) };
            let (sender, msg) = self.accept(&frame, *from).inspect_err(|status| {
                tracing::warn!(from = frame.from, %status, "peer stream refused");
                Counters::add(&self.shared.counters.rejected, 1);
            })?;
            if from.is_none() {
                if let Some(peer) = self.shared.peers.get(&sender) {
                    peer.back.notify_one();
                }
            }
            *from = Some(sender);
            *frames_received += 1;
            let Some(msg) = msg else { continue };
            let delivered = tokio::select! {
                _ = stop.wait_for(|s| *s) => return Ok(()),
                sent = self.tx.send(Delivery::Message(sender, msg)) => sent.is_ok(),
            };
            if !delivered {
                // The runtime dropped its receiver: nobody listens any more.
                return Ok(());
            }
            Counters::add(&self.shared.counters.received, 1);
        }
    }
}
