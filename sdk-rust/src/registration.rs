//! [`ServiceRegistration`]: one instance of a service, registered as an ephemeral node
//! `/services/NAME/INSTANCE_ID` whose data is the instance's address, kept registered
//! across sessions (the one recipe that opens a new session after `Lost`).
//!
//! ```text
//!  register ─▶ open session ─▶ create /services/NAME/ID (ephemeral, data = address)
//!                 ▲                                  │ task: the session's states
//!                 │            Suspended: nothing (the node may still be there)
//!                 │            Reconnected: the node is read; re-created if gone
//!                 └── Lost: a new session, and the node again under it
//!  update(data) ─▶ set (kept for re-creations)    close() ─▶ the session closed (node gone)
//! ```
//!
//! The layout is a contract with discovery (`/services/NAME` holds one child per
//! instance, its data the address as bytes): parents are created as needed, as
//! persistent nodes. The recipe never polls; it acts on state changes only, so a node
//! someone else deletes while the session is connected is not re-created until the
//! next `Reconnected` or `Lost`. Instance ids must be unique per service: a
//! registration that finds the node owned by another session deletes it and creates
//! its own (as Curator's does, so that a stale node of its own lost session does not
//! block it).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Mutex};
use tokio::task::JoinHandle;

use crate::client::Client;
use crate::discovery::SERVICES_ROOT;
use crate::error::Error;
use crate::options::{CreateOptions, ReadOptions, RetryPolicy, ANY_VERSION};
use crate::proto::ErrorCode;
use crate::session::{ConnectionState, Session, StateListener};

/// Attempts of one create-or-replace of the node before the error is returned.
const ENSURE_ATTEMPTS_MAX: u32 = 8;

/// How fast a failed re-registration (or session open) is tried again.
const REREGISTER_BACKOFF: RetryPolicy = RetryPolicy {
    attempts_max: 0,
    elapsed_max_ms: 0,
    delay_initial_ms: 50,
    delay_max_ms: 1_000,
};

/// The longest one attempt at opening a session or at re-creating the node may take
/// before it is tried again (a stalled server answers nothing, and the client may have
/// no call deadline).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// How to register.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationOptions {
    /// TTL of the sessions the registration opens (0: the client's configured TTL,
    /// else the server's default).
    pub ttl_ms: i64,
    /// The folder of the services ([`SERVICES_ROOT`] by default).
    pub base_path: String,
}

impl Default for RegistrationOptions {
    fn default() -> Self {
        RegistrationOptions {
            ttl_ms: 0,
            base_path: SERVICES_ROOT.to_owned(),
        }
    }
}

/// Where a registration stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistrationStatus {
    /// The session that owns (or is about to own) the node.
    pub session_id: u64,
    /// That session's state; `Closed` once the registration is closed.
    pub state: ConnectionState,
    /// Whether the node was created (or found) under this session and is not known
    /// to be gone since.
    pub registered: bool,
    /// How many sessions the registration has had: 1 at first, one more after each
    /// `Lost`.
    pub sessions: u64,
}

/// What the handle and the task share.
#[derive(Debug)]
struct Shared {
    client: Client,
    /// `/services/NAME/INSTANCE_ID`.
    path: String,
    ttl_ms: i64,
    /// The data of the node. Held while the node is created or set, so that a
    /// re-creation never writes data older than an `update`.
    data: Mutex<Vec<u8>>,
    status: watch::Sender<RegistrationStatus>,
}

impl Shared {
    fn publish(&self, change: impl FnOnce(&mut RegistrationStatus)) {
        self.status.send_modify(change);
    }
}

/// A service instance registered as an ephemeral node under a session of its own,
/// re-registered after the session is lost. Made by [`ServiceRegistration::register`].
///
/// Dropping it stops the keep-alives without deleting the node: it goes one TTL
/// later, when the server expires the session. Call [`ServiceRegistration::close`] to
/// remove it at once.
#[derive(Debug)]
pub struct ServiceRegistration {
    shared: Arc<Shared>,
    /// Follows the session's states; owns the session. Aborted on drop and on close.
    task: JoinHandle<()>,
}

impl ServiceRegistration {
    /// Registers instance `instance_id` of service `service` with `data` (its address)
    /// at `/services/SERVICE/INSTANCE_ID`, under a new session of `client`. Returns once
    /// the node exists. Errors: BAD_ARGUMENTS (an empty name or one with `/`), and
    /// those of opening a session and of the create.
    pub async fn register(
        client: &Client,
        service: &str,
        instance_id: &str,
        data: impl Into<Vec<u8>>,
    ) -> Result<ServiceRegistration, Error> {
        let options = RegistrationOptions::default();
        ServiceRegistration::register_with(client, service, instance_id, data, &options).await
    }

