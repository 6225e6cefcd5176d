//! The `concord.v1.Access` service (grant, revoke, list grants), the bootstrap seed
//! of the grant table, and the grants of `Cluster/WhoAmI`.
//!
//! ```text
//!   Grant/Revoke ─▶ View (namespace) ─▶ `a` on the path? ─▶ TxnOp::Access ─▶ tree
//!   start-up ─▶ seed task: until the tree has every config grant and team root,
//!               submit AccessOp::Seed (idempotent; any server may, followers forward)
//! ```
//!
//! What it must not do: decide who may do what (security::acl does), or change
//! grants but through a txn.

use std::time::Duration;

use concord_proto::v1 as pb;
use concord_proto::v1::access_server::Access;
use concord_proto::v1::ErrorCode;
use tonic::{Request, Response, Status};

use super::authz::View;
use super::convert::{check_path, header};
use super::error::{bad_arguments, error};
use super::ready_for_read;
use crate::replica::Replica;
use crate::security::{acl::is_below, Grant, Grantee, Perms, Security};
use crate::tree::TxnResult;
use crate::txn::{AccessOp, TxnOp, Zxid};

pub struct AccessService {
    replica: Replica,
}

impl AccessService {
    pub fn new(replica: Replica) -> Self {
        AccessService { replica }
    }

    fn header(&self, zxid: Zxid) -> Option<pb::ResponseHeader> {
        header(self.replica.server_id(), zxid)
    }

    /// Checks a Grant or Revoke request, then submits it.
    async fn change(
        &self,
        view: &View,
        grant: Option<pb::Grant>,
        op: fn(Grant) -> AccessOp,
    ) -> Result<Zxid, Status> {
        let grant = grant_in(view, grant)?;
        if grant.perms.is_empty() {
            return Err(bad_arguments("perms is empty: name at least one of rwcda"));
        }
        self.replica
            .read(|t| view.check(t.grants(), &grant.path, Perms::ADMIN))?;
        let committed = self.replica.submit(0, 0, TxnOp::Access(op(grant))).await?;
        match committed.result.map_err(|e| view.tree_status(e))? {
            TxnResult::AccessChanged => Ok(committed.zxid),
            other => Err(error(ErrorCode::Internal, format!("unexpected {other:?}"))),
        }
    }
}

/// A request's grant, checked, with its path in the tree.
fn grant_in(view: &View, grant: Option<pb::Grant>) -> Result<Grant, Status> {
    let g = grant.ok_or_else(|| bad_arguments("grant is missing"))?;
    check_path(&g.path)?;
    let to = match g.to {
        Some(pb::grant::To::Identity(name)) if !name.is_empty() => Grantee::Identity(name),
        Some(pb::grant::To::Team(name)) if !name.is_empty() => Grantee::Team(name),
        _ => return Err(bad_arguments("a grant needs an identity or a team")),
    };
    let perms = Perms::parse(&g.perms).map_err(bad_arguments)?;
    Ok(Grant {
        path: view.path_in(&g.path)?,
        to,
        perms,
    })
}

/// A grant as the caller sees it, with `path` already mapped out.
pub(super) fn grant_out(path: String, g: &Grant) -> pb::Grant {
    let to = match &g.to {
        Grantee::Identity(name) => pb::grant::To::Identity(name.clone()),
        Grantee::Team(name) => pb::grant::To::Team(name.clone()),
    };
    pb::Grant {
        path,
        to: Some(to),
        perms: g.perms.to_string(),
    }
}

/// The grants that apply to the caller, paths as it sees them: a grant above its
/// namespace root shows as "/", one outside it not at all. Empty for an admin.
pub(super) fn grants_of(replica: &Replica, view: &View) -> Vec<pb::Grant> {
    if view.is_admin() {
        return Vec::new();
    }
    let grants = replica.read(|t| t.grants().applying_to(&view.caller));
    let root = view.ns.root();
    grants
        .iter()
        .filter_map(|g| {
            let path = match view.ns.path_out(&g.path) {
                Some(p) => p,
                None if is_below(&g.path, root) => "/".to_string(),
                None => return None,
            };
            Some(grant_out(path, g))
        })
        .collect()
}

