//! The `concord.v1.Session` service: open, keep alive, close, describe sessions.

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
use super::ready_for_read;
use crate::replica::Replica;
use crate::tree::TxnResult;
use crate::txn::{CloseReason, TxnOp};
use concord_proto::v1::ErrorCode;

/// Keep-alive replies buffered per stream before the server stops reading pings.
const KEEPALIVE_QUEUE_MAX: usize = 16;
/// `session_list_page_max` unless configured.
const DEFAULT_PAGE_MAX: usize = 1000;

pub struct SessionService {
    replica: Replica,
    /// Most sessions in one `List` page (`session_list_page_max`).
    list_page_max: usize,
    /// Clamp range of granted TTLs (`session_ttl_min_ms`, `session_ttl_max_ms`).
    ttl_range_ms: (u64, u64),
    ttl_default_ms: u64,
}

impl SessionService {
    pub fn new(replica: Replica, ttl_range_ms: (u64, u64), ttl_default_ms: u64) -> Self {
        SessionService {
            replica,
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

    fn info(&self, session_id: u64, with_ephemerals: bool) -> Option<pb::SessionInfo> {
        let (ttl_ms, ephemerals) = self.replica.read(|t| {
            let s = t.session(session_id)?;
            let eph = if with_ephemerals {
                s.ephemerals.iter().cloned().collect()
            } else {
                Vec::new()
            };
            Some((s.ttl_ms, eph))
        })?;
        let remaining = self.replica.session_remaining_ms(session_id).unwrap_or(0);
        Some(pb::SessionInfo {
            session_id,
            ttl_ms,
            remaining_ms: i64::try_from(remaining).unwrap_or(i64::MAX),
            ephemerals,
        })
    }
}

fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn no_session(session_id: u64) -> Status {
    error(
        ErrorCode::SessionExpired,
        format!("session {session_id:#x} does not exist"),
    )
}

type KeepAliveStream = Pin<Box<dyn Stream<Item = Result<pb::KeepAliveResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Session for SessionService {
    async fn open(
        &self,
        request: Request<pb::OpenSessionRequest>,
    ) -> Result<Response<pb::OpenSessionResponse>, Status> {
        View::of(&request)?;
        let ttl = self.grant(request.into_inner().ttl_ms)?;
        let op = TxnOp::OpenSession { ttl_ms: ms(ttl) };
        let committed = self.replica.submit(0, 0, op).await?;
        match committed.result? {
            TxnResult::SessionOpened { session_id, ttl_ms } => {
                Ok(Response::new(pb::OpenSessionResponse {
                    header: header(self.replica.server_id(), committed.zxid),
                    session_id,
                    ttl_ms,
                }))
            }
            other => Err(error(ErrorCode::Internal, format!("unexpected {other:?}"))),
        }
    }

    type KeepAliveStream = KeepAliveStream;

    async fn keep_alive(
        &self,
        request: Request<Streaming<pb::KeepAliveRequest>>,
    ) -> Result<Response<Self::KeepAliveStream>, Status> {
        View::of(&request)?;
        let mut pings = request.into_inner();
        let (tx, rx) = mpsc::channel(KEEPALIVE_QUEUE_MAX);
        let replica = self.replica.clone();
        tokio::spawn(async move {
            while let Some(ping) = pings.next().await {
                let reply = match ping {
                    // A server behind the client's view must not call its session
                    // expired: it may only not have applied the session's Open yet.
                    Ok(p) => ready_for_read(&replica, p.min_zxid, false)
                        .await
                        .map(|()| keep_alive_reply(&replica, p.session_id)),
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
        View::of(&request)?;
        let session_id = request.into_inner().session_id;
        let op = TxnOp::CloseSession {
            session_id,
            reason: CloseReason::Closed,
        };
        let committed = self.replica.submit(0, 0, op).await?;
        committed.result?;
        Ok(Response::new(pb::CloseSessionResponse {
            header: header(self.replica.server_id(), committed.zxid),
        }))
    }

    async fn get(
        &self,
        request: Request<pb::GetSessionRequest>,
    ) -> Result<Response<pb::GetSessionResponse>, Status> {
        let view = View::of(&request)?;
        let r = request.into_inner();
        ready_for_read(&self.replica, r.min_zxid, false).await?;
        let session_id = r.session_id;
        let zxid = self.replica.applied_zxid();
        let mut info = self
            .info(session_id, true)
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
        View::of(&request)?;
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
        let (zxid, mut ids) = self.replica.read(|t| {
            let ids = t.sessions_after(after).map(|(id, _)| id);
            (t.last_zxid(), ids.take(limit + 1).collect::<Vec<_>>())
        });
        let mut next_page_token = String::new();
        if ids.len() > limit {
            ids.truncate(limit);
            next_page_token = ids.last().map(u64::to_string).unwrap_or_default();
        }
        let sessions = ids
            .into_iter()
            .filter_map(|id| self.info(id, false))
            .collect();
        Ok(Response::new(pb::ListSessionsResponse {
            header: header(self.replica.server_id(), zxid),
            sessions,
            next_page_token,
        }))
    }
}

/// Answers one ping: a fresh full TTL, or `expired` if the session is gone.
fn keep_alive_reply(replica: &Replica, session_id: u64) -> pb::KeepAliveResponse {
    let zxid = replica.applied_zxid();
    let (ttl, remaining, expired) = match replica.keep_alive(session_id) {
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
