//! [`Client`]: the connections to one Concord server of the endpoint list at a time
//! (`connection.rs`: a pool, so that streams past one connection's limit fit), and
//! the unary calls on them.
//!
//! ```text
//!   Client ──(clone: same Link)──► TreeClient / SessionClient / WatchClient / ClusterClient
//!     │ options.rs builds each request; error.rs turns each Status into an Error
//!     └─ open_session → session.rs (keep-alive task) ; watch → watch.rs (stream, resume)
//! ```
//!
//! Each unary call goes through `call.rs`, which applies the client's deadline and
//! retry policy (by default none: a call is sent once, and the caller decides with
//! [`Error::is_retry_safe`] and [`Error::is_indeterminate`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use concord_proto::v1::{
    cluster_client::ClusterClient, session_client::SessionClient, tree_client::TreeClient,
    CloseSessionRequest, CreateMode, ErrorCode, GetSessionRequest, ListSessionsRequest,
    OpenSessionRequest, ResponseHeader, StatusRequest, SyncRequest,
};

use crate::builder::{ClientBuilder, Settings};
use crate::call::Call;
use crate::connection::{link_to, Servers};
use crate::error::{CallKind, Error};
use crate::op::Op;
use crate::options::{self, ChildrenOptions, CreateOptions, ReadOptions, WriteOptions};
use crate::session::ConnectionState;
use crate::tls::ConnectOptions;
use crate::types::{stat_of, Child, OpResult, ServerStatus, SessionInfo, Stat};
use crate::writer::Writer;
use crate::Link;
use tokio::sync::watch;

/// The endpoint used when none is given.
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:7181";

/// Bound on the pages `children` and `list_sessions` follow, so a faulty server
/// cannot loop them forever.
const PAGES_MAX: usize = 1_000_000;

/// Connections to a Concord server, or to one of an ensemble's servers at a time.
/// Cheap to clone: clones share one pool of connections to that server (one, until
/// its streams near the server's per-connection limit: docs/sdk.md, "Many
/// streams"), made again (to the next server of a list) on the first call after the
/// first broke, and one record of the newest zxid seen.
///
/// Reads never go back in time: every read asks for at least the newest zxid any
/// earlier answer to this client (or its clones) reflected (`min_zxid`), so a client
/// whose calls land on another server of the ensemble never sees older data than it
/// already saw, its own writes included.
#[derive(Debug, Clone)]
pub struct Client {
    /// The shared HTTP/2 connection every call and stream goes through.
    link: Link,
    /// The servers `link` dials, and which one it tries next.
    servers: Servers,
    /// The newest zxid an answer reflected.
    seen: Arc<AtomicU64>,
    /// Deadline, retries and session defaults, from the builder.
    settings: Arc<Settings>,
    /// The session writes carry by default (a session's client), and request ids.
    writer: Writer,
}

/// The answer to a create.
#[derive(Debug, Clone, PartialEq)]
pub struct Created {
    /// The created path (with its sequential suffix, if any).
    pub path: String,
    /// The new node's stat.
    pub stat: Stat,
    /// The zxid of the create.
    pub zxid: u64,
}

/// A node's data and stat, as read.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeData {
    /// The node's data.
    pub data: Vec<u8>,
    /// The node's stat.
    pub stat: Stat,
    /// The zxid the read reflects.
    pub zxid: u64,
}

/// The answer to an exists.
#[derive(Debug, Clone, PartialEq)]
pub struct Exists {
    /// The node's stat; `None` when it does not exist.
    pub stat: Option<Stat>,
    /// The zxid the answer reflects.
    pub zxid: u64,
}

/// The answer to a set (or any write that returns a stat).
#[derive(Debug, Clone, PartialEq)]
pub struct Updated {
    /// The node's stat after the write.
    pub stat: Stat,
    /// The zxid of the write.
    pub zxid: u64,
}

/// Every page (from `children`), or one (from `children_page`), of a node's children.
#[derive(Debug, Clone, PartialEq)]
pub struct Children {
    /// Children sorted by name; `stat` set when asked for.
    pub children: Vec<Child>,
    /// The parent's stat (from the last page read).
    pub stat: Stat,
    /// The zxid the (last) page reflects.
    pub zxid: u64,
    /// Token of the next page; empty on the last page.
    pub next_page_token: String,
}

/// The answer to a multi.
#[derive(Debug, Clone, PartialEq)]
pub struct MultiResult {
    /// One result per op, in order.
    pub results: Vec<OpResult>,
    /// The zxid of the multi's txn.
    pub zxid: u64,
}

