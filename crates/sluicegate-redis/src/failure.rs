//! What to answer when Redis cannot: allow, deny, or decide in memory by the same rules.

use std::num::NonZeroU64;
use std::time::Duration;

use sluicegate::{
    Clock, Concurrency, ConfigError, Decision, FixedWindow, Gcra, KeyedLimiter, LeakyBucket,
    LeakyQueue, ManualClock, Micros, Op, SlidingLog, SlidingWindow, SystemClock, TokenBucket,
    micros_ceil,
};

use crate::error::RedisLimitError;
use crate::limit::LimitKind;
use crate::limiter::{LimitRequest, MultiDecision, Now, RedisLimiter};

/// The answer given when Redis is down, slow, or refusing work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Allow every request (availability over enforcement).
    Open,
    /// Deny every request, with `retry_after` set to the store's timeout.
    Closed,
    /// Decide in memory, in this process, with the same algorithm and parameters.
    Local,
}

/// Where a [`Checked`] decision came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Redis decided.
    Redis,
    /// Redis failed with this error and the policy answered instead.
    Fallback(String),
}

/// A decision and who made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The decision.
    pub decision: Decision,
    /// Redis, or the failure policy.
    pub source: Source,
}

/// Created at time 0, as Redis treats a missing key, and always told the time explicitly.
type Local<A> = KeyedLimiter<Vec<u8>, A, ManualClock>;

enum LocalLimiter {
    Gcra(Local<Gcra>),
    TokenBucket(Local<TokenBucket>),
    Concurrency(Local<Concurrency>),
    LeakyBucket(Local<LeakyBucket>),
    LeakyQueue(Local<LeakyQueue>),
    FixedWindow(Local<FixedWindow>),
    SlidingLog(Local<SlidingLog>),
    SlidingWindow(Local<SlidingWindow>),
}

impl LocalLimiter {
    fn new(kind: &LimitKind) -> Result<Self, ConfigError> {
        fn local<A: sluicegate::Algorithm>(algorithm: A) -> Local<A> {
            KeyedLimiter::with_clock(algorithm, ManualClock::new(0))
        }
        Ok(match kind {
            LimitKind::Gcra(b) => {
                LocalLimiter::Gcra(local(Gcra::with_initial(b.rate, b.burst, b.initial)?))
            }
            LimitKind::TokenBucket(b) => LocalLimiter::TokenBucket(local(
                TokenBucket::with_initial(b.rate, b.burst, b.initial)?,
            )),
            LimitKind::Concurrency { limit, .. } => {
                LocalLimiter::Concurrency(local(Concurrency::new(*limit)?))
            }
            LimitKind::LeakyBucket(b) => {
                LocalLimiter::LeakyBucket(local(LeakyBucket::new(b.rate, b.burst)?))
            }
            LimitKind::LeakyQueue {
                delay,
                burst,
                bucket,
                ..
            } => LocalLimiter::LeakyQueue(local(LeakyQueue::new(bucket.rate, *burst, *delay)?)),
            LimitKind::FixedWindow { limit, window } => LocalLimiter::FixedWindow(local(
                FixedWindow::new(*limit, Duration::from_micros(*window))?,
            )),
            LimitKind::SlidingLog { limit, window } => LocalLimiter::SlidingLog(local(
                SlidingLog::new(*limit, Duration::from_micros(*window))?,
            )),
            LimitKind::SlidingWindow {
                limit,
                window,
                buckets,
            } => {
                let buckets = match *buckets {
                    0 => None,
                    k => Some(u32::try_from(k).unwrap_or(u32::MAX)),
                };
                LocalLimiter::SlidingWindow(local(SlidingWindow::new(
                    *limit,
                    Duration::from_micros(*window),
                    buckets,
                )?))
            }
        })
    }

