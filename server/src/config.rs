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
//! # peer_identity = "concord-peer-1"   # its peer certificate's identity (default)
//!
//! admins = ["admin"]          # identities with the admin role
//! local_identity = "admin"    # a caller without a client certificate
//! [[teams]]
//! name = "payments"
//! root = "/teams/payments"    # what its clients see as "/"
//! identities = ["payments-*"]
//! [teams.quota]               # hard limits, 0 or absent: unlimited
//! nodes_max = 10000
//! data_bytes_max = 104857600
//!
//! cert_file = "certs/server-1.pem"        # TLS on the client port (docs/security.md)
//! key_file = "certs/server-1-key.pem"
//! trusted_ca_file = "certs/ca.pem"        # client certificates required
//! peer_cert_file = "certs/peer-1.pem"     # mTLS between the members
//! peer_key_file = "certs/peer-1-key.pem"
//! peer_trusted_ca_file = "certs/ca.pem"
//!
//! [[grants]]                  # seeded once, besides each team's rwcda on its root
//! path = "/shared/config"
//! team = "payments"           # or identity = "pattern"
//! perms = "r"
//! ```

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use crate::address::Address;

/// Most `runtime_threads` accepted: far above any machine's useful count, low enough
/// that a typo cannot ask for a million threads.
pub const RUNTIME_THREADS_MAX: usize = 1024;

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
    /// Take a snapshot after this many bytes of txns since the last one (whichever
    /// of this and `snapshot_every_txns` comes first). The Zab core keeps the txns
    /// since its newest snapshot in memory, so this bounds that memory by bytes.
    pub snapshot_every_bytes: u64,
    /// Most bytes of txns the Zab core's in-memory log may hold (those since the
    /// newest snapshot, while the next one is written): at this, a leader takes no
    /// new writes until the snapshot compacts the log (writers wait), and a follower
    /// or observer reads nothing more from its peers until its own snapshot does
    /// (the leader's proposals wait in the bounded peer queues). Above
    /// `snapshot_every_bytes`.
    pub log_memory_bytes_max: u64,
    /// Snapshots kept on disk (with the log after the oldest of them).
    pub snapshots_keep: usize,
    /// After a snapshot and its purge, the redb file is compacted (its free space
    /// given back to the file system; writes wait meanwhile) when at least this many
    /// of its bytes are free and they are over two thirds of the file. 0: never.
    pub storage_compact_free_bytes_min: u64,
    /// Most txns in one group commit.
    pub batch_txns_max: usize,
    /// Writes waiting to be sequenced before callers are made to wait; also the most
    /// writes in flight (proposed, not yet answered).
    pub proposal_queue_max: usize,
    /// A group-commit batch closes once its writes weigh this many bytes (encoded),
    /// whatever `batch_txns_max` says. Also bounds a broadcast PROPOSAL.
    pub batch_bytes_max: usize,
    /// Bytes of writes queued for sequencing or in flight (proposed, not yet
    /// answered) on this server; beyond it callers wait. A write heavier than the
    /// whole budget waits until it has the budget to itself.
    pub proposal_queue_bytes_max: usize,
    /// Bytes of log entries (and snapshots from the leader) queued for the disk;
    /// beyond it the pipeline takes neither writes nor peer messages until the disk
    /// catches up (back-pressure on the leader's stream to a slow follower).
    pub persist_queue_bytes_max: usize,
    /// Largest frame on a peer stream, in bytes: a larger message (a SNAP with the
    /// whole tree, a long sync) travels in pieces of this size.
    pub peer_frame_bytes_max: usize,
    /// Largest message a peer may send, once its pieces are put together; must
    /// exceed the largest snapshot (a follower far behind gets the whole tree).
    pub peer_message_bytes_max: usize,
    /// Bytes of messages waiting to go to one peer; beyond it the oldest are
    /// dropped (Zab re-synchronizes a learner whose stream lost messages).
    pub peer_queue_bytes_max: usize,
    /// Bytes of messages received from peers and not yet taken by the pipeline;
    /// beyond it the peer streams wait.
    pub peer_inbound_bytes_max: usize,
    /// Most sessions in one `Session.List` page (also when the client asks for more,
    /// or for no limit).
    pub session_list_page_max: usize,
    /// Most children in one `Children` page (also when the client asks for more, or
    /// for no limit).
    pub children_page_max: usize,
    /// Per-watch-stream queue, in txns; a consumer this far behind is cut off.
    pub watch_queue_txns_max: usize,
    /// Per-watch-stream queue, in bytes of events (paths, data, prev_data and a fixed
    /// size each); a consumer this far behind is cut off. An empty queue still takes
    /// one txn of any size.
    pub watch_queue_bytes_max: usize,
    /// All watch streams together: queued events and catch-up chunks (history or
    /// storage replay read-ahead). Over it, the watch holding the most is cut off.
    pub watch_memory_bytes_max: usize,
    /// Txns of recent events kept in memory for watch resume.
    pub watch_history_txns_max: usize,
    /// Bytes of recent events kept in memory for watch resume (counted like a queue).
    pub watch_history_bytes_max: usize,
    /// Watch resumes replayed from storage at once (each holds a tree rebuilt from a
    /// snapshot); more are refused with UNAVAILABLE until one ends.
    pub watch_replays_max: usize,
    /// Allow binding a non-loopback address without TLS.
    pub insecure: bool,

    // Connections (client port).
    /// Open client connections at most; more are accepted and closed at once. Lowered
    /// at start-up to fit under the open-file limit (less 64, and 8 per member, for
    /// everything else).
    pub client_connections_max: usize,
    /// Concurrent HTTP/2 streams (calls, watch streams) per client connection: the
    /// client is told, and streams beyond it are refused.
    pub client_streams_per_connection_max: u32,
    /// A client connection from which nothing was read for this long is closed (one
    /// that never sends its HTTP/2 preface, or a dead peer). A live client answers
    /// the keep-alive pings, so it never goes idle.
    pub connection_idle_timeout_ms: u64,
    /// HTTP/2 keep-alive: the server pings a client connection after this long
    /// without input. At most half of `connection_idle_timeout_ms`.
    pub http2_keepalive_interval_ms: u64,
    /// A connection whose keep-alive ping is unanswered for this long is closed.
    pub http2_keepalive_timeout_ms: u64,

    // Connections (peer port).
    /// Open connections on the peer port at most; more are accepted and closed at
    /// once. 0: 4 per member plus 16 (each member opens its message stream, its
    /// forwarding channel, and now and then one being reopened).
    pub peer_connections_max: usize,
    /// A peer connection from which nothing was read for this long is closed (at
    /// least 1000). The listener pings a connection quiet for a quarter of it (at
    /// most every 5 s), and a live member answers, so only a silent stranger or a
    /// stopped peer reaches it.
    pub peer_connection_idle_timeout_ms: u64,

    // Metrics (docs/operations.md, "Metrics").
    /// Where `/metrics`, `/healthz` and `/readyz` are served; None: not at all.
    /// Over HTTPS with the client port's certificate (and its `trusted_ca_file`
    /// rule) when the client port serves TLS, on any address; otherwise plain HTTP,
    /// loopback only unless `insecure`.
    pub metrics_addr: Option<SocketAddr>,
    /// Where only `/healthz` and `/readyz` are served, over plain HTTP, on any
    /// address (for probes without a certificate, such as Kubernetes'); None: not
    /// at all. Anyone who reaches it learns whether the server is up and ready (and
    /// the short reason it is not), nothing else.
    pub health_addr: Option<SocketAddr>,

    // The ZooKeeper-protocol port (docs/zookeeper.md).
    /// Where ZooKeeper's own clients connect (jute over TCP); None: not at all. TLS
    /// with the client port's certificate and client rule when the client port
    /// serves TLS (ZooKeeper's secureClientPort), on any address; otherwise plain
    /// text, loopback only unless `insecure`.
    pub zookeeper_addr: Option<SocketAddr>,
    /// Largest ZooKeeper frame accepted or sent (ZooKeeper's `jute.maxbuffer`): a
    /// longer one closes its connection; a getChildren answer over it fails.
    pub zookeeper_frame_bytes_max: usize,
    /// The four-letter words the ZooKeeper port answers (ZooKeeper's
    /// `4lw.commands.whitelist`): `["*"]` for all; by default only `srvr`, as
    /// ZooKeeper 3.5 and later.
    pub zookeeper_four_letter_words: Vec<String>,
    /// Most ZooKeeper watches one connection may hold (data, child and persistent
    /// together); one more is refused.
    pub zookeeper_watches_per_connection_max: usize,
    /// A durable log append (write and fsync) slower than this is logged as a
    /// warning and counted (`concord_disk_wal_fsync_threshold_exceeded_total`).
    pub fsync_warn_threshold_ms: u64,

    // Traces (docs/operations.md, "Traces").
    /// The OpenTelemetry collector spans are exported to over OTLP/gRPC, as
    /// `http://HOST:PORT` (plain text: loopback only, unless `insecure`) or
    /// `https://HOST:PORT` (TLS, with `otlp_ca_file`); None: no traces.
    pub otlp_endpoint: Option<String>,
    /// CA certificates (PEM) the collector's certificate must be signed by; needed
    /// by an `https://` endpoint, refused with an `http://` one. Read at start.
    pub otlp_ca_file: Option<PathBuf>,
    /// A client certificate (PEM) this server presents to an `https://` collector
    /// that asks for one, with `otlp_key_file`. Read at start.
    pub otlp_cert_file: Option<PathBuf>,
    /// The private key of `otlp_cert_file` (PEM).
    pub otlp_key_file: Option<PathBuf>,
    /// The share of traces no caller started that are sampled (0 to 1). A caller's
    /// `traceparent` decides for its own trace.
    pub otlp_sample_ratio: f64,

    // Failover for calls in flight.
    /// Longest a write waits for a leader to hand it to — this server looking (an
    /// election under way), or following a leader it cannot reach — before it fails
    /// with NOT_LEADER (nothing was done: safe to retry, elsewhere). Counted from when
    /// the server lost its leader: once it has had none for this long, new writes fail
    /// at once until it finds one.
    pub leader_wait_ms_max: u64,

    // Threads (docs/operations.md, "CPU").
    /// Threads that run the server's tasks: gRPC on both ports, the pipeline, peer
    /// streams, watches. The disk has threads of its own besides (the persister's
    /// fsyncs, snapshots, reads of stored snapshots). 1: tokio's current-thread
    /// scheduler, every task on one thread; more: its multi-thread scheduler with
    /// that many workers. 0: one where the process may use at most 2 CPUs, one per
    /// CPU above that.
    pub runtime_threads: usize,

    // Identities and teams (docs/security.md).
    /// The identity of a caller that presents no client certificate (plain text on
    /// loopback, or anywhere with `insecure`).
    pub local_identity: String,
    /// Identities with the admin role (exact names, or patterns where `*` stands for
    /// any run of characters): they see the whole tree and may do anything.
    pub admins: Vec<String>,
    /// The teams: who belongs to each, and the namespace root its clients see as `/`.
    pub teams: Vec<TeamConfig>,

    // TLS (docs/security.md, "TLS and certificates").
    /// The client port's certificate chain (PEM); with `key_file`, the client port
    /// serves TLS only.
    pub cert_file: Option<PathBuf>,
    /// The private key of `cert_file` (PEM).
    pub key_file: Option<PathBuf>,
    /// CA certificates (PEM): when set, a client must present a certificate signed
    /// by one of them, or its handshake fails.
    pub trusted_ca_file: Option<PathBuf>,
    /// This server's peer certificate (PEM): presented on the peer port and as the
    /// client identity of its own connections to the other members. All three
    /// peer files, or none (plain text on the peer port).
    pub peer_cert_file: Option<PathBuf>,
    /// The private key of `peer_cert_file` (PEM).
    pub peer_key_file: Option<PathBuf>,
    /// CA certificates (PEM) that sign the members' peer certificates: both ways of
    /// every peer link are checked against them.
    pub peer_trusted_ca_file: Option<PathBuf>,
    /// A TLS handshake (either port) that has not completed after this long is
    /// closed; it never holds up other connections.
    pub tls_handshake_timeout_ms: u64,
    /// How often the certificate, key and CA files are checked for changes (SIGHUP
    /// reloads at once); new handshakes use the new files, open connections keep
    /// theirs.
    pub tls_reload_interval_ms: u64,
    /// Where a client certificate's identity comes from: the first of these the
    /// leaf certificate has (`uri_san`, `dns_san`, `cn`).
    pub identity_from: Vec<IdentitySource>,
    /// Grants seeded into the replicated grant table at bootstrap, besides each
    /// team's default `rwcda` on its root (docs/security.md, "ACLs"). Each is seeded
    /// once: changing this list later adds the new grants, never re-adds a revoked one.
    pub grants: Vec<GrantConfig>,
}

