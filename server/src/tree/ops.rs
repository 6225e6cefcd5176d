//! The node ops: create, set, delete, check, multi, reap.
//!
//! Each single op checks everything first and only then mutates, so a failing op
//! leaves the tree untouched without any copy. A Multi runs its ops in order on the
//! tree itself and, if one fails, puts back an O(1) clone taken before the first op
//! (the maps are persistent, so the clone shares all structure).
//!
//! Error precedence (first that applies wins), as in ZooKeeper's PrepRequestProcessor:
//! - create: BadPath, BadArguments (ttl), SessionExpired (ephemeral), NoNode (parent),
//!   NoChildrenForEphemerals, NodeExists;
//! - set / check: BadPath, NoNode, BadVersion;
//! - delete: BadPath (also for the root), NoNode, BadVersion, NotEmpty;
//! - reap: BadPath, NotReapable (also when the node is gone).
//!
//! What it must not do: IO, panics, O(tree) work per op.

use std::fmt::Write as _;

use super::apply::Ctx;
use super::path::{self, PATH_BYTES_MAX};
use super::*;
use crate::txn::{CheckOp, CreateOp, DeleteOp, MultiOp, SetOp};

/// Version that matches any version in set, delete and check.
const ANY_VERSION: i32 = -1;

impl DataTree {
    /// Creates a node; returns its final path (with the sequence suffix) and stat.
    pub(crate) fn create(
        &mut self,
        op: &CreateOp,
        ctx: &Ctx,
        events: &mut Vec<Event>,
    ) -> Result<(String, Stat), TreeError> {
        let sequential = op.mode.is_sequential();
        let mut path = checked_create_path(op)?;
        check_ttl(op)?;
        if op.mode.is_ephemeral() && !self.sessions.contains_key(&ctx.session_id) {
            return Err(TreeError::SessionExpired {
                session_id: ctx.session_id,
            });
        }
        let parent_path = path::parent(&op.path);
        let parent = self
            .nodes
            .get(parent_path)
            .ok_or_else(|| TreeError::NoNode {
                path: parent_path.to_string(),
            })?;
        if parent.mode.is_ephemeral() {
            return Err(TreeError::NoChildrenForEphemerals {
                path: parent_path.to_string(),
            });
        }
        if sequential {
            // ZooKeeper's rule: the suffix is the parent's cversion before this create.
            let _ = write!(path, "{:010}", parent.stat.cversion);
            if path.len() > PATH_BYTES_MAX {
                return Err(bad_path(&op.path, "too long with its sequence suffix"));
            }
        }
        if self.nodes.contains(&path) {
            return Err(TreeError::NodeExists { path });
        }
        let stat = self.insert_node(&path, op, ctx, events);
        Ok((path, stat))
    }

    /// Inserts a checked new node and updates its parent, session and indexes.
    fn insert_node(
        &mut self,
        path: &str,
        op: &CreateOp,
        ctx: &Ctx,
        events: &mut Vec<Event>,
    ) -> Stat {
        let ephemeral = op.mode.is_ephemeral();
        let stat = Stat {
            czxid: ctx.zxid,
            mzxid: ctx.zxid,
            pzxid: ctx.zxid,
            ctime_ms: ctx.time_ms,
            mtime_ms: ctx.time_ms,
            ephemeral_owner: if ephemeral { ctx.session_id } else { 0 },
            data_length: data_length(&op.data),
            ..Stat::default()
        };
        let node = Node {
            data: op.data.clone(),
            stat,
            mode: op.mode,
            null_data: op.null_data,
        };
        self.nodes.insert(path, Arc::new(node));
        self.count_node(path, op.data.len(), 1);
        if ephemeral {
            if let Some(session) = self.sessions.get_mut(&ctx.session_id) {
                session.ephemerals.insert(path.to_string());
            }
        }
        if is_reap_candidate(op.mode) {
            let ttl_ms = if op.mode.is_ttl() { op.ttl_ms } else { 0 };
            self.reap_candidates.insert(path.to_string(), ttl_ms);
        }
        let mut created = ctx.event(EventKind::Created, path, stat);
        created.data = op.data.clone();
        events.push(created);
        self.count_child(path, true, ctx, events);
        stat
    }

