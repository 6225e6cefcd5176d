//! ZooKeeper 3.9's client protocol as typed values: opcodes, error codes, watch event
//! types and states, create modes, and every record a client sends or a server
//! answers (zookeeper.jute, `org.apache.zookeeper.proto` and `.data`), read and written
//! with jute.rs. Pure: no IO, no policy.
//!
//! ```text
//!   connect:  frame ─▶ ConnectRequest            ConnectResponse ─▶ frame
//!   requests: frame ─▶ decode_request ─▶ (RequestHeader, Request)
//!   answers:  reply_frame(ReplyHeader, record)   notifications: xid -1 + WatcherEvent
//! ```
//!
//! Records keep ZooKeeper's field order exactly (it is the wire format) and its field
//! values raw (flags, modes and watcher types stay `i32`): deciding what a value means,
//! and answering BADARGUMENTS for one ZooKeeper refuses, is the caller's, with the
//! typed enums here (`CreateMode::try_from(flags)`).
//!
//! What it must not do: decide anything about the tree, sessions or permissions.

use bytes::Bytes;
use thiserror::Error;

use super::jute::{Jute, JuteError, Reader, Writer};

/// xid of a notification (a watch event) the server sends unasked.
pub const NOTIFICATION_XID: i32 = -1;
/// xid of a ping and of its answer.
pub const PING_XID: i32 = -2;
/// xid of an auth packet (addAuth) and of its answer.
pub const AUTH_XID: i32 = -4;
/// xid of the setWatches a client sends after reconnecting, and of its answer.
pub const SET_WATCHES_XID: i32 = -8;

/// ACL permission bits (`ZooDefs.Perms`).
pub mod perms {
    pub const READ: i32 = 1;
    pub const WRITE: i32 = 1 << 1;
    pub const CREATE: i32 = 1 << 2;
    pub const DELETE: i32 = 1 << 3;
    pub const ADMIN: i32 = 1 << 4;
    pub const ALL: i32 = READ | WRITE | CREATE | DELETE | ADMIN;
}

/// An `i32` on the wire with named values: `TryFrom<i32>` (the unknown value back as
/// the error), `as i32`, `name()` as ZooKeeper spells it.
macro_rules! wire_enum {
    ($(#[$m:meta])* pub enum $name:ident {
        $($(#[$vm:meta])* $v:ident = $n:literal => $s:literal,)*
    }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(i32)]
        pub enum $name {
            $($(#[$vm])* $v = $n,)*
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$v,)*];

            /// The name ZooKeeper gives it.
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$v => $s,)*
                }
            }
        }

        impl TryFrom<i32> for $name {
            type Error = i32;
            fn try_from(v: i32) -> Result<Self, i32> {
                match v {
                    $($n => Ok($name::$v),)*
                    other => Err(other),
                }
            }
        }

        impl From<$name> for i32 {
            fn from(v: $name) -> i32 {
                v as i32
            }
        }
    };
}

wire_enum! {
    /// A request's type (`ZooDefs.OpCode`), in the request and multi headers.
    pub enum OpCode {
        Notification = 0 => "notification",
        Create = 1 => "create",
        Delete = 2 => "delete",
        Exists = 3 => "exists",
        GetData = 4 => "getData",
        SetData = 5 => "setData",
        GetAcl = 6 => "getACL",
        SetAcl = 7 => "setACL",
        GetChildren = 8 => "getChildren",
        Sync = 9 => "sync",
        Ping = 11 => "ping",
        GetChildren2 = 12 => "getChildren2",
        Check = 13 => "check",
        Multi = 14 => "multi",
        Create2 = 15 => "create2",
        Reconfig = 16 => "reconfig",
        CheckWatches = 17 => "checkWatches",
        RemoveWatches = 18 => "removeWatches",
        CreateContainer = 19 => "createContainer",
        DeleteContainer = 20 => "deleteContainer",
        CreateTtl = 21 => "createTTL",
        MultiRead = 22 => "multiRead",
        Auth = 100 => "auth",
        SetWatches = 101 => "setWatches",
        Sasl = 102 => "sasl",
        GetEphemerals = 103 => "getEphemerals",
        GetAllChildrenNumber = 104 => "getAllChildrenNumber",
        SetWatches2 = 105 => "setWatches2",
        AddWatch = 106 => "addWatch",
        WhoAmI = 107 => "whoAmI",
        CreateSession = -10 => "createSession",
        CloseSession = -11 => "closeSession",
        Error = -1 => "error",
    }
}

wire_enum! {
    /// The `err` of a reply header or a multi result (`KeeperException.Code`).
    pub enum Code {
        Ok = 0 => "OK",
        SystemError = -1 => "SYSTEMERROR",
        RuntimeInconsistency = -2 => "RUNTIMEINCONSISTENCY",
        DataInconsistency = -3 => "DATAINCONSISTENCY",
        ConnectionLoss = -4 => "CONNECTIONLOSS",
        MarshallingError = -5 => "MARSHALLINGERROR",
        Unimplemented = -6 => "UNIMPLEMENTED",
        OperationTimeout = -7 => "OPERATIONTIMEOUT",
        BadArguments = -8 => "BADARGUMENTS",
        UnknownSession = -12 => "UNKNOWNSESSION",
        NewConfigNoQuorum = -13 => "NEWCONFIGNOQUORUM",
        ReconfigInProgress = -14 => "RECONFIGINPROGRESS",
        ApiError = -100 => "APIERROR",
        NoNode = -101 => "NONODE",
        NoAuth = -102 => "NOAUTH",
        BadVersion = -103 => "BADVERSION",
        NoChildrenForEphemerals = -108 => "NOCHILDRENFOREPHEMERALS",
        NodeExists = -110 => "NODEEXISTS",
        NotEmpty = -111 => "NOTEMPTY",
        SessionExpired = -112 => "SESSIONEXPIRED",
        InvalidCallback = -113 => "INVALIDCALLBACK",
        InvalidAcl = -114 => "INVALIDACL",
        AuthFailed = -115 => "AUTHFAILED",
        SessionMoved = -118 => "SESSIONMOVED",
        NotReadOnly = -119 => "NOTREADONLY",
        EphemeralOnLocalSession = -120 => "EPHEMERALONLOCALSESSION",
        NoWatcher = -121 => "NOWATCHER",
        RequestTimeout = -122 => "REQUESTTIMEOUT",
        ReconfigDisabled = -123 => "RECONFIGDISABLED",
        SessionClosedRequireSaslAuth = -124 => "SESSIONCLOSEDREQUIRESASLAUTH",
        QuotaExceeded = -125 => "QUOTAEXCEEDED",
        ThrottledOp = -127 => "THROTTLEDOP",
    }
}

wire_enum! {
    /// A watch event's type (`Watcher.Event.EventType`).
    pub enum EventType {
        None = -1 => "None",
        NodeCreated = 1 => "NodeCreated",
        NodeDeleted = 2 => "NodeDeleted",
        NodeDataChanged = 3 => "NodeDataChanged",
        NodeChildrenChanged = 4 => "NodeChildrenChanged",
        DataWatchRemoved = 5 => "DataWatchRemoved",
        ChildWatchRemoved = 6 => "ChildWatchRemoved",
        PersistentWatchRemoved = 7 => "PersistentWatchRemoved",
    }
}

wire_enum! {
    /// A watch event's session state (`Watcher.Event.KeeperState`). Node events carry
    /// SyncConnected.
    pub enum KeeperState {
        Unknown = -1 => "Unknown",
        Disconnected = 0 => "Disconnected",
        NoSyncConnected = 1 => "NoSyncConnected",
        SyncConnected = 3 => "SyncConnected",
        AuthFailed = 4 => "AuthFailed",
        ConnectedReadOnly = 5 => "ConnectedReadOnly",
        SaslAuthenticated = 6 => "SaslAuthenticated",
        Expired = -112 => "Expired",
        Closed = 7 => "Closed",
    }
}

