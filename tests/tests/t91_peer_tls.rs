//! Peers over mTLS (issue 11, point 7): a member is known by its peer certificate,
//! not by the id it claims. A TLS ensemble elects and replicates; a process that
//! takes a member's id and addresses with a certificate from another CA, and one
//! with a certificate from the ensemble's CA whose identity is no member's, can
//! neither join, vote nor read: the ensemble keeps its leader, the stranger sees
//! nothing, and the logs show the refusals.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use concord_tests::script::{free_base_port, run, script, Stop};
use concord_tests::{
    bin, config_flags, create_at, free_addr, tree_at, Background, Ensemble, Server, ServerOptions,
};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

const WAIT: Duration = Duration::from_secs(30);
/// What the server logs when it refuses a peer connection (`security::peers`).
const INBOUND_REFUSED: &str = "peer connection refused";
/// What the server logs when a peer or TLS refuses its link (`peer::outbound`).
const LINK_REFUSED: &str = "peer link refused";

/// A certificate authority made for the test.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Ca { issuer }
    }

    /// Writes the CA certificate as `dir/NAME.pem`.
    fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(format!("{name}.pem"));
        std::fs::write(&path, self.issuer.pem()).unwrap();
        path
    }

    /// A peer certificate (server and client use) whose identity is the DNS SAN
    /// `dns`, written as `dir/NAME.pem` and `dir/NAME-key.pem`.
    fn issue(&self, dir: &Path, name: &str, dns: &str) -> (PathBuf, PathBuf) {
        let mut params = CertificateParams::new(vec![dns.to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, dns);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let cert_path = dir.join(format!("{name}.pem"));
        let key_path = dir.join(format!("{name}-key.pem"));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path)
    }
}

/// The peer TLS keys of a member's config.
fn peer_toml(ca: &Path, (cert, key): &(PathBuf, PathBuf)) -> String {
    format!(
        "peer_cert_file = {:?}\npeer_key_file = {:?}\npeer_trusted_ca_file = {:?}\n",
        cert.display().to_string(),
        key.display().to_string(),
        ca.display().to_string()
    )
}

/// The value of top-level `key = "..."` in a config written by the harness.
fn top_value(toml: &str, key: &str) -> String {
    let prefix = format!("{key} = \"");
    let line = toml.lines().find(|l| l.starts_with(&prefix)).unwrap();
    line[prefix.len()..].trim_end_matches('"').to_owned()
}

/// The config file server `i` of `ensemble` runs with.
fn config_of(ensemble: &Ensemble, i: usize) -> String {
    let extra = &ensemble.servers[i].options().extra;
    let at = extra.iter().position(|f| f == "--config").unwrap();
    std::fs::read_to_string(&extra[at + 1]).unwrap()
}

/// `config` with the peer TLS keys replaced by `peer`.
fn with_peer_tls(config: &str, peer: &str) -> String {
    let kept: Vec<&str> = config
        .lines()
        .filter(|l| !l.starts_with("peer_cert_file") && !l.starts_with("peer_key_file"))
        .filter(|l| !l.starts_with("peer_trusted_ca_file"))
        .collect();
    // Top-level keys go before the first [[members]] table.
    let at = kept.iter().position(|l| *l == "[[members]]").unwrap();
    let (head, members) = kept.split_at(at);
    format!("{}\n{peer}\n{}\n", head.join("\n"), members.join("\n"))
}

/// Starts a server from `toml`, listening for clients on `listen`; the config file
/// lives as long as the returned guard.
fn start_from(toml: &str, listen: &str) -> (Server, tempfile::TempPath) {
    let config = concord_tests::config_file(toml);
    let options = ServerOptions {
        extra: config_flags(&config),
        ..ServerOptions::default()
    };
    (Server::start_on(options, listen), config)
}

/// Whether a read of `path` through `server` returns its data.
async fn sees(server: &Server, path: &str) -> bool {
    let got = tree_at(&server.endpoint(), Duration::from_secs(1))
        .get(concord_tests::get_req(path))
        .await;
    got.is_ok_and(|r| r.into_inner().data.as_ref() == path.as_bytes())
}

/// Waits until `server`'s log holds `what`.
async fn logged(server: &Server, what: &str) {
    let why = format!("{what:?} in {}", server.log_path.display());
    concord_tests::eventually(&why, WAIT, || async {
        server.log().contains(what).then_some(())
    })
    .await;
}

/// For a few dozen ticks, `stranger` follows no leader, has applied nothing of the
/// ensemble's and cannot read what it wrote; the ensemble keeps `leader`.
async fn stays_out(ensemble: &Ensemble, leader: usize, stranger: &Server, written: &str) {
    for _ in 0..40 {
        let seen = stranger.try_status().await;
        if let Some(seen) = &seen {
            assert_eq!(seen.leader_id, 0, "the stranger follows a leader: {seen:?}");
            assert!(!seen.leader_serving, "the stranger leads: {seen:?}");
        }
        let led = ensemble.servers[leader].try_status().await.unwrap();
        assert!(led.leader_serving, "the ensemble lost its leader: {led:?}");
        assert_eq!(led.leader_id, leader as u64 + 1);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !sees(stranger, written).await,
        "the stranger read {written}"
    );
    assert!(
        !sees(stranger, "/before").await,
        "the stranger read /before"
    );
}

