//! What the replica shows an operator: the readiness rule (`/readyz`) and the
//! gauges of its state, both read at scrape time from what the replica already
//! tracks (atomics, the tree's counts, the queues' depths), so the write path pays
//! nothing for them.
//!
//! ```text
//!   /readyz  ─▶ Standing::of(replica).ready()  ─▶ 200, or 503 + reason
//!   /metrics ─▶ Gauges::encode: roles, zxids, learners' lag, tree counts, queues
//! ```
//!
//! Ready means serving, precisely: (1) the server is not stopping; (2) it has a
//! leader: it leads an epoch a quorum established, or it follows (observes) a
//! leader whose synchronization it completed (UPTODATE received) and that answered
//! it within the forwarding path's staleness bound; (3) it has caught up: the txns
//! it knows committed but has not applied are at most `READY_LAG_TXNS_MAX`.
//!
//! What it must not do: change anything, or hold a lock longer than an O(1) copy.

use std::fmt;
use std::sync::atomic::Ordering;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::Replica;
use crate::txn::{zxid_counter, zxid_epoch, Zxid};
use crate::zab::Role;

/// Most txns a ready server may know committed and not have applied yet. On a
/// healthy server the gap is a batch or two (it applies what it knows committed at
/// once); a server whose disk cannot keep up falls behind by more.
pub const READY_LAG_TXNS_MAX: u64 = 1000;

/// Where the server stands, as the readiness rule and the gauges read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Standing {
    /// The server is stopping (shut down, or a fatal error).
    pub stopping: bool,
    pub role: Role,
    /// The leader it follows or is (None while looking).
    pub leader: Option<u64>,
    /// The core reports the leadership established here: the leader's epoch, or
    /// the learner's sync (UPTODATE received).
    pub synced: bool,
    /// A learner's forwarding path to its leader answered recently (always true
    /// on a leader and on an ensemble of one).
    pub leader_answers: bool,
    pub applied: Zxid,
    pub committed: Zxid,
}

impl Standing {
    /// The replica's standing now.
    pub fn of(replica: &Replica) -> Standing {
        let shared = &replica.shared;
        let leader = replica.leader_id();
        let leader_answers = match (&shared.forwarder, leader) {
            (Some(forwarder), Some(l)) if l != shared.server_id => forwarder.reaches(l),
            _ => true,
        };
        Standing {
            stopping: shared.stop.borrow().is_some(),
            role: replica.role(),
            leader,
            synced: shared.synced.load(Ordering::Acquire),
            leader_answers,
            applied: replica.applied_zxid(),
            committed: replica.committed_zxid(),
        }
    }

    /// `concord_server_has_leader`: it leads an established epoch, or follows (or
    /// observes) a leader it has synced with.
    pub fn has_leader(&self) -> bool {
        !self.stopping && self.role != Role::Looking && self.leader.is_some() && self.synced
    }

    /// Txns known committed here and not applied yet (a lower bound when the
    /// commit point is in a newer epoch than the applied zxid).
    pub fn behind_txns(&self) -> u64 {
        if self.committed <= self.applied {
            0
        } else if zxid_epoch(self.committed) == zxid_epoch(self.applied) {
            zxid_counter(self.committed) - zxid_counter(self.applied)
        } else {
            zxid_counter(self.committed).max(1)
        }
    }

    /// The readiness rule (module docs): Ok while serving, else why not.
    pub fn ready(&self) -> Result<(), String> {
        if self.stopping {
            return Err("the server is stopping".into());
        }
        let leader = match (self.role, self.leader) {
            (Role::Looking, _) | (_, None) => {
                return Err("no leader: looking for one (an election is under way)".into())
            }
            (_, Some(l)) => l,
        };
        if !self.synced {
            return Err(match self.role {
                Role::Leading => "leading, but no quorum has established the epoch yet".into(),
                _ => format!("synchronizing with leader {leader}"),
            });
        }
        if !self.leader_answers {
            return Err(format!("leader {leader} does not answer"));
        }
        let behind = self.behind_txns();
        if behind > READY_LAG_TXNS_MAX {
            return Err(format!(
                "catching up: {behind} txns committed but not applied (applied {:#x}, committed {:#x})",
                self.applied, self.committed
            ));
        }
        Ok(())
    }
}

