//! The ZooKeeper port's accept loop and what its connections share (`Door`).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tonic::transport::server::Connected;

use crate::api::shared::TreeService;
use crate::config::Config;
use crate::listen::{self, ListenLimits};
use crate::replica::Replica;
use crate::security::{ConnInfo, Security, ServerTls};

use super::track::{Registry, Tracked};
use super::words::{self, AllowList};

/// What every connection of the ZooKeeper port uses: the shared layer, the
/// port's bounds, and its counters.
pub struct Door {
    pub(super) replica: Replica,
    pub(super) security: Security,
    /// The tree's reads and writes, as the gRPC Tree service does them.
    pub(super) tree: TreeService,
    /// Clamp range of negotiated session timeouts (`session_ttl_min_ms`,
    /// `session_ttl_max_ms`), as ZooKeeper's min/maxSessionTimeout.
    pub(super) ttl_range_ms: (u64, u64),
    /// `zookeeper_frame_bytes_max` (ZooKeeper's jute.maxbuffer).
    pub(super) frame_bytes_max: usize,
    /// `zookeeper_watches_per_connection_max`.
    pub(super) watches_max: usize,
    /// The four-letter words answered (`zookeeper_four_letter_words`).
    pub(super) words: AllowList,
    /// The server's settings, for `conf`.
    pub(super) config: Arc<Config>,
    /// The ensemble's config as ZooKeeper's `/zookeeper/config` holds it (getConfig).
    pub(super) ensemble_config: bytes::Bytes,
    /// Frames received and sent on this port (srvr, stat, mntr).
    pub(super) packets_received: AtomicU64,
    pub(super) packets_sent: AtomicU64,
    /// The live connections and request latencies (stat, cons, wchs, mntr).
    pub(super) registry: Arc<Registry>,
    /// When the port started (mntr's uptime).
    pub(super) started: std::time::Instant,
}

/// Where ZooKeeper clients read the ensemble's config (`ZooDefs.CONFIG_NODE`):
/// getConfig is a getData of it, outside any chroot.
pub(super) const CONFIG_NODE: &str = "/zookeeper/config";

/// The ensemble as ZooKeeper's dynamic config writes it, one
/// `server.ID=HOST:QUORUM_PORT:ELECTION_PORT:ROLE[;CLIENT_ADDR]` line a member
/// (Concord's one peer port stands for both ports), then `version=` (hex; 0: the
/// membership never changes). The client address is the member's
/// `zookeeper_addr`, left out where none is configured: Curator's ensemble tracker
/// then keeps the connect string it was given.
fn ensemble_config(members: &[crate::config::Member]) -> bytes::Bytes {
    let mut text = String::new();
    for m in members {
        let role = match m.role {
            crate::config::Role::Voter => "participant",
            crate::config::Role::Observer => "observer",
        };
        let port = m.peer_addr.port();
        text.push_str(&format!("server.{}={}:{port}:{role}", m.id, m.peer_addr));
        if let Some(z) = &m.zookeeper_addr {
            text.push_str(&format!(";{z}"));
        }
        text.push('\n');
    }
    text.push_str("version=0");
    bytes::Bytes::from(text)
}

impl Door {
    pub fn new(replica: Replica, security: Security, config: Config) -> Door {
        let limits = crate::api::Limits {
            node_data_bytes_max: config.node_data_bytes_max,
        };
        Door {
            tree: TreeService::new(replica.clone(), limits),
            replica,
            security,
            ttl_range_ms: config.session_ttl_range_ms(),
            frame_bytes_max: config.zookeeper_frame_bytes_max,
            watches_max: config.zookeeper_watches_per_connection_max,
            words: AllowList::parse(&config.zookeeper_four_letter_words.join(",")),
            ensemble_config: ensemble_config(&config.ensemble()),
            config: Arc::new(config),
            packets_received: AtomicU64::new(0),
            packets_sent: AtomicU64::new(0),
            registry: Arc::default(),
            started: std::time::Instant::now(),
        }
    }

    /// The answer to a four-letter word, if the first four bytes of a connection
    /// are one (None: a length, the start of a connect request).
    pub(super) fn four_letter_answer(&self, first: &[u8]) -> Option<String> {
        let word: &[u8; 4] = first.get(..4)?.try_into().ok()?;
        if !words::is_word(word) {
            return None;
        }
        match words::answer(word, &super::track::facts(self), &self.words) {
            words::Answer::Text(text) => Some(text),
            words::Answer::NotAWord => None,
        }
    }

    /// Counts a frame received on `track`'s connection.
    pub(super) fn received(&self, track: &Tracked) {
        self.packets_received.fetch_add(1, Ordering::Relaxed);
        track.received.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a frame sent on `track`'s connection.
    pub(super) fn sent(&self, track: &Tracked) {
        self.packets_sent.fetch_add(1, Ordering::Relaxed);
        track.sent.fetch_add(1, Ordering::Relaxed);
    }
}

/// Serves the ZooKeeper port on `listener` (over `tls` when set) within `limits`
/// until `stop` resolves; then every connection is closed.
pub async fn serve(
    listener: TcpListener,
    limits: ListenLimits,
    tls: Option<ServerTls>,
    door: Arc<Door>,
    stop: impl Future<Output = ()> + Send,
) {
    match tls {
        Some(tls) => {
            let incoming = listen::incoming_tls(listener, limits, "zookeeper", tls);
            accept(incoming, |c| c.info().clone(), door, stop).await;
        }
        None => {
            let incoming = listen::incoming(listener, limits, "zookeeper");
            accept(incoming, Connected::connect_info, door, stop).await;
        }
    }
}

/// Runs one connection task per accepted connection until `stop`.
async fn accept<C, I>(
    incoming: I,
    info_of: impl Fn(&C) -> ConnInfo,
    door: Arc<Door>,
    stop: impl Future<Output = ()>,
) where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    I: futures::Stream<Item = Result<C, std::io::Error>>,
{
    let mut tasks = JoinSet::new();
    tokio::pin!(incoming);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            conn = incoming.next() => {
                // The listen streams never end nor yield errors.
                let Some(Ok(conn)) = conn else { break };
                let info = info_of(&conn);
                tasks.spawn(super::conn::run(conn, info, door.clone()));
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            () = &mut stop => break,
        }
    }
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Member, Role};

    #[test]
    fn the_ensemble_config_is_zookeepers_dynamic_config() {
        let member = |id, peer: &str, role, zk: Option<&str>| Member {
            id,
            client_addr: "127.0.0.1:1".parse().unwrap(),
            peer_addr: peer.parse().unwrap(),
            role,
            peer_identity: None,
            zookeeper_addr: zk.map(|z| z.parse().unwrap()),
        };
        let members = [
            member(1, "10.0.0.1:7182", Role::Voter, Some("10.0.0.1:2181")),
            member(2, "concord-1.peers:7182", Role::Observer, Some("c1:2181")),
        ];
        assert_eq!(
            ensemble_config(&members),
            "server.1=10.0.0.1:7182:7182:participant;10.0.0.1:2181\n\
             server.2=concord-1.peers:7182:7182:observer;c1:2181\n\
             version=0"
        );
        let members = [member(3, "[::1]:7", Role::Voter, None)];
        assert_eq!(
            ensemble_config(&members),
            "server.3=[::1]:7:7:participant\nversion=0"
        );
    }
}
