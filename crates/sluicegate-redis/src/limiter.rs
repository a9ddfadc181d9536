//! One limit in Redis, a state per key: the distributed twin of the core's keyed limiter.

use std::num::NonZeroU64;

use sluicegate::Decision;
use sluicegate::state_machine::Op;
use sluicegate::store::Now;

use crate::error::RedisLimitError;
use crate::lease::{Lease, LeaseOp};
use crate::limit::{LimitKind, RedisLimit};
use crate::reply::LimitRequest;
use crate::store::RedisStore;

/// One limit, a state per key, in Redis: the distributed twin of
/// [`sluicegate::KeyedLimiter`].
#[derive(Debug, Clone)]
pub struct RedisLimiter {
    store: RedisStore,
    limit: RedisLimit,
    name: String,
}

impl RedisLimiter {
    /// `limit` kept in `store` under `name` (which keeps limits on the same keys apart).
    pub fn new(store: RedisStore, limit: RedisLimit, name: impl Into<String>) -> Self {
        RedisLimiter {
            store,
            limit,
            name: name.into(),
        }
    }

    /// The limit.
    pub fn limit(&self) -> &RedisLimit {
        &self.limit
    }

    /// The limit's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The store.
    pub fn store(&self) -> &RedisStore {
        &self.store
    }

    /// This limiter's part of a multi-limit request for one permit on `key`.
    pub fn request<'a>(&'a self, key: &'a [u8]) -> LimitRequest<'a> {
        self.request_n(key, NonZeroU64::MIN)
    }

    /// This limiter's part of a multi-limit request for `permits` on `key`.
    pub fn request_n<'a>(&'a self, key: &'a [u8], permits: NonZeroU64) -> LimitRequest<'a> {
        LimitRequest {
            limit: &self.limit,
            name: &self.name,
            key,
            permits,
        }
    }

    /// Asks for one permit for `key` on Redis's clock.
    pub async fn check(&self, key: &[u8]) -> Result<Decision, RedisLimitError> {
        self.decide(key, NonZeroU64::MIN, Op::Check, Now::Store)
            .await
    }

    /// Applies `op` for `permits` on `key` at `now`. A concurrency permit taken this way is
    /// held until its lease expires; use [`acquire_lease`](Self::acquire_lease) to get the
    /// lease and release it.
    pub async fn decide(
        &self,
        key: &[u8],
        permits: NonZeroU64,
        op: Op,
        now: Now,
    ) -> Result<Decision, RedisLimitError> {
        let mut multi = self
            .store
            .decide_all(&[self.request_n(key, permits)], op, now)
            .await?;
        multi
            .decisions
            .pop()
            .ok_or_else(|| RedisLimitError::UnexpectedReply("no decision".into()))
    }

    /// Takes `permits` of a concurrency limit for `key` as a lease, if they are free.
    pub async fn acquire_lease(
        &self,
        key: &[u8],
        permits: NonZeroU64,
        now: Now,
    ) -> Result<(Decision, Option<Lease>), RedisLimitError> {
        if !matches!(self.limit.kind, LimitKind::Concurrency { .. }) {
            return Err(RedisLimitError::Unsupported(format!(
                "{} has no leases",
                self.limit.name()
            )));
        }
        let mut multi = self
            .store
            .decide_all(&[self.request_n(key, permits)], Op::Check, now)
            .await?;
        let decision = multi
            .decisions
            .pop()
            .ok_or_else(|| RedisLimitError::UnexpectedReply("no decision".into()))?;
        Ok((decision, multi.leases.pop()))
    }

    /// Gives a lease back. `Ok(false)` if it was no longer held (expired or released).
    pub async fn release(&self, lease: &Lease, now: Now) -> Result<bool, RedisLimitError> {
        self.store
            .lease_op(&self.limit, lease, LeaseOp::Release, now)
            .await
    }

    /// Extends a lease by the limit's lease time from `now`. `Ok(false)` if it was no longer
    /// held.
    pub async fn renew(&self, lease: &Lease, now: Now) -> Result<bool, RedisLimitError> {
        self.store
            .lease_op(&self.limit, lease, LeaseOp::Renew, now)
            .await
    }
}
