//! Runs one Concord server: recover, serve gRPC (Concord's services, reflection and
//! health) on a listener the caller bound, within the connection bounds of
//! `listen.rs`, tell the caller it serves, and stop cleanly on `shutdown` or on a
//! fatal error.
//!
//! `main.rs` parses arguments, builds the tokio `runtime` with the threads the
//! config asks for, and calls `run` on it; tests bind port 0 and pass the listener
//! in.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::{Config, ConfigError};
use crate::listen::{self, ListenLimits};
use crate::replica::{Replica, StartError};

/// The client port's bounds: the configured connection cap, fitted under the
/// open-file limit (with room for storage, the runtime and the peer links).
fn client_limits(config: &Config) -> ListenLimits {
    let members = u64::try_from(config.ensemble().len()).unwrap_or(u64::MAX);
    let reserved = listen::FDS_RESERVED.saturating_add(members.saturating_mul(8));
    let soft_limit = listen::open_files_limit();
    let connections_max =
        listen::fit_to_open_files(config.client_connections_max, soft_limit, reserved);
    if connections_max < config.client_connections_max {
        tracing::warn!(
            client_connections_max = config.client_connections_max,
            lowered_to = connections_max,
            open_files_limit = soft_limit,
            "the connection cap does not fit under the open-file limit; lowered"
        );
    }
    ListenLimits {
        connections_max,
        idle_timeout: Duration::from_millis(config.connection_idle_timeout_ms),
    }
}

/// The tokio runtime a server runs on, with the threads `config.runtime_threads` asks
/// for on this machine (`Config::runtime_threads_on`): tokio's current-thread
/// scheduler for one, its multi-thread scheduler for more. The rest of the config is
/// checked by `run`.
pub fn runtime(config: &Config) -> Result<tokio::runtime::Runtime, RunError> {
    config.check_runtime_threads()?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = config.runtime_threads_on(cpus);
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut multi = tokio::runtime::Builder::new_multi_thread();
        multi.worker_threads(threads);
        multi
    };
    let runtime = builder.enable_all().build().map_err(RunError::Runtime)?;
    tracing::info!(runtime_threads = threads, cpus, "runtime");
    Ok(runtime)
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
    #[error(transparent)]
    Tls(#[from] crate::security::TlsError),
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
    #[error("gRPC setup failed: {0}")]
    Setup(String),
    #[error("gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
    #[error("stopped: {0}")]
    Fatal(String),
}

/// Where a started server serves.
#[derive(Clone, Copy, Debug)]
pub struct Serving {
    /// The gRPC client port.
    pub client: SocketAddr,
    /// The ZooKeeper-protocol port, if `zookeeper_addr` is set.
    pub zookeeper: Option<SocketAddr>,
}

