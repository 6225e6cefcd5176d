//! The metrics port of real servers (`--metrics-addr`): every metric documented in
//! docs/operations.md ("Metrics") is served with its documented type and nothing
//! undocumented is; counters and histograms move with writes, reads, a session and
//! a watch; `/healthz` and `/readyz` answer; on an ensemble the leader reports its
//! synced followers and their lag, and a member left without a quorum is not ready;
//! every metric the alerting rules (deploy/prometheus/concord-alerts.yaml) select is
//! served.

#![allow(clippy::unwrap_used)]

mod watch_util;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use concord_proto::v1 as pb;
use concord_tests::{
    eventually, free_addr, get_req, http_get, workspace_dir, Ensemble, Server, ServerOptions,
};
use pb::watch_response::Msg;
use watch_util::{next_msg, open, request, started, Writer};

const WAIT: Duration = Duration::from_secs(20);
const CALL: Duration = Duration::from_secs(5);

/// The metrics docs/operations.md documents: name (as scraped) -> type.
fn documented() -> BTreeMap<String, String> {
    let doc = std::fs::read_to_string(workspace_dir().join("docs/operations.md")).unwrap();
    let section = doc
        .split("\n## Metrics\n")
        .nth(1)
        .expect("docs/operations.md has a Metrics section");
    let section = section.split("\n## ").next().unwrap();
    let mut metrics = BTreeMap::new();
    for line in section.lines() {
        let Some(row) = line.strip_prefix("| `concord_") else {
            continue;
        };
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let name = format!("concord_{}", cells[0].trim_end_matches('`'));
        metrics.insert(name, cells[1].to_owned());
    }
    assert!(metrics.len() > 30, "the table was not found: {metrics:?}");
    metrics
}

/// The `expr` of every rule in deploy/prometheus/concord-alerts.yaml: a value on the
/// key's line, or a block scalar (`>-`, `|`) made of the lines indented below it.
/// (scripts/check_deploy.py parses the file as YAML and checks its structure.)
fn alert_exprs() -> Vec<String> {
    let path = workspace_dir().join("deploy/prometheus/concord-alerts.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut exprs = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(value) = line.trim_start().strip_prefix("expr:") else {
            continue;
        };
        let value = value.trim();
        if value.starts_with('>') || value.starts_with('|') {
            let block = lines[i + 1..]
                .iter()
                .take_while(|l| l.trim().is_empty() || indent(l) > indent(line))
                .copied();
            exprs.push(block.collect::<Vec<_>>().join("\n"));
        } else {
            exprs.push(value.to_owned());
        }
    }
    let alerts = lines
        .iter()
        .filter(|l| l.trim_start().starts_with("- alert:"))
        .count();
    assert_eq!(exprs.len(), alerts, "an expr per alert: {exprs:#?}");
    exprs
}

/// The `concord_` metric names an expression selects (quoted label values, which
/// hold method names like `/concord.v1.Tree/Set`, skipped).
fn concord_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut quoted = false;
    let mut word = String::new();
    for c in expr.chars().chain([' ']) {
        if !quoted && (c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            word.push(c);
            continue;
        }
        if word.starts_with("concord_") {
            names.insert(word.clone());
        }
        word.clear();
        if c == '"' {
            quoted = !quoted;
        }
    }
    names
}

/// Every metric the alerting rules select is in `scrape`: a counter or gauge as the
/// family of that name, a histogram only as its `_bucket`, `_sum` or `_count` series
/// (a rule naming the bare histogram selects nothing).
fn assert_alert_rules_served(scrape: &Scrape) {
    let names: BTreeSet<String> = alert_exprs()
        .iter()
        .flat_map(|e| concord_names(e))
        .collect();
    assert!(names.len() > 20, "too few names found: {names:?}");
    for name in &names {
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .filter(|base| scrape.types.get(*base).map(String::as_str) == Some("histogram"));
        let served = match family {
            Some(_) => scrape
                .samples
                .iter()
                .any(|(series, _)| series.split('{').next() == Some(name.as_str())),
            None => scrape
                .types
                .get(name)
                .is_some_and(|kind| kind != "histogram"),
        };
        assert!(
            served,
            "deploy/prometheus/concord-alerts.yaml selects {name}, which the server does not serve:\n{}",
            scrape.text
        );
    }
}

