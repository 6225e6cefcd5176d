//! [`ClientBuilder`]: how a [`Client`] connects and behaves: the endpoint list, TLS,
//! a deadline per call, the retry policy for retry-safe calls, and the defaults of
//! the sessions it opens.
//!
//! ```text
//!   Client::builder().endpoints(["a:7181", "b:7181"]).tls(..).call_timeout(..)
//!         .retry(RetryPolicy::default()).session_ttl(..).connect().await ─▶ Client
//!                                         └─▶ Settings (shared by every clone) ─▶ call.rs
//! ```

use std::sync::Arc;
use std::time::Duration;

use crate::client::Client;
use crate::error::Error;
use crate::options::RetryPolicy;
use crate::session::{GIVE_UP_SHARE_DEFAULT, SUSPEND_SHARE_DEFAULT};
use crate::tls::{ConnectOptions, TlsOptions};

/// What every call and session of a client follows (from its builder).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Settings {
    /// Longest one attempt of a unary call may take (beyond the wait a call asks the
    /// server for, as `acquire` and `campaign` do); `None`: no deadline.
    pub(crate) call_timeout: Option<Duration>,
    /// Retries of retry-safe failures; `None`: every call is sent once.
    pub(crate) retry: Option<RetryPolicy>,
    /// The TTL `open_session(0)` asks for; 0: the server's default.
    pub(crate) session_ttl_ms: i64,
    /// The share of the TTL without an answered ping after which a session is
    /// `Suspended`.
    pub(crate) suspend_share: f64,
    /// The share of the TTL without an answered ping after which a session is given
    /// up (`Lost`) unless a server said so first.
    pub(crate) give_up_share: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            call_timeout: None,
            retry: None,
            session_ttl_ms: 0,
            suspend_share: SUSPEND_SHARE_DEFAULT,
            give_up_share: GIVE_UP_SHARE_DEFAULT,
        }
    }
}

/// Builds a [`Client`]. Made by [`Client::builder`]; every setting has a default
/// (below), so `Client::builder().connect()` connects to `127.0.0.1:7181`.
#[derive(Debug, Clone, Default)]
pub struct ClientBuilder {
    endpoints: Vec<String>,
    options: ConnectOptions,
    /// Whether the first server tried is drawn at random (else the list's first).
    in_order: bool,
    settings: Settings,
}

impl ClientBuilder {
    /// Adds a server (`host:port`, `http://host:port`, or `https://host:port`), or a
    /// comma-separated list of them, as ZooKeeper's connection strings are. The
    /// client talks to one at a time (see [`Client::connect`]). Default:
    /// `127.0.0.1:7181`.
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoints.push(endpoint.into());
        self
    }

    /// Whether the client starts at a server of the list drawn at random (the
    /// default, so that many clients given one list spread over the ensemble, as
    /// kazoo's `randomize_hosts` does) or at the first. Either way it moves on in
    /// list order.
    pub fn randomize_hosts(mut self, randomize: bool) -> Self {
        self.in_order = !randomize;
        self
    }

    /// Adds several servers (see [`ClientBuilder::endpoint`]).
    pub fn endpoints<S: Into<String>>(mut self, endpoints: impl IntoIterator<Item = S>) -> Self {
        self.endpoints.extend(endpoints.into_iter().map(Into::into));
        self
    }

    /// Connects over TLS with these files (`https://`; a bare `host:port` gets it).
    /// Default: plain text.
    pub fn tls(mut self, tls: TlsOptions) -> Self {
        self.options.tls = Some(tls);
        self
    }

    /// Sets TLS from connect options (as [`Client::connect_with`] takes them).
    pub fn options(mut self, options: ConnectOptions) -> Self {
        self.options = options;
        self
    }

    /// The longest one attempt of a unary call may take before it fails with TIMEOUT
    /// (indeterminate for a write: it may have been applied). Calls that ask the
    /// server to wait (`acquire`, `campaign` with a timeout) get that wait on top.
    /// Streams (watches, keep-alives) are not bounded by it. Default: no deadline.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.settings.call_timeout = Some(timeout);
        self
    }

    /// Retries retry-safe failures (see [`Error::is_retry_safe`]) with exponential
    /// back-off and jitter within `policy`; a write that carries a session and a
    /// request id is retried also when its outcome is unknown, since the server
    /// applies it at most once. Default: every call is sent once.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.settings.retry = Some(policy);
        self
    }

    /// The TTL sessions opened with `open_session(0)` ask for. Default: the server's.
    pub fn session_ttl(mut self, ttl: Duration) -> Self {
        self.settings.session_ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        self
    }

    /// The share of a session's TTL without an answered ping after which it is
    /// `Suspended` (from 0.1 to 1). Default: 0.5.
    pub fn suspend_share(mut self, share: f64) -> Self {
        self.settings.suspend_share = share;
        self
    }

    /// The share of a session's TTL without an answered ping after which the client
    /// gives the session up (`Lost`) unless a server said it expired first (from 1 to
    /// 10). Until then the session is `Suspended`: a server that stalled for less
    /// than the TTL keeps the session (it charges none for its own silence) and
    /// answers again. Default: 2.
    pub fn give_up_share(mut self, share: f64) -> Self {
        self.settings.give_up_share = share;
        self
    }

    fn endpoint_list(&self) -> String {
        if self.endpoints.is_empty() {
            crate::client::DEFAULT_ENDPOINT.to_owned()
        } else {
            self.endpoints.join(",")
        }
    }

    /// Connects now. Fails with UNAVAILABLE when no server of the list answers,
    /// BAD_ARGUMENTS for a bad endpoint or unreadable TLS files.
    pub async fn connect(self) -> Result<Client, Error> {
        let list = self.endpoint_list();
        let client = Client::connect_to(&list, &self.options, !self.in_order).await?;
        Ok(client.with_settings(Arc::new(self.settings)))
    }

    /// Connects on the first call instead of now.
    pub fn connect_lazy(self) -> Result<Client, Error> {
        let list = self.endpoint_list();
        let client = Client::lazy_to(&list, &self.options, !self.in_order)?;
        Ok(client.with_settings(Arc::new(self.settings)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_send_once_without_deadline_to_the_default_endpoint() {
        let builder = Client::builder();
        assert_eq!(builder.endpoint_list(), crate::client::DEFAULT_ENDPOINT);
        assert!(!builder.in_order, "the first server is drawn at random");
        assert_eq!(builder.settings, Settings::default());
        let built = Client::builder()
            .endpoint("a:1")
            .endpoints(["b:2", "c:3"])
            .call_timeout(Duration::from_secs(2))
            .retry(RetryPolicy::default())
            .session_ttl(Duration::from_secs(6))
            .suspend_share(0.3)
            .give_up_share(3.0);
        assert_eq!(built.endpoint_list(), "a:1,b:2,c:3");
        assert_eq!(built.settings.call_timeout, Some(Duration::from_secs(2)));
        assert_eq!(built.settings.retry, Some(RetryPolicy::default()));
        assert_eq!(built.settings.session_ttl_ms, 6_000);
        assert_eq!(built.settings.suspend_share, 0.3);
        assert_eq!(built.settings.give_up_share, 3.0);
    }

    #[tokio::test]
    async fn a_lazy_client_keeps_its_settings() {
        let client = Client::builder()
            .endpoint("127.0.0.1:1")
            .session_ttl(Duration::from_millis(1_500))
            .connect_lazy()
            .expect("valid endpoint");
        assert_eq!(client.settings().session_ttl_ms, 1_500);
    }
}
