//! How the proxy makes a request's key for each limit of its route, as Envoy's `rate_limits`
//! actions make descriptor entries: from the client's address, the peer's, a header, the
//! method, the path, the route, the host or a constant, or a tuple of these.

use std::net::IpAddr;
use std::sync::Arc;

use http::HeaderName;
use smallvec::SmallVec;

use crate::rate_limit::KeyError;
use crate::rate_limit::key::{ClientIp, KeyExtractor, PeerIp, RequestHead};

/// One part of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyPart {
    /// The client's address: the right-most address of the forwarding header (then the peer)
    /// that is not a trusted proxy (nginx's `$binary_remote_addr` behind `real_ip`).
    ClientIp,
    /// The peer's address (nginx's `$binary_remote_addr`).
    PeerIp,
    /// A header's value (nginx's `$http_NAME`).
    Header(HeaderName),
    /// The method.
    Method,
    /// The path without the query (nginx's `$uri`, not normalised).
    Path,
    /// The matched route's name.
    Route,
    /// The `Host` header, or the authority of an h2 request (nginx's `$host`).
    Host,
    /// Always this text (`global` is the empty one): one budget.
    Constant(String),
}

/// Which header `client_ip` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientIpSource {
    XForwardedFor,
    Forwarded,
    XRealIp,
}

impl ClientIpSource {
    pub(crate) fn parse(text: &str) -> Option<ClientIpSource> {
        match text.to_ascii_lowercase().as_str() {
            "x-forwarded-for" => Some(ClientIpSource::XForwardedFor),
            "forwarded" => Some(ClientIpSource::Forwarded),
            "x-real-ip" => Some(ClientIpSource::XRealIp),
            _ => None,
        }
    }

    pub(crate) fn extractor(self) -> ClientIp {
        match self {
            ClientIpSource::XForwardedFor => ClientIp::x_forwarded_for(),
            ClientIpSource::Forwarded => ClientIp::forwarded(),
            ClientIpSource::XRealIp => ClientIp::x_real_ip(),
        }
    }
}

/// A limit's key as bytes: the parts one after the other, each ended by a separator byte a
/// header value cannot hold, so `("a", "bc")` and `("ab", "c")` differ.
pub type KeyBytes = SmallVec<[u8; 24]>;

/// The keys of one request, one per limit of its route; `None` where the key cannot be made
/// (a header not sent): that limit does not count the request, as nginx does not account a
/// request whose key is empty.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RouteKeys(pub(crate) SmallVec<[Option<KeyBytes>; 2]>);

/// Makes [`RouteKeys`] for one route.
#[derive(Debug)]
pub(crate) struct RouteExtractor {
    pub(crate) route: Arc<str>,
    pub(crate) client_ip: ClientIp,
    /// Each limit's key parts.
    pub(crate) keys: Vec<Vec<KeyPart>>,
}

const END: u8 = 0x00;

fn push_ip(out: &mut KeyBytes, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => out.extend_from_slice(&v4.octets()),
        IpAddr::V6(v6) => out.extend_from_slice(&v6.octets()),
    }
}

impl RouteExtractor {
    fn key(&self, parts: &[KeyPart], request: &RequestHead<'_>) -> Option<KeyBytes> {
        let mut out = KeyBytes::new();
        for part in parts {
            match part {
                KeyPart::ClientIp => push_ip(&mut out, self.client_ip.extract(request).ok()?),
                KeyPart::PeerIp => push_ip(&mut out, PeerIp.extract(request).ok()?),
                KeyPart::Header(name) => {
                    let value = request.headers().get(name)?.as_bytes();
                    // nginx does not account a request whose key is empty.
                    if value.is_empty() {
                        return None;
                    }
                    out.extend_from_slice(value);
                }
                KeyPart::Method => out.extend_from_slice(request.method().as_str().as_bytes()),
                KeyPart::Path => out.extend_from_slice(request.uri().path().as_bytes()),
                KeyPart::Route => out.extend_from_slice(self.route.as_bytes()),
                KeyPart::Host => {
                    let host = request
                        .headers()
                        .get(http::header::HOST)
                        .map(|h| h.as_bytes())
                        .or_else(|| request.uri().authority().map(|a| a.as_str().as_bytes()))?;
                    out.extend_from_slice(host);
                }
                KeyPart::Constant(text) => out.extend_from_slice(text.as_bytes()),
            }
            out.push(END);
        }
        Some(out)
    }
}

impl KeyExtractor for RouteExtractor {
    type Key = RouteKeys;

    fn extract(&self, request: &RequestHead<'_>) -> Result<RouteKeys, KeyError> {
        Ok(RouteKeys(
            self.keys
                .iter()
                .map(|parts| self.key(parts, request))
                .collect(),
        ))
    }
}
