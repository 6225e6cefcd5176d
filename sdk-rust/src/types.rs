//! The SDK's own types: what calls return and watches deliver, converted from the
//! generated messages once, here, so that the rest of the API never shows a proto
//! message (no `Option<Stat>` that is always set, no enums as `i32`, no `oneof`s).
//!
//! ```text
//!   proto::Stat ─▶ Stat        proto::WatchResponse ─▶ WatchMessage (Event, Node, ...)
//!   proto::LeaderInfo ─▶ Participant    proto::LockEntry ─▶ LockEntry
//!   proto::OpResult ─▶ OpResult         proto::StatusResponse ─▶ ServerStatus
//! ```
//!
//! The plain enums `CreateMode`, `EventKind` and `ErrorCode` are the wire's own, re-
//! exported as they are: they are ordinary Rust enums. Nothing here does IO.

use concord_proto::v1 as proto;
use concord_proto::v1::{op_result, watch_response::Msg, EventKind};

/// Node metadata, with ZooKeeper's meaning for every field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Stat {
    /// zxid of the txn that created the node.
    pub czxid: u64,
    /// zxid of the txn that last changed the node's data.
    pub mzxid: u64,
    /// zxid of the txn that last created or deleted a child of the node.
    pub pzxid: u64,
    /// Leader wall time of the create, in milliseconds since the Unix epoch.
    pub ctime_ms: i64,
    /// Leader wall time of the last data change, in milliseconds since the Unix epoch.
    pub mtime_ms: i64,
    /// Number of changes to the node's data (starts at 0).
    pub version: i32,
    /// Number of changes to the node's children.
    pub cversion: i64,
    /// Number of changes to the node's ACL.
    pub aversion: i32,
    /// Session id of the owner if the node is ephemeral, else 0.
    pub ephemeral_owner: u64,
    /// Length of the node's data in bytes.
    pub data_length: u32,
    /// Number of direct children.
    pub num_children: u32,
}

impl Stat {
    /// True for an ephemeral node (one owned by a session).
    pub fn is_ephemeral(&self) -> bool {
        self.ephemeral_owner != 0
    }
}

impl From<proto::Stat> for Stat {
    fn from(s: proto::Stat) -> Stat {
        Stat {
            czxid: s.czxid,
            mzxid: s.mzxid,
            pzxid: s.pzxid,
            ctime_ms: s.ctime_ms,
            mtime_ms: s.mtime_ms,
            version: s.version,
            cversion: s.cversion,
            aversion: s.aversion,
            ephemeral_owner: s.ephemeral_owner,
            data_length: s.data_length,
            num_children: s.num_children,
        }
    }
}

/// The stat of a message that should carry one (the default if the server sent none).
pub(crate) fn stat_of(stat: Option<proto::Stat>) -> Stat {
    stat.map(Stat::from).unwrap_or_default()
}

/// A node: its full path, data and stat (from a watch's initial snapshot, or a cache).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Node {
    /// The node's full path.
    pub path: String,
    /// The node's data.
    pub data: Vec<u8>,
    /// The node's stat.
    pub stat: Stat,
}

/// One child of a node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Child {
    /// The child's name (the last path segment, not the full path).
    pub name: String,
    /// The child's stat, when asked for (`ChildrenOptions::with_stats`).
    pub stat: Option<Stat>,
}

impl From<proto::Child> for Child {
    fn from(c: proto::Child) -> Child {
        Child {
            name: c.name,
            stat: c.stat.map(Stat::from),
        }
    }
}

/// A change to the tree, as a watch delivers it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Event {
    /// The zxid of the txn that made the change.
    pub zxid: u64,
    /// What changed.
    pub kind: EventKind,
    /// The node the event is about (for `ChildrenChanged`, the parent).
    pub path: String,
    /// The node's data after the change (watches `with_data` only; empty for `Deleted`).
    pub data: Vec<u8>,
    /// The node's data before the change (`with_data`; `DataChanged` and `Deleted`).
    pub prev_data: Vec<u8>,
    /// The node's stat after the change (before it, for `Deleted`).
    pub stat: Stat,
}

impl From<proto::WatchEvent> for Event {
    fn from(e: proto::WatchEvent) -> Event {
        Event {
            zxid: e.zxid,
            kind: EventKind::try_from(e.kind).unwrap_or(EventKind::Unspecified),
            path: e.path,
            data: e.data.to_vec(),
            prev_data: e.prev_data.to_vec(),
            stat: stat_of(e.stat),
        }
    }
}

/// One message of a watch stream. A resumed watch yields a new `Started` each time it
/// reconnects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchMessage {
    /// The watch is registered: everything after `zxid` will be delivered (or, when
    /// it resumes or starts from a zxid, everything after that).
    Started {
        /// The zxid the stream starts after.
        zxid: u64,
        /// The server's id for this watch (for its logs and metrics).
        watch_id: u64,
    },
    /// A change.
    Event(Event),
    /// Nothing matched for a while: the server has applied everything up to `zxid`.
    Progress {
        /// Everything up to this zxid has been delivered.
        zxid: u64,
    },
    /// One node of the initial snapshot.
    SnapshotNode(Node),
    /// The initial snapshot is complete and reflects `zxid`; events after it follow.
    SnapshotDone {
        /// The zxid the snapshot reflects.
        zxid: u64,
    },
}

