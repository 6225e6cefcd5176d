//! Server configuration: a TOML file, overridden by command-line flags, over defaults
//! that run one server on 127.0.0.1 with data in `./concord-data`.
//!
//! Membership is static: `[[members]]` lists every server of the ensemble (id, client
//! address, peer address, voter or observer), the same list on every server. No
//! members means an ensemble of one: this server alone, a voter.
//!
//! ```toml
//! server_id = 1
//! client_addr = "127.0.0.1:7181"
//! peer_addr = "127.0.0.1:7182"
//! [[members]]
//! id = 1
//! client_addr = "127.0.0.1:7181"
//! peer_addr = "127.0.0.1:7182"
//! role = "voter"   # or "observer"
//! ```

use std::collections::HashSet;
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
    /// Where the other servers of the ensemble connect (`concord.peer.v1`); never
    /// serves clients. Unused by an ensemble of one.
    pub peer_addr: SocketAddr,
    /// Tells ensembles apart: peers whose frames carry another id are refused.
    pub cluster_id: u64,
    /// Every server of the ensemble, this one included; empty: an ensemble of one.
    pub members: Vec<Member>,
    /// Folder for the redb file (log, epochs, snapshots).
    pub data_dir: PathBuf,
    /// The clock's period: Zab heartbeats, and the cadence of session expiry,
    /// keep-alive reports and reaping.
    pub tick_ms: u64,
    /// A follower that hears nothing from its leader, or a leader that cannot count
    /// a quorum heard from, for this many ticks gives up (starts an election).
    pub sync_limit_ticks: u64,
    /// Discovery plus synchronization with a new leader must finish within this
    /// many ticks (a large snapshot to send needs more).
    pub init_limit_ticks: u64,
    /// Shortest session TTL granted (at least 2 ticks); shorter requests get it.
    pub session_ttl_min_ms: u64,
    /// Longest session TTL granted; longer requests get it.
    pub session_ttl_max_ms: u64,
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
    /// Writes waiting to be sequenced before callers are made to wait; also the most
    /// writes in flight (proposed, not yet answered).
    pub proposal_queue_max: usize,
    /// Per-watch-stream queue, in txns; a consumer this far behind is cut off.
    pub watch_queue_txns_max: usize,
    /// Txns of recent events kept in memory for watch resume.
    pub watch_history_txns_max: usize,
    /// Allow binding a non-loopback address without TLS.
    pub insecure: bool,

    // Failover for calls in flight.
    /// Longest a write waits for a leader to hand it to — this server looking (an
    /// election under way), or following a leader it cannot reach — before it fails
    /// with NOT_LEADER (nothing was done: safe to retry, elsewhere).
    pub leader_wait_ms_max: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            server_id: 1,
            client_addr: SocketAddr::from(([127, 0, 0, 1], 7181)),
            peer_addr: SocketAddr::from(([127, 0, 0, 1], 7182)),
            cluster_id: 0,
            members: Vec::new(),
            data_dir: PathBuf::from("concord-data"),
            tick_ms: 100,
            sync_limit_ticks: 5,
            init_limit_ticks: 50,
            session_ttl_min_ms: 2_000,
            session_ttl_max_ms: 60_000,
            session_ttl_default_ms: 10_000,
            node_data_bytes_max: 1 << 20,
            snapshot_every_txns: 100_000,
            snapshots_keep: 3,
            batch_txns_max: 1024,
            proposal_queue_max: 16_384,
            watch_queue_txns_max: 4096,
            watch_history_txns_max: 100_000,
            insecure: false,
            leader_wait_ms_max: 2_000,
        }
    }
}

/// Whether a member votes.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Votes in elections, epochs and acks; counts toward quorums.
    Voter,
    /// Learns committed txns and serves reads; never votes.
    Observer,
}

