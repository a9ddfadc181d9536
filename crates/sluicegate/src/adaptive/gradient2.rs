//! Gradient2: compare the latency now with its long-term average, and shrink the limit by
//! their ratio when the short term runs slower.

use crate::adaptive::sample::{
    Controller, DEFAULT_BACKOFF, LimitBounds, LossGate, Sample, check_backoff, check_fraction,
    limit_setters, whole,
};
use crate::clock::Micros;
use crate::error::ConfigError;

/// How many requests may queue on top of the limit the gradient allows: the growth per
/// sample while latency holds (at least 1 whatever is set, or the limit could never grow).
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
    /// The headroom at `limit`, at least 1: with none the limit could never grow.
    fn at(self, limit: u32) -> f64 {
        let headroom = match self {
            QueueHeadroom::Fixed(n) => n,
            QueueHeadroom::SquareRoot { at_least } => limit.isqrt().max(at_least),
        };
        f64::from(headroom.max(1))
    }
}

/// Delay-based Gradient2, after Netflix concurrency-limits' `Gradient2Limit`, made to hold
/// up on noisy latencies, after a capacity drop and against a service that rejects quickly.
///
/// It keeps two averages of the answered latencies: `short`, an exponential average over the
/// last `short_window` answers (Netflix compares a single answer, which on a service with
/// noisy latency shrinks the limit on every slow one, until it settles at a low number
/// whatever the demand), and `long`, over `long_window` answers (the mean of the first 10,
/// then exponential). `long` follows a lower latency at once but a higher one only
/// `long_rise` times more slowly: a queue that stands for long does not become the new
/// normal (Netflix's average drifts up to meet it within `long_window` answers, and the queue
/// then stays), yet a service that has really slowed is accepted in the end. On every
/// answered sample:
/// 1. if `long / short > 2` (latency recovered after a long overload), `long` is cut by 5%
///    for the next samples, so the average does not hold the limit down while it catches up;
/// 2. if fewer than half the limit were in flight (`in_flight < limit / 2`) the limit stays:
///    the application does not use it, so its latency says nothing about it;
/// 3. `gradient = clamp(rtt_tolerance * long / short, 0.5, 1)`: 1 while the service is no
///    slower than its average allows, down to 0.5;
/// 4. `new = limit * gradient`, plus `headroom(limit)` when `gradient` is 1 (while latency
///    holds; with a queue the headroom would keep a floor under the limit, `4 / (1 - g)` at
///    a gradient `g`, that a service of fewer workers can never drain), then smoothed,
///    `limit = (1 - smoothing) * limit + smoothing * new`, and kept within bounds.
///
/// A dropped or timed-out request is overload whatever its latency (a rejection that comes
/// back in a millisecond looks fast): it multiplies the limit by `backoff_ratio`, whatever
/// the in-flight count, at most once per round trip (a loss of a request that started before
/// the latest cut does not cut again), and its latency enters neither average.
///
/// Defaults, and why: limits 1 / 20 / 1000 (Netflix's 20 / 20 / 200 put a floor under the
/// limit that a service of fewer than 20 workers cannot drain, and a ceiling on one of
/// more); `smoothing` 0.2, `rtt_tolerance` 1.5 and `long_window` 600 (Netflix's);
/// `short_window` 10 (averages out a single slow answer, yet follows a queue within a few
/// round trips); `long_rise` 10; `backoff_ratio` 0.9 (AIMD's). The headroom defaults to
/// [`QueueHeadroom::SquareRoot`] at least 4, as Gradient2's documentation describes it (the
/// same as a fixed 4, the builder's default in Netflix's current code, up to a limit of 24).
#[derive(Debug, Clone)]
pub struct Gradient2 {
    bounds: LimitBounds,
    smoothing: f64,
    tolerance: f64,
    headroom: QueueHeadroom,
    backoff: f64,
    short_rtt: ExpAverage,
    long_rtt: ExpAverage,
    estimate: f64,
    losses: LossGate,
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
    short_window: u32,
    long_rise: f64,
    backoff: f64,
}

