//! The admin side of `concord.v1.Cluster`: `Snapshot` streams a consistent snapshot
//! of this server's applied state, `Members` lists the ensemble as this server knows
//! it. Both expose the whole tree or the membership, so only admins may call them.
//!
//! ```text
//!   Snapshot: O(1) copy of the applied tree ─▶ blocking encoder (chunks of ~1 MiB)
//!             ─▶ bounded channel (SNAPSHOT_CHUNKS_QUEUED) ─▶ gRPC stream
//!   Members:  config members + Replica::progress (the core's view at its last tick)
//! ```
//!
//! What it must not do: hold the tree lock while encoding, or encode a snapshot
//! whole in memory.

use std::pin::Pin;
use std::sync::Arc;

use concord_proto::v1 as pb;
use concord_proto::v1::ErrorCode;
use futures::Stream;
use tokio::sync::{mpsc, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use super::convert::header;
use super::error::error;
use crate::config::{Member, Role as ConfigRole};
use crate::replica::Replica;
use crate::security::Caller;
use crate::tree::SnapshotError;
use crate::zab::Role;

/// Most bytes of snapshot in one stream message.
pub(crate) const SNAPSHOT_CHUNK_BYTES: usize = 1 << 20;
/// Chunks encoded ahead of the client, per stream.
const SNAPSHOT_CHUNKS_QUEUED: usize = 2;
/// Snapshot streams served at once; more fail with UNAVAILABLE. Each holds a copy
/// of the tree as of its start (shared with the live tree until it changes).
pub(crate) const SNAPSHOT_STREAMS_MAX: usize = 2;

pub(crate) type SnapshotStream =
    Pin<Box<dyn Stream<Item = Result<pb::SnapshotChunk, Status>> + Send>>;

/// PERMISSION_DENIED unless the caller is an admin.
pub(crate) fn require_admin(caller: &Caller, rpc: &str) -> Result<(), Status> {
    if caller.is_admin() {
        return Ok(());
    }
    Err(error(
        ErrorCode::PermissionDenied,
        format!(
            "{:?} is not an admin; Cluster/{rpc} is for admins only",
            crate::tree::path::clip(&caller.identity).to_string()
        ),
    ))
}

/// Starts streaming a snapshot of the applied tree; `streams` bounds how many run.
pub(crate) fn snapshot(
    replica: &Replica,
    streams: &Arc<Semaphore>,
) -> Result<SnapshotStream, Status> {
    let permit = streams.clone().try_acquire_owned().map_err(|_| {
        error(
            ErrorCode::Unavailable,
            format!("{SNAPSHOT_STREAMS_MAX} snapshots are being streamed already; try again later"),
        )
    })?;
    // An O(1) copy: the state at one applied zxid, whatever is written meanwhile.
    let tree = replica.read(Clone::clone);
    let zxid = tree.last_zxid();
    let info = pb::SnapshotInfo {
        header: header(replica.server_id(), zxid),
        zxid,
        node_count: tree.node_count() as u64,
        session_count: tree.sessions().count() as u64,
        format: u32::from(tree.snapshot_format()),
        server_id: replica.server_id(),
    };
    let (tx, rx) = mpsc::channel(SNAPSHOT_CHUNKS_QUEUED);
    let first = pb::SnapshotChunk {
        info: Some(info),
        data: Default::default(),
    };
    tx.try_send(Ok(first))
        .map_err(|e| error(ErrorCode::Internal, e))?;
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        // A chunk may run one record over its size: cut it so that no message
        // carries more than SNAPSHOT_CHUNK_BYTES (zero-copy slices).
        let mut send = |data: Vec<u8>| {
            let data = bytes::Bytes::from(data);
            let mut at = 0;
            while at < data.len() {
                let end = data.len().min(at + SNAPSHOT_CHUNK_BYTES);
                let chunk = pb::SnapshotChunk {
                    info: None,
                    data: data.slice(at..end),
                };
                tx.blocking_send(Ok(chunk))
                    .map_err(|_| SnapshotError::Stopped("the caller went away".into()))?;
                at = end;
            }
            Ok(())
        };
        match tree.encode_snapshot_chunks(SNAPSHOT_CHUNK_BYTES, &mut send) {
            Ok(()) => tracing::info!(zxid = format_args!("{zxid:#x}"), "snapshot streamed"),
            Err(SnapshotError::Stopped(why)) => {
                tracing::info!(zxid = format_args!("{zxid:#x}"), %why, "snapshot stream ended early");
            }
            Err(e) => {
                tracing::error!(zxid = format_args!("{zxid:#x}"), error = %e, "snapshot stream failed");
                let _ = tx.blocking_send(Err(error(ErrorCode::Internal, e)));
            }
        }
    });
    Ok(Box::pin(ReceiverStream::new(rx)))
}

