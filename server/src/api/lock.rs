//! The `concord.v1.Lock` service: check input, call the recipes, answer.

use std::time::Duration;

use concord_proto::v1 as pb;
use concord_proto::v1::lock_server::Lock;
use tonic::{Request, Response, Status};

use super::authz::View;
use super::convert::header;
use super::error::bad_arguments;
use super::owner::{check_member, check_session};
use super::READ_WAIT_MAX;
use crate::recipes::{lock_queue, JoinSpec, Recipes};
use crate::security::Perms;
use crate::tree::queue::QueueEntry;
use crate::txn::Zxid;

pub struct LockService {
    recipes: Recipes,
}

impl LockService {
    pub fn new(recipes: Recipes) -> Self {
        LockService { recipes }
    }

    fn header(&self, zxid: Zxid) -> Option<pb::ResponseHeader> {
        header(self.recipes.replica().server_id(), zxid)
    }

    fn answer(
        &self,
        view: &View,
        holding: crate::recipes::Holding,
    ) -> Response<pb::AcquireResponse> {
        Response::new(pb::AcquireResponse {
            header: self.header(holding.zxid),
            key: view.path_out(&holding.key),
            token: holding.token,
        })
    }
}

/// The view of a request's caller, once it has `need` on its namespace root: every
/// lock and election of a team is a name in its namespace, so acting on one (acquire,
/// release, campaign, proclaim, resign) needs `w` there, observing one `r`.
pub(super) fn queue_view<T>(
    recipes: &Recipes,
    request: &Request<T>,
    need: Perms,
) -> Result<View, Status> {
    let view = View::of(request)?;
    recipes
        .replica()
        .read(|t| view.check(t.grants(), view.ns.root(), need))?;
    Ok(view)
}

/// A lock or election name checked as the client gave it, then the queue name behind
/// it in the caller's namespace.
pub(super) fn queue_name_in(view: &View, name: &str) -> Result<String, Status> {
    lock_queue(name).map_err(|e| view.recipe_status(e))?;
    Ok(view.ns.queue_name_in(name))
}

/// Checks and converts an acquire request; returns the join and its timeout.
pub(super) fn join_spec(
    view: &View,
    r: pb::AcquireRequest,
) -> Result<(JoinSpec, Option<Duration>), Status> {
    if r.session_id == 0 {
        return Err(bad_arguments(
            "a lock is owned by a session: set session_id (open one with Session.Open)",
        ));
    }
    let timeout = timeout_of(r.timeout_ms)?;
    let spec = JoinSpec {
        queue: lock_queue(&queue_name_in(view, &r.name)?)?,
        session_id: r.session_id,
        owner_id: r.owner_id,
        value: bytes::Bytes::new(),
        permits: r.permits.max(1),
        needs: view.needs_on_root(Perms::WRITE),
    };
    Ok((spec, timeout))
}

/// A request's timeout_ms: 0 waits without limit, negative is refused.
pub(super) fn timeout_of(timeout_ms: i64) -> Result<Option<Duration>, Status> {
    match u64::try_from(timeout_ms) {
        Ok(0) => Ok(None),
        Ok(ms) => Ok(Some(Duration::from_millis(ms))),
        Err(_) => Err(bad_arguments(format!(
            "timeout_ms must be >= 0, got {timeout_ms}"
        ))),
    }
}

fn entry(view: &View, e: QueueEntry) -> pb::LockEntry {
    pb::LockEntry {
        key: view.path_out(&e.key),
        token: e.token,
        session_id: e.session_id,
        owner_id: e.owner_id,
    }
}

#[tonic::async_trait]
impl Lock for LockService {
    async fn acquire(
        &self,
        request: Request<pb::AcquireRequest>,
    ) -> Result<Response<pb::AcquireResponse>, Status> {
        let view = queue_view(&self.recipes, &request, Perms::WRITE)?;
        let (spec, timeout) = join_spec(&view, request.into_inner())?;
        let replica = self.recipes.replica();
        check_session(replica, &view.caller, spec.session_id).await?;
        let holding = self
            .recipes
            .acquire(&spec, timeout)
            .await
            .map_err(|e| view.recipe_status(e))?;
        Ok(self.answer(&view, holding))
    }

    async fn try_acquire(
        &self,
        request: Request<pb::AcquireRequest>,
    ) -> Result<Response<pb::AcquireResponse>, Status> {
        let view = queue_view(&self.recipes, &request, Perms::WRITE)?;
        let (spec, _) = join_spec(&view, request.into_inner())?;
        let replica = self.recipes.replica();
        check_session(replica, &view.caller, spec.session_id).await?;
        let holding = self
            .recipes
            .try_acquire(&spec)
            .await
            .map_err(|e| view.recipe_status(e))?;
        Ok(self.answer(&view, holding))
    }

    async fn release(
        &self,
        request: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        let view = queue_view(&self.recipes, &request, Perms::WRITE)?;
        let r = request.into_inner();
        let key = view.queue_key_in(&r.key)?;
        let replica = self.recipes.replica();
        check_member(replica, &view.caller, &key, r.token, "release its lock").await?;
        let zxid = self
            .recipes
            .leave(&key, r.token)
            .await
            .map_err(|e| view.recipe_status(e))?;
        Ok(Response::new(pb::ReleaseResponse {
            header: self.header(zxid),
        }))
    }

    async fn holder(
        &self,
        request: Request<pb::HolderRequest>,
    ) -> Result<Response<pb::HolderResponse>, Status> {
        let view = queue_view(&self.recipes, &request, Perms::READ)?;
        let name = queue_name_in(&view, &request.into_inner().name)?;
        self.recipes.replica().in_touch().await?;
        let (zxid, holders) = self
            .recipes
            .lock_holders(&name)
            .map_err(|e| view.recipe_status(e))?;
        Ok(Response::new(pb::HolderResponse {
            header: self.header(zxid),
            holders: holders.into_iter().map(|e| entry(&view, e)).collect(),
        }))
    }

    async fn waiters(
        &self,
        request: Request<pb::WaitersRequest>,
    ) -> Result<Response<pb::WaitersResponse>, Status> {
        let view = queue_view(&self.recipes, &request, Perms::READ)?;
        let name = queue_name_in(&view, &request.into_inner().name)?;
        self.recipes.replica().in_touch().await?;
        let (zxid, members) = self
            .recipes
            .lock_members(&name)
            .map_err(|e| view.recipe_status(e))?;
        Ok(Response::new(pb::WaitersResponse {
            header: self.header(zxid),
            entries: members.into_iter().map(|e| entry(&view, e)).collect(),
        }))
    }

    async fn validate(
        &self,
        request: Request<pb::ValidateRequest>,
    ) -> Result<Response<pb::ValidateResponse>, Status> {
        let view = queue_view(&self.recipes, &request, Perms::READ)?;
        let r = request.into_inner();
        // Answer from at least the leader's commit point, never from a stale tree.
        self.recipes.replica().linearize(READ_WAIT_MAX).await?;
        let (zxid, valid) = self.recipes.validate(&view.ns.key_in(&r.key), r.token);
        Ok(Response::new(pb::ValidateResponse {
            header: self.header(zxid),
            valid,
        }))
    }
}