/// An opened session as the server granted it (see [`Client::open_session`] for the
/// kept-alive handle).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionGrant {
    /// The session id (never 0).
    pub session_id: u64,
    /// The granted TTL in milliseconds.
    pub ttl_ms: i64,
    /// The zxid of the open.
    pub zxid: u64,
}

impl Client {
    /// A builder for a client with an endpoint list, TLS, a deadline per call, a
    /// retry policy and session defaults.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// Connects to `endpoint` (`http://host:port`; a bare `host:port` gets `http://`).
    /// A comma-separated list names an ensemble's servers, as ZooKeeper's connection
    /// strings do: the client talks to one of them at a time, starting at one drawn
    /// at random (or at the first: [`ClientBuilder::randomize_hosts`]), and moves to
    /// the next when its connection breaks. Fails with
    /// UNAVAILABLE when no server of the list answers. Calls have no deadline and are
    /// sent once: use [`Client::builder`] for more.
    pub async fn connect(endpoint: impl Into<String>) -> Result<Client, Error> {
        Client::connect_with(endpoint, &ConnectOptions::default()).await
    }

    /// As [`Client::connect`], with `options` (TLS: `https://`, which a bare
    /// `host:port` then gets; an `http://` endpoint is refused with BAD_ARGUMENTS).
    pub async fn connect_with(
        endpoint: impl Into<String>,
        options: &ConnectOptions,
    ) -> Result<Client, Error> {
        Client::connect_to(&endpoint.into(), options, true).await
    }

    /// As [`Client::connect`], but connects on the first call instead of now.
    pub fn connect_lazy(endpoint: impl Into<String>) -> Result<Client, Error> {
        Client::connect_lazy_with(endpoint, &ConnectOptions::default())
    }

    /// As [`Client::connect_with`], but connects on the first call instead of now.
    pub fn connect_lazy_with(
        endpoint: impl Into<String>,
        options: &ConnectOptions,
    ) -> Result<Client, Error> {
        Client::lazy_to(&endpoint.into(), options, true)
    }

    /// A client over a link to `list`, connected now.
    pub(crate) async fn connect_to(
        list: &str,
        options: &ConnectOptions,
        randomize: bool,
    ) -> Result<Client, Error> {
        let client = Client::lazy_to(list, options, randomize)?;
        let connected = client.link.connected().await;
        connected.map_err(|e| read_err(tonic::Status::from_error(e)))?;
        Ok(client)
    }

    /// A client over a link to `list` that connects on first use.
    pub(crate) fn lazy_to(
        list: &str,
        options: &ConnectOptions,
        randomize: bool,
    ) -> Result<Client, Error> {
        let (link, servers) = link_to(list, options, randomize)?;
        Ok(Client {
            link,
            servers,
            seen: Arc::default(),
            settings: Arc::default(),
            writer: Writer::default(),
        })
    }

    /// This client with `settings`.
    pub(crate) fn with_settings(self, settings: Arc<Settings>) -> Client {
        Client { settings, ..self }
    }

    /// Deadline, retries and session defaults.
    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    /// This client, writing as session `id` by default (see [`Client::session_id`]).
    pub(crate) fn bound_to(&self, id: u64, state: watch::Receiver<ConnectionState>) -> Client {
        Client {
            writer: self.writer.bound_to(id, state),
            ..self.clone()
        }
    }

    /// The session this client's writes carry when their options name none: set on
    /// a [`Session`](crate::Session)'s client ([`Session::client`](crate::Session::client)),
    /// `None` on a client made by `connect`. An ephemeral create then belongs to
    /// that session, and every write carries it with a fresh request id, so that the
    /// retry policy may retry one whose outcome is unknown (the server applies it at
    /// most once). Once the session has ended (or its handle is dropped), writes other
    /// than ephemeral creates go without it, as from a client with no session.
    pub fn session_id(&self) -> Option<u64> {
        self.writer.session_id()
    }

    /// True on a session's client once its session has ended (or its handle is
    /// gone): what the session held is gone with it, or soon will be.
    pub(crate) fn session_ended(&self) -> bool {
        self.writer.session_ended()
    }

    /// The newest zxid an answer to this client reflected; reads ask for at least it.
    pub fn last_seen_zxid(&self) -> u64 {
        self.seen.load(Ordering::Acquire)
    }

    /// Records the zxid an answer reflected; returns it.
    pub(crate) fn saw(&self, header: &Option<ResponseHeader>) -> u64 {
        self.saw_zxid(zxid(header))
    }

