//! Serving clients on any server: a follower or observer hands its clients' writes,
//! linearizable reads and keep-alives to the leader over `concord.peer.v1.Forward`
//! (on the peer address, next to the Zab transport), and answers them from its own
//! tree once it has applied far enough.
//!
//! ```text
//!   follower: submit ─▶ [queue, bounded] ─▶ batcher: every write queued meanwhile
//!             ─Submit(batch)─▶ leader: local proposals ─▶ committed, applied there
//!             ◀── (zxid, outcome) per write ──┘
//!             wait until applied here ≥ zxid ─▶ answer the client
//!   follower: linearize ─ReadIndex─▶ leader: quorum-confirmed commit point
//!             wait until applied here ≥ it ─▶ read locally
//!   follower: keep-alives ─▶ touched set ─every tick─Touch─▶ leader: full TTL
//! ```
//!
//! The outcome is the leader's: applying a txn is deterministic, so it is the one this
//! server computes too. The leader never forwards again: a server that is asked but
//! does not lead answers "not the leader", and the caller's client retries.
//!
//! What it must not do: forward to itself, or answer a client before its own tree has
//! applied the write it reports.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use concord_proto::peer::v1 as pb;
use futures::future::join_all;
use pb::forward_client::ForwardClient;
use pb::forward_server::{Forward, ForwardServer};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Response, Status};

use super::{Committed, Replica, ReplicaError, Shared};
use crate::config::Member;
use crate::peer::{decode, encode};
use crate::tree::{TreeError, TxnResult};
use crate::txn::{Fence, TxnOp, Zxid};
use crate::zab::ServerId;

/// Writes waiting to be forwarded; callers wait when it is full.
const QUEUE_WRITES_MAX: usize = 4096;
/// Most writes in one Submit.
const BATCH_WRITES_MAX: usize = 256;
/// Most Submit calls in flight at once (the next batch gathers meanwhile).
const BATCHES_IN_FLIGHT_MAX: usize = 4;
/// Longest a forwarded write or read index may take at the leader.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a keep-alive report may take (a later tick reports again).
const TOUCH_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest this server waits to apply a write the leader reported committed.
const APPLY_WAIT_MAX: Duration = Duration::from_secs(10);
/// Largest forwarded message either way (client writes are bounded far below it).
const MESSAGE_BYTES_MAX: usize = 64 << 20;
/// The message of FAILED_PRECONDITION from a server that does not lead.
const NOT_LEADER: &str = "not the leader";

/// A client write as it travels to the leader.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct Write {
    pub(super) session_id: u64,
    pub(super) request_id: u64,
    pub(super) fence: Option<Fence>,
    pub(super) op: TxnOp,
}

/// The calling side: a queue of writes that a batcher task forwards, and the
/// channels to leaders.
pub(super) struct Forwarder {
    queue: mpsc::Sender<Queued>,
    calls: Arc<Calls>,
}

/// One lazily connected channel per leader forwarded to.
struct Calls {
    caller: pb::Caller,
    addrs: HashMap<ServerId, SocketAddr>,
    clients: Mutex<HashMap<ServerId, ForwardClient<Channel>>>,
}

/// A write waiting for the batcher.
struct Queued {
    leader: ServerId,
    write: Write,
    reply: oneshot::Sender<Result<Committed, ReplicaError>>,
}

impl Forwarder {
    /// Must be called within a tokio runtime: it starts the batcher, which ends
    /// when the forwarder is dropped.
    pub(super) fn new(id: ServerId, cluster_id: u64, members: &[Member]) -> Forwarder {
        let calls = Arc::new(Calls {
            caller: pb::Caller {
                from: id,
                cluster_id,
            },
            addrs: members
                .iter()
                .filter(|m| m.id != id)
                .map(|m| (m.id, m.peer_addr))
                .collect(),
            clients: Mutex::new(HashMap::new()),
        });
        let (queue, rx) = mpsc::channel(QUEUE_WRITES_MAX);
        tokio::spawn(batcher(calls.clone(), rx));
        Forwarder { queue, calls }
    }

