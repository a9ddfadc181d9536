//! Gradient2: compare the latency now with its long-term average, and shrink the limit by
//! their ratio when the short term runs slower.

use crate::adaptive::sample::{
    Controller, LimitBounds, Sample, check_fraction, limit_setters, whole,
};
use crate::clock::Micros;
use crate::error::ConfigError;

/// How many requests may queue on top of the limit the gradient allows: the growth per
/// sample while latency holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueHeadroom {
    /// Always this many.
    Fixed(u32),
    /// `floor(sqrt(limit))`, but at least `at_least`: grows with the limit, more slowly than it.
    SquareRoot {
        /// The least headroom, for small limits.
        at_least: u32,
    },
}

impl QueueHeadroom {
    fn at(self, limit: u32) -> f64 {
        match self {
            QueueHeadroom::Fixed(n) => f64::from(n),
            QueueHeadroom::SquareRoot { at_least } => f64::from(limit.isqrt().max(at_least)),
        }
    }
}

/// Delay-based Gradient2, after Netflix concurrency-limits' `Gradient2Limit`.
///
/// It keeps the long-term latency `long` as an exponential average of every sample's latency
/// (the mean of the first 10, then a weight of `2 / (long_window + 1)` per sample) and compares
/// the sample's own latency `short` with it. On every sample:
/// 1. if `long / short > 2` (latency recovered after a long overload), `long` is cut by 5%
///    for the next samples, so the average does not hold the limit down while it catches up;
/// 2. if fewer than half the limit were in flight (`in_flight < limit / 2`) the limit stays:
///    the application does not use it, so its latency says nothing about it;
/// 3. `gradient = clamp(rtt_tolerance * long / short, 0.5, 1)`: 1 while the service is no
///    slower than its average allows, down to 0.5 (never more than halving, so one outlier
///    cannot shed half the traffic);
/// 4. `new = limit * gradient + headroom(limit)`, then smoothed,
///    `limit = (1 - smoothing) * limit + smoothing * new`, and kept within bounds.
///
/// Drops and timeouts play no special part: they count through their latency, as in Netflix's
/// rule.
///
/// Defaults (Netflix's): limits 20 / 20 / 200, `smoothing` 0.2, `rtt_tolerance` 1.5,
/// `long_window` 600 samples. The headroom defaults to
/// [`QueueHeadroom::SquareRoot`] at least 4, as Gradient2's documentation describes it (the
/// same as a fixed 4, the builder's default in Netflix's current code, up to a limit of 24).
#[derive(Debug, Clone)]
pub struct Gradient2 {
    bounds: LimitBounds,
    smoothing: f64,
    tolerance: f64,
    headroom: QueueHeadroom,
    long_rtt: ExpAverage,
    estimate: f64,
}

/// Builds a [`Gradient2`]; every parameter starts at its default.
#[derive(Debug, Clone)]
pub struct Gradient2Builder {
    min: u32,
    initial: u32,
    max: u32,
    smoothing: f64,
    tolerance: f64,
    headroom: QueueHeadroom,
    long_window: u32,
}

const DEFAULT_BOUNDS: LimitBounds = LimitBounds::known(20, 20, 200);

impl Gradient2Builder {
    limit_setters!();

    /// How much of each new estimate is taken, in `(0, 1]`.
    pub fn smoothing(mut self, smoothing: f64) -> Self {
        self.smoothing = smoothing;
        self
    }

    /// How much slower than the long-term average a sample may be before the limit shrinks
    /// (at least 1: 2.0 lets latency double).
    pub fn rtt_tolerance(mut self, tolerance: f64) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// The growth allowed on top of the gradient.
    pub fn queue_headroom(mut self, headroom: QueueHeadroom) -> Self {
        self.headroom = headroom;
        self
    }

    /// The samples the long-term average spans (at least 1).
    pub fn long_window(mut self, samples: u32) -> Self {
        self.long_window = samples;
        self
    }

    /// The controller, or what is wrong with the parameters.
    pub fn build(self) -> Result<Gradient2, ConfigError> {
        let bounds = LimitBounds::new(self.min, self.initial, self.max)?;
        check_fraction("smoothing", self.smoothing, 0.0, false, 1.0)?;
        if !(self.tolerance.is_finite() && self.tolerance >= 1.0) {
            return Err(ConfigError::invalid(
                "rtt_tolerance",
                self.tolerance,
                "must be at least 1",
            ));
        }
        if self.long_window == 0 {
            return Err(ConfigError::invalid("long_window", 0, "must be at least 1"));
        }
        Ok(self.assemble(bounds))
    }

