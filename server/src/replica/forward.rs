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
//!   follower: linearize ─▶ [reads waiting, bounded] ─▶ one ReadIndex a round for
//!             every read that came before it was sent ─▶ leader: quorum-confirmed
//!             commit point; wait until applied here ≥ it ─▶ read locally
//!   follower: keep-alives ─▶ touched set ─every tick─Touch─▶ leader: full TTL
//! ```
//!
//! The outcome is the leader's: applying a txn is deterministic, so it is the one this
//! server computes too. The leader never forwards again: a server that is asked but
//! does not lead answers "not the leader", and the caller's client retries.
//!
//! Failover: a write this server could not hand over (still queued when the leader
//! was given up, the connection never made, the link to the leader silent, or refused
//! by a server that does not lead) is `Failed::NotSent`: the replica sends it to the
//! next leader. A write that was sent and got no answer (the leader stopped, this
//! server stopped following it, or the link went silent with the call in flight) is
//! `Failed::Unknown`: it may still commit, so the client hears "outcome unknown". A
//! follower asks its leader for a `Touch` every tick; a link that answers nothing for
//! `stale_after` counts as cut (a stopped leader, or a one-way cut of this server's
//! links to it while it still hears the leader), and nothing new is sent on it.
//!
//! What it must not do: forward to itself, or answer a client before its own tree has
//! applied the write it reports.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use tokio::time::Instant;

use concord_direct::Link;
use concord_proto::peer::v1 as pb;
use futures::future::join_all;
use pb::forward_client::ForwardClient;
use pb::forward_server::{Forward, ForwardServer};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tonic::{Code, Request, Response, Status};

use super::forward_link::forward_link;
use super::{Committed, Replica, ReplicaError, Shared};
use crate::config::{Address, Member};
use crate::peer::{decode, encode};
use crate::telemetry::trace::WriteTrace;
use crate::tree::{TreeError, TxnResult};
use crate::txn::{Fence, TxnOp, Zxid};
use crate::zab::ServerId;

/// Writes waiting to be forwarded; callers wait when it is full.
const QUEUE_WRITES_MAX: usize = 4096;
/// Most writes in one Submit.
const BATCH_WRITES_MAX: usize = 256;
/// A Submit closes once its writes weigh this much (`zab::log::op_bytes`); a write
/// heavier than it travels alone.
const BATCH_BYTES_MAX: usize = 8 << 20;
/// Most Submit calls in flight at once (the next batch gathers meanwhile).
const BATCHES_IN_FLIGHT_MAX: usize = 4;
/// Most linearizable reads waiting for a read index from the leader; more are
/// refused (UNAVAILABLE, to be retried).
const READS_WAITING_MAX: usize = 16384;
/// Longest a keep-alive report may take (a later tick reports again).
const TOUCH_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest a forwarded write or read index may take at the leader.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest this server waits to apply a write the leader reported committed.
const APPLY_WAIT_MAX: Duration = Duration::from_secs(10);

/// Largest forwarded message either way, for client requests of at most
/// `request_bytes_max`: a batch (`BATCH_BYTES_MAX`, or one request heavier than
/// that), plus 1 MiB for the rest of the message (headers, a Multi's results).
pub(super) fn message_bytes_max(request_bytes_max: usize) -> usize {
    BATCH_BYTES_MAX
        .max(request_bytes_max)
        .saturating_add(1 << 20)
}
/// The message of FAILED_PRECONDITION from a server that does not lead.
const NOT_LEADER: &str = "not the leader";

/// A client write as it travels to the leader.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Write {
    pub(crate) session_id: u64,
    pub(crate) request_id: u64,
    pub(crate) fence: Option<Fence>,
    pub(crate) op: TxnOp,
    /// The zxid of the tree its permissions were checked on (0: not checked; see
    /// `Replica::submit_checked`). On the wire beside the write
    /// (`SubmitRequest.checked_at`), so servers of either version decode it.
    #[serde(skip)]
    pub(crate) checked_at: Zxid,
    /// Its trace, if it is in a sampled one (`telemetry::trace`). On the wire beside
    /// the write too (`SubmitRequest.traceparent`).
    #[serde(skip)]
    pub(crate) trace: Option<WriteTrace>,
}

/// The calling side: a queue of writes that a batcher task forwards, and the
/// channels to leaders.
pub(super) struct Forwarder {
    queue: mpsc::Sender<Queued>,
    calls: Arc<Calls>,
}

/// Why a forwarded write has no outcome from the leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Failed {
    /// The leader certainly did not apply it: it was never sent (queued when the
    /// leader was given up, the link silent, the connection never made), or a server
    /// that does not lead refused it. Safe to send again, to the next leader.
    NotSent(String),
    /// It was sent and no outcome came back (or the leader failed it after it may
    /// have proposed it): it may still commit.
    Unknown(String),
}

