//! One HTTP/2 connection per Concord client, called directly through the h2 crate.
//!
//! tonic's `Channel` puts a buffer task between every call and its connection (so
//! that one channel can be shared, balanced and reconnected), and hyper's HTTP/2
//! client, under it, sends a request's body from a task of its own once the new
//! stream is open: every unary call goes out as two writes (HEADERS, then DATA),
//! the server wakes for each, and the client spawns one task per call. Each bench
//! client owns its connection and needs none of that: a call's body, ready when the
//! call is made (a unary request is one message), is handed to h2 together with the
//! headers, so HEADERS and DATA leave in one write. A body that is not ready at once
//! (a client stream: KeepAlive) is sent from a task, as hyper does.
//!
//! Plain text, or TLS with ALPN h2 (`use_tls`): the same rustls and ring the server
//! uses.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use futures::FutureExt;
use http::uri::{Authority, Scheme, Uri};
use http_body::Frame;
use http_body_util::BodyExt;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tonic::body::Body;

/// Frames of a request body sent with its headers at most; the rest follow from a
/// task (a unary request is one frame).
const READY_FRAMES_MAX: usize = 16;

/// Any error of a call: h2's, or the request body's.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// TLS for every connection of this process, set once by main before any connects.
static TLS: OnceLock<tokio_rustls::TlsConnector> = OnceLock::new();

/// Makes every later connection TLS: trust the CA in `ca` (PEM), and present the
/// client certificate and key in `identity` if given.
pub fn use_tls(
    ca: &std::path::Path,
    identity: Option<(&std::path::Path, &std::path::Path)>,
) -> Result<(), String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| format!("{}: {e}", ca.display()))? {
        let cert = cert.map_err(|e| format!("{}: {e}", ca.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("{}: {e}", ca.display()))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("{}: {e}", cert.display()))?;
            let key =
                PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| e.to_string())?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    let _ = TLS.set(tokio_rustls::TlsConnector::from(Arc::new(config)));
    Ok(())
}

/// A client's HTTP/2 connection, as tonic's generated clients call it.
#[derive(Clone, Debug)]
pub struct Direct {
    send: h2::client::SendRequest<Bytes>,
    scheme: Scheme,
    authority: Authority,
}

impl Direct {
    /// Connects to `endpoint` (`http://host:port`, or `https://` once `use_tls` ran)
    /// and spawns the connection's task, which ends when every clone is dropped.
    pub async fn connect(endpoint: &str) -> Result<Direct, String> {
        let uri: Uri = endpoint.parse().map_err(|e| format!("{endpoint}: {e}"))?;
        let authority = uri
            .authority()
            .cloned()
            .ok_or_else(|| format!("{endpoint}: no host:port"))?;
        let tcp = tokio::net::TcpStream::connect(authority.as_str())
            .await
            .map_err(|e| format!("{endpoint}: {e}"))?;
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        match (uri.scheme_str(), TLS.get()) {
            (Some("https"), Some(tls)) => {
                let name = ServerName::try_from(authority.host().to_owned())
                    .map_err(|e| format!("{endpoint}: {e}"))?;
                match tls.connect(name, tcp).await {
                    Ok(stream) => Direct::over(stream, Scheme::HTTPS, authority).await,
                    Err(e) => Err(format!("TLS: {e}")),
                }
            }
            (Some("http"), None) => Direct::over(tcp, Scheme::HTTP, authority).await,
            (scheme, tls) => Err(format!(
                "scheme {scheme:?} with TLS {}",
                if tls.is_some() { "on" } else { "off" }
            )),
        }
        .map_err(|e| format!("{endpoint}: {e}"))
    }

    /// The HTTP/2 handshake on a connection made (`io`), with hyper's client windows
    /// (2 MiB a stream, 5 MiB the connection); spawns the connection's task.
    async fn over<IO>(io: IO, scheme: Scheme, authority: Authority) -> Result<Direct, String>
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (send, conn) = h2::client::Builder::new()
            .initial_window_size(2 << 20)
            .initial_connection_window_size(5 << 20)
            .handshake(io)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        Ok(Direct {
            send,
            scheme,
            authority,
        })
    }
}

type ResponseFuture =
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
            let mut send = send.ready().await?;
            let eos_with_headers = ended && ready_now.is_empty();
            let (response, mut stream) =
                send.send_request(http::Request::from_parts(head, ()), eos_with_headers)?;
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
            }))
        })
    }
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
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => self.data_done = true,
            }
        }
        match ready!(self.recv.poll_trailers(cx)) {
            Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(e))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.recv.is_end_stream()
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
                    let head = http::Response::builder()
                        .header("content-type", "application/grpc")
                        .body(())
                        .unwrap();
                    let mut send = respond.send_response(head, false).unwrap();
                    send.send_data(Bytes::from_static(&[0; 5]), false).unwrap();
                    let mut trailers = http::HeaderMap::new();
                    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                    send.send_trailers(trailers).unwrap();
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
        let direct = Direct::over(counted, Scheme::HTTP, authority)
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
        let direct = Direct::connect(&format!("http://{authority}"))
            .await
            .unwrap();
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
}