/// One scrape of `/metrics`: the TYPE of each family and every sample's value.
struct Scrape {
    types: BTreeMap<String, String>,
    /// (series with its labels, as written) -> value
    samples: Vec<(String, f64)>,
    text: String,
}

impl Scrape {
    async fn of(addr: SocketAddr) -> Scrape {
        let (status, text) = http_get(addr, "/metrics", CALL).await.expect("scraped");
        assert_eq!(status, 200, "{text}");
        let mut types = BTreeMap::new();
        let mut samples = Vec::new();
        for line in text.lines() {
            if let Some(t) = line.strip_prefix("# TYPE ") {
                let (name, kind) = t.split_once(' ').unwrap();
                types.insert(name.to_owned(), kind.to_owned());
            } else if !line.starts_with('#') && !line.is_empty() {
                let (series, value) = line.rsplit_once(' ').unwrap();
                samples.push((series.to_owned(), value.parse().unwrap()));
            }
        }
        Scrape {
            types,
            samples,
            text,
        }
    }

    /// The sum of the samples of `name` whose labels include every one of `labels`
    /// (None if there is none).
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut found = None;
        for (series, v) in &self.samples {
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            if n != name {
                continue;
            }
            if labels
                .iter()
                .all(|(k, want)| rest.contains(&format!("{k}=\"{want}\"")))
            {
                *found.get_or_insert(0.0) += v;
            }
        }
        found
    }

    fn get(&self, name: &str) -> f64 {
        self.value(name, &[])
            .unwrap_or_else(|| panic!("no {name} in\n{}", self.text))
    }
}

fn metrics_flags(addr: SocketAddr) -> Vec<String> {
    vec!["--metrics-addr".into(), addr.to_string()]
}

/// Opens a ZooKeeper-protocol session at `addr` (jute by hand: a connect request)
/// and sends one ping; returns the connection, still open.
async fn zookeeper_ping(addr: SocketAddr) -> tokio::net::TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    async fn frame(s: &mut tokio::net::TcpStream) -> Vec<u8> {
        let n = s.read_u32().await.unwrap();
        let mut body = vec![0; n as usize];
        s.read_exact(&mut body).await.unwrap();
        body
    }
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    // protocolVersion, lastZxidSeen, timeOut, sessionId, passwd (16 bytes), readOnly.
    let mut connect = Vec::new();
    connect.extend(0i32.to_be_bytes());
    connect.extend(0i64.to_be_bytes());
    connect.extend(10_000i32.to_be_bytes());
    connect.extend(0i64.to_be_bytes());
    connect.extend(16i32.to_be_bytes());
    connect.extend([0; 16]);
    connect.push(0);
    s.write_u32(connect.len() as u32).await.unwrap();
    s.write_all(&connect).await.unwrap();
    let accepted = frame(&mut s).await;
    assert!(accepted.len() >= 36, "a connect response: {accepted:?}");
    // A ping: xid -2, opcode 11; its answer echoes the xid.
    s.write_u32(8).await.unwrap();
    s.write_all(&[(-2i32).to_be_bytes(), 11i32.to_be_bytes()].concat())
        .await
        .unwrap();
    let reply = frame(&mut s).await;
    assert_eq!(reply[..4], (-2i32).to_be_bytes(), "the ping's answer");
    s
}

/// Waits for `path` on the metrics port to answer `status`; returns its body.
async fn wait_status(addr: SocketAddr, path: &str, status: u16) -> String {
    let what = format!("{path} on {addr} answering {status}");
    eventually(&what, WAIT, || async {
        let (got, body) = http_get(addr, path, CALL).await?;
        (got == status).then_some(body)
    })
    .await
}

