//! The client's address behind reverse proxies, as the trusted ones report it.

mod chain;

use std::net::IpAddr;

use crate::rate_limit::key::RequestHead;
use http::header::FORWARDED;
use http::{HeaderName, HeaderValue};
use ipnet::IpNet;

use chain::{elements_from_right, forwarded_for, parse_address, trim_ows};

use crate::rate_limit::error::{BuildError, KeyError};
use crate::rate_limit::key::KeyExtractor;
use crate::rate_limit::key::peer::peer_ip;

/// The header a reverse proxy writes the client's address in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForwardingHeader {
    /// RFC 7239 `Forwarded: for=192.0.2.60, for="[2001:db8::1]:4711"`.
    Forwarded,
    /// `X-Forwarded-For: 192.0.2.60, 198.51.100.17`.
    XForwardedFor,
    /// `X-Real-IP: 192.0.2.60`, one address set by the proxy.
    XRealIp,
}

/// The name of a header [`ForwardingHeader`] does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a forwarding header: one of x-forwarded-for, forwarded, x-real-ip")]
pub struct UnknownForwardingHeader(pub String);

impl std::str::FromStr for ForwardingHeader {
    type Err = UnknownForwardingHeader;

    /// The header named `text` (`x-forwarded-for`, `forwarded`, `x-real-ip`), in any case.
    fn from_str(text: &str) -> Result<ForwardingHeader, UnknownForwardingHeader> {
        match text.to_ascii_lowercase().as_str() {
            "x-forwarded-for" => Ok(ForwardingHeader::XForwardedFor),
            "forwarded" => Ok(ForwardingHeader::Forwarded),
            "x-real-ip" => Ok(ForwardingHeader::XRealIp),
            _ => Err(UnknownForwardingHeader(text.to_owned())),
        }
    }
}

impl ForwardingHeader {
    /// The header's name.
    pub fn name(&self) -> HeaderName {
        match self {
            ForwardingHeader::Forwarded => FORWARDED,
            ForwardingHeader::XForwardedFor => HeaderName::from_static("x-forwarded-for"),
            ForwardingHeader::XRealIp => HeaderName::from_static("x-real-ip"),
        }
    }
}

/// The client's IP address as the reverse proxies in front of the service report it: the
/// right-most address of the chain (the forwarding header's addresses, then the peer) that is
/// not a trusted proxy, as nginx's `realip` module reads it with `real_ip_recursive on`.
///
/// Every proxy appends the address it received the request from, so the right-most entries are
/// written by your proxies and the left-most by whoever sent the request first: a client can
/// put any address there. Walking from the right and stopping at the first address that is
/// not one of your proxies gives the address your outermost proxy saw, which no client can
/// choose. A request from a peer that is not a trusted proxy is keyed by the peer's address and
/// its forwarding header is ignored; if every address is trusted, the left-most is the key.
///
/// The field is read as bytes, from its last line to its first and each line from its last
/// comma to its first, one element at a time: a `Forwarded` element's quotes are honoured
/// within it but never across a comma, so an open quote or a byte that is not ASCII that a
/// client wrote cannot change how the elements your proxies appended after it are read. An
/// element that is not an address (`unknown`, an obfuscated `_node`, garbage, a `Forwarded`
/// element that is malformed or has no `for=`) ends the walk, and the key is then the last
/// address a trusted hop vouched for (at worst the peer): never an address only the client
/// wrote, and never no key.
///
/// Read one header only, the one your proxy writes: a proxy that appends to
/// `X-Forwarded-For` passes a client's forged `Forwarded` header through untouched.
///
/// ```
/// use sluicegate_http::rate_limit::key::ClientIp;
///
/// // Behind a load balancer in 10.0.0.0/8 that appends to X-Forwarded-For.
/// let key = ClientIp::x_forwarded_for().trusted_proxies(["10.0.0.0/8"])?;
/// # Ok::<(), sluicegate_http::rate_limit::BuildError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIp {
    header: ForwardingHeader,
    name: HeaderName,
    trusted: Vec<IpNet>,
    peer_trusted: bool,
}

impl ClientIp {
    /// Reads `header`; no proxy is trusted until [`trusted_proxies`](Self::trusted_proxies)
    /// or [`trust`](Self::trust) names some (so, until then, the key is the peer's address).
    pub fn new(header: ForwardingHeader) -> ClientIp {
        ClientIp {
            header,
            name: header.name(),
            trusted: Vec::new(),
            peer_trusted: false,
        }
    }

