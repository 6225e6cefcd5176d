//! Hard quotas on what a team's namespace holds (nodes, bytes of data) and on its
//! open sessions, checked by the leader before it proposes a write (as
//! ZOOKEEPER-2593 argues: a quota checked at apply time, or on a follower, is only a
//! warning).
//!
//! ```text
//!   pipeline.propose(write) ─▶ Ledger::check(applied tree, write)
//!        growth of the write, per team root (a Multi's net effect)
//!        + usage of the applied tree (tree/usage.rs, counted incrementally)
//!        + what this leader proposed and has not applied yet (reserved)
//!        > limit? ─▶ QuotaExceeded, nothing proposed
//!        else ─▶ node.propose ─▶ zxid ─▶ Ledger::reserve(zxid, growth)
//!   pipeline.apply(txn) ─▶ Ledger::settle(txn.zxid) (the tree now counts it)
//! ```
//!
//! A write's growth is what it adds if it succeeds, judged against the applied
//! tree: a create adds a node and its data, a set the data it adds (a set that
//! shrinks data, and a delete, free nothing until applied), a Multi its net effect
//! (a delete and a create in one Multi cancel), a lock or election join its member
//! node plus the queue folders missing from the applied tree. A write whose growth
//! fits is proposed; the sum of what is applied and reserved never passes the limit,
//! so a quota is hit exactly at its limit even with writes in flight. A write that
//! grows nothing (a delete, a shrinking set) is never refused, even over a lowered
//! limit. A retry of a write the tree remembers (same session and request id) is
//! answered from the retry cache at apply time and is not checked.
//!
//! Sessions count by their owner's team (`Policy`): the ledger keeps each team's
//! open sessions as applied (recounted from the tree at start and after a snapshot
//! install, then `applied` per txn) and reserves an open (`OpenOwnedSession`) when
//! it is proposed, as it does a write's growth.
//!
//! The quota holds for every write in a team's subtree, an admin's too: it bounds
//! the subtree, not a caller.
//!
//! What it must not do: change the tree, or look at a write's caller (quotas on
//! subtrees follow from the paths; the leader may be handed the write by a follower).

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{QuotaConfig, TeamConfig};
use crate::security::{Access, Policy, Team};
use crate::tree::path;
use crate::tree::queue::encode_entry;
use crate::tree::{DataTree, TreeError, Usage};
use crate::txn::{MultiOp, QueueOp, TxnOp, Zxid};

/// The resource names used in messages and in WhoAmI's usage.
pub const NODES: &str = "nodes";
pub const DATA_BYTES: &str = "data_bytes";
pub const SESSIONS: &str = "sessions";
pub const WATCHES: &str = "watches";
pub const REQUESTS_PER_SECOND: &str = "requests_per_second";

/// One team's namespace root and limits, as the ledger needs them.
#[derive(Clone, Debug)]
struct RootQuota {
    team: String,
    quota: QuotaConfig,
}

/// What one write would add under one root (may be negative within a Multi).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Delta {
    nodes: i64,
    bytes: i64,
}

/// The leader's book of quota growth: the limits of each team root, and the growth
/// of every write it proposed and has not applied yet.
#[derive(Debug, Default)]
pub struct Ledger {
    /// By namespace root.
    roots: HashMap<String, RootQuota>,
    /// Growth reserved by proposed, unapplied writes, by zxid.
    pending: HashMap<Zxid, Vec<(String, Usage)>>,
    /// The sum of `pending`, by root.
    reserved: HashMap<String, Usage>,
    /// Who belongs to which team, to count sessions by their owner's team.
    policy: Option<Policy>,
    /// Open sessions by team, as applied (derived from the sessions' owners:
    /// `recount_sessions`, then `opened` / `closed` as txns apply).
    sessions: HashMap<String, u64>,
    /// Session opens proposed and not applied yet, by zxid, and their sum by team.
    pending_opens: HashMap<Zxid, String>,
    reserved_opens: HashMap<String, u64>,
}

