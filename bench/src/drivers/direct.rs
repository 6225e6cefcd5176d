//! One HTTP/2 connection per Concord client, called directly through the h2 crate
//! (`concord_direct::Direct`: a unary call's HEADERS and DATA leave in one write).
//!
//! tonic's `Channel` puts a buffer task between every call and its connection (so
//! that one channel can be shared, balanced and reconnected), and hyper's client
//! under it writes a unary call in two. Each bench client owns its connection and
//! needs none of that; it connects once and never reconnects.
//!
//! Plain text, or TLS with ALPN h2 (`use_tls`): the same rustls and ring the server
//! uses.

use std::sync::{Arc, OnceLock};

use concord_direct::Direct;

/// TLS for every connection of this process, set once by main before any connects.
static TLS: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();

/// Makes every later connection TLS: trust the CA in `ca` (PEM), and present the
/// client certificate and key in `identity` if given.
pub fn use_tls(
    ca: &std::path::Path,
    identity: Option<(&std::path::Path, &std::path::Path)>,
) -> Result<(), String> {
    let _ = TLS.set(concord_direct::client_tls(ca, identity)?);
    Ok(())
}

/// Connects to `endpoint` (`http://host:port`, or `https://` once `use_tls` ran).
pub async fn connect(endpoint: &str) -> Result<Direct, String> {
    let tls = TLS.get().map(|config| (config, None));
    let (authority, tls) =
        concord_direct::target(endpoint, tls).map_err(|e| format!("{endpoint}: {e}"))?;
    Direct::connect(authority, tls, None)
        .await
        .map_err(|e| format!("{endpoint}: {e}"))
}
