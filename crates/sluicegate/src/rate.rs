//! Rates ("10 permits per second") kept as exact fractions, and their text forms.
//!
//! A rate of `permits` per `period` has an emission interval of `period / permits`
//! microseconds, which rarely divides evenly (3/s is 333 333.3 µs). Rather than round every
//! step, the algorithms count time in *ticks* of `1 / ticks_per_micro` microseconds, in which
//! the interval is a whole number. Rates whose reduced denominator exceeds
//! [`MAX_TICKS_PER_MICRO`] have their interval rounded *up* to the next tick, so the limiter
//! errs towards granting less, never more; every rate written with up to three significant
//! digits per second, minute, hour or day is exact. A rate that this rounding would slow down
//! by more than 0.1% is refused when it is built (only rates above about a million per second
//! can be, and only those that do not divide evenly: 1 500 000 000/s would run at 1.024 * 10^9/s).

use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;
use std::time::Duration;

use crate::clock::Micros;
use crate::error::ConfigError;

/// The finest tick: `1 / MAX_TICKS_PER_MICRO` of a microsecond. Chosen so that times in ticks
/// since the Unix epoch fit a `u64` for centuries: the bucket algorithms keep a quarter of the
/// range for their bucket and reservations, leaving `(2^64 - 2^62) / 1024` µs, about 428 years
/// (Unix time in the year 2398), after which their time stands still (see
/// [`TokenBucket`](crate::TokenBucket)).
pub const MAX_TICKS_PER_MICRO: u64 = 1024;

/// The most a rate may be slowed down by rounding its interval up to a whole tick, in
/// thousandths.
const MAX_ROUNDING_PER_MILLE: u128 = 1;

const MICROS_PER_SECOND: u64 = 1_000_000;

/// Permits per period, exactly.
///
/// ```
/// use sluicegate::Rate;
/// use std::time::Duration;
///
/// let rate: Rate = "100/1m".parse()?;
/// assert_eq!(rate.permits(), 100);
/// assert_eq!(rate.period(), Duration::from_secs(60));
/// let half: Rate = "0.5/s".parse()?; // one permit every two seconds
/// assert_eq!((half.permits(), half.period()), (1, Duration::from_secs(2)));
/// # Ok::<(), sluicegate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    permits: NonZeroU64,
    period_us: NonZeroU64,
}

impl Rate {
    /// `permits` per `period`. Both must be non-zero, and the period a whole number of
    /// microseconds of at most about 292 000 years. A rate whose interval, rounded up to the
    /// finest tick (1/1024 µs), would be more than 0.1% slower than asked is refused, naming
    /// `rate`: `Rate::per_second(1_500_000_000)` would run at 1.024 * 10^9 per second. Up to a
    /// million per second every rate is accepted, and above it every rate whose interval is a
    /// whole number of ticks (10^9/s is 1/1000 µs).
    pub fn new(permits: u64, period: Duration) -> Result<Rate, ConfigError> {
        let permits = NonZeroU64::new(permits)
            .ok_or_else(|| ConfigError::invalid("rate", permits, "must allow at least 1 permit"))?;
        let period_us = u64::try_from(period.as_micros())
            .ok()
            .and_then(NonZeroU64::new)
            .ok_or_else(|| {
                ConfigError::invalid("period", format!("{period:?}"), "must be at least 1µs")
            })?;
        let rate = Rate { permits, period_us };
        if let Some(rounded) = rounded_interval(permits.get(), period_us.get()) {
            // The rate slows by (rounded - exact) / rounded, with exact = period * 1024 / permits.
            let rounded = u128::from(rounded) * u128::from(permits.get());
            let exact = u128::from(period_us.get()) * u128::from(MAX_TICKS_PER_MICRO);
            if (rounded - exact) * 1000 > rounded * MAX_ROUNDING_PER_MILLE {
                let permits_per_second = rate.per_second_f64();
                return Err(ConfigError::invalid(
                    "rate",
                    rate,
                    format!(
                        "{permits_per_second:.0}/s is too fast to count exactly: rounding its \
                         interval up to 1/{MAX_TICKS_PER_MICRO}µs would slow it by more than 0.1%"
                    ),
                ));
            }
        }
        Ok(rate)
    }

