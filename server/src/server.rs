//! Runs one Concord server: recover, serve gRPC (Concord's services, reflection and
//! health) on a listener the caller bound, and stop cleanly on `shutdown` or on a
//! fatal error.
//!
//! `main.rs` parses arguments and calls `run`; tests bind port 0 and pass the
//! listener in.

use std::future::Future;

use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

use crate::config::{Config, ConfigError};
use crate::replica::{Replica, StartError};

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
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(concord_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| RunError::Setup(e.to_string()))?;
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    let routes = crate::api::routes(&replica, &config)
        .add_service(reflection)
        .add_service(health_service);
    let addr = listener.local_addr().ok();
    tracing::info!(?addr, server_id = config.server_id, "serving");
    let fatal = {
        let replica = replica.clone();
        async move { replica.fatal().await }
    };
    let (fatal_tx, mut fatal_rx) = tokio::sync::oneshot::channel();
    let stop = async move {
        tokio::select! {
            () = shutdown => {}
            reason = fatal => { let _ = fatal_tx.send(reason); }
        }
    };
    let served = tonic::transport::Server::builder()
        .add_routes(routes)
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), stop)
        .await;
    replica.shutdown();
    served?;
    match fatal_rx.try_recv() {
        Ok(reason) => Err(RunError::Fatal(reason)),
        Err(_) => {
            tracing::info!("stopped");
            Ok(())
        }
    }
}
