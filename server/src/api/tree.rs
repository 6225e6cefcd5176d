//! The `concord.v1.Tree` service: validate, convert, submit or read, answer.

use concord_proto::v1 as pb;
use concord_proto::v1::tree_server::Tree;
use tonic::{Request, Response, Status};

use super::authz::View;
use super::convert::{self, header, stat, Limits};
use super::error::{bad_arguments, error, in_op};
use super::owner::check_session;
use super::{ready_for_read, READ_WAIT_MAX};
use crate::replica::{Committed, Replica};
use crate::security::{Grants, Perms};
use crate::tree::path::{self, clip};
use crate::tree::{DataTree, NodeView, OpResult, Stat, TxnResult};
use crate::txn::{CheckOp, CreateOp, DeleteOp, MultiOp, SetOp, TxnOp, Zxid};
use concord_proto::v1::ErrorCode;

/// Most ops in one Multi.
const MULTI_OPS_MAX: usize = 1024;
/// `children_page_max` unless configured.
const DEFAULT_PAGE_MAX: usize = 1000;
/// A `Children` page ends early once its names (and stats) weigh this much, so a
/// page of long names still fits a response.
const PAGE_BYTES_MAX: usize = 1 << 20;
/// What a child's stat weighs in a response, about.
const STAT_BYTES: usize = 96;

pub struct TreeService {
    replica: Replica,
    limits: Limits,
    /// Most children in one `Children` page (`children_page_max`).
    children_page_max: usize,
}

impl TreeService {
    pub fn new(replica: Replica, limits: Limits) -> Self {
        TreeService {
            replica,
            limits,
            children_page_max: DEFAULT_PAGE_MAX,
        }
    }

    /// Caps `Children` pages at `n` children (at least 1).
    pub fn with_children_page_max(mut self, n: usize) -> Self {
        self.children_page_max = n.max(1);
        self
    }

    /// Checks the permissions `op` needs (`needs`) and, for a write carrying a
    /// session id (for its ephemerals or its request id), that it comes from the
    /// session's owner or an admin; submits it (fence key mapped in) and turns a
    /// deterministic tree error into its status, paths mapped out.
    pub(crate) async fn write(
        &self,
        view: &View,
        session_id: u64,
        request_id: u64,
        fence: Option<pb::Fence>,
        op: TxnOp,
    ) -> Result<(Zxid, TxnResult), Status> {
        let mut fence = convert::fence(fence)?;
        if let Some(f) = fence.as_mut() {
            f.key = view.ns.key_in(&f.key);
        }
        if view.is_admin() {
            check_session(&self.replica, &view.caller, session_id).await?;
            let Committed { zxid, result } = self
                .replica
                .submit_fenced(session_id, request_id, fence, op)
                .await?;
            return Ok((zxid, result.map_err(|e| view.tree_status(e))?));
        }
        // Checked here first, so that a refusal comes before any session error, and
        // again by submit_checked, against the grants the leader has when it proposes.
        let check = |t: &DataTree| check_op(view, t.grants(), &op);
        self.replica.read(check)?;
        check_session(&self.replica, &view.caller, session_id).await?;
        let Committed { zxid, result } = self
            .replica
            .submit_checked(session_id, request_id, fence, op.clone(), check)
            .await?;
        Ok((zxid, result.map_err(|e| view.tree_status(e))?))
    }

    fn header(&self, zxid: Zxid) -> Option<pb::ResponseHeader> {
        header(self.replica.server_id(), zxid)
    }

    /// The node at client path `path` as `view` may read it (None: no node), and the
    /// zxid the read reflects, once this server can answer (`ready_for_read`).
    pub(crate) async fn read_node(
        &self,
        view: &View,
        path: &str,
        min_zxid: Zxid,
        linearizable: bool,
    ) -> Result<(Zxid, Option<NodeView>), Status> {
        convert::check_path(path)?;
        let at = view.path_in(path)?;
        ready_for_read(&self.replica, min_zxid, linearizable).await?;
        self.replica.read(|t| {
            view.check(t.grants(), &at, Perms::READ)?;
            Ok::<_, Status>((t.last_zxid(), t.get(&at)))
        })
    }

