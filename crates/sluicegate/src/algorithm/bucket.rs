//! What GCRA, the token bucket and the leaky bucket share: a bucket of `burst` permits refilled
//! (or drained) at a rate, measured in exact ticks.

use std::num::NonZeroU64;

use crate::clock::Micros;
use crate::decision::{Admission, Decision};
use crate::error::ConfigError;
use crate::rate::{Rate, TickInterval};

/// The largest bucket, in ticks: `burst` permits' worth of time.
const MAX_TOLERANCE: u64 = 1 << 61;

/// The furthest a bucket may be from full, in ticks, reservations included: a reservation that
/// would take it further is denied (its `retry_after` says when it would fit), never clamped,
/// so an admitted reservation is always charged in full. Denied permits counted by
/// [`Op::Charge`](crate::state_machine::Op::Charge) are clamped to it instead: that deep, a bucket
/// refuses for longer than any clock runs (146 000 years of whole-microsecond ticks).
pub(crate) const MAX_DEBT: u64 = 1 << 62;

/// The last time, in ticks, that the bucket algorithms tell from later ones: a clock reading
/// beyond it counts as this time. Every stored time (the time itself plus a debt of at most
/// [`MAX_DEBT`]) then fits a `u64`, exactly.
///
/// In microseconds that is `HORIZON_TICKS / ticks_per_micro`: about 438 000 years of
/// microseconds for whole-microsecond paces, and 13.5 * 10^15 µs (Unix time in the year
/// 2398) at the finest pace, 1/1024 µs. Past it, time stands still for the bucket: it refills
/// no more, so it grants what it holds and then denies (with a `retry_after` that never comes),
/// never "no limit". A custom clock counting nanoseconds instead of microseconds reaches it at
/// once for paces of 1/8 µs and finer.
pub(crate) const HORIZON_TICKS: u64 = u64::MAX - MAX_DEBT;

