//! Where a connection dials for an endpoint (`http://host:port`, or `https://` with
//! TLS), and the name the server's certificate must carry.

use std::sync::Arc;

use http::uri::{Authority, Uri};
use rustls::pki_types::ServerName;

use crate::Tls;

/// The authority of `uri` and, with `tls` (a client configuration and the name the
/// server's certificate must carry, by default the host), TLS for it. `https://`
/// needs `tls` and `tls` needs `https://`; the port must be given.
pub fn target(
    uri: &str,
    tls: Option<(&Arc<rustls::ClientConfig>, Option<&str>)>,
) -> Result<(Authority, Option<Tls>), String> {
    let parsed: Uri = uri.parse().map_err(|e| format!("{e}"))?;
    let authority = parsed.authority().cloned().ok_or("no host:port")?;
    if authority.port_u16().is_none() {
        return Err("no port".into());
    }
    match (parsed.scheme_str(), tls) {
        (Some("http"), None) => Ok((authority, None)),
        (Some("https"), Some((config, name))) => {
            // An IPv6 host without its brackets.
            let host = authority
                .host()
                .trim_start_matches('[')
                .trim_end_matches(']');
            let name =
                ServerName::try_from(name.unwrap_or(host).to_owned()).map_err(|e| e.to_string())?;
            Ok((authority, Some((config.clone(), name))))
        }
        (Some("http"), Some(_)) => Err("TLS options need an https:// endpoint".into()),
        (Some("https"), None) => Err("an https:// endpoint needs TLS options".into()),
        _ => Err("the scheme must be http:// or https://".into()),
    }
}
