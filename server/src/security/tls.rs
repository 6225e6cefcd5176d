//! TLS for both ports: the rustls server configurations (reloaded from their files
//! without a restart), and the client side of this server's own peer links.
//!
//! ```text
//!   cert/key/CA files ──read, parse, check──▶ ServerConfig ──ArcSwap──▶ each NEW handshake
//!        ▲ every tls_reload_interval_ms (contents changed) or SIGHUP      (listen.rs)
//!        └ a bad file: logged, naming it; the old configuration stays
//!   peer files ──read at every connect──▶ ClientTlsConfig (server name = the member's peer_identity)
//!                                         or rustls ClientConfig (the same, for the write forwarder)
//! ```
//!
//! A reload replaces the configuration new handshakes get; connections already open
//! (and the sessions on them) keep theirs. The reloader task holds only a weak
//! reference: it ends when the last `ServerTls` handle is dropped.
//!
//! The crypto provider is ring's, named explicitly, so nothing here depends on a
//! process-wide default (main installs one too, for anything that does).
//!
//! What it must not do: accept a key that does not match its certificate, serve
//! plain text where TLS is configured, or block a runtime thread on more than
//! reading a few small files.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

use crate::config::{Config, IdentitySource};

/// The ALPN protocol gRPC speaks (grpc-go refuses a server that does not offer it).
const ALPN_H2: &[u8] = b"h2";

/// A TLS file that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{setting} {}: {reason}", file.display())]
pub struct TlsError {
    /// The setting that names the file (`cert_file`, `peer_key_file`, ...).
    pub setting: &'static str,
    pub file: PathBuf,
    pub reason: String,
}

