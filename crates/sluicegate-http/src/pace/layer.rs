//! The pacing layer and its builder.

use std::sync::Arc;
use std::time::Duration;

use sluicegate::{AnyAlgorithm, Clock, KeyedLimiter, SystemClock};
use tower_layer::Layer;

use crate::pace::error::PaceBuildError;
use crate::pace::hold::Holds;
use crate::pace::pacer::Pacer;
use crate::pace::service::Pace;
use crate::rate_limit::IntoLimit;

/// A tower layer pacing outbound calls (see [the module](crate::pace)). Its clones share one
/// budget.
pub struct PaceLayer<C: Clock = SystemClock> {
    pacer: Arc<Pacer<C>>,
}

impl<C: Clock> Clone for PaceLayer<C> {
    fn clone(&self) -> Self {
        PaceLayer {
            pacer: Arc::clone(&self.pacer),
        }
    }
}

impl<C: Clock> std::fmt::Debug for PaceLayer<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PaceLayer")
            .field("per_host", &self.pacer.per_host)
            .field("max_wait", &self.pacer.max_wait)
            .finish_non_exhaustive()
    }
}

impl PaceLayer {
    /// A builder pacing calls by `limit` (a spec such as `gcra:rate=5/s,burst=5`, or an
    /// algorithm of the core), one budget over every host unless
    /// [`per_host`](PaceBuilder::per_host).
    pub fn builder(limit: impl IntoLimit) -> PaceBuilder {
        PaceBuilder {
            limit: limit.into_limit(),
            clock: SystemClock::new(),
            per_host: false,
            max_wait: None,
        }
    }
}

impl<S, C: Clock> Layer<S> for PaceLayer<C> {
    type Service = Pace<S, C>;

    fn layer(&self, inner: S) -> Pace<S, C> {
        Pace::new(inner, Arc::clone(&self.pacer))
    }
}

/// Builds a [`PaceLayer`].
#[must_use]
pub struct PaceBuilder<C = SystemClock> {
    limit: Result<AnyAlgorithm, (String, sluicegate::ConfigError)>,
    clock: C,
    per_host: bool,
    max_wait: Option<Duration>,
}

impl<C: Clock + 'static> PaceBuilder<C> {
    /// One budget per host (`host:port` of the request's URI, else its `Host` header), rather
    /// than one for every call.
    pub fn per_host(mut self) -> Self {
        self.per_host = true;
        self
    }

    /// Fails a call at once ([`PaceError::WaitTooLong`], [`PaceError::HeldByServer`]) rather
    /// than wait longer than `max_wait` for its permit; unbounded unless set.
    ///
    /// [`PaceError::WaitTooLong`]: crate::pace::PaceError::WaitTooLong
    /// [`PaceError::HeldByServer`]: crate::pace::PaceError::HeldByServer
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }

    /// Reads time from `clock` (a [`ManualClock`](sluicegate::ManualClock) in tests).
    pub fn clock<C2: Clock + 'static>(self, clock: C2) -> PaceBuilder<C2> {
        PaceBuilder {
            limit: self.limit,
            clock,
            per_host: self.per_host,
            max_wait: self.max_wait,
        }
    }

    /// The layer, or what is wrong with the limit.
    pub fn build(self) -> Result<PaceLayer<C>, PaceBuildError> {
        let algorithm = self
            .limit
            .map_err(|(spec, source)| PaceBuildError::Limit { spec, source })?;
        Ok(PaceLayer {
            pacer: Arc::new(Pacer {
                limiter: KeyedLimiter::with_clock(algorithm, self.clock),
                per_host: self.per_host,
                max_wait: self.max_wait,
                holds: Holds::default(),
            }),
        })
    }
}
