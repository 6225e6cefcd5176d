//! Which member a peer connection is: on a TLS peer port, the identity of the peer's
//! certificate (URI SAN, then DNS SAN, then CN, derived by the TLS layer) names the
//! member, never the ids its frames and calls carry.
//!
//! ```text
//!   peer conn ──ConnInfo{tls, cert_identity}──▶ PeerAuthorizer (an interceptor on
//!   every peer route) ── identity of another member? ──no──▶ PERMISSION_DENIED,
//!        │                                                   nothing read (logged,
//!        yes: AuthenticatedPeer(id) in the request's extensions        throttled)
//!        ▼
//!   Deliver / Forward handlers: check_claim(authenticated, claimed id) ──▶ Zab
//! ```
//!
//! Each `[[members]]` entry names the identity its peer certificate must carry
//! (`peer_identity`, by default `concord-peer-<id>`); the identities are unique, so
//! an identity names at most one member. On a plain-text peer port (loopback
//! development ensembles) there is no certificate: the ids in frames are believed,
//! as before TLS.
//!
//! What it must not do: read a request's body, or look at certificates (the TLS
//! layer derives the identity).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tonic::service::Interceptor;
use tonic::{Request, Status};

use super::ConnInfo;
use crate::config::{ConfigError, Member};
use crate::zab::ServerId;

/// Least time between two warnings about refused peer connections.
const WARN_EVERY: Duration = Duration::from_secs(10);
/// Longest piece of a refused identity quoted in a log line or an error.
const QUOTED_CHARS_MAX: usize = 128;

/// The identity member `id` carries when its entry names none: the DNS SAN of the
/// peer certificates `concord certs` makes.
pub fn default_identity(id: ServerId) -> String {
    format!("concord-peer-{id}")
}

/// The identity member `id`'s peer certificate must carry (its `peer_identity`, or
/// `default_identity`); None if `id` is not among `members`. What an outbound
/// connection to that member checks the server certificate against.
pub fn peer_identity(members: &[Member], id: ServerId) -> Option<String> {
    members.iter().find(|m| m.id == id).map(identity_of)
}

fn identity_of(member: &Member) -> String {
    member
        .peer_identity
        .clone()
        .unwrap_or_else(|| default_identity(member.id))
}

/// Checks the members' peer identities: each a DNS name (what a server dialling the
/// member verifies its certificate against), and unique (one member's configured
/// identity may not be another's default either).
pub fn validate(members: &[Member]) -> Result<(), ConfigError> {
    identities(members).map(|_| ())
}

/// Identity -> member id, checked as `validate` says.
fn identities(members: &[Member]) -> Result<HashMap<String, ServerId>, ConfigError> {
    let mut by_identity = HashMap::with_capacity(members.len());
    for m in members {
        let identity = identity_of(m);
        if rustls_pki_types::DnsName::try_from(identity.as_str()).is_err() {
            return Err(ConfigError::Invalid(format!(
                "member {}: peer_identity {:?} is not a DNS name",
                m.id,
                quoted(&identity)
            )));
        }
        if let Some(other) = by_identity.insert(identity.clone(), m.id) {
            return Err(ConfigError::Invalid(format!(
                "members {other} and {} have the same peer identity {:?}",
                m.id,
                quoted(&identity)
            )));
        }
    }
    Ok(by_identity)
}

/// At most `QUOTED_CHARS_MAX` characters of an identity (a certificate may carry a
/// long one).
fn quoted(identity: &str) -> &str {
    match identity.char_indices().nth(QUOTED_CHARS_MAX) {
        Some((at, _)) => &identity[..at],
        None => identity,
    }
}

/// The member a request on the peer port comes from, as its certificate proves; in
/// the extensions of every request that came over TLS and passed `PeerAuthorizer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuthenticatedPeer(pub ServerId);

/// The member `request` came from according to its certificate; None on a
/// plain-text peer port (or for a handler called directly, in unit tests).
pub fn authenticated<T>(request: &Request<T>) -> Option<ServerId> {
    request
        .extensions()
        .get::<AuthenticatedPeer>()
        .map(|peer| peer.0)
}

/// Checks the server id a frame or call claims against the certificate's:
/// PERMISSION_DENIED when they differ. Without a certificate (plain text) any claim
/// passes here; the handlers still check it is a member's.
pub fn check_claim(authenticated: Option<ServerId>, claimed: ServerId) -> Result<(), Status> {
    match authenticated {
        Some(id) if id != claimed => Err(Status::permission_denied(format!(
            "the peer's certificate is server {id}'s, but it claims to be server {claimed}"
        ))),
        _ => Ok(()),
    }
}