impl From<Msg> for WatchMessage {
    fn from(msg: Msg) -> WatchMessage {
        match msg {
            Msg::Started(s) => WatchMessage::Started {
                zxid: s.zxid,
                watch_id: s.watch_id,
            },
            Msg::Event(e) => WatchMessage::Event(e.into()),
            Msg::Progress(p) => WatchMessage::Progress { zxid: p.zxid },
            Msg::SnapshotNode(n) => WatchMessage::SnapshotNode(Node {
                path: n.path,
                data: n.data.to_vec(),
                stat: stat_of(n.stat),
            }),
            Msg::SnapshotDone(d) => WatchMessage::SnapshotDone { zxid: d.zxid },
        }
    }
}

/// A candidate (or the leader) of an election.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Participant {
    /// The election's name.
    pub election: String,
    /// The candidate's key: with `term`, its fence, and what `resign` takes.
    pub key: String,
    /// The term token: the zxid that queued the candidate; a fencing token once it leads.
    pub term: u64,
    /// The id the candidate campaigned with.
    pub participant_id: String,
    /// The value it announces while leader.
    pub value: Vec<u8>,
    /// The session that owns the candidacy.
    pub session_id: u64,
}

impl From<proto::LeaderInfo> for Participant {
    fn from(l: proto::LeaderInfo) -> Participant {
        Participant {
            election: l.election,
            key: l.key,
            term: l.term,
            participant_id: l.participant_id,
            value: l.value.to_vec(),
            session_id: l.session_id,
        }
    }
}

impl Participant {
    /// This candidate's term as a fence for writes (valid while it leads).
    pub fn fence(&self) -> Fence {
        Fence {
            key: self.key.clone(),
            token: self.term,
        }
    }
}

/// One member of a lock's queue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockEntry {
    /// The member's node (the holder key once it holds).
    pub key: String,
    /// The zxid that created the node: the fencing token once it holds.
    pub token: u64,
    /// The owning session.
    pub session_id: u64,
    /// The owner id it acquired with.
    pub owner_id: String,
}

impl From<proto::LockEntry> for LockEntry {
    fn from(e: proto::LockEntry) -> LockEntry {
        LockEntry {
            key: e.key,
            token: e.token,
            session_id: e.session_id,
            owner_id: e.owner_id,
        }
    }
}

/// A fencing token presented with a write: a lock's holder key and token, or an
/// election leader's key and term. The server rejects the write with FENCED, changing
/// nothing, once the token no longer holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Fence {
    /// The holder (or leader) key.
    pub key: String,
    /// The token (or term) returned with that key.
    pub token: u64,
}

impl From<Fence> for proto::Fence {
    fn from(f: Fence) -> proto::Fence {
        proto::Fence {
            key: f.key,
            token: f.token,
        }
    }
}

/// A live session, as `session_info` and `list_sessions` describe it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionInfo {
    /// The session id.
    pub session_id: u64,
    /// The granted TTL in milliseconds.
    pub ttl_ms: i64,
    /// Milliseconds left before expiry, as the answering server sees it.
    pub remaining_ms: i64,
    /// Paths of the ephemeral nodes the session owns, sorted (`session_info` only).
    pub ephemerals: Vec<String>,
    /// The identity that opened the session; empty when the caller may not see it.
    pub owner: String,
}

impl From<proto::SessionInfo> for SessionInfo {
    fn from(s: proto::SessionInfo) -> SessionInfo {
        SessionInfo {
            session_id: s.session_id,
            ttl_ms: s.ttl_ms,
            remaining_ms: s.remaining_ms,
            ephemerals: s.ephemerals,
            owner: s.owner,
        }
    }
}

/// The outcome of one op of a multi, in the order of the ops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResult {
    /// A create: the created path (with its sequential suffix) and the new stat.
    Created {
        /// The created path.
        path: String,
        /// The new node's stat.
        stat: Stat,
    },
    /// A set: the node's stat after it.
    Set {
        /// The node's stat after the set.
        stat: Stat,
    },
    /// A delete.
    Deleted,
    /// A check that held.
    Checked,
}

impl OpResult {
    /// The result of a generated OpResult (`None` if the server sent an empty one).
    pub(crate) fn of(result: proto::OpResult) -> Option<OpResult> {
        Some(match result.result? {
            op_result::Result::Create(c) => OpResult::Created {
                path: c.path,
                stat: stat_of(c.stat),
            },
            op_result::Result::Set(s) => OpResult::Set {
                stat: stat_of(s.stat),
            },
            op_result::Result::Delete(_) => OpResult::Deleted,
            op_result::Result::Check(_) => OpResult::Checked,
        })
    }
}