    /// Every child name of client path `path` in one read, with the node's stat
    /// (ZooKeeper's getChildren, which does not page); RESPONSE_TOO_LARGE once the
    /// names pass `bytes_max`, NO_NODE if there is no node.
    pub(crate) async fn all_children(
        &self,
        view: &View,
        path: &str,
        min_zxid: Zxid,
        bytes_max: usize,
    ) -> Result<(Zxid, Stat, Vec<String>), Status> {
        convert::check_path(path)?;
        let at = view.path_in(path)?;
        ready_for_read(&self.replica, min_zxid, false).await?;
        let (zxid, parent, names) = self.replica.read(|t| {
            view.check(t.grants(), &at, Perms::READ)?;
            let parent = t.get(&at).map(|n| n.stat);
            Ok::<_, Status>((t.last_zxid(), parent, t.child_names(&at, bytes_max)))
        })?;
        let (Some(parent), Some((names, complete))) = (parent, names) else {
            return Err(no_node(path));
        };
        if !complete {
            return Err(error(
                ErrorCode::ResponseTooLarge,
                format!(
                    "the children of {} weigh more than {bytes_max} bytes",
                    clip(path)
                ),
            ));
        }
        Ok((zxid, parent, names))
    }

    /// Validates the ops of a Multi made under `session_id` (at most
    /// `MULTI_OPS_MAX`) and maps their paths into the caller's namespace; a failure
    /// names its op.
    pub(crate) fn multi_in(
        &self,
        view: &View,
        ops: Vec<MultiOp>,
        session_id: u64,
    ) -> Result<Vec<MultiOp>, Status> {
        if ops.len() > MULTI_OPS_MAX {
            return Err(bad_arguments(format!(
                "{} ops is more than the limit of {MULTI_OPS_MAX}",
                ops.len()
            )));
        }
        ops.into_iter()
            .enumerate()
            .map(|(index, op)| {
                check_multi_op(op, session_id, self.limits)
                    .and_then(|op| multi_op_in(view, op))
                    .map_err(|s| in_op(index, &s))
            })
            .collect()
    }

    /// The input limits the tree's writes are checked against.
    pub(crate) fn limits(&self) -> Limits {
        self.limits
    }
}

/// NO_NODE for client path `path`.
fn no_node(path: &str) -> Status {
    error(ErrorCode::NoNode, format!("{} does not exist", clip(path)))
}

/// A write answered with a result of the wrong kind: a server bug, reported as such.
fn unexpected(result: &TxnResult) -> Status {
    error(ErrorCode::Internal, format!("unexpected result {result:?}"))
}

#[tonic::async_trait]
impl Tree for TreeService {
    async fn create(
        &self,
        request: Request<pb::CreateRequest>,
    ) -> Result<Response<pb::CreateResponse>, Status> {
        let view = View::of(&request)?;
        let r = request.into_inner();
        let mut op =
            convert::create_op(r.path, r.data, r.mode, r.ttl_ms, r.session_id, self.limits)?;
        op.path = view.create_path_in(&op.path, op.mode.is_sequential())?;
        let (_, result) = self
            .write(
                &view,
                r.session_id,
                r.request_id,
                r.fence,
                TxnOp::Create(op),
            )
            .await?;
        let TxnResult::Created { path, stat: s } = result else {
            return Err(unexpected(&result));
        };
        // The create's own zxid: a retry answered from the retry cache was applied
        // (as a no-op) at a later `zxid`.
        Ok(Response::new(pb::CreateResponse {
            header: self.header(s.czxid),
            path: view.path_out(&path),
            stat: Some(stat(&s)),
        }))
    }

