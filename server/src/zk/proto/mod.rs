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

mod multi;
mod records;
mod request;
#[cfg(test)]
mod tests;

pub use multi::*;
pub use records::*;
pub use request::*;
