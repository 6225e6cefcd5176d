//! The client-facing gRPC services (`concord.v1`): validate input, convert it, submit
//! writes to the replica or read its tree, and map every failure to a status with a
//! machine-readable code (`error`), including the failures tonic raises below the
//! handlers (`framework`). Every handler first takes its caller's view (`authz`):
//! namespace mapping and permission checks, asked of `security`. Nothing here knows
//! how storage or Zab work.

mod access;
mod authz;
mod backup;
mod cluster;
mod convert;
mod election;
pub mod error;
mod framework;
mod lock;
pub mod measure;
mod owner;
#[cfg(test)]
mod owner_tests;
#[cfg(test)]
mod quota_tests;
mod session;
mod tree;
mod watch;

use concord_proto::v1::access_server::AccessServer;
use concord_proto::v1::cluster_server::ClusterServer;
use concord_proto::v1::election_server::ElectionServer;
use concord_proto::v1::lock_server::LockServer;
use concord_proto::v1::session_server::SessionServer;
use concord_proto::v1::tree_server::TreeServer;
use concord_proto::v1::watch_server::WatchServer;
use tonic::service::Routes;

use crate::config::Config;
use crate::recipes::Recipes;
use crate::replica::Replica;
use crate::security::{Authenticated, Security};

pub use access::SEEDED;
pub use convert::Limits;

/// What the other doors (the ZooKeeper port, `zk`) call, as the gRPC services do:
/// the caller's view, the tree's reads and writes, sessions, and input checks.
pub(crate) mod shared {
    pub(crate) use super::authz::View;
    pub(crate) use super::convert::{check_create, check_path, check_version, owned_data};
    pub(crate) use super::error::code_of;
    #[cfg(test)]
    pub(crate) use super::error::error;
    pub(crate) use super::owner::may_use_session;
    pub(crate) use super::session::{close_session, open_session};
    pub(crate) use super::tree::TreeService;
    pub(crate) use super::watch::Filter;
    pub(crate) use super::{ready_for_read, READ_WAIT_MAX};
}

/// How long a read waits for `min_zxid` or the read index before TIMEOUT.
pub(crate) const READ_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(10);

/// Waits until this server can answer a read: in touch with a leader (within
/// `leader_wait_ms_max` of losing it, `Replica::in_touch`), applied >= `min_zxid`,
/// and at the read index when `linearizable`.
pub(crate) async fn ready_for_read(
    replica: &Replica,
    min_zxid: crate::txn::Zxid,
    linearizable: bool,
) -> Result<(), tonic::Status> {
    if linearizable {
        replica.linearize(READ_WAIT_MAX).await?;
    } else {
        replica.in_touch().await?;
    }
    if min_zxid > replica.applied_zxid() {
        replica.wait_applied(min_zxid, READ_WAIT_MAX).await?;
    }
    Ok(())
}

/// Largest response message sent: the request limit plus room for what a write's
/// answer adds to its request (sequence suffixes and a Stat per op of a Multi), so
/// only a read can fail with RESPONSE_TOO_LARGE.
fn response_bytes_max(config: &Config) -> usize {
    config.request_bytes_max().saturating_add(1 << 20)
}

/// Every client service, ready to serve; every failure carries a Concord code, and
/// every request its caller (`security::caller`).
/// `zookeeper_addr` is the ZooKeeper port's bound address, if it serves, for Status.
pub fn routes(
    replica: &Replica,
    config: &Config,
    security: &Security,
    zookeeper_addr: Option<std::net::SocketAddr>,
) -> Routes {
    use framework::Coded;
    let limits = Limits {
        node_data_bytes_max: config.node_data_bytes_max,
    };
    let (max_in, max_out) = (config.request_bytes_max(), response_bytes_max(config));
    let tree = tree::TreeService::new(replica.clone(), limits)
        .with_children_page_max(config.children_page_max);
    let tree = TreeServer::new(tree)
        .max_decoding_message_size(max_in)
        .max_encoding_message_size(max_out);
    let session = SessionServer::new(
        session::SessionService::new(
            replica.clone(),
            security.clone(),
            config.session_ttl_range_ms(),
            config.session_ttl_default_ms,
        )
        .with_list_page_max(config.session_list_page_max),
    )
    .max_decoding_message_size(max_in)
    .max_encoding_message_size(max_out);
    let watch = WatchServer::new(watch::WatchService::new(replica.clone()))
        .max_decoding_message_size(max_in)
        .max_encoding_message_size(max_out);
    let recipes = Recipes::new(replica.clone());
    let cluster = ClusterServer::new(
        cluster::ClusterService::new(
            replica.clone(),
            recipes.clone(),
            security.clone(),
            config.ensemble(),
        )
        .with_zookeeper_addr(zookeeper_addr),
    )
    .max_decoding_message_size(max_in)
    .max_encoding_message_size(max_out);
    let lock = LockServer::new(lock::LockService::new(recipes.clone()))
        .max_decoding_message_size(max_in)
        .max_encoding_message_size(max_out);
    let election = ElectionServer::new(election::ElectionService::new(recipes, limits))
        .max_decoding_message_size(max_in)
        .max_encoding_message_size(max_out);
    let access = AccessServer::new(access::AccessService::new(replica.clone()))
        .max_decoding_message_size(max_in)
        .max_encoding_message_size(max_out);
    access::spawn_seed(replica.clone(), security.clone());
    // Every call is coded, measured by the code the client sees, and given its
    // caller.
    let metrics = replica.metrics();
    fn m<S>(s: S, metrics: &std::sync::Arc<crate::telemetry::Metrics>) -> Coded<S> {
        Coded::measured(s, metrics.clone())
    }
    let mut routes = Routes::new(m(Authenticated::new(tree, security.clone()), metrics))
        .add_service(m(Authenticated::new(access, security.clone()), metrics))
        .add_service(m(Authenticated::new(session, security.clone()), metrics))
        .add_service(m(Authenticated::new(watch, security.clone()), metrics))
        .add_service(m(Authenticated::new(cluster, security.clone()), metrics))
        .add_service(m(Authenticated::new(lock, security.clone()), metrics))
        .add_service(m(Authenticated::new(election, security.clone()), metrics));
    // A path no service serves (services added later keep this fallback).
    let router = std::mem::take(routes.axum_router_mut());
    *routes.axum_router_mut() = router.fallback(framework::unknown_service);
    routes
}

#[cfg(test)]
#[path = "security_tests.rs"]
mod security_tests;
#[cfg(test)]
#[path = "watch_tests.rs"]
mod watch_tests;
