//! The SDK's service registration and id generator against a real server: the
//! registration's ephemeral node lives while registered, comes back under a new
//! session after its session is lost (closed behind its back, or a server stall
//! longer than the TTL) and after a reconnect that found it gone, and goes on close;
//! ids from concurrent clients are unique and grow.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use concord::{
    ChildrenOptions, Client, ConnectionState, ErrorCode, IdGenerator, IdOptions, ReadOptions,
    RegistrationOptions, RegistrationStatus, ServiceRegistration,
};
use concord_tests::{Server, ServerOptions};
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(10);

fn server() -> Server {
    Server::start(ServerOptions {
        session_ttl_ms: Some((100, 10_000)),
        ..ServerOptions::default()
    })
}

async fn register(client: &Client, instance: &str, address: &str) -> ServiceRegistration {
    let options = RegistrationOptions {
        ttl_ms: 2_000,
        ..RegistrationOptions::default()
    };
    ServiceRegistration::register_with(client, "api", instance, address, &options)
        .await
        .unwrap()
}

/// The node at `path`: its data and owner session, or None.
async fn node(client: &Client, path: &str) -> Option<(Vec<u8>, u64)> {
    match client.get(path, ReadOptions::default()).await {
        Ok(node) => Some((node.data, node.stat.ephemeral_owner)),
        Err(e) if e.code() == ErrorCode::NoNode => None,
        Err(e) => panic!("{e}"),
    }
}

