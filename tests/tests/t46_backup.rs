//! Backup and restore with the real binaries: a server with data, an ephemeral
//! (its session kept alive), sequential nodes and a deep subtree; `concordctl
//! snapshot save` and `snapshot status`; `concord restore` into a fresh folder; a
//! server started on it serves the same tree (data, every stat field, the session
//! and its ephemeral, the sequence counters) and takes new writes after it. A
//! damaged or truncated file is refused by `status` and `restore` with a clear
//! message, and nothing is written; a used folder is refused; a team caller is
//! PERMISSION_DENIED on Snapshot and Members.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use concord_proto::v1 as pb;
use concord_tests::{
    bin, code_of, config_file, config_flags, create_at, eventually, get_req, Background, Ensemble,
    Server, ServerOptions,
};

/// Longest any command or wait may take.
const WAIT: Duration = Duration::from_secs(20);

struct Output {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

async fn run(cmd: &mut Command) -> Output {
    let mut child = Background::spawn(cmd);
    let status = child.wait_exit(WAIT).await;
    Output {
        code: status.code(),
        stdout: child.stdout(),
        stderr: child.stderr(),
    }
}

async fn ctl(server: Option<&Server>, args: &[&str]) -> Output {
    let mut cmd = Command::new(bin("concordctl"));
    if let Some(s) = server {
        cmd.arg("--endpoint").arg(s.endpoint());
    }
    run(cmd.args(args)).await
}

async fn restore(file: &Path, dir: &Path) -> Output {
    let mut cmd = Command::new(bin("concord"));
    cmd.arg("restore").arg(file).arg("--data-dir").arg(dir);
    run(&mut cmd).await
}

fn ok(out: &Output, what: &str) -> String {
    assert_eq!(
        out.code,
        Some(0),
        "{what} failed:\n{}\n{}",
        out.stdout,
        out.stderr
    );
    out.stdout.clone()
}

fn create(path: &str, data: &str, mode: pb::CreateMode, session_id: u64) -> pb::CreateRequest {
    pb::CreateRequest {
        path: path.into(),
        data: Bytes::from(data.to_owned()),
        mode: mode.into(),
        session_id,
        ..Default::default()
    }
}

/// Every node of the tree: path -> (data, stat), walked from the root.
async fn tree_of(server: &Server) -> BTreeMap<String, (Bytes, pb::Stat)> {
    let mut tree = server.tree().await;
    let mut out = BTreeMap::new();
    let mut todo = vec!["/".to_string()];
    while let Some(path) = todo.pop() {
        let got = tree.get(get_req(path.clone())).await.unwrap().into_inner();
        let req = pb::ChildrenRequest {
            path: path.clone(),
            ..Default::default()
        };
        let children = tree.children(req).await.unwrap().into_inner().children;
        for c in children {
            let child = if path == "/" {
                format!("/{}", c.name)
            } else {
                format!("{path}/{}", c.name)
            };
            todo.push(child);
        }
        out.insert(path, (got.data, got.stat.unwrap()));
    }
    out
}

/// The header line `name = value` of `snapshot save` / `status` output.
fn field<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} = ")))
        .unwrap_or_else(|| panic!("no {name} in\n{out}"))
}