    fn decide(
        &self,
        key: &[u8],
        now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<Decision, RedisLimitError> {
        let key = key.to_vec();
        let decision = match self {
            LocalLimiter::Gcra(l) => l.decide_at(&key, now, permits, op),
            LocalLimiter::TokenBucket(l) => l.decide_at(&key, now, permits, op),
            LocalLimiter::Concurrency(l) => l.decide_at(&key, now, permits, op),
            LocalLimiter::LeakyBucket(l) => l.decide_at(&key, now, permits, op),
            LocalLimiter::LeakyQueue(l) => l.decide_at(&key, now, permits, op),
            LocalLimiter::FixedWindow(l) => l.decide_at(&key, now, permits, op),
            LocalLimiter::SlidingLog(l) => l.decide_at(&key, now, permits, op),
            LocalLimiter::SlidingWindow(l) => l.decide_at(&key, now, permits, op),
        };
        Ok(decision?)
    }
}

/// A [`RedisLimiter`] that still answers, within its timeout, when Redis does not.
///
/// Errors that are not about the backend (too many permits, corrupt state) are returned as
/// errors whatever the policy: falling back would hide them.
pub struct FailSafeLimiter {
    redis: RedisLimiter,
    policy: FailurePolicy,
    local: Option<LocalLimiter>,
    /// Stands in for Redis's clock while Redis is away.
    clock: SystemClock,
}

impl std::fmt::Debug for FailSafeLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailSafeLimiter")
            .field("redis", &self.redis)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl FailSafeLimiter {
    /// `redis` with `policy` applied on backend failures.
    pub fn new(redis: RedisLimiter, policy: FailurePolicy) -> Result<Self, ConfigError> {
        let local = match policy {
            FailurePolicy::Local => Some(LocalLimiter::new(&redis.limit().kind)?),
            _ => None,
        };
        Ok(FailSafeLimiter {
            redis,
            policy,
            local,
            clock: SystemClock::new(),
        })
    }

    /// The Redis limiter underneath.
    pub fn redis(&self) -> &RedisLimiter {
        &self.redis
    }

    /// Applies `op` for `permits` on `key`, by Redis or, if Redis fails, by the policy.
    pub async fn decide(
        &self,
        key: &[u8],
        permits: NonZeroU64,
        op: Op,
        now: Now,
    ) -> Result<Checked, RedisLimitError> {
        let error = match self.redis.decide(key, permits, op, now).await {
            Ok(decision) => {
                return Ok(Checked {
                    decision,
                    source: Source::Redis,
                });
            }
            Err(error) if error.is_backend_failure() => error,
            Err(error) => return Err(error),
        };
        Ok(Checked {
            decision: self.fallback(key, permits, op, now)?,
            source: Source::Fallback(error.to_string()),
        })
    }

    /// The policy's answer for this limit.
    fn fallback(
        &self,
        key: &[u8],
        permits: NonZeroU64,
        op: Op,
        now: Now,
    ) -> Result<Decision, RedisLimitError> {
        let limit = self.redis.limit().capacity();
        Ok(match &self.local {
            Some(local) => {
                let at = match now {
                    Now::At(micros) => micros,
                    Now::Server => self.clock.now(),
                };
                local.decide(key, at, permits, op)?
            }
            None if self.policy == FailurePolicy::Open => {
                Decision::allow(limit, limit - permits.get().min(limit), 0)
            }
            None => Decision::deny(limit, 0, 0, Some(micros_ceil(self.redis.store().timeout()))),
        })
    }
}

/// One limit of a fail-safe multi-limit request.
#[derive(Debug, Clone, Copy)]
pub struct FailSafeRequest<'a> {
    /// The limiter, with its policy.
    pub limiter: &'a FailSafeLimiter,
    /// Whose budget is charged.
    pub key: &'a [u8],
    /// Permits asked of this limit.
    pub permits: NonZeroU64,
}

/// Several limits on one request, in one Redis call ([`RedisStore::decide_all`]); if Redis
/// fails, each limit answers by its own policy, and the request passes only if all of them
/// allow it. `Local` limits are then peeked first and charged only if all allow, which is
/// all or nothing except against other requests racing in this process while Redis is away.
///
/// [`RedisStore::decide_all`]: crate::RedisStore::decide_all
pub async fn decide_all_fail_safe(
    requests: &[FailSafeRequest<'_>],
    op: Op,
    now: Now,
) -> Result<(MultiDecision, Source), RedisLimitError> {
    let Some(first) = requests.first() else {
        return Err(RedisLimitError::Unsupported("no limits given".into()));
    };
    let redis_requests: Vec<LimitRequest<'_>> = requests
        .iter()
        .map(|r| r.limiter.redis.request_n(r.key, r.permits))
        .collect();
    let store = first.limiter.redis.store();
    let error = match store.decide_all(&redis_requests, op, now).await {
        Ok(multi) => return Ok((multi, Source::Redis)),
        Err(error) if error.is_backend_failure() => error,
        Err(error) => return Err(error),
    };
    let probe = if op.consumes() { Op::Peek } else { op };
    let mut decisions = Vec::with_capacity(requests.len());
    for r in requests {
        decisions.push(r.limiter.fallback(r.key, r.permits, probe, now)?);
    }
    let allowed = decisions.iter().all(|d| d.allowed());
    if allowed && op.consumes() {
        for (r, decision) in requests.iter().zip(decisions.iter_mut()) {
            *decision = r.limiter.fallback(r.key, r.permits, op, now)?;
        }
    }
    let at = match now {
        Now::At(micros) => micros,
        Now::Server => first.limiter.clock.now(),
    };
    let multi = MultiDecision {
        allowed: allowed && decisions.iter().all(|d| d.allowed()),
        decisions,
        leases: Vec::new(),
        now: at,
    };
    Ok((multi, Source::Fallback(error.to_string())))
}
