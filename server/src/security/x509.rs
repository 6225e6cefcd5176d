//! The identity a client certificate stands for, by the configured rule
//! (`identity_from`): the first of its URI SAN, DNS SAN and subject CN (in the
//! configured order) that the leaf certificate has.
//!
//! ```text
//!   leaf certificate (DER) ──x509-parser──▶ CertNames { uris, dns, cns } ──rule──▶ identity
//! ```
//!
//! What it must not do: verify anything (rustls has, before this runs), or fail a
//! connection (a certificate with none of the names has no identity; the policy
//! then treats the caller as it would one without a certificate: see security/mod.rs).

use std::sync::Arc;

use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;

use crate::config::IdentitySource;

/// The names a certificate carries, in the order it lists them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CertNames {
    /// URI subject alternative names.
    pub uris: Vec<String>,
    /// DNS subject alternative names.
    pub dns: Vec<String>,
    /// Subject common names.
    pub cns: Vec<String>,
}

impl CertNames {
    /// The names of the DER certificate `der`; None when it does not parse.
    pub fn of(der: &[u8]) -> Option<CertNames> {
        let (_, cert) = X509Certificate::from_der(der).ok()?;
        let mut names = CertNames::default();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::URI(uri) => names.uris.push((*uri).to_owned()),
                    GeneralName::DNSName(dns) => names.dns.push((*dns).to_owned()),
                    _ => {}
                }
            }
        }
        names.cns = cert
            .subject()
            .iter_common_name()
            .filter_map(|cn| cn.as_str().ok())
            .map(str::to_owned)
            .collect();
        Some(names)
    }

    /// The identity by `rule`: the first name of the first source present.
    pub fn identity(&self, rule: &[IdentitySource]) -> Option<&str> {
        rule.iter().find_map(|source| {
            let names = match source {
                IdentitySource::UriSan => &self.uris,
                IdentitySource::DnsSan => &self.dns,
                IdentitySource::Cn => &self.cns,
            };
            names.iter().find(|n| !n.is_empty()).map(String::as_str)
        })
    }
}

/// The identity of the DER leaf certificate `der` by `rule` (None: unparsable, or
/// none of the rule's sources present).
pub fn identity_of(der: &[u8], rule: &[IdentitySource]) -> Option<Arc<str>> {
    CertNames::of(der)?.identity(rule).map(Arc::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, KeyPair, SanType};

    /// A self-signed certificate with these names (rcgen).
    fn cert(cn: Option<&str>, dns: &[&str], uris: &[&str]) -> Vec<u8> {
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            params.distinguished_name.push(DnType::CommonName, cn);
        }
        for d in dns {
            params
                .subject_alt_names
                .push(SanType::DnsName((*d).try_into().unwrap()));
        }
        for u in uris {
            params
                .subject_alt_names
                .push(SanType::URI((*u).try_into().unwrap()));
        }
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    const DEFAULT: [IdentitySource; 3] = [
        IdentitySource::UriSan,
        IdentitySource::DnsSan,
        IdentitySource::Cn,
    ];

    #[test]
    fn the_first_source_present_wins() {
        let all = cert(
            Some("team-a"),
            &["a.example", "b.example"],
            &["spiffe://x/a"],
        );
        let id =
            |der: &[u8], rule: &[IdentitySource]| identity_of(der, rule).map(|s| s.to_string());
        assert_eq!(id(&all, &DEFAULT).as_deref(), Some("spiffe://x/a"));
        let no_uri = cert(Some("team-a"), &["a.example"], &[]);
        assert_eq!(id(&no_uri, &DEFAULT).as_deref(), Some("a.example"));
        let cn_only = cert(Some("team-a"), &[], &[]);
        assert_eq!(id(&cn_only, &DEFAULT).as_deref(), Some("team-a"));
        let nothing = cert(None, &[], &[]);
        assert_eq!(id(&nothing, &DEFAULT), None);
        // A rule in another order, or with fewer sources.
        let cn_first = [IdentitySource::Cn, IdentitySource::UriSan];
        assert_eq!(id(&all, &cn_first).as_deref(), Some("team-a"));
        assert_eq!(id(&no_uri, &[IdentitySource::UriSan]), None);
        assert_eq!(
            id(&all, &[IdentitySource::DnsSan]).as_deref(),
            Some("a.example")
        );
        assert_eq!(id(b"not a certificate", &DEFAULT), None);
    }

    #[test]
    fn names_are_listed_in_order() {
        let der = cert(Some("n"), &["a", "b"], &["u:1", "u:2"]);
        let names = CertNames::of(&der).unwrap();
        assert_eq!(names.uris, ["u:1", "u:2"]);
        assert_eq!(names.dns, ["a", "b"]);
        assert_eq!(names.cns, ["n"]);
    }
}
