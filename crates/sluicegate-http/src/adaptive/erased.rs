//! The core's limiter behind one type, whatever its controller and clock, so that a layer's
//! type does not name them (a proxy holds layers of several controllers in one table).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use sluicegate::Clock;
use sluicegate::adaptive::{AcquireError, AdaptiveLimiter, AdaptiveMetrics, Controller, Permit};

/// A boxed wait for a permit.
pub(crate) type Acquiring = Pin<Box<dyn Future<Output = Result<Permit, AcquireError>> + Send>>;

/// What the layer asks of an [`AdaptiveLimiter`].
pub(crate) trait Limiter: Send + Sync {
    /// A permit if one is free now.
    fn try_acquire(&self) -> Option<Permit>;
    /// A permit, waiting up to `timeout` in the limiter's queue.
    fn acquire(&self, timeout: Duration) -> Acquiring;
    /// The limiter's counters.
    fn metrics(&self) -> AdaptiveMetrics;
}

impl<C: Controller + 'static, K: Clock + 'static> Limiter for AdaptiveLimiter<C, K> {
    fn try_acquire(&self) -> Option<Permit> {
        AdaptiveLimiter::try_acquire(self)
    }

    fn acquire(&self, timeout: Duration) -> Acquiring {
        // A handle of its own: the wait outlives the call that started it.
        let limiter = self.clone();
        Box::pin(async move { limiter.acquire(timeout).await })
    }

    fn metrics(&self) -> AdaptiveMetrics {
        AdaptiveLimiter::metrics(self)
    }
}
