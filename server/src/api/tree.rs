//! The `concord.v1.Tree` service: validate, convert, submit or read, answer.

use concord_proto::v1 as pb;
use concord_proto::v1::tree_server::Tree;
use tonic::{Request, Response, Status};

use super::convert::{self, header, stat, Limits};
use super::error::{bad_arguments, error, in_op};
use super::owner::{caller_of, check_session};
use super::{ready_for_read, READ_WAIT_MAX};
use crate::replica::{Committed, Replica};
use crate::security::{Caller, Security};
use crate::tree::path::clip;
use crate::tree::{OpResult, TxnResult};
use crate::txn::{CheckOp, DeleteOp, MultiOp, SetOp, TxnOp, Zxid};
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
    /// Whose sessions a write may carry (`owner.rs`).
    security: Security,
    limits: Limits,
    /// Most children in one `Children` page (`children_page_max`).
    children_page_max: usize,
}

impl TreeService {
    pub fn new(replica: Replica, security: Security, limits: Limits) -> Self {
        TreeService {
            replica,
            security,
            limits,
            children_page_max: DEFAULT_PAGE_MAX,
        }
    }

    /// Caps `Children` pages at `n` children (at least 1).
    pub fn with_children_page_max(mut self, n: usize) -> Self {
        self.children_page_max = n.max(1);
        self
    }

    /// Submits a write and turns a deterministic tree error into its status. A write
    /// carrying a session id (for its ephemerals or its request id) must come from
    /// the session's owner or an admin.
    async fn write(
        &self,
        caller: &Caller,
        session_id: u64,
        request_id: u64,
        fence: Option<pb::Fence>,
        op: TxnOp,
    ) -> Result<(Zxid, TxnResult), Status> {
        let fence = convert::fence(fence)?;
        check_session(&self.replica, caller, session_id, "write with it").await?;
        let Committed { zxid, result } = self
            .replica
            .submit_fenced(session_id, request_id, fence, op)
            .await?;
        Ok((zxid, result?))
    }

