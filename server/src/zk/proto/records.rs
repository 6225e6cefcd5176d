//! The records of zookeeper.jute a client sends or a server answers: the data
//! records (Id, ACL, Stat), the handshake, the headers, and every request and
//! response body, each in ZooKeeper's field order.

use super::*;

record! {
    /// An ACL identity: scheme ("world", "digest", "ip", "x509", "sasl") and id.
    pub struct Id {
        pub scheme: String,
        pub id: String,
    }
}

record! {
    pub struct Acl {
        /// `perms` bits.
        pub perms: i32,
        pub id: Id,
    }
}

impl Acl {
    /// world:anyone with every permission (`ZooDefs.Ids.OPEN_ACL_UNSAFE`).
    pub fn open_unsafe() -> Self {
        Self {
            perms: perms::ALL,
            id: Id {
                scheme: "world".to_owned(),
                id: "anyone".to_owned(),
            },
        }
    }
}

record! {
    /// A node's metadata as ZooKeeper answers it (jute's order: note `pzxid` last).
    pub struct Stat {
        pub czxid: i64,
        pub mzxid: i64,
        pub ctime_ms: i64,
        pub mtime_ms: i64,
        pub version: i32,
        pub cversion: i32,
        pub aversion: i32,
        /// The owning session if ephemeral, else 0.
        pub ephemeral_owner: i64,
        pub data_length: i32,
        pub num_children: i32,
        pub pzxid: i64,
    }
}

record! {
    /// One identity of a whoAmI answer.
    pub struct ClientInfo {
        pub auth_scheme: String,
        pub user: String,
    }
}

// ---- the handshake ----

/// The first frame of a connection, with no request header.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnectRequest {
    pub protocol_version: i32,
    pub last_zxid_seen: i64,
    pub timeout_ms: i32,
    /// 0 for a new session, else the session to resume.
    pub session_id: i64,
    pub passwd: Bytes,
    /// `None` when the client omitted the byte (clients before ZooKeeper 3.4); the
    /// answer must then omit it too.
    pub read_only: Option<bool>,
}

impl Jute for ConnectRequest {
    const MIN_BYTES: usize = 4 + 8 + 4 + 8 + 4;
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        Ok(Self {
            protocol_version: r.i32()?,
            last_zxid_seen: r.i64()?,
            timeout_ms: r.i32()?,
            session_id: r.i64()?,
            passwd: Bytes::decode(r)?,
            read_only: if r.is_empty() { None } else { Some(r.bool()?) },
        })
    }
    fn encode(&self, w: &mut Writer) {
        w.i32(self.protocol_version);
        w.i64(self.last_zxid_seen);
        w.i32(self.timeout_ms);
        w.i64(self.session_id);
        self.passwd.encode(w);
        if let Some(ro) = self.read_only {
            w.bool(ro);
        }
    }
}

/// The answer to a ConnectRequest, with no reply header. A refused session is
/// answered with timeout 0, session id 0 and 16 zero bytes of password.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnectResponse {
    pub protocol_version: i32,
    /// The negotiated session timeout.
    pub timeout_ms: i32,
    pub session_id: i64,
    pub passwd: Bytes,
    /// Written only when `Some`: set it to `Some(..)` exactly when the request
    /// carried its readOnly byte, as ZooKeeper's ProtocolManager does.
    pub read_only: Option<bool>,
}

impl Jute for ConnectResponse {
    const MIN_BYTES: usize = 4 + 4 + 8 + 4;
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        Ok(Self {
            protocol_version: r.i32()?,
            timeout_ms: r.i32()?,
            session_id: r.i64()?,
            passwd: Bytes::decode(r)?,
            read_only: if r.is_empty() { None } else { Some(r.bool()?) },
        })
    }
    fn encode(&self, w: &mut Writer) {
        w.i32(self.protocol_version);
        w.i32(self.timeout_ms);
        w.i64(self.session_id);
        self.passwd.encode(w);
        if let Some(ro) = self.read_only {
            w.bool(ro);
        }
    }
}

// ---- headers ----

record! {
    /// In front of every request after the handshake.
    pub struct RequestHeader {
        /// The client's request id, echoed in the reply (or a special xid: `PING_XID` ...).
        pub xid: i32,
        /// `OpCode` value.
        pub op: i32,
    }
}

record! {
    /// In front of every answer and notification.
    pub struct ReplyHeader {
        pub xid: i32,
        /// The zxid the server had applied when it answered.
        pub zxid: i64,
        /// `Code` value.
        pub err: i32,
    }
}

record! {
    /// In front of each op of a multi request and each result of its answer; one with
    /// `done` ends the list.
    pub struct MultiHeader {
        /// `OpCode` value (-1, `error`, for an error result and the end).
        pub op: i32,
        pub done: bool,
        /// In an answer: the result's `Code` (0 for a success); -1 in requests.
        pub err: i32,
    }
}

// ---- requests ----

record! {
    /// create, create2 and createContainer.
    pub struct CreateRequest {
        pub path: String,
        /// None: null data, kept apart from empty.
        pub data: Option<Bytes>,
        pub acl: Vec<Acl>,
        /// `CreateMode` value.
        pub flags: i32,
    }
}

record! {
    pub struct CreateTtlRequest {
        pub path: String,
        /// None: null data, kept apart from empty.
        pub data: Option<Bytes>,
        pub acl: Vec<Acl>,
        pub flags: i32,
        pub ttl_ms: i64,
    }
}