    async fn get(
        &self,
        request: Request<pb::GetRequest>,
    ) -> Result<Response<pb::GetResponse>, Status> {
        let view = View::of(&request)?;
        let r = request.into_inner();
        let (zxid, node) = self
            .read_node(&view, &r.path, r.min_zxid, r.linearizable)
            .await?;
        let node = node.ok_or_else(|| no_node(&r.path))?;
        Ok(Response::new(pb::GetResponse {
            header: self.header(zxid),
            data: node.data,
            stat: Some(stat(&node.stat)),
        }))
    }

    async fn exists(
        &self,
        request: Request<pb::ExistsRequest>,
    ) -> Result<Response<pb::ExistsResponse>, Status> {
        let view = View::of(&request)?;
        let r = request.into_inner();
        let (zxid, node) = self
            .read_node(&view, &r.path, r.min_zxid, r.linearizable)
            .await?;
        Ok(Response::new(pb::ExistsResponse {
            header: self.header(zxid),
            exists: node.is_some(),
            stat: node.map(|n| stat(&n.stat)),
        }))
    }

    async fn set(
        &self,
        request: Request<pb::SetRequest>,
    ) -> Result<Response<pb::SetResponse>, Status> {
        let view = View::of(&request)?;
        let r = request.into_inner();
        convert::check_path(&r.path)?;
        let data = convert::owned_data(&r.data, self.limits)?;
        convert::check_version(r.version)?;
        let op = TxnOp::Set(SetOp {
            path: view.path_in(&r.path)?,
            data,
            version: r.version,
            null_data: false,
        });
        let (_, result) = self
            .write(&view, r.session_id, r.request_id, r.fence, op)
            .await?;
        let TxnResult::Set { stat: s } = result else {
            return Err(unexpected(&result));
        };
        // The set's own zxid, as for a create.
        Ok(Response::new(pb::SetResponse {
            header: self.header(s.mzxid),
            stat: Some(stat(&s)),
        }))
    }

    async fn delete(
        &self,
        request: Request<pb::DeleteRequest>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        let view = View::of(&request)?;
        let r = request.into_inner();
        convert::check_path(&r.path)?;
        convert::check_version(r.version)?;
        if r.path == "/" {
            return Err(error(ErrorCode::BadPath, "the root cannot be deleted"));
        }
        let op = TxnOp::Delete(DeleteOp {
            path: view.path_in(&r.path)?,
            version: r.version,
        });
        let (zxid, result) = self
            .write(&view, r.session_id, r.request_id, r.fence, op)
            .await?;
        if result != TxnResult::Deleted {
            return Err(unexpected(&result));
        }
        Ok(Response::new(pb::DeleteResponse {
            header: self.header(zxid),
        }))
    }

    async fn children(
        &self,
        request: Request<pb::ChildrenRequest>,
    ) -> Result<Response<pb::ChildrenResponse>, Status> {
        let view = View::of(&request)?;
        let r = request.into_inner();
        convert::check_path(&r.path)?;
        let at = view.path_in(&r.path)?;
        if r.page_token.contains('/') {
            return Err(bad_arguments(
                "page_token is not one from a previous response",
            ));
        }
        ready_for_read(&self.replica, r.min_zxid, r.linearizable).await?;
        let limit = match r.page_size as usize {
            0 => self.children_page_max,
            n => n.min(self.children_page_max),
        };
        // One extra child tells whether another page follows.
        let fetch = limit + 1;
        let (zxid, parent, children) = self.replica.read(|t| {
            view.check(t.grants(), &at, Perms::READ)?;
            let parent = t.get(&at).map(|n| n.stat);
            Ok::<_, Status>((t.last_zxid(), parent, t.children(&at, &r.page_token, fetch)))
        })?;
        let (Some(parent), Some(mut children)) = (parent, children) else {
            return Err(error(
                ErrorCode::NoNode,
                format!("{} does not exist", clip(&r.path)),
            ));
        };
        let per_child = if r.with_stats { STAT_BYTES } else { 0 };
        let fits = page_len(children.iter().map(|(n, _)| n.len() + per_child));
        let mut next_page_token = String::new();
        if children.len() > limit.min(fits) {
            children.truncate(limit.min(fits));
            next_page_token = children.last().map(|(n, _)| n.clone()).unwrap_or_default();
        }
        let children = children
            .into_iter()
            .map(|(name, s)| pb::Child {
                name,
                stat: r.with_stats.then(|| stat(&s)),
            })
            .collect();
        Ok(Response::new(pb::ChildrenResponse {
            header: self.header(zxid),
            children,
            next_page_token,
            stat: Some(stat(&parent)),
        }))
    }

