//! The in-process backend: one keyed limiter per limit, decided together by the core.

use std::future::{Ready, ready};
use std::hash::Hash;
use std::num::NonZeroU64;
use std::sync::Arc;

use sluicegate::limiter::{KeyBudget, LimitTarget, decide_together};
use sluicegate::state_machine::Op;
use sluicegate::store::Held;
use sluicegate::{AnyAlgorithm, Clock, KeyedLimiter, SystemClock};
use smallvec::SmallVec;

use crate::rate_limit::backend::{AtOnce, Backend, Verdict};
use crate::rate_limit::error::BackendError;
use crate::ratelimit_fields::LimitInfo;

/// What a layer built with [`RateLimitBuilder::build`](super::RateLimitBuilder::build)
/// decides with: its limits kept in this process, a [`KeyedLimiter`] per limit, decided together
/// with the core's [`decide_together`] (all or nothing). One limit that holds no permit is decided
/// by [`KeyedLimiter::admit`], which builds no decision for a request that passes.
///
/// Memory is bounded without a cleanup call or a background task: each limiter drops keys
/// whose state is back to fresh before its table grows, and a [`KeyBudget`] caps the states
/// held by all the limits together. At the cap a new key is refused
/// ([`BackendError::KeyCapacity`]) rather than evicting, and so resetting, a client that is
/// still limited.
pub struct MemoryBackend<K, C: Clock = SystemClock> {
    limiters: Box<[KeyedLimiter<K, AnyAlgorithm, C>]>,
    limits: Arc<[LimitInfo]>,
    /// The indices of the concurrency limits, whose permits are held until the response ends.
    concurrency: Box<[usize]>,
    budget: Option<Arc<KeyBudget>>,
}

impl<K, C> MemoryBackend<K, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock + Clone + 'static,
{
    /// Named limits on `clock`, holding at most `max_states` limiter states in all (a key
    /// takes one in each limit it is counted in), or unbounded with `None`.
    pub(crate) fn new<I, N>(limits: I, clock: C, max_states: Option<usize>) -> Self
    where
        I: IntoIterator<Item = (N, AnyAlgorithm)>,
        N: AsRef<str>,
    {
        let budget = max_states.map(|n| Arc::new(KeyBudget::new(n)));
        let mut limiters = Vec::new();
        let mut infos = Vec::new();
        for (name, algorithm) in limits {
            infos.push(LimitInfo::of(name.as_ref(), &algorithm));
            let limiter = KeyedLimiter::with_clock(algorithm, clock.clone());
            limiters.push(match &budget {
                Some(budget) => limiter.with_key_budget(Arc::clone(budget)),
                None => limiter,
            });
        }
        let concurrency = infos
            .iter()
            .enumerate()
            .filter(|(_, info)| info.is_concurrency())
            .map(|(i, _)| i)
            .collect();
        MemoryBackend {
            limiters: limiters.into(),
            limits: infos.into(),
            concurrency,
            budget,
        }
    }

    /// The limiters, in the order of the limits.
    pub fn limiters(&self) -> &[KeyedLimiter<K, AnyAlgorithm, C>] {
        &self.limiters
    }

    /// Limiter states held now, over every limit.
    pub fn states_held(&self) -> usize {
        match &self.budget {
            Some(budget) => budget.live(),
            None => self.limiters.iter().map(KeyedLimiter::len).sum(),
        }
    }

    /// Decides at once (what [`Backend::decide`] returns, ready).
    #[inline]
    pub(crate) fn decide_now(
        &self,
        key: &K,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<Verdict, BackendError> {
        let holds = !self.concurrency.is_empty() && op.consumes() && op != Op::Release;
        if let [only] = &*self.limiters {
            return match only.decide(key, permits, op) {
                Ok(decision) => Ok(Verdict::single(decision).holding_permits(holds)),
                Err(error) => Err(error.into()),
            };
        }
        let targets: SmallVec<[LimitTarget<'_, K, AnyAlgorithm, C>; 4]> = self
            .limiters
            .iter()
            .map(|limiter| LimitTarget {
                limiter,
                key,
                permits,
            })
            .collect();
        let together = decide_together(&targets, op)?;
        Ok(Verdict::new(together.allowed, together.decisions).holding_permits(holds))
    }
}

impl<K, C> Backend<K> for MemoryBackend<K, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock + Clone + 'static,
{
    type Future = Ready<Result<Verdict, BackendError>>;

    #[inline]
    fn decide(&self, key: &K, permits: NonZeroU64, op: Op) -> Self::Future {
        ready(self.decide_now(key, permits, op))
    }

    #[inline]
    fn decide_at_once(&self, key: &K, permits: NonZeroU64, op: Op) -> AtOnce {
        if let ([only], []) = (&*self.limiters, &*self.concurrency) {
            return AtOnce::admitted(only.admit(key, permits, op));
        }
        match self.decide_now(key, permits, op) {
            Ok(verdict) if verdict.passes_plainly() => AtOnce::Pass,
            decided => AtOnce::Decided(decided),
        }
    }

    fn release(&self, key: &K, permits: NonZeroU64, _held: Vec<Held>) {
        for &i in &self.concurrency {
            // Cannot fail: these permits were taken by an allowed decision and not yet given back.
            let _ = self.limiters[i].decide(key, permits, Op::Release);
        }
    }

    fn limits(&self) -> &Arc<[LimitInfo]> {
        &self.limits
    }
}

impl<K, C: Clock> std::fmt::Debug for MemoryBackend<K, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("limits", &self.limits)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}
