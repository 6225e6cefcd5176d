//! What the four-letter words report about the port's connections: each
//! connection's figures (`Tracked`), kept in the door's registry while it lives, and
//! the server's facts gathered at one moment (`facts`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::watch::lock;
use crate::zab::Role;

use super::door::Door;
use super::watches::Watches;
use super::words::{
    Build, ConnectionFacts, Latency, LeaderFacts, Mode, ServerFacts, SessionFacts, WatchSummary,
};

/// One connection's figures, updated by its task.
pub(super) struct Tracked {
    pub(super) remote: Option<SocketAddr>,
    /// The connection's ZooKeeper watches.
    pub(super) watches: Mutex<Watches>,
    pub(super) received: AtomicU64,
    pub(super) sent: AtomicU64,
    /// The session's figures once the handshake made one.
    pub(super) session: Mutex<Option<SessionFacts>>,
}

impl Tracked {
    pub(super) fn new(remote: Option<SocketAddr>, watches: Watches) -> Tracked {
        Tracked {
            remote,
            watches: Mutex::new(watches),
            received: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            session: Mutex::new(None),
        }
    }

    /// Records the session the handshake made.
    pub(super) fn session_made(&self, session_id: u64, timeout_ms: i32) {
        *lock(&self.session) = Some(SessionFacts {
            session_id,
            last_op: "NA".to_owned(),
            established_ms: now_ms(),
            timeout_ms,
            last_cxid: -1,
            last_zxid: -1,
            last_response_ms: 0,
            last_latency_ms: 0,
            min_latency_ms: 0,
            avg_latency_ms: 0,
            max_latency_ms: 0,
        });
    }

    /// Records one answered request: its opcode's name, xid, zxid and latency.
    pub(super) fn answered(&self, op: &str, xid: i32, zxid: u64, latency: Duration, count: u64) {
        let mut session = lock(&self.session);
        let Some(s) = session.as_mut() else { return };
        let ms = i64::try_from(latency.as_millis()).unwrap_or(i64::MAX);
        s.last_op = op.chars().take(4).collect::<String>().to_uppercase();
        s.last_cxid = i64::from(xid);
        s.last_zxid = i64::try_from(zxid).unwrap_or(-1);
        s.last_response_ms = now_ms();
        s.last_latency_ms = ms;
        s.min_latency_ms = if count <= 1 {
            ms
        } else {
            s.min_latency_ms.min(ms)
        };
        s.max_latency_ms = s.max_latency_ms.max(ms);
        let n = i64::try_from(count.max(1)).unwrap_or(i64::MAX);
        s.avg_latency_ms += (ms - s.avg_latency_ms) / n;
    }
}

/// The port's live connections and request latencies.
#[derive(Default)]
pub(super) struct Registry {
    next_id: AtomicU64,
    connections: Mutex<HashMap<u64, Arc<Tracked>>>,
    latency: Mutex<LatencyTotals>,
}

#[derive(Default)]
struct LatencyTotals {
    count: u64,
    sum_ms: u64,
    min_ms: u64,
    max_ms: u64,
}

impl Registry {
    /// Adds a connection; `Registered` removes it when dropped.
    pub(super) fn add(self: &Arc<Self>, tracked: Arc<Tracked>) -> Registered {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&self.connections).insert(id, tracked);
        Registered {
            registry: self.clone(),
            id,
        }
    }

    pub(super) fn request_took(&self, latency: Duration) {
        let ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX);
        let mut l = lock(&self.latency);
        l.min_ms = if l.count == 0 { ms } else { l.min_ms.min(ms) };
        l.max_ms = l.max_ms.max(ms);
        l.count += 1;
        l.sum_ms = l.sum_ms.saturating_add(ms);
    }

    fn latency(&self) -> Latency {
        let l = lock(&self.latency);
        Latency {
            min_ms: l.min_ms,
            max_ms: l.max_ms,
            avg_ms: if l.count == 0 {
                0.0
            } else {
                l.sum_ms as f64 / l.count as f64
            },
        }
    }

    fn snapshot(&self) -> Vec<Arc<Tracked>> {
        lock(&self.connections).values().cloned().collect()
    }
}

