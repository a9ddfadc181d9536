//! The proxy's HTTP client to its upstream, on hyper's client connections (HTTP/1.1, or h2
//! where the upstream speaks it; over TCP or TLS): keep-alive connections pooled per worker
//! thread, each request's waits bounded, WebSocket switches
//! joined into tunnels. What the proxy does to a request on its way (forwarding fields,
//! hop-by-hop fields, body bounds) happens before it reaches this client (`rewrite`,
//! `request_body`).

mod body;
mod client;
mod conn;
mod error;
mod idle;
mod send_wait;
mod transport;
mod tunnel;

pub use body::PooledBody;
pub(crate) use client::{Reach, SendError, UpstreamClient};
pub use error::UpstreamError;
pub(crate) use transport::Tls;
pub use transport::{UnknownUpstreamProtocol, UpstreamProtocol, UpstreamTlsError};