wire_enum! {
    /// A create request's `flags` (`CreateMode.fromFlag`); any other value is
    /// BADARGUMENTS in ZooKeeper.
    pub enum CreateMode {
        Persistent = 0 => "PERSISTENT",
        Ephemeral = 1 => "EPHEMERAL",
        PersistentSequential = 2 => "PERSISTENT_SEQUENTIAL",
        EphemeralSequential = 3 => "EPHEMERAL_SEQUENTIAL",
        Container = 4 => "CONTAINER",
        PersistentWithTtl = 5 => "PERSISTENT_WITH_TTL",
        PersistentSequentialWithTtl = 6 => "PERSISTENT_SEQUENTIAL_WITH_TTL",
    }
}

impl CreateMode {
    pub fn is_ephemeral(self) -> bool {
        matches!(self, Self::Ephemeral | Self::EphemeralSequential)
    }
    pub fn is_sequential(self) -> bool {
        matches!(
            self,
            Self::PersistentSequential
                | Self::EphemeralSequential
                | Self::PersistentSequentialWithTtl
        )
    }
    pub fn is_container(self) -> bool {
        self == Self::Container
    }
    pub fn is_ttl(self) -> bool {
        matches!(
            self,
            Self::PersistentWithTtl | Self::PersistentSequentialWithTtl
        )
    }
}

wire_enum! {
    /// addWatch's `mode` (`ZooDefs.AddWatchModes`).
    pub enum AddWatchMode {
        Persistent = 0 => "PERSISTENT",
        PersistentRecursive = 1 => "PERSISTENT_RECURSIVE",
    }
}

wire_enum! {
    /// checkWatches' and removeWatches' `type` (`Watcher.WatcherType`).
    pub enum WatcherType {
        Children = 1 => "Children",
        Data = 2 => "Data",
        Any = 3 => "Any",
        Persistent = 4 => "Persistent",
        PersistentRecursive = 5 => "PersistentRecursive",
    }
}

/// A jute record: a struct whose fields are read and written in declaration order,
/// which is the order zookeeper.jute gives them.
macro_rules! record {
    ($(#[$m:meta])* pub struct $name:ident {
        $($(#[$fm:meta])* pub $f:ident : $t:ty,)*
    }) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct $name {
            $($(#[$fm])* pub $f: $t,)*
        }

        impl Jute for $name {
            const MIN_BYTES: usize = 0 $(+ <$t as Jute>::MIN_BYTES)*;
            fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
                Ok(Self {
                    $($f: <$t as Jute>::decode(r)?,)*
                })
            }
            fn encode(&self, w: &mut Writer) {
                $(self.$f.encode(w);)*
            }
        }
    };
}

/// No body (ping, closeSession, whoAmI requests; delete's and others' answers).
impl Jute for () {
    const MIN_BYTES: usize = 0;
    fn decode(_: &mut Reader<'_>) -> Result<Self, JuteError> {
        Ok(())
    }
    fn encode(&self, _: &mut Writer) {}
}

// ---- org.apache.zookeeper.data ----

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
        pub data: Bytes,
        pub acl: Vec<Acl>,
        /// `CreateMode` value.
        pub flags: i32,
    }
}

record! {
    pub struct CreateTtlRequest {
        pub path: String,
        pub data: Bytes,
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
        pub data: Bytes,
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
        pub data: Bytes,
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

// ---- multi ----

/// Which ops a multi may hold: multi takes writes and check, multiRead takes reads.
/// ZooKeeper refuses to mix them ("Mixing different kind of ops").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MultiKind {
    Write,
    Read,
}

/// One op of a multi. The create opcodes are kept apart: create is answered with a
/// path, the others with a path and a stat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiOp {
    Create(CreateRequest),
    Create2(CreateRequest),
    CreateContainer(CreateRequest),
    CreateTtl(CreateTtlRequest),
    Delete(DeleteRequest),
    SetData(SetDataRequest),
    Check(CheckVersionRequest),
    GetData(GetDataRequest),
    GetChildren(GetChildrenRequest),
}

impl MultiOp {
    pub fn op_code(&self) -> OpCode {
        match self {
            Self::Create(_) => OpCode::Create,
            Self::Create2(_) => OpCode::Create2,
            Self::CreateContainer(_) => OpCode::CreateContainer,
            Self::CreateTtl(_) => OpCode::CreateTtl,
            Self::Delete(_) => OpCode::Delete,
            Self::SetData(_) => OpCode::SetData,
            Self::Check(_) => OpCode::Check,
            Self::GetData(_) => OpCode::GetData,
            Self::GetChildren(_) => OpCode::GetChildren,
        }
    }

    /// The op after a header of type `op`, if a multi of `kind` may hold it.
    fn decode(op: i32, kind: MultiKind, r: &mut Reader<'_>) -> Result<Self, JuteError> {
        let refused = JuteError::BadValue {
            what: "multi op type",
            value: op,
        };
        let Ok(code) = OpCode::try_from(op) else {
            return Err(refused);
        };
        Ok(match (kind, code) {
            (MultiKind::Write, OpCode::Create) => Self::Create(Jute::decode(r)?),
            (MultiKind::Write, OpCode::Create2) => Self::Create2(Jute::decode(r)?),
            (MultiKind::Write, OpCode::CreateContainer) => Self::CreateContainer(Jute::decode(r)?),
            (MultiKind::Write, OpCode::CreateTtl) => Self::CreateTtl(Jute::decode(r)?),
            (MultiKind::Write, OpCode::Delete) => Self::Delete(Jute::decode(r)?),
            (MultiKind::Write, OpCode::SetData) => Self::SetData(Jute::decode(r)?),
            (MultiKind::Write, OpCode::Check) => Self::Check(Jute::decode(r)?),
            (MultiKind::Read, OpCode::GetData) => Self::GetData(Jute::decode(r)?),
            (MultiKind::Read, OpCode::GetChildren) => Self::GetChildren(Jute::decode(r)?),
            _ => return Err(refused),
        })
    }

    fn encode_body(&self, w: &mut Writer) {
        match self {
            Self::Create(b) | Self::Create2(b) | Self::CreateContainer(b) => b.encode(w),
            Self::CreateTtl(b) => b.encode(w),
            Self::Delete(b) => b.encode(w),
            Self::SetData(b) => b.encode(w),
            Self::Check(b) => b.encode(w),
            Self::GetData(b) => b.encode(w),
            Self::GetChildren(b) => b.encode(w),
        }
    }
}

/// The header that ends a multi request or answer.
const MULTI_END: MultiHeader = MultiHeader {
    op: -1,
    done: true,
    err: -1,
};

/// A multi or multiRead request (`MultiOperationRecord`): (MultiHeader, op) pairs up
/// to a header whose `done` is true.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MultiRequest {
    pub ops: Vec<MultiOp>,
}

impl MultiRequest {
    /// Reads ops of `kind` up to the end header; more than `ops_max` ops is an error
    /// as soon as the one past the bound begins. An empty multi is allowed, as in
    /// ZooKeeper.
    pub fn decode(r: &mut Reader<'_>, kind: MultiKind, ops_max: usize) -> Result<Self, JuteError> {
        let mut ops = Vec::new();
        loop {
            // Each turn reads at least a 9-byte header, so the loop ends with the frame.
            let header = MultiHeader::decode(r)?;
            if header.done {
                return Ok(Self { ops });
            }
            if ops.len() >= ops_max {
                return Err(JuteError::TooMany {
                    what: "ops in one multi",
                    max: ops_max,
                });
            }
            ops.push(MultiOp::decode(header.op, kind, r)?);
        }
    }