/// One lazily connected channel per leader forwarded to, and what this server knows
/// of the path to each.
struct Calls {
    caller: pb::Caller,
    /// Peer address (dialled) of every other member.
    addrs: HashMap<ServerId, Address>,
    /// Client address of every member, for the leader hint in NotLeader.
    client_addrs: HashMap<ServerId, Address>,
    clients: Mutex<HashMap<ServerId, ForwardClient<Link>>>,
    /// Linearizable reads waiting for the next ReadIndex round.
    reads: Mutex<ReadRounds>,
    /// The leader this server follows (None: it follows none), as the pipeline last
    /// reported it. Calls to a leader given up end at once.
    following: watch::Sender<Option<ServerId>>,
    /// When each leader last answered a call: the path to it works.
    answered: Mutex<HashMap<ServerId, Instant>>,
    /// Bumped on every answer, to wake those waiting for a path to come back.
    heard: watch::Sender<u64>,
    /// A probe of a new leader's path is in flight (`Forwarder::follow`).
    probing: AtomicBool,
    /// A path with no answer for this long counts as cut.
    stale_after: Duration,
    /// Largest message to or from a leader (`message_bytes_max`).
    message_bytes_max: usize,
    /// mTLS for the calls (this server's peer certificate); None: plain text.
    tls: Option<crate::security::PeerClientTls>,
}

/// A write waiting for the batcher.
struct Queued {
    leader: ServerId,
    write: Write,
    reply: oneshot::Sender<Result<Committed, Failed>>,
}

impl Forwarder {
    /// Must be called within a tokio runtime: it starts the batcher, which ends
    /// when the forwarder is dropped. A path to a leader that answers nothing for
    /// `stale_after` counts as cut.
    pub(super) fn new(
        id: ServerId,
        cluster_id: u64,
        members: &[Member],
        stale_after: Duration,
        message_bytes_max: usize,
        tls: Option<crate::security::PeerClientTls>,
    ) -> Forwarder {
        let calls = Arc::new(Calls {
            caller: pb::Caller {
                from: id,
                cluster_id,
            },
            addrs: members
                .iter()
                .filter(|m| m.id != id)
                .map(|m| (m.id, m.peer_addr.clone()))
                .collect(),
            client_addrs: members
                .iter()
                .map(|m| (m.id, m.client_addr.clone()))
                .collect(),
            clients: Mutex::new(HashMap::new()),
            reads: Mutex::new(ReadRounds::default()),
            following: watch::Sender::new(None),
            answered: Mutex::new(HashMap::new()),
            heard: watch::Sender::new(0),
            probing: AtomicBool::new(false),
            stale_after,
            message_bytes_max,
            tls,
        });
        let (queue, rx) = mpsc::channel(QUEUE_WRITES_MAX);
        tokio::spawn(batcher(calls.clone(), rx));
        Forwarder { queue, calls }
    }

    /// Has `leader` sequence `write`; returns its zxid and outcome once committed,
    /// or why there is none. `Err(Ok(_))`: the server is stopping.
    pub(super) async fn submit(
        &self,
        leader: ServerId,
        write: Write,
    ) -> Result<Committed, Result<Failed, ReplicaError>> {
        let (reply, rx) = oneshot::channel();
        let stopped = || Err(ReplicaError::Unavailable("the server is stopping".into()));
        let queued = Queued {
            leader,
            write,
            reply,
        };
        self.queue.send(queued).await.map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?.map_err(Ok)
    }

    /// The leader's quorum-confirmed commit point, asked after this call began: from
    /// the next ReadIndex round, which carries every read waiting (`read_rounds`).
    pub(super) async fn read_index(&self, leader: ServerId) -> Result<Zxid, ReplicaError> {
        let (reply, rx) = oneshot::channel();
        let start_rounds = {
            let mut rounds = lock(&self.calls.reads);
            if rounds.waiting.len() >= READS_WAITING_MAX {
                return Err(ReplicaError::Unavailable(format!(
                    "{READS_WAITING_MAX} linearizable reads already wait for leader {leader}"
                )));
            }
            rounds.waiting.push((leader, reply));
            !std::mem::replace(&mut rounds.running, true)
        };
        if start_rounds {
            tokio::spawn(read_rounds(self.calls.clone()));
        }
        rx.await
            .map_err(|_| ReplicaError::Unavailable("the server is stopping".into()))?
    }

    /// Records the leader this server now follows (None: none); calls in flight to
    /// another end at once. `synced`: this server is in sync with that leader, which
    /// therefore leads an epoch. A path to it not yet heard answering is then asked
    /// at once (an empty keep-alive report) rather than at the next tick's report:
    /// writes that wait for a path to a new leader go as soon as it serves.
    pub(super) fn follow(&self, leader: Option<ServerId>, synced: bool) {
        self.calls.following.send_if_modified(|f| {
            let changed = *f != leader;
            *f = leader;
            changed
        });
        let Some(leader) = leader.filter(|&l| synced && !self.calls.reaches(l)) else {
            return;
        };
        if !self.calls.probing.swap(true, Ordering::AcqRel) {
            let calls = self.calls.clone();
            tokio::spawn(async move {
                if let Err(e) = calls.touch(leader, Vec::new()).await {
                    tracing::debug!(leader, error = %e, "probe of a new leader failed");
                }
                calls.probing.store(false, Ordering::Release);
            });
        }
    }

