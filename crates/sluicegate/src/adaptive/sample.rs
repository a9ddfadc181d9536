//! What every controller shares: the sample a finished request leaves, the [`Controller`]
//! interface, and the bounds a limit stays within.

use crate::clock::Micros;
use crate::error::ConfigError;

/// How a request that held a permit ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// It was answered: its latency says how loaded the service is.
    Ok,
    /// It failed in a way that signals overload (a rejection from downstream, however fast),
    /// or its permit was abandoned without being completed.
    Dropped,
    /// It took longer than its caller would wait.
    Timeout,
}

impl Outcome {
    /// Whether it is a loss, anything but [`Outcome::Ok`]. Every controller backs off on a
    /// drop, whatever its latency and the in-flight count, and none reads a drop's latency (a
    /// rejection that comes back in a millisecond says nothing about how fast the service
    /// answers). The loss-based rules (AIMD, Vegas) back off on a timeout too; the delay-based
    /// ones read its latency, a lower bound of the service's (a long tail times out at any
    /// load, and a back-off on each would starve the service).
    pub fn is_loss(self) -> bool {
        !matches!(self, Outcome::Ok)
    }
}

/// One finished request, as a controller sees it.
///
/// **Times.** `start` and the `now` given with the sample to
/// [`Controller::on_sample`] are microseconds on one monotonic clock whose origin may be
/// anything (a process's start, boot, the Unix epoch): controllers only ever compare and
/// subtract them, so the same samples shifted by any offset give the same limits.
///
/// **In flight.** `in_flight` tells a controller whether the limit was in use: each grows
/// only on samples with at least half the limit in flight (`2 * in_flight >= limit`; below
/// that the service was not tested, so a fast answer says nothing about a higher limit),
/// and none lets it stop a back-off on a loss. The count at the grant, counting the request
/// itself, is what [`AdaptiveLimiter`](crate::adaptive::AdaptiveLimiter) passes. A caller that
/// only sees requests finish may pass the count at completion instead, counting the one that
/// finished: under a steady load the two differ by the noise of arrivals, and either says
/// whether the limit was used. [`Sample::at_completion`] builds such a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// When the request got its permit (any monotonic origin, the same as `now`'s).
    pub start: Micros,
    /// How long it held the permit (round-trip time). Never read from a drop.
    pub rtt: Micros,
    /// Permits in flight when it got its own, counting itself (or at its completion, counting
    /// itself: see above).
    pub in_flight: u32,
    /// How it ended.
    pub outcome: Outcome,
}

impl Sample {
    /// A request answered after `rtt`.
    pub fn ok(start: Micros, rtt: Micros, in_flight: u32) -> Sample {
        Sample {
            start,
            rtt,
            in_flight,
            outcome: Outcome::Ok,
        }
    }

    /// A request dropped (or abandoned) after `rtt`.
    pub fn dropped(start: Micros, rtt: Micros, in_flight: u32) -> Sample {
        Sample {
            outcome: Outcome::Dropped,
            ..Sample::ok(start, rtt, in_flight)
        }
    }

    /// A request given up on after `rtt`.
    pub fn timeout(start: Micros, rtt: Micros, in_flight: u32) -> Sample {
        Sample {
            outcome: Outcome::Timeout,
            ..Sample::ok(start, rtt, in_flight)
        }
    }

    /// A request that ended at `end` with `outcome` after `rtt`, with `in_flight` permits held
    /// when it ended, itself included: for callers that see only completions (the start is
    /// `end - rtt`).
    pub fn at_completion(end: Micros, rtt: Micros, in_flight: u32, outcome: Outcome) -> Sample {
        Sample {
            start: end.saturating_sub(rtt),
            rtt,
            in_flight,
            outcome,
        }
    }

    /// Whether the request found the limit in use: at least half of `limit` in flight.
    pub(crate) fn used(&self, limit: f64) -> bool {
        2.0 * f64::from(self.in_flight) >= limit
    }

    /// The round-trip time as a float, at least one microsecond: the delay rules divide by it,
    /// and a zero (a clock too coarse to see the request) must not make their ratios infinite.
    pub(crate) fn rtt_f64(&self) -> f64 {
        self.rtt.max(1) as f64
    }
}

