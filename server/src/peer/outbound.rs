//! One outbound task per peer: opens a `Deliver` stream, feeds it from the peer's
//! queue, and when the stream fails to open or breaks, waits a capped exponential
//! back-off with jitter (cut short when the peer opens a stream to this server: it
//! is back) and opens it again, until shutdown.
//!
//! ```text
//!   queue.pop_all() ──encode──▶ frames (a long message in pieces), polled by the
//!                               tonic client stream ──▶ peer
//!        ▲ waits while disconnected: the queue keeps the newest messages
//! ```
//!
//! A stream the peer refuses (PERMISSION_DENIED: it does not take this server's
//! certificate as a member's), or whose TLS handshake fails over a certificate
//! (either side's), is logged as a warning, throttled: a misconfigured certificate
//! shows in the log, an ordinary reconnect does not.
//!
//! What it must not do: decode or reorder messages, or retry without a pause.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::security::tls::peer_endpoint;
use bytes::Bytes;
use concord_proto::peer::v1::peer_transport_client::PeerTransportClient;
use concord_proto::peer::v1::Frame;
use futures::stream::{self, Stream, StreamExt};

use super::{codec, Counters, Peer, Shared, SnapshotStore};
use crate::security::peers::Throttled;
use crate::zab::rng::Rng;
use crate::zab::Message;