    /// Whether `leader` answered a call within `stale_after`: the path to it works.
    pub(super) fn reaches(&self, leader: ServerId) -> bool {
        self.calls.reaches(leader)
    }

    /// Writes queued to be forwarded now (at most `QUEUE_WRITES_MAX`).
    pub(super) fn queued(&self) -> usize {
        QUEUE_WRITES_MAX.saturating_sub(self.queue.capacity())
    }

    /// Where clients of member `id` connect.
    pub(super) fn client_addr(&self, id: ServerId) -> Option<Address> {
        self.calls.client_addrs.get(&id).cloned()
    }

    /// Changes each time a leader answers a call (to wait for a path to come back).
    pub(super) fn heard(&self) -> watch::Receiver<u64> {
        self.calls.heard.subscribe()
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
/// leader (or more, of at most `BATCH_BYTES_MAX` each), with at most
/// `BATCHES_IN_FLIGHT_MAX` gatherings in flight.
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
        let by_leader = split(taken.drain(..));
        let calls = calls.clone();
        tokio::spawn(async move {
            for (leader, batch) in by_leader {
                // Writes queued for a leader given up meanwhile never leave.
                match calls.unusable(leader) {
                    Some(why) => fail_all(batch, &Failed::NotSent(why)),
                    None => calls.submit(leader, batch).await,
                }
            }
            drop(permit);
        });
    }
}

/// Linearizable reads waiting for a read index, and whether a `read_rounds` task
/// is running (it takes them when its round's call ends).
#[derive(Default)]
struct ReadRounds {
    waiting: Vec<(ServerId, oneshot::Sender<Result<Zxid, ReplicaError>>)>,
    running: bool,
}

/// Asks each leader once per round for the read index of every read waiting, round
/// after round until none waits. A read shares only a call sent after it began: one
/// that comes while a call is in flight waits for the next round, so the commit
/// point it gets covers every write acknowledged before it began (as its own call
/// would). On a busy follower this is one call per round trip instead of one per
/// read (docs/benchmarks.md, "Read index rounds").
async fn read_rounds(calls: Arc<Calls>) {
    loop {
        let round = {
            let mut rounds = lock(&calls.reads);
            if rounds.waiting.is_empty() {
                rounds.running = false;
                return;
            }
            std::mem::take(&mut rounds.waiting)
        };
        let mut by_leader: Vec<(ServerId, Vec<_>)> = Vec::new();
        for (leader, reply) in round {
            match by_leader.iter_mut().find(|(l, _)| *l == leader) {
                Some((_, replies)) => replies.push(reply),
                None => by_leader.push((leader, vec![reply])),
            }
        }
        let calls = &calls;
        join_all(by_leader.into_iter().map(|(leader, replies)| async move {
            let index = calls.read_index(leader).await;
            for reply in replies {
                let _ = reply.send(index.clone());
            }
        }))
        .await;
    }
}

/// Writes in queue order as batches per leader, each closed at `BATCH_BYTES_MAX`.
/// Usually one leader; after a change, writes queued for the old one go there too (it
/// refuses them, and they are sent on).
fn split(taken: impl Iterator<Item = Queued>) -> Vec<(ServerId, Vec<Queued>)> {
    let mut batches: Vec<(ServerId, usize, Vec<Queued>)> = Vec::new();
    for q in taken {
        let bytes = crate::zab::log::op_bytes(&q.write.op);
        let open = batches
            .iter_mut()
            .rev()
            .find(|(leader, _, _)| *leader == q.leader)
            .filter(|(_, sum, _)| sum.saturating_add(bytes) <= BATCH_BYTES_MAX);
        match open {
            Some((_, sum, batch)) => {
                *sum += bytes;
                batch.push(q);
            }
            None => batches.push((q.leader, bytes, vec![q])),
        }
    }
    batches.into_iter().map(|(l, _, b)| (l, b)).collect()
}

impl Calls {
    fn client(&self, leader: ServerId) -> Result<ForwardClient<Link>, ReplicaError> {
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        if self.tls.as_ref().is_some_and(|t| t.files_changed()) {
            // Rotated peer files: new links, whose dials present the new ones.
            clients.clear();
        }
        if let Some(c) = clients.get(&leader) {
            return Ok(c.clone());
        }
        let addr = self
            .addrs
            .get(&leader)
            .ok_or_else(|| ReplicaError::Unavailable(format!("leader {leader} is not a member")))?;
        let link = forward_link(leader, addr.clone(), self.tls.clone());
        let client = ForwardClient::new(link)
            .max_decoding_message_size(self.message_bytes_max)
            .max_encoding_message_size(self.message_bytes_max);
        clients.insert(leader, client.clone());
        Ok(client)
    }