    fn assemble(self, bounds: LimitBounds) -> Gradient2 {
        Gradient2 {
            bounds,
            smoothing: self.smoothing,
            tolerance: self.tolerance,
            headroom: self.headroom,
            long_rtt: ExpAverage::new(self.long_window),
            estimate: f64::from(bounds.initial()),
        }
    }
}

impl Gradient2 {
    /// A builder starting from the defaults.
    pub fn builder() -> Gradient2Builder {
        Gradient2Builder {
            min: DEFAULT_BOUNDS.min(),
            initial: DEFAULT_BOUNDS.initial(),
            max: DEFAULT_BOUNDS.max(),
            smoothing: 0.2,
            tolerance: 1.5,
            headroom: QueueHeadroom::SquareRoot { at_least: 4 },
            long_window: 600,
        }
    }

    /// The long-term latency average, in microseconds.
    pub fn long_rtt(&self) -> f64 {
        self.long_rtt.value
    }

    /// The bounds the limit stays within.
    pub fn bounds(&self) -> LimitBounds {
        self.bounds
    }
}

impl Default for Gradient2 {
    fn default() -> Self {
        Gradient2::builder().assemble(DEFAULT_BOUNDS)
    }
}

impl Controller for Gradient2 {
    fn on_sample(&mut self, _now: Micros, sample: Sample) -> u32 {
        let estimate = self.estimate;
        let headroom = self.headroom.at(whole(estimate));
        let short = sample.rtt_f64();
        let long = self.long_rtt.add(short);
        if long / short > 2.0 {
            self.long_rtt.value *= 0.95;
        }
        if f64::from(sample.in_flight) < estimate / 2.0 {
            return whole(estimate);
        }
        // `long` as it was before the cut, as in Netflix's rule.
        let gradient = (self.tolerance * long / short).clamp(0.5, 1.0);
        let next = estimate * gradient + headroom;
        let next = estimate * (1.0 - self.smoothing) + next * self.smoothing;
        self.estimate = self.bounds.clamp_f64(next);
        whole(self.estimate)
    }

    fn limit(&self) -> u32 {
        whole(self.estimate)
    }
}

/// Netflix's `ExpAvgMeasurement`: the plain mean of the first `WARMUP` samples, then an
/// exponential average with weight `2 / (window + 1)`. A cut of `value` during the warm-up is
/// undone by the next sample (the mean is taken from the running sum), as there.
#[derive(Debug, Clone)]
struct ExpAverage {
    value: f64,
    sum: f64,
    count: u32,
    factor: f64,
}

impl ExpAverage {
    const WARMUP: u32 = 10;

    fn new(window: u32) -> ExpAverage {
        ExpAverage {
            value: 0.0,
            sum: 0.0,
            count: 0,
            factor: 2.0 / (f64::from(window) + 1.0),
        }
    }

