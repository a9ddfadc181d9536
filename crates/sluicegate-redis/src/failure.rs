//! What to answer when Redis cannot: allow, deny, or decide in memory by the same rules.

use std::num::NonZeroU64;
use std::time::Duration;

use sluicegate::{Concurrency, ConfigError, Decision, Gcra, KeyedLimiter, Micros, Op, TokenBucket};

use crate::error::RedisLimitError;
use crate::limit::LimitKind;
use crate::limiter::{Now, RedisLimiter};

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

enum LocalLimiter {
    Gcra(KeyedLimiter<Vec<u8>, Gcra>),
    TokenBucket(KeyedLimiter<Vec<u8>, TokenBucket>),
    Concurrency(KeyedLimiter<Vec<u8>, Concurrency>),
}

impl LocalLimiter {
    fn new(kind: &LimitKind) -> Result<Self, ConfigError> {
        Ok(match kind {
            LimitKind::Gcra(b) => LocalLimiter::Gcra(KeyedLimiter::new(Gcra::with_initial(
                b.rate, b.burst, b.initial,
            )?)),
            LimitKind::TokenBucket(b) => LocalLimiter::TokenBucket(KeyedLimiter::new(
                TokenBucket::with_initial(b.rate, b.burst, b.initial)?,
            )),
            LimitKind::Concurrency { limit, .. } => {
                LocalLimiter::Concurrency(KeyedLimiter::new(Concurrency::new(*limit)?))
            }
        })
    }

    fn decide(
        &self,
        key: &[u8],
        now: Option<Micros>,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<Decision, RedisLimitError> {
        let key = key.to_vec();
        macro_rules! run {
            ($limiter:expr) => {
                match now {
                    Some(now) => $limiter.decide_at(&key, now, permits, op),
                    None => $limiter.decide(&key, permits, op),
                }
            };
        }
        let decision = match self {
            LocalLimiter::Gcra(l) => run!(l),
            LocalLimiter::TokenBucket(l) => run!(l),
            LocalLimiter::Concurrency(l) => run!(l),
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
        let limit = self.redis.limit().capacity();
        let decision = match &self.local {
            Some(local) => {
                let at = match now {
                    Now::At(micros) => Some(micros),
                    Now::Server => None,
                };
                local.decide(key, at, permits, op)?
            }
            None if self.policy == FailurePolicy::Open => Decision {
                allowed: true,
                limit,
                remaining: limit - permits.get().min(limit),
                reset_after: Duration::ZERO,
                retry_after: None,
                wait: Duration::ZERO,
            },
            None => Decision {
                allowed: false,
                limit,
                remaining: 0,
                reset_after: Duration::ZERO,
                retry_after: Some(self.redis.store().timeout()),
                wait: Duration::ZERO,
            },
        };
        Ok(Checked {
            decision,
            source: Source::Fallback(error.to_string()),
        })
    }
}
