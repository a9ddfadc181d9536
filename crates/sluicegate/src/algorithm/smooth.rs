//! What Guava's two smooth limiters share (its `SmoothRateLimiter`): stored permits, the time
//! the next request may go ("pay later": a request waits for the cost of the one before it), and
//! a curve saying what spending stored permits costs.
//!
//! Exactness is the point of this module: every formula is evaluated with the same `f64`
//! operations, in the same order, with the same `(long)` truncations as Guava, so waits agree
//! with Guava's to the microsecond. Rust's `as i64` saturates and maps NaN to 0 exactly like
//! Java's `(long)` cast; Java's plain `long` additions wrap, so they are `wrapping_add` here, and
//! Guava's `LongMath.saturatedAdd` is `saturating_add`.

use std::num::NonZeroU64;

use crate::cell::LockedCell;
use crate::clock::Micros;
use crate::decision::Decision;
use crate::error::{CheckError, ConfigError};
use crate::state_machine::{AlgorithmState, Op, ensure_capacity, unsupported};

/// Guava counts permits in an `int`.
pub(crate) const CAPACITY: u64 = i32::MAX as u64;

/// The state of a Guava smooth limiter (bursty or warming up).
///
/// Times are kept as Guava keeps them: microseconds since the limiter was created (Guava's
/// stopwatch starts with the limiter), so even saturation at `i64::MAX` happens where Guava's
/// does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SmoothState {
    /// When the limiter was created, on the clock's timeline; the origin of `next_free_ticket`.
    pub created_at: Micros,
    /// Guava's `nextFreeTicketMicros`: when the next request may go, in microseconds since
    /// `created_at`. In the past while the limiter is idle; moves ahead as requests reserve.
    pub next_free_ticket: i64,
    /// Guava's `storedPermits`: permits saved up while idle, at most the limiter's maximum.
    pub stored_permits: f64,
}

impl AlgorithmState for SmoothState {
    type Cell = LockedCell<SmoothState>;
}

impl SmoothState {
    /// The state Guava's constructor and first `setRate` leave at creation (no resync happens
    /// then, since no time has passed).
    pub(crate) fn created(created_at: Micros, stored_permits: f64) -> Self {
        SmoothState {
            created_at,
            next_free_ticket: 0,
            stored_permits,
        }
    }

    /// Guava's `stopwatch.readMicros()`: time since creation.
    #[inline]
    fn elapsed(&self, now: Micros) -> i64 {
        i64::try_from(now.saturating_sub(self.created_at)).unwrap_or(i64::MAX)
    }
}

/// What distinguishes the two limiters: the numbers Guava's `doSetRate` derives from the rate,
/// and the cost of spending stored permits.
pub(crate) trait SmoothCurve {
    /// The algorithm's name.
    fn name(&self) -> &'static str;
    /// [`Decision::limit`]: how many single permits a fully rested limiter grants at once.
    fn limit(&self) -> u64;
    /// Guava's `stableIntervalMicros`.
    fn stable_interval(&self) -> f64;
    /// Guava's `maxPermits`.
    fn max_permits(&self) -> f64;
    /// Guava's `coolDownIntervalMicros()`: idle time that stores one permit.
    fn cool_down_interval(&self) -> f64;
    /// Guava's `storedPermitsToWaitTime`: the cost of taking `take` of `stored` permits.
    fn stored_permits_cost(&self, stored: f64, take: f64) -> i64;
    /// How many single-permit checks pass back to back, at one instant, once the next free
    /// ticket is due and `stored` permits are saved.
    fn checks_passing_now(&self, stored: f64) -> u64;
}

/// `SECONDS.toMicros(1L) / permitsPerSecond`.
#[inline]
pub(crate) fn stable_interval_micros(permits_per_second: f64) -> f64 {
    1_000_000.0 / permits_per_second
}

/// Java's `Math.min(double, double)`: NaN if either is NaN, and -0.0 below 0.0 (Rust's
/// `f64::min` returns the other operand when one is NaN).
#[inline]
pub(crate) fn java_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == 0.0 && b == 0.0 {
        if a.is_sign_negative() { a } else { b }
    } else if a <= b {
        a
    } else {
        b
    }
}

/// Rejects a rate Guava rejects (zero, negative, NaN) and, beyond Guava, infinity.
pub(crate) fn validate_rate(permits_per_second: f64) -> Result<f64, ConfigError> {
    if permits_per_second.is_finite() && permits_per_second > 0.0 {
        Ok(permits_per_second)
    } else {
        Err(ConfigError::invalid(
            "rate",
            permits_per_second,
            "must be a finite number of permits per second above zero",
        ))
    }
}

/// Guava's `resync`: credits the idle time since the next free ticket as stored permits.
#[inline]
fn resync<C: SmoothCurve>(curve: &C, state: &mut SmoothState, now: i64) {
    if now > state.next_free_ticket {
        let idle = now.wrapping_sub(state.next_free_ticket) as f64;
        let new_permits = idle / curve.cool_down_interval();
        state.stored_permits = java_min(curve.max_permits(), state.stored_permits + new_permits);
        state.next_free_ticket = now;
    }
}

/// [`resync`] at a time on the clock's timeline: the first half of Guava's `setRate`.
pub(crate) fn resync_at<C: SmoothCurve>(curve: &C, state: &mut SmoothState, now: Micros) {
    let now = state.elapsed(now);
    resync(curve, state, now);
}

