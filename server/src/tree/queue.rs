//! Lock and election queues in the tree: the reserved prefix, the queue ops (join,
//! leave, update) and the fence check. All of it runs inside `apply`, in zxid order,
//! so every server decides holders and fences the same way.
//!
//! ```text
//!   /concord                          persistent
//!   /concord/locks | /concord/elections
//!                                     persistent
//!   /concord/locks/NAME               container, data = permits ("1" for a mutex)
//!   /concord/locks/NAME/0000000007    ephemeral-sequential, owned by the session,
//!                                     data = owner_id "\n" value
//! ```
//!
//! A queue's holders are its first `permits` children in sequence order (names are
//! the 10-digit sequence, so name order is sequence order). A node's token is its
//! czxid. A fence (key, token) holds iff the node at key exists, has czxid == token,
//! and has fewer than `permits` siblings before it.
//!
//! Plain writes (Create, Set, Delete, Multi) may not touch the reserved prefix
//! (`Reserved`), so nobody can forge a holder; reads are free.
//!
//! What it must not do: IO, clocks, panics, or O(queue) work for a fence check (it
//! looks at most `permits` predecessors).

use std::ops::Bound;

use bytes::{BufMut, Bytes, BytesMut};

use super::apply::Ctx;
use super::path;
use super::*;
use crate::txn::{CreateOp, Fence, MultiOp, QueueOp, SetOp, TxnOp};

/// Everything at or below this path is written only by queue ops.
pub const RESERVED_PREFIX: &str = "/concord";
/// The folder of lock queues.
pub const LOCKS_ROOT: &str = "/concord/locks";
/// The folder of election queues.
pub const ELECTIONS_ROOT: &str = "/concord/elections";
/// Most concurrent holders of one semaphore.
pub const PERMITS_MAX: u32 = 1024;
/// Longest owner (participant) id, in bytes.
pub const OWNER_ID_BYTES_MAX: usize = 256;

/// Whether `path` is the reserved prefix or below it.
pub fn is_reserved(path: &str) -> bool {
    path == RESERVED_PREFIX
        || (path.starts_with(RESERVED_PREFIX)
            && path.as_bytes().get(RESERVED_PREFIX.len()) == Some(&b'/'))
}

/// The queue folder of lock or election `name` under `root`.
pub fn queue_path(root: &str, name: &str) -> String {
    path::join(root, name)
}

/// Whether `path` is a queue folder: `/concord/locks/NAME` or `/concord/elections/NAME`.
pub fn is_queue(path: &str) -> bool {
    let parent = path::parent(path);
    (parent == LOCKS_ROOT || parent == ELECTIONS_ROOT) && path::validate(path).is_ok()
}

/// A queue node's data: the owner id, a newline, then the value.
pub fn encode_entry(owner_id: &str, value: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(owner_id.len() + 1 + value.len());
    out.put_slice(owner_id.as_bytes());
    out.put_u8(b'\n');
    out.put_slice(value);
    out.freeze()
}

/// Splits a queue node's data into (owner id, value). Data without a newline is all
/// owner id (never written by `encode_entry`).
pub fn decode_entry(data: &Bytes) -> (String, Bytes) {
    match data.iter().position(|&b| b == b'\n') {
        Some(i) => (
            String::from_utf8_lossy(&data[..i]).into_owned(),
            data.slice(i + 1..),
        ),
        None => (String::from_utf8_lossy(data).into_owned(), Bytes::new()),
    }
}

/// One member of a queue, as reads see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueEntry {
    /// Full path of the member's node: the holder key.
    pub key: String,
    /// The czxid of the node: the fencing token (or term).
    pub token: Zxid,
    /// The owning session.
    pub session_id: u64,
    pub owner_id: String,
    pub value: Bytes,
}

/// Where one member stands in its queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuePlace {
    /// The member's token (czxid).
    pub token: Zxid,
    /// The queue's permits.
    pub permits: u32,
    /// Up to `permits` nearest predecessors (paths), nearest last. Fewer than
    /// `permits` means the member holds the lock; else it must wait until one of
    /// these goes (the only deletions that can make it a holder).
    pub window: Vec<String>,
}

impl QueuePlace {
    /// Whether the member is one of the queue's holders.
    pub fn is_holder(&self) -> bool {
        self.window.len() < self.permits as usize
    }
}

/// The permits recorded in a queue folder's data (1 if unreadable).
fn permits_of(node: &Node) -> u32 {
    std::str::from_utf8(&node.data)
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|p| (1..=PERMITS_MAX).contains(p))
        .unwrap_or(1)
}

