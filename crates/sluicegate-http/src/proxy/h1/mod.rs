//! The proxy's HTTP/1.1 server, on httparse and tokio: each client connection's requests read,
//! handed to the proxy on the connection's own task, and answered, with the framing checks of
//! RFC 9112 section 6.3 that keep a request from being read two ways.

mod conn;
mod io;
mod request;
mod response;

pub(crate) use conn::serve;
pub use io::H1Body;
