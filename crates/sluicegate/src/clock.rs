//! Where "now" comes from. The algorithms never read time themselves: a limiter asks its
//! [`Clock`] and passes the answer in, so tests drive time by hand with a [`ManualClock`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

/// The real clock: monotonic and anchored to the Unix epoch once, at construction, so fixed
/// windows line up with other processes' windows while a wall-clock step never moves a limiter
/// backwards.
///
/// It counts on the CPU's time-stamp counter through [`quanta`] (as governor's default clock
/// does): a read costs about a third of an [`std::time::Instant::now`] (11 against 30 ns on
/// our test machines), which is most of a check's cost. Where the counter is not usable
/// (no invariant TSC), quanta falls back to the OS monotonic clock. The counter's calibration
/// to nanoseconds is done once per process.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    counter: &'static quanta::Clock,
    scale: CounterScale,
    anchor_raw: u64,
    anchor_unix: Micros,
}

/// The process's one calibrated counter, shared by every [`SystemClock`], with its scale.
static COUNTER: OnceLock<(quanta::Clock, CounterScale)> = OnceLock::new();

impl SystemClock {
    /// A clock reading the Unix time now and counting monotonically from there.
    pub fn new() -> Self {
        let (counter, scale) = COUNTER.get_or_init(|| {
            let counter = quanta::Clock::new();
            let scale = CounterScale::new(&counter);
            (counter, scale)
        });
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(micros_ceil)
            .unwrap_or(0);
        SystemClock {
            counter,
            scale: *scale,
            anchor_raw: counter.raw(),
            anchor_unix: unix,
        }
    }
}

/// Raw counter counts to microseconds in one multiply and shift,
/// `(counts * multiplier) >> (64 + shift)`: quanta's own scaling to nanoseconds (a multiply and
/// a shift) followed by a division by 1000 would cost two multiplies in a row on every check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CounterScale {
    multiplier: u64,
    shift: u32,
}

impl CounterScale {
    /// Counts in the sample that fixes the scale: 2^50 counts (days of TSC counts, weeks of
    /// nanoseconds) make quanta's rounding to whole nanoseconds negligible (2^-49 relative).
    const SAMPLE_BITS: u32 = 50;

    /// The scale of `counter`, taken from quanta's calibration of it: its nanoseconds for
    /// 2^50 counts, over 1000. A counter of at least one count per microsecond (a TSC, or
    /// quanta's fallback counting nanoseconds) gives a multiplier of at least 2^63, so the
    /// scale is exact to 2^-63 besides that calibration.
    fn new(counter: &quanta::Clock) -> CounterScale {
        let nanos = u128::from(counter.delta_as_nanos(0, 1 << Self::SAMPLE_BITS).max(1));
        // micros per count = nanos / (1000 * 2^50) = multiplier / 2^(64 + shift), so
        // multiplier = nanos * 2^(14 + shift) / 1000: the largest shift keeping it below 2^64.
        // Rounded up, as in exact division by a constant: a counter of nanoseconds then
        // gives exactly `counts / 1000` for any count below 2^63.
        let multiplier_at = |shift: u32| (nanos << (64 + shift - Self::SAMPLE_BITS)).div_ceil(1000);
        let mut shift = 0;
        while shift < 63
            && nanos.leading_zeros() > 64 + shift + 1 - Self::SAMPLE_BITS
            && multiplier_at(shift + 1) <= u128::from(u64::MAX)
        {
            shift += 1;
        }
        CounterScale {
            multiplier: u64::try_from(multiplier_at(shift)).unwrap_or(u64::MAX),
            shift,
        }
    }

    #[inline(always)]
    fn micros(&self, counts: u64) -> Micros {
        let high = (u128::from(counts) * u128::from(self.multiplier)) >> 64;
        (high as u64) >> self.shift
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    #[inline(always)]
    fn now(&self) -> Micros {
        // A reading behind the anchor (a counter a few cycles apart between cores) counts as
        // no time at all.
        let counts = self.counter.raw().saturating_sub(self.anchor_raw);
        // No overflow: a count lasts at most a nanosecond, so the microseconds since the
        // anchor stay below 2^64 / 1000, and the anchor is today's Unix time, about 2^51.
        self.anchor_unix + self.scale.micros(counts)
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
    fn system_clock_counts_real_time_in_microseconds() {
        // Not a timing assertion: only that the counter advances at least as fast as a sleep
        // (a clock counting nanoseconds fails the upper bound, one counting milliseconds the lower).
        let clock = SystemClock::new();
        let before = clock.now();
        std::thread::sleep(Duration::from_millis(20));
        let slept = clock.now() - before;
        assert!(slept >= 10_000, "{slept}µs for a 20ms sleep");
        assert!(slept < 86_400_000_000, "{slept}µs for a 20ms sleep");
        // It agrees with the wall clock it was anchored to, give or take a day.
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(micros_ceil)
            .unwrap_or(0);
        assert!(clock.now().abs_diff(unix) < 86_400_000_000);
    }

    #[test]
    fn counter_scale_agrees_with_quanta() {
        let counter = quanta::Clock::new();
        let scale = CounterScale::new(&counter);
        assert!(scale.multiplier >= 1 << 63, "{scale:?}");
        for counts in [
            0,
            1,
            999,
            1_000_000,
            2_450_000_000,
            1 << 40,
            1 << 50,
            1 << 60,
        ] {
            let quanta_micros = counter.delta_as_nanos(0, counts) / 1000;
            let ours = scale.micros(counts);
            assert!(
                ours.abs_diff(quanta_micros) <= 2,
                "{counts}: {ours} µs, quanta {quanta_micros}"
            );
        }
        // Monotonic, as any multiply and shift.
        assert!(scale.micros(u64::MAX) >= scale.micros(u64::MAX - 1));
    }

    #[test]
    fn counter_scale_of_a_nanosecond_counter_divides_by_1000() {
        let (mock_clock, _mock) = quanta::Clock::mock();
        let scale = CounterScale::new(&mock_clock);
        for counts in [0, 999, 1000, 1001, 123_456_789, 1 << 62, (1 << 63) - 1] {
            assert_eq!(scale.micros(counts), counts / 1000, "{counts}");
        }
    }

    #[test]
    fn micros_ceil_rounds_up() {
        assert_eq!(micros_ceil(Duration::from_nanos(1)), 1);
        assert_eq!(micros_ceil(Duration::from_nanos(1000)), 1);
        assert_eq!(micros_ceil(Duration::from_nanos(1001)), 2);
        assert_eq!(micros_ceil(Duration::MAX), u64::MAX);
    }
}