    /// Counts node `path` in (`created`) or out of its parent's children, and records
    /// the parent's child change (cversion, pzxid, a ChildrenChanged event).
    fn count_child(&mut self, path: &str, created: bool, ctx: &Ctx, events: &mut Vec<Event>) {
        let parent_path = path::parent(path);
        if let Some(parent) = self.nodes.get_mut(parent_path) {
            let stat = &mut parent.stat;
            stat.num_children = if created {
                stat.num_children.saturating_add(1)
            } else {
                stat.num_children.saturating_sub(1)
            };
            stat.cversion = stat.cversion.saturating_add(1);
            stat.pzxid = ctx.zxid;
            events.push(ctx.event(EventKind::ChildrenChanged, parent_path, parent.stat));
        }
    }

    /// Replaces a node's data; returns the new stat.
    pub(crate) fn set(
        &mut self,
        op: &SetOp,
        ctx: &Ctx,
        events: &mut Vec<Event>,
    ) -> Result<Stat, TreeError> {
        path::validate(&op.path).map_err(|reason| bad_path(&op.path, &reason))?;
        let node = self.nodes.get(&op.path).ok_or_else(|| no_node(&op.path))?;
        check_version(&op.path, op.version, node.stat.version)?;
        let node = self
            .nodes
            .get_mut(&op.path)
            .ok_or_else(|| no_node(&op.path))?;
        let prev_data = std::mem::replace(&mut node.data, op.data.clone());
        node.null_data = op.null_data;
        node.stat.version = node.stat.version.wrapping_add(1);
        node.stat.mzxid = ctx.zxid;
        node.stat.mtime_ms = ctx.time_ms;
        node.stat.data_length = data_length(&op.data);
        let stat = node.stat;
        self.count_data(&op.path, prev_data.len(), op.data.len());
        let mut event = ctx.event(EventKind::DataChanged, &op.path, stat);
        event.data = op.data.clone();
        event.prev_data = prev_data;
        events.push(event);
        Ok(stat)
    }

    /// Deletes a childless node (never the root).
    pub(crate) fn delete(
        &mut self,
        op: &DeleteOp,
        ctx: &Ctx,
        events: &mut Vec<Event>,
    ) -> Result<(), TreeError> {
        path::validate(&op.path).map_err(|reason| bad_path(&op.path, &reason))?;
        if op.path == "/" {
            return Err(bad_path(&op.path, "the root cannot be deleted"));
        }
        let node = self.nodes.get(&op.path).ok_or_else(|| no_node(&op.path))?;
        check_version(&op.path, op.version, node.stat.version)?;
        if node.has_children() {
            return Err(TreeError::NotEmpty {
                path: op.path.clone(),
            });
        }
        self.remove_node(&op.path, ctx, events);
        Ok(())
    }

    /// Checks that a node exists at the expected version; changes nothing.
    pub(crate) fn check(&self, op: &CheckOp) -> Result<(), TreeError> {
        path::validate(&op.path).map_err(|reason| bad_path(&op.path, &reason))?;
        let node = self.nodes.get(&op.path).ok_or_else(|| no_node(&op.path))?;
        check_version(&op.path, op.version, node.stat.version)
    }

    /// Deletes an empty container or expired TTL node that still qualifies.
    pub(crate) fn reap(
        &mut self,
        path: &str,
        ctx: &Ctx,
        events: &mut Vec<Event>,
    ) -> Result<(), TreeError> {
        path::validate(path).map_err(|reason| bad_path(path, &reason))?;
        match self.nodes.get(path) {
            Some(node) if qualifies_for_reap(node, self.ttl_of(path, node), ctx.time_ms) => {
                self.remove_node(path, ctx, events);
                Ok(())
            }
            _ => Err(TreeError::NotReapable {
                path: path.to_string(),
            }),
        }
    }

    /// Runs ops in order; all apply or none (then the error names the failing op).
    pub(crate) fn multi(
        &mut self,
        ops: &[MultiOp],
        ctx: &Ctx,
        events: &mut Vec<Event>,
    ) -> Result<Vec<OpResult>, TreeError> {
        let before = self.clone();
        let mut results = Vec::with_capacity(ops.len());
        for (index, op) in ops.iter().enumerate() {
            match self.multi_op(op, ctx, events) {
                Ok(result) => results.push(result),
                Err(error) => {
                    *self = before;
                    events.clear();
                    return Err(TreeError::MultiOp {
                        index,
                        source: Box::new(error),
                    });
                }
            }
        }
        Ok(results)
    }

