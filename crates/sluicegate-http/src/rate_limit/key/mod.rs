//! What a request is counted under: its key.
//!
//! An extractor reads a key from the request's head ([`RequestHead`]): the peer's address
//! ([`PeerIp`]), the client's address as a trusted proxy reports it ([`ClientIp`]), a header
//! ([`Header`]), the host ([`Host`]), the method ([`RequestMethod`]), the path
//! ([`RequestPath`]) or axum's route template ([`Route`]), nothing at all ([`Global`]), a tuple
//! of these (`(PeerIp, Route)` limits each client on each route), or a closure ([`from_fn`]).
//! A key that cannot be read is a [`KeyError`], answered as the layer's
//! [`MissingKey`](crate::rate_limit::MissingKey) option says.
//!
//! Paths and hosts are read in their normal form ([`normal`]), so that spelling a path or a
//! host otherwise does not step around its limit.

mod client;
mod head;
pub mod normal;
mod peer;
mod request;
mod tuple;

use std::hash::Hash;

use crate::rate_limit::error::KeyError;

pub use client::{ClientIp, ForwardingHeader, UnknownForwardingHeader};
pub use head::RequestHead;
pub use peer::PeerIp;
pub use request::{
    FromFn, Global, Header, Host, RequestMethod, RequestPath, Route, RouteKey, from_fn,
};

/// Reads the key a request is counted under.
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key: the limiters keep one state per distinct key.
    type Key: Hash + Eq + Clone + Send + Sync + 'static;

    /// The key of the request whose head is `request`.
    fn extract(&self, request: &RequestHead<'_>) -> Result<Self::Key, KeyError>;
}
