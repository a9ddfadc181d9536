//! Guava's `SmoothWarmingUp` (`RateLimiter.create(permitsPerSecond, warmupPeriod)`): a rested
//! limiter starts slow and speeds up to its stable rate over the warm-up period.

use std::num::NonZeroU64;
use std::time::Duration;

use crate::algorithm::smooth::{self, SmoothCurve, SmoothState};
use crate::clock::Micros;
use crate::decision::Decision;
use crate::error::{CheckError, ConfigError};
use crate::state_machine::{Algorithm, Op};

/// Guava's warming-up `RateLimiter`, with Guava's waits to the microsecond.
///
/// It starts cold: the first permits after creation (or after a long idle time) cost up to
/// `cold_factor` stable intervals each, falling linearly to the stable interval as the stored
/// permits above the threshold are spent, so that going from cold to the stable rate takes
/// `warmup`. Requests "pay later" as with [`SmoothBursty`](crate::SmoothBursty): a request whose
/// turn has come is granted whatever its size, and the requests after it wait for its cost. The
/// ops map to Guava's methods as they do there.
///
/// [`Decision::limit`] is the stable rate per second, rounded up. Stored permits are never free
/// here, so [`Decision::remaining`] is 1 when a request could pass right now and 0 when the next
/// check must wait (for rates above a million per second, where a permit costs under a
/// microsecond, more may pass than it says).
///
/// ```
/// use sluicegate::{Algorithm, SmoothWarmup};
/// use sluicegate::state_machine::Op;
/// use std::num::NonZeroU64;
/// use std::time::Duration;
///
/// let limiter = SmoothWarmup::new(2.0, Duration::from_secs(4), SmoothWarmup::DEFAULT_COLD_FACTOR)?;
/// let mut state = limiter.initial_state(0);
/// let acquire = Op::Reserve { max_wait: None };
/// let mut waits = Vec::new();
/// let mut now = 0;
/// for _ in 0..6 {
///     let wait = limiter.decide(&mut state, now, NonZeroU64::MIN, acquire)?.wait();
///     now += wait.as_micros() as u64;
///     waits.push(wait.as_micros());
/// }
/// assert_eq!(waits, [0, 1_375_000, 1_125_000, 875_000, 625_000, 500_000]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct SmoothWarmup {
    permits_per_second: f64,
    warmup_micros: i64,
    cold_factor: f64,
    stable_interval: f64,
    threshold_permits: f64,
    max_permits: f64,
    slope: f64,
}

impl SmoothWarmup {
    /// Guava's cold factor: a cold limiter's interval is three times the stable one.
    pub const DEFAULT_COLD_FACTOR: f64 = 3.0;

    /// `permits_per_second` (finite, above zero), warming up over `warmup` (at least a
    /// microsecond), starting `cold_factor` (finite, at least 1) times slower than stable.
    pub fn new(
        permits_per_second: f64,
        warmup: Duration,
        cold_factor: f64,
    ) -> Result<Self, ConfigError> {
        let permits_per_second = smooth::validate_rate(permits_per_second)?;
        // Guava's `create(double, Duration)`: saturated nanoseconds, then truncated to micros.
        let nanos = i64::try_from(warmup.as_nanos()).unwrap_or(i64::MAX);
        let warmup_micros = nanos / 1_000;
        if warmup_micros < 1 {
            return Err(ConfigError::invalid(
                "warmup",
                format!("{warmup:?}"),
                "must be at least 1µs",
            ));
        }
        if !(cold_factor.is_finite() && cold_factor >= 1.0) {
            return Err(ConfigError::invalid(
                "cold_factor",
                cold_factor,
                "must be a finite number, at least 1",
            ));
        }
        // Guava's SmoothWarmingUp.doSetRate, operation for operation.
        let stable_interval = smooth::stable_interval_micros(permits_per_second);
        let warmup = warmup_micros as f64;
        let cold_interval = stable_interval * cold_factor;
        let threshold_permits = 0.5 * warmup / stable_interval;
        let max_permits = threshold_permits + 2.0 * warmup / (stable_interval + cold_interval);
        let slope = (cold_interval - stable_interval) / (max_permits - threshold_permits);
        Ok(SmoothWarmup {
            permits_per_second,
            warmup_micros,
            cold_factor,
            stable_interval,
            threshold_permits,
            max_permits,
            slope,
        })
    }

    /// The same limiter at another rate, for [`Algorithm::carry_over`] (Guava's `setRate`).
    pub fn with_rate(&self, permits_per_second: f64) -> Result<Self, ConfigError> {
        Self::new(
            permits_per_second,
            Duration::from_micros(self.warmup_micros as u64),
            self.cold_factor,
        )
    }

    /// The stable rate, in permits per second.
    pub fn permits_per_second(&self) -> f64 {
        self.permits_per_second
    }

    /// The warm-up period, in whole microseconds (as Guava keeps it).
    pub fn warmup(&self) -> Duration {
        Duration::from_micros(self.warmup_micros as u64)
    }

    /// How many times slower than stable a cold limiter starts.
    pub fn cold_factor(&self) -> f64 {
        self.cold_factor
    }

    /// The most permits stored while idle (Guava's `maxPermits`): the fully cold level.
    pub fn max_permits(&self) -> f64 {
        self.max_permits
    }

    /// Guava's `permitsToTime`: the interval in force with `permits` stored above the threshold.
    #[inline]
    fn permits_to_time(&self, permits: f64) -> f64 {
        self.stable_interval + permits * self.slope
    }
}

