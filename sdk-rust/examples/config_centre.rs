//! A config centre: a writer sets the config node `/config-centre/NAME` ten times,
//! `key=value` lines, half a second apart; two watchers print each value they see: one
//! as raw bytes, one parsed into a map by a closure. A slow watcher skips to the
//! newest value. Ends after the last value has reached both watchers, or on Ctrl-C.
//!
//! ```text
//! cargo run --example config_centre -- [ENDPOINT] [NAME]
//! ```
//!
//! ENDPOINT defaults to `CONCORD_ENDPOINT`, else `127.0.0.1:7181`; NAME to `demo`. Run a
//! second copy against the same NAME to see its writes reach this one's watchers.

use std::collections::BTreeMap;
use std::time::Duration;

use concord::{Client, ConfigWatcher, CreateOptions, ErrorCode, ANY_VERSION};

/// `key=value` lines to a map (lines without `=` are skipped).
fn parse(data: &[u8]) -> BTreeMap<String, String> {
    String::from_utf8_lossy(data)
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let endpoint = args
        .next()
        .or_else(|| std::env::var("CONCORD_ENDPOINT").ok())
        .unwrap_or_else(|| "127.0.0.1:7181".into());
    let name = args.next().unwrap_or_else(|| "demo".into());
    let client = Client::builder()
        .endpoint(endpoint)
        .call_timeout(Duration::from_secs(5))
        .connect()
        .await?;
    for path in [
        "/config-centre".to_owned(),
        format!("/config-centre/{name}"),
    ] {
        match client.create(&path, "", CreateOptions::default()).await {
            Err(e) if e.code() != ErrorCode::NodeExists => return Err(e.into()),
            _ => {}
        }
    }
    let path = format!("/config-centre/{name}");

    let raw = ConfigWatcher::start(&client, &path).await?;
    let typed = ConfigWatcher::start_with(&client, &path, parse).await?;
    raw.wait_initialized().await;
    typed.wait_initialized().await;
    println!("watching {path}; it holds {:?}", typed.current());

    let last = "round=10\ntimeout_ms=1000\n".to_owned();
    let writer = {
        let (client, path) = (client.clone(), path.clone());
        tokio::spawn(async move {
            for round in 1..=10u32 {
                let value = format!("round={round}\ntimeout_ms={}\n", round * 100);
                match client.set(&path, value, ANY_VERSION).await {
                    Ok(updated) => println!("writer: set round {round} (zxid {})", updated.zxid),
                    Err(e) => println!("writer: set failed: {e}"),
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };

    let (mut raw_changes, mut typed_changes) = (raw.listen(), typed.listen());
    let (mut raw_done, mut typed_done) = (false, false);
    while !(raw_done && typed_done) {
        tokio::select! {
            change = raw_changes.next() => {
                let Some(change) = change else { break };
                let text = change.value.map(|v| String::from_utf8_lossy(&v).replace('\n', "; "));
                println!("raw watcher:   version {} {:?}", change.version, text);
                raw_done = text.as_deref() == Some(&last.replace('\n', "; "));
            }
            change = typed_changes.next() => {
                let Some(change) = change else { break };
                println!("typed watcher: version {} {:?}", change.version, change.value);
                typed_done = change.value.as_ref().and_then(|m| m.get("round")).map(String::as_str)
                    == Some("10");
            }
            _ = tokio::signal::ctrl_c() => {
                println!("interrupted");
                break;
            }
        }
    }
    writer.abort();
    Ok(())
}