/// Admits peer connections by certificate: an interceptor in front of every route
/// of the peer port (`peer::inbound` wraps them all, before routing). Cheap to
/// clone.
#[derive(Clone, Debug)]
pub struct PeerAuthorizer {
    inner: Arc<Authorizer>,
}

#[derive(Debug)]
struct Authorizer {
    /// This server's id: a peer presenting this server's own identity is refused
    /// (a server never calls itself).
    own: ServerId,
    /// Peer identity -> member id, every member's.
    by_identity: HashMap<String, ServerId>,
    /// Refusals since the last warning.
    refused: Mutex<Throttled>,
    /// Refusals since start.
    refused_total: AtomicU64,
}

impl PeerAuthorizer {
    /// The authorizer of server `own` in an ensemble of `members` (their identities
    /// checked as `validate` says).
    pub fn new(members: &[Member], own: ServerId) -> Result<PeerAuthorizer, ConfigError> {
        Ok(PeerAuthorizer {
            inner: Arc::new(Authorizer {
                own,
                by_identity: identities(members)?,
                refused: Mutex::new(Throttled::default()),
                refused_total: AtomicU64::new(0),
            }),
        })
    }

    /// The member whose peer identity `identity` is, if any (this server included).
    pub fn member_of(&self, identity: &str) -> Option<ServerId> {
        self.inner.by_identity.get(identity).copied()
    }

    /// Who a request on the connection `info` describes comes from: Ok(None) on a
    /// plain-text connection (nothing to check: the frames' ids are believed),
    /// Ok(Some(member)) for a certificate of another member, PERMISSION_DENIED for
    /// a TLS connection without an identity or with one that is no other member's.
    pub fn admit(&self, info: Option<&ConnInfo>) -> Result<Option<ServerId>, Status> {
        let Some(info) = info.filter(|info| info.tls) else {
            return Ok(None);
        };
        let Some(identity) = info.cert_identity.as_deref() else {
            return Err(Status::permission_denied(
                "a peer connection without a certificate identity",
            ));
        };
        match self.member_of(identity) {
            Some(id) if id != self.inner.own => Ok(Some(id)),
            Some(_) => Err(Status::permission_denied(format!(
                "peer identity {:?} is this server's own",
                quoted(identity)
            ))),
            None => Err(Status::permission_denied(format!(
                "peer identity {:?} is not a member of this ensemble",
                quoted(identity)
            ))),
        }
    }

    /// Requests refused since start.
    pub fn refused(&self) -> u64 {
        self.inner.refused_total.load(Ordering::Relaxed)
    }

    /// Warns about a refusal: the first, then at most one line per `WARN_EVERY`
    /// with the count since the last.
    fn warn(&self, info: Option<&ConnInfo>, status: &Status) {
        self.inner.refused_total.fetch_add(1, Ordering::Relaxed);
        let due = self
            .inner
            .refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .count(Instant::now());
        if let Some(refused) = due {
            let remote = info.and_then(|i| i.remote_addr);
            tracing::warn!(
                remote = ?remote,
                refused,
                reason = status.message(),
                "peer connection refused"
            );
        }
    }
}

impl Interceptor for PeerAuthorizer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let info = request.extensions().get::<ConnInfo>();
        match self.admit(info) {
            Ok(Some(id)) => {
                request.extensions_mut().insert(AuthenticatedPeer(id));
                Ok(request)
            }
            Ok(None) => Ok(request),
            Err(status) => {
                self.warn(info, &status);
                Err(status)
            }
        }
    }
}

/// Counts events and says when to warn: at the first, then at most every
/// `WARN_EVERY`, with the count since the last warning.
#[derive(Debug, Default)]
pub(crate) struct Throttled {
    last: Option<Instant>,
    since: u64,
}

impl Throttled {
    /// Counts one event at `now`; Some(count since the last warning) when one is due.
    pub(crate) fn count(&mut self, now: Instant) -> Option<u64> {
        self.since += 1;
        if self
            .last
            .is_some_and(|at| now.saturating_duration_since(at) < WARN_EVERY)
        {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.since))
    }
}

#[cfg(test)]
mod tests;
