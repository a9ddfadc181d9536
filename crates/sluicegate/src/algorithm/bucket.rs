//! What GCRA, the token bucket and the leaky bucket share: a bucket of `burst` permits refilled
//! (or drained) at a rate, measured in exact ticks.

use crate::decision::Decision;
use crate::error::ConfigError;
use crate::rate::{Pace, Rate};

/// Keeps every state value (ticks since the epoch plus a bucket) clear of the top bit, which
/// the word cell uses as a lock flag.
const MAX_TOLERANCE: u64 = 1 << 61;

/// A bucket's parameters, validated, in ticks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BucketShape {
    pub(crate) rate: Rate,
    pub(crate) pace: Pace,
    pub(crate) burst: u64,
    pub(crate) initial: u64,
    /// `burst` permits' worth of ticks: how far the bucket can be from full.
    pub(crate) tolerance: u64,
}

impl BucketShape {
    pub(crate) fn new(rate: Rate, burst: u64, initial: Option<u64>) -> Result<Self, ConfigError> {
        if burst == 0 {
            return Err(ConfigError::invalid("burst", burst, "must be at least 1"));
        }
        let initial = initial.unwrap_or(burst);
        if initial > burst {
            return Err(ConfigError::invalid(
                "initial",
                initial,
                format!("cannot exceed the burst of {burst}"),
            ));
        }
        let pace = rate.pace();
        let tolerance = burst
            .checked_mul(pace.interval)
            .filter(|t| *t <= MAX_TOLERANCE)
            .ok_or_else(|| {
                ConfigError::invalid(
                    "burst",
                    burst,
                    format!("a burst of {burst} at {rate} spans too long a time to count exactly"),
                )
            })?;
        Ok(BucketShape {
            rate,
            pace,
            burst,
            initial,
            tolerance,
        })
    }

    /// Permits that fit in the bucket when it is `debt` ticks short of full.
    #[inline]
    pub(crate) fn remaining(&self, debt: u64) -> u64 {
        self.tolerance.saturating_sub(debt) / self.pace.interval
    }

    #[inline]
    pub(crate) fn allow(&self, debt_after: u64) -> Decision {
        Decision::allow(
            self.burst,
            self.remaining(debt_after),
            self.pace.to_micros_ceil(debt_after),
        )
    }

    #[inline]
    pub(crate) fn deny(&self, debt: u64, retry_us: u64) -> Decision {
        Decision::deny(
            self.burst,
            self.remaining(debt),
            self.pace.to_micros_ceil(debt),
            retry_us,
        )
    }

    /// The debt under `new` that keeps the same fill ratio as `debt` under `self`, rounded
    /// towards the emptier bucket. A debt beyond the bucket (reservations) keeps its length in
    /// permits.
    pub(crate) fn rescale_debt(&self, new: &BucketShape, debt: u64) -> u64 {
        if debt > self.tolerance {
            let overdraft = u128::from(debt - self.tolerance) * u128::from(new.pace.interval);
            let overdraft = overdraft.div_ceil(u128::from(self.pace.interval));
            return new
                .tolerance
                .saturating_add(u64::try_from(overdraft).unwrap_or(u64::MAX));
        }
        let scaled = u128::from(debt) * u128::from(new.tolerance);
        u64::try_from(scaled.div_ceil(u128::from(self.tolerance))).unwrap_or(u64::MAX)
    }
}
