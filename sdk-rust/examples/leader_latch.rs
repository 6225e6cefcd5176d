//! A leader latch: joins election NAME as participant ID and prints a line each time
//! leadership is gained (`leader ID`) or lost (`not-leader ID`), until Ctrl-C (it then
//! resigns, telling its listener) or until its session is lost (`lost ID`, exit 1).
//!
//! ```text
//! cargo run --example leader_latch -- [ENDPOINT] [NAME] [ID] [TTL_MS]
//! ```
//!
//! ENDPOINT defaults to `CONCORD_ENDPOINT`, else `127.0.0.1:7181`; NAME to `demo`; ID
//! to `latch-PID`; TTL_MS (the session's TTL) to 3000. Run several to watch the
//! leadership move when the leader stops (Ctrl-C) or is killed (after its TTL).

use std::time::Duration;

use concord::{Client, CloseMode, LatchEvent, LeaderLatch};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let endpoint = args
        .next()
        .or_else(|| std::env::var("CONCORD_ENDPOINT").ok())
        .unwrap_or_else(|| "127.0.0.1:7181".into());
    let name = args.next().unwrap_or_else(|| "demo".into());
    let id = args
        .next()
        .unwrap_or_else(|| format!("latch-{}", std::process::id()));
    let ttl_ms: u64 = match args.next() {
        Some(ttl) => ttl.parse()?,
        None => 3_000,
    };

    let client = Client::builder()
        .endpoint(endpoint)
        .call_timeout(Duration::from_secs(5))
        .session_ttl(Duration::from_millis(ttl_ms))
        .connect()
        .await?;
    let session = client.open_session(0).await?;
    let latch = LeaderLatch::new(&session, &name, &id);
    let mut events = latch.listen();
    latch.start()?;
    println!(
        "started {id} in election {name} (session {:#x})",
        session.id()
    );

    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(LatchEvent::IsLeader) => {
                    let term = latch.fence().map(|f| f.token).unwrap_or_default();
                    println!("leader {id} (term {term})");
                }
                Some(LatchEvent::NotLeader) => println!("not-leader {id}"),
                None => {
                    println!("lost {id}: {:?}", latch.wait().await.err());
                    std::process::exit(1);
                }
            },
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    latch.close(CloseMode::NotifyLeader).await?;
    while let Some(event) = events.next().await {
        if event == LatchEvent::NotLeader {
            println!("not-leader {id}");
        }
    }
    session.close().await?;
    println!("closed {id}");
    Ok(())
}
