//! Who a caller is, and what it may see and do (DESIGN.md §8; the model is written
//! down in docs/security.md).
//!
//! ```text
//!   connection (listen.rs) ──ConnInfo{tls, cert identity}──▶ tonic request extensions
//!   Authenticated (a wrapper around each service) ──Caller{identity, access}──▶ extensions
//!   api/ handler ──security::caller(&request)──▶ &Caller
//! ```
//!
//! A caller's identity comes from its client certificate when it presents one (the
//! TLS layer puts it in the connection's `ConnInfo`); a caller on a plain-text
//! connection (loopback, or any address with `insecure`) is the configured
//! `local_identity`; a TLS caller without a certificate is `ANONYMOUS`, mapped to
//! nothing. `Policy` maps an identity to its access: an admin (the whole tree), a
//! team member (rooted in the team's namespace), or nobody in particular.
//!
//! | file | job |
//! |---|---|
//! | `identity.rs` | identities, patterns, teams, the policy |
//! | `tls.rs`, `x509.rs`, `certs.rs` | TLS on both ports and its reloads, the identity rule, `concord certs` |
//! | `peers.rs` | on the peer port, which member a connection is, by its certificate |
//! | `namespace.rs` | a team's paths and queue names mapped in and out |
//! | `acl.rs` | grants (rwcda on subtrees, inherited), the replicated table's rules |
//! | `ownership.rs` | who may use and see a session |
//! | `quota.rs`, `limits.rs` | hard quotas: the leader's ledger; per-server watches and rate |
//!
//! The services call this module, never the other way round.

pub mod acl;
pub mod certs;
mod identity;
pub mod limits;
pub mod namespace;
mod ownership;
pub mod peers;
pub mod quota;
pub mod tls;
pub mod x509;

pub use acl::{ancestors, Denied, Grant, Grantee, Grants, Perms, GRANTS_MAX};
pub use identity::{glob_matches, Access, Caller, ConnInfo, Pattern, Policy, Team};
pub use namespace::Namespace;
pub use ownership::{may_see, may_use};
pub use tls::{PeerClientTls, ServerTls, TlsError};

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::Either;
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::Request;

pub use limits::{TeamLimits, WatchPermit};

use crate::config::{Config, ConfigError};

/// The identity of a TLS client that presented no certificate (or one without a
/// name the identity rule takes): never an admin or a team member, never the local
/// identity (that is for plain text on loopback).
pub const ANONYMOUS: &str = "anonymous";

/// The security state a service needs: cheap to clone, shared by every service.
#[derive(Clone, Debug)]
pub struct Security {
    policy: Arc<Policy>,
    /// What bootstrap seeds into the grant table: the config's `[[grants]]` and
    /// each team's `rwcda` on its root.
    seed_grants: Arc<[Grant]>,
    /// The namespace roots of the teams, created by the seed if missing.
    seed_roots: Arc<[String]>,
    /// Each team's per-server quota counters (watches, request rate), by team name.
    limits: Arc<HashMap<String, Arc<TeamLimits>>>,
}

impl Security {
    /// The policy configured in `config` (teams, admins, the local identity, seeded
    /// grants).
    pub fn new(config: &Config) -> Result<Security, ConfigError> {
        let policy = Policy::from_config(config)?;
        let seed_grants = seed_grants(config, &policy)?;
        let seed_roots = policy
            .teams()
            .iter()
            .filter(|t| t.root != "/")
            .map(|t| t.root.clone())
            .collect();
        let limits = policy
            .teams()
            .iter()
            .map(|t| (t.name.clone(), Arc::new(TeamLimits::new(&t.name, t.quota))))
            .collect();
        Ok(Security {
            policy: Arc::new(policy),
            seed_grants,
            seed_roots,
            limits: Arc::new(limits),
        })
    }

    /// The grants bootstrap seeds (see `api/access.rs`).
    pub fn seed_grants(&self) -> &[Grant] {
        &self.seed_grants
    }

    /// The team roots bootstrap creates.
    pub fn seed_roots(&self) -> &[String] {
        &self.seed_roots
    }

    /// Team `team`'s per-server quota counters.
    pub fn limits(&self, team: &str) -> Option<&Arc<TeamLimits>> {
        self.limits.get(team)
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Who sent a request on the connection `info` describes: the identity of its
    /// client certificate; on a TLS connection without one (no client certificate
    /// asked, or none of the identity rule's names in it), `ANONYMOUS`, which maps
    /// to nothing whatever the patterns say; the local identity on plain text.
    pub fn caller_on(&self, info: Option<&ConnInfo>) -> Caller {
        match info {
            Some(ConnInfo {
                cert_identity: Some(identity),
                ..
            }) => self.policy.caller(identity.clone()),
            Some(ConnInfo { tls: true, .. }) => Caller {
                identity: Arc::from(ANONYMOUS),
                access: Access::Unmapped,
            },
            _ => self.policy.caller(self.policy.local_identity()),
        }
    }
}

/// The caller of a request that passed through `Authenticated` (None otherwise: a
/// handler called directly, as in unit tests).
pub fn caller<T>(request: &Request<T>) -> Option<&Caller> {
    request.extensions().get::<Caller>()
}

/// The per-server quota counters of the team of a request's caller (None: no team,
/// or a handler called directly). Put in the extensions by `Authenticated`.
pub fn team_limits<T>(request: &Request<T>) -> Option<&Arc<TeamLimits>> {
    request.extensions().get::<Arc<TeamLimits>>()
}

/// Wraps a service so that each request carries its `Caller` in its extensions,
/// and, for a team's caller, its team's `TeamLimits`; a request over the team's
/// rate quota is answered RESOURCE_EXHAUSTED (QUOTA_EXCEEDED once `Coded` has
/// coded it) without reaching the service.
#[derive(Clone, Debug)]
pub struct Authenticated<S> {
    inner: S,
    security: Security,
}

impl<S> Authenticated<S> {
    pub fn new(inner: S, security: Security) -> Self {
        Authenticated { inner, security }
    }
}

impl<S: NamedService> NamedService for Authenticated<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> tower_service::Service<http::Request<Body>> for Authenticated<S>
where
    S: tower_service::Service<
        http::Request<Body>,
        Response = http::Response<Body>,
        Error = Infallible,
    >,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Either<S::Future, std::future::Ready<Result<http::Response<Body>, Infallible>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        let caller = self
            .security
            .caller_on(request.extensions().get::<ConnInfo>());
        let limits = caller.team().and_then(|t| self.security.limits(&t.name));
        if let Some(limits) = limits.cloned() {
            if let Err(e) = limits.admit() {
                let status = tonic::Status::resource_exhausted(e.to_string());
                return Either::Right(std::future::ready(Ok(status.into_http())));
            }
            request.extensions_mut().insert(limits);
        }
        request.extensions_mut().insert(caller);
        Either::Left(self.inner.call(request))
    }
}

