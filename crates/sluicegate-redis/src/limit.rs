//! The limits the Redis script runs, with their parameters precomputed in exact integers.

use std::time::Duration;

use sluicegate::{Concurrency, ConfigError, Gcra, Micros, Pace, Rate, TokenBucket, micros_ceil};

/// The largest bucket tolerance (burst times interval, in ticks) the script counts exactly:
/// Lua numbers are doubles, exact below 2^53, and the script adds a request's cost to a debt
/// of up to one tolerance.
pub const MAX_REDIS_TOLERANCE: u64 = 1 << 50;

/// One limit that a Redis-backed limiter enforces: the algorithms of the core crate, with the
/// same parameters and the same decisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisLimit {
    pub(crate) kind: LimitKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LimitKind {
    Gcra(Bucket),
    TokenBucket(Bucket),
    Concurrency { limit: u64, lease_us: Micros },
}

/// A bucket's parameters in ticks, as `sluicegate`'s `BucketShape` computes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bucket {
    pub(crate) rate: Rate,
    pub(crate) burst: u64,
    pub(crate) initial: u64,
    pub(crate) pace: Pace,
    pub(crate) tolerance: u64,
}

impl Bucket {
    fn new(rate: Rate, burst: u64, initial: u64) -> Result<Bucket, ConfigError> {
        let pace = rate.pace();
        let tolerance = burst
            .checked_mul(pace.interval)
            .filter(|t| *t <= MAX_REDIS_TOLERANCE)
            .ok_or_else(|| ConfigError::InvalidParameter {
                name: "burst",
                value: burst.to_string(),
                reason: format!(
                    "a burst of {burst} at {rate} spans too long a time to count exactly in Redis"
                ),
            })?;
        Ok(Bucket {
            rate,
            burst,
            initial,
            pace,
            tolerance,
        })
    }
}

impl RedisLimit {
    /// GCRA: `rate` in bursts of up to `burst`, starting full (see [`sluicegate::Gcra`]).
    pub fn gcra(rate: Rate, burst: u64) -> Result<RedisLimit, ConfigError> {
        Self::gcra_with_initial(rate, burst, burst)
    }

    /// GCRA starting with `initial` of its `burst` permits.
    pub fn gcra_with_initial(
        rate: Rate,
        burst: u64,
        initial: u64,
    ) -> Result<RedisLimit, ConfigError> {
        Gcra::with_initial(rate, burst, initial)?;
        Ok(RedisLimit {
            kind: LimitKind::Gcra(Bucket::new(rate, burst, initial)?),
        })
    }

    /// A token bucket of `burst` refilled at `rate`, starting full (see
    /// [`sluicegate::TokenBucket`]).
    pub fn token_bucket(rate: Rate, burst: u64) -> Result<RedisLimit, ConfigError> {
        Self::token_bucket_with_initial(rate, burst, burst)
    }

    /// A token bucket starting with `initial` of its `burst` tokens.
    pub fn token_bucket_with_initial(
        rate: Rate,
        burst: u64,
        initial: u64,
    ) -> Result<RedisLimit, ConfigError> {
        TokenBucket::with_initial(rate, burst, initial)?;
        Ok(RedisLimit {
            kind: LimitKind::TokenBucket(Bucket::new(rate, burst, initial)?),
        })
    }

    /// At most `limit` permits held at once (see [`sluicegate::Concurrency`]); each
    /// acquisition is a lease that expires after `lease` unless renewed, so a holder that
    /// crashes cannot keep its permits.
    pub fn concurrency(limit: u64, lease: Duration) -> Result<RedisLimit, ConfigError> {
        Concurrency::new(limit)?;
        let lease_us = micros_ceil(lease);
        if lease_us == 0 || lease_us > 1 << 50 {
            return Err(ConfigError::InvalidParameter {
                name: "lease",
                value: format!("{lease:?}"),
                reason: "must be between 1µs and about 35 years".into(),
            });
        }
        Ok(RedisLimit {
            kind: LimitKind::Concurrency { limit, lease_us },
        })
    }

    /// The algorithm's name as written in specs (`gcra`, `token-bucket`, `concurrency`).
    pub fn name(&self) -> &'static str {
        match self.kind {
            LimitKind::Gcra(_) => "gcra",
            LimitKind::TokenBucket(_) => "token-bucket",
            LimitKind::Concurrency { .. } => "concurrency",
        }
    }

    /// The most permits one request can be granted.
    pub fn capacity(&self) -> u64 {
        match &self.kind {
            LimitKind::Gcra(b) | LimitKind::TokenBucket(b) => b.burst,
            LimitKind::Concurrency { limit, .. } => *limit,
        }
    }

    /// How many keys one check of this limit touches.
    pub(crate) fn key_suffixes(&self) -> &'static [&'static str] {
        match self.kind {
            LimitKind::Concurrency { .. } => &[":l", ":h"],
            _ => &[""],
        }
    }

    /// The script's per-limit arguments after `kind, permits`.
    pub(crate) fn push_args(
        &self,
        args: &mut Vec<Vec<u8>>,
        max_wait: Option<Micros>,
        lease: &str,
        grace_ms: u64,
    ) {
        let mut push = |v: u64| args.push(v.to_string().into_bytes());
        match &self.kind {
            LimitKind::Gcra(b) | LimitKind::TokenBucket(b) => {
                let d = b.pace.ticks_per_micro;
                let (init_a, init_b) = match self.kind {
                    // The TAT of a limiter created at time 0 (`initial_state(0)`), as a pair.
                    LimitKind::Gcra(_) => {
                        let ticks = (b.burst - b.initial) * b.pace.interval;
                        (ticks / d, ticks % d)
                    }
                    _ => (b.initial * b.pace.interval, 0),
                };
                for v in [d, b.pace.interval, b.tolerance, b.burst, init_a, init_b] {
                    push(v);
                }
                // -1 for "no limit on the wait"; waits beyond 2^53 µs are as good as none.
                match max_wait {
                    Some(w) => push(w.min(1 << 53)),
                    None => args.push(b"-1".to_vec()),
                }
                args.push(grace_ms.to_string().into_bytes());
            }
            LimitKind::Concurrency { limit, lease_us } => {
                args.push(limit.to_string().into_bytes());
                args.push(lease.as_bytes().to_vec());
                args.push(lease_us.to_string().into_bytes());
                args.push(grace_ms.to_string().into_bytes());
            }
        }
    }
}
