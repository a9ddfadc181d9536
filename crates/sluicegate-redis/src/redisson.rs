//! Redisson-style rate limiter objects (`RRateLimiter`): a rate stored in Redis next to the
//! state, shared by every client (`Overall`) or counted per client (`PerClient`).
//!
//! Unlike Redisson, the limit is a hard cap: no interval of the configured length ever holds
//! more than `rate` permits (Redisson issue 3639), and [`available_permits`] counts permits
//! back the moment they leave the interval (Redisson issue 5751), since both are computed from
//! an exact sliding log at the time asked.
//!
//! [`available_permits`]: RateLimiterObject::available_permits

use std::num::NonZeroU64;
use std::time::Duration;

use redis::Value;
use sluicegate::store::Now;
use sluicegate::{ConfigError, Decision};

use crate::error::RedisLimitError;
use crate::lease::new_lease_id;
use crate::limit::RedisLimit;
use crate::reply::{now_arg, parse_reply, text};
use crate::scripts::Entry;
use crate::store::RedisStore;

/// Who shares a Redisson-style limiter's permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateType {
    /// Every client shares one budget (Redisson `OVERALL`).
    Overall,
    /// Each client has its own budget (Redisson `PER_CLIENT`).
    PerClient,
}

impl RateType {
    fn stored(self) -> &'static str {
        match self {
            RateType::Overall => "overall",
            RateType::PerClient => "per_client",
        }
    }
}

/// A limiter's stored configuration (Redisson `getConfig`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateConfig {
    /// Who shares the permits.
    pub rate_type: RateType,
    /// Permits per interval.
    pub rate: u64,
    /// The interval.
    pub interval: Duration,
}

/// A named rate limiter whose configuration lives in Redis, like Redisson's `RRateLimiter`.
#[derive(Debug, Clone)]
pub struct RateLimiterObject {
    store: RedisStore,
    name: String,
    client_id: String,
}

impl RateLimiterObject {
    /// The limiter `name`, as seen by a new client (its `PerClient` budget is its own).
    pub fn new(store: RedisStore, name: impl Into<String>) -> Self {
        Self::with_client_id(store, name, new_lease_id())
    }

    /// The limiter `name` as seen by client `client_id` (stable across restarts if the caller
    /// keeps it).
    pub fn with_client_id(
        store: RedisStore,
        name: impl Into<String>,
        client_id: impl Into<String>,
    ) -> Self {
        RateLimiterObject {
            store,
            name: name.into(),
            client_id: client_id.into(),
        }
    }

    fn keys(&self) -> Vec<Vec<u8>> {
        let tag = self.name.as_bytes();
        vec![
            self.store.keys.key(tag, b"rrl", ":config"),
            self.store.keys.key(tag, b"rrl", ":state"),
        ]
    }

    async fn write_config(
        &self,
        op: &str,
        rate_type: RateType,
        rate: u64,
        interval: Duration,
    ) -> Result<bool, RedisLimitError> {
        // The same bounds as a sliding log in Redis.
        RedisLimit::sliding_log(rate, interval)?;
        let interval_us = sluicegate::clock::micros_ceil(interval);
        let args = vec![
            op.into(),
            rate.to_string().into_bytes(),
            interval_us.to_string().into_bytes(),
            rate_type.stored().into(),
        ];
        let reply = self
            .store
            .call_with(Entry::Config, &self.keys(), &args)
            .await?;
        Ok(matches!(reply.first(), Some(Value::Int(1))))
    }

    /// Sets the rate if none is set yet; `Ok(false)` if one was (Redisson `trySetRate`).
    pub async fn try_set_rate(
        &self,
        rate_type: RateType,
        rate: u64,
        interval: Duration,
    ) -> Result<bool, RedisLimitError> {
        self.write_config("try_set", rate_type, rate, interval)
            .await
    }

    /// Sets the rate, replacing any, and forgets every client's permits (Redisson `setRate`).
    pub async fn set_rate(
        &self,
        rate_type: RateType,
        rate: u64,
        interval: Duration,
    ) -> Result<(), RedisLimitError> {
        self.write_config("set", rate_type, rate, interval)
            .await
            .map(|_| ())
    }