/// Waits (bounded) until the registration's status satisfies `check`.
async fn status_until(
    reg: &ServiceRegistration,
    what: &str,
    check: impl Fn(&RegistrationStatus) -> bool,
) -> RegistrationStatus {
    let mut status = reg.status_watch();
    let waited = timeout(WAIT, status.wait_for(|s| check(s))).await;
    match waited {
        Ok(Ok(s)) => *s,
        Ok(Err(_)) => panic!("the registration's status closed waiting for {what}"),
        Err(_) => panic!("timed out waiting for {what}; status {:?}", reg.status()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t79_a_registration_outlives_its_session_and_goes_on_close() {
    let server = server();
    let client = Client::connect(server.endpoint()).await.unwrap();
    let admin = Client::connect(server.endpoint()).await.unwrap();
    let reg = register(&client, "i-1", "127.0.0.1:9000").await;
    let path = "/services/api/i-1";
    assert_eq!(reg.path(), path);
    let first = reg.status();
    assert!(first.registered && first.state.is_connected(), "{first:?}");
    assert_eq!(first.sessions, 1);
    assert_eq!(
        node(&admin, path).await,
        Some((b"127.0.0.1:9000".to_vec(), first.session_id))
    );
    // The parents are persistent.
    let parent = admin.get("/services/api", ReadOptions::default()).await;
    assert!(!parent.unwrap().stat.is_ephemeral());

    reg.update("127.0.0.1:9001").await.unwrap();
    let data = node(&admin, path).await.unwrap().0;
    assert_eq!(data, b"127.0.0.1:9001");

    // Its session ends behind its back: the next ping hears "expired", the node is
    // gone, and the registration comes back under a new session with the new data.
    admin.close_session(first.session_id).await.unwrap();
    let second = status_until(&reg, "a second session, registered", |s| {
        s.sessions == 2 && s.registered
    })
    .await;
    assert_ne!(second.session_id, first.session_id);
    assert_eq!(reg.session_id(), second.session_id);
    assert_eq!(
        node(&admin, path).await,
        Some((b"127.0.0.1:9001".to_vec(), second.session_id))
    );
    let err = admin.session_info(first.session_id).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::SessionExpired);
    admin.session_info(second.session_id).await.unwrap();

    reg.close().await.unwrap();
    assert_eq!(node(&admin, path).await, None);
    let err = admin.session_info(second.session_id).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::SessionExpired);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t79_a_reconnect_recreates_a_node_that_is_gone() {
    let server = server();
    let client = Client::connect(server.endpoint()).await.unwrap();
    let admin = Client::connect(server.endpoint()).await.unwrap();
    let reg = register(&client, "i-2", "10.0.0.2:80").await;
    let path = reg.path().to_owned();
    let session_id = reg.session_id();
    // Someone deletes the node; the registration does not poll, so it is told on
    // its next reconnect: stall the server until the session is suspended.
    admin.delete(&path, -1).await.unwrap();
    server.signal("STOP");
    let suspended =
        status_until(&reg, "Suspended", |s| s.state == ConnectionState::Suspended).await;
    server.signal("CONT");
    assert_eq!(suspended.session_id, session_id);
    // Reconnected, the node is read, found gone and created again, in the same
    // session.
    let mut status = reg.status_watch();
    let found = timeout(WAIT, async {
        loop {
            if node(&admin, &path).await.is_some() {
                return *status.borrow();
            }
            status.changed().await.unwrap();
        }
    })
    .await
    .expect("the node is created again");
    assert_eq!(found.state, ConnectionState::Reconnected);
    assert_eq!(found.sessions, 1);
    assert_eq!(
        node(&admin, &path).await,
        Some((b"10.0.0.2:80".to_vec(), session_id))
    );
    reg.close().await.unwrap();
    assert_eq!(node(&admin, &path).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t79_a_stall_longer_than_the_ttl_registers_again_under_a_new_session() {
    let server = server();
    let client = Client::connect(server.endpoint()).await.unwrap();
    let admin = Client::connect(server.endpoint()).await.unwrap();
    let reg = register(&client, "i-3", "10.0.0.3:80").await;
    let first = reg.status();
    // No answer for the give-up time (twice the TTL): the client calls its session
    // lost on its own (the server, stalled too, has not expired it yet when it
    // resumes: it charges no session for its own stall).
    server.signal("STOP");
    status_until(&reg, "Lost", |s| s.state == ConnectionState::Lost).await;
    server.signal("CONT");
    let second = status_until(&reg, "a second session, registered", |s| {
        s.sessions == 2 && s.registered
    })
    .await;
    assert_ne!(second.session_id, first.session_id);
    assert_eq!(
        node(&admin, reg.path()).await,
        Some((b"10.0.0.3:80".to_vec(), second.session_id))
    );
    reg.close().await.unwrap();
    assert_eq!(node(&admin, "/services/api/i-3").await, None);
}

/// Takes `count` ids with `ids`; returns them in the order taken.
async fn take(ids: &IdGenerator, count: usize) -> Vec<u64> {
    let mut taken = Vec::with_capacity(count);
    for _ in 0..count {
        taken.push(ids.next_id().await.unwrap());
    }
    taken
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t79_ids_from_concurrent_clients_are_unique_and_grow() {
    let server = server();
    let (clients, per_client) = (4, 25);
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let client = Client::connect(server.endpoint()).await.unwrap();
        tasks.push(tokio::spawn(async move {
            let ids = IdGenerator::new(&client, "/naming/ids", IdOptions::default());
            take(&ids, per_client).await
        }));
    }
    let mut all = BTreeSet::new();
    for task in tasks {
        let taken = task.await.unwrap();
        assert!(
            taken.windows(2).all(|w| w[0] < w[1]),
            "ids of one client do not grow: {taken:?}"
        );
        all.extend(taken);
    }
    assert_eq!(all.len(), clients * per_client, "an id was given twice");
    // Cleaned up: the folder is empty, and an id taken now is above all of them.
    let client = Client::connect(server.endpoint()).await.unwrap();
    let left = client
        .children("/naming/ids", &ChildrenOptions::default())
        .await
        .unwrap();
    assert!(left.children.is_empty(), "{:?}", left.children);
    let ids = IdGenerator::new(&client, "/naming/ids", IdOptions::default());
    let later = ids.next_id().await.unwrap();
    assert!(later > *all.last().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t79_ids_without_cleanup_keep_their_nodes() {
    let server = server();
    let client = Client::connect(server.endpoint()).await.unwrap();
    let keep = IdOptions {
        cleanup: false,
        prefix: "job-".to_owned(),
    };
    // Persistent nodes stay; a session's ephemeral ones go with it.
    let persistent = IdGenerator::new(&client, "/jobs", keep.clone());
    let session = client.open_session(2_000).await.unwrap();
    let ephemeral = IdGenerator::for_session(&session, "/jobs", keep);
    let mut taken = take(&persistent, 3).await;
    taken.extend(take(&ephemeral, 3).await);
    assert!(taken.windows(2).all(|w| w[0] < w[1]), "{taken:?}");
    let names = |listed: concord::Children| -> Vec<String> {
        listed.children.into_iter().map(|c| c.name).collect()
    };
    let expected: Vec<String> = taken.iter().map(|id| format!("job-{id:010}")).collect();
    let all = ChildrenOptions::default();
    let listed = client.children("/jobs", &all);
    assert_eq!(names(listed.await.unwrap()), expected);
    session.close().await.unwrap();
    let listed = client.children("/jobs", &all);
    assert_eq!(names(listed.await.unwrap()), expected[..3].to_vec());
    // A generator whose session is gone says so.
    let err = ephemeral.next_id().await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::SessionExpired);
}
