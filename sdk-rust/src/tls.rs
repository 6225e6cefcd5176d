//! TLS for a connection: [`ConnectOptions`] and the rustls configuration built from
//! its files (the CA that signs the servers' certificates, and this client's own
//! certificate and key for servers that require one).
//!
//! ```text
//!   ConnectOptions { tls: Some(TlsOptions { ca_file, cert_file, key_file, domain }) }
//!     ──read files──▶ rustls ClientConfig ──▶ every endpoint (https://; a bare host:port gets it)
//! ```
//!
//! Without TLS options nothing changes: `http://`, plain text, as before.

use std::path::PathBuf;
use std::sync::Arc;

use concord_proto::v1::ErrorCode;

use crate::error::Error;

/// How to connect. `Default`: plain text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectOptions {
    /// TLS to the servers; None: plain text (`http://`).
    pub tls: Option<TlsOptions>,
}

/// The files of a TLS connection (PEM), as etcdctl's and grpcurl's `--cacert`,
/// `--cert` and `--key` name them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// CA certificates the server's certificate must be signed by.
    pub ca_file: PathBuf,
    /// This client's certificate, for servers that require one (with `key_file`).
    pub cert_file: Option<PathBuf>,
    /// The private key of `cert_file`.
    pub key_file: Option<PathBuf>,
    /// The name the server's certificate must carry; None: the endpoint's host
    /// (an IP address is checked against the certificate's IP SANs).
    pub domain: Option<String>,
}

impl TlsOptions {
    /// Trust the CAs in `ca_file`; no client certificate.
    pub fn with_ca(ca_file: impl Into<PathBuf>) -> TlsOptions {
        TlsOptions {
            ca_file: ca_file.into(),
            ..TlsOptions::default()
        }
    }

    /// Also present the certificate `cert_file` with its key `key_file`.
    pub fn identity(self, cert_file: impl Into<PathBuf>, key_file: impl Into<PathBuf>) -> Self {
        TlsOptions {
            cert_file: Some(cert_file.into()),
            key_file: Some(key_file.into()),
            ..self
        }
    }
}

/// The rustls configuration of `tls` (its files read and parsed now).
pub(crate) fn rustls_config(tls: &TlsOptions) -> Result<Arc<rustls::ClientConfig>, Error> {
    let identity = match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => Some((cert.as_path(), key.as_path())),
        (None, None) => None,
        _ => {
            return Err(Error::client(
                ErrorCode::BadArguments,
                "a client certificate needs its key, and a key its certificate",
            ))
        }
    };
    concord_direct::client_tls(&tls.ca_file, identity)
        .map_err(|e| Error::client(ErrorCode::BadArguments, format!("cannot use {e}")))
}