/// A rule that turns latency samples into a concurrency limit: a pure state machine, fed the
/// time with each sample instead of reading a clock, so the same samples always give the same
/// limits.
///
/// The limit it returns always lies within the bounds it was built with, whatever the samples:
/// zero or huge latencies and times that go backwards included. Every controller here also
/// keeps two promises whatever state it is in: under sustained fast answers with the limit in
/// use it climbs to its maximum, and under sustained losses it falls to its minimum (no limit
/// is a trap it cannot leave).
pub trait Controller: Send {
    /// Takes the sample of a request that finished at `now` (microseconds on the same
    /// monotonic clock as [`Sample::start`], any origin); returns the limit from now on.
    fn on_sample(&mut self, now: Micros, sample: Sample) -> u32;

    /// The current limit.
    fn limit(&self) -> u32;
}

impl<C: Controller + ?Sized> Controller for Box<C> {
    fn on_sample(&mut self, now: Micros, sample: Sample) -> u32 {
        (**self).on_sample(now, sample)
    }

    fn limit(&self) -> u32 {
        (**self).limit()
    }
}

/// The lowest, first and highest limit a controller may set, checked when it is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitBounds {
    min: u32,
    initial: u32,
    max: u32,
}

impl LimitBounds {
    /// `min <= initial <= max`, and `min` at least 1: a limit of 0 admits nothing, so no sample
    /// would ever come to raise it.
    pub fn new(min: u32, initial: u32, max: u32) -> Result<LimitBounds, ConfigError> {
        if min == 0 {
            return Err(ConfigError::invalid(
                "min_limit",
                min,
                "must be at least 1: a limit of 0 admits nothing, so no sample could raise it",
            ));
        }
        check_order("min_limit", min.into(), "max_limit", max.into())?;
        check_order("min_limit", min.into(), "initial_limit", initial.into())?;
        check_order("initial_limit", initial.into(), "max_limit", max.into())?;
        Ok(LimitBounds { min, initial, max })
    }

    /// Bounds known to be valid (the controllers' published defaults).
    pub(crate) const fn known(min: u32, initial: u32, max: u32) -> LimitBounds {
        LimitBounds { min, initial, max }
    }

    /// The lowest limit.
    pub fn min(&self) -> u32 {
        self.min
    }

    /// The limit before any sample.
    pub fn initial(&self) -> u32 {
        self.initial
    }

    /// The highest limit.
    pub fn max(&self) -> u32 {
        self.max
    }

    /// `limit` within the bounds; NaN (which no rule should make) counts as the minimum.
    pub(crate) fn clamp_f64(&self, limit: f64) -> f64 {
        if limit.is_nan() {
            return f64::from(self.min);
        }
        limit.clamp(f64::from(self.min), f64::from(self.max))
    }

    /// `limit` within the bounds.
    pub(crate) fn clamp(&self, limit: u64) -> u32 {
        let clamped = limit.clamp(u64::from(self.min), u64::from(self.max));
        u32::try_from(clamped).unwrap_or(self.max)
    }
}

/// One back-off per round trip: a loss cuts the limit unless its request started before the
/// latest cut. Such a request was admitted under the limit that cut already answered, so
/// counting it again would shrink the limit once per request of one burst of rejections
/// instead of once per burst (TCP NewReno's rule).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LossGate {
    last_cut: Option<Micros>,
}

impl LossGate {
    /// Whether the loss of `sample`, heard at `now`, cuts the limit (and records the cut).
    pub(crate) fn cuts(&mut self, now: Micros, sample: &Sample) -> bool {
        // A clock that went back past the latest cut cannot order the two: cut again.
        let answered = self
            .last_cut
            .is_some_and(|cut| cut <= now && sample.start < cut);
        if !answered {
            self.last_cut = Some(now);
        }
        !answered
    }
}

/// What the limit is multiplied by on a loss, unless told otherwise: AIMD's 0.9, gentle
/// enough that a random failure now and then costs a tenth of the limit, not half of it.
pub(crate) const DEFAULT_BACKOFF: f64 = 0.9;

/// `ratio` as a back-off ratio: in `[0.5, 1)`.
pub(crate) fn check_backoff(ratio: f64) -> Result<(), ConfigError> {
    if !(ratio.is_finite() && (0.5..1.0).contains(&ratio)) {
        return Err(ConfigError::invalid(
            "backoff_ratio",
            ratio,
            "must be in [0.5, 1)",
        ));
    }
    Ok(())
}

