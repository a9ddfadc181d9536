//! Guava's `SmoothBursty` (`RateLimiter.create(permitsPerSecond)`): idle time is saved as free
//! permits, up to `max_burst_seconds` worth of them.

use std::num::NonZeroU64;

use crate::algorithm::smooth::{self, SmoothCurve, SmoothState};
use crate::clock::Micros;
use crate::decision::Decision;
use crate::error::{CheckError, ConfigError};
use crate::state_machine::{Algorithm, Op};

/// Guava's bursty `RateLimiter`, with Guava's waits to the microsecond.
///
/// One permit every `1 / permits_per_second` seconds. While idle it saves up to
/// `permits_per_second * max_burst_seconds` permits, which are then handed out at no cost. A
/// request whose turn has come is granted whatever its size, and the requests after it pay for
/// it ("pay later"). [`Op::Reserve`] without `max_wait` is Guava's `acquire(n)` and returns its
/// wait; with `max_wait: Some(t)` it is `tryAcquire(n, t)`; [`Op::Check`] is `tryAcquire(n)`,
/// and [`Op::Peek`] tells whether that would pass, changing nothing. A denial changes nothing
/// either, and its `retry_after` is the time until the next free ticket, from when the same
/// request passes without waiting. Like Guava's, the limiter exists from its creation: first
/// used two seconds after it was created, it has already saved permits.
///
/// [`Decision::limit`] is the most single permits a rested limiter grants at one instant: the
/// saved permits (rounded down) plus the one Guava always lets through when its turn has come.
/// [`Decision::remaining`] counts the same from the state after the decision (a peek's from
/// the state as it is, since it takes nothing), and is 0 exactly when the next check must wait (for rates above a million per second, where a permit costs
/// under a microsecond, more may pass than it says).
///
/// ```
/// use sluicegate::{Algorithm, SmoothBursty};
/// use sluicegate::state_machine::Op;
/// use std::num::NonZeroU64;
/// use std::time::Duration;
///
/// let limiter = SmoothBursty::per_second(5.0)?;
/// let mut state = limiter.initial_state(0);
/// let acquire = Op::Reserve { max_wait: None };
/// let one = NonZeroU64::MIN;
/// assert_eq!(limiter.decide(&mut state, 0, one, acquire)?.wait(), Duration::ZERO);
/// assert_eq!(limiter.decide(&mut state, 0, one, acquire)?.wait(), Duration::from_millis(200));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct SmoothBursty {
    permits_per_second: f64,
    max_burst_seconds: f64,
    stable_interval: f64,
    max_permits: f64,
}

impl SmoothBursty {
    /// `permits_per_second` (finite, above zero), saving up to `max_burst_seconds` (finite, at
    /// least zero) worth of permits while idle.
    pub fn new(permits_per_second: f64, max_burst_seconds: f64) -> Result<Self, ConfigError> {
        let permits_per_second = smooth::validate_rate(permits_per_second)?;
        if !(max_burst_seconds.is_finite() && max_burst_seconds >= 0.0) {
            return Err(ConfigError::invalid(
                "max_burst_seconds",
                max_burst_seconds,
                "must be a finite number of seconds, at least zero",
            ));
        }
        // Guava's SmoothBursty.doSetRate.
        Ok(SmoothBursty {
            permits_per_second,
            max_burst_seconds,
            stable_interval: smooth::stable_interval_micros(permits_per_second),
            max_permits: max_burst_seconds * permits_per_second,
        })
    }

    /// Guava's `RateLimiter.create(permitsPerSecond)`: bursts of up to one second's permits.
    pub fn per_second(permits_per_second: f64) -> Result<Self, ConfigError> {
        Self::new(permits_per_second, 1.0)
    }

    /// The same limiter at another rate, for [`Algorithm::carry_over`] (Guava's `setRate`).
    pub fn with_rate(&self, permits_per_second: f64) -> Result<Self, ConfigError> {
        Self::new(permits_per_second, self.max_burst_seconds)
    }

    /// The stable rate, in permits per second.
    pub fn permits_per_second(&self) -> f64 {
        self.permits_per_second
    }

    /// How many seconds' worth of permits are saved while idle.
    pub fn max_burst_seconds(&self) -> f64 {
        self.max_burst_seconds
    }

    /// The most permits saved while idle (Guava's `maxPermits`).
    pub fn max_permits(&self) -> f64 {
        self.max_permits
    }
}

impl SmoothCurve for SmoothBursty {
    fn name(&self) -> &'static str {
        "smooth-bursty"
    }

    fn limit(&self) -> u64 {
        // `as u64` saturates (and an infinite maximum means no limit worth counting).
        (self.max_permits.floor() as u64)
            .saturating_add(1)
            .min(smooth::CAPACITY)
    }

    fn stable_interval(&self) -> f64 {
        self.stable_interval
    }

    fn max_permits(&self) -> f64 {
        self.max_permits
    }

    fn cool_down_interval(&self) -> f64 {
        self.stable_interval
    }

    fn stored_permits_cost(&self, _stored: f64, _take: f64) -> i64 {
        0
    }

    fn checks_passing_now(&self, stored: f64) -> u64 {
        (stored.floor() as u64).saturating_add(1)
    }
}

impl Algorithm for SmoothBursty {
    type State = SmoothState;

