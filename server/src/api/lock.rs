//! The `concord.v1.Lock` service: check input, call the recipes, answer.

use std::time::Duration;

use concord_proto::v1 as pb;
use concord_proto::v1::lock_server::Lock;
use tonic::{Request, Response, Status};

use super::convert::header;
use super::error::bad_arguments;
use super::owner::{caller_of, check_member, check_session};
use super::READ_WAIT_MAX;
use crate::recipes::{lock_queue, JoinSpec, Recipes};
use crate::security::Security;
use crate::tree::queue::QueueEntry;
use crate::txn::Zxid;

pub struct LockService {
    recipes: Recipes,
    /// Whose sessions may acquire and release (`owner.rs`).
    security: Security,
}

impl LockService {
    pub fn new(recipes: Recipes, security: Security) -> Self {
        LockService { recipes, security }
    }

    fn header(&self, zxid: Zxid) -> Option<pb::ResponseHeader> {
        header(self.recipes.replica().server_id(), zxid)
    }

    fn answer(&self, holding: crate::recipes::Holding) -> Response<pb::AcquireResponse> {
        Response::new(pb::AcquireResponse {
            header: self.header(holding.zxid),
            key: holding.key,
            token: holding.token,
        })
    }
}

/// Checks and converts an acquire request; returns the join and its timeout.
pub(super) fn join_spec(r: pb::AcquireRequest) -> Result<(JoinSpec, Option<Duration>), Status> {
    if r.session_id == 0 {
        return Err(bad_arguments(
            "a lock is owned by a session: set session_id (open one with Session.Open)",
        ));
    }
    let timeout = timeout_of(r.timeout_ms)?;
    let spec = JoinSpec {
        queue: lock_queue(&r.name)?,
        session_id: r.session_id,
        owner_id: r.owner_id,
        value: bytes::Bytes::new(),
        permits: r.permits.max(1),
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

fn entry(e: QueueEntry) -> pb::LockEntry {
    pb::LockEntry {
        key: e.key,
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
        let caller = caller_of(&request, self.security.policy());
        let (spec, timeout) = join_spec(request.into_inner())?;
        let replica = self.recipes.replica();
        check_session(replica, &caller, spec.session_id, "acquire with it").await?;
        let holding = self.recipes.acquire(&spec, timeout).await?;
        Ok(self.answer(holding))
    }

    async fn try_acquire(
        &self,
        request: Request<pb::AcquireRequest>,
    ) -> Result<Response<pb::AcquireResponse>, Status> {
        let caller = caller_of(&request, self.security.policy());
        let (spec, _) = join_spec(request.into_inner())?;
        let replica = self.recipes.replica();
        check_session(replica, &caller, spec.session_id, "acquire with it").await?;
        let holding = self.recipes.try_acquire(&spec).await?;
        Ok(self.answer(holding))
    }

    async fn release(
        &self,
        request: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        let caller = caller_of(&request, self.security.policy());
        let r = request.into_inner();
        let replica = self.recipes.replica();
        check_member(replica, &caller, &r.key, r.token, "release its lock").await?;
        let zxid = self.recipes.leave(&r.key, r.token).await?;
        Ok(Response::new(pb::ReleaseResponse {
            header: self.header(zxid),
        }))
    }

    async fn holder(
        &self,
        request: Request<pb::HolderRequest>,
    ) -> Result<Response<pb::HolderResponse>, Status> {
        let (zxid, holders) = self.recipes.lock_holders(&request.into_inner().name)?;
        Ok(Response::new(pb::HolderResponse {
            header: self.header(zxid),
            holders: holders.into_iter().map(entry).collect(),
        }))
    }

    async fn waiters(
        &self,
        request: Request<pb::WaitersRequest>,
    ) -> Result<Response<pb::WaitersResponse>, Status> {
        let (zxid, members) = self.recipes.lock_members(&request.into_inner().name)?;
        Ok(Response::new(pb::WaitersResponse {
            header: self.header(zxid),
            entries: members.into_iter().map(entry).collect(),
        }))
    }

    async fn validate(
        &self,
        request: Request<pb::ValidateRequest>,
    ) -> Result<Response<pb::ValidateResponse>, Status> {
        let r = request.into_inner();
        // Answer from at least the leader's commit point, never from a stale tree.
        self.recipes.replica().linearize(READ_WAIT_MAX).await?;
        let (zxid, valid) = self.recipes.validate(&r.key, r.token);
        Ok(Response::new(pb::ValidateResponse {
            header: self.header(zxid),
            valid,
        }))
    }
}
