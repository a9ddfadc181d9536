//! What decides a route's limits for the rate limit layer: each limit keeps its own keys (an
//! nginx zone), and a route's limits are decided together, all or nothing, each on its own
//! key, in the proxy's memory or, with counters in Redis, through
//! [`redis_route`](crate::proxy::redis_route). Not a `Store`: a route counts only the limits
//! whose key could be made, and its verdict then describes those alone, so it implements the
//! layer's internal seam (`sluicegate_http::rate_limit::internal`).

use std::future::{Future, Ready, ready};
use std::num::NonZeroU64;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use sluicegate::AnyAlgorithm;
use sluicegate::limiter::{LimitTarget, decide_together};
use sluicegate::state_machine::Op;
use sluicegate::store::Held;
use smallvec::SmallVec;

use crate::proxy::key::{KeyBytes, RouteKeys};
use crate::proxy::limit_counters::LimitCounters;
use crate::proxy::limiter::Limiter;
use sluicegate_http::rate_limit::internal::{AtOnce, Backend};
use sluicegate_http::rate_limit::{BackendError, LimitInfo, Verdict};

/// What decides the limits of one route.
pub(crate) struct RouteDecider {
    limiters: Arc<[Arc<Limiter>]>,
    infos: Arc<[LimitInfo]>,
    /// Whether any limit is a concurrency limit (its permits held until the response ends).
    concurrency: bool,
    /// Redis, when the counters are shared there.
    redis: Option<Arc<crate::proxy::redis_counters::RedisCounters>>,
}

impl RouteDecider {
    pub(crate) fn new(limiters: Vec<Arc<Limiter>>, limit_counters: &LimitCounters) -> RouteDecider {
        let infos: Arc<[LimitInfo]> = limiters.iter().map(|l| l.info.clone()).collect();
        RouteDecider {
            concurrency: infos.iter().any(LimitInfo::is_concurrency),
            limiters: limiters.into(),
            infos,
            redis: match limit_counters {
                LimitCounters::Memory => None,
                LimitCounters::Redis(redis) => Some(Arc::clone(redis)),
            },
        }
    }

    fn decide_now(&self, keys: &RouteKeys, permits: NonZeroU64) -> Result<Verdict, BackendError> {
        let mut targets: SmallVec<[LimitTarget<'_, KeyBytes, AnyAlgorithm, _>; 4]> =
            SmallVec::new();
        let mut counted: SmallVec<[usize; 4]> = SmallVec::new();
        for (i, (limiter, key)) in self.limiters.iter().zip(&keys.0).enumerate() {
            if let Some(key) = key {
                targets.push(LimitTarget {
                    limiter: &limiter.limiter,
                    key,
                    permits,
                });
                counted.push(i);
            }
        }
        let together = decide_together(&targets, Op::Check)?;
        let verdict = Verdict::new(together.allowed, together.decisions);
        let holds = self.concurrency
            && counted
                .iter()
                .any(|&i| self.limiters[i].info.is_concurrency());
        let verdict = verdict.holding_permits(holds);
        if counted.len() == self.limiters.len() {
            return Ok(verdict);
        }
        // Some key could not be made: the verdict describes only the limits that counted.
        let infos: Arc<[LimitInfo]> = counted.iter().map(|&i| self.infos[i].clone()).collect();
        Ok(verdict.with_limits(infos))
    }
}

/// A route's decision: ready at once in memory, after a round trip with Redis.
pub(crate) enum DecisionFuture {
    Ready(Ready<Result<Verdict, BackendError>>),
    Waiting(Pin<Box<dyn Future<Output = Result<Verdict, BackendError>> + Send>>),
}

impl Future for DecisionFuture {
    type Output = Result<Verdict, BackendError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            DecisionFuture::Ready(ready) => Pin::new(ready).poll(cx),
            DecisionFuture::Waiting(waiting) => waiting.as_mut().poll(cx),
        }
    }
}

impl Backend<RouteKeys> for RouteDecider {
    type Future = DecisionFuture;

    fn decide(&self, keys: &RouteKeys, permits: NonZeroU64, _op: Op) -> DecisionFuture {
        if let Some(redis) = &self.redis {
            let redis = Arc::clone(redis);
            let limiters = Arc::clone(&self.limiters);
            let infos = Arc::clone(&self.infos);
            let keys = keys.clone();
            return DecisionFuture::Waiting(Box::pin(async move {
                crate::proxy::redis_route::decide_route(&redis, &limiters, &infos, &keys, permits)
                    .await
            }));
        }
        DecisionFuture::Ready(ready(self.decide_now(keys, permits)))
    }

    #[inline]
    fn decide_at_once(&self, keys: &RouteKeys, permits: NonZeroU64, _op: Op) -> AtOnce {
        if self.redis.is_some() {
            return AtOnce::Later;
        }
        // One rate limit, its key made: decided without gathering targets.
        if let ([only], [Some(key)]) = (&*self.limiters, keys.0.as_slice())
            && !self.concurrency
        {
            return AtOnce::admitted(only.limiter.admit(key, permits, Op::Check));
        }
        match self.decide_now(keys, permits) {
            Ok(verdict) if verdict.passes_plainly() => AtOnce::Pass,
            decided => AtOnce::Decided(decided),
        }
    }

    fn release(&self, keys: &RouteKeys, permits: NonZeroU64, _held: Vec<Held>) {
        for (limiter, key) in self.limiters.iter().zip(&keys.0) {
            if let (true, Some(key)) = (limiter.info.is_concurrency(), key) {
                // Cannot fail: these permits were taken by an allowed decision.
                let _ = limiter.limiter.decide(key, permits, Op::Release);
            }
        }
    }

    fn limits(&self) -> &Arc<[LimitInfo]> {
        &self.infos
    }
}