/// One server of the ensemble, as every server's config lists it.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Member {
    /// Its `server_id` (at least 1, unique).
    pub id: u64,
    /// Where its clients connect (followers tell clients where the leader is).
    pub client_addr: SocketAddr,
    /// Where its peer transport listens.
    pub peer_addr: SocketAddr,
    /// Voter or observer.
    pub role: Role,
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

    /// The range a requested session TTL is clamped to.
    pub fn session_ttl_range_ms(&self) -> (u64, u64) {
        (self.session_ttl_min_ms, self.session_ttl_max_ms)
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
        if self.sync_limit_ticks < 2 || self.init_limit_ticks < self.sync_limit_ticks {
            return bad("sync_limit_ticks must be at least 2, and init_limit_ticks at least that");
        }
        let (lo, hi) = self.session_ttl_range_ms();
        if lo < 2 * self.tick_ms || lo > hi {
            return Err(ConfigError::Invalid(format!(
                "need 2 x tick_ms ({}) <= session_ttl_min_ms ({lo}) <= session_ttl_max_ms ({hi})",
                2 * self.tick_ms
            )));
        }
        if !(lo..=hi).contains(&self.session_ttl_default_ms) {
            return Err(ConfigError::Invalid(format!(
                "session_ttl_default_ms must be within [session_ttl_min_ms, session_ttl_max_ms] = [{lo}, {hi}]"
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
        if self.leader_wait_ms_max == 0 {
            return bad("leader_wait_ms_max must be at least 1");
        }
        self.check_plain_text(self.client_addr)?;
        self.validate_members()
    }

    /// The ensemble: `members`, or this server alone as a voter when none are listed.
    pub fn ensemble(&self) -> Vec<Member> {
        if !self.members.is_empty() {
            return self.members.clone();
        }
        vec![Member {
            id: self.server_id,
            client_addr: self.client_addr,
            peer_addr: self.peer_addr,
            role: Role::Voter,
        }]
    }

    /// Ids unique and non-zero, this server listed with its own addresses, at least
    /// one voter, every address loopback unless `insecure`.
    fn validate_members(&self) -> Result<(), ConfigError> {
        if self.members.is_empty() {
            return Ok(());
        }
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        let mut ids = HashSet::new();
        for m in &self.members {
            if m.id == 0 || !ids.insert(m.id) {
                return invalid(format!("member id {} is zero or listed twice", m.id));
            }
            self.check_plain_text(m.client_addr)?;
            self.check_plain_text(m.peer_addr)?;
        }
        self.check_plain_text(self.peer_addr)?;
        if !self.members.iter().any(|m| m.role == Role::Voter) {
            return invalid("the members include no voter".to_owned());
        }
        let Some(me) = self.members.iter().find(|m| m.id == self.server_id) else {
            return invalid(format!(
                "server_id {} is not among the members",
                self.server_id
            ));
        };
        if me.client_addr != self.client_addr || me.peer_addr != self.peer_addr {
            return invalid(format!(
                "member {} lists {} / {} but this server binds {} / {}",
                me.id, me.client_addr, me.peer_addr, self.client_addr, self.peer_addr
            ));
        }
        Ok(())
    }

    /// Plain text only on loopback, unless `insecure`.
    fn check_plain_text(&self, addr: SocketAddr) -> Result<(), ConfigError> {
        if !addr.ip().is_loopback() && !self.insecure {
            return Err(ConfigError::Invalid(format!(
                "refusing to serve plain text on {addr}: bind 127.0.0.1, or pass --insecure"
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
        std::fs::write(
            &p,
            "tick_ms = 50\nsession_ttl_min_ms = 100\nsession_ttl_max_ms = 2000\nsession_ttl_default_ms = 1000\n",
        )
        .unwrap();
        let c = Config::from_file(&p).unwrap();
        assert_eq!(c.tick_ms, 50);
        assert_eq!(c.session_ttl_range_ms(), (100, 2000));
        c.validate().unwrap();
        let short = Config {
            session_ttl_min_ms: 99,
            ..c.clone()
        };
        assert!(short.validate().is_err(), "a TTL under two ticks");
        let hasty = Config {
            sync_limit_ticks: 1,
            ..c.clone()
        };
        assert!(hasty.validate().is_err());
        let impatient = Config {
            leader_wait_ms_max: 0,
            ..c
        };
        assert!(impatient.validate().is_err(), "a write must get a moment");
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

    const THREE: &str = r#"
server_id = 2
client_addr = "127.0.0.1:7191"
peer_addr = "127.0.0.1:7192"
cluster_id = 9
[[members]]
id = 1
client_addr = "127.0.0.1:7181"
peer_addr = "127.0.0.1:7182"
role = "voter"
[[members]]
id = 2
client_addr = "127.0.0.1:7191"
peer_addr = "127.0.0.1:7192"
role = "voter"
[[members]]
id = 3
client_addr = "127.0.0.1:7201"
peer_addr = "127.0.0.1:7202"
role = "observer"
"#;

    fn three() -> Config {
        toml::from_str(THREE).unwrap()
    }

    #[test]
    fn members_parse_and_validate() {
        let c = three();
        c.validate().unwrap();
        assert_eq!(c.cluster_id, 9);
        assert_eq!(c.members.len(), 3);
        assert_eq!(c.members[2].role, Role::Observer);
        assert_eq!(c.members[1].peer_addr, c.peer_addr);
        assert_eq!(c.ensemble(), c.members);
    }

    #[test]
    fn no_members_is_an_ensemble_of_one() {
        let c = Config::default();
        let e = c.ensemble();
        assert_eq!(e.len(), 1);
        assert_eq!((e[0].id, e[0].role), (1, Role::Voter));
        assert_eq!(e[0].client_addr, c.client_addr);
    }

    #[test]
    fn bad_membership_is_refused() {
        let mut c = three();
        c.members[2].id = 2;
        assert!(c.validate().is_err(), "duplicate id");
        let mut c = three();
        c.members[0].id = 0;
        assert!(c.validate().is_err(), "zero id");
        let mut c = three();
        c.server_id = 4;
        assert!(c.validate().is_err(), "self not listed");
        let mut c = three();
        c.members[0].role = Role::Observer;
        c.members[1].role = Role::Observer;
        assert!(c.validate().is_err(), "no voter");
        let mut c = three();
        c.peer_addr = "127.0.0.1:7999".parse().unwrap();
        assert!(
            c.validate().is_err(),
            "own entry disagrees with the bound address"
        );
        let mut c = three();
        c.members[0].peer_addr = "10.0.0.1:7182".parse().unwrap();
        assert!(c.validate().is_err(), "non-loopback peer without insecure");
        c.insecure = true;
        c.validate().unwrap();
        let bad_role = THREE.replace("\"observer\"", "\"witness\"");
        assert!(toml::from_str::<Config>(&bad_role).is_err());
        let unknown_key = THREE.replace("role = \"voter\"", "role = \"voter\"\nweight = 2");
        assert!(toml::from_str::<Config>(&unknown_key).is_err());
    }
}