/// The files of one server configuration, with the settings that name them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerTlsFiles {
    /// The certificate chain (leaf first).
    pub cert: (&'static str, PathBuf),
    /// Its private key.
    pub key: (&'static str, PathBuf),
    /// CAs a client certificate must be signed by; None: no client certificate asked.
    pub ca: Option<(&'static str, PathBuf)>,
}

impl ServerTlsFiles {
    /// The client port's files, when `cert_file` and `key_file` are set.
    pub fn client_port(config: &Config) -> Option<ServerTlsFiles> {
        Some(ServerTlsFiles {
            cert: ("cert_file", config.cert_file.clone()?),
            key: ("key_file", config.key_file.clone()?),
            ca: config
                .trusted_ca_file
                .clone()
                .map(|f| ("trusted_ca_file", f)),
        })
    }

    /// The peer port's files, when all three peer files are set (client
    /// certificates always required).
    pub fn peer_port(config: &Config) -> Option<ServerTlsFiles> {
        Some(ServerTlsFiles {
            cert: ("peer_cert_file", config.peer_cert_file.clone()?),
            key: ("peer_key_file", config.peer_key_file.clone()?),
            ca: Some(("peer_trusted_ca_file", config.peer_trusted_ca_file.clone()?)),
        })
    }

    /// Every file, with its setting.
    fn all(&self) -> impl Iterator<Item = &(&'static str, PathBuf)> {
        [&self.cert, &self.key].into_iter().chain(self.ca.as_ref())
    }
}

/// The bytes of the files, as last read.
type Contents = Vec<Vec<u8>>;

fn read(files: &ServerTlsFiles) -> Result<Contents, TlsError> {
    files
        .all()
        .map(|(setting, path)| {
            std::fs::read(path).map_err(|e| error(setting, path, format!("cannot read: {e}")))
        })
        .collect()
}

fn error(setting: &'static str, file: &Path, reason: impl Into<String>) -> TlsError {
    TlsError {
        setting,
        file: file.to_owned(),
        reason: reason.into(),
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates in PEM `bytes` (at least one).
fn certificates(
    (setting, path): &(&'static str, PathBuf),
    bytes: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| error(setting, path, format!("bad PEM: {e}")))?;
    if certs.is_empty() {
        return Err(error(setting, path, "holds no certificate"));
    }
    Ok(certs)
}

/// The private key in PEM `bytes`.
fn private_key(
    (setting, path): &(&'static str, PathBuf),
    bytes: &[u8],
) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(bytes)
        .map_err(|e| error(setting, path, format!("bad private key: {e}")))
}

/// The CA certificates in PEM `bytes`, as roots.
fn roots(file: &(&'static str, PathBuf), bytes: &[u8]) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(file, bytes)? {
        roots
            .add(cert)
            .map_err(|e| error(file.0, &file.1, format!("not a usable CA: {e}")))?;
    }
    Ok(roots)
}

/// A server configuration from the files' contents (in `files.all()` order).
fn build(files: &ServerTlsFiles, contents: &Contents) -> Result<ServerConfig, TlsError> {
    let (cert, key, ca) = match contents.as_slice() {
        [cert, key] => (cert, key, None),
        [cert, key, ca] => (cert, key, Some(ca)),
        _ => return Err(error(files.cert.0, &files.cert.1, "internal: files unread")),
    };
    let chain = certificates(&files.cert, cert)?;
    let key = private_key(&files.key, key)?;
    let (key_setting, key_path) = &files.key;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| error(files.cert.0, &files.cert.1, e.to_string()))?;
    let builder = match (&files.ca, ca) {
        (Some(file), Some(bytes)) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots(file, bytes)?),
                provider(),
            )
            .build()
            .map_err(|e| error(file.0, &file.1, e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| {
        error(
            key_setting,
            key_path,
            format!("does not go with {}: {e}", files.cert.1.display()),
        )
    })?;
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(config)
}

/// A port's TLS: the configuration new handshakes use (reloaded in the background),
/// the handshake timeout, and the rule that names a client by its certificate.
/// Cheap to clone.
#[derive(Clone)]
pub struct ServerTls {
    inner: Arc<Inner>,
}

struct Inner {
    /// What the next handshake uses; swapped whole by a reload.
    config: ArcSwap<ServerConfig>,
    /// `identity_from`.
    rule: Vec<IdentitySource>,
    handshake_timeout: Duration,
    /// Successful reloads since start (tests and logs).
    reloads: AtomicU64,
    /// The port's name in logs.
    port: &'static str,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("port", &self.inner.port)
            .field("handshake_timeout", &self.inner.handshake_timeout)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// The client port's TLS, when configured. Must run inside a tokio runtime (it
    /// starts the reloader).
    pub fn client_port(config: &Config) -> Result<Option<ServerTls>, TlsError> {
        ServerTlsFiles::client_port(config)
            .map(|files| ServerTls::start(files, config, "client"))
            .transpose()
    }

    /// The peer port's mTLS, when configured (inside a tokio runtime).
    pub fn peer_port(config: &Config) -> Result<Option<ServerTls>, TlsError> {
        ServerTlsFiles::peer_port(config)
            .map(|files| ServerTls::start(files, config, "peer"))
            .transpose()
    }

    /// Loads `files` (an error names the bad one) and starts the reloader, with
    /// `config`'s timeout, reload interval and identity rule.
    pub fn start(
        files: ServerTlsFiles,
        config: &Config,
        port: &'static str,
    ) -> Result<ServerTls, TlsError> {
        let contents = read(&files)?;
        let server_config = build(&files, &contents)?;
        let tls = ServerTls {
            inner: Arc::new(Inner {
                config: ArcSwap::from_pointee(server_config),
                rule: config.identity_from.clone(),
                handshake_timeout: Duration::from_millis(config.tls_handshake_timeout_ms),
                reloads: AtomicU64::new(0),
                port,
            }),
        };
        let interval = Duration::from_millis(config.tls_reload_interval_ms.max(1));
        tokio::spawn(reloader(
            Arc::downgrade(&tls.inner),
            files,
            contents,
            interval,
        ));
        Ok(tls)
    }

    /// The configuration for a handshake starting now.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.inner.config.load_full()
    }

    /// A TLS acceptor with the current configuration.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.server_config())
    }

    /// The identity of a client whose leaf certificate is `leaf` (None: none of the
    /// rule's names, or unparsable).
    pub fn identity(&self, leaf: &CertificateDer<'_>) -> Option<Arc<str>> {
        super::x509::identity_of(leaf, &self.inner.rule)
    }

    /// How long a handshake may take.
    pub fn handshake_timeout(&self) -> Duration {
        self.inner.handshake_timeout
    }

    /// Successful reloads so far.
    pub fn reloads(&self) -> u64 {
        self.inner.reloads.load(Ordering::Relaxed)
    }

    /// The port's name (`client`, `peer`).
    pub fn port(&self) -> &'static str {
        self.inner.port
    }
}