#[tokio::test]
async fn t91_a_tls_ensemble_admits_its_members_and_nobody_else() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("concord test CA");
    let ca_pem = ca.write(dir.path(), "ca");
    let peers: Vec<_> = (1..=3)
        .map(|id| {
            ca.issue(
                dir.path(),
                &format!("peer-{id}"),
                &format!("concord-peer-{id}"),
            )
        })
        .collect();
    let mut ensemble = Ensemble::start_with_toml(3, ServerOptions::default(), &|i| {
        peer_toml(&ca_pem, &peers[i])
    });

    // Members know each other by certificate: an election, replication, no refusal.
    let leader = ensemble.leader(WAIT).await;
    let endpoint = ensemble.servers[leader].endpoint();
    let zxid = create_at(&endpoint, "/before").await.unwrap();
    for i in 0..3 {
        ensemble.caught_up(i, zxid, WAIT).await;
        assert!(sees(&ensemble.servers[i], "/before").await);
    }
    for server in &ensemble.servers {
        let log = server.log();
        assert!(
            !log.contains(INBOUND_REFUSED) && !log.contains(LINK_REFUSED),
            "{log}"
        );
    }
    let (f, g) = ((leader + 1) % 3, (leader + 2) % 3);

    // An impostor: member f's id and addresses, a certificate for f's identity from
    // another CA (which it also trusts).
    let other = Ca::new("another CA");
    let other_dir = tempfile::tempdir().unwrap();
    let other_ca = other.write(other_dir.path(), "ca");
    let forged = other.issue(other_dir.path(), "peer", &format!("concord-peer-{}", f + 1));
    let f_config = config_of(&ensemble, f);
    let f_addr = ensemble.servers[f].addr.to_string();
    ensemble.servers[f].kill9();
    let toml = with_peer_tls(&f_config, &peer_toml(&other_ca, &forged));
    let (impostor, _impostor_config) = start_from(&toml, &f_addr);
    // The members cannot reach f's address over TLS (its certificate is not from
    // their CA), nor can it reach them (theirs is not from its CA).
    logged(&ensemble.servers[leader], LINK_REFUSED).await;
    logged(&impostor, LINK_REFUSED).await;
    let during = create_at(&endpoint, "/impersonated").await.unwrap();
    ensemble.caught_up(g, during, WAIT).await;
    stays_out(&ensemble, leader, &impostor, "/impersonated").await;
    drop(impostor);
    // The real member f comes back and catches up.
    ensemble.servers[f].restart();
    ensemble.caught_up(f, during, WAIT).await;

    // A stranger with a certificate from the ensemble's own CA, whose identity is no
    // member's, claiming member g's id from addresses of its own.
    let intruder = ca.issue(dir.path(), "intruder", "intruder.example");
    let g_config = config_of(&ensemble, g);
    let (client, peer) = (free_addr().to_string(), free_addr().to_string());
    let toml = with_peer_tls(&g_config, &peer_toml(&ca_pem, &intruder))
        .replace(&top_value(&g_config, "client_addr"), &client)
        .replace(&top_value(&g_config, "peer_addr"), &peer);
    let (stranger, _stranger_config) = start_from(&toml, &client);
    // The members refuse it once its certificate is verified, before reading a
    // request; it hears PERMISSION_DENIED.
    logged(&ensemble.servers[leader], INBOUND_REFUSED).await;
    logged(&ensemble.servers[leader], "intruder.example").await;
    logged(&stranger, LINK_REFUSED).await;
    logged(&stranger, "not a member").await;
    let after = create_at(&endpoint, "/intruded").await.unwrap();
    for i in 0..3 {
        ensemble.caught_up(i, after, WAIT).await;
    }
    stays_out(&ensemble, leader, &stranger, "/intruded").await;
}

#[tokio::test]
async fn t91_the_ensemble_script_runs_a_tls_ensemble() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ensemble");
    let base = free_base_port();
    let stop = Stop(dir.clone(), base);
    let started = run(script(&dir, base, &["start", "--tls", "3"])).await;
    assert!(
        started.contains("ensemble of 3 on 127.0.0.1 (mTLS)"),
        "{started}"
    );
    assert!(started.contains("grpcurl -cacert"), "{started}");
    let certs = dir.join("certs");
    for f in [
        "ca.pem",
        "admin.pem",
        "admin-key.pem",
        "peer-3.pem",
        "server-3-key.pem",
    ] {
        assert!(certs.join(f).exists(), "no {f} in {}", certs.display());
    }
    let ctl = |port: u16, args: &[&str]| {
        let mut cmd = Command::new(bin("concordctl"));
        cmd.arg("--endpoint")
            .arg(format!("https://127.0.0.1:{port}"))
            .arg("--cacert")
            .arg(certs.join("ca.pem"))
            .arg("--cert")
            .arg(certs.join("admin.pem"))
            .arg("--key")
            .arg(certs.join("admin-key.pem"))
            .args(args);
        cmd
    };
    run(ctl(base + 10, &["create", "/hello", "tls"])).await;
    assert_eq!(run(ctl(base + 20, &["get", "/hello"])).await.trim(), "tls");
    let status = run(script(&dir, base, &["status"])).await;
    assert_eq!(
        status.matches("leader_serving = true").count(),
        1,
        "{status}"
    );
    // Plain text is refused on the client port: clients must present a certificate.
    let mut plain = Command::new(bin("concordctl"));
    plain
        .arg("--endpoint")
        .arg(format!("http://127.0.0.1:{base}"))
        .args(["get", "/hello"]);
    let mut plain = Background::spawn(&mut plain);
    let plain_status = plain.wait_exit(Duration::from_secs(30)).await;
    assert!(
        !plain_status.success(),
        "a plain-text client read a TLS ensemble"
    );
    drop(stop);
}