    /// Has `leader` sequence `write`; returns its zxid and outcome once committed.
    pub(super) async fn submit(
        &self,
        leader: ServerId,
        write: Write,
    ) -> Result<Committed, ReplicaError> {
        let (reply, rx) = oneshot::channel();
        let stopped = || ReplicaError::Unavailable("the server is stopping".into());
        let queued = Queued {
            leader,
            write,
            reply,
        };
        self.queue.send(queued).await.map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
    }

    /// The leader's quorum-confirmed commit point.
    pub(super) async fn read_index(&self, leader: ServerId) -> Result<Zxid, ReplicaError> {
        self.calls.read_index(leader).await
    }

    /// Reports sessions kept alive here.
    pub(super) async fn touch(
        &self,
        leader: ServerId,
        session_ids: Vec<u64>,
    ) -> Result<(), ReplicaError> {
        self.calls.touch(leader, session_ids).await
    }
}

/// Forwards every write queued while earlier batches were in flight as one batch per
/// leader, with at most `BATCHES_IN_FLIGHT_MAX` batches in flight.
async fn batcher(calls: Arc<Calls>, mut queue: mpsc::Receiver<Queued>) {
    let in_flight = Arc::new(Semaphore::new(BATCHES_IN_FLIGHT_MAX));
    let mut taken = Vec::with_capacity(BATCH_WRITES_MAX);
    loop {
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        if queue.recv_many(&mut taken, BATCH_WRITES_MAX).await == 0 {
            return;
        }
        // Usually one leader; after a change, writes queued for the old one go
        // there too (it refuses them, and their clients retry).
        let mut by_leader: Vec<(ServerId, Vec<Queued>)> = Vec::new();
        for q in taken.drain(..) {
            match by_leader.iter_mut().find(|(l, _)| *l == q.leader) {
                Some((_, batch)) => batch.push(q),
                None => by_leader.push((q.leader, vec![q])),
            }
        }
        let calls = calls.clone();
        tokio::spawn(async move {
            for (leader, batch) in by_leader {
                calls.submit(leader, batch).await;
            }
            drop(permit);
        });
    }
}

impl Calls {
    fn client(&self, leader: ServerId) -> Result<ForwardClient<Channel>, ReplicaError> {
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = clients.get(&leader) {
            return Ok(c.clone());
        }
        let addr = self
            .addrs
            .get(&leader)
            .ok_or_else(|| ReplicaError::Unavailable(format!("leader {leader} is not a member")))?;
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| ReplicaError::Unavailable(format!("peer address {addr}: {e}")))?
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(1))
            .keep_alive_timeout(Duration::from_secs(1));
        let client = ForwardClient::new(endpoint.connect_lazy())
            .max_decoding_message_size(MESSAGE_BYTES_MAX)
            .max_encoding_message_size(MESSAGE_BYTES_MAX);
        clients.insert(leader, client.clone());
        Ok(client)
    }

    /// Has `leader` sequence a batch of writes, and answers each one's caller.
    async fn submit(&self, leader: ServerId, batch: Vec<Queued>) {
        let mut request = Request::new(pb::SubmitRequest {
            caller: Some(self.caller),
            writes: batch.iter().map(|q| encode(&q.write).into()).collect(),
        });
        request.set_timeout(CALL_TIMEOUT);
        let reply = match self.client(leader) {
            Ok(mut client) => client
                .submit(request)
                .await
                .map_err(|s| from_status(leader, &s)),
            Err(e) => Err(e),
        };
        let outcomes = match reply {
            Ok(reply) if reply.get_ref().outcomes.len() == batch.len() => {
                reply.into_inner().outcomes
            }
            Ok(_) => {
                let e = format!("leader {leader} answered a batch with the wrong count");
                return fail_all(batch, &ReplicaError::Unavailable(e));
            }
            Err(e) => return fail_all(batch, &e),
        };
        for (q, outcome) in batch.into_iter().zip(outcomes) {
            let _ = q.reply.send(committed(leader, outcome));
        }
    }

    /// The leader's quorum-confirmed commit point.
    async fn read_index(&self, leader: ServerId) -> Result<Zxid, ReplicaError> {
        let mut request = Request::new(pb::ReadIndexRequest {
            caller: Some(self.caller),
        });
        request.set_timeout(CALL_TIMEOUT);
        let reply = self
            .client(leader)?
            .read_index(request)
            .await
            .map_err(|s| from_status(leader, &s))?;
        Ok(reply.into_inner().zxid)
    }

    /// Reports sessions kept alive here.
    async fn touch(&self, leader: ServerId, session_ids: Vec<u64>) -> Result<(), ReplicaError> {
        let mut request = Request::new(pb::TouchRequest {
            caller: Some(self.caller),
            session_ids,
        });
        request.set_timeout(TOUCH_TIMEOUT);
        self.client(leader)?
            .touch(request)
            .await
            .map_err(|s| from_status(leader, &s))?;
        Ok(())
    }
}