/// A server's part in the ensemble.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Role {
    /// Not known (a server that sent none).
    #[default]
    Unknown,
    /// Electing a leader; serves no writes.
    Looking,
    /// Proposes and commits txns (a single server leads an ensemble of one).
    Leader,
    /// Votes on proposals and forwards writes to the leader.
    Follower,
    /// Receives committed txns and serves reads, but never votes.
    Observer,
}

impl Role {
    /// The role's name as servers log it (`leader`, `follower`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Role::Unknown => "unknown",
            Role::Looking => "looking",
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::Observer => "observer",
        }
    }
}

impl From<i32> for Role {
    fn from(role: i32) -> Role {
        match proto::Role::try_from(role) {
            Ok(proto::Role::Looking) => Role::Looking,
            Ok(proto::Role::Leader) => Role::Leader,
            Ok(proto::Role::Follower) => Role::Follower,
            Ok(proto::Role::Observer) => Role::Observer,
            Ok(proto::Role::Unspecified) | Err(_) => Role::Unknown,
        }
    }
}

/// What a server reports about itself (`Cluster.Status`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerStatus {
    /// The answering server's id.
    pub server_id: u64,
    /// Its part in the ensemble.
    pub role: Role,
    /// Newest applied zxid.
    pub zxid: u64,
    /// Newest zxid known committed.
    pub commit_zxid: u64,
    /// The current epoch.
    pub epoch: u32,
    /// Nodes in the tree, the root included.
    pub node_count: u64,
    /// Live sessions.
    pub session_count: u64,
    /// Watches registered live on this server.
    pub watch_count: u64,
    /// Servers in the ensemble (voters and observers).
    pub ensemble_size: u32,
    /// The server's version.
    pub version: String,
    /// Oldest zxid a watch may resume from on this server.
    pub oldest_resumable_zxid: u64,
    /// Oldest zxid a watch resumes from out of the in-memory history alone.
    pub watch_history_oldest_zxid: u64,
    /// Lock and election waiters woken by a predecessor's removal since it started.
    pub queue_wakeups: u64,
    /// The server this one follows (itself when it leads); 0 while looking.
    pub leader_id: u64,
    /// A leader: whether it accepts writes and linearizable reads now.
    pub leader_serving: bool,
    /// Where it serves ZooKeeper's protocol (host:port); empty if it does not.
    pub zookeeper_addr: String,
}

impl From<proto::StatusResponse> for ServerStatus {
    fn from(s: proto::StatusResponse) -> ServerStatus {
        ServerStatus {
            server_id: s.server_id,
            role: Role::from(s.role),
            zxid: s.zxid,
            commit_zxid: s.commit_zxid,
            epoch: s.epoch,
            node_count: s.node_count,
            session_count: s.session_count,
            watch_count: s.watch_count,
            ensemble_size: s.ensemble_size,
            version: s.version,
            oldest_resumable_zxid: s.oldest_resumable_zxid,
            watch_history_oldest_zxid: s.watch_history_oldest_zxid,
            queue_wakeups: s.queue_wakeups,
            leader_id: s.leader_id,
            leader_serving: s.leader_serving,
            zookeeper_addr: s.zookeeper_addr,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_messages_convert_every_field() {
        let event = proto::WatchEvent {
            zxid: 9,
            kind: EventKind::DataChanged as i32,
            path: "/a".into(),
            data: b"new".to_vec().into(),
            prev_data: b"old".to_vec().into(),
            stat: Some(proto::Stat {
                version: 2,
                ephemeral_owner: 5,
                ..Default::default()
            }),
        };
        let WatchMessage::Event(e) = WatchMessage::from(Msg::Event(event)) else {
            panic!("not an event");
        };
        assert_eq!(
            (e.zxid, e.kind, e.path.as_str()),
            (9, EventKind::DataChanged, "/a")
        );
        assert_eq!((&e.data[..], &e.prev_data[..]), (&b"new"[..], &b"old"[..]));
        assert_eq!(e.stat.version, 2);
        assert!(e.stat.is_ephemeral());
        let unknown = proto::WatchEvent {
            kind: 99,
            ..Default::default()
        };
        let WatchMessage::Event(e) = WatchMessage::from(Msg::Event(unknown)) else {
            panic!("not an event");
        };
        assert_eq!(e.kind, EventKind::Unspecified);
    }

    #[test]
    fn op_results_and_roles_convert() {
        let created = proto::OpResult {
            result: Some(op_result::Result::Create(proto::CreateResult {
                path: "/q-0000000001".into(),
                stat: None,
            })),
        };
        assert_eq!(
            OpResult::of(created),
            Some(OpResult::Created {
                path: "/q-0000000001".into(),
                stat: Stat::default()
            })
        );
        assert_eq!(OpResult::of(proto::OpResult { result: None }), None);
        assert_eq!(Role::from(proto::Role::Follower as i32), Role::Follower);
        assert_eq!(Role::from(42), Role::Unknown);
        assert_eq!(Role::Leader.name(), "leader");
    }
}
