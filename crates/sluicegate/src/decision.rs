//! The one answer shape every limiter gives.

use std::fmt;
use std::time::Duration;

use crate::clock::Micros;

/// The outcome of asking a limiter for permits.
///
/// Times are exact to the microsecond and rounded up, so a caller that waits
/// [`retry_after`](Decision::retry_after) and asks again is not turned away for a rounding
/// error. They are kept as whole microseconds, the unit every algorithm counts in, and read
/// either as [`Duration`]s or as [`Micros`]: a check does no conversion its caller does not ask
/// for.
///
/// ```
/// use sluicegate::{Decision, Gcra, DirectLimiter, ManualClock, Rate};
/// use std::time::Duration;
///
/// let limiter = DirectLimiter::with_clock(Gcra::new(Rate::per_second(10)?, 1)?, ManualClock::new(0));
/// assert!(limiter.check()?.allowed());
/// let denied: Decision = limiter.check()?;
/// assert!(!denied.allowed());
/// assert_eq!(denied.retry_after(), Some(Duration::from_millis(100)));
/// assert_eq!(denied.retry_after_micros(), Some(100_000));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "a decision says whether the request may pass: check `allowed()`"]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    allowed: bool,
    /// Whether `retry_after_us` holds a time (kept beside `allowed` rather than as an
    /// `Option<u64>`, which would add a padded word to every answer).
    retry_known: bool,
    limit: u64,
    remaining: u64,
    reset_after_us: Micros,
    retry_after_us: Micros,
    wait_us: Micros,
}

impl Decision {
    /// An allowed decision with no wait: `limit` and `remaining` in permits, `reset_after` in
    /// microseconds.
    #[inline]
    pub fn allow(limit: u64, remaining: u64, reset_after: Micros) -> Decision {
        Decision {
            allowed: true,
            retry_known: false,
            limit,
            remaining,
            reset_after_us: reset_after,
            retry_after_us: 0,
            wait_us: 0,
        }
    }

    /// A denied decision; `retry_after` (microseconds) is `None` when no time can be told, as
    /// for a concurrency limit, which frees permits only when a holder releases them.
    #[inline]
    pub fn deny(
        limit: u64,
        remaining: u64,
        reset_after: Micros,
        retry_after: Option<Micros>,
    ) -> Decision {
        Decision {
            allowed: false,
            retry_known: retry_after.is_some(),
            limit,
            remaining,
            reset_after_us: reset_after,
            retry_after_us: retry_after.unwrap_or(0),
            wait_us: 0,
        }
    }

    /// The same decision reporting `remaining` permits instead.
    #[inline]
    pub(crate) fn with_remaining(mut self, remaining: u64) -> Decision {
        self.remaining = remaining;
        self
    }

    /// The same decision with a shaping wait, in microseconds.
    #[inline]
    pub fn with_wait(mut self, wait: Micros) -> Decision {
        self.wait_us = wait;
        self
    }

    /// The permits were granted (and consumed, unless the request was a peek).
    #[inline]
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// The quota's size: permits per period, or the burst size.
    #[inline]
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Permits a single request could be granted right now, after this decision took effect:
    /// for a grant, what is left after it; for a peek or a denial, which take nothing, what is
    /// available now (as for a limit left uncharged because another limit of the same request
    /// denied).
    #[inline]
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// Time until the state is back to fresh (a full bucket, an empty window).
    #[inline]
    pub fn reset_after(&self) -> Duration {
        Duration::from_micros(self.reset_after_us)
    }

    /// [`reset_after`](Decision::reset_after) in microseconds.
    #[inline]
    pub fn reset_after_micros(&self) -> Micros {
        self.reset_after_us
    }

    /// When denied: the earliest time after which the same request could pass, if one can be
    /// told. `None` when allowed.
    #[inline]
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after_micros().map(Duration::from_micros)
    }

    /// [`retry_after`](Decision::retry_after) in microseconds.
    #[inline]
    pub fn retry_after_micros(&self) -> Option<Micros> {
        self.retry_known.then_some(self.retry_after_us)
    }

    /// For reserving and shaping algorithms: how long the caller must wait before proceeding.
    #[inline]
    pub fn wait(&self) -> Duration {
        Duration::from_micros(self.wait_us)
    }

    /// [`wait`](Decision::wait) in microseconds.
    #[inline]
    pub fn wait_micros(&self) -> Micros {
        self.wait_us
    }
}

impl fmt::Debug for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decision")
            .field("allowed", &self.allowed)
            .field("limit", &self.limit)
            .field("remaining", &self.remaining)
            .field("reset_after", &self.reset_after())
            .field("retry_after", &self.retry_after())
            .field("wait", &self.wait())
            .finish()
    }
}

/// The answer of [`Algorithm::admit`](crate::Algorithm::admit): a request that passes at
/// once, told without the numbers a [`Decision`] carries, or the whole decision.
///
/// A middleware's allowed path reads nothing but "it passes": the bucket algorithms skip
/// computing `remaining` and `reset_after` for it (two divisions).
///
/// ```
/// use std::num::NonZeroU64;
/// use sluicegate::{Admission, Algorithm, Gcra, Rate};
/// use sluicegate::state_machine::Op;
///
/// let gcra = Gcra::new(Rate::per_second(10)?, 1)?;
/// let mut state = gcra.initial_state(0);
/// let one = NonZeroU64::MIN;
/// assert_eq!(gcra.admit(&mut state, 0, one, Op::Check)?, Admission::Passed);
/// let Admission::Decided(denied) = gcra.admit(&mut state, 0, one, Op::Check)? else {
///     panic!("the bucket is empty");
/// };
/// assert_eq!(denied.retry_after_micros(), Some(100_000));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "an admission says whether the request may pass: check `passed()`"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Allowed with no wait, the permits taken.
    Passed,
    /// Any other answer, in full; also an allowed one the algorithm did not shorten.
    Decided(Decision),
}

impl Admission {
    /// Whether the request passes at once: allowed, with no shaping wait.
    #[inline]
    pub fn passed(&self) -> bool {
        match self {
            Admission::Passed => true,
            Admission::Decided(decision) => decision.allowed() && decision.wait_micros() == 0,
        }
    }

    /// Whether the permits were granted (at once, or after a wait).
    #[inline]
    pub fn allowed(&self) -> bool {
        match self {
            Admission::Passed => true,
            Admission::Decided(decision) => decision.allowed(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_what_it_was_built_with() {
        let allowed = Decision::allow(10, 7, 300_000).with_wait(1_500);
        assert!(allowed.allowed());
        assert_eq!((allowed.limit(), allowed.remaining()), (10, 7));
        assert_eq!(allowed.reset_after(), Duration::from_millis(300));
        assert_eq!(allowed.retry_after(), None);
        assert_eq!(allowed.wait(), Duration::from_micros(1_500));

        let denied = Decision::deny(10, 0, 1_000_000, Some(0));
        assert!(!denied.allowed());
        assert_eq!(denied.retry_after(), Some(Duration::ZERO));
        assert_eq!(Decision::deny(3, 0, 0, None).retry_after_micros(), None);
        assert_eq!(
            format!("{denied:?}"),
            "Decision { allowed: false, limit: 10, remaining: 0, reset_after: 1s, \
             retry_after: Some(0ns), wait: 0ns }"
        );
    }
}
