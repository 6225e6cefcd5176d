//! The connection a follower's `Forward` calls take to one leader: a
//! `concord_direct::Link` (one HTTP/2 connection driven through h2 itself), so that
//! a call's HEADERS and DATA reach the leader in one write, where tonic's `Channel`
//! sends them in two (and wakes the leader twice). Made on the first call, and again
//! on the next call after it broke; pings every `KEEPALIVE`, so a leader that went
//! silent without closing it is found out and the next call dials again.
//!
//! ```text
//!   ForwardClient<Link> ──call──▶ connected? ──no──▶ dial (TCP, TLS, h2) ≤ CONNECT_TIMEOUT
//!                                   │ yes                 │ failed: ConnectError (never sent)
//!                                   ▼                     ▼
//!                                Direct::call ──────▶ one write to the leader
//! ```

use std::time::Duration;

use concord_direct::{BoxError, Direct, Link};
use http::uri::Authority;

use crate::config::Address;
use crate::security::PeerClientTls;
use crate::zab::ServerId;

/// Longest a dial (TCP, TLS, HTTP/2 handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// A ping this often; the connection is dropped when one goes unanswered as long.
const KEEPALIVE: Duration = Duration::from_secs(1);

/// The path to `leader`'s peer port at `addr`, over mTLS with this server's peer
/// certificate when `tls` is given. Clones share the connection.
pub(super) fn forward_link(leader: ServerId, addr: Address, tls: Option<PeerClientTls>) -> Link {
    Link::new(move || {
        let (addr, tls) = (addr.clone(), tls.clone());
        async move {
            tokio::time::timeout(CONNECT_TIMEOUT, dial(leader, &addr, tls.as_ref()))
                .await
                .unwrap_or_else(|_| Err(format!("no connection within {CONNECT_TIMEOUT:?}").into()))
        }
    })
}

async fn dial(
    leader: ServerId,
    addr: &Address,
    tls: Option<&PeerClientTls>,
) -> Result<Direct, BoxError> {
    let authority: Authority = addr.to_string().parse()?;
    // The peer files are read at every dial: one after a rotation presents the new
    // certificate.
    let tls = match tls {
        Some(tls) => Some(tls.rustls_config(leader)?),
        None => None,
    };
    Direct::connect(authority, tls, Some(KEEPALIVE)).await
}