impl Ledger {
    /// The limits of every team in `teams` (all roots are tracked, limited or not).
    /// Without a policy sessions are not counted (see `with_policy`).
    pub fn new(teams: &[TeamConfig]) -> Ledger {
        Ledger::of_roots(teams.iter().map(|t| (&t.name, &t.root, t.quota)))
    }

    /// The ledger of `policy`'s teams, counting sessions by their owner's team.
    pub fn with_policy(policy: &Policy) -> Ledger {
        let teams = policy.teams().iter();
        Ledger {
            policy: Some(policy.clone()),
            ..Ledger::of_roots(teams.map(|t| (&t.name, &t.root, t.quota)))
        }
    }

    /// A ledger tracking each (team, root, quota).
    fn of_roots<'a>(teams: impl Iterator<Item = (&'a String, &'a String, QuotaConfig)>) -> Ledger {
        let roots = teams
            .map(|(team, root, quota)| {
                let q = RootQuota {
                    team: team.clone(),
                    quota,
                };
                (root.clone(), q)
            })
            .collect();
        Ledger {
            roots,
            ..Ledger::default()
        }
    }

    /// The team of a session owner (None: an admin, or in no team).
    fn team_of(&self, owner: &str) -> Option<Arc<Team>> {
        match self.policy.as_ref()?.caller(Arc::from(owner)).access {
            Access::Team(team) => Some(team),
            Access::Admin | Access::Unmapped => None,
        }
    }

    /// Counts the open sessions of each team afresh from their owners (at start,
    /// and after a snapshot replaced the tree).
    pub fn recount_sessions<'o>(&mut self, owners: impl IntoIterator<Item = &'o str>) {
        self.sessions.clear();
        for owner in owners {
            if let Some(team) = self.team_of(owner) {
                *self.sessions.entry(team.name.clone()).or_default() += 1;
            }
        }
    }

    /// A session owned by `owner` was opened (its txn applied).
    pub fn opened(&mut self, owner: &str) {
        if let Some(team) = self.team_of(owner) {
            *self.sessions.entry(team.name.clone()).or_default() += 1;
        }
    }

    /// A session owned by `owner` was closed or expired (its txn applied).
    pub fn closed(&mut self, owner: &str) {
        if let Some(team) = self.team_of(owner) {
            if let Some(n) = self.sessions.get_mut(&team.name) {
                *n = n.saturating_sub(1);
            }
        }
    }

    /// Keeps the session counts in step with one applied txn: `closing_owner` is the
    /// owner of the session a CloseSession txn named, read before it applied.
    pub fn applied(
        &mut self,
        op: &TxnOp,
        result: &Result<crate::tree::TxnResult, TreeError>,
        closing_owner: Option<&str>,
    ) {
        use crate::tree::TxnResult;
        match (op, result) {
            (TxnOp::OpenOwnedSession { owner, .. }, Ok(TxnResult::SessionOpened { .. })) => {
                self.opened(owner);
            }
            (TxnOp::CloseSession { .. }, Ok(_)) => {
                if let Some(owner) = closing_owner {
                    self.closed(owner);
                }
            }
            _ => {}
        }
    }

    /// Counts sessions afresh from `tree`'s (at start, and after a snapshot from
    /// the leader replaced the tree).
    pub fn recount_sessions_of(&mut self, tree: &DataTree) {
        let owners: Vec<String> = tree.sessions().map(|(_, s)| s.owner.clone()).collect();
        self.recount_sessions(owners.iter().map(String::as_str));
    }

    /// Open sessions of team `team`, as applied.
    pub fn sessions_of(&self, team: &str) -> u64 {
        self.sessions.get(team).copied().unwrap_or(0)
    }

    /// Whether `owner` may open one more session: its team's open sessions plus
    /// the opens proposed and not applied yet, against `sessions_max`. On success,
    /// `reserve` `Reservation::open(team)` with the proposal's zxid.
    pub fn check_open(&self, owner: &str) -> Result<Option<String>, TreeError> {
        let Some(team) = self.team_of(owner) else {
            return Ok(None);
        };
        let used = self
            .sessions_of(&team.name)
            .saturating_add(self.reserved_opens.get(&team.name).copied().unwrap_or(0));
        exceeds(&team.name, SESSIONS, used, 1, team.quota.sessions_max)?;
        Ok((team.quota.sessions_max > 0).then(|| team.name.clone()))
    }

    /// The open checked by `check_open` (its `Some(team)`) was proposed as `zxid`.
    fn reserve_open(&mut self, zxid: Zxid, team: Option<String>) {
        if let Some(team) = team {
            *self.reserved_opens.entry(team.clone()).or_default() += 1;
            self.pending_opens.insert(zxid, team);
        }
    }

    /// The namespace roots whose usage the tree must count (`DataTree::track_usage`).
    pub fn roots(&self) -> Vec<String> {
        self.roots.keys().cloned().collect()
    }

    /// Whether any team has a nodes or data quota (else `check` has nothing to do).
    fn limits_any(&self) -> bool {
        self.roots
            .values()
            .any(|r| r.quota.nodes_max > 0 || r.quota.data_bytes_max > 0)
    }

    /// What proposing `op` would reserve, or the quota it would exceed. `tree` is
    /// the applied tree, counting usage under `roots()`.
    pub fn check(
        &self,
        tree: &DataTree,
        session_id: u64,
        request_id: u64,
        op: &TxnOp,
    ) -> Result<Reservation, TreeError> {
        if let TxnOp::OpenOwnedSession { owner, .. } = op {
            return Ok(Reservation::open(self.check_open(owner)?));
        }
        if !self.limits_any() || tree.remembers(session_id, request_id) {
            return Ok(Reservation::default());
        }
        let mut growth = Growth::new(tree);
        growth.op(op);
        let mut taken = Vec::new();
        for (root, delta) in growth.by_root {
            let Some(limits) = self.roots.get(&root) else {
                continue;
            };
            let adds = Usage {
                nodes: u64::try_from(delta.nodes).unwrap_or(0),
                data_bytes: u64::try_from(delta.bytes).unwrap_or(0),
            };
            if adds == Usage::default() {
                continue;
            }
            let applied = tree.usage(&root).unwrap_or_default();
            let reserved = self.reserved.get(&root).copied().unwrap_or_default();
            let q = &limits.quota;
            let used = applied.nodes.saturating_add(reserved.nodes);
            exceeds(&limits.team, NODES, used, adds.nodes, q.nodes_max)?;
            let used = applied.data_bytes.saturating_add(reserved.data_bytes);
            exceeds(
                &limits.team,
                DATA_BYTES,
                used,
                adds.data_bytes,
                q.data_bytes_max,
            )?;
            taken.push((root, adds));
        }
        Ok(Reservation { taken, open: None })
    }

    /// The write checked into `reservation` was proposed as `zxid`.
    pub fn reserve(&mut self, zxid: Zxid, reservation: Reservation) {
        self.reserve_open(zxid, reservation.open);
        if reservation.taken.is_empty() {
            return;
        }
        for (root, adds) in &reservation.taken {
            let r = self.reserved.entry(root.clone()).or_default();
            r.nodes = r.nodes.saturating_add(adds.nodes);
            r.data_bytes = r.data_bytes.saturating_add(adds.data_bytes);
        }
        self.pending.insert(zxid, reservation.taken);
    }

    /// The txn `zxid` was applied (or failed): the tree counts what it did.
    pub fn settle(&mut self, zxid: Zxid) {
        if let Some(team) = self.pending_opens.remove(&zxid) {
            if let Some(n) = self.reserved_opens.get_mut(&team) {
                *n = n.saturating_sub(1);
            }
        }
        let Some(taken) = self.pending.remove(&zxid) else {
            return;
        };
        for (root, adds) in taken {
            if let Some(r) = self.reserved.get_mut(&root) {
                r.nodes = r.nodes.saturating_sub(adds.nodes);
                r.data_bytes = r.data_bytes.saturating_sub(adds.data_bytes);
            }
        }
    }

    /// Leadership began or ended: nothing of this server's is in flight any more
    /// (a write proposed before is applied, or dropped, before it serves again).
    pub fn clear(&mut self) {
        self.pending.clear();
        self.reserved.clear();
        self.pending_opens.clear();
        self.reserved_opens.clear();
    }

    /// What proposed, unapplied writes reserve under `root` (tests and WhoAmI).
    pub fn reserved(&self, root: &str) -> Usage {
        self.reserved.get(root).copied().unwrap_or_default()
    }
}