    /// Records a zxid the client has seen (an answer's, or a watch message's).
    pub(crate) fn saw_zxid(&self, z: u64) -> u64 {
        self.seen.fetch_max(z, Ordering::AcqRel);
        z
    }

    /// `read`, asking for at least what this client has seen.
    fn not_older(&self, read: ReadOptions) -> ReadOptions {
        ReadOptions {
            min_zxid: read.min_zxid.max(self.last_seen_zxid()),
            ..read
        }
    }

    /// The underlying connection, for the generated clients of services not wrapped
    /// here: `LockClient::new(client.link().clone())`.
    pub fn link(&self) -> &Link {
        &self.link
    }

    /// The servers the link dials.
    pub(crate) fn servers(&self) -> &Servers {
        &self.servers
    }

    /// Creates a node. Errors: NODE_EXISTS, NO_NODE (parent; with
    /// [`CreateOptions::create_parents`] the missing parents are created instead),
    /// NO_CHILDREN_FOR_EPHEMERALS, SESSION_EXPIRED, BAD_PATH, DATA_TOO_LARGE.
    pub async fn create(
        &self,
        path: &str,
        data: impl Into<Vec<u8>>,
        options: CreateOptions,
    ) -> Result<Created, Error> {
        if options.create_parents {
            return self.create_with_parents(path, data.into(), options).await;
        }
        self.create_once(path, data.into(), options).await
    }

    /// One create, parents or not.
    pub(crate) async fn create_once(
        &self,
        path: &str,
        data: Vec<u8>,
        options: CreateOptions,
    ) -> Result<Created, Error> {
        let ephemeral = matches!(
            options.mode,
            CreateMode::Ephemeral | CreateMode::EphemeralSequential
        );
        let (session_id, request_id) =
            self.writer
                .stamp(options.session_id, options.request_id, ephemeral);
        let options = CreateOptions {
            session_id,
            request_id,
            ..options
        };
        let req = options::create_request(path, data, &options);
        let resp = self
            .unary(
                deduplicated(options.session_id, options.request_id),
                req,
                |ch, r| async move { TreeClient::new(ch).create(r).await },
            )
            .await?;
        Ok(Created {
            path: resp.path,
            stat: stat_of(resp.stat),
            zxid: self.saw(&resp.header),
        })
    }

    /// Reads a node's data and stat. Errors: NO_NODE, BAD_PATH.
    pub async fn get(&self, path: &str, read: ReadOptions) -> Result<NodeData, Error> {
        let req = options::get_request(path, self.not_older(read));
        let resp = self
            .unary(Call::READ, req, |ch, r| async move {
                TreeClient::new(ch).get(r).await
            })
            .await?;
        Ok(NodeData {
            data: resp.data.to_vec(),
            stat: stat_of(resp.stat),
            zxid: self.saw(&resp.header),
        })
    }

    /// Whether the node exists (with its stat). Never fails with NO_NODE.
    pub async fn exists(&self, path: &str, read: ReadOptions) -> Result<Exists, Error> {
        let req = options::exists_request(path, self.not_older(read));
        let resp = self
            .unary(Call::READ, req, |ch, r| async move {
                TreeClient::new(ch).exists(r).await
            })
            .await?;
        let stat = if resp.exists {
            Some(stat_of(resp.stat))
        } else {
            None
        };
        Ok(Exists {
            stat,
            zxid: self.saw(&resp.header),
        })
    }

    /// Replaces a node's data if its version is `version` (-1: any).
    /// Errors: NO_NODE, BAD_VERSION, DATA_TOO_LARGE.
    pub async fn set(
        &self,
        path: &str,
        data: impl Into<Vec<u8>>,
        version: i32,
    ) -> Result<Updated, Error> {
        self.set_with(path, data, version, &WriteOptions::default())
            .await
    }

    /// As [`Client::set`], with a session, retry id or fence.
    pub async fn set_with(
        &self,
        path: &str,
        data: impl Into<Vec<u8>>,
        version: i32,
        write: &WriteOptions,
    ) -> Result<Updated, Error> {
        let write = self.stamped(write, false);
        let req = options::set_request(path, data.into(), version, &write);
        let resp = self
            .unary(
                deduplicated(write.session_id, write.request_id),
                req,
                |ch, r| async move { TreeClient::new(ch).set(r).await },
            )
            .await?;
        Ok(Updated {
            stat: stat_of(resp.stat),
            zxid: self.saw(&resp.header),
        })
    }

    /// Deletes a node if its version is `version` (-1: any); returns the delete's zxid.
    /// Errors: NO_NODE, BAD_VERSION, NOT_EMPTY, BAD_PATH.
    pub async fn delete(&self, path: &str, version: i32) -> Result<u64, Error> {
        self.delete_with(path, version, &WriteOptions::default())
            .await
    }