    fn name(&self) -> &'static str {
        SmoothCurve::name(self)
    }

    fn limit(&self) -> u64 {
        SmoothCurve::limit(self)
    }

    fn capacity(&self) -> u64 {
        smooth::CAPACITY
    }

    /// Guava's constructor and first `setRate`: nothing saved yet.
    fn initial_state(&self, created_at: Micros) -> SmoothState {
        SmoothState::created(created_at, 0.0)
    }

    #[inline]
    fn decide(
        &self,
        state: &mut SmoothState,
        now: Micros,
        permits: NonZeroU64,
        op: Op,
    ) -> Result<Decision, CheckError> {
        smooth::decide(self, state, now, permits, op)
    }

    /// Nothing reserved and the burst fully saved.
    fn is_fresh(&self, state: &SmoothState, now: Micros) -> bool {
        smooth::is_fresh(self, state, now)
    }

    /// Guava's `setRate`: resync under the old rate, then keep the saved share of the maximum.
    fn carry_over(&self, new: &Self, state: &mut SmoothState, now: Micros) {
        smooth::resync_at(self, state, now);
        let old_max = self.max_permits;
        state.stored_permits = if old_max == f64::INFINITY {
            new.max_permits
        } else if old_max == 0.0 {
            0.0
        } else {
            state.stored_permits * new.max_permits / old_max
        };
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const ONE: NonZeroU64 = NonZeroU64::MIN;
    const SECOND: Micros = 1_000_000;

    fn invalid_name(result: Result<SmoothBursty, ConfigError>) -> Option<&'static str> {
        match result {
            Err(ConfigError::InvalidParameter { name, .. }) => Some(name),
            _ => None,
        }
    }

    #[test]
    fn rejects_what_guava_rejects_and_infinities() {
        for rate in [0.0, -10.0, f64::NAN, f64::INFINITY] {
            assert_eq!(invalid_name(SmoothBursty::per_second(rate)), Some("rate"));
        }
        for burst in [-1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(
                invalid_name(SmoothBursty::new(1.0, burst)),
                Some("max_burst_seconds")
            );
        }
        assert!(SmoothBursty::new(1.0, 0.0).is_ok());
        assert!(SmoothBursty::per_second(f64::MIN_POSITIVE).is_ok());
    }

    #[test]
    fn release_is_unsupported_and_capacity_is_an_int() -> Result<(), CheckError> {
        let limiter = SmoothBursty::per_second(5.0).expect("valid");
        let mut state = limiter.initial_state(0);
        assert!(matches!(
            limiter.decide(&mut state, 0, ONE, Op::Release),
            Err(CheckError::Unsupported { .. })
        ));
        let too_many = NonZeroU64::new(i32::MAX as u64 + 1).expect("non-zero");
        assert_eq!(
            limiter.decide(&mut state, 0, too_many, Op::Check),
            Err(CheckError::InsufficientCapacity {
                requested: too_many.get(),
                capacity: i32::MAX as u64
            })
        );
        let most = NonZeroU64::new(i32::MAX as u64).expect("non-zero");
        assert!(limiter.decide(&mut state, 0, most, Op::Check)?.allowed());
        Ok(())
    }

    #[test]
    fn a_rested_limiter_grants_its_saved_burst_plus_one() -> Result<(), CheckError> {
        let limiter = SmoothBursty::per_second(5.0).expect("valid");
        assert_eq!(Algorithm::limit(&limiter), 6);
        let mut state = limiter.initial_state(0);
        // First used two seconds after creation: five permits saved, plus the free one.
        let now = 2 * SECOND;
        for expected_remaining in (0..6).rev() {
            let peek = limiter.decide(&mut state, now, ONE, Op::Peek)?;
            let decision = limiter.decide(&mut state, now, ONE, Op::Check)?;
            // The peek answers as the check, but reports what was there before it.
            assert_eq!(peek, decision.with_remaining(expected_remaining + 1));
            assert!(decision.allowed());
            assert_eq!(decision.limit(), 6);
            assert_eq!(decision.remaining(), expected_remaining);
        }
        let before = state;
        let denied = limiter.decide(&mut state, now, ONE, Op::Check)?;
        assert!(!denied.allowed());
        assert_eq!(state, before);
        assert_eq!(denied.retry_after(), Some(Duration::from_millis(200)));
        // 200ms until the free permit is paid for, then 1s to save five again.
        assert_eq!(denied.reset_after(), Duration::from_millis(1200));
        assert!(!limiter.is_fresh(&state, now + 1_199_999));
        assert!(limiter.is_fresh(&state, now + 1_200_000));
        Ok(())
    }

    #[test]
    fn a_limiter_exists_from_its_creation() -> Result<(), CheckError> {
        let limiter = SmoothBursty::per_second(5.0).expect("valid");
        let mut state = limiter.initial_state(10 * SECOND);
        assert!(!limiter.is_fresh(&state, 10 * SECOND));
        assert!(limiter.is_fresh(&state, 11 * SECOND));
        let first = limiter.decide(&mut state, 10 * SECOND, ONE, Op::Check)?;
        assert_eq!((first.allowed(), first.remaining()), (true, 0));
        assert_eq!(first.reset_after(), Duration::from_millis(1200));
        Ok(())
    }

    #[test]
    fn set_rate_keeps_the_saved_share() {
        let ten = SmoothBursty::per_second(10.0).expect("valid");
        let twenty = ten.with_rate(20.0).expect("valid");
        let mut state = ten.initial_state(0);
        ten.carry_over(&twenty, &mut state, SECOND / 2);
        assert_eq!(state.stored_permits, 10.0);
        assert_eq!(state.next_free_ticket, 500_000);
        assert_eq!(twenty.max_permits(), 20.0);
    }
}