/// What one checked write reserves, per root (empty: nothing), and for a session
/// open the team whose `sessions_max` it counts against.
#[derive(Debug, Default)]
pub struct Reservation {
    taken: Vec<(String, Usage)>,
    open: Option<String>,
}

impl Reservation {
    /// The reservation of a session open checked by `Ledger::check_open`.
    pub fn open(team: Option<String>) -> Reservation {
        Reservation {
            taken: Vec::new(),
            open: team,
        }
    }
}

/// Refuses adding `adds` to `used` past `limit` (0: unlimited).
fn exceeds(team: &str, resource: &str, used: u64, adds: u64, limit: u64) -> Result<(), TreeError> {
    if limit == 0 || adds == 0 || used.saturating_add(adds) <= limit {
        return Ok(());
    }
    Err(TreeError::QuotaExceeded {
        team: team.to_owned(),
        resource: resource.to_owned(),
        used,
        limit,
        adds,
    })
}

/// The growth of one write under each tracked root, judged against the applied
/// tree, with the write's own earlier ops (in a Multi) taken into account.
struct Growth<'a> {
    tree: &'a DataTree,
    by_root: Vec<(String, Delta)>,
    /// Data length of nodes this write already created (Some) or deleted (None).
    touched: HashMap<String, Option<u64>>,
}

