//! `concord certs DIR`: a development CA and the certificates an ensemble and its
//! clients need (rcgen), written as PEM files. For development and tests: a real
//! deployment issues its certificates from its own PKI.
//!
//! ```text
//!   DIR/ca.pem, ca-key.pem                      the CA (signs everything below)
//!   DIR/server-N.pem, server-N-key.pem          member N's client port: SANs 127.0.0.1, ::1, localhost,
//!                                               and every name of `--dns` and `--ip`
//!   DIR/peer-N.pem, peer-N-key.pem              member N's peer links: DNS SAN concord-peer-N
//!                                               (security::peers::default_identity), IP SAN 127.0.0.1;
//!                                               serverAuth + clientAuth
//!   DIR/NAME.pem, NAME-key.pem                  a client: CN = NAME (its identity), clientAuth
//! ```
//!
//! Keys are written with mode 0600. Nothing is overwritten unless asked (`force`):
//! when any file exists, none is written.
//!
//! What it must not do: write a partial set over existing files, or be used by a
//! running server (it is a tool).

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// Why certificates could not be made or written.
#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    #[error("cannot make a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} exists; pass --force to overwrite", .0.display())]
    Exists(PathBuf),
    #[error("bad client name {0:?}: use letters, digits, '-', '_' and '.'")]
    BadName(String),
    #[error("bad DNS name {0:?}: {1}")]
    BadDnsName(String, &'static str),
}

/// The common name of the development CA.
const CA_NAME: &str = "Concord development CA";

/// A certificate authority that signs leaves.
pub struct Ca {
    /// What leaves name as their issuer.
    params: CertificateParams,
    key: KeyPair,
    /// The CA certificate, PEM.
    pub cert_pem: String,
}

/// What a leaf certificate says.
#[derive(Clone, Debug, Default)]
pub struct Leaf {
    /// Subject common name.
    pub cn: String,
    /// DNS subject alternative names.
    pub dns: Vec<String>,
    /// IP subject alternative names.
    pub ips: Vec<IpAddr>,
    /// URI subject alternative names.
    pub uris: Vec<String>,
    /// EKU serverAuth.
    pub server_auth: bool,
    /// EKU clientAuth.
    pub client_auth: bool,
    /// Valid from January 1st of the first year to January 1st of the second;
    /// None: from last year for ten years.
    pub valid_years: Option<(i32, i32)>,
}

/// A certificate and its key, PEM.
#[derive(Clone, Debug)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

/// This year (UTC), from the system clock.
fn this_year() -> i32 {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // 365.2425 days a year: off by a day at most around New Year, which the
    // one-year margin below absorbs.
    1970 + i32::try_from(secs / 31_556_952).unwrap_or(0)
}

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, CA_NAME);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let year = this_year();
    params.not_before = rcgen::date_time_ymd(year - 1, 1, 1);
    params.not_after = rcgen::date_time_ymd(year + 10, 1, 1);
    params
}

impl Ca {
    /// A new CA with a fresh key.
    pub fn generate() -> Result<Ca, CertsError> {
        let key = KeyPair::generate()?;
        let params = ca_params();
        let cert_pem = params.self_signed(&key)?.pem();
        Ok(Ca {
            params,
            key,
            cert_pem,
        })
    }

    /// The CA `concord certs` made, from its files (`ca.pem`, `ca-key.pem`), to
    /// sign more leaves (tests make expired or odd certificates this way).
    pub fn load(dir: &Path) -> Result<Ca, CertsError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|source| CertsError::Io { path, source })
        };
        let key = KeyPair::from_pem(&read("ca-key.pem")?)?;
        Ok(Ca {
            params: ca_params(),
            key,
            cert_pem: read("ca.pem")?,
        })
    }

    /// A leaf signed by this CA, with a fresh key.
    pub fn issue(&self, leaf: &Leaf) -> Result<Issued, CertsError> {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, leaf.cn.as_str());
        params.distinguished_name = dn;
        for name in &leaf.dns {
            params
                .subject_alt_names
                .push(SanType::DnsName(name.as_str().try_into()?));
        }
        for ip in &leaf.ips {
            params.subject_alt_names.push(SanType::IpAddress(*ip));
        }
        for uri in &leaf.uris {
            params
                .subject_alt_names
                .push(SanType::URI(uri.as_str().try_into()?));
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        if leaf.server_auth {
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ServerAuth);
        }
        if leaf.client_auth {
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ClientAuth);
        }
        let (from, until) = leaf
            .valid_years
            .unwrap_or_else(|| (this_year() - 1, this_year() + 10));
        params.not_before = rcgen::date_time_ymd(from, 1, 1);
        params.not_after = rcgen::date_time_ymd(until, 1, 1);
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate()?;
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// The CA's key, PEM.
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }
}