/// Why one stream ended.
#[derive(Debug, thiserror::Error)]
enum StreamError {
    #[error("connect: {0}")]
    Connect(#[from] tonic::transport::Error),
    #[error("stream: {0}")]
    Status(#[from] tonic::Status),
    #[error("the peer closed the stream")]
    Closed,
    #[error("{0}")]
    Setup(String),
}

impl StreamError {
    /// Why the peer or TLS refused this link, when it did: the peer answered
    /// PERMISSION_DENIED, or a certificate was refused in the handshake.
    fn refusal(&self) -> Option<String> {
        let source: &(dyn std::error::Error + 'static) = match self {
            StreamError::Status(s) if s.code() == tonic::Code::PermissionDenied => {
                return Some(s.message().to_owned())
            }
            StreamError::Status(s) => s,
            StreamError::Connect(e) => e,
            StreamError::Closed => return None,
            StreamError::Setup(why) => return Some(why.clone()),
        };
        tls_error(source).map(|e| format!("TLS: {e}"))
    }
}

/// The rustls error somewhere in `error`'s chain (io errors wrap it).
fn tls_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut next = Some(error);
    // Bounded: a chain is a handful of layers.
    for _ in 0..16 {
        let e = next?;
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        let inner = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref());
        if let Some(tls) = inner.and_then(|i| i.downcast_ref::<rustls::Error>()) {
            return Some(tls);
        }
        next = e.source();
    }
    None
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
    let mut refused = Throttled::default();
    loop {
        let opened = Instant::now();
        let ended = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            ended = one_stream(&shared, &peer) => ended,
        };
        match ended.refusal() {
            Some(why) => {
                if let Some(refusals) = refused.count(Instant::now()) {
                    tracing::warn!(peer = peer.id, refusals, reason = %why, "peer link refused");
                }
            }
            None => tracing::debug!(peer = peer.id, error = %ended, "peer stream ended; reopening"),
        }
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

/// Opens one stream and feeds it from the queue until it breaks.
async fn one_stream(shared: &Arc<Shared>, peer: &Arc<Peer>) -> StreamError {
    let config = &shared.config;
    let keepalive = Duration::from_millis(config.keepalive_ms.max(1));
    // With TLS the peer files are read here: a reconnect uses rotated ones.
    let endpoint = match peer_endpoint(&peer.addr, peer.id, config.client_tls.as_ref()) {
        Ok(e) => e,
        Err(e) => return StreamError::Setup(e),
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
    match client.deliver(frames(shared.clone(), peer.clone())).await {
        Ok(_) => StreamError::Closed,
        Err(status) => status.into(),
    }
}

/// The frames of one stream: a hello (the peer checks the header at once, even
/// before any message), then the queue's messages as they come. The gRPC stream
/// polls it directly, so a message goes from the queue to the connection with no
/// task in between. Messages taken from the queue when the stream breaks are lost.
///
/// A SNAP (the core sends it without its bytes: the snapshot is in storage) is
/// filled from storage first. If it cannot be (purged meanwhile by a newer
/// snapshot), the stream ends there: the learner, missing its sync, times out and
/// asks again, and the leader then syncs it from its newer snapshot. The proposals
/// after that SNAP are never sent without it.
fn frames(shared: Arc<Shared>, peer: Arc<Peer>) -> impl Stream<Item = Frame> + Send + 'static {
    let hello = frame(&shared, &peer, Bytes::new(), false);
    let messages = stream::unfold(Some((shared, peer)), move |state| async move {
        let (shared, peer) = state?;
        let msgs = peer.queue.pop_all().await;
        let mut batch = Vec::with_capacity(msgs.len());
        let mut sent = 0;
        for mut msg in msgs {
            if let Err(e) = fill_stored_snapshot(&shared.snapshots, &mut msg).await {
                tracing::warn!(peer = peer.id, error = %e, "cannot read the snapshot of a SNAP; ending the stream");
                Counters::add(&shared.counters.sent, sent);
                return Some((stream::iter(batch), None));
            }
            let Some(msg) = codec::downgrade(msg, peer.protocol.load(Ordering::Relaxed)) else {
                continue;
            };
            let payload = codec::encode(&msg);
            if payload.len() > shared.config.message_bytes_max {
                tracing::warn!(peer = peer.id, bytes = payload.len(), "message too large");
                Counters::add(&shared.counters.dropped, 1);
                continue;
            }
            batch.extend(pieces(&shared, &peer, Bytes::from(payload)));
            sent += 1;
        }
        Counters::add(&shared.counters.sent, sent);
        Some((stream::iter(batch), Some((shared, peer))))
    });
    stream::once(async move { hello }).chain(messages.flatten())
}

/// Puts the stored snapshot's bytes into a SNAP (the core sends it without them).
async fn fill_stored_snapshot(snapshots: &SnapshotStore, msg: &mut Message) -> Result<(), String> {
    if let Some((zxid, data)) = msg.snap_to_fill() {
        *data = snapshots
            .load(zxid)
            .await
            .map_err(|e| format!("snapshot at {zxid:#x}: {e}"))?;
    }
    Ok(())
}

/// One frame to `peer`.
fn frame(shared: &Shared, peer: &Peer, payload: Bytes, more: bool) -> Frame {
    Frame {
        from: shared.config.id,
        to: peer.id,
        cluster_id: shared.config.cluster_id,
        payload,
        more,
        protocol: codec::PROTOCOL,
    }
}

/// The frames of one encoded message: pieces of at most `frame_bytes_max`, each but
/// the last marked `more` (the pieces share the buffer: no copy).
fn pieces(shared: &Shared, peer: &Peer, payload: Bytes) -> Vec<Frame> {
    let size = shared.config.frame_bytes_max.max(1);
    let count = payload.len().div_ceil(size).max(1);
    (0..count)
        .map(|i| {
            let end = payload.len().min((i + 1) * size);
            frame(shared, peer, payload.slice(i * size..end), i + 1 < count)
        })
        .collect()
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

    /// A wrapper, as the connect path's layers wrap the TLS error.
    #[derive(Debug)]
    struct Wrapped(std::io::Error);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "connect failed")
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    fn unknown_issuer() -> std::io::Error {
        let cert = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        std::io::Error::new(std::io::ErrorKind::InvalidData, cert)
    }

    /// A refusal (the peer's PERMISSION_DENIED, a certificate refused in the
    /// handshake, however deep in the error chain) is told apart from a peer that
    /// is down or a stream that ended.
    #[test]
    fn refusals_are_told_apart_from_reconnects() {
        assert!(tls_error(&Wrapped(unknown_issuer())).is_some());
        assert!(tls_error(&Wrapped(std::io::Error::other("refused"))).is_none());
        let denied = StreamError::Status(tonic::Status::permission_denied("not a member"));
        assert_eq!(denied.refusal().as_deref(), Some("not a member"));
        let mut broken = tonic::Status::unavailable("handshake");
        broken.set_source(Arc::new(Wrapped(unknown_issuer())));
        let told = StreamError::Status(broken).refusal().unwrap_or_default();
        assert!(told.starts_with("TLS: "), "{told}");
        let down = StreamError::Status(tonic::Status::unavailable("connection refused"));
        assert_eq!(down.refusal(), None);
        assert_eq!(StreamError::Closed.refusal(), None);
    }
}
