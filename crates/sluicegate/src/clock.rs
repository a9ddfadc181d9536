//! Where "now" comes from. The algorithms never read time themselves: a limiter asks its
//! [`Clock`] and passes the answer in, so tests drive time by hand with a [`ManualClock`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Microseconds on a clock's timeline: since the Unix epoch for [`SystemClock`], since zero for
/// [`ManualClock`]. Every algorithm keeps its times in this unit, in memory and in Redis alike.
pub type Micros = u64;

/// The smallest whole number of microseconds that is at least `duration` (so a wait is never
/// reported shorter than it is); saturates at `u64::MAX`.
pub fn micros_ceil(duration: Duration) -> Micros {
    let micros = duration.as_nanos().div_ceil(1_000);
    u64::try_from(micros).unwrap_or(u64::MAX)
}

/// A source of the current time, in microseconds.
pub trait Clock: Send + Sync {
    /// The current time. Never goes backwards.
    fn now(&self) -> Micros;

    /// Blocks the calling thread for `duration`. A manual clock advances itself instead, so a
    /// blocking `acquire` under test returns at once with the clock moved on, as Guava's tests
    /// do with their fake stopwatch.
    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }

    /// Whether [`Clock::sleep`] really waits (false for a manual clock, whose sleeps only move
    /// time on); async acquire uses it to choose between tokio's timer and advancing the clock.
    fn sleeps_for_real(&self) -> bool {
        true
    }
}

/// The real clock: monotonic (an [`Instant`] underneath) and anchored to the Unix epoch once, at
/// construction, so fixed windows line up with other processes' windows while a wall-clock
/// step never moves a limiter backwards.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    anchor: Instant,
    anchor_unix: Micros,
}

impl SystemClock {
    /// A clock reading the Unix time now and counting monotonically from there.
    pub fn new() -> Self {
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(micros_ceil)
            .unwrap_or(0);
        SystemClock {
            anchor: Instant::now(),
            anchor_unix: unix,
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> Micros {
        // Whole seconds and sub-second micros in u64 arithmetic: cheaper than `as_micros`'s
        // u128, and a u64 of microseconds outlasts any process.
        let elapsed = Instant::now().saturating_duration_since(self.anchor);
        let micros = elapsed
            .as_secs()
            .saturating_mul(1_000_000)
            .saturating_add(u64::from(elapsed.subsec_micros()));
        self.anchor_unix.saturating_add(micros)
    }
}

/// A clock that moves only when told to. Clones share the same time.
///
/// ```
/// use sluicegate::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new(0);
/// clock.advance(Duration::from_millis(1500));
/// assert_eq!(clock.now(), 1_500_000);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock that reads `start` microseconds until moved.
    pub fn new(start: Micros) -> Self {
        ManualClock {
            now: Arc::new(AtomicU64::new(start)),
        }
    }

    /// Moves the clock forward by `duration` (rounded up to a microsecond).
    pub fn advance(&self, duration: Duration) {
        self.advance_micros(micros_ceil(duration));
    }

    /// Moves the clock forward by `micros`.
    pub fn advance_micros(&self, micros: Micros) {
        let _ = self
            .now
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some(t.saturating_add(micros))
            });
    }

    /// Sets the time; a time earlier than the current one is ignored, since clocks never go back.
    pub fn set(&self, now: Micros) {
        self.now.fetch_max(now, Ordering::AcqRel);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Micros {
        self.now.load(Ordering::Acquire)
    }

    fn sleep(&self, duration: Duration) {
        self.advance(duration);
    }

    fn sleeps_for_real(&self) -> bool {
        false
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Micros {
        (**self).now()
    }
    fn sleep(&self, duration: Duration) {
        (**self).sleep(duration);
    }
    fn sleeps_for_real(&self) -> bool {
        (**self).sleeps_for_real()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_never_goes_back() {
        let clock = ManualClock::new(10);
        clock.set(5);
        assert_eq!(clock.now(), 10);
        clock.set(20);
        clock.sleep(Duration::from_micros(3));
        assert_eq!(clock.now(), 23);
    }

    #[test]
    fn system_clock_is_unix_anchored_and_monotonic() {
        let clock = SystemClock::new();
        let a = clock.now();
        let b = clock.now();
        assert!(b >= a);
        // 2020-01-01 in Unix microseconds: the anchor is the real date, not zero.
        assert!(a > 1_577_836_800_000_000);
    }

    #[test]
    fn micros_ceil_rounds_up() {
        assert_eq!(micros_ceil(Duration::from_nanos(1)), 1);
        assert_eq!(micros_ceil(Duration::from_nanos(1000)), 1);
        assert_eq!(micros_ceil(Duration::from_nanos(1001)), 2);
        assert_eq!(micros_ceil(Duration::MAX), u64::MAX);
    }
}
