//! What an extractor sees of a request: its head, borrowed.

use std::net::IpAddr;

use http::request::Parts;
use http::{Extensions, HeaderMap, Method, Request, Uri, Version};

/// A request's head (method, URI, version, headers, extensions), borrowed from a
/// [`Request`] of any body or from its [`Parts`]: the layer reads keys without taking the
/// request apart.
#[derive(Debug, Clone, Copy)]
pub struct RequestHead<'a> {
    method: &'a Method,
    uri: &'a Uri,
    version: Version,
    headers: &'a HeaderMap,
    extensions: &'a Extensions,
    /// The peer, when the server that made the request told it otherwise than in the
    /// extensions ([`RequestHead::with_peer`]).
    peer: Option<IpAddr>,
}

impl<'a> RequestHead<'a> {
    /// The head of `request`.
    pub fn of<B>(request: &'a Request<B>) -> RequestHead<'a> {
        RequestHead {
            method: request.method(),
            uri: request.uri(),
            version: request.version(),
            headers: request.headers(),
            extensions: request.extensions(),
            peer: None,
        }
    }

    /// This head with `peer` as the peer's address, for a server that knows it otherwise
    /// than in the request's extensions (see
    /// [`RateLimitBuilder::peer_from_body`](crate::rate_limit::RateLimitBuilder::peer_from_body));
    /// `None` leaves the extensions to tell it.
    #[inline]
    pub fn with_peer(self, peer: Option<IpAddr>) -> RequestHead<'a> {
        RequestHead { peer, ..self }
    }

    /// The head held by `parts`.
    pub fn from_parts(parts: &'a Parts) -> RequestHead<'a> {
        RequestHead {
            method: &parts.method,
            uri: &parts.uri,
            version: parts.version,
            headers: &parts.headers,
            extensions: &parts.extensions,
            peer: None,
        }
    }

    /// The method.
    pub fn method(&self) -> &'a Method {
        self.method
    }

    /// The URI.
    pub fn uri(&self) -> &'a Uri {
        self.uri
    }

    /// The HTTP version.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The headers.
    pub fn headers(&self) -> &'a HeaderMap {
        self.headers
    }

    /// The extensions (the peer address, axum's matched route).
    pub fn extensions(&self) -> &'a Extensions {
        self.extensions
    }

    /// The peer the server told beside the extensions ([`RequestHead::with_peer`]).
    pub(crate) fn served_peer(&self) -> Option<IpAddr> {
        self.peer
    }
}

impl<'a, B> From<&'a Request<B>> for RequestHead<'a> {
    fn from(request: &'a Request<B>) -> Self {
        RequestHead::of(request)
    }
}

impl<'a> From<&'a Parts> for RequestHead<'a> {
    fn from(parts: &'a Parts) -> Self {
        RequestHead::from_parts(parts)
    }
}
