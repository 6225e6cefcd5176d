//! Runs one Concord server: recover, serve gRPC (Concord's services, reflection and
//! health) on a listener the caller bound, and stop cleanly on `shutdown` or on a
//! fatal error.
//!
//! `main.rs` parses arguments and calls `run`; tests bind port 0 and pass the
//! listener in.

use std::future::Future;

use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;

use crate::config::{Config, ConfigError};
use crate::replica::{Replica, StartError};

/// Accepted client connections, with Nagle's algorithm off: small responses must
/// leave at once, not wait for the client's delayed ACK (a 40 ms stall otherwise).
fn incoming(listener: TcpListener) -> TcpIncoming {
    TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// How long a stopping server lets requests in flight finish.
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Why the server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("gRPC setup failed: {0}")]
    Setup(String),
    #[error("gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
    #[error("stopped: {0}")]
    Fatal(String),
}

/// Serves until `shutdown` resolves (Ok) or the server hits a fatal error (Err).
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), RunError> {
    config.validate()?;
    let replica = Replica::start(&config).await?;
    // Both reflection versions: grpcurl releases before 1.9 speak only v1alpha.
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(concord_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection()
        .build_v1()
        .map_err(|e| RunError::Setup(e.to_string()))?;
    let reflection_v1alpha = reflection()
        .build_v1alpha()
        .map_err(|e| RunError::Setup(e.to_string()))?;
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    let routes = crate::api::routes(&replica, &config)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(health_service);
    let addr = listener.local_addr().ok();
    tracing::info!(?addr, server_id = config.server_id, "serving");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tonic::transport::Server::builder()
        .add_routes(routes)
        .serve_with_incoming_shutdown(incoming(listener), async {
            let _ = stop_rx.await;
        });
    tokio::pin!(server);
    let mut fatal = None;
    let served = tokio::select! {
        served = &mut server => served,
        () = shutdown => drain(server, stop_tx).await,
        reason = replica.stopped() => {
            fatal = Some(reason);
            drain(server, stop_tx).await
        }
    };
    replica.shutdown();
    served?;
    match fatal {
        Some(reason) => Err(RunError::Fatal(reason)),
        None => {
            tracing::info!("stopped");
            Ok(())
        }
    }
}

/// Stops accepting, lets requests in flight finish for at most `DRAIN_TIMEOUT`, then
/// drops whatever is left (long-lived streams end with the connection).
async fn drain<F>(
    server: std::pin::Pin<&mut F>,
    stop: tokio::sync::oneshot::Sender<()>,
) -> Result<(), tonic::transport::Error>
where
    F: Future<Output = Result<(), tonic::transport::Error>>,
{
    let _ = stop.send(());
    match tokio::time::timeout(DRAIN_TIMEOUT, server).await {
        Ok(served) => served,
        Err(_) => {
            tracing::info!("requests still open after {DRAIN_TIMEOUT:?}; closing them");
            Ok(())
        }
    }
}
