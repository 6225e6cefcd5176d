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
//! `local_identity`. `Policy` maps an identity to its access: an admin (the whole
//! tree), a team member (rooted in the team's namespace), or nobody in particular.
//!
//! The services call this module, never the other way round.

mod identity;
pub mod quota;

pub use identity::{Access, Caller, ConnInfo, Pattern, Policy, Team};

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::server::NamedService;
use tonic::Request;

use crate::config::{Config, ConfigError};

/// The security state a service needs: cheap to clone, shared by every service.
#[derive(Clone, Debug)]
pub struct Security {
    policy: Arc<Policy>,
}

impl Security {
    /// The policy configured in `config` (teams, admins, the local identity).
    pub fn new(config: &Config) -> Result<Security, ConfigError> {
        Ok(Security {
            policy: Arc::new(Policy::from_config(config)?),
        })
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Who sent a request on the connection `info` describes: the identity of its
    /// client certificate, or the local identity on a connection without one.
    pub fn caller_on(&self, info: Option<&ConnInfo>) -> Caller {
        match info.and_then(|info| info.cert_identity.clone()) {
            Some(identity) => self.policy.caller(identity),
            None => self.policy.caller(self.policy.local_identity()),
        }
    }
}

/// The caller of a request that passed through `Authenticated` (None otherwise: a
/// handler called directly, as in unit tests).
pub fn caller<T>(request: &Request<T>) -> Option<&Caller> {
    request.extensions().get::<Caller>()
}

/// Wraps a service so that each request carries its `Caller` in its extensions.
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
    S: tower_service::Service<http::Request<Body>, Error = Infallible>,
{
    type Response = S::Response;
    type Error = Infallible;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        let caller = self
            .security
            .caller_on(request.extensions().get::<ConnInfo>());
        request.extensions_mut().insert(caller);
        self.inner.call(request)
    }
}