#[tonic::async_trait]
impl Access for AccessService {
    async fn grant(
        &self,
        request: Request<pb::GrantRequest>,
    ) -> Result<Response<pb::GrantResponse>, Status> {
        let view = View::of(&request)?;
        let zxid = self
            .change(&view, request.into_inner().grant, AccessOp::Grant)
            .await?;
        Ok(Response::new(pb::GrantResponse {
            header: self.header(zxid),
        }))
    }

    async fn revoke(
        &self,
        request: Request<pb::RevokeRequest>,
    ) -> Result<Response<pb::RevokeResponse>, Status> {
        let view = View::of(&request)?;
        let zxid = self
            .change(&view, request.into_inner().grant, AccessOp::Revoke)
            .await?;
        Ok(Response::new(pb::RevokeResponse {
            header: self.header(zxid),
        }))
    }

    async fn list_grants(
        &self,
        request: Request<pb::ListGrantsRequest>,
    ) -> Result<Response<pb::ListGrantsResponse>, Status> {
        let view = View::of(&request)?;
        let r = request.into_inner();
        check_path(&r.path)?;
        let at = view.path_in(&r.path)?;
        ready_for_read(&self.replica, 0, false).await?;
        let (zxid, grants) = self.replica.read(|t| {
            view.check(t.grants(), &at, Perms::ADMIN)?;
            Ok::<_, Status>((t.last_zxid(), t.grants().list(&at, r.recursive)))
        })?;
        let grants = grants
            .iter()
            .filter_map(|g| Some(grant_out(view.ns.path_out(&g.path)?, g)))
            .collect();
        Ok(Response::new(pb::ListGrantsResponse {
            header: self.header(zxid),
            grants,
        }))
    }
}

/// Longest wait between two tries of the seed.
const SEED_RETRY_MAX: Duration = Duration::from_secs(5);
/// Tries of the seed before the task gives up (and logs it): about 10 minutes.
const SEED_TRIES_MAX: u32 = 130;

/// Whether the tree lacks part of the seed: a config grant never seeded, or a team
/// root that does not exist.
fn seed_missing(replica: &Replica, security: &Security) -> bool {
    let (grants, roots) = (security.seed_grants(), security.seed_roots());
    replica.read(|t| {
        grants.iter().any(|g| !t.grants().is_seeded(g)) || roots.iter().any(|r| t.get(r).is_none())
    })
}

/// Seeds the grant table and the team roots once the ensemble can take writes (see
/// the module doc); ends when nothing is missing. Runs on every server: the seed is
/// idempotent, so several servers proposing it change the tree once.
pub(super) fn spawn_seed(replica: Replica, security: Security) {
    if security.seed_grants().is_empty() && security.seed_roots().is_empty() {
        return;
    }
    tokio::spawn(async move {
        let stopped = replica.clone();
        tokio::select! {
            () = seed(&replica, &security) => {}
            _ = stopped.stopped() => {}
        }
    });
}

/// Logged once this server's seed applied, or it found nothing missing (tests
/// wait for it).
pub const SEEDED: &str = "the grant table and team roots are seeded";

/// Submits the seed until one applies (or nothing is missing, or it gave up).
pub(super) async fn seed(replica: &Replica, security: &Security) {
    let mut wait = Duration::from_millis(50);
    for _ in 0..SEED_TRIES_MAX {
        if !seed_missing(replica, security) {
            tracing::info!("{SEEDED}");
            return;
        }
        let op = TxnOp::Access(AccessOp::Seed {
            grants: security.seed_grants().to_vec(),
            roots: security.seed_roots().to_vec(),
        });
        match replica.submit(0, 0, op).await {
            Ok(c) if c.result.is_ok() => {
                tracing::info!(zxid = c.zxid, "{SEEDED}");
                return;
            }
            Ok(c) => tracing::warn!(result = ?c.result, "the access seed failed"),
            Err(e) => tracing::debug!(error = %e, "the access seed waits for a leader"),
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(SEED_RETRY_MAX);
    }
    tracing::error!("gave up seeding the grant table and team roots");
}
