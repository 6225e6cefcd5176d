//! Applying txns: the zxid rule, retry de-duplication, and dispatch to the ops.
//!
//! ```text
//!   apply(txn) ─▶ zxid > last_zxid? ─no─▶ Err(BadArguments), nothing changes
//!                  │yes
//!                  ▼
//!              retry of a remembered (session, request)? ─yes─▶ same fingerprint?
//!                  │no                        yes: stored outcome ◀─┘   no: Err(BadArguments)
//!                  │
//!                  ▼
//!              fence holds? (queue.rs) ─no─▶ Err(Fenced)
//!                  │yes
//!                  ▼
//!              ops.rs / sessions.rs / queue.rs ─▶ result + events ─▶ remember outcome
//! ```
//!
//! A txn that fails deterministically (NoNode, BadVersion, ...) still consumes its
//! zxid: `last_zxid` becomes the txn's zxid, exactly as on every other server, so the
//! log and the tree agree on how far they are. Nothing else changes and no event is
//! produced (the failure is remembered for retries, when the txn carries a request id).
//!
//! What it must not do: IO, clocks, randomness, panics.

use std::sync::Arc;

use super::digest::fingerprint;
use super::*;
use crate::txn::{Txn, TxnOp};

/// What every op of one txn needs to know about the txn.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ctx {
    pub(crate) zxid: Zxid,
    pub(crate) time_ms: i64,
    pub(crate) session_id: u64,
}

impl Ctx {
    /// An event of this txn.
    pub(crate) fn event(&self, kind: EventKind, path: &str, stat: Stat) -> Event {
        Event {
            zxid: self.zxid,
            kind,
            path: Arc::from(path),
            data: Bytes::new(),
            prev_data: Bytes::new(),
            stat,
        }
    }
}

impl Default for DataTree {
    fn default() -> Self {
        Self::new()
    }
}

impl DataTree {
    /// A tree holding only the root "/" (all-zero stat, persistent, no data).
    pub fn new() -> Self {
        let mut nodes = Nodes::default();
        nodes.insert("/", Arc::new(Node::root()));
        DataTree {
            nodes,
            sessions: imbl::OrdMap::new(),
            last_zxid: 0,
            reap_candidates: imbl::OrdMap::new(),
            grants: Grants::new(),
            grants_zxid: 0,
            usage: imbl::OrdMap::new(),
            data_bytes: 0,
        }
    }

    /// Applies one committed txn (zxid must be above `last_zxid()`).
    ///
    /// A txn whose zxid is not above `last_zxid()` yields `BadArguments` and changes
    /// nothing at all. Any other failure consumes the zxid (see the module doc).
    pub fn apply(&mut self, txn: &Txn) -> Applied {
        if txn.zxid <= self.last_zxid {
            let msg = format!(
                "zxid {:#x} is not above the last applied {:#x}",
                txn.zxid, self.last_zxid
            );
            return failed(TreeError::BadArguments(msg));
        }
        self.last_zxid = txn.zxid;
        if let Some(result) = self.remembered(txn) {
            return Applied {
                result,
                events: Vec::new(),
            };
        }
        let ctx = Ctx {
            zxid: txn.zxid,
            time_ms: txn.time_ms,
            session_id: txn.session_id,
        };
        let mut events = Vec::new();
        let result = match &txn.fence {
            Some(fence) => self
                .check_fence(fence)
                .and_then(|()| self.apply_op(&txn.op, &ctx, &mut events)),
            None => self.apply_op(&txn.op, &ctx, &mut events),
        };
        if result.is_err() {
            events.clear();
        }
        self.remember(txn, &result);
        Applied { result, events }
    }

    /// Runs the op of a txn whose zxid is accepted.
    fn apply_op(
        &mut self,
        op: &TxnOp,
        ctx: &Ctx,
        events: &mut Vec<Event>,
    ) -> Result<TxnResult, TreeError> {
        Self::check_not_reserved(op)?;
        match op {
            TxnOp::Create(op) => {
                let (path, stat) = self.create(op, ctx, events)?;
                Ok(TxnResult::Created { path, stat })
            }
            TxnOp::Set(op) => {
                let stat = self.set(op, ctx, events)?;
                Ok(TxnResult::Set { stat })
            }
            TxnOp::Delete(op) => {
                self.delete(op, ctx, events)?;
                Ok(TxnResult::Deleted)
            }
            TxnOp::Multi(ops) => Ok(TxnResult::Multi(self.multi(ops, ctx, events)?)),
            TxnOp::OpenSession { ttl_ms } => self.open_session(*ttl_ms, "", ctx),
            TxnOp::OpenOwnedSession { ttl_ms, owner } => self.open_session(*ttl_ms, owner, ctx),
            TxnOp::CloseSession { session_id, .. } => self.close_session(*session_id, ctx, events),
            TxnOp::Reap { path } => {
                self.reap(path, ctx, events)?;
                Ok(TxnResult::Reaped)
            }
            TxnOp::Queue(op) => self.apply_queue(op, ctx, events),
            TxnOp::Access(op) => self.apply_access(op, ctx, events),
        }
    }

    /// The stored outcome, if `txn` retries a request its session remembers; an
    /// error if the session remembers that request id for a different request (the
    /// fingerprints differ), never that request's outcome.
    fn remembered(&self, txn: &Txn) -> Option<Result<TxnResult, TreeError>> {
        if txn.session_id == 0 || txn.request_id == 0 {
            return None;
        }
        let session = self.sessions.get(&txn.session_id)?;
        let recent = session
            .recent
            .iter()
            .rev()
            .find(|r| r.request_id == txn.request_id)?;
        let fingerprint = fingerprint(txn);
        if recent.fingerprint != 0 && recent.fingerprint != fingerprint {
            return Some(Err(TreeError::BadArguments(format!(
                "request id {} of session {} was used by a different request; \
                 a new request needs a new request id",
                txn.request_id, txn.session_id
            ))));
        }
        Some(recent.result.clone())
    }

    /// Remembers the outcome of a txn carrying a request id, if its session (still)
    /// exists, keeping at most `RECENT_REQUESTS_MAX` per session.
    fn remember(&mut self, txn: &Txn, result: &Result<TxnResult, TreeError>) {
        if txn.session_id == 0 || txn.request_id == 0 {
            return;
        }
        let Some(session) = self.sessions.get_mut(&txn.session_id) else {
            return;
        };
        session.recent.push_back(Recent {
            request_id: txn.request_id,
            fingerprint: fingerprint(txn),
            result: result.clone(),
        });
        while session.recent.len() > RECENT_REQUESTS_MAX {
            session.recent.pop_front();
        }
    }

    /// The zxid of the last txn applied, failed or not (0 for a new tree).
    pub fn last_zxid(&self) -> Zxid {
        self.last_zxid
    }
}

/// The outcome of a txn that did not apply.
fn failed(error: TreeError) -> Applied {
    Applied {
        result: Err(error),
        events: Vec::new(),
    }
}

impl Node {
    /// The root node: persistent, empty, all-zero stat.
    pub(crate) fn root() -> Node {
        Node {
            data: Bytes::new(),
            stat: Stat::default(),
            mode: CreateMode::Persistent,
            null_data: false,
        }
    }
}
