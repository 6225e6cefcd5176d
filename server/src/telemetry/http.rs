//! The metrics port and the health port: HTTP/1.1 on listeners of their own.
//! The metrics port (`metrics_addr`) serves `/metrics` (Prometheus text, version
//! 0.0.4), `/healthz` (the process answers) and `/readyz` (200 while the server
//! serves, 503 with the reason otherwise); over TLS with the client port's
//! certificate (and its client-certificate rule) whenever the client port serves
//! TLS, in plain text otherwise. The health port (`health_addr`) serves only
//! `/healthz` and `/readyz`, in plain text, for probes that cannot present a
//! certificate (Kubernetes' kubelet).
//!
//! ```text
//!   accept ─▶ slot free? (CONNECTIONS_MAX) ─no─▶ closed at once
//!              └─yes─▶ task: [TLS handshake ≤ tls_handshake_timeout_ms]
//!                       hyper http1, one request, head ≤ HEAD_BYTES_MAX,
//!                       whole connection ≤ CONNECTION_TIME_MAX ─▶ route ─▶ close
//! ```
//!
//! Bounded like the other ports: at most `CONNECTIONS_MAX` connections at once, one
//! request per connection (no keep-alive), a request head of at most
//! `HEAD_BYTES_MAX` bytes (a longer one is answered 431 by hyper), its body never
//! read, and every connection closed after `CONNECTION_TIME_MAX` whatever it does.
//! Only GET and HEAD are served.
//!
//! What it must not do: panic on any input, or hold anything the server needs (a
//! scrape reads atomics and takes the tree's read lock only to clone it, O(1)); or
//! serve anything but `/healthz` and `/readyz` on the health port, which anyone who
//! can reach it may ask.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::security::ServerTls;

/// Connections served at once; more are accepted and closed at once.
pub const CONNECTIONS_MAX: usize = 16;
/// Longest a connection may stay open, whatever it sends (or does not).
pub const CONNECTION_TIME_MAX: Duration = Duration::from_secs(10);
/// Longest a client may take to send its request head.
pub const HEAD_TIME_MAX: Duration = Duration::from_secs(5);
/// Largest request head read (hyper's smallest allowed buffer).
pub const HEAD_BYTES_MAX: usize = 8192;
/// How long the accept loop pauses after an accept error (out of descriptors).
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// Whether the server serves now, for `/readyz`.
pub trait Probe: Send + Sync + 'static {
    /// Ok while the server serves; otherwise a short reason.
    fn ready(&self) -> Result<(), String>;
}

/// What the endpoint answers from.
pub struct Endpoint {
    /// Every metric and collector, encoded on each scrape; None: the health port,
    /// where `/metrics` is not found.
    pub registry: Option<Registry>,
    /// The readiness rule.
    pub probe: Arc<dyn Probe>,
    /// TLS for every connection (the client port's certificate, reloaded with it);
    /// None: plain text.
    pub tls: Option<ServerTls>,
}

/// ALPN for HTTP/1.1, the only protocol served here.
const ALPN_HTTP1: &[u8] = b"http/1.1";

/// Serves `listener` until `stop` resolves; connections still open then are dropped.
pub async fn serve(listener: TcpListener, endpoint: Endpoint, stop: impl Future<Output = ()>) {
    let endpoint = Arc::new(endpoint);
    let slots = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    let mut tasks = JoinSet::new();
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => accepted,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(error = %e, "metrics port: accept failed; pausing");
                tokio::time::sleep(ACCEPT_PAUSE).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "metrics port: too many connections; closed");
            drop(stream);
            continue;
        };
        let endpoint = endpoint.clone();
        tasks.spawn(async move {
            let _slot = slot;
            serve_connection(stream, peer, endpoint).await;
        });
    }
    tasks.abort_all();
}

/// One connection: a TLS handshake first if the port serves TLS, then one request,
/// bounded in head size and in time.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    endpoint: Arc<Endpoint>,
) {
    let Some(tls) = endpoint.tls.clone() else {
        return serve_http(stream, peer, endpoint).await;
    };
    // The client port's configuration as of now, speaking HTTP/1.1 instead of h2.
    let mut config = (*tls.server_config()).clone();
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let timeout = tls.handshake_timeout();
    match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => serve_http(stream, peer, endpoint).await,
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "metrics port: TLS handshake failed"),
        Err(_) => tracing::debug!(%peer, "metrics port: no TLS handshake within {timeout:?}"),
    }
}

/// One request over `stream`, plain or TLS.
async fn serve_http<S>(stream: S, peer: SocketAddr, endpoint: Arc<Endpoint>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request| {
        let endpoint = endpoint.clone();
        async move { Ok::<_, Infallible>(answer(&endpoint, &request)) }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .keep_alive(false)
        .max_buf_size(HEAD_BYTES_MAX)
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIME_MAX)
        .serve_connection(TokioIo::new(stream), service);
    match tokio::time::timeout(CONNECTION_TIME_MAX, connection).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "metrics port: connection failed"),
        Err(_) => tracing::debug!(%peer, "metrics port: connection open too long; closed"),
    }
}

