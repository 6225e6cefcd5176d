//! A leader selector with auto-requeue: three participants (each with its own
//! session) take turns leading election NAME; each leadership lasts one second (the
//! take-leadership closure), then the leader resigns and queues again at the back.
//! Ends after ROUNDS leaderships in all, or on Ctrl-C.
//!
//! ```text
//! cargo run --example leader_selector -- [ENDPOINT] [NAME] [ROUNDS]
//! ```
//!
//! ENDPOINT defaults to `CONCORD_ENDPOINT`, else `127.0.0.1:7181`; NAME to
//! `demo-selector`; ROUNDS to 6.

use std::sync::Arc;
use std::time::Duration;

use concord::{Client, LeaderSelector, Leadership};
use tokio::sync::mpsc;

const PARTICIPANTS: usize = 3;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let endpoint = args
        .next()
        .or_else(|| std::env::var("CONCORD_ENDPOINT").ok())
        .unwrap_or_else(|| "127.0.0.1:7181".into());
    let name = args.next().unwrap_or_else(|| "demo-selector".into());
    let rounds: usize = match args.next() {
        Some(n) => n.parse()?,
        None => 6,
    };

    let client = Client::builder()
        .endpoint(endpoint)
        .call_timeout(Duration::from_secs(5))
        .session_ttl(Duration::from_secs(3))
        .connect()
        .await?;
    let (done_tx, mut done_rx) = mpsc::channel::<String>(PARTICIPANTS);
    let mut sessions = Vec::new();
    let mut selectors = Vec::new();
    for n in 0..PARTICIPANTS {
        let session = client.open_session(0).await?;
        let id = format!("worker-{n}");
        let done = done_tx.clone();
        let who = Arc::new(id.clone());
        let selector = LeaderSelector::new(&session, &name, &id, move |lead: Leadership| {
            let who = Arc::clone(&who);
            let done = done.clone();
            async move {
                println!("{who} leads (term {})", lead.term());
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => {
                        println!("{who} is done leading; it queues again");
                        let _ = done.send(who.to_string()).await;
                    }
                    () = lead.cancelled() => println!("{who} lost leadership"),
                }
            }
        });
        selector.auto_requeue(true);
        selector.start()?;
        sessions.push(session);
        selectors.push(selector);
    }

    for _ in 0..rounds {
        tokio::select! {
            led = done_rx.recv() => if led.is_none() { break },
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    for selector in &selectors {
        selector.close().await?;
    }
    for session in sessions {
        session.close().await?;
    }
    println!("done after {rounds} leaderships");
    Ok(())
}