/// Checks a DNS name for a certificate's SAN: labels of ASCII letters, digits and
/// '-' (not first or last), 1 to 63 bytes each, 253 in all, at least one letter or
/// '-' somewhere (an IP address goes in an IP SAN), and optionally `*.` first (a
/// wildcard for one label, with at least two labels after it). Returns it in lower
/// case.
pub fn check_dns_name(name: &str) -> Result<String, CertsError> {
    let bad = |why| Err(CertsError::BadDnsName(name.to_owned(), why));
    if name.is_empty() || name.len() > 253 {
        return bad("must be 1 to 253 characters long");
    }
    if name.parse::<IpAddr>().is_ok() {
        return bad("an IP address: pass it with --ip");
    }
    let rest = match name.strip_prefix("*.") {
        Some(rest) if rest.split('.').count() < 2 => {
            return bad("a wildcard needs at least two labels after it (*.example.com)");
        }
        Some(rest) => rest,
        None => name,
    };
    for label in rest.split('.') {
        if label.is_empty() || label.len() > 63 {
            return bad("every label between dots must be 1 to 63 characters long");
        }
        if !label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return bad("use letters, digits and '-' (and '*.' first for a wildcard)");
        }
        if label.starts_with('-') || label.ends_with('-') {
            return bad("a label cannot start or end with '-'");
        }
    }
    if rest.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return bad("all digits: not a DNS name");
    }
    Ok(name.to_ascii_lowercase())
}

/// Member `id`'s client-port certificate: loopback names.
pub fn server_leaf(id: u64) -> Leaf {
    Leaf {
        cn: format!("concord-server-{id}"),
        dns: vec!["localhost".into()],
        ips: vec![
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(Ipv6Addr::LOCALHOST),
        ],
        server_auth: true,
        ..Leaf::default()
    }
}

/// Member `id`'s peer certificate: its default peer identity, used both ways.
pub fn peer_leaf(id: u64) -> Leaf {
    let name = super::peers::default_identity(id);
    Leaf {
        cn: name.clone(),
        dns: vec![name],
        ips: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
        server_auth: true,
        client_auth: true,
        ..Leaf::default()
    }
}

/// A client's certificate: its name as CN only, so that it is its identity under
/// the default rule.
pub fn client_leaf(name: &str) -> Leaf {
    Leaf {
        cn: name.to_owned(),
        client_auth: true,
        ..Leaf::default()
    }
}

/// What `concord certs` makes.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Members 1..=members get a server and a peer certificate.
    pub members: u64,
    /// Client certificates, by name.
    pub clients: Vec<String>,
    /// Overwrite existing files.
    pub force: bool,
    /// DNS names every member's client-port certificate carries besides
    /// `localhost` (real hosts, pods, a Service; `*.` wildcards allowed).
    pub dns: Vec<String>,
    /// IP addresses every member's client-port certificate carries besides
    /// 127.0.0.1 and ::1.
    pub ips: Vec<IpAddr>,
}

/// One file to write.
struct Out {
    path: PathBuf,
    text: String,
    secret: bool,
}

