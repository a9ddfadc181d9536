//! The layer and its builder: one adaptive limiter shared by every clone, and how requests
//! wait, are refused and are counted.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, StatusCode};
use sluicegate::Clock;
use sluicegate::adaptive::{AdaptiveLimiter, AdaptiveMetrics, Controller, Outcome};
use tower_layer::Layer;

use crate::adaptive::classify::Classify;
use crate::adaptive::erased::Limiter;
use crate::adaptive::service::AdaptiveLimit;
use crate::adaptive::shared::{Options, Shared};

/// `Retry-After` on a refusal unless told otherwise.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// A tower layer that holds the requests in flight to an adaptive concurrency limit.
///
/// Each request takes a [`Permit`](sluicegate::adaptive::Permit) of the
/// [`AdaptiveLimiter`] it was built on, or waits for one in the limiter's queue (with
/// [`AdaptiveLimitBuilder::queue_timeout`]), or is refused: `503 Service Unavailable` with
/// `Retry-After` and a text body saying why (a gRPC call gets `UNAVAILABLE`). The permit is held
/// until the response body has been sent to the end, and its latency and outcome then move the
/// limit: see [`crate::adaptive`].
///
/// Every clone shares the one limiter. For a limit per route, give each route its own layer
/// (axum's `route_layer`); for a limit shared by several routes, clone one layer onto each.
#[derive(Clone)]
pub struct AdaptiveLimitLayer {
    shared: Arc<Shared>,
}

impl AdaptiveLimitLayer {
    /// A layer on `limiter` that refuses at once when the limit is reached.
    pub fn new<C: Controller + 'static, K: Clock + 'static>(
        limiter: AdaptiveLimiter<C, K>,
    ) -> Self {
        Self::builder(limiter).build()
    }

    /// A builder for the queue, the refusal and how responses count.
    pub fn builder<C: Controller + 'static, K: Clock + 'static>(
        limiter: AdaptiveLimiter<C, K>,
    ) -> AdaptiveLimitBuilder {
        AdaptiveLimitBuilder {
            limiter: Box::new(limiter),
            options: Options {
                queue_timeout: None,
                retry_after: DEFAULT_RETRY_AFTER,
                timeout_after: None,
                classify: Classify::default(),
            },
        }
    }

    /// The limiter's counters: limit, in flight, queued and rejected.
    pub fn metrics(&self) -> AdaptiveMetrics {
        self.shared.limiter.metrics()
    }

    /// The current limit.
    pub fn limit(&self) -> u32 {
        self.metrics().limit
    }

    /// Requests holding a permit (until their response bodies end).
    pub fn in_flight(&self) -> u32 {
        self.metrics().in_flight
    }

    /// Requests waiting for a place.
    pub fn queued(&self) -> usize {
        self.metrics().queued
    }

    /// Requests refused so far (by this layer, and by anything else using the same limiter).
    pub fn rejected(&self) -> u64 {
        self.metrics().rejected
    }
}

impl fmt::Debug for AdaptiveLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdaptiveLimitLayer")
            .field("metrics", &self.metrics())
            .field("options", &self.shared.options)
            .finish()
    }
}

impl<S> Layer<S> for AdaptiveLimitLayer {
    type Service = AdaptiveLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AdaptiveLimit::new(inner, Arc::clone(&self.shared))
    }
}

/// Builds an [`AdaptiveLimitLayer`].
pub struct AdaptiveLimitBuilder {
    limiter: Box<dyn Limiter>,
    options: Options,
}

impl AdaptiveLimitBuilder {
    /// Lets a request wait up to `timeout` for a place in the limiter's bounded FIFO queue
    /// (its capacity is the limiter's: `AdaptiveLimiter::builder(..).queue_capacity(n)`)
    /// before it is refused. Without it, a request finding the limit reached is refused at
    /// once. The wait is timed on tokio's timer.
    pub fn queue_timeout(mut self, timeout: Duration) -> Self {
        self.options.queue_timeout = Some(timeout);
        self
    }

    /// The delay a refusal's `Retry-After` gives (default 1 s; rounded up to whole seconds,
    /// at least 1).
    pub fn retry_after(mut self, delay: Duration) -> Self {
        self.options.retry_after = delay;
        self
    }

    /// Counts an answer whose body ends more than `limit` after its permit was granted as a
    /// `timeout` rather than `ok` (timed on tokio's clock). The layer does not cut such
    /// requests off: stack a timeout layer for that.
    pub fn timeout_after(mut self, limit: Duration) -> Self {
        self.options.timeout_after = Some(limit);
        self
    }

    /// Replaces [`default_classifier`](crate::adaptive::default_classifier): `classify`
    /// reads each response's status and headers and says how it counts (`None`: no sample).
    /// A gRPC status in the trailers still turns an `ok` into a drop or timeout.
    pub fn classify(
        mut self,
        classify: impl Fn(StatusCode, &HeaderMap) -> Option<Outcome> + Send + Sync + 'static,
    ) -> Self {
        self.options.classify = Classify(Arc::new(classify));
        self
    }

    /// The layer.
    pub fn build(self) -> AdaptiveLimitLayer {
        AdaptiveLimitLayer {
            shared: Arc::new(Shared {
                limiter: self.limiter,
                options: self.options,
            }),
        }
    }
}

impl fmt::Debug for AdaptiveLimitBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdaptiveLimitBuilder")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}