#[tokio::test]
async fn t46_save_restore_and_serve_the_same_tree() {
    let options = ServerOptions {
        session_ttl_ms: Some((1_000, 60_000)),
        ..ServerOptions::default()
    };
    let mut server = Server::start(options);
    let mut tree = server.tree().await;
    let mut sessions = server.session().await;
    let session_id = sessions
        .open(pb::OpenSessionRequest { ttl_ms: 30_000 })
        .await
        .unwrap()
        .into_inner()
        .session_id;
    use pb::CreateMode as M;
    for req in [
        create("/app", "config v0", M::Persistent, 0),
        create("/app/deep", "", M::Persistent, 0),
        create("/app/deep/er", "bottom", M::Persistent, 0),
        create("/app/owner", "mine", M::Ephemeral, session_id),
        create("/jobs", "", M::Persistent, 0),
    ] {
        tree.create(req).await.unwrap();
    }
    for n in 0..3 {
        let r = create(
            "/jobs/job-",
            &format!("job {n}"),
            M::PersistentSequential,
            0,
        );
        tree.create(r).await.unwrap();
    }
    let set = pb::SetRequest {
        path: "/app".into(),
        data: Bytes::from_static(b"config v1"),
        version: -1,
        ..Default::default()
    };
    tree.set(set).await.unwrap();
    let before = tree_of(&server).await;
    let zxid = server.status().await.zxid;

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("concord.backup");
    let file_arg = file.to_str().unwrap();
    let saved = ok(
        &ctl(Some(&server), &["snapshot", "save", file_arg]).await,
        "save",
    );
    assert_eq!(field(&saved, "zxid"), format!("{zxid:#x}"), "{saved}");
    assert_eq!(field(&saved, "nodes"), before.len().to_string());
    assert_eq!(field(&saved, "sessions"), "1");
    assert!(field(&saved, "checksum").starts_with("ok"), "{saved}");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "a temporary file was left behind");
    let status = ok(
        &ctl(None, &["snapshot", "status", file_arg]).await,
        "status",
    );
    assert_eq!(status, saved, "status reads what save wrote");
    let size = std::fs::metadata(&file).unwrap().len();
    assert_eq!(field(&status, "snapshot_bytes"), (size - 45).to_string());

    let good_before_restore = std::fs::read(&file).unwrap();

    // A new server on a folder made from the file.
    assert!(server.terminate(), "the server did not stop cleanly");
    std::fs::remove_dir_all(&server.data_dir).unwrap();
    let restored = ok(&restore(&file, &server.data_dir).await, "restore");
    assert!(restored.contains(&format!("zxid {zxid:#x}")), "{restored}");
    server.restart();
    let after = tree_of(&server).await;
    assert_eq!(after, before, "the restored tree differs");
    let (_, owner) = &after["/app/owner"];
    assert_eq!(owner.ephemeral_owner, session_id);
    // The session came back with it (a fresh full TTL), and the restored
    // server goes on from the snapshot's zxid.
    let mut sessions = server.session().await;
    let listed = sessions
        .list(pb::ListSessionsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .sessions;
    assert_eq!(
        listed.iter().map(|s| s.session_id).collect::<Vec<_>>(),
        [session_id]
    );
    let mut tree = server.tree().await;
    let next = tree
        .create(create("/jobs/job-", "job 3", M::PersistentSequential, 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next.path, "/jobs/job-0000000003");
    assert!(next.header.unwrap().zxid > zxid);

    // Saving over the old file replaces it whole, with nothing left beside it.
    let again = ok(
        &ctl(Some(&server), &["snapshot", "save", file_arg]).await,
        "save again",
    );
    let newer = u64::from_str_radix(field(&again, "zxid").trim_start_matches("0x"), 16).unwrap();
    assert!(newer > zxid, "{again}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    assert_eq!(
        ok(
            &ctl(None, &["snapshot", "status", file_arg]).await,
            "status"
        ),
        again
    );
    std::fs::write(&file, &good_before_restore).unwrap();

    // Restoring into a used folder is refused (exit 4), and changes nothing.
    let used = restore(&file, &server.data_dir).await;
    assert_eq!(used.code, Some(4), "{}", used.stderr);
    assert!(used.stderr.contains("is not empty"), "{}", used.stderr);

    // A damaged file: one byte flipped in the middle of the snapshot, then one cut
    // short. Both refused by status (exit 1) and by restore (exit 3).
    let good = std::fs::read(&file).unwrap();
    let mut flipped = good.clone();
    let at = 45 + (good.len() - 45) / 2;
    flipped[at] ^= 0x20;
    let cut = good[..good.len() - 10].to_vec();
    for (name, bytes) in [("flipped", flipped), ("cut", cut)] {
        let bad = dir.path().join(name);
        std::fs::write(&bad, bytes).unwrap();
        let status = ctl(None, &["snapshot", "status", bad.to_str().unwrap()]).await;
        assert_eq!(status.code, Some(1), "{name}: {}", status.stdout);
        assert!(
            status.stderr.contains("damaged"),
            "{name}: {}",
            status.stderr
        );
        let target = dir.path().join(format!("restored-{name}"));
        let refused = restore(&bad, &target).await;
        assert_eq!(refused.code, Some(3), "{name}: {}", refused.stderr);
        assert!(
            refused.stderr.contains("damaged"),
            "{name}: {}",
            refused.stderr
        );
        assert!(
            !target.join("concord.redb").exists(),
            "{name}: a store was written"
        );
    }
}

#[tokio::test]
async fn t46_a_team_caller_may_neither_snapshot_nor_list_members() {
    // Plain-text callers are `local_identity`: here a member of team payments.
    let toml = config_file(
        "local_identity = \"payments-app\"\n\
         [[teams]]\nname = \"payments\"\nroot = \"/teams/payments\"\nidentities = [\"payments-*\"]\n",
    );
    let options = ServerOptions {
        extra: config_flags(&toml),
        ..ServerOptions::default()
    };
    let server = Server::start(options);
    let mut cluster = server.cluster().await;
    let refused = match cluster.snapshot(pb::SnapshotRequest::default()).await {
        Ok(mut stream) => stream.get_mut().message().await.unwrap_err(),
        Err(e) => e,
    };
    assert_eq!(code_of(&refused), "PERMISSION_DENIED", "{refused:?}");
    let refused = cluster.members(pb::MembersRequest {}).await.unwrap_err();
    assert_eq!(code_of(&refused), "PERMISSION_DENIED", "{refused:?}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("b");
    let out = ctl(Some(&server), &["snapshot", "save", file.to_str().unwrap()]).await;
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("PERMISSION_DENIED"), "{}", out.stderr);
    assert!(!file.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "a temporary file was left"
    );
    let out = ctl(Some(&server), &["members"]).await;
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("PERMISSION_DENIED"), "{}", out.stderr);
}

#[tokio::test]
async fn t46_a_new_ensemble_restored_from_one_file_serves_the_tree() {
    let source = Server::start(ServerOptions::default());
    for n in 0..5 {
        create_at(&source.endpoint(), &format!("/kept-{n}"))
            .await
            .unwrap();
    }
    let before = tree_of(&source).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("b");
    ok(
        &ctl(
            Some(&source),
            &["snapshot", "save", "--linearizable", file.to_str().unwrap()],
        )
        .await,
        "save",
    );
    drop(source);
    // Three new members, each stopped, emptied and restored from the same file.
    let mut ensemble = Ensemble::start(3, ServerOptions::default());
    for server in &mut ensemble.servers {
        assert!(server.terminate());
        std::fs::remove_dir_all(&server.data_dir).unwrap();
        ok(&restore(&file, &server.data_dir).await, "restore");
    }
    for server in &mut ensemble.servers {
        server.restart();
    }
    let leader = ensemble.leader(WAIT).await;
    for server in &ensemble.servers {
        assert_eq!(tree_of(server).await, before, "server {}", server.addr);
    }
    let zxid = create_at(&ensemble.servers[leader].endpoint(), "/after")
        .await
        .unwrap();
    for i in 0..3 {
        ensemble.caught_up(i, zxid, WAIT).await;
    }
    eventually("every member has /after", WAIT, || async {
        for server in &ensemble.servers {
            if !server.exists("/after").await {
                return None;
            }
        }
        Some(())
    })
    .await;
}
