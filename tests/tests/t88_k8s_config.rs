//! The Kubernetes manifests' server configuration is one the server accepts: the
//! TOML of deploy/k8s/configmap.yaml, with the flags the start script in
//! deploy/k8s/statefulset.yaml passes, validates as `Config` for every member.
//! (scripts/check_deploy.py checks the manifests against the Kubernetes schemas; this
//! checks them against the server's own rules.) No server process is started.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use concord_server::Config;
use concord_tests::workspace_dir;

/// The lines of a YAML block scalar (`KEY: |`) that follows `key`, unindented.
fn block_after(yaml: &str, key: &str) -> String {
    let lines = yaml.lines().skip_while(|l| l.trim() != key).skip(1);
    let first = lines.clone().find(|l| !l.trim().is_empty()).unwrap();
    let indent = first.len() - first.trim_start().len();
    lines
        .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() >= indent)
        .map(|l| l.get(indent..).unwrap_or("").to_owned() + "\n")
        .collect()
}

/// The flags and values after `exec concord` in the start script, with the
/// script's `$id` and `$tls` filled in for member `id`.
fn script_flags(script: &str, id: u64) -> Vec<(String, Option<String>)> {
    let exec = script.split("exec concord").nth(1).unwrap();
    let words: Vec<String> = exec
        .replace("\\\n", " ")
        .split_whitespace()
        .map(|w| {
            w.trim_matches('"')
                .replace("$tls", "/etc/concord/tls")
                .replace("$id", &id.to_string())
        })
        .collect();
    let mut flags = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let flag = words[i].clone();
        assert!(flag.starts_with("--"), "not a flag: {flag}");
        let value = words.get(i + 1).filter(|v| !v.starts_with("--")).cloned();
        i += 1 + usize::from(value.is_some());
        flags.push((flag, value));
    }
    flags
}

#[test]
fn t88_every_member_of_the_k8s_manifests_has_a_valid_config() {
    let k8s = workspace_dir().join("deploy/k8s");
    let configmap = std::fs::read_to_string(k8s.join("configmap.yaml")).unwrap();
    let statefulset = std::fs::read_to_string(k8s.join("statefulset.yaml")).unwrap();
    let toml = block_after(&configmap, "concord.toml: |");
    let script = block_after(&statefulset, "- |");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("concord.toml");
    std::fs::write(&path, &toml).unwrap();
    for id in 1..=3 {
        let mut c = Config::from_file(&path).unwrap();
        let file = |v: &Option<String>| Some(PathBuf::from(v.clone().unwrap()));
        for (flag, value) in script_flags(&script, id) {
            match flag.as_str() {
                "--config" => {
                    assert_eq!(value.as_deref(), Some("/etc/concord/config/concord.toml"))
                }
                "--server-id" => c.server_id = value.unwrap().parse().unwrap(),
                "--cert-file" => c.cert_file = file(&value),
                "--key-file" => c.key_file = file(&value),
                "--trusted-ca-file" => c.trusted_ca_file = file(&value),
                "--peer-cert-file" => c.peer_cert_file = file(&value),
                "--peer-key-file" => c.peer_key_file = file(&value),
                "--peer-trusted-ca-file" => c.peer_trusted_ca_file = file(&value),
                "--insecure" => c.insecure = true,
                // Checked with the rest: 0.0.0.0 needs TLS on the client port.
                "--metrics-addr" => c.metrics_addr = Some(value.unwrap().parse().unwrap()),
                "--health-addr" => c.health_addr = Some(value.unwrap().parse().unwrap()),
                // As the metrics port: 0.0.0.0 needs TLS on the client port.
                "--zookeeper-addr" => c.zookeeper_addr = Some(value.unwrap().parse().unwrap()),
                other => panic!("the start script passes {other}, unknown to this test"),
            }
        }
        assert_eq!(c.server_id, id);
        c.validate()
            .unwrap_or_else(|e| panic!("member {id}'s config is refused: {e}"));
        assert!(
            c.client_tls() && c.peer_tls(),
            "member {id} runs without TLS"
        );
        assert!(
            c.zookeeper_addr.is_some(),
            "member {id} serves no ZooKeeper port"
        );
        let peer_cert = c.peer_cert_file.clone().unwrap();
        assert_eq!(
            peer_cert,
            PathBuf::from(format!("/etc/concord/tls/peer-{id}.pem"))
        );
        assert_eq!(c.members.len(), 3);
    }
}
