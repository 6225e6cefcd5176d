//! A client's TLS configuration from PEM files: the CAs that sign the servers'
//! certificates, and optionally this client's own certificate and key (mTLS). Ring
//! as the crypto provider (the servers' too), ALPN h2.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The rustls client configuration that trusts the CAs in `ca_file` and, with
/// `identity` (certificate file, key file), presents that certificate. The files are
/// read now; an error names the file at fault.
pub fn client_tls(
    ca_file: &Path,
    identity: Option<(&Path, &Path)>,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let at = |what: &str, path: &Path| {
        let path = path.display().to_string();
        let what = what.to_owned();
        move |e: &dyn std::fmt::Display| format!("the {what} {path}: {e}")
    };
    let ca_err = at("CA file", ca_file);
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca_file).map_err(|e| ca_err(&e))? {
        roots
            .add(cert.map_err(|e| ca_err(&e))?)
            .map_err(|e| ca_err(&e))?;
    }
    if roots.is_empty() {
        return Err(ca_err(&"no certificate in it"));
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots);
    let mut config = match identity {
        Some((cert_file, key_file)) => {
            let cert_err = at("certificate", cert_file);
            let key_err = at("key", key_file);
            let chain = CertificateDer::pem_file_iter(cert_file)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| cert_err(&e))?;
            let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| key_err(&e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| key_err(&format!("does not go with its certificate: {e}")))?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A missing or certificate-less CA file, and a key that is not one, are
    /// refused, each naming its file.
    #[test]
    fn a_bad_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let err = client_tls(&missing, None).unwrap_err();
        assert!(err.contains("missing.pem"), "{err}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let err = client_tls(&empty, None).unwrap_err();
        assert!(
            err.contains("empty.pem") && err.contains("no certificate"),
            "{err}"
        );

        let ca = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca.cert.pem()).unwrap();
        client_tls(&ca_file, None).unwrap();
        let key_file = dir.path().join("key.pem");
        std::fs::write(&key_file, "not a key").unwrap();
        let err = client_tls(&ca_file, Some((&ca_file, &key_file))).unwrap_err();
        assert!(err.contains("key.pem"), "{err}");
        std::fs::write(&key_file, ca.signing_key.serialize_pem()).unwrap();
        let config = client_tls(&ca_file, Some((&ca_file, &key_file))).unwrap();
        assert_eq!(config.alpn_protocols, vec![b"h2".to_vec()]);
    }
}
