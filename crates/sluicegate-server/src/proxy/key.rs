//! How the proxy makes a request's key for each limit of its route, as Envoy's `rate_limits`
//! actions make descriptor entries: from the client's address, the peer's, a header, the
//! method, the path, the route, the host or a constant, or a tuple of these.

use std::net::IpAddr;
use std::sync::Arc;

use http::HeaderName;
use smallvec::SmallVec;

use sluicegate_http::rate_limit::key::normal::{normal_host, normal_path, request_host};
use sluicegate_http::rate_limit::key::{ClientIp, KeyExtractor, PeerIp, RequestHead};
use sluicegate_http::rate_limit::{KeyError, internal};

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
    /// The path without the query, in its normal form (nginx's `$uri`: see
    /// [`normal_path`](sluicegate_http::rate_limit::key::normal::normal_path)), in lower case when the
    /// rules match paths without case.
    Path,
    /// The matched route's name.
    Route,
    /// The host the request names, in its normal form: lower case, without port or trailing
    /// dot (nginx's `$host`; see [`request_host`](sluicegate_http::rate_limit::key::normal::request_host)).
    Host,
    /// Always this text (`global` is the empty one): one budget.
    Constant(String),
}

/// What a limit does with a request whose key cannot be made: a `header` part whose field was
/// not sent (or sent empty), a `host` part of a request that names none (HTTP/1.0).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnMissingKey {
    /// The limit does not count the request, as nginx does not account a request whose key is
    /// empty.
    #[default]
    Skip,
    /// The request is answered 400, naming what it lacks, before it reaches the upstream.
    Deny,
    /// The missing part is this text instead: every request that lacks it shares one budget
    /// (a budget of its own, apart from a request that sends this text).
    Key(String),
}

/// A limit's key: its parts, and what a request lacking one of them gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LimitKey {
    pub(crate) parts: Vec<KeyPart>,
    pub(crate) on_missing: OnMissingKey,
}

/// A limit's key as bytes: the parts one after the other, each ended by a separator byte a
/// header value cannot hold, so `("a", "bc")` and `("ab", "c")` differ.
pub type KeyBytes = SmallVec<[u8; 24]>;

/// The keys of one request, one per limit of its route; `None` where the key cannot be made
/// and the limit says to skip it ([`OnMissingKey::Skip`]): that limit does not count the
/// request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RouteKeys(pub(crate) SmallVec<[Option<KeyBytes>; 2]>);

/// Makes [`RouteKeys`] for one route.
#[derive(Debug)]
pub(crate) struct RouteExtractor {
    pub(crate) route: Arc<str>,
    pub(crate) client_ip: ClientIp,
    /// Each limit's key.
    pub(crate) keys: Vec<LimitKey>,
    /// Whether `path` parts are in lower case.
    pub(crate) fold_case: bool,
}

const END: u8 = 0x00;
/// Starts the text that stands for a missing part: no field value holds it, so no request can
/// send its way into that budget.
const STANDS_IN: u8 = 0x01;

fn push_ip(out: &mut KeyBytes, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => out.extend_from_slice(&v4.octets()),
        IpAddr::V6(v6) => out.extend_from_slice(&v6.octets()),
    }
}

impl RouteExtractor {
    fn key(&self, key: &LimitKey, request: &RequestHead<'_>) -> Result<Option<KeyBytes>, KeyError> {
        let mut out = KeyBytes::new();
        for part in &key.parts {
            let missing = match part {
                KeyPart::ClientIp => {
                    // The proxy always knows its peer, which `client_ip` falls back on.
                    let client = self.client_ip.extract(request);
                    push_ip(&mut out, client.or_else(|_| PeerIp.extract(request))?);
                    None
                }
                KeyPart::PeerIp => {
                    push_ip(&mut out, PeerIp.extract(request)?);
                    None
                }
                KeyPart::Header(name) => match request.headers().get(name) {
                    // nginx does not account a request whose key is empty.
                    Some(value) if !value.is_empty() => {
                        out.extend_from_slice(value.as_bytes());
                        None
                    }
                    _ => Some(name.clone()),
                },
                KeyPart::Method => {
                    out.extend_from_slice(request.method().as_str().as_bytes());
                    None
                }
                KeyPart::Path => {
                    let path = request.uri().path();
                    let normal = normal_path(path.as_bytes(), self.fold_case)
                        .map_err(|reason| internal::bad_path(path, reason))?;
                    out.extend_from_slice(&normal);
                    None
                }
                KeyPart::Route => {
                    out.extend_from_slice(self.route.as_bytes());
                    None
                }
                KeyPart::Host => match request_host(request)? {
                    Some(host) => {
                        out.extend_from_slice(&normal_host(host)?);
                        None
                    }
                    None => Some(http::header::HOST),
                },
                KeyPart::Constant(text) => {
                    out.extend_from_slice(text.as_bytes());
                    None
                }
            };
            if let Some(name) = missing {
                match &key.on_missing {
                    OnMissingKey::Skip => return Ok(None),
                    OnMissingKey::Deny => return Err(KeyError::MissingHeader { name }),
                    OnMissingKey::Key(text) => {
                        out.push(STANDS_IN);
                        out.extend_from_slice(text.as_bytes());
                    }
                }
            }
            out.push(END);
        }
        Ok(Some(out))
    }
}

impl KeyExtractor for RouteExtractor {
    type Key = RouteKeys;

    fn extract(&self, request: &RequestHead<'_>) -> Result<RouteKeys, KeyError> {
        let keys = self.keys.iter().map(|key| self.key(key, request));
        Ok(RouteKeys(keys.collect::<Result<_, _>>()?))
    }
}
