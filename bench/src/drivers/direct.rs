//! One HTTP/2 connection per Concord client, called directly. tonic's `Channel` puts
//! a buffer task between every call and its connection (so that one channel can be
//! shared, balanced and reconnected): one more task hand-off per call, which a load
//! generator driving 64 clients on two cores pays in CPU. Each bench client owns its
//! connection and needs none of that, so its calls go straight to hyper's
//! `SendRequest`, whose connection task is the only one left.
//!
//! Plain text, or TLS with ALPN h2 (`use_tls`): the same rustls and ring the server
//! uses.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use http::uri::{Authority, Scheme, Uri};
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tonic::body::Body;

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
    send: SendRequest<Body>,
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
        let (send, scheme) = match (uri.scheme_str(), TLS.get()) {
            (Some("https"), Some(tls)) => {
                let name = ServerName::try_from(authority.host().to_owned())
                    .map_err(|e| format!("{endpoint}: {e}"))?;
                let stream = tls
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("{endpoint}: TLS: {e}"))?;
                (handshake(stream, endpoint).await?, Scheme::HTTPS)
            }
            (Some("http"), None) => (handshake(tcp, endpoint).await?, Scheme::HTTP),
            (scheme, tls) => {
                return Err(format!(
                    "{endpoint}: scheme {scheme:?} with TLS {}",
                    if tls.is_some() { "on" } else { "off" }
                ))
            }
        };
        Ok(Direct {
            send,
            scheme,
            authority,
        })
    }
}

/// The HTTP/2 handshake on `io`; spawns the connection's task.
async fn handshake<IO>(io: IO, endpoint: &str) -> Result<SendRequest<Body>, String>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(io))
        .await
        .map_err(|e| format!("{endpoint}: {e}"))?;
    tokio::spawn(conn);
    Ok(send)
}

type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<http::Response<Incoming>, hyper::Error>> + Send>>;

impl tower_service::Service<http::Request<Body>> for Direct {
    type Response = http::Response<Incoming>;
    type Error = hyper::Error;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.send.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        // tonic's generated clients send the path alone; HTTP/2 needs :scheme and
        // :authority too.
        let mut parts = request.uri().clone().into_parts();
        parts.scheme = Some(self.scheme.clone());
        parts.authority = Some(self.authority.clone());
        if let Ok(uri) = Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
        Box::pin(self.send.send_request(request))
    }
}