    /// As [`ServiceRegistration::register`], with a TTL or another base path.
    pub async fn register_with(
        client: &Client,
        service: &str,
        instance_id: &str,
        data: impl Into<Vec<u8>>,
        options: &RegistrationOptions,
    ) -> Result<ServiceRegistration, Error> {
        let path = instance_path(&options.base_path, service, instance_id)?;
        let session = client.open_session(options.ttl_ms).await?;
        let listener = session.listen();
        let status = RegistrationStatus {
            session_id: session.id(),
            state: session.state(),
            registered: false,
            sessions: 1,
        };
        let shared = Arc::new(Shared {
            client: client.clone(),
            path,
            ttl_ms: options.ttl_ms,
            data: Mutex::new(data.into()),
            status: watch::channel(status).0,
        });
        if let Err(e) = register_node(&shared, session.id()).await {
            // Best effort: the session would expire anyway.
            let _ = session.close().await;
            return Err(e);
        }
        let task = tokio::spawn(follow(Arc::clone(&shared), session, listener));
        Ok(ServiceRegistration { shared, task })
    }

    /// The node's path, `/services/NAME/INSTANCE_ID`.
    pub fn path(&self) -> &str {
        &self.shared.path
    }

    /// Where the registration stands now.
    pub fn status(&self) -> RegistrationStatus {
        *self.shared.status.borrow()
    }

    /// A receiver of the status, for waiting on a condition (`wait_for`); it may skip
    /// statuses that came and went.
    pub fn status_watch(&self) -> watch::Receiver<RegistrationStatus> {
        self.shared.status.subscribe()
    }

    /// The session that owns the node now.
    pub fn session_id(&self) -> u64 {
        self.status().session_id
    }

    /// The state of that session.
    pub fn state(&self) -> ConnectionState {
        self.status().state
    }

