//! The replicated transaction: what the leader stamps, the log stores, and every
//! server applies to its tree in zxid order.
//!
//! A `Txn` is a pure input. Applying it (`tree::DataTree::apply`) gives the same
//! result on every server: sequence numbers come from the parent's counter at apply
//! time, and a failed check is a deterministic error, not a divergence. The session
//! id of a new session is the zxid of its `OpenSession` txn.
//!
//! ```text
//!   api ──request──▶ leader stamps Txn{zxid, time_ms, ..} ──▶ log (fsync) ──▶ apply
//! ```
//!
//! Encoding: one format byte (`FORMAT_V1`) then postcard. The log adds its own crc.
//!
//! Null data (ZooKeeper's `create(path, null, ..)`, kept apart from empty data) is a
//! flag of `CreateOp` and `SetOp` that their own encoding leaves out: a create or set
//! with null data is encoded as a variant appended to `TxnOp` (`MultiOp`), so every
//! other op keeps the bytes it always had, and a server that predates null data
//! (peer protocol below 4) fails to decode only an op that has it (see `wire`).

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::security::Grant;

/// A zxid: the epoch in the high 24 bits, a counter in the low 40. Only grows.
pub type Zxid = u64;

/// Bits of a zxid that hold the per-epoch counter.
pub const ZXID_COUNTER_BITS: u32 = 40;
/// Largest counter value in one epoch; a leader starts a new epoch before passing it.
pub const ZXID_COUNTER_MAX: u64 = (1 << ZXID_COUNTER_BITS) - 1;
/// Largest epoch that fits in a zxid.
pub const EPOCH_MAX: u32 = (1 << 24) - 1;

/// Builds a zxid from an epoch and a counter (the counter is masked to 40 bits).
pub fn make_zxid(epoch: u32, counter: u64) -> Zxid {
    ((u64::from(epoch) & u64::from(EPOCH_MAX)) << ZXID_COUNTER_BITS) | (counter & ZXID_COUNTER_MAX)
}

/// The epoch part of a zxid.
pub fn zxid_epoch(zxid: Zxid) -> u32 {
    // The shift leaves at most 24 bits, so the cast cannot truncate.
    (zxid >> ZXID_COUNTER_BITS) as u32
}

/// The counter part of a zxid.
pub fn zxid_counter(zxid: Zxid) -> u64 {
    zxid & ZXID_COUNTER_MAX
}

/// One replicated transaction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Txn {
    /// Position in the one global order.
    pub zxid: Zxid,
    /// The leader's wall time when it stamped the txn (ms since the Unix epoch); used
    /// for ctime/mtime and TTL nodes, so every server records the same times.
    pub time_ms: i64,
    /// The session the request came from (0: none). Owns ephemerals it creates.
    pub session_id: u64,
    /// The client's retry id within the session (0: none). A second txn with the same
    /// (session_id, request_id) is answered with the first outcome and changes nothing.
    pub request_id: u64,
    /// A fencing token the txn must still hold when applied (see `Fence`); with a
    /// stale fence the txn fails with `TreeError::Fenced` and changes nothing.
    pub fence: Option<Fence>,
    pub op: TxnOp,
}

/// A fencing token presented with a write: the key of a lock or election queue node
/// and the token (its czxid) the client was given. It holds, at apply time, iff the
/// node exists, was created by `token`, and is one of its queue's holders.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fence {
    pub key: String,
    pub token: Zxid,
}

/// How a node lives and is named (mirrors `concord.v1.CreateMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CreateMode {
    Persistent,
    Ephemeral,
    PersistentSequential,
    EphemeralSequential,
    Container,
    PersistentWithTtl,
    PersistentSequentialWithTtl,
}

impl CreateMode {
    pub fn is_ephemeral(self) -> bool {
        matches!(
            self,
            CreateMode::Ephemeral | CreateMode::EphemeralSequential
        )
    }

    pub fn is_sequential(self) -> bool {
        matches!(
            self,
            CreateMode::PersistentSequential
                | CreateMode::EphemeralSequential
                | CreateMode::PersistentSequentialWithTtl
        )
    }