    /// As [`Client::delete`], with a session, retry id or fence.
    pub async fn delete_with(
        &self,
        path: &str,
        version: i32,
        write: &WriteOptions,
    ) -> Result<u64, Error> {
        let write = self.stamped(write, false);
        let req = options::delete_request(path, version, &write);
        let resp = self
            .unary(
                deduplicated(write.session_id, write.request_id),
                req,
                |ch, r| async move { TreeClient::new(ch).delete(r).await },
            )
            .await?;
        Ok(self.saw(&resp.header))
    }

    /// One page of a node's children: at most `page_size`, and at most the server's
    /// cap (1000 by default) also when `page_size` is 0. Follow `next_page_token`,
    /// or use [`Client::children`], which does.
    pub async fn children_page(
        &self,
        path: &str,
        options: &ChildrenOptions,
    ) -> Result<Children, Error> {
        let options = ChildrenOptions {
            read: self.not_older(options.read),
            ..options.clone()
        };
        let req = options::children_request(path, &options);
        let resp = self
            .unary(Call::READ, req, |ch, r| async move {
                TreeClient::new(ch).children(r).await
            })
            .await?;
        Ok(Children {
            children: resp.children.into_iter().map(Child::from).collect(),
            stat: stat_of(resp.stat),
            zxid: self.saw(&resp.header),
            next_page_token: resp.next_page_token,
        })
    }

    /// Every child (Curator's `getChildren`, kazoo's `get_children`), following the
    /// pages from `options.page_token` (`page_size` is the size of each). Each page
    /// is read at its own zxid; `stat` and `zxid` come from the last page.
    pub async fn children(&self, path: &str, options: &ChildrenOptions) -> Result<Children, Error> {
        let mut options = options.clone();
        let mut all = self.children_page(path, &options).await?;
        let mut pages = 1;
        while !all.next_page_token.is_empty() {
            if pages >= PAGES_MAX || all.next_page_token == options.page_token {
                return Err(Error::client(
                    ErrorCode::Internal,
                    "the server's page tokens do not advance",
                ));
            }
            options.page_token = std::mem::take(&mut all.next_page_token);
            let page = self.children_page(path, &options).await?;
            all.children.extend(page.children);
            all.stat = page.stat;
            all.zxid = page.zxid;
            all.next_page_token = page.next_page_token;
            pages += 1;
        }
        Ok(all)
    }

