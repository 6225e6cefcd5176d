//! A member's address as the other servers dial it: an IP address and port
//! (`10.0.0.2:7182`, `[::1]:7182`) or a host name and port
//! (`concord-1.concord-peers.concord.svc.cluster.local:7182`).
//!
//! A host name is resolved each time a connection to it is made (tonic dials
//! `http(s)://HOST:PORT`), never once at start-up: a Kubernetes pod keeps its DNS
//! name across restarts but not its IP address. What a server binds is a
//! `SocketAddr` of its own config (`client_addr`, `peer_addr`); its `[[members]]`
//! entry must name the same port (see `Address::served_by`).
//!
//! What it must not do: resolve anything (no IO here), or accept a string that is
//! neither (a scheme, a path, an empty host).

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use serde::Deserialize;

/// `HOST:PORT`, HOST an IP address or a DNS name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Address {
    /// An IP address and port, as the config said it.
    Ip(SocketAddr),
    /// A DNS name (letters, digits, `-` and `.`) and port.
    Name { host: String, port: u16 },
}

impl Address {
    /// The port.
    pub fn port(&self) -> u16 {
        match self {
            Address::Ip(a) => a.port(),
            Address::Name { port, .. } => *port,
        }
    }

    /// The socket address, when it is an IP address (no name is resolved here).
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        match self {
            Address::Ip(a) => Some(*a),
            Address::Name { .. } => None,
        }
    }

    /// Whether it is loopback: a loopback IP, or the name `localhost`.
    pub fn is_loopback(&self) -> bool {
        match self {
            Address::Ip(a) => a.ip().is_loopback(),
            Address::Name { host, .. } => host.eq_ignore_ascii_case("localhost"),
        }
    }

    /// Whether a server that binds `bind` is reachable at this address: the same
    /// port, and for an IP address the same IP or a bind on every interface
    /// (0.0.0.0 or [::]). A host name cannot be checked without resolving it, so
    /// only its port is.
    pub fn served_by(&self, bind: SocketAddr) -> bool {
        if self.port() != bind.port() {
            return false;
        }
        match self {
            Address::Ip(a) => a.ip() == bind.ip() || bind.ip().is_unspecified(),
            Address::Name { .. } => true,
        }
    }
}

impl Address {
    /// This address as a client can dial it: an IP on every interface (0.0.0.0 or
    /// [::]) is what a server binds, not where anyone reaches it, so it takes the
    /// host of `peer` (the same server's peer address, which the other servers
    /// dial), or loopback when that too binds every interface (a server alone).
    pub fn dialable(&self, peer: &Address) -> Address {
        let Address::Ip(a) = self else {
            return self.clone();
        };
        if !a.ip().is_unspecified() {
            return self.clone();
        }
        let port = a.port();
        match peer {
            Address::Ip(p) if !p.ip().is_unspecified() => {
                Address::Ip(SocketAddr::new(p.ip(), port))
            }
            Address::Name { host, .. } => Address::Name {
                host: host.clone(),
                port,
            },
            Address::Ip(_) if a.is_ipv6() => Address::Ip(SocketAddr::new(
                IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]),
                port,
            )),
            Address::Ip(_) => Address::Ip(SocketAddr::new(IpAddr::from([127, 0, 0, 1]), port)),
        }
    }
}

impl From<SocketAddr> for Address {
    fn from(a: SocketAddr) -> Address {
        Address::Ip(a)
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Ip(a) => write!(f, "{a}"),
            Address::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// Why a string is not an `Address`.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad address {0:?}: expected HOST:PORT, HOST an IP address or a DNS name")]
pub struct BadAddress(String);

impl FromStr for Address {
    type Err = BadAddress;

    fn from_str(s: &str) -> Result<Address, BadAddress> {
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Ok(Address::Ip(a));
        }
        let bad = || BadAddress(s.to_owned());
        let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
        let port: u16 = port.parse().map_err(|_| bad())?;
        // An IP without brackets or a port we could not parse is not a name either.
        if host.parse::<IpAddr>().is_ok() || !is_dns_name(host) {
            return Err(bad());
        }
        Ok(Address::Name {
            host: host.to_owned(),
            port,
        })
    }
}

/// Labels of letters, digits and `-` (not at either end), 1 to 63 bytes, joined
/// by dots; at most 253 bytes in all; a trailing dot allowed.
fn is_dns_name(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host);
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

impl<'de> Deserialize<'de> for Address {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Address, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_ips_and_names() {
        let ip: Address = "10.0.0.2:7182".parse().unwrap();
        assert_eq!(ip, Address::Ip("10.0.0.2:7182".parse().unwrap()));
        let v6: Address = "[::1]:7182".parse().unwrap();
        assert_eq!(v6.to_string(), "[::1]:7182");
        assert!(v6.is_loopback());
        let name: Address = "concord-1.concord-peers.ns.svc.cluster.local:7182"
            .parse()
            .unwrap();
        assert_eq!(name.port(), 7182);
        assert_eq!(
            name.to_string(),
            "concord-1.concord-peers.ns.svc.cluster.local:7182"
        );
        assert!(!name.is_loopback());
        assert!("localhost:1".parse::<Address>().unwrap().is_loopback());
    }

    #[test]
    fn refuses_what_is_not_host_and_port() {
        for s in [
            "",
            "7182",
            "host",
            "host:",
            "host:99999",
            ":7182",
            "http://host:7182",
            "host/path:7182",
            "-bad.example:7182",
            "a..b:7182",
            "::1:7182",
            "under_score:7182",
        ] {
            assert!(s.parse::<Address>().is_err(), "{s:?} parsed");
        }
    }

    #[test]
    fn served_by_a_bind_on_the_same_port() {
        let ip: Address = "10.0.0.2:7182".parse().unwrap();
        assert!(ip.served_by("10.0.0.2:7182".parse().unwrap()));
        assert!(ip.served_by("0.0.0.0:7182".parse().unwrap()));
        assert!(!ip.served_by("10.0.0.3:7182".parse().unwrap()));
        assert!(!ip.served_by("0.0.0.0:7183".parse().unwrap()));
        let name: Address = "concord-0.peers:7182".parse().unwrap();
        assert!(name.served_by("0.0.0.0:7182".parse().unwrap()));
        assert!(!name.served_by("0.0.0.0:7181".parse().unwrap()));
    }
}
