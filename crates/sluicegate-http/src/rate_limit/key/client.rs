//! The client's address behind reverse proxies, as the trusted ones report it.

use std::net::{IpAddr, SocketAddr};

use crate::rate_limit::key::RequestHead;
use http::HeaderName;
use http::header::FORWARDED;
use ipnet::IpNet;
use smallvec::SmallVec;

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
/// not a trusted proxy.
///
/// Every proxy appends the address it received the request from, so the right-most entries are
/// written by your proxies and the left-most by whoever sent the request first: a client can
/// put any address there. Walking from the right and stopping at the first address that is
/// not one of your proxies gives the address your outermost proxy saw, which no client can
/// choose. A request from a peer that is not a trusted proxy is keyed by the peer's address and
/// its forwarding header is ignored; if every address is trusted, the left-most is the key.
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

    fn bad(&self, value: &str) -> KeyError {
        let mut end = value.len().min(64);
        while !value.is_char_boundary(end) {
            end -= 1;
        }
        KeyError::BadAddress {
            name: self.name.clone(),
            value: value[..end].to_owned(),
        }
    }

    /// The header's entries, left to right over every line of it.
    fn entries<'a>(&self, request: &RequestHead<'a>) -> Result<SmallVec<[&'a str; 4]>, KeyError> {
        let mut entries = SmallVec::new();
        let lines = request.headers().get_all(&self.name);
        match self.header {
            // One address, set by the proxy: the last line if it was sent twice.
            ForwardingHeader::XRealIp => {
                if let Some(line) = lines.iter().next_back() {
                    entries.push(line.to_str().map_err(|_| self.bad("(not text)"))?.trim());
                }
            }
            ForwardingHeader::XForwardedFor | ForwardingHeader::Forwarded => {
                for line in lines {
                    let line = line.to_str().map_err(|_| self.bad("(not text)"))?;
                    entries.extend(split_outside_quotes(line, b',').map(str::trim));
                }
            }
        }
        Ok(entries)
    }

    fn address(&self, entry: &str) -> Result<IpAddr, KeyError> {
        let written = match self.header {
            ForwardingHeader::Forwarded => forwarded_for(entry).ok_or_else(|| self.bad(entry))?,
            ForwardingHeader::XForwardedFor | ForwardingHeader::XRealIp => entry,
        };
        parse_address(written)
            .map(|ip| ip.to_canonical())
            .ok_or_else(|| self.bad(entry))
    }
}

impl KeyExtractor for ClientIp {
    type Key = IpAddr;

    fn extract(&self, request: &RequestHead<'_>) -> Result<IpAddr, KeyError> {
        let mut leftmost = match peer_ip(request) {
            Some(peer) if !self.peer_trusted && !self.is_trusted(peer) => return Ok(peer),
            Some(peer) => Some(peer),
            None if self.peer_trusted => None,
            None => return Err(KeyError::NoPeerAddress),
        };
        for entry in self.entries(request)?.iter().rev() {
            let ip = self.address(entry)?;
            if !self.is_trusted(ip) {
                return Ok(ip);
            }
            leftmost = Some(ip);
        }
        leftmost.ok_or_else(|| KeyError::MissingHeader {
            name: self.name.clone(),
        })
    }
}

/// `text` split at every `separator` that is not inside a quoted string.
fn split_outside_quotes(text: &str, separator: u8) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let current = rest?;
        let bytes = current.as_bytes();
        let (mut quoted, mut escaped) = (false, false);
        for (i, &b) in bytes.iter().enumerate() {
            match b {
                _ if escaped => escaped = false,
                b'\\' if quoted => escaped = true,
                b'"' => quoted = !quoted,
                _ if b == separator && !quoted => {
                    rest = Some(&current[i + 1..]);
                    return Some(&current[..i]);
                }
                _ => {}
            }
        }
        rest = None;
        Some(current)
    })
    .filter(|part| !part.trim().is_empty())
}

/// The `for=` value of one `Forwarded` element, unquoted.
fn forwarded_for(element: &str) -> Option<&str> {
    split_outside_quotes(element, b';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("for") {
            return None;
        }
        let value = value.trim();
        Some(
            value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(value),
        )
    })
}

