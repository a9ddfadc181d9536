//! `acquire`, `try_acquire_for` and Guava's plain `try_acquire` on direct and keyed limiters.

use std::hash::Hash;
use std::num::NonZeroU64;
use std::time::Duration;

use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::CheckError;
#[cfg(feature = "tokio")]
use crate::limiter::acquire::acquire_async;
use crate::limiter::acquire::acquire_blocking;
use crate::limiter::{DirectLimiter, KeyedLimiter};
use crate::state_machine::Algorithm;

impl<A: Algorithm, C: Clock> DirectLimiter<A, C> {
    /// Takes `permits`, blocking as long as it takes (Guava's `acquire`). The decision's `wait`
    /// is how long this call slept for a reservation.
    ///
    /// ```
    /// use sluicegate::{Clock, DirectLimiter, Gcra, ManualClock, Rate};
    /// use std::num::NonZeroU64;
    ///
    /// let clock = ManualClock::new(0);
    /// let limiter = DirectLimiter::with_clock(Gcra::new(Rate::per_second(5)?, 1)?, clock.clone());
    /// let one = NonZeroU64::MIN;
    /// assert_eq!(limiter.acquire(one)?.wait().as_micros(), 0);
    /// assert_eq!(limiter.acquire(one)?.wait().as_micros(), 200_000);
    /// assert_eq!(clock.now(), 200_000); // the manual clock "slept"
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire(&self, permits: NonZeroU64) -> Result<Decision, CheckError> {
        acquire_blocking(self.clock(), |op| self.decide(permits, op), None)
    }

    /// Takes `permits` if that is possible within `timeout`, blocking for the wait; otherwise
    /// returns at once with a denial and takes nothing (Guava's `tryAcquire(n, timeout)`).
    pub fn try_acquire_for(
        &self,
        permits: NonZeroU64,
        timeout: Duration,
    ) -> Result<Decision, CheckError> {
        acquire_blocking(self.clock(), |op| self.decide(permits, op), Some(timeout))
    }

    /// Takes one permit if it can be had now, without waiting (Guava's `tryAcquire()`): the
    /// same as [`try_acquire_for`](Self::try_acquire_for) one permit with no timeout, as a
    /// yes or no. An error (one permit more than the limiter can ever grant) is a no; ask
    /// [`check`](Self::check) for the reason.
    ///
    /// ```
    /// use sluicegate::{DirectLimiter, ManualClock, SmoothBursty};
    ///
    /// let limiter = DirectLimiter::with_clock(SmoothBursty::per_second(1.0)?, ManualClock::new(0));
    /// assert!(limiter.try_acquire());
    /// assert!(!limiter.try_acquire());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_acquire(&self) -> bool {
        self.try_acquire_for(NonZeroU64::MIN, Duration::ZERO)
            .is_ok_and(|decision| decision.allowed())
    }

    /// The async form of [`acquire`](Self::acquire), sleeping on tokio's timer.
    #[cfg(feature = "tokio")]
    pub async fn acquire_async(&self, permits: NonZeroU64) -> Result<Decision, CheckError> {
        acquire_async(self.clock(), |op| self.decide(permits, op), None).await
    }

    /// The async form of [`try_acquire_for`](Self::try_acquire_for).
    #[cfg(feature = "tokio")]
    pub async fn try_acquire_for_async(
        &self,
        permits: NonZeroU64,
        timeout: Duration,
    ) -> Result<Decision, CheckError> {
        acquire_async(self.clock(), |op| self.decide(permits, op), Some(timeout)).await
    }
}

impl<K: Hash + Eq + Clone, A: Algorithm, C: Clock> KeyedLimiter<K, A, C> {
    /// Takes `permits` for `key`, blocking as long as it takes.
    pub fn acquire(&self, key: &K, permits: NonZeroU64) -> Result<Decision, CheckError> {
        acquire_blocking(self.clock(), |op| self.decide(key, permits, op), None)
    }

    /// Takes one permit for `key` if it can be had now, without waiting (Guava's
    /// `tryAcquire()`), as a yes or no; an error (a full key table, say) is a no.
    pub fn try_acquire(&self, key: &K) -> bool {
        self.try_acquire_for(key, NonZeroU64::MIN, Duration::ZERO)
            .is_ok_and(|decision| decision.allowed())
    }

    /// Takes `permits` for `key` if possible within `timeout`; otherwise takes nothing.
    pub fn try_acquire_for(
        &self,
        key: &K,
        permits: NonZeroU64,
        timeout: Duration,
    ) -> Result<Decision, CheckError> {
        acquire_blocking(
            self.clock(),
            |op| self.decide(key, permits, op),
            Some(timeout),
        )
    }

    /// The async form of [`acquire`](Self::acquire).
    #[cfg(feature = "tokio")]
    pub async fn acquire_async(
        &self,
        key: &K,
        permits: NonZeroU64,
    ) -> Result<Decision, CheckError> {
        acquire_async(self.clock(), |op| self.decide(key, permits, op), None).await
    }

    /// The async form of [`try_acquire_for`](Self::try_acquire_for).
    #[cfg(feature = "tokio")]
    pub async fn try_acquire_for_async(
        &self,
        key: &K,
        permits: NonZeroU64,
        timeout: Duration,
    ) -> Result<Decision, CheckError> {
        acquire_async(
            self.clock(),
            |op| self.decide(key, permits, op),
            Some(timeout),
        )
        .await
    }
}
