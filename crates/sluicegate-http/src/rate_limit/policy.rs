//! How a layer answers: the denial status, which fields, dry run, what a request whose key
//! cannot be read or a backend that cannot decide gets, and a hook to rewrite any rejection.

use std::any::Any;
use std::net::IpAddr;
use std::num::NonZeroU64;
use std::sync::Arc;

use bytes::Bytes;
use http::{Response, StatusCode};

use crate::rate_limit::backend::Verdict;
use crate::rate_limit::error::{BackendError, KeyError};
use crate::rate_limit::headers::HeaderOptions;

/// The answer to a request whose key cannot be read (see
/// [`KeyError`](crate::rate_limit::KeyError)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum MissingKey {
    /// Rejected with the error's own status: 400 when the client did not send what the key
    /// needs (a header), 500 when the server cannot know it (no peer address, no route); the
    /// body names what was missing.
    #[default]
    Reject,
    /// Rejected with this status, the body naming what was missing.
    RejectWith(StatusCode),
    /// Passed on, counted by no limit.
    Allow,
}

/// The answer when the backend cannot decide: the key table is full, or (other backends) the
/// store is unreachable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnBackendError {
    /// Rejected: at the key cap with the denial status (as nginx answers when its zone is
    /// full), otherwise 500 (a request no limit can ever grant) or 503 (a store unreachable);
    /// the body says which.
    #[default]
    Reject,
    /// Passed on, uncounted (fail open).
    Allow,
}

/// Why a request was turned away, as given to the [rejection hook].
///
/// [rejection hook]: crate::rate_limit::RateLimitBuilder::on_rejection
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Rejection {
    /// A limit denied it.
    Limited(Verdict),
    /// Its key could not be read.
    MissingKey(KeyError),
    /// The backend could not decide.
    Backend(BackendError),
}

/// Reads the peer's address from a request body of the type it was made for
/// ([`RateLimitBuilder::peer_from_body`](super::RateLimitBuilder::peer_from_body));
/// `None` for a body of another type.
pub(crate) type PeerOfBody = Arc<dyn Fn(&dyn Any) -> Option<IpAddr> + Send + Sync>;

/// Rewrites a rejection's default answer (status, fields and a text body) into another.
pub type RejectionHook = Arc<dyn Fn(&Rejection, Response<Bytes>) -> Response<Bytes> + Send + Sync>;

/// A layer's answering options.
#[derive(Clone)]
pub(crate) struct Options {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderOptions,
    pub(crate) dry_run: bool,
    pub(crate) missing_key: MissingKey,
    pub(crate) on_backend_error: OnBackendError,
    pub(crate) hook: Option<RejectionHook>,
    pub(crate) permits: NonZeroU64,
    pub(crate) peer_of_body: Option<PeerOfBody>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            status: StatusCode::TOO_MANY_REQUESTS,
            headers: HeaderOptions::default(),
            dry_run: false,
            missing_key: MissingKey::default(),
            on_backend_error: OnBackendError::default(),
            hook: None,
            permits: NonZeroU64::MIN,
            peer_of_body: None,
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .field("dry_run", &self.dry_run)
            .field("missing_key", &self.missing_key)
            .field("on_backend_error", &self.on_backend_error)
            .field("hook", &self.hook.is_some())
            .field("permits", &self.permits)
            .field("peer_of_body", &self.peer_of_body.is_some())
            .finish()
    }
}
