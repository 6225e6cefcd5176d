//! The `concord.v1.Session` service: open, keep alive, close, describe sessions.
//!
//! A session belongs to the identity that opened it (`owner.rs`): only it or an
//! admin may keep it alive or close it, and `List` and `Get` show a team member the
//! sessions of its team's identities only.

use std::pin::Pin;

use concord_proto::v1 as pb;
use concord_proto::v1::session_server::Session;
use futures::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use super::authz::View;
use super::convert::header;
use super::error::{bad_arguments, error};
use super::owner::{check_session, may_see, may_use_now, may_use_session, no_session};
use super::ready_for_read;
use crate::replica::Replica;
use crate::security::{Caller, Security};
use crate::tree::{TxnResult, SESSION_OWNER_BYTES_MAX};
use crate::txn::{CloseReason, TxnOp, Zxid};
use concord_proto::v1::ErrorCode;

/// Keep-alive replies buffered per stream before the server stops reading pings.
const KEEPALIVE_QUEUE_MAX: usize = 16;
/// `session_list_page_max` unless configured.
const DEFAULT_PAGE_MAX: usize = 1000;
/// A `List` page looks at most this many sessions per session it may return, so a
/// caller that sees few of many sessions gets short (even empty) pages with a
/// next_page_token instead of one long scan.
const LIST_SCAN_PER_PAGE_ENTRY: usize = 16;

pub struct SessionService {
    replica: Replica,
    /// Who may see and use which sessions (owners, teams, admins).
    security: Security,
    /// Most sessions in one `List` page (`session_list_page_max`).
    list_page_max: usize,
    /// Clamp range of granted TTLs (`session_ttl_min_ms`, `session_ttl_max_ms`).
    ttl_range_ms: (u64, u64),
    ttl_default_ms: u64,
}

impl SessionService {
    pub fn new(
        replica: Replica,
        security: Security,
        ttl_range_ms: (u64, u64),
        ttl_default_ms: u64,
    ) -> Self {
        SessionService {
            replica,
            security,
            ttl_range_ms,
            ttl_default_ms,
            list_page_max: DEFAULT_PAGE_MAX,
        }
    }

    /// Caps `List` pages at `n` sessions (at least 1).
    pub fn with_list_page_max(mut self, n: usize) -> Self {
        self.list_page_max = n.max(1);
        self
    }

    /// The TTL to grant for a requested one.
    fn grant(&self, requested_ms: i64) -> Result<u64, Status> {
        let requested = u64::try_from(requested_ms)
            .map_err(|_| bad_arguments(format!("ttl_ms {requested_ms} is negative")))?;
        if requested == 0 {
            return Ok(self.ttl_default_ms);
        }
        Ok(requested.clamp(self.ttl_range_ms.0, self.ttl_range_ms.1))
    }

    /// The session as `caller` may see it: None if it does not exist or belongs to
    /// an identity outside the caller's reach (the two are one answer). The owner is
    /// shown to admins and to the owner itself.
    fn info(
        &self,
        caller: &Caller,
        session_id: u64,
        with_ephemerals: bool,
    ) -> Option<pb::SessionInfo> {
        let (ttl_ms, owner, ephemerals) = self.replica.read(|t| {
            let s = t.session(session_id)?;
            let eph = if with_ephemerals {
                s.ephemerals.iter().cloned().collect()
            } else {
                Vec::new()
            };
            Some((s.ttl_ms, s.owner.clone(), eph))
        })?;
        if !may_see(self.security.policy(), caller, &owner) {
            return None;
        }
        let shown = caller.is_admin() || owner == *caller.identity;
        let remaining = self.replica.session_remaining_ms(session_id).unwrap_or(0);
        Some(pb::SessionInfo {
            session_id,
            ttl_ms,
            remaining_ms: i64::try_from(remaining).unwrap_or(i64::MAX),
            ephemerals,
            owner: if shown { owner } else { String::new() },
        })
    }

    /// Up to `limit` + 1 ids of sessions above `after` that `caller` may see, and
    /// whether the scan stopped at its bound (then the last id looked at).
    fn visible_ids(&self, caller: &Caller, after: u64, limit: usize) -> (Zxid, Vec<u64>, u64) {
        let policy = self.security.policy();
        let scan_max = limit.saturating_mul(LIST_SCAN_PER_PAGE_ENTRY).max(1);
        self.replica.read(|t| {
            let (mut ids, mut scanned, mut last) = (Vec::new(), 0, 0);
            for (id, s) in t.sessions_after(after) {
                if ids.len() > limit || scanned == scan_max {
                    return (t.last_zxid(), ids, last);
                }
                scanned += 1;
                last = id;
                if may_see(policy, caller, &s.owner) {
                    ids.push(id);
                }
            }
            (t.last_zxid(), ids, 0)
        })
    }
}

fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

type KeepAliveStream = Pin<Box<dyn Stream<Item = Result<pb::KeepAliveResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Session for SessionService {
    async fn open(
        &self,
        request: Request<pb::OpenSessionRequest>,
    ) -> Result<Response<pb::OpenSessionResponse>, Status> {
        let caller = View::of(&request)?.caller;
        let ttl = self.grant(request.into_inner().ttl_ms)?;
        let (zxid, session_id, ttl_ms) = open_session(&self.replica, &caller, ttl).await?;
        Ok(Response::new(pb::OpenSessionResponse {
            header: header(self.replica.server_id(), zxid),
            session_id,
            ttl_ms,
        }))
    }

    type KeepAliveStream = KeepAliveStream;

    async fn keep_alive(
        &self,
        request: Request<Streaming<pb::KeepAliveRequest>>,
    ) -> Result<Response<Self::KeepAliveStream>, Status> {
        let caller = View::of(&request)?.caller;
        let mut pings = request.into_inner();
        let (tx, rx) = mpsc::channel(KEEPALIVE_QUEUE_MAX);
        let replica = self.replica.clone();
        tokio::spawn(async move {
            while let Some(ping) = pings.next().await {
                let reply = match ping {
                    // A ping held for a leader ends with the stream (the client gave
                    // it up, perhaps for another server).
                    Ok(p) => tokio::select! {
                        reply = answer_ping(&replica, &caller, &p) => reply,
                        () = tx.closed() => break,
                    },
                    Err(status) => Err(status),
                };
                let failed = reply.is_err();
                if tx.send(reply).await.is_err() || failed {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn close(
        &self,
        request: Request<pb::CloseSessionRequest>,
    ) -> Result<Response<pb::CloseSessionResponse>, Status> {
        let caller = View::of(&request)?.caller;
        let session_id = request.into_inner().session_id;
        let zxid = close_session(&self.replica, &caller, session_id).await?;
        Ok(Response::new(pb::CloseSessionResponse {
            header: header(self.replica.server_id(), zxid),
        }))
    }

    async fn get(
        &self,
        request: Request<pb::GetSessionRequest>,
    ) -> Result<Response<pb::GetSessionResponse>, Status> {
        let view = View::of(&request)?;
        let caller = &view.caller;
        let r = request.into_inner();
        ready_for_read(&self.replica, r.min_zxid, false).await?;
        let session_id = r.session_id;
        let zxid = self.replica.applied_zxid();
        let mut info = self
            .info(caller, session_id, true)
            .ok_or_else(|| no_session(session_id))?;
        // Ephemerals (and queue nodes) as the caller names them; others not at all.
        info.ephemerals = std::mem::take(&mut info.ephemerals)
            .into_iter()
            .filter_map(|p| view.ns.key_out(&p))
            .collect();
        Ok(Response::new(pb::GetSessionResponse {
            header: header(self.replica.server_id(), zxid),
            session: Some(info),
        }))
    }

    async fn list(
        &self,
        request: Request<pb::ListSessionsRequest>,
    ) -> Result<Response<pb::ListSessionsResponse>, Status> {
        let caller = View::of(&request)?.caller;
        let r = request.into_inner();
        let after = match r.page_token.as_str() {
            "" => 0,
            token => token
                .parse::<u64>()
                .map_err(|_| bad_arguments("page_token is not one from a previous response"))?,
        };
        ready_for_read(&self.replica, r.min_zxid, false).await?;
        let limit = match r.page_size as usize {
            0 => self.list_page_max,
            n => n.min(self.list_page_max),
        };
        // One extra session tells whether another page follows.
        let (zxid, mut ids, scanned_to) = self.visible_ids(&caller, after, limit);
        let mut next_page_token = String::new();
        if ids.len() > limit {
            ids.truncate(limit);
            next_page_token = ids.last().map(u64::to_string).unwrap_or_default();
        } else if scanned_to != 0 {
            next_page_token = scanned_to.to_string();
        }
        let sessions = ids
            .into_iter()
            .filter_map(|id| self.info(&caller, id, false))
            .collect();
        Ok(Response::new(pb::ListSessionsResponse {
            header: header(self.replica.server_id(), zxid),
            sessions,
            next_page_token,
        }))
    }
}

/// Opens a session owned by `caller` with a TTL of `ttl_ms` (already within the
/// configured range), for any door: its zxid, id and TTL.
pub(crate) async fn open_session(
    replica: &Replica,
    caller: &Caller,
    ttl_ms: u64,
) -> Result<(Zxid, u64, i64), Status> {
    if caller.identity.len() > SESSION_OWNER_BYTES_MAX {
        return Err(bad_arguments(format!(
            "an identity of {} bytes is too long to own a session (at most {SESSION_OWNER_BYTES_MAX})",
            caller.identity.len()
        )));
    }
    let op = TxnOp::OpenOwnedSession {
        ttl_ms: ms(ttl_ms),
        owner: caller.identity.to_string(),
    };
    let committed = replica.submit(0, 0, op).await?;
    match committed.result? {
        TxnResult::SessionOpened { session_id, ttl_ms } => Ok((committed.zxid, session_id, ttl_ms)),
        other => Err(error(ErrorCode::Internal, format!("unexpected {other:?}"))),
    }
}

/// Closes session `session_id` for `caller` (its owner or an admin), for any door:
/// the zxid of the close, which deleted its ephemerals.
pub(crate) async fn close_session(
    replica: &Replica,
    caller: &Caller,
    session_id: u64,
) -> Result<Zxid, Status> {
    check_session(replica, caller, session_id).await?;
    let op = TxnOp::CloseSession {
        session_id,
        reason: CloseReason::Closed,
    };
    let committed = replica.submit(0, 0, op).await?;
    committed.result?;
    Ok(committed.zxid)
}

/// Answers one ping of `caller`'s KeepAlive stream. A server behind the client's
/// view must not call its session expired (it may only not have applied the
/// session's Open yet), nor decide whose it is: it waits for both. A session the
/// caller may not use is answered as one that is gone (`expired`), and not renewed.
///
/// Nor may it answer while it has no leader that hears from it: the session lives
/// on the leader's clock, which such a server's touches do not reach. The answer
/// waits for a leader, so the client, hearing nothing, gives this server up for
/// another in its list within its silence limit (half the TTL), where a ZooKeeper
/// server without a quorum closes its clients' connections; once the server has
/// had no leader for `leader_wait_ms_max`, the answer is NOT_LEADER. An answer
/// given anyway kept the client on a cut-off server until its session expired.
pub(super) async fn answer_ping(
    replica: &Replica,
    caller: &Caller,
    ping: &pb::KeepAliveRequest,
) -> Result<pb::KeepAliveResponse, Status> {
    // Heard as it arrives: the answer may wait (for the ping's zxid, for a leader, or
    // for the core's word after this server stalled), and the session must not run
    // out meanwhile for the server's wait. Only a session applied here and the
    // caller's is touched now; the answer below decides about the others.
    if may_use_now(replica, caller, ping.session_id) {
        replica.keep_alive(ping.session_id);
    }
    ready_for_read(replica, ping.min_zxid, false).await?;
    let usable = caller.is_admin() || may_use_session(replica, caller, ping.session_id).await?;
    tokio::select! {
        waited = replica.wait_for_leader() => waited?,
        // No leader for `leader_wait_ms_max`: NOT_LEADER tells the client to move
        // before its silence limit would.
        lost = replica.cut_off() => return Err(lost.into()),
    }
    Ok(keep_alive_reply(replica, ping.session_id, usable))
}

/// Answers one ping: a fresh full TTL, or `expired` if the session is gone (or not
/// `usable` by the caller, and then left as it is).
fn keep_alive_reply(replica: &Replica, session_id: u64, usable: bool) -> pb::KeepAliveResponse {
    let zxid = replica.applied_zxid();
    let kept = usable.then(|| replica.keep_alive(session_id)).flatten();
    let (ttl, remaining, expired) = match kept {
        Some((ttl, remaining)) => (ttl, remaining, false),
        None => (0, 0, true),
    };
    pb::KeepAliveResponse {
        header: header(replica.server_id(), zxid),
        session_id,
        ttl_ms: ms(ttl),
        remaining_ms: ms(remaining),
        expired,
    }
}