    /// `permits` per second.
    pub fn per_second(permits: u64) -> Result<Rate, ConfigError> {
        Rate::new(permits, Duration::from_secs(1))
    }

    /// `permits` per minute.
    pub fn per_minute(permits: u64) -> Result<Rate, ConfigError> {
        Rate::new(permits, Duration::from_secs(60))
    }

    /// `permits` per hour.
    pub fn per_hour(permits: u64) -> Result<Rate, ConfigError> {
        Rate::new(permits, Duration::from_secs(3600))
    }

    /// Permits per period.
    pub fn permits(&self) -> u64 {
        self.permits.get()
    }

    /// The period.
    pub fn period(&self) -> Duration {
        Duration::from_micros(self.period_us.get())
    }

    /// The period in microseconds.
    pub fn period_micros(&self) -> Micros {
        self.period_us.get()
    }

    /// Permits per second as a float, for display and for Guava-style limiters.
    pub fn per_second_f64(&self) -> f64 {
        self.permits.get() as f64 * MICROS_PER_SECOND as f64 / self.period_us.get() as f64
    }

    /// The emission interval in exact ticks.
    pub fn pace(&self) -> TickInterval {
        let (permits, period) = (self.permits.get(), self.period_us.get());
        let g = gcd(permits, period);
        let (mut ticks_per_micro, mut interval) = (permits / g, period / g);
        if let Some(rounded) = rounded_interval(permits, period) {
            interval = rounded;
            ticks_per_micro = MAX_TICKS_PER_MICRO;
            let g = gcd(ticks_per_micro, interval);
            (ticks_per_micro, interval) = (ticks_per_micro / g, interval / g);
        }
        TickInterval {
            ticks_per_micro,
            interval,
        }
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}",
            self.permits,
            format_duration_micros(self.period_us.get())
        )
    }
}

impl FromStr for Rate {
    type Err = ConfigError;

    /// `N/UNIT` or `N/DURATION`: `10/s`, `100/1m`, `5/30s`, `0.5/s`, `3600/h`, `1000/day`.
    fn from_str(text: &str) -> Result<Rate, ConfigError> {
        let syntax = |reason: &str| ConfigError::Syntax {
            what: "rate",
            text: text.to_owned(),
            reason: reason.to_owned(),
        };
        let (count, per) = text
            .trim()
            .split_once('/')
            .ok_or_else(|| syntax("expected PERMITS/PERIOD, such as 10/s or 100/1m"))?;
        let count = Decimal::parse(count.trim()).map_err(|reason| syntax(&reason))?;
        let per = per.trim();
        let starts_with_digit = per.starts_with(|c: char| c.is_ascii_digit() || c == '.');
        let period = if starts_with_digit {
            parse_duration(per)?
        } else {
            let unit = unit_micros(per).ok_or_else(|| syntax("unknown time unit"))?;
            Duration::from_micros(unit)
        };
        let period_us = period.as_micros();
        // count = mantissa / 10^scale permits per period = mantissa per (period * 10^scale).
        let scaled_period = period_us
            .checked_mul(10u128.pow(count.scale))
            .and_then(|p| u64::try_from(p).ok())
            .ok_or_else(|| syntax("too many decimals for this period"))?;
        // Undo only the scaling the decimals introduced: `10/s` stays ten per second (a window
        // of 10 is not a window of 1 per 100ms), `1.5/s` becomes three per two seconds.
        let g = gcd(count.mantissa, 10u64.pow(count.scale)).max(1);
        Rate::new(count.mantissa / g, Duration::from_micros(scaled_period / g))
    }
}

/// A rate's emission interval counted in ticks of `1 / ticks_per_micro` µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TickInterval {
    /// Ticks per microsecond (the reduced denominator of the interval, at most
    /// [`MAX_TICKS_PER_MICRO`]).
    pub ticks_per_micro: u64,
    /// Ticks between two permits.
    pub interval: u64,
}