const DEFAULT_BOUNDS: LimitBounds = LimitBounds::known(1, 20, 1000);

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

    /// The answers the short-term average spans (at least 1; 1 is Netflix's rule, the
    /// latest answer alone).
    pub fn short_window(mut self, samples: u32) -> Self {
        self.short_window = samples;
        self
    }

    /// How many times more slowly the long-term average follows a higher latency than a
    /// lower one (at least 1; 1 is Netflix's plain average).
    pub fn long_rise(mut self, factor: f64) -> Self {
        self.long_rise = factor;
        self
    }

    /// What the limit is multiplied by on a loss, in `[0.5, 1)`.
    pub fn backoff_ratio(mut self, ratio: f64) -> Self {
        self.backoff = ratio;
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
        if self.short_window == 0 {
            return Err(ConfigError::invalid(
                "short_window",
                0,
                "must be at least 1",
            ));
        }
        if !(self.long_rise.is_finite() && self.long_rise >= 1.0) {
            return Err(ConfigError::invalid(
                "long_rise",
                self.long_rise,
                "must be at least 1",
            ));
        }
        check_backoff(self.backoff)?;
        Ok(self.assemble(bounds))
    }

    fn assemble(self, bounds: LimitBounds) -> Gradient2 {
        Gradient2 {
            bounds,
            smoothing: self.smoothing,
            tolerance: self.tolerance,
            headroom: self.headroom,
            backoff: self.backoff,
            short_rtt: ExpAverage::new(self.short_window, 1.0),
            long_rtt: ExpAverage::new(self.long_window, self.long_rise),
            estimate: f64::from(bounds.initial()),
            losses: LossGate::default(),
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
            short_window: 10,
            long_rise: 10.0,
            backoff: DEFAULT_BACKOFF,
        }
    }

    /// The short-term latency average, in microseconds.
    pub fn short_rtt(&self) -> f64 {
        self.short_rtt.value
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
    fn on_sample(&mut self, now: Micros, sample: Sample) -> u32 {
        let estimate = self.estimate;
        if sample.outcome.is_loss() {
            if self.losses.cuts(now, &sample) {
                self.estimate = self.bounds.clamp_f64(estimate * self.backoff);
            }
            return whole(self.estimate);
        }
        let rtt = sample.rtt_f64();
        let short = self.short_rtt.add(rtt);
        let long = self.long_rtt.add(rtt);
        if long / short > 2.0 {
            self.long_rtt.value *= 0.95;
        }
        if !sample.used(estimate) {
            return whole(estimate);
        }
        // `long` as it was before the cut, as in Netflix's rule.
        let gradient = (self.tolerance * long / short).clamp(0.5, 1.0);
        let headroom = if gradient >= 1.0 {
            self.headroom.at(whole(estimate))
        } else {
            0.0
        };
        let next = estimate * gradient + headroom;
        let next = estimate * (1.0 - self.smoothing) + next * self.smoothing;
        self.estimate = self.bounds.clamp_f64(next);
        whole(self.estimate)
    }

    fn limit(&self) -> u32 {
        whole(self.estimate)
    }
}

/// Netflix's `ExpAvgMeasurement`: the plain mean of the first samples (10, or the window if
/// shorter), then an exponential average with weight `2 / (window + 1)`, divided by `rise`
/// for a sample above the average. A cut of `value` during the warm-up is undone by the next
/// sample (the mean is taken from the running sum), as there.
#[derive(Debug, Clone)]
struct ExpAverage {
    value: f64,
    sum: f64,
    count: u32,
    warmup: u32,
    factor: f64,
    rise: f64,
}

impl ExpAverage {
    fn new(window: u32, rise: f64) -> ExpAverage {
        ExpAverage {
            value: 0.0,
            sum: 0.0,
            count: 0,
            warmup: window.min(10),
            factor: 2.0 / (f64::from(window) + 1.0),
            rise,
        }
    }