impl DataTree {
    /// The permits of queue `queue`, if it exists.
    pub fn queue_permits(&self, queue: &str) -> Option<u32> {
        self.nodes.get(queue).map(|n| permits_of(n))
    }

    /// Up to `limit` (0: all) members of queue `queue` in order, holders first.
    pub fn queue_entries(&self, queue: &str, limit: usize) -> Vec<QueueEntry> {
        if !self.nodes.contains(queue) {
            return Vec::new();
        }
        let limit = if limit == 0 { usize::MAX } else { limit };
        self.nodes
            .children(queue, "")
            .take(limit)
            .map(|(name, node)| {
                let (owner_id, value) = decode_entry(&node.data);
                QueueEntry {
                    key: path::join(queue, name),
                    token: node.stat.czxid,
                    session_id: node.stat.ephemeral_owner,
                    owner_id,
                    value,
                }
            })
            .collect()
    }

    /// Where the member at `key` stands, or None if it is not a queue member.
    pub fn queue_place(&self, key: &str) -> Option<QueuePlace> {
        let queue = path::parent(key);
        if !is_queue(queue) {
            return None;
        }
        let node = self.nodes.get(key)?;
        let dir = self.nodes.get(queue)?;
        let permits = permits_of(dir);
        let mut window: Vec<String> = self
            .nodes
            .children_before(queue, path::name(key))
            .take(permits as usize)
            .map(|(name, _)| path::join(queue, name))
            .collect();
        window.reverse();
        Some(QueuePlace {
            token: node.stat.czxid,
            permits,
            window,
        })
    }

    /// Whether `fence` still holds: its node exists, was created by its token, and
    /// is one of its queue's holders.
    pub fn fence_holds(&self, fence: &Fence) -> bool {
        self.queue_place(&fence.key)
            .is_some_and(|place| place.token == fence.token && place.is_holder())
    }

    /// `Fenced` unless `fence` holds.
    pub(crate) fn check_fence(&self, fence: &Fence) -> Result<(), TreeError> {
        if self.fence_holds(fence) {
            return Ok(());
        }
        Err(TreeError::Fenced {
            key: fence.key.clone(),
            token: fence.token,
        })
    }

    /// `Reserved` if a plain write touches the reserved prefix.
    pub(crate) fn check_not_reserved(op: &TxnOp) -> Result<(), TreeError> {
        let reserved = |p: &str| {
            if is_reserved(p) {
                Err(TreeError::Reserved {
                    path: p.to_string(),
                })
            } else {
                Ok(())
            }
        };
        match op {
            TxnOp::Create(op) => reserved(&op.path),
            TxnOp::Set(op) => reserved(&op.path),
            TxnOp::Delete(op) => reserved(&op.path),
            TxnOp::Multi(ops) => ops.iter().try_for_each(|op| match op {
                MultiOp::Create(op) => reserved(&op.path),
                MultiOp::Set(op) => reserved(&op.path),
                MultiOp::Delete(op) => reserved(&op.path),
                MultiOp::Check(_) => Ok(()),
            }),
            _ => Ok(()),
        }
    }

    /// Applies one queue op.
    pub(crate) fn apply_queue(
        &mut self,
        op: &QueueOp,
        ctx: &Ctx,
        events: &mut Vec<Event>,
    ) -> Result<TxnResult, TreeError> {
        match op {
            QueueOp::Join {
                queue,
                owner_id,
                value,
                permits,
                only_if_free,
            } => {
                let join = Join {
                    queue,
                    owner_id,
                    value,
                    permits: *permits,
                    only_if_free: *only_if_free,
                };
                let before = self.clone();
                let result = self.join(&join, ctx, events);
                if result.is_err() {
                    *self = before;
                }
                result
            }
            QueueOp::Leave { path, token } => {
                self.member(path, *token)?;
                self.remove_node(path, ctx, events);
                Ok(TxnResult::Deleted)
            }
            QueueOp::Update { path, token, value } => {
                let owner_id = decode_entry(&self.member(path, *token)?.data).0;
                let op = SetOp {
                    path: path.clone(),
                    data: encode_entry(&owner_id, value),
                    version: -1,
                    null_data: false,
                };
                let stat = self.set(&op, ctx, events)?;
                Ok(TxnResult::Set { stat })
            }
        }
    }