/// Each team's `rwcda` on its root, then the config's `[[grants]]`, checked.
fn seed_grants(config: &Config, policy: &Policy) -> Result<Arc<[Grant]>, ConfigError> {
    let invalid = |m: String| Err(ConfigError::Invalid(m));
    let mut out: Vec<Grant> = policy
        .teams()
        .iter()
        .map(|t| Grant {
            path: t.root.clone(),
            to: Grantee::Team(t.name.clone()),
            perms: Perms::ALL,
        })
        .collect();
    for g in &config.grants {
        if let Err(e) = crate::tree::path::validate(&g.path) {
            return invalid(format!("grant on {:?}: {e}", g.path));
        }
        let to = match (&g.identity, &g.team) {
            (Some(id), None) if !id.is_empty() => Grantee::Identity(id.clone()),
            (None, Some(team)) if policy.team(team).is_some() => Grantee::Team(team.clone()),
            (None, Some(team)) => {
                return invalid(format!("grant on {:?}: no team {team:?}", g.path))
            }
            _ => {
                return invalid(format!(
                    "grant on {:?}: name exactly one of identity and team",
                    g.path
                ))
            }
        };
        let perms = match Perms::parse(&g.perms) {
            Ok(p) if !p.is_empty() => p,
            Ok(_) => return invalid(format!("grant on {:?}: perms is empty", g.path)),
            Err(e) => return invalid(format!("grant on {:?}: {e}", g.path)),
        };
        out.push(Grant {
            path: g.path.clone(),
            to,
            perms,
        });
    }
    Ok(out.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{GrantConfig, TeamConfig};

    #[test]
    fn a_tls_caller_without_a_certificate_is_nobody() {
        let security = Security::new(&Config::default()).unwrap();
        let on = |tls, id: Option<&str>| {
            security.caller_on(Some(&ConnInfo {
                remote_addr: None,
                tls,
                cert_identity: id.map(Arc::from),
            }))
        };
        assert!(security.caller_on(None).is_admin(), "the local identity");
        assert!(on(false, None).is_admin(), "plain text: the local identity");
        assert!(on(true, Some("admin")).is_admin());
        let anonymous = on(true, None);
        assert_eq!(&*anonymous.identity, ANONYMOUS);
        assert_eq!(anonymous.access, Access::Unmapped);
        assert_eq!(on(true, Some("stranger")).access, Access::Unmapped);
    }

    fn config(grants: Vec<GrantConfig>) -> Config {
        Config {
            teams: vec![TeamConfig {
                name: "pay".into(),
                root: "/teams/pay".into(),
                identities: vec!["pay-*".into()],
                quota: Default::default(),
            }],
            grants,
            ..Config::default()
        }
    }

    fn grant(path: &str, identity: Option<&str>, team: Option<&str>, perms: &str) -> GrantConfig {
        GrantConfig {
            path: path.into(),
            identity: identity.map(Into::into),
            team: team.map(Into::into),
            perms: perms.into(),
        }
    }

    #[test]
    fn the_seed_is_each_teams_root_then_the_configured_grants() {
        let s = Security::new(&config(vec![grant("/shared", None, Some("pay"), "r")])).unwrap();
        assert_eq!(
            s.seed_grants(),
            [
                Grant {
                    path: "/teams/pay".into(),
                    to: Grantee::Team("pay".into()),
                    perms: Perms::ALL,
                },
                Grant {
                    path: "/shared".into(),
                    to: Grantee::Team("pay".into()),
                    perms: Perms::READ,
                },
            ]
        );
        assert_eq!(s.seed_roots(), ["/teams/pay".to_string()]);
        let bad = |g| Security::new(&config(vec![g])).is_err();
        assert!(bad(grant("rel", Some("x"), None, "r")));
        assert!(bad(grant("/a", Some("x"), Some("pay"), "r")));
        assert!(bad(grant("/a", None, None, "r")));
        assert!(bad(grant("/a", None, Some("nosuch"), "r")));
        assert!(bad(grant("/a", Some("x"), None, "")));
        assert!(bad(grant("/a", Some("x"), None, "rq")));
        assert!(!bad(grant("/a", Some("x-*"), None, "rwcda")));
    }
}
