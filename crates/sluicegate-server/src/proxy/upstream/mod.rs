//! The proxy's HTTP/1.1 client to its upstream, on httparse and tokio: pooled keep-alive
//! connections, each request written and its response read by the client request's own task.

mod body;
mod chunked;
mod conn;
mod error;
mod idle;
mod pool;
mod request;
mod response;
mod send_wait;
mod tunnel;

pub use body::PooledBody;
pub use error::UpstreamError;
pub(crate) use pool::{Pools, SendError, Written};
pub(crate) use request::BodyBounds;
pub(crate) use send_wait::Timeouts;