    /// The queue member at `path` created by `token` (0: any), or NoNode.
    fn member(&self, path: &str, token: Zxid) -> Result<&Node, TreeError> {
        let no_node = || TreeError::NoNode {
            path: path.to_string(),
        };
        if !is_queue(path::parent(path)) {
            return Err(TreeError::BadArguments(format!(
                "{} is not a lock or election queue member",
                path::clip(path)
            )));
        }
        let node = self.nodes.get(path).ok_or_else(no_node)?;
        if token != 0 && node.stat.czxid != token {
            return Err(no_node());
        }
        Ok(node)
    }

    /// Joins (or adopts a place in) a queue; the caller restores the tree on error.
    fn join(
        &mut self,
        join: &Join<'_>,
        ctx: &Ctx,
        events: &mut Vec<Event>,
    ) -> Result<TxnResult, TreeError> {
        check_join(join)?;
        let session = self
            .sessions
            .get(&ctx.session_id)
            .ok_or(TreeError::SessionExpired {
                session_id: ctx.session_id,
            })?;
        if let Some(dir) = self.nodes.get(join.queue) {
            let permits = permits_of(dir);
            if permits != join.permits {
                return Err(TreeError::BadArguments(format!(
                    "{} has {permits} permits, not {}",
                    path::clip(join.queue),
                    join.permits
                )));
            }
        }
        if let Some((path, stat)) = self.adoptable(session, join) {
            return Ok(TxnResult::Created { path, stat });
        }
        if join.only_if_free {
            let members = self
                .nodes
                .get(join.queue)
                .map_or(0, |d| d.stat.num_children as usize);
            if members >= join.permits as usize {
                return Err(TreeError::LockHeld {
                    queue: join.queue.to_string(),
                });
            }
        }
        self.ensure_queue(join, ctx, events)?;
        let op = CreateOp {
            path: path::join(join.queue, ""),
            data: encode_entry(join.owner_id, join.value),
            mode: CreateMode::EphemeralSequential,
            ttl_ms: 0,
            null_data: false,
        };
        let (path, stat) = self.create(&op, ctx, events)?;
        Ok(TxnResult::Created { path, stat })
    }

    /// The session's existing node in the queue with the same owner id, if any.
    fn adoptable(&self, session: &SessionEntry, join: &Join<'_>) -> Option<(String, Stat)> {
        if join.owner_id.is_empty() {
            return None;
        }
        let prefix = path::join(join.queue, "");
        session
            .ephemerals
            .range::<_, str>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .take_while(|p| p.starts_with(&prefix))
            .filter(|p| path::parent(p) == join.queue)
            .filter_map(|p| self.nodes.get(p.as_str()).map(|n| (p, n)))
            .find(|(_, n)| decode_entry(&n.data).0 == join.owner_id)
            .map(|(p, n)| (p.clone(), n.stat))
    }

    /// Creates the reserved folders and the queue folder if missing.
    fn ensure_queue(
        &mut self,
        join: &Join<'_>,
        ctx: &Ctx,
        events: &mut Vec<Event>,
    ) -> Result<(), TreeError> {
        let root = path::parent(join.queue);
        let folders = [
            (RESERVED_PREFIX, CreateMode::Persistent, Bytes::new()),
            (root, CreateMode::Persistent, Bytes::new()),
            (
                join.queue,
                CreateMode::Container,
                Bytes::from(join.permits.to_string()),
            ),
        ];
        for (folder, mode, data) in folders {
            if self.nodes.contains(folder) {
                continue;
            }
            let op = CreateOp {
                path: folder.to_string(),
                data,
                mode,
                ttl_ms: 0,
                null_data: false,
            };
            self.create(&op, ctx, events)?;
        }
        Ok(())
    }
}

/// The fields of a `QueueOp::Join`, borrowed.
struct Join<'a> {
    queue: &'a str,
    owner_id: &'a str,
    value: &'a Bytes,
    permits: u32,
    only_if_free: bool,
}

/// The checks of a join that need no tree.
fn check_join(join: &Join<'_>) -> Result<(), TreeError> {
    if !is_queue(join.queue) {
        return Err(TreeError::BadArguments(format!(
            "\"{}\" is not a lock or election queue",
            path::clip(join.queue)
        )));
    }
    if !(1..=PERMITS_MAX).contains(&join.permits) {
        return Err(TreeError::BadArguments(format!(
            "permits must be in 1..={PERMITS_MAX}, got {}",
            join.permits
        )));
    }
    if join.owner_id.len() > OWNER_ID_BYTES_MAX || join.owner_id.contains('\n') {
        return Err(TreeError::BadArguments(format!(
            "owner id must be at most {OWNER_ID_BYTES_MAX} bytes without newlines"
        )));
    }
    Ok(())
}
