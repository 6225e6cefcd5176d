//! Telemetry: logging (tracing to stderr, filtered by `RUST_LOG`, default `info`),
//! Prometheus metrics with health and readiness on their own HTTP port, and
//! OpenTelemetry traces exported over OTLP.
//!
//! ```text
//!   histogram.rs  lock-free duration histograms
//!   metrics.rs    what the write path, disk and RPCs record (`Metrics`)
//!   http.rs       /metrics, /healthz, /readyz on `metrics_addr`
//!   trace.rs      spans per RPC and along the write path, to `otlp_endpoint`
//! ```
//!
//! What it must not do: know the replica, the tree or the API. Gauges of their state
//! and the readiness rule are theirs (`replica::observe`); they hand them in as a
//! `prometheus_client` collector and an `http::Probe`.

pub mod histogram;
pub mod http;
pub mod metrics;
pub mod trace;

pub use histogram::Seconds;
pub use metrics::Metrics;

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; later calls do nothing. Colours only on a
/// terminal: a log file, a pipe or journald gets plain `key=value` fields.
pub fn init() {
    use std::io::IsTerminal;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}
