//! Where a request comes from, as the pause after wrong tokens counts it.

use std::convert::Infallible;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;

/// Where a request comes from, as the pause after wrong tokens counts it: the TCP peer's IP address without its
/// port (each connection has its own), an IPv6 address by its /64 network (one host commonly holds a whole
/// /64), an IPv4 address mapped into IPv6 as that IPv4 address. An extractor: it reads axum's
/// `ConnectInfo<SocketAddr>`, which [`crate::http::serve`] provides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Peer(IpAddr);

impl Peer {
    /// A request whose peer the server did not give (a router called without connect info, as some tests do):
    /// all of them share one count, as everyone did before counts were per address.
    pub const UNKNOWN: Peer = Peer(IpAddr::V6(Ipv6Addr::UNSPECIFIED));

    pub fn new(address: IpAddr) -> Self {
        match address {
            IpAddr::V4(_) => Peer(address),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Peer(IpAddr::V4(v4)),
                None => Peer(IpAddr::V6(Ipv6Addr::from_bits(v6.to_bits() & !u128::from(u64::MAX)))),
            },
        }
    }
}

impl From<SocketAddr> for Peer {
    fn from(address: SocketAddr) -> Self {
        Peer::new(address.ip())
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => write!(f, "{v4}"),
            IpAddr::V6(_) if *self == Peer::UNKNOWN => f.write_str("unknown"),
            IpAddr::V6(v6) => write!(f, "{v6}/64"),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Peer {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let given = parts.extensions.get::<ConnectInfo<SocketAddr>>();
        Ok(given.map_or(Peer::UNKNOWN, |ConnectInfo(address)| Peer::from(*address)))
    }
}
