//! The SDK's ServiceDiscovery against a real server: instances registered as
//! ephemeral nodes under /services/NAME/ appear, change and disappear (session closed,
//! session expired) as events in order, and the pickers choose among the live ones.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use concord::{
    Client, CreateMode, CreateOptions, ErrorCode, ServiceDiscovery, ServiceEvent, ServiceListener,
    Session, ANY_VERSION,
};
use concord_tests::{Server, ServerOptions};

const WAIT: Duration = Duration::from_secs(20);

/// Registers `id` at `address` as an ephemeral node of `session`, as a registration
/// does: `/services/NAME/ID` holding the address.
async fn register(client: &Client, session: &Session, name: &str, id: &str, address: &str) {
    let options = CreateOptions {
        session_id: session.id(),
        ..CreateOptions::mode(CreateMode::Ephemeral)
    };
    let path = concord::discovery::instance_path(name, id);
    client.create(&path, address, options).await.unwrap();
}

async fn directory(client: &Client, name: &str) {
    let none = CreateOptions::default();
    let _ = client.create("/services", "", none.clone()).await;
    client
        .create(&concord::discovery::service_path(name), "", none)
        .await
        .unwrap();
}

/// The next event, shortened to "kind id address".
async fn next(listener: &mut ServiceListener) -> String {
    let event = tokio::time::timeout(WAIT, listener.next())
        .await
        .expect("no discovery event in time")
        .expect("the listener ended");
    match event {
        ServiceEvent::Registered(i) => format!("registered {} {}", i.id, i.address),
        ServiceEvent::Updated(i) => format!("updated {} {}", i.id, i.address),
        ServiceEvent::Unregistered(i) => format!("unregistered {} {}", i.id, i.address),
        ServiceEvent::Initialized => "initialized".to_owned(),
        ServiceEvent::Lagged { missed } => format!("lagged {missed}"),
    }
}

fn ids(discovery: &ServiceDiscovery) -> Vec<String> {
    discovery.instances().into_iter().map(|i| i.id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t77_discovery_sees_instances_come_and_go() {
    let server = Server::start(ServerOptions::default());
    let client = Client::connect(server.endpoint()).await.unwrap();
    let mut discovery = ServiceDiscovery::new(&client, "billing");
    let mut events = discovery.listen();
    discovery.start().await.unwrap();
    assert_eq!(next(&mut events).await, "initialized");
    assert!(discovery.instances().is_empty());
    assert!(discovery.random_instance().is_none() && discovery.round_robin_instance().is_none());

    directory(&client, "billing").await;
    let mut sessions = Vec::new();
    for n in 1..=3 {
        let session = client.open_session(600).await.unwrap();
        register(
            &client,
            &session,
            "billing",
            &format!("i-{n}"),
            &format!("10.0.0.{n}:80"),
        )
        .await;
        sessions.push(session);
    }
    for n in 1..=3 {
        assert_eq!(
            next(&mut events).await,
            format!("registered i-{n} 10.0.0.{n}:80")
        );
    }
    assert_eq!(ids(&discovery), ["i-1", "i-2", "i-3"]);
    let i2 = discovery.instance("i-2").unwrap();
    assert_eq!(
        (i2.address.as_str(), i2.session_id),
        ("10.0.0.2:80", sessions[1].id())
    );
    // Round robin visits each instance once per round; random stays among them.
    let round: BTreeSet<String> = (0..3)
        .map(|_| discovery.round_robin_instance().unwrap().id)
        .collect();
    assert_eq!(round.len(), 3);
    for _ in 0..20 {
        let picked = discovery.random_instance().unwrap().id;
        assert!(round.contains(&picked));
    }

    // A changed address is an update.
    let path = concord::discovery::instance_path("billing", "i-3");
    client
        .set(&path, "10.0.0.33:80", ANY_VERSION)
        .await
        .unwrap();
    assert_eq!(next(&mut events).await, "updated i-3 10.0.0.33:80");

    // Closed: gone at once. Abandoned: gone when the server expires the session.
    let third = sessions.pop().unwrap();
    let second = sessions.pop().unwrap();
    let first = sessions.pop().unwrap();
    first.close().await.unwrap();
    assert_eq!(next(&mut events).await, "unregistered i-1 10.0.0.1:80");
    drop(second);
    assert_eq!(next(&mut events).await, "unregistered i-2 10.0.0.2:80");
    assert_eq!(ids(&discovery), ["i-3"]);
    assert_eq!(
        discovery.round_robin_instance().unwrap().address,
        "10.0.0.33:80"
    );

    // A discovery started now sees the live instance, then Initialized.
    let mut later = ServiceDiscovery::new(&client, "billing");
    let mut late_events = later.listen();
    later.start().await.unwrap();
    assert_eq!(next(&mut late_events).await, "registered i-3 10.0.0.33:80");
    assert_eq!(next(&mut late_events).await, "initialized");

    third.close().await.unwrap();
    assert_eq!(next(&mut events).await, "unregistered i-3 10.0.0.33:80");
    assert_eq!(
        next(&mut late_events).await,
        "unregistered i-3 10.0.0.33:80"
    );
    assert!(discovery.instances().is_empty());
    discovery.close();
    assert!(tokio::time::timeout(WAIT, events.next())
        .await
        .unwrap()
        .is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t77_a_service_name_is_one_segment() {
    let server = Server::start(ServerOptions::default());
    let client = Client::connect(server.endpoint()).await.unwrap();
    for bad in ["", "a/b"] {
        let err = ServiceDiscovery::new(&client, bad)
            .start()
            .await
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::BadArguments, "{bad:?}");
    }
}