    /// Why nothing may be sent to `leader` now: this server does not follow it, or
    /// the path to it answers nothing.
    fn unusable(&self, leader: ServerId) -> Option<String> {
        if *self.following.borrow() != Some(leader) {
            return Some(format!("this server no longer follows leader {leader}"));
        }
        (!self.reaches(leader)).then(|| self.silent(leader))
    }

    fn silent(&self, leader: ServerId) -> String {
        format!(
            "leader {leader} answered nothing for {} ms",
            self.stale_after.as_millis()
        )
    }

    fn reaches(&self, leader: ServerId) -> bool {
        let answered = lock(&self.answered).get(&leader).copied();
        answered.is_some_and(|at| at.elapsed() < self.stale_after)
    }

    /// `leader` answered a call: the path to it works.
    fn heard_from(&self, leader: ServerId) {
        lock(&self.answered).insert(leader, Instant::now());
        self.heard.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Resolves once a call to `leader` in flight must be given up: this server
    /// stopped following it, or the path to it answered nothing for `stale_after`.
    async fn lost(&self, leader: ServerId) -> String {
        let mut following = self.following.subscribe();
        let mut heard = self.heard.subscribe();
        loop {
            if *following.borrow_and_update() != Some(leader) {
                return format!("this server stopped following leader {leader}");
            }
            heard.borrow_and_update();
            let since = lock(&self.answered).get(&leader).copied();
            let Some(since) = since else {
                return self.silent(leader);
            };
            let stale_at = since + self.stale_after;
            if Instant::now() >= stale_at {
                return self.silent(leader);
            }
            tokio::select! {
                _ = following.changed() => {}
                _ = heard.changed() => {}
                () = tokio::time::sleep_until(stale_at) => {}
            }
        }
    }

    /// Resolves once this server no longer follows `leader`.
    async fn unfollowed(&self, leader: ServerId) -> String {
        let mut following = self.following.subscribe();
        let _ = following.wait_for(|f| *f != Some(leader)).await;
        if following.has_changed().is_err() {
            // The forwarder is gone: the server is stopping.
            std::future::pending::<()>().await;
        }
        format!("this server stopped following leader {leader}")
    }

    /// Has `leader` sequence a batch of writes, and answers each one's caller.
    async fn submit(&self, leader: ServerId, batch: Vec<Queued>) {
        let mut request = Request::new(pb::SubmitRequest {
            caller: Some(self.caller),
            writes: batch.iter().map(|q| encode(&q.write).into()).collect(),
            checked_at: batch.iter().map(|q| q.write.checked_at).collect(),
            traceparent: batch
                .iter()
                .map(|q| {
                    q.write
                        .trace
                        .as_ref()
                        .map(WriteTrace::traceparent)
                        .unwrap_or_default()
                })
                .collect(),
        });
        request.set_timeout(CALL_TIMEOUT);
        let mut client = match self.client(leader) {
            Ok(client) => client,
            Err(e) => return fail_all(batch, &Failed::NotSent(e.to_string())),
        };
        let reply = tokio::select! {
            reply = client.submit(request) => reply.map_err(|s| classify(leader, &s)),
            why = self.lost(leader) => Err(Failed::Unknown(why)),
        };
        let outcomes = match reply {
            Ok(reply) if reply.get_ref().outcomes.len() == batch.len() => {
                self.heard_from(leader);
                reply.into_inner().outcomes
            }
            Ok(_) => {
                let e = format!("leader {leader} answered a batch with the wrong count");
                return fail_all(batch, &Failed::Unknown(e));
            }
            Err(e) => return fail_all(batch, &e),
        };
        for (q, outcome) in batch.into_iter().zip(outcomes) {
            let _ = q.reply.send(committed(leader, outcome));
        }
    }

    /// The leader's quorum-confirmed commit point. A silent path fails at once, and
    /// a call in flight ends when the leader is given up (a read may be retried).
    async fn read_index(&self, leader: ServerId) -> Result<Zxid, ReplicaError> {
        if let Some(why) = self.unusable(leader) {
            return Err(not_leader(leader, why));
        }
        let mut request = Request::new(pb::ReadIndexRequest {
            caller: Some(self.caller),
        });
        request.set_timeout(CALL_TIMEOUT);
        let mut client = self.client(leader)?;
        let reply = tokio::select! {
            reply = client.read_index(request) => reply.map_err(|s| from_status(leader, &s))?,
            why = self.lost(leader) => return Err(not_leader(leader, why)),
        };
        self.heard_from(leader);
        Ok(reply.into_inner().zxid)
    }

    /// Reports sessions kept alive here (none: a probe of the path). The answer
    /// shows the path works; a path answering nothing for `stale_after` is cut.
    async fn touch(&self, leader: ServerId, session_ids: Vec<u64>) -> Result<(), ReplicaError> {
        let mut request = Request::new(pb::TouchRequest {
            caller: Some(self.caller),
            session_ids,
        });
        request.set_timeout(TOUCH_TIMEOUT);
        let mut client = self.client(leader)?;
        // Ends with the leader given up, so the next tick probes the next one.
        // (Not when the path is silent: this call is what finds it working again.)
        tokio::select! {
            reply = client.touch(request) => reply.map_err(|s| from_status(leader, &s))?,
            why = self.unfollowed(leader) => return Err(not_leader(leader, why)),
        };
        self.heard_from(leader);
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn fail_all(batch: Vec<Queued>, e: &Failed) {
    for q in batch {
        let _ = q.reply.send(Err(e.clone()));
    }
}

/// NotLeader for a request this server could not hand to `leader`.
fn not_leader(leader: ServerId, why: String) -> ReplicaError {
    ReplicaError::NotLeader {
        leader: Some(leader),
        client_addr: None,
        why,
    }
}

/// One write's outcome as the leader reported it.
fn committed(leader: ServerId, outcome: pb::Outcome) -> Result<Committed, Failed> {
    if outcome.not_leader {
        return Err(Failed::NotSent(format!("server {leader} does not lead")));
    }
    if !outcome.error.is_empty() {
        // The leader may have proposed it before it failed.
        return Err(Failed::Unknown(format!(
            "leader {leader}: {}",
            outcome.error
        )));
    }
    let result: Result<TxnResult, TreeError> = decode(&outcome.outcome)
        .map_err(|e| Failed::Unknown(format!("leader {leader} sent a bad outcome: {e}")))?;
    Ok(Committed {
        zxid: outcome.zxid,
        result,
    })
}

/// Whether a failed Submit may have reached the leader's pipeline. Only the
/// leader's own refusals (it does not lead, the caller or request is bad: all
/// checked before anything is proposed) and a request that never left this server
/// (no connection to the leader could be made) are certainly not applied; anything
/// else — a broken connection, a reset stream, a timeout — leaves the outcome
/// unknown.
fn classify(leader: ServerId, status: &Status) -> Failed {
    let why = format!("forwarding to leader {leader}: {}", status.message());
    let refused = matches!(
        status.code(),
        Code::FailedPrecondition | Code::PermissionDenied | Code::InvalidArgument
    );
    // A request that never left: no connection to the leader could be made, or the
    // one there no longer took calls.
    if refused || concord_direct::was_never_sent(status) {
        Failed::NotSent(why)
    } else {
        Failed::Unknown(why)
    }
}

/// A failed read index or keep-alive call, as the client of this server should see
/// it (both are safe to retry).
fn from_status(leader: ServerId, status: &Status) -> ReplicaError {
    if status.code() == Code::FailedPrecondition && status.message() == NOT_LEADER {
        return not_leader(leader, format!("server {leader} does not lead"));
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
    /// `Err(Ok(why))`: the leader certainly did not apply it; send it again.
    pub(super) async fn forward(
        &self,
        forwarder: &Forwarder,
        leader: ServerId,
        mut write: Write,
    ) -> Result<Committed, Result<String, ReplicaError>> {
        // A traced write goes under a `forward` span: the leader's spans of it sit
        // under that.
        let span = write.trace.as_ref().and_then(|t| t.child("forward"));
        if let Some(span) = &span {
            write.trace = Some(span.trace());
        }
        let forwarded = self.forward_untraced(forwarder, leader, write).await;
        if let Some(span) = span {
            span.end(match &forwarded {
                Ok(committed) => Ok(committed.zxid),
                Err(Ok(why)) => Err(why.clone()),
                Err(Err(e)) => Err(e.to_string()),
            });
        }
        forwarded
    }

    async fn forward_untraced(
        &self,
        forwarder: &Forwarder,
        leader: ServerId,
        write: Write,
    ) -> Result<Committed, Result<String, ReplicaError>> {
        let committed = match forwarder.submit(leader, write).await {
            Ok(committed) => committed,
            Err(Ok(Failed::NotSent(why))) => return Err(Ok(why)),
            Err(Ok(Failed::Unknown(why))) => return Err(Err(ReplicaError::Indeterminate(why))),
            Err(Err(e)) => return Err(Err(e)),
        };
        self.wait_applied(committed.zxid, APPLY_WAIT_MAX)
            .await
            .map_err(Err)?;
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
        message_bytes_max: usize,
    ) -> (ForwardServer<ForwardService>, Arc<OnceLock<Weak<Shared>>>) {
        let replica = Arc::new(OnceLock::new());
        let service = ForwardService {
            replica: replica.clone(),
            cluster_id,
            callers: members.iter().map(|m| m.id).filter(|&m| m != id).collect(),
        };
        let server = ForwardServer::new(service)
            .max_decoding_message_size(message_bytes_max)
            .max_encoding_message_size(message_bytes_max);
        (server, replica)
    }

    /// Checks the caller (on a TLS peer port, against the member its certificate
    /// names: `authenticated`) and that this server leads; gives the replica to act
    /// on.
    fn leader(
        &self,
        caller: Option<&pb::Caller>,
        authenticated: Option<ServerId>,
    ) -> Result<Replica, Status> {
        let caller = caller.ok_or_else(|| Status::invalid_argument("no caller"))?;
        crate::security::peers::check_claim(authenticated, caller.from)?;
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
        let authenticated = crate::security::peers::authenticated(&request);
        let request = request.into_inner();
        let replica = self.leader(request.caller.as_ref(), authenticated)?;
        let mut writes: Vec<Write> = request
            .writes
            .iter()
            .map(|w| decode(w))
            .collect::<Result<_, _>>()
            .map_err(|e| Status::invalid_argument(format!("bad write: {e}")))?;
        for (w, &at) in writes.iter_mut().zip(&request.checked_at) {
            w.checked_at = at;
        }
        for (w, traceparent) in writes.iter_mut().zip(&request.traceparent) {
            w.trace = WriteTrace::from_traceparent(traceparent);
        }
        let results = replica.submit_local_batch(writes).await;
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
        let authenticated = crate::security::peers::authenticated(&request);
        let replica = self.leader(request.get_ref().caller.as_ref(), authenticated)?;
        let zxid = replica.local_read_index().await.map_err(to_status)?;
        Ok(Response::new(pb::ReadIndexReply { zxid }))
    }

    async fn touch(
        &self,
        request: Request<pb::TouchRequest>,
    ) -> Result<Response<pb::TouchReply>, Status> {
        let authenticated = crate::security::peers::authenticated(&request);
        let request = request.into_inner();
        let replica = self.leader(request.caller.as_ref(), authenticated)?;
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

#[cfg(test)]
mod tests {
    //! The re-send vs outcome-unknown decision, against sockets that refuse, or
    //! accept and never answer (a stopped leader's kernel still accepts).

    use std::net::SocketAddr;
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::config::Role;

    const LEADER: ServerId = 1;
    const STALE: Duration = Duration::from_millis(300);

    fn forwarder_to(peer_addr: SocketAddr) -> Forwarder {
        let member = |id, peer_addr| Member {
            id,
            client_addr: SocketAddr::from(([127, 0, 0, 1], 1)).into(),
            peer_addr: Address::from(peer_addr),
            role: Role::Voter,
            peer_identity: None,
            zookeeper_addr: None,
        };
        let me = member(2, SocketAddr::from(([127, 0, 0, 1], 2)));
        Forwarder::new(2, 7, &[member(LEADER, peer_addr), me], STALE, 1 << 20, None)
    }

    fn write() -> Write {
        Write {
            session_id: 0,
            request_id: 0,
            fence: None,
            op: TxnOp::OpenSession { ttl_ms: 1000 },
            checked_at: 0,
            trace: None,
        }
    }

    #[test]
    fn batches_close_at_their_byte_bound_in_queue_order() {
        let queued = |leader, data_bytes: usize| {
            let op = TxnOp::Set(crate::txn::SetOp {
                path: "/a".into(),
                data: bytes::Bytes::from(vec![0; data_bytes]),
                version: -1,
                null_data: false,
            });
            let (reply, _) = oneshot::channel();
            let write = Write { op, ..write() };
            Queued {
                leader,
                write,
                reply,
            }
        };
        let mib = 1 << 20;
        let taken = [
            (1, 3 * mib),
            (1, 3 * mib),
            (1, 3 * mib),
            (2, 1),
            (1, 20 * mib),
        ];
        let batches = split(taken.into_iter().map(|(l, n)| queued(l, n)));
        let shape: Vec<(ServerId, usize)> = batches.iter().map(|(l, b)| (*l, b.len())).collect();
        // 6 MiB fit, the third 3 MiB write starts a batch, a 20 MiB one goes alone.
        assert_eq!(shape, [(1, 2), (1, 1), (2, 1), (1, 1)]);
        let sizes = |b: &[Queued]| -> usize {
            b.iter()
                .map(|q| crate::zab::log::op_bytes(&q.write.op))
                .sum()
        };
        assert!(batches
            .iter()
            .all(|(_, b)| b.len() == 1 || sizes(b) <= BATCH_BYTES_MAX));
        assert!(message_bytes_max(4 * mib) > BATCH_BYTES_MAX);
        assert!(message_bytes_max(64 * mib) > 64 * mib);
    }

    /// A listener that accepts connections and never answers; keeps them open.
    async fn silent_listener() -> (SocketAddr, mpsc::Receiver<tokio::net::TcpStream>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                if tx.send(socket).await.is_err() {
                    return;
                }
            }
        });
        (addr, rx)
    }

    fn closed_addr() -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    }

    #[tokio::test]
    async fn a_write_for_a_leader_whose_path_never_answered_is_not_sent() {
        let (addr, mut accepted) = silent_listener().await;
        let f = forwarder_to(addr);
        f.follow(Some(LEADER), false);
        let started = Instant::now();
        let failed = f.submit(LEADER, write()).await.unwrap_err();
        assert!(matches!(failed, Ok(Failed::NotSent(_))), "{failed:?}");
        assert!(started.elapsed() < STALE, "refused at once");
        let connected = tokio::time::timeout(Duration::from_millis(100), accepted.recv()).await;
        assert!(connected.is_err(), "nothing may be sent");
    }

    #[tokio::test]
    async fn a_write_queued_for_a_leader_no_longer_followed_is_not_sent() {
        let (addr, _accepted) = silent_listener().await;
        let f = forwarder_to(addr);
        f.calls.heard_from(LEADER);
        f.follow(Some(3), false);
        let failed = f.submit(LEADER, write()).await.unwrap_err();
        assert!(matches!(failed, Ok(Failed::NotSent(_))), "{failed:?}");
    }

    #[tokio::test]
    async fn a_write_that_cannot_connect_is_not_sent() {
        let f = forwarder_to(closed_addr());
        f.follow(Some(LEADER), false);
        f.calls.heard_from(LEADER);
        let failed = f.submit(LEADER, write()).await.unwrap_err();
        assert!(matches!(failed, Ok(Failed::NotSent(_))), "{failed:?}");
    }

    #[tokio::test]
    async fn a_write_in_flight_when_the_leader_is_given_up_is_unknown_at_once() {
        let (addr, mut accepted) = silent_listener().await;
        let f = Arc::new(forwarder_to(addr));
        f.follow(Some(LEADER), false);
        f.calls.heard_from(LEADER);
        let call = tokio::spawn({
            let f = f.clone();
            async move { f.submit(LEADER, write()).await }
        });
        let _socket = accepted.recv().await.unwrap();
        f.follow(None, false);
        let failed = tokio::time::timeout(STALE / 2, call).await;
        let failed = failed.expect("ends when the leader is given up").unwrap();
        assert!(matches!(failed, Err(Ok(Failed::Unknown(_)))), "{failed:?}");
    }

    #[tokio::test]
    async fn a_write_in_flight_on_a_silent_path_is_unknown_once_it_is_stale() {
        let (addr, mut accepted) = silent_listener().await;
        let f = forwarder_to(addr);
        f.follow(Some(LEADER), false);
        f.calls.heard_from(LEADER);
        let started = Instant::now();
        let call = f.submit(LEADER, write());
        tokio::pin!(call);
        let _socket = tokio::select! {
            socket = accepted.recv() => socket.unwrap(),
            r = &mut call => panic!("answered by a silent leader: {r:?}"),
        };
        let failed = call.await.unwrap_err();
        assert!(matches!(failed, Ok(Failed::Unknown(_))), "{failed:?}");
        let took = started.elapsed();
        assert!(took >= STALE && took < 4 * STALE, "{took:?}");
        assert!(!f.reaches(LEADER));
    }

    #[test]
    fn refusals_and_unsent_requests_are_not_sent_anything_else_is_unknown() {
        let not_leader = Status::failed_precondition(NOT_LEADER);
        assert!(matches!(classify(1, &not_leader), Failed::NotSent(_)));
        let no_connection = Status::from_error(Box::new(tonic::ConnectError("refused".into())));
        assert!(matches!(classify(1, &no_connection), Failed::NotSent(_)));
        for status in [
            Status::unknown("http2 error"),
            Status::unavailable("connection reset"),
            Status::cancelled("Timeout expired"),
            Status::deadline_exceeded("deadline"),
        ] {
            assert!(
                matches!(classify(1, &status), Failed::Unknown(_)),
                "{status:?}"
            );
        }
        let refused = pb::Outcome {
            not_leader: true,
            ..Default::default()
        };
        assert!(matches!(committed(1, refused), Err(Failed::NotSent(_))));
        let lost = pb::Outcome {
            error: "leadership lost".into(),
            ..Default::default()
        };
        assert!(matches!(committed(1, lost), Err(Failed::Unknown(_))));
    }

    /// On a TLS peer port a member's certificate cannot speak for another member on
    /// the forwarding channel: every call claiming another caller is refused before
    /// the service looks at anything else (here it would answer "starting": no
    /// replica is set).
    #[tokio::test]
    async fn a_forwarded_call_must_come_from_the_certificates_member() {
        let service = ForwardService {
            replica: Arc::new(OnceLock::new()),
            cluster_id: 7,
            callers: [1, 3].into_iter().collect(),
        };
        let caller = |from| {
            Some(pb::Caller {
                from,
                cluster_id: 7,
            })
        };
        fn as_member<T>(mut request: Request<T>, id: ServerId) -> Request<T> {
            let peer = crate::security::peers::AuthenticatedPeer(id);
            request.extensions_mut().insert(peer);
            request
        }
        let touch = |from| pb::TouchRequest {
            caller: caller(from),
            session_ids: vec![1],
        };
        let read_index = |from| pb::ReadIndexRequest {
            caller: caller(from),
        };
        let submit = |from| pb::SubmitRequest {
            caller: caller(from),
            writes: vec![],
            checked_at: vec![],
            traceparent: vec![],
        };
        let codes = [
            service.touch(as_member(Request::new(touch(3)), 1)).await,
            service.touch(Request::new(touch(3))).await, // plain text
            service.touch(as_member(Request::new(touch(1)), 1)).await,
        ]
        .map(|r| r.unwrap_err().code());
        assert_eq!(
            codes,
            [Code::PermissionDenied, Code::Unavailable, Code::Unavailable]
        );
        let read = service
            .read_index(as_member(Request::new(read_index(3)), 1))
            .await;
        assert_eq!(read.unwrap_err().code(), Code::PermissionDenied);
        let submitted = service.submit(as_member(Request::new(submit(1)), 3)).await;
        assert_eq!(submitted.unwrap_err().code(), Code::PermissionDenied);
    }

    /// A leader that answers each ReadIndex with the next of `answers` once the test
    /// releases it, and counts the calls.
    struct HeldLeader {
        calls: Arc<AtomicUsize>,
        answers: tokio::sync::Mutex<mpsc::Receiver<Zxid>>,
    }

    #[tonic::async_trait]
    impl Forward for HeldLeader {
        async fn submit(
            &self,
            _: Request<pb::SubmitRequest>,
        ) -> Result<Response<pb::SubmitReply>, Status> {
            Err(Status::unimplemented("not in this test"))
        }

        async fn read_index(
            &self,
            _: Request<pb::ReadIndexRequest>,
        ) -> Result<Response<pb::ReadIndexReply>, Status> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let zxid = self.answers.lock().await.recv().await;
            let zxid = zxid.ok_or_else(|| Status::unavailable("test over"))?;
            Ok(Response::new(pb::ReadIndexReply { zxid }))
        }

        async fn touch(
            &self,
            _: Request<pb::TouchRequest>,
        ) -> Result<Response<pb::TouchReply>, Status> {
            Ok(Response::new(pb::TouchReply::default()))
        }
    }

    /// Serves `leader` on a fresh port of 127.0.0.1: its address, and the server task
    /// (abort it when done).
    async fn serve(leader: HeldLeader) -> (SocketAddr, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let server = tonic::transport::Server::builder()
            .add_service(ForwardServer::new(leader))
            .serve_with_incoming(incoming);
        let task = tokio::spawn(async move {
            let _ = server.await;
        });
        (addr, task)
    }

    /// A follower in sync with a leader whose path it has not heard answering asks
    /// that leader at once: writes waiting for the path need not wait for the next
    /// tick's keep-alive report (no tick runs here).
    #[tokio::test]
    async fn a_follower_in_sync_with_a_new_leader_probes_its_path_at_once() {
        let (_answer, answers) = mpsc::channel(1);
        let leader = HeldLeader {
            calls: Arc::default(),
            answers: tokio::sync::Mutex::new(answers),
        };
        let (addr, server) = serve(leader).await;
        let f = forwarder_to(addr);
        let mut heard = f.heard();
        f.follow(Some(LEADER), false);
        assert!(!f.reaches(LEADER));
        f.follow(Some(LEADER), true);
        tokio::time::timeout(Duration::from_secs(5), heard.changed())
            .await
            .expect("the new leader is asked at once")
            .unwrap();
        assert!(f.reaches(LEADER));
        server.abort();
    }

    /// Reads that come while a ReadIndex call is in flight share the next call, not
    /// that one: its answer may predate writes acknowledged before they began.
    #[tokio::test]
    async fn reads_share_the_next_read_index_call_never_one_in_flight() {
        let calls = Arc::new(AtomicUsize::new(0));
        let (answer, answers) = mpsc::channel(4);
        let leader = HeldLeader {
            calls: calls.clone(),
            answers: tokio::sync::Mutex::new(answers),
        };
        let (addr, server) = serve(leader).await;
        let f = Arc::new(forwarder_to(addr));
        f.follow(Some(LEADER), false);
        f.touch(LEADER, vec![]).await.unwrap();
        let wait_calls = |n: usize| {
            let calls = calls.clone();
            async move {
                let deadline = Instant::now() + Duration::from_secs(5);
                while calls.load(Ordering::SeqCst) < n {
                    assert!(Instant::now() < deadline, "{n} ReadIndex calls never came");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        };
        let read = |f: &Arc<Forwarder>| {
            let f = f.clone();
            tokio::spawn(async move { f.read_index(LEADER).await })
        };
        let first = read(&f);
        wait_calls(1).await;
        let later: Vec<_> = (0..5).map(|_| read(&f)).collect();
        // Every later read waits in the next round before the first call is answered.
        let deadline = Instant::now() + Duration::from_secs(5);
        while lock(&f.calls.reads).waiting.len() < later.len() {
            assert!(Instant::now() < deadline, "the later reads never queued");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        answer.send(5).await.unwrap();
        assert_eq!(first.await.unwrap(), Ok(5));
        wait_calls(2).await;
        answer.send(7).await.unwrap();
        for r in later {
            assert_eq!(
                r.await.unwrap(),
                Ok(7),
                "answered from the call sent after it"
            );
        }
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "one call for the five later reads"
        );
        assert!(
            !lock(&f.calls.reads).running,
            "the rounds end when no read waits"
        );
        server.abort();
    }
}