    /// One op of a Multi.
    fn multi_op(
        &mut self,
        op: &MultiOp,
        ctx: &Ctx,
        events: &mut Vec<Event>,
    ) -> Result<OpResult, TreeError> {
        match op {
            MultiOp::Create(op) => {
                let (path, stat) = self.create(op, ctx, events)?;
                Ok(OpResult::Created { path, stat })
            }
            MultiOp::Set(op) => Ok(OpResult::Set {
                stat: self.set(op, ctx, events)?,
            }),
            MultiOp::Delete(op) => {
                self.delete(op, ctx, events)?;
                Ok(OpResult::Deleted)
            }
            MultiOp::Check(op) => {
                self.check(op)?;
                Ok(OpResult::Checked)
            }
        }
    }

    /// Removes a node that exists and has no children (checked by the caller), and
    /// updates its parent, owner session and indexes. Returns false if it could not.
    pub(crate) fn remove_node(&mut self, path: &str, ctx: &Ctx, events: &mut Vec<Event>) -> bool {
        if path == "/" || self.nodes.get(path).is_none_or(|n| n.has_children()) {
            return false;
        }
        let Some(node) = self.nodes.remove(path) else {
            return false;
        };
        self.count_node(path, node.data.len(), -1);
        let owner = node.stat.ephemeral_owner;
        if owner != 0 {
            if let Some(session) = self.sessions.get_mut(&owner) {
                session.ephemerals.remove(path);
            }
        }
        if is_reap_candidate(node.mode) {
            self.reap_candidates.remove(path);
        }
        let mut deleted = ctx.event(EventKind::Deleted, path, node.stat);
        deleted.prev_data = node.data.clone();
        events.push(deleted);
        self.count_child(path, false, ctx, events);
        true
    }
}

/// The path a create will use: validated, and for sequential modes the prefix to
/// which the suffix is appended (checked as if a digit were already there, as
/// ZooKeeper does, so "/queue/" is a valid sequential prefix).
fn checked_create_path(op: &CreateOp) -> Result<String, TreeError> {
    let sequential = op.mode.is_sequential();
    let mut path = String::with_capacity(op.path.len() + 20);
    path.push_str(&op.path);
    if sequential {
        path.push('0');
    }
    path::validate(&path).map_err(|reason| bad_path(&op.path, &reason))?;
    if sequential {
        path.truncate(op.path.len());
    } else if path == "/" {
        return Err(TreeError::NodeExists { path });
    }
    Ok(path)
}

/// TTL modes need a positive TTL; other modes must not carry one.
fn check_ttl(op: &CreateOp) -> Result<(), TreeError> {
    if op.mode.is_ttl() && op.ttl_ms <= 0 {
        return Err(TreeError::BadArguments(format!(
            "mode {:?} needs ttl_ms > 0, got {}",
            op.mode, op.ttl_ms
        )));
    }
    if !op.mode.is_ttl() && op.ttl_ms != 0 {
        return Err(TreeError::BadArguments(format!(
            "ttl_ms {} is only valid for TTL modes, not {:?}",
            op.ttl_ms, op.mode
        )));
    }
    Ok(())
}

/// Whether a node of this mode may ever be reaped (and so is indexed).
pub(crate) fn is_reap_candidate(mode: CreateMode) -> bool {
    mode == CreateMode::Container || mode.is_ttl()
}

/// The reaping rules at `now_ms`: an empty container that has had a child, or an
/// empty TTL node not modified for its TTL (`ttl_ms`).
pub(crate) fn qualifies_for_reap(node: &Node, ttl_ms: i64, now_ms: i64) -> bool {
    if node.has_children() {
        return false;
    }
    if node.mode == CreateMode::Container {
        return node.stat.cversion > 0;
    }
    node.mode.is_ttl() && now_ms.saturating_sub(node.stat.mtime_ms) >= ttl_ms
}

fn check_version(path: &str, expected: i32, actual: i32) -> Result<(), TreeError> {
    if expected == ANY_VERSION || expected == actual {
        return Ok(());
    }
    Err(TreeError::BadVersion {
        path: path.to_string(),
        expected,
        actual,
    })
}

fn data_length(data: &Bytes) -> u32 {
    u32::try_from(data.len()).unwrap_or(u32::MAX)
}

fn no_node(path: &str) -> TreeError {
    TreeError::NoNode {
        path: path.to_string(),
    }
}

fn bad_path(path: &str, reason: &str) -> TreeError {
    TreeError::BadPath {
        path: path.to_string(),
        reason: reason.to_string(),
    }
}
