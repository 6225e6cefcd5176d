//! The client-facing gRPC services (`concord.v1`): validate input, convert it, submit
//! writes to the replica or read its tree, and map every failure to a status with a
//! machine-readable code (`error`). Nothing here knows how storage or Zab work.

mod cluster;
mod convert;
mod election;
pub mod error;
mod lock;
mod session;
mod tree;
mod watch;

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

pub use convert::Limits;

/// How long a read waits for `min_zxid` or the read index before TIMEOUT.
pub(crate) const READ_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(10);

/// Waits until this server can answer a read: applied >= `min_zxid`, and at the
/// read index when `linearizable`.
pub(crate) async fn ready_for_read(
    replica: &Replica,
    min_zxid: crate::txn::Zxid,
    linearizable: bool,
) -> Result<(), tonic::Status> {
    if linearizable {
        replica.linearize(READ_WAIT_MAX).await?;
    }
    if min_zxid > replica.applied_zxid() {
        replica.wait_applied(min_zxid, READ_WAIT_MAX).await?;
    }
    Ok(())
}

/// Largest gRPC message accepted: node data plus room for the rest of a request.
fn message_bytes_max(config: &Config) -> usize {
    config.node_data_bytes_max.saturating_mul(2).max(4 << 20)
}

/// Every client service, ready to serve.
pub fn routes(replica: &Replica, config: &Config) -> Routes {
    let limits = Limits {
        node_data_bytes_max: config.node_data_bytes_max,
    };
    let max = message_bytes_max(config);
    let tree = tree::TreeService::new(replica.clone(), limits)
        .with_children_page_max(config.children_page_max);
    let tree = TreeServer::new(tree)
        .max_decoding_message_size(max)
        .max_encoding_message_size(max);
    let session = SessionServer::new(
        session::SessionService::new(
            replica.clone(),
            config.session_ttl_range_ms(),
            config.session_ttl_default_ms,
        )
        .with_list_page_max(config.session_list_page_max),
    );
    let watch =
        WatchServer::new(watch::WatchService::new(replica.clone())).max_encoding_message_size(max);
    let recipes = Recipes::new(replica.clone());
    let ensemble_size = u32::try_from(config.ensemble().len()).unwrap_or(u32::MAX);
    let cluster = ClusterServer::new(cluster::ClusterService::new(
        replica.clone(),
        recipes.clone(),
        ensemble_size,
    ));
    let lock = LockServer::new(lock::LockService::new(recipes.clone()));
    let election = ElectionServer::new(election::ElectionService::new(recipes, limits))
        .max_decoding_message_size(max)
        .max_encoding_message_size(max);
    Routes::new(tree)
        .add_service(session)
        .add_service(watch)
        .add_service(cluster)
        .add_service(lock)
        .add_service(election)
}