    fn header(&self, zxid: Zxid) -> Option<pb::ResponseHeader> {
        header(self.replica.server_id(), zxid)
    }
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
        let caller = caller_of(&request, self.security.policy());
        let r = request.into_inner();
        let op = convert::create_op(r.path, r.data, r.mode, r.ttl_ms, r.session_id, self.limits)?;
        let (zxid, result) = self
            .write(
                &caller,
                r.session_id,
                r.request_id,
                r.fence,
                TxnOp::Create(op),
            )
            .await?;
        let TxnResult::Created { path, stat: s } = result else {
            return Err(unexpected(&result));
        };
        Ok(Response::new(pb::CreateResponse {
            header: self.header(zxid),
            path,
            stat: Some(stat(&s)),
        }))
    }

    async fn get(
        &self,
        request: Request<pb::GetRequest>,
    ) -> Result<Response<pb::GetResponse>, Status> {
        let r = request.into_inner();
        convert::check_path(&r.path)?;
        ready_for_read(&self.replica, r.min_zxid, r.linearizable).await?;
        let (zxid, node) = self.replica.read(|t| (t.last_zxid(), t.get(&r.path)));
        let node = node.ok_or_else(|| {
            error(
                ErrorCode::NoNode,
                format!("{} does not exist", clip(&r.path)),
            )
        })?;
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
        let r = request.into_inner();
        convert::check_path(&r.path)?;
        ready_for_read(&self.replica, r.min_zxid, r.linearizable).await?;
        let (zxid, s) = self
            .replica
            .read(|t| (t.last_zxid(), t.get(&r.path).map(|n| n.stat)));
        Ok(Response::new(pb::ExistsResponse {
            header: self.header(zxid),
            exists: s.is_some(),
            stat: s.as_ref().map(stat),
        }))
    }

    async fn set(
        &self,
        request: Request<pb::SetRequest>,
    ) -> Result<Response<pb::SetResponse>, Status> {
        let caller = caller_of(&request, self.security.policy());
        let r = request.into_inner();
        convert::check_path(&r.path)?;
        let data = convert::owned_data(&r.data, self.limits)?;
        convert::check_version(r.version)?;
        let op = TxnOp::Set(SetOp {
            path: r.path,
            data,
            version: r.version,
        });
        let (zxid, result) = self
            .write(&caller, r.session_id, r.request_id, r.fence, op)
            .await?;
        let TxnResult::Set { stat: s } = result else {
            return Err(unexpected(&result));
        };
        Ok(Response::new(pb::SetResponse {
            header: self.header(zxid),
            stat: Some(stat(&s)),
        }))
    }

    async fn delete(
        &self,
        request: Request<pb::DeleteRequest>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        let caller = caller_of(&request, self.security.policy());
        let r = request.into_inner();
        convert::check_path(&r.path)?;
        convert::check_version(r.version)?;
        if r.path == "/" {
            return Err(error(ErrorCode::BadPath, "the root cannot be deleted"));
        }
        let op = TxnOp::Delete(DeleteOp {
            path: r.path,
            version: r.version,
        });
        let (zxid, result) = self
            .write(&caller, r.session_id, r.request_id, r.fence, op)
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
        let r = request.into_inner();
        convert::check_path(&r.path)?;
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
            let parent = t.get(&r.path).map(|n| n.stat);
            (
                t.last_zxid(),
                parent,
                t.children(&r.path, &r.page_token, fetch),
            )
        });
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
        let caller = caller_of(&request, self.security.policy());
        let r = request.into_inner();
        if r.ops.len() > MULTI_OPS_MAX {
            return Err(bad_arguments(format!(
                "{} ops is more than the limit of {MULTI_OPS_MAX}",
                r.ops.len()
            )));
        }
        let mut ops = Vec::with_capacity(r.ops.len());
        for (index, op) in r.ops.into_iter().enumerate() {
            let op = multi_op(op, r.session_id, self.limits).map_err(|s| in_op(index, &s))?;
            ops.push(op);
        }
        let (zxid, result) = self
            .write(
                &caller,
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
            results: results.iter().map(op_result).collect(),
        }))
    }

    async fn sync(
        &self,
        _request: Request<pb::SyncRequest>,
    ) -> Result<Response<pb::SyncResponse>, Status> {
        let zxid = self.replica.linearize(READ_WAIT_MAX).await?;
        Ok(Response::new(pb::SyncResponse {
            header: self.header(zxid),
        }))
    }
}

/// Validates and converts one op of a Multi.
fn multi_op(op: pb::Op, session_id: u64, limits: Limits) -> Result<MultiOp, Status> {
    use pb::op::Op as O;
    let op = op.op.ok_or_else(|| bad_arguments("empty op"))?;
    Ok(match op {
        O::Create(c) => MultiOp::Create(convert::create_op(
            c.path, c.data, c.mode, c.ttl_ms, session_id, limits,
        )?),
        O::Set(s) => {
            convert::check_path(&s.path)?;
            let data = convert::owned_data(&s.data, limits)?;
            convert::check_version(s.version)?;
            MultiOp::Set(SetOp {
                path: s.path,
                data,
                version: s.version,
            })
        }
        O::Delete(d) => {
            convert::check_path(&d.path)?;
            convert::check_version(d.version)?;
            MultiOp::Delete(DeleteOp {
                path: d.path,
                version: d.version,
            })
        }
        O::Check(c) => {
            convert::check_path(&c.path)?;
            convert::check_version(c.version)?;
            MultiOp::Check(CheckOp {
                path: c.path,
                version: c.version,
            })
        }
    })
}

fn op_result(r: &OpResult) -> pb::OpResult {
    use pb::op_result::Result as R;
    let result = match r {
        OpResult::Created { path, stat: s } => R::Create(pb::CreateResult {
            path: path.clone(),
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