    /// Reads RFC 7239 `Forwarded` (its `for=` parameters).
    pub fn forwarded() -> ClientIp {
        ClientIp::new(ForwardingHeader::Forwarded)
    }

    /// Reads `X-Forwarded-For`.
    pub fn x_forwarded_for() -> ClientIp {
        ClientIp::new(ForwardingHeader::XForwardedFor)
    }

    /// Reads `X-Real-IP`.
    pub fn x_real_ip() -> ClientIp {
        ClientIp::new(ForwardingHeader::XRealIp)
    }

    /// Trusts a block of proxy addresses.
    pub fn trust(mut self, proxies: IpNet) -> ClientIp {
        self.trusted.push(proxies.trunc());
        self
    }

    /// Trusts proxies written as CIDR blocks (`10.0.0.0/8`, `fd00::/8`) or single addresses.
    pub fn trusted_proxies<I>(mut self, proxies: I) -> Result<ClientIp, BuildError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        for proxy in proxies {
            let text = proxy.as_ref().trim();
            let net = text
                .parse::<IpNet>()
                .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| BuildError::BadProxy {
                    value: text.to_owned(),
                })?;
            self = self.trust(net);
        }
        Ok(self)
    }

    /// Trusts the peer whatever its address, and needs no peer address: for a service that
    /// can only be reached through its proxies (a socket no client can connect to).
    pub fn peer_is_trusted(mut self) -> ClientIp {
        self.peer_trusted = true;
        self
    }

    /// The header read.
    pub fn header(&self) -> ForwardingHeader {
        self.header
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|net| net.contains(&ip))
    }

    fn bad(&self, value: &[u8]) -> KeyError {
        let value = String::from_utf8_lossy(&value[..value.len().min(64)]).into_owned();
        KeyError::BadAddress {
            name: self.name.clone(),
            value,
        }
    }

    /// The address a proxy wrote in one element of the field, if it is one.
    fn address(&self, element: &[u8]) -> Option<IpAddr> {
        match self.header {
            ForwardingHeader::Forwarded => parse_address(forwarded_for(element)?),
            ForwardingHeader::XForwardedFor | ForwardingHeader::XRealIp => parse_address(element),
        }
    }
}

impl KeyExtractor for ClientIp {
    type Key = IpAddr;

    fn extract(&self, request: &RequestHead<'_>) -> Result<IpAddr, KeyError> {
        // The last address a trusted hop vouched for: the peer, then each trusted address
        // the walk passes.
        let vouched = match peer_ip(request) {
            Some(peer) if !self.peer_trusted && !self.is_trusted(peer) => return Ok(peer),
            Some(peer) => Some(peer),
            None if self.peer_trusted => None,
            None => return Err(KeyError::NoPeerAddress),
        };
        let lines = request.headers().get_all(&self.name).iter();
        let mut lines = lines.map(HeaderValue::as_bytes);
        match self.header {
            // One address, set by the proxy: the last line if it was sent twice.
            ForwardingHeader::XRealIp => self.walk(lines.next_back().map(trim_ows), vouched),
            ForwardingHeader::XForwardedFor | ForwardingHeader::Forwarded => {
                self.walk(elements_from_right(lines), vouched)
            }
        }
    }
}

impl ClientIp {
    /// The first untrusted address of `elements` (right to left); where they end, or one
    /// is not an address, the last address a trusted hop vouched for.
    fn walk<'a>(
        &self,
        elements: impl IntoIterator<Item = &'a [u8]>,
        mut vouched: Option<IpAddr>,
    ) -> Result<IpAddr, KeyError> {
        let mut unread = None;
        for element in elements {
            match self.address(element) {
                Some(ip) if !self.is_trusted(ip) => return Ok(ip),
                Some(ip) => vouched = Some(ip),
                // Whatever is further left was not vouched for by anyone trusted.
                None => {
                    unread = Some(element);
                    break;
                }
            }
        }
        vouched.ok_or_else(|| match unread {
            Some(element) => self.bad(element),
            None => KeyError::MissingHeader {
                name: self.name.clone(),
            },
        })
    }
}

#[cfg(test)]
mod tests;