    fn add(&mut self, sample: f64) -> f64 {
        if self.count < self.warmup {
            self.count += 1;
            self.sum += sample;
            self.value = self.sum / f64::from(self.count);
        } else {
            let factor = if sample > self.value {
                self.factor / self.rise
            } else {
                self.factor
            };
            self.value = self.value * (1.0 - factor) + sample * factor;
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
        // Netflix's averages (the latest answer against a plain long-term average) to show
        // the rule itself.
        let mut g = Gradient2::builder()
            .short_window(1)
            .long_rise(1.0)
            .build()?;
        // (rtt, in flight, estimate after, long-term average after)
        let steps: [(Micros, u32, f64, f64); 6] = [
            // long = 100, gradient = min(1.5 * 100/100, 1) = 1, headroom max(4, sqrt 20) = 4:
            // new = 20 + 4 = 24, smoothed 0.8 * 20 + 0.2 * 24 = 20.8.
            (100, 20, 20.8, 100.0),
            // 0.8 * 20.8 + 0.2 * (20.8 + 4) = 21.6.
            (100, 20, 21.6, 100.0),
            // long = 600 / 3 = 200, gradient = 1.5 * 200/400 = 0.75, no headroom with a
            // queue: new = 21.6 * 0.75 = 16.2, smoothed 17.28 + 3.24 = 20.52.
            (400, 20, 20.52, 200.0),
            // long = 1600 / 4 = 400, gradient = 1.5 * 0.4 = 0.6:
            // new = 20.52 * 0.6 = 12.312, smoothed 16.416 + 2.4624 = 18.8784.
            (1000, 20, 18.8784, 400.0),
            // long = 5600 / 5 = 1120, gradient 1.5 * 1120/4000 = 0.42, clamped to 0.5:
            // new = 9.4392, smoothed 15.10272 + 1.88784 = 16.99056.
            (4000, 20, 16.99056, 1120.0),
            // 2 * 8 < 16.99: app-limited, unchanged; long = 5700 / 6 = 950, and
            // 950 / 100 > 2 cuts it to 902.5 (undone by the next sample, still warming up).
            (100, 8, 16.99056, 902.5),
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
    fn averages_rise_slowly_and_fall_at_once() -> Result<(), ConfigError> {
        // A long window of 3 weighs each new sample 2 / 4 = 0.5 once the 3 samples of its
        // warm-up are in; a higher one 10 times less.
        let mut g = Gradient2::builder().long_window(3).build()?;
        for _ in 0..3 {
            g.on_sample(0, Sample::ok(0, 100, 0));
        }
        assert!(close(g.long_rtt(), 100.0));
        g.on_sample(0, Sample::ok(0, 180, 0));
        assert!(close(g.long_rtt(), 104.0));
        g.on_sample(0, Sample::ok(0, 60, 0));
        assert!(close(g.long_rtt(), 82.0));
        // The short-term average, over 10: the mean of the 5 answers so far, then
        // exponential with weight 2 / 11.
        assert!(close(g.short_rtt(), 540.0 / 5.0));
        let mut netflix = Gradient2::builder().long_window(3).long_rise(1.0).build()?;
        for rtt in [100, 100, 100, 180, 60] {
            netflix.on_sample(0, Sample::ok(0, rtt, 0));
        }
        assert!(close(netflix.long_rtt(), 100.0));
        Ok(())
    }

    #[test]
    fn a_noisy_answer_does_not_shrink_the_limit() -> Result<(), ConfigError> {
        // One answer 5 times the usual among steady ones, with the limit in use: Netflix's
        // rule (the latest answer alone) halves its estimate on it; over 10 answers the
        // short-term average moves by 2/11 of the outlier and the limit keeps growing.
        let run = |short_window| -> Result<u32, ConfigError> {
            let mut g = Gradient2::builder().short_window(short_window).build()?;
            for i in 0..40 {
                let rtt = if i == 30 { 5_000 } else { 1_000 };
                g.on_sample(0, Sample::ok(0, rtt, 1_000));
            }
            Ok(g.limit())
        };
        let (averaged, single) = (run(10)?, run(1)?);
        assert!(averaged > single, "{averaged} vs {single}");
        Ok(())
    }

    #[test]
    fn losses_back_off_once_per_round_trip_whatever_their_latency() -> Result<(), ConfigError> {
        let mut g = Gradient2::default();
        // A fast rejection with nothing in flight: 20 * 0.9 = 18.
        assert_eq!(g.on_sample(10, Sample::dropped(0, 1, 0)), 18);
        // Started before that cut: already answered by it.
        assert_eq!(g.on_sample(20, Sample::dropped(5, 1, 0)), 18);
        // Started at the cut or after: 18 * 0.9 = 16.2.
        assert_eq!(g.on_sample(30, Sample::dropped(10, 1, 0)), 16);
        assert_eq!(g.on_sample(40, Sample::timeout(30, 10, 0)), 14);
        // No loss's latency is read.
        assert_eq!((g.long_rtt(), g.short_rtt()), (0.0, 0.0));
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
        // Never none: the limit could not grow.
        assert_eq!(QueueHeadroom::Fixed(0).at(9), 1.0);
        Ok(())
    }

    #[test]
    fn rejects_bad_parameters() {
        let bad = [
            Gradient2::builder().smoothing(0.0).build(),
            Gradient2::builder().rtt_tolerance(0.9).build(),
            Gradient2::builder().rtt_tolerance(f64::INFINITY).build(),
            Gradient2::builder().long_window(0).build(),
            Gradient2::builder().short_window(0).build(),
            Gradient2::builder().long_rise(0.5).build(),
            Gradient2::builder().backoff_ratio(1.0).build(),
            Gradient2::builder().min_limit(30).build(),
        ];
        for result in bad {
            assert!(result.is_err(), "{result:?}");
        }
    }
}
