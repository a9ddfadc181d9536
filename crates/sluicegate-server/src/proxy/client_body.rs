//! A request's body as the proxy passes it through a route's layers, with the connection's
//! client beside it.

use hyper::body::Incoming;

use crate::proxy::rewrite::ForwardedClient;

/// hyper's body of a request, and the client of the connection it came on.
///
/// The client rides with the body rather than in the request's extensions: those are a map
/// allocated on first insert and freed with the request, and the proxy's requests otherwise
/// carry nothing there. The limits read the client from here too
/// ([`peer_from_body`](sluicegate_http::rate_limit::RateLimitBuilder::peer_from_body)).
#[derive(Debug)]
pub(crate) struct ClientBody {
    /// The body as hyper reads it from the client.
    pub(crate) body: Incoming,
    /// Who sent it: the peer, as the forwarding fields name it.
    pub(crate) client: ForwardedClient,
}