/// `Cluster/Members`: every configured member as this server knows it.
pub(crate) fn members(replica: &Replica, ensemble: &[Member]) -> pb::MembersResponse {
    let me = replica.server_id();
    let leader = replica.leader_id();
    let my_role = replica.role();
    let progress = replica.progress();
    let applied = replica.applied_zxid();
    let members = ensemble
        .iter()
        .map(|m| {
            let mut status = pb::MemberStatus {
                id: m.id,
                client_addr: m.client_addr.to_string(),
                peer_addr: m.peer_addr.to_string(),
                zookeeper_addr: m
                    .zookeeper_addr
                    .as_ref()
                    .map_or_else(String::new, ToString::to_string),
                voter: m.role == ConfigRole::Voter,
                ..Default::default()
            };
            if m.id == me {
                status.role = pb_role(my_role).into();
                status.zxid = applied;
                status.lag_txns = progress.own_lag_txns;
                status.known = true;
            } else if my_role == Role::Leading {
                if let Some(p) = progress.learners.iter().find(|p| p.id == m.id) {
                    // A learner counts as what it is only while synced and heard
                    // from within the Zab core's own give-up period.
                    let alive = p.synced && p.heard_ticks_ago <= progress.sync_limit_ticks;
                    if alive {
                        status.role = if p.observer {
                            pb::Role::Observer
                        } else {
                            pb::Role::Follower
                        }
                        .into();
                    }
                    status.zxid = p.zxid;
                    status.lag_txns = p.lag_txns;
                    status.known = true;
                    status.heard_ms_ago = p.heard_ticks_ago.saturating_mul(progress.tick_ms);
                }
            } else if Some(m.id) == leader {
                status.role = pb::Role::Leader.into();
                // The newest this server received from it: the leader is at least
                // there (its newest proposal may be further on).
                status.zxid = progress.last_zxid.max(applied);
                status.known = true;
            }
            status
        })
        .collect();
    pb::MembersResponse {
        header: header(me, applied),
        server_id: me,
        leader_id: leader.unwrap_or(0),
        members,
    }
}

fn pb_role(role: Role) -> pb::Role {
    match role {
        Role::Looking => pb::Role::Looking,
        Role::Leading => pb::Role::Leader,
        Role::Following => pb::Role::Follower,
        Role::Observing => pb::Role::Observer,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::StreamExt;

    use super::*;
    use crate::config::Config;
    use crate::txn::{CreateMode, CreateOp, TxnOp};

    /// A replica holding 5 nodes of 900 KiB each (about 4.4 MiB of snapshot).
    async fn big_replica(dir: &std::path::Path) -> Replica {
        let config = Config {
            data_dir: dir.to_path_buf(),
            ..Config::default()
        };
        let replica = Replica::start(&config).await.unwrap();
        for n in 0..5 {
            let op = TxnOp::Create(CreateOp {
                path: format!("/big-{n}"),
                data: bytes::Bytes::from(vec![n as u8; 900 << 10]),
                mode: CreateMode::Persistent,
                ttl_ms: 0,
                null_data: false,
            });
            assert!(replica.submit(0, 0, op).await.unwrap().result.is_ok());
        }
        replica
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_large_snapshot_streams_in_bounded_messages_and_streams_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let replica = big_replica(dir.path()).await;
        let streams = Arc::new(Semaphore::new(SNAPSHOT_STREAMS_MAX));
        let mut stream = snapshot(&replica, &streams).unwrap();
        let info = stream.next().await.unwrap().unwrap().info.unwrap();
        let mut bytes = Vec::new();
        let mut messages = 0;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.unwrap();
            assert!(
                chunk.data.len() <= SNAPSHOT_CHUNK_BYTES,
                "{}",
                chunk.data.len()
            );
            bytes.extend_from_slice(&chunk.data);
            messages += 1;
        }
        assert!(
            messages >= 5,
            "{messages} messages for {} bytes",
            bytes.len()
        );
        let tree = crate::tree::DataTree::decode_snapshot(&bytes).unwrap();
        assert_eq!(tree.last_zxid(), info.zxid);
        assert_eq!(tree.digest(), replica.read(|t| t.digest()));

        // Streams nobody reads hold their permits; a third is refused until one
        // of them is dropped.
        let held: Vec<SnapshotStream> = (0..SNAPSHOT_STREAMS_MAX)
            .map(|_| snapshot(&replica, &streams).unwrap())
            .collect();
        let refused = snapshot(&replica, &streams).err().unwrap();
        assert_eq!(
            crate::api::error::code_of(&refused),
            Some(ErrorCode::Unavailable)
        );
        drop(held);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if snapshot(&replica, &streams).is_ok() {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the permits never came back"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        replica.shutdown();
    }
}
