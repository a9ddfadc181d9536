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
    /// extensions (`sluicegate proxy`).
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

    /// The head of `request` as a layer is called with it: with the peer that
    /// `sluicegate proxy`'s requests carry in their body
    /// ([`ClientBody`](crate::proxy::client_body::ClientBody)), which no other body type does.
    #[inline]
    pub(crate) fn of_served<B: 'static>(request: &'a Request<B>) -> RequestHead<'a> {
        #[cfg(feature = "proxy")]
        let peer = (request.body() as &dyn std::any::Any)
            .downcast_ref::<crate::proxy::client_body::ClientBody>()
            .map(|body| body.client.ip());
        #[cfg(not(feature = "proxy"))]
        let peer = None;
        RequestHead {
            peer,
            ..RequestHead::of(request)
        }
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

    /// The peer the server told beside the extensions ([`RequestHead::of_served`]).
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
