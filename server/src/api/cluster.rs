//! The `concord.v1.Cluster` service: what this server is and how far it has got.

use concord_proto::v1 as pb;
use concord_proto::v1::cluster_server::Cluster;
use tonic::{Request, Response, Status};

use super::convert::header;
use super::error::error;
use crate::recipes::Recipes;
use crate::replica::Replica;
use crate::security::{quota, Security};
use concord_proto::v1::ErrorCode;

pub struct ClusterService {
    replica: Replica,
    /// The configured members (this server alone when none are), for Members.
    ensemble: Vec<crate::config::Member>,
    /// Bounds the snapshot streams served at once.
    snapshot_streams: std::sync::Arc<tokio::sync::Semaphore>,
    /// Voters and observers in the configured ensemble (1 for a lone server).
    ensemble_size: u32,
    /// For the lock and election wake-up counter.
    recipes: Recipes,
    /// For WhoAmI's quota usage (the policy, this server's per-team counters).
    security: Security,
    /// Where this server serves ZooKeeper's protocol, if it does (Status).
    zookeeper_addr: Option<std::net::SocketAddr>,
}

impl ClusterService {
    pub fn new(
        replica: Replica,
        recipes: Recipes,
        security: Security,
        ensemble: Vec<crate::config::Member>,
    ) -> Self {
        let ensemble_size = u32::try_from(ensemble.len()).unwrap_or(u32::MAX);
        ClusterService {
            replica,
            ensemble,
            snapshot_streams: std::sync::Arc::new(tokio::sync::Semaphore::new(
                super::backup::SNAPSHOT_STREAMS_MAX,
            )),
            ensemble_size,
            recipes,
            security,
            zookeeper_addr: None,
        }
    }

    /// Reports `addr` as this server's ZooKeeper port in Status.
    pub fn with_zookeeper_addr(mut self, addr: Option<std::net::SocketAddr>) -> Self {
        self.zookeeper_addr = addr;
        self
    }
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    type SnapshotStream = super::backup::SnapshotStream;

    async fn snapshot(
        &self,
        request: Request<pb::SnapshotRequest>,
    ) -> Result<Response<Self::SnapshotStream>, Status> {
        let caller = super::authz::caller_of(&request);
        super::backup::require_admin(&caller, "Snapshot")?;
        let r = request.into_inner();
        super::ready_for_read(&self.replica, r.min_zxid, r.linearizable).await?;
        super::backup::snapshot(&self.replica, &self.snapshot_streams).map(Response::new)
    }

    async fn members(
        &self,
        request: Request<pb::MembersRequest>,
    ) -> Result<Response<pb::MembersResponse>, Status> {
        let caller = super::authz::caller_of(&request);
        super::backup::require_admin(&caller, "Members")?;
        Ok(Response::new(super::backup::members(
            &self.replica,
            &self.ensemble,
        )))
    }

    async fn status(
        &self,
        _request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let r = &self.replica;
        // Watches resume from memory, or else from the newest snapshot at or before
        // the start plus the log; the log (and a snapshot) reach back to log_start.
        let storage = r.storage();
        let log_start = tokio::task::spawn_blocking(move || storage.log_start())
            .await
            .map_err(|e| error(ErrorCode::Internal, e))?
            .map_err(|e| error(ErrorCode::Internal, e))?;
        let watch_history_oldest_zxid = r.hub().oldest_resumable_zxid();
        let oldest_resumable_zxid = log_start.min(watch_history_oldest_zxid);
        let (zxid, node_count, session_count) = r.read(|t| {
            (
                t.last_zxid(),
                t.node_count() as u64,
                t.sessions().count() as u64,
            )
        });
        Ok(Response::new(pb::StatusResponse {
            header: header(r.server_id(), zxid),
            server_id: r.server_id(),
            role: role(r.role()).into(),
            zxid,
            commit_zxid: r.committed_zxid(),
            epoch: r.epoch(),
            node_count,
            session_count,
            watch_count: r.hub().watch_count() as u64,
            ensemble_size: self.ensemble_size,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            oldest_resumable_zxid,
            watch_history_oldest_zxid,
            queue_wakeups: self.recipes.wakeups(),
            leader_id: r.leader_id().unwrap_or(0),
            leader_serving: r.leads_quorum(),
            zookeeper_addr: self
                .zookeeper_addr
                .map(|a| a.to_string())
                .unwrap_or_default(),
        }))
    }

    async fn who_am_i(
        &self,
        request: Request<pb::WhoAmIRequest>,
    ) -> Result<Response<pb::WhoAmIResponse>, Status> {
        let caller = super::authz::caller_of(&request);
        Ok(Response::new(self.who_am_i_of(&caller)))
    }
}

impl ClusterService {
    /// `Cluster/WhoAmI`: answers every caller, an unmapped one included.
    pub(super) fn who_am_i_of(&self, caller: &crate::security::Caller) -> pb::WhoAmIResponse {
        use crate::security::{Access, Namespace};
        let r = &self.replica;
        let (team, namespace_root, grants, usage) = match &caller.access {
            Access::Admin => (String::new(), "/".to_string(), Vec::new(), Vec::new()),
            Access::Team(t) => {
                let view = super::authz::View {
                    caller: caller.clone(),
                    ns: Namespace::of(caller),
                };
                let grants = super::access::grants_of(r, &view);
                let limits = self.security.limits(&t.name).map(|l| &**l);
                let usage = r.read(|tree| {
                    let sessions = quota::team_sessions(self.security.policy(), t, tree);
                    quota::usage(t, tree, sessions, limits)
                });
                let usage = usage
                    .into_iter()
                    .map(|u| pb::QuotaUsage {
                        resource: u.resource.to_owned(),
                        used: u.used,
                        limit: u.limit,
                    })
                    .collect();
                (t.name.clone(), t.root.clone(), grants, usage)
            }
            Access::Unmapped => (String::new(), String::new(), Vec::new(), Vec::new()),
        };
        pb::WhoAmIResponse {
            header: header(r.server_id(), r.applied_zxid()),
            identity: caller.identity.to_string(),
            admin: caller.is_admin(),
            team,
            namespace_root,
            grants,
            usage,
        }
    }
}

fn role(role: crate::zab::Role) -> pb::Role {
    use crate::zab::Role as R;
    match role {
        R::Looking => pb::Role::Looking,
        R::Leading => pb::Role::Leader,
        R::Following => pb::Role::Follower,
        R::Observing => pb::Role::Observer,
    }
}