fn fail_all(batch: Vec<Queued>, e: &ReplicaError) {
    for q in batch {
        let _ = q.reply.send(Err(e.clone()));
    }
}

/// One write's outcome as the leader reported it.
fn committed(leader: ServerId, outcome: pb::Outcome) -> Result<Committed, ReplicaError> {
    if outcome.not_leader {
        return Err(ReplicaError::NotLeader { leader: None });
    }
    if !outcome.error.is_empty() {
        return Err(ReplicaError::Unavailable(outcome.error));
    }
    let result: Result<TxnResult, TreeError> = decode(&outcome.outcome).map_err(|e| {
        ReplicaError::Unavailable(format!("leader {leader} sent a bad outcome: {e}"))
    })?;
    Ok(Committed {
        zxid: outcome.zxid,
        result,
    })
}

/// A failed call, as the client of this server should see it.
fn from_status(leader: ServerId, status: &Status) -> ReplicaError {
    if status.code() == Code::FailedPrecondition && status.message() == NOT_LEADER {
        return ReplicaError::NotLeader { leader: None };
    }
    ReplicaError::Unavailable(format!(
        "forwarding to leader {leader}: {}",
        status.message()
    ))
}

impl Replica {
    /// The leader to hand requests to: this server follows or observes one.
    pub(super) fn forward_target(&self) -> Option<(&Forwarder, ServerId)> {
        let forwarder = self.shared.forwarder.as_ref()?;
        let learner = matches!(
            self.role(),
            crate::zab::Role::Following | crate::zab::Role::Observing
        );
        let leader = self.leader_id()?;
        (learner && leader != self.shared.server_id).then_some((forwarder, leader))
    }

    /// Forwards `write` to `leader`, then waits until this server has applied it.
    pub(super) async fn forward(
        &self,
        forwarder: &Forwarder,
        leader: ServerId,
        write: Write,
    ) -> Result<Committed, ReplicaError> {
        let committed = forwarder.submit(leader, write).await?;
        self.wait_applied(committed.zxid, APPLY_WAIT_MAX).await?;
        Ok(committed)
    }
}

/// The serving side: answers only while this server leads.
pub(super) struct ForwardService {
    /// Set once the replica runs (the peer listener starts before it).
    replica: Arc<OnceLock<Weak<Shared>>>,
    cluster_id: u64,
    /// Members allowed to call: every member but this server.
    callers: HashSet<ServerId>,
}

