//! A service registry with discovery: three instances of service NAME register with
//! `ServiceRegistration` (an ephemeral node `/services/NAME/ID` whose data is the
//! address, under a session of its own), while a discovery client prints the
//! instances as they come and go. Then one instance closes its registration (gone at
//! once), one is dropped without closing (gone when the server expires its session,
//! one TTL later), and the last closes. Ends when every instance is gone, or on
//! Ctrl-C (the instances' sessions then expire one TTL later).
//!
//! ```text
//! cargo run --example service_registry -- [ENDPOINT] [NAME]
//! ```
//!
//! ENDPOINT defaults to `CONCORD_ENDPOINT`, else `127.0.0.1:7181`; NAME to `demo`.

use std::time::Duration;

use concord::{Client, RegistrationOptions, ServiceDiscovery, ServiceEvent, ServiceRegistration};

/// The session TTL of each instance.
const TTL_MS: i64 = 2_000;

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
    let mut discovery = ServiceDiscovery::new(&client, &name);
    let mut events = discovery.listen();
    discovery.start().await?;
    let script = {
        let (client, name) = (client.clone(), name.clone());
        tokio::spawn(async move {
            let options = RegistrationOptions {
                ttl_ms: TTL_MS,
                ..RegistrationOptions::default()
            };
            let mut registrations = Vec::new();
            for n in 1..=3 {
                let (id, address) = (format!("instance-{n}"), format!("127.0.0.1:{}", 9000 + n));
                match ServiceRegistration::register_with(&client, &name, &id, address, &options)
                    .await
                {
                    Ok(registration) => registrations.push(registration),
                    Err(e) => println!("registering {id} failed: {e}"),
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            let mut registrations = registrations.into_iter();
            if let Some(first) = registrations.next() {
                println!("instance-1 closes its registration");
                let _ = first.close().await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            if let Some(second) = registrations.next() {
                println!("instance-2 is dropped without closing: gone after its TTL ({TTL_MS} ms)");
                drop(second);
            }
            tokio::time::sleep(Duration::from_millis(TTL_MS as u64 * 2)).await;
            for rest in registrations {
                println!("the last instance closes its registration");
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
    // On Ctrl-C this drops the registrations: the server expires their sessions.
    script.abort();
    discovery.close();
    Ok(())
}