impl TickInterval {
    /// `micros` as ticks (saturating).
    #[inline]
    pub fn to_ticks(&self, micros: Micros) -> u64 {
        micros.saturating_mul(self.ticks_per_micro)
    }

    /// `ticks` as whole microseconds, rounded up.
    #[inline]
    pub fn to_micros_ceil(&self, ticks: u64) -> Micros {
        ticks.div_ceil(self.ticks_per_micro)
    }
}

/// A decimal number read exactly as `mantissa / 10^scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decimal {
    pub(crate) mantissa: u64,
    pub(crate) scale: u32,
}

impl Decimal {
    pub(crate) fn parse(text: &str) -> Result<Decimal, String> {
        let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
        if whole.is_empty() && frac.is_empty() {
            return Err("expected a number".into());
        }
        if !whole
            .bytes()
            .chain(frac.bytes())
            .all(|b| b.is_ascii_digit())
        {
            return Err("expected a non-negative decimal number".into());
        }
        let frac = frac.trim_end_matches('0');
        let scale = u32::try_from(frac.len()).map_err(|_| "too many decimals".to_string())?;
        let digits = format!("{whole}{frac}");
        let mantissa = if digits.is_empty() {
            0
        } else {
            digits
                .parse::<u64>()
                .map_err(|_| "number too large".to_string())?
        };
        if scale > 12 {
            return Err("at most 12 decimals".into());
        }
        Ok(Decimal { mantissa, scale })
    }

    /// The value times `unit`, rounded up; `None` on overflow.
    pub(crate) fn times_ceil(&self, unit: u64) -> Option<u64> {
        let product = u128::from(self.mantissa) * u128::from(unit);
        u64::try_from(product.div_ceil(10u128.pow(self.scale))).ok()
    }
}

fn unit_micros(unit: &str) -> Option<u64> {
    Some(match unit.to_ascii_lowercase().as_str() {
        "us" | "µs" => 1,
        "ms" => 1_000,
        "s" | "sec" | "second" | "seconds" => MICROS_PER_SECOND,
        "m" | "min" | "minute" | "minutes" => 60 * MICROS_PER_SECOND,
        "h" | "hour" | "hours" => 3_600 * MICROS_PER_SECOND,
        "d" | "day" | "days" => 86_400 * MICROS_PER_SECOND,
        "w" | "week" | "weeks" => 7 * 86_400 * MICROS_PER_SECOND,
        _ => return None,
    })
}

/// Reads a duration such as `250ms`, `4s`, `1.5s`, `1m`, `1h`, `2d` or `100us`. A bare number
/// is seconds.
///
/// ```
/// use sluicegate::rate::parse_duration;
/// use std::time::Duration;
/// assert_eq!(parse_duration("1.5s")?, Duration::from_millis(1500));
/// assert_eq!(parse_duration("250ms")?, Duration::from_millis(250));
/// # Ok::<(), sluicegate::ConfigError>(())
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, ConfigError> {
    let syntax = |reason: &str| ConfigError::Syntax {
        what: "duration",
        text: text.to_owned(),
        reason: reason.to_owned(),
    };
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let number = Decimal::parse(number).map_err(|reason| syntax(&reason))?;
    let unit = if unit.is_empty() {
        MICROS_PER_SECOND
    } else {
        unit_micros(unit.trim()).ok_or_else(|| syntax("unknown unit (use us, ms, s, m, h, d)"))?
    };
    let micros = number.times_ceil(unit).ok_or_else(|| syntax("too long"))?;
    Ok(Duration::from_micros(micros))
}

/// The shortest text for a whole number of microseconds: `1m`, `30s`, `250ms`, `7us`.
pub fn format_duration_micros(micros: u64) -> String {
    const UNITS: [(u64, &str); 5] = [
        (86_400_000_000, "d"),
        (3_600_000_000, "h"),
        (60_000_000, "m"),
        (1_000_000, "s"),
        (1_000, "ms"),
    ];
    for (size, name) in UNITS {
        if micros >= size && micros % size == 0 {
            return format!("{}{name}", micros / size);
        }
    }
    format!("{micros}us")
}