impl ForwardService {
    /// The service and the slot to put the running replica in.
    pub(super) fn new(
        id: ServerId,
        cluster_id: u64,
        members: &[Member],
    ) -> (ForwardServer<ForwardService>, Arc<OnceLock<Weak<Shared>>>) {
        let replica = Arc::new(OnceLock::new());
        let service = ForwardService {
            replica: replica.clone(),
            cluster_id,
            callers: members.iter().map(|m| m.id).filter(|&m| m != id).collect(),
        };
        let server = ForwardServer::new(service)
            .max_decoding_message_size(MESSAGE_BYTES_MAX)
            .max_encoding_message_size(MESSAGE_BYTES_MAX);
        (server, replica)
    }

    /// Checks the caller and that this server leads; gives the replica to act on.
    fn leader(&self, caller: Option<&pb::Caller>) -> Result<Replica, Status> {
        let caller = caller.ok_or_else(|| Status::invalid_argument("no caller"))?;
        if !self.callers.contains(&caller.from) {
            return Err(Status::permission_denied(format!(
                "server {} is not a member of this ensemble",
                caller.from
            )));
        }
        if caller.cluster_id != self.cluster_id {
            return Err(Status::failed_precondition(format!(
                "cluster {} is not this server's cluster {}",
                caller.cluster_id, self.cluster_id
            )));
        }
        let shared = self
            .replica
            .get()
            .and_then(Weak::upgrade)
            .ok_or_else(|| Status::unavailable("the server is starting or stopping"))?;
        let replica = Replica { shared };
        // A leader still establishing its epoch holds requests until it serves.
        if replica.role() != crate::zab::Role::Leading {
            return Err(Status::failed_precondition(NOT_LEADER));
        }
        Ok(replica)
    }
}

/// A local failure, as the forwarding server should see it.
fn to_status(e: ReplicaError) -> Status {
    match e {
        ReplicaError::NotLeader { .. } => Status::failed_precondition(NOT_LEADER),
        other => Status::unavailable(other.to_string()),
    }
}

#[tonic::async_trait]
impl Forward for ForwardService {
    async fn submit(
        &self,
        request: Request<pb::SubmitRequest>,
    ) -> Result<Response<pb::SubmitReply>, Status> {
        let request = request.into_inner();
        let replica = self.leader(request.caller.as_ref())?;
        let writes: Vec<Write> = request
            .writes
            .iter()
            .map(|w| decode(w))
            .collect::<Result<_, _>>()
            .map_err(|e| Status::invalid_argument(format!("bad write: {e}")))?;
        // All queued before any is awaited, so they share a proposal batch.
        let results = join_all(writes.into_iter().map(|w| replica.submit_local(w))).await;
        let outcomes = results
            .into_iter()
            .map(|r| match r {
                Ok(c) => pb::Outcome {
                    zxid: c.zxid,
                    outcome: encode(&c.result).into(),
                    ..Default::default()
                },
                Err(ReplicaError::NotLeader { .. }) => pb::Outcome {
                    not_leader: true,
                    error: NOT_LEADER.into(),
                    ..Default::default()
                },
                Err(e) => pb::Outcome {
                    error: e.to_string(),
                    ..Default::default()
                },
            })
            .collect();
        Ok(Response::new(pb::SubmitReply { outcomes }))
    }

    async fn read_index(
        &self,
        request: Request<pb::ReadIndexRequest>,
    ) -> Result<Response<pb::ReadIndexReply>, Status> {
        let replica = self.leader(request.get_ref().caller.as_ref())?;
        let zxid = replica.local_read_index().await.map_err(to_status)?;
        Ok(Response::new(pb::ReadIndexReply { zxid }))
    }

    async fn touch(
        &self,
        request: Request<pb::TouchRequest>,
    ) -> Result<Response<pb::TouchReply>, Status> {
        let request = request.into_inner();
        let replica = self.leader(request.caller.as_ref())?;
        let now = replica.now_ms();
        let mut sessions = replica.shared.lock_sessions();
        let known = request
            .session_ids
            .iter()
            .filter(|&&id| sessions.touch(id, now).is_some())
            .count();
        Ok(Response::new(pb::TouchReply {
            known: known as u64,
        }))
    }
}