    /// The stored configuration (Redisson `getConfig`); an error if none is set or what is
    /// stored is not a configuration this crate wrote.
    pub async fn get_config(&self) -> Result<RateConfig, RedisLimitError> {
        let reply = self
            .store
            .call_with(Entry::Config, &self.keys(), &[b"get".to_vec()])
            .await?;
        let corrupt =
            |what: String| RedisLimitError::CorruptState(format!("{}: {what}", self.name));
        let fields: Vec<Option<String>> = reply
            .iter()
            .map(|v| match v {
                Value::Nil => None,
                other => Some(text(other)),
            })
            .collect();
        match fields.as_slice() {
            [] => Err(RedisLimitError::NotConfigured(format!(
                "{}: no rate set (try_set_rate first)",
                self.name
            ))),
            [Some(kind), Some(detail)] if kind == "corrupt" => Err(corrupt(detail.clone())),
            [rate, interval, rate_type] => {
                let number = |field: &Option<String>, name: &str| {
                    field
                        .as_deref()
                        .and_then(|f| f.parse::<u64>().ok())
                        .filter(|n| (1..=1 << 50).contains(n))
                        .ok_or_else(|| corrupt(format!("{name} = {field:?}")))
                };
                let rate_type = match rate_type.as_deref() {
                    Some("overall") => RateType::Overall,
                    Some("per_client") => RateType::PerClient,
                    other => return Err(corrupt(format!("type = {other:?}"))),
                };
                Ok(RateConfig {
                    rate_type,
                    rate: number(rate, "rate")?,
                    interval: Duration::from_micros(number(interval, "interval")?),
                })
            }
            other => Err(corrupt(format!("{other:?}"))),
        }
    }

    async fn decide(&self, permits: u64, op: &str, now: Now) -> Result<Decision, RedisLimitError> {
        let permits = NonZeroU64::new(permits).ok_or_else(|| ConfigError::InvalidParameter {
            name: "permits",
            value: "0".into(),
            reason: "must be at least 1".into(),
        })?;
        let args = vec![
            now_arg(now),
            op.into(),
            b"1".to_vec(),
            b"redisson".to_vec(),
            permits.to_string().into_bytes(),
            self.client_id.clone().into_bytes(),
            self.store.grace_ms.to_string().into_bytes(),
        ];
        let reply = self
            .store
            .call_with(Entry::Decide, &self.keys(), &args)
            .await?;
        let (_, mut decisions) = parse_reply(&reply, 1)?;
        decisions
            .pop()
            .ok_or_else(|| RedisLimitError::UnexpectedReply("no decision".into()))
    }

    /// Takes `permits` if they are available now (Redisson `tryAcquire(permits)`).
    pub async fn try_acquire(&self, permits: u64) -> Result<bool, RedisLimitError> {
        Ok(self.try_acquire_at(permits, Now::Store).await?.allowed())
    }

    /// Takes `permits` if they are available at `now`, with the full decision.
    pub async fn try_acquire_at(
        &self,
        permits: u64,
        now: Now,
    ) -> Result<Decision, RedisLimitError> {
        self.decide(permits, "check", now).await
    }

    /// Takes `permits`, waiting up to `timeout` for them (Redisson
    /// `tryAcquire(permits, timeout)`); `Ok(false)` if they could not be had in time. Gives up
    /// at once if the wait Redis announces exceeds what is left of the timeout.
    pub async fn try_acquire_for(
        &self,
        permits: u64,
        timeout: Duration,
    ) -> Result<bool, RedisLimitError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let decision = self.try_acquire_at(permits, Now::Store).await?;
            if decision.allowed() {
                return Ok(true);
            }
            let wait = decision.retry_after().unwrap_or(Duration::from_millis(1));
            if tokio::time::Instant::now() + wait > deadline {
                return Ok(false);
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// Takes `permits`, waiting as long as it takes (Redisson `acquire(permits)`).
    pub async fn acquire(&self, permits: u64) -> Result<(), RedisLimitError> {
        loop {
            let decision = self.try_acquire_at(permits, Now::Store).await?;
            if decision.allowed() {
                return Ok(());
            }
            tokio::time::sleep(decision.retry_after().unwrap_or(Duration::from_millis(1))).await;
        }
    }

    /// Permits available now (Redisson `availablePermits`).
    pub async fn available_permits(&self) -> Result<u64, RedisLimitError> {
        self.available_permits_at(Now::Store).await
    }

    /// Permits available at `now`: the rate less the permits granted in the interval ending
    /// at `now`, which is what a peek reports as remaining.
    pub async fn available_permits_at(&self, now: Now) -> Result<u64, RedisLimitError> {
        Ok(self.decide(1, "peek", now).await?.remaining())
    }
}