    pub fn is_ttl(self) -> bool {
        matches!(
            self,
            CreateMode::PersistentWithTtl | CreateMode::PersistentSequentialWithTtl
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateOp {
    pub path: String,
    pub data: Bytes,
    pub mode: CreateMode,
    /// For TTL modes only; 0 otherwise.
    pub ttl_ms: i64,
    /// The node's data is null, not empty (`data` is then empty). Encoded by the
    /// variant, not here (see the module's doc).
    #[serde(skip)]
    pub null_data: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetOp {
    pub path: String,
    pub data: Bytes,
    /// Expected data version; -1 matches any.
    pub version: i32,
    /// The node's data becomes null, not empty (`data` is then empty). Encoded by the
    /// variant, not here (see the module's doc).
    #[serde(skip)]
    pub null_data: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteOp {
    pub path: String,
    /// Expected data version; -1 matches any.
    pub version: i32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckOp {
    pub path: String,
    /// Expected data version; -1 matches any (then only existence is checked).
    pub version: i32,
}

/// One step of a `Multi`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(from = "wire::MultiOp")]
pub enum MultiOp {
    Create(CreateOp),
    Set(SetOp),
    Delete(DeleteOp),
    Check(CheckOp),
}

/// Why a session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CloseReason {
    /// The client asked.
    Closed,
    /// The leader saw no keep-alive for a whole TTL.
    Expired,
}

/// What a txn does.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(from = "wire::TxnOp")]
pub enum TxnOp {
    Create(CreateOp),
    Set(SetOp),
    Delete(DeleteOp),
    /// All ops succeed together or none is applied.
    Multi(Vec<MultiOp>),
    /// Opens a session whose id is this txn's zxid, with an already clamped TTL and
    /// no recorded owner (written by servers before sessions had owners).
    OpenSession {
        ttl_ms: i64,
    },
    /// Ends a session and deletes its ephemeral nodes, all in this one txn.
    CloseSession {
        session_id: u64,
        reason: CloseReason,
    },
    /// Server housekeeping: delete an empty container or an expired TTL node. Applied
    /// only if the node still qualifies at apply time (else a no-op error).
    Reap {
        path: String,
    },
    /// A lock or election queue op: the only writes allowed under the reserved
    /// prefix (`tree::queue::RESERVED_PREFIX`).
    Queue(QueueOp),
    /// Opens a session whose id is this txn's zxid, owned by `owner`: the identity of
    /// the caller that asked (only it, or an admin, may use the session). Servers
    /// write this one; `OpenSession` (no recorded owner: admins only) is still
    /// decoded and applied from older logs.
    OpenOwnedSession {
        ttl_ms: i64,
        owner: String,
    },
    /// A change to the replicated grant table (`security::acl`).
    Access(AccessOp),
}

/// Changes to the grant table (see `tree/access.rs` for how they apply).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AccessOp {
    /// The bootstrap seed: grants each of `grants` not seeded before (a seed grant
    /// revoked later stays revoked), and creates each of `roots` (a team's namespace
    /// root), with its missing ancestors, as persistent nodes if missing.
    Seed {
        grants: Vec<Grant>,
        roots: Vec<String>,
    },
    /// Adds the permissions of the grant to those of its (path, grantee).
    Grant(Grant),
    /// Removes the permissions of the grant from those of its (path, grantee).
    Revoke(Grant),
}

/// Ops on the lock and election queues (see `tree/queue.rs` for their rules).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum QueueOp {
    /// Joins the queue `queue` with an ephemeral-sequential node owned by the txn's
    /// session, creating the queue (and the reserved folders) if missing. If the
    /// session already has a node there with the same non-empty `owner_id`, that node
    /// is adopted instead (a retried acquire). With `only_if_free`, fails with
    /// `LockHeld` instead of queueing behind `permits` holders.
    Join {
        queue: String,
        owner_id: String,
        value: Bytes,
        /// Concurrent holders allowed (1: a mutex); must match the queue's.
        permits: u32,
        only_if_free: bool,
    },
    /// Leaves a queue: deletes the node at `path` if its czxid is `token` (0: any).
    Leave { path: String, token: Zxid },
    /// Replaces the value of the node at `path` (czxid `token`), keeping its owner id.
    Update {
        path: String,
        token: Zxid,
        value: Bytes,
    },
}

impl Serialize for TxnOp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        wire::TxnOpRef::from(self).serialize(s)
    }
}

impl Serialize for MultiOp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        wire::MultiOpRef::from(self).serialize(s)
    }
}

/// The encodings of `TxnOp` and `MultiOp`: their variants in their order, then one
/// appended for each op that may have null data. postcard writes a variant's index,
/// so the appended ones leave every older encoding as it was. Serialized from
/// borrows (`*Ref`), so encoding copies nothing.
mod wire {
    use serde::{Deserialize, Serialize};

    use super::{AccessOp, CheckOp, CloseReason, CreateOp, DeleteOp, QueueOp, SetOp};

