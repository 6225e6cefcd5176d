//! Session ownership (docs/security.md, "Ownership"): a session belongs to the
//! identity that opened it, and only that identity or an admin may use it. The rules
//! are `security::{may_use, may_see}`; this module applies them at the right time.
//!
//! ```text
//!   request with session_id S ──▶ admin? ──yes──▶ go on
//!                                  │no
//!                                  ▼
//!                applied >= S? (a follower may not have applied S's Open yet:
//!                wait, bounded, as reads do) ──timeout──▶ TIMEOUT
//!                                  ▼
//!                S live and owned by another identity ──▶ PERMISSION_DENIED
//!                                  │ no (owned by the caller, or gone: the write
//!                                  ▼       then fails or applies on its own terms)
//!                                go on
//! ```
//!
//! Session ids are zxids and never reused, so a check made once S is applied here
//! stays true: S's owner never changes, and a closed S never comes back. Lock and
//! election members are checked the same way through the session that holds the
//! node (its `ephemeral_owner`), once the node's creation (its token) is applied.
//!
//! What it must not do: decide anything from a tree that has not applied the session
//! (or node) in question, or say who owns another identity's session.

use concord_proto::v1::ErrorCode;
use tonic::{Request, Status};

use super::error::error;
use super::READ_WAIT_MAX;
use crate::replica::Replica;
pub(crate) use crate::security::may_see;
use crate::security::{self, Access, Caller, Policy};
use crate::tree::path::clip;
use crate::txn::Zxid;

/// The caller of `request`; a request that did not pass through `Authenticated` (a
/// handler called directly) is the local identity of `policy`.
pub(crate) fn caller_of<T>(request: &Request<T>, policy: &Policy) -> Caller {
    match security::caller(request) {
        Some(caller) => caller.clone(),
        None => policy.caller(policy.local_identity()),
    }
}

/// PERMISSION_DENIED for using session `session_id` that `caller` does not own.
fn not_yours(session_id: u64, what: &str) -> Status {
    error(
        ErrorCode::PermissionDenied,
        format!(
            "session {session_id:#x} belongs to another identity: only its owner or an \
             admin may {what}"
        ),
    )
}

/// Waits (bounded) until this server has applied `zxid`.
async fn applied(replica: &Replica, zxid: Zxid) -> Result<(), Status> {
    if replica.applied_zxid() < zxid {
        replica.wait_applied(zxid, READ_WAIT_MAX).await?;
    }
    Ok(())
}

/// Checks that `caller` may use session `session_id` (0: no session, nothing to
/// check) to `what` (words for the message: "close it", "write with it"). Waits
/// until the session's Open is applied here before deciding; a session that is gone
/// passes (what it was used for fails or applies on its own terms).
pub(crate) async fn check_session(
    replica: &Replica,
    caller: &Caller,
    session_id: u64,
    what: &str,
) -> Result<(), Status> {
    if session_id == 0 || caller.is_admin() {
        return Ok(());
    }
    applied(replica, session_id).await?;
    let owner_is_other = replica.read(|t| {
        t.session(session_id)
            .is_some_and(|s| !security::may_use(caller, &s.owner))
    });
    if owner_is_other {
        return Err(not_yours(session_id, what));
    }
    Ok(())
}

/// Checks that `caller` may act on the lock or election member at `key` created by
/// `token` (its fencing token or term) to `what`: it must own the session that holds
/// the node. Token 0 (any node at `key`) is for admins only. A node that is not there
/// (or has another token) passes: the op then fails with NO_NODE on its own.
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
    applied(replica, token).await?;
    let holder = replica.read(|t| {
        t.get(key)
            .filter(|n| n.stat.czxid == token)
            .map(|n| n.stat.ephemeral_owner)
    });
    match holder {
        Some(session_id) if session_id != 0 => {
            check_session(replica, caller, session_id, what).await
        }
        _ => Ok(()),
    }
}

/// PERMISSION_DENIED for a caller no rule maps (it may only ask who it is).
pub(crate) fn check_mapped(caller: &Caller) -> Result<(), Status> {
    if caller.access == Access::Unmapped {
        return Err(error(
            ErrorCode::PermissionDenied,
            format!(
                "identity {} is neither an admin nor in a team",
                clip(&caller.identity)
            ),
        ));
    }
    Ok(())
}

/// PERMISSION_DENIED for asking about a session the caller may not see.
pub(crate) fn not_visible(session_id: u64) -> Status {
    error(
        ErrorCode::PermissionDenied,
        format!("session {session_id:#x} belongs to an identity outside the caller's team"),
    )
}
