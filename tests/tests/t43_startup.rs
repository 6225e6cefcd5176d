//! Start-up and fatal paths (issue 10, point 8) against the real binary: a server
//! whose data folder fails recovery never prints `listening ADDR` (a supervisor
//! waiting for that line must not read a failing start as healthy) and exits
//! non-zero; a healthy start prints it once the server serves.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use concord_tests::{bin, Background};

/// Runs `concord` on `data_dir` until it exits; returns (success, stdout, stderr).
async fn run_on(data_dir: &Path) -> (bool, String, String) {
    let mut process = Background::spawn(
        Command::new(bin("concord"))
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir),
    );
    let status = process.wait_exit(Duration::from_secs(30)).await;
    (status.success(), process.stdout(), process.stderr())
}

#[tokio::test]
async fn t43_a_data_folder_that_is_a_file_never_reports_listening() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("data");
    std::fs::write(&file, b"not a folder").unwrap();
    let (ok, stdout, stderr) = run_on(&file).await;
    assert!(!ok, "exited 0; stderr:\n{stderr}");
    assert!(!stdout.contains("listening"), "stdout:\n{stdout}");
    assert!(stderr.contains("error"), "stderr:\n{stderr}");
}

#[tokio::test]
async fn t43_a_garbage_store_never_reports_listening() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let garbage: Vec<u8> = (0..64 * 1024)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(data.join("concord.redb"), garbage).unwrap();
    let (ok, stdout, stderr) = run_on(&data).await;
    assert!(!ok, "exited 0; stderr:\n{stderr}");
    assert!(!stdout.contains("listening"), "stdout:\n{stdout}");
}

/// A good start prints the line, and the address it names serves at once.
#[tokio::test]
async fn t43_a_healthy_start_reports_listening_when_it_serves() {
    let dir = tempfile::tempdir().unwrap();
    let mut process = Background::spawn(
        Command::new(bin("concord"))
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path().join("data")),
    );
    let addr = process.listening_addr().await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut tree = concord_proto::v1::tree_client::TreeClient::new(channel);
    let exists = tree
        .exists(concord_tests::exists_req("/"))
        .await
        .unwrap()
        .into_inner();
    assert!(exists.exists);
    process.signal("TERM");
    assert!(process.wait_exit(Duration::from_secs(20)).await.success());
}