/// Guava's `reserveAndGetWaitLength`: reserves `permits` and returns how long the caller waits.
#[inline]
fn reserve<C: SmoothCurve>(curve: &C, state: &mut SmoothState, permits: f64, now: i64) -> i64 {
    resync(curve, state, now);
    let moment_available = state.next_free_ticket;
    let stored_to_spend = java_min(permits, state.stored_permits);
    let fresh_permits = permits - stored_to_spend;
    let wait = curve
        .stored_permits_cost(state.stored_permits, stored_to_spend)
        .wrapping_add((fresh_permits * curve.stable_interval()) as i64);
    state.next_free_ticket = state.next_free_ticket.saturating_add(wait);
    state.stored_permits -= stored_to_spend;
    moment_available.wrapping_sub(now).max(0)
}

/// Guava's `canAcquire`: the next free ticket comes within `timeout`. Note that it looks at the
/// ticket as stored, without a resync.
#[inline]
fn can_acquire(state: &SmoothState, now: i64, timeout: i64) -> bool {
    state.next_free_ticket.wrapping_sub(timeout) <= now
}

/// Answers `op` as Guava would: `acquire(n)` for a reservation without a limit, `tryAcquire(n,
/// max_wait)` with one, `tryAcquire(n)` (no wait allowed) for a check or a peek.
pub(crate) fn decide<C: SmoothCurve>(
    curve: &C,
    state: &mut SmoothState,
    now: Micros,
    permits: NonZeroU64,
    op: Op,
) -> Result<Decision, CheckError> {
    // Guava's limiters have no notion of a denied request counting.
    if matches!(op, Op::Release | Op::Charge) {
        return Err(unsupported(curve.name(), op));
    }
    let permits = ensure_capacity(permits, CAPACITY)?;
    let now = state.elapsed(now);
    let timeout = match op {
        Op::Reserve { max_wait: None } => None,
        // Guava's `unit.toMicros(timeout)` saturates at `Long.MAX_VALUE`.
        Op::Reserve {
            max_wait: Some(max_wait),
        } => Some(i64::try_from(max_wait).unwrap_or(i64::MAX)),
        _ => Some(0),
    };
    if let Some(timeout) = timeout.filter(|&timeout| !can_acquire(state, now, timeout)) {
        // The earliest time the same request (with the same timeout) could pass.
        let retry_after = state
            .next_free_ticket
            .wrapping_sub(now)
            .saturating_sub(timeout)
            .max(0) as u64;
        let reset_after = micros_to_fresh(curve, state, now);
        return Ok(Decision::deny(
            curve.limit(),
            0,
            reset_after,
            Some(retry_after),
        ));
    }
    let mut next = *state;
    // `permits` is at most `i32::MAX`, so the conversion is exact, as Java's int to double.
    let wait = reserve(curve, &mut next, permits as f64, now) as u64;
    // What single checks could pass now once this decision took effect: after the grant, or,
    // for a peek, which reserves nothing, with the state as it is (brought up to `now`).
    let mut after = next;
    if !op.consumes() {
        after = *state;
        resync(curve, &mut after, now);
    }
    let remaining = if after.next_free_ticket <= now {
        curve
            .checks_passing_now(after.stored_permits)
            .min(curve.limit())
    } else {
        0
    };
    let decision = Decision::allow(curve.limit(), remaining, micros_to_fresh(curve, &next, now))
        .with_wait(wait);
    if op.consumes() {
        *state = next;
    }
    Ok(decision)
}

/// Whether `state` at `now` is full and has nothing reserved, as a limiter idle for long is.
pub(crate) fn is_fresh<C: SmoothCurve>(curve: &C, state: &SmoothState, now: Micros) -> bool {
    let mut rested = *state;
    let now = rested.elapsed(now);
    resync(curve, &mut rested, now);
    rested.next_free_ticket <= now && rested.stored_permits == curve.max_permits()
}

/// Microseconds from `now` until [`is_fresh`] holds: the reserved time still to come, then
/// the idle time that fills the stored permits up to the maximum. Rounded up so that the state
/// is fresh at `now + reset_after`; `u64::MAX` when the maximum can never be reached.
fn micros_to_fresh<C: SmoothCurve>(curve: &C, state: &SmoothState, now: i64) -> u64 {
    let mut rested = *state;
    resync(curve, &mut rested, now);
    let reserved = rested.next_free_ticket.saturating_sub(now).max(0) as u64;
    let max = curve.max_permits();
    let stored = rested.stored_permits;
    if stored == max {
        return reserved;
    }
    let cool_down = curve.cool_down_interval();
    let fills = |idle: u64| java_min(max, stored + idle as f64 / cool_down) == max;
    // `as u64` saturates, so an unreachable maximum gives `u64::MAX`.
    let mut idle = ((max - stored) * cool_down).ceil() as u64;
    // The product can round a hair short of what resync's division needs.
    for _ in 0..4 {
        if idle == u64::MAX || fills(idle) {
            break;
        }
        idle += 1;
    }
    reserved.saturating_add(idle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_min_keeps_nan_and_negative_zero() {
        assert!(java_min(f64::NAN, 1.0).is_nan());
        assert!(java_min(1.0, f64::NAN).is_nan());
        assert!(java_min(0.0, -0.0).is_sign_negative());
        assert!(java_min(-0.0, 0.0).is_sign_negative());
        assert_eq!(java_min(2.0, 3.0), 2.0);
        assert_eq!(java_min(f64::INFINITY, 3.0), 3.0);
    }

    #[test]
    fn rates_must_be_finite_and_positive() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(validate_rate(bad).is_err(), "{bad}");
        }
        assert_eq!(validate_rate(f64::MIN_POSITIVE), Ok(f64::MIN_POSITIVE));
    }
}