/// Makes the CA and every certificate of `plan` in `dir` (created if missing);
/// returns the files written, in order.
pub fn write(dir: &Path, plan: &Plan) -> Result<Vec<PathBuf>, CertsError> {
    for name in &plan.clients {
        let ok = !name.is_empty()
            && !name.starts_with('.')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !ok || name == "ca" || name.starts_with("server-") || name.starts_with("peer-") {
            return Err(CertsError::BadName(name.clone()));
        }
    }
    let mut server_dns = Vec::new();
    for name in &plan.dns {
        server_dns.push(check_dns_name(name)?);
    }
    let ca = Ca::generate()?;
    let mut outs = Vec::new();
    let mut add = |stem: String, issued: Issued| {
        outs.push(Out {
            path: dir.join(format!("{stem}.pem")),
            text: issued.cert_pem,
            secret: false,
        });
        outs.push(Out {
            path: dir.join(format!("{stem}-key.pem")),
            text: issued.key_pem,
            secret: true,
        });
    };
    add(
        "ca".into(),
        Issued {
            cert_pem: ca.cert_pem.clone(),
            key_pem: ca.key_pem(),
        },
    );
    for id in 1..=plan.members {
        let mut leaf = server_leaf(id);
        for name in &server_dns {
            if !leaf.dns.contains(name) {
                leaf.dns.push(name.clone());
            }
        }
        for ip in &plan.ips {
            if !leaf.ips.contains(ip) {
                leaf.ips.push(*ip);
            }
        }
        add(format!("server-{id}"), ca.issue(&leaf)?);
        add(format!("peer-{id}"), ca.issue(&peer_leaf(id))?);
    }
    for name in &plan.clients {
        add(name.clone(), ca.issue(&client_leaf(name))?);
    }
    std::fs::create_dir_all(dir).map_err(|source| CertsError::Io {
        path: dir.to_owned(),
        source,
    })?;
    if !plan.force {
        if let Some(out) = outs.iter().find(|o| o.path.exists()) {
            return Err(CertsError::Exists(out.path.clone()));
        }
    }
    for out in &outs {
        write_file(out).map_err(|source| CertsError::Io {
            path: out.path.clone(),
            source,
        })?;
    }
    Ok(outs.into_iter().map(|o| o.path).collect())
}