/// `/readyz`'s rule over a replica.
pub struct Readiness(pub Replica);

impl crate::telemetry::http::Probe for Readiness {
    fn ready(&self) -> Result<(), String> {
        Standing::of(&self.0).ready()
    }
}

/// The gauges of the replica's state, encoded on each scrape.
pub struct Gauges {
    replica: Replica,
    /// The configured bounds shown beside the queues' depths.
    bounds: Bounds,
}

/// The bounds of the queues the replica does not keep a copy of.
#[derive(Clone, Copy, Debug)]
struct Bounds {
    proposal_queue_max: usize,
    watch_memory_bytes_max: usize,
    log_memory_bytes_max: u64,
}

impl Gauges {
    pub fn new(replica: Replica, config: &crate::config::Config) -> Gauges {
        let bounds = Bounds {
            proposal_queue_max: config.proposal_queue_max,
            watch_memory_bytes_max: config.watch_memory_bytes_max,
            log_memory_bytes_max: config.log_memory_bytes_max,
        };
        Gauges { replica, bounds }
    }
}

impl fmt::Debug for Gauges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gauges")
            .field("server_id", &self.replica.server_id())
            .finish_non_exhaustive()
    }
}

/// A learner's label: its server id (a member of the configured ensemble).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LearnerLabels {
    server_id: u64,
}

/// Writes one unlabelled gauge.
fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    let m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(v).encode(m)
}

impl Collector for Gauges {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let r = &self.replica;
        let st = Standing::of(r);
        let e = &mut enc;
        gauge(
            e,
            "concord_server_has_leader",
            "1 if this server leads an established epoch or follows a leader it has synced with",
            u64::from(st.has_leader()),
        )?;
        gauge(
            e,
            "concord_server_is_leader",
            "1 if this server leads an established epoch",
            u64::from(r.is_leader()),
        )?;
        gauge(
            e,
            "concord_server_ready",
            "1 if /readyz answers 200",
            u64::from(st.ready().is_ok()),
        )?;
        gauge(
            e,
            "concord_server_epoch",
            "The epoch this server leads or follows (0 while looking)",
            u64::from(r.epoch()),
        )?;
        gauge(
            e,
            "concord_server_applied_zxid",
            "The newest zxid applied to this server's tree",
            st.applied,
        )?;
        gauge(
            e,
            "concord_server_committed_zxid",
            "The newest zxid this server knows committed",
            st.committed,
        )?;
        self.encode_learners(e)?;
        self.encode_tree(e)?;
        self.encode_queues(e)
    }
}

impl Gauges {
    /// The leader's view of its learners (all 0, and no lag series, elsewhere).
    fn encode_learners(&self, e: &mut DescriptorEncoder) -> fmt::Result {
        let progress = self.replica.progress();
        let learners = progress.learners;
        // Synced, and heard from within sync_limit_ticks (else the core gives up on
        // it at the next check).
        let live = |l: &&crate::zab::LearnerProgress| {
            l.synced && l.heard_ticks_ago <= progress.sync_limit_ticks
        };
        let synced = |observer: bool| {
            learners
                .iter()
                .filter(|l| l.observer == observer)
                .filter(live)
                .count() as u64
        };
        gauge(
            e,
            "concord_server_synced_followers",
            "On the leader: followers synced and heard from within sync_limit_ticks",
            synced(false),
        )?;
        gauge(
            e,
            "concord_server_synced_observers",
            "On the leader: observers synced and heard from within sync_limit_ticks",
            synced(true),
        )?;
        let mut m = e.encode_descriptor(
            "concord_server_follower_lag_txns",
            "On the leader: txns of its log after each follower's newest durable ack",
            None,
            MetricType::Gauge,
        )?;
        for l in learners.iter().filter(|l| !l.observer) {
            let labels = LearnerLabels { server_id: l.id };
            ConstGauge::new(l.lag_txns).encode(m.encode_family(&labels)?)?;
        }
        Ok(())
    }

