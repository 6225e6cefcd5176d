//! One outbound task per peer: opens a `Deliver` stream, pumps the peer's queue into
//! it, and when the stream fails to open or breaks, waits a capped exponential
//! back-off with jitter (cut short when the peer opens a stream to this server: it
//! is back) and opens it again, until shutdown.
//!
//! ```text
//!   queue.pop_all() ──encode──▶ mpsc (frames) ──▶ tonic client stream ──▶ peer
//!        ▲ waits while disconnected: the queue keeps the newest messages
//! ```
//!
//! What it must not do: decode or reorder messages, or retry without a pause.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use concord_proto::peer::v1::peer_transport_client::PeerTransportClient;
use concord_proto::peer::v1::Frame;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Endpoint;

use super::{codec, Counters, Peer, Shared};
use crate::zab::rng::Rng;

/// Frames buffered between the pump and the gRPC stream.
const FRAMES_IN_FLIGHT_MAX: usize = 64;

/// Why one stream ended.
#[derive(Debug, thiserror::Error)]
enum StreamError {
    #[error("connect: {0}")]
    Connect(#[from] tonic::transport::Error),
    #[error("stream: {0}")]
    Status(#[from] tonic::Status),
    #[error("the peer closed the stream")]
    Closed,
}

/// Capped exponential back-off with jitter from a seeded generator.
struct Backoff {
    /// The next un-jittered pause.
    next_ms: u64,
    first_ms: u64,
    cap_ms: u64,
    rng: Rng,
}

impl Backoff {
    fn new(first_ms: u64, cap_ms: u64, seed: u64) -> Backoff {
        let first_ms = first_ms.max(1);
        Backoff {
            next_ms: first_ms,
            first_ms,
            cap_ms: cap_ms.max(first_ms),
            rng: Rng::new(seed),
        }
    }

    /// The pause before the next attempt: in [next/2, next], then next doubles.
    fn pause(&mut self) -> Duration {
        let base = self.next_ms;
        self.next_ms = base.saturating_mul(2).min(self.cap_ms);
        Duration::from_millis(base / 2 + self.rng.below(base / 2 + 1))
    }

    fn reset(&mut self) {
        self.next_ms = self.first_ms;
    }
}

/// The task: streams to `peer` until the transport stops.
pub(super) async fn run(shared: Arc<Shared>, peer: Arc<Peer>) {
    let config = &shared.config;
    let seed = (config.id << 32) ^ peer.id ^ 0x5eed;
    let mut backoff = Backoff::new(config.backoff_ms, config.backoff_ms_max, seed);
    let mut stop = shared.stop.subscribe();
    loop {
        let opened = Instant::now();
        let ended = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            ended = one_stream(&shared, &peer) => ended,
        };
        tracing::debug!(peer = peer.id, error = %ended, "peer stream ended; reopening");
        Counters::add(&shared.counters.reconnects, 1);
        if opened.elapsed() >= Duration::from_millis(config.backoff_ms_max) {
            backoff.reset();
        }
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            () = tokio::time::sleep(backoff.pause()) => {}
            // The peer opened a stream to us: it is up again (say, restarted).
            () = peer.back.notified() => backoff.reset(),
        }
    }
}

/// Opens one stream and pumps the queue into it until it breaks.
async fn one_stream(shared: &Shared, peer: &Peer) -> StreamError {
    let config = &shared.config;
    let keepalive = Duration::from_millis(config.keepalive_ms.max(1));
    let endpoint = match Endpoint::from_shared(format!("http://{}", peer.addr)) {
        Ok(e) => e,
        Err(e) => return e.into(),
    };
    let channel = endpoint
        .connect_timeout(Duration::from_millis(config.connect_timeout_ms.max(1)))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(keepalive)
        .keep_alive_timeout(keepalive)
        .keep_alive_while_idle(true)
        .connect()
        .await;
    let channel = match channel {
        Ok(c) => c,
        Err(e) => return e.into(),
    };
    let mut client = PeerTransportClient::new(channel);
    let (tx, rx) = mpsc::channel(FRAMES_IN_FLIGHT_MAX);
    let frame = |payload: Bytes| Frame {
        from: config.id,
        to: peer.id,
        cluster_id: config.cluster_id,
        payload,
    };
    // The hello: the peer checks the header at once, even before any message.
    if tx.try_send(frame(Bytes::new())).is_err() {
        return StreamError::Closed;
    }
    let call = client.deliver(ReceiverStream::new(rx));
    tokio::pin!(call);
    loop {
        let msgs = tokio::select! {
            biased;
            ended = &mut call => return ended.err().map_or(StreamError::Closed, Into::into),
            msgs = peer.queue.pop_all() => msgs,
        };
        let mut unsent = msgs.len() as u64;
        for msg in msgs {
            let payload = codec::encode(&msg);
            unsent -= 1;
            if payload.len() > config.frame_bytes_max {
                tracing::warn!(peer = peer.id, bytes = payload.len(), "message too large");
                Counters::add(&shared.counters.dropped, 1);
                continue;
            }
            let sent = tokio::select! {
                biased;
                ended = &mut call => Err(ended.err().map_or(StreamError::Closed, Into::into)),
                sent = tx.send(frame(Bytes::from(payload))) => sent.map_err(|_| StreamError::Closed),
            };
            if let Err(e) = sent {
                // This message and the rest of the batch are lost with the stream.
                Counters::add(&shared.counters.dropped, unsent + 1);
                return e;
            }
            Counters::add(&shared.counters.sent, 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap_with_jitter_and_resets() {
        let mut b = Backoff::new(100, 800, 1);
        let bounds = [(50, 100), (100, 200), (200, 400), (400, 800), (400, 800)];
        for (lo, hi) in bounds {
            let p = b.pause().as_millis() as u64;
            assert!((lo..=hi).contains(&p), "{p} not in [{lo}, {hi}]");
        }
        b.reset();
        assert!(b.pause() <= Duration::from_millis(100));
        let mut a = Backoff::new(100, 800, 7);
        let mut c = Backoff::new(100, 800, 7);
        let xs: Vec<Duration> = (0..6).map(|_| a.pause()).collect();
        let ys: Vec<Duration> = (0..6).map(|_| c.pause()).collect();
        assert_eq!(xs, ys, "same seed, same pauses");
    }
}