/// An address as proxies write it: `192.0.2.1`, `192.0.2.1:80`, `2001:db8::1`, `[2001:db8::1]`
/// or `[2001:db8::1]:80`.
fn parse_address(text: &str) -> Option<IpAddr> {
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .or_else(|| {
            text.strip_prefix('[')
                .and_then(|t| t.strip_suffix(']'))
                .and_then(|t| t.parse().ok())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;
    use http::request::Parts;

    /// `key`'s answer for the request whose head is `parts`.
    trait ExtractParts: KeyExtractor {
        fn extract_parts(&self, parts: &Parts) -> Result<Self::Key, KeyError> {
            self.extract(&RequestHead::from_parts(parts))
        }
    }

    impl<X: KeyExtractor> ExtractParts for X {}

    fn parts(peer: &str, header: Option<(&str, &str)>) -> Parts {
        let mut request = Request::builder();
        if let Some((name, value)) = header {
            request = request.header(name, value);
        }
        let (mut parts, ()) = request.body(()).expect("request").into_parts();
        let peer: SocketAddr = peer.parse().expect("peer");
        parts.extensions.insert(peer);
        parts
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("ip")
    }

    #[test]
    fn untrusted_peer_is_the_client_whatever_it_forwards() {
        let key = ClientIp::x_forwarded_for()
            .trusted_proxies(["10.0.0.0/8"])
            .expect("proxies");
        let request = parts("203.0.113.9:5000", Some(("x-forwarded-for", "1.2.3.4")));
        assert_eq!(key.extract_parts(&request), Ok(ip("203.0.113.9")));
    }

    #[test]
    fn right_most_untrusted_address_wins_over_a_forged_left_most() {
        let key = ClientIp::x_forwarded_for()
            .trusted_proxies(["10.0.0.0/8", "192.168.1.1"])
            .expect("proxies");
        let request = parts(
            "10.1.1.1:80",
            Some(("x-forwarded-for", "6.6.6.6, 198.51.100.7, 192.168.1.1")),
        );
        assert_eq!(key.extract_parts(&request), Ok(ip("198.51.100.7")));
    }

    #[test]
    fn all_trusted_takes_the_left_most_and_no_header_the_peer() {
        let key = ClientIp::x_forwarded_for()
            .trusted_proxies(["10.0.0.0/8"])
            .expect("proxies");
        let request = parts(
            "10.0.0.1:80",
            Some(("x-forwarded-for", "10.0.0.3, 10.0.0.2")),
        );
        assert_eq!(key.extract_parts(&request), Ok(ip("10.0.0.3")));
        assert_eq!(
            key.extract_parts(&parts("10.0.0.1:80", None)),
            Ok(ip("10.0.0.1"))
        );
    }

    #[test]
    fn garbage_where_the_client_is_read_is_a_bad_address() {
        let key = ClientIp::x_forwarded_for()
            .trusted_proxies(["10.0.0.0/8"])
            .expect("proxies");
        let request = parts("10.0.0.1:80", Some(("x-forwarded-for", "1.1.1.1, bogus")));
        assert!(matches!(
            key.extract_parts(&request),
            Err(KeyError::BadAddress { value, .. }) if value == "bogus"
        ));
        // Garbage to the left of the client is never read.
        let request = parts("10.0.0.1:80", Some(("x-forwarded-for", "bogus, 1.1.1.1")));
        assert_eq!(key.extract_parts(&request), Ok(ip("1.1.1.1")));
    }

    #[test]
    fn forwarded_elements_with_ports_quotes_and_ipv6() {
        let key = ClientIp::forwarded()
            .trusted_proxies(["10.0.0.0/8", "2001:db8:cafe::/48"])
            .expect("proxies");
        let header =
            "for=6.6.6.6, For=\"[2001:db8::17]:4711\";proto=https, for=\"[2001:db8:cafe::1]\";by=x";
        let request = parts("10.0.0.1:80", Some(("forwarded", header)));
        assert_eq!(key.extract_parts(&request), Ok(ip("2001:db8::17")));
        let request = parts("10.0.0.1:80", Some(("forwarded", "for=192.0.2.43:8080")));
        assert_eq!(key.extract_parts(&request), Ok(ip("192.0.2.43")));
        let request = parts("10.0.0.1:80", Some(("forwarded", "for=unknown")));
        assert!(key.extract_parts(&request).is_err());
    }

    #[test]
    fn x_real_ip_and_a_trusted_peer_without_address() {
        let key = ClientIp::x_real_ip()
            .trusted_proxies(["127.0.0.1"])
            .expect("proxies");
        let request = parts("127.0.0.1:80", Some(("x-real-ip", "::ffff:192.0.2.5")));
        assert_eq!(key.extract_parts(&request), Ok(ip("192.0.2.5")));

        let (no_peer, ()) = Request::builder()
            .header("x-real-ip", "192.0.2.6")
            .body(())
            .expect("request")
            .into_parts();
        assert_eq!(key.extract_parts(&no_peer), Err(KeyError::NoPeerAddress));
        assert_eq!(
            key.clone().peer_is_trusted().extract_parts(&no_peer),
            Ok(ip("192.0.2.6"))
        );
    }

    #[test]
    fn bad_proxies_are_refused() {
        assert!(
            ClientIp::x_forwarded_for()
                .trusted_proxies(["10.0.0.0/33"])
                .is_err()
        );
        assert!(
            ClientIp::x_forwarded_for()
                .trusted_proxies(["proxy"])
                .is_err()
        );
    }
}