    async fn multi(
        &self,
        request: Request<pb::MultiRequest>,
    ) -> Result<Response<pb::MultiResponse>, Status> {
        let view = View::of(&request)?;
        let r = request.into_inner();
        // Counted by multi_in; the request's size bounds this loop meanwhile.
        let mut ops = Vec::with_capacity(r.ops.len().min(MULTI_OPS_MAX));
        for (index, op) in r.ops.into_iter().enumerate() {
            ops.push(multi_op(op).map_err(|s| in_op(index, &s))?);
        }
        let ops = self.multi_in(&view, ops, r.session_id)?;
        let (zxid, result) = self
            .write(
                &view,
                r.session_id,
                r.request_id,
                r.fence,
                TxnOp::Multi(ops),
            )
            .await?;
        let TxnResult::Multi(results) = result else {
            return Err(unexpected(&result));
        };
        Ok(Response::new(pb::MultiResponse {
            header: self.header(zxid),
            results: results.iter().map(|r| op_result(&view, r)).collect(),
        }))
    }

    async fn sync(
        &self,
        request: Request<pb::SyncRequest>,
    ) -> Result<Response<pb::SyncResponse>, Status> {
        View::of(&request)?;
        let zxid = self.replica.linearize(READ_WAIT_MAX).await?;
        Ok(Response::new(pb::SyncResponse {
            header: self.header(zxid),
        }))
    }
}

/// Converts one op of a Multi (`check_multi_op` validates it).
fn multi_op(op: pb::Op) -> Result<MultiOp, Status> {
    use pb::op::Op as O;
    let op = op.op.ok_or_else(|| bad_arguments("empty op"))?;
    Ok(match op {
        O::Create(c) => MultiOp::Create(CreateOp {
            path: c.path,
            data: c.data,
            mode: convert::create_mode(c.mode)?,
            ttl_ms: c.ttl_ms,
            null_data: false,
        }),
        O::Set(s) => MultiOp::Set(SetOp {
            path: s.path,
            data: s.data,
            version: s.version,
            null_data: false,
        }),
        O::Delete(d) => MultiOp::Delete(DeleteOp {
            path: d.path,
            version: d.version,
        }),
        O::Check(c) => MultiOp::Check(CheckOp {
            path: c.path,
            version: c.version,
        }),
    })
}

/// Checks one op of a Multi made under `session_id` as its single form is checked,
/// and returns it with its data copied.
fn check_multi_op(op: MultiOp, session_id: u64, limits: Limits) -> Result<MultiOp, Status> {
    Ok(match op {
        MultiOp::Create(c) => MultiOp::Create(convert::check_create(c, session_id, limits)?),
        MultiOp::Set(s) => {
            convert::check_path(&s.path)?;
            let data = convert::owned_data(&s.data, limits)?;
            convert::check_version(s.version)?;
            MultiOp::Set(SetOp { data, ..s })
        }
        MultiOp::Delete(d) => {
            convert::check_path(&d.path)?;
            convert::check_version(d.version)?;
            MultiOp::Delete(d)
        }
        MultiOp::Check(c) => {
            convert::check_path(&c.path)?;
            convert::check_version(c.version)?;
            MultiOp::Check(c)
        }
    })
}