record! {
    pub struct DeleteRequest {
        pub path: String,
        /// -1 matches any version.
        pub version: i32,
    }
}

record! {
    /// deleteContainer: ZooKeeper's own container reaper sends it; its one field is a
    /// `buffer` holding the path's UTF-8, the same bytes as a `ustring`.
    pub struct DeleteContainerRequest {
        pub path: String,
    }
}

record! {
    pub struct ExistsRequest {
        pub path: String,
        pub watch: bool,
    }
}

record! {
    pub struct GetDataRequest {
        pub path: String,
        pub watch: bool,
    }
}

record! {
    pub struct SetDataRequest {
        pub path: String,
        /// None: null data, kept apart from empty.
        pub data: Option<Bytes>,
        pub version: i32,
    }
}

record! {
    pub struct GetAclRequest {
        pub path: String,
    }
}

record! {
    pub struct SetAclRequest {
        pub path: String,
        pub acl: Vec<Acl>,
        pub version: i32,
    }
}

record! {
    pub struct GetChildrenRequest {
        pub path: String,
        pub watch: bool,
    }
}

record! {
    pub struct GetChildren2Request {
        pub path: String,
        pub watch: bool,
    }
}

record! {
    /// check, inside a multi only.
    pub struct CheckVersionRequest {
        pub path: String,
        pub version: i32,
    }
}

record! {
    pub struct SyncRequest {
        pub path: String,
    }
}

record! {
    /// Sent after a reconnect: the watches the client holds, to be set again and
    /// fired at once for changes after `relative_zxid`.
    pub struct SetWatches {
        pub relative_zxid: i64,
        pub data_watches: Vec<String>,
        pub exist_watches: Vec<String>,
        pub child_watches: Vec<String>,
    }
}

record! {
    pub struct SetWatches2 {
        pub relative_zxid: i64,
        pub data_watches: Vec<String>,
        pub exist_watches: Vec<String>,
        pub child_watches: Vec<String>,
        pub persistent_watches: Vec<String>,
        pub persistent_recursive_watches: Vec<String>,
    }
}

record! {
    pub struct AddWatchRequest {
        pub path: String,
        /// `AddWatchMode` value.
        pub mode: i32,
    }
}

record! {
    pub struct CheckWatchesRequest {
        pub path: String,
        /// `WatcherType` value.
        pub watcher_type: i32,
    }
}

record! {
    pub struct RemoveWatchesRequest {
        pub path: String,
        /// `WatcherType` value.
        pub watcher_type: i32,
    }
}

record! {
    /// addAuth (xid `AUTH_XID`).
    pub struct AuthPacket {
        /// Always 0 from ZooKeeper's clients.
        pub auth_type: i32,
        pub scheme: String,
        pub auth: Bytes,
    }
}

record! {
    /// A SASL token (opcode sasl); the answer is a `SetSaslResponse`.
    pub struct GetSaslRequest {
        pub token: Bytes,
    }
}

record! {
    pub struct SetSaslResponse {
        pub token: Bytes,
    }
}

record! {
    pub struct GetEphemeralsRequest {
        pub prefix_path: String,
    }
}

record! {
    pub struct GetAllChildrenNumberRequest {
        pub path: String,
    }
}

record! {
    /// Server lists are null when not given (an incremental reconfig leaves
    /// `new_members` null).
    pub struct ReconfigRequest {
        pub joining_servers: Option<String>,
        pub leaving_servers: Option<String>,
        pub new_members: Option<String>,
        /// -1 for any.
        pub cur_config_id: i64,
    }
}

// ---- responses ----

record! {
    pub struct CreateResponse {
        pub path: String,
    }
}

record! {
    /// The answer to create2, createContainer and createTTL.
    pub struct Create2Response {
        pub path: String,
        pub stat: Stat,
    }
}

record! {
    pub struct ExistsResponse {
        pub stat: Stat,
    }
}

record! {
    /// Also getConfig's answer (a getData of /zookeeper/config).
    pub struct GetDataResponse {
        /// None: null data, kept apart from empty.
        pub data: Option<Bytes>,
        pub stat: Stat,
    }
}

record! {
    pub struct SetDataResponse {
        pub stat: Stat,
    }
}

record! {
    pub struct GetAclResponse {
        pub acl: Vec<Acl>,
        pub stat: Stat,
    }
}

record! {
    pub struct SetAclResponse {
        pub stat: Stat,
    }
}

record! {
    pub struct GetChildrenResponse {
        pub children: Vec<String>,
    }
}

record! {
    pub struct GetChildren2Response {
        pub children: Vec<String>,
        pub stat: Stat,
    }
}

record! {
    pub struct SyncResponse {
        pub path: String,
    }
}

record! {
    pub struct GetEphemeralsResponse {
        pub ephemerals: Vec<String>,
    }
}

record! {
    pub struct GetAllChildrenNumberResponse {
        pub total_number: i32,
    }
}

record! {
    pub struct WhoAmIResponse {
        pub client_info: Vec<ClientInfo>,
    }
}

record! {
    /// A multi's failed result (and ZooKeeper's `ErrorResponse` record).
    pub struct ErrorResponse {
        /// `Code` value.
        pub err: i32,
    }
}

record! {
    /// A notification's body, after a ReplyHeader with xid `NOTIFICATION_XID`.
    pub struct WatcherEvent {
        /// `EventType` value.
        pub event_type: i32,
        /// `KeeperState` value.
        pub state: i32,
        pub path: String,
    }
}