/// A connection's place in the registry, given back when dropped.
pub(super) struct Registered {
    registry: Arc<Registry>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        lock(&self.registry.connections).remove(&self.id);
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The server's facts now, for the four-letter words.
pub(super) fn facts(door: &Door) -> ServerFacts {
    let replica = &door.replica;
    let standing = crate::replica::observe::Standing::of(replica);
    let members = door.config.ensemble();
    let voters = members
        .iter()
        .filter(|m| m.role == crate::config::Role::Voter)
        .count() as u64;
    let alone = members.len() <= 1;
    let role = replica.role();
    let mode = match role {
        _ if alone => Mode::Standalone,
        Role::Leading => Mode::Leader,
        Role::Observing => Mode::Observer,
        _ => Mode::Follower,
    };
    let (nodes, ephemerals, data_bytes, sessions) = replica.read(|t| {
        (
            t.node_count() as u64,
            t.ephemeral_count() as u64,
            t.data_bytes(),
            t.sessions().count() as u64,
        )
    });
    let tracked = door.registry.snapshot();
    let watch_guards: Vec<_> = tracked.iter().map(|t| lock(&t.watches)).collect();
    let watches = WatchSummary::of(watch_guards.iter().map(|g| &**g));
    let watch_count = watch_guards.iter().map(|g| g.zk_watch_count() as u64).sum();
    drop(watch_guards);
    let connections = tracked
        .iter()
        .filter_map(|t| {
            Some(ConnectionFacts {
                remote: t.remote?,
                interest_ops: 1,
                queued: 0,
                received: t.received.load(Ordering::Relaxed),
                sent: t.sent.load(Ordering::Relaxed),
                session: lock(&t.session).clone(),
            })
        })
        .collect();
    let leader = (mode == Mode::Leader).then(|| LeaderFacts {
        learners: members.len().saturating_sub(1) as u64,
        synced_followers: voters.saturating_sub(1),
        synced_non_voting_followers: 0,
        synced_observers: (members.len() as u64).saturating_sub(voters),
        pending_syncs: 0,
        leader_uptime_ms: 0,
        proposal_sizes: super::words::BufferSizes {
            last: -1,
            min: -1,
            max: -1,
        },
    });
    let c = &door.config;
    let conf = vec![
        ("clientPort".to_owned(), port_of(c.zookeeper_addr)),
        ("dataDir".to_owned(), c.data_dir.display().to_string()),
        ("tickTime".to_owned(), c.tick_ms.to_string()),
        (
            "maxClientCnxns".to_owned(),
            c.client_connections_max.to_string(),
        ),
        (
            "minSessionTimeout".to_owned(),
            door.ttl_range_ms.0.to_string(),
        ),
        (
            "maxSessionTimeout".to_owned(),
            door.ttl_range_ms.1.to_string(),
        ),
        ("serverId".to_owned(), c.server_id.to_string()),
    ];
    ServerFacts {
        build: Build {
            concord_version: env!("CARGO_PKG_VERSION").to_owned(),
            revision: "concord".to_owned(),
            built_on: "unknown".to_owned(),
        },
        serving: standing.has_leader(),
        mode,
        peer_state: (!alone).then(|| match mode {
            Mode::Leader => "leading - broadcast".to_owned(),
            Mode::Observer => "observing - broadcast".to_owned(),
            _ => "following - broadcast".to_owned(),
        }),
        quorum_size: (!alone).then_some(voters),
        zxid: replica.applied_zxid(),
        latency: door.registry.latency(),
        packets_received: door.packets_received.load(Ordering::Relaxed),
        packets_sent: door.packets_sent.load(Ordering::Relaxed),
        outstanding_requests: 0,
        uptime_ms: u64::try_from(door.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        znode_count: nodes,
        watch_count,
        ephemerals_count: ephemerals,
        approximate_data_size: data_bytes,
        global_sessions: sessions,
        local_sessions: 0,
        open_file_descriptor_count: open_fds(),
        max_file_descriptor_count: crate::listen::open_files_limit()
            .and_then(|n| i64::try_from(n).ok())
            .unwrap_or(-1),
        leader,
        connections,
        watches,
        conf,
        env: vec![
            ("host.name".to_owned(), "localhost".to_owned()),
            ("os.name".to_owned(), std::env::consts::OS.to_owned()),
            ("os.arch".to_owned(), std::env::consts::ARCH.to_owned()),
        ],
    }
}

fn port_of(addr: Option<SocketAddr>) -> String {
    addr.map_or_else(|| "0".to_owned(), |a| a.port().to_string())
}

/// Open file descriptors of this process, or -1 where the platform cannot say.
fn open_fds() -> i64 {
    std::fs::read_dir("/proc/self/fd").map_or(-1, |d| d.count() as i64)
}
