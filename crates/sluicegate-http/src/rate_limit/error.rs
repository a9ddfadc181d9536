//! What can go wrong: a request whose key cannot be read, a layer built from bad limits, a
//! backend that cannot decide.

use std::borrow::Cow;

use http::{HeaderName, StatusCode};
use sluicegate::{CheckError, ConfigError};

use crate::rate_limit::key::normal::{HostError, PathError};

/// A request's key could not be extracted. Its message names what was missing; its
/// [`status`](KeyError::status) says whose fault it is: 400 for the client's (a header it did
/// not send), 500 for the server's (a layer placed where the peer address or the route is not
/// known).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// No peer address in the request's extensions.
    #[error(
        "rate limit key: the peer address is unknown (axum: serve with \
         `into_make_service_with_connect_info::<SocketAddr>()`; hyper: insert the connection's \
         `SocketAddr` into each request's extensions)"
    )]
    NoPeerAddress,
    /// A header the key is made of is absent.
    #[error("rate limit key: the request has no `{name}` header")]
    MissingHeader {
        /// The header.
        name: HeaderName,
    },
    /// A forwarding header holds something that is not an address where one was needed.
    #[error("rate limit key: `{name}` holds `{value}`, which is not an IP address")]
    BadAddress {
        /// The header.
        name: HeaderName,
        /// The entry as written (cut to 64 bytes).
        value: String,
    },
    /// The path has no normal form (see [`PathError`]), so it names no resource.
    #[error("rate limit key: the path `{path}`: {reason}")]
    BadPath {
        /// The path as sent (cut to 64 characters).
        path: String,
        /// What is wrong with it.
        reason: PathError,
    },
    /// The request's host is not one (see [`HostError`]).
    #[error("rate limit key: {0}")]
    BadHost(#[from] HostError),
    /// No route template: the layer does not run inside an axum router.
    #[error(
        "rate limit key: no matched route (axum's `MatchedPath`): add the layer with \
         `Router::layer` or `Router::route_layer`, not around the router"
    )]
    NoMatchedPath,
    /// A custom extractor's error.
    #[error("rate limit key: {message}")]
    Custom {
        /// The status to answer with.
        status: StatusCode,
        /// What was missing.
        message: Cow<'static, str>,
    },
}

impl KeyError {
    /// The error of `path`, which has no normal form (the path cut to 64 characters).
    pub(crate) fn bad_path(path: &str, reason: PathError) -> KeyError {
        KeyError::BadPath {
            path: path.chars().take(64).collect(),
            reason,
        }
    }

    /// An error of a custom extractor, answered with `status` and `message`.
    pub fn custom(status: StatusCode, message: impl Into<Cow<'static, str>>) -> KeyError {
        KeyError::Custom {
            status,
            message: message.into(),
        }
    }

    /// The status a rejection answers with by default: 400 when the client did not send what
    /// the key needs, 500 when the server is set up so that the key cannot be known.
    pub fn status(&self) -> StatusCode {
        match self {
            KeyError::MissingHeader { .. }
            | KeyError::BadAddress { .. }
            | KeyError::BadPath { .. }
            | KeyError::BadHost(_) => StatusCode::BAD_REQUEST,
            KeyError::NoPeerAddress | KeyError::NoMatchedPath => StatusCode::INTERNAL_SERVER_ERROR,
            KeyError::Custom { status, .. } => *status,
        }
    }
}

/// A layer could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A limit's spec or parameters are wrong.
    #[error("limit {index} (`{spec}`): {source}")]
    Limit {
        /// The limit's position, from 0.
        index: usize,
        /// The spec as given (or the algorithm's name).
        spec: String,
        /// What is wrong with it.
        source: ConfigError,
    },
    /// No limit was given to the layer (or with its store).
    #[error("a rate limit layer needs at least one limit")]
    NoLimit,
    /// Limits were given to the builder together with a store (or a remote service), which
    /// is given its own.
    #[error(
        "limits are given with the store (or the remote service), not to the layer, when one \
         is supplied"
    )]
    LimitsWithBackend,
    /// A trusted proxy is neither an address nor a CIDR block.
    #[error("trusted proxy `{value}` is neither an IP address nor a CIDR block")]
    BadProxy {
        /// As written.
        value: String,
    },
    /// A key cap of zero would refuse every request.
    #[error("max_keys must be at least 1")]
    ZeroKeyCap,
}

/// A backend could not decide a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The key table is full and no key in it is idle enough to forget: a new key is refused
    /// rather than resetting another client's budget.
    #[error(
        "rate limiter key table is full ({max_keys} keys, none idle): new clients are refused \
         until others go idle"
    )]
    KeyCapacity {
        /// The cap.
        max_keys: usize,
    },
    /// The limiter cannot answer this request (more permits than a limit can ever grant, an
    /// operation an algorithm does not support).
    #[error("rate limiter: {0}")]
    Check(CheckError),
    /// A backend of another kind failed (unreachable, timed out).
    #[error("rate limit backend: {0}")]
    Unavailable(Cow<'static, str>),
}

impl From<CheckError> for BackendError {
    fn from(error: CheckError) -> Self {
        match error {
            CheckError::KeyCapacityReached { max_keys } => BackendError::KeyCapacity { max_keys },
            other => BackendError::Check(other),
        }
    }
}