/// The response to one request.
fn answer<B>(endpoint: &Endpoint, request: &Request<B>) -> Response<Full<Bytes>> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n".into());
    }
    match (request.uri().path(), &endpoint.registry) {
        ("/metrics", Some(registry)) => metrics(registry),
        ("/healthz", _) => text(StatusCode::OK, "ok\n".into()),
        ("/readyz", _) => match endpoint.probe.ready() {
            Ok(()) => text(StatusCode::OK, "ok\n".into()),
            Err(why) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {why}\n"),
            ),
        },
        (_, Some(_)) => text(
            StatusCode::NOT_FOUND,
            "not found; try /metrics, /healthz or /readyz\n".into(),
        ),
        (_, None) => text(
            StatusCode::NOT_FOUND,
            "not found; the health port serves /healthz and /readyz only\n".into(),
        ),
    }
}

/// `/metrics`: every registered metric in the Prometheus text format.
fn metrics(registry: &Registry) -> Response<Full<Bytes>> {
    let mut body = String::new();
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut body, registry) {
        tracing::warn!(error = %e, "metrics could not be encoded");
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "metrics could not be encoded\n".into(),
        );
    }
    response(
        StatusCode::OK,
        prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        body,
    )
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    response(status, "text/plain; charset=utf-8", body)
}

fn response(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    r
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    struct Flag(AtomicBool);

    impl Probe for Flag {
        fn ready(&self) -> Result<(), String> {
            if self.0.load(Ordering::Relaxed) {
                Ok(())
            } else {
                Err("no leader".into())
            }
        }
    }

    async fn start() -> (SocketAddr, Arc<Flag>, tokio::sync::oneshot::Sender<()>) {
        start_port(true).await
    }

    /// The metrics port (`metrics`), or the health port.
    async fn start_port(
        metrics: bool,
    ) -> (SocketAddr, Arc<Flag>, tokio::sync::oneshot::Sender<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let mut registry = Registry::default();
        let counter = prometheus_client::metrics::counter::Counter::<u64>::default();
        counter.inc();
        registry.register("concord_test", "a test counter", counter);
        let endpoint = Endpoint {
            registry: metrics.then_some(registry),
            probe: flag.clone(),
            tls: None,
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(listener, endpoint, async {
            let _ = stop_rx.await;
        }));
        (addr, flag, stop_tx)
    }

    /// Sends `request` as is and returns everything the server answered.
    async fn exchange(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request).await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
            .await
            .expect("the server kept the connection open")
            .unwrap();
        String::from_utf8_lossy(&out).into_owned()
    }

    async fn get(addr: SocketAddr, path: &str) -> String {
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
        exchange(addr, req.as_bytes()).await
    }

    #[tokio::test]
    async fn routes_answer_and_close() {
        let (addr, flag, _stop) = start().await;
        let m = get(addr, "/metrics").await;
        assert!(m.starts_with("HTTP/1.1 200"), "{m}");
        assert!(m.contains("text/plain; version=0.0.4"), "{m}");
        assert!(m.contains("# TYPE concord_test_total counter\n"), "{m}");
        assert!(m.contains("\nconcord_test_total 1\n"), "{m}");
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        let not_ready = get(addr, "/readyz").await;
        assert!(not_ready.starts_with("HTTP/1.1 503"), "{not_ready}");
        assert!(not_ready.ends_with("not ready: no leader\n"), "{not_ready}");
        flag.0.store(true, Ordering::Relaxed);
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200"));
        assert!(get(addr, "/nope").await.starts_with("HTTP/1.1 404"));
        let post = exchange(
            addr,
            b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
        )
        .await;
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
    }

    #[tokio::test]
    async fn the_health_port_serves_health_and_readiness_only() {
        let (addr, flag, _stop) = start_port(false).await;
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 503"));
        flag.0.store(true, Ordering::Relaxed);
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200"));
        for path in ["/metrics", "/", "/metrics/", "/nope"] {
            let answer = get(addr, path).await;
            assert!(answer.starts_with("HTTP/1.1 404"), "{path}: {answer}");
            assert!(!answer.contains("concord_test"), "{path}: {answer}");
        }
    }

    /// Garbage, an oversized head and a silent client get an answer or a close,
    /// never a hang or a panic, and the port keeps serving.
    #[tokio::test]
    async fn bad_input_is_bounded() {
        let (addr, _flag, _stop) = start().await;
        let garbage = exchange(addr, b"\x00\x01\x02 not http\r\n\r\n").await;
        assert!(
            garbage.is_empty() || garbage.starts_with("HTTP/1.1 400"),
            "{garbage}"
        );
        let long = format!(
            "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Long: {}\r\n\r\n",
            "a".repeat(64 * 1024)
        );
        let answered = exchange(addr, long.as_bytes()).await;
        assert!(
            answered.is_empty() || answered.starts_with("HTTP/1.1 431"),
            "{answered}"
        );
        // A client that sends nothing holds one slot (until HEAD_TIME_MAX); the
        // others still serve.
        let silent = TcpStream::connect(addr).await.unwrap();
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        drop(silent);
    }

    /// Beyond CONNECTIONS_MAX open connections, more are closed at once.
    #[tokio::test]
    async fn connections_are_capped() {
        let (addr, _flag, _stop) = start().await;
        let mut held = Vec::new();
        for _ in 0..CONNECTIONS_MAX {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\n").await.unwrap();
            held.push(s);
        }
        // Poll until the server has taken all the slots, then one more is closed.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let mut extra = TcpStream::connect(addr).await.unwrap();
            let mut buf = [0u8; 16];
            let read = tokio::time::timeout(Duration::from_millis(500), extra.read(&mut buf)).await;
            if matches!(read, Ok(Ok(0)) | Ok(Err(_))) {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "never refused");
        }
        drop(held);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let answer = get(addr, "/healthz").await;
            if answer.starts_with("HTTP/1.1 200") {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "never served again");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