    /// Counts of the replicated tree (an O(1) copy taken under the read lock, then
    /// counted outside it) and of this server's watches.
    fn encode_tree(&self, e: &mut DescriptorEncoder) -> fmt::Result {
        let tree = self.replica.read(Clone::clone);
        let sessions = tree.sessions().count() as u64;
        gauge(
            e,
            "concord_tree_nodes",
            "Nodes in the tree, the root included",
            tree.node_count() as u64,
        )?;
        gauge(
            e,
            "concord_tree_ephemerals",
            "Ephemeral nodes in the tree",
            tree.ephemeral_count() as u64,
        )?;
        gauge(
            e,
            "concord_tree_data_bytes",
            "Bytes of node data in the tree",
            tree.data_bytes(),
        )?;
        gauge(
            e,
            "concord_tree_sessions",
            "Open sessions (replicated)",
            sessions,
        )?;
        let watches = self.replica.hub().watch_count() as u64;
        gauge(
            e,
            "concord_server_watches",
            "Watch streams open on this server",
            watches,
        )
    }

    /// The depth of every bounded queue (docs/operations.md, "Bounds").
    fn encode_queues(&self, e: &mut DescriptorEncoder) -> fmt::Result {
        let shared = &self.replica.shared;
        let queued = shared
            .proposals
            .max_capacity()
            .saturating_sub(shared.proposals.capacity());
        gauge(
            e,
            "concord_queue_proposals",
            "Writes queued for the pipeline (bound: proposal_queue_max)",
            queued as u64,
        )?;
        gauge(
            e,
            "concord_queue_proposals_max",
            "proposal_queue_max",
            self.bounds.proposal_queue_max as u64,
        )?;
        let (used, max) = shared.proposal_bytes.in_use();
        gauge(
            e,
            "concord_queue_proposal_bytes",
            "Bytes of writes queued for sequencing or in flight (bound: proposal_queue_bytes_max)",
            used as u64,
        )?;
        gauge(
            e,
            "concord_queue_proposal_bytes_max",
            "proposal_queue_bytes_max",
            max as u64,
        )?;
        let (persist, persist_max) = shared.persist_backlog.depth();
        gauge(e, "concord_queue_persist_bytes", "Bytes of log entries and snapshots queued for the disk (bound: persist_queue_bytes_max)", persist as u64)?;
        gauge(
            e,
            "concord_queue_persist_bytes_max",
            "persist_queue_bytes_max",
            persist_max as u64,
        )?;
        let forward = shared.forwarder.as_ref().map_or(0, |f| f.queued());
        gauge(
            e,
            "concord_queue_forward_writes",
            "Writes queued on this follower to be forwarded to the leader (bound: 4096)",
            forward as u64,
        )?;
        let (peer_out, peer_in) = shared
            .peer_transport
            .as_ref()
            .map_or((0, 0), |p| p.queued_bytes());
        gauge(
            e,
            "concord_queue_peer_outbound_bytes",
            "Bytes of messages waiting to go to the other members, all together (bound: peer_queue_bytes_max each)",
            peer_out as u64,
        )?;
        gauge(
            e,
            "concord_queue_peer_inbound_bytes",
            "Bytes of messages received from the other members, not yet taken by the pipeline (bound: peer_inbound_bytes_max)",
            peer_in as u64,
        )?;
        let watch = self.replica.hub().stats();
        gauge(
            e,
            "concord_queue_watch_memory_bytes",
            "Bytes all watch streams hold queued or read ahead (bound: watch_memory_bytes_max)",
            watch.memory_bytes as u64,
        )?;
        gauge(
            e,
            "concord_queue_watch_memory_bytes_max",
            "watch_memory_bytes_max",
            self.bounds.watch_memory_bytes_max as u64,
        )?;
        gauge(
            e,
            "concord_queue_watch_history_bytes",
            "Bytes of recent events kept for watch resumes (bound: watch_history_bytes_max)",
            watch.history_bytes as u64,
        )?;
        gauge(
            e,
            "concord_queue_watch_history_txns",
            "Txns of recent events kept for watch resumes (bound: watch_history_txns_max)",
            watch.history_txns as u64,
        )?;
        let (log, log_peak) = self.replica.log_bytes();
        gauge(
            e,
            "concord_log_memory_bytes",
            "Bytes of txns the in-memory log holds (bound: log_memory_bytes_max)",
            log,
        )?;
        gauge(
            e,
            "concord_log_memory_bytes_peak",
            "The most the in-memory log held since start",
            log_peak,
        )?;
        gauge(
            e,
            "concord_log_memory_bytes_max",
            "log_memory_bytes_max",
            self.bounds.log_memory_bytes_max,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::make_zxid as zxid;

    fn serving() -> Standing {
        Standing {
            stopping: false,
            role: Role::Following,
            leader: Some(1),
            synced: true,
            leader_answers: true,
            applied: zxid(3, 10),
            committed: zxid(3, 10),
        }
    }

    #[test]
    fn a_synced_learner_that_is_up_to_date_is_ready() {
        assert_eq!(serving().ready(), Ok(()));
        assert!(serving().has_leader());
        let leader = Standing {
            role: Role::Leading,
            leader: Some(2),
            ..serving()
        };
        assert_eq!(leader.ready(), Ok(()));
    }

    #[test]
    fn each_condition_makes_it_unready_with_its_reason() {
        let cases = [
            (
                Standing {
                    stopping: true,
                    ..serving()
                },
                "stopping",
            ),
            (
                Standing {
                    role: Role::Looking,
                    leader: None,
                    synced: false,
                    ..serving()
                },
                "no leader",
            ),
            (
                Standing {
                    synced: false,
                    ..serving()
                },
                "synchronizing with leader 1",
            ),
            (
                Standing {
                    role: Role::Leading,
                    synced: false,
                    ..serving()
                },
                "no quorum",
            ),
            (
                Standing {
                    leader_answers: false,
                    ..serving()
                },
                "leader 1 does not answer",
            ),
            (
                Standing {
                    committed: zxid(3, 10 + READY_LAG_TXNS_MAX + 1),
                    ..serving()
                },
                "catching up",
            ),
        ];
        for (standing, why) in cases {
            let err = standing.ready().unwrap_err();
            assert!(err.contains(why), "{standing:?}: {err}");
        }
        assert!(!Standing {
            synced: false,
            ..serving()
        }
        .has_leader());
        assert!(!Standing {
            stopping: true,
            ..serving()
        }
        .has_leader());
    }

    #[test]
    fn lag_counts_txns_across_epochs() {
        let behind = |applied, committed| {
            Standing {
                applied,
                committed,
                ..serving()
            }
            .behind_txns()
        };
        assert_eq!(behind(zxid(3, 10), zxid(3, 10)), 0);
        assert_eq!(
            behind(zxid(3, 10), zxid(3, 10 + READY_LAG_TXNS_MAX)),
            READY_LAG_TXNS_MAX
        );
        assert_eq!(
            behind(zxid(3, 10), zxid(4, 5)),
            5,
            "the new epoch's txns at least"
        );
        assert_eq!(behind(zxid(3, 10), zxid(4, 0)), 1);
        assert_eq!(behind(zxid(4, 5), zxid(3, 10)), 0);
        let at_limit = Standing {
            committed: zxid(3, 10 + READY_LAG_TXNS_MAX),
            ..serving()
        };
        assert_eq!(at_limit.ready(), Ok(()));
    }
}
