//! The concurrency permits a request holds (nginx `limit_conn`): in its response body until the
//! body ends ([`ConcurrencyPermits`] in a [`RateLimitBody`]), or past it, for an exchange that
//! goes on after it ([`HoldPermits`]): a connection upgraded to a WebSocket lasts until it
//! closes, and so should its place in a `concurrency` limit (nginx's `limit_conn` counts a
//! WebSocket for its whole life).

use std::sync::{Arc, Mutex, PoisonError};

use crate::permit_body::{BodyEnd, PermitBody};

/// The body of a response through the [rate limit layer](crate::rate_limit::RateLimitLayer):
/// the inner service's, holding the request's concurrency permits until it ends, fails or is
/// dropped (see [`permit_body`](crate::permit_body) for when a body ends), or a rejection's
/// short text.
pub type RateLimitBody<B> = PermitBody<B, ConcurrencyPermits>;

/// The concurrency permits a request holds, given back when dropped: by its response body
/// when the body ends, fails or is dropped, all three alike, or by a [`HoldPermits`].
pub struct ConcurrencyPermits(#[allow(dead_code)] Box<dyn Send + Sync>);

impl ConcurrencyPermits {
    /// Permits given back by `guard`'s destructor.
    pub(crate) fn new(guard: impl Send + Sync + 'static) -> ConcurrencyPermits {
        ConcurrencyPermits(Box::new(guard))
    }
}

impl std::fmt::Debug for ConcurrencyPermits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConcurrencyPermits")
    }
}

impl BodyEnd for ConcurrencyPermits {
    /// Given back (dropped here): the request no longer holds its place.
    fn ended(self) {}
}

/// A response extension saying that the exchange goes on after the response body (a `101`
/// whose connection becomes a WebSocket or a tunnel): the layer gives the request's
/// concurrency permits to it instead of to the body, and they are given back once the last
/// clone is dropped. A service that upgrades a connection inserts one into its `101` response
/// and keeps a clone for as long as the upgraded connection lasts.
///
/// ```
/// use sluicegate_http::rate_limit::HoldPermits;
///
/// let held = HoldPermits::new();
/// let mut switching = http::Response::new(());
/// *switching.status_mut() = http::StatusCode::SWITCHING_PROTOCOLS;
/// switching.extensions_mut().insert(held.clone());
/// // ... the upgraded connection runs, `held` with it; its permits go when `held` is dropped.
/// drop(held);
/// ```
#[derive(Clone, Default)]
pub struct HoldPermits(Arc<Mutex<Vec<ConcurrencyPermits>>>);

impl HoldPermits {
    /// A holder of no permit yet.
    pub fn new() -> HoldPermits {
        HoldPermits::default()
    }

    /// Keeps `permit` until the last clone is dropped.
    pub(crate) fn hold(&self, permit: ConcurrencyPermits) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(permit);
    }
}

impl std::fmt::Debug for HoldPermits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HoldPermits")
    }
}