/// Re-reads the files every `interval`, and at once on SIGHUP; builds a new
/// configuration when they changed (or on SIGHUP, even if not). Ends when the
/// `ServerTls` it serves is gone.
async fn reloader(
    inner: Weak<Inner>,
    files: ServerTlsFiles,
    mut seen: Contents,
    interval: Duration,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut hangup = Hangup::new();
    // The last error logged, so a bad file is reported once, not every tick.
    let mut reported: Option<TlsError> = None;
    loop {
        let forced = tokio::select! {
            _ = tick.tick() => false,
            () = hangup.recv() => true,
        };
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let outcome = read(&files).and_then(|contents| {
            if !forced && contents == seen {
                return Ok(None);
            }
            seen = contents;
            build(&files, &seen).map(Some)
        });
        match outcome {
            Ok(None) => {}
            Ok(Some(config)) => {
                inner.config.store(Arc::new(config));
                inner.reloads.fetch_add(1, Ordering::Relaxed);
                reported = None;
                tracing::info!(port = inner.port, forced, "TLS certificates reloaded");
            }
            Err(e) => {
                if forced || reported.as_ref() != Some(&e) {
                    tracing::error!(
                        port = inner.port,
                        error = %e,
                        "TLS reload failed; the previous certificates stay in use"
                    );
                }
                reported = Some(e);
            }
        }
    }
}

/// SIGHUP, where there is such a thing.
struct Hangup {
    #[cfg(unix)]
    signal: Option<tokio::signal::unix::Signal>,
}

impl Hangup {
    fn new() -> Hangup {
        #[cfg(unix)]
        {
            let kind = tokio::signal::unix::SignalKind::hangup();
            Hangup {
                signal: tokio::signal::unix::signal(kind).ok(),
            }
        }
        #[cfg(not(unix))]
        Hangup {}
    }

    /// The next SIGHUP (never, without one).
    async fn recv(&mut self) {
        #[cfg(unix)]
        if let Some(signal) = &mut self.signal {
            if signal.recv().await.is_some() {
                return;
            }
        }
        std::future::pending::<()>().await;
    }
}

/// This server's side of its peer links: its peer certificate as client identity,
/// and the CAs a member's certificate must be signed by. The files are read at
/// every connect, so a reconnect picks up rotated ones.
#[derive(Clone, Debug)]
pub struct PeerClientTls {
    files: ServerTlsFiles,
    /// What each member's peer certificate must name (`security::peers::peer_identity`).
    identities: Arc<std::collections::HashMap<u64, String>>,
    /// For `files_changed`: how often to look, and what was there last time.
    check_every: Duration,
    last_check: Arc<std::sync::Mutex<Option<(std::time::Instant, Contents)>>>,
}

impl PeerClientTls {
    /// The peer files, when all three are set.
    pub fn from_config(config: &Config) -> Option<PeerClientTls> {
        let members = config.ensemble();
        let identities = members
            .iter()
            .filter_map(|m| Some((m.id, super::peers::peer_identity(&members, m.id)?)))
            .collect();
        ServerTlsFiles::peer_port(config).map(|files| PeerClientTls {
            files,
            identities: Arc::new(identities),
            check_every: Duration::from_millis(config.tls_reload_interval_ms),
            last_check: Arc::default(),
        })
    }