/// The interval of `permits` per `period` µs in ticks of 1/[`MAX_TICKS_PER_MICRO`] µs, rounded
/// up, if it is not a whole number of ticks of at most that size (`None` when it is exact).
fn rounded_interval(permits: u64, period: u64) -> Option<u64> {
    if permits / gcd(permits, period) <= MAX_TICKS_PER_MICRO {
        return None;
    }
    let scaled =
        (u128::from(period) * u128::from(MAX_TICKS_PER_MICRO)).div_ceil(u128::from(permits));
    // Below `period`: the reduced denominator exceeds 1024, so `permits` does.
    Some(u64::try_from(scaled).unwrap_or(u64::MAX))
}

pub(crate) fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rates() {
        let r: Rate = "10/s".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((r.permits(), r.period_micros()), (10, 1_000_000));
        let r: Rate = "5/30s".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((r.permits(), r.period_micros()), (5, 30_000_000));
        let r: Rate = "1.5/s".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((r.permits(), r.period_micros()), (3, 2_000_000));
        let r: Rate = "100/minute".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.period_micros(), 60_000_000);
    }

    #[test]
    fn rejects_bad_rates_with_a_reason() {
        for bad in [
            "",
            "10",
            "0/s",
            "-1/s",
            "x/s",
            "10/fortnight",
            "1/0s",
            "nan/s",
        ] {
            let err = bad.parse::<Rate>().expect_err(bad);
            assert!(!err.to_string().is_empty());
        }
        let err = "0/s".parse::<Rate>().expect_err("zero");
        assert!(err.to_string().contains("rate"), "{err}");
    }

    #[test]
    fn pace_is_exact_when_the_denominator_is_small() {
        let pace = Rate::per_second(3).unwrap_or_else(|e| panic!("{e}")).pace();
        assert_eq!(
            pace,
            TickInterval {
                ticks_per_micro: 3,
                interval: 1_000_000
            }
        );
        let pace = Rate::per_second(100)
            .unwrap_or_else(|e| panic!("{e}"))
            .pace();
        assert_eq!(
            pace,
            TickInterval {
                ticks_per_micro: 1,
                interval: 10_000
            }
        );
    }

    #[test]
    fn pace_rounds_odd_denominators_up() {
        let rate = Rate::per_second(1_000_003).unwrap_or_else(|e| panic!("{e}"));
        let pace = rate.pace();
        assert!(pace.ticks_per_micro <= MAX_TICKS_PER_MICRO);
        // The rounded interval is never shorter than the exact one.
        let exact = 1_000_000f64 / 1_000_003f64;
        assert!(pace.interval as f64 / pace.ticks_per_micro as f64 >= exact);
    }

    #[test]
    fn refuses_rates_that_rounding_would_change() {
        for too_fast in [
            1_500_000_000,
            999_999_937,
            1_000_000_007,
            682_666_667,
            3_000_001,
        ] {
            let err = Rate::per_second(too_fast).expect_err("rounded by more than 0.1%");
            assert!(err.to_string().contains("rate"), "{err}");
        }
        // Exact in ticks however fast, or rounded by under 0.1%: accepted.
        for fine in [1_000_000_000, 1_024_000_000, 1_000_003, 999_999, 1_048_576] {
            assert!(Rate::per_second(fine).is_ok(), "{fine}/s");
        }
        // Every rate up to a million per second rounds by less than 1/1024.
        for permits in (1_000_000 - 500)..=1_000_000 {
            assert!(Rate::per_second(permits).is_ok(), "{permits}/s");
        }
        let err = "1500000000/s"
            .parse::<Rate>()
            .expect_err("parsed rates too");
        assert!(err.to_string().contains("rate"), "{err}");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("4s").ok(), Some(Duration::from_secs(4)));
        assert_eq!(parse_duration("1m").ok(), Some(Duration::from_secs(60)));
        assert_eq!(parse_duration("2").ok(), Some(Duration::from_secs(2)));
        assert!(parse_duration("4 parsecs").is_err());
        assert!(parse_duration("").is_err());
        assert_eq!(format_duration_micros(60_000_000), "1m");
        assert_eq!(format_duration_micros(1_500_000), "1500ms");
    }
}