/// A place in a client certificate an identity can be taken from.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum IdentitySource {
    /// The first URI subject alternative name (a SPIFFE id, say).
    UriSan,
    /// The first DNS subject alternative name.
    DnsSan,
    /// The subject's (first) common name.
    Cn,
}

/// One seeded grant, as `[[grants]]` in the config file lists it.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GrantConfig {
    /// The subtree's root: an absolute tree path (not relative to a team's root).
    pub path: String,
    /// The grantee, an identity name or `*` pattern; exactly one of this and `team`.
    pub identity: Option<String>,
    /// The grantee, a team of `[[teams]]`; exactly one of this and `identity`.
    pub team: Option<String>,
    /// A non-empty subset of "rwcda".
    pub perms: String,
}

/// One team, as `[[teams]]` in the config file lists it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TeamConfig {
    /// Unique, non-empty.
    pub name: String,
    /// The absolute path its clients see as `/`; roots of two teams never nest.
    pub root: String,
    /// Who belongs (exact names or `*` patterns); an identity belongs to the first
    /// team that names it (admins are never team members).
    pub identities: Vec<String>,
    /// The team's hard limits (`[teams.quota]`; all unlimited when absent).
    #[serde(default)]
    pub quota: QuotaConfig,
}

/// A team's quotas, as `[teams.quota]` lists them (docs/security.md, "Quotas"). Each
/// is a hard limit; 0 (the default) means unlimited.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct QuotaConfig {
    /// Most nodes below the team's root (the root itself, its `/`, not counted),
    /// ephemeral, sequential, TTL and lock or election queue nodes included.
    /// Checked by the leader before it proposes a write.
    pub nodes_max: u64,
    /// Most bytes of node data in the team's subtree (the root's own data included).
    /// Checked by the leader before it proposes a write.
    pub data_bytes_max: u64,
    /// Most open sessions opened by the team's identities.
    pub sessions_max: u64,
    /// Most watches the team's identities hold open on one server (watches live on
    /// the server they were opened on; each server counts its own).
    pub watches_max: u64,
    /// Requests per second the team's identities may send to one server (a token
    /// bucket per server: each server counts its own).
    pub requests_per_second: u64,
    /// Requests the bucket holds (a burst above the rate); 0: one second's worth,
    /// `requests_per_second`. Needs `requests_per_second`.
    pub requests_burst: u64,
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
            snapshot_every_bytes: 64 << 20,
            log_memory_bytes_max: 256 << 20,
            snapshots_keep: 3,
            storage_compact_free_bytes_min: 64 << 20,
            batch_txns_max: 1024,
            proposal_queue_max: 16_384,
            batch_bytes_max: 4 << 20,
            proposal_queue_bytes_max: 64 << 20,
            persist_queue_bytes_max: 64 << 20,
            peer_frame_bytes_max: 1 << 20,
            peer_message_bytes_max: 2 << 30,
            peer_queue_bytes_max: 64 << 20,
            peer_inbound_bytes_max: 64 << 20,
            session_list_page_max: 1000,
            children_page_max: 1000,
            watch_queue_txns_max: 4096,
            watch_queue_bytes_max: 8 << 20,
            watch_memory_bytes_max: 256 << 20,
            watch_history_txns_max: 100_000,
            watch_history_bytes_max: 64 << 20,
            watch_replays_max: 4,
            insecure: false,

            client_connections_max: 4096,
            client_streams_per_connection_max: 1024,
            connection_idle_timeout_ms: 60_000,
            http2_keepalive_interval_ms: 10_000,
            http2_keepalive_timeout_ms: 20_000,
            peer_connections_max: 0,
            peer_connection_idle_timeout_ms: 30_000,

            metrics_addr: None,
            health_addr: None,
            zookeeper_addr: None,
            zookeeper_frame_bytes_max: 1 << 20,
            zookeeper_four_letter_words: vec!["srvr".to_owned()],
            zookeeper_watches_per_connection_max: 100_000,
            fsync_warn_threshold_ms: 1_000,

            otlp_endpoint: None,
            otlp_ca_file: None,
            otlp_cert_file: None,
            otlp_key_file: None,
            otlp_sample_ratio: 0.01,

            leader_wait_ms_max: 2_000,

            runtime_threads: 0,

            local_identity: "admin".to_owned(),
            admins: vec!["admin".to_owned()],
            teams: Vec::new(),

            cert_file: None,
            key_file: None,
            trusted_ca_file: None,
            peer_cert_file: None,
            peer_key_file: None,
            peer_trusted_ca_file: None,
            tls_handshake_timeout_ms: 10_000,
            tls_reload_interval_ms: 1_000,
            identity_from: vec![
                IdentitySource::UriSan,
                IdentitySource::DnsSan,
                IdentitySource::Cn,
            ],

            grants: Vec::new(),
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
    /// Where its clients connect (followers tell clients where the leader is): an
    /// IP address or a DNS name, with the port.
    pub client_addr: Address,
    /// Where its peer transport listens, as the others dial it: an IP address or a
    /// DNS name (resolved at each connection), with the port.
    pub peer_addr: Address,
    /// Voter or observer.
    pub role: Role,
    /// The identity its peer certificate must carry when the peer port runs TLS: the
    /// only thing that says a peer connection is this member's. A DNS name, carried
    /// as a DNS SAN (servers dialling the member verify it as the server name; a URI
    /// SAN would take precedence in the identity rule, so peer certificates carry
    /// none). Unset: `concord-peer-<id>`, what `concord certs` writes. Unique among
    /// the members.
    #[serde(default)]
    pub peer_identity: Option<String>,
    /// Where its ZooKeeper port is reached, as clients dial it (the member binds it
    /// with `zookeeper_addr`). Named in the ensemble's config that ZooKeeper clients
    /// read (getConfig; Curator's ensemble tracker then connects to these) and in
    /// `Cluster/Members`. Set for every member or for none.
    #[serde(default)]
    pub zookeeper_addr: Option<Address>,
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

    /// Largest gRPC request message a client may send, to every service: node data
    /// plus room for the rest of a request (documented in common.proto and
    /// docs/api.md).
    pub fn request_bytes_max(&self) -> usize {
        self.node_data_bytes_max.saturating_mul(2).max(4 << 20)
    }

    /// The threads `runtime_threads` asks for on a machine where the process may
    /// use `cpus` CPUs: the setting, or for 0 one thread on at most 2 CPUs (where
    /// tasks handed between two workers cost more than a second worker gives) and
    /// one per CPU above that.
    pub fn runtime_threads_on(&self, cpus: usize) -> usize {
        match self.runtime_threads {
            0 if cpus <= 2 => 1,
            0 => cpus,
            n => n,
        }
    }

    /// Refuses a `runtime_threads` above `RUNTIME_THREADS_MAX` (checked by `validate`,
    /// and by `server::runtime` before it starts any thread).
    pub fn check_runtime_threads(&self) -> Result<(), ConfigError> {
        if self.runtime_threads > RUNTIME_THREADS_MAX {
            return Err(ConfigError::Invalid(format!(
                "runtime_threads must be at most {RUNTIME_THREADS_MAX} (0: chosen from the CPUs)"
            )));
        }
        Ok(())
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
        if let Some(addr) = self.metrics_addr.filter(|_| !self.client_tls()) {
            self.check_plain_text(addr)?;
        }
        if let Some(addr) = self.zookeeper_addr.filter(|_| !self.client_tls()) {
            self.check_plain_text(addr)?;
        }
        if self.zookeeper_frame_bytes_max < 1024 || self.zookeeper_watches_per_connection_max == 0 {
            return bad(
                "zookeeper_frame_bytes_max must be at least 1024, and zookeeper_watches_per_connection_max at least 1",
            );
        }
        if self.fsync_warn_threshold_ms == 0 {
            return bad("fsync_warn_threshold_ms must be at least 1");
        }
        self.validate_traces()?;
        if self.batch_txns_max == 0 || self.proposal_queue_max == 0 {
            return bad("batch_txns_max and proposal_queue_max must be at least 1");
        }
        self.validate_bounds()?;
        if self.watch_queue_txns_max == 0 || self.watch_history_txns_max == 0 {
            return bad("watch_queue_txns_max and watch_history_txns_max must be at least 1");
        }
        if self.watch_queue_bytes_max == 0
            || self.watch_history_bytes_max == 0
            || self.watch_replays_max == 0
        {
            return bad(
                "watch_queue_bytes_max, watch_history_bytes_max and watch_replays_max must be at least 1",
            );
        }
        if self.watch_memory_bytes_max < self.watch_queue_bytes_max {
            return bad("watch_memory_bytes_max must be at least watch_queue_bytes_max");
        }
        if self.snapshots_keep == 0 || self.snapshot_every_txns == 0 {
            return bad("snapshots_keep and snapshot_every_txns must be at least 1");
        }
        if self.snapshot_every_bytes == 0 || self.log_memory_bytes_max <= self.snapshot_every_bytes
        {
            return Err(ConfigError::Invalid(format!(
                "need 1 <= snapshot_every_bytes ({}) < log_memory_bytes_max ({})",
                self.snapshot_every_bytes, self.log_memory_bytes_max
            )));
        }
        self.validate_connections()?;
        self.check_runtime_threads()?;
        if self.leader_wait_ms_max == 0 {
            return bad("leader_wait_ms_max must be at least 1");
        }
        self.validate_tls()?;
        if !self.client_tls() {
            self.check_plain_text(self.client_addr)?;
        }
        crate::security::Policy::from_config(self)?;
        self.validate_members()
    }

    /// Checks the byte bounds of queues, peer messages and pages.
    fn validate_bounds(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_owned()));
        if self.batch_bytes_max == 0
            || self.proposal_queue_bytes_max == 0
            || self.persist_queue_bytes_max == 0
        {
            return bad(
                "batch_bytes_max, proposal_queue_bytes_max and persist_queue_bytes_max must be at least 1",
            );
        }
        if self.peer_frame_bytes_max < 4096
            || self.peer_message_bytes_max < self.peer_frame_bytes_max
        {
            return bad("need 4096 <= peer_frame_bytes_max <= peer_message_bytes_max");
        }
        if self.peer_queue_bytes_max == 0 || self.peer_inbound_bytes_max == 0 {
            return bad("peer_queue_bytes_max and peer_inbound_bytes_max must be at least 1");
        }
        if self.session_list_page_max == 0 || self.children_page_max == 0 {
            return bad("session_list_page_max and children_page_max must be at least 1");
        }
        Ok(())
    }

    /// Caps at least 1; the idle timeout at least two keep-alive intervals, so a
    /// live client (which answers the pings) is never closed as idle.
    fn validate_connections(&self) -> Result<(), ConfigError> {
        if self.client_connections_max == 0 || self.client_streams_per_connection_max == 0 {
            return Err(ConfigError::Invalid(
                "client_connections_max and client_streams_per_connection_max must be at least 1"
                    .into(),
            ));
        }
        if self.http2_keepalive_interval_ms == 0 || self.http2_keepalive_timeout_ms == 0 {
            return Err(ConfigError::Invalid(
                "http2_keepalive_interval_ms and http2_keepalive_timeout_ms must be at least 1"
                    .into(),
            ));
        }
        if self.connection_idle_timeout_ms < self.http2_keepalive_interval_ms.saturating_mul(2) {
            return Err(ConfigError::Invalid(format!(
                "connection_idle_timeout_ms ({}) must be at least 2 x http2_keepalive_interval_ms ({})",
                self.connection_idle_timeout_ms, self.http2_keepalive_interval_ms
            )));
        }
        if self.peer_connection_idle_timeout_ms < 1000 {
            return Err(ConfigError::Invalid(
                "peer_connection_idle_timeout_ms must be at least 1000".into(),
            ));
        }
        Ok(())
    }

    /// The ensemble: `members`, or this server alone as a voter when none are listed;
    /// each member's client and ZooKeeper addresses as clients dial them
    /// (`Address::dialable`: not 0.0.0.0), as `Cluster.Members`, NOT_LEADER hints and
    /// getConfig show them.
    pub fn ensemble(&self) -> Vec<Member> {
        let members = if self.members.is_empty() {
            vec![Member {
                id: self.server_id,
                client_addr: self.client_addr.into(),
                peer_addr: self.peer_addr.into(),
                role: Role::Voter,
                peer_identity: None,
                zookeeper_addr: self.zookeeper_addr.map(Address::from),
            }]
        } else {
            self.members.clone()
        };
        members
            .into_iter()
            .map(|m| Member {
                client_addr: m.client_addr.dialable(&m.peer_addr),
                zookeeper_addr: m.zookeeper_addr.map(|z| z.dialable(&m.peer_addr)),
                ..m
            })
            .collect()
    }

    /// Ids unique and non-zero, this server listed with addresses it binds (the
    /// same, or its ports when it binds every interface or is listed by name), at
    /// least one voter, every address loopback unless `insecure`.
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
            if !self.client_tls() {
                self.check_plain_text_to(&m.client_addr)?;
            }
            if !self.peer_tls() {
                self.check_plain_text_to(&m.peer_addr)?;
            }
            match &m.zookeeper_addr {
                Some(z) if !self.client_tls() => self.check_plain_text_to(z)?,
                _ => {}
            }
        }
        let with_zookeeper = self.members.iter().filter(|m| m.zookeeper_addr.is_some());
        let with_zookeeper = with_zookeeper.count();
        if with_zookeeper != 0 && with_zookeeper != self.members.len() {
            return invalid(
                "zookeeper_addr is set for some members and not others: set it for every \
                 member (ZooKeeper clients connect to the ones listed) or for none"
                    .to_owned(),
            );
        }
        if !self.peer_tls() {
            self.check_plain_text(self.peer_addr)?;
        }
        crate::security::peers::validate(&self.members)?;
        if !self.members.iter().any(|m| m.role == Role::Voter) {
            return invalid("the members include no voter".to_owned());
        }
        let Some(me) = self.members.iter().find(|m| m.id == self.server_id) else {
            return invalid(format!(
                "server_id {} is not among the members",
                self.server_id
            ));
        };
        if !me.client_addr.served_by(self.client_addr) || !me.peer_addr.served_by(self.peer_addr) {
            return invalid(format!(
                "member {} lists {} / {} but this server binds {} / {}",
                me.id, me.client_addr, me.peer_addr, self.client_addr, self.peer_addr
            ));
        }
        match (&me.zookeeper_addr, self.zookeeper_addr) {
            (Some(listed), Some(bound)) if listed.served_by(bound) => {}
            (None, _) => {}
            (Some(listed), bound) => {
                let bound = bound.map_or("no ZooKeeper port".to_owned(), |b| b.to_string());
                return invalid(format!(
                    "member {} lists zookeeper_addr {listed} but this server binds {bound}",
                    me.id
                ));
            }
        }
        Ok(())
    }

    /// Whether the client port serves TLS (`cert_file` and `key_file` set).
    pub fn client_tls(&self) -> bool {
        self.cert_file.is_some() && self.key_file.is_some()
    }

    /// Whether the peer port (and this server's peer links) use mTLS.
    pub fn peer_tls(&self) -> bool {
        self.peer_cert_file.is_some()
            && self.peer_key_file.is_some()
            && self.peer_trusted_ca_file.is_some()
    }

    /// The TLS files come in complete sets; the timeouts are at least 1 ms; the
    /// identity rule names at least one source, each once.
    fn validate_tls(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_owned()));
        if self.cert_file.is_some() != self.key_file.is_some() {
            return bad("cert_file and key_file go together: set both or neither");
        }
        if self.trusted_ca_file.is_some() && !self.client_tls() {
            return bad("trusted_ca_file needs cert_file and key_file");
        }
        let peer = [
            &self.peer_cert_file,
            &self.peer_key_file,
            &self.peer_trusted_ca_file,
        ];
        let set = peer.iter().filter(|f| f.is_some()).count();
        if set != 0 && set != peer.len() {
            return bad("peer_cert_file, peer_key_file and peer_trusted_ca_file go together: set all three or none");
        }
        if self.tls_handshake_timeout_ms == 0 || self.tls_reload_interval_ms == 0 {
            return bad("tls_handshake_timeout_ms and tls_reload_interval_ms must be at least 1");
        }
        let unique: HashSet<_> = self.identity_from.iter().collect();
        if self.identity_from.is_empty() || unique.len() != self.identity_from.len() {
            return bad("identity_from must name at least one source, each once");
        }
        Ok(())
    }

    /// Plain text only to loopback (an IP, or `localhost`), unless `insecure`.
    fn check_plain_text_to(&self, addr: &Address) -> Result<(), ConfigError> {
        if !addr.is_loopback() && !self.insecure {
            return Err(ConfigError::Invalid(format!(
                "refusing plain text to {addr}: use 127.0.0.1 or localhost, TLS, or pass --insecure"
            )));
        }
        Ok(())
    }

    /// The OTLP endpoint is `http://HOST:PORT` (plain text: loopback unless
    /// `insecure`) or `https://HOST:PORT` with a CA file (a client certificate
    /// and key both or neither), and the sample ratio a share.
    fn validate_traces(&self) -> Result<(), ConfigError> {
        if !(0.0..=1.0).contains(&self.otlp_sample_ratio) {
            return Err(ConfigError::Invalid(format!(
                "otlp_sample_ratio must be within [0, 1], not {}",
                self.otlp_sample_ratio
            )));
        }
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_owned()));
        if self.otlp_cert_file.is_some() != self.otlp_key_file.is_some() {
            return bad("otlp_cert_file and otlp_key_file go together: set both or neither");
        }
        let Some(endpoint) = &self.otlp_endpoint else {
            if self.otlp_ca_file.is_some() || self.otlp_cert_file.is_some() {
                return bad("otlp_ca_file, otlp_cert_file and otlp_key_file need otlp_endpoint");
            }
            return Ok(());
        };
        let (tls, rest) = match endpoint.strip_prefix("https://") {
            Some(rest) => (true, Some(rest)),
            None => (false, endpoint.strip_prefix("http://")),
        };
        let addr: Address = rest
            .map(|a| a.trim_end_matches('/'))
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| {
                ConfigError::Invalid(format!(
                    "otlp_endpoint must be http://HOST:PORT or https://HOST:PORT (an OTLP/gRPC collector), not {endpoint:?}"
                ))
            })?;
        match (tls, self.otlp_ca_file.is_some()) {
            (true, true) => Ok(()),
            (true, false) => bad("an https:// otlp_endpoint needs otlp_ca_file (the CA that signs the collector's certificate)"),
            (false, false) if self.otlp_cert_file.is_none() => self.check_plain_text_to(&addr),
            (false, _) => bad("otlp_ca_file, otlp_cert_file and otlp_key_file need an https:// otlp_endpoint"),
        }
    }

    /// TLS to the OTLP collector, when the endpoint is `https://`.
    pub fn otlp_tls(&self) -> Option<crate::telemetry::trace::CollectorTls> {
        let endpoint = self.otlp_endpoint.as_deref()?;
        if !endpoint.starts_with("https://") {
            return None;
        }
        Some(crate::telemetry::trace::CollectorTls {
            ca_file: self.otlp_ca_file.clone()?,
            identity: self.otlp_cert_file.clone().zip(self.otlp_key_file.clone()),
        })
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
        let cramped = Config {
            snapshot_every_bytes: 64 << 20,
            log_memory_bytes_max: 64 << 20,
            ..Config::default()
        };
        assert!(
            cramped.validate().is_err(),
            "no room above the snapshot point"
        );
        let never = Config {
            snapshot_every_bytes: 0,
            ..Config::default()
        };
        assert!(never.validate().is_err());
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
    fn byte_bounds_and_page_caps_are_checked() {
        let ok = Config::default();
        let bad = [
            Config {
                persist_queue_bytes_max: 0,
                ..ok.clone()
            },
            Config {
                batch_bytes_max: 0,
                ..ok.clone()
            },
            Config {
                peer_frame_bytes_max: 100,
                ..ok.clone()
            },
            Config {
                peer_message_bytes_max: ok.peer_frame_bytes_max - 1,
                ..ok.clone()
            },
            Config {
                peer_inbound_bytes_max: 0,
                ..ok.clone()
            },
            Config {
                children_page_max: 0,
                ..ok.clone()
            },
        ];
        for c in bad {
            assert!(
                matches!(c.validate(), Err(ConfigError::Invalid(_))),
                "{c:?}"
            );
        }
        let c: Config =
            toml::from_str("children_page_max = 3\npersist_queue_bytes_max = 4096\n").unwrap();
        assert_eq!((c.children_page_max, c.persist_queue_bytes_max), (3, 4096));
        c.validate().unwrap();
    }

    #[test]
    fn runtime_threads_are_chosen_from_the_cpus_unless_set() {
        let auto = Config::default();
        assert_eq!(auto.runtime_threads, 0);
        let chosen: Vec<usize> = [1, 2, 3, 16]
            .map(|cpus| auto.runtime_threads_on(cpus))
            .into();
        assert_eq!(chosen, [1, 1, 3, 16]);
        let set: Config = toml::from_str("runtime_threads = 4\n").unwrap();
        set.validate().unwrap();
        assert_eq!(
            (set.runtime_threads_on(2), set.runtime_threads_on(64)),
            (4, 4)
        );
        let huge = Config {
            runtime_threads: RUNTIME_THREADS_MAX + 1,
            ..Config::default()
        };
        assert!(matches!(huge.validate(), Err(ConfigError::Invalid(_))));
    }

    #[test]
    fn connection_settings_are_checked() {
        let ok = Config {
            connection_idle_timeout_ms: 500,
            http2_keepalive_interval_ms: 250,
            ..Config::default()
        };
        ok.validate().unwrap();
        let quick_idle = Config {
            connection_idle_timeout_ms: 499,
            ..ok.clone()
        };
        assert!(quick_idle.validate().is_err(), "idle under two pings");
        for bad in [
            Config {
                client_connections_max: 0,
                ..ok.clone()
            },
            Config {
                client_streams_per_connection_max: 0,
                ..ok.clone()
            },
            Config {
                http2_keepalive_timeout_ms: 0,
                ..ok.clone()
            },
            Config {
                peer_connection_idle_timeout_ms: 999,
                ..ok.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
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

    #[test]
    fn metrics_settings_are_checked() {
        let c: Config =
            toml::from_str("metrics_addr = \"127.0.0.1:9181\"\nfsync_warn_threshold_ms = 50\n")
                .unwrap();
        c.validate().unwrap();
        assert_eq!(c.metrics_addr, Some("127.0.0.1:9181".parse().unwrap()));
        assert_eq!(c.fsync_warn_threshold_ms, 50);
        assert_eq!(Config::default().metrics_addr, None, "off unless set");
        let mut open = Config {
            metrics_addr: Some("0.0.0.0:9181".parse().unwrap()),
            ..Config::default()
        };
        assert!(open.validate().is_err(), "plain HTTP beyond loopback");
        open.insecure = true;
        open.validate().unwrap();
        let never = Config {
            fsync_warn_threshold_ms: 0,
            ..Config::default()
        };
        assert!(never.validate().is_err());
        assert!(toml::from_str::<Config>("metrics_addr = \"nowhere\"").is_err());
        // Over TLS (the client port's), any address.
        let tls = Config {
            client_addr: "0.0.0.0:7181".parse().unwrap(),
            metrics_addr: Some("0.0.0.0:9181".parse().unwrap()),
            cert_file: Some("c.pem".into()),
            key_file: Some("k.pem".into()),
            ..Config::default()
        };
        tls.validate().unwrap();
        // The health port: plain text on any address, no insecure needed.
        let c: Config = toml::from_str("health_addr = \"0.0.0.0:9182\"\n").unwrap();
        assert_eq!(c.health_addr, Some("0.0.0.0:9182".parse().unwrap()));
        c.validate().unwrap();
        assert_eq!(Config::default().health_addr, None, "off unless set");
    }

    #[test]
    fn trace_settings_are_checked() {
        let c: Config =
            toml::from_str("otlp_endpoint = \"http://127.0.0.1:4317\"\notlp_sample_ratio = 0.5\n")
                .unwrap();
        c.validate().unwrap();
        assert_eq!(c.otlp_endpoint.as_deref(), Some("http://127.0.0.1:4317"));
        assert_eq!(c.otlp_sample_ratio, 0.5);
        assert_eq!(Config::default().otlp_endpoint, None, "off unless set");
        for bad in [
            "127.0.0.1:4317",
            "https://127.0.0.1:4317",
            "http://",
            "http://[::1]",
            "https://",
            "grpc://127.0.0.1:4317",
        ] {
            let c = Config {
                otlp_endpoint: Some(bad.to_owned()),
                ..Config::default()
            };
            assert!(c.validate().is_err(), "{bad} accepted");
        }
        let mut remote = Config {
            otlp_endpoint: Some("http://collector.example:4317".to_owned()),
            ..Config::default()
        };
        assert!(remote.validate().is_err(), "plain text beyond loopback");
        remote.insecure = true;
        remote.validate().unwrap();
        // TLS: https with a CA file, any host; a client certificate with its key.
        let f = |s: &str| Some(PathBuf::from(s));
        let tls = Config {
            otlp_endpoint: Some("https://collector.example:4317".to_owned()),
            otlp_ca_file: f("ca.pem"),
            ..Config::default()
        };
        tls.validate().unwrap();
        assert!(tls.otlp_tls().is_some_and(|t| t.identity.is_none()));
        let mtls = Config {
            otlp_cert_file: f("c.pem"),
            otlp_key_file: f("k.pem"),
            ..tls.clone()
        };
        mtls.validate().unwrap();
        assert!(mtls.otlp_tls().is_some_and(|t| t.identity.is_some()));
        for refused in [
            Config {
                otlp_ca_file: None,
                ..tls.clone()
            },
            Config {
                otlp_key_file: None,
                ..mtls.clone()
            },
            Config {
                otlp_endpoint: Some("http://127.0.0.1:4317".to_owned()),
                ..tls.clone()
            },
            Config {
                otlp_endpoint: None,
                ..tls.clone()
            },
        ] {
            assert!(refused.validate().is_err(), "{refused:?}");
        }
        for ratio in [-0.1, 1.5, f64::NAN] {
            let c = Config {
                otlp_sample_ratio: ratio,
                ..Config::default()
            };
            assert!(c.validate().is_err(), "ratio {ratio} accepted");
        }
    }

    #[test]
    fn tls_settings_come_in_sets() {
        let f = |s: &str| Some(PathBuf::from(s));
        let tls = Config {
            client_addr: "0.0.0.0:7181".parse().unwrap(),
            cert_file: f("c.pem"),
            key_file: f("k.pem"),
            ..Config::default()
        };
        tls.validate().unwrap();
        let mtls = Config {
            trusted_ca_file: f("ca.pem"),
            ..tls.clone()
        };
        mtls.validate().unwrap();
        let bad = [
            Config {
                key_file: None,
                ..tls.clone()
            },
            Config {
                cert_file: None,
                key_file: None,
                trusted_ca_file: f("ca.pem"),
                ..Config::default()
            },
            Config {
                peer_cert_file: f("p.pem"),
                peer_key_file: f("pk.pem"),
                ..Config::default()
            },
            Config {
                tls_handshake_timeout_ms: 0,
                ..tls.clone()
            },
            Config {
                identity_from: vec![],
                ..tls.clone()
            },
            Config {
                identity_from: vec![IdentitySource::Cn, IdentitySource::Cn],
                ..tls.clone()
            },
        ];
        for c in bad {
            assert!(c.validate().is_err(), "{c:?}");
        }
        let c: Config = toml::from_str(
            "cert_file = \"c.pem\"\nkey_file = \"k.pem\"\nidentity_from = [\"cn\", \"uri_san\"]\n",
        )
        .unwrap();
        assert_eq!(
            c.identity_from,
            [IdentitySource::Cn, IdentitySource::UriSan]
        );
        assert!(toml::from_str::<Config>("identity_from = [\"email\"]").is_err());
        // The peer port on a non-loopback address needs peer TLS (or insecure).
        let mut three = three();
        three.members[0].peer_addr = "10.0.0.1:7182".parse().unwrap();
        assert!(three.validate().is_err());
        three.peer_cert_file = f("p.pem");
        three.peer_key_file = f("pk.pem");
        three.peer_trusted_ca_file = f("ca.pem");
        three.validate().unwrap();
    }

    #[test]
    fn watch_byte_bounds_are_checked() {
        let c = Config::default();
        assert_eq!(c.watch_queue_bytes_max, 8 << 20);
        assert_eq!(c.watch_memory_bytes_max, 256 << 20);
        let small_total = Config {
            watch_memory_bytes_max: c.watch_queue_bytes_max - 1,
            ..c.clone()
        };
        assert!(small_total.validate().is_err());
        let no_queue = Config {
            watch_queue_bytes_max: 0,
            ..c.clone()
        };
        assert!(no_queue.validate().is_err());
        let c: Config =
            toml::from_str("watch_queue_bytes_max = 1024\nwatch_memory_bytes_max = 4096\n")
                .unwrap();
        c.validate().unwrap();
        assert_eq!(
            (c.watch_queue_bytes_max, c.watch_memory_bytes_max),
            (1024, 4096)
        );
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
        assert_eq!(c.members[1].peer_addr, c.peer_addr.into());
        assert_eq!(c.ensemble(), c.members);
    }

    /// The shape of deploy/k8s/configmap.yaml: members by their pods' DNS names,
    /// every member binding 0.0.0.0 on the ports its entry names, TLS on both ports.
    const BY_NAME: &str = r#"
server_id = 2
client_addr = "0.0.0.0:7181"
peer_addr = "0.0.0.0:7182"
cert_file = "s.pem"
key_file = "sk.pem"
peer_cert_file = "p.pem"
peer_key_file = "pk.pem"
peer_trusted_ca_file = "ca.pem"
[[members]]
id = 1
client_addr = "concord-0.concord-peers.concord.svc.cluster.local:7181"
peer_addr = "concord-0.concord-peers.concord.svc.cluster.local:7182"
role = "voter"
[[members]]
id = 2
client_addr = "concord-1.concord-peers.concord.svc.cluster.local:7181"
peer_addr = "concord-1.concord-peers.concord.svc.cluster.local:7182"
role = "voter"
"#;

    #[test]
    fn members_may_be_named_by_dns() {
        let c: Config = toml::from_str(BY_NAME).unwrap();
        c.validate().unwrap();
        assert_eq!(
            c.members[0].peer_addr.to_string(),
            "concord-0.concord-peers.concord.svc.cluster.local:7182"
        );
        // Its own entry must name the ports it binds.
        let mut other_port = c.clone();
        other_port.peer_addr = "0.0.0.0:7192".parse().unwrap();
        assert!(other_port.validate().is_err());
        // A name is not loopback: plain text to it needs insecure.
        let plain = Config {
            peer_cert_file: None,
            peer_key_file: None,
            peer_trusted_ca_file: None,
            ..c.clone()
        };
        assert!(plain.validate().is_err());
        Config {
            insecure: true,
            ..plain
        }
        .validate()
        .unwrap();
        // An IP entry still must be the IP bound, or a bind on every interface.
        let mut by_ip = three();
        by_ip.client_addr = "0.0.0.0:7191".parse().unwrap();
        by_ip.insecure = true;
        by_ip.validate().unwrap();
        by_ip.client_addr = "127.0.0.2:7191".parse().unwrap();
        assert!(by_ip.validate().is_err());
        let bad = BY_NAME.replace("concord-0.concord-peers", "http://concord-0");
        assert!(toml::from_str::<Config>(&bad).is_err());
    }

    /// A member listed (or a server alone) on every interface is shown where a client
    /// reaches it: its peer address's host, or loopback.
    #[test]
    fn the_ensemble_shows_client_addresses_a_client_can_dial() {
        let mut c = three();
        c.insecure = true;
        c.members[0].client_addr = "0.0.0.0:7181".parse().unwrap();
        c.members[0].peer_addr = "10.1.2.3:7182".parse().unwrap();
        c.members[1].client_addr = "[::]:7191".parse().unwrap();
        c.members[1].peer_addr = "concord-1.peers:7192".parse().unwrap();
        let e = c.ensemble();
        assert_eq!(e[0].client_addr.to_string(), "10.1.2.3:7181");
        assert_eq!(e[1].client_addr.to_string(), "concord-1.peers:7191");
        assert_eq!(e[2].client_addr, c.members[2].client_addr);
        let alone = Config {
            client_addr: "0.0.0.0:7181".parse().unwrap(),
            peer_addr: "0.0.0.0:7182".parse().unwrap(),
            ..Config::default()
        };
        assert_eq!(
            alone.ensemble()[0].client_addr.to_string(),
            "127.0.0.1:7181"
        );
        let v6 = Config {
            client_addr: "[::]:7181".parse().unwrap(),
            peer_addr: "[::]:7182".parse().unwrap(),
            ..Config::default()
        };
        assert_eq!(v6.ensemble()[0].client_addr.to_string(), "[::1]:7181");
    }

    /// Members' ZooKeeper addresses: for every member or none, this server's own
    /// entry served by the port it binds, shown where a client can dial them.
    #[test]
    fn zookeeper_addresses_are_listed_for_every_member_or_none() {
        let mut c = three();
        for (m, port) in c.members.iter_mut().zip([7183, 7193, 7203]) {
            m.zookeeper_addr = Some(format!("127.0.0.1:{port}").parse().unwrap());
        }
        c.zookeeper_addr = Some("127.0.0.1:7193".parse().unwrap());
        c.validate().unwrap();
        let mut some = c.clone();
        some.members[0].zookeeper_addr = None;
        let e = some.validate().unwrap_err().to_string();
        assert!(e.contains("for some members and not others"), "{e}");
        let mut unbound = c.clone();
        unbound.zookeeper_addr = None;
        let e = unbound.validate().unwrap_err().to_string();
        assert!(e.contains("binds no ZooKeeper port"), "{e}");
        let mut elsewhere = c.clone();
        elsewhere.zookeeper_addr = Some("127.0.0.1:2181".parse().unwrap());
        assert!(
            elsewhere.validate().is_err(),
            "own entry names another port"
        );
        let mut wide = c.clone();
        wide.insecure = true;
        wide.members[0].zookeeper_addr = Some("0.0.0.0:7183".parse().unwrap());
        wide.members[0].peer_addr = "10.1.2.3:7182".parse().unwrap();
        wide.validate().unwrap();
        let e = wide.ensemble();
        assert_eq!(e[0].zookeeper_addr, Some("10.1.2.3:7183".parse().unwrap()));
        let mut far = c.clone();
        far.members[0].zookeeper_addr = Some("10.0.0.1:7183".parse().unwrap());
        assert!(
            far.validate().is_err(),
            "plain text to a non-loopback address"
        );
        // A server alone names the port it binds.
        let alone = Config {
            zookeeper_addr: Some("127.0.0.1:2181".parse().unwrap()),
            ..Config::default()
        };
        let e = alone.ensemble();
        assert_eq!(e[0].zookeeper_addr, Some("127.0.0.1:2181".parse().unwrap()));
    }

    #[test]
    fn no_members_is_an_ensemble_of_one() {
        let c = Config::default();
        let e = c.ensemble();
        assert_eq!(e.len(), 1);
        assert_eq!((e[0].id, e[0].role), (1, Role::Voter));
        assert_eq!(e[0].client_addr, c.client_addr.into());
        assert_eq!(e[0].zookeeper_addr, None);
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
        let mut c = three();
        c.members[0].peer_identity = Some("concord-peer-3".into());
        assert!(c.validate().is_err(), "two members with one peer identity");
        c.members[2].peer_identity = Some("spiffe://example.org/concord/3".into());
        assert!(c.validate().is_err(), "not a DNS name");
        c.members[2].peer_identity = Some("concord-3.example.org".into());
        c.validate().unwrap();
        let named = THREE.replacen(
            "role = \"voter\"",
            "role = \"voter\"\npeer_identity = \"p1\"",
            1,
        );
        let c: Config = toml::from_str(&named).unwrap();
        assert_eq!(c.members[0].peer_identity.as_deref(), Some("p1"));
        assert_eq!(c.members[1].peer_identity, None);
        let unknown_key = THREE.replace("role = \"voter\"", "role = \"voter\"\nweight = 2");
        assert!(toml::from_str::<Config>(&unknown_key).is_err());
    }
}