#[tokio::test]
async fn t48_every_documented_metric_is_served_and_moves() {
    let metrics = free_addr();
    let zookeeper = free_addr();
    let mut extra = metrics_flags(metrics);
    extra.extend(["--zookeeper-addr".into(), zookeeper.to_string()]);
    // Every durable append is over a 1 ms threshold on a busy machine or not; the
    // count and the warnings in the log must agree either way.
    extra.extend(["--fsync-warn-threshold-ms".into(), "1".into()]);
    let server = Server::start(ServerOptions {
        session_ttl_ms: Some((100, 60_000)),
        snapshot_every_txns: 20,
        extra,
        ..ServerOptions::default()
    });
    assert_eq!(wait_status(metrics, "/healthz", 200).await, "ok\n");
    assert_eq!(wait_status(metrics, "/readyz", 200).await, "ok\n");

    let before = Scrape::of(metrics).await;
    assert_eq!(before.get("concord_server_is_leader"), 1.0);
    assert_eq!(before.get("concord_server_has_leader"), 1.0);
    assert_eq!(before.get("concord_server_ready"), 1.0);
    assert!(before.get("concord_server_leader_changes_seen_total") >= 1.0);

    // Writes (enough for a snapshot), reads, a miss, a session with an ephemeral,
    // and a watch that sees a change.
    let mut w = Writer::new(&server).await;
    let mut watch = open(&server, request("/w", true)).await;
    started(&mut watch).await;
    for i in 0..25 {
        w.create(&format!("/w{i}"), "0123456789").await;
    }
    let zxid = w.create("/w", "x").await;
    // The watch sees the change (bounded: each message within WAIT, 100 at most).
    let mut seen = false;
    for _ in 0..100 {
        match tokio::time::timeout(WAIT, next_msg(&mut watch)).await {
            Ok(Some(Msg::Event(e))) if e.zxid == zxid => {
                seen = true;
                break;
            }
            Ok(Some(_)) => {}
            other => panic!("the watch ended or stalled: {other:?}"),
        }
    }
    assert!(seen, "the watch never saw /w created");
    let mut tree = server.tree().await;
    for i in 0..5 {
        tree.get(get_req(format!("/w{i}"))).await.unwrap();
    }
    assert!(tree.get(get_req("/missing")).await.is_err());
    let mut sessions = server.session().await;
    let session = sessions
        .open(pb::OpenSessionRequest { ttl_ms: 30_000 })
        .await
        .unwrap()
        .into_inner()
        .session_id;
    tree.create(pb::CreateRequest {
        path: "/e".into(),
        mode: pb::CreateMode::Ephemeral.into(),
        session_id: session,
        ..Default::default()
    })
    .await
    .unwrap();

    // A ZooKeeper-protocol session and a ping on its port.
    let zk = zookeeper_ping(zookeeper).await;

    let during = Scrape::of(metrics).await;
    assert_eq!(during.get("concord_zookeeper_sessions"), 1.0);
    assert_eq!(during.get("concord_zookeeper_connections"), 1.0);
    drop(zk);
    assert_eq!(during.get("concord_server_watches"), 1.0);
    // The gRPC session and the ZooKeeper one.
    assert_eq!(during.get("concord_tree_sessions"), 2.0);
    assert_eq!(during.get("concord_tree_ephemerals"), 1.0);
    assert!(during.get("concord_tree_nodes") >= 28.0);
    assert!(during.get("concord_tree_data_bytes") >= 251.0);
    drop(watch);

    // Snapshots are written off the write path; wait for one.
    let after = eventually("a snapshot and the watch's end counted", WAIT, || async {
        let s = Scrape::of(metrics).await;
        let watched = s.value(
            "concord_rpc_requests_total",
            &[("method", "/concord.v1.Watch/Watch")],
        );
        (s.get("concord_snapshot_duration_seconds_count") >= 1.0 && watched == Some(1.0))
            .then_some(s)
    })
    .await;
    // Every documented metric is served with its type, and nothing else is (the
    // RPC families appear with their first call).
    let docs = documented();
    for (name, kind) in &docs {
        assert_eq!(
            after.types.get(name),
            Some(kind),
            "{name} is documented as a {kind}; served:\n{}",
            after.text
        );
    }
    for (name, kind) in &after.types {
        assert_eq!(
            docs.get(name),
            Some(kind),
            "{name} ({kind}) is not documented"
        );
    }
    assert_alert_rules_served(&after);
    let rpc = |s: &Scrape, method: &str, code: &str| {
        let labels = [("method", method), ("code", code)];
        s.value("concord_rpc_requests_total", &labels)
            .unwrap_or(0.0)
    };
    assert_eq!(rpc(&after, "/concord.v1.Tree/Create", "OK"), 27.0);
    assert_eq!(rpc(&after, "/concord.v1.Tree/Get", "OK"), 5.0);
    assert_eq!(rpc(&after, "/concord.v1.Tree/Get", "NO_NODE"), 1.0);
    assert_eq!(rpc(&after, "/concord.v1.Session/Open", "OK"), 1.0);
    let timed = after
        .value(
            "concord_rpc_duration_seconds_count",
            &[("method", "/concord.v1.Tree/Create"), ("code", "OK")],
        )
        .unwrap();
    assert_eq!(timed, 27.0);
    let grew = |name: &str, by: f64| {
        let (b, a) = (before.get(name), after.get(name));
        assert!(a >= b + by, "{name}: {b} -> {a}, expected +{by}");
    };
    // 27 creates, a session open: 28 txns at least (the access seed may add one).
    grew("concord_server_proposals_committed_total", 28.0);
    grew("concord_server_proposals_applied_total", 28.0);
    grew(
        "concord_server_proposal_commit_duration_seconds_count",
        28.0,
    );
    grew("concord_disk_wal_fsync_duration_seconds_count", 1.0);
    grew("concord_disk_backend_commit_duration_seconds_count", 1.0);
    assert!(after.get("concord_snapshot_size_bytes") > 0.0);
    assert!(after.get("concord_server_applied_zxid") >= zxid as f64);
    assert_eq!(after.get("concord_server_proposals_failed_total"), 0.0);
    assert_eq!(after.get("concord_server_proposals_pending"), 0.0);
    assert!(after.get("concord_log_memory_bytes_peak") > 0.0);
    assert_eq!(after.get("concord_queue_proposals_max"), 16384.0);

    // The slow-fsync counter and the warnings agree.
    let slow = after.get("concord_disk_wal_fsync_threshold_exceeded_total");
    let warned = server
        .log()
        .matches("took longer than fsync_warn_threshold_ms")
        .count();
    assert!(
        warned as f64 >= slow,
        "{slow} slow appends counted, {warned} warned"
    );
    assert!(
        after.text.lines().all(|l| !l.contains("/w0")),
        "a path as a label"
    );

    let (status, body) = http_get(metrics, "/nope", CALL).await.unwrap();
    assert_eq!(status, 404, "{body}");
}