/// Serves until `shutdown` resolves (Ok) or the server hits a fatal error (Err).
/// `serving` is called with the bound addresses once recovery is done and the
/// server is about to accept (never when start-up fails).
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
    serving: impl FnOnce(Serving) + Send,
) -> Result<(), RunError> {
    config.validate()?;
    let security = crate::security::Security::new(&config)?;
    // Bad TLS files stop the start before recovery does anything.
    let tls = crate::security::ServerTls::client_port(&config)?;
    let traces = match &config.otlp_endpoint {
        Some(endpoint) => Some(
            crate::telemetry::trace::init_with_tls(
                endpoint,
                config.otlp_tls().as_ref(),
                config.otlp_sample_ratio,
                config.server_id,
            )
            .map_err(RunError::Setup)?,
        ),
        None => None,
    };
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
    let metrics = match start_metrics(&config, &replica, tls.clone()) {
        Ok(metrics) => metrics,
        Err(e) => {
            replica.shutdown();
            return Err(e);
        }
    };
    let zookeeper = match start_zookeeper(&config, &replica, &security, tls.clone()) {
        Ok(zookeeper) => zookeeper,
        Err(e) => {
            replica.shutdown();
            return Err(e);
        }
    };
    let zookeeper_addr = zookeeper.as_ref().map(|z| z.0);
    // What Cluster/Members names as this server's ZooKeeper port: the bound address
    // (a port-0 bind is known only now).
    let config = Config {
        zookeeper_addr,
        ..config
    };
    let routes = crate::api::routes(&replica, &config, &security, zookeeper_addr)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(health_service);
    let addr = listener
        .local_addr()
        .map_err(|e| RunError::Setup(format!("the client listener has no address: {e}")))?;
    let limits = client_limits(&config);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let router = tonic::transport::Server::builder()
        .max_concurrent_streams(Some(config.client_streams_per_connection_max))
        .http2_keepalive_interval(Some(Duration::from_millis(
            config.http2_keepalive_interval_ms,
        )))
        .http2_keepalive_timeout(Some(Duration::from_millis(
            config.http2_keepalive_timeout_ms,
        )))
        .add_routes(routes);
    let stop = async {
        let _ = stop_rx.await;
    };
    let tls_on = tls.is_some();
    let server: std::pin::Pin<Box<dyn Future<Output = _> + Send>> = match tls {
        Some(tls) => Box::pin(router.serve_with_incoming_shutdown(
            listen::incoming_tls(listener, limits, "client", tls),
            stop,
        )),
        None => Box::pin(
            router.serve_with_incoming_shutdown(listen::incoming(listener, limits, "client"), stop),
        ),
    };
    tokio::pin!(server);
    tracing::info!(
        %addr,
        server_id = config.server_id,
        connections_max = limits.connections_max,
        tls = tls_on,
        "serving"
    );
    serving(Serving {
        client: addr,
        zookeeper: zookeeper_addr,
    });
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
    if let Some((_, stop, task)) = zookeeper {
        let _ = stop.send(());
        let _ = task.await;
    }
    for (stop, task) in metrics {
        let _ = stop.send(());
        let _ = task.await;
    }
    if let Some(traces) = traces {
        // Sends the spans still queued; it blocks, so off the runtime's workers.
        let _ = tokio::task::spawn_blocking(move || traces.shutdown()).await;
    }
    served?;
    match fatal {
        Some(reason) => Err(RunError::Fatal(reason)),
        None => {
            tracing::info!("stopped");
            Ok(())
        }
    }
}

/// The metrics port's task and what stops it.
type MetricsTask = (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
);