/// One op of a Multi with its path mapped into the caller's namespace.
fn multi_op_in(view: &View, op: MultiOp) -> Result<MultiOp, Status> {
    Ok(match op {
        MultiOp::Create(mut c) => {
            c.path = view.create_path_in(&c.path, c.mode.is_sequential())?;
            MultiOp::Create(c)
        }
        MultiOp::Set(mut s) => {
            s.path = view.path_in(&s.path)?;
            MultiOp::Set(s)
        }
        MultiOp::Delete(mut d) => {
            if d.path == "/" {
                return Err(error(ErrorCode::BadPath, "the root cannot be deleted"));
            }
            d.path = view.path_in(&d.path)?;
            MultiOp::Delete(d)
        }
        MultiOp::Check(mut c) => {
            c.path = view.path_in(&c.path)?;
            MultiOp::Check(c)
        }
    })
}

/// The permission a write op needs, and where: create and delete on the parent (as
/// ZooKeeper), write on the node, read for a Multi's check.
fn need(op: &MultiOp) -> (&str, Perms) {
    match op {
        MultiOp::Create(c) => (path::parent(&c.path), Perms::CREATE),
        MultiOp::Set(s) => (&s.path, Perms::WRITE),
        MultiOp::Delete(d) => (path::parent(&d.path), Perms::DELETE),
        MultiOp::Check(c) => (&c.path, Perms::READ),
    }
}

/// Checks every permission a Tree write needs; the first denied op of a Multi
/// fails it as `PERMISSION_DENIED: op N: ...`.
fn check_op(view: &View, grants: &Grants, op: &TxnOp) -> Result<(), Status> {
    match op {
        TxnOp::Create(c) => view.check(grants, path::parent(&c.path), Perms::CREATE),
        TxnOp::Set(s) => view.check(grants, &s.path, Perms::WRITE),
        TxnOp::Delete(d) => view.check(grants, path::parent(&d.path), Perms::DELETE),
        TxnOp::Multi(ops) => {
            for (index, op) in ops.iter().enumerate() {
                let (at, perms) = need(op);
                if let Err(d) = grants.check(&view.caller, at, perms) {
                    return Err(view.denied(&d, Some(index)));
                }
            }
            Ok(())
        }
        _ => Err(error(ErrorCode::Internal, "not a Tree write")),
    }
}

fn op_result(view: &View, r: &OpResult) -> pb::OpResult {
    use pb::op_result::Result as R;
    let result = match r {
        OpResult::Created { path, stat: s } => R::Create(pb::CreateResult {
            path: view.path_out(path),
            stat: Some(stat(s)),
        }),
        OpResult::Set { stat: s } => R::Set(pb::SetResult {
            stat: Some(stat(s)),
        }),
        OpResult::Deleted => R::Delete(pb::DeleteResult {}),
        OpResult::Checked => R::Check(pb::CheckResult {}),
    };
    pb::OpResult {
        result: Some(result),
    }
}

/// How many of the leading items (of these weights) fit one page of
/// `PAGE_BYTES_MAX`; at least one, so every page makes progress.
fn page_len(weights: impl Iterator<Item = usize>) -> usize {
    let mut total = 0usize;
    let mut n = 0;
    for w in weights {
        total = total.saturating_add(w);
        if n > 0 && total > PAGE_BYTES_MAX {
            break;
        }
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_ends_at_its_byte_bound_but_holds_at_least_one_child() {
        assert_eq!(page_len([10, 10, 10].into_iter()), 3);
        let half = PAGE_BYTES_MAX / 2;
        assert_eq!(page_len([half, half, 1, 1].into_iter()), 2);
        assert_eq!(page_len([PAGE_BYTES_MAX * 3, 1].into_iter()), 1);
        assert_eq!(page_len(std::iter::empty()), 0);
    }
}