    /// Whether the files changed since the last call that looked; looks at most
    /// every `tls_reload_interval_ms` (false in between, and at the first look).
    /// For holders of long-lived channels (the write forwarder), which make new
    /// ones when it says so.
    pub fn files_changed(&self) -> bool {
        let Ok(mut last) = self.last_check.lock() else {
            return false;
        };
        let now = std::time::Instant::now();
        if last
            .as_ref()
            .is_some_and(|(at, _)| now.duration_since(*at) < self.check_every)
        {
            return false;
        }
        let contents = read(&self.files).unwrap_or_default();
        let changed = last.as_ref().is_some_and(|(_, seen)| *seen != contents);
        *last = Some((now, contents));
        changed
    }

    /// A client configuration for dialling member `member_id`: its certificate
    /// must name the member's peer identity and be signed by the peer CAs.
    pub fn client_config(&self, member_id: u64) -> Result<ClientTlsConfig, TlsError> {
        let [cert, key, ca] = self.contents()?;
        Ok(ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(ca))
            .identity(Identity::from_pem(cert, key))
            .domain_name(self.identity_of(member_id)))
    }

    /// The same as a rustls configuration (ALPN h2), with the name the member's
    /// certificate must carry, for links driven through h2 itself (the write
    /// forwarder's `concord_direct` connections).
    pub fn rustls_config(
        &self,
        member_id: u64,
    ) -> Result<(Arc<rustls::ClientConfig>, ServerName<'static>), TlsError> {
        let [cert, key, ca] = self.contents()?;
        let (cert_setting, cert_path) = &self.files.cert;
        let (key_setting, key_path) = &self.files.key;
        let chain = certificates(&self.files.cert, &cert)?;
        let key = private_key(&self.files.key, &key)?;
        let roots = match &self.files.ca {
            Some(file) => roots(file, &ca)?,
            None => return Err(error(cert_setting, cert_path, "internal: no peer CA")),
        };
        let mut config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| error(cert_setting, cert_path, e.to_string()))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| {
                error(
                    key_setting,
                    key_path,
                    format!("does not go with {}: {e}", cert_path.display()),
                )
            })?;
        config.alpn_protocols = vec![ALPN_H2.to_vec()];
        let identity = self.identity_of(member_id);
        let name = ServerName::try_from(identity.clone()).map_err(|e| {
            error(
                cert_setting,
                cert_path,
                format!(
                    "member {member_id}'s peer identity {identity:?} is not a server name: {e}"
                ),
            )
        })?;
        Ok((Arc::new(config), name))
    }

    /// The peer files' contents: certificate, key, CA.
    fn contents(&self) -> Result<[Vec<u8>; 3], TlsError> {
        let (setting, file) = &self.files.cert;
        <[Vec<u8>; 3]>::try_from(read(&self.files)?)
            .map_err(|_| error(setting, file, "internal: peer files unread"))
    }

    /// What member `member_id`'s peer certificate must name.
    fn identity_of(&self, member_id: u64) -> String {
        self.identities
            .get(&member_id)
            .cloned()
            .unwrap_or_else(|| super::peers::default_identity(member_id))
    }
}

/// An endpoint for member `member_id`'s peer port at `addr`: `https` with this
/// server's peer identity when `tls` is set, plain `http` otherwise.
pub fn peer_endpoint(
    addr: &crate::address::Address,
    member_id: u64,
    tls: Option<&PeerClientTls>,
) -> Result<Endpoint, String> {
    let Some(tls) = tls else {
        return Endpoint::from_shared(format!("http://{addr}")).map_err(|e| e.to_string());
    };
    let config = tls.client_config(member_id).map_err(|e| e.to_string())?;
    Endpoint::from_shared(format!("https://{addr}"))
        .map_err(|e| e.to_string())?
        .tls_config(config)
        .map_err(|e| format!("peer TLS for member {member_id}: {e}"))
}

#[cfg(test)]
#[path = "tls_tests.rs"]
mod tests;
