//! What GCRA, the token bucket and the leaky bucket share: a bucket of `burst` permits refilled
//! (or drained) at a rate, measured in exact ticks.

use crate::clock::Micros;
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
    /// Divides by `pace.interval` (permits in a span of ticks) without a `div` instruction.
    per_permit: Divisor,
    /// Divides by `pace.ticks_per_micro` (ticks to microseconds) likewise.
    per_micro: Divisor,
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
            per_permit: Divisor::new(pace.interval),
            per_micro: Divisor::new(pace.ticks_per_micro),
        })
    }

    /// `micros` in ticks (saturating). Whole-microsecond paces, the common case, skip the
    /// multiplication.
    #[inline]
    pub(crate) fn ticks(&self, micros: Micros) -> u64 {
        if self.pace.ticks_per_micro == 1 {
            micros
        } else {
            self.pace.to_ticks(micros)
        }
    }

    /// `ticks` as whole microseconds, rounded up (as [`Pace::to_micros_ceil`], faster).
    #[inline]
    pub(crate) fn micros_ceil(&self, ticks: u64) -> Micros {
        if self.pace.ticks_per_micro == 1 {
            return ticks;
        }
        let whole = self.per_micro.divide(ticks);
        // No overflow: whole * ticks_per_micro <= ticks.
        whole + u64::from(whole * self.pace.ticks_per_micro < ticks)
    }

    /// Permits that fit in the bucket when it is `debt` ticks short of full.
    #[inline]
    pub(crate) fn remaining(&self, debt: u64) -> u64 {
        let room = self.tolerance.saturating_sub(debt);
        // Every denial of a single permit lands here: less than one permit of room is none.
        if room < self.pace.interval {
            return 0;
        }
        self.per_permit.divide(room)
    }

    #[inline]
    pub(crate) fn allow(&self, debt_after: u64) -> Decision {
        Decision::allow(
            self.burst,
            self.remaining(debt_after),
            self.micros_ceil(debt_after),
        )
    }

    #[inline]
    pub(crate) fn deny(&self, debt: u64, retry_us: u64) -> Decision {
        Decision::deny(
            self.burst,
            self.remaining(debt),
            self.micros_ceil(debt),
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

/// Exact division of numerators below 2^63 by a fixed divisor `d`, as a multiplication and a
/// shift (a 64-bit `div` costs several times more on the hot path).
///
/// With `l` the smallest integer such that `2^l >= d`, and `m = ceil(2^(63 + l) / d)`, we have
/// `2^(63+l) <= m*d <= 2^(63+l) + 2^l`, so `floor(n / d) = floor(n*m / 2^(63+l))` for every
/// `n < 2^63` (Granlund and Montgomery, "Division by invariant integers using
/// multiplication", theorem 4.2 with N = 63); and `m < 2^64`. Larger numerators fall back to
/// the plain division.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Divisor {
    divisor: u64,
    multiplier: u64,
    /// `l - 1`: the shift left after taking the high word of the product (`63 + l - 64`).
    /// Unused for a divisor of 1 (`l = 0`), which divides by returning the numerator.
    high_shift: u32,
}

impl Divisor {
    fn new(divisor: u64) -> Divisor {
        let divisor = divisor.max(1);
        let l = u64::BITS - (divisor - 1).leading_zeros();
        let multiplier = (1u128 << (63 + l)).div_ceil(u128::from(divisor));
        Divisor {
            divisor,
            // Below 2^64 by the bound above; the fallback keeps this total anyway.
            multiplier: u64::try_from(multiplier).unwrap_or(u64::MAX),
            high_shift: l.saturating_sub(1),
        }
    }

    #[inline]
    fn divide(&self, numerator: u64) -> u64 {
        if numerator >> 63 != 0 {
            return numerator / self.divisor;
        }
        if self.divisor == 1 {
            return numerator;
        }
        let high = (u128::from(numerator) * u128::from(self.multiplier)) >> 64;
        (high as u64) >> self.high_shift
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn divisor_is_exact_at_the_edges() {
        let divisors = [
            1,
            2,
            3,
            7,
            10,
            1000,
            1024,
            1_000_000,
            3_600_000_000,
            (1 << 61) + 1,
            u64::MAX,
        ];
        let numerators = [
            0,
            1,
            2,
            999,
            1000,
            1001,
            (1 << 62) - 1,
            (1 << 63) - 1,
            1 << 63,
            u64::MAX,
        ];
        for d in divisors {
            for n in numerators.into_iter().chain([
                d - 1,
                d,
                d.saturating_add(1),
                d.saturating_mul(2) - 1,
            ]) {
                assert_eq!(Divisor::new(d).divide(n), n / d, "{n} / {d}");
            }
        }
    }

    proptest! {
        #[test]
        fn divisor_matches_division(d in 1u64.., n in any::<u64>(), small in 1u64..100_000) {
            prop_assert_eq!(Divisor::new(d).divide(n), n / d);
            prop_assert_eq!(Divisor::new(small).divide(n), n / small);
            prop_assert_eq!(Divisor::new(d).divide(n >> 1), (n >> 1) / d);
        }

        #[test]
        fn micros_ceil_matches_pace(permits in 1u64..10_000_000, period in 1u64..100_000_000, ticks in any::<u64>()) {
            let rate = Rate::new(permits, std::time::Duration::from_micros(period))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let shape = BucketShape::new(rate, 1, None)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(shape.micros_ceil(ticks), shape.pace.to_micros_ceil(ticks));
            prop_assert_eq!(shape.ticks(ticks >> 20), shape.pace.to_ticks(ticks >> 20));
        }
    }
}