/// A bucket's parameters, validated, in ticks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BucketShape {
    pub(crate) rate: Rate,
    pub(crate) pace: TickInterval,
    /// Non-zero, so that a check of one permit against it folds away.
    burst: NonZeroU64,
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
        let Some(nonzero_burst) = NonZeroU64::new(burst) else {
            return Err(ConfigError::invalid("burst", burst, "must be at least 1"));
        };
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
            burst: nonzero_burst,
            initial,
            tolerance,
            per_permit: Divisor::new(pace.interval),
            per_micro: Divisor::new(pace.ticks_per_micro),
        })
    }

    /// The bucket's size in permits.
    #[inline(always)]
    pub(crate) fn burst(&self) -> u64 {
        self.burst.get()
    }

    /// `micros` in ticks, at most [`HORIZON_TICKS`]. Whole-microsecond paces, the common case,
    /// skip the multiplication.
    #[inline]
    pub(crate) fn ticks(&self, micros: Micros) -> u64 {
        if self.pace.ticks_per_micro == 1 {
            micros.min(HORIZON_TICKS)
        } else {
            self.pace.to_ticks(micros).min(HORIZON_TICKS)
        }
    }

    /// A time in `self`'s ticks as `new`'s ticks, rounded up (a later time refills less).
    pub(crate) fn ticks_as(&self, new: &BucketShape, ticks: u64) -> u64 {
        let (from, to) = (self.pace.ticks_per_micro, new.pace.ticks_per_micro);
        if from == to {
            return ticks;
        }
        let scaled = (u128::from(ticks) * u128::from(to)).div_ceil(u128::from(from));
        u64::try_from(scaled).map_or(HORIZON_TICKS, |t| t.min(HORIZON_TICKS))
    }

    /// How long until a reservation leaving the bucket `debt_after` short of full, with a
    /// `wait` of its own, could be made under `max_wait`; 0 if it can be made now. Exact: the
    /// debt shrinks one microsecond's ticks per microsecond, and the wait with it.
    #[inline]
    pub(crate) fn reservation_delay(
        &self,
        debt_after: u64,
        wait: Micros,
        max_wait: Option<Micros>,
    ) -> Micros {
        let too_long = max_wait.map_or(0, |limit| wait.saturating_sub(limit));
        let too_deep = self.micros_ceil(debt_after.saturating_sub(MAX_DEBT));
        too_long.max(too_deep)
    }

    /// `ticks` as whole microseconds, rounded up (as [`TickInterval::to_micros_ceil`], faster).
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
        // A denial of a single permit leaves less than one permit of room: none.
        if room < self.pace.interval {
            return 0;
        }
        // `room` is at most the tolerance, at most `MAX_TOLERANCE` (2^61) by construction.
        self.per_permit.divide_small(room)
    }

    #[inline]
    pub(crate) fn allow(&self, debt_after: u64) -> Decision {
        Decision::allow(
            self.burst(),
            self.remaining(debt_after),
            self.micros_ceil(debt_after),
        )
    }

    /// A grant with no wait leaving the bucket `debt_after` short of full, as the answer `R`
    /// says it: a whole decision, or an admission that skips the numbers.
    #[inline(always)]
    pub(crate) fn pass<R: BucketAnswer>(&self, debt_after: u64) -> R {
        R::pass(self, debt_after)
    }

    /// An allowed [`Op::Peek`](crate::state_machine::Op::Peek): nothing is taken, so `remaining` is
    /// what the bucket holds at `debt`; `reset_after` is what the grant would report, at
    /// `debt_after`.
    #[inline]
    pub(crate) fn peek(&self, debt: u64, debt_after: u64) -> Decision {
        Decision::allow(
            self.burst(),
            self.remaining(debt),
            self.micros_ceil(debt_after),
        )
    }

    #[inline]
    pub(crate) fn deny(&self, debt: u64, retry_us: u64) -> Decision {
        Decision::deny(
            self.burst(),
            self.remaining(debt),
            self.micros_ceil(debt),
            Some(retry_us),
        )
    }

    /// A single permit denied for lack of room at `debt`: none is left. Where a plain check
    /// inlines this, `n` is known to be one, so the room is not even computed.
    #[inline]
    pub(crate) fn deny_one(&self, debt: u64, retry_us: u64) -> Decision {
        Decision::deny(self.burst(), 0, self.micros_ceil(debt), Some(retry_us))
    }

    /// A denied [`Op::Charge`](crate::state_machine::Op::Charge) of `n` permits that leaves the
    /// bucket `debt_after` short of full: the debt kept (at most [`MAX_DEBT`], so stored times stay
    /// in range), and the denial, whose retry is when `n` more permits would fit after it.
    #[inline]
    pub(crate) fn charge_denied(&self, debt_after: u64, n: u64) -> (u64, Decision) {
        let charged = debt_after.min(MAX_DEBT);
        // At most 2^62 + 2^61 (`n` permits are at most the tolerance): no overflow.
        let overdraft = (charged + n * self.pace.interval).saturating_sub(self.tolerance);
        (charged, self.deny(charged, self.micros_ceil(overdraft)))
    }

    /// The debt under `new` that keeps the same fill ratio as `debt` under `self`, rounded
    /// towards the emptier bucket. A debt beyond the bucket keeps its length in time, up to
    /// [`MAX_DEBT`]: whether it is reserved permits, charged ones, or a `now` behind the last
    /// decision, the time the bucket is back within its size stands (as Guava's `setRate`
    /// keeps its next free ticket), and the new rate refills from there. Rescaled by permits,
    /// a debt measured from a time behind the last decision would refill that gap twice.
    pub(crate) fn rescale_debt(&self, new: &BucketShape, debt: u64) -> u64 {
        if debt > self.tolerance {
            let overdraft =
                u128::from(debt - self.tolerance) * u128::from(new.pace.ticks_per_micro);
            let overdraft = overdraft.div_ceil(u128::from(self.pace.ticks_per_micro));
            return new
                .tolerance
                .saturating_add(u64::try_from(overdraft).unwrap_or(u64::MAX))
                .min(MAX_DEBT);
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
    /// Non-zero, so the fallback division has no panic path: the first, state-only run of
    /// `decide` in a word cell would otherwise keep the panic checks of its dead decision.
    divisor: NonZeroU64,
    multiplier: u64,
    /// `l - 1`: the shift left after taking the high word of the product (`63 + l - 64`).
    /// Unused for a divisor of 1 (`l = 0`), which divides by returning the numerator.
    high_shift: u32,
}

impl Divisor {
    fn new(divisor: u64) -> Divisor {
        let divisor = NonZeroU64::new(divisor).unwrap_or(NonZeroU64::MIN);
        let l = u64::BITS - (divisor.get() - 1).leading_zeros();
        let multiplier = (1u128 << (63 + l)).div_ceil(u128::from(divisor.get()));
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
        self.divide_small(numerator)
    }

    /// [`Divisor::divide`] of a numerator the caller knows to be below 2^63 (checked in debug
    /// builds), without the test for the fallback.
    #[inline]
    fn divide_small(&self, numerator: u64) -> u64 {
        debug_assert!(numerator >> 63 == 0, "{numerator} is not below 2^63");
        if self.divisor == NonZeroU64::MIN {
            return numerator;
        }
        let high = (u128::from(numerator) * u128::from(self.multiplier)) >> 64;
        (high as u64) >> self.high_shift
    }
}

/// The answer a bucket algorithm builds: a whole [`Decision`], or an [`Admission`], which
/// tells of a request passing at once without computing its numbers. Each algorithm's code is
/// written once, generic over this.
pub(crate) trait BucketAnswer {
    /// Granted with no wait, the bucket left `debt_after` short of full.
    fn pass(shape: &BucketShape, debt_after: u64) -> Self;

    /// Any other answer.
    fn decided(decision: Decision) -> Self;
}

impl BucketAnswer for Decision {
    #[inline(always)]
    fn pass(shape: &BucketShape, debt_after: u64) -> Decision {
        shape.allow(debt_after)
    }

    #[inline(always)]
    fn decided(decision: Decision) -> Decision {
        decision
    }
}

impl BucketAnswer for Admission {
    #[inline(always)]
    fn pass(_shape: &BucketShape, _debt_after: u64) -> Admission {
        Admission::Passed
    }

    #[inline(always)]
    fn decided(decision: Decision) -> Admission {
        Admission::Decided(decision)
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
            prop_assert_eq!(Divisor::new(d).divide_small(n >> 1), (n >> 1) / d);
            prop_assert_eq!(Divisor::new(small).divide_small(n >> 1), (n >> 1) / small);
        }

        #[test]
        fn micros_ceil_matches_pace(permits in 1u64..10_000_000, period in 1u64..100_000_000, ticks in any::<u64>()) {
            // At most one permit per microsecond: faster rates may be refused as too rounded.
            let rate = Rate::new(permits.min(period), std::time::Duration::from_micros(period))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let shape = BucketShape::new(rate, 1, None)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(shape.micros_ceil(ticks), shape.pace.to_micros_ceil(ticks));
            prop_assert_eq!(shape.ticks(ticks >> 20), shape.pace.to_ticks(ticks >> 20));
        }
    }
}
