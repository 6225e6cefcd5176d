//! A fair lock guarding a fenced write: WORKERS workers, each with a session of its
//! own, queue for one `Mutex`; each, while holding it, writes its name and fencing
//! token to a shared node with `WriteOptions { fence }`. They get the lock in the
//! order they queued, with growing tokens. Then a stale holder (one that released
//! the lock, as a holder whose session expired while it was paused would have lost
//! it) tries to write with its old fence: the server rejects it with FENCED.
//!
//! ```text
//! cargo run --example fair_lock -- [ENDPOINT] [WORKERS]
//! ```
//!
//! ENDPOINT defaults to `CONCORD_ENDPOINT`, else `127.0.0.1:7181`; WORKERS to 4. It
//! ends by itself (or on Ctrl-C), closing its sessions and deleting its node.

use std::time::Duration;

use concord::{
    Client, CreateOptions, Error, ErrorCode, Fence, Mutex, Session, WriteOptions, ANY_VERSION,
};

const LOCK: &str = "fair-lock-demo";
const NODE: &str = "/fair-lock-demo";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let endpoint = args
        .next()
        .or_else(|| std::env::var("CONCORD_ENDPOINT").ok())
        .unwrap_or_else(|| "127.0.0.1:7181".into());
    let workers: usize = match args.next() {
        Some(n) => n.parse()?,
        None => 4,
    };
    let client = Client::builder()
        .endpoint(endpoint)
        .call_timeout(Duration::from_secs(5))
        .connect()
        .await?;
    match client.create(NODE, "", CreateOptions::default()).await {
        Err(e) if e.code() != ErrorCode::NodeExists => return Err(e.into()),
        _ => {}
    }
    let session = client.open_session(3_000).await?;
    let demo = tokio::select! {
        done = run(&client, &session, workers) => done,
        _ = tokio::signal::ctrl_c() => {
            println!("interrupted");
            Ok(())
        }
    };
    session.close().await?;
    client.delete(NODE, ANY_VERSION).await?;
    demo
}

async fn run(
    client: &Client,
    session: &Session,
    workers: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    // Hold the lock while the workers queue, so that their order is the spawn order.
    let gate = Mutex::new(session, LOCK);
    let held = gate.acquire().await?;
    println!("main holds {LOCK} (token {})", held.token());
    let mut tasks = Vec::new();
    for i in 0..workers {
        tasks.push(tokio::spawn(worker(client.clone(), i)));
        while client.lock_waiters(LOCK).await?.len() < i + 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        println!("worker {i} queued (place {})", i + 1);
    }
    held.release().await?;
    println!("main released {LOCK}");
    for task in tasks {
        task.await??;
    }
    let last = client.get(NODE, Default::default()).await?;
    println!("{NODE} = {:?}", String::from_utf8_lossy(&last.data));

    // A stale holder: its fence no longer holds, so its write is rejected.
    let stale = {
        let guard = gate.acquire().await?;
        let fence = guard.fence();
        guard.release().await?;
        fence
    };
    worker(client.clone(), workers).await?;
    match fenced_write(client, "stale write", stale.clone()).await {
        Err(e) if e.code() == ErrorCode::Fenced => {
            println!(
                "stale holder (token {}) rejected: {}",
                stale.token,
                e.code().as_str_name()
            )
        }
        Err(e) => return Err(e.into()),
        Ok(_) => return Err("a stale fence was accepted".into()),
    }
    Ok(())
}

/// Opens a session, waits for the lock, writes under its fence, releases.
async fn worker(client: Client, i: usize) -> Result<(), Error> {
    let session = client.open_session(3_000).await?;
    let lock = Mutex::new(&session, LOCK);
    let guard = lock.acquire().await?;
    let text = format!("worker {i} (token {})", guard.token());
    let zxid = fenced_write(&client, &text, guard.fence()).await?;
    println!(
        "worker {i} holds {LOCK} (token {}), wrote at zxid {zxid}",
        guard.token()
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    guard.release().await?;
    session.close().await
}

async fn fenced_write(client: &Client, text: &str, fence: Fence) -> Result<u64, Error> {
    let options = WriteOptions {
        fence: Some(fence),
        ..Default::default()
    };
    let updated = client.set_with(NODE, text, ANY_VERSION, &options).await?;
    Ok(updated.zxid)
}
