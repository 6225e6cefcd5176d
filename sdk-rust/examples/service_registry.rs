//! A service registry with discovery: three instances of service NAME register as
//! ephemeral nodes `/services/NAME/ID` (data: the address), each with a session of its
//! own, while a discovery client prints the instances as they come and go. Then one
//! instance closes its session (gone at once), one stops its keep-alives (gone when the
//! server expires its session, one TTL later), and the last closes. Ends when every
//! instance is gone, or on Ctrl-C (the instances' sessions then expire one TTL later).
//!
//! ```text
//! cargo run --example service_registry -- [ENDPOINT] [NAME]
//! ```
//!
//! ENDPOINT defaults to `CONCORD_ENDPOINT`, else `127.0.0.1:7181`; NAME to `demo`.

use std::time::Duration;

use concord::discovery::{instance_path, service_path};
use concord::{
    Client, CreateMode, CreateOptions, ErrorCode, ServiceDiscovery, ServiceEvent, Session,
};

/// The session TTL of each instance.
const TTL_MS: i64 = 2_000;

async fn register(
    client: &Client,
    name: &str,
    id: &str,
    address: &str,
) -> Result<Session, concord::Error> {
    let session = client.open_session(TTL_MS).await?;
    let options = CreateOptions {
        session_id: session.id(),
        ..CreateOptions::mode(CreateMode::Ephemeral)
    };
    client
        .create(&instance_path(name, id), address, options)
        .await?;
    Ok(session)
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
    for path in ["/services".to_owned(), service_path(&name)] {
        match client.create(&path, "", CreateOptions::default()).await {
            Err(e) if e.code() != ErrorCode::NodeExists => return Err(e.into()),
            _ => {}
        }
    }

    let mut discovery = ServiceDiscovery::new(&client, &name);
    let mut events = discovery.listen();
    discovery.start().await?;
    let script = {
        let (client, name) = (client.clone(), name.clone());
        tokio::spawn(async move {
            let mut sessions = Vec::new();
            for n in 1..=3 {
                let (id, address) = (format!("instance-{n}"), format!("127.0.0.1:{}", 9000 + n));
                match register(&client, &name, &id, &address).await {
                    Ok(session) => sessions.push(session),
                    Err(e) => println!("registering {id} failed: {e}"),
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            let mut sessions = sessions.into_iter();
            if let Some(first) = sessions.next() {
                println!("instance-1 closes its session");
                let _ = first.close().await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            if let Some(second) = sessions.next() {
                println!("instance-2 stops its keep-alives: gone after its TTL ({TTL_MS} ms)");
                drop(second);
            }
            tokio::time::sleep(Duration::from_millis(TTL_MS as u64 * 2)).await;
            for rest in sessions {
                println!("the last instance closes its session");
                let _ = rest.close().await;
            }
        })
    };

    let mut registered = 0;
    loop {
        tokio::select! {
            event = events.next() => {
                match event {
                    Some(ServiceEvent::Registered(i)) => {
                        registered += 1;
                        println!("up:   {} at {} (session {:#x})", i.id, i.address, i.session_id);
                    }
                    Some(ServiceEvent::Updated(i)) => println!("moved: {} to {}", i.id, i.address),
                    Some(ServiceEvent::Unregistered(i)) => println!("down: {} at {}", i.id, i.address),
                    Some(ServiceEvent::Initialized) => println!("discovery initialized"),
                    Some(ServiceEvent::Lagged { missed }) => println!("missed {missed} events"),
                    None => break,
                }
                let now: Vec<String> = discovery.instances().into_iter().map(|i| i.id).collect();
                println!("      instances now: {now:?}; next by round robin: {:?}",
                    discovery.round_robin_instance().map(|i| i.address));
                if registered >= 3 && now.is_empty() {
                    break;
                }
            }
            _ = tokio::signal::ctrl_c() => {
                println!("interrupted");
                break;
            }
        }
    }
    // On Ctrl-C this drops the sessions' handles: the server expires them.
    script.abort();
    discovery.close();
    Ok(())
}