    #[derive(Serialize)]
    pub(super) enum TxnOpRef<'a> {
        Create(&'a CreateOp),
        Set(&'a SetOp),
        Delete(&'a DeleteOp),
        Multi(&'a [super::MultiOp]),
        OpenSession {
            ttl_ms: i64,
        },
        CloseSession {
            session_id: u64,
            reason: CloseReason,
        },
        Reap {
            path: &'a str,
        },
        Queue(&'a QueueOp),
        OpenOwnedSession {
            ttl_ms: i64,
            owner: &'a str,
        },
        Access(&'a AccessOp),
        CreateNullData(&'a CreateOp),
        SetNullData(&'a SetOp),
    }

    #[derive(Deserialize)]
    pub(super) enum TxnOp {
        Create(CreateOp),
        Set(SetOp),
        Delete(DeleteOp),
        Multi(Vec<super::MultiOp>),
        OpenSession {
            ttl_ms: i64,
        },
        CloseSession {
            session_id: u64,
            reason: CloseReason,
        },
        Reap {
            path: String,
        },
        Queue(QueueOp),
        OpenOwnedSession {
            ttl_ms: i64,
            owner: String,
        },
        Access(AccessOp),
        CreateNullData(CreateOp),
        SetNullData(SetOp),
    }

    #[derive(Serialize)]
    pub(super) enum MultiOpRef<'a> {
        Create(&'a CreateOp),
        Set(&'a SetOp),
        Delete(&'a DeleteOp),
        Check(&'a CheckOp),
        CreateNullData(&'a CreateOp),
        SetNullData(&'a SetOp),
    }

    #[derive(Deserialize)]
    pub(super) enum MultiOp {
        Create(CreateOp),
        Set(SetOp),
        Delete(DeleteOp),
        Check(CheckOp),
        CreateNullData(CreateOp),
        SetNullData(SetOp),
    }

    impl<'a> From<&'a super::TxnOp> for TxnOpRef<'a> {
        fn from(op: &'a super::TxnOp) -> Self {
            use super::TxnOp as T;
            match op {
                T::Create(c) if c.null_data => TxnOpRef::CreateNullData(c),
                T::Create(c) => TxnOpRef::Create(c),
                T::Set(s) if s.null_data => TxnOpRef::SetNullData(s),
                T::Set(s) => TxnOpRef::Set(s),
                T::Delete(d) => TxnOpRef::Delete(d),
                T::Multi(ops) => TxnOpRef::Multi(ops),
                T::OpenSession { ttl_ms } => TxnOpRef::OpenSession { ttl_ms: *ttl_ms },
                T::CloseSession { session_id, reason } => TxnOpRef::CloseSession {
                    session_id: *session_id,
                    reason: *reason,
                },
                T::Reap { path } => TxnOpRef::Reap { path },
                T::Queue(q) => TxnOpRef::Queue(q),
                T::OpenOwnedSession { ttl_ms, owner } => TxnOpRef::OpenOwnedSession {
                    ttl_ms: *ttl_ms,
                    owner,
                },
                T::Access(a) => TxnOpRef::Access(a),
            }
        }
    }

    impl From<TxnOp> for super::TxnOp {
        fn from(op: TxnOp) -> Self {
            use super::TxnOp as T;
            match op {
                TxnOp::Create(c) => T::Create(c),
                TxnOp::CreateNullData(c) => T::Create(null_create(c)),
                TxnOp::Set(s) => T::Set(s),
                TxnOp::SetNullData(s) => T::Set(null_set(s)),
                TxnOp::Delete(d) => T::Delete(d),
                TxnOp::Multi(ops) => T::Multi(ops),
                TxnOp::OpenSession { ttl_ms } => T::OpenSession { ttl_ms },
                TxnOp::CloseSession { session_id, reason } => {
                    T::CloseSession { session_id, reason }
                }
                TxnOp::Reap { path } => T::Reap { path },
                TxnOp::Queue(q) => T::Queue(q),
                TxnOp::OpenOwnedSession { ttl_ms, owner } => T::OpenOwnedSession { ttl_ms, owner },
                TxnOp::Access(a) => T::Access(a),
            }
        }
    }

    impl<'a> From<&'a super::MultiOp> for MultiOpRef<'a> {
        fn from(op: &'a super::MultiOp) -> Self {
            use super::MultiOp as M;
            match op {
                M::Create(c) if c.null_data => MultiOpRef::CreateNullData(c),
                M::Create(c) => MultiOpRef::Create(c),
                M::Set(s) if s.null_data => MultiOpRef::SetNullData(s),
                M::Set(s) => MultiOpRef::Set(s),
                M::Delete(d) => MultiOpRef::Delete(d),
                M::Check(c) => MultiOpRef::Check(c),
            }
        }
    }

    impl From<MultiOp> for super::MultiOp {
        fn from(op: MultiOp) -> Self {
            use super::MultiOp as M;
            match op {
                MultiOp::Create(c) => M::Create(c),
                MultiOp::CreateNullData(c) => M::Create(null_create(c)),
                MultiOp::Set(s) => M::Set(s),
                MultiOp::SetNullData(s) => M::Set(null_set(s)),
                MultiOp::Delete(d) => M::Delete(d),
                MultiOp::Check(c) => M::Check(c),
            }
        }
    }

    /// A decoded create with null data: its bytes, if any were sent, are dropped.
    fn null_create(c: CreateOp) -> CreateOp {
        CreateOp {
            data: bytes::Bytes::new(),
            null_data: true,
            ..c
        }
    }

    /// A decoded set with null data: its bytes, if any were sent, are dropped.
    fn null_set(s: SetOp) -> SetOp {
        SetOp {
            data: bytes::Bytes::new(),
            null_data: true,
            ..s
        }
    }
}

/// The first byte of every encoded txn.
pub const FORMAT_V1: u8 = 1;

/// A txn could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("empty txn encoding")]
    Empty,
    #[error("unknown txn format {0}")]
    UnknownFormat(u8),
    #[error("malformed txn: {0}")]
    Malformed(#[from] postcard::Error),
}

impl Txn {
    /// Encodes the txn for the log and the wire.
    pub fn encode(&self) -> Vec<u8> {
        let out = vec![FORMAT_V1];
        // Serializing plain data into a Vec cannot fail.
        match postcard::to_extend(self, out) {
            Ok(v) => v,
            Err(e) => unreachable!("encoding a txn into a Vec failed: {e}"),
        }
    }

    /// Decodes a txn written by `encode`.
    pub fn decode(bytes: &[u8]) -> Result<Txn, DecodeError> {
        let (&format, rest) = bytes.split_first().ok_or(DecodeError::Empty)?;
        if format != FORMAT_V1 {
            return Err(DecodeError::UnknownFormat(format));
        }
        Ok(postcard::from_bytes(rest)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zxid_parts_round_trip() {
        let z = make_zxid(7, 12345);
        assert_eq!(zxid_epoch(z), 7);
        assert_eq!(zxid_counter(z), 12345);
        assert!(make_zxid(8, 0) > make_zxid(7, ZXID_COUNTER_MAX));
    }

    #[test]
    fn txn_round_trips_and_rejects_garbage() {
        let txn = Txn {
            zxid: make_zxid(1, 3),
            time_ms: 1_700_000_000_000,
            session_id: 9,
            request_id: 4,
            fence: Some(Fence {
                key: "/concord/locks/a/0000000001".into(),
                token: 7,
            }),
            op: TxnOp::Multi(vec![
                MultiOp::Create(CreateOp {
                    path: "/a".into(),
                    data: Bytes::from_static(b"x"),
                    mode: CreateMode::EphemeralSequential,
                    ttl_ms: 0,
                    null_data: false,
                }),
                MultiOp::Check(CheckOp {
                    path: "/b".into(),
                    version: -1,
                }),
            ]),
        };
        let bytes = txn.encode();
        assert_eq!(Txn::decode(&bytes).unwrap(), txn);
        assert!(matches!(Txn::decode(&[]), Err(DecodeError::Empty)));
        assert!(matches!(
            Txn::decode(&[9, 1, 2]),
            Err(DecodeError::UnknownFormat(9))
        ));
        assert!(Txn::decode(&bytes[..bytes.len() - 2]).is_err());
    }

    #[test]
    fn queue_ops_round_trip() {
        let ops = [
            QueueOp::Join {
                queue: "/concord/locks/a".into(),
                owner_id: "me".into(),
                value: Bytes::from_static(b"v"),
                permits: 3,
                only_if_free: true,
            },
            QueueOp::Leave {
                path: "/concord/locks/a/0000000000".into(),
                token: 5,
            },
            QueueOp::Update {
                path: "/concord/elections/e/0000000000".into(),
                token: 6,
                value: Bytes::new(),
            },
        ];
        for (i, op) in ops.into_iter().enumerate() {
            let txn = Txn {
                zxid: make_zxid(2, i as u64 + 1),
                time_ms: 1,
                session_id: 3,
                request_id: 0,
                fence: None,
                op: TxnOp::Queue(op),
            };
            assert_eq!(Txn::decode(&txn.encode()).unwrap(), txn);
        }
    }

    /// Null data travels as appended variants: a create or set without it keeps the
    /// bytes it had before null data existed, and one with it round-trips, at the
    /// top level and in a Multi.
    #[test]
    fn null_data_is_an_appended_variant_and_leaves_other_encodings_alone() {
        let txn = |op| Txn {
            zxid: 5,
            time_ms: 1,
            session_id: 0,
            request_id: 0,
            fence: None,
            op,
        };
        let create = |null_data| CreateOp {
            path: "/a".into(),
            data: Bytes::new(),
            mode: CreateMode::Persistent,
            ttl_ms: 0,
            null_data,
        };
        let set = |null_data| SetOp {
            path: "/a".into(),
            data: Bytes::new(),
            version: -1,
            null_data,
        };
        // Format byte, zxid 5, time 1 (zigzag 2), ids 0, 0, no fence, then the op:
        // variant, path "/a", data (length 0), mode 0, ttl 0.
        let head = [1, 5, 2, 0, 0, 0];
        let op = [b'/', b'a', 0, 0, 0];
        let plain = txn(TxnOp::Create(create(false))).encode();
        assert_eq!(plain, [&head[..], &[0, 2], &op[..]].concat());
        let null = txn(TxnOp::Create(create(true))).encode();
        assert_eq!(null, [&head[..], &[10, 2], &op[..]].concat());
        for op in [
            TxnOp::Create(create(true)),
            TxnOp::Set(set(true)),
            TxnOp::Set(set(false)),
            TxnOp::Multi(vec![
                MultiOp::Create(create(true)),
                MultiOp::Set(set(true)),
                MultiOp::Create(create(false)),
                MultiOp::Set(set(false)),
            ]),
        ] {
            let t = txn(op);
            assert_eq!(Txn::decode(&t.encode()).unwrap(), t);
        }
        // A Multi's ops: the plain ones keep their variant numbers (0 and 1).
        let multi = txn(TxnOp::Multi(vec![
            MultiOp::Create(create(false)),
            MultiOp::Create(create(true)),
        ]))
        .encode();
        assert_eq!(
            multi,
            [&head[..], &[3, 2, 0, 2], &op[..], &[4, 2], &op[..]].concat()
        );
        // Bytes sent with null data by a broken peer are dropped, not kept.
        let mut with_bytes = txn(TxnOp::Set(set(true))).encode();
        let data_len = head.len() + 1 + 3;
        assert_eq!(with_bytes[data_len], 0);
        with_bytes[data_len] = 1;
        with_bytes.insert(data_len + 1, b'x');
        let back = Txn::decode(&with_bytes).unwrap();
        assert_eq!(back, txn(TxnOp::Set(set(true))));
    }

    /// Opening a session with its owner is a variant added at the end: the older
    /// `OpenSession` keeps its encoding (postcard writes the variant index), so logs
    /// written before owners existed still decode.
    #[test]
    fn session_opens_round_trip_and_keep_their_old_encoding() {
        let old = Txn {
            zxid: 5,
            time_ms: 1,
            session_id: 0,
            request_id: 0,
            fence: None,
            op: TxnOp::OpenSession { ttl_ms: 3 },
        };
        // Format byte, zxid 5, time 1 (zigzag 2), ids 0, 0, no fence, variant 4, ttl 3 (6).
        assert_eq!(old.encode(), [1, 5, 2, 0, 0, 0, 4, 6]);
        assert_eq!(Txn::decode(&[1, 5, 2, 0, 0, 0, 4, 6]).unwrap(), old);
        let owned = Txn {
            op: TxnOp::OpenOwnedSession {
                ttl_ms: 3,
                owner: "alice".into(),
            },
            ..old
        };
        assert_eq!(Txn::decode(&owned.encode()).unwrap(), owned);
    }

    #[test]
    fn access_ops_round_trip() {
        use crate::security::{Grantee, Perms};
        let grant = Grant {
            path: "/teams/pay".into(),
            to: Grantee::Team("pay".into()),
            perms: Perms::ALL,
        };
        let ops = [
            AccessOp::Seed {
                grants: vec![grant.clone()],
                roots: vec!["/teams/pay".into()],
            },
            AccessOp::Grant(grant.clone()),
            AccessOp::Revoke(Grant {
                to: Grantee::Identity("pay-*".into()),
                ..grant
            }),
        ];
        for (i, op) in ops.into_iter().enumerate() {
            let txn = Txn {
                zxid: make_zxid(3, i as u64 + 1),
                time_ms: 1,
                session_id: 0,
                request_id: 0,
                fence: None,
                op: TxnOp::Access(op),
            };
            assert_eq!(Txn::decode(&txn.encode()).unwrap(), txn);
        }
    }
}
