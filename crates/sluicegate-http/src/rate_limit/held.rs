//! Concurrency permits held past the response body, for an exchange that goes on after it: a
//! connection upgraded to a WebSocket lasts until it closes, and so should its place in a
//! `concurrency` limit (nginx's `limit_conn` counts a WebSocket for its whole life).

use std::sync::{Arc, Mutex, PoisonError};

use crate::rate_limit::body::Permit;

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
pub struct HoldPermits(Arc<Mutex<Vec<Permit>>>);

impl HoldPermits {
    /// A holder of no permit yet.
    pub fn new() -> HoldPermits {
        HoldPermits::default()
    }

    /// Keeps `permit` until the last clone is dropped.
    pub(crate) fn hold(&self, permit: Permit) {
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
