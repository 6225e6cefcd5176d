//! The connect handshake: a ZooKeeper session is a Concord session.
//!
//! Session id 0 opens a session owned by the caller, with the client's timeout
//! clamped to the server's range (ZooKeeper's min/maxSessionTimeout). Any other id
//! reattaches: it must be a live session the caller may use (its owner, or an admin:
//! the same rule as on gRPC, `api::shared::may_use_session`) with the password this
//! door gave out for it. The password is a digest of the session's id and owner, the
//! same on every server, so a client moves between servers with its id and password
//! as in ZooKeeper; it is no secret, since the owner's identity is what guards a
//! session (docs/zookeeper.md, "Sessions").
//!
//! A client that has seen a zxid this server has not applied waits (bounded) until
//! it has, where ZooKeeper closes the connection: it never reads older data than it
//! saw.

use crate::api::shared::{code_of, may_use_session, open_session, View, READ_WAIT_MAX};
use crate::txn::Zxid;
use concord_proto::v1::ErrorCode;

use super::door::Door;
use super::proto::{ConnectRequest, ConnectResponse};

/// Why a connect request gets no session.
pub(super) enum Refusal {
    /// The session is gone, was never issued, is another identity's, or its
    /// password is wrong: answered as an expired session.
    Expired,
    /// This server cannot serve now: the connection closes and the client tries
    /// another server.
    Unavailable(String),
}

/// The password of session `session_id` owned by `owner`: 16 bytes, as ZooKeeper's.
pub(super) fn password(session_id: u64, owner: &str) -> [u8; 16] {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(owner.as_bytes());
    let a = hasher.finalize();
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&session_id.to_be_bytes());
    hasher.update(owner.as_bytes());
    let b = hasher.finalize();
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&session_id.to_be_bytes());
    out[8..12].copy_from_slice(&a.to_be_bytes());
    out[12..].copy_from_slice(&b.to_be_bytes());
    out
}

/// Opens or reattaches the session `request` asks for: its id and the response.
pub(super) async fn connect(
    door: &Door,
    view: &View,
    request: &ConnectRequest,
) -> Result<(u64, ConnectResponse), Refusal> {
    let replica = &door.replica;
    let unavailable = |s: tonic::Status| Refusal::Unavailable(s.message().to_string());
    replica
        .in_touch()
        .await
        .map_err(|e| Refusal::Unavailable(e.to_string()))?;
    let seen = Zxid::try_from(request.last_zxid_seen).unwrap_or(0);
    if seen > replica.applied_zxid() {
        replica
            .wait_applied(seen, READ_WAIT_MAX)
            .await
            .map_err(|e| Refusal::Unavailable(e.to_string()))?;
    }
    let (lo, hi) = door.ttl_range_ms;
    let asked = u64::try_from(request.timeout_ms).unwrap_or(0);
    // The password is the one the client sent back, or for a new session the one
    // its owner, the caller, gets.
    let (session_id, ttl_ms, passwd) = if request.session_id == 0 {
        match open_session(replica, &view.caller, asked.clamp(lo, hi)).await {
            Ok((_, id, ttl)) => (id, ttl, password(id, &view.caller.identity)),
            Err(s) if is_transient(&s) => return Err(unavailable(s)),
            Err(s) => {
                tracing::info!(reason = s.message(), "zookeeper session refused");
                return Err(Refusal::Expired);
            }
        }
    } else {
        let id = u64::try_from(request.session_id).map_err(|_| Refusal::Expired)?;
        match may_use_session(replica, &view.caller, id).await {
            Ok(true) => {}
            Ok(false) => return Err(Refusal::Expired),
            Err(s) => return Err(unavailable(s)),
        }
        let session = replica.read(|t| t.session(id).map(|s| (s.ttl_ms, s.owner.clone())));
        let Some((ttl, owner)): Option<(i64, String)> = session else {
            return Err(Refusal::Expired);
        };
        let passwd = password(id, &owner);
        if request.passwd.as_ref() != passwd || replica.keep_alive(id).is_none() {
            return Err(Refusal::Expired);
        }
        (id, ttl, passwd)
    };
    Ok((
        session_id,
        ConnectResponse {
            protocol_version: 0,
            timeout_ms: i32::try_from(ttl_ms).unwrap_or(i32::MAX),
            session_id: session_id as i64,
            passwd: passwd.to_vec().into(),
            read_only: request.read_only.map(|_| false),
        },
    ))
}

/// Whether a failure says "not now, elsewhere" rather than "no".
pub(super) fn is_transient(status: &tonic::Status) -> bool {
    matches!(
        code_of(status),
        Some(
            ErrorCode::NotLeader
                | ErrorCode::Unavailable
                | ErrorCode::Timeout
                | ErrorCode::OutcomeUnknown
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_belongs_to_one_session_and_owner() {
        let p = password(7, "alice");
        assert_eq!(p, password(7, "alice"), "the same on every server");
        assert_ne!(p, password(8, "alice"));
        assert_ne!(p, password(7, "bob"));
    }
}