    pub fn encode(&self, w: &mut Writer) {
        for op in &self.ops {
            MultiHeader {
                op: op.op_code().into(),
                done: false,
                err: -1,
            }
            .encode(w);
            op.encode_body(w);
        }
        MULTI_END.encode(w);
    }
}

/// One result of a multi's answer (`OpResult`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiResult {
    /// For a create op.
    Create {
        path: String,
    },
    /// For create2, createContainer and createTTL ops (ZooKeeper answers all three
    /// with opcode create2).
    Create2 {
        path: String,
        stat: Stat,
    },
    Delete,
    SetData {
        stat: Stat,
    },
    Check,
    GetData {
        data: Bytes,
        stat: Stat,
    },
    GetChildren {
        children: Vec<String>,
    },
    /// A failed op, or in a multi that failed every op: OK (0) for those before the
    /// failure, the failure's code, RUNTIMEINCONSISTENCY for those after (ZooKeeper's
    /// rule, the caller's to apply).
    Error {
        err: i32,
    },
}

impl MultiResult {
    fn op_code(&self) -> OpCode {
        match self {
            Self::Create { .. } => OpCode::Create,
            Self::Create2 { .. } => OpCode::Create2,
            Self::Delete => OpCode::Delete,
            Self::SetData { .. } => OpCode::SetData,
            Self::Check => OpCode::Check,
            Self::GetData { .. } => OpCode::GetData,
            Self::GetChildren { .. } => OpCode::GetChildren,
            Self::Error { .. } => OpCode::Error,
        }
    }

    fn decode(header: &MultiHeader, r: &mut Reader<'_>) -> Result<Self, JuteError> {
        let refused = JuteError::BadValue {
            what: "multi result type",
            value: header.op,
        };
        let Ok(code) = OpCode::try_from(header.op) else {
            return Err(refused);
        };
        Ok(match code {
            OpCode::Create => Self::Create {
                path: String::decode(r)?,
            },
            OpCode::Create2 => {
                let b = Create2Response::decode(r)?;
                Self::Create2 {
                    path: b.path,
                    stat: b.stat,
                }
            }
            OpCode::Delete => Self::Delete,
            OpCode::SetData => Self::SetData {
                stat: Stat::decode(r)?,
            },
            OpCode::Check => Self::Check,
            OpCode::GetData => {
                let b = GetDataResponse::decode(r)?;
                Self::GetData {
                    data: b.data,
                    stat: b.stat,
                }
            }
            OpCode::GetChildren => Self::GetChildren {
                children: Vec::decode(r)?,
            },
            OpCode::Error => Self::Error { err: r.i32()? },
            _ => return Err(refused),
        })
    }

    fn encode(&self, w: &mut Writer) {
        let err = match self {
            Self::Error { err } => *err,
            _ => 0,
        };
        MultiHeader {
            op: self.op_code().into(),
            done: false,
            err,
        }
        .encode(w);
        match self {
            Self::Create { path } => path.encode(w),
            Self::Create2 { path, stat } => {
                path.encode(w);
                stat.encode(w);
            }
            Self::Delete | Self::Check => {}
            Self::SetData { stat } => stat.encode(w),
            Self::GetData { data, stat } => {
                data.encode(w);
                stat.encode(w);
            }
            Self::GetChildren { children } => w.strings(children),
            Self::Error { err } => w.i32(*err),
        }
    }
}

/// The answer to multi and multiRead (`MultiResponse`): one result per op, then the
/// end header {-1, true, -1}.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MultiResponse {
    pub results: Vec<MultiResult>,
}

impl Jute for MultiResponse {
    const MIN_BYTES: usize = 9;
    fn decode(r: &mut Reader<'_>) -> Result<Self, JuteError> {
        let mut results = Vec::new();
        loop {
            let header = MultiHeader::decode(r)?;
            if header.done {
                return Ok(Self { results });
            }
            results.push(MultiResult::decode(&header, r)?);
        }
    }
    fn encode(&self, w: &mut Writer) {
        for result in &self.results {
            result.encode(w);
        }
        MULTI_END.encode(w);
    }
}

// ---- requests as a whole ----

/// What follows a RequestHeader, by opcode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Ping,
    CloseSession,
    WhoAmI,
    Create(CreateRequest),
    Create2(CreateRequest),
    CreateContainer(CreateRequest),
    CreateTtl(CreateTtlRequest),
    Delete(DeleteRequest),
    DeleteContainer(DeleteContainerRequest),
    Exists(ExistsRequest),
    GetData(GetDataRequest),
    SetData(SetDataRequest),
    GetAcl(GetAclRequest),
    SetAcl(SetAclRequest),
    GetChildren(GetChildrenRequest),
    GetChildren2(GetChildren2Request),
    Sync(SyncRequest),
    Multi(MultiRequest),
    MultiRead(MultiRequest),
    Reconfig(ReconfigRequest),
    CheckWatches(CheckWatchesRequest),
    RemoveWatches(RemoveWatchesRequest),
    Auth(AuthPacket),
    SetWatches(SetWatches),
    SetWatches2(SetWatches2),
    Sasl(GetSaslRequest),
    GetEphemerals(GetEphemeralsRequest),
    GetAllChildrenNumber(GetAllChildrenNumberRequest),
    AddWatch(AddWatchRequest),
}

/// A request the server cannot take. Both are answered, with the request's xid, and
/// the connection goes on (ZooKeeper does the same).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RequestError {
    /// An opcode no client may send (unknown, notification, a check outside a multi,
    /// error, createSession): answer UNIMPLEMENTED, as ZooKeeper's
    /// UnimplementedRequestProcessor does.
    #[error("opcode {op} is not a request a client may send")]
    Unimplemented { op: i32 },
    /// A known opcode whose body does not read as its record: ZooKeeper answers
    /// MARSHALLINGERROR.
    #[error("{} request: {source}", op.name())]
    Malformed {
        op: OpCode,
        #[source]
        source: JuteError,
    },
}

impl RequestError {
    /// The code ZooKeeper answers it with.
    pub fn code(&self) -> Code {
        match self {
            Self::Unimplemented { .. } => Code::Unimplemented,
            Self::Malformed { .. } => Code::MarshallingError,
        }
    }
}

impl Request {
    /// Reads the body of a request of opcode `op`, which must fill `body` exactly.
    /// A multi of more than `multi_ops_max` ops is malformed.
    pub fn decode(
        op: OpCode,
        body: &mut Reader<'_>,
        multi_ops_max: usize,
    ) -> Result<Self, RequestError> {
        let malformed = |source| RequestError::Malformed { op, source };
        let request = Self::decode_body(op, body, multi_ops_max).map_err(malformed)?;
        if let Some(request) = request {
            body.finish(op.name()).map_err(malformed)?;
            Ok(request)
        } else {
            Err(RequestError::Unimplemented { op: op.into() })
        }
    }