    /// Applies `ops` atomically (build them with [`crate::op`]); the error names the
    /// first failing op.
    pub async fn multi(&self, ops: Vec<Op>, write: &WriteOptions) -> Result<MultiResult, Error> {
        let ephemeral = ops.iter().any(Op::is_ephemeral_create);
        let write = self.stamped(write, ephemeral);
        let req = options::multi_request(ops, &write);
        let resp = self
            .unary(
                deduplicated(write.session_id, write.request_id),
                req,
                |ch, r| async move { TreeClient::new(ch).multi(r).await },
            )
            .await?;
        let zxid = self.saw(&resp.header);
        let results = resp
            .results
            .into_iter()
            .map(OpResult::of)
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                Error::client(ErrorCode::Internal, "the server sent an empty op result")
            })?;
        Ok(MultiResult { results, zxid })
    }

    /// Waits until this server has applied everything the leader had committed when
    /// the call arrived; returns that zxid.
    pub async fn sync(&self, path: &str) -> Result<u64, Error> {
        let req = SyncRequest {
            path: path.to_string(),
        };
        let resp = self
            .unary(Call::READ, req, |ch, r| async move {
                TreeClient::new(ch).sync(r).await
            })
            .await?;
        Ok(self.saw(&resp.header))
    }

    /// Opens a session without keeping it alive (see [`Client::open_session`] for that).
    /// `ttl_ms` 0 asks for the server's default.
    pub async fn open_session_raw(&self, ttl_ms: i64) -> Result<SessionGrant, Error> {
        let req = OpenSessionRequest { ttl_ms };
        let resp = self
            .unary(Call::write(false), req, |ch, r| async move {
                SessionClient::new(ch).open(r).await
            })
            .await?;
        Ok(SessionGrant {
            session_id: resp.session_id,
            ttl_ms: resp.ttl_ms,
            zxid: self.saw(&resp.header),
        })
    }

    /// Closes a session now, deleting its ephemerals; returns the close's zxid.
    /// Errors: SESSION_EXPIRED.
    pub async fn close_session(&self, session_id: u64) -> Result<u64, Error> {
        let req = CloseSessionRequest { session_id };
        let resp = self
            .unary(Call::write(false), req, |ch, r| async move {
                SessionClient::new(ch).close(r).await
            })
            .await?;
        Ok(self.saw(&resp.header))
    }

    /// Describes one session, its ephemerals included. Errors: SESSION_EXPIRED.
    pub async fn session_info(&self, session_id: u64) -> Result<SessionInfo, Error> {
        let req = GetSessionRequest {
            session_id,
            ..Default::default()
        };
        let resp = self
            .unary(Call::READ, req, |ch, r| async move {
                SessionClient::new(ch).get(r).await
            })
            .await?;
        self.saw(&resp.header);
        resp.session
            .map(SessionInfo::from)
            .ok_or_else(|| Error::client(ErrorCode::Internal, "the server sent no session"))
    }

    /// Every live session, sorted by id (without their ephemerals), following page
    /// tokens; each page is read at its own zxid.
    pub async fn list_sessions(&self) -> Result<Vec<SessionInfo>, Error> {
        let (mut all, mut token) = self.list_sessions_page(0, "").await?;
        let mut pages = 1;
        while !token.is_empty() {
            let (page, next) = self.list_sessions_page(0, &token).await?;
            if pages >= PAGES_MAX || next == token {
                return Err(Error::client(
                    ErrorCode::Internal,
                    "the server's page tokens do not advance",
                ));
            }
            all.extend(page);
            token = next;
            pages += 1;
        }
        Ok(all)
    }

    /// One page of the live sessions, sorted by id: at most `page_size` (0: the
    /// server's cap, 1000 by default), after `page_token` (empty: from the start).
    /// Returns the page and the next page's token (empty on the last page).
    pub async fn list_sessions_page(
        &self,
        page_size: u32,
        page_token: &str,
    ) -> Result<(Vec<SessionInfo>, String), Error> {
        let req = ListSessionsRequest {
            min_zxid: self.last_seen_zxid(),
            page_size,
            page_token: page_token.to_owned(),
        };
        let resp = self
            .unary(Call::READ, req, |ch, r| async move {
                SessionClient::new(ch).list(r).await
            })
            .await?;
        self.saw(&resp.header);
        let sessions = resp.sessions.into_iter().map(SessionInfo::from).collect();
        Ok((sessions, resp.next_page_token))
    }

    /// Describes the server this client talks to.
    pub async fn status(&self) -> Result<ServerStatus, Error> {
        let resp = self
            .unary(Call::READ, StatusRequest {}, |ch, r| async move {
                ClusterClient::new(ch).status(r).await
            })
            .await?;
        self.saw(&resp.header);
        Ok(ServerStatus::from(resp))
    }
}

impl Client {
    /// `write` with the session and request id it goes with ([`Writer::stamp`]).
    fn stamped(&self, write: &WriteOptions, ephemeral: bool) -> WriteOptions {
        let (session_id, request_id) =
            self.writer
                .stamp(write.session_id, write.request_id, ephemeral);
        WriteOptions {
            session_id,
            request_id,
            fence: write.fence.clone(),
        }
    }
}

/// The call kind of a write: deduplicated by the server when it carries a session
/// and a request id, so a retry of it is safe whatever happened to the first.
fn deduplicated(session_id: u64, request_id: u64) -> Call {
    Call::write(session_id != 0 && request_id != 0)
}

/// The zxid a response reflects (0 if the server sent no header).
pub(crate) fn zxid(header: &Option<ResponseHeader>) -> u64 {
    header.as_ref().map_or(0, |h| h.zxid)
}

pub(crate) fn read_err(status: tonic::Status) -> Error {
    Error::from_status(&status, CallKind::Read)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connect_to_nothing_is_unavailable_and_retry_safe() {
        // Port 1 on loopback: nothing listens there.
        let err = Client::connect("http://127.0.0.1:1")
            .await
            .expect_err("nothing listens");
        assert_eq!(err.code(), ErrorCode::Unavailable);
        assert!(err.is_retry_safe(), "{err:?}");
    }

    #[tokio::test]
    async fn lazy_write_to_nothing_is_not_sent_so_not_indeterminate() {
        let client = Client::connect_lazy("127.0.0.1:1").expect("valid endpoint");
        let err = client
            .create("/a", "x", CreateOptions::default())
            .await
            .expect_err("nothing listens");
        assert_eq!(err.code(), ErrorCode::Unavailable, "{err:?}");
        assert!(!err.is_indeterminate(), "{err:?}");
        assert!(err.is_retry_safe(), "{err:?}");
    }
}
