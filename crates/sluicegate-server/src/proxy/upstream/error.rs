//! What can go wrong between the proxy and its upstream.

use std::io;

/// Why a request to the upstream, or the reading of its response, failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    /// Reading from or writing to the connection failed.
    #[error("the connection to the upstream failed: {0}")]
    Io(#[from] io::Error),
    /// The upstream closed the connection before the response was complete.
    #[error("the upstream closed the connection before the response was complete")]
    Closed,
    /// No byte of the response body came for this long.
    #[error("the upstream sent nothing of the response body for {0:?}")]
    BodyTimeout(std::time::Duration),
    /// The response's head is longer than the proxy reads.
    #[error("the response head is longer than {0} bytes")]
    HeadTooLarge(usize),
    /// The response breaks HTTP/1.1 (what is wrong, in words).
    #[error("invalid response: {0}")]
    InvalidResponse(&'static str),
    /// The upstream answered 101 to a request that asked for no protocol switch.
    #[error("the upstream switched protocols, which the proxy does not pass on")]
    SwitchingProtocols,
    /// The client's request body failed while it was being passed on.
    #[error("the client's request body failed: {0}")]
    RequestBody(#[source] hyper::Error),
    /// The client's request body, sent without a length, grew past the proxy's bound on
    /// request bodies (in bytes).
    #[error("the request body is longer than the {0} bytes the proxy takes")]
    RequestBodyTooLarge(u64),
}

impl UpstreamError {
    /// Whether the connection failed before any of a response arrived, as a keep-alive
    /// connection the upstream closed while idle does.
    pub(crate) fn is_closed_before_response(&self) -> bool {
        match self {
            UpstreamError::Closed => true,
            UpstreamError::Io(error) => matches!(
                error.kind(),
                io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::BrokenPipe
            ),
            _ => false,
        }
    }
}