    fn decode_body(
        op: OpCode,
        r: &mut Reader<'_>,
        ops_max: usize,
    ) -> Result<Option<Self>, JuteError> {
        Ok(Some(match op {
            OpCode::Ping => Self::Ping,
            OpCode::CloseSession => Self::CloseSession,
            OpCode::WhoAmI => Self::WhoAmI,
            OpCode::Create => Self::Create(Jute::decode(r)?),
            OpCode::Create2 => Self::Create2(Jute::decode(r)?),
            OpCode::CreateContainer => Self::CreateContainer(Jute::decode(r)?),
            OpCode::CreateTtl => Self::CreateTtl(Jute::decode(r)?),
            OpCode::Delete => Self::Delete(Jute::decode(r)?),
            OpCode::DeleteContainer => Self::DeleteContainer(Jute::decode(r)?),
            OpCode::Exists => Self::Exists(Jute::decode(r)?),
            OpCode::GetData => Self::GetData(Jute::decode(r)?),
            OpCode::SetData => Self::SetData(Jute::decode(r)?),
            OpCode::GetAcl => Self::GetAcl(Jute::decode(r)?),
            OpCode::SetAcl => Self::SetAcl(Jute::decode(r)?),
            OpCode::GetChildren => Self::GetChildren(Jute::decode(r)?),
            OpCode::GetChildren2 => Self::GetChildren2(Jute::decode(r)?),
            OpCode::Sync => Self::Sync(Jute::decode(r)?),
            OpCode::Multi => Self::Multi(MultiRequest::decode(r, MultiKind::Write, ops_max)?),
            OpCode::MultiRead => {
                Self::MultiRead(MultiRequest::decode(r, MultiKind::Read, ops_max)?)
            }
            OpCode::Reconfig => Self::Reconfig(Jute::decode(r)?),
            OpCode::CheckWatches => Self::CheckWatches(Jute::decode(r)?),
            OpCode::RemoveWatches => Self::RemoveWatches(Jute::decode(r)?),
            OpCode::Auth => Self::Auth(Jute::decode(r)?),
            OpCode::SetWatches => Self::SetWatches(Jute::decode(r)?),
            OpCode::SetWatches2 => Self::SetWatches2(Jute::decode(r)?),
            OpCode::Sasl => Self::Sasl(Jute::decode(r)?),
            OpCode::GetEphemerals => Self::GetEphemerals(Jute::decode(r)?),
            OpCode::GetAllChildrenNumber => Self::GetAllChildrenNumber(Jute::decode(r)?),
            OpCode::AddWatch => Self::AddWatch(Jute::decode(r)?),
            OpCode::Notification | OpCode::Check | OpCode::Error | OpCode::CreateSession => {
                return Ok(None)
            }
        }))
    }

    pub fn op_code(&self) -> OpCode {
        match self {
            Self::Ping => OpCode::Ping,
            Self::CloseSession => OpCode::CloseSession,
            Self::WhoAmI => OpCode::WhoAmI,
            Self::Create(_) => OpCode::Create,
            Self::Create2(_) => OpCode::Create2,
            Self::CreateContainer(_) => OpCode::CreateContainer,
            Self::CreateTtl(_) => OpCode::CreateTtl,
            Self::Delete(_) => OpCode::Delete,
            Self::DeleteContainer(_) => OpCode::DeleteContainer,
            Self::Exists(_) => OpCode::Exists,
            Self::GetData(_) => OpCode::GetData,
            Self::SetData(_) => OpCode::SetData,
            Self::GetAcl(_) => OpCode::GetAcl,
            Self::SetAcl(_) => OpCode::SetAcl,
            Self::GetChildren(_) => OpCode::GetChildren,
            Self::GetChildren2(_) => OpCode::GetChildren2,
            Self::Sync(_) => OpCode::Sync,
            Self::Multi(_) => OpCode::Multi,
            Self::MultiRead(_) => OpCode::MultiRead,
            Self::Reconfig(_) => OpCode::Reconfig,
            Self::CheckWatches(_) => OpCode::CheckWatches,
            Self::RemoveWatches(_) => OpCode::RemoveWatches,
            Self::Auth(_) => OpCode::Auth,
            Self::SetWatches(_) => OpCode::SetWatches,
            Self::SetWatches2(_) => OpCode::SetWatches2,
            Self::Sasl(_) => OpCode::Sasl,
            Self::GetEphemerals(_) => OpCode::GetEphemerals,
            Self::GetAllChildrenNumber(_) => OpCode::GetAllChildrenNumber,
            Self::AddWatch(_) => OpCode::AddWatch,
        }
    }

    /// Writes the body as a client would (the header is the caller's).
    pub fn encode(&self, w: &mut Writer) {
        match self {
            Self::Ping | Self::CloseSession | Self::WhoAmI => {}
            Self::Create(b) | Self::Create2(b) | Self::CreateContainer(b) => b.encode(w),
            Self::CreateTtl(b) => b.encode(w),
            Self::Delete(b) => b.encode(w),
            Self::DeleteContainer(b) => b.encode(w),
            Self::Exists(b) => b.encode(w),
            Self::GetData(b) => b.encode(w),
            Self::SetData(b) => b.encode(w),
            Self::GetAcl(b) => b.encode(w),
            Self::SetAcl(b) => b.encode(w),
            Self::GetChildren(b) => b.encode(w),
            Self::GetChildren2(b) => b.encode(w),
            Self::Sync(b) => b.encode(w),
            Self::Multi(b) | Self::MultiRead(b) => b.encode(w),
            Self::Reconfig(b) => b.encode(w),
            Self::CheckWatches(b) => b.encode(w),
            Self::RemoveWatches(b) => b.encode(w),
            Self::Auth(b) => b.encode(w),
            Self::SetWatches(b) => b.encode(w),
            Self::SetWatches2(b) => b.encode(w),
            Self::Sasl(b) => b.encode(w),
            Self::GetEphemerals(b) => b.encode(w),
            Self::GetAllChildrenNumber(b) => b.encode(w),
            Self::AddWatch(b) => b.encode(w),
        }
    }
}

/// Reads one request frame's body (the bytes after the frame length). The outer error
/// means not even the 8-byte header could be read: close the connection. The inner
/// one is answered with the header's xid and `RequestError::code()`.
pub fn decode_request(
    frame: &[u8],
    multi_ops_max: usize,
) -> Result<(RequestHeader, Result<Request, RequestError>), JuteError> {
    let mut r = Reader::new(frame);
    let header = RequestHeader::decode(&mut r)?;
    let request = match OpCode::try_from(header.op) {
        Ok(op) => Request::decode(op, &mut r, multi_ops_max),
        Err(op) => Err(RequestError::Unimplemented { op }),
    };
    Ok((header, request))
}

