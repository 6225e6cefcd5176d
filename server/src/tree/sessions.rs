//! The replicated half of sessions: opening one (with its owner, the identity that
//! asked), and closing one with its ephemerals.
//!
//! A session id is the zxid of its OpenSession txn, so it is unique and never 0.
//! Closing (by the client or by expiry, decided by the leader elsewhere) deletes every
//! ephemeral node of the session in this one txn, in sorted path order, each with the
//! same events as a delete.
//!
//! What it must not do: track deadlines or liveness (that is `session/`).

use super::apply::Ctx;
use super::*;

impl DataTree {
    /// Opens a session whose id is the txn's zxid, owned by `owner` ("" for none).
    pub(crate) fn open_session(
        &mut self,
        ttl_ms: i64,
        owner: &str,
        ctx: &Ctx,
    ) -> Result<TxnResult, TreeError> {
        if owner.len() > SESSION_OWNER_BYTES_MAX {
            return Err(TreeError::BadArguments(format!(
                "a session owner of {} bytes is longer than {SESSION_OWNER_BYTES_MAX}",
                owner.len()
            )));
        }
        if ttl_ms <= 0 {
            return Err(TreeError::BadArguments(format!(
                "session ttl_ms must be > 0, got {ttl_ms}"
            )));
        }
        let session_id = ctx.zxid;
        if self.sessions.contains_key(&session_id) {
            // Cannot happen while zxids only grow; refuse rather than merge.
            return Err(TreeError::BadArguments(format!(
                "session {session_id} already exists"
            )));
        }
        let entry = SessionEntry {
            ttl_ms,
            owner: owner.to_string(),
            ephemerals: imbl::OrdSet::new(),
            recent: imbl::Vector::new(),
        };
        self.sessions.insert(session_id, entry);
        Ok(TxnResult::SessionOpened { session_id, ttl_ms })
    }

    /// Ends a session and deletes its ephemeral nodes (sorted), returning their paths.
    pub(crate) fn close_session(
        &mut self,
        session_id: u64,
        ctx: &Ctx,
        events: &mut Vec<Event>,
    ) -> Result<TxnResult, TreeError> {
        let session = self
            .sessions
            .remove(&session_id)
            .ok_or(TreeError::SessionExpired { session_id })?;
        let mut ephemerals = Vec::with_capacity(session.ephemerals.len());
        for path in session.ephemerals {
            // Ephemerals never have children, so this only fails if the node is gone,
            // which the tree's invariants rule out; such a path is not reported.
            if self.remove_node(&path, ctx, events) {
                ephemerals.push(path);
            }
        }
        Ok(TxnResult::SessionClosed { ephemerals })
    }
}