impl<'a> Growth<'a> {
    fn new(tree: &'a DataTree) -> Growth<'a> {
        Growth {
            tree,
            by_root: Vec::new(),
            touched: HashMap::new(),
        }
    }

    fn op(&mut self, op: &TxnOp) {
        match op {
            TxnOp::Create(c) => self.create(&c.path, c.data.len(), c.mode.is_sequential()),
            TxnOp::Set(s) => self.set(&s.path, s.data.len()),
            TxnOp::Delete(d) => self.delete(&d.path),
            TxnOp::Multi(ops) => {
                for op in ops {
                    match op {
                        MultiOp::Create(c) => {
                            self.create(&c.path, c.data.len(), c.mode.is_sequential())
                        }
                        MultiOp::Set(s) => self.set(&s.path, s.data.len()),
                        MultiOp::Delete(d) => self.delete(&d.path),
                        MultiOp::Check(_) => {}
                    }
                }
            }
            TxnOp::Queue(QueueOp::Join {
                queue,
                owner_id,
                value,
                permits,
                ..
            }) => self.join(queue, encode_entry(owner_id, value).len(), *permits),
            TxnOp::Queue(QueueOp::Update { path, value: v, .. }) => {
                // The owner id is kept: the entry grows by the value's change.
                let owner = self
                    .tree
                    .get(path)
                    .map(|n| crate::tree::queue::decode_entry(&n.data).0)
                    .unwrap_or_default();
                self.set(path, encode_entry(&owner, v).len());
            }
            TxnOp::Queue(QueueOp::Leave { .. })
            | TxnOp::OpenSession { .. }
            | TxnOp::OpenOwnedSession { .. }
            | TxnOp::CloseSession { .. }
            | TxnOp::Reap { .. } => {}
            // Admin-only grant changes; a seed's roots are the teams' own (the root
            // node is not counted, and it holds no data).
            TxnOp::Access(_) => {}
        }
    }

    /// The length of the data at `path` as of this write's earlier ops.
    fn current(&self, node_path: &str) -> Option<u64> {
        match self.touched.get(node_path) {
            Some(known) => *known,
            None => self.tree.get(node_path).map(|n| n.data.len() as u64),
        }
    }

    fn add(&mut self, node_path: &str, nodes: i64, bytes: i64) {
        let Some(root) = self.tree.usage_root_of(node_path) else {
            return;
        };
        // The root itself, its team's "/", holds data but is no node of the quota.
        let nodes = if root == node_path { 0 } else { nodes };
        match self.by_root.iter_mut().find(|(r, _)| r == root) {
            Some((_, d)) => {
                d.nodes = d.nodes.saturating_add(nodes);
                d.bytes = d.bytes.saturating_add(bytes);
            }
            None => self.by_root.push((root.to_owned(), Delta { nodes, bytes })),
        }
    }

    fn create(&mut self, node_path: &str, data_bytes: usize, sequential: bool) {
        let bytes = i64::try_from(data_bytes).unwrap_or(i64::MAX);
        if sequential {
            // Where the node lands: the prefix and a (10-digit) sequence suffix.
            let landed = format!("{node_path}0000000000");
            self.add(&landed, 1, bytes);
        } else {
            self.add(node_path, 1, bytes);
            self.touched
                .insert(node_path.to_owned(), Some(data_bytes as u64));
        }
    }

    fn set(&mut self, node_path: &str, data_bytes: usize) {
        let before = self.current(node_path).unwrap_or(0);
        let after = data_bytes as u64;
        let change = i64::try_from(after)
            .unwrap_or(i64::MAX)
            .saturating_sub(i64::try_from(before).unwrap_or(i64::MAX));
        self.add(node_path, 0, change);
        self.touched.insert(node_path.to_owned(), Some(after));
    }

    fn delete(&mut self, node_path: &str) {
        if let Some(before) = self.current(node_path) {
            self.add(node_path, -1, -i64::try_from(before).unwrap_or(i64::MAX));
        }
        self.touched.insert(node_path.to_owned(), None);
    }

    /// A queue join: a member node, and each missing folder above it (the queue's
    /// container holds its permits as text).
    fn join(&mut self, queue: &str, entry_bytes: usize, permits: u32) {
        let member = path::join(queue, "");
        self.create(&member, entry_bytes, true);
        let mut folder = queue;
        while folder != "/" && self.current(folder).is_none() {
            let bytes = if folder == queue {
                permits.to_string().len()
            } else {
                0
            };
            self.create(folder, bytes, false);
            folder = path::parent(folder);
        }
    }
}

/// One quota of a team and how much of it is used (`concord.v1.QuotaUsage`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaUse {
    /// `NODES`, `DATA_BYTES`, `SESSIONS`, `WATCHES` or `REQUESTS_PER_SECOND`.
    pub resource: &'static str,
    pub used: u64,
    /// 0: unlimited.
    pub limit: u64,
}