    fn add(&mut self, sample: f64) -> f64 {
        if self.count < Self::WARMUP {
            self.count += 1;
            self.sum += sample;
            self.value = self.sum / f64::from(self.count);
        } else {
            self.value = self.value * (1.0 - self.factor) + sample * self.factor;
        }
        self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn follows_the_rule_step_by_step() -> Result<(), ConfigError> {
        // Netflix's defaults, but a minimum of 1 so that decreases show.
        let mut g = Gradient2::builder().min_limit(1).build()?;
        // (rtt, in flight, estimate after, long-term average after)
        let steps: [(Micros, u32, f64, f64); 6] = [
            // long = 100, gradient = min(1.5 * 100/100, 1) = 1, headroom max(4, sqrt 20) = 4:
            // new = 20 + 4 = 24, smoothed 0.8 * 20 + 0.2 * 24 = 20.8.
            (100, 20, 20.8, 100.0),
            // 0.8 * 20.8 + 0.2 * (20.8 + 4) = 21.6.
            (100, 20, 21.6, 100.0),
            // long = 600 / 3 = 200, gradient = 1.5 * 200/400 = 0.75:
            // new = 21.6 * 0.75 + 4 = 20.2, smoothed 0.8 * 21.6 + 0.2 * 20.2 = 21.32.
            (400, 20, 21.32, 200.0),
            // long = 1600 / 4 = 400, gradient = 1.5 * 0.4 = 0.6:
            // new = 21.32 * 0.6 + 4 = 16.792, smoothed 17.056 + 3.3584 = 20.4144.
            (1000, 20, 20.4144, 400.0),
            // long = 5600 / 5 = 1120, gradient 1.5 * 1120/4000 = 0.42, clamped to 0.5:
            // new = 20.4144 * 0.5 + 4 = 14.2072, smoothed 16.33152 + 2.84144 = 19.17296.
            (4000, 20, 19.17296, 1120.0),
            // 2 * 9 < 19.17: app-limited, unchanged; long = 5700 / 6 = 950, and
            // 950 / 100 > 2 cuts it to 902.5 (undone by the next sample, still warming up).
            (100, 9, 19.17296, 902.5),
        ];
        for (i, (rtt, in_flight, estimate, long)) in steps.into_iter().enumerate() {
            let limit = g.on_sample(0, Sample::ok(0, rtt, in_flight));
            assert!(close(g.estimate, estimate), "step {i}: {}", g.estimate);
            assert_eq!(limit, estimate as u32, "step {i}");
            assert!(close(g.long_rtt(), long), "step {i}: {}", g.long_rtt());
        }
        // Still warming up: the mean of the sum, 6700 / 7, as if there had been no cut.
        g.on_sample(0, Sample::ok(0, 1000, 0));
        assert!(close(g.long_rtt(), 6700.0 / 7.0));
        Ok(())
    }

    #[test]
    fn long_average_becomes_exponential_after_ten_samples() -> Result<(), ConfigError> {
        // A window of 3 weighs each new sample 2 / 4 = 0.5.
        let mut g = Gradient2::builder().long_window(3).build()?;
        for _ in 0..10 {
            g.on_sample(0, Sample::ok(0, 100, 0));
        }
        assert!(close(g.long_rtt(), 100.0));
        g.on_sample(0, Sample::ok(0, 180, 0));
        assert!(close(g.long_rtt(), 140.0));
        g.on_sample(0, Sample::ok(0, 60, 0));
        assert!(close(g.long_rtt(), 100.0));
        Ok(())
    }

    #[test]
    fn headroom_grows_with_the_square_root() -> Result<(), ConfigError> {
        // Smoothing 1: the limit is the new estimate itself, limit * 1 + headroom.
        let mut g = Gradient2::builder()
            .smoothing(1.0)
            .initial_limit(100)
            .max_limit(1000)
            .build()?;
        assert_eq!(g.on_sample(0, Sample::ok(0, 100, 100)), 110); // + sqrt(100)
        assert_eq!(g.on_sample(0, Sample::ok(0, 100, 100)), 120); // + floor(sqrt(110))
        let mut fixed = Gradient2::builder()
            .smoothing(1.0)
            .queue_headroom(QueueHeadroom::Fixed(4))
            .initial_limit(100)
            .max_limit(1000)
            .build()?;
        assert_eq!(fixed.on_sample(0, Sample::ok(0, 100, 100)), 104);
        assert_eq!(QueueHeadroom::SquareRoot { at_least: 4 }.at(9), 4.0);
        Ok(())
    }

    #[test]
    fn drops_count_only_through_their_latency() -> Result<(), ConfigError> {
        let mut a = Gradient2::default();
        let mut b = Gradient2::default();
        for rtt in [100, 100, 300, 50] {
            assert_eq!(
                a.on_sample(0, Sample::ok(0, rtt, 20)),
                b.on_sample(0, Sample::dropped(0, rtt, 20))
            );
        }
        Ok(())
    }

    #[test]
    fn rejects_bad_parameters() {
        let bad = [
            Gradient2::builder().smoothing(0.0).build(),
            Gradient2::builder().rtt_tolerance(0.9).build(),
            Gradient2::builder().rtt_tolerance(f64::INFINITY).build(),
            Gradient2::builder().long_window(0).build(),
            Gradient2::builder().initial_limit(10).build(),
        ];
        for result in bad {
            assert!(result.is_err(), "{result:?}");
        }
    }
}
