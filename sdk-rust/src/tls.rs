//! TLS for a connection: [`ConnectOptions`] and the tonic `ClientTlsConfig` built
//! from its files (the CA that signs the servers' certificates, and this client's
//! own certificate and key for servers that require one).
//!
//! ```text
//!   ConnectOptions { tls: Some(TlsOptions { ca_file, cert_file, key_file }) }
//!     ──read files──▶ ClientTlsConfig ──▶ every endpoint (https://; a bare host:port gets it)
//! ```
//!
//! Without TLS options nothing changes: `http://`, plain text, as before.

use std::path::{Path, PathBuf};

use concord_proto::v1::ErrorCode;
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

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

fn read(what: &str, path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| {
        Error::client(
            ErrorCode::BadArguments,
            format!("cannot read the {what} {}: {e}", path.display()),
        )
    })
}

/// The tonic TLS configuration of `tls` (its files read now).
pub(crate) fn client_config(tls: &TlsOptions) -> Result<ClientTlsConfig, Error> {
    let mut config = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read("CA file", &tls.ca_file)?));
    match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            config = config.identity(Identity::from_pem(
                read("certificate", cert)?,
                read("key", key)?,
            ));
        }
        (None, None) => {}
        _ => {
            return Err(Error::client(
                ErrorCode::BadArguments,
                "a client certificate needs its key, and a key its certificate",
            ))
        }
    }
    if let Some(domain) = &tls.domain {
        config = config.domain_name(domain.clone());
    }
    Ok(config)
}