/// Open sessions of `team` in `tree` (their owners in the team, by `policy`): one
/// pass over the sessions, for WhoAmI (the leader's check keeps its own counts).
pub fn team_sessions(policy: &Policy, team: &Team, tree: &DataTree) -> u64 {
    tree.sessions()
        .filter(|(_, s)| {
            let caller = policy.caller(Arc::from(s.owner.as_str()));
            caller.team().is_some_and(|t| t.name == team.name)
        })
        .count() as u64
}

/// Every quota of `team` with its usage, for WhoAmI: nodes and data bytes from the
/// applied `tree` (what this server has applied; the leader also counts writes in
/// flight), `sessions` as the caller counted them (open sessions of the team's
/// identities), watches and request rate from this server's `limits`.
pub fn usage(
    team: &crate::security::Team,
    tree: &DataTree,
    sessions: u64,
    limits: Option<&crate::security::TeamLimits>,
) -> Vec<QuotaUse> {
    let q = &team.quota;
    let applied = tree.usage(&team.root).unwrap_or_default();
    let entry = |resource, used, limit| QuotaUse {
        resource,
        used,
        limit,
    };
    vec![
        entry(NODES, applied.nodes, q.nodes_max),
        entry(DATA_BYTES, applied.data_bytes, q.data_bytes_max),
        entry(SESSIONS, sessions, q.sessions_max),
        entry(WATCHES, limits.map_or(0, |l| l.watches()), q.watches_max),
        entry(
            REQUESTS_PER_SECOND,
            limits.and_then(|l| l.requests_used()).unwrap_or(0),
            q.requests_per_second,
        ),
    ]
}

#[cfg(test)]
#[path = "quota_tests.rs"]
mod tests;
