//! The proxy's backend: each limit keeps its own keys (an nginx zone), and a route's limits
//! are decided together, all or nothing, each on its own key.

use std::future::{Ready, ready};
use std::num::NonZeroU64;
use std::sync::Arc;

use sluicegate::{AnyAlgorithm, KeyedLimiter, LimitTarget, Op, decide_together};
use smallvec::SmallVec;

use crate::proxy::key::{KeyBytes, RouteKeys};
use crate::proxy::rules::LimitDef;
use crate::rate_limit::{Backend, BackendError, LimitInfo, Verdict};

/// One limit's keyed state, kept across reloads while its definition stays the same (as
/// nginx keeps a zone whose size and rate are unchanged).
pub(crate) struct Limiter {
    pub(crate) def: LimitDef,
    pub(crate) info: LimitInfo,
    pub(crate) limiter: KeyedLimiter<KeyBytes, AnyAlgorithm>,
}

impl Limiter {
    pub(crate) fn new(def: LimitDef) -> Limiter {
        let info = LimitInfo::of(&def.name, &def.algorithm);
        let limiter = KeyedLimiter::new(def.algorithm.clone()).with_max_keys(def.max_keys);
        Limiter { def, info, limiter }
    }

    /// Whether the state of `self` may serve `def` (same key, algorithm and size).
    pub(crate) fn serves(&self, def: &LimitDef) -> bool {
        self.def == *def
    }
}

/// The limits of one route.
pub(crate) struct RouteBackend {
    limiters: Box<[Arc<Limiter>]>,
    infos: Arc<[LimitInfo]>,
    /// Whether any limit is a concurrency limit (its permits held until the response ends).
    concurrency: bool,
}

impl RouteBackend {
    pub(crate) fn new(limiters: Vec<Arc<Limiter>>) -> RouteBackend {
        let infos: Arc<[LimitInfo]> = limiters.iter().map(|l| l.info.clone()).collect();
        RouteBackend {
            concurrency: infos.iter().any(LimitInfo::is_concurrency),
            limiters: limiters.into(),
            infos,
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

impl Backend<RouteKeys> for RouteBackend {
    type Future = Ready<Result<Verdict, BackendError>>;

    fn decide(&self, keys: &RouteKeys, permits: NonZeroU64, _op: Op) -> Self::Future {
        ready(self.decide_now(keys, permits))
    }

    fn release(&self, keys: &RouteKeys, permits: NonZeroU64) {
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
