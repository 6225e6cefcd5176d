//! [`IdGenerator`]: a naming service's sequential ids, from sequential creates under
//! one folder. The server numbers them from the folder's counter, in zxid order, so
//! ids are unique across every client and grow: an id taken after another was
//! answered is larger.
//!
//! ```text
//!  next_id ─▶ create PATH/id- (sequential) ─▶ PATH/id-0000000042 ─▶ 42
//!                                               └ cleanup: deleted at once (the
//!                                                 folder's counter keeps growing)
//! ```
//!
//! It keeps no state of its own and never reads the folder: the counter is the
//! server's. Ids may skip numbers (a delete moves the counter too, and so do other
//! creates under the folder); they never repeat, also across server restarts and
//! leader changes.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::client::{Client, Created};
use crate::error::Error;
use crate::options::{CreateOptions, ANY_VERSION};
use crate::proto::{CreateMode, ErrorCode};
use crate::registration::create_parents;
use crate::session::Session;

/// The node name before the sequence number, unless the options say otherwise.
pub const ID_PREFIX_DEFAULT: &str = "id-";

/// How ids are taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdOptions {
    /// Delete each node right after it is created (true by default): the ids keep
    /// growing, the folder stays empty. A delete that fails leaves its node behind;
    /// the id is good all the same.
    pub cleanup: bool,
    /// The node name before the sequence number ([`ID_PREFIX_DEFAULT`]).
    pub prefix: String,
}

impl Default for IdOptions {
    fn default() -> Self {
        IdOptions {
            cleanup: true,
            prefix: ID_PREFIX_DEFAULT.to_owned(),
        }
    }
}

/// Takes sequential ids under a folder. Made by [`IdGenerator::new`] (persistent
/// nodes, no session) or [`IdGenerator::for_session`] (ephemeral nodes owned by a
/// session, and creates the client's retry policy may safely retry).
#[derive(Debug)]
pub struct IdGenerator {
    client: Client,
    /// `PATH/PREFIX`: what every created path starts with.
    node_prefix: String,
    cleanup: bool,
    /// The owner of the nodes and the scope of the request ids; 0: none.
    session_id: u64,
    /// The next request id (with a session), from a random start so that two
    /// generators on one session do not collide.
    request_ids: AtomicU64,
}

impl IdGenerator {
    /// Ids from persistent-sequential nodes under `path` (created, with its parents,
    /// on first use). Through a session's client (`Session::client`) each create
    /// carries the session and a request id, so the retry policy retries one whose
    /// outcome is unknown safely; through a client with no session such a create is
    /// not retried: the error is returned, and the id it may have taken is skipped.
    pub fn new(client: &Client, path: &str, options: IdOptions) -> IdGenerator {
        IdGenerator::build(client.clone(), path, options, 0)
    }

    /// Ids from ephemeral-sequential nodes under `path` owned by `session` (without
    /// cleanup they last as long as the session). Each create carries the session and
    /// a request id, so the client's retry policy may retry one whose outcome is
    /// unknown: the server answers a retry with the first outcome, and no id is taken
    /// twice. Errors SESSION_EXPIRED once the session is gone (the generator does not
    /// open another).
    pub fn for_session(session: &Session, path: &str, options: IdOptions) -> IdGenerator {
        IdGenerator::build(session.client().clone(), path, options, session.id())
    }

    fn build(client: Client, path: &str, options: IdOptions, session_id: u64) -> IdGenerator {
        use std::hash::{BuildHasher, RandomState};
        let start = RandomState::new().hash_one(session_id);
        IdGenerator {
            client,
            node_prefix: format!("{}/{}", path.trim_end_matches('/'), options.prefix),
            cleanup: options.cleanup,
            session_id,
            request_ids: AtomicU64::new(start),
        }
    }

    /// The next id: the sequence number the server gave the created node. Errors:
    /// those of the create (BAD_PATH, PERMISSION_DENIED, SESSION_EXPIRED, ...).
    pub async fn next_id(&self) -> Result<u64, Error> {
        let created = match self.create().await {
            Err(e) if e.code() == ErrorCode::NoNode => {
                create_parents(&self.client, &self.node_prefix).await?;
                self.create().await?
            }
            other => other?,
        };
        let id = sequence_of(&created.path, &self.node_prefix)?;
        if self.cleanup {
            // The id stands whether or not its node goes (see `IdOptions::cleanup`).
            let _ = self.client.delete(&created.path, ANY_VERSION).await;
        }
        Ok(id)
    }

    async fn create(&self) -> Result<Created, Error> {
        let options = if self.session_id == 0 {
            CreateOptions::mode(CreateMode::PersistentSequential)
        } else {
            CreateOptions {
                request_id: self.request_id(),
                ..CreateOptions::ephemeral(self.session_id, true)
            }
        };
        self.client
            .create(&self.node_prefix, Vec::new(), options)
            .await
    }

    /// A request id never used by this generator before, never 0.
    fn request_id(&self) -> u64 {
        loop {
            let id = self.request_ids.fetch_add(1, Ordering::Relaxed);
            if id != 0 {
                return id;
            }
        }
    }
}

/// The sequence number at the end of a created path.
fn sequence_of(path: &str, node_prefix: &str) -> Result<u64, Error> {
    path.strip_prefix(node_prefix)
        .filter(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|digits| digits.parse().ok())
        .ok_or_else(|| {
            let message = format!("the server created {path:?}, not {node_prefix}NNNNNNNNNN");
            Error::client(ErrorCode::Internal, message)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_the_sequence_suffix() {
        assert_eq!(sequence_of("/ids/id-0000000042", "/ids/id-").unwrap(), 42);
        assert_eq!(sequence_of("/ids/id-0000000000", "/ids/id-").unwrap(), 0);
        // Past ten digits the suffix grows.
        assert_eq!(
            sequence_of("/ids/id-12345678901", "/ids/id-").unwrap(),
            12_345_678_901
        );
        for bad in ["/ids/id-", "/ids/x-0000000001", "/ids/id-00000000x1"] {
            let err = sequence_of(bad, "/ids/id-").unwrap_err();
            assert_eq!(err.code(), ErrorCode::Internal);
        }
    }

    #[tokio::test]
    async fn request_ids_are_distinct_and_never_zero() {
        let client = Client::connect_lazy("127.0.0.1:1").unwrap();
        let ids = IdGenerator::build(client, "/ids/", IdOptions::default(), 7);
        assert_eq!(ids.node_prefix, "/ids/id-");
        ids.request_ids.store(u64::MAX, Ordering::Relaxed);
        assert_eq!(ids.request_id(), u64::MAX);
        assert_eq!(ids.request_id(), 1);
        assert_eq!(ids.request_id(), 2);
    }
}
