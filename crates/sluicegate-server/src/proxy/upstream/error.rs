//! What can go wrong while a response comes from the upstream.

use std::time::Duration;

/// Why the upstream's response body did not reach its end.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    /// The connection failed, or the upstream broke HTTP, while the body came.
    #[error("the upstream's response body failed: {0}")]
    Http(#[source] hyper::Error),
    /// No byte of the response body came for this long.
    #[error("the upstream sent nothing of the response body for {0:?}")]
    BodyTimeout(Duration),
}
