//! Session ownership (docs/security.md, "Ownership"): a session belongs to the
//! identity that opened it, and only that identity or an admin may use it. The rules
//! are `security::{may_use, may_see}`; this module applies them at the right time.
//!
//! ```text
//!   request with session_id S (0: none, nothing to check)
//!       │
//!       ▼
//!   S applied here? ──no──▶ the leader's commit point (a read index) >= S?
//!       │yes                  │yes: wait, bounded, until        │no: S was never
//!       │◀────────────────────┘ S is applied here               │    issued
//!       ▼                                                       ▼
//!   S live and the caller's ──no──▶ SESSION_EXPIRED: one answer, as soon, for a
//!   (any live S, for an admin)?     session gone, never issued or another's
//!       │yes
//!       ▼
//!     go on
//! ```
//!
//! Session ids are zxids and never reused, so a check made once S is applied here
//! stays true: S's owner never changes, and a closed S never comes back. A client
//! learns S only once its Open is committed, so a server that has applied the
//! leader's commit point and still lacks S knows S was never issued, and says so at
//! once. Lock and election members are checked the same way through the session
//! that holds the node (its `ephemeral_owner`), once the node's creation (its token)
//! is applied.
//!
//! Ids are consecutive zxids, so anyone can name other identities' sessions; what
//! they must not learn is which of them live. A session the caller may not use is
//! answered as one that does not exist: the same code and words, as soon.
//!
//! What it must not do: decide anything from a tree that has not applied the session
//! (or node) in question, say who owns another identity's session, or answer another
//! identity's live session differently from a closed one.

use concord_proto::v1::ErrorCode;
use tonic::Status;

use super::error::error;
use super::READ_WAIT_MAX;
use crate::replica::Replica;
pub(crate) use crate::security::may_see;
use crate::security::{self, Caller};
use crate::tree::path::clip;
use crate::txn::Zxid;

/// SESSION_EXPIRED for a session that does not exist or that the caller may not
/// use: one answer for both, so that they cannot be told apart.
pub(crate) fn no_session(session_id: u64) -> Status {
    error(
        ErrorCode::SessionExpired,
        format!("session {session_id} does not exist, or is not the caller's"),
    )
}

/// Waits (bounded) until this server has applied `zxid`, if the ensemble ever
/// committed it; false, after one read index, if it did not, so an id that was
/// never issued ties up nothing.
async fn applied_if_issued(replica: &Replica, zxid: Zxid) -> Result<bool, Status> {
    if replica.applied_zxid() >= zxid {
        return Ok(true);
    }
    if replica.read_index().await? < zxid {
        return Ok(false);
    }
    replica.wait_applied(zxid, READ_WAIT_MAX).await?;
    Ok(true)
}

/// Whether `caller` may use session `session_id`: true for a live session of its
/// own (or any, for an admin); false for one that is gone, was never issued, or is
/// another identity's. Waits until this server has applied the session, if issued.
pub(crate) async fn may_use_session(
    replica: &Replica,
    caller: &Caller,
    session_id: u64,
) -> Result<bool, Status> {
    Ok(applied_if_issued(replica, session_id).await? && may_use_now(replica, caller, session_id))
}

/// Whether `caller` may use session `session_id` as this server knows it now,
/// without waiting: false also for a session not applied here yet.
pub(crate) fn may_use_now(replica: &Replica, caller: &Caller, session_id: u64) -> bool {
    replica.read(|t| {
        t.session(session_id)
            .is_some_and(|s| security::may_use(caller, &s.owner))
    })
}

/// Checks that `caller` may use session `session_id` (0: no session, nothing to
/// check): SESSION_EXPIRED unless it is a live session of the caller's own (any
/// live session, for an admin). So a write is not sent under a session that is gone,
/// where its request id would be remembered by no one (a session that ends between
/// this check and the write's apply still lets that one through).
pub(crate) async fn check_session(
    replica: &Replica,
    caller: &Caller,
    session_id: u64,
) -> Result<(), Status> {
    if session_id == 0 || may_use_session(replica, caller, session_id).await? {
        Ok(())
    } else {
        Err(no_session(session_id))
    }
}

/// Checks that `caller` may act on the lock or election member at `key` created by
/// `token` (its fencing token or term) to `what`: it must own the session that holds
/// the node (PERMISSION_DENIED: the member is in the caller's namespace, seen by
/// `Waiters` or `Participants` anyway). Token 0 (any node at `key`) is for admins
/// only. A node that is not there (or has another token) passes: the op then fails
/// with NO_NODE on its own.
pub(crate) async fn check_member(
    replica: &Replica,
    caller: &Caller,
    key: &str,
    token: Zxid,
    what: &str,
) -> Result<(), Status> {
    if caller.is_admin() {
        return Ok(());
    }
    if token == 0 {
        return Err(error(
            ErrorCode::PermissionDenied,
            format!(
                "{}: token 0 removes whatever member is there, which only an admin may do; \
                 pass the token Acquire returned",
                clip(key)
            ),
        ));
    }
    if !applied_if_issued(replica, token).await? {
        return Ok(());
    }
    // The member's node and its session are read at one zxid: a node that is there
    // has a live session (closing it deletes the node in the same txn).
    let others = replica.read(|t| {
        let session_id = t
            .get(key)
            .filter(|n| n.stat.czxid == token)
            .map(|n| n.stat.ephemeral_owner)
            .filter(|&s| s != 0)?;
        let owner = &t.session(session_id)?.owner;
        Some(!security::may_use(caller, owner))
    });
    if others == Some(true) {
        return Err(error(
            ErrorCode::PermissionDenied,
            format!(
                "{} belongs to another identity's session: only its owner or an admin \
                 may {what}",
                clip(key)
            ),
        ));
    }
    Ok(())
}