    /// Replaces the instance's data (its address), now and for every re-creation.
    /// A node that is gone at the moment (the session was lost) gets it when it is
    /// re-created. Errors: those of the set (DATA_TOO_LARGE, ...).
    pub async fn update(&self, data: impl Into<Vec<u8>>) -> Result<(), Error> {
        let mut current = self.shared.data.lock().await;
        let data = data.into();
        let result = self
            .shared
            .client
            .set(&self.shared.path, data.clone(), ANY_VERSION)
            .await;
        match result {
            Ok(_) => {
                *current = data;
                Ok(())
            }
            Err(e) if e.code() == ErrorCode::NoNode => {
                *current = data;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Unregisters: stops following the session and closes it, which deletes the node.
    /// Errors: those of the close (the node then goes when the session expires).
    pub async fn close(self) -> Result<(), Error> {
        self.task.abort();
        let status = self.status();
        let result = match self.shared.client.close_session(status.session_id).await {
            Ok(_) => Ok(()),
            Err(e) if e.code() == ErrorCode::SessionExpired => Ok(()),
            Err(e) => Err(e),
        };
        self.shared.publish(|s| {
            s.state = ConnectionState::Closed;
            s.registered = false;
        });
        result
    }
}

impl Drop for ServiceRegistration {
    /// Stops the task (and with it the session's keep-alives).
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `BASE/SERVICE/INSTANCE_ID`, or BAD_ARGUMENTS.
fn instance_path(base: &str, service: &str, instance_id: &str) -> Result<String, Error> {
    for (what, name) in [("service name", service), ("instance id", instance_id)] {
        if name.is_empty() || name.contains('/') {
            let message = format!("the {what} {name:?} must be non-empty, without '/'");
            return Err(Error::client(ErrorCode::BadArguments, message));
        }
    }
    Ok(format!(
        "{}/{service}/{instance_id}",
        base.trim_end_matches('/')
    ))
}

/// Follows one session after another: re-registers after `Reconnected` when the node
/// is gone, and under a new session after `Lost`.
async fn follow(shared: Arc<Shared>, mut session: Session, mut listener: StateListener) {
    loop {
        while let Some(state) = listener.next().await {
            shared.publish(|s| s.state = state);
            match state {
                ConnectionState::Reconnected => reregister(&shared, &session).await,
                ConnectionState::Lost | ConnectionState::Closed => break,
                ConnectionState::Connected | ConnectionState::Suspended => {}
            }
        }
        // The session's end (or its handle's, which cannot happen here: we own it).
        shared.publish(|s| {
            s.state = ConnectionState::Lost;
            s.registered = false;
        });
        (session, listener) = reopen(&shared).await;
        reregister(&shared, &session).await;
    }
}

/// Opens a new session, trying again (with back-off) until one is granted. (An open
/// that timed out but was applied leaves a session without pings: it expires.)
async fn reopen(shared: &Shared) -> (Session, StateListener) {
    let mut attempt = 0u32;
    loop {
        let open = shared.client.open_session(shared.ttl_ms);
        match tokio::time::timeout(ATTEMPT_TIMEOUT, open).await {
            Ok(Ok(session)) => {
                let listener = session.listen();
                shared.publish(|s| {
                    s.session_id = session.id();
                    s.state = session.state();
                    s.registered = false;
                    s.sessions += 1;
                });
                return (session, listener);
            }
            Ok(Err(_)) | Err(_) => {
                attempt = attempt.saturating_add(1);
                tokio::time::sleep(REREGISTER_BACKOFF.jittered_delay(attempt)).await;
            }
        }
    }
}

/// Makes sure the node exists under `session`, trying again (with back-off) while
/// the session lives.
async fn reregister(shared: &Shared, session: &Session) {
    let mut attempt = 0u32;
    while !session.state().is_ended() {
        let check = check_node(shared, session.id());
        match tokio::time::timeout(ATTEMPT_TIMEOUT, check).await {
            Ok(Ok(())) => return,
            Ok(Err(e)) if e.code() == ErrorCode::SessionExpired => return,
            Ok(Err(_)) | Err(_) => {
                attempt = attempt.saturating_add(1);
                tokio::time::sleep(REREGISTER_BACKOFF.jittered_delay(attempt)).await;
            }
        }
    }
}

/// Reads the node; creates it again unless `session_id` owns it.
async fn check_node(shared: &Shared, session_id: u64) -> Result<(), Error> {
    let read = shared.client.exists(&shared.path, ReadOptions::default());
    match read.await?.stat {
        Some(stat) if stat.ephemeral_owner == session_id => {
            shared.publish(|s| s.registered = true);
            Ok(())
        }
        _ => register_node(shared, session_id).await,
    }
}

/// Creates the node (and its parents) owned by `session_id`, replacing a node another
/// session owns; publishes `registered`.
async fn register_node(shared: &Shared, session_id: u64) -> Result<(), Error> {
    let data = shared.data.lock().await;
    let client = &shared.client;
    let path = shared.path.as_str();
    let mut last = None;
    for _ in 0..ENSURE_ATTEMPTS_MAX {
        let options = CreateOptions::ephemeral(session_id, false);
        let err = match client.create(path, data.clone(), options).await {
            Ok(_) => {
                shared.publish(|s| s.registered = true);
                return Ok(());
            }
            Err(e) => e,
        };
        match err.code() {
            ErrorCode::NoNode => create_parents(client, path).await?,
            ErrorCode::NodeExists => {
                let read = client.exists(path, ReadOptions::default()).await?;
                match read.stat {
                    // A create whose answer was lost did it after all.
                    Some(stat) if stat.ephemeral_owner == session_id => {
                        shared.publish(|s| s.registered = true);
                        return Ok(());
                    }
                    Some(stat) => match client.delete(path, stat.version).await {
                        Ok(_) => {}
                        Err(e) if is_gone_or_changed(&e) => {}
                        Err(e) => return Err(e),
                    },
                    None => {}
                }
            }
            _ => return Err(err),
        }
        last = Some(err);
    }
    Err(last.unwrap_or_else(|| Error::client(ErrorCode::Internal, "no attempt was made")))
}

fn is_gone_or_changed(e: &Error) -> bool {
    matches!(e.code(), ErrorCode::NoNode | ErrorCode::BadVersion)
}

/// Creates every missing ancestor of `path` as a persistent node (reading first, so
/// that a caller may use a folder it could not have created).
pub(crate) async fn create_parents(client: &Client, path: &str) -> Result<(), Error> {
    client.ensure_path(crate::paths::parent_of(path)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_is_base_service_instance() {
        assert_eq!(
            instance_path("/services", "api", "i-1").unwrap(),
            "/services/api/i-1"
        );
        assert_eq!(instance_path("/s/", "api", "x").unwrap(), "/s/api/x");
        for (service, id) in [("", "x"), ("a/b", "x"), ("api", ""), ("api", "a/b")] {
            let err = instance_path("/services", service, id).unwrap_err();
            assert_eq!(err.code(), ErrorCode::BadArguments);
        }
    }

    #[test]
    fn backoff_stays_within_a_second() {
        assert_eq!(REREGISTER_BACKOFF.delay(1), Duration::from_millis(50));
        assert_eq!(REREGISTER_BACKOFF.delay(30), Duration::from_secs(1));
    }
}