/// Binds `metrics_addr` and `health_addr` (those set) and serves `/metrics`,
/// `/healthz` and `/readyz` on the first (over `tls`, the client port's, if it has
/// it), `/healthz` and `/readyz` only on the second, until stopped
/// (docs/operations.md, "Metrics").
fn start_metrics(
    config: &Config,
    replica: &Replica,
    tls: Option<crate::security::ServerTls>,
) -> Result<Vec<MetricsTask>, RunError> {
    let mut tasks: Vec<MetricsTask> = Vec::new();
    let ports = [(config.metrics_addr, true), (config.health_addr, false)];
    for (addr, metrics) in ports {
        let Some(addr) = addr else { continue };
        let what = if metrics { "metrics" } else { "health" };
        let listener = match listen::bind(addr) {
            Ok(l) => l,
            Err(e) => {
                for (stop, _) in tasks {
                    let _ = stop.send(());
                }
                return Err(RunError::Setup(format!(
                    "cannot listen for {what} on {addr}: {e}"
                )));
            }
        };
        let bound = listener.local_addr().unwrap_or(addr);
        let registry = metrics.then(|| {
            let mut registry = prometheus_client::registry::Registry::default();
            replica.metrics().register(&mut registry);
            let gauges = crate::replica::observe::Gauges::new(replica.clone(), config);
            registry.register_collector(Box::new(gauges));
            registry
        });
        let endpoint = crate::telemetry::http::Endpoint {
            registry,
            probe: std::sync::Arc::new(crate::replica::observe::Readiness(replica.clone())),
            tls: if metrics { tls.clone() } else { None },
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(crate::telemetry::http::serve(listener, endpoint, async {
            let _ = stop_rx.await;
        }));
        if metrics {
            tracing::info!(addr = %bound, tls = tls.is_some(), "serving metrics, /healthz and /readyz");
        } else {
            tracing::info!(addr = %bound, "serving /healthz and /readyz (health port)");
        }
        tasks.push((stop_tx, task));
    }
    Ok(tasks)
}

/// The ZooKeeper port's address, and what stops its task.
type ZookeeperTask = (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
);

/// Binds `zookeeper_addr`, if set, and serves ZooKeeper's client protocol there
/// (over `tls`, the client port's, if it has it) until stopped (docs/zookeeper.md).
fn start_zookeeper(
    config: &Config,
    replica: &Replica,
    security: &crate::security::Security,
    tls: Option<crate::security::ServerTls>,
) -> Result<Option<ZookeeperTask>, RunError> {
    let Some(addr) = config.zookeeper_addr else {
        return Ok(None);
    };
    let listener = listen::bind(addr)
        .map_err(|e| RunError::Setup(format!("cannot listen for zookeeper on {addr}: {e}")))?;
    let bound = listener.local_addr().unwrap_or(addr);
    // The bound address (a port-0 bind is known only now) is what getConfig names.
    let served = Config {
        zookeeper_addr: Some(bound),
        ..config.clone()
    };
    let door = std::sync::Arc::new(crate::zk::Door::new(
        replica.clone(),
        security.clone(),
        served,
    ));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tracing::info!(addr = %bound, tls = tls.is_some(), "serving ZooKeeper's protocol");
    let task = tokio::spawn(crate::zk::serve(
        listener,
        client_limits(config),
        tls,
        door,
        async {
            let _ = stop_rx.await;
        },
    ));
    Ok(Some((bound, stop_tx, task)))
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::{oneshot, Notify};

    use super::*;
    use crate::replica::crash::CRASH;

    fn config(dir: &std::path::Path) -> Config {
        Config {
            data_dir: dir.to_path_buf(),
            client_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            ..Config::default()
        }
    }

    #[test]
    fn the_runtime_has_the_threads_asked_for() {
        use tokio::runtime::RuntimeFlavor;
        let asked = |threads| Config {
            runtime_threads: threads,
            ..Config::default()
        };
        let one = runtime(&asked(1)).unwrap();
        assert_eq!(one.handle().runtime_flavor(), RuntimeFlavor::CurrentThread);
        let three = runtime(&asked(3)).unwrap();
        assert_eq!(three.handle().runtime_flavor(), RuntimeFlavor::MultiThread);
        assert_eq!(three.metrics().num_workers(), 3);
    }

    /// A pipeline that dies after the server serves stops `run` with an error (the
    /// binary exits 1), instead of serving on with health SERVING.
    #[tokio::test]
    async fn a_dead_pipeline_stops_run_with_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let notify = Arc::new(Notify::new());
        let (serving_tx, serving_rx) = oneshot::channel();
        let serving = move |s: Serving| {
            let _ = serving_tx.send(s.client);
        };
        let running = CRASH.scope(
            ("pipeline", notify.clone()),
            run(
                config(dir.path()),
                listener,
                std::future::pending(),
                serving,
            ),
        );
        tokio::pin!(running);
        tokio::select! {
            addr = serving_rx => { addr.unwrap(); }
            ended = &mut running => panic!("run ended before serving: {ended:?}"),
        }
        notify.notify_one();
        let ended = tokio::time::timeout(Duration::from_secs(10), running)
            .await
            .expect("run kept serving after its pipeline died");
        match ended {
            Err(RunError::Fatal(reason)) => assert!(reason.contains("pipeline"), "{reason}"),
            other => panic!("{other:?}"),
        }
    }

    /// A start that fails never reports serving.
    #[tokio::test]
    async fn a_failed_start_never_reports_serving() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data");
        std::fs::write(&file, b"a file, not a folder").unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let served = run(config(&file), listener, std::future::pending(), |_| {
            panic!("reported serving")
        })
        .await;
        assert!(matches!(served, Err(RunError::Start(_))), "{served:?}");
    }
}
