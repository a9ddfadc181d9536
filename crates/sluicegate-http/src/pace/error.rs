//! What a paced call can fail with.

use std::time::Duration;

use sluicegate::{CheckError, ConfigError};

/// A paced call failed: its own error, or pacing refused to wait for it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PaceError<E> {
    /// The wrapped client failed.
    #[error(transparent)]
    Inner(E),
    /// The limiter would make this call wait longer than the maximum wait; nothing was taken.
    #[error(
        "outbound rate limit for `{host}`: a permit would take longer than the maximum wait \
         ({max_wait:?})"
    )]
    WaitTooLong {
        /// The host the call was for (empty when pacing is not per host).
        host: String,
        /// The maximum wait configured.
        max_wait: Duration,
    },
    /// The server asked (429 or 503 with `Retry-After` or `RateLimit`) not to be called again
    /// for longer than the maximum wait.
    #[error(
        "`{host}` asked to be left alone for {retry_in:?} more, longer than the maximum wait \
         ({max_wait:?})"
    )]
    HeldByServer {
        /// The host that answered.
        host: String,
        /// How long until the server accepts calls again.
        retry_in: Duration,
        /// The maximum wait configured.
        max_wait: Duration,
    },
    /// The limiter cannot grant a permit at all (a concurrency limit, which never frees by
    /// waiting, or more permits than it can ever hold).
    #[error("outbound rate limit: {0}")]
    Limiter(CheckError),
}

/// A pacing layer could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PaceBuildError {
    /// The limit's spec or parameters are wrong.
    #[error("pacing limit `{spec}`: {source}")]
    Limit {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        source: ConfigError,
    },
}
