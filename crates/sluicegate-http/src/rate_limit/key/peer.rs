//! The peer's address: the other end of the TCP connection.

use std::net::{IpAddr, SocketAddr};

use crate::rate_limit::key::RequestHead;

use crate::rate_limit::error::KeyError;
use crate::rate_limit::key::KeyExtractor;

/// The peer's IP address, from the request's extensions: axum's `ConnectInfo<SocketAddr>`
/// (serve with `into_make_service_with_connect_info::<SocketAddr>()`), a `SocketAddr` that a
/// hyper server inserted, or (feature `tonic`) tonic's `TcpConnectInfo`. IPv4-mapped IPv6
/// addresses count as the IPv4 address they map.
///
/// Behind a reverse proxy every request comes from the proxy: use [`ClientIp`] there.
///
/// [`ClientIp`]: crate::rate_limit::key::ClientIp
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerIp;

impl KeyExtractor for PeerIp {
    type Key = IpAddr;

    #[inline]
    fn extract(&self, request: &RequestHead<'_>) -> Result<IpAddr, KeyError> {
        peer_ip(request).ok_or_else(|| KeyError::NoPeerAddress)
    }
}

/// The peer's address, if the server made it known.
#[inline]
pub(crate) fn peer_ip(request: &RequestHead<'_>) -> Option<IpAddr> {
    // `sluicegate proxy`'s own, which its requests carry instead of the peer's `SocketAddr`.
    if let Some(peer) = request.served_peer() {
        return Some(peer);
    }
    let extensions = request.extensions();
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(addr)) =
        extensions.get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(addr.ip().to_canonical());
    }
    if let Some(addr) = extensions.get::<SocketAddr>() {
        return Some(addr.ip().to_canonical());
    }
    #[cfg(feature = "tonic")]
    if let Some(addr) = extensions
        .get::<tonic::transport::server::TcpConnectInfo>()
        .and_then(|info| info.remote_addr())
    {
        return Some(addr.ip().to_canonical());
    }
    extensions.get::<IpAddr>().map(|ip| ip.to_canonical())
}
