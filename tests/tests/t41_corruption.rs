//! A damaged history is refused, never shortened (issue 10, point 1): one flipped
//! byte inside a committed log entry in the middle of the log makes `concord`
//! refuse to start, naming the zxid and the way out, instead of cutting every later
//! acknowledged txn; `concord --discard-local-state` is that way out, and an
//! ensemble member so discarded rejoins by SNAP from the leader.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use concord_proto::v1 as pb;
use concord_tests::{
    bin, children_at, get_req, tree_at, Background, Ensemble, Server, ServerOptions,
};

const NODES: usize = 200;
/// The node whose log entry is damaged.
const VICTIM: usize = 100;
const WAIT: Duration = Duration::from_secs(30);

/// Distinct data for /kNNN, long enough that its bytes occur nowhere else.
fn data_of(n: usize) -> Vec<u8> {
    format!("data of /k{n:03}: {n:03}{n:03}{n:03} concord corruption test").into_bytes()
}

/// Creates /k000 ... /k199 through `endpoint`; returns the zxid of each create.
async fn create_nodes(endpoint: &str) -> Vec<u64> {
    let mut tree = tree_at(endpoint, Duration::from_secs(10));
    let mut zxids = Vec::with_capacity(NODES);
    for n in 0..NODES {
        let reply = tree
            .create(pb::CreateRequest {
                path: format!("/k{n:03}"),
                data: data_of(n).into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        zxids.push(reply.header.unwrap().zxid);
    }
    zxids
}

/// Flips one byte inside every copy of /k{VICTIM}'s data in the redb file (old
/// copies in pages redb freed may be there too; the live one is among them).
fn flip_victim_bytes(path: &Path) {
    let mut file = std::fs::read(path).unwrap();
    let needle = data_of(VICTIM);
    let mut found = 0;
    let mut at = 0;
    while let Some(pos) = file[at..]
        .windows(needle.len())
        .position(|w| w == needle.as_slice())
    {
        let start = at + pos;
        file[start + needle.len() / 2] ^= 0x01;
        found += 1;
        at = start + needle.len();
    }
    assert!(found > 0, "/k{VICTIM}'s data is not in {}", path.display());
    std::fs::write(path, file).unwrap();
}

/// Runs `concord` with `flags`, waits for it to exit; returns (exit ok, stderr).
async fn run_concord(flags: &[String]) -> (bool, String, String) {
    let mut child = Background::spawn(Command::new(bin("concord")).args(flags));
    let status = child.wait_exit(WAIT).await;
    (status.success(), child.stdout(), child.stderr())
}

/// The flags a stopped `server` runs with (its own client port: an ensemble member's
/// must match its config).
fn flags_of(server: &Server) -> Vec<String> {
    let mut flags = vec![
        "--listen".to_owned(),
        server.addr.to_string(),
        "--data-dir".to_owned(),
        server.data_dir.display().to_string(),
    ];
    flags.extend(server.options().extra.iter().cloned());
    flags
}

/// Asserts that starting on the damaged folder fails, naming `zxid` and the way out.
async fn assert_refused(flags: &[String], zxid: u64) -> String {
    let (ok, _, stderr) = run_concord(flags).await;
    assert!(
        !ok,
        "the server started on a damaged history; stderr:\n{stderr}"
    );
    assert!(
        stderr.contains(&format!("{zxid:#x}")),
        "the refusal does not name zxid {zxid:#x}:\n{stderr}"
    );
    assert!(
        stderr.contains("--discard-local-state") && stderr.contains("Corruption and recovery"),
        "the refusal does not give the way out:\n{stderr}"
    );
    assert!(!stderr.contains("cut a"), "history was cut:\n{stderr}");
    eprintln!("the refusal:\n{stderr}");
    stderr
}

fn discarded_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("concord.redb.discarded-")
        })
        .count()
}

#[tokio::test]
async fn t41_a_flipped_byte_mid_log_refuses_start_and_drops_nothing() {
    let mut server = Server::start(ServerOptions::default());
    let zxids = create_nodes(&server.endpoint()).await;
    assert!(server.terminate(), "the server did not stop cleanly");
    flip_victim_bytes(&server.redb_path());
    let flags = flags_of(&server);
    assert_refused(&flags, zxids[VICTIM]).await;
    // Refused again: nothing was removed by the first attempt.
    assert_refused(&flags, zxids[VICTIM]).await;
    // The documented way out on a single server: discard (its data is lost) and
    // start empty; the old file is kept aside.
    let mut discard = flags.clone();
    discard.push("--discard-local-state".into());
    let (ok, stdout, stderr) = run_concord(&discard).await;
    assert!(ok, "discard failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("single server") && stdout.contains("lost"),
        "{stdout}"
    );
    assert_eq!(discarded_files(&server.data_dir), 1);
    server.restart();
    let status = server.status().await;
    assert_eq!(status.node_count, 1, "only the root after a discard");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t41_a_damaged_follower_refuses_then_discards_and_rejoins_by_snap() {
    // No snapshot while the 200 nodes are written (so the damaged entry is in the
    // log the follower validates); the 150 writes after it make the others take
    // one, so the emptied follower gets SNAP.
    let mut ens = Ensemble::start(
        3,
        ServerOptions {
            snapshot_every_txns: 300,
            ..ServerOptions::default()
        },
    );
    let leader = ens.leader(WAIT).await;
    let leader_endpoint = ens.servers[leader].endpoint();
    let zxids = create_nodes(&leader_endpoint).await;
    let f = (0..3).find(|&i| i != leader).unwrap();
    ens.caught_up(f, zxids[NODES - 1], WAIT).await;
    assert!(
        ens.servers[f].terminate(),
        "the follower did not stop cleanly"
    );
    flip_victim_bytes(&ens.servers[f].redb_path());
    let flags = flags_of(&ens.servers[f]);
    let stderr = assert_refused(&flags, zxids[VICTIM]).await;
    assert!(stderr.contains("rejoins by SNAP"), "{stderr}");
    // Meanwhile the other two go on.
    let mut last = 0;
    for n in 0..150 {
        last = concord_tests::create_at(&leader_endpoint, &format!("/m{n:03}"))
            .await
            .unwrap();
    }
    let mut discard = flags.clone();
    discard.push("--discard-local-state".into());
    let (ok, stdout, stderr) = run_concord(&discard).await;
    assert!(ok, "discard failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("rejoins by SNAP"), "{stdout}");
    assert_eq!(discarded_files(&ens.servers[f].data_dir), 1);
    ens.servers[f].restart();
    ens.caught_up(f, last, WAIT).await;
    let endpoint = ens.servers[f].endpoint();
    let names = children_at(&endpoint, "/", last).await;
    assert_eq!(names.len(), NODES + 150, "{names:?}");
    let mut tree = tree_at(&endpoint, Duration::from_secs(10));
    for n in [0, VICTIM - 1, VICTIM, VICTIM + 1, NODES - 1] {
        let got = tree
            .get(get_req(format!("/k{n:03}")))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(got.data, data_of(n), "/k{n:03}");
    }
    let log = ens.servers[f].log();
    assert!(
        log.contains("installing a snapshot from the leader"),
        "the follower did not rejoin by SNAP; its log:\n{log}"
    );
    assert!(
        log.contains("voting again"),
        "the marker was not cleared:\n{log}"
    );
}