/// The whole part of a limit kept as a float (already within bounds, so it fits).
pub(crate) fn whole(limit: f64) -> u32 {
    // A limit a rounding error short of a whole number is that number: blends of a bound with
    // itself land one ulp under it (23 and 23 to 22.999...), which would truncate to 22.
    let nearest = limit.round();
    let limit = if (limit - nearest).abs() <= 1e-9 {
        nearest
    } else {
        limit
    };
    // `as` saturates and maps NaN to 0; the estimates are clamped before they get here.
    limit as u32
}

/// `low <= high`, or an error naming both.
pub(crate) fn check_order(
    low_name: &'static str,
    low: u64,
    high_name: &'static str,
    high: u64,
) -> Result<(), ConfigError> {
    if low > high {
        return Err(ConfigError::OutOfOrder {
            low_name,
            low,
            high_name,
            high,
        });
    }
    Ok(())
}

/// A fraction in `(low, high]` (or `[low, high]` when `low_inclusive`), finite.
pub(crate) fn check_fraction(
    name: &'static str,
    value: f64,
    low: f64,
    low_inclusive: bool,
    high: f64,
) -> Result<(), ConfigError> {
    let above_low = if low_inclusive {
        value >= low
    } else {
        value > low
    };
    if !(value.is_finite() && above_low && value <= high) {
        let open = if low_inclusive { '[' } else { '(' };
        return Err(ConfigError::invalid(
            name,
            value,
            format!("must be in {open}{low}, {high}]"),
        ));
    }
    Ok(())
}

/// A duration of at least one microsecond, in microseconds.
pub(crate) fn positive_micros(
    name: &'static str,
    duration: std::time::Duration,
) -> Result<Micros, ConfigError> {
    if duration.is_zero() {
        return Err(ConfigError::invalid(
            name,
            format!("{duration:?}"),
            "must be positive",
        ));
    }
    Ok(crate::clock::micros_ceil(duration))
}

/// Builder methods for the three limit bounds, checked together by `build`.
macro_rules! limit_setters {
    () => {
        /// The lowest limit the controller may set (at least 1).
        pub fn min_limit(mut self, min: u32) -> Self {
            self.min = min;
            self
        }

        /// The limit before any sample (within `[min_limit, max_limit]`).
        pub fn initial_limit(mut self, initial: u32) -> Self {
            self.initial = initial;
            self
        }

        /// The highest limit the controller may set.
        pub fn max_limit(mut self, max: u32) -> Self {
            self.max = max;
            self
        }
    };
}
pub(crate) use limit_setters;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_a_rounding_error_short_of_a_whole_number_is_that_number() {
        let blended = (1.0 - 0.2753312099727238) * 23.0 + 0.2753312099727238 * 23.0;
        assert_eq!(whole(blended), 23);
        assert_eq!(whole(22.999_999_999_999_996), 23);
        assert_eq!(whole(22.5), 22);
        assert_eq!(whole(22.999), 22);
        assert_eq!(whole(f64::NAN), 0);
    }

    #[test]
    fn bounds_are_checked() {
        assert!(LimitBounds::new(1, 1, 1).is_ok());
        assert!(matches!(
            LimitBounds::new(0, 1, 2),
            Err(ConfigError::InvalidParameter {
                name: "min_limit",
                ..
            })
        ));
        assert_eq!(
            LimitBounds::new(5, 5, 4),
            Err(ConfigError::OutOfOrder {
                low_name: "min_limit",
                low: 5,
                high_name: "max_limit",
                high: 4
            })
        );
        assert!(matches!(
            LimitBounds::new(5, 4, 10),
            Err(ConfigError::OutOfOrder {
                high_name: "initial_limit",
                ..
            })
        ));
        let err = LimitBounds::new(5, 11, 10).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("initial_limit (11) must not exceed max_limit (10)")
        );
    }

    #[test]
    fn clamps_nan_and_extremes() -> Result<(), ConfigError> {
        let b = LimitBounds::new(2, 3, 9)?;
        assert_eq!(b.clamp_f64(f64::NAN), 2.0);
        assert_eq!(b.clamp_f64(f64::INFINITY), 9.0);
        assert_eq!(b.clamp_f64(-1.0), 2.0);
        assert_eq!(b.clamp(u64::MAX), 9);
        assert_eq!(b.clamp(0), 2);
        Ok(())
    }
}