/// One answer frame: the length, the reply header, then `body` (`&()` for none).
pub fn reply_frame<T: Jute>(header: &ReplyHeader, body: &T) -> Vec<u8> {
    let mut w = Writer::framed();
    header.encode(&mut w);
    body.encode(&mut w);
    w.into_frame()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zk::jute::{decode_all, encode_to_vec, FrameDecoder};
    use bytes::BytesMut;

    /// Bytes from hex digits, spaces and newlines ignored: the vectors below are
    /// written by hand from zookeeper.jute, not by the Writer under test.
    fn hex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        assert_eq!(digits.len() % 2, 0, "odd hex: {s}");
        digits
            .chunks(2)
            .map(|pair| {
                let text = std::str::from_utf8(pair).unwrap();
                u8::from_str_radix(text, 16).unwrap()
            })
            .collect()
    }

    /// Splits `bytes` into frames as the server will, asserting there is exactly one.
    fn one_frame(bytes: &[u8]) -> Bytes {
        let mut buf = BytesMut::from(bytes);
        let frame = FrameDecoder::new(1024 * 1024)
            .decode(&mut buf)
            .unwrap()
            .unwrap();
        assert!(buf.is_empty(), "bytes after the frame");
        frame
    }

    fn open_acl_hex() -> &'static str {
        // vector of 1 ACL: perms 31, Id("world", "anyone")
        "00000001 0000001f 00000005 776f726c64 00000006 616e796f6e65"
    }

    fn sample_stat() -> Stat {
        Stat {
            czxid: 1,
            mzxid: 2,
            ctime_ms: 3,
            mtime_ms: 4,
            version: 5,
            cversion: 6,
            aversion: 7,
            ephemeral_owner: 8,
            data_length: 9,
            num_children: 2,
            pzxid: 0x1_0000_0003,
        }
    }

    fn assert_round_trip<T: Jute + PartialEq + std::fmt::Debug>(value: T) {
        let bytes = encode_to_vec(&value);
        assert!(
            bytes.len() >= T::MIN_BYTES,
            "{value:?} shorter than MIN_BYTES"
        );
        assert_eq!(decode_all::<T>(&bytes, "t"), Ok(value));
        // Every strict prefix is an error, never a panic or a wrong value.
        for cut in 0..bytes.len() {
            let mut r = Reader::new(&bytes[..cut]);
            if let Ok(v) = T::decode(&mut r) {
                // Only a trailing optional field (connect's readOnly) may be cut off.
                assert_eq!(cut + 1, bytes.len(), "prefix {cut} of {v:?} decoded");
            }
        }
    }

    #[test]
    fn a_connect_request_as_kazoo_sends_it() {
        // kazoo 2.11's first Connect: protocol 0, last zxid 0, timeout 10000 ms,
        // session 0, 16 zero bytes of password, readOnly false.
        let bytes = hex(
            "0000002d 00000000 0000000000000000 00002710 0000000000000000
             00000010 00000000000000000000000000000000 00",
        );
        let body = one_frame(&bytes);
        let req = decode_all::<ConnectRequest>(&body, "connect").unwrap();
        assert_eq!(
            req,
            ConnectRequest {
                protocol_version: 0,
                last_zxid_seen: 0,
                timeout_ms: 10_000,
                session_id: 0,
                passwd: Bytes::from(vec![0u8; 16]),
                read_only: Some(false),
            }
        );
        let mut w = Writer::framed();
        req.encode(&mut w);
        assert_eq!(w.into_frame(), bytes);
    }

    #[test]
    fn the_read_only_byte_is_optional_both_ways() {
        // A client before 3.4 sends no readOnly byte (44-byte body).
        let old = hex("00000000 0000000000000010 00001388 0000000000000abc
             00000010 0102030405060708090a0b0c0d0e0f10");
        let req = decode_all::<ConnectRequest>(&old, "connect").unwrap();
        assert_eq!(req.read_only, None);
        assert_eq!(req.last_zxid_seen, 0x10);
        assert_eq!(req.session_id, 0xabc);
        assert_eq!(encode_to_vec(&req), old);
        let mut new = old.clone();
        new.push(7);
        let req = decode_all::<ConnectRequest>(&new, "connect").unwrap();
        assert_eq!(req.read_only, Some(true), "any non-zero byte is true");
        new.push(0);
        assert!(matches!(
            decode_all::<ConnectRequest>(&new, "connect"),
            Err(JuteError::LeftOver { left: 1, .. })
        ));

        // The answer carries the byte exactly when the request did.
        let mut rsp = ConnectResponse {
            protocol_version: 0,
            timeout_ms: 6000,
            session_id: 0x0100_0000_0000_0001,
            passwd: Bytes::from(vec![0xaa; 16]),
            read_only: None,
        };
        let without = hex("00000000 00001770 0100000000000001
             00000010 aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
        assert_eq!(encode_to_vec(&rsp), without);
        assert_eq!(
            decode_all::<ConnectResponse>(&without, "c"),
            Ok(rsp.clone())
        );
        rsp.read_only = Some(false);
        let mut with = without.clone();
        with.push(0);
        assert_eq!(encode_to_vec(&rsp), with);
        assert_eq!(decode_all::<ConnectResponse>(&with, "c"), Ok(rsp));
    }

    #[test]
    fn a_create_frame_as_kazoo_sends_it() {
        // kazoo: client.create("/a", b"x", makepath=False) as request xid 1.
        let bytes = hex(&format!(
            "00000032 00000001 00000001 00000002 2f61 00000001 78 {} 00000000",
            open_acl_hex()
        ));
        let body = one_frame(&bytes);
        let (header, request) = decode_request(&body, 16).unwrap();
        assert_eq!(header, RequestHeader { xid: 1, op: 1 });
        let expected = CreateRequest {
            path: "/a".to_owned(),
            data: Bytes::from_static(b"x"),
            acl: vec![Acl::open_unsafe()],
            flags: 0,
        };
        assert_eq!(request, Ok(Request::Create(expected.clone())));
        assert_eq!(
            CreateMode::try_from(expected.flags),
            Ok(CreateMode::Persistent)
        );
        let mut w = Writer::framed();
        header.encode(&mut w);
        Request::Create(expected).encode(&mut w);
        assert_eq!(w.into_frame(), bytes);

        // kazoo: client.create("/n", None, ephemeral=True) as xid 2: null data.
        let bytes = hex(&format!(
            "00000031 00000002 00000001 00000002 2f6e ffffffff {} 00000001",
            open_acl_hex()
        ));
        let (_, request) = decode_request(&one_frame(&bytes), 16).unwrap();
        assert_eq!(
            request,
            Ok(Request::Create(CreateRequest {
                path: "/n".to_owned(),
                data: Bytes::new(),
                acl: vec![Acl::open_unsafe()],
                flags: CreateMode::Ephemeral.into(),
            }))
        );
    }

    #[test]
    fn a_get_children2_answer_is_written_as_the_format_says() {
        let expected = hex("00000063
             00000005 0000000100000003 00000000
             00000002 00000001 61 00000002 6263
             0000000000000001 0000000000000002 0000000000000003 0000000000000004
             00000005 00000006 00000007 0000000000000008 00000009 00000002
             0000000100000003");
        let header = ReplyHeader {
            xid: 5,
            zxid: 0x1_0000_0003,
            err: 0,
        };
        let body = GetChildren2Response {
            children: vec!["a".to_owned(), "bc".to_owned()],
            stat: sample_stat(),
        };
        assert_eq!(reply_frame(&header, &body), expected);
        let frame = one_frame(&expected);
        let mut r = Reader::new(&frame);
        assert_eq!(ReplyHeader::decode(&mut r), Ok(header));
        assert_eq!(GetChildren2Response::decode(&mut r), Ok(body));
        assert!(r.is_empty());
    }

    #[test]
    fn a_multi_request_as_kazoo_sends_it() {
        // kazoo transaction as xid 9: create("/t", b""), check("/t", 0),
        // delete("/u"), set_data("/t", b"v", 3).
        let bytes = hex(&format!(
            "00000081 00000009 0000000e
             00000001 00 ffffffff  00000002 2f74 00000000 {} 00000000
             0000000d 00 ffffffff  00000002 2f74 00000000
             00000002 00 ffffffff  00000002 2f75 ffffffff
             00000005 00 ffffffff  00000002 2f74 00000001 76 00000003
             ffffffff 01 ffffffff",
            open_acl_hex()
        ));
        let body = one_frame(&bytes);
        let (header, request) = decode_request(&body, 4).unwrap();
        assert_eq!(header, RequestHeader { xid: 9, op: 14 });
        let ops = vec![
            MultiOp::Create(CreateRequest {
                path: "/t".to_owned(),
                data: Bytes::new(),
                acl: vec![Acl::open_unsafe()],
                flags: 0,
            }),
            MultiOp::Check(CheckVersionRequest {
                path: "/t".to_owned(),
                version: 0,
            }),
            MultiOp::Delete(DeleteRequest {
                path: "/u".to_owned(),
                version: -1,
            }),
            MultiOp::SetData(SetDataRequest {
                path: "/t".to_owned(),
                data: Bytes::from_static(b"v"),
                version: 3,
            }),
        ];
        assert_eq!(request, Ok(Request::Multi(MultiRequest { ops })));
        // One op fewer allowed: the same frame is refused by the bound.
        let (_, refused) = decode_request(&body, 3).unwrap();
        assert_eq!(
            refused,
            Err(RequestError::Malformed {
                op: OpCode::Multi,
                source: JuteError::TooMany {
                    what: "ops in one multi",
                    max: 3
                }
            })
        );
        assert_eq!(refused.unwrap_err().code(), Code::MarshallingError);
    }

    #[test]
    fn multi_answers_are_written_as_multi_response_serialize_does() {
        // A failed multi: every result an error, OK before the failure (header err
        // is the result's code, type -1, then ErrorResponse), then the end header.
        let failed = MultiResponse {
            results: vec![
                MultiResult::Error { err: 0 },
                MultiResult::Error {
                    err: Code::NoNode.into(),
                },
            ],
        };
        let expected = hex("ffffffff 00 00000000 00000000
             ffffffff 00 ffffff9b ffffff9b
             ffffffff 01 ffffffff");
        assert_eq!(encode_to_vec(&failed), expected);
        assert_eq!(decode_all::<MultiResponse>(&expected, "m"), Ok(failed));

        let ok = MultiResponse {
            results: vec![
                MultiResult::Create {
                    path: "/t".to_owned(),
                },
                MultiResult::Create2 {
                    path: "/s0000000001".to_owned(),
                    stat: sample_stat(),
                },
                MultiResult::Check,
                MultiResult::Delete,
                MultiResult::SetData {
                    stat: sample_stat(),
                },
            ],
        };
        let stat_hex = "0000000000000001 0000000000000002 0000000000000003 0000000000000004
             00000005 00000006 00000007 0000000000000008 00000009 00000002
             0000000100000003";
        let expected = hex(&format!(
            "00000001 00 00000000 00000002 2f74
             0000000f 00 00000000 0000000c 2f73303030303030303030 31 {stat_hex}
             0000000d 00 00000000
             00000002 00 00000000
             00000005 00 00000000 {stat_hex}
             ffffffff 01 ffffffff"
        ));
        assert_eq!(encode_to_vec(&ok), expected);
        assert_eq!(decode_all::<MultiResponse>(&expected, "m"), Ok(ok));

        let read = MultiResponse {
            results: vec![
                MultiResult::GetData {
                    data: Bytes::from_static(b"hi"),
                    stat: sample_stat(),
                },
                MultiResult::GetChildren {
                    children: vec!["c".to_owned()],
                },
                MultiResult::Error {
                    err: Code::NoNode.into(),
                },
            ],
        };
        let expected = hex(&format!(
            "00000004 00 00000000 00000002 6869 {stat_hex}
             00000008 00 00000000 00000001 00000001 63
             ffffffff 00 ffffff9b ffffff9b
             ffffffff 01 ffffffff"
        ));
        assert_eq!(encode_to_vec(&read), expected);
        assert_round_trip(read);
    }

    #[test]
    fn multi_refuses_ops_of_the_other_kind_and_unknown_ones() {
        let get = MultiOp::GetData(GetDataRequest {
            path: "/a".to_owned(),
            watch: false,
        });
        let del = MultiOp::Delete(DeleteRequest {
            path: "/a".to_owned(),
            version: -1,
        });
        for (kind, op) in [(MultiKind::Write, get), (MultiKind::Read, del)] {
            let value = i32::from(op.op_code());
            let mut w = Writer::new();
            MultiRequest { ops: vec![op] }.encode(&mut w);
            let bytes = w.into_bytes();
            assert_eq!(
                MultiRequest::decode(&mut Reader::new(&bytes), kind, 10),
                Err(JuteError::BadValue {
                    what: "multi op type",
                    value
                })
            );
        }
        for op in [OpCode::Sync as i32, 99, OpCode::Multi as i32] {
            let bytes = hex(&format!("{op:08x} 00 ffffffff 00000002 2f61"));
            assert!(matches!(
                MultiRequest::decode(&mut Reader::new(&bytes), MultiKind::Write, 10),
                Err(JuteError::BadValue { .. })
            ));
        }
        // An empty multi is allowed; a multi without its end header is not.
        let end = hex("ffffffff 01 ffffffff");
        assert_eq!(
            MultiRequest::decode(&mut Reader::new(&end), MultiKind::Read, 0),
            Ok(MultiRequest::default())
        );
        let unended = hex("00000002 00 ffffffff 00000002 2f61 ffffffff");
        assert!(matches!(
            MultiRequest::decode(&mut Reader::new(&unended), MultiKind::Write, 10),
            Err(JuteError::Truncated { .. })
        ));
    }

    /// One value of every request, with no field left at its default.
    fn every_request() -> Vec<Request> {
        let p = |s: &str| s.to_owned();
        let create = CreateRequest {
            path: p("/c"),
            data: Bytes::from_static(b"d\x00"),
            acl: vec![
                Acl::open_unsafe(),
                Acl {
                    perms: perms::READ | perms::ADMIN,
                    id: Id {
                        scheme: p("x509"),
                        id: p("CN=team-a"),
                    },
                },
            ],
            flags: CreateMode::EphemeralSequential.into(),
        };
        let strings = |n: &str| vec![format!("/{n}1"), format!("/{n}2")];
        vec![
            Request::Ping,
            Request::CloseSession,
            Request::WhoAmI,
            Request::Create(create.clone()),
            Request::Create2(create.clone()),
            Request::CreateContainer(CreateRequest {
                flags: CreateMode::Container.into(),
                ..create.clone()
            }),
            Request::CreateTtl(CreateTtlRequest {
                path: p("/ttl"),
                data: Bytes::from_static(b"t"),
                acl: vec![Acl::open_unsafe()],
                flags: CreateMode::PersistentWithTtl.into(),
                ttl_ms: 60_000,
            }),
            Request::Delete(DeleteRequest {
                path: p("/d"),
                version: 4,
            }),
            Request::DeleteContainer(DeleteContainerRequest { path: p("/dc") }),
            Request::Exists(ExistsRequest {
                path: p("/e"),
                watch: true,
            }),
            Request::GetData(GetDataRequest {
                path: p("/zookeeper/config"),
                watch: true,
            }),
            Request::SetData(SetDataRequest {
                path: p("/s"),
                data: Bytes::from_static(b"new"),
                version: -1,
            }),
            Request::GetAcl(GetAclRequest { path: p("/acl") }),
            Request::SetAcl(SetAclRequest {
                path: p("/acl"),
                acl: vec![Acl::open_unsafe()],
                version: 2,
            }),
            Request::GetChildren(GetChildrenRequest {
                path: p("/"),
                watch: true,
            }),
            Request::GetChildren2(GetChildren2Request {
                path: p("/x"),
                watch: true,
            }),
            Request::Sync(SyncRequest { path: p("/y") }),
            Request::Multi(MultiRequest {
                ops: vec![
                    MultiOp::Create(create.clone()),
                    MultiOp::Create2(create.clone()),
                    MultiOp::CreateContainer(create),
                    MultiOp::CreateTtl(CreateTtlRequest {
                        path: p("/t"),
                        ttl_ms: 1,
                        flags: 6,
                        ..Default::default()
                    }),
                    MultiOp::Delete(DeleteRequest {
                        path: p("/d"),
                        version: 1,
                    }),
                    MultiOp::SetData(SetDataRequest {
                        path: p("/s"),
                        data: Bytes::from_static(b"1"),
                        version: 1,
                    }),
                    MultiOp::Check(CheckVersionRequest {
                        path: p("/c"),
                        version: 7,
                    }),
                ],
            }),
            Request::MultiRead(MultiRequest {
                ops: vec![
                    MultiOp::GetData(GetDataRequest {
                        path: p("/a"),
                        watch: false,
                    }),
                    MultiOp::GetChildren(GetChildrenRequest {
                        path: p("/b"),
                        watch: true,
                    }),
                ],
            }),
            Request::Reconfig(ReconfigRequest {
                joining_servers: Some(p("server.4=h:2888:3888;2181")),
                leaving_servers: None,
                new_members: Some(String::new()),
                cur_config_id: -1,
            }),
            Request::CheckWatches(CheckWatchesRequest {
                path: p("/w"),
                watcher_type: WatcherType::Data.into(),
            }),
            Request::RemoveWatches(RemoveWatchesRequest {
                path: p("/w"),
                watcher_type: WatcherType::PersistentRecursive.into(),
            }),
            Request::Auth(AuthPacket {
                auth_type: 0,
                scheme: p("digest"),
                auth: Bytes::from_static(b"user:pw"),
            }),
            Request::SetWatches(SetWatches {
                relative_zxid: 0x2_0000_0001,
                data_watches: strings("d"),
                exist_watches: strings("e"),
                child_watches: strings("c"),
            }),
            Request::SetWatches2(SetWatches2 {
                relative_zxid: 7,
                data_watches: strings("d"),
                exist_watches: vec![],
                child_watches: strings("c"),
                persistent_watches: strings("p"),
                persistent_recursive_watches: strings("r"),
            }),
            Request::Sasl(GetSaslRequest {
                token: Bytes::from_static(b"\x01\x02"),
            }),
            Request::GetEphemerals(GetEphemeralsRequest {
                prefix_path: p("/app"),
            }),
            Request::GetAllChildrenNumber(GetAllChildrenNumberRequest { path: p("/n") }),
            Request::AddWatch(AddWatchRequest {
                path: p("/aw"),
                mode: AddWatchMode::PersistentRecursive.into(),
            }),
        ]
    }

    fn request_frame(xid: i32, request: &Request) -> Vec<u8> {
        let mut w = Writer::new();
        RequestHeader {
            xid,
            op: request.op_code().into(),
        }
        .encode(&mut w);
        request.encode(&mut w);
        w.into_bytes()
    }

    #[test]
    fn every_request_round_trips_and_every_prefix_is_refused() {
        let all = every_request();
        let client_ops: Vec<OpCode> = all.iter().map(Request::op_code).collect();
        for op in OpCode::ALL {
            let refused = matches!(
                op,
                OpCode::Notification | OpCode::Check | OpCode::Error | OpCode::CreateSession
            );
            assert_eq!(client_ops.contains(op), !refused, "{op:?}");
        }
        for (xid, request) in all.into_iter().enumerate() {
            let xid = i32::try_from(xid).unwrap();
            let frame = request_frame(xid, &request);
            let (header, decoded) = decode_request(&frame, 16).unwrap();
            assert_eq!(header.xid, xid);
            assert_eq!(decoded.as_ref(), Ok(&request));
            for cut in 0..frame.len() {
                match decode_request(&frame[..cut], 16) {
                    Err(_) => assert!(cut < 8, "{request:?} cut at {cut}"),
                    Ok((_, Err(RequestError::Malformed { .. }))) => {}
                    Ok((_, other)) => {
                        // Bodiless requests are whole once the header is.
                        assert!(
                            cut == 8 && frame.len() == 8,
                            "{request:?} cut at {cut}: {other:?}"
                        );
                    }
                }
            }
            let mut longer = frame.clone();
            longer.push(0);
            let (_, decoded) = decode_request(&longer, 16).unwrap();
            assert!(
                matches!(
                    decoded,
                    Err(RequestError::Malformed {
                        source: JuteError::LeftOver { left: 1, .. },
                        ..
                    })
                ),
                "{request:?} with a byte more: {decoded:?}"
            );
        }
    }

    #[test]
    fn every_response_record_round_trips() {
        let s = |x: &str| x.to_owned();
        assert_round_trip(sample_stat());
        assert_round_trip(ReplyHeader {
            xid: -1,
            zxid: 0x7fff_0000_0000_0001,
            err: Code::SessionExpired.into(),
        });
        assert_round_trip(MultiHeader {
            op: 5,
            done: false,
            err: -1,
        });
        assert_round_trip(CreateResponse { path: s("/a") });
        assert_round_trip(Create2Response {
            path: s("/a0000000007"),
            stat: sample_stat(),
        });
        assert_round_trip(ExistsResponse {
            stat: sample_stat(),
        });
        assert_round_trip(GetDataResponse {
            data: Bytes::from_static(b"\xff\x00data"),
            stat: sample_stat(),
        });
        assert_round_trip(SetDataResponse {
            stat: sample_stat(),
        });
        assert_round_trip(GetAclResponse {
            acl: vec![Acl::open_unsafe(), Acl::default()],
            stat: sample_stat(),
        });
        assert_round_trip(SetAclResponse {
            stat: sample_stat(),
        });
        assert_round_trip(GetChildrenResponse {
            children: vec![s("a"), s("é")],
        });
        assert_round_trip(GetChildren2Response {
            children: vec![],
            stat: sample_stat(),
        });
        assert_round_trip(SyncResponse { path: s("/s") });
        assert_round_trip(GetEphemeralsResponse {
            ephemerals: vec![s("/e/1"), s("/e/2")],
        });
        assert_round_trip(GetAllChildrenNumberResponse { total_number: 12 });
        assert_round_trip(WhoAmIResponse {
            client_info: vec![
                ClientInfo {
                    auth_scheme: s("x509"),
                    user: s("CN=team-a"),
                },
                ClientInfo {
                    auth_scheme: s("ip"),
                    user: s("127.0.0.1"),
                },
            ],
        });
        assert_round_trip(ErrorResponse {
            err: Code::NodeExists.into(),
        });
        assert_round_trip(WatcherEvent {
            event_type: EventType::NodeChildrenChanged.into(),
            state: KeeperState::SyncConnected.into(),
            path: s("/p"),
        });
        assert_round_trip(SetSaslResponse {
            token: Bytes::from_static(b"tok"),
        });
        assert_round_trip(ConnectResponse {
            protocol_version: 0,
            timeout_ms: 4000,
            session_id: 1,
            passwd: Bytes::from(vec![1; 16]),
            read_only: Some(true),
        });
        assert_round_trip(ConnectRequest {
            protocol_version: 0,
            last_zxid_seen: 9,
            timeout_ms: 4000,
            session_id: 1,
            passwd: Bytes::from(vec![1; 16]),
            read_only: Some(false),
        });
    }

    #[test]
    fn a_notification_frame_is_written_as_the_format_says() {
        let header = ReplyHeader {
            xid: NOTIFICATION_XID,
            zxid: 0x42,
            err: 0,
        };
        let event = WatcherEvent {
            event_type: EventType::NodeDeleted.into(),
            state: KeeperState::SyncConnected.into(),
            path: "/n".to_owned(),
        };
        let expected = hex("0000001e ffffffff 0000000000000042 00000000
             00000002 00000003 00000002 2f6e");
        assert_eq!(reply_frame(&header, &event), expected);
        // A ping's answer: the header alone.
        let pong = ReplyHeader {
            xid: PING_XID,
            zxid: 0x42,
            err: 0,
        };
        assert_eq!(
            reply_frame(&pong, &()),
            hex("00000010 fffffffe 0000000000000042 00000000")
        );
    }

    #[test]
    fn opcodes_clients_may_not_send_are_unimplemented_not_malformed() {
        for op in [0, 13, -1, -10, 10, 23, 99, 108, i32::MIN, i32::MAX] {
            let frame = hex(&format!("00000003 {op:08x} 00000002 2f61"));
            let (header, request) = decode_request(&frame, 16).unwrap();
            assert_eq!(header, RequestHeader { xid: 3, op });
            assert_eq!(request, Err(RequestError::Unimplemented { op }));
            assert_eq!(request.unwrap_err().code(), Code::Unimplemented);
        }
        // Fewer than 8 bytes: no header, no xid to answer.
        assert!(decode_request(&[0, 0, 0, 1, 0, 0, 0], 16).is_err());
    }

    #[test]
    fn huge_claimed_lengths_fail_fast_inside_requests() {
        // A create whose ACL vector claims i32::MAX entries in a 30-byte frame.
        let frame = hex("00000001 00000001 00000002 2f61 ffffffff 7fffffff 00000000");
        let (_, request) = decode_request(&frame, 16).unwrap();
        assert_eq!(
            request,
            Err(RequestError::Malformed {
                op: OpCode::Create,
                source: JuteError::BadLength {
                    what: "vector",
                    len: i32::MAX,
                    left: 4
                }
            })
        );
        // setWatches claiming 2^31-1 paths; a path claiming 2^31-1 bytes; a -2 length.
        for body in [
            "0000000000000000 7fffffff",
            "0000000000000000 00000001 7fffffff 2f",
            "0000000000000000 fffffffe",
        ] {
            let frame = hex(&format!("fffffff8 00000065 {body}"));
            let (_, request) = decode_request(&frame, 16).unwrap();
            assert!(
                matches!(
                    request,
                    Err(RequestError::Malformed {
                        op: OpCode::SetWatches,
                        source: JuteError::BadLength { .. }
                    })
                ),
                "{body}: {request:?}"
            );
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_what_decodes_re_encodes_to_itself() {
        // A fixed xorshift stream: mutations of valid frames and pure noise.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let frames: Vec<Vec<u8>> = every_request()
            .iter()
            .map(|r| request_frame(1, r))
            .collect();
        let (mut decoded, mut refused) = (0, 0);
        for round in 0..20_000 {
            let mut bytes = frames[round % frames.len()].clone();
            if round % 4 == 0 {
                let len = usize::try_from(next() % 64).unwrap();
                bytes = (0..len).map(|_| next().to_le_bytes()[0]).collect();
            } else {
                for _ in 0..1 + next() % 3 {
                    let at = usize::try_from(next()).unwrap() % bytes.len();
                    bytes[at] = next().to_le_bytes()[0];
                }
            }
            match decode_request(&bytes, 8) {
                Ok((header, Ok(request))) => {
                    decoded += 1;
                    assert_eq!(header.op, i32::from(request.op_code()));
                    // Whatever was accepted means the same when written back.
                    let again = request_frame(header.xid, &request);
                    let (_, request_again) = decode_request(&again, 8).unwrap();
                    assert_eq!(request_again, Ok(request), "from {bytes:02x?}");
                }
                Ok((_, Err(_))) | Err(_) => refused += 1,
            }
            if let Ok(connect) = decode_all::<ConnectRequest>(&bytes, "connect") {
                let again = encode_to_vec(&connect);
                assert_eq!(decode_all::<ConnectRequest>(&again, "c"), Ok(connect));
            }
            if let Ok(multi) = decode_all::<MultiResponse>(&bytes, "multi") {
                let again = encode_to_vec(&multi);
                assert_eq!(decode_all::<MultiResponse>(&again, "m"), Ok(multi));
            }
        }
        assert!(
            decoded > 1_000 && refused > 1_000,
            "{decoded} decoded, {refused} refused"
        );
    }

    #[test]
    fn wire_values_match_zookeeper() {
        let ops: Vec<(i32, &str)> = OpCode::ALL.iter().map(|o| (*o as i32, o.name())).collect();
        assert_eq!(
            ops,
            [
                (0, "notification"),
                (1, "create"),
                (2, "delete"),
                (3, "exists"),
                (4, "getData"),
                (5, "setData"),
                (6, "getACL"),
                (7, "setACL"),
                (8, "getChildren"),
                (9, "sync"),
                (11, "ping"),
                (12, "getChildren2"),
                (13, "check"),
                (14, "multi"),
                (15, "create2"),
                (16, "reconfig"),
                (17, "checkWatches"),
                (18, "removeWatches"),
                (19, "createContainer"),
                (20, "deleteContainer"),
                (21, "createTTL"),
                (22, "multiRead"),
                (100, "auth"),
                (101, "setWatches"),
                (102, "sasl"),
                (103, "getEphemerals"),
                (104, "getAllChildrenNumber"),
                (105, "setWatches2"),
                (106, "addWatch"),
                (107, "whoAmI"),
                (-10, "createSession"),
                (-11, "closeSession"),
                (-1, "error"),
            ]
        );
        let codes: Vec<(i32, &str)> = Code::ALL.iter().map(|c| (*c as i32, c.name())).collect();
        assert_eq!(
            codes,
            [
                (0, "OK"),
                (-1, "SYSTEMERROR"),
                (-2, "RUNTIMEINCONSISTENCY"),
                (-3, "DATAINCONSISTENCY"),
                (-4, "CONNECTIONLOSS"),
                (-5, "MARSHALLINGERROR"),
                (-6, "UNIMPLEMENTED"),
                (-7, "OPERATIONTIMEOUT"),
                (-8, "BADARGUMENTS"),
                (-12, "UNKNOWNSESSION"),
                (-13, "NEWCONFIGNOQUORUM"),
                (-14, "RECONFIGINPROGRESS"),
                (-100, "APIERROR"),
                (-101, "NONODE"),
                (-102, "NOAUTH"),
                (-103, "BADVERSION"),
                (-108, "NOCHILDRENFOREPHEMERALS"),
                (-110, "NODEEXISTS"),
                (-111, "NOTEMPTY"),
                (-112, "SESSIONEXPIRED"),
                (-113, "INVALIDCALLBACK"),
                (-114, "INVALIDACL"),
                (-115, "AUTHFAILED"),
                (-118, "SESSIONMOVED"),
                (-119, "NOTREADONLY"),
                (-120, "EPHEMERALONLOCALSESSION"),
                (-121, "NOWATCHER"),
                (-122, "REQUESTTIMEOUT"),
                (-123, "RECONFIGDISABLED"),
                (-124, "SESSIONCLOSEDREQUIRESASLAUTH"),
                (-125, "QUOTAEXCEEDED"),
                (-127, "THROTTLEDOP"),
            ]
        );
        for (all, values) in [
            (
                EventType::ALL.iter().map(|v| *v as i32).collect::<Vec<_>>(),
                vec![-1, 1, 2, 3, 4, 5, 6, 7],
            ),
            (
                KeeperState::ALL.iter().map(|v| *v as i32).collect(),
                vec![-1, 0, 1, 3, 4, 5, 6, -112, 7],
            ),
            (
                CreateMode::ALL.iter().map(|v| *v as i32).collect(),
                vec![0, 1, 2, 3, 4, 5, 6],
            ),
            (
                AddWatchMode::ALL.iter().map(|v| *v as i32).collect(),
                vec![0, 1],
            ),
            (
                WatcherType::ALL.iter().map(|v| *v as i32).collect(),
                vec![1, 2, 3, 4, 5],
            ),
        ] {
            assert_eq!(all, values);
        }
        assert_eq!(CreateMode::try_from(7), Err(7));
        assert_eq!(Code::try_from(-101), Ok(Code::NoNode));
        assert_eq!(OpCode::try_from(10), Err(10));
        assert_eq!(perms::ALL, 31);
        assert!(CreateMode::EphemeralSequential.is_ephemeral());
        assert!(CreateMode::EphemeralSequential.is_sequential());
        assert!(CreateMode::PersistentSequentialWithTtl.is_ttl());
        assert!(CreateMode::Container.is_container());
        assert!(!CreateMode::Persistent.is_ephemeral());
    }
}
