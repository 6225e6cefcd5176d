//! Server configuration: a TOML file, overridden by command-line flags, over defaults
//! that run one server on 127.0.0.1 with data in `./concord-data`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Everything a server needs to know before it starts.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// This server's id in the ensemble (1 for a single server).
    pub server_id: u64,
    /// Where clients connect (gRPC).
    pub client_addr: SocketAddr,
    /// Folder for the redb file (log, epochs, snapshots).
    pub data_dir: PathBuf,
    /// The logical clock's period: session TTLs are clamped to [2, 20] x tick.
    pub tick_ms: u64,
    /// TTL granted when a client asks for 0.
    pub session_ttl_default_ms: u64,
    /// Largest node data accepted, in bytes.
    pub node_data_bytes_max: usize,
    /// Take a snapshot after this many txns since the last one.
    pub snapshot_every_txns: u64,
    /// Snapshots kept on disk (with the log after the oldest of them).
    pub snapshots_keep: usize,
    /// Most txns in one group commit.
    pub batch_txns_max: usize,
    /// Writes waiting to be sequenced before callers are made to wait.
    pub proposal_queue_max: usize,
    /// Per-watch-stream queue, in txns; a consumer this far behind is cut off.
    pub watch_queue_txns_max: usize,
    /// Txns of recent events kept in memory for watch resume.
    pub watch_history_txns_max: usize,
    /// Allow binding a non-loopback address without TLS.
    pub insecure: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            server_id: 1,
            client_addr: SocketAddr::from(([127, 0, 0, 1], 7181)),
            data_dir: PathBuf::from("concord-data"),
            tick_ms: 1000,
            session_ttl_default_ms: 10_000,
            node_data_bytes_max: 1 << 20,
            snapshot_every_txns: 100_000,
            snapshots_keep: 3,
            batch_txns_max: 1024,
            proposal_queue_max: 16_384,
            watch_queue_txns_max: 4096,
            watch_history_txns_max: 100_000,
            insecure: false,
        }
    }
}

/// A configuration that cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("bad config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid setting: {0}")]
    Invalid(String),
}

impl Config {
    /// Reads a TOML file; unset keys keep their defaults, unknown keys are errors.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })
    }

    /// The range a requested session TTL is clamped to: [2, 20] x tick.
    pub fn session_ttl_range_ms(&self) -> (u64, u64) {
        (2 * self.tick_ms, 20 * self.tick_ms)
    }

    /// Checks the settings make sense together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_owned()));
        if self.server_id == 0 {
            return bad("server_id must be at least 1");
        }
        if self.tick_ms == 0 {
            return bad("tick_ms must be at least 1");
        }
        let (lo, hi) = self.session_ttl_range_ms();
        if !(lo..=hi).contains(&self.session_ttl_default_ms) {
            return Err(ConfigError::Invalid(format!(
                "session_ttl_default_ms must be within [2, 20] x tick_ms = [{lo}, {hi}]"
            )));
        }
        if self.batch_txns_max == 0 || self.proposal_queue_max == 0 {
            return bad("batch_txns_max and proposal_queue_max must be at least 1");
        }
        if self.watch_queue_txns_max == 0 || self.watch_history_txns_max == 0 {
            return bad("watch_queue_txns_max and watch_history_txns_max must be at least 1");
        }
        if self.snapshots_keep == 0 || self.snapshot_every_txns == 0 {
            return bad("snapshots_keep and snapshot_every_txns must be at least 1");
        }
        if !self.client_addr.ip().is_loopback() && !self.insecure {
            return Err(ConfigError::Invalid(format!(
                "refusing to serve plain text on {}: bind 127.0.0.1, or pass --insecure",
                self.client_addr
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_loopback() {
        let c = Config::default();
        c.validate().unwrap();
        assert!(c.client_addr.ip().is_loopback());
    }

    #[test]
    fn file_overrides_and_rejects_unknown_keys() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(&p, "tick_ms = 100\nsession_ttl_default_ms = 1000\n").unwrap();
        let c = Config::from_file(&p).unwrap();
        assert_eq!(c.tick_ms, 100);
        assert_eq!(c.session_ttl_range_ms(), (200, 2000));
        c.validate().unwrap();
        std::fs::write(&p, "tick = 100\n").unwrap();
        assert!(matches!(
            Config::from_file(&p),
            Err(ConfigError::Parse { .. })
        ));
    }

    #[test]
    fn non_loopback_needs_insecure() {
        let mut c = Config {
            client_addr: "0.0.0.0:7181".parse().unwrap(),
            ..Config::default()
        };
        assert!(c.validate().is_err());
        c.insecure = true;
        c.validate().unwrap();
        c.session_ttl_default_ms = 1;
        assert!(c.validate().is_err());
    }
}