/// Writes one file; a key is made 0600 before its contents go in.
fn write_file(out: &Out) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if out.secret {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        options.mode(0o600);
        // An existing file (with --force) keeps its mode: set it first.
        if out.path.exists() {
            std::fs::set_permissions(&out.path, std::fs::Permissions::from_mode(0o600))?;
        }
    }
    let mut file = options.open(&out.path)?;
    file.write_all(out.text.as_bytes())?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_the_set_and_refuses_to_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let plan = Plan {
            members: 2,
            clients: vec!["admin".into(), "team-a".into()],
            force: false,
            dns: Vec::new(),
            ips: Vec::new(),
        };
        let written = write(dir.path(), &plan).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "ca.pem",
                "ca-key.pem",
                "server-1.pem",
                "server-1-key.pem",
                "peer-1.pem",
                "peer-1-key.pem",
                "server-2.pem",
                "server-2-key.pem",
                "peer-2.pem",
                "peer-2-key.pem",
                "admin.pem",
                "admin-key.pem",
                "team-a.pem",
                "team-a-key.pem",
            ]
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |n: &str| {
                std::fs::metadata(dir.path().join(n))
                    .unwrap()
                    .permissions()
                    .mode()
                    & 0o777
            };
            assert_eq!(mode("admin-key.pem"), 0o600);
            assert_eq!(mode("ca-key.pem"), 0o600);
        }
        let before = std::fs::read(dir.path().join("ca.pem")).unwrap();
        assert!(matches!(
            write(dir.path(), &plan),
            Err(CertsError::Exists(_))
        ));
        assert_eq!(std::fs::read(dir.path().join("ca.pem")).unwrap(), before);
        write(
            dir.path(),
            &Plan {
                force: true,
                ..plan
            },
        )
        .unwrap();
        assert_ne!(std::fs::read(dir.path().join("ca.pem")).unwrap(), before);
    }

    #[test]
    fn names_and_identities() {
        use rustls_pki_types::pem::PemObject;
        let dir = tempfile::tempdir().unwrap();
        let plan = Plan {
            members: 1,
            clients: vec!["team-b".into()],
            force: false,
            dns: Vec::new(),
            ips: Vec::new(),
        };
        write(dir.path(), &plan).unwrap();
        let leaf =
            |n: &str| rustls_pki_types::CertificateDer::from_pem_file(dir.path().join(n)).unwrap();
        let names = super::super::x509::CertNames::of(&leaf("team-b.pem")).unwrap();
        assert_eq!(names.cns, ["team-b"]);
        assert!(names.dns.is_empty() && names.uris.is_empty());
        let peer = super::super::x509::CertNames::of(&leaf("peer-1.pem")).unwrap();
        assert_eq!(peer.dns, ["concord-peer-1"]);
        assert!(write(
            dir.path(),
            &Plan {
                clients: vec!["../x".into()],
                force: true,
                ..plan
            }
        )
        .is_err());
        // The CA loads back and signs leaves the same verifier accepts (tls_tests).
        Ca::load(dir.path())
            .unwrap()
            .issue(&client_leaf("x"))
            .unwrap();
    }

    /// The DNS and IP SANs of a PEM certificate file.
    fn sans(path: &Path) -> (Vec<String>, Vec<IpAddr>) {
        use rustls_pki_types::pem::PemObject;
        use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
        let der = rustls_pki_types::CertificateDer::from_pem_file(path).unwrap();
        let (_, cert) = X509Certificate::from_der(&der).unwrap();
        let (mut dns, mut ips) = (Vec::new(), Vec::new());
        for name in &cert
            .subject_alternative_name()
            .unwrap()
            .unwrap()
            .value
            .general_names
        {
            match name {
                GeneralName::DNSName(d) => dns.push((*d).to_owned()),
                GeneralName::IPAddress(b) => ips.push(match b.len() {
                    4 => IpAddr::from(<[u8; 4]>::try_from(*b).unwrap()),
                    _ => IpAddr::from(<[u8; 16]>::try_from(*b).unwrap()),
                }),
                _ => {}
            }
        }
        (dns, ips)
    }

    #[test]
    fn extra_names_go_into_every_members_server_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let plan = Plan {
            members: 2,
            clients: vec!["admin".into()],
            force: false,
            dns: vec![
                "Concord.Example.com".into(),
                "*.concord-peers.concord.svc.cluster.local".into(),
                "localhost".into(),
            ],
            ips: vec!["10.0.0.5".parse().unwrap(), "fd00::5".parse().unwrap()],
        };
        write(dir.path(), &plan).unwrap();
        for id in [1, 2] {
            let (dns, ips) = sans(&dir.path().join(format!("server-{id}.pem")));
            assert_eq!(
                dns,
                [
                    "localhost",
                    "concord.example.com",
                    "*.concord-peers.concord.svc.cluster.local"
                ]
            );
            let want: Vec<IpAddr> = ["127.0.0.1", "::1", "10.0.0.5", "fd00::5"]
                .iter()
                .map(|a| a.parse().unwrap())
                .collect();
            assert_eq!(ips, want);
            // Peer certificates keep their identity only.
            let (peer_dns, peer_ips) = sans(&dir.path().join(format!("peer-{id}.pem")));
            assert_eq!(peer_dns, [format!("concord-peer-{id}")]);
            assert_eq!(peer_ips, [IpAddr::V4(Ipv4Addr::LOCALHOST)]);
        }
    }

    #[test]
    fn a_bad_dns_name_writes_nothing() {
        for bad in [
            "",
            "a..b",
            ".example.com",
            "example.com.",
            "-a.example.com",
            "a-.example.com",
            "under_score.example.com",
            "sp ace.example.com",
            "*.com",
            "a.*.example.com",
            "*example.com",
            "10.0.0.5",
            "::1",
            "1.2.3",
            &"a".repeat(64),
            &format!("{}.com", "a.".repeat(126)),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let plan = Plan {
                members: 1,
                clients: vec!["admin".into()],
                force: false,
                dns: vec!["ok.example.com".into(), bad.to_owned()],
                ips: Vec::new(),
            };
            match write(dir.path(), &plan) {
                Err(CertsError::BadDnsName(name, _)) => assert_eq!(name, bad),
                other => panic!("{bad:?}: {other:?}"),
            }
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "{bad:?}");
        }
        for good in ["a", "db-1.example.com", "*.a.b", "x1.2", "A.B"] {
            assert!(check_dns_name(good).is_ok(), "{good}");
        }
    }
}