#[tokio::test]
async fn t48_the_leader_reports_its_followers_and_a_member_without_quorum_is_not_ready() {
    let ports: Vec<SocketAddr> = (0..3).map(|_| free_addr()).collect();
    let mut ensemble = Ensemble::start_with_toml(3, ServerOptions::default(), &|i| {
        format!("metrics_addr = \"{}\"", ports[i])
    });
    let leader = ensemble.leader(WAIT).await;
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let zxid = concord_tests::create_at(&ensemble.servers[leader].endpoint(), "/a")
        .await
        .unwrap();
    for &f in &followers {
        ensemble.caught_up(f, zxid, WAIT).await;
        wait_status(ports[f], "/readyz", 200).await;
        let s = Scrape::of(ports[f]).await;
        assert_eq!(s.get("concord_server_has_leader"), 1.0);
        assert_eq!(s.get("concord_server_is_leader"), 0.0);
        assert_eq!(
            s.get("concord_server_synced_followers"),
            0.0,
            "not a leader"
        );
    }
    let on_leader = eventually("both followers synced and caught up", WAIT, || async {
        let s = Scrape::of(ports[leader]).await;
        let lags: Vec<f64> = followers
            .iter()
            .map(|&f| {
                let id = (f + 1).to_string();
                let labels = [("server_id", id.as_str())];
                s.value("concord_server_follower_lag_txns", &labels)
            })
            .collect::<Option<_>>()?;
        (s.get("concord_server_synced_followers") == 2.0 && lags.iter().all(|&l| l == 0.0))
            .then_some(s)
    })
    .await;
    assert_eq!(on_leader.get("concord_server_is_leader"), 1.0);
    assert_eq!(on_leader.get("concord_server_synced_observers"), 0.0);

    // One member alone: no quorum, so no leader, so not ready (and it says why).
    for &f in &followers {
        ensemble.servers[f].kill9();
    }
    let why = wait_status(ports[leader], "/readyz", 503).await;
    assert!(why.starts_with("not ready: "), "{why}");
    let alone = eventually("the lone member reports no leader", WAIT, || async {
        let s = Scrape::of(ports[leader]).await;
        (s.get("concord_server_has_leader") == 0.0).then_some(s)
    })
    .await;
    assert_eq!(alone.get("concord_server_is_leader"), 0.0);
    assert_eq!(alone.get("concord_server_ready"), 0.0);
    assert_eq!(
        wait_status(ports[leader], "/healthz", 200).await,
        "ok\n",
        "alive all the same"
    );
}