impl SmoothCurve for SmoothWarmup {
    fn name(&self) -> &'static str {
        "smooth-warmup"
    }

    fn limit(&self) -> u64 {
        (self.permits_per_second.ceil() as u64).clamp(1, smooth::CAPACITY)
    }

    fn stable_interval(&self) -> f64 {
        self.stable_interval
    }

    fn max_permits(&self) -> f64 {
        self.max_permits
    }

    fn cool_down_interval(&self) -> f64 {
        self.warmup_micros as f64 / self.max_permits
    }

    /// The area under the interval curve between `stored - take` and `stored`: a trapezoid
    /// above the threshold, a rectangle at the stable interval below it.
    fn stored_permits_cost(&self, stored: f64, take: f64) -> i64 {
        let mut take = take;
        let above_threshold = stored - self.threshold_permits;
        let mut micros: i64 = 0;
        if above_threshold > 0.0 {
            let take_above = smooth::java_min(above_threshold, take);
            let length = self.permits_to_time(above_threshold)
                + self.permits_to_time(above_threshold - take_above);
            micros = (take_above * length / 2.0) as i64;
            take -= take_above;
        }
        micros.wrapping_add((self.stable_interval * take) as i64)
    }

    fn checks_passing_now(&self, _stored: f64) -> u64 {
        1
    }
}

impl Algorithm for SmoothWarmup {
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

    /// Guava's constructor and first `setRate`: fully cold.
    fn initial_state(&self, created_at: Micros) -> SmoothState {
        SmoothState::created(created_at, self.max_permits)
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

    /// Nothing reserved and fully cold again.
    fn is_fresh(&self, state: &SmoothState, now: Micros) -> bool {
        smooth::is_fresh(self, state, now)
    }

    /// Guava's `setRate`: resync under the old rate, then keep the stored share of the maximum
    /// (so a cold limiter stays cold).
    fn carry_over(&self, new: &Self, state: &mut SmoothState, now: Micros) {
        smooth::resync_at(self, state, now);
        let old_max = self.max_permits;
        state.stored_permits = if old_max == f64::INFINITY {
            0.0
        } else if old_max == 0.0 {
            new.max_permits
        } else {
            state.stored_permits * new.max_permits / old_max
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: NonZeroU64 = NonZeroU64::MIN;
    const FOUR_SECONDS: Duration = Duration::from_secs(4);

    fn invalid_name(result: Result<SmoothWarmup, ConfigError>) -> Option<&'static str> {
        match result {
            Err(ConfigError::InvalidParameter { name, .. }) => Some(name),
            _ => None,
        }
    }

    #[test]
    fn validates_every_parameter() {
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(
                invalid_name(SmoothWarmup::new(rate, FOUR_SECONDS, 3.0)),
                Some("rate")
            );
        }
        for warmup in [Duration::ZERO, Duration::from_nanos(999)] {
            assert_eq!(
                invalid_name(SmoothWarmup::new(1.0, warmup, 3.0)),
                Some("warmup")
            );
        }
        for cold in [0.5, -3.0, f64::NAN, f64::INFINITY] {
            assert_eq!(
                invalid_name(SmoothWarmup::new(1.0, FOUR_SECONDS, cold)),
                Some("cold_factor")
            );
        }
        let limiter = SmoothWarmup::new(1.0, Duration::from_nanos(1999), 1.0).expect("valid");
        assert_eq!(limiter.warmup(), Duration::from_micros(1));
    }

    #[test]
    fn starts_cold_and_cools_down_again() -> Result<(), CheckError> {
        // Guava's picture for rate 2, warm-up 4s, cold factor 3: threshold 4, maximum 8.
        let limiter =
            SmoothWarmup::new(2.0, FOUR_SECONDS, SmoothWarmup::DEFAULT_COLD_FACTOR).expect("valid");
        assert_eq!(limiter.max_permits(), 8.0);
        assert_eq!(Algorithm::limit(&limiter), 2);
        let mut state = limiter.initial_state(0);
        assert!(limiter.is_fresh(&state, 0));
        let first = limiter.decide(&mut state, 0, ONE, Op::Check)?;
        assert_eq!((first.allowed(), first.remaining()), (true, 0));
        assert!(!limiter.is_fresh(&state, 0));
        let denied = limiter.decide(&mut state, 0, ONE, Op::Check)?;
        assert_eq!(denied.retry_after(), Some(Duration::from_micros(1_375_000)));
        // The first permit is paid for at 1.375s; 0.5s later (warm-up / maximum, the idle
        // time per stored permit) it is stored again, and the limiter is as cold as new.
        assert_eq!(denied.reset_after(), Duration::from_micros(1_875_000));
        assert!(limiter.is_fresh(&state, 1_875_000));
        // A peek takes nothing: a request could pass right now.
        let later = limiter.decide(&mut state, 1_875_000, ONE, Op::Peek)?;
        assert_eq!((later.allowed(), later.remaining()), (true, 1));
        Ok(())
    }

    #[test]
    fn set_rate_keeps_a_cold_limiter_cold() {
        let slow = SmoothWarmup::new(2.0, FOUR_SECONDS, 3.0).expect("valid");
        let fast = slow.with_rate(4.0).expect("valid");
        let mut state = slow.initial_state(0);
        slow.carry_over(&fast, &mut state, 0);
        assert_eq!(state.stored_permits, fast.max_permits());
        assert!(fast.is_fresh(&state, 0));
    }
}
